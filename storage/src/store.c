/*
 * store.c - the engine: a pool of non-blocking libpq connections in pipeline
 * mode on the caller's libevent loop, requests, deadlines, cancels, retries and
 * error translation (see queen/store.h for the model).
 *
 * Does:
 *   - connect with PQconnectStartParams/PQconnectPoll driven by socket events,
 *     then SET statement_timeout (and LISTEN for the listener) in the pipeline;
 *   - queue calls, hand them to the least-loaded ready connection with a free
 *     pipeline slot (pipeline_depth calls in flight per connection), prepare
 *     statements lazily per connection inside the same sync as their first use;
 *   - read with PQconsumeInput -> PQisBusy -> PQgetResult, never blocking; keep
 *     every PGresult of a call until its callback returns (zero-copy blobs);
 *   - translate errors (errmap.c), retry conflicts, fail calls of a lost
 *     connection with QN_EUNAVAILABLE and reconnect with exponential backoff.
 * Does not:
 *   - retry anything that may have committed (a lost connection fails its calls);
 *   - use explicit BEGIN/COMMIT: every call is the implicit transaction of its
 *     own pipeline sync. A multi-statement call (qn_store_txn_commit) is therefore
 *     atomic, and a failure leaves the session clean for the next call in the
 *     pipeline, which an explicit block would not (it stays aborted until a
 *     ROLLBACK, failing every pipelined neighbour with 25P02).
 *
 * Cancels: libpq 15 has only the blocking PQcancel (it opens a connection to the
 * server and waits for it to close). It runs on a short-lived detached thread that
 * owns a PGcancel copied on the loop (PQgetCancel does no I/O); at most
 * MAX_CANCEL_THREADS run at once, beyond that the cancel is skipped and the
 * session's statement_timeout bounds the statement. The thread touches nothing of
 * the store, so the store may be freed while it runs. A cancel reaches whatever
 * the backend runs when it lands: if the target already finished, it may hit the
 * next pipelined call; such a call (57014 without being a target, after a cancel
 * was sent on its connection) is retried once - it failed, so nothing committed.
 *
 * Lifecycles:
 *
 *   connection (enum conn_state)
 *     IDLE --reconnect timer--> CONNECTING --PQconnectPoll OK--> SETUP
 *     SETUP --setup sync OK--> READY
 *     CONNECTING | SETUP | READY --error, EOF, timeout--> IDLE (+ backoff timer)
 *     READY/IDLE of the listener --listen stopped--> IDLE (no timer)
 *
 *   request (enum req_state)
 *     BUILDING --submit--> QUEUED --dispatch--> SENT --sync--> DONE (callback, freed)
 *     QUEUED --deadline--> DONE (QN_ETIMEOUT);  QUEUED --cancel--> freed, no callback
 *     SENT --conflict / stray cancel, retries left--> QUEUED (results dropped)
 *     SENT --deadline (QN_ETIMEOUT) or cancel (no callback)--> SENT+abandoned,
 *          freed when its sync arrives or its connection is lost
 *     SENT --connection lost--> DONE (QN_EUNAVAILABLE)
 *     any --qn_store_free--> DONE (QN_ESHUTDOWN), freed with the store
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
 *   5. Handlers bracket their work with enter/leave; qn_store_free inside a
 *      callback only delivers QN_ESHUTDOWN and marks; memory goes when the
 *      outermost handler leaves. After any callback, loops check st->closing.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/event.h>

#include "queen/error.h"
#include "store_int.h"

#define CONNECT_TIMEOUT_MS 10000
#define MAX_CANCEL_THREADS 8
#define REQ_ARENA_MAX ((size_t)1088 << 20) /* 1 GiB field + the call's bookkeeping */
#define MAX_STEPS 4096
#define POOL_MAX 256
#define DEPTH_MAX 1024

enum conn_state { CONN_IDLE, CONN_CONNECTING, CONN_SETUP, CONN_READY };
enum req_state { REQ_BUILDING, REQ_QUEUED, REQ_SENT, REQ_DONE };
enum item_kind { ITEM_PREPARE, ITEM_EXEC, ITEM_SYNC };

struct item {
    uint8_t kind;  /* enum item_kind */
    int16_t step;  /* ITEM_EXEC: step index */
    int16_t stmt;  /* ITEM_PREPARE: statement id */
};

TAILQ_HEAD(reqq, qn_store_req);

struct conn {
    qn_store *st;
    int idx;                 /* pool index, -1 for the listener */
    enum conn_state state;
    PGconn *pg;              /* NULL in IDLE */
    struct event *io;        /* CONNECTING: one-shot on the current socket */
    struct event *rev;       /* SETUP/READY: persistent read */
    struct event *wev;       /* SETUP/READY: persistent write, added while output waits */
    struct event *timer;     /* IDLE: reconnect; CONNECTING/SETUP: connect timeout */
    bool want_write;         /* wev is added */
    struct reqq inflight;    /* sent, in send order (invariant 3) */
    int ninflight;           /* <= pipeline_depth (setup excepted) */
    int backoff_ms;          /* last reconnect delay, 0 after a success */
    bool started;            /* a connection was attempted before */
    uint64_t cancel_seq;     /* cancels sent to this session */
    uint8_t prepared[QN_STMT_MAX]; /* statement prepared (or its Parse sent) */
};

struct qn_store_req {
    qn_store *st;
    TAILQ_ENTRY(qn_store_req) link; /* st->waiting, conn->inflight or st->dead */
    enum req_state state;
    bool abandoned;        /* outcome delivered early or suppressed */
    bool in_callback;      /* its callback is running */
    bool internal;         /* connection setup: no user callback, not counted */
    uint8_t reprepared;    /* resends after a prepared-statement mix-up (26000, 42P05) */
    uint8_t stray_retried;  /* resends after a cancel meant for another call (at most 3:
                               a cancel that reaches an idle session may still hit the
                               next statement, and rarely the one after) */
    int conflict_retries;
    struct conn *conn;     /* SENT */
    struct qn__arena arena;
    struct qn__arena_mark inputs_end;
    struct qn__step *steps;
    int nsteps, capsteps;
    struct item *items;    /* SENT: what the server will answer, in order */
    int nitems, cur;
    bool cur_got;          /* items[cur] produced at least one result */
    PGresult **res;        /* per step, kept until the callback returns */
    int err;               /* first failure, QN_OK while none */
    int err_step;
    const char *err_state, *err_msg;
    uint64_t cancel_seq;   /* conn->cancel_seq when sent */
    int64_t deadline_ms;
    struct event *timer;   /* deadline */
    uint8_t tenant[16];
    qn__finish_fn finish;
    qn__anyfn cb;
    void *ud;
};

struct dyn_stmt {
    struct qn__stmt def;
    char *name, *sql;
};

struct qn_store {
    struct event_base *base;
    struct qn_store_config cfg;
    char *conninfo;
    struct conn *conns;        /* cfg.pool_size */
    struct conn listener;
    void (*listen_cb)(void *ud, const char *payload);
    void *listen_ud;
    struct reqq waiting;       /* QUEUED, dispatch order */
    int nwaiting;
    struct reqq dead;          /* delivered at shutdown, freed with the store */
    struct event *kick;        /* runs dispatch on the next loop pass */
    bool up;
    void (*state_cb)(void *ud, bool up);
    void *state_ud;
    struct qn_store_stats stats;
    uint32_t in_flight;
    int busy;                  /* handler depth (invariant 5) */
    bool closing;
    struct dyn_stmt dyn[QN_STMT_DYN_MAX];
    int ndyn;
};

static atomic_int cancel_threads;

static void conn_start(struct conn *c);
static void on_connect(evutil_socket_t fd, short what, void *arg);
static void conn_fail(struct conn *c, const char *why);
static void dispatch(qn_store *st);
static void destroy(qn_store *st);

/* ---------------------------------------------------------------- small helpers */

int64_t qn_store_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void enter(qn_store *st)
{
    st->busy++;
}

static void leave(qn_store *st)
{
    assert(st->busy > 0);
    if (--st->busy == 0 && st->closing)
        destroy(st);
}

static const struct qn__stmt *stmt_def(const qn_store *st, int id)
{
    if (id >= 0 && id < QN_STMT_COUNT)
        return &qn__stmts[id];
    if (id >= QN_STMT_COUNT && id < QN_STMT_COUNT + st->ndyn)
        return &st->dyn[id - QN_STMT_COUNT].def;
    return NULL;
}

static void set_timer(struct event *ev, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_add(ev, &tv);
}

static void silent_notice(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

static bool any_alive(const qn_store *st)
{
    for (int i = 0; i < st->cfg.pool_size; i++)
        if (st->conns[i].state != CONN_IDLE)
            return true;
    return false;
}

static void update_up(qn_store *st)
{
    bool up = false;
    for (int i = 0; i < st->cfg.pool_size && !up; i++)
        up = st->conns[i].state == CONN_READY;
    if (up == st->up)
        return;
    st->up = up;
    if (st->state_cb != NULL)
        st->state_cb(st->state_ud, up);
}

/* ---------------------------------------------------------------- requests */

static void req_drop_results(qn_store_req *r)
{
    if (r->res != NULL)
        for (int i = 0; i < r->nsteps; i++)
            if (r->res[i] != NULL) {
                PQclear(r->res[i]);
                r->res[i] = NULL;
            }
}

static void req_free(qn_store_req *r)
{
    if (r == NULL)
        return;
    req_drop_results(r);
    if (r->timer != NULL)
        event_free(r->timer);
    qn__arena_free(&r->arena);
    free(r);
}

/* Records the first failure of r (texts copied above inputs_end). */
static void req_error(qn_store_req *r, int code, int step, const char *sqlstate,
                      const char *msg)
{
    if (r->err != QN_OK)
        return;
    r->err = code;
    r->err_step = step;
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
    req_error(r, code, step, state, human);
}

/* Runs the callback of r once. r stays where it is; the caller frees it. */
static void deliver(qn_store_req *r)
{
    qn_store *st = r->st;
    if (r->internal) {
        r->finish(r, NULL);
        return;
    }
    struct qn_store_status s = {r->err, "", ""};
    if (r->err != QN_OK) {
        s.sqlstate = r->err_state ? r->err_state : "";
        s.message = r->err_msg ? r->err_msg : qn_strerror(r->err);
    }
    st->stats.calls++;
    if (r->finish == NULL)
        return;
    r->in_callback = true;
    r->finish(r, &s);
    r->in_callback = false;
}

/* Fails r now with code (QUEUED or SENT requests keep their place: callers move
 * them). Marks it abandoned so that nothing is delivered twice. */
static void deliver_error(qn_store_req *r, int code, const char *msg)
{
    if (r->abandoned)
        return;
    r->abandoned = true;
    req_drop_results(r);
    r->err = QN_OK;
    req_error(r, code, -1, "", msg);
    deliver(r);
}

static void kick(qn_store *st)
{
    if (!st->closing)
        event_active(st->kick, EV_TIMEOUT, 1);
}

static void req_requeue(qn_store_req *r)
{
    qn_store *st = r->st;
    req_drop_results(r);
    qn__arena_rewind(&r->arena, r->inputs_end);
    r->items = NULL;
    r->res = NULL;
    r->err = QN_OK;
    r->err_step = -1;
    r->err_state = r->err_msg = NULL;
    r->conn = NULL;
    r->state = REQ_QUEUED;
    TAILQ_INSERT_HEAD(&st->waiting, r, link);
    st->nwaiting++;
    st->stats.retries++;
    kick(st);
}

static void fail_waiting(qn_store *st, int code, const char *msg)
{
    qn_store_req *r;
    while ((r = TAILQ_FIRST(&st->waiting)) != NULL && !st->closing) {
        TAILQ_REMOVE(&st->waiting, r, link);
        st->nwaiting--;
        r->state = REQ_DONE;
        deliver_error(r, code, msg);
        req_free(r);
    }
}

static void fail_waiting_if_down(qn_store *st)
{
    if (!any_alive(st))
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

/* Asks the server to cancel whatever c's backend runs now (see the file comment). */
static int conn_cancel(struct conn *c)
{
    if (c->pg == NULL || c->state == CONN_CONNECTING)
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

/* r was just abandoned: cancel it in the server when it is running there. */
static void abandon_sent(qn_store_req *r)
{
    struct conn *c = r->conn;
    if (c != NULL && TAILQ_FIRST(&c->inflight) == r)
        (void)conn_cancel(c);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    qn_store_req *r = arg;
    qn_store *st = r->st;
    (void)fd;
    (void)what;
    enter(st);
    if (r->state == REQ_QUEUED) {
        TAILQ_REMOVE(&st->waiting, r, link);
        st->nwaiting--;
        r->state = REQ_DONE;
        deliver_error(r, QN_ETIMEOUT, "deadline passed before the call was sent");
        req_free(r);
    } else if (r->state == REQ_SENT && !r->abandoned) {
        abandon_sent(r);
        deliver_error(r, QN_ETIMEOUT, "deadline passed");
        /* freed when its sync arrives (or its connection goes) */
    }
    leave(st);
}

void qn_store_cancel(qn_store_req *r)
{
    if (r == NULL || r->in_callback || r->abandoned)
        return;
    qn_store *st = r->st;
    switch (r->state) {
    case REQ_QUEUED:
        TAILQ_REMOVE(&st->waiting, r, link);
        st->nwaiting--;
        req_free(r);
        break;
    case REQ_SENT:
        r->abandoned = true;
        if (r->timer != NULL)
            event_del(r->timer);
        abandon_sent(r);
        break;
    case REQ_BUILDING:
    case REQ_DONE:
        break;
    }
}

/* ---------------------------------------------------------------- sending */

static int req_send(struct conn *c, qn_store_req *r)
{
    PGconn *pg = c->pg;
    qn_store *st = c->st;
    for (int i = 0; i < r->nsteps; i++) {
        struct qn__step *s = &r->steps[i];
        if (s->stmt >= 0) {
            const struct qn__stmt *d = stmt_def(st, s->stmt);
            if (d == NULL)
                return QN_EINTERNAL;
            if (!c->prepared[s->stmt]) {
                if (!PQsendPrepare(pg, d->name, d->sql, d->nparams, (const Oid *)d->types))
                    return QN_EUNAVAILABLE;
                c->prepared[s->stmt] = 1;
                r->items[r->nitems++] = (struct item){ITEM_PREPARE, -1, (int16_t)s->stmt};
            }
            if (!PQsendQueryPrepared(pg, d->name, s->p.n, s->p.values, s->p.lengths,
                                     s->p.formats, s->result_format))
                return QN_EUNAVAILABLE;
        } else {
            if (!PQsendQueryParams(pg, s->sql, s->p.n, (const Oid *)s->types, s->p.values,
                                   s->p.lengths, s->p.formats, s->result_format))
                return QN_EUNAVAILABLE;
        }
        r->items[r->nitems++] = (struct item){ITEM_EXEC, (int16_t)i, -1};
        if (!r->internal)
            st->stats.statements++;
    }
    if (!PQpipelineSync(pg))
        return QN_EUNAVAILABLE;
    r->items[r->nitems++] = (struct item){ITEM_SYNC, -1, -1};
    if (!r->internal)
        st->stats.round_trips++;
    return QN_OK;
}

/* Puts r on c's pipeline. On QN_ENOMEM r is left alone (not in any list);
 * QN_EUNAVAILABLE means c failed (r was failed with it). */
static int conn_submit(struct conn *c, qn_store_req *r)
{
    qn_store *st = c->st;
    r->items = qn__arena_alloc(&r->arena, sizeof *r->items * (size_t)(2 * r->nsteps + 1));
    r->res = qn__arena_zalloc(&r->arena, sizeof *r->res * (size_t)r->nsteps);
    if (r->items == NULL || r->res == NULL) {
        r->items = NULL;
        r->res = NULL;
        return QN_ENOMEM;
    }
    r->nitems = 0;
    r->cur = 0;
    r->cur_got = false;
    r->conn = c;
    r->state = REQ_SENT;
    r->cancel_seq = c->cancel_seq;
    TAILQ_INSERT_TAIL(&c->inflight, r, link);
    c->ninflight++;
    if (!r->internal) {
        st->in_flight++;
        if ((uint32_t)c->ninflight > st->stats.in_flight_peak)
            st->stats.in_flight_peak = (uint32_t)c->ninflight;
    }
    int rc = req_send(c, r);
    if (rc != QN_OK) {
        conn_fail(c, PQerrorMessage(c->pg));
        return QN_EUNAVAILABLE;
    }
    return QN_OK;
}

static void conn_flush(struct conn *c)
{
    int rc = PQflush(c->pg);
    if (rc < 0) {
        conn_fail(c, PQerrorMessage(c->pg));
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

/* The ready connection with the fewest calls in flight and a free slot. */
static struct conn *pick(qn_store *st)
{
    struct conn *best = NULL;
    for (int i = 0; i < st->cfg.pool_size; i++) {
        struct conn *c = &st->conns[i];
        if (c->state != CONN_READY || c->ninflight >= st->cfg.pipeline_depth)
            continue;
        if (best == NULL || c->ninflight < best->ninflight)
            best = c;
    }
    return best;
}

static void conn_drain(struct conn *c);

static void dispatch(qn_store *st)
{
    bool sent[POOL_MAX] = {false};
    qn_store_req *r;
    while (!st->closing && (r = TAILQ_FIRST(&st->waiting)) != NULL) {
        struct conn *c = pick(st);
        if (c == NULL)
            break;
        TAILQ_REMOVE(&st->waiting, r, link);
        st->nwaiting--;
        int rc = conn_submit(c, r);
        if (rc == QN_ENOMEM) {
            r->state = REQ_DONE;
            deliver_error(r, QN_ENOMEM, "out of memory");
            req_free(r);
            continue;
        }
        if (rc == QN_OK)
            sent[c->idx] = true;
    }
    /* flush, then read: PQflush may have pulled input into libpq's buffer, which
     * the socket will not signal again */
    for (int i = 0; i < st->cfg.pool_size && !st->closing; i++) {
        struct conn *c = &st->conns[i];
        if (!sent[i] || c->pg == NULL)
            continue;
        conn_flush(c);
        if (c->pg != NULL && !st->closing)
            conn_drain(c);
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    qn_store *st = arg;
    (void)fd;
    (void)what;
    enter(st);
    dispatch(st);
    leave(st);
}

/* ---------------------------------------------------------------- receiving */

/* r's sync arrived: retry, decode and deliver, or drop. r is out of inflight. */
static void req_synced(struct conn *c, qn_store_req *r)
{
    qn_store *st = c->st;
    if (!r->internal)
        st->in_flight--;
    r->conn = NULL;
    if (r->abandoned) {
        r->state = REQ_DONE;
        req_free(r);
        return;
    }
    if (r->err == QN_ECONFLICT && r->conflict_retries < st->cfg.conflict_retries) {
        r->conflict_retries++;
        req_requeue(r);
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
        req_requeue(r);
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
        /* a cancel aimed at a neighbour hit this call: it failed, so retry */
        r->stray_retried++;
        req_requeue(r);
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
    r->state = REQ_DONE;
    deliver(r);
    req_free(r);
}

/*
 * Reads every result available without blocking and routes it to the head
 * request's current item (invariant 3).
 */
static void conn_drain(struct conn *c)
{
    qn_store *st = c->st;
    while (c->pg != NULL && !st->closing && !TAILQ_EMPTY(&c->inflight)) {
        if (PQstatus(c->pg) == CONNECTION_BAD) {
            conn_fail(c, PQerrorMessage(c->pg));
            return;
        }
        if (PQisBusy(c->pg))
            return;
        qn_store_req *r = TAILQ_FIRST(&c->inflight);
        assert(r->cur < r->nitems);
        struct item *it = &r->items[r->cur];
        PGresult *res = PQgetResult(c->pg);
        if (it->kind == ITEM_SYNC) {
            ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
            if (s != PGRES_PIPELINE_SYNC) {
                bool bad = PQstatus(c->pg) == CONNECTION_BAD;
                if (res != NULL)
                    req_error_res(r, res, -1, bad);
                PQclear(res);
                conn_fail(c, bad ? PQerrorMessage(c->pg) : "pipeline out of step");
                return;
            }
            PQclear(res);
            TAILQ_REMOVE(&c->inflight, r, link);
            c->ninflight--;
            req_synced(c, r);
            continue;
        }
        if (res == NULL) {
            if (!r->cur_got) {
                conn_fail(c, "pipeline out of step");
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
            if (it->kind == ITEM_EXEC && r->res[it->step] == NULL) {
                r->res[it->step] = res;
                res = NULL;
            }
            break;
        case PGRES_PIPELINE_ABORTED:
            /* an earlier error of this sync skipped the Parse: it never happened */
            if (it->kind == ITEM_PREPARE)
                c->prepared[it->stmt] = 0;
            break;
        case PGRES_FATAL_ERROR:
        case PGRES_NONFATAL_ERROR:
        case PGRES_BAD_RESPONSE:
            if (it->kind == ITEM_PREPARE) {
                /* 42P05: another call's Parse got there first; it exists */
                const char *ss = PQresultErrorField(res, PG_DIAG_SQLSTATE);
                c->prepared[it->stmt] = ss != NULL && strcmp(ss, "42P05") == 0;
            }
            req_error_res(r, res, it->kind == ITEM_EXEC ? it->step : -1,
                          PQstatus(c->pg) == CONNECTION_BAD);
            break;
        default:
            req_error(r, QN_EPROTOCOL_DB, it->step, "", "unexpected result status");
            break;
        }
        PQclear(res);
    }
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    qn_store *st = c->st;
    (void)fd;
    enter(st);
    if ((what & EV_READ) && !PQconsumeInput(c->pg)) {
        conn_fail(c, PQerrorMessage(c->pg));
        goto out;
    }
    conn_drain(c);
    if (c->pg == NULL || st->closing)
        goto out;
    if (c->idx < 0) {
        PGnotify *n;
        while (c->pg != NULL && !st->closing && (n = PQnotifies(c->pg)) != NULL) {
            if (st->listen_cb != NULL && n->extra != NULL)
                st->listen_cb(st->listen_ud, n->extra);
            PQfreemem(n);
        }
        if (c->pg == NULL || st->closing)
            goto out;
    }
    if (c->want_write || (what & EV_WRITE)) {
        conn_flush(c);
        if (c->pg != NULL && !st->closing)
            conn_drain(c);
    }
    if (c->pg != NULL && !st->closing && PQstatus(c->pg) == CONNECTION_BAD) {
        conn_fail(c, PQerrorMessage(c->pg));
        goto out;
    }
    if (!st->closing && !TAILQ_EMPTY(&st->waiting))
        dispatch(st);
out:
    leave(st);
}

/* ---------------------------------------------------------------- connections */

/* Releases libpq and the events; requests in flight are left to the caller. */
static void conn_close(struct conn *c)
{
    if (c->io != NULL) {
        event_free(c->io);
        c->io = NULL;
    }
    if (c->rev != NULL) {
        event_free(c->rev);
        c->rev = NULL;
    }
    if (c->wev != NULL) {
        event_free(c->wev);
        c->wev = NULL;
    }
    if (c->timer != NULL)
        event_del(c->timer);
    c->want_write = false;
    if (c->pg != NULL) {
        PQfinish(c->pg);
        c->pg = NULL;
    }
    c->state = CONN_IDLE;
    memset(c->prepared, 0, sizeof c->prepared);
}

static bool conn_wanted(const struct conn *c)
{
    return c->idx >= 0 || c->st->listen_cb != NULL;
}

static void schedule_reconnect(struct conn *c)
{
    qn_store *st = c->st;
    if (!conn_wanted(c))
        return;
    if (c->backoff_ms == 0)
        c->backoff_ms = st->cfg.reconnect_min_ms;
    else if (c->backoff_ms < st->cfg.reconnect_max_ms / 2)
        c->backoff_ms *= 2;
    else
        c->backoff_ms = st->cfg.reconnect_max_ms;
    set_timer(c->timer, c->backoff_ms);
}

static void conn_fail(struct conn *c, const char *why)
{
    qn_store *st = c->st;
    char msg[256];
    snprintf(msg, sizeof msg, "database connection lost: %s", why && *why ? why : "closed");
    msg[strcspn(msg, "\n")] = '\0';
    conn_close(c);
    qn_store_req *r;
    while ((r = TAILQ_FIRST(&c->inflight)) != NULL) {
        TAILQ_REMOVE(&c->inflight, r, link);
        c->ninflight--;
        if (!r->internal)
            st->in_flight--;
        r->conn = NULL;
        r->state = REQ_DONE;
        /* whatever the call saw before, it may or may not have committed */
        if (!r->internal && !r->abandoned)
            deliver_error(r, QN_EUNAVAILABLE, msg);
        req_free(r);
        if (st->closing)
            return;
    }
    c->ninflight = 0;
    schedule_reconnect(c);
    update_up(st);
    if (!st->closing)
        fail_waiting_if_down(st);
}

static void setup_done(qn_store_req *r, const struct qn_store_status *unused)
{
    struct conn *c = r->ud;
    qn_store *st = c->st;
    (void)unused;
    if (r->err != QN_OK) {
        conn_fail(c, r->err_msg);
        return;
    }
    c->state = CONN_READY;
    c->backoff_ms = 0;
    event_del(c->timer);
    if (c->idx >= 0) {
        update_up(st);
        kick(st);
    }
}

static void conn_connected(struct conn *c)
{
    qn_store *st = c->st;
    qn_store_req *r = NULL;
    char sql[64];
    if (c->io != NULL) {
        event_free(c->io);
        c->io = NULL;
    }
    int fd = PQsocket(c->pg);
    if (PQsetnonblocking(c->pg, 1) != 0 || !PQenterPipelineMode(c->pg) || fd < 0) {
        conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    PQsetNoticeProcessor(c->pg, silent_notice, NULL);
    c->rev = event_new(st->base, fd, EV_READ | EV_PERSIST, on_io, c);
    c->wev = event_new(st->base, fd, EV_WRITE | EV_PERSIST, on_io, c);
    if (c->rev == NULL || c->wev == NULL || event_add(c->rev, NULL) != 0)
        goto fail;
    c->state = CONN_SETUP;

    /* the session's settings, in the pipeline: one round trip, results ignored
     * unless they fail */
    int nsteps = c->idx < 0 ? 2 : 1;
    if (qn__req_new(st, nsteps, NULL, &r) != QN_OK)
        goto fail;
    r->internal = true;
    snprintf(sql, sizeof sql, "SET statement_timeout = %d", st->cfg.stmt_timeout_ms);
    const char *sqls[2] = {sql, "LISTEN queen_push"};
    for (int i = 0; i < nsteps; i++) {
        struct qn__step *s = &r->steps[r->nsteps++];
        s->stmt = -1;
        s->sql = qn__arena_strdup(&r->arena, sqls[i]);
        s->result_format = 0;
        if (s->sql == NULL || qn__params_init(&s->p, &r->arena, 0) != QN_OK)
            goto fail;
    }
    r->finish = setup_done;
    r->ud = c;
    r->inputs_end = qn__arena_mark(&r->arena);
    int rc = conn_submit(c, r);
    if (rc == QN_ENOMEM)
        goto fail;
    r = NULL; /* owned by the connection now (or failed with it) */
    if (c->pg != NULL)
        conn_flush(c);
    return;
fail:
    req_free(r);
    conn_fail(c, "cannot set up the session");
}

static void poll_wait(struct conn *c, PostgresPollingStatusType how)
{
    if (c->io != NULL) {
        event_free(c->io);
        c->io = NULL;
    }
    int fd = PQsocket(c->pg);
    if (fd < 0) {
        conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    c->io = event_new(c->st->base, fd, how == PGRES_POLLING_READING ? EV_READ : EV_WRITE,
                      on_connect, c);
    if (c->io == NULL || event_add(c->io, NULL) != 0)
        conn_fail(c, "out of memory");
}

static void on_connect(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    qn_store *st = c->st;
    (void)fd;
    (void)what;
    enter(st);
    switch (PQconnectPoll(c->pg)) {
    case PGRES_POLLING_READING:
        poll_wait(c, PGRES_POLLING_READING);
        break;
    case PGRES_POLLING_WRITING:
        poll_wait(c, PGRES_POLLING_WRITING);
        break;
    case PGRES_POLLING_OK:
        conn_connected(c);
        break;
    default:
        conn_fail(c, PQerrorMessage(c->pg));
        break;
    }
    leave(st);
}

static void on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    qn_store *st = c->st;
    (void)fd;
    (void)what;
    enter(st);
    if (!conn_wanted(c)) {
        /* the listener was stopped: it has only internal requests in flight */
        qn_store_req *r;
        conn_close(c);
        while ((r = TAILQ_FIRST(&c->inflight)) != NULL) {
            TAILQ_REMOVE(&c->inflight, r, link);
            c->ninflight--;
            req_free(r);
        }
    } else if (c->state == CONN_IDLE) {
        conn_start(c);
    } else if (c->state != CONN_READY) {
        conn_fail(c, "timed out connecting");
    }
    leave(st);
}

/*
 * Starts connecting. Note: with a host name (not hostaddr) libpq resolves it
 * synchronously inside PQconnectPoll; deployments that cannot afford a blocking
 * DNS lookup on the loop give an address.
 */
static void conn_start(struct conn *c)
{
    qn_store *st = c->st;
    const char *kw[] = {"application_name", "dbname", NULL};
    const char *val[] = {"queen", st->conninfo, NULL};
    if (c->started)
        st->stats.reconnects++;
    c->started = true;
    c->pg = PQconnectStartParams(kw, val, 1);
    if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
        conn_fail(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
        return;
    }
    c->state = CONN_CONNECTING;
    set_timer(c->timer, CONNECT_TIMEOUT_MS);
    poll_wait(c, PGRES_POLLING_WRITING);
}

static int conn_init(qn_store *st, struct conn *c, int idx)
{
    memset(c, 0, sizeof *c);
    c->st = st;
    c->idx = idx;
    c->state = CONN_IDLE;
    TAILQ_INIT(&c->inflight);
    c->timer = evtimer_new(st->base, on_conn_timer, c);
    return c->timer ? QN_OK : QN_ENOMEM;
}

/* ---------------------------------------------------------------- lifecycle */

void qn_store_config_defaults(struct qn_store_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->pool_size = 8;
    cfg->pipeline_depth = 16;
    cfg->stmt_timeout_ms = 30000;
    cfg->max_waiting = 100000;
    cfg->conflict_retries = 3;
    cfg->reconnect_min_ms = 100;
    cfg->reconnect_max_ms = 5000;
}

static bool config_ok(const struct qn_store_config *c)
{
    if (c->conninfo == NULL || c->pool_size < 1 || c->pool_size > POOL_MAX ||
        c->pipeline_depth < 1 || c->pipeline_depth > DEPTH_MAX || c->stmt_timeout_ms <= 0 ||
        c->max_waiting < 0 || c->conflict_retries < 0 || c->reconnect_min_ms <= 0 ||
        c->reconnect_max_ms < c->reconnect_min_ms)
        return false;
    char *err = NULL;
    PQconninfoOption *o = PQconninfoParse(c->conninfo, &err);
    if (err != NULL)
        PQfreemem(err);
    if (o == NULL)
        return false;
    PQconninfoFree(o);
    return true;
}

int qn_store_new(struct event_base *base, const struct qn_store_config *cfg, qn_store **out)
{
    if (base == NULL || cfg == NULL || out == NULL || !config_ok(cfg))
        return QN_EINVAL;
    qn_store *st = calloc(1, sizeof *st);
    if (st == NULL)
        return QN_ENOMEM;
    st->base = base;
    st->cfg = *cfg;
    TAILQ_INIT(&st->waiting);
    TAILQ_INIT(&st->dead);
    st->conninfo = strdup(cfg->conninfo);
    st->cfg.conninfo = st->conninfo;
    st->conns = calloc((size_t)cfg->pool_size, sizeof *st->conns);
    st->kick = event_new(base, -1, 0, on_kick, st);
    if (st->conninfo == NULL || st->conns == NULL || st->kick == NULL)
        goto fail;
    for (int i = 0; i < cfg->pool_size; i++)
        if (conn_init(st, &st->conns[i], i) != QN_OK)
            goto fail;
    if (conn_init(st, &st->listener, -1) != QN_OK)
        goto fail;
    for (int i = 0; i < cfg->pool_size; i++)
        conn_start(&st->conns[i]); /* no state observer yet: runs no callback */
    *out = st;
    return QN_OK;
fail:
    destroy(st);
    return QN_ENOMEM;
}

/* Delivers QN_ESHUTDOWN to every pending call and parks them on st->dead. */
static void shutdown_all(qn_store *st)
{
    qn_store_req *r;
    while ((r = TAILQ_FIRST(&st->waiting)) != NULL) {
        TAILQ_REMOVE(&st->waiting, r, link);
        st->nwaiting--;
        TAILQ_INSERT_TAIL(&st->dead, r, link);
        r->state = REQ_DONE;
        deliver_error(r, QN_ESHUTDOWN, "the store is shutting down");
    }
    for (int i = -1; st->conns != NULL && i < st->cfg.pool_size; i++) {
        struct conn *c = i < 0 ? &st->listener : &st->conns[i];
        while ((r = TAILQ_FIRST(&c->inflight)) != NULL) {
            TAILQ_REMOVE(&c->inflight, r, link);
            c->ninflight--;
            TAILQ_INSERT_TAIL(&st->dead, r, link);
            r->state = REQ_DONE;
            r->conn = NULL;
            if (!r->internal)
                deliver_error(r, QN_ESHUTDOWN, "the store is shutting down");
        }
    }
}

static void destroy(qn_store *st)
{
    qn_store_req *r;
    if (st->conns != NULL) {
        for (int i = -1; i < st->cfg.pool_size; i++) {
            struct conn *c = i < 0 ? &st->listener : &st->conns[i];
            if (c->st == NULL)
                continue;
            conn_close(c);
            while ((r = TAILQ_FIRST(&c->inflight)) != NULL) {
                TAILQ_REMOVE(&c->inflight, r, link);
                req_free(r);
            }
            if (c->timer != NULL)
                event_free(c->timer);
        }
    }
    while ((r = TAILQ_FIRST(&st->waiting)) != NULL) {
        TAILQ_REMOVE(&st->waiting, r, link);
        req_free(r);
    }
    while ((r = TAILQ_FIRST(&st->dead)) != NULL) {
        TAILQ_REMOVE(&st->dead, r, link);
        req_free(r);
    }
    for (int i = 0; i < st->ndyn; i++) {
        free(st->dyn[i].name);
        free(st->dyn[i].sql);
    }
    if (st->kick != NULL)
        event_free(st->kick);
    free(st->conns);
    free(st->conninfo);
    free(st);
}

void qn_store_free(qn_store *st)
{
    if (st == NULL || st->closing)
        return;
    st->closing = true;
    enter(st);
    shutdown_all(st);
    leave(st); /* destroys unless a handler is running: then its leave() does */
}

bool qn_store_is_up(const qn_store *st)
{
    return st != NULL && st->up;
}

void qn_store_on_state(qn_store *st, void (*cb)(void *ud, bool up), void *ud)
{
    st->state_cb = cb;
    st->state_ud = ud;
}

void qn_store_get_stats(const qn_store *st, struct qn_store_stats *out)
{
    *out = st->stats;
    out->connections_up = 0;
    for (int i = 0; i < st->cfg.pool_size; i++)
        if (st->conns[i].state == CONN_READY)
            out->connections_up++;
    out->waiting = (uint32_t)st->nwaiting;
    out->in_flight = st->in_flight;
}

int qn_store_listen_push(qn_store *st, void (*cb)(void *ud, const char *payload), void *ud)
{
    if (st == NULL)
        return QN_EINVAL;
    if (st->closing)
        return QN_ESHUTDOWN;
    bool was = st->listen_cb != NULL;
    st->listen_cb = cb;
    st->listen_ud = ud;
    struct conn *c = &st->listener;
    if (cb != NULL && !was && c->state == CONN_IDLE) {
        c->backoff_ms = 0;
        event_del(c->timer);
        conn_start(c); /* its failure runs no user callback: the listener has none */
    } else if (cb == NULL && was) {
        /* stopping; maybe inside this connection's own handler: close on the
         * next loop pass (on_conn_timer) */
        set_timer(c->timer, 0);
    }
    return QN_OK;
}

/* ---------------------------------------------------------------- building calls */

int qn__req_new(qn_store *st, int nsteps, const struct qn_call_opts *opts, qn_store_req **out)
{
    if (st == NULL || nsteps < 1 || nsteps > MAX_STEPS)
        return QN_EINVAL;
    if (st->closing)
        return QN_ESHUTDOWN;
    qn_store_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return QN_ENOMEM;
    r->st = st;
    r->state = REQ_BUILDING;
    r->err_step = -1;
    qn__arena_init(&r->arena, REQ_ARENA_MAX);
    r->steps = qn__arena_zalloc(&r->arena, sizeof *r->steps * (size_t)nsteps);
    if (r->steps == NULL) {
        req_free(r);
        return QN_ENOMEM;
    }
    r->capsteps = nsteps;
    r->deadline_ms = opts ? opts->deadline_ms : 0;
    memcpy(r->tenant, (opts && opts->tenant) ? opts->tenant : qn__default_tenant, 16);
    *out = r;
    return QN_OK;
}

struct qn__step *qn__req_add(qn_store_req *r, int stmt, qn__decode_fn decode)
{
    if (r->nsteps >= r->capsteps)
        return NULL;
    const struct qn__stmt *d = stmt_def(r->st, stmt);
    if (d == NULL)
        return NULL;
    struct qn__step *s = &r->steps[r->nsteps++];
    memset(s, 0, sizeof *s);
    s->stmt = stmt;
    s->result_format = 1;
    s->decode = decode;
    qn__params_init(&s->p, &r->arena, d->nparams);
    return s;
}

void qn__req_pop_step(qn_store_req *r)
{
    if (r->nsteps > 0)
        r->nsteps--;
}

struct qn__arena *qn__req_arena(qn_store_req *r)
{
    return &r->arena;
}

struct qn__step *qn__req_steps(qn_store_req *r, int *n)
{
    *n = r->nsteps;
    return r->steps;
}

const uint8_t *qn__req_tenant(const qn_store_req *r)
{
    return r->tenant;
}

void qn__req_set_tenant(qn_store_req *r, const uint8_t *tenant)
{
    memcpy(r->tenant, tenant ? tenant : qn__default_tenant, 16);
}

void qn__req_set_deadline(qn_store_req *r, int64_t deadline_ms)
{
    r->deadline_ms = deadline_ms;
}

void qn__req_set_finish(qn_store_req *r, qn__finish_fn fin, qn__anyfn cb, void *ud)
{
    r->finish = fin;
    r->cb = cb;
    r->ud = ud;
}

qn__anyfn qn__req_cb(const qn_store_req *r)
{
    return r->cb;
}

void *qn__req_ud(const qn_store_req *r)
{
    return r->ud;
}

int qn__req_failed_step(const qn_store_req *r)
{
    return r->err != QN_OK ? r->err_step : -1;
}

void *qn__req_out(const qn_store_req *r, int i)
{
    return (i >= 0 && i < r->nsteps) ? r->steps[i].out : NULL;
}

void qn__req_discard(qn_store_req *r)
{
    req_free(r);
}

int qn__req_submit(qn_store_req *r, qn_store_req **req)
{
    qn_store *st = r->st;
    int rc = QN_OK;
    if (r->nsteps < 1)
        rc = QN_EINVAL;
    for (int i = 0; rc == QN_OK && i < r->nsteps; i++)
        rc = r->steps[i].p.err;
    if (rc == QN_OK && st->closing)
        rc = QN_ESHUTDOWN;
    if (rc == QN_OK && !any_alive(st))
        rc = QN_EUNAVAILABLE;
    if (rc == QN_OK && st->nwaiting >= st->cfg.max_waiting)
        rc = QN_EBUSY;
    if (rc == QN_OK && r->deadline_ms > 0) {
        r->timer = evtimer_new(st->base, on_deadline, r);
        if (r->timer == NULL)
            rc = QN_ENOMEM;
        else
            set_timer(r->timer, r->deadline_ms - qn_store_now_ms());
    }
    if (rc != QN_OK) {
        req_free(r);
        return rc;
    }
    r->inputs_end = qn__arena_mark(&r->arena);
    r->state = REQ_QUEUED;
    TAILQ_INSERT_TAIL(&st->waiting, r, link);
    st->nwaiting++;
    kick(st);
    if (req != NULL)
        *req = r;
    return QN_OK;
}

/* ---------------------------------------------------------------- shared decoders */

void qn__finish_int(qn_store_req *r, const struct qn_store_status *st)
{
    qn_int_cb cb = (qn_int_cb)r->cb;
    const int64_t *v = r->steps[0].out;
    if (cb != NULL)
        cb(r->ud, st, (st->code == QN_OK && v) ? *v : 0);
}

void qn__finish_bool(qn_store_req *r, const struct qn_store_status *st)
{
    qn_bool_cb cb = (qn_bool_cb)r->cb;
    const bool *v = r->steps[0].out;
    if (cb != NULL)
        cb(r->ud, st, (st->code == QN_OK && v) ? *v : false);
}

int qn__decode_scalar_int(qn_store_req *r, int step, const PGresult *res)
{
    if (PQnfields(res) != 1 || PQntuples(res) != 1 || PQfformat(res, 0) != 1)
        return QN_EPROTOCOL_DB;
    struct qn__row w = {res, 0, &r->arena, QN_OK, -1};
    int64_t *out = qn__arena_alloc(&r->arena, sizeof *out);
    if (out == NULL)
        return QN_ENOMEM;
    switch (PQftype(res, 0)) {
    case QN_OID_INT2:
        *out = qn__row_isnull(&w, 0) ? 0 : qn__row_i16(&w, 0);
        break;
    case QN_OID_INT4:
        *out = qn__row_i32_or(&w, 0, 0);
        break;
    case QN_OID_INT8:
        *out = qn__row_i64_or(&w, 0, 0);
        break;
    default:
        return QN_EPROTOCOL_DB;
    }
    r->steps[step].out = out;
    return w.err;
}

int qn__decode_scalar_bool(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[1] = {QN_OID_BOOL};
    if (qn__res_shape(res, 1, t) != QN_OK || PQntuples(res) != 1)
        return QN_EPROTOCOL_DB;
    struct qn__row w = {res, 0, &r->arena, QN_OK, -1};
    bool *out = qn__arena_alloc(&r->arena, sizeof *out);
    if (out == NULL)
        return QN_ENOMEM;
    *out = qn__row_bool_or(&w, 0, false);
    r->steps[step].out = out;
    return w.err;
}

int qn__decode_void(qn_store_req *r, int step, const PGresult *res)
{
    (void)r;
    (void)step;
    return PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK
               ? QN_OK
               : QN_EPROTOCOL_DB;
}

/* ---------------------------------------------------------------- tests, benches */

int qn__store_register(qn_store *st, const char *name, const char *sql, int nparams,
                       const uint32_t *types)
{
    if (st == NULL || name == NULL || sql == NULL || nparams < 0 ||
        nparams > QN_STMT_MAX_PARAMS || (nparams > 0 && types == NULL))
        return QN_EINVAL;
    if (st->ndyn >= QN_STMT_DYN_MAX)
        return QN_ELIMIT;
    struct dyn_stmt *d = &st->dyn[st->ndyn];
    d->name = strdup(name);
    d->sql = strdup(sql);
    if (d->name == NULL || d->sql == NULL) {
        free(d->name);
        free(d->sql);
        d->name = d->sql = NULL;
        return QN_ENOMEM;
    }
    d->def.name = d->name;
    d->def.sql = d->sql;
    d->def.nparams = nparams;
    for (int i = 0; i < nparams; i++)
        d->def.types[i] = types[i];
    return QN_STMT_COUNT + st->ndyn++;
}

static int decode_raw(qn_store_req *r, int step, const PGresult *res)
{
    r->steps[step].out = (void *)res;
    return QN_OK;
}

static void finish_raw(qn_store_req *r, const struct qn_store_status *st)
{
    qn__sql_cb cb = (qn__sql_cb)r->cb;
    const PGresult *last = r->nsteps > 0 ? r->steps[r->nsteps - 1].out : NULL;
    if (cb != NULL)
        cb(r->ud, st, st->code == QN_OK ? last : NULL);
}

int qn__store_sql_many(qn_store *st, int nstmts, const int *stmt, const char *const *sql,
                       const uint32_t *const *types, const struct qn__params *params,
                       const struct qn_call_opts *opts, qn__sql_cb cb, void *ud,
                       qn_store_req **req)
{
    qn_store_req *r = NULL;
    int rc = qn__req_new(st, nstmts, opts, &r);
    if (rc != QN_OK)
        return rc;
    for (int i = 0; i < nstmts; i++) {
        struct qn__step *s = &r->steps[r->nsteps++];
        const struct qn__params *in = &params[i];
        s->stmt = stmt ? stmt[i] : -1;
        s->result_format = 1;
        s->decode = decode_raw;
        if (s->stmt >= 0) {
            const struct qn__stmt *d = stmt_def(st, s->stmt);
            if (d == NULL || d->nparams != in->n) {
                req_free(r);
                return QN_EINVAL;
            }
        } else {
            s->sql = qn__arena_strdup(&r->arena, sql[i]);
            if (in->n > 0)
                s->types = qn__arena_memdup(&r->arena, types[i], sizeof(uint32_t) * (size_t)in->n);
            if (s->sql == NULL || (in->n > 0 && s->types == NULL)) {
                req_free(r);
                return QN_ENOMEM;
            }
        }
        qn__params_init(&s->p, &r->arena, in->n);
        if (in->err != QN_OK)
            s->p.err = in->err;
        for (int k = 0; k < in->n && s->p.err == QN_OK; k++) {
            if (in->values[k] == NULL)
                continue;
            if (in->formats[k] == 0) {
                qn__p_textfmt(&s->p, k, in->values[k]);
            } else {
                qn__p_bytea(&s->p, k, in->values[k], (size_t)in->lengths[k]);
            }
        }
    }
    qn__req_set_finish(r, finish_raw, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn__store_sql(qn_store *st, int stmt, const char *sql, const uint32_t *types,
                  const struct qn__params *params, int result_format,
                  const struct qn_call_opts *opts, qn__sql_cb cb, void *ud, qn_store_req **req)
{
    struct qn__params none = {0};
    const char *sqls[1] = {sql};
    const uint32_t *tys[1] = {types};
    int stmts[1] = {stmt};
    qn_store_req *r = NULL;
    int rc = qn__store_sql_many(st, 1, stmts, sqls, tys, params ? params : &none, opts, cb, ud,
                                &r);
    if (rc == QN_OK) {
        r->steps[0].result_format = result_format;
        if (req != NULL)
            *req = r;
    }
    return rc;
}

int qn__store_cancel_current(qn_store *st, int idx)
{
    if (st == NULL || idx < 0 || idx >= st->cfg.pool_size)
        return QN_EINVAL;
    return conn_cancel(&st->conns[idx]);
}

int qn__store_backend_pid(const qn_store *st, int idx)
{
    if (st == NULL || idx < 0 || idx >= st->cfg.pool_size || st->conns[idx].pg == NULL)
        return 0;
    return PQbackendPID(st->conns[idx].pg);
}
