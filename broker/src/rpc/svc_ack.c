/*
 * svc_ack.c - QueueService.Ack, RenewLease and Transact, and the ack engine
 * Consume shares (qn_ack_run).
 *
 * Does: validate; group ack items by (partition, lease) and apply each group with
 * one ack_v1 call (all groups in flight at once, pipelined by storage); file the
 * dead letter a group hands off (decode the poison frame from the segment the
 * database returned, then dlq_head_v1); answer per item in request order.
 * Transact packs its pushes into one segment per (queue, partition), adds its
 * acks and lease checks, and commits them as one database transaction.
 * Does not: resolve transaction ids itself (SQL does, bounded to the leased span).
 *
 * Invariants:
 *   1. An ack op calls done() exactly once, after every group (and every DLQ
 *      follow-up) finished, unless it was cancelled first.
 *   2. A DLQ hand-off is filed under the same lease (worker) the ack used; if
 *      that lease was lost in between, nothing is filed and the message is
 *      redelivered (the retry budget stays exhausted, so the next failure files it).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "app.h"
#include "rpc/resp_arena.h"
#include "config.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/svc.h"
#include "rpc/svc_util.h"

#define DLQ_DEFAULT_ERROR "Retries exhausted"
#define ACK_ERROR_MAX 4096

int qn_ack_item_check(const Queen__V1__AckItem *it, size_t i, char *buf, size_t cap)
{
    uint8_t pid[16];
    if (!qn_parse_uuid_str(it->partition_id, pid)) {
        snprintf(buf, cap, "items[%zu].partition_id is not a UUID", i);
        return QN_EBADREQUEST;
    }
    switch (it->target_case) {
    case QUEEN__V1__ACK_ITEM__TARGET_TRANSACTION_ID:
        if (it->transaction_id == NULL || *it->transaction_id == '\0') {
            snprintf(buf, cap, "items[%zu].transaction_id is empty", i);
            return QN_EBADREQUEST;
        }
        if (strlen(it->transaction_id) > 65535) {
            snprintf(buf, cap, "items[%zu].transaction_id is longer than 65535 bytes", i);
            return QN_EBADREQUEST;
        }
        break;
    case QUEEN__V1__ACK_ITEM__TARGET_OFFSET:
        if (it->offset < 0) {
            snprintf(buf, cap, "items[%zu].offset is negative", i);
            return QN_EBADREQUEST;
        }
        break;
    default:
        snprintf(buf, cap, "items[%zu] names no message: set transaction_id or offset", i);
        return QN_EBADREQUEST;
    }
    if ((int)it->status < 0 || it->status > QUEEN__V1__ACK_STATUS__ACK_STATUS_DLQ) {
        snprintf(buf, cap, "items[%zu].status %d is unknown", i, (int)it->status);
        return QN_EBADREQUEST;
    }
    if (it->error && strlen(it->error) > ACK_ERROR_MAX) {
        snprintf(buf, cap, "items[%zu].error is longer than %d bytes", i, ACK_ERROR_MAX);
        return QN_EBADREQUEST;
    }
    if (it->lease_id && strlen(it->lease_id) > 255) {
        snprintf(buf, cap, "items[%zu].lease_id is longer than 255 bytes", i);
        return QN_EBADREQUEST;
    }
    return QN_OK;
}

bool qn_ack_request_ok(const struct qn_config *cfg, const Queen__V1__AckRequest *req, char *why,
                       size_t cap)
{
    if (req->n_items == 0) {
        snprintf(why, cap, "items is empty: an ack needs at least one item");
        return false;
    }
    if (req->n_items > (size_t)cfg->max_push_items) {
        snprintf(why, cap, "too many items: %zu (the limit is %lld)", req->n_items,
                 (long long)cfg->max_push_items);
        return false;
    }
    if (qn_name_problem(req->consumer_group, "consumer_group", true, why, cap))
        return false;
    for (size_t i = 0; i < req->n_items; i++)
        if (qn_ack_item_check(req->items[i], i, why, cap) != QN_OK)
            return false;
    return true;
}

static int store_status_of(Queen__V1__AckStatus s)
{
    switch (s) {
    case QUEEN__V1__ACK_STATUS__ACK_STATUS_FAILED: return QN_ACK_FAILED;
    case QUEEN__V1__ACK_STATUS__ACK_STATUS_RETRY: return QN_ACK_RETRY;
    case QUEEN__V1__ACK_STATUS__ACK_STATUS_DLQ: return QN_ACK_DLQ;
    default: return QN_ACK_COMPLETED;
    }
}

/* ---------------------------------------------------------------- DLQ hand-off */

static void dlq_head_done(void *ud, const struct qn_store_status *st, bool ok,
                          const uint8_t *dlq_id)
{
    (void)dlq_id;
    struct qn_dlq_job *j = ud;
    if (st->code != QN_OK)
        QN_WARN("dead-letter filing failed: %s", st->message);
    j->sreq = NULL;
    j->done(j->ud, st->code == QN_OK && ok);
}

/* Files the poison frame the ack result handed off. Returns QN_OK (done will
 * run) or an error (done will not run). */
int qn_dlq_file(struct qn_app *app, const uint8_t pid[16], const char *group,
                const char *worker, const struct qn_ack_result *r, const char *error,
                int64_t deadline, struct qn_dlq_job *j)
{
    struct qn_dlq_head_args a;
    memset(&a, 0, sizeof a);
    memcpy(a.pid, pid, 16);
    a.group = group;
    a.worker = worker;
    a.offset = r->dlq_offset;
    a.error = error && *error ? error : DLQ_DEFAULT_ERROR;
    a.txn = "";
    if (r->dlq_blob != NULL) {
        const uint8_t *raw;
        size_t rawlen;
        struct qn_frame f;
        if (qn_segment_decompress(app->zctx, r->dlq_blob, r->dlq_blob_len,
                                  (size_t)app->cfg->segment_raw_max, &raw, &rawlen) == QN_OK &&
            qn_segment_frame_at(raw, rawlen, r->dlq_base, r->dlq_offset, &f, NULL) == QN_OK) {
            memcpy(a.message_id, f.message_id, 16);
            a.txn = (const char *)f.txn;
            a.txn_len = f.txn_len;
            a.payload = f.payload;
            a.payload_len = f.payload_len;
        } else {
            QN_WARN("dead letter at offset %lld: its segment cannot be read; filed without payload",
                    (long long)r->dlq_offset);
        }
    }
    struct qn_call_opts opts = {deadline, NULL};
    return qn_store_dlq_head(app->store, &a, &opts, dlq_head_done, j, &j->sreq);
}

/* ---------------------------------------------------------------- ack engine */

struct ack_group {
    struct qn_ack_op *op;
    uint8_t pid[16];
    const char *lease;           /* borrowed from the request */
    uint32_t *idx;               /* request item indices */
    size_t n;
    qn_store_req *sreq;
    struct qn_dlq_job dlq;
    long dlq_item;               /* request index of the dead-lettered item, -1 none */
};

struct qn_ack_op {
    struct qn_app *app;
    const Queen__V1__AckRequest *req;
    const char *group;
    struct ack_group *groups;
    size_t ngroups;
    uint32_t *idx_store;
    size_t outstanding;
    int64_t deadline;
    Queen__V1__AckResult *results;
    Queen__V1__AckResult **ptrs;
    void (*done)(void *ud, enum qn_grpc_code code, const char *message,
                 const Queen__V1__AckResponse *resp);
    void *ud;
    enum qn_grpc_code fail_code;
    char fail_msg[256];
    struct event *defer;         /* completes an op whose every group failed to send */
};

static void ack_op_free(struct qn_ack_op *op)
{
    if (op == NULL)
        return;
    if (op->defer)
        event_free(op->defer);
    free(op->groups);
    free(op->idx_store);
    free(op->results);
    free(op->ptrs);
    free(op);
}

void qn_ack_cancel(struct qn_ack_op *op)
{
    if (op == NULL)
        return;
    for (size_t g = 0; g < op->ngroups; g++) {
        qn_store_cancel(op->groups[g].sreq);
        qn_store_cancel(op->groups[g].dlq.sreq);
    }
    ack_op_free(op);
}

static void ack_op_step(struct qn_ack_op *op)
{
    if (--op->outstanding > 0)
        return;
    if (op->fail_code != QN_GRPC_OK) {
        op->done(op->ud, op->fail_code, op->fail_msg, NULL);
    } else {
        Queen__V1__AckResponse resp = QUEEN__V1__ACK_RESPONSE__INIT;
        resp.n_results = op->req->n_items;
        resp.results = op->ptrs;
        op->done(op->ud, QN_GRPC_OK, NULL, &resp);
    }
    ack_op_free(op);
}

static void group_dlq_done(void *ud, bool filed)
{
    struct ack_group *g = ud;
    struct qn_ack_op *op = g->op;
    if (g->dlq_item >= 0) {
        Queen__V1__AckResult *r = &op->results[g->dlq_item];
        r->dlq = filed;
        if (filed) {
            for (size_t k = 0; k < g->n; k++)
                op->results[g->idx[k]].lease_released = true;
        } else {
            r->error = "the lease was lost before the dead letter was filed; it will be redelivered";
        }
    }
    ack_op_step(op);
}

static void group_done(void *ud, const struct qn_store_status *st, const struct qn_ack_result *r)
{
    struct ack_group *g = ud;
    struct qn_ack_op *op = g->op;
    g->sreq = NULL;
    if (st->code != QN_OK) {
        if (op->fail_code == QN_GRPC_OK) {
            op->fail_code = qn_grpc_from_store(st->code);
            snprintf(op->fail_msg, sizeof op->fail_msg, "%s",
                     st->message && *st->message ? st->message : qn_strerror(st->code));
        }
        ack_op_step(op);
        return;
    }
    long head = -1;
    int64_t head_off = INT64_MAX;
    for (size_t k = 0; k < g->n && k < r->n; k++) {
        uint32_t i = g->idx[k];
        Queen__V1__AckResult *res = &op->results[i];
        const struct qn_ack_item_result *ir = &r->items[k];
        const Queen__V1__AckItem *in = op->req->items[i];
        res->outcome = (Queen__V1__AckOutcome)ir->outcome;
        res->success = ir->outcome == QN_ACK_APPLIED || ir->outcome == QN_ACK_NOOP;
        res->offset = ir->offset;
        res->lease_released = (r->flags & QN_ACKF_RELEASED) != 0;
        int s = store_status_of(in->status);
        if (ir->outcome == QN_ACK_APPLIED && (s == QN_ACK_FAILED || s == QN_ACK_DLQ) &&
            ir->offset >= 0 && ir->offset < head_off) {
            head = (long)i;
            head_off = ir->offset;
        }
        switch (ir->outcome) {
        case QN_ACK_UNRESOLVED:
            res->error = "transaction id not found in the ackable span of this partition";
            break;
        case QN_ACK_LEASE_INVALID:
            res->error = "invalid or expired lease";
            break;
        case QN_ACK_REJECTED:
            res->error = "no consumer state for this partition and group, or offset beyond the leased batch";
            break;
        case QN_ACK_STALE:
            res->error = "already committed";
            break;
        case QN_ACK_DEFERRED:
            res->error = "deferred: an earlier message of this call failed; it will be redelivered";
            break;
        default:
            break;
        }
    }
    if (r->n != g->n) {
        op->fail_code = QN_GRPC_INTERNAL;
        snprintf(op->fail_msg, sizeof op->fail_msg, "the database answered %zu results for %zu acks",
                 r->n, g->n);
        ack_op_step(op);
        return;
    }
    if ((r->flags & QN_ACKF_DROPPED) && head >= 0)
        op->results[head].dropped = true;
    if (r->flags & QN_ACKF_DLQ_HANDOFF) {
        /* find the item that named the poison offset (the head failure) */
        g->dlq_item = -1;
        for (size_t k = 0; k < g->n; k++)
            if (r->items[k].offset == r->dlq_offset)
                g->dlq_item = (long)g->idx[k];
        const char *err = g->dlq_item >= 0 ? op->req->items[g->dlq_item]->error : NULL;
        g->dlq.done = group_dlq_done;
        g->dlq.ud = g;
        const char *worker = g->lease && *g->lease ? g->lease : "";
        if (qn_dlq_file(op->app, g->pid, op->group, worker, r, err, op->deadline, &g->dlq) == QN_OK)
            return; /* group_dlq_done steps */
    }
    ack_op_step(op);
}

static void ack_op_defer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    ack_op_step(ud);
}

/* Sort helper: (partition_id, lease_id, index). */
static const Queen__V1__AckItem *const *sort_ack_items;

static int cmp_ack(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const Queen__V1__AckItem *ix = sort_ack_items[x], *iy = sort_ack_items[y];
    int c = strcmp(ix->partition_id, iy->partition_id);
    if (c == 0)
        c = strcmp(ix->lease_id ? ix->lease_id : "", iy->lease_id ? iy->lease_id : "");
    if (c == 0)
        c = x < y ? -1 : x > y;
    return c;
}

int qn_ack_run(struct qn_app *app, const Queen__V1__AckRequest *req,
               void (*done)(void *ud, enum qn_grpc_code code, const char *message,
                            const Queen__V1__AckResponse *resp),
               void *ud, int64_t deadline_ms, struct qn_ack_op **out)
{
    size_t n = req->n_items;
    char why[300];
    if (n == 0)
        return QN_EBADREQUEST;
    struct qn_ack_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return QN_ENOMEM;
    op->app = app;
    op->req = req;
    op->group = qn_or_default(req->consumer_group, QN_QUEUE_MODE);
    op->done = done;
    op->ud = ud;
    op->deadline = deadline_ms;
    op->results = calloc(n, sizeof *op->results);
    op->ptrs = calloc(n, sizeof *op->ptrs);
    op->idx_store = calloc(n, sizeof *op->idx_store);
    op->groups = calloc(n, sizeof *op->groups);
    struct qn_ack_item *items = calloc(n, sizeof *items);
    uint8_t(*hashes)[16] = calloc(n, 16);
    if (!op->results || !op->ptrs || !op->idx_store || !op->groups || !items || !hashes) {
        free(items);
        free(hashes);
        ack_op_free(op);
        return QN_ENOMEM;
    }
    (void)why;
    for (size_t i = 0; i < n; i++) {
        queen__v1__ack_result__init(&op->results[i]);
        op->results[i].index = (uint32_t)i;
        op->results[i].offset = -1;
        op->ptrs[i] = &op->results[i];
        op->idx_store[i] = (uint32_t)i;
    }
    sort_ack_items = (const Queen__V1__AckItem *const *)req->items;
    qsort(op->idx_store, n, sizeof *op->idx_store, cmp_ack);
    sort_ack_items = NULL;

    /* groups */
    for (size_t s = 0; s < n;) {
        const Queen__V1__AckItem *a = req->items[op->idx_store[s]];
        size_t e = s + 1;
        while (e < n && strcmp(req->items[op->idx_store[e]]->partition_id, a->partition_id) == 0 &&
               strcmp(req->items[op->idx_store[e]]->lease_id ? req->items[op->idx_store[e]]->lease_id : "",
                      a->lease_id ? a->lease_id : "") == 0)
            e++;
        struct ack_group *g = &op->groups[op->ngroups++];
        g->op = op;
        qn_parse_uuid_str(a->partition_id, g->pid);
        g->lease = a->lease_id;
        g->idx = op->idx_store + s;
        g->n = e - s;
        g->dlq_item = -1;
        s = e;
    }
    op->outstanding = op->ngroups + 1; /* +1 while sending, see below */
    for (size_t gi = 0; gi < op->ngroups; gi++) {
        struct ack_group *g = &op->groups[gi];
        for (size_t k = 0; k < g->n; k++) {
            const Queen__V1__AckItem *in = req->items[g->idx[k]];
            struct qn_ack_item *it = &items[k];
            memset(it, 0, sizeof *it);
            it->status = store_status_of(in->status);
            if (in->target_case == QUEEN__V1__ACK_ITEM__TARGET_TRANSACTION_ID) {
                qn_txn_hash(in->transaction_id, strlen(in->transaction_id), hashes[k]);
                it->hash = hashes[k];
            } else {
                it->offset = in->offset;
            }
        }
        struct qn_ack_args args;
        memcpy(args.pid, g->pid, 16);
        args.group = op->group;
        args.worker = g->lease ? g->lease : "";
        args.items = items;
        args.n = g->n;
        struct qn_call_opts opts = {deadline_ms, NULL};
        int rc = qn_store_ack(app->store, &args, &opts, group_done, g, &g->sreq);
        if (rc != QN_OK) {
            struct qn_store_status st = {rc, "", qn_strerror(rc)};
            g->sreq = NULL;
            /* steps through the normal path; outstanding still holds the sending
             * reference, so done() cannot run on this stack */
            group_done(g, &st, NULL);
        }
    }
    free(items);
    free(hashes);
    if (out)
        *out = op;
    if (op->outstanding > 1) {
        op->outstanding--; /* the sending reference */
        return QN_OK;
    }
    /* Every group failed to send: complete from a later loop turn, never inside
     * the caller's call. */
    op->defer = evtimer_new(app->base, ack_op_defer_cb, op);
    if (op->defer == NULL) {
        ack_op_free(op);
        if (out)
            *out = NULL;
        return QN_ENOMEM;
    }
    struct timeval zero = {0, 0};
    evtimer_add(op->defer, &zero);
    return QN_OK;
}

/* ---------------------------------------------------------------- Ack RPC */

struct ack_rpc {
    qn_call *call;
    Queen__V1__AckRequest *req;
    struct qn_ack_op *op;
};

static void ack_rpc_done(void *ud, enum qn_grpc_code code, const char *message,
                         const Queen__V1__AckResponse *resp)
{
    struct ack_rpc *a = ud;
    qn_call *call = a->call;
    qn_call_set_data(call, NULL);
    if (code == QN_GRPC_OK) {
        if (qn_call_send(call, &resp->base) == QN_OK)
            qn_call_finish(call, QN_GRPC_OK, NULL);
        else
            qn_call_finish(call, QN_GRPC_INTERNAL, "response larger than the send limit");
    } else {
        qn_call_finish(call, code, message);
    }
    protobuf_c_message_free_unpacked(&a->req->base, NULL);
    free(a);
}

void qn_svc_ack(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app();
    Queen__V1__AckRequest *req = (Queen__V1__AckRequest *)msg;
    char why[300];
    app->rpcs++;
    enum qn_grpc_code bad = QN_GRPC_OK;
    if (!qn_ack_request_ok(app->cfg, req, why, sizeof why))
        bad = QN_GRPC_INVALID_ARGUMENT;
    if (bad == QN_GRPC_OK && app->shutting_down) {
        snprintf(why, sizeof why, "the broker is shutting down");
        bad = QN_GRPC_UNAVAILABLE;
    }
    if (bad != QN_GRPC_OK) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, bad, why);
        return;
    }
    struct ack_rpc *a = calloc(1, sizeof *a);
    if (a == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    a->call = call;
    a->req = req;
    qn_call_set_data(call, a);
    int rc = qn_ack_run(app, req, ack_rpc_done, a, qn_call_deadline_ms(call), &a->op);
    if (rc != QN_OK) {
        qn_call_set_data(call, NULL);
        protobuf_c_message_free_unpacked(msg, NULL);
        free(a);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
    }
}

void qn_svc_ack_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct ack_rpc *a = qn_call_data(call);
    if (a == NULL)
        return;
    qn_ack_cancel(a->op);
    protobuf_c_message_free_unpacked(&a->req->base, NULL);
    free(a);
}

/* ---------------------------------------------------------------- RenewLease */

struct renew_rpc {
    qn_call *call;
    qn_store_req *sreq;
};

static void renew_done(void *ud, const struct qn_store_status *st, int32_t renewed,
                       int64_t expires_at_us)
{
    struct renew_rpc *r = ud;
    qn_call *call = r->call;
    qn_call_set_data(call, NULL);
    free(r);
    if (st->code != QN_OK) {
        qn_finish_store_error(call, st);
        return;
    }
    Queen__V1__RenewLeaseResponse resp = QUEEN__V1__RENEW_LEASE_RESPONSE__INIT;
    resp.renewed = renewed > 0;
    resp.partitions = renewed > 0 ? (uint32_t)renewed : 0;
    resp.expires_at_us = renewed > 0 ? expires_at_us : 0;
    if (qn_call_send(call, &resp.base) == QN_OK)
        qn_call_finish(call, QN_GRPC_OK, NULL);
    else
        qn_call_finish(call, QN_GRPC_INTERNAL, "cannot send the response");
}

void qn_svc_renew(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app();
    Queen__V1__RenewLeaseRequest *req = (Queen__V1__RenewLeaseRequest *)msg;
    app->rpcs++;
    char why[200];
    if (req->lease_id == NULL || *req->lease_id == '\0') {
        snprintf(why, sizeof why, "lease_id is required");
    } else if (strlen(req->lease_id) > 255) {
        snprintf(why, sizeof why, "lease_id is longer than 255 bytes");
    } else if (req->seconds > 86400) {
        snprintf(why, sizeof why, "seconds %u is over the limit of 86400", req->seconds);
    } else {
        why[0] = '\0';
    }
    if (why[0]) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    struct renew_rpc *r = calloc(1, sizeof *r);
    if (r == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    r->call = call;
    qn_call_set_data(call, r);
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    int rc = qn_store_renew_lease(app->store, req->lease_id,
                                  (int32_t)(req->seconds ? req->seconds : 60), &opts, renew_done,
                                  r, &r->sreq);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc != QN_OK) {
        qn_call_set_data(call, NULL);
        free(r);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
    }
}

void qn_svc_renew_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct renew_rpc *r = qn_call_data(call);
    if (r == NULL)
        return;
    qn_store_cancel(r->sreq);
    free(r);
}
