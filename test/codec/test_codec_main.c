/*
 * test_codec_main.c - the codec's suites (one per source file of codec/src) for
 * the shared runner main (test/support/check_main.c: usage, fork mode, exit
 * status). "hash_live" shells out to xxhsum and runs only when named: it is
 * its own ctest (codec_xxhsum_live) when xxhsum is installed.
 *
 * Also home of the allocation counter (codec_test.h): the --wrap'ed malloc,
 * calloc and realloc count while counting is on and forward to the real ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "codec_test.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static bool counting;
static struct qn_alloc_stats stats;

static void note(size_t n)
{
    if (counting) {
        stats.calls++;
        if (n > stats.largest)
            stats.largest = n;
    }
}

void *__wrap_malloc(size_t n)
{
    note(n);
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    note(size && n > SIZE_MAX / size ? SIZE_MAX : n * size);
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    note(n);
    return __real_realloc(p, n);
}

void qn_test_alloc_start(void)
{
    memset(&stats, 0, sizeof(stats));
    counting = true;
}

struct qn_alloc_stats qn_test_alloc_stop(void)
{
    counting = false;
    return stats;
}

static const struct qn_check_suite suites[] = {
    {"b64", qn_test_b64_suite, false},
    {"error", qn_test_error_suite, false},
    {"envelope", qn_test_envelope_suite, false},
    {"frame", qn_test_frame_suite, false},
    {"hash", qn_test_hash_suite, false},
    {"segment", qn_test_segment_suite, false},
    {"uuid", qn_test_uuid_suite, false},
    /* shells out to xxhsum: its own ctest (codec_xxhsum_live) when installed */
    {"hash_live", qn_test_hash_live_suite, true},
};

const struct qn_check_runner qn_check_runner = {"test_codec", suites, QN_CHECK_NSUITES(suites),
                                                NULL};
