/*
 * broker.c - the serving process: QUEEN_WORKERS libevent loops, each on its own
 * thread with its own gRPC server, health and reflection services, credentials
 * and an instance of every module it is given (the product's are in modules.c);
 * worker 0 runs on the main thread and also holds the listeners, the HTTP side
 * port (metrics, health, the web console, gRPC-Web: http_routes.c), the metrics
 * registry and the signals that end the process.
 *
 * Workers: worker 0 accepts every connection and hands them round-robin to the
 * loops (a socket travels to its loop's inbox and is served there for its whole
 * life; a full inbox keeps it on worker 0). Each worker is started and has
 * published its module state (loops.h) before the next starts and before
 * anything listens. With QUEEN_WORKERS=1 there is no thread, no inbox and no
 * handoff: the process is the single loop it always was.
 *
 * Does: load the credentials and keys (security.h) and put their gate on the
 * server (gRPC and gRPC-Web calls alike), start the modules in order, listen,
 * report the bound ports (log line and QUEEN_PORT_FILE), serve; on SIGHUP reload
 * the key files (off the loop); on the first SIGTERM/SIGINT report NOT_SERVING,
 * let modules stop taking work, close side port connections after their current
 * response, drain the server for up to QUEEN_SHUTDOWN_TIMEOUT_MS and return; a
 * second signal ends the loop at once.
 * Does not: run migrations (the product's module applies the schema off the
 * loop), block once the loop runs, know what a module does.
 *
 * Invariants:
 *   0. A worker k > 0 is torn down on its own thread when its loop ends: inbox
 *      closed (queued messages run, later posts are refused), server, modules,
 *      services, loop; the main thread frees the inboxes only after joining
 *      every worker, so no post ever reaches a freed inbox.
 *   1. Teardown runs in reverse: side port and server (cancel every call) ->
 *      modules -> routes, health and reflection -> metrics -> security ->
 *      loop, so no handler or collector runs on freed state and no call
 *      outlives the keys its gate used.
 *   2. The loop ends within QUEEN_SHUTDOWN_TIMEOUT_MS of the first signal (the
 *      server's shutdown is bounded by it).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "broker.h"
#include "engine/inbox.h"
#include "http_routes.h"
#include "log.h"
#include "app_stats.h"
#include "loops.h"
#include "obs/metrics.h"
#include "queen/error.h"
#include "queen/store.h"
#include "engine/held.h"
#include "engine/offload.h"
#include "security.h"
#include "transport/call.h"
#include "transport/health.h"
#include "transport/reflection.h"
#include "transport/server.h"
#include "transport/sideport.h"

#define MAX_MODULES 32
/* Series one metric family may hold (per-queue families are bounded by
 * QUEEN_METRICS_MAX_QUEUES / _GROUPS well below this). */
#define MAX_SERIES_PER_FAMILY 200000

struct run;

/* One event loop and what it owns. Worker 0's fields live in struct run too. */
struct worker {
    struct run *r;
    unsigned idx;
    pthread_t thread;
    bool thread_started;
    struct qn_broker_ctx ctx;
    qn_reflection *refl;
    void *state[MAX_MODULES];
    size_t nstarted;
    struct event *shutdown_ev; /* activated by the main thread: the first signal */
    struct event *hup_ev;      /* activated by the main thread: SIGHUP */
    int64_t shutdown_left_ms;  /* written before shutdown_ev is activated */
    /* start handshake with the main thread (under r->mu) */
    bool start_done;
    int start_rc;
    bool running; /* its loop and events may be poked (under r->mu; false before teardown) */
};

struct run {
    struct qn_broker_ctx ctx;
    const struct qn_broker_module *mods[MAX_MODULES];
    void *state[MAX_MODULES];
    size_t nmods;
    size_t nstarted;
    int signals;       /* signals received */
    int64_t signal_ms; /* when the first arrived */
    struct event *sig_term, *sig_int, *sig_hup;
    bool wrote_port_file;
    qn_side *side;                 /* the HTTP side port */
    struct qn_http_routes *routes; /* its plain routes */
    /* workers 1..n-1 (worker 0 is the fields above, on the main thread) */
    struct qn_loops loops;
    struct worker *workers[QN_MAX_WORKERS];
    _Atomic size_t conns;       /* live gRPC connections of every loop (QUEEN_MAX_CONNECTIONS) */
    _Atomic size_t inbound;     /* unfinished request bytes of every loop (..._RECV_BUFFER_BYTES) */
    _Atomic uint64_t streams;   /* long-lived streams of every loop (QUEEN_MAX_STREAMS) */
    struct qn_net_peers *peers; /* every loop's connections per peer; NULL with one loop */
    uint64_t next_loop; /* round-robin position of the next accepted socket (worker 0 only) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* ---------------------------------------------------------------- workers > 0 */

/* A socket on its way to another loop. */
struct adopt_msg {
    struct worker *w;
    int fd;
    bool tls;
    int salen;
    struct sockaddr_storage sa;
};

static void adopt_run(void *arg)
{
    struct adopt_msg *a = arg;
    QN_DEBUG("connection on worker=%u", a->w->idx);
    qn_rpc_server_adopt(a->w->ctx.server, a->fd, (struct sockaddr *)&a->sa, a->salen, a->tls);
    free(a);
}

/* Worker 0's listener accepted a socket: every n-th stays, the others go to
 * their loop's inbox in turn. A socket whose inbox is full stays here. */
static bool handoff(void *ud, int fd, const struct sockaddr *sa, int salen, bool tls)
{
    struct run *r = ud;
    unsigned k = (unsigned)(r->next_loop++ % r->loops.n);
    if (k == 0 || salen < 0 || (size_t)salen > sizeof(struct sockaddr_storage)) {
        QN_DEBUG("connection on worker=0");
        return false;
    }
    struct adopt_msg *a = malloc(sizeof *a);
    if (a == NULL)
        return false;
    a->w = r->workers[k];
    a->fd = fd;
    a->tls = tls;
    a->salen = salen;
    memcpy(&a->sa, sa, (size_t)salen);
    if (qn_loops_post(&r->loops, k, adopt_run, a) != QN_OK) {
        QN_DEBUG("connection on worker=0 (worker %u's inbox is full)", k);
        free(a);
        return false;
    }
    return true;
}

static void worker_drained(void *ud)
{
    struct worker *w = ud;
    event_base_loopexit(w->ctx.base, NULL);
}

/* The first signal, on worker w's loop: the same steps as worker 0's. */
static void worker_on_shutdown(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    qn_health_set_all(w->ctx.health, false);
    for (size_t i = 0; i < w->nstarted; i++)
        if (w->r->mods[i]->shutdown)
            w->r->mods[i]->shutdown(w->state[i]);
    qn_rpc_server_shutdown(w->ctx.server, (int)w->shutdown_left_ms, worker_drained, w);
}

static void worker_on_hup(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    qn_security_reload(w->ctx.security);
}

static int worker_setup(struct worker *w)
{
    const struct qn_config *cfg = w->ctx.cfg;
    int rc;
    w->ctx.base = event_base_new();
    if (w->ctx.base == NULL)
        return QN_EINTERNAL;
    /* a registry of its own for what its modules register; its calls count
     * into worker 0's RPC families (locked: obs/metrics.h), which the side
     * port renders */
    if ((rc = qn_metrics_new(MAX_SERIES_PER_FAMILY, &w->ctx.metrics)) != QN_OK)
        return rc;
    if ((rc = qn_rpc_server_new(w->ctx.base, cfg, &w->ctx.server)) != QN_OK)
        return rc;
    if ((rc = qn_rpc_server_set_metrics(w->ctx.server, w->r->ctx.metrics)) != QN_OK)
        return rc;
    qn_rpc_server_share_conn_count(w->ctx.server, &w->r->conns);
    qn_rpc_server_share_peers(w->ctx.server, w->r->peers);
    qn_rpc_server_share_recv_count(w->ctx.server, &w->r->inbound);
    qn_rpc_server_share_stream_count(w->ctx.server, &w->r->streams);
    qn_rpc_server_split_send_buffer(w->ctx.server, w->r->loops.n);
    if ((rc = qn_security_new(w->ctx.base, cfg, &w->ctx.security)) != QN_OK)
        return rc;
    if (qn_security_auth_on(w->ctx.security))
        qn_rpc_server_set_gate(w->ctx.server, qn_security_gate, w->ctx.security);
    if ((rc = qn_health_new(w->ctx.server, &w->ctx.health)) != QN_OK)
        return rc;
    if ((rc = qn_reflection_new(w->ctx.server, &w->refl)) != QN_OK)
        return rc;
    qn_health_set_serving(w->ctx.health, "", true);
    if ((rc = qn_health_set_serving(w->ctx.health, "grpc.health.v1.Health", true)) != QN_OK)
        return rc;
    w->shutdown_ev = event_new(w->ctx.base, -1, 0, worker_on_shutdown, w);
    w->hup_ev = event_new(w->ctx.base, -1, 0, worker_on_hup, w);
    if (w->shutdown_ev == NULL || w->hup_ev == NULL)
        return QN_ENOMEM;
    if ((rc = qn_inbox_new(w->ctx.base, (size_t)cfg->worker_inbox, &w->r->loops.inbox[w->idx])) !=
        QN_OK)
        return rc;
    for (size_t i = 0; i < w->r->nmods; i++) {
        rc = w->r->mods[i]->start(&w->ctx, &w->state[i]);
        if (rc != QN_OK) {
            QN_ERROR("module %s failed to start on worker %u: %s", w->r->mods[i]->name, w->idx,
                     qn_strerror(rc));
            return rc;
        }
        w->nstarted++;
    }
    return QN_OK;
}

static void worker_teardown(struct worker *w)
{
    /* queued messages run while the server and the modules are alive; later
     * posts are refused */
    qn_inbox_close(w->r->loops.inbox[w->idx]);
    qn_rpc_server_free(w->ctx.server);
    w->ctx.server = NULL;
    while (w->nstarted > 0) {
        w->nstarted--;
        if (w->r->mods[w->nstarted]->stop)
            w->r->mods[w->nstarted]->stop(w->state[w->nstarted]);
    }
    qn_reflection_free(w->refl);
    qn_health_free(w->ctx.health);
    qn_metrics_free(w->ctx.metrics);
    qn_security_free(w->ctx.security);
    if (w->shutdown_ev)
        event_free(w->shutdown_ev);
    if (w->hup_ev)
        event_free(w->hup_ev);
    w->shutdown_ev = w->hup_ev = NULL;
    if (w->ctx.base)
        event_base_free(w->ctx.base);
    w->ctx.base = NULL;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    int rc = worker_setup(w);
    pthread_mutex_lock(&w->r->mu);
    w->start_done = true;
    w->start_rc = rc;
    w->running = rc == QN_OK;
    pthread_cond_broadcast(&w->r->cv);
    pthread_mutex_unlock(&w->r->mu);
    /* the loop has no listener: it lives on its inbox and timers until told */
    if (rc == QN_OK && event_base_loop(w->ctx.base, EVLOOP_NO_EXIT_ON_EMPTY) < 0)
        QN_ERROR("event loop of worker %u failed", w->idx);
    /* from now on the main thread leaves this loop alone (worker_poke) */
    pthread_mutex_lock(&w->r->mu);
    w->running = false;
    pthread_mutex_unlock(&w->r->mu);
    worker_teardown(w);
    return NULL;
}

/* Starts worker k and waits until its modules started (or failed). */
static int worker_start(struct run *r, unsigned k)
{
    struct worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return QN_ENOMEM;
    r->workers[k] = w;
    w->r = r;
    w->idx = k;
    w->ctx.cfg = r->ctx.cfg;
    w->ctx.worker = k;
    w->ctx.nworkers = r->loops.n;
    w->ctx.loops = &r->loops;
    w->ctx.store_family = r->ctx.store_family;
    w->ctx.held = r->ctx.held;
    w->ctx.offload = r->ctx.offload;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        QN_ERROR("cannot start worker %u", k);
        return QN_EINTERNAL;
    }
    w->thread_started = true;
    pthread_mutex_lock(&r->mu);
    while (!w->start_done)
        pthread_cond_wait(&r->cv, &r->mu);
    int rc = w->start_rc;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

enum poke { POKE_SHUTDOWN, POKE_HUP, POKE_BREAK, POKE_EXIT };

/* From the main thread: tells worker k's loop, if it still runs. */
static void worker_poke(struct run *r, unsigned k, enum poke what)
{
    struct worker *w = r->workers[k];
    if (w == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    if (w->running) {
        switch (what) {
        case POKE_SHUTDOWN:
            w->shutdown_left_ms = r->ctx.cfg->shutdown_timeout_ms;
            event_active(w->shutdown_ev, 0, 0);
            break;
        case POKE_HUP:
            event_active(w->hup_ev, 0, 0);
            break;
        case POKE_BREAK:
            event_base_loopbreak(w->ctx.base);
            break;
        case POKE_EXIT:
            event_base_loopexit(w->ctx.base, NULL);
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
}

/* Ends every worker's loop (at once when `now`, else after its drain) and joins. */
static void workers_stop(struct run *r, bool now)
{
    for (unsigned k = 1; k < r->loops.n; k++) {
        if (now)
            worker_poke(r, k, POKE_BREAK);
        else if (r->signals == 0)
            worker_poke(r, k, POKE_EXIT); /* failed start or loop error: no drain */
    }
    for (unsigned k = 1; k < r->loops.n; k++) {
        struct worker *w = r->workers[k];
        if (w != NULL && w->thread_started)
            pthread_join(w->thread, NULL);
    }
    for (unsigned k = 0; k < r->loops.n; k++) {
        qn_inbox_free(r->loops.inbox[k]);
        r->loops.inbox[k] = NULL;
        free(r->workers[k]);
        r->workers[k] = NULL;
    }
}

/* ---------------------------------------------------------------- worker 0 */

static void on_all_drained(void *ud)
{
    struct run *r = ud;
    QN_INFO("shutdown complete");
    event_base_loopexit(r->ctx.base, NULL);
}

/* The gRPC server is drained: the side port's gRPC-Web calls get the time left. */
static void on_drained(void *ud)
{
    struct run *r = ud;
    int64_t left = r->ctx.cfg->shutdown_timeout_ms - (qn_store_now_ms() - r->signal_ms);
    qn_side_drain(r->side, left, on_all_drained, r);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct run *r = arg;
    if (r->signals++ > 0) {
        QN_WARN("second signal %d: stopping now", (int)sig);
        event_base_loopbreak(r->ctx.base);
        for (unsigned k = 1; k < r->loops.n; k++)
            worker_poke(r, k, POKE_BREAK);
        return;
    }
    r->signal_ms = qn_store_now_ms();
    QN_INFO("signal %d: shutting down (up to %lld ms)", (int)sig,
            (long long)r->ctx.cfg->shutdown_timeout_ms);
    /* every other loop drains its own connections in the same time */
    for (unsigned k = 1; k < r->loops.n; k++)
        worker_poke(r, k, POKE_SHUTDOWN);
    qn_health_set_all(r->ctx.health, false);
    qn_http_routes_shutdown(r->routes);
    qn_side_shutdown(r->side);
    for (size_t i = 0; i < r->nstarted; i++)
        if (r->mods[i]->shutdown)
            r->mods[i]->shutdown(r->state[i]);
    qn_rpc_server_shutdown(r->ctx.server, (int)r->ctx.cfg->shutdown_timeout_ms, on_drained, r);
}

static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    struct run *r = arg;
    qn_security_reload(r->ctx.security);
    for (unsigned k = 1; k < r->loops.n; k++)
        worker_poke(r, k, POKE_HUP);
}

static int write_port_file(const char *path, int port, int tls_port, int http_port)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        QN_ERROR("QUEEN_PORT_FILE path is too long");
        return QN_EINVAL;
    }
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        QN_ERROR("cannot write QUEEN_PORT_FILE %s", tmp);
        return QN_EIO;
    }
    fprintf(f, "port=%d\ntls_port=%d\nhttp_port=%d\n", port, tls_port, http_port);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        QN_ERROR("cannot write QUEEN_PORT_FILE %s", path);
        unlink(tmp);
        return QN_EIO;
    }
    return QN_OK;
}

int qn_broker_serve(const struct qn_config *cfg, const struct qn_broker_module *modules)
{
    struct run r;
    memset(&r, 0, sizeof r);
    r.ctx.cfg = cfg;
    qn_reflection *refl = NULL;
    size_t nmods = 0;
    int rc = QN_OK;

    signal(SIGPIPE, SIG_IGN); /* a peer closing mid-write is an error return, not a signal */

    r.loops.n = cfg->workers < 1 ? 1 : (unsigned)cfg->workers;
    r.ctx.worker = 0;
    r.ctx.nworkers = r.loops.n;
    r.ctx.loops = &r.loops;
    if (qn_store_family_new(&r.ctx.store_family) != QN_OK)
        return QN_ENOMEM;
    if (qn_held_new(&r.ctx.held) != QN_OK) {
        qn_store_family_free(r.ctx.store_family);
        return QN_ENOMEM;
    }
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_mutex_init(&r.loops.counters_mu, NULL);
    /* loops wake each other (inboxes, shutdown), offload threads wake loops:
     * libevent's locks, before any base */
    if ((r.loops.n > 1 || cfg->offload_threads > 0) && evthread_use_pthreads() != 0) {
        QN_ERROR("libevent has no thread support (QUEEN_WORKERS=%u, QUEEN_OFFLOAD_THREADS=%lld)",
                 r.loops.n, (long long)cfg->offload_threads);
        pthread_mutex_destroy(&r.loops.counters_mu);
        pthread_cond_destroy(&r.cv);
        pthread_mutex_destroy(&r.mu);
        qn_store_family_free(r.ctx.store_family);
        qn_held_free(r.ctx.held);
        return QN_EINTERNAL;
    }

    r.ctx.base = event_base_new();
    if (r.ctx.base == NULL) {
        QN_ERROR("cannot create the event loop");
        qn_store_family_free(r.ctx.store_family);
        qn_held_free(r.ctx.held);
        return QN_EINTERNAL;
    }
    rc = qn_metrics_new(MAX_SERIES_PER_FAMILY, &r.ctx.metrics);
    if (rc != QN_OK)
        goto out;
    /* at most 8 jobs a thread waiting: a burst beyond is packed on its loop */
    if (cfg->offload_threads > 0 &&
        (rc = qn_offload_new((int)cfg->offload_threads, (size_t)cfg->offload_threads * 8,
                             &r.ctx.offload)) != QN_OK) {
        QN_ERROR("cannot start the offload threads: %s", qn_strerror(rc));
        goto out;
    }
    rc = qn_rpc_server_new(r.ctx.base, cfg, &r.ctx.server);
    if (rc != QN_OK)
        goto out;
    rc = qn_rpc_server_set_metrics(r.ctx.server, r.ctx.metrics);
    if (rc != QN_OK)
        goto out;
    rc = qn_security_new(r.ctx.base, cfg, &r.ctx.security);
    if (rc != QN_OK)
        goto out;
    if (qn_security_auth_on(r.ctx.security))
        qn_rpc_server_set_gate(r.ctx.server, qn_security_gate, r.ctx.security);
    rc = qn_health_new(r.ctx.server, &r.ctx.health);
    if (rc != QN_OK)
        goto out;
    rc = qn_reflection_new(r.ctx.server, &refl);
    if (rc != QN_OK)
        goto out;
    qn_health_set_serving(r.ctx.health, "", true);
    /* the health service itself answers whatever the modules report */
    rc = qn_health_set_serving(r.ctx.health, "grpc.health.v1.Health", true);
    if (rc != QN_OK)
        goto out;
    rc = qn_side_new(r.ctx.base, cfg, r.ctx.server, r.ctx.metrics, &r.side);
    if (rc != QN_OK)
        goto out;
    rc = qn_http_routes_new(r.side, r.ctx.metrics, r.ctx.server, r.ctx.health, cfg->http_console,
                            &r.routes);
    if (rc != QN_OK)
        goto out;
    if (r.loops.n > 1)
        qn_http_routes_set_loops(r.routes, &r.loops);

    for (const struct qn_broker_module *m = modules; m != NULL && m->name != NULL; m++) {
        if (nmods == MAX_MODULES) {
            QN_ERROR("too many broker modules (more than %d)", MAX_MODULES);
            rc = QN_ELIMIT;
            goto out;
        }
        r.mods[nmods++] = m;
    }
    r.nmods = nmods;
    if (r.loops.n > 1 && (rc = qn_rpc_peers_new(cfg, &r.peers)) != QN_OK)
        goto out;
    if (r.loops.n > 1) {
        rc = qn_inbox_new(r.ctx.base, (size_t)cfg->worker_inbox, &r.loops.inbox[0]);
        if (rc != QN_OK)
            goto out;
    }
    for (size_t i = 0; i < nmods; i++) {
        rc = r.mods[i]->start(&r.ctx, &r.state[i]);
        if (rc != QN_OK) {
            QN_ERROR("module %s failed to start: %s", r.mods[i]->name, qn_strerror(rc));
            goto out;
        }
        r.nstarted++;
    }
    /* the other loops, one after the other: each has published its module state
     * before the next starts and before anything listens (loops.h) */
    for (unsigned k = 1; k < r.loops.n; k++) {
        rc = worker_start(&r, k);
        if (rc != QN_OK) {
            QN_ERROR("worker %u failed to start: %s", k, qn_strerror(rc));
            goto out;
        }
    }
    if (r.loops.n > 1) {
        qn_rpc_server_share_conn_count(r.ctx.server, &r.conns);
        qn_rpc_server_share_peers(r.ctx.server, r.peers);
        qn_rpc_server_share_recv_count(r.ctx.server, &r.inbound);
        qn_rpc_server_share_stream_count(r.ctx.server, &r.streams);
        qn_rpc_server_split_send_buffer(r.ctx.server, r.loops.n);
        qn_rpc_server_set_handoff(r.ctx.server, handoff, &r);
    }
    QN_INFO("event loops workers=%u", r.loops.n);

    /* Before the ports are announced: a SIGTERM sent as soon as the port file
     * appears is a shutdown, never the default action. */
    r.sig_term = evsignal_new(r.ctx.base, SIGTERM, on_signal, &r);
    r.sig_int = evsignal_new(r.ctx.base, SIGINT, on_signal, &r);
    r.sig_hup = evsignal_new(r.ctx.base, SIGHUP, on_sighup, &r);
    if (r.sig_term == NULL || r.sig_int == NULL || r.sig_hup == NULL ||
        evsignal_add(r.sig_term, NULL) != 0 || evsignal_add(r.sig_int, NULL) != 0 ||
        evsignal_add(r.sig_hup, NULL) != 0) {
        QN_ERROR("cannot install signal handlers");
        rc = QN_EINTERNAL;
        goto out;
    }
    rc = qn_rpc_server_listen(r.ctx.server);
    if (rc == QN_OK)
        rc = qn_side_listen(r.side);
    if (rc != QN_OK)
        goto out;
    int port = qn_rpc_server_port(r.ctx.server), tls_port = qn_rpc_server_tls_port(r.ctx.server);
    int http_port = qn_side_port(r.side);
    QN_INFO("listening h2c_port=%d tls_port=%d http_port=%d", port, tls_port, http_port);
    if (cfg->port_file[0] != '\0') {
        rc = write_port_file(cfg->port_file, port, tls_port, http_port);
        if (rc != QN_OK)
            goto out;
        r.wrote_port_file = true;
    }

    if (event_base_dispatch(r.ctx.base) < 0) {
        QN_ERROR("event loop failed");
        rc = QN_EINTERNAL;
    }

out:
    /* queued messages run while worker 0's server and modules are alive; from
     * now on other loops' posts to worker 0 are refused */
    qn_inbox_close(r.loops.inbox[0]);
    qn_side_free(r.side); /* its calls live in the server's call set */
    qn_rpc_server_free(r.ctx.server);
    while (r.nstarted > 0) {
        r.nstarted--;
        if (r.mods[r.nstarted]->stop)
            r.mods[r.nstarted]->stop(r.state[r.nstarted]);
    }
    /* the other loops drained in the same time (on_signal), or end now */
    workers_stop(&r, r.signals > 1);
    qn_rpc_peers_free(r.peers); /* every server that shared it is gone */
    qn_http_routes_free(r.routes);
    qn_reflection_free(refl);
    qn_health_free(r.ctx.health);
    qn_metrics_free(r.ctx.metrics);
    qn_security_free(r.ctx.security);
    if (r.sig_term)
        event_free(r.sig_term);
    if (r.sig_int)
        event_free(r.sig_int);
    if (r.sig_hup)
        event_free(r.sig_hup);
    event_base_free(r.ctx.base);
    if (r.wrote_port_file)
        unlink(cfg->port_file);
    pthread_mutex_destroy(&r.loops.counters_mu);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    qn_store_family_free(r.ctx.store_family); /* after every loop's store */
    qn_held_free(r.ctx.held);                 /* after every loop's consume fusion */
    qn_offload_free(r.ctx.offload);           /* after every loop's fusion (its port) */
    return rc;
}
