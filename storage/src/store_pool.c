/*
 * store_pool.c - the store and its pool of non-blocking libpq connections on
 * the caller's libevent loop: configuration, connect, session setup, the hang
 * detector, close and reconnect with backoff (see queen/store.h for the model,
 * store_engine.h for the connection lifecycle).
 *
 * Does:
 *   - connect with PQconnectStartParams/PQconnectPoll driven by socket events,
 *     with TCP keepalives and tcp_user_timeout set on every connection, then SET
 *     statement_timeout (and LISTEN for the listener) in the pipeline;
 *   - watch every connection that has calls in flight: no result for
 *     call_timeout_ms, or no answer within cancel_grace_ms to a server cancel
 *     sent for its head call, and the connection is hung: it is cancelled,
 *     closed (its calls resolved by store_engine.c), logged, and reconnected;
 *   - reconnect a lost connection with exponential backoff, and tell the state
 *     observer when "at least one connection is ready" changes.
 * Does not:
 *   - queue, send or read calls (store_engine.c), or LISTEN (store_listen.c);
 *   - retry a call of a lost connection (a write may have committed).
 *
 * Invariants:
 *   1. conn->pg is NULL exactly when the connection is IDLE; every state change
 *      goes through conn_set_state, which asserts the transition.
 *   2. A connection's watch timer is armed exactly while calls are in flight on
 *      it (qn__conn_watch after every change of its pipeline head).
 *   3. Handlers bracket their work with enter/leave; qn_store_free inside a
 *      callback only delivers QN_ESHUTDOWN and marks; memory goes when the
 *      outermost handler leaves. After any callback, loops check st->closing.
 *   4. Only pool connections (idx >= 0) count for qn_store_is_up(); the
 *      listener never carries a user call.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "queen/error.h"
#include "store_engine.h"

#define CONNECT_TIMEOUT_MS 10000
#define DEPTH_MAX 1024

static void on_connect(evutil_socket_t fd, short what, void *arg);
static void destroy(qn_store *st);

/* ---------------------------------------------------------------- small helpers */

int64_t qn_store_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void qn__store_enter(qn_store *st)
{
    st->busy++;
}

void qn__store_leave(qn_store *st)
{
    assert(st->busy > 0);
    if (--st->busy == 0 && st->closing)
        destroy(st);
}

const struct qn__stmt *qn__stmt_def(const qn_store *st, int id)
{
    if (id >= 0 && id < QN_STMT_COUNT)
        return &qn__stmts[id];
    if (st != NULL && id >= QN_STMT_COUNT && id < QN_STMT_COUNT + st->ndyn)
        return &st->dyn[id - QN_STMT_COUNT].def;
    return NULL;
}

void qn__set_timer(struct event *ev, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_add(ev, &tv);
}

void qn__store_log(const qn_store *st, int level, const char *fmt, ...)
{
    if (st->cfg.log == NULL)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    msg[strcspn(msg, "\n")] = '\0';
    st->cfg.log(st->cfg.log_ud, level, msg);
}

static void silent_notice(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

bool qn__pool_any_alive(const qn_store *st)
{
    for (int i = 0; i < st->cfg.pool_size; i++)
        if (st->conns[i].state != QN__CONN_IDLE)
            return true;
    return false;
}

static void update_up(qn_store *st)
{
    bool up = false;
    for (int i = 0; i < st->cfg.pool_size && !up; i++)
        up = st->conns[i].state == QN__CONN_READY;
    if (up == st->up)
        return;
    st->up = up;
    if (st->state_cb != NULL)
        st->state_cb(st->state_ud, up);
}

/* The only place a connection changes state (invariant 1). */
static void conn_set_state(struct qn__conn *c, enum qn__conn_state to)
{
    switch (to) {
    case QN__CONN_IDLE:
        assert(c->pg == NULL);
        break;
    case QN__CONN_CONNECTING:
        assert(c->state == QN__CONN_IDLE && c->pg != NULL);
        break;
    case QN__CONN_SETUP:
        assert(c->state == QN__CONN_CONNECTING && c->pg != NULL);
        break;
    case QN__CONN_READY:
        assert(c->state == QN__CONN_SETUP && c->pg != NULL);
        break;
    }
    c->state = to;
}

/* ---------------------------------------------------------------- closing */

void qn__conn_close(struct qn__conn *c)
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
    if (c->watch != NULL)
        event_del(c->watch);
    c->want_write = false;
    qn__own_backend_remove(c);
    if (c->pg != NULL) {
        PQfinish(c->pg);
        c->pg = NULL;
    }
    conn_set_state(c, QN__CONN_IDLE);
    memset(c->prepared, 0, sizeof c->prepared);
}

static bool conn_wanted(const struct qn__conn *c)
{
    return c->idx >= 0 || qn__listen_wanted(c->st);
}

static void schedule_reconnect(struct qn__conn *c)
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
    qn__set_timer(c->timer, c->backoff_ms);
}

void qn__conn_fail(struct qn__conn *c, const char *why)
{
    qn_store *st = c->st;
    char msg[256];
    snprintf(msg, sizeof msg, "database connection lost: %s", why && *why ? why : "closed");
    msg[strcspn(msg, "\n")] = '\0';
    qn__conn_close(c);
    qn__eng_conn_lost(c, msg);
    if (st->closing)
        return;
    schedule_reconnect(c);
    update_up(st);
    if (!st->closing)
        qn__eng_fail_waiting_if_down(st);
}

/* ---------------------------------------------------------------- hang detector */

void qn__conn_watch(struct qn__conn *c)
{
    qn_store *st = c->st;
    qn_store_req *head = TAILQ_FIRST(&c->inflight);
    if (head == NULL || c->pg == NULL) {
        event_del(c->watch);
        return;
    }
    int64_t due = c->progress_ms + st->cfg.call_timeout_ms;
    if (head->cancel_ms > 0 && head->cancel_ms + st->cfg.cancel_grace_ms < due)
        due = head->cancel_ms + st->cfg.cancel_grace_ms;
    qn__set_timer(c->watch, due - qn_store_now_ms());
}

/* The watch fired: the head call made no progress in time. The connection is
 * hung (silenced peer, stuck server, lost network without RST): cancel what the
 * server may still run, close, resolve the calls, reconnect. */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    struct qn__conn *c = arg;
    qn_store *st = c->st;
    (void)fd;
    (void)what;
    qn__store_enter(st);
    qn_store_req *head = TAILQ_FIRST(&c->inflight);
    int64_t now = qn_store_now_ms();
    if (head != NULL && c->pg != NULL) {
        int64_t due = c->progress_ms + st->cfg.call_timeout_ms;
        if (head->cancel_ms > 0 && head->cancel_ms + st->cfg.cancel_grace_ms < due)
            due = head->cancel_ms + st->cfg.cancel_grace_ms;
        if (now < due) {
            qn__conn_watch(c); /* progress since it was armed */
        } else {
            int pid = PQbackendPID(c->pg);
            const char *stmt = qn__req_current_stmt(head);
            qn__store_log(st, QN_STORE_LOG_WARN,
                          "database connection %d (backend pid %d) hung: no answer to %s "
                          "for %lld ms; closing it (calls in flight: %d)",
                          c->idx, pid, stmt, (long long)(now - c->progress_ms), c->ninflight);
            st->stats.hung++;
            (void)qn__eng_cancel_current(c);
            qn__conn_fail(c, "no answer from the server (connection hung)");
        }
    }
    qn__store_leave(st);
}

/* ---------------------------------------------------------------- connecting */

static void setup_done(qn_store_req *r, const struct qn_store_status *unused)
{
    struct qn__conn *c = r->ud;
    qn_store *st = c->st;
    (void)unused;
    if (r->err != QN_OK) {
        qn__conn_fail(c, r->err_msg);
        return;
    }
    conn_set_state(c, QN__CONN_READY);
    c->backoff_ms = 0;
    event_del(c->timer);
    if (c->idx >= 0) {
        update_up(st);
        qn__eng_kick(st);
    }
}

static void conn_connected(struct qn__conn *c)
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
        qn__conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    PQsetNoticeProcessor(c->pg, silent_notice, NULL);
    if (c->idx >= 0)
        qn__own_backend_add(c);
    c->rev = event_new(st->base, fd, EV_READ | EV_PERSIST, qn__eng_on_io, c);
    c->wev = event_new(st->base, fd, EV_WRITE | EV_PERSIST, qn__eng_on_io, c);
    if (c->rev == NULL || c->wev == NULL || event_add(c->rev, NULL) != 0)
        goto fail;
    conn_set_state(c, QN__CONN_SETUP);

    /* the session's settings, in the pipeline: one round trip, results ignored
     * unless they fail */
    int nsteps = c->idx < 0 ? 2 : 1;
    if (qn__req_new(st, nsteps, NULL, &r) != QN_OK)
        goto fail;
    r->internal = true;
    snprintf(sql, sizeof sql, "SET statement_timeout = %d", st->cfg.stmt_timeout_ms);
    const char *sqls[2] = {sql, qn__listen_setup_sql};
    for (int i = 0; i < nsteps; i++) {
        struct qn__step *s = qn__req_add_sql(r, sqls[i], NULL, 0);
        if (s == NULL)
            goto fail;
        s->result_format = 0;
    }
    r->finish = setup_done;
    r->ud = c;
    r->inputs_end = qn__arena_mark(&r->arena);
    int rc = qn__eng_submit(c, r);
    if (rc == QN_ENOMEM)
        goto fail;
    r = NULL; /* owned by the connection now (or failed with it) */
    if (c->pg != NULL)
        qn__eng_flush(c);
    return;
fail:
    qn__req_free(r);
    qn__conn_fail(c, "cannot set up the session");
}

static void poll_wait(struct qn__conn *c, PostgresPollingStatusType how)
{
    if (c->io != NULL) {
        event_free(c->io);
        c->io = NULL;
    }
    int fd = PQsocket(c->pg);
    if (fd < 0) {
        qn__conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    c->io = event_new(c->st->base, fd, how == PGRES_POLLING_READING ? EV_READ : EV_WRITE,
                      on_connect, c);
    if (c->io == NULL || event_add(c->io, NULL) != 0)
        qn__conn_fail(c, "out of memory");
}

static void on_connect(evutil_socket_t fd, short what, void *arg)
{
    struct qn__conn *c = arg;
    qn_store *st = c->st;
    (void)fd;
    (void)what;
    qn__store_enter(st);
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
        qn__conn_fail(c, PQerrorMessage(c->pg));
        break;
    }
    qn__store_leave(st);
}

static void on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
    struct qn__conn *c = arg;
    qn_store *st = c->st;
    (void)fd;
    (void)what;
    qn__store_enter(st);
    if (!conn_wanted(c)) {
        /* the listener was stopped: it has only internal requests in flight */
        qn_store_req *r;
        qn__conn_close(c);
        while ((r = TAILQ_FIRST(&c->inflight)) != NULL) {
            TAILQ_REMOVE(&c->inflight, r, link);
            c->ninflight--;
            qn__req_free(r);
        }
    } else if (c->state == QN__CONN_IDLE) {
        qn__conn_start(c);
    } else if (c->state != QN__CONN_READY) {
        qn__conn_fail(c, "timed out connecting");
    }
    qn__store_leave(st);
}

/*
 * Starts connecting. The keepalive parameters come before dbname, so that an
 * explicit setting in the connection string wins (libpq keeps the last value of
 * a repeated keyword, and expands dbname in place). Note: with a host name (not
 * hostaddr) libpq resolves it synchronously inside PQconnectPoll; deployments
 * that cannot afford a blocking DNS lookup on the loop give an address.
 */
void qn__conn_start(struct qn__conn *c)
{
    qn_store *st = c->st;
    const struct qn_store_config *g = &st->cfg;
    char idle[16], intvl[16], count[16], user[16];
    snprintf(idle, sizeof idle, "%d", g->keepalives_idle_s);
    snprintf(intvl, sizeof intvl, "%d", g->keepalives_interval_s);
    snprintf(count, sizeof count, "%d", g->keepalives_count);
    snprintf(user, sizeof user, "%d", g->tcp_user_timeout_ms);
    const char *kw[] = {
        "application_name", "keepalives",       "keepalives_idle", "keepalives_interval",
        "keepalives_count", "tcp_user_timeout", "dbname",          NULL};
    const char *val[] = {
        "queen", g->keepalives_idle_s > 0 ? "1" : "0", idle, intvl, count, user, st->conninfo,
        NULL};
    assert(c->state == QN__CONN_IDLE);
    if (c->started)
        st->stats.reconnects++;
    c->started = true;
    c->pg = PQconnectStartParams(kw, val, 1);
    if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
        qn__conn_fail(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
        return;
    }
    conn_set_state(c, QN__CONN_CONNECTING);
    qn__set_timer(c->timer, CONNECT_TIMEOUT_MS);
    poll_wait(c, PGRES_POLLING_WRITING);
}

static int conn_init(qn_store *st, struct qn__conn *c, int idx)
{
    memset(c, 0, sizeof *c);
    c->st = st;
    c->idx = idx;
    c->state = QN__CONN_IDLE;
    c->reserved = idx >= 0 && idx < st->cfg.write_reserve;
    TAILQ_INIT(&c->inflight);
    c->timer = evtimer_new(st->base, on_conn_timer, c);
    c->watch = evtimer_new(st->base, on_watch, c);
    return c->timer && c->watch ? QN_OK : QN_ENOMEM;
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
    cfg->write_reserve = -1;
    cfg->call_timeout_ms = 0;
    cfg->cancel_grace_ms = 2000;
    cfg->keepalives_idle_s = 10;
    cfg->keepalives_interval_s = 5;
    cfg->keepalives_count = 3;
    cfg->tcp_user_timeout_ms = 20000;
    cfg->pid_cache = 65536;
}

/* The effective configuration: derived values filled in, or false. */
static bool config_resolve(const struct qn_store_config *in, struct qn_store_config *c)
{
    *c = *in;
    if (c->conninfo == NULL || c->pool_size < 1 || c->pool_size > QN__POOL_MAX ||
        c->pipeline_depth < 1 || c->pipeline_depth > DEPTH_MAX || c->stmt_timeout_ms <= 0 ||
        c->max_waiting < 0 || c->conflict_retries < 0 || c->reconnect_min_ms <= 0 ||
        c->reconnect_max_ms < c->reconnect_min_ms)
        return false;
    if (c->write_reserve < 0)
        c->write_reserve = c->pool_size >= 4 ? c->pool_size / 4 : (c->pool_size >= 2 ? 1 : 0);
    if (c->write_reserve >= c->pool_size)
        return false; /* reads need at least one connection */
    if (c->call_timeout_ms == 0)
        c->call_timeout_ms = c->stmt_timeout_ms + 5000;
    if (c->call_timeout_ms < 0 || c->cancel_grace_ms < 1 || c->cancel_grace_ms > 3600000 ||
        c->keepalives_idle_s < 0 || c->keepalives_idle_s > 86400 || c->keepalives_interval_s < 1 ||
        c->keepalives_interval_s > 3600 || c->keepalives_count < 1 || c->keepalives_count > 1000 ||
        c->tcp_user_timeout_ms < 0 || c->tcp_user_timeout_ms > 3600000 || c->pid_cache < 0 ||
        c->pid_cache > (1 << 24))
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
    struct qn_store_config eff;
    if (base == NULL || cfg == NULL || out == NULL || !config_resolve(cfg, &eff))
        return QN_EINVAL;
    qn_store *st = calloc(1, sizeof *st);
    if (st == NULL)
        return QN_ENOMEM;
    st->base = base;
    st->cfg = eff;
    for (int l = 0; l < QN__WAITQS; l++)
        TAILQ_INIT(&st->waiting[l]);
    TAILQ_INIT(&st->dead);
    st->conninfo = strdup(cfg->conninfo);
    st->cfg.conninfo = st->conninfo;
    st->conns = calloc((size_t)eff.pool_size, sizeof *st->conns);
    st->family = cfg->family;
    if (st->family == NULL && qn_store_family_new(&st->own_family) == QN_OK)
        st->family = st->own_family;
    if (st->conninfo == NULL || st->conns == NULL || st->family == NULL ||
        qn__eng_init(st) != QN_OK || qn__pidcache_init(&st->pids, (uint32_t)eff.pid_cache) != QN_OK)
        goto fail;
    for (int i = 0; i < eff.pool_size; i++)
        if (conn_init(st, &st->conns[i], i) != QN_OK)
            goto fail;
    if (conn_init(st, &st->listener, -1) != QN_OK)
        goto fail;
    for (int i = 0; i < eff.pool_size; i++)
        qn__conn_start(&st->conns[i]); /* no state observer yet: runs no callback */
    *out = st;
    return QN_OK;
fail:
    destroy(st);
    return QN_ENOMEM;
}

static void destroy(qn_store *st)
{
    qn_store_req *r;
    if (st->conns != NULL) {
        for (int i = -1; i < st->cfg.pool_size; i++) {
            struct qn__conn *c = i < 0 ? &st->listener : &st->conns[i];
            if (c->st == NULL)
                continue;
            qn__conn_close(c);
            while ((r = TAILQ_FIRST(&c->inflight)) != NULL) {
                TAILQ_REMOVE(&c->inflight, r, link);
                qn__req_free(r);
            }
            if (c->timer != NULL)
                event_free(c->timer);
            if (c->watch != NULL)
                event_free(c->watch);
        }
    }
    for (int l = 0; l < QN__WAITQS; l++)
        while ((r = TAILQ_FIRST(&st->waiting[l])) != NULL) {
            TAILQ_REMOVE(&st->waiting[l], r, link);
            qn__req_free(r);
        }
    while ((r = TAILQ_FIRST(&st->dead)) != NULL) {
        TAILQ_REMOVE(&st->dead, r, link);
        qn__req_free(r);
    }
    for (int i = 0; i < st->ndyn; i++) {
        free(st->dyn[i].name);
        free(st->dyn[i].sql);
    }
    if (st->kick != NULL)
        event_free(st->kick);
    if (st->backoff_ev != NULL)
        event_free(st->backoff_ev);
    qn__pidcache_free(&st->pids);
    qn_store_family_free(st->own_family); /* its connections left it above */
    free(st->conns);
    free(st->conninfo);
    free(st);
}

void qn_store_free(qn_store *st)
{
    if (st == NULL || st->closing)
        return;
    st->closing = true;
    qn__store_enter(st);
    qn__eng_shutdown(st);
    qn__store_leave(st); /* destroys unless a handler is running: then its leave() does */
}

struct qn__pidcache *qn__store_pids(qn_store *st)
{
    return (st != NULL && st->pids.e != NULL) ? &st->pids : NULL;
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
        if (st->conns[i].state == QN__CONN_READY)
            out->connections_up++;
    out->waiting = (uint32_t)st->nwaiting;
    out->in_flight = st->in_flight;
}

/* ---------------------------------------------------------------- tests, benches */

int qn__store_cancel_current(qn_store *st, int idx)
{
    if (st == NULL || idx < 0 || idx >= st->cfg.pool_size)
        return QN_EINVAL;
    return qn__eng_cancel_current(&st->conns[idx]);
}

int qn__store_backend_pid(const qn_store *st, int idx)
{
    if (st == NULL || idx < 0 || idx >= st->cfg.pool_size || st->conns[idx].pg == NULL)
        return 0;
    return PQbackendPID(st->conns[idx].pg);
}

int qn__store_conn_socket(const qn_store *st, int idx)
{
    if (st == NULL || idx < 0 || idx >= st->cfg.pool_size || st->conns[idx].pg == NULL)
        return -1;
    return PQsocket(st->conns[idx].pg);
}
