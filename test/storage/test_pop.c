/*
 * test_pop.c - pop.c against pop_v1 / pop_one_v1 / pop_discover_v1 /
 * has_pending_v1: leased segments with slicing bounds, a named pop by id once
 * the id is known, auto-ack, discovery, the long-poll gate.
 */
#include <stdio.h>
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
    CI = qt_db_schema("qn_storage_pop");
    S = qt_store(B, CI, 2, 8);
}

static void teardown(void)
{
    qn_store_free(S);
    event_base_free(B);
    free(CI);
}

static struct qt_status bs;
static bool bval;

static void bool_cb(void *ud, const struct qn_store_status *st, bool v)
{
    (void)ud;
    qt_copy_status(&bs, st);
    bval = v;
}

static bool has_pending(const char *q, const char *p, const char *g)
{
    memset(&bs, 0, sizeof bs);
    ck_assert_int_eq(qn_store_has_pending(S, q, p, g, NULL, bool_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &bs.done, 10000));
    ck_assert_int_eq(bs.code, QN_OK);
    return bval;
}

START_TEST(pop_leases_pushed_segments)
{
    struct qt_seg a, b;
    qt_seg_make(&a, 3, "p", 0);
    qt_seg_make(&b, 5, "p", 10);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "jobs", "P", &a, &po), QN_OK);
    ck_assert_int_eq(qt_push1(B, S, "jobs", "P", &b, &po), QN_OK);
    ck_assert(has_pending("jobs", "P", ""));

    static struct qt_pop_out o;
    struct qn_pop_args args = qt_pop_args("jobs", "P", "", "w-1", 6);
    int64_t now_us = (int64_t)qn_now_ms() * 1000;
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 2);
    ck_assert_str_eq(o.segs[0].queue, "jobs");
    ck_assert_str_eq(o.segs[0].partition, "P");
    ck_assert_mem_eq(o.segs[0].pid, po.segs[0].pid, 16);
    ck_assert_int_eq(o.segs[0].base, 0);
    ck_assert_int_eq(o.segs[0].start_idx, 0);
    ck_assert_int_eq(o.segs[0].take, 3);
    ck_assert_uint_eq(o.segs[0].blob_len, a.blob_len);
    ck_assert_mem_eq(o.segs[0].blob, a.blob, a.blob_len);
    ck_assert_int_eq(o.segs[1].base, 3);
    ck_assert_int_eq(o.segs[1].start_idx, 0);
    ck_assert_int_eq(o.segs[1].take, 3); /* budget 6: half of the second segment */
    /* leased for the queue's lease_time (60 s) */
    ck_assert_int_gt(o.segs[0].lease_expires_at_us, now_us + 50 * 1000000LL);
    ck_assert_int_lt(o.segs[0].lease_expires_at_us, now_us + 70 * 1000000LL);
    /* the lease is held: another worker gets nothing */
    args.worker = "w-2";
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 0);
    qt_seg_free(&a);
    qt_seg_free(&b);
}
END_TEST

/* A pop naming a partition whose id the store knows (learnt from a push or a
 * pop) goes by id (pop_one_v1); the pop result teaches ids too. A remembered id
 * that no longer exists (the queue was deleted and made again by another
 * store) is found again by names, and the new id is remembered. */
START_TEST(named_pop_goes_by_id_once_known)
{
    struct qn__pidcache *pc = qn__store_pids(S);
    struct qt_seg a, b;
    qt_seg_make(&a, 2, "one-a", 0);
    qt_seg_make(&b, 3, "one-b", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "popone", "P", &a, &po), QN_OK);
    uint8_t pid[16];
    memcpy(pid, po.segs[0].pid, 16);
    static struct qt_pop_out o;
    struct qn_pop_args args = qt_pop_args("popone", "P", "g", "w-1", 10);
    uint64_t h0 = pc->hits;
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(pc->hits, h0 + 1); /* by id */
    ck_assert_uint_eq(o.n, 1);
    ck_assert_int_eq(o.segs[0].take, 2);
    ck_assert_mem_eq(o.segs[0].pid, pid, 16);
    ck_assert_str_eq(o.segs[0].partition, "P");
    /* leased: nothing more by id either */
    args.worker = "w-2";
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 0);

    /* deleted and made again elsewhere: S still remembers the old id */
    char *gone = qt_value(CI, "SELECT qn.delete_queue_v1('popone')");
    ck_assert_str_eq(gone, "t");
    free(gone);
    qn_store *s2 = qt_store(B, CI, 1, 4);
    ck_assert_int_eq(qt_push1(B, s2, "popone", "P", &b, &po), QN_OK);
    qn_store_free(s2);
    uint8_t newpid[16];
    memcpy(newpid, po.segs[0].pid, 16);
    ck_assert(memcmp(newpid, pid, 16) != 0);
    args.worker = "w-3";
    h0 = pc->hits;
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(pc->hits, h0 + 1); /* tried the stale id... */
    ck_assert_uint_eq(o.n, 1);           /* ...and found the new partition by names */
    ck_assert_int_eq(o.segs[0].take, 3);
    ck_assert_mem_eq(o.segs[0].pid, newpid, 16);
    uint8_t cached[16];
    ck_assert(qn__pidcache_get(pc, qn__default_tenant, "popone", "P", cached));
    ck_assert_mem_eq(cached, newpid, 16);
    qt_seg_free(&a);
    qt_seg_free(&b);
}
END_TEST

START_TEST(auto_ack_moves_the_cursor)
{
    struct qt_seg a;
    qt_seg_make(&a, 4, "aa", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "auto", NULL, &a, &po), QN_OK);
    static struct qt_pop_out o;
    struct qn_pop_args args = qt_pop_args("auto", NULL, "g1", NULL, 100);
    args.auto_ack = true;
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    ck_assert_int_eq(o.segs[0].take, 4);
    ck_assert_int_eq(o.segs[0].lease_expires_at_us, 0);
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 0);
    /* another group starts from the beginning ('all') */
    args.group = "g2";
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    /* 'new' subscribers of a third group see nothing already there */
    args.group = "g3";
    args.sub_mode = QN_SUB_NEW;
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 0);
    qt_seg_free(&a);
}
END_TEST

START_TEST(discovery_and_any_partition)
{
    struct qt_seg a, b;
    qt_seg_make(&a, 2, "d", 0);
    qt_seg_make(&b, 2, "d", 10);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "billing.invoice.eu", "x", &a, &po), QN_OK);
    ck_assert_int_eq(qt_push1(B, S, "billing.invoice.us", "y", &b, &po), QN_OK);
    static struct qt_pop_out o;
    struct qn_pop_args args = qt_pop_args(NULL, NULL, "grp", "w-d", 100);
    args.namespace_ = "billing";
    args.max_partitions = 4;
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 2);
    bool eu = false, us = false;
    for (size_t i = 0; i < o.n; i++) {
        eu = eu || (strcmp(o.segs[i].queue, "billing.invoice.eu") == 0 &&
                    strcmp(o.segs[i].partition, "x") == 0);
        us = us || (strcmp(o.segs[i].queue, "billing.invoice.us") == 0 &&
                    strcmp(o.segs[i].partition, "y") == 0);
    }
    ck_assert(eu && us);
    /* a queue, any partition */
    struct qt_seg c;
    qt_seg_make(&c, 1, "d", 20);
    ck_assert_int_eq(qt_push1(B, S, "anyq", "k", &c, &po), QN_OK);
    args = qt_pop_args("anyq", NULL, "", "w-any", 10);
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    ck_assert_str_eq(o.segs[0].partition, "k");
    /* neither a queue nor a namespace/task: refused before the database */
    args = qt_pop_args(NULL, NULL, "", "w", 10);
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_EINVAL);
    args = qt_pop_args("q", NULL, "", "w", 0);
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_EINVAL);
    qt_seg_free(&a);
    qt_seg_free(&b);
    qt_seg_free(&c);
}
END_TEST

START_TEST(empty_and_missing)
{
    static struct qt_pop_out o;
    struct qn_pop_args args = qt_pop_args("nothing-here", NULL, "", "w", 10);
    ck_assert_int_eq(qt_pop(B, S, &args, &o), QN_OK);
    ck_assert_uint_eq(o.n, 0);
    ck_assert(has_pending("never-seen", NULL, "g")); /* first contact: let pop decide */
    ck_assert_int_eq(qn_store_has_pending(S, NULL, NULL, NULL, NULL, bool_cb, NULL, NULL),
                     QN_EINVAL);
}
END_TEST

/* ---------------------------------------------------------------- bundled leases */

struct bundle_out {
    struct qt_status s;
    size_t n;
    size_t rows[8];
    char part[8][4][16];
    int32_t take[8][4];
    int64_t expires[8];
};

static void bundle_cb(void *ud, const struct qn_store_status *st, const struct qn_pop_result *res,
                      size_t n)
{
    struct bundle_out *o = ud;
    qt_copy_status(&o->s, st);
    o->n = n;
    for (size_t k = 0; res != NULL && k < n && k < 8; k++) {
        o->rows[k] = res[k].n;
        for (size_t i = 0; i < res[k].n && i < 4; i++) {
            snprintf(o->part[k][i], sizeof o->part[k][i], "%s", res[k].segs[i].partition);
            o->take[k][i] = res[k].segs[i].take;
            o->expires[k] = res[k].segs[i].lease_expires_at_us;
        }
    }
}

static int bundle(const struct qn_pop_member *m, size_t n, const uint8_t *tenant,
                  struct bundle_out *o)
{
    memset(o, 0, sizeof *o);
    struct qn_call_opts opts = {0, tenant, NULL};
    int rc = qn_store_pop_bundle(S, m, n, &opts, bundle_cb, o, NULL);
    if (rc != QN_OK)
        return rc;
    ck_assert(qt_run_until(B, &o->s.done, 10000));
    return o->s.code;
}

/* The worker holding group's lease on queue's partition, "" when none. */
static char *holder(const char *queue, const char *part, const char *group)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT coalesce((SELECT c.worker_id FROM queen.log_consumers c "
             "JOIN queen.log_partitions p ON p.id = c.partition_id "
             "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '%s' AND p.name = '%s' "
             "AND c.consumer_group = '%s' AND c.lease_expires_at > now()), '')",
             queue, part, group);
    return qt_value(CI, sql);
}

static void assert_holder(const char *queue, const char *part, const char *group,
                          const char *worker)
{
    char *h = holder(queue, part, group);
    ck_assert_str_eq(h, worker);
    free(h);
}

/* One pop_bundle_v1 call leases for every member its own partition's batch
 * under its own worker; a second member on a partition and group the bundle
 * already leased gets nothing (one lease per (partition, group)); members
 * come back in the order given whatever their partition ids. */
START_TEST(bundle_leases_each_member)
{
    struct qt_seg s1, s2, s3;
    qt_seg_make(&s1, 2, "b1", 0);
    qt_seg_make(&s2, 3, "b2", 0);
    qt_seg_make(&s3, 4, "b3", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "bund", "P1", &s1, &po), QN_OK);
    ck_assert_int_eq(qt_push1(B, S, "bund", "P2", &s2, &po), QN_OK);
    ck_assert_int_eq(qt_push1(B, S, "bund2", "X", &s3, &po), QN_OK);
    /* first contact of each group by names (registers the subscription) */
    static struct qt_pop_out o;
    struct qn_pop_args g0 = qt_pop_args("bund", "P1", "g", "w-0", 1);
    ck_assert_int_eq(qt_pop(B, S, &g0, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    struct qn_pop_args r0 = qt_pop_args("bund2", "X", "g", "w-0", 1);
    ck_assert_int_eq(qt_pop(B, S, &r0, &o), QN_OK);
    char *rel = qt_value(CI, "SELECT qn.release_lease_v1('w-0')");
    ck_assert_str_eq(rel, "2");
    free(rel);

    struct qn_pop_args a[4] = {
        qt_pop_args("bund2", "X", "g", "w-x", 10),
        qt_pop_args("bund", "P1", "g", "w-p1", 10),
        qt_pop_args("bund", "P2", "g", "w-p2", 2),
        qt_pop_args("bund", "P1", "g", "w-p1b", 10),
    };
    struct qn_pop_member m[4];
    for (int k = 0; k < 4; k++) {
        m[k].a = &a[k];
        ck_assert(qn_store_pop_pid(S, &a[k], NULL, m[k].pid));
    }
    static struct bundle_out bo;
    int64_t now_us = (int64_t)qn_now_ms() * 1000;
    ck_assert_int_eq(bundle(m, 4, NULL, &bo), QN_OK);
    ck_assert_uint_eq(bo.n, 4);
    ck_assert_uint_eq(bo.rows[0], 1);
    ck_assert_str_eq(bo.part[0][0], "X");
    ck_assert_int_eq(bo.take[0][0], 4);
    ck_assert_uint_eq(bo.rows[1], 1);
    ck_assert_str_eq(bo.part[1][0], "P1");
    ck_assert_int_eq(bo.take[1][0], 2);
    ck_assert_uint_eq(bo.rows[2], 1);
    ck_assert_str_eq(bo.part[2][0], "P2");
    ck_assert_int_eq(bo.take[2][0], 2); /* its own budget */
    ck_assert_uint_eq(bo.rows[3], 0);   /* P1 leased to the earlier member */
    ck_assert_int_gt(bo.expires[1], now_us + 50 * 1000000LL);
    assert_holder("bund2", "X", "g", "w-x");
    assert_holder("bund", "P1", "g", "w-p1");
    assert_holder("bund", "P2", "g", "w-p2");
    qt_seg_free(&s1);
    qt_seg_free(&s2);
    qt_seg_free(&s3);
}
END_TEST

/* A member the database refuses (a conflating group) fails the whole bundle
 * with QN_EDB and nothing is leased for the others; another tenant's bundle
 * with this tenant's ids leases nothing here; bad bundles are refused before
 * anything is sent; only by-id pops qualify. */
START_TEST(bundle_refused_whole_and_tenants)
{
    struct qt_seg s1, s2;
    qt_seg_make(&s1, 2, "c1", 0);
    qt_seg_make(&s2, 2, "c2", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "bref", "A", &s1, &po), QN_OK);
    ck_assert_int_eq(qt_push1(B, S, "bref", "C", &s2, &po), QN_OK);
    static struct qt_pop_out o;
    struct qn_pop_args f = qt_pop_args("bref", "A", "gc", "w-0", 1);
    ck_assert_int_eq(qt_pop(B, S, &f, &o), QN_OK);
    f.partition = "C";
    ck_assert_int_eq(qt_pop(B, S, &f, &o), QN_OK);
    char *v = qt_value(CI, "SELECT qn.release_lease_v1('w-0')");
    free(v);
    v = qt_value(CI, "UPDATE queen.consumer_groups_metadata SET conflation = true "
                     "WHERE consumer_group = 'gc' RETURNING 'x'");
    free(v);
    /* group "ok" is fine, group "gc" conflates */
    struct qn_pop_args a[2] = {qt_pop_args("bref", "A", "ok", "w-a", 10),
                               qt_pop_args("bref", "C", "gc", "w-c", 10)};
    f = qt_pop_args("bref", "A", "ok", "w-1", 1); /* first contact of "ok" */
    ck_assert_int_eq(qt_pop(B, S, &f, &o), QN_OK);
    v = qt_value(CI, "SELECT qn.release_lease_v1('w-1')");
    free(v);
    struct qn_pop_member m[2];
    for (int k = 0; k < 2; k++) {
        m[k].a = &a[k];
        ck_assert(qn_store_pop_pid(S, &a[k], NULL, m[k].pid));
    }
    static struct bundle_out bo;
    ck_assert_int_eq(bundle(m, 2, NULL, &bo), QN_EDB);
    assert_holder("bref", "A", "ok", ""); /* rolled back with the refused member */
    /* alone, the good member leases */
    a[0].worker = "w-a2";
    ck_assert_int_eq(qt_pop(B, S, &a[0], &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    assert_holder("bref", "A", "ok", "w-a2");

    /* another tenant: the same ids and names lease nothing of this tenant's */
    static const uint8_t T2[16] = {0x7e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
    uint8_t pid[16];
    struct qn_pop_args t = qt_pop_args("bref", "C", "other", "w-t2", 10);
    ck_assert(!qn_store_pop_pid(S, &t, T2, pid)); /* the id cache is per tenant */
    struct qn_pop_args t2 = qt_pop_args("bref", "A", "other", "w-t2b", 10);
    struct qn_pop_member tm[2] = {{&t, {0}}, {&t2, {0}}};
    memcpy(tm[0].pid, m[1].pid, 16);
    memcpy(tm[1].pid, m[0].pid, 16);
    ck_assert_int_eq(bundle(tm, 2, T2, &bo), QN_OK);
    ck_assert_uint_eq(bo.rows[0], 0);
    ck_assert_uint_eq(bo.rows[1], 0);
    assert_holder("bref", "C", "other", "");

    /* refused before sending */
    struct qn_pop_args bad = a[0];
    bad.auto_ack = true;
    struct qn_pop_member bm = {&bad, {0}};
    ck_assert_int_eq(qn_store_pop_bundle(S, &bm, 1, NULL, bundle_cb, &bo, NULL), QN_EINVAL);
    ck_assert(!qn_store_pop_pid(S, &bad, NULL, pid));
    bad = a[0];
    bad.worker = "";
    ck_assert_int_eq(qn_store_pop_bundle(S, &bm, 1, NULL, bundle_cb, &bo, NULL), QN_EINVAL);
    ck_assert_int_eq(qn_store_pop_bundle(S, m, 0, NULL, bundle_cb, &bo, NULL), QN_EINVAL);
    ck_assert_int_eq(qn_store_pop_bundle(S, m, QN_POP_BUNDLE_MAX + 1, NULL, bundle_cb, &bo, NULL),
                     QN_EINVAL);
    struct qn_pop_args unk = qt_pop_args("bref", "nope", "ok", "w", 1);
    ck_assert(!qn_store_pop_pid(S, &unk, NULL, pid));
    qt_seg_free(&s1);
    qt_seg_free(&s2);
}
END_TEST

struct ack_bundle_out {
    struct qt_status s;
    size_t n;
    struct qn_ack_result r[4];
    struct qn_ack_item_result items[4][4];
};

static void ack_bundle_cb(void *ud, const struct qn_store_status *st,
                          const struct qn_ack_result *res, size_t n)
{
    struct ack_bundle_out *o = ud;
    qt_copy_status(&o->s, st);
    o->n = n;
    for (size_t k = 0; res != NULL && k < n && k < 4; k++) {
        o->r[k] = res[k];
        for (size_t i = 0; i < res[k].n && i < 4; i++)
            o->items[k][i] = res[k].items[i];
        o->r[k].items = o->items[k];
        o->r[k].dlq_blob = NULL;
    }
}

/* One ack_bundle_v1 call applies each member's ack_v1 under its own lease and
 * answers each its own outcomes and summary (cursor, released); a member with
 * a wrong lease gets LEASE_INVALID without disturbing the others. */
START_TEST(ack_bundle_each_member_its_result)
{
    struct qt_seg s1, s2;
    qt_seg_make(&s1, 3, "k1", 0);
    qt_seg_make(&s2, 4, "k2", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "abund", "A", &s1, &po), QN_OK);
    uint8_t pa[16], pb[16];
    memcpy(pa, po.segs[0].pid, 16);
    ck_assert_int_eq(qt_push1(B, S, "abund", "B", &s2, &po), QN_OK);
    memcpy(pb, po.segs[0].pid, 16);
    static struct qt_pop_out o;
    struct qn_pop_args a = qt_pop_args("abund", "A", "g", "w-a", 10);
    ck_assert_int_eq(qt_pop(B, S, &a, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    a = qt_pop_args("abund", "B", "g", "w-b", 10);
    ck_assert_int_eq(qt_pop(B, S, &a, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);

    struct qn_ack_item ia[1] = {{NULL, 2, QN_ACK_COMPLETED}}; /* all of A */
    struct qn_ack_item ib[2] = {{NULL, 0, QN_ACK_COMPLETED}, {NULL, 1, QN_ACK_COMPLETED}};
    struct qn_ack_item ix[1] = {{NULL, 3, QN_ACK_COMPLETED}}; /* B, wrong lease */
    struct qn_ack_args m[3];
    memset(m, 0, sizeof m);
    memcpy(m[0].pid, pb, 16);
    m[0].group = "g";
    m[0].worker = "w-b";
    m[0].items = ib;
    m[0].n = 2;
    memcpy(m[1].pid, pa, 16);
    m[1].group = "g";
    m[1].worker = "w-a";
    m[1].items = ia;
    m[1].n = 1;
    memcpy(m[2].pid, pb, 16);
    m[2].group = "g";
    m[2].worker = "w-nobody";
    m[2].items = ix;
    m[2].n = 1;
    static struct ack_bundle_out ao;
    memset(&ao, 0, sizeof ao);
    ck_assert_int_eq(qn_store_ack_bundle(S, m, 3, NULL, ack_bundle_cb, &ao, NULL), QN_OK);
    ck_assert(qt_run_until(B, &ao.s.done, 10000));
    ck_assert_int_eq(ao.s.code, QN_OK);
    ck_assert_uint_eq(ao.n, 3);
    /* B: two of four acked, the lease stays */
    ck_assert_uint_eq(ao.r[0].n, 2);
    ck_assert_int_eq(ao.r[0].items[0].outcome, QN_ACK_APPLIED);
    ck_assert_int_eq(ao.r[0].items[1].outcome, QN_ACK_APPLIED);
    ck_assert_int_eq(ao.r[0].committed, 1);
    ck_assert(!(ao.r[0].flags & QN_ACKF_RELEASED));
    /* A: all of it, released */
    ck_assert_uint_eq(ao.r[1].n, 1);
    ck_assert_int_eq(ao.r[1].items[0].outcome, QN_ACK_APPLIED);
    ck_assert_int_eq(ao.r[1].committed, 2);
    ck_assert(ao.r[1].flags & QN_ACKF_RELEASED);
    /* the wrong lease: refused, nothing moved */
    ck_assert_uint_eq(ao.r[2].n, 1);
    ck_assert_int_eq(ao.r[2].items[0].outcome, QN_ACK_LEASE_INVALID);
    assert_holder("abund", "A", "g", "");
    assert_holder("abund", "B", "g", "w-b");
    /* bad bundles are refused before sending */
    ck_assert_int_eq(qn_store_ack_bundle(S, m, 0, NULL, ack_bundle_cb, &ao, NULL), QN_EINVAL);
    m[1].n = 0;
    ck_assert_int_eq(qn_store_ack_bundle(S, m, 2, NULL, ack_bundle_cb, &ao, NULL), QN_EINVAL);
    qt_seg_free(&s1);
    qt_seg_free(&s2);
}
END_TEST

Suite *qn_test_pop_suite(void)
{
    Suite *s = suite_create("pop");
    TCase *t = tcase_create("pop");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, pop_leases_pushed_segments);
    tcase_add_test(t, named_pop_goes_by_id_once_known);
    tcase_add_test(t, auto_ack_moves_the_cursor);
    tcase_add_test(t, discovery_and_any_partition);
    tcase_add_test(t, empty_and_missing);
    tcase_add_test(t, bundle_leases_each_member);
    tcase_add_test(t, bundle_refused_whole_and_tenants);
    tcase_add_test(t, ack_bundle_each_member_its_result);
    suite_add_tcase(s, t);
    return s;
}
