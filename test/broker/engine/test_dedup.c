/*
 * test_dedup.c - suite "dedup": broker/src/engine/dedup.c, the cache manager, without
 * a database.
 *
 * The runner is linked with --wrap for the store calls dedup.c makes
 * (qn_store_partition_meta, qn_store_txns_window, qn_store_txns_since,
 * qn_store_cancel) and for both clocks (qn_store_now_ms, monotonic; qn_now_ms,
 * wall). The fake store below records each call; a test answers it when it
 * likes, with the rows it likes, and moves the clocks by hand. So every state of
 * the entry lifecycle (hydration, pending commits, gap catch-up, window and
 * partition changes, the 90% gate, suppression, cooldown, the recent-use guard,
 * eviction, sweep) is driven deterministically.
 *
 * What is asserted is the hook contract of dedup.h: a watermark >= 0 only when
 * the ring knows every hash of the window up to it, -1 otherwise, and the
 * resource behaviour the dedup seed specifies.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "engine/dedup.h"
#include "engine_test.h"
#include "queen/error.h"
#include "queen/store.h"

static const uint8_t T1[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t T2[16] = {0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

/* ---------------------------------------------------------------- fake store */

enum fake_kind { FK_META = 1, FK_WINDOW, FK_SINCE };

struct fake_req {
    enum fake_kind kind;
    bool cancelled;
    bool answered;
    char queue[64];
    char partition[64];
    uint8_t tenant[16]; /* partition_meta: the tenant it was asked in */
    uint8_t pid[16];
    int32_t seconds;
    int64_t after;
    qn_partition_meta_cb meta_cb;
    qn_segments_cb rows_cb;
    void *ud;
};

#define FAKE_MAX 512
static struct fake_req reqs[FAKE_MAX];
static size_t nreqs;
#define mono_ms qt_engine_mono_ms
int64_t qt_engine_mono_ms = 1000000;
static int64_t wall_ms = 1700000000000LL;

int64_t __wrap_qn_store_now_ms(void);
uint64_t __wrap_qn_now_ms(void);
void __wrap_qn_store_cancel(qn_store_req *req);
int __wrap_qn_store_partition_meta(qn_store *st, const char *queue, const char *partition,
                                   const struct qn_call_opts *opts, qn_partition_meta_cb cb,
                                   void *ud, qn_store_req **req);
int __wrap_qn_store_txns_window(qn_store *st, const uint8_t pid[16], int32_t seconds,
                                const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                                qn_store_req **req);
int __wrap_qn_store_txns_since(qn_store *st, const uint8_t pid[16], int64_t after,
                               const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                               qn_store_req **req);

int64_t __wrap_qn_store_now_ms(void)
{
    return mono_ms;
}

uint64_t __wrap_qn_now_ms(void)
{
    return (uint64_t)wall_ms;
}

void __wrap_qn_store_cancel(qn_store_req *req)
{
    if (req == NULL)
        return;
    struct fake_req *r = (struct fake_req *)req;
    ck_assert_msg(!r->answered, "cancel of an answered request");
    r->cancelled = true;
}

static struct fake_req *fake_new(enum fake_kind kind, void *ud, qn_store_req **req)
{
    ck_assert_uint_lt(nreqs, FAKE_MAX);
    struct fake_req *r = &reqs[nreqs++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->ud = ud;
    if (req != NULL)
        *req = (qn_store_req *)r;
    return r;
}

int __wrap_qn_store_partition_meta(qn_store *st, const char *queue, const char *partition,
                                   const struct qn_call_opts *opts, qn_partition_meta_cb cb,
                                   void *ud, qn_store_req **req)
{
    (void)st;
    /* a name means nothing without its tenant: it is always given */
    ck_assert_ptr_nonnull(opts);
    ck_assert_ptr_nonnull(opts->tenant);
    struct fake_req *r = fake_new(FK_META, ud, req);
    memcpy(r->tenant, opts->tenant, 16);
    snprintf(r->queue, sizeof r->queue, "%s", queue);
    snprintf(r->partition, sizeof r->partition, "%s", partition);
    r->meta_cb = cb;
    return QN_OK;
}

int __wrap_qn_store_txns_window(qn_store *st, const uint8_t pid[16], int32_t seconds,
                                const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                                qn_store_req **req)
{
    (void)st;
    (void)opts;
    struct fake_req *r = fake_new(FK_WINDOW, ud, req);
    memcpy(r->pid, pid, 16);
    r->seconds = seconds;
    r->rows_cb = cb;
    return QN_OK;
}

int __wrap_qn_store_txns_since(qn_store *st, const uint8_t pid[16], int64_t after,
                               const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                               qn_store_req **req)
{
    (void)st;
    (void)opts;
    struct fake_req *r = fake_new(FK_SINCE, ud, req);
    memcpy(r->pid, pid, 16);
    r->after = after;
    r->rows_cb = cb;
    return QN_OK;
}

/* The open (not answered, not cancelled) requests. */
static size_t open_count(void)
{
    size_t n = 0;
    for (size_t i = 0; i < nreqs; i++)
        n += !reqs[i].answered && !reqs[i].cancelled;
    return n;
}

/* The only open request; fails the test unless there is exactly one, of kind. */
static struct fake_req *open_one(enum fake_kind kind)
{
    struct fake_req *found = NULL;
    for (size_t i = 0; i < nreqs; i++) {
        if (reqs[i].answered || reqs[i].cancelled)
            continue;
        ck_assert_msg(found == NULL, "more than one open store request");
        found = &reqs[i];
    }
    ck_assert_msg(found != NULL, "no open store request");
    ck_assert_int_eq(found->kind, kind);
    return found;
}

static void answer_meta(struct fake_req *r, const uint8_t pid[16], int32_t window, int64_t last)
{
    ck_assert(!r->answered && !r->cancelled && r->kind == FK_META);
    r->answered = true;
    struct qn_store_status st = {QN_OK, "", ""};
    struct qn_partition_meta m;
    memcpy(m.pid, pid, 16);
    m.window = window;
    m.last_offset = last;
    m.txns_start = 0;
    r->meta_cb(r->ud, &st, &m);
}

static void answer_meta_missing(struct fake_req *r)
{
    r->answered = true;
    struct qn_store_status st = {QN_OK, "", ""};
    r->meta_cb(r->ud, &st, NULL);
}

static void answer_error(struct fake_req *r)
{
    ck_assert(!r->answered && !r->cancelled);
    r->answered = true;
    struct qn_store_status st = {QN_EUNAVAILABLE, "08006", "connection lost"};
    if (r->kind == FK_META)
        r->meta_cb(r->ud, &st, NULL);
    else
        r->rows_cb(r->ud, &st, NULL);
}

/* One sidecar row: offsets [base, base + n), hashes (seed, from..from+n). */
struct rowspec {
    int64_t base;
    size_t n;
    int64_t created_ms; /* wall */
    uint64_t seed;
    size_t from;
};

static void answer_rows(struct fake_req *r, const struct rowspec *spec, size_t nrows)
{
    ck_assert(!r->answered && !r->cancelled && (r->kind == FK_WINDOW || r->kind == FK_SINCE));
    r->answered = true;
    struct qn_segment_row *rows = calloc(nrows ? nrows : 1, sizeof *rows);
    ck_assert_ptr_nonnull(rows);
    for (size_t i = 0; i < nrows; i++) {
        uint8_t *b = malloc(spec[i].n * 16);
        ck_assert_ptr_nonnull(b);
        for (size_t j = 0; j < spec[i].n; j++)
            qn_dd_hash(spec[i].seed, spec[i].from + j, b + j * 16);
        rows[i] = (struct qn_segment_row){spec[i].base, spec[i].base + (int64_t)spec[i].n - 1,
                                          spec[i].created_ms * 1000, b, spec[i].n * 16};
    }
    struct qn_store_status st = {QN_OK, "", ""};
    struct qn_segments_result res = {nrows, rows};
    r->rows_cb(r->ud, &st, &res);
    for (size_t i = 0; i < nrows; i++)
        free((void *)rows[i].blob);
    free(rows);
}

/* ---------------------------------------------------------------- fixture */

static struct event_base *base;
static struct qn_dedup *dd;
static struct qn_dedup_config dcfg;

static const uint8_t PID_A[16] = {0xa};
static const uint8_t PID_B[16] = {0xb};
static const uint8_t PID_C[16] = {0xc};
static const uint8_t PID_D[16] = {0xd};
static const uint8_t PID_A2[16] = {0xa, 2};

static void start(size_t budget)
{
    nreqs = 0;
    mono_ms = 1000000;
    wall_ms = 1700000000000LL;
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    qn_dedup_config_defaults(&dcfg, budget);
    dcfg.sweep_ms = 3600 * 1000; /* only the sweep test runs it */
    ck_assert_int_eq(qn_dedup_new(base, NULL, &dcfg, &dd), QN_OK);
}

static void stop(void)
{
    qn_dedup_free(dd);
    dd = NULL;
    event_base_free(base);
    base = NULL;
    /* every request still open was cancelled by free */
    ck_assert_uint_eq(open_count(), 0);
}

static int64_t verified(const char *p, uint64_t seed, size_t from, size_t n)
{
    uint8_t *h = malloc(n * 16);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++)
        qn_dd_hash(seed, from + i, h + i * 16);
    int64_t v = qn_dedup_verified(dd, T1, "q", p, h, n);
    free(h);
    return v;
}

static void committed(const char *p, const uint8_t pid[16], int32_t window, int64_t base_off,
                      uint64_t seed, size_t from, size_t n)
{
    uint8_t *h = malloc(n * 16);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++)
        qn_dd_hash(seed, from + i, h + i * 16);
    qn_dedup_committed(dd, T1, "q", p, pid, window, base_off, wall_ms * 1000, h, n);
    free(h);
}

static struct qn_dedup_stats stats(void)
{
    struct qn_dedup_stats s;
    qn_dedup_stats(dd, &s);
    return s;
}

/* First contact with partition p: meta, then rows [0, n) of hash seed `seed`,
 * one row per 100 hashes created `age_s` seconds ago; vouching afterwards. */
static void load(const char *p, const uint8_t pid[16], uint64_t seed, size_t n, int64_t age_s)
{
    ck_assert_int_eq(verified(p, 777, 0, 1), -1);
    struct fake_req *m = open_one(FK_META);
    ck_assert_str_eq(m->queue, "q");
    ck_assert_str_eq(m->partition, p);
    answer_meta(m, pid, 3600, (int64_t)n - 1);
    struct fake_req *w = open_one(FK_WINDOW);
    ck_assert_int_eq(memcmp(w->pid, pid, 16), 0);
    size_t nrows = (n + 99) / 100;
    struct rowspec *rs = calloc(nrows ? nrows : 1, sizeof *rs);
    ck_assert_ptr_nonnull(rs);
    for (size_t i = 0; i < nrows; i++) {
        size_t k = n - i * 100 < 100 ? n - i * 100 : 100;
        rs[i] = (struct rowspec){(int64_t)i * 100, k, wall_ms - age_s * 1000, seed, i * 100};
    }
    answer_rows(w, rs, nrows);
    free(rs);
}

/* The window the entry vouches under, 0 when it does not vouch; checks the
 * partition id it reports when it does. */
static int32_t vouch_window(const char *p, const uint8_t *want_pid)
{
    int32_t w = 0;
    uint8_t pid[16];
    if (!qn_dedup_vouched_for(dd, T1, "q", p, &w, pid))
        return 0;
    if (want_pid != NULL)
        ck_assert_mem_eq(pid, want_pid, 16);
    return w;
}

/* load(), and the entry vouches afterwards */
static void hydrate(const char *p, const uint8_t pid[16], uint64_t seed, size_t n, int64_t age_s)
{
    load(p, pid, seed, n, age_s);
    ck_assert_int_eq(vouch_window(p, pid), 3600);
}

/* Accounted bytes of one partition holding n hashes (measured, so the pressure
 * tests do not depend on the ring's exact layout). */
static size_t footprint(size_t n)
{
    start(1u << 30);
    hydrate("m", PID_A, 1, n, 10);
    size_t b = stats().bytes;
    stop();
    return b;
}

/* ---------------------------------------------------------------- gate */

START_TEST(fits_at_and_past_ninety_percent)
{
    ck_assert(qn_dedup_fits(0, 0, 900, 1000, 0.9));
    ck_assert(!qn_dedup_fits(0, 0, 901, 1000, 0.9));
    ck_assert(qn_dedup_fits(900, 0, 0, 1000, 0.9));
    ck_assert(!qn_dedup_fits(901, 0, 0, 1000, 0.9));
    /* the entry's own resident bytes do not count against it */
    ck_assert(qn_dedup_fits(1000, 200, 100, 1000, 0.9));
    ck_assert(!qn_dedup_fits(1000, 200, 101, 1000, 0.9));
    ck_assert(qn_dedup_fits(1000, 1000, 900, 1000, 0.9));
    /* own larger than total (never, but no wrap-around) */
    ck_assert(qn_dedup_fits(10, 20, 900, 1000, 0.9));
    /* large caps: no float rounding surprise at the boundary */
    size_t cap = (size_t)512 << 20;
    size_t edge = (size_t)(0.9 * (double)cap);
    ck_assert(qn_dedup_fits(edge, 0, 0, cap, 0.9));
    ck_assert(!qn_dedup_fits(edge + 1, 0, 0, cap, 0.9));
}
END_TEST

/* ---------------------------------------------------------------- lifecycle */

START_TEST(hydration_then_vouching)
{
    start(64u << 20);
    ck_assert_int_eq(verified("p", 1, 0, 1), -1);
    ck_assert_int_eq(vouch_window("p", NULL), 0);
    struct fake_req *m = open_one(FK_META);
    /* one load at a time: more flushes meanwhile ask nothing more */
    ck_assert_int_eq(verified("p", 1, 0, 1), -1);
    ck_assert_uint_eq(open_count(), 1);
    answer_meta(m, PID_A, 3600, 199);
    struct fake_req *w = open_one(FK_WINDOW);
    ck_assert_int_eq(w->seconds, 3600 + 5); /* five seconds of skew slack */
    struct rowspec rows[] = {{0, 100, wall_ms - 100000, 1, 0}, {100, 100, wall_ms - 10000, 1, 100}};
    answer_rows(w, rows, 2);
    struct qn_dedup_stats s = stats();
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.vouching, 1);
    ck_assert_uint_eq(s.hashes, 200);
    ck_assert_uint_eq(s.hydrations, 1);
    /* fresh hashes: vouched up to the last offset */
    ck_assert_int_eq(verified("p", 2, 0, 100), 199);
    ck_assert_int_eq(vouch_window("p", NULL), 3600);
    /* one known hash among fresh ones: cannot vouch */
    ck_assert_int_eq(verified("p", 1, 150, 1), -1);
    uint8_t mix[3 * 16];
    qn_dd_hash(2, 500, mix);
    qn_dd_hash(1, 7, mix + 16);
    qn_dd_hash(2, 501, mix + 32);
    ck_assert_int_eq(qn_dedup_verified(dd, T1, "q", "p", mix, 3), -1);
    s = stats();
    ck_assert_uint_eq(s.local_hits, 2);
    ck_assert_uint_eq(s.vouched, 1);
    ck_assert_uint_eq(open_count(), 0);
    stop();
}
END_TEST

START_TEST(watermark_below_rows_read_later)
{
    /* meta reads last_offset 99; by the time the rows are read, 100..149 was
     * committed by someone: the rows carry it, the watermark follows them */
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 99);
    struct rowspec rows[] = {{0, 100, wall_ms, 1, 0}, {100, 50, wall_ms, 1, 100}};
    answer_rows(open_one(FK_WINDOW), rows, 2);
    ck_assert_int_eq(verified("p", 2, 0, 10), 149);
    ck_assert_int_eq(verified("p", 1, 120, 1), -1);
    stop();
}
END_TEST

START_TEST(empty_window_vouches_the_allocator_watermark)
{
    /* everything in the partition is older than the window: no rows, and the
     * watermark is the last offset read before the rows */
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 4999);
    answer_rows(open_one(FK_WINDOW), NULL, 0);
    ck_assert_int_eq(verified("p", 2, 0, 10), 4999);
    stop();
}
END_TEST

START_TEST(commits_extend_the_watermark)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 200, 10);
    committed("p", PID_A, 3600, 200, 3, 0, 50);
    ck_assert_int_eq(verified("p", 2, 0, 10), 249);
    ck_assert_int_eq(verified("p", 3, 49, 1), -1); /* what we committed is known */
    committed("p", PID_A, 3600, 250, 3, 50, 1);
    ck_assert_int_eq(verified("p", 2, 0, 10), 250);
    stop();
}
END_TEST

START_TEST(gap_declines_then_catches_up)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 250, 10);
    /* another broker wrote 250..299; ours landed at 300 */
    committed("p", PID_A, 3600, 300, 3, 0, 50);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    struct fake_req *c = open_one(FK_SINCE);
    ck_assert_int_eq(c->after, 249);
    ck_assert_int_eq(memcmp(c->pid, PID_A, 16), 0);
    ck_assert_uint_eq(stats().catchups, 1);
    /* our own commit while catching up waits for the rows */
    committed("p", PID_A, 3600, 350, 3, 50, 10);
    struct rowspec rows[] = {{250, 50, wall_ms, 4, 0}, {300, 50, wall_ms, 3, 0}};
    answer_rows(c, rows, 2);
    ck_assert_int_eq(verified("p", 2, 0, 10), 359);
    ck_assert_int_eq(verified("p", 4, 10, 1), -1); /* the other broker's hashes */
    ck_assert_int_eq(verified("p", 3, 55, 1), -1); /* the pending commit */
    ck_assert_int_eq(verified("p", 1, 0, 1), -1);  /* the old ones */
    stop();
}
END_TEST

START_TEST(catchup_with_a_missing_row_rebuilds_fully)
{
    /* rows after the watermark do not follow on (purged in between): the entry
     * cannot vouch for the hole and starts over with a full hydration */
    start(64u << 20);
    hydrate("p", PID_A, 1, 100, 10);
    committed("p", PID_A, 3600, 200, 3, 0, 10);
    verified("p", 2, 0, 1);
    struct rowspec rows[] = {{150, 50, wall_ms, 4, 0}, {200, 10, wall_ms, 3, 0}};
    answer_rows(open_one(FK_SINCE), rows, 2);
    ck_assert_int_eq(verified("p", 2, 0, 1), -1);
    open_one(FK_META);
    stop();
}
END_TEST

START_TEST(commits_during_hydration_are_applied)
{
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 199);
    struct fake_req *w = open_one(FK_WINDOW);
    /* our flushes commit while the rows are in flight: 150..199 was read by the
     * rows too, 200..209 was not */
    committed("p", PID_A, 3600, 200, 3, 0, 10);
    committed("p", PID_A, 3600, 210, 3, 10, 10);
    struct rowspec rows[] = {{0, 200, wall_ms, 1, 0}};
    answer_rows(w, rows, 1);
    ck_assert_int_eq(verified("p", 2, 0, 10), 219);
    ck_assert_int_eq(verified("p", 3, 15, 1), -1);
    stop();
}
END_TEST

START_TEST(commit_gap_during_hydration_then_catchup)
{
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 199);
    struct fake_req *w = open_one(FK_WINDOW);
    committed("p", PID_A, 3600, 300, 3, 0, 10); /* 200..299 is someone else's */
    struct rowspec rows[] = {{0, 200, wall_ms, 1, 0}};
    answer_rows(w, rows, 1);
    ck_assert_uint_eq(stats().vouching, 0);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    ck_assert_int_eq(open_one(FK_SINCE)->after, 199);
    stop();
}
END_TEST

START_TEST(too_many_pending_commits_leave_a_gap)
{
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 99);
    struct fake_req *w = open_one(FK_WINDOW);
    for (int i = 0; i < 400; i++)
        committed("p", PID_A, 3600, 100 + i, 3, (size_t)i, 1);
    struct rowspec rows[] = {{0, 100, wall_ms, 1, 0}};
    answer_rows(w, rows, 1);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    open_one(FK_SINCE);
    stop();
}
END_TEST

START_TEST(overlap_forgets_everything)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 250, 10);
    committed("p", PID_A, 3600, 240, 3, 0, 5); /* impossible under a monotone allocator */
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    ck_assert_uint_eq(stats().hashes, 0);
    open_one(FK_META); /* full rebuild */
    stop();
}
END_TEST

START_TEST(window_change_in_a_result_rehydrates)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 100, 10);
    committed("p", PID_A, 60, 100, 3, 0, 10); /* someone /configured 60 s */
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    ck_assert_int_eq(vouch_window("p", NULL), 0);
    answer_meta(open_one(FK_META), PID_A, 60, 109);
    ck_assert_int_eq(open_one(FK_WINDOW)->seconds, 65);
    struct rowspec rows[] = {{100, 10, wall_ms, 3, 0}};
    answer_rows(open_one(FK_WINDOW), rows, 1);
    ck_assert_int_eq(verified("p", 2, 0, 10), 109);
    ck_assert_int_eq(vouch_window("p", NULL), 60);
    stop();
}
END_TEST

START_TEST(window_change_during_hydration_restarts)
{
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 99);
    struct fake_req *w = open_one(FK_WINDOW);
    committed("p", PID_A, 7200, 100, 3, 0, 10);
    /* Not cancelled (a cancel can land on a neighbouring push on the same
     * connection): its answer is dropped when it comes, then the entry rebuilds. */
    ck_assert(!w->cancelled);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    ck_assert_uint_eq(open_count(), 1);
    struct rowspec rows[] = {{0, 100, wall_ms, 1, 0}};
    answer_rows(w, rows, 1);
    ck_assert_uint_eq(stats().hashes, 0);
    ck_assert_uint_eq(stats().vouching, 0);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    answer_meta(open_one(FK_META), PID_A, 7200, 109);
    ck_assert_int_eq(open_one(FK_WINDOW)->seconds, 7205);
    stop();
}
END_TEST

START_TEST(partition_id_change_in_a_result_forgets)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 100, 10);
    committed("p", PID_A2, 3600, 0, 3, 0, 10); /* deleted and created again */
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    ck_assert_uint_eq(stats().hashes, 0);
    answer_meta(open_one(FK_META), PID_A2, 3600, 9);
    struct rowspec rows[] = {{0, 10, wall_ms, 3, 0}};
    answer_rows(open_one(FK_WINDOW), rows, 1);
    ck_assert_int_eq(verified("p", 2, 0, 10), 9);
    stop();
}
END_TEST

START_TEST(forgotten_refresh_answer_is_dropped)
{
    /* a metadata refresh in flight when a result forgets the entry: its answer
     * must not revive anything, and nothing is cancelled */
    start(64u << 20);
    hydrate("p", PID_A, 1, 100, 10);
    mono_ms += 31000;
    ck_assert_int_eq(verified("p", 2, 0, 10), 99);
    struct fake_req *m = open_one(FK_META);
    committed("p", PID_A2, 3600, 0, 3, 0, 10); /* re-created partition */
    ck_assert(!m->cancelled);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    answer_meta(m, PID_A, 3600, 99);
    ck_assert_uint_eq(stats().vouching, 0);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    open_one(FK_META); /* now the rebuild */
    stop();
}
END_TEST

START_TEST(meta_refresh_sees_a_window_change)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 100, 10);
    mono_ms += 31000;
    /* past the TTL: still vouches, and refreshes in the background */
    ck_assert_int_eq(verified("p", 2, 0, 10), 99);
    answer_meta(open_one(FK_META), PID_A, 7200, 99);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    open_one(FK_META); /* rebuilt under the new window */
    stop();
}
END_TEST

START_TEST(meta_refresh_sees_a_new_partition)
{
    /* The queue was deleted and created again (another broker pushed into the
     * new partition, this one has not committed since): the refresh shows
     * another partition id, and the old watermark must not be vouched for the
     * new partition, whose offsets start over. */
    start(64u << 20);
    hydrate("p", PID_A, 1, 1000, 10);
    mono_ms += 31000;
    ck_assert_int_eq(verified("p", 2, 0, 10), 999);
    answer_meta(open_one(FK_META), PID_A2, 3600, 5);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    stop();
}
END_TEST

START_TEST(unchanged_meta_refresh_keeps_vouching)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 100, 10);
    mono_ms += 31000;
    verified("p", 2, 0, 10);
    answer_meta(open_one(FK_META), PID_A, 3600, 99);
    ck_assert_int_eq(verified("p", 2, 0, 10), 99);
    ck_assert_uint_eq(open_count(), 0);
    stop();
}
END_TEST

START_TEST(load_failures_retry_on_next_use)
{
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_error(open_one(FK_META));
    ck_assert_int_eq(verified("p", 1, 0, 1), -1);
    answer_meta(open_one(FK_META), PID_A, 3600, 99);
    answer_error(open_one(FK_WINDOW));
    ck_assert_uint_eq(stats().vouching, 0);
    ck_assert_int_eq(verified("p", 1, 0, 1), -1);
    answer_meta(open_one(FK_META), PID_A, 3600, 99);
    struct rowspec rows[] = {{0, 100, wall_ms, 1, 0}};
    answer_rows(open_one(FK_WINDOW), rows, 1);
    ck_assert_int_eq(verified("p", 2, 0, 1), 99);
    stop();
}
END_TEST

START_TEST(missing_partition_then_first_commit)
{
    /* the first push to a new partition: it does not exist yet */
    start(64u << 20);
    ck_assert_int_eq(verified("p", 1, 0, 10), -1);
    answer_meta_missing(open_one(FK_META));
    committed("p", PID_A, 3600, 0, 1, 0, 10);
    ck_assert_int_eq(verified("p", 2, 0, 10), -1);
    answer_meta(open_one(FK_META), PID_A, 3600, 9);
    struct rowspec rows[] = {{0, 10, wall_ms, 1, 0}};
    answer_rows(open_one(FK_WINDOW), rows, 1);
    ck_assert_int_eq(verified("p", 2, 0, 10), 9);
    ck_assert_int_eq(verified("p", 1, 3, 1), -1);
    stop();
}
END_TEST

START_TEST(queue_without_dedup_reads_meta_once_per_ttl)
{
    /* dedup_window_seconds = 0: SQL never probes, so -1 costs nothing, and a
     * metadata read on every flush would cost one query per push */
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 0, 99);
    ck_assert_uint_eq(open_count(), 0);
    for (int i = 0; i < 50; i++) {
        committed("p", PID_A, 0, 100 + i, 1, (size_t)i, 1);
        ck_assert_int_eq(verified("p", 2, (size_t)i, 1), -1);
        for (size_t k = 0; k < nreqs; k++)
            if (!reqs[k].answered && !reqs[k].cancelled)
                answer_meta(&reqs[k], PID_A, 0, 100 + i);
        mono_ms += 100;
    }
    ck_assert_msg(stats().hydrations <= 1, "%llu metadata reads in 5 s",
                  (unsigned long long)stats().hydrations);
    /* the window is turned on: a result says so, the next flush hydrates */
    committed("p", PID_A, 3600, 150, 1, 60, 1);
    verified("p", 2, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 150);
    open_one(FK_WINDOW);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- time */

START_TEST(expiry_keeps_the_window_and_the_slack)
{
    start(64u << 20);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 3600, 8191);
    /* two blocks: one created an hour ago, one ten seconds ago */
    struct rowspec rows[] = {{0, 4096, wall_ms - 3590 * 1000, 1, 0},
                             {4096, 4096, wall_ms - 10 * 1000, 1, 4096}};
    answer_rows(open_one(FK_WINDOW), rows, 2);
    ck_assert_uint_eq(stats().hashes, 8192);
    /* 3600 + 5 - 1 s after the first: still inside window + slack */
    wall_ms += 14 * 1000;
    ck_assert_int_eq(verified("p", 1, 5, 1), -1);
    ck_assert_uint_eq(stats().hashes, 8192);
    /* past it: the old block goes, its hashes are vouched for */
    wall_ms += 2 * 1000;
    ck_assert_int_eq(verified("p", 1, 5, 1), 8191);
    ck_assert_uint_eq(stats().hashes, 4096);
    ck_assert_int_eq(verified("p", 1, 5000, 1), -1);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- pressure */

enum { BIG = 20000 };

START_TEST(suppression_cooldown_and_recent_guard)
{
    size_t s = footprint(BIG);
    start(s * 16 / 10); /* room for one under the 90% line, not two */
    hydrate("a", PID_A, 1, BIG, 10);
    mono_ms += 10000;
    hydrate("b", PID_B, 2, BIG, 10); /* new partition: admitted; a (idle) evicted */
    struct qn_dedup_stats st = stats();
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_le(st.bytes, dcfg.budget_bytes);

    /* a comes back: its footprint does not fit beside b, and b was used within
     * 5 s, so b is not evicted to admit it: a is suppressed */
    mono_ms += 1000;
    ck_assert_int_eq(verified("a", 9, 0, 1), -1);
    ck_assert_uint_eq(open_count(), 0);
    st = stats();
    ck_assert_uint_eq(st.suppressed, 1);
    ck_assert_uint_eq(st.vouching, 1);
    /* the cooldown: 30 s without a re-test (no load, no eviction) */
    for (int i = 0; i < 29; i++) {
        mono_ms += 1000;
        ck_assert_int_eq(verified("a", 9, 0, 1), -1);
        ck_assert_uint_eq(open_count(), 0);
    }
    ck_assert_uint_eq(stats().vouching, 1);
    /* after it, b is idle: evicted, a rebuilds */
    mono_ms += 2000;
    ck_assert_int_eq(verified("a", 9, 0, 1), -1);
    open_one(FK_META);
    st = stats();
    ck_assert_uint_eq(st.suppressed, 0);
    ck_assert_uint_eq(st.vouching, 0);
    stop();
}
END_TEST

START_TEST(recently_used_entries_are_never_evicted)
{
    /* b loads while a was used 1 s ago: a is not evicted to make room, the
     * newcomer is suppressed instead and the cache stays within its budget */
    size_t s = footprint(BIG);
    start(s * 16 / 10);
    hydrate("a", PID_A, 1, BIG, 10);
    mono_ms += 1000;
    load("b", PID_B, 2, BIG, 10);
    struct qn_dedup_stats st = stats();
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_eq(st.vouching, 1);
    ck_assert_uint_eq(st.suppressed, 1);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_le(st.bytes, dcfg.budget_bytes);
    ck_assert_int_eq(verified("a", 9, 0, 1), BIG - 1);
    ck_assert_int_eq(verified("b", 9, 0, 1), -1);
    ck_assert_uint_eq(open_count(), 0); /* b serves its cooldown */
    stop();
}
END_TEST

START_TEST(growth_past_the_budget_suppresses_the_grower)
{
    /* every entry hot, one grows by its own commits past the budget: it is
     * dropped and suppressed, the others keep vouching */
    size_t s = footprint(BIG);
    start(s * 16 / 10);
    hydrate("a", PID_A, 1, BIG, 10);
    hydrate("c", PID_C, 3, 100, 10);
    for (size_t i = 0; i < BIG; i += 500) {
        committed("c", PID_C, 3600, 100 + (int64_t)i, 5, i, 500);
        ck_assert_uint_le(stats().bytes, dcfg.budget_bytes);
    }
    struct qn_dedup_stats st = stats();
    ck_assert_uint_eq(st.vouching, 1);
    ck_assert_uint_eq(st.suppressed, 1);
    ck_assert_int_eq(verified("a", 9, 0, 1), BIG - 1);
    ck_assert_int_eq(verified("c", 9, 0, 1), -1);
    /* after the cooldown c is gated on what it grew to: a is idle by then
     * and makes room */
    mono_ms += 31000;
    ck_assert_int_eq(verified("c", 9, 0, 1), -1);
    open_one(FK_META);
    ck_assert_uint_eq(stats().evictions, 1);
    stop();
}
END_TEST

START_TEST(new_partition_never_suppressed_on_first_contact)
{
    /* a alone holds 95% of the budget: past the 90% line, and a was just used */
    size_t s = footprint(BIG);
    start(s * 105 / 100);
    hydrate("a", PID_A, 1, BIG, 10);
    ck_assert_uint_gt(stats().bytes, dcfg.budget_bytes * 9 / 10);
    mono_ms += 1000;
    ck_assert_int_eq(verified("c", 3, 0, 1), -1);
    ck_assert_uint_eq(stats().suppressed, 0);
    answer_meta(open_one(FK_META), PID_C, 3600, 9);
    struct rowspec rows[] = {{0, 10, wall_ms, 3, 0}};
    answer_rows(open_one(FK_WINDOW), rows, 1);
    ck_assert_int_eq(verified("c", 4, 0, 1), 9);
    ck_assert_int_eq(verified("a", 4, 0, 1), BIG - 1);
    stop();
}
END_TEST

START_TEST(gap_catchup_is_never_gated)
{
    size_t s = footprint(BIG);
    start(s * 105 / 100);
    hydrate("a", PID_A, 1, BIG, 10);
    ck_assert_uint_gt(stats().bytes, dcfg.budget_bytes * 9 / 10);
    committed("a", PID_A, 3600, BIG + 100, 3, 0, 10); /* gap */
    ck_assert_int_eq(verified("a", 9, 0, 1), -1);
    ck_assert_int_eq(open_one(FK_SINCE)->after, BIG - 1);
    ck_assert_uint_eq(stats().suppressed, 0);
    stop();
}
END_TEST

START_TEST(suppressed_partition_keeps_estimate_and_cooldown)
{
    /* A suppressed entry is tiny and may sit at the LRU tail when some other
     * admission evicts: its cooldown and its footprint estimate must survive,
     * or it re-tests at once with an empty estimate and thrashes. */
    size_t s = footprint(BIG);
    start(s * 16 / 10);
    hydrate("a", PID_A, 1, BIG, 10);
    mono_ms += 10000;
    hydrate("b", PID_B, 2, BIG, 10); /* a evicted, its footprint remembered */
    mono_ms += 1000;
    ck_assert_int_eq(verified("a", 9, 0, 1), -1); /* suppressed until +30 s */
    ck_assert_uint_eq(stats().suppressed, 1);
    mono_ms += 1000;
    ck_assert_int_eq(verified("b", 9, 0, 1), BIG - 1); /* b more recent than a */
    mono_ms += 8000;
    hydrate("d", PID_D, 4, BIG, 10); /* over the cap: evicts idle entries */
    mono_ms += 1000;
    ck_assert_int_eq(verified("a", 9, 0, 1), -1);
    ck_assert_msg(open_count() == 0, "suppressed partition re-tested inside its cooldown");
    ck_assert_uint_eq(stats().suppressed, 1);
    /* after the cooldown it is tested with its real estimate: d was used 21 s
     * ago, so d goes and a is admitted */
    mono_ms += 21000;
    ck_assert_int_eq(verified("a", 9, 0, 1), -1);
    open_one(FK_META);
    stop();
}
END_TEST

START_TEST(estimate_follows_the_ring_not_its_first_load)
{
    /* a partition hydrated small and grown by its own commits, then forgotten
     * (a window change): its rebuild is gated on what it grew to */
    size_t s = footprint(BIG);
    start(s * 22 / 10);
    hydrate("b", PID_B, 2, BIG, 10);
    hydrate("a", PID_A, 1, 100, 10);
    for (size_t i = 0; i < BIG; i += 500)
        committed("a", PID_A, 3600, 100 + (int64_t)i, 5, i, 500);
    ck_assert_uint_eq(stats().vouching, 2);
    ck_assert_int_eq(verified("a", 9, 0, 1), BIG + 99);
    committed("a", PID_A, 7200, BIG + 100, 5, BIG, 10); /* window changed: forget */
    mono_ms += 1000;
    ck_assert_int_eq(verified("a", 9, 0, 1), -1);
    ck_assert_msg(open_count() == 0, "rebuild admitted on the footprint of the first load");
    ck_assert_uint_eq(stats().suppressed, 1);
    stop();
}
END_TEST

START_TEST(eviction_forgets_and_reloads_cleanly)
{
    size_t s = footprint(BIG);
    start(s * 16 / 10);
    hydrate("a", PID_A, 1, BIG, 10);
    mono_ms += 10000;
    hydrate("b", PID_B, 2, BIG, 10);
    ck_assert_uint_eq(stats().entries, 1);
    /* a commit for the evicted partition is simply not heard */
    committed("a", PID_A, 3600, BIG, 3, 0, 10);
    mono_ms += 40000;
    ck_assert_int_eq(verified("a", 9, 0, 1), -1);
    answer_meta(open_one(FK_META), PID_A, 3600, BIG + 9);
    struct rowspec rows[] = {{0, BIG, wall_ms, 1, 0}, {BIG, 10, wall_ms, 3, 0}};
    answer_rows(open_one(FK_WINDOW), rows, 2);
    ck_assert_int_eq(verified("a", 9, 0, 1), BIG + 9);
    ck_assert_int_eq(verified("a", 3, 5, 1), -1);
    ck_assert_uint_le(stats().bytes, dcfg.budget_bytes);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- sweep */

START_TEST(sweep_frees_idle_entries)
{
    nreqs = 0;
    base = event_base_new();
    qn_dedup_config_defaults(&dcfg, 64u << 20);
    dcfg.sweep_ms = 1;
    ck_assert_int_eq(qn_dedup_new(base, NULL, &dcfg, &dd), QN_OK);
    verified("p", 1, 0, 1);
    answer_meta(open_one(FK_META), PID_A, 60, 99);
    struct rowspec rows[] = {{0, 100, wall_ms, 1, 0}};
    answer_rows(open_one(FK_WINDOW), rows, 1);
    hydrate("r", PID_B, 2, 100, 1);
    mono_ms += 64000;
    wall_ms += 64000;
    verified("r", 9, 0, 1); /* r stays in use */
    event_base_loop(base, EVLOOP_ONCE);
    ck_assert_uint_eq(stats().entries, 2); /* 64 s < 60 s window + 5 s */
    mono_ms += 2000;
    wall_ms += 2000;
    event_base_loop(base, EVLOOP_ONCE);
    struct qn_dedup_stats st = stats();
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.vouching, 1);
    ck_assert_int_eq(verified("r", 9, 0, 1), 99);
    stop();
}
END_TEST

START_TEST(sweep_frees_a_suppressed_entry_after_its_cooldown)
{
    size_t s = footprint(BIG);
    nreqs = 0;
    base = event_base_new();
    qn_dedup_config_defaults(&dcfg, s * 16 / 10);
    dcfg.sweep_ms = 1;
    ck_assert_int_eq(qn_dedup_new(base, NULL, &dcfg, &dd), QN_OK);
    hydrate("a", PID_A, 1, BIG, 10);
    mono_ms += 10000;
    hydrate("b", PID_B, 2, BIG, 10);
    mono_ms += 1000;
    verified("a", 9, 0, 1);
    ck_assert_uint_eq(stats().suppressed, 1);
    /* never used again: once the cooldown and the idle time are over the
     * entry goes (a workload churning through names must not pile them up) */
    mono_ms += 3700 * 1000;
    wall_ms += 3700 * 1000;
    event_base_loop(base, EVLOOP_ONCE);
    struct qn_dedup_stats st = stats();
    ck_assert_uint_eq(st.suppressed, 0);
    ck_assert_uint_eq(st.entries, 0);
    stop();
}
END_TEST

/* Two tenants' queues of one name are two entries: hydrating one vouches
 * nothing for the other, and each entry's metadata is asked in its tenant. */
START_TEST(tenants_never_share_an_entry)
{
    start(64u << 20);
    hydrate("p", PID_A, 1, 200, 10);
    ck_assert_mem_eq(reqs[0].tenant, T1, 16);
    /* tenant T2, same queue and partition names: not vouched, its own load */
    uint8_t h[16];
    qn_dd_hash(9, 0, h);
    ck_assert_int_eq(qn_dedup_verified(dd, T2, "q", "p", h, 1), -1);
    int32_t w = 0;
    uint8_t pid[16];
    ck_assert(!qn_dedup_vouched_for(dd, T2, "q", "p", &w, pid));
    struct fake_req *m = open_one(FK_META);
    ck_assert_mem_eq(m->tenant, T2, 16);
    ck_assert_str_eq(m->queue, "q");
    ck_assert_uint_eq(stats().entries, 2);
    /* a commit of T2's partition does not move T1's watermark */
    int64_t before = verified("p", 2, 0, 1);
    ck_assert_int_eq(before, 199);
    qn_dedup_committed(dd, T2, "q", "p", PID_B, 3600, 200, wall_ms * 1000, h, 1);
    ck_assert_int_eq(verified("p", 2, 1, 1), 199);
    ck_assert_int_eq(vouch_window("p", PID_A), 3600);
    stop();
}
END_TEST

START_TEST(free_cancels_loads_in_flight)
{
    start(64u << 20);
    verified("p", 1, 0, 1);
    verified("p2", 1, 0, 1);
    ck_assert_uint_eq(open_count(), 2);
    stop(); /* asserts that nothing is left open */
}
END_TEST

Suite *qn_test_dedup_suite(void)
{
    Suite *s = suite_create("dedup");
    TCase *tc = tcase_create("dedup");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fits_at_and_past_ninety_percent);
    tcase_add_test(tc, hydration_then_vouching);
    tcase_add_test(tc, tenants_never_share_an_entry);
    tcase_add_test(tc, watermark_below_rows_read_later);
    tcase_add_test(tc, empty_window_vouches_the_allocator_watermark);
    tcase_add_test(tc, commits_extend_the_watermark);
    tcase_add_test(tc, gap_declines_then_catches_up);
    tcase_add_test(tc, catchup_with_a_missing_row_rebuilds_fully);
    tcase_add_test(tc, commits_during_hydration_are_applied);
    tcase_add_test(tc, commit_gap_during_hydration_then_catchup);
    tcase_add_test(tc, too_many_pending_commits_leave_a_gap);
    tcase_add_test(tc, overlap_forgets_everything);
    tcase_add_test(tc, window_change_in_a_result_rehydrates);
    tcase_add_test(tc, window_change_during_hydration_restarts);
    tcase_add_test(tc, partition_id_change_in_a_result_forgets);
    tcase_add_test(tc, forgotten_refresh_answer_is_dropped);
    tcase_add_test(tc, meta_refresh_sees_a_window_change);
    tcase_add_test(tc, meta_refresh_sees_a_new_partition);
    tcase_add_test(tc, unchanged_meta_refresh_keeps_vouching);
    tcase_add_test(tc, load_failures_retry_on_next_use);
    tcase_add_test(tc, missing_partition_then_first_commit);
    tcase_add_test(tc, queue_without_dedup_reads_meta_once_per_ttl);
    tcase_add_test(tc, expiry_keeps_the_window_and_the_slack);
    tcase_add_test(tc, suppression_cooldown_and_recent_guard);
    tcase_add_test(tc, recently_used_entries_are_never_evicted);
    tcase_add_test(tc, growth_past_the_budget_suppresses_the_grower);
    tcase_add_test(tc, new_partition_never_suppressed_on_first_contact);
    tcase_add_test(tc, gap_catchup_is_never_gated);
    tcase_add_test(tc, suppressed_partition_keeps_estimate_and_cooldown);
    tcase_add_test(tc, estimate_follows_the_ring_not_its_first_load);
    tcase_add_test(tc, eviction_forgets_and_reloads_cleanly);
    tcase_add_test(tc, sweep_frees_idle_entries);
    tcase_add_test(tc, sweep_frees_a_suppressed_entry_after_its_cooldown);
    tcase_add_test(tc, free_cancels_loads_in_flight);
    suite_add_tcase(s, tc);
    return s;
}
