/*
 * svc_pop.c - QueueService.Pop and QueueService.Consume, and the batch builder
 * they share with Fetch (segments -> queen.v1.Message).
 *
 * Does: validate; lease the next batch through pop_v1 (or pop_discover_v1);
 * decompress the leased segments and slice the leased span; park an empty pop
 * (or an idle consume stream) on the waiters until a commit to its queue, its
 * wait deadline or its re-check timer; stream batches to Consume clients while
 * they hold credits and read what was sent; release a stream's leases when it
 * ends.
 * Does not: hold a database connection while parked; produce a batch for a stream
 * whose previous batches are still unread (outbound flow control).
 *
 * Pop lifecycle:   VALIDATED -> POPPING -> (rows) ANSWERED
 *                                  |  ^
 *                          (empty) v  | (wake / re-check timer)
 *                                WAITING -> (deadline) ANSWERED (empty)
 * A pop with wait_ms > 0 is parked from before its first database call, so a
 * commit that lands while a pop is in flight is remembered (rewake) and the
 * empty answer is followed by an immediate second pop instead of a missed
 * wake-up.
 *
 * Consume lifecycle: OPEN (until subscribe) -> SUBSCRIBED -> ENDING -> (freed)
 * with at most one pop in flight; credits count batches the client still wants.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "rpc/resp_arena.h"
#include "config.h"
#include "log.h"
#include "engine/map.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/svc.h"
#include "rpc/svc_batch.h"
#include "rpc/svc_util.h"
#include "engine/waiters.h"

/* ---------------------------------------------------------------- batches */

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
        const uint8_t *raw;
        size_t rawlen;
        int rc = qn_segment_decompress(app->zctx, s->blob, s->blob_len,
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
            uint8_t *payload = f.payload_len ? qn_arena_alloc(a, f.payload_len) : NULL;
            if (id == NULL || txn == NULL || (f.payload_len && payload == NULL))
                return QN_ENOMEM;
            qn_uuid_format(f.message_id, id);
            if (f.payload_len)
                memcpy(payload, f.payload, f.payload_len);
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
            mm->payload.data = payload;
            mm->payload.len = f.payload_len;
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

/* ---------------------------------------------------------------- shared pop setup */

/* The pop parameters both RPCs carry. */
struct pop_params {
    const char *queue, *partition, *namespace_, *task, *group;
    uint32_t batch, max_partitions, lease_seconds;
    bool auto_ack;
    Queen__V1__SubscriptionMode mode;
    int64_t from_us;
};

/* Validates params and fills the storage arguments; false with a message. */
static bool pop_prepare(const struct qn_config *cfg, const struct pop_params *pp,
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
        if (pp->from_us <= 0) {
            snprintf(why, cap, "subscription_from_us is required with SUBSCRIPTION_MODE_FROM_TIMESTAMP");
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

/* Sends one PopResponse built from res on call (Pop) or inside a ConsumeResponse
 * (Consume, request_id 0). Returns messages sent, or a negative error. */
static long send_batch(struct qn_app *app, qn_call *call, const struct qn_pop_args *a,
                       const struct qn_pop_result *res, bool wrap)
{
    struct qn_arena arena;
    qn_arena_init(&arena);
    Queen__V1__Message **msgs = NULL;
    size_t n = 0;
    const char *lease = a->auto_ack ? "" : a->worker;
    int rc = qn_build_messages(app, &arena, res->segs, res->n, a->queue, a->partition, a->group,
                               lease, &msgs, &n);
    if (rc == QN_OK) {
        Queen__V1__PopResponse pr = QUEEN__V1__POP_RESPONSE__INIT;
        pr.n_messages = n;
        pr.messages = msgs;
        pr.lease_id = (char *)lease;
        int64_t exp = 0;
        size_t nseen = 0;
        /* pop_v1 returns the rows of one claimed partition together (claim
         * order, then base), so each change of partition id is a new one */
        for (size_t i = 0; i < res->n; i++) {
            /* the earliest: partitions of different queues may have different
             * lease times, and the client must renew before the first runs out */
            int64_t e = res->segs[i].lease_expires_at_us;
            if (e > 0 && (exp == 0 || e < exp))
                exp = e;
            if (i == 0 || memcmp(res->segs[i - 1].pid, res->segs[i].pid, 16) != 0)
                nseen++;
        }
        pr.lease_expires_at_us = a->auto_ack ? 0 : exp;
        pr.partitions_claimed = (uint32_t)nseen;
        if (wrap) {
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
    return (long)n;
}

static void release_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    (void)ud;
    (void)value;
    if (st->code != QN_OK)
        QN_WARN("releasing leases failed: %s", st->message);
}

/* Releases every lease held under worker, fire and forget. */
static void release_worker(struct qn_app *app, const char *worker)
{
    if (qn_store_release_lease(app->store, worker, NULL, release_done, NULL, NULL) != QN_OK)
        QN_WARN("releasing leases of %s could not be sent", worker);
}

static enum qn_grpc_code code_for_batch_error(int rc)
{
    if (rc == QN_ELIMIT)
        return QN_GRPC_RESOURCE_EXHAUSTED;
    if (rc == QN_ENOMEM)
        return QN_GRPC_RESOURCE_EXHAUSTED;
    return QN_GRPC_DATA_LOSS;
}

/* ---------------------------------------------------------------- Pop */

struct pop_rpc {
    struct qn_app *app;
    qn_call *call;
    Queen__V1__PopRequest *req;   /* owned; args borrow its strings */
    struct qn_pop_args args;
    char worker[QN_UUID_STR_LEN];
    int64_t wait_until_ms;        /* monotonic; 0 = answer at once */
    qn_store_req *sreq;
    struct qn_waiter waiter;
    bool waiting;                 /* parked (or may be woken) */
    bool rewake;                  /* a commit was seen while a pop was in flight */
    struct event *timer;
    /* min_pop_wait_time: an under-full pop is held until enough is pending or
     * hold_until_ms passed (0 = not decided yet) */
    bool gated;                   /* the gate has let this pop through */
    bool sreq_is_gate;            /* sreq is a pop_gate_v1 call, not a pop */
    int64_t started_ms;
    int64_t hold_until_ms;
};

/* ---------------------------------------------------------------- min_pop_wait_time */

/* Queues' min_pop_wait_time, learned from pop_gate_v1 and kept GATE_TTL_MS, so a
 * queue without the option costs one extra read per GATE_TTL_MS, not per pop. */
#define GATE_TTL_MS 30000
#define GATE_CACHE_MAX 100000

struct gate_entry {
    struct qn_map_node node;
    int32_t min_wait_ms;
    int64_t at_ms;
    size_t klen;
    char name[];
};

static struct qn_map gate_cache;
static bool gate_cache_ready;

static void gate_entry_free(struct qn_map_node *n, void *ud)
{
    qn_map_remove(ud, n);
    free(qn_container_of(n, struct gate_entry, node));
}

/* The cached min_pop_wait_time of queue, or -1 when unknown or stale. */
static int32_t gate_cached(const char *queue)
{
    if (!gate_cache_ready)
        return -1;
    struct qn_map_node *n = qn_map_get(&gate_cache, queue, strlen(queue));
    if (n == NULL)
        return -1;
    struct gate_entry *e = qn_container_of(n, struct gate_entry, node);
    return qn_store_now_ms() - e->at_ms > GATE_TTL_MS ? -1 : e->min_wait_ms;
}

static void gate_remember(const char *queue, int32_t min_wait)
{
    if (!gate_cache_ready) {
        qn_map_init(&gate_cache, GATE_CACHE_MAX + 1);
        gate_cache_ready = true;
    }
    size_t l = strlen(queue);
    struct qn_map_node *n = qn_map_get(&gate_cache, queue, l);
    if (n == NULL) {
        if (gate_cache.count >= GATE_CACHE_MAX)
            qn_map_each(&gate_cache, gate_entry_free, &gate_cache);
        struct gate_entry *e = calloc(1, sizeof *e + l + 1);
        if (e == NULL)
            return;
        memcpy(e->name, queue, l + 1);
        e->klen = l;
        if (qn_map_put(&gate_cache, &e->node, e->name, l) != QN_OK) {
            free(e);
            return;
        }
        n = &e->node;
    }
    struct gate_entry *e = qn_container_of(n, struct gate_entry, node);
    e->min_wait_ms = min_wait;
    e->at_ms = qn_store_now_ms();
}

void qn_svc_pop_gate_forget(void)
{
    if (gate_cache_ready) {
        qn_map_each(&gate_cache, gate_entry_free, &gate_cache);
        qn_map_destroy(&gate_cache);
        gate_cache_ready = false;
    }
}

static void pop_free(struct pop_rpc *p)
{
    if (p->sreq)
        qn_store_cancel(p->sreq);
    qn_waiters_unpark(p->app->waiters, &p->waiter);
    if (p->timer)
        event_free(p->timer);
    if (p->req)
        protobuf_c_message_free_unpacked(&p->req->base, NULL);
    free(p);
}

static void pop_issue(struct pop_rpc *p);

static void pop_answer_empty(struct pop_rpc *p)
{
    Queen__V1__PopResponse pr = QUEEN__V1__POP_RESPONSE__INIT;
    qn_call *call = p->call;
    qn_call_set_data(call, NULL);
    if (qn_call_send(call, &pr.base) == QN_OK)
        qn_call_finish(call, QN_GRPC_OK, NULL);
    else
        qn_call_finish(call, QN_GRPC_INTERNAL, "cannot send the response");
    pop_free(p);
}

static void pop_arm_timer(struct pop_rpc *p)
{
    int64_t now = qn_store_now_ms();
    int64_t at = now + p->app->cfg->wake_recheck_ms;
    if (at > p->wait_until_ms)
        at = p->wait_until_ms;
    int64_t ms = at > now ? at - now : 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(p->timer, &tv);
}

static void pop_timer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct pop_rpc *p = ud;
    if (p->sreq != NULL)
        return; /* the in-flight call decides */
    if (p->gated && qn_store_now_ms() >= p->wait_until_ms) {
        pop_answer_empty(p);
        return;
    }
    pop_issue(p); /* held by the gate: ask again (it lets the pop through at the end) */
}

static void pop_wake(struct qn_waiter *w)
{
    struct pop_rpc *p = w->ud;
    if (p->sreq != NULL) {
        p->rewake = true;
        return;
    }
    evtimer_del(p->timer);
    if (p->app->shutting_down) {
        pop_answer_empty(p);
        return;
    }
    pop_issue(p);
}

static void pop_done(void *ud, const struct qn_store_status *st, const struct qn_pop_result *res)
{
    struct pop_rpc *p = ud;
    p->sreq = NULL;
    qn_call *call = p->call;
    if (call == NULL) {
        /* the call ended while this pop ran (see qn_svc_pop_cancel): nobody
         * receives what it leased, so release it now that it has committed */
        if (st->code == QN_OK && res->n > 0 && !p->args.auto_ack)
            release_worker(p->app, p->worker);
        pop_free(p);
        return;
    }
    if (st->code != QN_OK) {
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, st);
        pop_free(p);
        return;
    }
    if (res->n > 0) {
        long sent = send_batch(p->app, call, &p->args, res, false);
        qn_call_set_data(call, NULL);
        if (sent < 0) {
            if (!p->args.auto_ack)
                release_worker(p->app, p->worker);
            QN_ERROR("pop: cannot build a batch of %s: %s", p->args.queue ? p->args.queue : "?",
                     qn_strerror((int)sent));
            qn_call_finish(call, code_for_batch_error((int)sent), qn_strerror((int)sent));
        } else {
            qn_call_finish(call, QN_GRPC_OK, NULL);
        }
        pop_free(p);
        return;
    }
    /* empty */
    if (!p->waiting || qn_store_now_ms() >= p->wait_until_ms || p->app->shutting_down) {
        pop_answer_empty(p);
        return;
    }
    if (p->rewake) {
        p->rewake = false;
        pop_issue(p);
        return;
    }
    pop_arm_timer(p);
}

/* pop_gate_v1 answered: let the pop through, or hold it (parked, woken by
 * commits, re-asking each time) until enough is pending or the hold ends. */
static void pop_gate_done(void *ud, const struct qn_store_status *st, int64_t pending,
                          int32_t min_wait_ms)
{
    struct pop_rpc *p = ud;
    p->sreq = NULL;
    p->sreq_is_gate = false;
    if (p->call == NULL) {
        pop_free(p);
        return;
    }
    if (st->code != QN_OK) {
        qn_call *call = p->call;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, st);
        pop_free(p);
        return;
    }
    gate_remember(p->args.queue, min_wait_ms);
    int64_t now = qn_store_now_ms();
    if (min_wait_ms > 0 && p->hold_until_ms == 0) {
        p->hold_until_ms = p->started_ms + min_wait_ms;
        int64_t dl = qn_call_deadline_ms(p->call);
        if (dl > 0 && dl - 20 < p->hold_until_ms)
            p->hold_until_ms = dl - 20;
    }
    if (min_wait_ms <= 0 || pending == 0 || pending >= p->args.budget || now >= p->hold_until_ms ||
        p->app->shutting_down) {
        p->gated = true;
        pop_issue(p);
        return;
    }
    /* under-full: hold, parked like a long poll, until a commit or the end */
    if (!qn_waiter_parked(&p->waiter)) {
        p->waiter.partition = p->args.partition && *p->args.partition ? p->args.partition : NULL;
        p->waiter.wake = pop_wake;
        p->waiter.ud = p;
        if (qn_waiters_park(p->app->waiters, &p->waiter, p->args.queue, p->args.group) != QN_OK) {
            p->gated = true; /* no room to wait: answer with what there is */
            pop_issue(p);
            return;
        }
    }
    if (p->rewake) {
        pop_issue(p);
        return;
    }
    int64_t at = now + p->app->cfg->wake_recheck_ms;
    if (at > p->hold_until_ms)
        at = p->hold_until_ms;
    struct timeval tv = {(time_t)((at - now) / 1000), (suseconds_t)(((at - now) % 1000) * 1000)};
    evtimer_add(p->timer, &tv);
}

static void pop_issue(struct pop_rpc *p)
{
    struct qn_app *app = p->app;
    if (p->waiting && !qn_waiter_parked(&p->waiter)) {
        int rc = qn_waiters_park(app->waiters, &p->waiter, p->args.queue, p->args.group);
        if (rc != QN_OK) {
            qn_call *call = p->call;
            qn_call_set_data(call, NULL);
            qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                           "too many pops are waiting on this broker (QUEEN_MAX_PARKED_POPS)");
            pop_free(p);
            return;
        }
    }
    p->rewake = false;
    if (!p->gated && p->args.queue != NULL && gate_cached(p->args.queue) != 0) {
        /* the queue may hold under-full pops: ask before claiming anything */
        struct qn_call_opts gopts = {qn_call_deadline_ms(p->call), NULL};
        p->sreq_is_gate = true;
        int grc = qn_store_pop_gate(app->store, p->args.queue, p->args.partition, p->args.group,
                                    &gopts, pop_gate_done, p, &p->sreq);
        if (grc == QN_OK)
            return;
        p->sreq = NULL;
        p->sreq_is_gate = false;
        p->gated = true; /* could not ask: pop as if the option were off */
    }
    p->sreq_is_gate = false;
    /* No database deadline: a pop abandoned at the deadline could still commit
     * its lease unseen. The transport ends the call at the deadline instead and
     * qn_svc_pop_cancel waits for this pop's answer. */
    int rc = qn_store_pop(app->store, &p->args, NULL, pop_done, p, &p->sreq);
    if (rc != QN_OK) {
        qn_call *call = p->call;
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        p->sreq = NULL;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, &st);
        pop_free(p);
    }
}

void qn_svc_pop(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app();
    Queen__V1__PopRequest *req = (Queen__V1__PopRequest *)msg;
    char why[300];
    app->rpcs++;
    struct pop_rpc *p = calloc(1, sizeof *p);
    if (p == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    p->app = app;
    p->call = call;
    p->req = req;
    uint8_t wid[16];
    qn_app_new_id(app, wid);
    qn_uuid_format(wid, p->worker);
    struct pop_params pp = {req->queue,      req->partition,     req->namespace_,
                            req->task,       req->consumer_group, req->batch,
                            req->max_partitions, req->lease_seconds, req->auto_ack,
                            req->subscription_mode, req->subscription_from_us};
    if (app->shutting_down) {
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, "the broker is shutting down");
        pop_free(p);
        return;
    }
    if (!pop_prepare(app->cfg, &pp, &p->args, p->worker, why, sizeof why)) {
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        pop_free(p);
        return;
    }
    if (req->wait_ms > (uint32_t)app->cfg->max_pop_wait_ms) {
        snprintf(why, sizeof why, "wait_ms %u is over the limit of %lld", req->wait_ms,
                 (long long)app->cfg->max_pop_wait_ms);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        pop_free(p);
        return;
    }
    p->timer = evtimer_new(app->base, pop_timer_cb, p);
    if (p->timer == NULL) {
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        pop_free(p);
        return;
    }
    if (req->wait_ms > 0) {
        int64_t now = qn_store_now_ms();
        p->wait_until_ms = now + req->wait_ms;
        int64_t dl = qn_call_deadline_ms(call);
        /* answer empty a little before the client's deadline rather than fail it */
        if (dl > 0 && dl - 20 < p->wait_until_ms)
            p->wait_until_ms = dl - 20 > now ? dl - 20 : now;
        p->waiting = p->wait_until_ms > now;
        p->waiter.partition = p->args.partition && *p->args.partition ? p->args.partition : NULL;
        p->waiter.wake = pop_wake;
        p->waiter.ud = p;
    }
    p->started_ms = qn_store_now_ms();
    qn_call_set_data(call, p);
    pop_issue(p);
}

void qn_svc_pop_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct pop_rpc *p = qn_call_data(call);
    if (p == NULL)
        return;
    if (p->sreq != NULL && !p->sreq_is_gate) {
        /* A pop in flight may lease rows nobody will receive; they would only
         * redeliver after the lease expired. Cancelling it could race its commit,
         * so it runs to its end and pop_done releases what it leased. */
        p->call = NULL;
        p->waiting = false;
        qn_waiters_unpark(p->app->waiters, &p->waiter);
        if (p->timer)
            evtimer_del(p->timer);
        return;
    }
    pop_free(p);
}

/* ---------------------------------------------------------------- Consume */

enum consume_state { CS_OPEN = 0, CS_SUBSCRIBED, CS_ENDING };

struct consume_rpc;

/* An in-band ack or renewal waiting for the database. */
struct consume_op {
    struct consume_rpc *c;
    struct consume_op *prev, *next;
    uint64_t request_id;
    struct qn_ack_op *ack;        /* ack */
    qn_store_req *sreq;           /* renew */
    Queen__V1__ConsumeRequest *req; /* owned */
};

struct consume_rpc {
    struct qn_app *app;
    qn_call *call;
    enum consume_state state;
    Queen__V1__ConsumeRequest *sub;  /* owned: the subscribe request (args borrow it) */
    struct qn_pop_args args;
    char worker[QN_UUID_STR_LEN];    /* one lease id for the whole stream */
    uint64_t credits;
    qn_store_req *pop_req;
    struct qn_waiter waiter;
    bool rewake;
    bool half_closed;
    struct event *timer;
    struct consume_op *ops;          /* in-flight acks and renewals */
    bool counted;                    /* counted in open streams */
    bool ended;                      /* call gone; waiting for pop_req to answer */
};

static void consume_pump(struct consume_rpc *c);

/* The last step of ending a stream: release its leases, free it. */
static void consume_release_free(struct consume_rpc *c)
{
    if (c->state != CS_OPEN && !c->args.auto_ack)
        release_worker(c->app, c->worker);
    if (c->sub)
        protobuf_c_message_free_unpacked(&c->sub->base, NULL);
    free(c);
}

static void consume_free(struct consume_rpc *c)
{
    struct qn_app *app = c->app;
    while (c->ops) {
        struct consume_op *op = c->ops;
        c->ops = op->next;
        qn_ack_cancel(op->ack);
        qn_store_cancel(op->sreq);
        protobuf_c_message_free_unpacked(&op->req->base, NULL);
        free(op);
    }
    qn_waiters_unpark(app->waiters, &c->waiter);
    if (c->timer) {
        event_free(c->timer);
        c->timer = NULL;
    }
    if (c->counted) {
        qn_rpc_stream_release(app->rpc);
        c->counted = false;
    }
    c->call = NULL;
    if (c->pop_req != NULL && !c->args.auto_ack) {
        /* The pop in flight may lease a batch nobody will receive. A release sent
         * now could run before that pop commits, so it is sent once the pop has
         * answered (consume_pop_done). */
        c->ended = true;
        return;
    }
    if (c->pop_req != NULL)
        qn_store_cancel(c->pop_req);
    consume_release_free(c);
}

static void consume_end(struct consume_rpc *c, enum qn_grpc_code code, const char *msg)
{
    qn_call *call = c->call;
    qn_call_set_data(call, NULL);
    qn_call_finish(call, code, msg);
    consume_free(c);
}

static void op_unlink(struct consume_rpc *c, struct consume_op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        c->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    protobuf_c_message_free_unpacked(&op->req->base, NULL);
    free(op);
}

/* After the client half-closed, the stream ends once nothing is in flight. */
static bool consume_maybe_finish(struct consume_rpc *c)
{
    if (c->half_closed && c->ops == NULL && c->pop_req == NULL) {
        consume_end(c, QN_GRPC_OK, NULL);
        return true;
    }
    return false;
}

static void consume_ack_done(void *ud, enum qn_grpc_code code, const char *message,
                             const Queen__V1__AckResponse *resp)
{
    struct consume_op *op = ud;
    struct consume_rpc *c = op->c;
    op->ack = NULL;
    if (code != QN_GRPC_OK) {
        op_unlink(c, op);
        consume_end(c, code, message);
        return;
    }
    Queen__V1__ConsumeResponse cr = QUEEN__V1__CONSUME_RESPONSE__INIT;
    cr.request_id = op->request_id;
    cr.kind_case = QUEEN__V1__CONSUME_RESPONSE__KIND_ACK;
    cr.ack = (Queen__V1__AckResponse *)resp;
    int rc = qn_call_send(c->call, &cr.base);
    op_unlink(c, op);
    if (rc != QN_OK) {
        consume_end(c, QN_GRPC_INTERNAL, "cannot send the ack response");
        return;
    }
    if (!consume_maybe_finish(c))
        consume_pump(c);
}

static void consume_renew_done(void *ud, const struct qn_store_status *st, int32_t renewed,
                               int64_t expires_at_us)
{
    struct consume_op *op = ud;
    struct consume_rpc *c = op->c;
    op->sreq = NULL;
    if (st->code != QN_OK) {
        op_unlink(c, op);
        qn_call *call = c->call;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, st);
        consume_free(c);
        return;
    }
    Queen__V1__RenewLeaseResponse rr = QUEEN__V1__RENEW_LEASE_RESPONSE__INIT;
    rr.renewed = renewed > 0;
    rr.partitions = renewed > 0 ? (uint32_t)renewed : 0;
    rr.expires_at_us = renewed > 0 ? expires_at_us : 0;
    Queen__V1__ConsumeResponse cr = QUEEN__V1__CONSUME_RESPONSE__INIT;
    cr.request_id = op->request_id;
    cr.kind_case = QUEEN__V1__CONSUME_RESPONSE__KIND_RENEW;
    cr.renew = &rr;
    int rc = qn_call_send(c->call, &cr.base);
    op_unlink(c, op);
    if (rc != QN_OK) {
        consume_end(c, QN_GRPC_INTERNAL, "cannot send the renew response");
        return;
    }
    consume_maybe_finish(c);
}

static void consume_arm_timer(struct consume_rpc *c)
{
    int64_t ms = c->app->cfg->wake_recheck_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(c->timer, &tv);
}

static void consume_pop_done(void *ud, const struct qn_store_status *st,
                             const struct qn_pop_result *res)
{
    struct consume_rpc *c = ud;
    c->pop_req = NULL;
    if (c->ended) {
        consume_release_free(c);
        return;
    }
    if (st->code != QN_OK) {
        qn_call *call = c->call;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, st);
        consume_free(c);
        return;
    }
    if (res->n > 0) {
        long sent = send_batch(c->app, c->call, &c->args, res, true);
        if (sent < 0) {
            consume_end(c, code_for_batch_error((int)sent), qn_strerror((int)sent));
            return;
        }
        c->credits--;
        if (!consume_maybe_finish(c))
            consume_pump(c);
        return;
    }
    if (consume_maybe_finish(c))
        return;
    if (c->rewake) {
        c->rewake = false;
        consume_pump(c);
        return;
    }
    consume_arm_timer(c);
}

static void consume_drained(qn_call *call)
{
    struct consume_rpc *c = qn_call_data(call);
    if (c != NULL)
        consume_pump(c);
}

/* Pops the next batch when the client has credit, nothing is in flight and the
 * previous batches were read (outbound flow control). */
static void consume_pump(struct consume_rpc *c)
{
    if (c->state != CS_SUBSCRIBED || c->pop_req != NULL || c->credits == 0 || c->half_closed ||
        c->app->shutting_down)
        return;
    if (qn_call_pending_bytes(c->call) > 0) {
        qn_call_on_drain(c->call, consume_drained);
        return;
    }
    if (!qn_waiter_parked(&c->waiter)) {
        int rc = qn_waiters_park(c->app->waiters, &c->waiter, c->args.queue, c->args.group);
        if (rc != QN_OK) {
            consume_end(c, QN_GRPC_RESOURCE_EXHAUSTED,
                        "too many consumers are waiting on this broker (QUEEN_MAX_PARKED_POPS)");
            return;
        }
    }
    evtimer_del(c->timer);
    c->rewake = false;
    int rc = qn_store_pop(c->app->store, &c->args, NULL, consume_pop_done, c, &c->pop_req);
    if (rc != QN_OK) {
        c->pop_req = NULL;
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        qn_call *call = c->call;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, &st);
        consume_free(c);
    }
}

static void consume_wake(struct qn_waiter *w)
{
    struct consume_rpc *c = w->ud;
    if (c->pop_req != NULL) {
        c->rewake = true;
        return;
    }
    consume_pump(c);
}

static void consume_timer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    consume_pump(ud);
}

static void consume_subscribe(struct consume_rpc *c, Queen__V1__ConsumeRequest *req)
{
    char why[300];
    Queen__V1__ConsumeSubscribe *s = req->subscribe;
    struct pop_params pp = {s->queue,          s->partition,      s->namespace_,
                            s->task,           s->consumer_group, s->batch,
                            s->max_partitions, s->lease_seconds,  s->auto_ack,
                            s->subscription_mode, s->subscription_from_us};
    c->sub = req;
    if (!pop_prepare(c->app->cfg, &pp, &c->args, c->worker, why, sizeof why)) {
        consume_end(c, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    c->state = CS_SUBSCRIBED;
    c->credits = s->credits ? s->credits : 1;
    c->waiter.partition = c->args.partition && *c->args.partition ? c->args.partition : NULL;
    c->waiter.wake = consume_wake;
    c->waiter.ud = c;
    consume_pump(c);
}

void qn_svc_consume(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app();
    Queen__V1__ConsumeRequest *req = (Queen__V1__ConsumeRequest *)msg;
    struct consume_rpc *c = qn_call_data(call);
    if (c == NULL) {
        app->rpcs++;
        if (app->shutting_down) {
            protobuf_c_message_free_unpacked(msg, NULL);
            qn_call_finish(call, QN_GRPC_UNAVAILABLE, "the broker is shutting down");
            return;
        }
        if (qn_rpc_stream_acquire(app->rpc) != QN_OK) {
            protobuf_c_message_free_unpacked(msg, NULL);
            qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                           "too many open streams on this broker (QUEEN_MAX_STREAMS)");
            return;
        }
        c = calloc(1, sizeof *c);
        if (c == NULL || (c->timer = evtimer_new(app->base, consume_timer_cb, c)) == NULL) {
            free(c);
            qn_rpc_stream_release(app->rpc);
            protobuf_c_message_free_unpacked(msg, NULL);
            qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        c->app = app;
        c->call = call;
        c->counted = true;
        uint8_t wid[16];
        qn_app_new_id(app, wid);
        qn_uuid_format(wid, c->worker);
        qn_call_set_data(call, c);
    }
    switch (req->kind_case) {
    case QUEEN__V1__CONSUME_REQUEST__KIND_SUBSCRIBE:
        if (c->state != CS_OPEN) {
            protobuf_c_message_free_unpacked(msg, NULL);
            consume_end(c, QN_GRPC_INVALID_ARGUMENT, "subscribe may only be sent once");
            return;
        }
        consume_subscribe(c, req);
        return;
    case QUEEN__V1__CONSUME_REQUEST__KIND_CREDITS:
        if (c->state != CS_SUBSCRIBED) {
            protobuf_c_message_free_unpacked(msg, NULL);
            consume_end(c, QN_GRPC_INVALID_ARGUMENT, "the first request must subscribe");
            return;
        }
        c->credits += req->credits;
        if (c->credits > 1000000)
            c->credits = 1000000;
        protobuf_c_message_free_unpacked(msg, NULL);
        consume_pump(c);
        return;
    case QUEEN__V1__CONSUME_REQUEST__KIND_ACK:
    case QUEEN__V1__CONSUME_REQUEST__KIND_RENEW: {
        if (c->state != CS_SUBSCRIBED) {
            protobuf_c_message_free_unpacked(msg, NULL);
            consume_end(c, QN_GRPC_INVALID_ARGUMENT, "the first request must subscribe");
            return;
        }
        struct consume_op *op = calloc(1, sizeof *op);
        if (op == NULL) {
            protobuf_c_message_free_unpacked(msg, NULL);
            consume_end(c, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        op->c = c;
        op->request_id = req->request_id;
        op->req = req;
        op->next = c->ops;
        if (c->ops)
            c->ops->prev = op;
        c->ops = op;
        int rc;
        if (req->kind_case == QUEEN__V1__CONSUME_REQUEST__KIND_ACK) {
            char why[300];
            if (!qn_ack_request_ok(app->cfg, req->ack, why, sizeof why)) {
                /* as the Ack RPC answers it; an item naming no message must
                 * never reach the engine (it would read as offset 0) */
                op_unlink(c, op);
                consume_end(c, QN_GRPC_INVALID_ARGUMENT, why);
                return;
            }
            rc = qn_ack_run(app, req->ack, consume_ack_done, op, 0, &op->ack);
        } else {
            const char *lease = req->renew->lease_id && *req->renew->lease_id
                                    ? req->renew->lease_id
                                    : c->worker;
            uint32_t secs = req->renew->seconds ? req->renew->seconds : 60;
            if (secs > 86400) {
                op_unlink(c, op);
                consume_end(c, QN_GRPC_INVALID_ARGUMENT, "renew.seconds is over 86400");
                return;
            }
            rc = qn_store_renew_lease(app->store, lease, (int32_t)secs, NULL, consume_renew_done,
                                      op, &op->sreq);
        }
        if (rc != QN_OK) {
            op_unlink(c, op);
            consume_end(c, qn_grpc_from_store(rc), qn_strerror(rc));
        }
        return;
    }
    default:
        protobuf_c_message_free_unpacked(msg, NULL);
        consume_end(c, QN_GRPC_INVALID_ARGUMENT, "a consume request must carry one of subscribe, credits, ack, renew");
        return;
    }
}

void qn_svc_consume_half_close(qn_call *call)
{
    struct consume_rpc *c = qn_call_data(call);
    if (c == NULL) {
        qn_call_finish(call, QN_GRPC_OK, NULL);
        return;
    }
    c->half_closed = true;
    qn_waiters_unpark(c->app->waiters, &c->waiter);
    evtimer_del(c->timer);
    consume_maybe_finish(c);
}

void qn_svc_consume_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct consume_rpc *c = qn_call_data(call);
    if (c != NULL)
        consume_free(c); /* releases the stream's leases */
}
