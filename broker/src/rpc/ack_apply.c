/*
 * rpc/ack_apply.c - the ack engine (see ack_apply.h): applies an AckRequest for
 * Ack and Consume's in-band acks, and files the dead letters an ack hands off
 * (Transact files its own through qn_dlq_file too).
 *
 * Does: with auth on, find the queue of every named partition in the caller's
 * tenant (partition_queues_v1) and check the consume grant on each before any
 * ack is sent (a partition of another tenant reads as unknown: its items are
 * rejected and nothing is sent for them); group ack items by (partition, lease)
 * and apply each group with one ack_v1 (bundled with the loop's other acks,
 * from any call or stream, into one ack_bundle_v1 call per flush: engine/cfusion.h); renew leases
 * the same way (qn_renew_run); file the dead letter a group hands off (decode the poison frame from
 * the segment the database returned, then dlq_head_v1); answer per item in request order. A group
 * whose ack_v1 was sent and never answered (QN_EINDOUBT) is sent again, with backoff, until it
 * answers or the op's deadline (30 s without one) passes, when it holds completed acks only (a
 * repeated completed ack is noop: nothing moves twice); a positional item the re-send finds
 * LEASE_INVALID while the cursor is at or past it was acknowledged by the first attempt (which
 * released the lease) and is reported NOOP. A group with failed / retry / dlq
 * items is never repeated (the retry budget would be spent twice): in doubt, the
 * op fails with UNKNOWN (outcome unknown), as does a group whose re-sends run
 * out of time.
 * Does not: validate the request (qn_ack_request_ok, validate.h, before),
 * resolve transaction ids itself (SQL does, bounded to the leased span).
 *
 * Invariants:
 *   1. An ack op calls done() exactly once, after every group (and every DLQ
 *      follow-up) finished, unless it was cancelled first; never inside
 *      qn_ack_run().
 *   2. A DLQ hand-off is filed under the same lease (worker) the ack used; if
 *      that lease was lost in between, nothing is filed and the message is
 *      redelivered (the retry budget stays exhausted, so the next failure files it).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "app.h"
#include "engine/cfusion.h"
#include "config.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/ack_apply.h"
#include "rpc/authz.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"
#include "timer.h"

#define DLQ_DEFAULT_ERROR "Retries exhausted"
/* Backoff between re-sends of an ack in doubt, and how long an ack without a
 * deadline (Consume's in-band acks) keeps re-sending before its outcome is
 * answered unknown. */
#define ACK_RESEND_MIN_MS 50
#define ACK_RESEND_MAX_MS 1000
#define ACK_RESOLVE_MAX_MS 30000

static int store_status_of(Queen__V1__AckStatus s)
{
    switch (s) {
    case QUEEN__V1__ACK_STATUS__ACK_STATUS_FAILED:
        return QN_ACK_FAILED;
    case QUEEN__V1__ACK_STATUS__ACK_STATUS_RETRY:
        return QN_ACK_RETRY;
    case QUEEN__V1__ACK_STATUS__ACK_STATUS_DLQ:
        return QN_ACK_DLQ;
    default:
        return QN_ACK_COMPLETED;
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
int qn_dlq_file(struct qn_app *app, const uint8_t pid[16], const char *group, const char *worker,
                const struct qn_ack_result *r, const char *error, int64_t deadline,
                struct qn_dlq_job *j)
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
    struct qn_call_opts opts = {deadline, NULL, NULL}; /* keyed on the partition */
    return qn_store_dlq_head(app->store, &a, &opts, dlq_head_done, j, &j->sreq);
}

/* ---------------------------------------------------------------- ack engine */

struct ack_group {
    struct qn_ack_op *op;
    uint8_t pid[16];
    const char *lease; /* borrowed from the request */
    uint32_t *idx;     /* request item indices */
    size_t n;
    struct qn_cfusion_ack *sreq; /* ack_v1 through consume fusion's bundled acks */
    struct qn_dlq_job dlq;
    long dlq_item;        /* request index of the dead-lettered item, -1 none */
    bool resent;          /* the first ack_v1 was in doubt: this group was sent again */
    int64_t resend_ms;    /* next backoff between re-sends */
    struct event *resend; /* re-send timer (made on the first doubt) */
    bool skip;            /* its partition is not in the caller's tenant: answered rejected */
    int64_t sent_ms;      /* when its (last) ack_v1 was handed to consume fusion */
};

struct qn_ack_op {
    struct qn_app *app;
    qn_call *call; /* for the caller's principal, tenant and audit lines */
    const Queen__V1__AckRequest *req;
    qn_store_req *lookup; /* partition_queues_v1 in flight (auth on) */
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
    struct event *defer;   /* completes an op whose every group failed to send */
    int64_t resolve_until; /* monotonic ms: re-sends of groups in doubt stop here */
};

static void ack_op_free(struct qn_ack_op *op)
{
    if (op == NULL)
        return;
    if (op->defer)
        event_free(op->defer);
    for (size_t g = 0; g < op->ngroups; g++)
        if (op->groups[g].resend)
            event_free(op->groups[g].resend);
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
    qn_store_cancel(op->lookup);
    for (size_t g = 0; g < op->ngroups; g++) {
        qn_cfusion_ack_cancel(op->groups[g].sreq);
        qn_store_cancel(op->groups[g].dlq.sreq);
    }
    ack_op_free(op); /* frees the re-send timers too */
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
            /* the hand-off released the lease: as an ack's release */
            if (op->call != NULL)
                qn_cfusion_released(op->app->cfusion, qn_authz_tenant(op->call), g->pid, op->group);
        } else {
            r->error =
                "the lease was lost before the dead letter was filed; it will be redelivered";
        }
    }
    ack_op_step(op);
}

/* Whether sending the group again is harmless: completed acks only (a repeated
 * completed ack is noop). A failed / retry / dlq ack spends the retry budget or
 * releases the lease, so it is not repeated. */
static bool group_idempotent(const struct ack_group *g)
{
    for (size_t k = 0; k < g->n; k++)
        if (store_status_of(g->op->req->items[g->idx[k]]->status) != QN_ACK_COMPLETED)
            return false;
    return true;
}

static int group_send(struct ack_group *g);
static void group_done(void *ud, const struct qn_store_status *st, const struct qn_ack_result *r);

static void group_fail(struct ack_group *g, const struct qn_store_status *st)
{
    struct qn_ack_op *op = g->op;
    if (op->fail_code == QN_GRPC_OK) {
        op->fail_code = qn_grpc_from_status(st);
        snprintf(op->fail_msg, sizeof op->fail_msg, "%s", qn_status_message(st));
    }
    ack_op_step(op);
}

static void group_resend_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct ack_group *g = ud;
    int rc = group_send(g);
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        group_done(g, &st, NULL);
    }
}

/* The group's ack_v1 was sent and its result never came (QN_EINDOUBT), or a
 * re-send could not be sent: sends it again after a backoff while the op may
 * still resolve. Returns false when it will not (the caller fails the group as
 * outcome unknown). */
static bool group_resend_later(struct ack_group *g)
{
    struct qn_ack_op *op = g->op;
    if (!group_idempotent(g) || qn_store_now_ms() + g->resend_ms >= op->resolve_until)
        return false;
    if (g->resend == NULL)
        g->resend = evtimer_new(op->app->base, group_resend_cb, g);
    if (g->resend == NULL)
        return false;
    if (!g->resent)
        QN_INFO("ack in doubt (database connection lost after it was sent): sending it again");
    g->resent = true;
    qn_timer_after(g->resend, g->resend_ms);
    g->resend_ms = g->resend_ms * 2 > ACK_RESEND_MAX_MS ? ACK_RESEND_MAX_MS : g->resend_ms * 2;
    return true;
}

static void group_done(void *ud, const struct qn_store_status *st, const struct qn_ack_result *r)
{
    struct ack_group *g = ud;
    struct qn_ack_op *op = g->op;
    g->sreq = NULL;
    if (st->code != QN_OK) {
        /* In doubt, or a re-send that did not go out (the first attempt may
         * still have committed): send again. Anything else after a doubt
         * leaves the outcome unknown. */
        bool doubt = st->code == QN_EINDOUBT ||
                     (g->resent && (st->code == QN_EUNAVAILABLE || st->code == QN_ETIMEOUT ||
                                    st->code == QN_EBUSY));
        if (doubt && group_resend_later(g))
            return;
        if (doubt || g->resent) {
            struct qn_store_status unknown = {QN_EINDOUBT, "", ""};
            group_fail(g, &unknown);
            return;
        }
        group_fail(g, st);
        return;
    }
    long head = -1;
    int64_t head_off = INT64_MAX;
    for (size_t k = 0; k < g->n && k < r->n; k++) {
        uint32_t i = g->idx[k];
        Queen__V1__AckResult *res = &op->results[i];
        const struct qn_ack_item_result *ir = &r->items[k];
        const Queen__V1__AckItem *in = op->req->items[i];
        int outcome = ir->outcome;
        int64_t off = ir->offset;
        if (g->resent && outcome == QN_ACK_LEASE_INVALID &&
            in->target_case == QUEEN__V1__ACK_ITEM__TARGET_OFFSET && r->committed >= 0 &&
            in->offset <= r->committed) {
            /* Sent again after a doubt: the first attempt committed (the cursor is
             * past the item) and released the lease. It is acknowledged. */
            outcome = QN_ACK_NOOP;
            off = in->offset;
        }
        res->outcome = (Queen__V1__AckOutcome)outcome;
        res->success = outcome == QN_ACK_APPLIED || outcome == QN_ACK_NOOP;
        res->offset = off;
        res->lease_released = (r->flags & QN_ACKF_RELEASED) != 0;
        int s = store_status_of(in->status);
        if (outcome == QN_ACK_APPLIED && (s == QN_ACK_FAILED || s == QN_ACK_DLQ) &&
            ir->offset >= 0 && ir->offset < head_off) {
            head = (long)i;
            head_off = ir->offset;
        }
        switch (outcome) {
        case QN_ACK_UNRESOLVED:
            res->error = "transaction id not found in the ackable span of this partition";
            break;
        case QN_ACK_LEASE_INVALID:
            res->error = "invalid or expired lease";
            break;
        case QN_ACK_REJECTED:
            res->error =
                "no consumer state for this partition and group, or offset beyond the leased batch";
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
        snprintf(op->fail_msg, sizeof op->fail_msg,
                 "the database answered %zu results for %zu acks", r->n, g->n);
        ack_op_step(op);
        return;
    }
    if ((r->flags & QN_ACKF_RELEASED) && op->call != NULL)
        /* the partition is free for the group again: one parked consumer
         * leases what is left there (engine/cfusion.h) */
        qn_cfusion_ack_released(op->app->cfusion, qn_authz_tenant(op->call), g->pid, op->group,
                                (r->flags & QN_ACKF_MORE) != 0, g->sent_ms);
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

/* Sends the group's ack_v1 (again, after a doubt: the same items). Returns
 * QN_OK (group_done will run) or an error (it will not). */
static int group_send(struct ack_group *g)
{
    struct qn_ack_op *op = g->op;
    const Queen__V1__AckRequest *req = op->req;
    struct qn_ack_item *items = calloc(g->n, sizeof *items);
    uint8_t(*hashes)[16] = calloc(g->n, 16);
    int rc = QN_ENOMEM;
    if (items == NULL || hashes == NULL)
        goto out;
    for (size_t k = 0; k < g->n; k++) {
        const Queen__V1__AckItem *in = req->items[g->idx[k]];
        struct qn_ack_item *it = &items[k];
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
    /* ack_v1 is keyed on the partition (its tenant was checked before the
     * first send, qn_ack_run); the tenant rides along like every call's */
    struct qn_call_opts opts = qn_authz_opts(op->call, op->deadline);
    /* bundled with the loop's other acks into one ack_bundle_v1 per flush
     * (engine/cfusion.h); group_done runs after that bundle's commit */
    g->sent_ms = qn_store_now_ms();
    rc = qn_cfusion_ack(op->app->cfusion, op->app->store, &args, &opts, group_done, g, &g->sreq);
    if (rc != QN_OK)
        g->sreq = NULL;
out:
    free(items);
    free(hashes);
    return rc;
}

static void ack_op_defer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    ack_op_step(ud);
}

/* Sort order of item indices: (partition_id, lease_id, index). ud is the
 * request's item array. */
static int cmp_ack(const void *a, const void *b, void *ud)
{
    const Queen__V1__AckItem *const *items = ud;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const Queen__V1__AckItem *ix = items[x], *iy = items[y];
    int c = strcmp(ix->partition_id, iy->partition_id);
    if (c == 0)
        c = strcmp(ix->lease_id ? ix->lease_id : "", iy->lease_id ? iy->lease_id : "");
    if (c == 0)
        c = x < y ? -1 : x > y;
    return c;
}

static int ack_send(struct qn_ack_op *op);
static void ack_authorized(void *ud, const struct qn_store_status *st,
                           const struct qn_pid_queues_result *res);

int qn_ack_run(struct qn_app *app, qn_call *call, const Queen__V1__AckRequest *req,
               void (*done)(void *ud, enum qn_grpc_code code, const char *message,
                            const Queen__V1__AckResponse *resp),
               void *ud, int64_t deadline_ms, struct qn_ack_op **out)
{
    size_t n = req->n_items;
    if (out)
        *out = NULL;
    if (n == 0)
        return QN_EBADREQUEST;
    struct qn_ack_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return QN_ENOMEM;
    op->app = app;
    op->call = call;
    op->req = req;
    op->group = qn_or_default(req->consumer_group, QN_QUEUE_MODE);
    op->done = done;
    op->ud = ud;
    op->deadline = deadline_ms;
    op->results = calloc(n, sizeof *op->results);
    op->ptrs = calloc(n, sizeof *op->ptrs);
    op->idx_store = calloc(n, sizeof *op->idx_store);
    op->groups = calloc(n, sizeof *op->groups);
    if (!op->results || !op->ptrs || !op->idx_store || !op->groups) {
        ack_op_free(op);
        return QN_ENOMEM;
    }
    op->resolve_until = deadline_ms > 0 ? deadline_ms : qn_store_now_ms() + ACK_RESOLVE_MAX_MS;
    for (size_t i = 0; i < n; i++) {
        queen__v1__ack_result__init(&op->results[i]);
        op->results[i].index = (uint32_t)i;
        op->results[i].offset = -1;
        op->ptrs[i] = &op->results[i];
        op->idx_store[i] = (uint32_t)i;
    }
    qn_svc_sort_idx(op->idx_store, n, cmp_ack, req->items);

    /* groups */
    for (size_t s = 0; s < n;) {
        const Queen__V1__AckItem *a = req->items[op->idx_store[s]];
        size_t e = s + 1;
        while (e < n && strcmp(req->items[op->idx_store[e]]->partition_id, a->partition_id) == 0 &&
               strcmp(req->items[op->idx_store[e]]->lease_id
                          ? req->items[op->idx_store[e]]->lease_id
                          : "",
                      a->lease_id ? a->lease_id : "") == 0)
            e++;
        struct ack_group *g = &op->groups[op->ngroups++];
        g->op = op;
        qn_parse_uuid_str(a->partition_id, g->pid);
        g->lease = a->lease_id;
        g->idx = op->idx_store + s;
        g->n = e - s;
        g->dlq_item = -1;
        g->resend_ms = ACK_RESEND_MIN_MS;
        s = e;
    }
    int rc;
    if (qn_authz_principal(op->call) == NULL) {
        rc = ack_send(op);
        if (rc != QN_OK) {
            ack_op_free(op);
            return rc;
        }
        if (out)
            *out = op;
        return QN_OK;
    }
    /* auth: the queue of every partition first, in the caller's tenant */
    uint8_t(*pids)[16] = calloc(op->ngroups, 16);
    if (pids == NULL) {
        ack_op_free(op);
        return QN_ENOMEM;
    }
    for (size_t gi = 0; gi < op->ngroups; gi++)
        memcpy(pids[gi], op->groups[gi].pid, 16);
    struct qn_call_opts opts = qn_authz_opts(op->call, op->deadline);
    rc = qn_store_partition_queues(app->store, (const uint8_t(*)[16])pids, op->ngroups, &opts,
                                   ack_authorized, op, &op->lookup);
    free(pids);
    if (rc != QN_OK) {
        ack_op_free(op);
        return rc;
    }
    if (out)
        *out = op;
    return QN_OK;
}

/* Sends every group not already answered; completes later (never inside). */
static int ack_send(struct qn_ack_op *op)
{
    struct qn_app *app = op->app;
    op->outstanding = op->ngroups + 1; /* +1 while sending, see below */
    for (size_t gi = 0; gi < op->ngroups; gi++) {
        struct ack_group *g = &op->groups[gi];
        if (g->skip) {
            op->outstanding--; /* answered already (not in the caller's tenant) */
            continue;
        }
        int rc = group_send(g);
        if (rc != QN_OK) {
            struct qn_store_status st = {rc, "", qn_strerror(rc)};
            g->sreq = NULL;
            /* steps through the normal path; outstanding still holds the sending
             * reference, so done() cannot run on this stack */
            group_done(g, &st, NULL);
        }
    }
    if (op->outstanding > 1) {
        op->outstanding--; /* the sending reference */
        return QN_OK;
    }
    /* Every group failed to send (or none was left to send): complete from a
     * later loop turn, never inside the caller's call. */
    op->defer = evtimer_new(app->base, ack_op_defer_cb, op);
    if (op->defer == NULL)
        return QN_ENOMEM;
    struct timeval zero = {0, 0};
    evtimer_add(op->defer, &zero);
    return QN_OK;
}

/* partition_queues_v1 answered: refuse the whole call when a queue lacks the
 * consume grant (nothing was sent), answer the groups of partitions outside the
 * caller's tenant as rejected, send the rest. */
static void ack_authorized(void *ud, const struct qn_store_status *st,
                           const struct qn_pid_queues_result *res)
{
    struct qn_ack_op *op = ud;
    op->lookup = NULL;
    if (st->code != QN_OK) {
        op->done(op->ud, qn_grpc_from_status(st), qn_status_message(st), NULL);
        ack_op_free(op);
        return;
    }
    for (size_t gi = 0; gi < op->ngroups; gi++) {
        struct ack_group *g = &op->groups[gi];
        const char *queue = NULL;
        for (size_t k = 0; k < res->n && queue == NULL; k++)
            if (memcmp(res->rows[k].pid, g->pid, 16) == 0)
                queue = res->rows[k].queue;
        if (queue == NULL) {
            g->skip = true;
            for (size_t k = 0; k < g->n; k++) {
                Queen__V1__AckResult *r = &op->results[g->idx[k]];
                r->outcome = QUEEN__V1__ACK_OUTCOME__ACK_OUTCOME_REJECTED;
                r->error = "partition not found";
            }
            continue;
        }
        char why[400];
        if (!qn_authz_check(op->call, QN_SCOPE_CONSUME, queue, why, sizeof why)) {
            op->done(op->ud, QN_GRPC_PERMISSION_DENIED, why, NULL);
            ack_op_free(op);
            return;
        }
    }
    int rc = ack_send(op);
    if (rc != QN_OK) {
        op->done(op->ud, qn_grpc_from_store(rc), qn_strerror(rc), NULL);
        ack_op_free(op);
    }
}

/* ---------------------------------------------------------------- renewals */

/* A renewal whose result was lost (QN_EINDOUBT) is sent again with backoff
 * until it answers or the deadline (30 s without one) is near: renewing sets
 * the expiry from now, so a repeat extends it once more, never less. */
#define RENEW_RESEND_MIN_MS 50
#define RENEW_RESEND_MAX_MS 1000
#define RENEW_RESOLVE_MAX_MS 30000

struct qn_renew_op {
    struct qn_app *app;
    qn_call *call;
    char lease[256];
    int32_t seconds;
    int64_t deadline;      /* 0 = none */
    int64_t resolve_until; /* re-sends stop here */
    int64_t backoff_ms;    /* next backoff between re-sends */
    bool resent;           /* the first renew_lease_v1 was in doubt */
    struct event *timer;   /* re-send (made on the first doubt) */
    qn_store_req *sreq;
    void (*done)(void *ud, enum qn_grpc_code code, const char *message, int32_t renewed,
                 int64_t expires_at_us);
    void *ud;
};

static void renew_op_free(struct qn_renew_op *op)
{
    if (op->timer)
        event_free(op->timer);
    free(op);
}

void qn_renew_cancel(struct qn_renew_op *op)
{
    if (op == NULL)
        return;
    qn_store_cancel(op->sreq);
    renew_op_free(op);
}

static void renew_end(struct qn_renew_op *op, enum qn_grpc_code code, const char *msg,
                      int32_t renewed, int64_t exp)
{
    op->done(op->ud, code, msg, renewed, exp);
    renew_op_free(op);
}

static int renew_send(struct qn_renew_op *op);

static void renew_renewed(void *ud, const struct qn_store_status *st, int32_t renewed,
                          int64_t expires_at_us);

static void renew_timer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct qn_renew_op *op = ud;
    int rc = renew_send(op);
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        renew_renewed(op, &st, 0, 0);
    }
}

static void renew_renewed(void *ud, const struct qn_store_status *st, int32_t renewed,
                          int64_t expires_at_us)
{
    struct qn_renew_op *op = ud;
    op->sreq = NULL;
    bool doubt = st->code == QN_EINDOUBT ||
                 (op->resent &&
                  (st->code == QN_EUNAVAILABLE || st->code == QN_ETIMEOUT || st->code == QN_EBUSY));
    if (doubt && qn_store_now_ms() + op->backoff_ms < op->resolve_until) {
        if (op->timer == NULL)
            op->timer = evtimer_new(op->app->base, renew_timer_cb, op);
        if (op->timer != NULL) {
            op->resent = true;
            qn_timer_after(op->timer, op->backoff_ms);
            op->backoff_ms =
                op->backoff_ms * 2 > RENEW_RESEND_MAX_MS ? RENEW_RESEND_MAX_MS : op->backoff_ms * 2;
            return;
        }
    }
    if (st->code != QN_OK && (doubt || op->resent)) {
        struct qn_store_status u = {QN_EINDOUBT, "", ""};
        renew_end(op, qn_grpc_from_status(&u), qn_status_message(&u), 0, 0);
        return;
    }
    if (st->code != QN_OK) {
        renew_end(op, qn_grpc_from_status(st), qn_status_message(st), 0, 0);
        return;
    }
    if (renewed > 0 && expires_at_us > 0 && op->call != NULL)
        /* consume fusion's holds of this lease live on (engine/cfusion.h) */
        qn_cfusion_renewed(op->app->cfusion, qn_authz_tenant(op->call), op->lease,
                           qn_cfusion_lease_ms(expires_at_us, qn_store_now_ms()));
    renew_end(op, QN_GRPC_OK, NULL, renewed, expires_at_us);
}

static int renew_send(struct qn_renew_op *op)
{
    /* keyed on the lease (its tenant checked first with auth on) */
    struct qn_call_opts opts = qn_authz_opts(op->call, op->deadline);
    int rc = qn_store_renew_lease(op->app->store, op->lease, op->seconds, &opts, renew_renewed, op,
                                  &op->sreq);
    if (rc != QN_OK)
        op->sreq = NULL;
    return rc;
}

static void renew_authorized(void *ud, const struct qn_store_status *st,
                             const struct qn_pid_queues_result *res)
{
    struct qn_renew_op *op = ud;
    op->sreq = NULL;
    if (st->code != QN_OK) {
        renew_end(op, qn_grpc_from_status(st), qn_status_message(st), 0, 0);
        return;
    }
    if (res->n == 0) {
        renew_end(op, QN_GRPC_OK, NULL, 0, 0); /* nothing live under this lease */
        return;
    }
    for (size_t i = 0; i < res->n; i++)
        if (res->rows[i].queue[0] == '\0') {
            /* a lease of another tenant: unknown here, and never touched */
            renew_end(op, QN_GRPC_OK, NULL, 0, 0);
            return;
        }
    for (size_t i = 0; i < res->n; i++) {
        char why[400];
        if (!qn_authz_check(op->call, QN_SCOPE_CONSUME, res->rows[i].queue, why, sizeof why)) {
            renew_end(op, QN_GRPC_PERMISSION_DENIED, why, 0, 0);
            return;
        }
    }
    int rc = renew_send(op);
    if (rc != QN_OK)
        renew_end(op, qn_grpc_from_store(rc), qn_strerror(rc), 0, 0);
}

int qn_renew_run(struct qn_app *app, qn_call *call, const char *lease, int32_t seconds,
                 int64_t deadline_ms,
                 void (*done)(void *ud, enum qn_grpc_code code, const char *message,
                              int32_t renewed, int64_t expires_at_us),
                 void *ud, struct qn_renew_op **out)
{
    *out = NULL;
    if (strlen(lease) >= sizeof((struct qn_renew_op *)0)->lease)
        return QN_EINVAL;
    struct qn_renew_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return QN_ENOMEM;
    op->app = app;
    op->call = call;
    memcpy(op->lease, lease, strlen(lease) + 1);
    op->seconds = seconds;
    op->deadline = deadline_ms;
    op->resolve_until = deadline_ms > 0 ? deadline_ms : qn_store_now_ms() + RENEW_RESOLVE_MAX_MS;
    op->backoff_ms = RENEW_RESEND_MIN_MS;
    op->done = done;
    op->ud = ud;
    int rc;
    if (qn_authz_principal(call) == NULL) {
        rc = renew_send(op);
    } else {
        struct qn_call_opts opts = qn_authz_opts(call, deadline_ms);
        rc = qn_store_lease_queues(app->store, op->lease, &opts, renew_authorized, op, &op->sreq);
    }
    if (rc != QN_OK) {
        renew_op_free(op);
        return rc;
    }
    *out = op;
    return QN_OK;
}
