/*
 * rpc/svc_pop.c - QueueService.Pop: lease the next batch, or wait for one.
 *
 * Does: validate; check the consume grant (a named queue; for discovery the
 * grants become a name filter that pop_discover_v1 applies before it registers
 * or claims anything, so no queue outside the grant is ever claimed); lease the
 * next batch through pop_v1 (or pop_discover_v1) in the caller's tenant; for
 * a queue with min_pop_wait_time ask pop_gate_v1 first and hold an under-full
 * pop; park an empty pop with wait_ms on the waiters until a commit to its
 * queue, its wait's end or its re-check timer; answer with the batch (built by
 * svc_batch.c) or empty.
 * Does not: hold a database connection while parked or held; give up a leased
 * batch silently (a pop whose call ended while pop_v1 ran releases what it got);
 * read for a client over its outbound budget (each pop_v1 is sized to what
 * qn_pop_reserve granted; none granted because the client does not read:
 * RESOURCE_EXHAUSTED; because other reads in flight reserved it: BUDGET).
 *
 * Lifecycle (enum pop_state; the one storage call in flight is p->sreq, the gate,
 * or p->lreq, the lease: a pop through consume fusion, engine/cfusion.h, which
 * may go out in a bundle with other consumers' pops):
 *
 *   start --queue may hold pops (gate cache)--> GATING
 *   start --wait_ms, and its group's last scan on this loop came back empty
 *           within QUEEN_POP_SCAN_REUSE_MS with no commit or release left
 *           untold since (waiters.h)--> WAITING (no scan: wait_unscanned)
 *   start --otherwise--> POPPING (by a spare hint when its loop kept one for
 *           the group, waiters.h: a partition whose news reached no consumer)
 *   GATING --enough pending, hold over, or no room to park--> POPPING
 *   GATING --under-full--> HELD --wake / re-check timer--> GATING (asks again)
 *   POPPING --rows--> (answered with the batch)
 *   POPPING --empty, by a spare hint--> POPPING (any: a spare is a guess)
 *   POPPING --empty, no wait left--> (answered empty)
 *   POPPING --empty, a commit was seen meanwhile (rewake), or the hinted
 *            partition was empty (taken by another consumer) and a commit
 *            since reached no consumer of this loop--> POPPING (any)
 *   POPPING --empty, wait left--> WAITING --wake / re-check timer--> POPPING
 *                                 (or GATING when the gate entry went stale)
 *   WAITING --timer after the wait's end, gated--> (answered empty)
 *   POPPING --result lost (QN_EINDOUBT)--> RELEASING (its worker's leases are
 *            released, in the background until the database answers)
 *   RELEASING --first release attempt answered--> (answered UNAVAILABLE; freed)
 *   RELEASING --call ended--> (freed when the release attempt answers)
 *   POPPING --auto-ack result lost--> (answered UNKNOWN: the cursor may have moved)
 *   POPPING --call ended (deadline, reset, shutdown)--> ORPHANED
 *   ORPHANED --pop_v1 answers, or its result is lost--> (what it may have leased
 *            is released; freed)
 *   (before POPPING) --other reads hold the outbound budget--> BUDGET
 *   BUDGET --budget freed, or its 50 ms re-check--> POPPING (through the same
 *          checks; RESOURCE_EXHAUSTED once unread responses are what blocks)
 *   GATING|HELD|WAITING|BUDGET --call ended--> (freed; a gate call is cancelled)
 *   any live state --storage error / no room to park--> (answered; freed)
 *
 * Invariants:
 *   1. p->sreq != NULL exactly in GATING; p->lreq != NULL exactly in POPPING
 *      and ORPHANED.
 *   5. A pop whose lease may have committed is never answered before a release
 *      of that lease was attempted, and the release goes on until the database
 *      answers it: the group is not blocked until the lease expires.
 *   2. A pop with wait_ms > 0 is parked from before its first database call
 *      (p->waiting), so a commit that lands while a call is in flight is
 *      remembered (rewake) and the empty answer is followed at once by a second
 *      pop instead of a missed wake-up.
 *   3. A pop_v1 in flight is never cancelled: abandoning it could race its
 *      commit and leave a batch leased to nobody until the lease expires.
 *   4. After the call is answered or gone, the handler never touches it again
 *      (the call's data is cleared first).
 *   6. A pop never answers empty without a scan of its own: one that waited
 *      unscanned scans at its re-check or at the end of its wait.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "engine/cfusion.h"
#include "engine/notifier.h"
#include "engine/pop_gate.h"
#include "engine/waiters.h"
#include "log.h"
#include "queen/error.h"
#include "rpc/authz.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/svc_batch.h"
#include "timer.h"

#define BUDGET_RECHECK_MS 50 /* a pop waiting for budget looks again this often */

enum pop_state {
    POP_NEW,       /* validated, nothing asked yet */
    POP_GATING,    /* pop_gate_v1 in flight */
    POP_HELD,      /* the gate holds it: parked, timer armed */
    POP_POPPING,   /* pop_v1 in flight */
    POP_WAITING,   /* empty, parked, timer armed */
    POP_BUDGET,    /* waiting for outbound budget other reads reserved */
    POP_ORPHANED,  /* the call is gone; pop_v1 still in flight */
    POP_RELEASING, /* pop_v1's result was lost; its lease is being released */
};

struct pop_rpc {
    enum pop_state state;
    struct qn_app *app;
    qn_call *call;              /* NULL once ORPHANED */
    Queen__V1__PopRequest *req; /* owned; args borrow its strings */
    struct qn_pop_args args;
    char worker[QN_UUID_STR_LEN]; /* the lease id of this pop */
    int64_t wait_until_ms;        /* monotonic; 0 = answer at once */
    qn_store_req *sreq;
    struct qn_cfusion_pop *lreq;
    struct qn_waiter waiter;
    bool waiting;     /* wait_ms > 0: parked from the start (invariant 2) */
    bool rewake;      /* a commit was seen while a call was in flight */
    bool hinted;      /* the call in flight leases in a hinted partition only */
    bool spare_tried; /* it asked the waiters for a spare hint (once, before its first pop) */
    bool spare;       /* the call in flight leases in a spare hint's partition */
    char spare_part[QN_WAITER_HINT_MAX + 1];
    uint64_t unfed;        /* qn_waiters_unfed when it last looked everywhere */
    bool unscanned;        /* it waited without a scan and has not scanned since (invariant 6) */
    uint64_t gate_commits; /* qn_notifier_commits of its queue when the gate was asked */
    struct event *timer;   /* re-check / end of the wait or of the hold */
    /* min_pop_wait_time: an under-full pop is held until enough is pending or
     * hold_until_ms passed (0 = not decided yet) */
    bool gated; /* the gate has let this pop through */
    int64_t started_ms;
    int64_t hold_until_ms;
    /* the connection's database slot, held while a database call is in flight
     * (not while parked); admitted: the first was granted, later ones are too */
    struct qn_conn_slot *slot;
    bool admitted;
    uint8_t tenant[16];          /* the caller's (a copy: it outlives an orphaned call) */
    struct qn_authz_names names; /* discovery: the queues the caller may consume */
    bool filtered;               /* names holds a filter */
};

static void pop_free(struct pop_rpc *p)
{
    if (p->sreq)
        qn_store_cancel(p->sreq);
    qn_cfusion_pop_cancel(p->lreq);
    qn_conn_budget_give(p->slot);
    /* a hint this pop got and will not use goes to another parked consumer */
    qn_pop_pass_hint(p->app, p->tenant, &p->waiter, &p->args);
    qn_waiters_unpark(p->app->waiters, &p->waiter);
    if (p->timer)
        event_free(p->timer);
    if (p->req)
        protobuf_c_message_free_unpacked(&p->req->base, NULL);
    qn_authz_names_free(&p->names);
    free(p);
}

/* Ends the call with code and frees p (invariant 4). */
static void pop_finish(struct pop_rpc *p, enum qn_grpc_code code, const char *msg)
{
    qn_call *call = p->call;
    qn_call_set_data(call, NULL);
    qn_call_finish(call, code, msg);
    pop_free(p);
}

static void pop_store_error(struct pop_rpc *p, const struct qn_store_status *st)
{
    qn_call *call = p->call;
    qn_call_set_data(call, NULL);
    qn_finish_store_error(call, st);
    pop_free(p);
}

/* Debug trace of a pop's steps (QUEEN_LOG_LEVEL=debug), named by the random end of its
 * lease id: e2e tests print these lines when a wake-up was missed. */
static void trace(const struct pop_rpc *p, const char *what)
{
    QN_DEBUG("pop %s %s: queue %s partition %s state %d waiting %d parked %d rewake %d",
             p->worker + 24, what, p->args.queue ? p->args.queue : "",
             p->args.partition ? p->args.partition : "", (int)p->state, p->waiting,
             qn_waiter_parked(&p->waiter), p->rewake);
}

static void pop_answer_empty(struct pop_rpc *p)
{
    Queen__V1__PopResponse pr = QUEEN__V1__POP_RESPONSE__INIT;
    qn_call *call = p->call;
    trace(p, "answers empty");
    qn_call_set_data(call, NULL);
    if (qn_call_send(call, &pr.base) == QN_OK)
        qn_call_finish(call, QN_GRPC_OK, NULL);
    else
        qn_call_finish(call, QN_GRPC_INTERNAL, "cannot send the response");
    pop_free(p);
}

static void arm_at(struct pop_rpc *p, int64_t now, int64_t at)
{
    qn_timer_after(p->timer, at - now);
}

static void pop_issue(struct pop_rpc *p);

/* The pop in flight (or just answered) looks at every partition of its queue. */
static bool is_scan(const struct pop_rpc *p)
{
    return !p->hinted && p->args.queue != NULL && p->args.queue[0] != '\0' &&
           (p->args.partition == NULL || p->args.partition[0] == '\0');
}

static void pop_timer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct pop_rpc *p = ud;
    trace(p, "timer");
    if (p->sreq != NULL || p->lreq != NULL)
        return; /* the call in flight decides */
    if (p->state == POP_BUDGET) {
        pop_issue(p);
        return;
    }
    assert(p->state == POP_HELD || p->state == POP_WAITING);
    if (p->gated && qn_store_now_ms() >= p->wait_until_ms) {
        pop_answer_empty(p);
        return;
    }
    pop_issue(p); /* held by the gate: ask again (it lets the pop through at the end) */
}

/* qn_waiter.ready: a wake-up now would pop at once (not merely be remembered). */
static bool pop_ready(const struct qn_waiter *w)
{
    const struct pop_rpc *p = w->ud;
    return p->sreq == NULL && p->lreq == NULL && (p->state == POP_HELD || p->state == POP_WAITING);
}

static void pop_wake(struct qn_waiter *w)
{
    struct pop_rpc *p = w->ud;
    trace(p, "woken");
    if (p->state == POP_BUDGET)
        return; /* it pops as soon as it has room */
    if (p->sreq != NULL || p->lreq != NULL) {
        assert(p->state == POP_GATING || p->state == POP_POPPING);
        p->rewake = true;
        return;
    }
    assert(p->state == POP_HELD || p->state == POP_WAITING);
    evtimer_del(p->timer);
    if (p->app->shutting_down) {
        pop_answer_empty(p);
        return;
    }
    pop_issue(p);
}

/* The first release attempt of a pop in doubt answered (invariant 5). */
static void pop_released(void *ud, int code)
{
    struct pop_rpc *p = ud;
    assert(p->state == POP_RELEASING);
    if (p->call == NULL) {
        pop_free(p);
        return;
    }
    pop_finish(p, QN_GRPC_UNAVAILABLE,
               code == QN_OK ? "the database connection was lost during the pop; what it may "
                               "have leased was released (nothing delivered): retry"
                             : "the database connection was lost during the pop; nothing was "
                               "delivered and what it may have leased is being released: retry");
}

static void pop_done(void *ud, const struct qn_store_status *st, const struct qn_pop_result *res)
{
    struct pop_rpc *p = ud;
    assert(p->state == POP_POPPING || p->state == POP_ORPHANED);
    p->lreq = NULL;
    trace(p, res != NULL && res->n > 0 ? "leased" : "found nothing");
    if (p->state == POP_ORPHANED) {
        /* nobody receives what this pop leased: release it now that it has
         * committed, or may have (invariant 3) */
        if (((st->code == QN_OK && res->n > 0) || st->code == QN_EINDOUBT) && !p->args.auto_ack) {
            /* learned as held, so that the release hints the partitions to
             * parked consumers (engine/cfusion.h) */
            if (st->code == QN_OK)
                qn_pop_learn(p->app, p->tenant, &p->args, res, false);
            if (st->code == QN_EINDOUBT)
                qn_pop_release_worker_doubt(p->app, p->tenant, p->worker);
            else
                qn_pop_release_worker(p->app, p->tenant, p->worker);
        }
        pop_free(p);
        return;
    }
    if (st->code == QN_EINDOUBT && p->args.auto_ack) {
        pop_finish(p, QN_GRPC_UNKNOWN,
                   "outcome unknown: the database connection was lost during an auto-ack pop; "
                   "the cursor may have moved past messages that were not delivered");
        return;
    }
    if (st->code == QN_EINDOUBT) {
        /* invariant 5: release before answering */
        p->state = POP_RELEASING;
        p->waiting = false;
        qn_waiters_unpark(p->app->waiters, &p->waiter);
        evtimer_del(p->timer);
        if (qn_pop_release_worker_then(p->app, p->tenant, p->worker, pop_released, p) != QN_OK)
            pop_finish(p, QN_GRPC_UNKNOWN, QN_MSG_OUTCOME_UNKNOWN);
        return;
    }
    if (st->code != QN_OK) {
        pop_store_error(p, st);
        return;
    }
    if (is_scan(p))
        qn_waiters_scanned(p->app->waiters, p->tenant, p->args.queue, p->args.group, p->unfed,
                           res->n == 0, qn_store_now_ms());
    if (res->n > 0) {
        for (size_t i = 0; i < res->n; i++) /* segments of one partition are adjacent */
            if (i == 0 || memcmp(res->segs[i].pid, res->segs[i - 1].pid, 16) != 0)
                qn_waiters_drop_spare(p->app->waiters, p->tenant, p->args.queue, p->args.group,
                                      res->segs[i].partition);
        qn_call *call = p->call;
        long sent =
            qn_pop_send_batch(p->app, call, &p->args, res, p->req->raw_segments ? QN_BATCH_RAW : 0);
        qn_call_set_data(call, NULL);
        if (sent < 0) {
            if (!p->args.auto_ack)
                qn_pop_release_worker(p->app, p->tenant, p->worker);
            QN_ERROR("pop: cannot build a batch of %s: %s", p->args.queue ? p->args.queue : "?",
                     qn_strerror((int)sent));
            qn_call_finish(call, qn_pop_batch_error_code((int)sent), qn_strerror((int)sent));
        } else {
            qn_call_finish(call, QN_GRPC_OK, NULL);
        }
        pop_free(p);
        return;
    }
    /* empty */
    int64_t now = qn_store_now_ms();
    if (p->spare && !p->app->shutting_down) {
        /* a spare hint is a guess (waiters.h): its partition was drained or
         * leased meanwhile, so look at every partition now */
        p->spare = false;
        pop_issue(p);
        return;
    }
    if (p->unscanned && p->waiting && now >= p->wait_until_ms && !p->app->shutting_down) {
        /* invariant 6: a hinted pop found nothing at the end of the wait, and
         * this pop has not looked everywhere yet (it waited unscanned) */
        pop_issue(p);
        return;
    }
    if (!p->waiting || now >= p->wait_until_ms || p->app->shutting_down) {
        pop_answer_empty(p);
        return;
    }
    qn_call_unreserve(p->call); /* a parked pop holds no budget */
    if (p->rewake ||
        (p->hinted && qn_waiters_unfed(p->app->waiters, p->tenant, p->args.queue) != p->unfed)) {
        /* a hinted partition found empty was taken by another consumer (maybe
         * on another loop, woken by the same commit, or by a scan); a commit
         * since the hint that reached no consumer of this loop (waiters.h)
         * may have left data nobody here was told of: look at every partition
         * once before waiting again */
        p->rewake = false;
        pop_issue(p);
        return;
    }
    p->state = POP_WAITING;
    trace(p, "waits");
    qn_conn_budget_give(p->slot); /* parked: no database call in flight */
    p->slot = NULL;
    int64_t at = now + p->app->cfg->wake_recheck_ms;
    arm_at(p, now, at < p->wait_until_ms ? at : p->wait_until_ms);
}

/* pop_gate_v1 answered: let the pop through, or hold it (parked, woken by
 * commits, re-asking each time) until enough is pending or the hold ends. */
static void pop_gate_done(void *ud, const struct qn_store_status *st, int64_t pending,
                          int32_t min_wait_ms)
{
    struct pop_rpc *p = ud;
    assert(p->state == POP_GATING);
    p->sreq = NULL;
    if (st->code != QN_OK) {
        pop_store_error(p, st);
        return;
    }
    int64_t now = qn_store_now_ms();
    qn_pop_gates_put(p->app->gates, p->tenant, p->args.queue, min_wait_ms, now);
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
        p->waiter.ready = pop_ready;
        p->waiter.ud = p;
        if (qn_waiters_park(p->app->waiters, &p->waiter, p->tenant, p->args.queue, p->args.group) !=
            QN_OK) {
            p->gated = true; /* no room to wait: answer with what there is */
            pop_issue(p);
            return;
        }
    }
    p->state = POP_HELD;
    qn_conn_budget_give(p->slot); /* held: no database call in flight */
    p->slot = NULL;
    /* a commit while the gate was asked (another loop commits in parallel, and
     * this pop was not parked yet to hear it): ask again now */
    if (p->rewake ||
        qn_notifier_commits(p->app->notifier, p->tenant, p->args.queue) != p->gate_commits) {
        pop_issue(p);
        return;
    }
    int64_t at = now + p->app->cfg->wake_recheck_ms;
    arm_at(p, now, at < p->hold_until_ms ? at : p->hold_until_ms);
}

static void pop_budget(qn_call *call)
{
    struct pop_rpc *p = qn_call_data(call);
    if (p != NULL && p->state == POP_BUDGET) {
        evtimer_del(p->timer);
        pop_issue(p);
    }
}

/* A new pop that would scan may wait for a hint instead: it has time to wait,
 * its queue holds no pops (gate), and its group's last scan on this loop came
 * back empty at most QUEEN_POP_SCAN_REUSE_MS ago with every commit and release since handed to a
 * consumer of the group (waiters.h). It waits as after an empty scan, until a
 * hint, a wake-up or its re-check; at the end of its wait it scans once before
 * answering empty. */
static bool wait_unscanned(struct pop_rpc *p)
{
    struct qn_app *app = p->app;
    int64_t now = qn_store_now_ms();
    uint64_t unfed = 0;
    if (p->state != POP_NEW || !p->waiting || app->cfg->pop_scan_reuse_ms <= 0 ||
        p->waiter.hinted || p->args.queue == NULL || p->args.queue[0] == '\0' ||
        (p->args.partition != NULL && p->args.partition[0]) || now >= p->wait_until_ms ||
        qn_pop_gates_get(app->gates, p->tenant, p->args.queue, now) != 0 ||
        !qn_waiters_known_empty(app->waiters, p->tenant, p->args.queue, p->args.group, now,
                                app->cfg->pop_scan_reuse_ms, &unfed))
        return false;
    app->pop_scans_skipped++;
    p->unscanned = true;
    p->unfed = unfed;
    p->hinted = false;
    p->state = POP_WAITING;
    int64_t at = now + app->cfg->wake_recheck_ms;
    arm_at(p, now, at < p->wait_until_ms ? at : p->wait_until_ms);
    return true;
}

/* A pop about to scan for the first time leases instead in a partition whose
 * news this loop could tell no consumer of its group (a spare hint, waiters.h)
 * at most QUEEN_POP_SCAN_REUSE_MS ago: at a rate where every consumer is busy
 * when commits land, new pops would otherwise each pay an any-partition scan.
 * Only once per pop; if the partition is empty, pop_done scans. */
static bool take_spare(struct pop_rpc *p, struct qn_pop_args *a)
{
    struct qn_app *app = p->app;
    if (p->spare_tried)
        return false;
    p->spare_tried = true;
    if (app->cfg->pop_scan_reuse_ms <= 0 || !is_scan(p) || a->max_partitions > 1 ||
        !qn_waiters_take_spare(app->waiters, p->tenant, a->queue, a->group, qn_store_now_ms(),
                               app->cfg->pop_scan_reuse_ms, p->spare_part))
        return false;
    app->pop_spare_hints++;
    a->partition = p->spare_part;
    return true;
}

/* Asks the gate or pops: NEW|HELD|WAITING|BUDGET|GATING(answered) -> GATING|POPPING|BUDGET,
 * or NEW -> WAITING (wait_unscanned). */
static void pop_issue(struct pop_rpc *p)
{
    struct qn_app *app = p->app;
    assert(p->sreq == NULL && p->lreq == NULL && p->state != POP_ORPHANED);
    if (p->waiting && !qn_waiter_parked(&p->waiter)) {
        if (qn_waiters_park(app->waiters, &p->waiter, p->tenant, p->args.queue, p->args.group) !=
            QN_OK) {
            pop_finish(p, QN_GRPC_RESOURCE_EXHAUSTED,
                       "too many pops are waiting on this broker (QUEEN_MAX_PARKED_POPS)");
            return;
        }
    }
    p->rewake = false;
    if (wait_unscanned(p))
        return;
    if (p->slot == NULL) {
        int rc = qn_svc_take_slot(app, p->call, p->admitted, &p->slot);
        if (rc != QN_OK) {
            p->slot = NULL;
            pop_finish(p, QN_GRPC_RESOURCE_EXHAUSTED,
                       rc == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
            return;
        }
        p->admitted = true;
    }
    if (!p->gated && p->args.queue != NULL &&
        qn_pop_gates_get(app->gates, p->tenant, p->args.queue, qn_store_now_ms()) != 0) {
        /* the queue may hold under-full pops: ask before claiming anything */
        struct qn_call_opts gopts = {qn_call_deadline_ms(p->call), p->tenant, NULL};
        p->state = POP_GATING;
        p->gate_commits = qn_notifier_commits(app->notifier, p->tenant, p->args.queue);
        trace(p, "asks the gate");
        if (qn_store_pop_gate(app->store, p->args.queue, p->args.partition, p->args.group, &gopts,
                              pop_gate_done, p, &p->sreq) == QN_OK)
            return;
        p->sreq = NULL;
        p->gated = true; /* could not ask: pop as if the option were off */
    }
    /* No database deadline: a pop abandoned at the deadline could still commit
     * its lease unseen. The transport ends the call at the deadline instead and
     * qn_svc_pop_cancel waits for this pop's answer (invariant 3). */
    size_t min;
    char why[300];
    int rc = qn_pop_reserve(p->call, app->cfg, &p->args, &min, why, sizeof why);
    if (rc == QN_ELIMIT && qn_call_on_budget(p->call, min, pop_budget) == QN_OK) {
        /* other reads hold the budget: go on as they end, and look again soon
         * in case what they produced stays unread (then: RESOURCE_EXHAUSTED) */
        p->state = POP_BUDGET;
        qn_conn_budget_give(p->slot); /* waiting: no database call in flight */
        p->slot = NULL;
        int64_t now = qn_store_now_ms();
        evtimer_del(p->timer);
        arm_at(p, now, now + BUDGET_RECHECK_MS);
        return;
    }
    if (rc != QN_OK) {
        pop_finish(p, QN_GRPC_RESOURCE_EXHAUSTED, rc == QN_EBUSY ? why : "the call ended");
        return;
    }
    p->state = POP_POPPING;
    struct qn_call_opts popts = {0, p->tenant, p->filtered ? &p->names.f : NULL};
    struct qn_pop_args a = p->args;
    p->hinted = qn_pop_take_hint(&p->waiter, &a); /* a commit named its partition: lease there */
    p->spare = !p->hinted && take_spare(p, &a);
    p->hinted = p->hinted || p->spare;
    if (!p->hinted && p->args.queue != NULL) /* a scan: sees every commit told nobody so far */
        p->unfed = qn_waiters_unfed(app->waiters, p->tenant, p->args.queue);
    if (is_scan(p)) {
        app->pop_scans++;
        p->unscanned = false;
    }
    rc = qn_cfusion_pop(app->cfusion, app->store, &a, &popts,
                        p->req->raw_segments ? 0 : QN_CFUSION_DECODE, pop_done, p, &p->lreq);
    trace(p, p->hinted ? "pops (hinted)" : "pops");
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        p->lreq = NULL;
        pop_store_error(p, &st);
    }
}

void qn_svc_pop(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__PopRequest *req = (Queen__V1__PopRequest *)msg;
    char why[300];
    app->rpcs++;
    struct pop_rpc *p = calloc(1, sizeof *p);
    if (p == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    p->state = POP_NEW;
    p->app = app;
    p->call = call;
    p->req = req;
    uint8_t wid[16];
    qn_app_new_id(app, wid);
    qn_uuid_format(wid, p->worker);
    struct qn_pop_params pp = {req->queue,
                               req->partition,
                               req->namespace_,
                               req->task,
                               req->consumer_group,
                               req->batch,
                               req->max_partitions,
                               req->lease_seconds,
                               req->auto_ack,
                               req->subscription_mode,
                               req->subscription_from_us};
    const char *refusal = qn_svc_refusal(app);
    if (refusal != NULL) {
        pop_finish(p, QN_GRPC_UNAVAILABLE, refusal);
        return;
    }
    if (!qn_pop_prepare(app->cfg, &pp, &p->args, p->worker, why, sizeof why)) {
        pop_finish(p, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    if (req->wait_ms > (uint32_t)app->cfg->max_pop_wait_ms) {
        snprintf(why, sizeof why, "wait_ms %u is over the limit of %lld", req->wait_ms,
                 (long long)app->cfg->max_pop_wait_ms);
        pop_finish(p, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    memcpy(p->tenant, qn_authz_tenant(call), 16);
    enum qn_grpc_code denied =
        qn_pop_authorize(call, &p->args, &p->names, &p->filtered, why, sizeof why);
    if (denied != QN_GRPC_OK) {
        pop_finish(p, denied, why);
        return;
    }
    p->timer = evtimer_new(app->base, pop_timer_cb, p);
    if (p->timer == NULL) {
        pop_finish(p, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
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
        p->waiter.ready = pop_ready;
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
    if (p->state == POP_RELEASING) {
        p->call = NULL; /* pop_released frees */
        return;
    }
    if (p->state == POP_POPPING) {
        /* pop_done releases what this pop leased (invariant 3) */
        p->state = POP_ORPHANED;
        p->call = NULL;
        p->waiting = false;
        qn_waiters_unpark(p->app->waiters, &p->waiter);
        evtimer_del(p->timer);
        return;
    }
    assert(p->state == POP_GATING || p->state == POP_HELD || p->state == POP_WAITING ||
           p->state == POP_BUDGET);
    pop_free(p);
}
