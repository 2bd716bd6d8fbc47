/*
 * test_codec_main.c - the codec's check runner: one suite per source file of
 * codec/src, run in fork mode so a crash fails one test, not the runner.
 *
 * Usage: test_codec [--suite NAME]. Without --suite every suite runs except
 * "hash_live", which shells out to xxhsum and is registered as its own ctest
 * (codec_xxhsum_live) when xxhsum is installed.
 *
 * Also home of the allocation counter (codec_test.h): the --wrap'ed malloc,
 * calloc and realloc count while counting is on and forward to the real ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--suite") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--suite NAME]\n", argv[0]);
            return 2;
        }
    }
    SRunner *sr = srunner_create(qn_test_error_suite());
    srunner_add_suite(sr, qn_test_envelope_suite());
    srunner_add_suite(sr, qn_test_frame_suite());
    srunner_add_suite(sr, qn_test_hash_suite());
    srunner_add_suite(sr, qn_test_segment_suite());
    srunner_add_suite(sr, qn_test_uuid_suite());
    if (only && strcmp(only, "hash_live") == 0)
        srunner_add_suite(sr, qn_test_hash_live_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run(sr, only, NULL, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    srunner_free(sr);
    if (run == 0) {
        fprintf(stderr, "no tests ran (unknown suite?)\n");
        return 1;
    }
    return failed ? 1 : 0;
}
