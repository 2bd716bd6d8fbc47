/*
 * engine_test.h - PRIVATE to test/broker: the suites of the test_engine runner
 * (test/broker/engine/: hring.c, dedup.c, fusion.c, waiters.c, pop_gate.c) and
 * the allocation tracker they share.
 *
 * The runner is linked with --wrap=malloc,calloc,realloc,free, so every
 * allocation our code makes (the tests and the broker objects linked in) passes
 * through test_engine_main.c. It is also linked with --wrap for the store calls
 * and clocks the engines use; each suite that drives an engine fakes the calls
 * that engine makes (test_dedup.c, test_fusion.c). Between qn_dd_alloc_start() and
 * qn_dd_alloc_stop() it counts calls, remembers the largest single request and keeps the bytes
 * still live (requested sizes, not malloc's rounding). qn_dd_alloc_fail_after(n)
 * makes the (n+1)-th tracked allocation from now fail (return NULL) once.
 */
#ifndef QN_ENGINE_TEST_H
#define QN_ENGINE_TEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "engine/offload.h"

Suite *qn_test_hring_suite(void);
Suite *qn_test_dedup_suite(void);
Suite *qn_test_fusion_suite(void);
Suite *qn_test_waiters_suite(void);
Suite *qn_test_pop_gate_suite(void);
Suite *qn_test_inbox_suite(void);
Suite *qn_test_offload_suite(void);
Suite *qn_test_decode_suite(void);

/* test_offload.c: an offload job whose work holds its pool thread until the
 * test opens the gate (work: started, then waits for open; done counts). */
struct qn_test_gate {
    struct qn_offload_job job;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, open;
    int done_calls;
};
void qn_test_gate_init(struct qn_test_gate *g);
void qn_test_gate_wait_started(struct qn_test_gate *g);
void qn_test_gate_open(struct qn_test_gate *g);
void qn_test_gate_destroy(struct qn_test_gate *g);
/* A loop with libevent's thread support (offload threads wake it) and one 20 s
 * timer that fails the case, so that it blocks until a port wakes it instead of
 * returning at once; free *keep, then the base. */
struct event;
struct event_base;
struct event_base *qn_test_thread_loop(struct event **keep);
Suite *qn_test_conn_budget_suite(void);
Suite *qn_test_cfusion_suite(void);
Suite *qn_test_cbundle_suite(void);

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

/* The monotonic clock the engines see (the runner wraps qn_store_now_ms in
 * test_dedup.c to return it); suites set it to move time. */
extern int64_t qt_engine_mono_ms;

/* A deterministic 16-byte "hash" for (seed, i): uniform like xxh3 output. */
void qn_dd_hash(uint64_t seed, uint64_t i, uint8_t out[16]);

#endif
