/*
 * rpc/svc_segments.c - QueueService.PushSegments: segments a codec-linked client
 * packed itself, stored as sent.
 *
 * Does: check every segment before anything is written (names, the compressed
 * bytes decompress under QUEEN_SEGMENT_RAW_MAX, every frame decodes, has a
 * message id, a non-empty NUL-free UTF-8 transaction id, a payload within
 * QUEEN_MAX_PAYLOAD_BYTES, no broker-owned flag, transaction ids distinct in the
 * segment); hash the transaction ids; send every segment in one push_v1 call
 * (one transaction) with the client's bytes as the blob; answer per segment
 * once it committed, looking up the originals of duplicate frames.
 * Does not: go through fusion (a raw segment is never merged with other frames,
 * so there is nothing to batch), use the dedup cache (SQL probes the whole
 * window, as for Transact; the cache sees the commit as a gap and rebuilds), or
 * recompress: a segment is stored whole or not at all.
 * Security: the call acts in its tenant; with auth on (QUEEN_AUTH) it is
 * refused (FAILED_PRECONDITION): the broker cannot stamp producer_sub into
 * frames it stores as sent. A segment for a queue with encryption_enabled is
 * refused too (FAILED_PRECONDITION, nothing written): its payloads would be
 * stored in the clear. Which queues are encrypted is learned first (crypt.h).
 *
 * Lifecycle of one call:
 *
 *   CHECK --bad--> answered INVALID_ARGUMENT
 *     |
 *   SENT --ok--> LOOKUP (ids of duplicates) --> answered per segment
 *     |  \--error (nothing written)--> answered with the store's status
 *     |
 *     +--in doubt--> RESOLVE: once the store is up, push_resolve with the same
 *          bytes; a segment whose frames come back as duplicates with our own
 *          message ids had committed: QUEUED. Past the deadline: UNKNOWN.
 *
 * Invariants:
 *   1. Nothing is sent unless every segment checked.
 *   2. The request message (whose bytes are the blobs) lives until the struct is
 *      freed, after the last store callback.
 *   3. The struct is freed only when no store request and no timer is pending,
 *      and the call was answered or cancelled (maybe_free()).
 */
#include <event2/event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "engine/notifier.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/authz.h"
#include "rpc/crypt.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

#define MAX_SEGMENTS 1024
#define RESOLVE_POLL_MS 200      /* how often a push in doubt checks the pool */
#define RESOLVE_DEFAULT_MS 30000 /* resolution horizon for a call without deadline */

struct dup_frame {
    uint32_t idx;
    int64_t offset;
    uint8_t id[QN_UUID_LEN];
};

struct seg_out {
    int status; /* QN_ITEM_QUEUED / _DUPLICATE / _FAILED, 0 = none yet */
    uint8_t pid[16];
    int64_t base;
    size_t ndups;
    struct dup_frame *dups;
    const char *error;
    uint64_t payload_bytes; /* of its frames, counted by the check (metrics) */
};

struct segs_rpc {
    struct qn_app *app;
    qn_call *call; /* NULL once cancelled or answered */
    Queen__V1__PushSegmentsRequest *req;
    struct qn_push_segment *segs;
    uint8_t *hashes; /* every frame's hash, segment after segment */
    uint8_t *ids;    /* every frame's message id, same layout */
    size_t *first;   /* index of each segment's first frame in hashes/ids */
    struct seg_out *out;
    size_t n;
    int inflight;   /* store requests not yet called back */
    bool resolving; /* the push was in doubt: answers come from push_resolve */
    int64_t resolve_until;
    struct event *timer;
    uint8_t tenant[16];        /* the call's (rpc/authz.h) */
    struct qn_crypt_wait wait; /* learning which queues are encrypted (first) */
    const char **queues;       /* the distinct queue names (borrowed from req) */
    size_t nqueues;
    bool submitted; /* past the wait: send_push ran */
};

#define ITEM_QUEUED 1
#define ITEM_DUPLICATE 2
#define ITEM_FAILED 3

static void segs_free(struct segs_rpc *p)
{
    if (p->timer != NULL)
        event_free(p->timer);
    for (size_t i = 0; p->out != NULL && i < p->n; i++)
        free(p->out[i].dups);
    protobuf_c_message_free_unpacked(&p->req->base, NULL);
    free(p->segs);
    free(p->hashes);
    free(p->ids);
    free(p->first);
    free(p->out);
    free(p->queues);
    free(p);
}

static void maybe_free(struct segs_rpc *p)
{
    if (p->inflight == 0 && p->call == NULL &&
        (p->timer == NULL || !evtimer_pending(p->timer, NULL)))
        segs_free(p);
}

static void finish(struct segs_rpc *p, enum qn_grpc_code code, const char *msg)
{
    if (p->call != NULL) {
        qn_call_set_data(p->call, NULL);
        qn_call_finish(p->call, code, msg);
        p->call = NULL;
    }
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
        p->out[si].payload_bytes += f.payload_len;
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

static void answer(struct segs_rpc *p)
{
    if (p->call == NULL)
        return;
    size_t n = p->n, ndup_all = 0;
    for (size_t i = 0; i < n; i++)
        ndup_all += p->out[i].ndups;
    Queen__V1__PushSegmentResult *res = calloc(n, sizeof *res);
    Queen__V1__PushSegmentResult **ptrs = calloc(n, sizeof *ptrs);
    Queen__V1__DuplicateFrame *df = calloc(ndup_all ? ndup_all : 1, sizeof *df);
    Queen__V1__DuplicateFrame **dptrs = calloc(ndup_all ? ndup_all : 1, sizeof *dptrs);
    char(*dids)[QN_UUID_STR_LEN] = calloc(ndup_all ? ndup_all : 1, QN_UUID_STR_LEN);
    char(*pids)[QN_UUID_STR_LEN] = calloc(n, QN_UUID_STR_LEN);
    if (res == NULL || ptrs == NULL || df == NULL || dptrs == NULL || dids == NULL ||
        pids == NULL) {
        finish(p, QN_GRPC_INTERNAL, "out of memory building the response");
        goto out;
    }
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        const struct seg_out *o = &p->out[i];
        const Queen__V1__RawSegment *rs = p->req->segments[i];
        Queen__V1__PushSegmentResult *r = &res[i];
        queen__v1__push_segment_result__init(r);
        r->index = (uint32_t)i;
        r->queue = rs->queue;
        r->partition = (char *)p->segs[i].partition;
        r->count = p->segs[i].count;
        qn_uuid_format(o->pid, pids[i]);
        r->partition_id = pids[i];
        r->base_offset = -1;
        r->n_duplicates = o->ndups;
        r->duplicates = dptrs + d;
        for (size_t k = 0; k < o->ndups; k++, d++) {
            queen__v1__duplicate_frame__init(&df[d]);
            df[d].index = o->dups[k].idx;
            df[d].offset = o->dups[k].offset;
            qn_uuid_format(o->dups[k].id, dids[d]);
            df[d].message_id = dids[d];
            dptrs[d] = &df[d];
        }
        switch (o->status) {
        case ITEM_QUEUED:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED;
            r->base_offset = o->base;
            break;
        case ITEM_DUPLICATE:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE;
            break;
        default:
            r->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_FAILED;
            r->error = (char *)(o->error ? o->error : "not stored");
            break;
        }
        ptrs[i] = r;
    }
    Queen__V1__PushSegmentsResponse resp = QUEEN__V1__PUSH_SEGMENTS_RESPONSE__INIT;
    resp.n_results = n;
    resp.results = ptrs;
    qn_call *call = p->call;
    qn_call_set_data(call, NULL);
    p->call = NULL;
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

/* ---------------------------------------------------------------- store callbacks */

struct lookup {
    struct segs_rpc *p;
    size_t si;
};

/* True when every duplicate of segment si is its own frame at base + idx: the
 * commit of this very segment (a resolved push in doubt), not someone else's. */
static bool dups_are_ours(const struct segs_rpc *p, size_t si)
{
    const struct seg_out *o = &p->out[si];
    if (o->ndups != p->segs[si].count)
        return false;
    for (size_t k = 0; k < o->ndups; k++)
        if (o->dups[k].offset != o->dups[0].offset + (int64_t)o->dups[k].idx ||
            memcmp(o->dups[k].id, p->ids + (p->first[si] + o->dups[k].idx) * QN_UUID_LEN,
                   QN_UUID_LEN) != 0)
            return false;
    return true;
}

static void lookup_done(void *ud, const struct qn_store_status *st,
                        const struct qn_segments_result *res)
{
    struct lookup *lk = ud;
    struct segs_rpc *p = lk->p;
    size_t si = lk->si;
    struct seg_out *o = &p->out[si];
    free(lk);
    p->inflight--;
    for (size_t k = 0; st->code == QN_OK && k < o->ndups; k++) {
        for (size_t r = 0; r < res->n; r++) {
            const struct qn_segment_row *row = &res->rows[r];
            if (o->dups[k].offset < row->base || o->dups[k].offset > row->end)
                continue;
            const uint8_t *raw;
            size_t rawlen;
            struct qn_frame fr;
            if (qn_segment_decompress(p->app->zctx, row->blob, row->blob_len,
                                      (size_t)p->app->cfg->segment_raw_max, &raw,
                                      &rawlen) == QN_OK &&
                qn_segment_frame_at(raw, rawlen, row->base, o->dups[k].offset, &fr, NULL) == QN_OK)
                memcpy(o->dups[k].id, fr.message_id, QN_UUID_LEN);
            break;
        }
    }
    if (p->resolving && dups_are_ours(p, si)) {
        /* the segment sent before the connection broke had committed */
        o->status = ITEM_QUEUED;
        o->base = o->dups[0].offset;
        o->ndups = 0;
        p->app->pushed += p->segs[si].count;
        p->app->pushed_bytes += o->payload_bytes;
        qn_notifier_committed(p->app->notifier, p->tenant, p->segs[si].queue,
                              p->segs[si].partition);
    }
    if (p->inflight == 0)
        answer(p);
    maybe_free(p);
}

static void send_push(struct segs_rpc *p);

static void push_cb(void *ud, const struct qn_store_status *st, const struct qn_push_result *res)
{
    struct segs_rpc *p = ud;
    p->inflight--;
    if (st->code == QN_EINDOUBT) {
        if (!p->resolving) {
            p->resolving = true;
            int64_t dl = p->call ? qn_call_deadline_ms(p->call) : 0;
            p->resolve_until = dl > 0 ? dl : (int64_t)qn_now_ms() + RESOLVE_DEFAULT_MS;
            QN_WARN("PushSegments: %zu segment(s) in doubt after a lost database connection; "
                    "resolving",
                    p->n);
        }
        send_push(p);
        maybe_free(p);
        return;
    }
    if (st->code != QN_OK) {
        if (p->call != NULL) {
            qn_call *call = p->call;
            qn_call_set_data(call, NULL);
            p->call = NULL;
            qn_finish_store_error(call, st);
        }
        maybe_free(p);
        return;
    }
    for (size_t i = 0; i < p->n && i < res->n; i++) {
        const struct qn_push_seg_result *r = &res->segs[i];
        struct seg_out *o = &p->out[i];
        memcpy(o->pid, r->pid, 16);
        if (r->status == QN_PUSH_QUEUED) {
            o->status = ITEM_QUEUED;
            o->base = r->base;
            p->app->pushed += p->segs[i].count;
            p->app->pushed_bytes += o->payload_bytes;
            qn_notifier_committed(p->app->notifier, p->tenant, p->segs[i].queue,
                                  p->segs[i].partition);
            continue;
        }
        o->ndups = r->ndups;
        o->dups = calloc(r->ndups ? r->ndups : 1, sizeof *o->dups);
        if (o->dups == NULL) {
            o->ndups = 0;
            o->status = ITEM_FAILED;
            o->error = "out of memory reading the duplicates";
            continue;
        }
        int64_t *offs = malloc((r->ndups ? r->ndups : 1) * sizeof *offs);
        for (size_t k = 0; k < r->ndups; k++) {
            o->dups[k].idx = r->dups[k].idx;
            o->dups[k].offset = r->dups[k].offset;
            if (offs)
                offs[k] = r->dups[k].offset;
        }
        if (r->ndups == p->segs[i].count) {
            o->status = ITEM_DUPLICATE;
        } else {
            o->status = ITEM_FAILED;
            o->error = "some frames' transaction ids were already stored (see duplicates): the "
                       "segment was not stored; push the other frames again in a new segment";
        }
        struct lookup *lk = malloc(sizeof *lk);
        struct qn_call_opts lopts = {0, p->tenant, NULL};
        if (lk != NULL && offs != NULL) {
            lk->p = p;
            lk->si = i;
            if (qn_store_segment_at(p->app->store, r->pid, offs, r->ndups, &lopts, lookup_done, lk,
                                    NULL) == QN_OK) {
                p->inflight++;
                lk = NULL;
            }
        }
        free(lk);
        free(offs);
    }
    if (p->inflight == 0)
        answer(p);
    maybe_free(p);
}

static void resolve_timer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct segs_rpc *p = ud;
    if (p->call == NULL) {
        maybe_free(p);
        return;
    }
    send_push(p);
    maybe_free(p);
}

/* Sends the push, or in resolution its re-submission once the pool is up (else
 * polls), or answers UNKNOWN past the horizon. */
static void send_push(struct segs_rpc *p)
{
    struct qn_call_opts opts = {p->call ? qn_call_deadline_ms(p->call) : 0, p->tenant, NULL};
    if (p->resolving) {
        if (p->call == NULL)
            return; /* nobody to answer; the commit, if any, stands */
        if ((int64_t)qn_now_ms() >= p->resolve_until) {
            finish(p, QN_GRPC_UNKNOWN,
                   "the outcome is unknown: the database connection was lost after the segments "
                   "were sent and the broker could not learn within the deadline whether they "
                   "committed; push them again (their transaction ids make that safe)");
            return;
        }
        if (!qn_store_is_up(p->app->store)) {
            if (p->timer == NULL)
                p->timer = evtimer_new(p->app->base, resolve_timer_cb, p);
            if (p->timer == NULL) {
                finish(p, QN_GRPC_UNKNOWN, "the outcome is unknown (out of memory resolving it)");
                return;
            }
            struct timeval tv = {RESOLVE_POLL_MS / 1000, (RESOLVE_POLL_MS % 1000) * 1000};
            evtimer_add(p->timer, &tv);
            return;
        }
        opts.deadline_ms = p->resolve_until;
        if (qn_store_push_resolve(p->app->store, p->segs, p->n, &opts, push_cb, p, NULL) == QN_OK)
            p->inflight++;
        else
            finish(p, QN_GRPC_UNKNOWN, "the outcome is unknown (the resolution could not be sent)");
        return;
    }
    int rc = qn_store_push(p->app->store, p->segs, p->n, false, &opts, push_cb, p, NULL);
    if (rc == QN_OK) {
        p->inflight++;
        return;
    }
    struct qn_store_status st = {rc, "", qn_strerror(rc)};
    if (p->call != NULL) {
        qn_call *call = p->call;
        qn_call_set_data(call, NULL);
        p->call = NULL;
        qn_finish_store_error(call, &st);
    }
}

/* ---------------------------------------------------------------- entry */

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every queue's encryption flag is known: refuse encrypted queues, else send. */
static void segs_submit(struct segs_rpc *p)
{
    p->submitted = true;
    for (size_t i = 0; i < p->nqueues; i++) {
        if (qn_crypt_encrypted(p->app->crypt, p->tenant, p->queues[i])) {
            char why[400];
            snprintf(why, sizeof why,
                     "queue %.255s has encryption_enabled: PushSegments stores segments as sent, "
                     "so its payloads would be stored in the clear; use Push",
                     p->queues[i]);
            finish(p, QN_GRPC_FAILED_PRECONDITION, why);
            maybe_free(p);
            return;
        }
    }
    send_push(p);
    maybe_free(p);
}

static void segs_ready(struct qn_crypt_wait *w, int rc)
{
    struct segs_rpc *p = (struct segs_rpc *)((char *)w - offsetof(struct segs_rpc, wait));
    if (rc != QN_OK) {
        p->submitted = true;
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        qn_call *call = p->call;
        p->call = NULL;
        if (call != NULL) {
            qn_call_set_data(call, NULL);
            qn_finish_store_error(call, &st);
        }
        maybe_free(p);
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
    p->segs = calloc(n, sizeof *p->segs);
    p->first = calloc(n + 1, sizeof *p->first);
    p->out = calloc(n, sizeof *p->out);
    p->hashes = malloc(room * QN_HASH_LEN);
    p->ids = malloc(room * QN_UUID_LEN);
    if (p->segs == NULL || p->first == NULL || p->out == NULL || p->hashes == NULL ||
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
        const Queen__V1__RawSegment *rs = req->segments[i];
        struct qn_push_segment *s = &p->segs[i];
        s->queue = rs->queue;
        s->partition = qn_or_default(rs->partition, QN_DEFAULT_PARTITION);
        s->count = (uint32_t)k;
        s->hashes = p->hashes + p->first[i] * QN_HASH_LEN;
        s->verified = -1;
        s->blob = rs->segment.data;
        s->blob_len = rs->segment.len;
        p->first[i + 1] = p->first[i] + k;
    }
    memcpy(p->tenant, qn_authz_tenant(call), 16);
    p->wait.done = segs_ready;
    p->queues = malloc(n * sizeof *p->queues);
    if (p->queues == NULL) {
        segs_free(p);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++)
        p->queues[i] = req->segments[i]->queue;
    qsort(p->queues, n, sizeof *p->queues, cmp_name);
    for (size_t i = 0; i < n; i++)
        if (p->nqueues == 0 || strcmp(p->queues[p->nqueues - 1], p->queues[i]) != 0)
            p->queues[p->nqueues++] = p->queues[i];
    p->call = call;
    qn_call_set_data(call, p);
    int rc =
        qn_crypt_ready(app->crypt, &p->wait, p->tenant, (const char *const *)p->queues, p->nqueues);
    if (rc == 1) {
        segs_submit(p);
    } else if (rc < 0) {
        finish(p, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        maybe_free(p);
    }
    /* 0: segs_ready continues */
}

void qn_svc_push_segments_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct segs_rpc *p = qn_call_data(call);
    if (p == NULL)
        return;
    p->call = NULL; /* a push in flight completes; nothing is answered */
    if (!p->submitted)
        qn_crypt_cancel(&p->wait);
    maybe_free(p);
}
