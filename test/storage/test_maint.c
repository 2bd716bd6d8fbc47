/*
 * test_maint.c - maint.c: the dedup cache reads (partition_meta_v1,
 * txns_window_v1) and the retention loop's procedures (work list, retention,
 * sidecar purge, max-wait eviction, dead partitions, cleanup, metrics purge).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "queen/error.h"
#include "queen/ids.h"
#include "storage_test.h"
#include "store_int.h"

static struct event_base *B;
static char *CI;
static qn_store *S;

static void setup(void)
{
    B = event_base_new();
    CI = qt_db_schema("qn_storage_maint");
    S = qt_store(B, CI, 2, 8);
}

static void teardown(void)
{
    qn_store_free(S);
    event_base_free(B);
    free(CI);
}

static struct qt_status ms;
static bool have_meta;
static struct qn_partition_meta meta;

static void meta_cb(void *ud, const struct qn_store_status *st, const struct qn_partition_meta *m)
{
    (void)ud;
    qt_copy_status(&ms, st);
    have_meta = m != NULL;
    if (m)
        meta = *m;
}

struct win_out {
    struct qt_status s;
    size_t n;
    int64_t base[4], end[4];
    size_t len[4];
    bool same[4];
    const uint8_t *want;
};

static void win_cb(void *ud, const struct qn_store_status *st, const struct qn_segments_result *r)
{
    struct win_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 4; i++) {
        o->base[i] = r->rows[i].base;
        o->end[i] = r->rows[i].end;
        o->len[i] = r->rows[i].blob_len;
        o->same[i] = o->want && memcmp(r->rows[i].blob, o->want, r->rows[i].blob_len) == 0;
    }
}

START_TEST(dedup_cache_reads)
{
    struct qt_seg a;
    qt_seg_make(&a, 3, "m", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "cacheq", "c", &a, &po), QN_OK);
    memset(&ms, 0, sizeof ms);
    ck_assert_int_eq(qn_store_partition_meta(S, "cacheq", "c", NULL, meta_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &ms.done, 10000));
    ck_assert_int_eq(ms.code, QN_OK);
    ck_assert(have_meta);
    ck_assert_mem_eq(meta.pid, po.segs[0].pid, 16);
    ck_assert_int_eq(meta.window, 3600);
    ck_assert_int_eq(meta.last_offset, 2);
    ck_assert_int_eq(meta.txns_start, 0);
    memset(&ms, 0, sizeof ms);
    ck_assert_int_eq(qn_store_partition_meta(S, "cacheq", "nope", NULL, meta_cb, NULL, NULL),
                     QN_OK);
    ck_assert(qt_run_until(B, &ms.done, 10000));
    ck_assert_int_eq(ms.code, QN_OK);
    ck_assert(!have_meta);

    struct win_out w;
    memset(&w, 0, sizeof w);
    w.want = a.hashes;
    ck_assert_int_eq(qn_store_txns_window(S, po.segs[0].pid, 3600, NULL, win_cb, &w, NULL), QN_OK);
    ck_assert(qt_run_until(B, &w.s.done, 10000));
    ck_assert_int_eq(w.s.code, QN_OK);
    ck_assert_uint_eq(w.n, 1);
    ck_assert_int_eq(w.base[0], 0);
    ck_assert_int_eq(w.end[0], 2);
    ck_assert_uint_eq(w.len[0], 48);
    ck_assert(w.same[0]);
    qt_seg_free(&a);
}
END_TEST

struct list_out {
    struct qt_status s;
    size_t n;
    struct qn_maint_item items[8];
};

static void list_cb(void *ud, const struct qn_store_status *st, const struct qn_maint_list *r)
{
    struct list_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 8; i++)
        o->items[i] = r->items[i];
}

struct step_out {
    struct qt_status s;
    struct qn_maint_step r;
};

static void step_cb(void *ud, const struct qn_store_status *st, const struct qn_maint_step *r)
{
    struct step_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r)
        o->r = *r;
}

static struct qt_status bs;
static bool bval;
static int64_t ival;

static void bool_cb(void *ud, const struct qn_store_status *st, bool v)
{
    (void)ud;
    qt_copy_status(&bs, st);
    bval = v;
}

static void int_cb(void *ud, const struct qn_store_status *st, int64_t v)
{
    (void)ud;
    qt_copy_status(&bs, st);
    ival = v;
}

#define WAIT(x) ck_assert(qt_run_until(B, &(x).done, 10000))

START_TEST(retention_loop_procedures)
{
    struct qt_seg a, b;
    qt_seg_make(&a, 2, "r", 0);
    qt_seg_make(&b, 2, "r", 10);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "old", NULL, &a, &po), QN_OK);
    ck_assert_int_eq(qt_push1(B, S, "old", NULL, &b, &po), QN_OK);
    uint8_t pid[16];
    memcpy(pid, po.segs[0].pid, 16);
    int64_t future = ((int64_t)qn_now_ms() + 10LL * 86400 * 1000) * 1000; /* in 10 days */

    /* phase 2 (sidecar purge) lists the partition once its window is over */
    struct list_out l;
    memset(&l, 0, sizeof l);
    ck_assert_int_eq(qn_store_maint_worklist(S, future, 2, 100, NULL, list_cb, &l, NULL), QN_OK);
    WAIT(l.s);
    ck_assert_msg(l.s.code == QN_OK, "%s", l.s.message);
    ck_assert_uint_eq(l.n, 1);
    ck_assert_mem_eq(l.items[0].pid, pid, 16);
    ck_assert_int_ne(l.items[0].cutoff_us, QN_STORE_NO_TS);
    ck_assert_int_eq(l.items[0].all_cutoff_us, QN_STORE_NO_TS);

    struct step_out so;
    memset(&so, 0, sizeof so);
    ck_assert_int_eq(
        qn_store_txns_purge_step(S, pid, l.items[0].cutoff_us, 1, NULL, step_cb, &so, NULL), QN_OK);
    WAIT(so.s);
    ck_assert_msg(so.s.code == QN_OK, "%s", so.s.message);
    ck_assert_int_eq(so.r.deleted, 1);
    ck_assert_int_eq(so.r.new_start, 2);
    ck_assert(!so.r.done);

    /* retention rule 1 with a cutoff in the future deletes both segments */
    memset(&so, 0, sizeof so);
    ck_assert_int_eq(
        qn_store_retention_step(S, pid, future, QN_STORE_NO_TS, 100, NULL, step_cb, &so, NULL),
        QN_OK);
    WAIT(so.s);
    ck_assert_msg(so.s.code == QN_OK, "%s", so.s.message);
    ck_assert_int_eq(so.r.deleted, 2);
    ck_assert_int_eq(so.r.frames, 4);
    ck_assert_int_eq(so.r.new_start, 4);
    ck_assert(so.r.done);

    memset(&so, 0, sizeof so);
    ck_assert_int_eq(qn_store_evict_max_wait_step(S, pid, future, 100, NULL, step_cb, &so, NULL),
                     QN_OK);
    WAIT(so.s);
    ck_assert_int_eq(so.s.code, QN_OK);
    ck_assert_int_eq(so.r.deleted, 0);
    ck_assert(so.r.done);

    memset(&bs, 0, sizeof bs);
    ck_assert_int_eq(qn_store_partition_dead(S, pid, future, NULL, bool_cb, NULL, NULL), QN_OK);
    WAIT(bs);
    ck_assert_int_eq(bs.code, QN_OK);
    uint8_t ghost[16];
    qt_bytes16(4, ghost);
    memset(&bs, 0, sizeof bs);
    ck_assert_int_eq(qn_store_partition_dead(S, ghost, future, NULL, bool_cb, NULL, NULL), QN_OK);
    WAIT(bs);
    ck_assert_int_eq(bs.code, QN_OK);
    ck_assert(!bval);

    memset(&so, 0, sizeof so);
    ck_assert_int_eq(qn_store_partition_cleanup_step(S, future, 100, NULL, step_cb, &so, NULL),
                     QN_OK);
    WAIT(so.s);
    ck_assert_msg(so.s.code == QN_OK, "%s", so.s.message);
    ck_assert(so.r.done);

    memset(&bs, 0, sizeof bs);
    ck_assert_int_eq(qn_store_metrics_purge(S, future, NULL, int_cb, NULL, NULL), QN_OK);
    WAIT(bs);
    ck_assert_int_eq(bs.code, QN_OK);
    ck_assert_int_ge(ival, 1); /* the retention step wrote history */

    ck_assert_int_eq(qn_store_maint_worklist(S, future, 4, 100, NULL, list_cb, &l, NULL),
                     QN_EINVAL);
    qt_seg_free(&a);
    qt_seg_free(&b);
}
END_TEST

Suite *qn_test_maint_suite(void)
{
    Suite *s = suite_create("maint");
    TCase *t = tcase_create("maint");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, dedup_cache_reads);
    tcase_add_test(t, retention_loop_procedures);
    suite_add_tcase(s, t);
    return s;
}
