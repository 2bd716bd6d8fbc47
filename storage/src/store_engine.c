/*
 * store_engine.c - the request engine: queueing by lane, pipelining onto the
 * pool's connections, reading results, deadlines, cancels, retries, error
 * translation, delivery, and what a lost connection means for each call (see
 * queen/store.h for the model, store_engine.h for the request lifecycle).
 *
 * Why one file of some 800 lines: a request's lifecycle (queued, sent, read,
 * retried, in doubt, delivered) is one state machine driven from the same few
 * transitions; building requests (store_req.c), the pool (store_pool.c) and
 * LISTEN (store_listen.c) are apart already.
 *
 * Does:
 *   - queue calls in one FIFO per lane; dispatch writes first, each to the ready
 *     connection that will answer it soonest (no server cancel pending, no read
 *     in flight, fewest calls in flight, reserved write connections first), and
 *     reads only to the connections not reserved for writes;
 *   - prepare statements lazily per connection inside the same sync as their
 *     first use; one pipeline sync per call, so a call is one implicit
 *     transaction;
 *   - read with PQconsumeInput -> PQisBusy -> PQgetResult, never blocking; keep
 *     every PGresult of a call until its callback returns (zero-copy blobs);
 *   - translate errors (errmap.c), retry conflicts and statements a stray cancel
 *     hit (they failed, so nothing committed);
 *   - tell apart, when a connection is lost or a deadline passes: a call never
 *     sent (QN_EUNAVAILABLE / QN_ETIMEOUT, nothing written), a call the server
 *     already failed (its error), and a sent call whose result never came
 *     (QN_EINDOUBT when it may write, the plain error when it only reads).
 * Does not:
 *   - retry anything that may have committed;
 *   - use explicit BEGIN/COMMIT: every call is the implicit transaction of its
 *     own pipeline sync. A multi-statement call (qn_store_txn_commit) is therefore
 *     atomic, and a failure leaves the session clean for the next call in the
 *     pipeline, which an explicit block would not (it stays aborted until a
 *     ROLLBACK, failing every pipelined neighbour with 25P02);
 *   - decide that a connection is hung (store_pool.c watches; this file only
 *     records progress and pending cancels for it).
 *
 * Cancels: libpq 15 has only the blocking PQcancel (it opens a connection to the
 * server and waits for it to close). It runs on a short-lived detached thread that
 * owns a PGcancel copied on the loop (PQgetCancel does no I/O); at most
 * MAX_CANCEL_THREADS run at once, beyond that the cancel is skipped and the
 * session's statement_timeout and the hang detector bound the statement. The
 * thread touches nothing of the store, so the store may be freed while it runs. A
 * cancel reaches whatever the backend runs when it lands: if the target already
 * finished, it may hit the next pipelined call; such a call (57014 without being
 * a target, after a cancel was sent on its connection) is retried, at most three
 * times - it failed, so nothing committed.
 *
 * Invariants:
 *   1. The loop never waits: sockets are non-blocking, every libpq read is
 *      PQconsumeInput then PQgetResult only while !PQisBusy.
 *   2. A callback runs at most once, never inside the call that made the request
 *      (calls only queue; dispatch runs from the kick event), and never after
 *      qn_store_cancel.
 *   3. conn->inflight lists the requests whose syncs were sent, in send order; the
 *      results arriving belong to the head's items[cur].
 *   4. A request's inputs sit in its arena below inputs_end; everything above
 *      (items, results, error texts) is dropped on a retry.
 *   5. Every request state change goes through req_set_state, which asserts the
 *      transition of the lifecycle in store_engine.h.
 *   6. A read-lane call is never sent on a connection reserved for writes.
 *   7. QN_EUNAVAILABLE and QN_ETIMEOUT are only delivered for a call that may
 *      write when nothing of it was sent or the server reported its failure;
 *      otherwise a lost outcome is QN_EINDOUBT.
 */
#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "store_engine.h"

#define MAX_CANCEL_THREADS 8

static atomic_int cancel_threads;

static void dispatch(qn_store *st);
static void conn_drain(struct qn__conn *c);

/* ---------------------------------------------------------------- requests */

static void req_set_state(qn_store_req *r, enum qn__req_state to)
{
    switch (to) {
    case QN__REQ_BUILDING:
        assert(!"a request never goes back to BUILDING");
        break;
    case QN__REQ_QUEUED:
        assert(r->state == QN__REQ_BUILDING || r->state == QN__REQ_SENT);
        break;
    case QN__REQ_SENT:
        assert(r->state == QN__REQ_QUEUED || (r->internal && r->state == QN__REQ_BUILDING));
        break;
    case QN__REQ_ABANDONED:
        assert(r->state == QN__REQ_SENT);
        break;
    case QN__REQ_DONE:
        assert(r->state != QN__REQ_DONE && r->state != QN__REQ_BUILDING);
        break;
    }
    r->state = to;
}

/* Records the first failure of r (texts copied above inputs_end). */
static void req_error(qn_store_req *r, int code, int step, const char *sqlstate, const char *msg)
{
    if (r->err != QN_OK)
        return;
    r->err = code;
    r->err_step = step;
    r->err_server = false;
    r->err_state = qn__arena_strdup(&r->arena, sqlstate ? sqlstate : "");
    const char *m = (msg && *msg) ? msg : qn_strerror(code);
    size_t n = strlen(m);
    while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    r->err_msg = qn__arena_strndup(&r->arena, m, n);
    if (r->err_state == NULL)
        r->err_state = "";
    if (r->err_msg == NULL)
        r->err_msg = qn_strerror(code);
}

static void req_error_res(qn_store_req *r, const PGresult *res, int step, bool conn_bad)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    if (msg == NULL)
        msg = PQresultErrorMessage(res);
    const char *human;
    int code = qn__errmap(state, msg, conn_bad, &human);
    bool first = r->err == QN_OK;
    req_error(r, code, step, state, human);
    /* the server itself reported the failure: the transaction did not commit */
    if (first && state != NULL && !conn_bad)
        r->err_server = true;
}

/* Runs the callback of r once (the caller frees r). */
static void deliver(qn_store_req *r)
{
    qn_store *st = r->st;
    if (r->internal) {
        r->finish(r, NULL);
        return;
    }
    r->delivered = true;
    struct qn_store_status s = {r->err, "", ""};
    if (r->err != QN_OK) {
        s.sqlstate = r->err_state ? r->err_state : "";
        s.message = r->err_msg ? r->err_msg : qn_strerror(r->err);
    }
    st->stats.calls++;
    if (r->err == QN_EINDOUBT)
        st->stats.in_doubt++;
    if (r->finish == NULL)
        return;
    r->in_callback = true;
    r->finish(r, &s);
    r->in_callback = false;
}

/* Fails r now with code; nothing is delivered twice. */
static void deliver_error(qn_store_req *r, int code, const char *msg)
{
    if (r->delivered || r->internal)
        return;
    qn__req_drop_results(r);
    r->err = QN_OK;
    req_error(r, code, -1, "", msg);
    deliver(r);
}

void qn__eng_kick(qn_store *st)
{
    if (!st->closing)
        event_active(st->kick, EV_TIMEOUT, 1);
}

static void backoff_arm(qn_store *st)
{
    int64_t first = INT64_MAX;
    qn_store_req *r;
    TAILQ_FOREACH(r, &st->waiting[QN__WAIT_BACKOFF], link)
    {
        if (r->retry_at_ms < first)
            first = r->retry_at_ms;
    }
    if (first != INT64_MAX)
        qn__set_timer(st->backoff_ev, first - qn_store_now_ms());
}

/* Sends r again, at once (delay_ms 0: it goes first in its lane) or after
 * delay_ms in the backoff queue. */
static void req_requeue(qn_store_req *r, int64_t delay_ms)
{
    qn_store *st = r->st;
    qn__req_drop_results(r);
    qn__arena_rewind(&r->arena, r->inputs_end);
    r->items = NULL;
    r->res = NULL;
    r->err = QN_OK;
    r->err_server = false;
    r->err_step = -1;
    r->err_state = r->err_msg = NULL;
    r->conn = NULL;
    r->sent = false;
    r->cancel_ms = 0;
    req_set_state(r, QN__REQ_QUEUED);
    st->nwaiting++;
    st->stats.retries++;
    if (delay_ms > 0) {
        r->waitq = QN__WAIT_BACKOFF;
        r->retry_at_ms = qn_store_now_ms() + delay_ms;
        TAILQ_INSERT_TAIL(&st->waiting[QN__WAIT_BACKOFF], r, link);
        backoff_arm(st);
        return;
    }
    r->waitq = r->lane;
    TAILQ_INSERT_HEAD(&st->waiting[r->lane], r, link);
    qn__eng_kick(st);
}

/* Retries whose backoff is over go first in their lanes. */
static void on_backoff(evutil_socket_t fd, short what, void *arg)
{
    qn_store *st = arg;
    (void)fd;
    (void)what;
    qn__store_enter(st);
    int64_t now = qn_store_now_ms();
    qn_store_req *r, *next;
    bool moved = false;
    for (r = TAILQ_FIRST(&st->waiting[QN__WAIT_BACKOFF]); r != NULL; r = next) {
        next = TAILQ_NEXT(r, link);
        if (r->retry_at_ms > now)
            continue;
        TAILQ_REMOVE(&st->waiting[QN__WAIT_BACKOFF], r, link);
        r->waitq = r->lane;
        TAILQ_INSERT_HEAD(&st->waiting[r->lane], r, link);
        moved = true;
    }
    backoff_arm(st);
    if (moved)
        qn__eng_kick(st);
    qn__store_leave(st);
}

/* A deadlock or serialization failure is retried after a pause that grows with
 * each attempt, jittered: retried at once, the loser can take the first lock
 * again before the winner, woken by its abort, takes it, and deadlock anew. */
static int64_t conflict_backoff_ms(qn_store *st, int attempt)
{
    int64_t base = (int64_t)10 << (attempt - 1 < 4 ? attempt - 1 : 4);
    st->jitter = st->jitter * 6364136223846793005ULL + 1442695040888963407ULL;
    return base + (int64_t)((st->jitter >> 33) % (uint64_t)base);
}

static void fail_waiting(qn_store *st, int code, const char *msg)
{
    for (int l = 0; l < QN__WAITQS; l++) {
        qn_store_req *r;
        while ((r = TAILQ_FIRST(&st->waiting[l])) != NULL && !st->closing) {
            TAILQ_REMOVE(&st->waiting[l], r, link);
            st->nwaiting--;
            req_set_state(r, QN__REQ_DONE);
            deliver_error(r, code, msg);
            qn__req_free(r);
        }
    }
}

void qn__eng_fail_waiting_if_down(qn_store *st)
{
    if (!qn__pool_any_alive(st))
        fail_waiting(st, QN_EUNAVAILABLE, "no database connection");
}

/* ---------------------------------------------------------------- cancel */

static void *cancel_main(void *arg)
{
    PGcancel *pc = arg;
    char err[256];
    (void)PQcancel(pc, err, sizeof err); /* best effort: statement_timeout backs it */
    PQfreeCancel(pc);
    atomic_fetch_sub(&cancel_threads, 1);
    return NULL;
}

int qn__eng_cancel_current(struct qn__conn *c)
{
    if (c->pg == NULL || c->state == QN__CONN_CONNECTING)
        return QN_EUNAVAILABLE;
    if (atomic_fetch_add(&cancel_threads, 1) >= MAX_CANCEL_THREADS) {
        atomic_fetch_sub(&cancel_threads, 1);
        return QN_ELIMIT;
    }
    PGcancel *pc = PQgetCancel(c->pg);
    pthread_t t;
    pthread_attr_t attr;
    int rc = QN_ENOMEM;
    if (pc == NULL)
        goto out;
    if (pthread_attr_init(&attr) != 0)
        goto out;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, cancel_main, pc) == 0) {
        pc = NULL; /* the thread owns it */
        rc = QN_OK;
        c->cancel_seq++;
    }
    pthread_attr_destroy(&attr);
out:
    if (rc != QN_OK) {
        if (pc != NULL)
            PQfreeCancel(pc);
        atomic_fetch_sub(&cancel_threads, 1);
    }
    return rc;
}

/* r's outcome was delivered early (deadline) or suppressed (cancel): it stays in
 * its pipeline until its sync arrives, cancelled in the server when it is what
 * the server runs now. The hang detector then gives the server cancel_grace_ms
 * to answer. */
static void abandon(qn_store_req *r)
{
    struct qn__conn *c = r->conn;
    req_set_state(r, QN__REQ_ABANDONED);
    if (r->timer != NULL)
        event_del(r->timer);
    if (c != NULL && TAILQ_FIRST(&c->inflight) == r && qn__eng_cancel_current(c) == QN_OK) {
        r->cancel_ms = qn_store_now_ms();
        qn__conn_watch(c);
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    qn_store_req *r = arg;
    qn_store *st = r->st;
    (void)fd;
    (void)what;
    qn__store_enter(st);
    if (r->state == QN__REQ_QUEUED) {
        TAILQ_REMOVE(&st->waiting[r->waitq], r, link);
        st->nwaiting--;
        req_set_state(r, QN__REQ_DONE);
        deliver_error(r, QN_ETIMEOUT, "deadline passed before the call was sent");
        qn__req_free(r);
    } else if (r->state == QN__REQ_SENT) {
        abandon(r); /* freed when its sync arrives (or its connection goes) */
        if (r->writes)
            deliver_error(r, QN_EINDOUBT,
                          "deadline passed after the call was sent; its outcome is unknown");
        else
            deliver_error(r, QN_ETIMEOUT, "deadline passed");
    }
    qn__store_leave(st);
}

void qn_store_cancel(qn_store_req *r)
{
    if (r == NULL || r->in_callback || r->delivered)
        return;
    qn_store *st = r->st;
    switch (r->state) {
    case QN__REQ_QUEUED:
        TAILQ_REMOVE(&st->waiting[r->waitq], r, link);
        st->nwaiting--;
        qn__req_free(r);
        break;
    case QN__REQ_SENT:
        r->delivered = true; /* suppressed */
        abandon(r);
        break;
    case QN__REQ_BUILDING:
    case QN__REQ_ABANDONED:
    case QN__REQ_DONE:
        break;
    }
}

/* ---------------------------------------------------------------- sending */

static int req_send(struct qn__conn *c, qn_store_req *r)
{
    PGconn *pg = c->pg;
    qn_store *st = c->st;
    for (int i = 0; i < r->nsteps; i++) {
        struct qn__step *s = &r->steps[i];
        if (s->stmt >= 0) {
            const struct qn__stmt *d = qn__stmt_def(st, s->stmt);
            if (d == NULL)
                return QN_EINTERNAL;
            if (!c->prepared[s->stmt]) {
                if (!PQsendPrepare(pg, d->name, d->sql, d->nparams, (const Oid *)d->types))
                    return QN_EUNAVAILABLE;
                c->prepared[s->stmt] = 1;
                r->items[r->nitems++] = (struct qn__item){QN__ITEM_PREPARE, -1, (int16_t)s->stmt};
            }
            if (!PQsendQueryPrepared(pg, d->name, s->p.n, s->p.values, s->p.lengths, s->p.formats,
                                     s->result_format))
                return QN_EUNAVAILABLE;
        } else {
            if (!PQsendQueryParams(pg, s->sql, s->p.n, (const Oid *)s->types, s->p.values,
                                   s->p.lengths, s->p.formats, s->result_format))
                return QN_EUNAVAILABLE;
        }
        /* libpq holds the statement now and may flush it at any time */
        r->sent = true;
        r->items[r->nitems++] = (struct qn__item){QN__ITEM_EXEC, (int16_t)i, -1};
        if (!r->internal)
            st->stats.statements++;
    }
    if (!PQpipelineSync(pg))
        return QN_EUNAVAILABLE;
    r->items[r->nitems++] = (struct qn__item){QN__ITEM_SYNC, -1, -1};
    if (!r->internal)
        st->stats.round_trips++;
    return QN_OK;
}

int qn__eng_submit(struct qn__conn *c, qn_store_req *r)
{
    qn_store *st = c->st;
    r->items = qn__arena_alloc(&r->arena, sizeof *r->items * (size_t)(2 * r->nsteps + 1));
    r->res = qn__arena_zalloc(&r->arena, sizeof *r->res * (size_t)r->nsteps);
    if (r->items == NULL || r->res == NULL) {
        r->items = NULL;
        r->res = NULL;
        return QN_ENOMEM;
    }
    bool was_idle = TAILQ_EMPTY(&c->inflight);
    r->nitems = 0;
    r->cur = 0;
    r->cur_got = false;
    r->conn = c;
    r->sent = false;
    r->cancel_ms = 0;
    req_set_state(r, QN__REQ_SENT);
    r->cancel_seq = c->cancel_seq;
    TAILQ_INSERT_TAIL(&c->inflight, r, link);
    c->ninflight++;
    if (!r->internal) {
        st->in_flight++;
        if (r->lane == QN__LANE_READ)
            c->nreads++;
        if ((uint32_t)c->ninflight > st->stats.in_flight_peak)
            st->stats.in_flight_peak = (uint32_t)c->ninflight;
    }
    if (was_idle) {
        c->progress_ms = qn_store_now_ms();
        qn__conn_watch(c);
    }
    int rc = req_send(c, r);
    if (rc != QN_OK) {
        qn__conn_fail(c, PQerrorMessage(c->pg));
        return QN_EUNAVAILABLE;
    }
    return QN_OK;
}

void qn__eng_flush(struct qn__conn *c)
{
    int rc = PQflush(c->pg);
    if (rc < 0) {
        qn__conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    if (rc == 1 && !c->want_write) {
        event_add(c->wev, NULL);
        c->want_write = true;
    } else if (rc == 0 && c->want_write) {
        event_del(c->wev);
        c->want_write = false;
    }
}

/*
 * The connection a call of this lane goes to, or NULL when none has a free slot:
 * a ready one, never a reserved one for reads (invariant 6). Preference, in
 * order: no server cancel pending on its head (the connection may be hanging),
 * for writes no read in flight (a write must not wait behind a bulk read),
 * fewest calls in flight, and for writes a reserved connection.
 */
static struct qn__conn *pick(qn_store *st, int lane)
{
    struct qn__conn *best = NULL;
    long best_key = LONG_MAX;
    for (int i = 0; i < st->cfg.pool_size; i++) {
        struct qn__conn *c = &st->conns[i];
        if (c->state != QN__CONN_READY || c->ninflight >= st->cfg.pipeline_depth)
            continue;
        if (lane == QN__LANE_READ && c->reserved)
            continue;
        const qn_store_req *head = TAILQ_FIRST(&c->inflight);
        long key = (long)c->ninflight * 2;
        if (head != NULL && head->cancel_ms > 0)
            key += 1L << 24;
        if (lane == QN__LANE_WRITE) {
            if (c->nreads > 0)
                key += 1L << 20;
            if (!c->reserved)
                key += 1;
        }
        if (key < best_key) {
            best = c;
            best_key = key;
        }
    }
    return best;
}

static void dispatch(qn_store *st)
{
    bool sent[QN__POOL_MAX] = {false};
    for (int lane = 0; lane < QN__LANES; lane++) {
        qn_store_req *r;
        while (!st->closing && (r = TAILQ_FIRST(&st->waiting[lane])) != NULL) {
            struct qn__conn *c = pick(st, lane);
            if (c == NULL)
                break;
            TAILQ_REMOVE(&st->waiting[lane], r, link);
            st->nwaiting--;
            int rc = qn__eng_submit(c, r);
            if (rc == QN_ENOMEM) {
                req_set_state(r, QN__REQ_DONE);
                deliver_error(r, QN_ENOMEM, "out of memory");
                qn__req_free(r);
                continue;
            }
            if (rc == QN_OK)
                sent[c->idx] = true;
        }
    }
    /* flush, then read: PQflush may have pulled input into libpq's buffer, which
     * the socket will not signal again */
    for (int i = 0; i < st->cfg.pool_size && !st->closing; i++) {
        struct qn__conn *c = &st->conns[i];
        if (!sent[i] || c->pg == NULL)
            continue;
        qn__eng_flush(c);
        if (c->pg != NULL && !st->closing)
            conn_drain(c);
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    qn_store *st = arg;
    (void)fd;
    (void)what;
    qn__store_enter(st);
    dispatch(st);
    qn__store_leave(st);
}

int qn__eng_init(qn_store *st)
{
    st->kick = event_new(st->base, -1, 0, on_kick, st);
    st->backoff_ev = evtimer_new(st->base, on_backoff, st);
    st->jitter = (uint64_t)qn_store_now_ms() ^ (uint64_t)(uintptr_t)st;
    return st->kick != NULL && st->backoff_ev != NULL ? QN_OK : QN_ENOMEM;
}

/* ---------------------------------------------------------------- outcomes */

/* r left c's pipeline (its sync arrived, or c was lost). */
static void req_unlink(struct qn__conn *c, qn_store_req *r)
{
    qn_store *st = c->st;
    TAILQ_REMOVE(&c->inflight, r, link);
    c->ninflight--;
    if (!r->internal) {
        st->in_flight--;
        if (r->lane == QN__LANE_READ)
            c->nreads--;
    }
    r->conn = NULL;
}

/*
 * r's outcome is known (its sync arrived, or the server failed it before its
 * connection was lost): retry, decode and deliver, or drop. r is out of every
 * list; c is the connection it ran on (maybe closed by now).
 */
static void req_finish(struct qn__conn *c, qn_store_req *r)
{
    qn_store *st = r->st;
    if (r->state == QN__REQ_ABANDONED) {
        req_set_state(r, QN__REQ_DONE);
        qn__req_free(r);
        return;
    }
    if (r->internal) {
        req_set_state(r, QN__REQ_DONE);
        r->finish(r, NULL); /* connection setup: may close c */
        qn__req_free(r);
        return;
    }
    if (r->err == QN_ECONFLICT && r->conflict_retries < st->cfg.conflict_retries) {
        r->conflict_retries++;
        req_requeue(r, conflict_backoff_ms(st, r->conflict_retries));
        return;
    }
    if (r->err != QN_OK && r->err_state != NULL && r->reprepared < 3 &&
        (strcmp(r->err_state, "26000") == 0 || strcmp(r->err_state, "42P05") == 0)) {
        /* Statements are prepared lazily, their Parse riding in the sync of the
         * first call that uses them. When that sync fails before the Parse, a
         * call already on the wire that assumed the statement finds it missing
         * (26000); when two calls race to prepare it again, the second Parse finds
         * it present (42P05). Either way nothing of this call ran (its sync
         * aborted there), so resend it with the flags corrected. */
        r->reprepared++;
        if (strcmp(r->err_state, "26000") == 0 && r->err_step >= 0 && r->err_step < r->nsteps &&
            r->steps[r->err_step].stmt >= 0)
            c->prepared[r->steps[r->err_step].stmt] = 0;
        req_requeue(r, 0);
        return;
    }
    /* A cancel is only ever aimed at an abandoned call (deadline or
     * qn_store_cancel), which is freed above without a callback. So a live call
     * failing with "canceling statement due to user request" was hit by a cancel
     * meant for the statement before it - also when it was sent after the
     * cancel was requested but before the server acted on it. Statement timeouts
     * read "due to statement timeout" and are not retried. */
    if (r->err == QN_ETIMEOUT && r->stray_retried < 3 &&
        (r->cancel_seq != c->cancel_seq ||
         (r->err_msg != NULL && strstr(r->err_msg, "user request") != NULL))) {
        r->stray_retried++;
        req_requeue(r, 0);
        return;
    }
    for (int i = 0; r->err == QN_OK && i < r->nsteps; i++) {
        struct qn__step *s = &r->steps[i];
        if (s->decode == NULL)
            continue;
        int rc = r->res[i] ? s->decode(r, i, r->res[i]) : QN_EPROTOCOL_DB;
        if (rc != QN_OK)
            req_error(r, rc, i, "",
                      rc == QN_ENOMEM ? "out of memory"
                                      : "the database returned a result of an unexpected shape");
    }
    req_set_state(r, QN__REQ_DONE);
    deliver(r);
    qn__req_free(r);
}

/* SQLSTATEs with which the server ends the session: nothing after the statement
 * that received one runs on that connection. */
static bool session_ended(const char *sqlstate)
{
    return sqlstate != NULL && (strcmp(sqlstate, "57P01") == 0 || strcmp(sqlstate, "57P02") == 0 ||
                                strcmp(sqlstate, "57P03") == 0);
}

void qn__eng_conn_lost(struct qn__conn *c, const char *msg)
{
    qn_store *st = c->st;
    char doubt[320];
    snprintf(doubt, sizeof doubt, "%s; the call was sent, its outcome is unknown", msg);
    /* The server answers in order: once it ended the session on a statement,
     * the calls pipelined behind that one never ran. */
    bool unrun = false;
    qn_store_req *r;
    while (!st->closing && (r = TAILQ_FIRST(&c->inflight)) != NULL) {
        req_unlink(c, r);
        bool ended = r->err != QN_OK && r->err_server && session_ended(r->err_state);
        if (r->internal || r->state == QN__REQ_ABANDONED) {
            req_set_state(r, QN__REQ_DONE);
            qn__req_free(r);
        } else if (r->err != QN_OK && r->err_server) {
            req_finish(c, r); /* the server failed it: nothing committed */
        } else {
            req_set_state(r, QN__REQ_DONE);
            if (r->sent && r->writes && !unrun)
                deliver_error(r, QN_EINDOUBT, doubt);
            else
                deliver_error(r, QN_EUNAVAILABLE, msg);
            qn__req_free(r);
        }
        unrun = unrun || ended;
    }
}

/* ---------------------------------------------------------------- receiving */

/*
 * Reads every result available without blocking and routes it to the head
 * request's current item (invariant 3).
 */
static void conn_drain(struct qn__conn *c)
{
    qn_store *st = c->st;
    while (c->pg != NULL && !st->closing && !TAILQ_EMPTY(&c->inflight)) {
        if (PQstatus(c->pg) == CONNECTION_BAD) {
            qn__conn_fail(c, PQerrorMessage(c->pg));
            return;
        }
        if (PQisBusy(c->pg))
            return;
        qn_store_req *r = TAILQ_FIRST(&c->inflight);
        assert(r->cur < r->nitems);
        struct qn__item *it = &r->items[r->cur];
        PGresult *res = PQgetResult(c->pg);
        if (res != NULL)
            c->progress_ms = qn_store_now_ms();
        if (it->kind == QN__ITEM_SYNC) {
            ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
            if (s != PGRES_PIPELINE_SYNC) {
                bool bad = PQstatus(c->pg) == CONNECTION_BAD;
                if (res != NULL)
                    req_error_res(r, res, -1, bad);
                /* an error where the commit's answer belongs: whether the commit
                 * happened is not known */
                r->err_server = false;
                PQclear(res);
                qn__conn_fail(c, bad ? PQerrorMessage(c->pg) : "pipeline out of step");
                return;
            }
            PQclear(res);
            req_unlink(c, r);
            qn__conn_watch(c); /* a new head, or none */
            req_finish(c, r);
            continue;
        }
        if (res == NULL) {
            if (!r->cur_got) {
                qn__conn_fail(c, "pipeline out of step");
                return;
            }
            r->cur++;
            r->cur_got = false;
            continue;
        }
        r->cur_got = true;
        switch (PQresultStatus(res)) {
        case PGRES_TUPLES_OK:
        case PGRES_COMMAND_OK:
            if (it->kind == QN__ITEM_EXEC && r->res[it->step] == NULL) {
                r->res[it->step] = res;
                res = NULL;
            }
            break;
        case PGRES_PIPELINE_ABORTED:
            /* an earlier error of this sync skipped the Parse: it never happened */
            if (it->kind == QN__ITEM_PREPARE)
                c->prepared[it->stmt] = 0;
            break;
        case PGRES_FATAL_ERROR:
        case PGRES_NONFATAL_ERROR:
        case PGRES_BAD_RESPONSE:
            if (it->kind == QN__ITEM_PREPARE) {
                /* 42P05: another call's Parse got there first; it exists */
                const char *ss = PQresultErrorField(res, PG_DIAG_SQLSTATE);
                c->prepared[it->stmt] = ss != NULL && strcmp(ss, "42P05") == 0;
            }
            req_error_res(r, res, it->kind == QN__ITEM_EXEC ? it->step : -1,
                          PQstatus(c->pg) == CONNECTION_BAD);
            break;
        default:
            req_error(r, QN_EPROTOCOL_DB, it->step, "", "unexpected result status");
            break;
        }
        PQclear(res);
    }
}

void qn__eng_on_io(evutil_socket_t fd, short what, void *arg)
{
    struct qn__conn *c = arg;
    qn_store *st = c->st;
    (void)fd;
    qn__store_enter(st);
    if ((what & EV_READ) && !PQconsumeInput(c->pg)) {
        qn__conn_fail(c, PQerrorMessage(c->pg));
        goto out;
    }
    conn_drain(c);
    if (c->pg == NULL || st->closing)
        goto out;
    if (c->idx < 0) {
        qn__listen_pump(c);
        if (c->pg == NULL || st->closing)
            goto out;
    }
    if (c->want_write || (what & EV_WRITE)) {
        qn__eng_flush(c);
        if (c->pg != NULL && !st->closing)
            conn_drain(c);
    }
    if (c->pg != NULL && !st->closing && PQstatus(c->pg) == CONNECTION_BAD) {
        qn__conn_fail(c, PQerrorMessage(c->pg));
        goto out;
    }
    if (!st->closing && st->nwaiting > 0)
        dispatch(st);
out:
    qn__store_leave(st);
}

/* ---------------------------------------------------------------- shutdown */

void qn__eng_shutdown(qn_store *st)
{
    qn_store_req *r;
    for (int l = 0; l < QN__WAITQS; l++)
        while ((r = TAILQ_FIRST(&st->waiting[l])) != NULL) {
            TAILQ_REMOVE(&st->waiting[l], r, link);
            st->nwaiting--;
            TAILQ_INSERT_TAIL(&st->dead, r, link);
            req_set_state(r, QN__REQ_DONE);
            deliver_error(r, QN_ESHUTDOWN, "the store is shutting down");
        }
    for (int i = -1; st->conns != NULL && i < st->cfg.pool_size; i++) {
        struct qn__conn *c = i < 0 ? &st->listener : &st->conns[i];
        while ((r = TAILQ_FIRST(&c->inflight)) != NULL) {
            req_unlink(c, r);
            TAILQ_INSERT_TAIL(&st->dead, r, link);
            req_set_state(r, QN__REQ_DONE);
            deliver_error(r, QN_ESHUTDOWN, "the store is shutting down");
        }
    }
}

/* ---------------------------------------------------------------- submit */

int qn__req_submit(qn_store_req *r, qn_store_req **req)
{
    qn_store *st = r->st;
    int rc = QN_OK;
    if (st == NULL) { /* detached: decoding only */
        qn__req_free(r);
        return QN_EINVAL;
    }
    if (r->nsteps < 1)
        rc = QN_EINVAL;
    for (int i = 0; rc == QN_OK && i < r->nsteps; i++)
        rc = r->steps[i].p.err;
    if (rc == QN_OK && st->closing)
        rc = QN_ESHUTDOWN;
    if (rc == QN_OK && !qn__pool_any_alive(st))
        rc = QN_EUNAVAILABLE;
    if (rc == QN_OK && st->nwaiting >= st->cfg.max_waiting)
        rc = QN_EBUSY;
    if (rc == QN_OK && r->deadline_ms > 0) {
        r->timer = evtimer_new(st->base, on_deadline, r);
        if (r->timer == NULL)
            rc = QN_ENOMEM;
        else
            qn__set_timer(r->timer, r->deadline_ms - qn_store_now_ms());
    }
    if (rc != QN_OK) {
        qn__req_free(r);
        return rc;
    }
    r->inputs_end = qn__arena_mark(&r->arena);
    req_set_state(r, QN__REQ_QUEUED);
    r->waitq = r->lane;
    TAILQ_INSERT_TAIL(&st->waiting[r->lane], r, link);
    st->nwaiting++;
    qn__eng_kick(st);
    if (req != NULL)
        *req = r;
    return QN_OK;
}
