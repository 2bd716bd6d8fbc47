/*
 * rpc/svc_push.c - QueueService.Push.
 *
 * Does: validate the whole request before anything is written (names, payload
 * sizes, transaction-id lengths, trace ids, item count, the size of the answer);
 * mint message ids; dedup layer 1 (first wins inside the request, per queue and
 * partition); hand each (queue, partition) group to fusion; answer once every
 * item is resolved, in request order.
 * Does not: decide duplicates across requests (fusion layer 2 and SQL do), retry.
 *
 * Invariants:
 *   1. Nothing is submitted unless every item validated.
 *   2. The job holds one extra reference while items are being submitted, so
 *      done() cannot run (and free the RPC) in the middle of submission.
 *   3. The request message stays alive until done(): frames borrow its bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "engine/fusion.h"
#include "log.h"
#include "queen/error.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

struct push_rpc {
    struct qn_push_job job;
    qn_call *call;               /* NULL once the call was cancelled */
    Queen__V1__PushRequest *req; /* owned */
    char (*minted)[QN_UUID_STR_LEN];
};

static void push_free(struct push_rpc *p)
{
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

/* Answers the call: per-item results, or one status when every item failed for
 * the same database reason (nothing was written). */
static void push_done(struct qn_push_job *job)
{
    struct push_rpc *p = (struct push_rpc *)job;
    qn_call *call = p->call;
    if (call == NULL) {
        push_free(p);
        return;
    }
    qn_call_set_data(call, NULL);
    size_t n = job->nitems;
    int common_err = job->items[0].status == QN_ITEM_FAILED ? job->items[0].err : QN_OK;
    for (size_t i = 1; i < n && common_err != QN_OK; i++)
        if (job->items[i].status != QN_ITEM_FAILED || job->items[i].err != common_err)
            common_err = QN_OK;
    if (common_err != QN_OK) {
        struct qn_store_status st = {common_err, "", qn_strerror(common_err)};
        qn_finish_store_error(call, &st);
        push_free(p);
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
        default:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_FAILED;
            r->error = (char *)qn_strerror(it->err);
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
    push_free(p);
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

void qn_svc_push(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__PushRequest *req = (Queen__V1__PushRequest *)msg;
    char why[300];
    app->rpcs++;
    if (app->shutting_down) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, "the broker is shutting down");
        return;
    }
    if (!push_validate(app->cfg, req, why, sizeof why)) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    size_t n = req->n_items;
    struct push_rpc *p = calloc(1, sizeof *p);
    uint32_t *order = calloc(n, sizeof *order);
    if (p != NULL) {
        p->job.items = calloc(n, sizeof *p->job.items);
        p->minted = calloc(n, QN_UUID_STR_LEN);
    }
    if (p == NULL || order == NULL || p->job.items == NULL || p->minted == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        if (p) {
            free(p->job.items);
            free(p->minted);
        }
        free(p);
        free(order);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    p->call = call;
    p->req = req;
    p->job.nitems = n;
    p->job.pending = n + 1; /* invariant 2 */
    p->job.done = push_done;
    qn_call_set_data(call, p);

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
        qn_txn_hash(it->frame.txn, it->frame.txn_len, it->hash);
        order[i] = (uint32_t)i;
    }

    qsort_r(order, n, sizeof *order, cmp_idx, p->job.items);
    for (size_t s = 0; s < n;) {
        size_t e = s + 1;
        const struct qn_push_item *a = &p->job.items[order[s]];
        while (e < n && strcmp(p->job.items[order[e]].queue, a->queue) == 0 &&
               strcmp(p->job.items[order[e]].partition, a->partition) == 0)
            e++;
        size_t nl = layer1(p, order + s, e - s);
        int rc = qn_fusion_submit(app->fusion, &p->job, order + s, nl);
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

void qn_svc_push_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct push_rpc *p = qn_call_data(call);
    if (p != NULL)
        p->call = NULL; /* frames stay in flight; done() frees */
}
