/*
 * dedup_test.h - PRIVATE to test/broker: the suites of the test_dedup runner
 * (hring.c and dedup.c) and the allocation tracker they share.
 *
 * The runner is linked with --wrap=malloc,calloc,realloc,free, so every
 * allocation our code makes (the tests and the broker objects linked in) passes
 * through test_dedup_main.c. Between qn_dd_alloc_start() and qn_dd_alloc_stop()
 * it counts calls, remembers the largest single request and keeps the bytes
 * still live (requested sizes, not malloc's rounding). qn_dd_alloc_fail_after(n)
 * makes the (n+1)-th tracked allocation from now fail (return NULL) once.
 */
#ifndef QN_DEDUP_TEST_H
#define QN_DEDUP_TEST_H

#include <stddef.h>
#include <stdint.h>

#include <check.h>

Suite *qn_test_hring_suite(void);
Suite *qn_test_dedup_suite(void);

struct qn_dd_alloc_stats {
    size_t calls;     /* malloc + calloc + realloc calls */
    size_t largest;   /* largest single request in bytes */
    size_t live;      /* bytes allocated while tracking and not yet freed */
    size_t peak_live; /* highest value of live */
};
void qn_dd_alloc_start(void);
struct qn_dd_alloc_stats qn_dd_alloc_now(void);
struct qn_dd_alloc_stats qn_dd_alloc_stop(void);
void qn_dd_alloc_fail_after(long n);

/* A deterministic 16-byte "hash" for (seed, i): uniform like xxh3 output. */
void qn_dd_hash(uint64_t seed, uint64_t i, uint8_t out[16]);

#endif
