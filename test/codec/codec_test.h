/*
 * codec_test.h - PRIVATE to test/codec: the suite constructors the runner
 * registers (one per codec source file) and the allocation counter.
 */
#ifndef QN_CODEC_TEST_H
#define QN_CODEC_TEST_H

#include <stdbool.h>
#include <stddef.h>

#include <check.h>

Suite *qn_test_b64_suite(void);
Suite *qn_test_envelope_suite(void);
Suite *qn_test_error_suite(void);
Suite *qn_test_frame_suite(void);
Suite *qn_test_hash_suite(void);
Suite *qn_test_hash_live_suite(void);
Suite *qn_test_segment_suite(void);
Suite *qn_test_uuid_suite(void);

/*
 * Allocation counter. The runner is linked with --wrap=malloc,calloc,realloc,
 * so every allocation made from our code (the test and libqn_codec) passes
 * through test_codec_main.c. Between qn_test_alloc_start() and
 * qn_test_alloc_stop() it counts calls and remembers the largest request.
 * Allocations made inside shared libraries (zstd's own) are not seen.
 */
struct qn_alloc_stats {
    size_t calls;   /* malloc + calloc + realloc calls */
    size_t largest; /* largest single request in bytes */
};
void qn_test_alloc_start(void);
struct qn_alloc_stats qn_test_alloc_stop(void);

#endif
