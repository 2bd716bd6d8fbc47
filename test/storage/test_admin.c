/*
 * test_admin.c - admin.c against the admin procedures: configure (create, merge,
 * replace, invalid options), get/list queues, partitions, stats, consumer groups
 * (list, seek, delete), delete_queue, and notify_push_v1 heard by listen_push
 * (another store's, not the listener's own).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "queen/error.h"
#include "storage_test.h"
#include "store_int.h"

static struct event_base *B;
static char *CI;
static qn_store *S;

static void setup(void)
{
    B = event_base_new();
    CI = qt_db_schema("qn_storage_admin");
    S = qt_store(B, CI, 2, 8);
}

static void teardown(void)
{
    qn_store_free(S);
    event_base_free(B);
    free(CI);
}

struct q_out {
    struct qt_status s;
    size_t n;
    bool created;
    struct qn_queue_info q[8];
    char names[8][64], ns[8][64], task[8][64];
};

static void q_cb(void *ud, const struct qn_store_status *st, const struct qn_queues_result *r)
{
    struct q_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    o->created = r->created;
    for (size_t i = 0; i < r->n && i < 8; i++) {
        o->q[i] = r->queues[i];
        snprintf(o->names[i], 64, "%s", r->queues[i].name);
        snprintf(o->ns[i], 64, "%s", r->queues[i].options.namespace_);
        snprintf(o->task[i], 64, "%s", r->queues[i].options.task);
    }
}

static int configure(const char *name, const struct qn_queue_options *opt, bool replace,
                     struct q_out *o)
{
    memset(o, 0, sizeof *o);
    int rc = qn_store_configure_queue(S, name, opt, replace, NULL, q_cb, o, NULL);
    if (rc != QN_OK)
        return rc;
    ck_assert(qt_run_until(B, &o->s.done, 10000));
    return o->s.code;
}

START_TEST(configure_get_list)
{
    struct qn_queue_options opt;
    memset(&opt, 0, sizeof opt);
    opt.lease_time = 30;
    opt.dead_letter_queue = false;
    opt.namespace_ = "sales \"quoted\"";
    opt.set = 1u << QN_OPT_LEASE_TIME | 1u << QN_OPT_DEAD_LETTER_QUEUE | 1u << QN_OPT_NAMESPACE;
    struct q_out o;
    ck_assert_int_eq(configure("sales.orders.v1", &opt, false, &o), QN_OK);
    ck_assert(o.created);
    ck_assert_uint_eq(o.n, 1);
    ck_assert_str_eq(o.names[0], "sales.orders.v1");
    ck_assert_int_eq(o.q[0].options.lease_time, 30);
    ck_assert(!o.q[0].options.dead_letter_queue);
    ck_assert_str_eq(o.ns[0], "sales \"quoted\"");
    ck_assert_str_eq(o.task[0], ""); /* not derived from the dotted name: its default */
    ck_assert_int_eq(o.q[0].options.retry_limit, 3); /* default */
    ck_assert_int_eq(o.q[0].options.dedup_window_seconds, 3600);
    ck_assert_int_gt(o.q[0].created_at_us, 0);
    /* merge keeps, replace resets */
    memset(&opt, 0, sizeof opt);
    opt.retry_limit = 7;
    opt.set = 1u << QN_OPT_RETRY_LIMIT;
    ck_assert_int_eq(configure("sales.orders.v1", &opt, false, &o), QN_OK);
    ck_assert(!o.created);
    ck_assert_int_eq(o.q[0].options.lease_time, 30);
    ck_assert_int_eq(o.q[0].options.retry_limit, 7);
    ck_assert_int_eq(configure("sales.orders.v1", &opt, true, &o), QN_OK);
    ck_assert_int_eq(o.q[0].options.lease_time, 60);
    ck_assert_int_eq(o.q[0].options.retry_limit, 7);
    ck_assert_str_eq(o.ns[0], ""); /* replace resets the namespace too */
    /* an invalid option comes back as the procedure's message */
    memset(&opt, 0, sizeof opt);
    opt.min_pop_wait_time = -5;
    opt.set = 1u << QN_OPT_MIN_POP_WAIT_TIME;
    ck_assert_int_eq(configure("sales.orders.v1", &opt, false, &o), QN_EDB);
    ck_assert_str_eq(o.s.sqlstate, "22023");
    ck_assert_msg(strncmp(o.s.message, "invalid min_pop_wait_time", 25) == 0, "%s", o.s.message);
    /* NULL options: defaults */
    ck_assert_int_eq(configure("plain", NULL, false, &o), QN_OK);
    ck_assert(o.created);

    memset(&o, 0, sizeof o);
    ck_assert_int_eq(qn_store_get_queue(S, "plain", NULL, q_cb, &o, NULL), QN_OK);
    ck_assert(qt_run_until(B, &o.s.done, 10000));
    ck_assert_uint_eq(o.n, 1);
    memset(&o, 0, sizeof o);
    ck_assert_int_eq(qn_store_get_queue(S, "absent", NULL, q_cb, &o, NULL), QN_OK);
    ck_assert(qt_run_until(B, &o.s.done, 10000));
    ck_assert_int_eq(o.s.code, QN_OK);
    ck_assert_uint_eq(o.n, 0);
    memset(&o, 0, sizeof o);
    ck_assert_int_eq(qn_store_list_queues(S, NULL, NULL, 10, 0, NULL, q_cb, &o, NULL), QN_OK);
    ck_assert(qt_run_until(B, &o.s.done, 10000));
    ck_assert_uint_eq(o.n, 2);
    ck_assert_str_eq(o.names[0], "plain");
    ck_assert_str_eq(o.names[1], "sales.orders.v1");
}
END_TEST

struct parts_out {
    struct qt_status s;
    size_t n;
    struct qn_partition_info p[4];
};

static void parts_cb(void *ud, const struct qn_store_status *st,
                     const struct qn_partitions_result *r)
{
    struct parts_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 4; i++) {
        o->p[i] = r->parts[i];
        o->p[i].partition = "";
    }
}

struct stats_out {
    struct qt_status s;
    size_t n;
    struct qn_stats_row r[4];
};

static void stats_cb(void *ud, const struct qn_store_status *st, const struct qn_stats_result *r)
{
    struct stats_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 4; i++) {
        o->r[i] = r->rows[i];
        o->r[i].queue = "";
    }
}

struct groups_out {
    struct qt_status s;
    size_t n;
    struct qn_group_row g[4];
    char group[4][64], mode[4][32];
};

static void groups_cb(void *ud, const struct qn_store_status *st, const struct qn_groups_result *r)
{
    struct groups_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 4; i++) {
        o->g[i] = r->rows[i];
        snprintf(o->group[i], 64, "%s", r->rows[i].group);
        snprintf(o->mode[i], 32, "%s", r->rows[i].sub_mode);
    }
}

static struct qt_status is;
static int64_t ival;
static bool bval;

static void int_cb(void *ud, const struct qn_store_status *st, int64_t v)
{
    (void)ud;
    qt_copy_status(&is, st);
    ival = v;
}

static void bool_cb(void *ud, const struct qn_store_status *st, bool v)
{
    (void)ud;
    qt_copy_status(&is, st);
    bval = v;
}

#define WAIT_IS()                                                                                  \
    do {                                                                                           \
        ck_assert(qt_run_until(B, &is.done, 10000));                                               \
    } while (0)

START_TEST(partitions_stats_groups_delete)
{
    struct qt_seg a;
    qt_seg_make(&a, 5, "g", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "metrics", "m1", &a, &po), QN_OK);
    static struct qt_pop_out pop;
    struct qn_pop_args pa = qt_pop_args("metrics", "m1", "readers", NULL, 2);
    pa.auto_ack = true;
    ck_assert_int_eq(qt_pop(B, S, &pa, &pop), QN_OK);
    ck_assert_uint_eq(pop.n, 1);

    struct parts_out p;
    memset(&p, 0, sizeof p);
    ck_assert_int_eq(qn_store_queue_partitions(S, "metrics", "readers", NULL, parts_cb, &p, NULL),
                     QN_OK);
    ck_assert(qt_run_until(B, &p.s.done, 10000));
    ck_assert_int_eq(p.s.code, QN_OK);
    ck_assert_uint_eq(p.n, 1);
    ck_assert_int_eq(p.p[0].last_offset, 4);
    ck_assert_int_eq(p.p[0].committed, 1);
    ck_assert_int_eq(p.p[0].depth, 3);
    ck_assert(!p.p[0].leased);

    struct stats_out so;
    memset(&so, 0, sizeof so);
    ck_assert_int_eq(qn_store_stats(S, "metrics", NULL, stats_cb, &so, NULL), QN_OK);
    ck_assert(qt_run_until(B, &so.s.done, 10000));
    ck_assert_int_eq(so.s.code, QN_OK);
    ck_assert_uint_eq(so.n, 1);
    ck_assert_int_eq(so.r[0].partitions, 1);
    ck_assert_int_eq(so.r[0].messages, 5);
    ck_assert_int_eq(so.r[0].segments, 1);
    ck_assert_int_gt(so.r[0].bytes, 0);

    /* one step of the stats walk reads partitions (the pass may be another
     * caller's: -1) */
    memset(&is, 0, sizeof is);
    ck_assert_int_eq(qn_store_stats_step(S, 1000000, NULL, int_cb, NULL, NULL), QN_OK);
    WAIT_IS();
    ck_assert_int_eq(is.code, QN_OK);
    ck_assert(ival >= 1 || ival == -1);
    ck_assert_int_eq(qn_store_stats_step(S, 0, NULL, int_cb, NULL, NULL), QN_EINVAL);
    /* the encryption flag alone: off for this queue */
    memset(&is, 0, sizeof is);
    bval = true;
    ck_assert_int_eq(qn_store_queue_encrypted(S, "metrics", NULL, bool_cb, NULL, NULL), QN_OK);
    WAIT_IS();
    ck_assert_int_eq(is.code, QN_OK);
    ck_assert(!bval);

    struct groups_out g;
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(
        qn_store_list_consumer_groups(S, "metrics", "readers", NULL, groups_cb, &g, NULL), QN_OK);
    ck_assert(qt_run_until(B, &g.s.done, 10000));
    ck_assert_int_eq(g.s.code, QN_OK);
    ck_assert_uint_eq(g.n, 1);
    ck_assert_str_eq(g.group[0], "readers");
    ck_assert_str_eq(g.mode[0], "all");
    ck_assert_int_eq(g.g[0].committed, 1);
    ck_assert_int_eq(g.g[0].lag, 3);
    ck_assert_int_eq(g.g[0].total_consumed, 2);

    /* seek to the end, then to a missing queue */
    memset(&is, 0, sizeof is);
    ck_assert_int_eq(qn_store_seek_consumer_group(S, "readers", "metrics", NULL, true, 0, NULL,
                                                  int_cb, NULL, NULL),
                     QN_OK);
    WAIT_IS();
    ck_assert_int_eq(is.code, QN_OK);
    ck_assert_int_eq(ival, 1);
    memset(&is, 0, sizeof is);
    ck_assert_int_eq(
        qn_store_seek_consumer_group(S, "readers", "nope", NULL, true, 0, NULL, int_cb, NULL, NULL),
        QN_OK);
    WAIT_IS();
    ck_assert_int_eq(is.code, QN_ENOTFOUND);
    /* to a timestamp (the epoch: everything again) */
    memset(&is, 0, sizeof is);
    ck_assert_int_eq(qn_store_seek_consumer_group(S, "readers", "metrics", "m1", false, 0, NULL,
                                                  int_cb, NULL, NULL),
                     QN_OK);
    WAIT_IS();
    ck_assert_int_eq(is.code, QN_OK);
    ck_assert_int_eq(ival, 1);
    memset(&is, 0, sizeof is);
    ck_assert_int_eq(
        qn_store_delete_consumer_group(S, "readers", "metrics", true, NULL, int_cb, NULL, NULL),
        QN_OK);
    WAIT_IS();
    ck_assert_int_eq(is.code, QN_OK);
    ck_assert_int_eq(ival, 1);

    memset(&is, 0, sizeof is);
    ck_assert_int_eq(qn_store_delete_queue(S, "metrics", NULL, bool_cb, NULL, NULL), QN_OK);
    WAIT_IS();
    ck_assert_int_eq(is.code, QN_OK);
    ck_assert(bval);
    memset(&is, 0, sizeof is);
    ck_assert_int_eq(qn_store_delete_queue(S, "metrics", NULL, bool_cb, NULL, NULL), QN_OK);
    WAIT_IS();
    ck_assert(!bval);
    qt_seg_free(&a);
}
END_TEST

static char heard[256];
static int nheard;
static int nown; /* payloads naming the queue "own" */

static void on_push(void *ud, const char *payload)
{
    (void)ud;
    snprintf(heard, sizeof heard, "%s", payload);
    nheard++;
    if (strstr(payload, "/own") != NULL)
        nown++;
}

START_TEST(notify_push_reaches_listeners)
{
    /* another broker's store sends; S listens */
    qn_store *other = qt_store(B, CI, 1, 4);
    nheard = 0;
    ck_assert_int_eq(qn_store_listen_push(S, on_push, NULL), QN_OK);
    const char *qs[3] = {"alpha", "alpha", ""};
    for (int i = 0; i < 40 && nheard == 0; i++) {
        memset(&is, 0, sizeof is);
        ck_assert_int_eq(qn_store_notify_push(other, qs, 3, NULL, int_cb, NULL, NULL), QN_OK);
        WAIT_IS();
        ck_assert_int_eq(is.code, QN_OK);
        qt_run_for(B, 50);
    }
    ck_assert_int_ge(nheard, 1);
    ck_assert_str_eq(heard, "00000000-0000-0000-0000-000000000001/alpha");
    /* fire and forget: no callback */
    ck_assert_int_eq(qn_store_notify_push(other, qs, 1, NULL, NULL, NULL, NULL), QN_OK);
    qt_run_for(B, 100);
    /* S's own NOTIFY is not handed back to it (its broker woke its waiters at
     * the commit), while the other store's still is */
    const char *own[1] = {"own"};
    const char *theirs[1] = {"theirs"};
    nown = 0;
    for (int i = 0; i < 3; i++) {
        memset(&is, 0, sizeof is);
        ck_assert_int_eq(qn_store_notify_push(S, own, 1, NULL, int_cb, NULL, NULL), QN_OK);
        WAIT_IS();
        ck_assert_int_eq(is.code, QN_OK);
    }
    /* NOTIFYs reach a listener in commit order: once "theirs", sent after, is
     * heard, "own" would have been heard before it */
    memset(&is, 0, sizeof is);
    ck_assert_int_eq(qn_store_notify_push(other, theirs, 1, NULL, int_cb, NULL, NULL), QN_OK);
    WAIT_IS();
    for (int i = 0; i < 100 && strstr(heard, "/theirs") == NULL; i++)
        qt_run_for(B, 20);
    ck_assert_str_eq(heard, "00000000-0000-0000-0000-000000000001/theirs");
    ck_assert_int_eq(nown, 0);
    qn_store_free(other);
}
END_TEST

Suite *qn_test_admin_suite(void)
{
    Suite *s = suite_create("admin");
    TCase *t = tcase_create("admin");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, configure_get_list);
    tcase_add_test(t, partitions_stats_groups_delete);
    tcase_add_test(t, notify_push_reaches_listeners);
    suite_add_tcase(s, t);
    return s;
}
