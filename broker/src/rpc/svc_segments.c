/*
 * rpc/svc_segments.c - QueueService.PushSegments: segments a codec-linked client
 * packed itself, stored as sent.
 *
 * Does: check every segment before anything is written (names, the compressed
 * bytes decompress under QUEEN_SEGMENT_RAW_MAX, every frame decodes, has a
 * message id, a non-empty NUL-free UTF-8 transaction id, a payload within
 * QUEEN_MAX_PAYLOAD_BYTES, no broker-owned flag, transaction ids distinct in the
 * segment); hash the transaction ids; hand each segment to fusion as a
 * pre-packed entry (engine/fusion.h, struct qn_prepacked), in request order, in
 * the call's tenant; answer per segment once every one is resolved.
 * Fusion gives a segment what it gives Push items: its turn in its partition's
 * single write in flight (arrival order between items and segments), the
 * bundles across partitions, the dedup cache's watermark and committed hook,
 * the waiters' wake-up after the commit, layer-2 consistency with items of the
 * same flush, and the resolution of a flush in doubt (a segment whose frames
 * come back as duplicates with their own message ids had committed: QUEUED).
 * Does not: recompress or merge (a segment is stored whole, exactly the client's
 * bytes, or not at all), resolve anything itself.
 * Security: the call acts in its tenant; with auth on (QUEEN_AUTH) it is
 * refused (FAILED_PRECONDITION): the broker cannot stamp producer_sub into
 * frames it stores as sent. A segment for a queue with encryption_enabled is
 * refused too (FAILED_PRECONDITION, nothing written): its payloads would be
 * stored in the clear. Which queues are encrypted is learned first (crypt.h).
 *
 * Lifecycle of one call:
 *
 *   CHECK --bad--> answered INVALID_ARGUMENT (nothing written)
 *     |
 *   WAIT (encryption flags) --an encrypted queue--> FAILED_PRECONDITION
 *     |
 *   SUBMITTED (fusion) --every segment resolved--> answered per segment
 *     |
 *     +--in doubt, a deadline near--> answered before it: resolved segments
 *          with their results, the rest UNKNOWN; fusion goes on resolving.
 *
 * Invariants:
 *   1. Nothing is submitted unless every segment checked.
 *   2. The request message (whose bytes are the blobs) lives until the job is
 *      done (fusion borrows them until then).
 *   3. The job holds one extra reference while segments are submitted, so
 *      done() cannot run (and free the call's state) in the middle.
 *   4. The call is answered once: by done(), or by the doubt timer (which then
 *      detaches the call as a cancel does; done() frees later).
 */
#include <event2/event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "engine/fusion.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/authz.h"
#include "rpc/crypt.h"
#include "rpc/push_route.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"
#include "timer.h"

#define MAX_SEGMENTS 1024
/* A call in doubt answers this long before its deadline (as Push does). */
#define DOUBT_MARGIN_MS 20

struct segs_rpc {
    struct qn_push_job job;    /* one item per segment (its `pre`), request order */
    struct qn_crypt_wait wait; /* learning which queues are encrypted (first) */
    struct qn_app *app;
    qn_call *call; /* NULL once cancelled or answered */
    Queen__V1__PushSegmentsRequest *req;
    struct qn_prepacked *pre;     /* one per segment */
    struct qn_prepacked_dup *dup; /* room for every frame, segment after segment */
    uint8_t *hashes;              /* every frame's hash, segment after segment */
    uint8_t *ids;                 /* every frame's message id, same layout */
    size_t *first;                /* index of each segment's first frame in hashes/ids */
    size_t n;
    struct event *doubt_timer; /* armed when segments became in doubt */
    struct qn_conn_slot *slot; /* the connection's database slot, until done */
    const char **queues;       /* the distinct queue names (borrowed from req) */
    size_t nqueues;
    bool submitted; /* handed to fusion: done() frees */
};

static void segs_free(struct segs_rpc *p)
{
    if (p->doubt_timer != NULL)
        event_free(p->doubt_timer);
    qn_conn_budget_give(p->slot);
    protobuf_c_message_free_unpacked(&p->req->base, NULL);
    free(p->job.items);
    free(p->pre);
    free(p->dup);
    free(p->hashes);
    free(p->ids);
    free(p->first);
    free(p->queues);
    free(p);
}

/* Ends a call that was never handed to fusion. */
static void segs_fail(struct segs_rpc *p, enum qn_grpc_code code, const char *msg)
{
    qn_call *call = p->call;
    if (call != NULL)
        qn_call_set_data(call, NULL);
    segs_free(p);
    if (call != NULL)
        qn_call_finish(call, code, msg);
}

/* ---------------------------------------------------------------- checks */

static int cmp_hash_idx(const void *a, const void *b, void *ud)
{
    const uint8_t *h = ud;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    int c = memcmp(h + (size_t)x * QN_HASH_LEN, h + (size_t)y * QN_HASH_LEN, QN_HASH_LEN);
    return c != 0 ? c : (x < y ? -1 : x > y);
}

/* Checks one segment's frames and fills their hashes and ids (room for every
 * frame the request may hold: `room`). Returns the frame count, or 0 with a
 * message in why. */
static size_t check_segment(struct segs_rpc *p, size_t si, size_t room, char *why, size_t cap)
{
    const struct qn_config *cfg = p->app->cfg;
    const Queen__V1__RawSegment *rs = p->req->segments[si];
    char name[64];
    snprintf(name, sizeof name, "segments[%zu].queue", si);
    if (qn_name_problem(rs->queue, name, false, why, cap))
        return 0;
    snprintf(name, sizeof name, "segments[%zu].partition", si);
    if (qn_name_problem(rs->partition, name, true, why, cap))
        return 0;
    if (rs->segment.len == 0) {
        snprintf(why, cap, "segments[%zu].segment is empty", si);
        return 0;
    }
    const uint8_t *raw;
    size_t rawlen;
    int rc = qn_segment_decompress(p->app->zctx, rs->segment.data, rs->segment.len,
                                   (size_t)cfg->segment_raw_max, &raw, &rawlen);
    if (rc != QN_OK) {
        snprintf(why, cap, "segments[%zu].segment does not decompress within %lld bytes: %s", si,
                 (long long)cfg->segment_raw_max, qn_strerror(rc));
        return 0;
    }
    struct qn_frame_iter it;
    qn_frame_iter_init(&it, raw, rawlen);
    size_t k = 0, at = p->first[si];
    for (;;) {
        struct qn_frame f;
        struct qn_frame_error fe = {0};
        rc = qn_frame_iter_next(&it, &f, &fe);
        if (rc == 0)
            break;
        if (rc < 0) {
            snprintf(why, cap, "segments[%zu] frame %zu at byte %zu: %s", si, k,
                     (size_t)fe.byte_offset, qn_strerror(rc));
            return 0;
        }
        if (at + k >= room) {
            snprintf(why, cap, "segments hold more than %lld frames in all (QUEEN_MAX_PUSH_ITEMS)",
                     (long long)cfg->max_push_items);
            return 0;
        }
        static const uint8_t zero[QN_UUID_LEN];
        const char *bad = NULL;
        if (memcmp(f.message_id, zero, QN_UUID_LEN) == 0)
            bad = "has the zero message id";
        else if (f.flags & (QN_FRAME_FLAG_PSUB | QN_FRAME_FLAG_ENCRYPTED))
            bad = "sets a flag only the broker sets (producer sub 0x02 or encrypted 0x04)";
        else if (f.txn_len == 0)
            bad = "has an empty transaction id (use the message id's text form for none)";
        else if (!qn_text_ok(f.txn, f.txn_len))
            bad = "has a transaction id that is not NUL-free UTF-8";
        else if (f.payload_len == 0)
            bad = "has an empty payload";
        if (bad != NULL) {
            snprintf(why, cap, "segments[%zu] frame %zu %s", si, k, bad);
            return 0;
        }
        if (f.payload_len > (size_t)cfg->max_payload_bytes) {
            snprintf(why, cap, "segments[%zu] frame %zu: payload is %zu bytes (the limit is %lld)",
                     si, k, f.payload_len, (long long)cfg->max_payload_bytes);
            return 0;
        }
        p->pre[si].payload_bytes += f.payload_len;
        qn_txn_hash(f.txn, f.txn_len, p->hashes + (at + k) * QN_HASH_LEN);
        memcpy(p->ids + (at + k) * QN_UUID_LEN, f.message_id, QN_UUID_LEN);
        k++;
    }
    if (k == 0) {
        snprintf(why, cap, "segments[%zu].segment holds no frame", si);
        return 0;
    }
    /* transaction ids distinct inside the segment (push_v1 requires it) */
    uint32_t *ord = malloc(k * sizeof *ord);
    if (ord == NULL) {
        snprintf(why, cap, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < k; i++)
        ord[i] = (uint32_t)i;
    const uint8_t *h = p->hashes + at * QN_HASH_LEN;
    qsort_r(ord, k, sizeof *ord, cmp_hash_idx, (void *)h);
    for (size_t i = 1; i < k; i++) {
        if (memcmp(h + (size_t)ord[i - 1] * QN_HASH_LEN, h + (size_t)ord[i] * QN_HASH_LEN,
                   QN_HASH_LEN) == 0) {
            snprintf(why, cap,
                     "segments[%zu] frames %u and %u have the same transaction id: a segment "
                     "holds each transaction id once",
                     si, ord[i - 1], ord[i]);
            free(ord);
            return 0;
        }
    }
    free(ord);
    return k;
}

/* ---------------------------------------------------------------- answer */

/* The status a whole call ends with when every segment failed alike (nothing
 * written, or nothing known): QN_OK when the segments answer one by one. */
static int common_error(const struct segs_rpc *p)
{
    int common = QN_OK;
    for (size_t i = 0; i < p->n; i++) {
        const struct qn_push_item *it = &p->job.items[i];
        int e = it->status == QN_ITEM_PENDING                              ? QN_EINDOUBT
                : it->status == QN_ITEM_FAILED && it->err != QN_EDUPLICATE ? it->err
                                                                           : QN_OK;
        if (e == QN_OK || (i > 0 && e != common))
            return QN_OK;
        common = e;
    }
    return common;
}

/* Answers the call from the items' states. Segments still pending (answered
 * before they were resolved, see the doubt timer) are PUSH_STATUS_UNKNOWN. */
static void segs_answer(struct segs_rpc *p, qn_call *call)
{
    int common = common_error(p);
    if (common != QN_OK) {
        struct qn_store_status st = {common, "", qn_strerror(common)};
        qn_finish_store_error(call, &st);
        return;
    }
    size_t n = p->n, ndup_all = 0;
    for (size_t i = 0; i < n; i++)
        ndup_all += p->pre[i].ndups;
    Queen__V1__PushSegmentResult *res = calloc(n, sizeof *res);
    Queen__V1__PushSegmentResult **ptrs = calloc(n, sizeof *ptrs);
    Queen__V1__DuplicateFrame *df = calloc(ndup_all ? ndup_all : 1, sizeof *df);
    Queen__V1__DuplicateFrame **dptrs = calloc(ndup_all ? ndup_all : 1, sizeof *dptrs);
    char(*dids)[QN_UUID_STR_LEN] = calloc(ndup_all ? ndup_all : 1, QN_UUID_STR_LEN);
    char(*pids)[QN_UUID_STR_LEN] = calloc(n, QN_UUID_STR_LEN);
    if (res == NULL || ptrs == NULL || df == NULL || dptrs == NULL || dids == NULL ||
        pids == NULL) {
        qn_call_finish(call, QN_GRPC_INTERNAL, "out of memory building the response");
        goto out;
    }
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        const struct qn_push_item *it = &p->job.items[i];
        const struct qn_prepacked *pe = &p->pre[i];
        Queen__V1__PushSegmentResult *r = &res[i];
        queen__v1__push_segment_result__init(r);
        r->index = (uint32_t)i;
        r->queue = (char *)it->queue;
        r->partition = (char *)it->partition;
        r->count = pe->count;
        qn_uuid_format(it->pid, pids[i]);
        r->partition_id = pids[i];
        r->base_offset = -1;
        r->n_duplicates = pe->ndups;
        r->duplicates = dptrs + d;
        for (size_t k = 0; k < pe->ndups; k++, d++) {
            queen__v1__duplicate_frame__init(&df[d]);
            df[d].index = pe->dups[k].idx;
            df[d].offset = pe->dups[k].offset;
            qn_uuid_format(pe->dups[k].id, dids[d]);
            df[d].message_id = dids[d];
            dptrs[d] = &df[d];
        }
        switch (it->status) {
        case QN_ITEM_QUEUED:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED;
            r->base_offset = it->offset;
            break;
        case QN_ITEM_DUPLICATE:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE;
            break;
        case QN_ITEM_PENDING:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_UNKNOWN;
            r->error = (char *)QN_MSG_OUTCOME_UNKNOWN;
            break;
        default:
            if (it->err == QN_EINDOUBT) {
                r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_UNKNOWN;
                r->error = (char *)QN_MSG_OUTCOME_UNKNOWN;
                break;
            }
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_FAILED;
            r->error = it->err == QN_EDUPLICATE
                           ? (char *)"some frames' transaction ids were already stored (see "
                                     "duplicates): the segment was not stored; push the other "
                                     "frames again in a new segment"
                           : (char *)qn_strerror(it->err);
            break;
        }
        ptrs[i] = r;
    }
    Queen__V1__PushSegmentsResponse resp = QUEEN__V1__PUSH_SEGMENTS_RESPONSE__INIT;
    resp.n_results = n;
    resp.results = ptrs;
    if (qn_call_send(call, &resp.base) != QN_OK)
        qn_call_finish(call, QN_GRPC_INTERNAL, "response larger than the send limit");
    else
        qn_call_finish(call, QN_GRPC_OK, NULL);
out:
    free(res);
    free(ptrs);
    free(df);
    free(dptrs);
    free(dids);
    free(pids);
}

/* ---------------------------------------------------------------- fusion's callbacks */

/* Every segment is resolved: answer (unless answered or cancelled) and free. */
static void segs_done(struct qn_push_job *job)
{
    struct segs_rpc *p = (struct segs_rpc *)job;
    qn_call *call = p->call;
    if (call != NULL) {
        qn_call_set_data(call, NULL);
        p->call = NULL;
        segs_answer(p, call);
    }
    segs_free(p);
}

/* The deadline is near and segments are still in doubt: answer now
 * (invariant 4). Resolution goes on; done() frees. */
static void segs_doubt_timer(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct segs_rpc *p = ud;
    qn_call *call = p->call;
    if (call == NULL)
        return;
    p->call = NULL;
    qn_call_set_data(call, NULL);
    segs_answer(p, call);
}

/* Fusion marked segments in doubt: answer before the deadline if they are not
 * resolved by then (a call without a deadline waits for the resolution). */
static void segs_doubt(struct qn_push_job *job)
{
    struct segs_rpc *p = (struct segs_rpc *)job;
    if (p->call == NULL || p->doubt_timer != NULL)
        return;
    int64_t dl = qn_call_deadline_ms(p->call);
    if (dl <= 0)
        return;
    QN_WARN("PushSegments: segment(s) in doubt after a lost database connection; resolving");
    p->doubt_timer = evtimer_new(p->app->base, segs_doubt_timer, p);
    if (p->doubt_timer == NULL)
        return; /* the transport answers DEADLINE_EXCEEDED at the deadline */
    int64_t ms = dl - DOUBT_MARGIN_MS - qn_store_now_ms();
    qn_timer_after(p->doubt_timer, ms);
}

/* ---------------------------------------------------------------- entry */

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every queue's encryption flag is known: refuse encrypted queues, else hand
 * the segments to fusion, one by one in request order. */
static void segs_submit(struct segs_rpc *p)
{
    for (size_t i = 0; i < p->nqueues; i++) {
        if (qn_crypt_encrypted(p->app->crypt, p->job.tenant, p->queues[i])) {
            char why[400];
            snprintf(why, sizeof why,
                     "queue %.255s has encryption_enabled: PushSegments stores segments as sent, "
                     "so its payloads would be stored in the clear; use Push",
                     p->queues[i]);
            segs_fail(p, QN_GRPC_FAILED_PRECONDITION, why);
            return;
        }
    }
    p->submitted = true;
    for (size_t i = 0; i < p->n; i++) {
        uint32_t idx = (uint32_t)i;
        int rc = qn_push_route(p->app, &p->job, &idx, 1); /* the partition's loop */
        if (rc != QN_OK)
            qn_push_item_resolve(&p->job, idx, QN_ITEM_FAILED, -1, NULL, NULL,
                                 rc == QN_ELIMIT ? QN_EBUSY : rc);
    }
    if (--p->job.pending == 0) /* invariant 3 */
        p->job.done(&p->job);
}

static void segs_ready(struct qn_crypt_wait *w, int rc)
{
    struct segs_rpc *p = (struct segs_rpc *)((char *)w - offsetof(struct segs_rpc, wait));
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        qn_call *call = p->call;
        if (call != NULL)
            qn_call_set_data(call, NULL);
        segs_free(p);
        if (call != NULL)
            qn_finish_store_error(call, &st);
        return;
    }
    segs_submit(p);
}

void qn_svc_push_segments(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    const struct qn_config *cfg = app->cfg;
    Queen__V1__PushSegmentsRequest *req = (Queen__V1__PushSegmentsRequest *)msg;
    char why[400];
    app->rpcs++;
    if (app->shutting_down) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, "the broker is shutting down");
        return;
    }
    if (qn_authz_principal(call) != NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_FAILED_PRECONDITION,
                       "PushSegments is not available with QUEEN_AUTH on: the broker stores "
                       "the segments as sent and cannot stamp producer_sub into their frames; "
                       "use Push");
        return;
    }
    if (req->n_segments == 0 || req->n_segments > MAX_SEGMENTS) {
        size_t got = req->n_segments; /* read before the message is freed */
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finishf(call, QN_GRPC_INVALID_ARGUMENT,
                        "segments holds %zu segments: a call carries 1 to %d", got, MAX_SEGMENTS);
        return;
    }
    size_t n = req->n_segments, room = (size_t)cfg->max_push_items;
    struct segs_rpc *p = calloc(1, sizeof *p);
    if (p == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    p->app = app;
    p->req = req;
    p->n = n;
    p->job.items = calloc(n, sizeof *p->job.items);
    p->pre = calloc(n, sizeof *p->pre);
    p->first = calloc(n + 1, sizeof *p->first);
    p->hashes = malloc(room * QN_HASH_LEN);
    p->ids = malloc(room * QN_UUID_LEN);
    if (p->job.items == NULL || p->pre == NULL || p->first == NULL || p->hashes == NULL ||
        p->ids == NULL) {
        segs_free(p);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = check_segment(p, i, room, why, sizeof why);
        if (k == 0) {
            segs_free(p);
            qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
            return;
        }
        p->first[i + 1] = p->first[i] + k;
    }
    p->dup = calloc(p->first[n], sizeof *p->dup);
    p->queues = malloc(n * sizeof *p->queues);
    if (p->dup == NULL || p->queues == NULL) {
        segs_free(p);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const Queen__V1__RawSegment *rs = req->segments[i];
        struct qn_prepacked *pe = &p->pre[i];
        struct qn_push_item *it = &p->job.items[i];
        pe->blob = rs->segment.data;
        pe->blob_len = rs->segment.len;
        pe->count = (uint32_t)(p->first[i + 1] - p->first[i]);
        pe->hashes = p->hashes + p->first[i] * QN_HASH_LEN;
        pe->ids = p->ids + p->first[i] * QN_UUID_LEN;
        pe->dups = p->dup + p->first[i];
        it->pre = pe;
        it->queue = rs->queue;
        it->partition = qn_or_default(rs->partition, QN_DEFAULT_PARTITION);
    }
    const char *refusal = qn_svc_refusal(app);
    if (refusal != NULL) {
        segs_free(p);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, refusal);
        return;
    }
    int src = qn_svc_take_slot(app, call, false, &p->slot);
    if (src != QN_OK) {
        segs_free(p);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       src == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
        return;
    }
    memcpy(p->job.tenant, qn_authz_tenant(call), 16);
    p->job.nitems = n;
    p->job.pending = n + 1; /* invariant 3 */
    p->job.done = segs_done;
    p->job.doubt = segs_doubt;
    p->wait.done = segs_ready;
    for (size_t i = 0; i < n; i++)
        p->queues[i] = req->segments[i]->queue;
    qsort(p->queues, n, sizeof *p->queues, cmp_name);
    for (size_t i = 0; i < n; i++)
        if (p->nqueues == 0 || strcmp(p->queues[p->nqueues - 1], p->queues[i]) != 0)
            p->queues[p->nqueues++] = p->queues[i];
    p->call = call;
    qn_call_set_data(call, p);
    int rc = qn_crypt_ready(app->crypt, &p->wait, p->job.tenant, (const char *const *)p->queues,
                            p->nqueues);
    if (rc == 1)
        segs_submit(p);
    else if (rc < 0)
        segs_fail(p, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    /* 0: segs_ready continues */
}

void qn_svc_push_segments_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct segs_rpc *p = qn_call_data(call);
    if (p == NULL)
        return;
    if (!p->submitted) {
        qn_crypt_cancel(&p->wait);
        segs_free(p);
        return;
    }
    p->call = NULL; /* segments stay in flight; done() frees */
    if (p->doubt_timer)
        evtimer_del(p->doubt_timer);
}
