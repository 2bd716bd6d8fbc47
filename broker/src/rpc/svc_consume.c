/*
 * rpc/svc_consume.c - QueueService.Consume: one bidirectional stream that pops
 * while the client holds credits, with acks and lease renewals in-band.
 *
 * Does: subscribe (the first request: the same pop parameters as Pop, checked
 * the same way, the consume grant included, in the caller's tenant); pop the
 * next batch whenever the stream has credits, nothing is in flight, the client
 * has read what was sent (qn_call_pending_bytes() = 0) and the outbound budget
 * has room (qn_pop_reserve; else it waits for room: qn_call_on_budget);
 * park on the waiters while its queue is empty (woken by commits, re-checked
 * every QUEEN_WAKE_RECHECK_MS; a wake-up by this broker's commit leases in the
 * partition it named, qn_pop_take_hint); apply in-band acks (ack_apply.h) and renewals and
 * answer each with its request_id; release the stream's leases when it ends.
 * Does not: hold a database connection while idle; produce a batch while the
 * previous ones are unread (outbound flow control); allow a second subscribe.
 *
 * Lifecycle (enum consume_state; at most one pop in flight, c->pop_req):
 *
 *   first message --> OPEN --subscribe valid--> STREAMING
 *   OPEN --anything else, or an invalid subscribe--> (finished with the error)
 *   STREAMING --client half-closes--> CLOSING --nothing in flight--> (finished OK)
 *   STREAMING|CLOSING --error, or the call ends, with a pop in flight and
 *                        leases to release--> ORPHANED
 *   ORPHANED --the pop answers--> (leases released; freed)
 *   STREAMING|CLOSING --error, or the call ends, otherwise--> (leases released;
 *                        freed)
 *
 * Invariants:
 *   1. One lease id (c->worker) for the whole stream; every batch is leased
 *      under it and it is released once, at the end (not for a stream that
 *      never subscribed, nor for auto_ack).
 *   2. credits counts batches the client still wants, at most 1000000.
 *   3. A pop in flight is never cancelled when it may lease (see ORPHANED): a
 *      release sent before its commit would miss what it leased.
 *   4. The stream holds one slot of QUEEN_MAX_STREAMS while c exists with a call.
 *   5. After a batch from an any-partition scan the stream pops again at once
 *      (more partitions may hold data) until a scan comes back empty, hinted
 *      pops in between included (c->scanning: a hint that arrives mid-chain
 *      does not end it, which left the rest to the re-check); after a
 *      batch from a hinted partition (qn_pop_take_hint) it waits parked for the
 *      next hint, wake-up or re-check: data this broker commits or releases
 *      later is hinted to a parked consumer (waiters.h, engine/cfusion.h), and
 *      what was there before was found by the scans. When a commit since the
 *      hint reached no consumer of this loop (qn_waiters_unfed: this stream
 *      was busy, and no other was parked), it looks at every partition once
 *      instead, after a hinted batch as after a hinted pop that came back
 *      empty (waiting after the batch left such data to the re-check).
 *   6. A stream parked waiting (re-check timer armed, no hint) pops only when
 *      woken, hinted, re-checked, or given credit after having none: an
 *      answered in-band ack or more credit on top of some says nothing about
 *      data (a lease an ack releases is hinted like a commit), and popping on
 *      them made an any-partition scan per batch.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "engine/cfusion.h"
#include "engine/waiters.h"
#include "log.h"
#include "queen/error.h"
#include "rpc/ack_apply.h"
#include "rpc/authz.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/svc_batch.h"
#include "rpc/validate.h"
#include "transport/server.h"
#include "timer.h"

enum consume_state {
    CS_OPEN,      /* made by the first message; not subscribed yet */
    CS_STREAMING, /* subscribed: pops while it has credits */
    CS_CLOSING,   /* the client half-closed: in-flight work finishes, then OK */
    CS_ORPHANED,  /* the call is gone; the pop in flight decides the release */
};

struct consume_rpc;

/* An in-band ack or renewal waiting for the database. */
struct consume_op {
    struct consume_rpc *c;
    struct consume_op *prev, *next;
    uint64_t request_id;
    struct qn_ack_op *ack;          /* ack */
    struct qn_renew_op *renew;      /* renew */
    Queen__V1__ConsumeRequest *req; /* owned */
};

struct consume_rpc {
    enum consume_state state;
    struct qn_app *app;
    qn_call *call;                  /* NULL once the call is gone (ORPHANED) */
    Queen__V1__ConsumeRequest *sub; /* owned: the subscribe request (args borrow it) */
    struct qn_pop_args args;
    char worker[QN_UUID_STR_LEN]; /* one lease id for the whole stream */
    uint64_t credits;
    struct qn_cfusion_pop *pop_req; /* engine/cfusion.h: may go out in a bundle */
    bool doubt;                     /* a pop's result was lost: release late too */
    struct qn_waiter waiter;
    bool rewake;                 /* a commit was seen while pop_req was in flight */
    bool hinted;                 /* pop_req leases in a hinted partition only */
    bool scanning;               /* a scan found data, and none has come back empty since */
    uint64_t unfed;              /* qn_waiters_unfed when it last looked everywhere */
    struct event *timer;         /* re-check while idle */
    struct consume_op *ops;      /* in-flight acks and renewals */
    bool counted;                /* holds a stream slot (qn_rpc_stream_acquire) */
    uint8_t tenant[16];          /* the caller's (a copy: an orphaned pop outlives the call) */
    struct qn_authz_names names; /* discovery: the queues the caller may consume */
    bool filtered;               /* names holds a filter */
};

static void consume_pump(struct consume_rpc *c);

/* Something other than news of data happened (an ack answered, more credit on
 * top of some): pops unless the stream is parked waiting for news with its
 * re-check armed (invariant 6), which a wake-up, a hint or the re-check ends. */
static void consume_nudge(struct consume_rpc *c)
{
    if (qn_waiter_parked(&c->waiter) && !c->waiter.hinted && c->pop_req == NULL &&
        evtimer_pending(c->timer, NULL))
        return;
    consume_pump(c);
}

/* The last step of ending a stream: release its leases, free it. */
static void consume_release_free(struct consume_rpc *c)
{
    if (c->state != CS_OPEN && !c->args.auto_ack) {
        if (c->doubt) /* a lost pop may commit after the first release */
            qn_pop_release_worker_doubt(c->app, c->tenant, c->worker);
        else
            qn_pop_release_worker(c->app, c->tenant, c->worker);
    }
    if (c->sub)
        protobuf_c_message_free_unpacked(&c->sub->base, NULL);
    qn_authz_names_free(&c->names);
    free(c);
}

static void consume_free(struct consume_rpc *c)
{
    struct qn_app *app = c->app;
    while (c->ops) {
        struct consume_op *op = c->ops;
        c->ops = op->next;
        qn_ack_cancel(op->ack);
        qn_renew_cancel(op->renew);
        protobuf_c_message_free_unpacked(&op->req->base, NULL);
        free(op);
    }
    qn_pop_pass_hint(app, c->tenant, &c->waiter, &c->args);
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
         * answered (consume_pop_done; invariant 3). */
        assert(c->state == CS_STREAMING || c->state == CS_CLOSING);
        c->state = CS_ORPHANED;
        return;
    }
    if (c->pop_req != NULL)
        qn_cfusion_pop_cancel(c->pop_req);
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
    if (c->state == CS_CLOSING && c->ops == NULL && c->pop_req == NULL) {
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
        consume_nudge(c);
}

static void consume_renew_done(void *ud, enum qn_grpc_code code, const char *message,
                               int32_t renewed, int64_t expires_at_us)
{
    struct consume_op *op = ud;
    struct consume_rpc *c = op->c;
    op->renew = NULL;
    if (code != QN_GRPC_OK) {
        op_unlink(c, op);
        consume_end(c, code, message);
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
    qn_timer_after(c->timer, ms);
}

static void consume_pop_done(void *ud, const struct qn_store_status *st,
                             const struct qn_pop_result *res)
{
    struct consume_rpc *c = ud;
    assert(c->state == CS_STREAMING || c->state == CS_CLOSING || c->state == CS_ORPHANED);
    c->pop_req = NULL;
    c->doubt = c->doubt || st->code == QN_EINDOUBT;
    if (c->state == CS_ORPHANED) {
        /* what it leased is learned as held, so the release hints it */
        if (st->code == QN_OK && res->n > 0 && !c->args.auto_ack)
            qn_pop_learn(c->app, c->tenant, &c->args, res, false);
        consume_release_free(c);
        return;
    }
    if (st->code == QN_EINDOUBT && !c->args.auto_ack) {
        /* The lease may have committed: ending the stream releases every lease
         * of its worker, retried until the database answers. */
        consume_end(c, QN_GRPC_UNAVAILABLE,
                    "the database connection was lost during a pop; the stream's leases are "
                    "released (that batch was not delivered): subscribe again");
        return;
    }
    if (st->code != QN_OK) {
        qn_call *call = c->call;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, st);
        consume_free(c);
        return;
    }
    if (!c->hinted) {
        c->scanning = res->n > 0; /* invariant 5: the chain ends with an empty scan */
        if (c->args.partition == NULL || c->args.partition[0] == '\0')
            /* what the group's new Pops may go by (waiters.h) */
            qn_waiters_scanned(c->app->waiters, c->tenant, c->args.queue, c->args.group, c->unfed,
                               res->n == 0, qn_store_now_ms());
    }
    if (res->n > 0) {
        long sent =
            qn_pop_send_batch(c->app, c->call, &c->args, res,
                              QN_BATCH_WRAP | (c->sub->subscribe->raw_segments ? QN_BATCH_RAW : 0));
        qn_call_unreserve(c->call); /* the batch counts as queued bytes now */
        if (sent < 0) {
            consume_end(c, qn_pop_batch_error_code((int)sent), qn_strerror((int)sent));
            return;
        }
        c->credits--;
        if (consume_maybe_finish(c))
            return;
        if (c->credits == 0)
            /* no credit: a hint it holds goes to a consumer that can use it */
            qn_pop_pass_hint(c->app, c->tenant, &c->waiter, &c->args);
        if (c->hinted && !c->rewake && !c->waiter.hinted && !c->scanning &&
            qn_waiters_unfed(c->app->waiters, c->tenant, c->args.queue) == c->unfed) {
            /* invariant 5: a hinted batch says nothing about other partitions,
             * whose data has hints of its own; wait for one (or the re-check) */
            consume_arm_timer(c);
            return;
        }
        consume_pump(c);
        return;
    }
    qn_call_unreserve(c->call); /* an idle stream holds no budget */
    if (consume_maybe_finish(c))
        return;
    if (c->rewake || (c->hinted && c->scanning) ||
        (c->hinted && qn_waiters_unfed(c->app->waiters, c->tenant, c->args.queue) != c->unfed)) {
        /* a hinted partition found empty was taken by another consumer; when a
         * commit since the hint told no consumer of this loop (waiters.h), its
         * data may wait unseen: look at every partition once before waiting
         * (consume_pump pops unhinted unless a new hint came) */
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

static void consume_budget(qn_call *call)
{
    struct consume_rpc *c = qn_call_data(call);
    if (c != NULL)
        consume_pump(c);
}

/* Pops the next batch when the client has credit, nothing is in flight and the
 * previous batches were read (outbound flow control). */
static void consume_pump(struct consume_rpc *c)
{
    if (c->state != CS_STREAMING || c->pop_req != NULL || c->credits == 0 || c->app->shutting_down)
        return;
    if (qn_call_pending_bytes(c->call) > 0) {
        if (qn_call_on_drain(c->call, consume_drained) != QN_OK)
            consume_end(c, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    if (!qn_waiter_parked(&c->waiter)) {
        int rc =
            qn_waiters_park(c->app->waiters, &c->waiter, c->tenant, c->args.queue, c->args.group);
        if (rc != QN_OK) {
            consume_end(c, QN_GRPC_RESOURCE_EXHAUSTED,
                        "too many consumers are waiting on this broker (QUEEN_MAX_PARKED_POPS)");
            return;
        }
    }
    size_t min;
    char why[300];
    int rc = qn_pop_reserve(c->call, c->app->cfg, &c->args, &min, why, sizeof why);
    if (rc == QN_EBUSY || rc == QN_ELIMIT) {
        /* clients (this one or others) hold the budget: resume as they read */
        if (qn_call_on_budget(c->call, min, consume_budget) != QN_OK)
            consume_end(c, QN_GRPC_INTERNAL, "the call ended");
        return;
    }
    if (rc != QN_OK) {
        consume_end(c, QN_GRPC_INTERNAL, "the call ended");
        return;
    }
    evtimer_del(c->timer);
    c->rewake = false;
    struct qn_call_opts popts = {0, c->tenant, c->filtered ? &c->names.f : NULL};
    struct qn_pop_args a = c->args;
    c->hinted = qn_pop_take_hint(&c->waiter, &a); /* a commit named its partition */
    if (!c->hinted && c->args.queue != NULL)      /* a scan: sees every commit told nobody so far */
        c->unfed = qn_waiters_unfed(c->app->waiters, c->tenant, c->args.queue);
    rc = qn_cfusion_pop(c->app->cfusion, c->app->store, &a, &popts,
                        c->sub->subscribe->raw_segments ? 0 : QN_CFUSION_DECODE, consume_pop_done,
                        c, &c->pop_req);
    if (rc != QN_OK) {
        c->pop_req = NULL;
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        qn_call *call = c->call;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, &st);
        consume_free(c);
    }
}

/* qn_waiter.ready: a wake-up now would pop at once (credit, nothing in flight,
 * the previous batches read). */
static bool consume_ready(const struct qn_waiter *w)
{
    const struct consume_rpc *c = w->ud;
    return c->state == CS_STREAMING && c->pop_req == NULL && c->credits > 0 &&
           !c->app->shutting_down && qn_call_pending_bytes(c->call) == 0;
}

static void consume_wake(struct qn_waiter *w)
{
    struct consume_rpc *c = w->ud;
    assert(c->state == CS_STREAMING);
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
    struct qn_pop_params pp = {s->queue,
                               s->partition,
                               s->namespace_,
                               s->task,
                               s->consumer_group,
                               s->batch,
                               s->max_partitions,
                               s->lease_seconds,
                               s->auto_ack,
                               s->subscription_mode,
                               s->subscription_from_us};
    assert(c->state == CS_OPEN);
    c->sub = req;
    if (!qn_pop_prepare(c->app->cfg, &pp, &c->args, c->worker, why, sizeof why)) {
        consume_end(c, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    enum qn_grpc_code denied =
        qn_pop_authorize(c->call, &c->args, &c->names, &c->filtered, why, sizeof why);
    if (denied != QN_GRPC_OK) {
        consume_end(c, denied, why);
        return;
    }
    c->state = CS_STREAMING;
    c->credits = s->credits ? s->credits : 1;
    c->waiter.partition = c->args.partition && *c->args.partition ? c->args.partition : NULL;
    c->waiter.wake = consume_wake;
    c->waiter.ready = consume_ready;
    c->waiter.ud = c;
    consume_pump(c);
}

void qn_svc_consume(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__ConsumeRequest *req = (Queen__V1__ConsumeRequest *)msg;
    struct consume_rpc *c = qn_call_data(call);
    if (c == NULL) {
        app->rpcs++;
        const char *refusal = qn_svc_refusal(app);
        if (refusal != NULL) {
            protobuf_c_message_free_unpacked(msg, NULL);
            qn_call_finish(call, QN_GRPC_UNAVAILABLE, refusal);
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
        c->state = CS_OPEN;
        c->app = app;
        c->call = call;
        c->counted = true;
        memcpy(c->tenant, qn_authz_tenant(call), 16);
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
        if (c->state != CS_STREAMING) {
            protobuf_c_message_free_unpacked(msg, NULL);
            consume_end(c, QN_GRPC_INVALID_ARGUMENT, "the first request must subscribe");
            return;
        }
        bool had = c->credits > 0;
        c->credits += req->credits;
        if (c->credits > 1000000)
            c->credits = 1000000;
        protobuf_c_message_free_unpacked(msg, NULL);
        if (had)
            consume_nudge(c);
        else
            consume_pump(c);
        return;
    case QUEEN__V1__CONSUME_REQUEST__KIND_ACK:
    case QUEEN__V1__CONSUME_REQUEST__KIND_RENEW: {
        if (c->state != CS_STREAMING) {
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
            rc = qn_ack_run(app, call, req->ack, consume_ack_done, op, 0, &op->ack);
        } else {
            const char *lease =
                req->renew->lease_id && *req->renew->lease_id ? req->renew->lease_id : c->worker;
            uint32_t secs = req->renew->seconds ? req->renew->seconds : 60;
            char why[300];
            if (qn_lease_problem(req->renew->lease_id, "renew.lease_id", true, why, sizeof why)) {
                op_unlink(c, op);
                consume_end(c, QN_GRPC_INVALID_ARGUMENT, why);
                return;
            }
            if (secs > 86400) {
                op_unlink(c, op);
                consume_end(c, QN_GRPC_INVALID_ARGUMENT, "renew.seconds is over 86400");
                return;
            }
            rc = qn_renew_run(app, call, lease, (int32_t)secs, 0, consume_renew_done, op,
                              &op->renew);
        }
        if (rc != QN_OK) {
            op_unlink(c, op);
            consume_end(c, qn_grpc_from_store(rc), qn_strerror(rc));
        }
        return;
    }
    default:
        protobuf_c_message_free_unpacked(msg, NULL);
        consume_end(c, QN_GRPC_INVALID_ARGUMENT,
                    "a consume request must carry one of subscribe, credits, ack, renew");
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
    assert(c->state == CS_OPEN || c->state == CS_STREAMING);
    c->state = CS_CLOSING;
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
