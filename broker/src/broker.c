/*
 * broker.c - the serving process: one libevent loop with the gRPC server, the
 * health and reflection services, the HTTP side port (metrics, health, the web
 * console, gRPC-Web: http_routes.c), the metrics registry, the modules it is
 * given (the product's are in modules.c) and the signals that end it.
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
 *   1. Teardown runs in reverse: side port and server (cancel every call) ->
 *      modules -> routes, health and reflection -> metrics -> security ->
 *      loop, so no handler or collector runs on freed state and no call
 *      outlives the keys its gate used.
 *   2. The loop ends within QUEEN_SHUTDOWN_TIMEOUT_MS of the first signal (the
 *      server's shutdown is bounded by it).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "broker.h"
#include "http_routes.h"
#include "log.h"
#include "obs/metrics.h"
#include "queen/error.h"
#include "queen/store.h"
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

struct run {
    struct qn_broker_ctx ctx;
    const struct qn_broker_module *mods[MAX_MODULES];
    void *state[MAX_MODULES];
    size_t nstarted;
    int signals;       /* signals received */
    int64_t signal_ms; /* when the first arrived */
    struct event *sig_term, *sig_int, *sig_hup;
    bool wrote_port_file;
    qn_side *side;                 /* the HTTP side port */
    struct qn_http_routes *routes; /* its plain routes */
};

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
        return;
    }
    r->signal_ms = qn_store_now_ms();
    QN_INFO("signal %d: shutting down (up to %lld ms)", (int)sig,
            (long long)r->ctx.cfg->shutdown_timeout_ms);
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

    r.ctx.base = event_base_new();
    if (r.ctx.base == NULL) {
        QN_ERROR("cannot create the event loop");
        return QN_EINTERNAL;
    }
    rc = qn_metrics_new(MAX_SERIES_PER_FAMILY, &r.ctx.metrics);
    if (rc != QN_OK)
        goto out;
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

    for (const struct qn_broker_module *m = modules; m != NULL && m->name != NULL; m++) {
        if (nmods == MAX_MODULES) {
            QN_ERROR("too many broker modules (more than %d)", MAX_MODULES);
            rc = QN_ELIMIT;
            goto out;
        }
        r.mods[nmods++] = m;
    }
    for (size_t i = 0; i < nmods; i++) {
        rc = r.mods[i]->start(&r.ctx, &r.state[i]);
        if (rc != QN_OK) {
            QN_ERROR("module %s failed to start: %s", r.mods[i]->name, qn_strerror(rc));
            goto out;
        }
        r.nstarted++;
    }

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
    qn_side_free(r.side); /* its calls live in the server's call set */
    qn_rpc_server_free(r.ctx.server);
    while (r.nstarted > 0) {
        r.nstarted--;
        if (r.mods[r.nstarted]->stop)
            r.mods[r.nstarted]->stop(r.state[r.nstarted]);
    }
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
    return rc;
}
