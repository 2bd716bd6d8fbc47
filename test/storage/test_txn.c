/*
 * test_txn.c - txn.c: several procedures in one sync, all or nothing. A strict
 * duplicate or an unapplied ack rolls back the pushes before it; failed_step
 * names the step; a clean transaction returns every step's result.
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
    CI = qt_db_schema("qn_storage_txn");
    S = qt_store(B, CI, 2, 8);
}

static void teardown(void)
{
    qn_store_free(S);
    event_base_free(B);
    free(CI);
}

struct txn_out {
    struct qt_status s;
    int failed_step;
    size_t n;
    int kinds[8];
    int64_t push_base[8];
    int push_status[8];
    int ack_outcome[8];
    int64_t ack_committed[8];
    int64_t value[8];
};

static void txn_cb(void *ud, const struct qn_store_status *st, const struct qn_txn_result *r)
{
    struct txn_out *o = ud;
    qt_copy_status(&o->s, st);
    ck_assert_ptr_nonnull(r);
    o->failed_step = r->failed_step;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 8; i++) {
        o->kinds[i] = r->steps[i].kind;
        if (r->steps[i].push) {
            o->push_base[i] = r->steps[i].push->segs[0].base;
            o->push_status[i] = r->steps[i].push->segs[0].status;
        }
        if (r->steps[i].ack) {
            o->ack_outcome[i] = r->steps[i].ack->items[0].outcome;
            o->ack_committed[i] = r->steps[i].ack->committed;
        }
        o->value[i] = r->steps[i].value;
    }
}

static int commit(qn_store_txn *t, struct txn_out *o)
{
    memset(o, 0, sizeof *o);
    int rc = qn_store_txn_commit(t, NULL, txn_cb, o, NULL);
    if (rc != QN_OK)
        return rc;
    ck_assert(qt_run_until(B, &o->s.done, 10000));
    return o->s.code;
}

static char *last_offset(const char *queue)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(max(p.last_offset), -99) FROM queen.log_partitions p "
             "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '%s'",
             queue);
    return qt_value(CI, sql);
}

/* Leases `count` messages of `queue` to worker; returns the pid. */
static void leased(const char *queue, uint32_t count, const char *worker, uint8_t pid[16])
{
    struct qt_seg seg;
    struct qt_push_out po;
    qt_seg_make(&seg, count, queue, 1000);
    ck_assert_int_eq(qt_push1(B, S, queue, NULL, &seg, &po), QN_OK);
    memcpy(pid, po.segs[0].pid, 16);
    static struct qt_pop_out o;
    struct qn_pop_args a = qt_pop_args(queue, NULL, "", worker, 1000);
    ck_assert_int_eq(qt_pop(B, S, &a, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    qt_seg_free(&seg);
}

START_TEST(push_and_ack_commit_together)
{
    uint8_t pid[16];
    leased("in", 3, "wt", pid);
    struct qt_seg out;
    qt_seg_make(&out, 2, "out", 0);
    qn_store_txn *t = NULL;
    ck_assert_int_eq(qn_store_txn_new(S, &t), QN_OK);
    const char *workers[1] = {"wt"};
    ck_assert_int_eq(qn_store_txn_check_leases(t, workers, 1), QN_OK);
    struct qn_push_segment p = qt_push_seg(&out, "out", NULL);
    ck_assert_int_eq(qn_store_txn_push(t, &p, 1), QN_OK);
    struct qn_ack_item it = {NULL, 2, QN_ACK_COMPLETED};
    struct qn_ack_args a = {{0}, "", "wt", &it, 1};
    memcpy(a.pid, pid, 16);
    ck_assert_int_eq(qn_store_txn_ack(t, &a), QN_OK);
    struct qn_store_stats before, after;
    qn_store_get_stats(S, &before);
    struct txn_out o;
    ck_assert_int_eq(commit(t, &o), QN_OK);
    ck_assert_int_eq(o.failed_step, -1);
    ck_assert_uint_eq(o.n, 3);
    ck_assert_int_eq(o.kinds[0], 3);
    ck_assert_int_eq(o.kinds[1], 1);
    ck_assert_int_eq(o.push_status[1], QN_PUSH_QUEUED);
    ck_assert_int_eq(o.push_base[1], 0);
    ck_assert_int_eq(o.kinds[2], 2);
    ck_assert_int_eq(o.ack_outcome[2], QN_ACK_APPLIED);
    ck_assert_int_eq(o.ack_committed[2], 2);
    /* three statements, one sync */
    qn_store_get_stats(S, &after);
    ck_assert_uint_eq(after.statements - before.statements, 3);
    ck_assert_uint_eq(after.round_trips - before.round_trips, 1);
    qt_seg_free(&out);
}
END_TEST

START_TEST(strict_duplicate_rolls_back_earlier_pushes)
{
    struct qt_seg first, dup;
    qt_seg_make(&first, 2, "f", 0);
    qt_seg_make(&dup, 2, "d", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "dupq", NULL, &dup, &po), QN_OK); /* d-0, d-1 exist */
    qn_store_txn *t = NULL;
    ck_assert_int_eq(qn_store_txn_new(S, &t), QN_OK);
    struct qn_push_segment p1 = qt_push_seg(&first, "freshq", NULL);
    struct qn_push_segment p2 = qt_push_seg(&dup, "dupq", NULL);
    ck_assert_int_eq(qn_store_txn_push(t, &p1, 1), QN_OK);
    ck_assert_int_eq(qn_store_txn_push(t, &p2, 1), QN_OK);
    struct txn_out o;
    ck_assert_int_eq(commit(t, &o), QN_EDUPLICATE);
    ck_assert_int_eq(o.failed_step, 1);
    ck_assert_uint_eq(o.n, 0);
    char *v = last_offset("freshq");
    /* freshq's push rolled back: the queue row and partition may not even exist */
    ck_assert_str_eq(v, "-99");
    free(v);
    qt_seg_free(&first);
    qt_seg_free(&dup);
}
END_TEST

START_TEST(unapplied_ack_rolls_back_the_push)
{
    uint8_t pid[16];
    leased("in2", 2, "owner", pid);
    struct qt_seg out;
    qt_seg_make(&out, 1, "o2", 0);
    qn_store_txn *t = NULL;
    ck_assert_int_eq(qn_store_txn_new(S, &t), QN_OK);
    struct qn_push_segment p = qt_push_seg(&out, "out2", NULL);
    ck_assert_int_eq(qn_store_txn_push(t, &p, 1), QN_OK);
    struct qn_ack_item it = {NULL, 1, QN_ACK_COMPLETED};
    struct qn_ack_args a = {{0}, "", "not-the-owner", &it, 1};
    memcpy(a.pid, pid, 16);
    ck_assert_int_eq(qn_store_txn_ack(t, &a), QN_OK);
    struct txn_out o;
    ck_assert_int_eq(commit(t, &o), QN_EDB);
    ck_assert_int_eq(o.failed_step, 1);
    ck_assert_str_eq(o.s.message, "lease_invalid item 0");
    char *v = last_offset("out2");
    ck_assert_str_eq(v, "-99");
    free(v);
    /* the ack did not apply either */
    v = qt_value(CI, "SELECT committed FROM queen.log_consumers");
    ck_assert_str_eq(v, "-1");
    free(v);
    qt_seg_free(&out);
}
END_TEST

static void ack_status_cb(void *ud, const struct qn_store_status *st, const struct qn_ack_result *r)
{
    (void)r;
    qt_copy_status(ud, st);
}

/* A statement is prepared lazily inside the sync of its first use. When an earlier
 * step of that sync fails, its Parse is skipped: the connection must not believe
 * it prepared, and calls already pipelined behind it must still succeed. */
START_TEST(parse_skipped_by_a_failed_sync_is_redone)
{
    qn_store *one = qt_store(B, CI, 1, 8); /* one connection: every call shares it */
    struct qt_seg dup;
    qt_seg_make(&dup, 1, "pd", 0);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, one, "prepq", NULL, &dup, &po), QN_OK);
    uint8_t pid[16];
    memcpy(pid, po.segs[0].pid, 16);
    /* first use of the ack statement rides behind a strict duplicate push */
    qn_store_txn *t = NULL;
    ck_assert_int_eq(qn_store_txn_new(one, &t), QN_OK);
    struct qn_push_segment p = qt_push_seg(&dup, "prepq", NULL);
    ck_assert_int_eq(qn_store_txn_push(t, &p, 1), QN_OK);
    struct qn_ack_item it = {NULL, 0, QN_ACK_COMPLETED};
    struct qn_ack_args a = {{0}, "", "", &it, 1};
    memcpy(a.pid, pid, 16);
    ck_assert_int_eq(qn_store_txn_ack(t, &a), QN_OK);
    struct txn_out o;
    memset(&o, 0, sizeof o);
    ck_assert_int_eq(qn_store_txn_commit(t, NULL, txn_cb, &o, NULL), QN_OK);
    /* a plain ack pipelined right behind it, before the failure is known */
    struct qt_status s2;
    memset(&s2, 0, sizeof s2);
    ck_assert_int_eq(qn_store_ack(one, &a, NULL, ack_status_cb, &s2, NULL), QN_OK);
    ck_assert(qt_run_until(B, &o.s.done, 10000));
    ck_assert(qt_run_until(B, &s2.done, 10000));
    ck_assert_int_eq(o.s.code, QN_EDUPLICATE);
    ck_assert_msg(s2.code == QN_OK, "pipelined ack failed: %s (%s)", s2.message, s2.sqlstate);
    /* and later uses on the same connection work */
    struct qt_ack_out ao;
    ck_assert_int_eq(qt_ack(B, one, &a, &ao), QN_OK);
    qn_store_free(one);
    qt_seg_free(&dup);
}
END_TEST

START_TEST(lease_check_and_dlq_delete)
{
    qn_store_txn *t = NULL;
    ck_assert_int_eq(qn_store_txn_new(S, &t), QN_OK);
    const char *workers[1] = {"ghost"};
    ck_assert_int_eq(qn_store_txn_check_leases(t, workers, 1), QN_OK);
    struct txn_out o;
    ck_assert_int_eq(commit(t, &o), QN_EDB);
    ck_assert_int_eq(o.failed_step, 0);
    ck_assert_str_eq(o.s.message, "lease not held ghost");
    /* deleting a dead letter that does not exist: 0 rows, fine */
    ck_assert_int_eq(qn_store_txn_new(S, &t), QN_OK);
    uint8_t id[16];
    qt_bytes16(5, id);
    ck_assert_int_eq(qn_store_txn_delete_dlq(t, id), QN_OK);
    ck_assert_int_eq(commit(t, &o), QN_OK);
    ck_assert_int_eq(o.kinds[0], 4);
    ck_assert_int_eq(o.value[0], 0);
    /* builders: abandon, empty commit, bad steps */
    ck_assert_int_eq(qn_store_txn_new(S, &t), QN_OK);
    ck_assert_int_eq(qn_store_txn_push(t, NULL, 0), QN_EINVAL);
    qn_store_txn_abandon(t);
    qn_store_txn_abandon(NULL);
    ck_assert_int_eq(qn_store_txn_new(S, &t), QN_OK);
    ck_assert_int_eq(commit(t, &o), QN_EINVAL);
}
END_TEST

Suite *qn_test_txn_suite(void)
{
    Suite *s = suite_create("txn");
    TCase *t = tcase_create("txn");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, push_and_ack_commit_together);
    tcase_add_test(t, strict_duplicate_rolls_back_earlier_pushes);
    tcase_add_test(t, unapplied_ack_rolls_back_the_push);
    tcase_add_test(t, parse_skipped_by_a_failed_sync_is_redone);
    tcase_add_test(t, lease_check_and_dlq_delete);
    suite_add_tcase(s, t);
    return s;
}
