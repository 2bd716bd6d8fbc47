/*
 * test_hring.c - suite "hring": broker/src/engine/hring.c, one partition's ring of
 * immutable sorted 4096-hash blocks, its bloom generations and its expiry.
 *
 * What the dedup seed requires of it, one test (or a few) each:
 *   - sealing at exactly QN_HRING_BLOCK: the hot buffer hands its array to the
 *     block (no copy, no allocation of a block's size), the block is sorted;
 *   - membership across blocks and the hot buffer, never a false "present";
 *   - expiry by whole blocks only (one in-window hash keeps its block);
 *   - the superset property under random appends and expiries;
 *   - a slow partition (hot buffer never fills) forgets and frees;
 *   - no allocation larger than one block (64 KiB) while 1M hashes are
 *     appended, and at most 24 bytes per hash at 1M, accounted and real;
 *   - out of memory leaves a ring that is still safe to use.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test.h"
#include "engine/hring.h"
#include "queen/error.h"

#define H 16u
#define KIB 1024u

static uint8_t *hashes_new(uint64_t seed, size_t from, size_t n)
{
    uint8_t *v = malloc(n * H);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < n; i++)
        qn_dd_hash(seed, from + i, v + i * H);
    return v;
}

static void append_range(struct qn_hring *r, uint64_t seed, size_t from, size_t n, int64_t base,
                         int64_t created_ms)
{
    uint8_t *v = hashes_new(seed, from, n);
    ck_assert_int_eq(qn_hring_append(r, v, n, base, created_ms), QN_OK);
    free(v);
}

static bool has(const struct qn_hring *r, uint64_t seed, size_t i)
{
    uint8_t h[H];
    qn_dd_hash(seed, i, h);
    return qn_hring_contains(r, h);
}

static bool sorted(const uint8_t *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (memcmp(v + (i - 1) * H, v + i * H, H) > 0)
            return false;
    return true;
}

/* ---------------------------------------------------------------- sealing */

START_TEST(seal_at_block_size_hands_over_the_hot_array)
{
    struct qn_hring r;
    qn_hring_init(&r);
    append_range(&r, 1, 0, QN_HRING_BLOCK - 1, 0, 1000);
    ck_assert_uint_eq(r.nblocks, 0);
    ck_assert_uint_eq(r.nhot, QN_HRING_BLOCK - 1);
    ck_assert_uint_eq(r.hot_cap, QN_HRING_BLOCK);
    ck_assert(!sorted(r.hot, r.nhot)); /* arrival order, random hashes */
    uint8_t *hot = r.hot;

    /* The 4096th hash seals: no array of a block's size is allocated (the hot
     * array becomes the block) and nothing is reallocated. */
    uint8_t last[H];
    qn_dd_hash(1, QN_HRING_BLOCK - 1, last);
    qn_dd_alloc_start();
    ck_assert_int_eq(qn_hring_append(&r, last, 1, QN_HRING_BLOCK - 1, 1000), QN_OK);
    struct qn_dd_alloc_stats st = qn_dd_alloc_stop();
    ck_assert_uint_lt(st.largest, QN_HRING_BLOCK * H);

    ck_assert_uint_eq(r.nblocks, 1);
    ck_assert_uint_eq(r.nhot, 0);
    ck_assert_ptr_null(r.hot);
    ck_assert_uint_eq(r.hashes, QN_HRING_BLOCK);
    /* Still allocated (ASan would object otherwise) and now sorted in place. */
    ck_assert(sorted(hot, QN_HRING_BLOCK));
    for (size_t i = 0; i < QN_HRING_BLOCK; i++)
        ck_assert(has(&r, 1, i));
    qn_hring_clear(&r);
}
END_TEST

START_TEST(seal_sorts_any_arrival_order)
{
    /* the seal's sort, on orders a quicksort can stumble on: already sorted,
     * reversed, all equal, few distinct values, organ pipe */
    uint8_t *v = malloc(QN_HRING_BLOCK * H);
    ck_assert_ptr_nonnull(v);
    for (int shape = 0; shape < 5; shape++) {
        for (size_t i = 0; i < QN_HRING_BLOCK; i++) {
            size_t k = shape == 0   ? i
                       : shape == 1 ? QN_HRING_BLOCK - i
                       : shape == 2 ? 7
                       : shape == 3 ? i % 3
                                    : (i < QN_HRING_BLOCK / 2 ? i : QN_HRING_BLOCK - i);
            memset(v + i * H, 0, H);
            for (int b = 0; b < 8; b++) /* big-endian index: memcmp order = k order */
                v[i * H + 7 - b] = (uint8_t)(k >> (8 * b));
            v[i * H + 15] = (uint8_t)(shape == 2 ? i : 0); /* equal prefixes, distinct tails */
        }
        struct qn_hring r;
        qn_hring_init(&r);
        ck_assert_int_eq(qn_hring_append(&r, v, QN_HRING_BLOCK - 1, 0, 1), QN_OK);
        uint8_t *hot = r.hot;
        ck_assert_int_eq(
            qn_hring_append(&r, v + (QN_HRING_BLOCK - 1) * H, 1, QN_HRING_BLOCK - 1, 1), QN_OK);
        ck_assert_uint_eq(r.nblocks, 1);
        ck_assert_msg(sorted(hot, QN_HRING_BLOCK), "shape %d not sorted", shape);
        for (size_t i = 0; i < QN_HRING_BLOCK; i++)
            ck_assert_msg(qn_hring_contains(&r, v + i * H), "shape %d: %zu missing", shape, i);
        qn_hring_clear(&r);
    }
    free(v);
}
END_TEST

START_TEST(seal_inside_one_large_append)
{
    /* One append spanning several blocks seals each block as it fills. */
    struct qn_hring r;
    qn_hring_init(&r);
    size_t n = 3 * QN_HRING_BLOCK + 17;
    uint8_t *v = hashes_new(2, 0, n);
    qn_dd_alloc_start();
    ck_assert_int_eq(qn_hring_append(&r, v, n, 100, 5), QN_OK);
    struct qn_dd_alloc_stats st = qn_dd_alloc_stop();
    free(v);
    ck_assert_uint_le(st.largest, 64 * KIB);
    ck_assert_uint_eq(r.nblocks, 3);
    ck_assert_uint_eq(r.nhot, 17);
    ck_assert_uint_eq(r.hashes, n);
    ck_assert_int_eq(r.hot_max_offset, 100 + (int64_t)n - 1);
    qn_hring_clear(&r);
}
END_TEST

/* ---------------------------------------------------------------- membership */

START_TEST(membership_across_blocks_and_hot)
{
    struct qn_hring r;
    qn_hring_init(&r);
    /* segments of 100: 5 blocks and a partial hot buffer */
    size_t n = 5 * QN_HRING_BLOCK + 1234;
    for (size_t i = 0; i < n; i += 100) {
        size_t k = n - i < 100 ? n - i : 100;
        append_range(&r, 3, i, k, (int64_t)i, (int64_t)i);
    }
    ck_assert_uint_eq(r.nblocks, 5);
    ck_assert_uint_eq(r.nhot, 1234);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(has(&r, 3, i), "hash %zu missing", i);
    /* Never a false "present": blooms may hit, binary search decides. */
    for (size_t i = 0; i < 200000; i++)
        ck_assert_msg(!has(&r, 4, i), "foreign hash %zu reported present", i);
    qn_hring_clear(&r);
    ck_assert_uint_eq(r.hashes, 0);
    ck_assert_uint_eq(r.bytes, 0);
    ck_assert(!has(&r, 3, 0));
}
END_TEST

START_TEST(same_hash_in_two_blocks_survives_the_first_expiry)
{
    /* No refcount: a hash in blocks 0 and 2 stays known until block 2 goes. */
    struct qn_hring r;
    qn_hring_init(&r);
    uint8_t twice[H];
    qn_dd_hash(99, 0, twice);
    append_range(&r, 5, 0, QN_HRING_BLOCK - 1, 0, 10);
    ck_assert_int_eq(qn_hring_append(&r, twice, 1, QN_HRING_BLOCK - 1, 10), QN_OK);
    append_range(&r, 5, QN_HRING_BLOCK, QN_HRING_BLOCK, QN_HRING_BLOCK, 20);
    ck_assert_int_eq(qn_hring_append(&r, twice, 1, 2 * QN_HRING_BLOCK, 30), QN_OK);
    append_range(&r, 5, 2 * QN_HRING_BLOCK, QN_HRING_BLOCK - 1, 2 * QN_HRING_BLOCK + 1, 30);
    ck_assert_uint_eq(r.nblocks, 3);
    ck_assert(qn_hring_contains(&r, twice));
    ck_assert_int_eq(qn_hring_expire(&r, 25), 2 * (int64_t)QN_HRING_BLOCK - 1);
    ck_assert_uint_eq(r.nblocks, 1);
    ck_assert(qn_hring_contains(&r, twice));
    ck_assert_int_eq(qn_hring_expire(&r, 31), 3 * (int64_t)QN_HRING_BLOCK - 1);
    ck_assert(!qn_hring_contains(&r, twice));
    qn_hring_clear(&r);
}
END_TEST

/* ---------------------------------------------------------------- expiry */

START_TEST(expiry_is_block_granular)
{
    struct qn_hring r;
    qn_hring_init(&r);
    /* block 0: 4095 hashes at t=1000 and one at t=5000; block 1 all at t=6000 */
    append_range(&r, 6, 0, QN_HRING_BLOCK - 1, 0, 1000);
    append_range(&r, 6, QN_HRING_BLOCK - 1, 1, QN_HRING_BLOCK - 1, 5000);
    append_range(&r, 6, QN_HRING_BLOCK, QN_HRING_BLOCK, QN_HRING_BLOCK, 6000);
    append_range(&r, 6, 2 * QN_HRING_BLOCK, 10, 2 * QN_HRING_BLOCK, 7000);
    ck_assert_uint_eq(r.nblocks, 2);

    ck_assert_int_eq(qn_hring_expire(&r, 1000), -1); /* nothing strictly older */
    ck_assert_int_eq(qn_hring_expire(&r, 5000), -1); /* one hash keeps block 0 */
    ck_assert_uint_eq(r.nblocks, 2);
    for (size_t i = 0; i < QN_HRING_BLOCK; i++)
        ck_assert(has(&r, 6, i)); /* even the 4095 stale ones */

    size_t before = r.bytes;
    ck_assert_int_eq(qn_hring_expire(&r, 5001), (int64_t)QN_HRING_BLOCK - 1);
    ck_assert_uint_eq(r.nblocks, 1);
    ck_assert_uint_eq(r.hashes, QN_HRING_BLOCK + 10);
    ck_assert_uint_le(r.bytes, before - QN_HRING_BLOCK * H);
    ck_assert(!has(&r, 6, 0));
    ck_assert(has(&r, 6, QN_HRING_BLOCK));

    /* the hot buffer goes only with (after) the last block */
    ck_assert_int_eq(qn_hring_expire(&r, 6500), 2 * (int64_t)QN_HRING_BLOCK - 1);
    ck_assert_uint_eq(r.nblocks, 0);
    ck_assert_uint_eq(r.nhot, 10);
    ck_assert(has(&r, 6, 2 * QN_HRING_BLOCK + 9));
    ck_assert_int_eq(qn_hring_expire(&r, 7001), 2 * (int64_t)QN_HRING_BLOCK + 9);
    ck_assert_uint_eq(r.hashes, 0);
    qn_hring_clear(&r);
}
END_TEST

/* A model of what was appended: hash index, offset and time, in order. */
struct model_row {
    size_t idx;
    int64_t created;
};

START_TEST(superset_after_random_appends_and_expiries)
{
    /* seed by test iteration so each fork checks a different history */
    uint64_t seed = 1000u + (uint64_t)_i;
    srand((unsigned)seed);
    struct qn_hring r;
    qn_hring_init(&r);
    size_t cap = 60000, n = 0;
    struct model_row *m = malloc(cap * sizeof *m);
    ck_assert_ptr_nonnull(m);
    int64_t now = 0, cutoff = INT64_MIN, offset = 0;
    for (int op = 0; op < 700 && n < cap - 400; op++) {
        if (rand() % 4 != 0) {
            size_t k = 1 + (size_t)(rand() % 300);
            now += rand() % 50; /* several segments may share a stamp */
            /* 1 in 10 re-appends hashes that are already resident */
            uint64_t hseed = rand() % 10 == 0 && n > k ? 0 : seed;
            size_t from = hseed == 0 ? (size_t)rand() % (n - k) : n;
            uint8_t *v = malloc(k * H);
            ck_assert_ptr_nonnull(v);
            for (size_t j = 0; j < k; j++) {
                size_t idx = hseed == 0 ? m[from + j].idx : n + j;
                qn_dd_hash(seed, idx, v + j * H);
                m[n + j] = (struct model_row){idx, now};
            }
            ck_assert_int_eq(qn_hring_append(&r, v, k, offset, now), QN_OK);
            free(v);
            offset += (int64_t)k;
            n += k;
        } else {
            int64_t c = now - (rand() % 2000);
            if (c > cutoff)
                cutoff = c;
            int64_t dropped = qn_hring_expire(&r, cutoff);
            /* what was dropped is all strictly older than the cutoff */
            if (dropped >= 0)
                ck_assert_int_lt(m[dropped].created, cutoff);
        }
        /* every hash created at or after the cutoff is still found */
        for (size_t j = 0; j < n; j++)
            if (m[j].created >= cutoff)
                ck_assert_msg(has(&r, seed, m[j].idx), "seed %llu op %d: row %zu lost",
                              (unsigned long long)seed, op, j);
        ck_assert_uint_le(r.hashes, n);
    }
    free(m);
    qn_hring_clear(&r);
}
END_TEST

START_TEST(slow_partition_forgets_and_frees)
{
    struct qn_hring r;
    qn_hring_init(&r);
    qn_dd_alloc_start();
    /* a few hashes a minute: the hot buffer never fills */
    for (int i = 0; i < 30; i++)
        append_range(&r, 7, (size_t)i * 3, 3, i * 3, i * 60000);
    ck_assert_uint_eq(r.nblocks, 0);
    ck_assert_uint_gt(r.bytes, 0);
    /* the window (one hour) passed since the last one */
    int64_t cutoff = 29 * 60000 + 1;
    ck_assert_int_eq(qn_hring_expire(&r, cutoff), 89);
    ck_assert_uint_eq(r.hashes, 0);
    ck_assert_uint_eq(r.nhot, 0);
    ck_assert_uint_eq(r.bytes, 0);
    ck_assert_uint_eq(qn_dd_alloc_now().live, 0);
    ck_assert(!has(&r, 7, 0));
    /* and it starts over cleanly */
    append_range(&r, 7, 1000, 5, 90, 40 * 60000);
    ck_assert(has(&r, 7, 1004));
    ck_assert(!has(&r, 7, 0));
    qn_hring_clear(&r);
    ck_assert_uint_eq(qn_dd_alloc_stop().live, 0);
}
END_TEST

START_TEST(emptied_ring_keeps_only_the_block_array)
{
    /* blocks and hot all expired: what is left is the block pointer array */
    struct qn_hring r;
    qn_hring_init(&r);
    qn_dd_alloc_start();
    append_range(&r, 8, 0, 20 * QN_HRING_BLOCK + 5, 0, 10);
    qn_hring_expire(&r, 11);
    ck_assert_uint_eq(r.hashes, 0);
    ck_assert_uint_le(r.bytes, 32 * sizeof(void *));
    ck_assert_uint_le(qn_dd_alloc_now().live, 32 * sizeof(void *));
    qn_hring_clear(&r);
    qn_dd_alloc_stop();
}
END_TEST

/* ---------------------------------------------------------------- bounds */

START_TEST(million_hashes_small_allocations_and_24_bytes_each)
{
    struct qn_hring r;
    qn_hring_init(&r);
    const size_t n = 1000000, seg = 100;
    uint8_t *v = malloc(seg * H);
    ck_assert_ptr_nonnull(v);
    qn_dd_alloc_start();
    for (size_t i = 0; i < n; i += seg) {
        for (size_t j = 0; j < seg; j++)
            qn_dd_hash(9, i + j, v + j * H);
        ck_assert_int_eq(qn_hring_append(&r, v, seg, (int64_t)i, (int64_t)(i / 1000)), QN_OK);
    }
    struct qn_dd_alloc_stats st = qn_dd_alloc_now();
    ck_assert_uint_eq(r.hashes, n);
    ck_assert_msg(st.largest <= 64 * KIB, "largest allocation %zu bytes", st.largest);
    double acc = (double)r.bytes / (double)n, real = (double)st.live / (double)n;
    ck_assert_msg(acc <= 24.0, "accounted %.2f bytes per hash", acc);
    ck_assert_msg(real <= 24.0, "allocated %.2f bytes per hash", real);
    /* the accounting is the real footprint, give or take 2% */
    ck_assert_msg(real >= acc * 0.98 && real <= acc * 1.02, "accounted %.2f, allocated %.2f", acc,
                  real);
    /* membership samples */
    for (size_t i = 0; i < n; i += 997)
        ck_assert(has(&r, 9, i));
    /* expiry keeps it bounded too: a sliding window of about 300k */
    for (size_t i = n; i < 2 * n; i += seg) {
        for (size_t j = 0; j < seg; j++)
            qn_dd_hash(9, i + j, v + j * H);
        ck_assert_int_eq(qn_hring_append(&r, v, seg, (int64_t)i, (int64_t)(i / 1000)), QN_OK);
        qn_hring_expire(&r, (int64_t)(i / 1000) - 300);
    }
    st = qn_dd_alloc_stop();
    ck_assert_msg(st.largest <= 64 * KIB, "largest allocation %zu bytes", st.largest);
    ck_assert_uint_le(r.hashes, 310000);
    ck_assert_msg((double)st.live / (double)r.hashes <= 24.0, "%.2f bytes per hash after expiry",
                  (double)st.live / (double)r.hashes);
    free(v);
    qn_hring_clear(&r);
}
END_TEST

START_TEST(steady_small_window_stays_small)
{
    /* A partition written for a long time under a window of about 20k hashes:
     * the blooms must follow the resident set, not the total ever appended. */
    struct qn_hring r;
    qn_hring_init(&r);
    const size_t seg = 100;
    uint8_t *v = malloc(seg * H);
    ck_assert_ptr_nonnull(v);
    qn_dd_alloc_start();
    double worst = 0;
    for (size_t i = 0; i < 3000000; i += seg) {
        for (size_t j = 0; j < seg; j++)
            qn_dd_hash(12, i + j, v + j * H);
        int64_t t = (int64_t)(i / 100); /* 100 hashes per time unit */
        ck_assert_int_eq(qn_hring_append(&r, v, seg, (int64_t)i, t), QN_OK);
        qn_hring_expire(&r, t - 200); /* window: 200 units = 20k hashes */
        if (i >= 100000) {
            double per = (double)qn_dd_alloc_now().live / (double)r.hashes;
            if (per > worst)
                worst = per;
        }
    }
    struct qn_dd_alloc_stats st = qn_dd_alloc_stop();
    ck_assert_msg(worst <= 24.0, "up to %.1f bytes per resident hash", worst);
    ck_assert_uint_le(st.largest, 64 * KIB);
    free(v);
    qn_hring_clear(&r);
}
END_TEST

START_TEST(expected_bulk_load_gets_one_filter)
{
    /* a hydration announces its size: one generation sized for it (2 MiB of
     * filter for 1M hashes) instead of ten doubling ones (the same bytes, but
     * ten bloom tests per lookup) */
    const size_t n = 1000000;
    uint8_t *v = hashes_new(13, 0, n);
    for (int hinted = 0; hinted < 2; hinted++) {
        struct qn_hring r;
        qn_hring_init(&r);
        if (hinted)
            qn_hring_expect(&r, n);
        qn_dd_alloc_start();
        ck_assert_int_eq(qn_hring_append(&r, v, 100, 0, 1), QN_OK);
        /* the first filter is sized for the whole load, or for one block */
        size_t first = r.bytes - 256 * H; /* the hot buffer holds 256 after 100 */
        if (hinted)
            ck_assert_msg(first >= 2 * n - 64 * KIB, "first filter %zu bytes", first);
        else
            ck_assert_msg(first <= 16 * KIB, "first filter %zu bytes", first);
        for (size_t i = 100; i < n; i += 100)
            ck_assert_int_eq(qn_hring_append(&r, v + i * H, 100, (int64_t)i, 1), QN_OK);
        struct qn_dd_alloc_stats st = qn_dd_alloc_stop();
        ck_assert_uint_le(st.largest, 64 * KIB);
        size_t filters = r.bytes - n * H;
        ck_assert_msg(filters <= 2 * 1024 * KIB + 128 * KIB, "%zu bytes besides hashes", filters);
        for (size_t i = 0; i < n; i += 101)
            ck_assert(qn_hring_contains(&r, v + i * H));
        /* no effect once the ring has a filter */
        qn_hring_expect(&r, 50 * n);
        ck_assert_int_eq(qn_hring_append(&r, v, 1, (int64_t)n, 2), QN_OK);
        qn_hring_clear(&r);
    }
    free(v);
}
END_TEST

START_TEST(small_partition_small_footprint)
{
    /* One hash must not cost a full 64 KiB bloom page: thousands of quiet
     * partitions share the cache budget. */
    struct qn_hring r;
    qn_hring_init(&r);
    qn_dd_alloc_start();
    append_range(&r, 10, 0, 1, 0, 0);
    struct qn_dd_alloc_stats st = qn_dd_alloc_stop();
    ck_assert_msg(r.bytes <= 16 * KIB, "one hash accounts %zu bytes", r.bytes);
    ck_assert_msg(st.live <= 16 * KIB, "one hash allocates %zu bytes", st.live);
    qn_hring_clear(&r);
}
END_TEST

/* ---------------------------------------------------------------- memory */

START_TEST(out_of_memory_leaves_a_usable_ring)
{
    /* Make the k-th allocation of a sealing append fail, for every k the seal
     * makes, then keep appending: the ring must stay within its arrays (ASan) and
     * keep answering for what it holds. */
    for (long k = 0; k < 6; k++) {
        struct qn_hring r;
        qn_hring_init(&r);
        append_range(&r, 11, 0, 2 * QN_HRING_BLOCK - 1, 0, 1);
        uint8_t *v = hashes_new(11, 2 * QN_HRING_BLOCK - 1, 300);
        qn_dd_alloc_start();
        qn_dd_alloc_fail_after(k);
        int rc = qn_hring_append(&r, v, 1, 2 * QN_HRING_BLOCK - 1, 1);
        qn_dd_alloc_stop();
        ck_assert(rc == QN_OK || rc == QN_ENOMEM);
        ck_assert_uint_le(r.nhot, QN_HRING_BLOCK);
        /* keep going after the failure */
        for (size_t i = 1; i < 300; i++) {
            int rc2 = qn_hring_append(&r, v + i * H, 1, 2 * QN_HRING_BLOCK - 1 + (int64_t)i, 2);
            ck_assert(rc2 == QN_OK || rc2 == QN_ENOMEM);
            ck_assert_uint_le(r.nhot, QN_HRING_BLOCK);
            ck_assert_uint_le(r.nhot, r.hot_cap);
        }
        for (size_t i = 0; i < 2 * QN_HRING_BLOCK - 1; i++)
            ck_assert(has(&r, 11, i));
        qn_hring_expire(&r, 3);
        ck_assert_uint_eq(r.hashes, 0);
        free(v);
        qn_hring_clear(&r);
    }
}
END_TEST

Suite *qn_test_hring_suite(void)
{
    Suite *s = suite_create("hring");
    TCase *tc = tcase_create("hring");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, seal_at_block_size_hands_over_the_hot_array);
    tcase_add_test(tc, seal_sorts_any_arrival_order);
    tcase_add_test(tc, seal_inside_one_large_append);
    tcase_add_test(tc, membership_across_blocks_and_hot);
    tcase_add_test(tc, same_hash_in_two_blocks_survives_the_first_expiry);
    tcase_add_test(tc, expiry_is_block_granular);
    tcase_add_loop_test(tc, superset_after_random_appends_and_expiries, 0, 8);
    tcase_add_test(tc, slow_partition_forgets_and_frees);
    tcase_add_test(tc, emptied_ring_keeps_only_the_block_array);
    tcase_add_test(tc, million_hashes_small_allocations_and_24_bytes_each);
    tcase_add_test(tc, steady_small_window_stays_small);
    tcase_add_test(tc, expected_bulk_load_gets_one_filter);
    tcase_add_test(tc, small_partition_small_footprint);
    tcase_add_test(tc, out_of_memory_leaves_a_usable_ring);
    suite_add_tcase(s, tc);
    return s;
}
