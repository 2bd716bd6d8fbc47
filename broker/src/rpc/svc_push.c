/*
 * rpc/svc_push.c - QueueService.Push.
 *
 * Does: validate the whole request before anything is written (names, payload
 * sizes, transaction-id lengths, trace ids, item count, the size of the answer);
 * check the produce grant of every item's queue (a refusal writes nothing);
 * mint message ids; stamp the principal's name into every frame as its
 * producer sub (flag 2; the client has no way to set it); dedup layer 1 (first
 * wins inside the request, per queue and partition); hand each (queue,
 * partition) group to fusion in the caller's tenant; answer once every item is
 * resolved, in request order.
 * Payloads of queues with encryption_enabled are sealed (rpc/crypt.h) before
 * they are packed; a push whose queues' flags are not known yet waits for them
 * in crypt.c's FIFO, so pushes keep their order.
 * When items become in doubt (their flush was sent and its result lost; fusion
 * resolves it), a call with a deadline is answered just before it
 * (DOUBT_MARGIN_MS) if they are not resolved by then: resolved items with their
 * results, the rest PUSH_STATUS_UNKNOWN (all of them: the status UNKNOWN), so
 * the client learns "outcome unknown" rather than DEADLINE_EXCEEDED or, worse,
 * UNAVAILABLE. A call without a deadline waits for the resolution.
 * Does not: decide duplicates across requests (fusion layer 2 and SQL do), retry.
 *
 * Invariants:
 *   1. Nothing is submitted unless every item validated.
 *   2. The job holds one extra reference while items are being submitted, so
 *      done() cannot run (and free the RPC) in the middle of submission.
 *   3. The request message stays alive until done(): frames borrow its bytes.
 *   4. The call is answered once: by done(), or by the doubt timer (which then
 *      detaches the call as a cancel does; done() frees later).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "engine/fusion.h"
#include "log.h"
#include "queen/error.h"
#include "rpc/authz.h"
#include "rpc/crypt.h"
#include "rpc/push_route.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"
#include "timer.h"

/* A push in doubt answers this long before its deadline (as a long poll does),
 * so the answer reaches the client before it gives up on its own. */
#define DOUBT_MARGIN_MS 20

struct push_rpc {
    struct qn_push_job job;
    struct qn_crypt_wait wait; /* learning which queues are encrypted (first) */
    struct qn_app *app;
    qn_call *call;               /* NULL once the call was cancelled or answered */
    Queen__V1__PushRequest *req; /* owned */
    char (*minted)[QN_UUID_STR_LEN];
    struct event *doubt_timer; /* armed when items became in doubt */
    struct qn_conn_slot *slot; /* the connection's database slot, until done */
    char *sub;           /* owned copy of the principal's name: frames borrow it until done, and
                            the call (which owns the principal) may be freed before that */
    const char **queues; /* the distinct queues of the request (borrowed from req) */
    size_t nqueues;
    uint8_t **envs; /* sealed payloads of encrypted queues' items (owned), or NULL */
    bool submitted; /* handed to fusion: done() frees */
};

static void push_free(struct push_rpc *p)
{
    if (p->doubt_timer)
        event_free(p->doubt_timer);
    qn_conn_budget_give(p->slot);
    for (size_t i = 0; p->envs && i < p->job.nitems; i++)
        free(p->envs[i]);
    free(p->envs);
    free(p->queues);
    free(p->sub);
    protobuf_c_message_free_unpacked(&p->req->base, NULL);
    free(p->job.items);
    free(p->minted);
    free(p);
}

static const char *item_txn(const struct qn_push_item *it, char *buf)
{
    memcpy(buf, it->frame.txn, it->frame.txn_len);
    buf[it->frame.txn_len] = '\0';
    return buf;
}

/* Answers the call from the items' states: per-item results, or one status
 * when every item failed for the same reason (nothing was written), or UNKNOWN
 * when no item has a known outcome. Items still pending (answered before they
 * were resolved, see the doubt timer) are PUSH_STATUS_UNKNOWN. */
static void push_answer(struct push_rpc *p, qn_call *call)
{
    struct qn_push_job *job = &p->job;
    size_t n = job->nitems;
    int common_err = job->items[0].status == QN_ITEM_FAILED    ? job->items[0].err
                     : job->items[0].status == QN_ITEM_PENDING ? QN_EINDOUBT
                                                               : QN_OK;
    for (size_t i = 1; i < n && common_err != QN_OK; i++) {
        int e = job->items[i].status == QN_ITEM_FAILED    ? job->items[i].err
                : job->items[i].status == QN_ITEM_PENDING ? QN_EINDOUBT
                                                          : QN_OK;
        if (e != common_err)
            common_err = QN_OK;
    }
    if (common_err != QN_OK) {
        struct qn_store_status st = {common_err, "", qn_strerror(common_err)};
        qn_finish_store_error(call, &st);
        return;
    }

    Queen__V1__PushResult *res = calloc(n, sizeof *res);
    Queen__V1__PushResult **ptrs = calloc(n, sizeof *ptrs);
    char(*ids)[QN_UUID_STR_LEN] = calloc(n, QN_UUID_STR_LEN);
    char(*pids)[QN_UUID_STR_LEN] = calloc(n, QN_UUID_STR_LEN);
    char *txns = NULL;
    size_t txn_total = 0;
    for (size_t i = 0; i < n; i++)
        txn_total += job->items[i].frame.txn_len + 1;
    txns = malloc(txn_total ? txn_total : 1);
    if (res == NULL || ptrs == NULL || ids == NULL || pids == NULL || txns == NULL) {
        qn_call_finish(call, QN_GRPC_INTERNAL, "out of memory building the response");
        goto out;
    }
    char *tp = txns;
    for (size_t i = 0; i < n; i++) {
        const struct qn_push_item *it = &job->items[i];
        Queen__V1__PushResult *r = &res[i];
        queen__v1__push_result__init(r);
        r->index = (uint32_t)i;
        r->queue = (char *)it->queue;
        r->partition = (char *)it->partition;
        r->transaction_id = (char *)item_txn(it, tp);
        tp += it->frame.txn_len + 1;
        switch (it->status) {
        case QN_ITEM_QUEUED:
        case QN_ITEM_DUPLICATE:
            r->status = it->status == QN_ITEM_QUEUED
                            ? QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED
                            : QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE;
            qn_uuid_format(it->result_id, ids[i]);
            qn_uuid_format(it->pid, pids[i]);
            r->message_id = ids[i];
            r->partition_id = pids[i];
            r->offset = it->offset;
            break;
        case QN_ITEM_PENDING:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_UNKNOWN;
            r->error = (char *)QN_MSG_OUTCOME_UNKNOWN;
            r->offset = -1;
            break;
        default:
            if (it->err == QN_EINDOUBT) {
                r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_UNKNOWN;
                r->error = (char *)QN_MSG_OUTCOME_UNKNOWN;
            } else {
                r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_FAILED;
                r->error = (char *)qn_strerror(it->err);
            }
            r->offset = -1;
            break;
        }
        ptrs[i] = r;
    }
    Queen__V1__PushResponse resp = QUEEN__V1__PUSH_RESPONSE__INIT;
    resp.n_results = n;
    resp.results = ptrs;
    if (qn_call_send(call, &resp.base) != QN_OK)
        qn_call_finish(call, QN_GRPC_INTERNAL, "response larger than the send limit");
    else
        qn_call_finish(call, QN_GRPC_OK, NULL);
out:
    free(res);
    free(ptrs);
    free(ids);
    free(pids);
    free(txns);
}

/* Every item is resolved: answer (unless answered or cancelled) and free. */
static void push_done(struct qn_push_job *job)
{
    struct push_rpc *p = (struct push_rpc *)job;
    qn_call *call = p->call;
    if (call != NULL) {
        qn_call_set_data(call, NULL);
        push_answer(p, call);
    }
    push_free(p);
}

/* The deadline is near and items are still in doubt: answer now (invariant 4).
 * Resolution goes on; done() frees. */
static void push_doubt_timer(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct push_rpc *p = ud;
    qn_call *call = p->call;
    if (call == NULL)
        return;
    p->call = NULL;
    qn_call_set_data(call, NULL);
    push_answer(p, call);
}

/* Fusion marked items in doubt: answer before the deadline if they are not
 * resolved by then. */
static void push_doubt(struct qn_push_job *job)
{
    struct push_rpc *p = (struct push_rpc *)job;
    if (p->call == NULL || p->doubt_timer != NULL)
        return;
    int64_t dl = qn_call_deadline_ms(p->call);
    if (dl <= 0)
        return; /* no deadline: the answer waits for the resolution */
    p->doubt_timer = evtimer_new(p->app->base, push_doubt_timer, p);
    if (p->doubt_timer == NULL)
        return; /* the transport answers DEADLINE_EXCEEDED at the deadline */
    int64_t ms = dl - DOUBT_MARGIN_MS - qn_store_now_ms();
    qn_timer_after(p->doubt_timer, ms);
}

/* Checks every item; writes a message naming the first bad one. */
static bool push_validate(const struct qn_config *cfg, const Queen__V1__PushRequest *req, char *msg,
                          size_t cap)
{
    if (req->n_items == 0) {
        snprintf(msg, cap, "items is empty: a push needs at least one item");
        return false;
    }
    if (req->n_items > (size_t)cfg->max_push_items) {
        snprintf(msg, cap, "too many items: %zu (the limit is %lld)", req->n_items,
                 (long long)cfg->max_push_items);
        return false;
    }
    size_t answer = 64;
    for (size_t i = 0; i < req->n_items; i++) {
        const Queen__V1__PushItem *it = req->items[i];
        char prefix[32] = "items[?]";
        if (!qn_push_item_ok(cfg, it, prefix, msg, cap)) {
            snprintf(prefix, sizeof prefix, "items[%zu]", i);
            qn_push_item_ok(cfg, it, prefix, msg, cap);
            return false;
        }
        size_t tl = it->transaction_id ? strlen(it->transaction_id) : 0;
        answer +=
            160 + strlen(it->queue) + (it->partition ? strlen(it->partition) : 7) + (tl ? tl : 36);
    }
    if (answer > (size_t)cfg->max_send_bytes) {
        snprintf(msg, cap,
                 "the answer to this push would exceed %lld bytes: send fewer items per call",
                 (long long)cfg->max_send_bytes);
        return false;
    }
    return true;
}

/* Sort order of item indices: by (queue, partition), keeping request order. ud
 * is the job's item array. */
static int cmp_idx(const void *a, const void *b, void *ud)
{
    const struct qn_push_item *items = ud;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const struct qn_push_item *ix = &items[x], *iy = &items[y];
    int c = strcmp(ix->queue, iy->queue);
    if (c == 0)
        c = strcmp(ix->partition, iy->partition);
    if (c == 0)
        c = x < y ? -1 : x > y;
    return c;
}

/* Layer 1: inside one (queue, partition) group, a repeated hash follows the
 * first occurrence. Compacts the group to its leaders; returns their count. */
static size_t layer1(struct push_rpc *p, uint32_t *g, size_t n)
{
    if (n < 2)
        return n;
    size_t cap = 16;
    while (cap < n * 2)
        cap *= 2;
    uint32_t *set = calloc(cap, sizeof *set);
    if (set == NULL)
        return n; /* layer 2 and SQL still dedup; only the shortcut is lost */
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *h = p->job.items[g[i]].hash;
        uint64_t v;
        memcpy(&v, h + 8, sizeof v);
        size_t k = v & (cap - 1);
        bool dup = false;
        while (set[k] != 0) {
            uint32_t l = set[k] - 1;
            if (memcmp(p->job.items[l].hash, h, 16) == 0) {
                qn_push_item_follow(&p->job, l, &p->job, g[i]);
                dup = true;
                break;
            }
            k = (k + 1) & (cap - 1);
        }
        if (!dup) {
            set[k] = g[i] + 1;
            g[w++] = g[i];
        }
    }
    free(set);
    return w;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Ends a push that was never handed to fusion. */
static void push_fail(struct push_rpc *p, enum qn_grpc_code code, const char *msg)
{
    qn_call *call = p->call;
    qn_call_set_data(call, NULL);
    push_free(p);
    qn_call_finish(call, code, msg);
}

/* Every queue's encryption flag is known: build the frames (sealing what must
 * be) and hand them to fusion. */
static void push_submit(struct push_rpc *p)
{
    struct qn_app *app = p->app;
    Queen__V1__PushRequest *req = p->req;
    size_t n = req->n_items;
    char why[300];
    uint32_t *order = calloc(n, sizeof *order);
    bool any_sealed = false;
    for (size_t q = 0; q < p->nqueues; q++)
        any_sealed |= qn_crypt_encrypted(app->crypt, p->job.tenant, p->queues[q]);
    if (order == NULL || (any_sealed && (p->envs = calloc(n, sizeof *p->envs)) == NULL)) {
        free(order);
        push_fail(p, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    const char *sub = p->sub;
    uint64_t now = qn_now_ms();
    for (size_t i = 0; i < n; i++) {
        const Queen__V1__PushItem *in = req->items[i];
        struct qn_push_item *it = &p->job.items[i];
        it->queue = in->queue;
        it->partition = qn_or_default(in->partition, QN_DEFAULT_PARTITION);
        qn_uuid7_next(&app->ids, now, it->frame.message_id);
        if (in->trace_id && *in->trace_id) {
            qn_parse_uuid_str(in->trace_id, it->frame.trace_id);
            it->frame.flags |= QN_FRAME_FLAG_TRACE;
        }
        if (in->transaction_id && *in->transaction_id) {
            it->frame.txn = (const uint8_t *)in->transaction_id;
            it->frame.txn_len = strlen(in->transaction_id);
        } else {
            qn_uuid_format(it->frame.message_id, p->minted[i]);
            it->frame.txn = (const uint8_t *)p->minted[i];
            it->frame.txn_len = QN_UUID_STR_LEN - 1;
            it->minted_txn = true;
        }
        it->frame.payload = in->payload.data;
        it->frame.payload_len = in->payload.len;
        if (any_sealed && qn_crypt_encrypted(app->crypt, p->job.tenant, in->queue)) {
            size_t elen = 0;
            int rc = qn_crypt_seal(app, it->frame.message_id, in->payload.data, in->payload.len,
                                   &p->envs[i], &elen, why, sizeof why);
            if (rc != QN_OK) {
                free(order);
                push_fail(p,
                          rc == QN_ENOTFOUND ? QN_GRPC_FAILED_PRECONDITION
                          : rc == QN_ENOMEM  ? QN_GRPC_RESOURCE_EXHAUSTED
                                             : QN_GRPC_INTERNAL,
                          why);
                return;
            }
            it->frame.payload = p->envs[i];
            it->frame.payload_len = elen;
            it->frame.flags |= QN_FRAME_FLAG_ENCRYPTED;
        }
        if (sub != NULL) {
            it->frame.psub = (const uint8_t *)sub;
            it->frame.psub_len = strlen(sub);
            it->frame.flags |= QN_FRAME_FLAG_PSUB;
        }
        qn_txn_hash(it->frame.txn, it->frame.txn_len, it->hash);
        order[i] = (uint32_t)i;
    }

    p->submitted = true;
    qn_svc_sort_idx(order, n, cmp_idx, p->job.items);
    for (size_t s = 0; s < n;) {
        size_t e = s + 1;
        const struct qn_push_item *a = &p->job.items[order[s]];
        while (e < n && strcmp(p->job.items[order[e]].queue, a->queue) == 0 &&
               strcmp(p->job.items[order[e]].partition, a->partition) == 0)
            e++;
        size_t nl = layer1(p, order + s, e - s);
        int rc = qn_push_route(app, &p->job, order + s, nl); /* the partition's loop */
        if (rc != QN_OK) {
            int err = rc == QN_ELIMIT ? QN_EBUSY : rc;
            for (size_t k = 0; k < nl; k++)
                qn_push_item_resolve(&p->job, order[s + k], QN_ITEM_FAILED, -1, NULL, NULL, err);
        }
        s = e;
    }
    free(order);
    if (--p->job.pending == 0)
        p->job.done(&p->job);
}

static void push_ready(struct qn_crypt_wait *w, int rc)
{
    struct push_rpc *p = (struct push_rpc *)((char *)w - offsetof(struct push_rpc, wait));
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        qn_call *call = p->call;
        qn_call_set_data(call, NULL);
        push_free(p);
        qn_finish_store_error(call, &st);
        return;
    }
    push_submit(p);
}

void qn_svc_push(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__PushRequest *req = (Queen__V1__PushRequest *)msg;
    char why[300];
    app->rpcs++;
    if (!push_validate(app->cfg, req, why, sizeof why)) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    for (size_t i = 0; i < req->n_items; i++) {
        /* one check per run of items naming the same queue */
        if (i > 0 && strcmp(req->items[i]->queue, req->items[i - 1]->queue) == 0)
            continue;
        if (!qn_authz_check(call, QN_SCOPE_PRODUCE, req->items[i]->queue, why, sizeof why)) {
            protobuf_c_message_free_unpacked(msg, NULL);
            qn_call_finish(call, QN_GRPC_PERMISSION_DENIED, why);
            return;
        }
    }
    const char *refusal = qn_svc_refusal(app);
    if (refusal != NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, refusal);
        return;
    }
    struct qn_conn_slot *slot = NULL;
    int src = qn_svc_take_slot(app, call, false, &slot);
    if (src != QN_OK) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       src == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
        return;
    }
    size_t n = req->n_items;
    struct push_rpc *p = calloc(1, sizeof *p);
    if (p == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_conn_budget_give(slot);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    p->slot = slot;
    p->app = app;
    p->call = call;
    p->req = req;
    p->job.nitems = n;
    p->job.pending = n + 1; /* invariant 2 */
    p->job.done = push_done;
    p->job.doubt = push_doubt;
    p->wait.done = push_ready;
    memcpy(p->job.tenant, qn_authz_tenant(call), 16);
    qn_call_set_data(call, p);
    p->job.items = calloc(n, sizeof *p->job.items);
    p->minted = calloc(n, QN_UUID_STR_LEN);
    p->queues = calloc(n, sizeof *p->queues);
    /* the producer's identity: the authenticated principal, never the client's
     * word (PushItem has no field for it) */
    const qn_principal *who = qn_authz_principal(call);
    if (p->job.items == NULL || p->minted == NULL || p->queues == NULL ||
        (who != NULL && (p->sub = strdup(qn_principal_sub(who))) == NULL)) {
        push_fail(p, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* the distinct queues, by sorting (a request may name thousands) */
    for (size_t i = 0; i < n; i++)
        p->queues[i] = req->items[i]->queue;
    qsort(p->queues, n, sizeof *p->queues, cmp_name);
    for (size_t i = 0; i < n; i++)
        if (p->nqueues == 0 || strcmp(p->queues[p->nqueues - 1], p->queues[i]) != 0)
            p->queues[p->nqueues++] = p->queues[i];
    int rc = qn_crypt_ready(app->crypt, &p->wait, p->job.tenant, p->queues, p->nqueues);
    if (rc == 1)
        push_submit(p);
    else if (rc < 0)
        push_fail(p, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    /* 0: push_ready continues */
}

void qn_svc_push_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct push_rpc *p = qn_call_data(call);
    if (p == NULL)
        return;
    if (!p->submitted) {
        qn_crypt_cancel(&p->wait);
        push_free(p);
        return;
    }
    p->call = NULL; /* frames stay in flight; done() frees */
    if (p->doubt_timer)
        evtimer_del(p->doubt_timer);
}
