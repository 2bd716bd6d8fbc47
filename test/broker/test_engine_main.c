/*
 * test_engine_main.c - the engines' unit suites (test/broker/engine/) for the
 * shared runner main (test/support/check_main.c): hring (the per-partition
 * block ring), dedup (the cache manager), fusion (push batching), waiters,
 * pop_gate and conn_budget, driven through fake store calls, no database.
 *
 * Also the allocation tracker of engine_test.h: linked with
 * --wrap=malloc,calloc,realloc,free (test/broker/CMakeLists.txt).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine_test.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

/* ---------------------------------------------------------------- tracker */

/* Live tracked allocations: open addressing, pointer -> requested size.
 * TOMB marks a deleted slot. Far more slots than the tests ever keep live. */
#define TRACK_SLOTS (1u << 18)
#define TOMB ((void *)1)

static struct {
    void *p;
    size_t n;
} table[TRACK_SLOTS];
static bool tracking;
static long fail_countdown = -1;
static struct qn_dd_alloc_stats stats;

static size_t slot_of(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)(x & (TRACK_SLOTS - 1));
}

static void track_add(void *p, size_t n)
{
    size_t i = slot_of(p);
    while (table[i].p != NULL && table[i].p != TOMB)
        i = (i + 1) & (TRACK_SLOTS - 1);
    table[i].p = p;
    table[i].n = n;
    stats.live += n;
    if (stats.live > stats.peak_live)
        stats.peak_live = stats.live;
}

/* Forgets p when tracked (whether or not tracking is still on). */
static void track_del(void *p)
{
    if (p == NULL)
        return;
    size_t i = slot_of(p);
    while (table[i].p != NULL) {
        if (table[i].p == p) {
            table[i].p = TOMB;
            stats.live -= table[i].n;
            return;
        }
        i = (i + 1) & (TRACK_SLOTS - 1);
    }
}

/* True when this request must fail (failure injection). */
static bool note(size_t n)
{
    if (!tracking)
        return false;
    if (fail_countdown == 0) {
        fail_countdown = -1;
        return true;
    }
    if (fail_countdown > 0)
        fail_countdown--;
    stats.calls++;
    if (n > stats.largest)
        stats.largest = n;
    return false;
}

void *__wrap_malloc(size_t n)
{
    if (note(n))
        return NULL;
    void *p = __real_malloc(n);
    if (p != NULL && tracking)
        track_add(p, n);
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    size_t total = size && n > SIZE_MAX / size ? SIZE_MAX : n * size;
    if (note(total))
        return NULL;
    void *p = __real_calloc(n, size);
    if (p != NULL && tracking)
        track_add(p, total);
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    if (note(n))
        return NULL;
    void *q = __real_realloc(p, n);
    if (q != NULL) {
        track_del(p);
        if (tracking)
            track_add(q, n);
    }
    return q;
}

void __wrap_free(void *p)
{
    track_del(p);
    __real_free(p);
}

void qn_dd_alloc_start(void)
{
    memset(table, 0, sizeof table);
    memset(&stats, 0, sizeof stats);
    fail_countdown = -1;
    tracking = true;
}

struct qn_dd_alloc_stats qn_dd_alloc_now(void)
{
    return stats;
}

struct qn_dd_alloc_stats qn_dd_alloc_stop(void)
{
    tracking = false;
    fail_countdown = -1;
    return stats;
}

void qn_dd_alloc_fail_after(long n)
{
    fail_countdown = n;
}

/* ---------------------------------------------------------------- hashes */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void qn_dd_hash(uint64_t seed, uint64_t i, uint8_t out[16])
{
    uint64_t a = mix64(seed * 0x9e3779b97f4a7c15ULL + i * 2 + 1);
    uint64_t b = mix64(a ^ (i + 0x632be59bd9b4e019ULL));
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

/* ---------------------------------------------------------------- runner */

static const struct qn_check_suite suites[] = {
    {"hring", qn_test_hring_suite, false},       {"dedup", qn_test_dedup_suite, false},
    {"fusion", qn_test_fusion_suite, false},     {"waiters", qn_test_waiters_suite, false},
    {"pop_gate", qn_test_pop_gate_suite, false}, {"conn_budget", qn_test_conn_budget_suite, false},
    {"cfusion", qn_test_cfusion_suite, false},   {"inbox", qn_test_inbox_suite, false},
    {"cbundle", qn_test_cbundle_suite, false},   {"offload", qn_test_offload_suite, false},
    {"decode", qn_test_decode_suite, false},
};

const struct qn_check_runner qn_check_runner = {"test_engine", suites, QN_CHECK_NSUITES(suites),
                                                NULL};
