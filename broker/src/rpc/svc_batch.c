/*
 * rpc/svc_batch.c - what Pop, Consume and Fetch share (see svc_batch.h): the
 * batch builder (leased segments -> queen.v1.Message), the pop request both Pop
 * and Consume carry, sending one batch and releasing a worker's leases.
 *
 * Does: decompress each segment once (unless an offload thread did already,
 * engine/decode.h) and slice exactly its span; copy payloads
 * and names into the response's arena; budget a pop's bytes so its response
 * fits QUEEN_MAX_SEND_BYTES and the outbound budget it reserved.
 * Does not: touch a call's lifecycle (the RPC files do) or park anything.
 *
 * Invariant: a built message never points into the decompression buffer (the
 * next decompression reuses it); everything it points to lives in the arena or
 * in the caller's request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "app.h"
#include "config.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/authz.h"
#include "rpc/crypt.h"
#include "engine/cfusion.h"
#include "engine/waiters.h"
#include "rpc/svc_batch.h"
#include "rpc/validate.h"
#include "timer.h"

/* ---------------------------------------------------------------- messages */

int qn_build_messages(struct qn_app *app, struct qn_arena *a, const struct qn_pop_segment *segs,
                      size_t nsegs, const char *queue, const char *partition, const char *group,
                      const char *lease, Queen__V1__Message ***out, size_t *count)
{
    size_t total = 0;
    for (size_t i = 0; i < nsegs; i++)
        if (segs[i].take > 0)
            total += (size_t)segs[i].take;
    Queen__V1__Message **msgs = qn_arena_alloc(a, (total ? total : 1) * sizeof *msgs);
    Queen__V1__Message *m = qn_arena_alloc(a, (total ? total : 1) * sizeof *m);
    if (msgs == NULL || m == NULL)
        return QN_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < nsegs; i++) {
        const struct qn_pop_segment *s = &segs[i];
        if (s->take <= 0 || s->start_idx < 0)
            continue;
        const uint8_t *raw = s->raw; /* decompressed off the loop (engine/decode.h) */
        size_t rawlen = s->raw_len;
        int rc = QN_OK;
        if (raw == NULL)
            rc = qn_segment_decompress(app->zctx, s->blob, s->blob_len,
                                       (size_t)app->cfg->segment_raw_max, &raw, &rawlen);
        if (rc != QN_OK)
            return rc;
        struct qn_frame_iter it;
        struct qn_frame_error fe;
        rc = qn_frame_iter_span(&it, raw, rawlen, (size_t)s->start_idx, (size_t)s->take, &fe);
        if (rc != QN_OK)
            return rc;
        char *pid = qn_arena_alloc(a, QN_UUID_STR_LEN);
        const char *q = s->queue ? s->queue : queue;
        const char *p = s->partition ? s->partition : partition;
        char *qc = q ? qn_arena_strndup(a, q, strlen(q)) : (char *)"";
        char *pc = p ? qn_arena_strndup(a, p, strlen(p)) : (char *)"";
        if (pid == NULL || qc == NULL || pc == NULL)
            return QN_ENOMEM;
        qn_uuid_format(s->pid, pid);
        struct qn_frame f;
        for (int32_t j = 0; j < s->take; j++) {
            rc = qn_frame_iter_next(&it, &f, &fe);
            if (rc != 1)
                return rc < 0 ? rc : QN_ESEGMENT_COUNT;
            Queen__V1__Message *mm = &m[k];
            queen__v1__message__init(mm);
            char *id = qn_arena_alloc(a, QN_UUID_STR_LEN);
            char *txn = qn_arena_strndup(a, f.txn, f.txn_len);
            if (id == NULL || txn == NULL)
                return QN_ENOMEM;
            qn_uuid_format(f.message_id, id);
            const uint8_t *payload = NULL;
            size_t plen = 0;
            if (f.flags & QN_FRAME_FLAG_ENCRYPTED) {
                /* decrypted for the reader; one that cannot be is delivered
                 * without payload and with the reason, never as ciphertext */
                char why[200];
                rc = qn_crypt_open(app, a, f.message_id, f.payload, f.payload_len, &payload, &plen,
                                   why, sizeof why);
                if (rc == QN_ENOMEM)
                    return rc;
                if (rc != QN_OK) {
                    payload = NULL;
                    plen = 0;
                    if ((mm->payload_error = qn_arena_strndup(a, why, strlen(why))) == NULL)
                        return QN_ENOMEM;
                }
            } else if (f.payload_len) {
                uint8_t *copy = qn_arena_alloc(a, f.payload_len);
                if (copy == NULL)
                    return QN_ENOMEM;
                memcpy(copy, f.payload, f.payload_len);
                payload = copy;
                plen = f.payload_len;
            }
            mm->message_id = id;
            mm->transaction_id = txn;
            if (f.flags & QN_FRAME_FLAG_TRACE) {
                char *tid = qn_arena_alloc(a, QN_UUID_STR_LEN);
                if (tid == NULL)
                    return QN_ENOMEM;
                qn_uuid_format(f.trace_id, tid);
                mm->trace_id = tid;
            }
            if (f.flags & QN_FRAME_FLAG_PSUB) {
                mm->producer_sub = qn_arena_strndup(a, f.psub, f.psub_len);
                if (mm->producer_sub == NULL)
                    return QN_ENOMEM;
            }
            mm->payload.data = (uint8_t *)payload;
            mm->payload.len = plen;
            mm->created_at_us = s->created_at_us;
            mm->queue = qc;
            mm->partition = pc;
            mm->partition_id = pid;
            mm->offset = s->base + s->start_idx + j;
            mm->lease_id = (char *)(lease ? lease : "");
            mm->consumer_group = (char *)(group ? group : "");
            mm->encrypted = (f.flags & QN_FRAME_FLAG_ENCRYPTED) != 0;
            msgs[k++] = mm;
        }
    }
    *out = msgs;
    *count = k;
    return QN_OK;
}

/* ---------------------------------------------------------------- pop requests */

bool qn_pop_prepare(const struct qn_config *cfg, const struct qn_pop_params *pp,
                    struct qn_pop_args *a, const char *worker, char *why, size_t cap)
{
    char tmp[200];
    bool discover = pp->queue == NULL || *pp->queue == '\0';
    if (discover) {
        if ((pp->namespace_ == NULL || !*pp->namespace_) && (pp->task == NULL || !*pp->task)) {
            snprintf(why, cap, "queue is required (or namespace / task to discover queues)");
            return false;
        }
        if (qn_name_problem(pp->namespace_, "namespace", true, tmp, sizeof tmp) ||
            qn_name_problem(pp->task, "task", true, tmp, sizeof tmp)) {
            snprintf(why, cap, "%s", tmp);
            return false;
        }
        if (pp->partition && *pp->partition) {
            snprintf(why, cap, "partition cannot be named when discovering queues");
            return false;
        }
    } else if (qn_name_problem(pp->queue, "queue", false, tmp, sizeof tmp)) {
        snprintf(why, cap, "%s", tmp);
        return false;
    }
    if (qn_name_problem(pp->partition, "partition", true, tmp, sizeof tmp) ||
        qn_name_problem(pp->group, "consumer_group", true, tmp, sizeof tmp)) {
        snprintf(why, cap, "%s", tmp);
        return false;
    }
    if (pp->batch > (uint32_t)cfg->max_pop_batch) {
        snprintf(why, cap, "batch %u is over the limit of %lld", pp->batch,
                 (long long)cfg->max_pop_batch);
        return false;
    }
    if (pp->lease_seconds > 86400) {
        snprintf(why, cap, "lease_seconds %u is over the limit of 86400", pp->lease_seconds);
        return false;
    }
    if (pp->max_partitions > 10000) {
        snprintf(why, cap, "max_partitions %u is over the limit of 10000", pp->max_partitions);
        return false;
    }
    memset(a, 0, sizeof *a);
    switch (pp->mode) {
    case QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_UNSPECIFIED:
    case QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_ALL:
        a->sub_mode = QN_SUB_ALL;
        break;
    case QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_NEW:
        a->sub_mode = QN_SUB_NEW;
        break;
    case QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_FROM_TIMESTAMP:
        if (pp->from_us == 0) {
            snprintf(why, cap,
                     "subscription_from_us is required with SUBSCRIPTION_MODE_FROM_TIMESTAMP");
            return false;
        }
        if (pp->from_us < 0) {
            snprintf(why, cap,
                     "subscription_from_us %lld is negative: expected microseconds since the "
                     "Unix epoch (1970-01-01), e.g. 1700000000000000",
                     (long long)pp->from_us);
            return false;
        }
        a->sub_mode = QN_SUB_TIMESTAMP;
        a->sub_from_us = pp->from_us;
        break;
    default:
        snprintf(why, cap, "subscription_mode %d is unknown", (int)pp->mode);
        return false;
    }
    a->queue = discover ? NULL : pp->queue;
    a->partition = pp->partition;
    a->namespace_ = pp->namespace_;
    a->task = pp->task;
    a->group = qn_or_default(pp->group, QN_QUEUE_MODE);
    /* 0 means 100, and never more than the limit a client could ask for */
    a->budget = pp->batch                  ? (int32_t)pp->batch
                : cfg->max_pop_batch < 100 ? (int32_t)cfg->max_pop_batch
                                           : 100;
    a->max_partitions = pp->max_partitions ? (int32_t)pp->max_partitions : 1;
    a->lease_seconds = (int32_t)pp->lease_seconds;
    a->auto_ack = pp->auto_ack;
    a->worker = worker;
    /* Byte budget: the response must fit the send limit. Per message the
     * protobuf envelope carries four UUID strings, the names and field tags. */
    size_t names = (discover || !pp->queue ? 255 : strlen(pp->queue)) +
                   (pp->partition && *pp->partition ? strlen(pp->partition) : 255) +
                   strlen(a->group);
    a->msg_overhead = (int32_t)(4 * 38 + names + 48);
    a->max_bytes = cfg->max_send_bytes - 1024;
    a->max_msg_bytes = (int32_t)(cfg->max_payload_bytes + 2 * 65535 + 64);
    return true;
}

enum qn_grpc_code qn_pop_authorize(qn_call *call, const struct qn_pop_args *a,
                                   struct qn_authz_names *names, bool *filtered, char *why,
                                   size_t cap)
{
    *filtered = false;
    if (a->queue != NULL)
        return qn_authz_check(call, QN_SCOPE_CONSUME, a->queue, why, cap)
                   ? QN_GRPC_OK
                   : QN_GRPC_PERMISSION_DENIED;
    int reach = qn_authz_names(call, QN_SCOPE_CONSUME, names);
    if (reach < 0) {
        snprintf(why, cap, "out of memory");
        return QN_GRPC_RESOURCE_EXHAUSTED;
    }
    if (reach == QN_REACH_NONE) {
        qn_authz_refuse(call, QN_SCOPE_CONSUME, "",
                        "no consume grant: discovery by namespace or task needs one", why, cap);
        return QN_GRPC_PERMISSION_DENIED;
    }
    *filtered = reach == QN_REACH_SOME;
    return QN_GRPC_OK;
}

/* ---------------------------------------------------------------- batches */

int qn_pop_reserve(qn_call *call, const struct qn_config *cfg, struct qn_pop_args *a, size_t *min,
                   char *why, size_t cap)
{
    /* 1024: the response's own envelope, as the send limit allows for it */
    int64_t one = (int64_t)a->max_msg_bytes + a->msg_overhead + 1024;
    int64_t want = a->budget > 0 ? (int64_t)a->budget * (a->max_msg_bytes + a->msg_overhead) + 1024
                                 : cfg->max_send_bytes;
    if (want > cfg->max_send_bytes)
        want = cfg->max_send_bytes;
    if (one > want)
        one = want;
    size_t granted = 0;
    *min = (size_t)one;
    int rc = qn_call_reserve(call, (size_t)one, (size_t)want, &granted, why, cap);
    if (rc == QN_OK)
        a->max_bytes = (int64_t)granted - 1024;
    return rc;
}

/* PopResponse.segments: one slice per popped segment row, borrowing its blob. */
static int build_slices(struct qn_arena *arena, const struct qn_pop_args *a,
                        const struct qn_pop_result *res, Queen__V1__PopResponse *pr, size_t *count)
{
    Queen__V1__SegmentSlice *sl = qn_arena_alloc(arena, (res->n ? res->n : 1) * sizeof *sl);
    Queen__V1__SegmentSlice **ptrs = qn_arena_alloc(arena, (res->n ? res->n : 1) * sizeof *ptrs);
    char *pids = qn_arena_alloc(arena, (res->n ? res->n : 1) * QN_UUID_STR_LEN);
    if (sl == NULL || ptrs == NULL || pids == NULL)
        return QN_ENOMEM;
    size_t total = 0;
    for (size_t i = 0; i < res->n; i++) {
        const struct qn_pop_segment *s = &res->segs[i];
        queen__v1__segment_slice__init(&sl[i]);
        sl[i].queue = (char *)(s->queue && *s->queue ? s->queue : a->queue);
        sl[i].partition = (char *)(s->partition && *s->partition ? s->partition : a->partition);
        qn_uuid_format(s->pid, pids + i * QN_UUID_STR_LEN);
        sl[i].partition_id = pids + i * QN_UUID_STR_LEN;
        sl[i].base_offset = s->base;
        sl[i].first_index = (uint32_t)s->start_idx;
        sl[i].count = (uint32_t)s->take;
        sl[i].segment.data = (uint8_t *)s->blob;
        sl[i].segment.len = s->blob_len;
        sl[i].created_at_us = s->created_at_us;
        ptrs[i] = &sl[i];
        total += (size_t)s->take;
    }
    pr->n_segments = res->n;
    pr->segments = ptrs;
    *count = total;
    return QN_OK;
}

bool qn_pop_take_hint(struct qn_waiter *w, struct qn_pop_args *a)
{
    if (!w->hinted)
        return false;
    w->hinted = false;
    if (a->queue == NULL || a->queue[0] == '\0' || (a->partition != NULL && a->partition[0]) ||
        a->max_partitions > 1)
        return false; /* discovery, a named partition, or a pop over several partitions */
    a->partition = w->hint;
    return true;
}

void qn_pop_pass_hint(struct qn_app *app, const uint8_t tenant[16], struct qn_waiter *w,
                      const struct qn_pop_args *a)
{
    if (!w->hinted)
        return;
    w->hinted = false;
    qn_waiters_unpark(app->waiters, w);
    if (a->queue == NULL || a->queue[0] == '\0' || app->shutting_down)
        return;
    char part[QN_WAITER_HINT_MAX + 1];
    memcpy(part, w->hint, sizeof part);
    if (qn_cfusion_holds(app->cfusion, tenant, a->queue, part, a->group, qn_store_now_ms()))
        return; /* a consumer here holds the group's lease there (often w's own
                 * batch): its release hints, and a hint now would be a pop
                 * that finds the partition leased */
    qn_waiters_feed(app->waiters, tenant, a->queue, a->group ? a->group : "", part, 0);
}

size_t qn_pop_learn(struct qn_app *app, const uint8_t tenant[16], const struct qn_pop_args *a,
                    const struct qn_pop_result *res, bool full)
{
    size_t nseen = 0;
    int64_t now = qn_store_now_ms();
    /* pop_v1 returns the rows of one claimed partition together (claim order,
     * then base), so each change of partition id is a new one */
    for (size_t i = 0; i < res->n; i++) {
        if (i > 0 && memcmp(res->segs[i - 1].pid, res->segs[i].pid, 16) == 0)
            continue;
        nseen++;
        /* consume fusion learns the partition's names for its acks, and the
         * lease this broker's consumer now holds there */
        const struct qn_pop_segment *s = &res->segs[i];
        qn_cfusion_learn(app->cfusion, tenant, s->pid, s->queue && *s->queue ? s->queue : a->queue,
                         s->partition && *s->partition ? s->partition : a->partition, a->group,
                         full, now);
        if (!a->auto_ack && s->lease_expires_at_us > 0)
            qn_cfusion_hold(app->cfusion, tenant, s->pid, a->group, a->worker,
                            qn_cfusion_lease_ms(s->lease_expires_at_us, now));
    }
    return nseen;
}

long qn_pop_send_batch(struct qn_app *app, qn_call *call, const struct qn_pop_args *a,
                       const struct qn_pop_result *res, unsigned flags)
{
    struct qn_arena arena;
    qn_arena_init(&arena);
    Queen__V1__Message **msgs = NULL;
    size_t n = 0;
    const char *lease = a->auto_ack ? "" : a->worker;
    Queen__V1__PopResponse pr = QUEEN__V1__POP_RESPONSE__INIT;
    int rc = (flags & QN_BATCH_RAW) ? build_slices(&arena, a, res, &pr, &n)
                                    : qn_build_messages(app, &arena, res->segs, res->n, a->queue,
                                                        a->partition, a->group, lease, &msgs, &n);
    /* payload bytes for the metrics; raw slices are not decoded here, so they
     * count their messages only (docs/metrics.md) */
    uint64_t bytes = 0;
    for (size_t i = 0; rc == QN_OK && msgs != NULL && i < n; i++)
        bytes += msgs[i]->payload.len;
    if (rc == QN_OK) {
        pr.n_messages = (flags & QN_BATCH_RAW) ? 0 : n;
        pr.messages = msgs;
        pr.lease_id = (char *)lease;
        int64_t exp = 0;
        for (size_t i = 0; i < res->n; i++) {
            /* the earliest: partitions of different queues may have different
             * lease times, and the client must renew before the first runs out */
            int64_t e = res->segs[i].lease_expires_at_us;
            if (e > 0 && (exp == 0 || e < exp))
                exp = e;
        }
        size_t nseen = qn_pop_learn(app, qn_authz_tenant(call), a, res, n >= (size_t)a->budget);
        pr.lease_expires_at_us = a->auto_ack ? 0 : exp;
        pr.partitions_claimed = (uint32_t)nseen;
        if (flags & QN_BATCH_WRAP) {
            Queen__V1__ConsumeResponse cr = QUEEN__V1__CONSUME_RESPONSE__INIT;
            cr.kind_case = QUEEN__V1__CONSUME_RESPONSE__KIND_BATCH;
            cr.batch = &pr;
            rc = qn_call_send(call, &cr.base);
        } else {
            rc = qn_call_send(call, &pr.base);
        }
    }
    qn_arena_free(&arena);
    if (rc != QN_OK)
        return rc;
    app->delivered += n;
    app->delivered_bytes += bytes;
    return (long)n;
}

/* ---------------------------------------------------------------- lease release */

/*
 * A release of a worker's leases, sent again until the database answers: a pop
 * whose result was lost may hold a lease nobody will ack, and a release lost
 * with the connection would leave it until it expires. release_lease_v1 is
 * idempotent, so repeating it is harmless.
 *
 *     SENT --answered--> (first() told; freed)
 *     SENT --answered, a pop in doubt's first release--> LATE --QN_POP_RELEASE_LATE_MS--> SENT
 *     SENT --in doubt, refused, unavailable--> WAITING --backoff--> SENT
 *     WAITING|SENT --RELEASE_MAX_MS, or the store shut down--> (logged; freed)
 */
#define RELEASE_MIN_MS 50
#define RELEASE_MAX_BACKOFF_MS 2000
#define RELEASE_MAX_MS (10 * 60 * 1000)

struct qn_pop_release {
    struct qn_app *app;
    struct qn_pop_release *prev, *next; /* app->releases */
    char worker[QN_UUID_STR_LEN + 1];
    uint8_t tenant[16]; /* the popping caller's (the call may be gone) */
    qn_store_req *sreq; /* SENT */
    struct event *timer;
    int64_t started_ms, backoff_ms;
    unsigned attempts;
    bool late; /* a pop in doubt's: released once more after QN_POP_RELEASE_LATE_MS */
    void (*first)(void *ud, int code); /* after the first attempt; NULL once told */
    void *ud;
};

static void release_free(struct qn_pop_release *r)
{
    struct qn_app *app = r->app;
    if (r->prev)
        r->prev->next = r->next;
    else
        app->releases = r->next;
    if (r->next)
        r->next->prev = r->prev;
    if (r->timer)
        event_free(r->timer);
    free(r);
}

static void release_tell(struct qn_pop_release *r, int code)
{
    void (*first)(void *, int) = r->first;
    r->first = NULL;
    if (first)
        first(r->ud, code);
}

static void release_send(struct qn_pop_release *r);

static void release_timer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    release_send(ud);
}

static void release_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    (void)value;
    struct qn_pop_release *r = ud;
    r->sreq = NULL;
    int64_t now = qn_store_now_ms();
    bool again = st->code == QN_EINDOUBT || st->code == QN_EUNAVAILABLE ||
                 st->code == QN_ETIMEOUT || st->code == QN_EBUSY || st->code == QN_ECONFLICT;
    if (st->code == QN_OK) {
        /* the leases are free for their groups again (engine/cfusion.h) */
        qn_cfusion_worker_released(r->app->cfusion, r->tenant, r->worker);
        if (r->attempts > 1)
            QN_INFO("leases of %s released after %u attempts", r->worker, r->attempts);
        if (r->late) {
            /* the lost pop may still commit on the server: release again later */
            r->late = false;
            release_tell(r, st->code);
            r->started_ms = now;
            r->backoff_ms = RELEASE_MIN_MS;
            qn_timer_after(r->timer, QN_POP_RELEASE_LATE_MS);
            return;
        }
    } else if (again && now - r->started_ms < RELEASE_MAX_MS) {
        if (r->attempts == 1)
            QN_WARN("releasing leases of %s: %s; retrying until the database answers", r->worker,
                    qn_strerror(st->code));
        release_tell(r, st->code);
        qn_timer_after(r->timer, r->backoff_ms);
        r->backoff_ms =
            r->backoff_ms * 2 > RELEASE_MAX_BACKOFF_MS ? RELEASE_MAX_BACKOFF_MS : r->backoff_ms * 2;
        return;
    } else if (st->code != QN_ESHUTDOWN) {
        QN_WARN("releasing leases of %s failed (%u attempts): %s; they expire on their own",
                r->worker, r->attempts,
                st->message && *st->message ? st->message : qn_strerror(st->code));
    }
    release_tell(r, st->code);
    release_free(r);
}

static void release_send(struct qn_pop_release *r)
{
    r->attempts++;
    /* release_lease_v1 is keyed on the worker, which only the popping call
     * knew; the tenant rides along like every call's */
    struct qn_call_opts opts = {0, r->tenant, NULL};
    int rc = qn_store_release_lease(r->app->store, r->worker, &opts, release_done, r, &r->sreq);
    if (rc != QN_OK) {
        /* nothing was sent: go through the same path from the loop */
        r->sreq = NULL;
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        release_done(r, &st, 0);
    }
}

int qn_pop_release_worker_then(struct qn_app *app, const uint8_t tenant[16], const char *worker,
                               void (*first)(void *ud, int code), void *ud)
{
    struct qn_pop_release *r = calloc(1, sizeof *r);
    if (r == NULL)
        return QN_ENOMEM;
    r->timer = evtimer_new(app->base, release_timer_cb, r);
    if (r->timer == NULL) {
        free(r);
        return QN_ENOMEM;
    }
    r->app = app;
    snprintf(r->worker, sizeof r->worker, "%s", worker);
    memcpy(r->tenant, tenant, 16);
    r->started_ms = qn_store_now_ms();
    r->backoff_ms = RELEASE_MIN_MS;
    r->first = first;
    r->ud = ud;
    r->late = true; /* every caller of this one resolves a pop in doubt */
    r->next = app->releases;
    if (app->releases)
        app->releases->prev = r;
    app->releases = r;
    /* the first attempt from the loop, so first() never runs inside this call */
    struct timeval zero = {0, 0};
    evtimer_add(r->timer, &zero);
    return QN_OK;
}

static int release_start(struct qn_app *app, const uint8_t tenant[16], const char *worker,
                         bool late)
{
    int rc = qn_pop_release_worker_then(app, tenant, worker, NULL, NULL);
    if (rc == QN_OK)
        app->releases->late = late; /* the newest is first */
    else
        QN_WARN("releasing leases of %s could not be started (out of memory); they expire on "
                "their own",
                worker);
    return rc;
}

void qn_pop_release_worker(struct qn_app *app, const uint8_t tenant[16], const char *worker)
{
    release_start(app, tenant, worker, false);
}

void qn_pop_release_worker_doubt(struct qn_app *app, const uint8_t tenant[16], const char *worker)
{
    release_start(app, tenant, worker, true);
}

void qn_pop_release_cancel(struct qn_app *app, void *ud)
{
    for (struct qn_pop_release *r = app->releases; r != NULL; r = r->next)
        if (r->ud == ud)
            r->first = NULL;
}

void qn_pop_releases_free(struct qn_app *app)
{
    while (app->releases != NULL) {
        struct qn_pop_release *r = app->releases;
        qn_store_cancel(r->sreq);
        release_free(r);
    }
}

enum qn_grpc_code qn_pop_batch_error_code(int rc)
{
    if (rc == QN_ELIMIT)
        return QN_GRPC_RESOURCE_EXHAUSTED;
    if (rc == QN_ENOMEM)
        return QN_GRPC_RESOURCE_EXHAUSTED;
    return QN_GRPC_DATA_LOSS;
}
