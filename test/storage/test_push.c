/*
 * test_push.c - push.c against the real procedures: queued verdicts, duplicate
 * verdicts with the original offsets, strict pushes, bundles across partitions in
 * input order, segment_at_v1, concurrent pushes through the pool, and pushes by
 * partition id once the store knows the ids (stale ids found again by name).
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
    CI = qt_db_schema("qn_storage_push");
    S = qt_store(B, CI, 4, 8);
}

static void teardown(void)
{
    qn_store_free(S);
    event_base_free(B);
    free(CI);
}

START_TEST(queued_then_duplicates)
{
    struct qt_seg a, b, mixed;
    qt_seg_make(&a, 3, "tx", 0);
    qt_seg_make(&b, 2, "tx", 100);
    qt_seg_make(&mixed, 3, "tx", 1); /* tx-1, tx-2 already pushed, tx-3 new */
    struct qt_push_out o;
    int64_t before_us = (int64_t)qn_now_ms() * 1000;
    ck_assert_int_eq(qt_push1(B, S, "orders", "p1", &a, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_QUEUED);
    ck_assert_int_eq(o.segs[0].base, 0);
    ck_assert_int_eq(o.segs[0].window, 3600);
    ck_assert_int_ge(o.segs[0].created_at_us, before_us - 5000000);
    uint8_t zero[16] = {0}, pid[16];
    ck_assert(memcmp(o.segs[0].pid, zero, 16) != 0);
    memcpy(pid, o.segs[0].pid, 16);

    ck_assert_int_eq(qt_push1(B, S, "orders", "p1", &b, &o), QN_OK);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_QUEUED);
    ck_assert_int_eq(o.segs[0].base, 3);
    ck_assert_mem_eq(o.segs[0].pid, pid, 16);

    /* the same segment again: every frame is a duplicate of its original */
    ck_assert_int_eq(qt_push1(B, S, "orders", "p1", &a, &o), QN_OK);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_DUPLICATE);
    ck_assert_uint_eq(o.segs[0].ndups, 3);
    for (uint32_t i = 0; i < 3; i++) {
        ck_assert_uint_eq(o.segs[0].dups[i].idx, i);
        ck_assert_int_eq(o.segs[0].dups[i].offset, i);
    }
    /* partly duplicate: nothing written, the dups say which */
    ck_assert_int_eq(qt_push1(B, S, "orders", "p1", &mixed, &o), QN_OK);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_DUPLICATE);
    ck_assert_uint_eq(o.segs[0].ndups, 2);
    ck_assert_uint_eq(o.segs[0].dups[0].idx, 0);
    ck_assert_int_eq(o.segs[0].dups[0].offset, 1);
    ck_assert_uint_eq(o.segs[0].dups[1].idx, 1);
    ck_assert_int_eq(o.segs[0].dups[1].offset, 2);
    char *last = qt_value(CI, "SELECT last_offset FROM queen.log_partitions WHERE name = 'p1'");
    ck_assert_str_eq(last, "4");
    free(last);
    qt_seg_free(&a);
    qt_seg_free(&b);
    qt_seg_free(&mixed);
}
END_TEST

START_TEST(strict_duplicate_fails_the_call)
{
    struct qt_seg a, c;
    qt_seg_make(&a, 2, "s", 0);
    qt_seg_make(&c, 2, "s", 50);
    struct qt_push_out o;
    ck_assert_int_eq(qt_push1(B, S, "strictq", NULL, &a, &o), QN_OK);
    ck_assert_int_eq(o.segs[0].base, 0);
    /* a bundle of a new segment and a duplicate, strict: nothing is written */
    struct qn_push_segment two[2] = {qt_push_seg(&c, "strictq", NULL),
                                     qt_push_seg(&a, "strictq", NULL)};
    ck_assert_int_eq(qt_push(B, S, two, 2, true, &o), QN_EDUPLICATE);
    ck_assert_str_eq(o.s.sqlstate, "23505");
    ck_assert_str_eq(o.s.message, "duplicate transaction id in segment 1");
    ck_assert_uint_eq(o.n, 0);
    char *last = qt_value(CI, "SELECT last_offset FROM queen.log_partitions "
                              "WHERE name = 'Default'");
    ck_assert_str_eq(last, "1");
    free(last);
    /* not strict: the new one is queued, the duplicate reported */
    ck_assert_int_eq(qt_push(B, S, two, 2, false, &o), QN_OK);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_QUEUED);
    ck_assert_int_eq(o.segs[0].base, 2);
    ck_assert_int_eq(o.segs[1].status, QN_PUSH_DUPLICATE);
    ck_assert_uint_eq(o.segs[1].ndups, 2);
    qt_seg_free(&a);
    qt_seg_free(&c);
}
END_TEST

START_TEST(bundle_in_input_order)
{
    struct qt_seg s[5];
    for (int i = 0; i < 5; i++)
        qt_seg_make(&s[i], (uint32_t)i + 1, "b", (uint64_t)i * 100);
    struct qn_push_segment segs[5] = {
        qt_push_seg(&s[0], "bundle", "z"), qt_push_seg(&s[1], "bundle", "a"),
        qt_push_seg(&s[2], "bundle", "z"), qt_push_seg(&s[3], "other.ns.q", "a"),
        qt_push_seg(&s[4], "bundle", "a")};
    segs[2].verified = 0; /* the broker vouches up to offset 0 */
    struct qt_push_out o;
    ck_assert_int_eq(qt_push(B, S, segs, 5, false, &o), QN_OK);
    ck_assert_uint_eq(o.n, 5);
    static const int64_t bases[5] = {0, 0, 1, 0, 2};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(o.segs[i].status, QN_PUSH_QUEUED);
        ck_assert_int_eq(o.segs[i].base, bases[i]);
    }
    ck_assert_mem_eq(o.segs[0].pid, o.segs[2].pid, 16);
    ck_assert_mem_eq(o.segs[1].pid, o.segs[4].pid, 16);
    ck_assert(memcmp(o.segs[0].pid, o.segs[1].pid, 16) != 0);
    ck_assert(memcmp(o.segs[1].pid, o.segs[3].pid, 16) != 0);
    /* one commit for the whole bundle; each segment stamped after its own
     * partition's lock: the stamps of one partition ascend in offset order */
    for (int i = 0; i < 5; i++)
        ck_assert_int_gt(o.segs[i].created_at_us, 0);
    ck_assert_int_ge(o.segs[2].created_at_us, o.segs[0].created_at_us);
    ck_assert_int_ge(o.segs[4].created_at_us, o.segs[1].created_at_us);
    char *ns = qt_value(CI, "SELECT namespace || '/' || task FROM queen.queues "
                            "WHERE name = 'other.ns.q'");
    ck_assert_str_eq(ns, "other/ns");
    free(ns);
    for (int i = 0; i < 5; i++)
        qt_seg_free(&s[i]);
}
END_TEST

struct seg_out {
    struct qt_status s;
    size_t n;
    int64_t base[8], end[8];
    size_t len[8];
    bool same_blob[8];
    const struct qt_seg *want[8];
};

static void segs_cb(void *ud, const struct qn_store_status *st, const struct qn_segments_result *r)
{
    struct seg_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 8; i++) {
        o->base[i] = r->rows[i].base;
        o->end[i] = r->rows[i].end;
        o->len[i] = r->rows[i].blob_len;
        const struct qt_seg *w = o->want[i];
        o->same_blob[i] = w && w->blob_len == r->rows[i].blob_len &&
                          memcmp(w->blob, r->rows[i].blob, w->blob_len) == 0;
    }
}

START_TEST(segment_at_reads_back)
{
    struct qt_seg a, b;
    qt_seg_make(&a, 4, "r", 0);
    qt_seg_make(&b, 4, "r", 10);
    struct qt_push_out o;
    ck_assert_int_eq(qt_push1(B, S, "readq", NULL, &a, &o), QN_OK);
    uint8_t pid[16];
    memcpy(pid, o.segs[0].pid, 16);
    ck_assert_int_eq(qt_push1(B, S, "readq", NULL, &b, &o), QN_OK);
    struct seg_out so;
    memset(&so, 0, sizeof so);
    so.want[0] = &a;
    so.want[1] = &b;
    const int64_t offs[5] = {6, 0, 3, 100, -5};
    ck_assert_int_eq(qn_store_segment_at(S, pid, offs, 5, NULL, segs_cb, &so, NULL), QN_OK);
    ck_assert(qt_run_until(B, &so.s.done, 10000));
    ck_assert_int_eq(so.s.code, QN_OK);
    ck_assert_uint_eq(so.n, 2);
    ck_assert_int_eq(so.base[0], 0);
    ck_assert_int_eq(so.end[0], 3);
    ck_assert_int_eq(so.base[1], 4);
    ck_assert_int_eq(so.end[1], 7);
    ck_assert(so.same_blob[0]);
    ck_assert(so.same_blob[1]);
    qt_seg_free(&a);
    qt_seg_free(&b);
}
END_TEST

START_TEST(bad_input)
{
    struct qt_seg a;
    qt_seg_make(&a, 1, "x", 0);
    struct qt_push_out o;
    struct qn_push_segment p = qt_push_seg(&a, "q", NULL);
    p.count = 0;
    ck_assert_int_eq(qt_push(B, S, &p, 1, false, &o), QN_EINVAL);
    ck_assert_int_eq(qt_push(B, S, &p, 0, false, &o), QN_EINVAL);
    p = qt_push_seg(&a, "", NULL);
    ck_assert_int_eq(qt_push(B, S, &p, 1, false, &o), QN_EINVAL);
    char longname[300];
    memset(longname, 'q', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    p = qt_push_seg(&a, longname, NULL);
    ck_assert_int_eq(qt_push(B, S, &p, 1, false, &o), QN_EDB);
    ck_assert_str_eq(o.s.message, "bad queue name in segment 0");
    ck_assert_int_eq(qn_store_push(S, &p, 1, false, NULL, NULL, NULL, NULL), QN_EINVAL);
    qt_seg_free(&a);
}
END_TEST

static uint64_t statements(qn_store *st)
{
    struct qn_store_stats x;
    qn_store_get_stats(st, &x);
    return x.statements;
}

/* The first push to a partition goes by names (push_v1); once the store knows
 * every partition id of a bundle, the bundle is one push_one_v1 per segment in
 * one sync. A remembered id that no longer exists (the queue was deleted and
 * made again) is found again by name, and its watermark is not trusted. */
START_TEST(pushes_by_id_once_known)
{
    struct qt_seg a, b, c;
    qt_seg_make(&a, 2, "id-a", 0);
    qt_seg_make(&b, 3, "id-b", 0);
    qt_seg_make(&c, 1, "id-c", 0);
    struct qt_push_out o;
    uint64_t n0 = statements(S);
    ck_assert_int_eq(qt_push1(B, S, "byid", "p0", &a, &o), QN_OK);
    ck_assert_uint_eq(statements(S) - n0, 1);
    uint8_t pid0[16];
    memcpy(pid0, o.segs[0].pid, 16);
    struct qn_push_segment three[3] = {qt_push_seg(&b, "byid", "p1"), qt_push_seg(&c, "byid", "p0"),
                                       qt_push_seg(&c, "byid", "p1")};
    three[1].verified = 1;
    three[2].verified = INT64_MAX;
    /* p1 unknown: one push_v1 */
    n0 = statements(S);
    ck_assert_int_eq(qt_push(B, S, three, 3, false, &o), QN_OK);
    ck_assert_uint_eq(statements(S) - n0, 1);
    ck_assert_int_eq(o.segs[0].base, 0);
    ck_assert_int_eq(o.segs[1].base, 2);
    ck_assert_int_eq(o.segs[2].base, 3);
    /* all known: three push_one_v1, results in input order; the duplicates of
     * the second segment (c again, in p0) are found by the probe (unverified) */
    three[1].verified = -1;
    n0 = statements(S);
    ck_assert_int_eq(qt_push(B, S, three, 3, false, &o), QN_OK);
    ck_assert_uint_eq(statements(S) - n0, 3);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_DUPLICATE);
    ck_assert_uint_eq(o.segs[0].ndups, 3);
    ck_assert_int_eq(o.segs[0].dups[2].offset, 2);
    ck_assert_int_eq(o.segs[1].status, QN_PUSH_DUPLICATE);
    ck_assert_uint_eq(o.segs[1].ndups, 1);
    ck_assert_int_eq(o.segs[1].dups[0].offset, 2);
    ck_assert_mem_eq(o.segs[1].pid, pid0, 16);
    ck_assert_int_eq(o.segs[2].status, QN_PUSH_QUEUED); /* vouched by INT64_MAX */
    ck_assert_int_eq(o.segs[2].base, 4);
    /* a watermark vouched for another partition is not sent */
    struct qn_push_segment p = qt_push_seg(&a, "byid", "p0");
    p.verified = INT64_MAX;
    p.cache_pid = o.segs[2].pid; /* p1's id */
    ck_assert_int_eq(qt_push(B, S, &p, 1, false, &o), QN_OK);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_DUPLICATE);

    /* the queue deleted and made again by another store: the remembered id is
     * gone; the push finds the new partition by name, probes it whatever the
     * watermark says, and the store remembers the new id */
    char *gone = qt_value(CI, "SELECT qn.delete_queue_v1('byid')");
    ck_assert_str_eq(gone, "t");
    free(gone);
    qn_store *s2 = qt_store(B, CI, 1, 4);
    ck_assert_int_eq(qt_push1(B, s2, "byid", "p0", &b, &o), QN_OK);
    uint8_t pid0b[16];
    memcpy(pid0b, o.segs[0].pid, 16);
    ck_assert(memcmp(pid0b, pid0, 16) != 0);
    qn_store_free(s2);
    p = qt_push_seg(&b, "byid", "p0");
    p.verified = 100;
    n0 = statements(S);
    ck_assert_int_eq(qt_push(B, S, &p, 1, false, &o), QN_OK);
    ck_assert_uint_eq(statements(S) - n0, 1);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_DUPLICATE);
    ck_assert_mem_eq(o.segs[0].pid, pid0b, 16);
    p = qt_push_seg(&c, "byid", "p0");
    ck_assert_int_eq(qt_push(B, S, &p, 1, false, &o), QN_OK);
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_QUEUED);
    ck_assert_int_eq(o.segs[0].base, 3);
    ck_assert_mem_eq(o.segs[0].pid, pid0b, 16);
    char *last = qt_value(CI, "SELECT string_agg(p.name || '=' || p.last_offset, ',' ORDER BY "
                              "p.name) FROM queen.log_partitions p JOIN queen.queues q ON "
                              "q.id = p.queue_id WHERE q.name = 'byid'");
    ck_assert_str_eq(last, "p0=3");
    free(last);
    qt_seg_free(&a);
    qt_seg_free(&b);
    qt_seg_free(&c);
}
END_TEST

/* pid_cache 0: every push goes by names. */
START_TEST(pid_cache_off_pushes_by_name)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 1;
    cfg.pid_cache = 0;
    qn_store *s0 = qt_store_cfg(B, &cfg);
    struct qt_seg a, b;
    qt_seg_make(&a, 1, "off-a", 0);
    qt_seg_make(&b, 1, "off-b", 0);
    struct qn_push_segment two[2] = {qt_push_seg(&a, "nocache", "x"),
                                     qt_push_seg(&b, "nocache", "y")};
    struct qt_push_out o;
    for (int i = 0; i < 2; i++) {
        uint64_t n0 = statements(s0);
        ck_assert_int_eq(qt_push(B, s0, two, 2, false, &o), QN_OK);
        ck_assert_uint_eq(statements(s0) - n0, 1);
    }
    ck_assert_int_eq(o.segs[0].status, QN_PUSH_DUPLICATE);
    cfg.pid_cache = (1 << 24) + 1;
    qn_store *bad = NULL;
    ck_assert_int_eq(qn_store_new(B, &cfg, &bad), QN_EINVAL);
    qn_store_free(s0);
    qt_seg_free(&a);
    qt_seg_free(&b);
}
END_TEST

static int done_count;

static void count_cb(void *ud, const struct qn_store_status *st, const struct qn_push_result *r)
{
    int64_t *base = ud;
    ck_assert_int_eq(st->code, QN_OK);
    *base = r->segs[0].base;
    done_count++;
}

START_TEST(concurrent_pushes_get_disjoint_ranges)
{
    enum { N = 64 };
    struct qt_seg s[N];
    int64_t bases[N];
    done_count = 0;
    for (int i = 0; i < N; i++) {
        qt_seg_make(&s[i], 10, "c", (uint64_t)i * 10);
        struct qn_push_segment p = qt_push_seg(&s[i], "conc", "only");
        ck_assert_int_eq(qn_store_push(S, &p, 1, false, NULL, count_cb, &bases[i], NULL), QN_OK);
    }
    ck_assert(qt_run_until_count(B, &done_count, N, 20000));
    bool seen[N] = {false};
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(bases[i] % 10, 0);
        ck_assert_int_lt(bases[i] / 10, N);
        ck_assert(!seen[bases[i] / 10]);
        seen[bases[i] / 10] = true;
        qt_seg_free(&s[i]);
    }
    struct qn_store_stats st;
    qn_store_get_stats(S, &st);
    ck_assert_uint_gt(st.in_flight_peak, 1);
}
END_TEST

Suite *qn_test_push_suite(void)
{
    Suite *s = suite_create("push");
    TCase *t = tcase_create("push");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, queued_then_duplicates);
    tcase_add_test(t, strict_duplicate_fails_the_call);
    tcase_add_test(t, bundle_in_input_order);
    tcase_add_test(t, segment_at_reads_back);
    tcase_add_test(t, bad_input);
    tcase_add_test(t, concurrent_pushes_get_disjoint_ranges);
    tcase_add_test(t, pushes_by_id_once_known);
    tcase_add_test(t, pid_cache_off_pushes_by_name);
    suite_add_tcase(s, t);
    return s;
}
