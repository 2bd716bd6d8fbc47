/*
 * test_ack.c - ack.c against ack_v1 / dlq_head_v1 / renew_lease_v1 /
 * release_lease_v1: outcomes and summary flags, ack by hash, lease checks, the
 * dead-letter hand-off through dlq_head_v1 and the DLQ admin calls, leases.
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
    CI = qt_db_schema("qn_storage_ack");
    S = qt_store(B, CI, 2, 8);
}

static void teardown(void)
{
    qn_store_free(S);
    event_base_free(B);
    free(CI);
}

/* Pushes count messages to queue/"P" and leases them to worker; returns the pid. */
static void leased(const char *queue, uint32_t count, const char *worker, struct qt_seg *seg,
                   uint8_t pid[16])
{
    struct qt_push_out po;
    qt_seg_make(seg, count, queue, 0);
    ck_assert_int_eq(qt_push1(B, S, queue, "P", seg, &po), QN_OK);
    memcpy(pid, po.segs[0].pid, 16);
    static struct qt_pop_out o;
    struct qn_pop_args a = qt_pop_args(queue, "P", "", worker, 1000);
    ck_assert_int_eq(qt_pop(B, S, &a, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    ck_assert_int_eq(o.segs[0].take, (int32_t)count);
}

START_TEST(positional_ack_completes_the_batch)
{
    struct qt_seg seg;
    uint8_t pid[16];
    leased("acks", 5, "w1", &seg, pid);
    struct qn_ack_item it = {NULL, 4, QN_ACK_COMPLETED};
    struct qn_ack_args a = {{0}, "", "w1", &it, 1};
    memcpy(a.pid, pid, 16);
    struct qt_ack_out o;
    ck_assert_int_eq(qt_ack(B, S, &a, &o), QN_OK);
    ck_assert_uint_eq(o.r.n, 1);
    ck_assert_int_eq(o.items[0].outcome, QN_ACK_APPLIED);
    ck_assert_int_eq(o.items[0].offset, 4);
    ck_assert_int_eq(o.r.committed, 4);
    ck_assert_uint_eq(o.r.flags, QN_ACKF_RELEASED);
    ck_assert_int_eq(o.r.dlq_offset, -1);
    /* again: below the cursor now */
    ck_assert_int_eq(qt_ack(B, S, &a, &o), QN_OK);
    ck_assert_int_ne(o.items[0].outcome, QN_ACK_APPLIED);
    ck_assert_int_eq(o.r.committed, 4);
    qt_seg_free(&seg);
}
END_TEST

START_TEST(ack_by_hash_and_mixed)
{
    struct qt_seg seg;
    uint8_t pid[16], unknown[16];
    leased("hashes", 4, "w1", &seg, pid);
    qt_bytes16(99, unknown);
    struct qn_ack_item items[3] = {{seg.hashes + 16, 0, QN_ACK_COMPLETED}, /* offset 1 */
                                   {NULL, 0, QN_ACK_COMPLETED},
                                   {unknown, 0, QN_ACK_COMPLETED}};
    struct qn_ack_args a = {{0}, NULL, "w1", items, 3};
    memcpy(a.pid, pid, 16);
    struct qt_ack_out o;
    ck_assert_int_eq(qt_ack(B, S, &a, &o), QN_OK);
    ck_assert_uint_eq(o.r.n, 3);
    ck_assert_int_eq(o.items[0].outcome, QN_ACK_APPLIED);
    ck_assert_int_eq(o.items[0].offset, 1);
    ck_assert_int_eq(o.items[1].outcome, QN_ACK_APPLIED);
    ck_assert_int_eq(o.items[1].offset, 0);
    ck_assert_int_eq(o.items[2].outcome, QN_ACK_UNRESOLVED);
    ck_assert_int_eq(o.items[2].offset, -1);
    ck_assert_int_eq(o.r.committed, 1);
    ck_assert_uint_eq(o.r.flags & QN_ACKF_RELEASED, 0); /* offsets 2, 3 still leased */
    qt_seg_free(&seg);
}
END_TEST

START_TEST(lease_checks)
{
    struct qt_seg seg;
    uint8_t pid[16];
    leased("leases", 2, "owner", &seg, pid);
    struct qn_ack_item it = {NULL, 1, QN_ACK_COMPLETED};
    struct qn_ack_args a = {{0}, "", "intruder", &it, 1};
    memcpy(a.pid, pid, 16);
    struct qt_ack_out o;
    ck_assert_int_eq(qt_ack(B, S, &a, &o), QN_OK);
    ck_assert_int_eq(o.items[0].outcome, QN_ACK_LEASE_INVALID);
    ck_assert_int_eq(o.r.committed, -1);
    /* a group without a consumer row */
    a.group = "nobody";
    a.worker = NULL;
    ck_assert_int_eq(qt_ack(B, S, &a, &o), QN_OK);
    ck_assert_int_eq(o.items[0].outcome, QN_ACK_REJECTED);
    /* empty ack lists are refused before the database */
    a.n = 0;
    ck_assert_int_eq(qt_ack(B, S, &a, &o), QN_EINVAL);
    qt_seg_free(&seg);
}
END_TEST

static struct qt_status ls;
static int32_t renewed;
static int64_t expires, ival;

static void renew_cb(void *ud, const struct qn_store_status *st, int32_t n, int64_t exp)
{
    (void)ud;
    qt_copy_status(&ls, st);
    renewed = n;
    expires = exp;
}

static void int_cb(void *ud, const struct qn_store_status *st, int64_t v)
{
    (void)ud;
    qt_copy_status(&ls, st);
    ival = v;
}

START_TEST(renew_and_release)
{
    struct qt_seg seg;
    uint8_t pid[16];
    leased("renew", 2, "wr", &seg, pid);
    int64_t now_us = (int64_t)qn_now_ms() * 1000;
    memset(&ls, 0, sizeof ls);
    ck_assert_int_eq(qn_store_renew_lease(S, "wr", 600, NULL, renew_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &ls.done, 10000));
    ck_assert_int_eq(ls.code, QN_OK);
    ck_assert_int_eq(renewed, 1);
    ck_assert_int_gt(expires, now_us + 500 * 1000000LL);
    memset(&ls, 0, sizeof ls);
    ck_assert_int_eq(qn_store_renew_lease(S, "nobody", 600, NULL, renew_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &ls.done, 10000));
    ck_assert_int_eq(renewed, 0);
    ck_assert_int_eq(expires, 0);
    memset(&ls, 0, sizeof ls);
    ck_assert_int_eq(qn_store_release_lease(S, "wr", NULL, int_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &ls.done, 10000));
    ck_assert_int_eq(ls.code, QN_OK);
    ck_assert_int_eq(ival, 1);
    /* released: redelivered at once to another worker */
    static struct qt_pop_out o;
    struct qn_pop_args a = qt_pop_args("renew", "P", "", "other", 10);
    ck_assert_int_eq(qt_pop(B, S, &a, &o), QN_OK);
    ck_assert_uint_eq(o.n, 1);
    ck_assert_int_eq(o.segs[0].start_idx, 0);
    ck_assert_int_eq(qn_store_release_lease(S, "", NULL, int_cb, NULL, NULL), QN_EINVAL);
    qt_seg_free(&seg);
}
END_TEST

/* ---------------------------------------------------------------- dead letters */

static struct qt_status hs;
static bool head_ok;
static uint8_t head_id[16];
static bool head_has_id;

static void head_cb(void *ud, const struct qn_store_status *st, bool ok, const uint8_t *id)
{
    (void)ud;
    qt_copy_status(&hs, st);
    head_ok = ok;
    head_has_id = id != NULL;
    if (id)
        memcpy(head_id, id, 16);
}

struct dlq_out {
    struct qt_status s;
    size_t n;
    struct qn_dlq_row row;
    char queue[64], group[64], txn[64], error[64];
    uint8_t payload[64];
};

static void dlq_cb(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct dlq_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    if (r->n > 0) {
        o->row = r->rows[0];
        snprintf(o->queue, sizeof o->queue, "%s", r->rows[0].queue);
        snprintf(o->group, sizeof o->group, "%s", r->rows[0].group);
        snprintf(o->txn, sizeof o->txn, "%s", r->rows[0].txn);
        snprintf(o->error, sizeof o->error, "%s", r->rows[0].error);
        ck_assert_uint_le(r->rows[0].payload_len, sizeof o->payload);
        memcpy(o->payload, r->rows[0].payload, r->rows[0].payload_len);
    }
}

static void run_dlq(struct dlq_out *o)
{
    ck_assert(qt_run_until(B, &o->s.done, 10000));
    ck_assert_msg(o->s.code == QN_OK, "%s", o->s.message);
}

static struct qt_status cs;

static void queues_cb(void *ud, const struct qn_store_status *st, const struct qn_queues_result *r)
{
    (void)ud;
    (void)r;
    qt_copy_status(&cs, st);
}

START_TEST(failure_hands_off_to_the_dlq)
{
    /* no retries: the first failure is terminal */
    struct qn_queue_options opt;
    memset(&opt, 0, sizeof opt);
    opt.retry_limit = 0;
    opt.set = 1u << QN_OPT_RETRY_LIMIT;
    memset(&cs, 0, sizeof cs);
    ck_assert_int_eq(
        qn_store_configure_queue(S, "poison", &opt, false, NULL, queues_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &cs.done, 10000));
    ck_assert_int_eq(cs.code, QN_OK);

    struct qt_seg seg;
    uint8_t pid[16];
    leased("poison", 3, "wp", &seg, pid);
    struct qn_ack_item it = {NULL, 0, QN_ACK_FAILED};
    struct qn_ack_args a = {{0}, "", "wp", &it, 1};
    memcpy(a.pid, pid, 16);
    struct qt_ack_out o;
    ck_assert_int_eq(qt_ack(B, S, &a, &o), QN_OK);
    ck_assert_int_eq(o.items[0].outcome, QN_ACK_APPLIED);
    ck_assert_uint_eq(o.r.flags & QN_ACKF_DLQ_HANDOFF, QN_ACKF_DLQ_HANDOFF);
    ck_assert_int_eq(o.r.dlq_offset, 0);
    ck_assert_int_eq(o.r.dlq_base, 0);
    ck_assert_uint_eq(o.r.dlq_blob_len, seg.blob_len);
    ck_assert_int_eq(o.r.committed, -1);

    /* the broker files it */
    struct qn_dlq_head_args h;
    memset(&h, 0, sizeof h);
    memcpy(h.pid, pid, 16);
    h.group = "";
    h.worker = "wp";
    h.offset = 0;
    qt_bytes16(0, h.message_id);
    h.txn = "poison-0-and-more";
    h.txn_len = 8; /* not NUL-terminated at txn_len: only "poison-0" is sent */
    h.payload = (const uint8_t *)"{\"n\":0}";
    h.payload_len = 7;
    h.error = "it broke";
    memset(&hs, 0, sizeof hs);
    ck_assert_int_eq(qn_store_dlq_head(S, &h, NULL, head_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &hs.done, 10000));
    ck_assert_int_eq(hs.code, QN_OK);
    ck_assert(head_ok);
    ck_assert(head_has_id);
    uint8_t id[16];
    memcpy(id, head_id, 16);
    /* a second filing fails the lease check */
    memset(&hs, 0, sizeof hs);
    ck_assert_int_eq(qn_store_dlq_head(S, &h, NULL, head_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &hs.done, 10000));
    ck_assert(!head_ok);
    ck_assert(!head_has_id);

    /* list, get, delete */
    struct dlq_out d;
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(qn_store_list_dlq(S, "poison", NULL, NULL, 10, 0, NULL, dlq_cb, &d, NULL),
                     QN_OK);
    run_dlq(&d);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_mem_eq(d.row.id, id, 16);
    ck_assert_str_eq(d.queue, "poison");
    ck_assert_str_eq(d.group, "__QUEUE_MODE__");
    ck_assert_str_eq(d.txn, "poison-0");
    ck_assert_str_eq(d.error, "it broke");
    ck_assert_int_eq(d.row.offset, 0);
    ck_assert_uint_eq(d.row.payload_len, 7);
    ck_assert_mem_eq(d.payload, "{\"n\":0}", 7);
    ck_assert_mem_eq(d.row.pid, pid, 16);
    ck_assert_mem_eq(d.row.message_id, h.message_id, 16);
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(qn_store_get_dlq(S, id, NULL, dlq_cb, &d, NULL), QN_OK);
    run_dlq(&d);
    ck_assert_uint_eq(d.n, 1);
    memset(&ls, 0, sizeof ls);
    ck_assert_int_eq(qn_store_delete_dlq(S, id, NULL, NULL, NULL, int_cb, NULL, NULL), QN_OK);
    ck_assert(qt_run_until(B, &ls.done, 10000));
    ck_assert_int_eq(ls.code, QN_OK);
    ck_assert_int_eq(ival, 1);
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(qn_store_get_dlq(S, id, NULL, dlq_cb, &d, NULL), QN_OK);
    run_dlq(&d);
    ck_assert_uint_eq(d.n, 0);
    qt_seg_free(&seg);
}
END_TEST

Suite *qn_test_ack_suite(void)
{
    Suite *s = suite_create("ack");
    TCase *t = tcase_create("ack");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, positional_ack_completes_the_batch);
    tcase_add_test(t, ack_by_hash_and_mixed);
    tcase_add_test(t, lease_checks);
    tcase_add_test(t, renew_and_release);
    tcase_add_test(t, failure_hands_off_to_the_dlq);
    suite_add_tcase(s, t);
    return s;
}
