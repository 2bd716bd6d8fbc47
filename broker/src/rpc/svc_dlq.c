/*
 * rpc/svc_dlq.c - AdminService: ListDeadLetters, DeleteDeadLetter and
 * ReplayDeadLetter.
 *
 * Does: validate; map dead-letter rows to DeadLetter messages (payloads
 * copied into the response's arena); delete by id or by (partition,
 * transaction id); replay one dead letter as a fresh message and remove it in
 * the same transaction, then wake this broker's waiters of its queue.
 * Does not: file dead letters (the ack engine does, ack_apply.c).
 *
 * Invariant: every call either finishes with a response or is cancelled; its
 * state owns the request and the storage request it started.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "config.h"
#include "engine/notifier.h"
#include "queen/error.h"
#include "queen/frame.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/v1/admin.pb-c.h"
#include "rpc/admin_call.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

/* ---------------------------------------------------------------- dead letters */

static Queen__V1__DeadLetter *dlq_out(struct qn_arena *ar, const struct qn_dlq_row *d)
{
    Queen__V1__DeadLetter *x = qn_arena_alloc(ar, sizeof *x);
    char *id = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    char *pid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    char *mid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    if (!x || !id || !pid || !mid)
        return NULL;
    queen__v1__dead_letter__init(x);
    qn_uuid_format(d->id, id);
    qn_uuid_format(d->pid, pid);
    qn_uuid_format(d->message_id, mid);
    x->id = id;
    x->partition_id = pid;
    x->message_id = mid;
#define DUP(dst, s) dst = qn_arena_strndup(ar, (s) ? (s) : "", (s) ? strlen(s) : 0)
    DUP(x->queue, d->queue);
    DUP(x->partition, d->partition);
    DUP(x->consumer_group, d->group);
    DUP(x->transaction_id, d->txn);
    DUP(x->error, d->error);
#undef DUP
    if (!x->queue || !x->partition || !x->consumer_group || !x->transaction_id || !x->error)
        return NULL;
    if (d->payload_len > 0) {
        uint8_t *p = qn_arena_alloc(ar, d->payload_len);
        if (p == NULL)
            return NULL;
        memcpy(p, d->payload, d->payload_len);
        x->payload.data = p;
        x->payload.len = d->payload_len;
    }
    x->offset = d->offset;
    x->retry_count = d->retry_count < 0 ? 0 : (uint32_t)d->retry_count;
    x->failed_at_us = d->failed_at_us;
    return x;
}

static void listdlq_done(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct qn_admin_call *a = ud;
    if (!qn_admin_ok(a, st))
        return;
    Queen__V1__ListDeadLettersResponse resp = QUEEN__V1__LIST_DEAD_LETTERS_RESPONSE__INIT;
    resp.dead_letters = qn_arena_alloc(&a->arena, (r->n ? r->n : 1) * sizeof *resp.dead_letters);
    for (size_t i = 0; resp.dead_letters && i < r->n; i++) {
        Queen__V1__DeadLetter *d = dlq_out(&a->arena, &r->rows[i]);
        if (d == NULL) {
            resp.dead_letters = NULL;
            break;
        }
        resp.dead_letters[resp.n_dead_letters++] = d;
    }
    if (resp.dead_letters == NULL) {
        qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    qn_admin_reply(a, &resp.base);
}

void qn_svc_list_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_admin_call *a = qn_admin_new(call, msg, sizeof *a);
    if (a == NULL)
        return;
    Queen__V1__ListDeadLettersRequest *req = (Queen__V1__ListDeadLettersRequest *)msg;
    if (!qn_admin_check_name(a, req->queue, "queue", true) ||
        !qn_admin_check_name(a, req->consumer_group, "consumer_group", true) ||
        !qn_admin_check_name(a, req->partition, "partition", true))
        return;
    if (req->offset > INT32_MAX) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "offset is too large");
        return;
    }
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    qn_admin_sent(a, qn_store_list_dlq(a->app->store, req->queue, req->consumer_group,
                                       req->partition, (int32_t)qn_admin_list_limit(req->limit),
                                       (int32_t)req->offset, &opts, listdlq_done, a, &a->sreq[0]));
}

static void deldlq_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct qn_admin_call *a = ud;
    if (!qn_admin_ok(a, st))
        return;
    if (value == 0) {
        qn_admin_finish(a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    Queen__V1__DeleteDeadLetterResponse resp = QUEEN__V1__DELETE_DEAD_LETTER_RESPONSE__INIT;
    resp.deleted = (uint32_t)value;
    qn_admin_reply(a, &resp.base);
}

void qn_svc_delete_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_admin_call *a = qn_admin_new(call, msg, sizeof *a);
    if (a == NULL)
        return;
    Queen__V1__DeleteDeadLetterRequest *req = (Queen__V1__DeleteDeadLetterRequest *)msg;
    uint8_t id[16], pid[16];
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    if (req->target_case == QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ID) {
        if (!qn_parse_uuid_str(req->id, id)) {
            qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "id is not a UUID");
            return;
        }
        qn_admin_sent(a, qn_store_delete_dlq(a->app->store, id, NULL, NULL, &opts, deldlq_done, a,
                                             &a->sreq[0]));
    } else if (req->target_case == QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ADDRESS &&
               req->address != NULL) {
        if (!qn_parse_uuid_str(req->address->partition_id, pid)) {
            qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "address.partition_id is not a UUID");
            return;
        }
        if (req->address->transaction_id == NULL || *req->address->transaction_id == '\0') {
            qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "address.transaction_id is required");
            return;
        }
        qn_admin_sent(a, qn_store_delete_dlq(a->app->store, NULL, pid, req->address->transaction_id,
                                             &opts, deldlq_done, a, &a->sreq[0]));
    } else {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "set id or address");
    }
}

/* ---------------------------------------------------------------- ReplayDeadLetter */

/*
 * Replay: get the dead letter, pack it as a fresh message (transaction id
 * "dlq:<id>", so a second replay inside the dedup window is a DUPLICATE), then
 * push it and delete the dead letter in one transaction.
 */
struct replay {
    struct qn_admin_call a; /* first: the admin helpers take &r->a */
    uint8_t dlq_id[16];
    char dlq_txn[64];
    char queue[256], partition[256];
    uint8_t msgid[16];
    struct qn_buf blob; /* the packed segment */
    uint8_t hash[16];
    size_t payload_len;
};

static void replay_cleanup(struct qn_admin_call *a)
{
    qn_buf_free(&((struct replay *)a)->blob);
}
static void replay_committed(void *ud, const struct qn_store_status *st,
                             const struct qn_txn_result *r)
{
    struct replay *a = ud;
    a->a.sreq[0] = NULL;
    Queen__V1__ReplayDeadLetterResponse resp = QUEEN__V1__REPLAY_DEAD_LETTER_RESPONSE__INIT;
    Queen__V1__PushResult pr = QUEEN__V1__PUSH_RESULT__INIT;
    char mid[QN_UUID_STR_LEN] = "", pid[QN_UUID_STR_LEN] = "";
    pr.queue = a->queue;
    pr.partition = a->partition;
    pr.transaction_id = a->dlq_txn;
    resp.replayed_as = &pr;
    if (st->code == QN_EDUPLICATE) {
        /* replayed before inside the dedup window: report it, keep the row */
        pr.status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE;
        pr.message_id = mid;
        pr.partition_id = pid;
        pr.offset = -1;
        qn_admin_reply(&a->a, &resp.base);
        return;
    }
    if (st->code != QN_OK) {
        qn_admin_store_error(&a->a, st);
        return;
    }
    const struct qn_push_result *p = r->n > 0 ? r->steps[0].push : NULL;
    if (p == NULL || p->n != 1) {
        qn_admin_finish(&a->a, QN_GRPC_INTERNAL, "the database returned no push result");
        return;
    }
    qn_uuid_format(a->msgid, mid);
    qn_uuid_format(p->segs[0].pid, pid);
    pr.status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED;
    pr.message_id = mid;
    pr.partition_id = pid;
    pr.offset = p->segs[0].base;
    resp.dead_letter_removed = r->n > 1 && r->steps[1].value > 0;
    a->a.app->pushed++;
    a->a.app->pushed_bytes += a->payload_len;
    qn_notifier_committed(a->a.app->notifier, a->queue, a->partition);
    qn_admin_reply(&a->a, &resp.base);
}

static void replay_got(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct replay *a = ud;
    if (!qn_admin_ok(&a->a, st))
        return;
    if (r->n == 0) {
        qn_admin_finish(&a->a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    const struct qn_dlq_row *d = &r->rows[0];
    Queen__V1__ReplayDeadLetterRequest *req = (Queen__V1__ReplayDeadLetterRequest *)a->a.req;
    snprintf(a->queue, sizeof a->queue, "%s", req->queue && *req->queue ? req->queue : d->queue);
    snprintf(a->partition, sizeof a->partition, "%s",
             req->partition && *req->partition ? req->partition
             : req->queue && *req->queue       ? QN_DEFAULT_PARTITION
                                               : d->partition);
    char idtext[QN_UUID_STR_LEN];
    qn_uuid_format(a->dlq_id, idtext);
    snprintf(a->dlq_txn, sizeof a->dlq_txn, "dlq:%s", idtext);
    qn_app_new_id(a->a.app, a->msgid);
    struct qn_frame f;
    memset(&f, 0, sizeof f);
    memcpy(f.message_id, a->msgid, 16);
    f.txn = (const uint8_t *)a->dlq_txn;
    f.txn_len = strlen(a->dlq_txn);
    f.payload = d->payload;
    f.payload_len = d->payload_len;
    a->payload_len = d->payload_len;
    qn_txn_hash(f.txn, f.txn_len, a->hash);
    int rc = qn_segment_pack(a->a.app->zctx, &f, 1, (int)a->a.app->cfg->zstd_level, &a->blob, NULL);
    qn_store_txn *t = NULL;
    if (rc == QN_OK)
        rc = qn_store_txn_new(a->a.app->store, &t);
    if (rc == QN_OK) {
        struct qn_push_segment seg = {.queue = a->queue,
                                      .partition = a->partition,
                                      .count = 1,
                                      .hashes = a->hash,
                                      .verified = -1,
                                      .blob = a->blob.data,
                                      .blob_len = a->blob.len};
        rc = qn_store_txn_push(t, &seg, 1);
    }
    if (rc == QN_OK)
        rc = qn_store_txn_delete_dlq(t, a->dlq_id);
    if (rc == QN_OK) {
        struct qn_call_opts opts = {qn_call_deadline_ms(a->a.call), NULL};
        rc = qn_store_txn_commit(t, &opts, replay_committed, a, &a->a.sreq[0]);
        t = NULL;
    }
    if (rc != QN_OK) {
        qn_store_txn_abandon(t);
        qn_admin_sent(&a->a, rc);
    }
}

void qn_svc_replay_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct replay *a = (struct replay *)qn_admin_new(call, msg, sizeof *a);
    if (a == NULL)
        return;
    a->a.cleanup = replay_cleanup;
    Queen__V1__ReplayDeadLetterRequest *req = (Queen__V1__ReplayDeadLetterRequest *)msg;
    if (!qn_parse_uuid_str(req->id, a->dlq_id)) {
        qn_admin_finish(&a->a, QN_GRPC_INVALID_ARGUMENT, "id is not a UUID");
        return;
    }
    if (!qn_admin_check_name(&a->a, req->queue, "queue", true) ||
        !qn_admin_check_name(&a->a, req->partition, "partition", true))
        return;
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    qn_admin_sent(
        &a->a, qn_store_get_dlq(a->a.app->store, a->dlq_id, &opts, replay_got, a, &a->a.sreq[0]));
}
