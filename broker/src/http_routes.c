/*
 * http_routes.c - the side port's plain routes and the process metrics (see
 * http_routes.h; docs/metrics.md lists every metric).
 *
 *   GET /metrics   the registry's text exposition (0.0.4); never waits on the
 *                  database (per-queue figures are refreshed on a timer)
 *   GET /healthz   200 "ok": the process runs and its loop answers
 *   GET /readyz    200 "ready" while the health service reports the broker
 *                  SERVING (the database connected; the schema is applied
 *                  before the broker serves) and no shutdown began; else 503
 *                  with the reason
 *   GET /...       the web console (console.c), when QUEEN_HTTP_CONSOLE is on
 *
 * Does not: serve anything that changes state (everything here is GET/HEAD).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>

#include "console.h"
#include "http_routes.h"
#include "log.h"
#include "loops.h"
#include "queen/error.h"

struct qn_http_routes {
    qn_side *side;
    qn_metrics *m;
    qn_rpc_server *rpc;
    qn_health *health;
    struct qn_loops *loops; /* NULL: one loop */
    struct qn_console *console;
    bool shutting_down;
    struct qn_metric_family *conns_open, *conns_total, *bytes_in, *bytes_out;
    struct qn_metric *calls_open, *calls_waiting, *streams_open, *ready, *started;
};

static bool is_ready(const struct qn_http_routes *r, const char **why)
{
    if (r->shutting_down) {
        *why = "shutting down";
        return false;
    }
    if (qn_health_get(r->health, "") != 1) {
        *why = "the database is not available";
        return false;
    }
    *why = NULL;
    return true;
}

static void no_store(struct qn_http_response *resp)
{
    qn_http_add_header(resp, "cache-control", "no-store");
}

static void serve_metrics(void *ud, const struct qn_http_request *req,
                          struct qn_http_response *resp)
{
    struct qn_http_routes *r = ud;
    no_store(resp);
    if (qn_metrics_render(r->m, resp->body) != QN_OK) {
        evbuffer_drain(resp->body, evbuffer_get_length(resp->body));
        resp->status = 500;
        snprintf(resp->content_type, sizeof resp->content_type, "text/plain; charset=utf-8");
        evbuffer_add_printf(resp->body, "out of memory\n");
        return;
    }
    snprintf(resp->content_type, sizeof resp->content_type, "%s", QN_METRICS_CONTENT_TYPE);
}

static void serve_healthz(void *ud, const struct qn_http_request *req,
                          struct qn_http_response *resp)
{
    no_store(resp);
    snprintf(resp->content_type, sizeof resp->content_type, "text/plain; charset=utf-8");
    evbuffer_add_printf(resp->body, "ok\n");
}

static void serve_readyz(void *ud, const struct qn_http_request *req, struct qn_http_response *resp)
{
    const struct qn_http_routes *r = ud;
    const char *why;
    no_store(resp);
    snprintf(resp->content_type, sizeof resp->content_type, "text/plain; charset=utf-8");
    if (is_ready(r, &why)) {
        evbuffer_add_printf(resp->body, "ready\n");
        return;
    }
    resp->status = 503;
    evbuffer_add_printf(resp->body, "not ready: %s\n", why);
}

/* ---------------------------------------------------------------- process metrics */

static void set_listener(struct qn_metric_family *f, const char *listener, double v, bool counter)
{
    const char *labels[1] = {listener};
    struct qn_metric *s = qn_metric_series(f, labels);
    if (counter)
        qn_metric_set_total(s, (uint64_t)v);
    else
        qn_metric_set(s, v);
}

static void collect(void *ud)
{
    struct qn_http_routes *r = ud;
    struct qn_rpc_stats rs;
    qn_rpc_server_stats(r->rpc, &rs);
    if (r->loops != NULL) {
        /* the other loops' connections and calls, as they last published them */
        struct qn_loop_counters others;
        memset(&others, 0, sizeof others);
        qn_loops_add_others(r->loops, 0, &others);
        qn_rpc_stats_add(&rs, &others.rpc);
    }
    struct qn_side_stats ss;
    qn_side_stats(r->side, &ss);
    set_listener(r->conns_open, "grpc", rs.connections_open, false);
    set_listener(r->conns_open, "http", ss.connections_open, false);
    set_listener(r->conns_total, "grpc", (double)rs.connections_accepted, true);
    set_listener(r->conns_total, "http", (double)ss.connections_accepted, true);
    set_listener(r->bytes_in, "grpc", (double)rs.bytes_in, true);
    set_listener(r->bytes_in, "http", (double)ss.bytes_in, true);
    set_listener(r->bytes_out, "grpc", (double)rs.bytes_out, true);
    set_listener(r->bytes_out, "http", (double)ss.bytes_out, true);
    qn_metric_set(r->calls_open, rs.calls_open);
    qn_metric_set(r->calls_waiting, rs.calls_waiting);
    qn_metric_set(r->streams_open, rs.streams_open);
    const char *why;
    qn_metric_set(r->ready, is_ready(r, &why) ? 1 : 0);
}

/* A gauge without labels: its family and its one series (*out, NULL on error). */
static int gauge(struct qn_http_routes *r, const char *name, const char *help,
                 struct qn_metric **out)
{
    struct qn_metric_family *f = NULL;
    int rc = qn_metrics_family(r->m, name, help, QN_METRIC_GAUGE, NULL, 0, NULL, 0, &f);
    *out = rc == QN_OK ? qn_metric_series(f, NULL) : NULL;
    return rc;
}

static int register_process(struct qn_http_routes *r)
{
    static const char *listener[] = {"listener"};
    const enum qn_metric_type C = QN_METRIC_COUNTER, G = QN_METRIC_GAUGE;
    int rc = qn_metrics_family(r->m, "queen_connections_open",
                               "client connections open, by listener (grpc: h2c and TLS; http: "
                               "the side port)",
                               G, listener, 1, NULL, 0, &r->conns_open);
    if (rc == QN_OK)
        rc = qn_metrics_family(r->m, "queen_connections_accepted_total",
                               "client connections accepted, by listener", C, listener, 1, NULL, 0,
                               &r->conns_total);
    if (rc == QN_OK)
        rc = qn_metrics_family(r->m, "queen_received_bytes_total",
                               "bytes read from client connections, by listener", C, listener, 1,
                               NULL, 0, &r->bytes_in);
    if (rc == QN_OK)
        rc = qn_metrics_family(r->m, "queen_sent_bytes_total",
                               "bytes written to client connections, by listener", C, listener, 1,
                               NULL, 0, &r->bytes_out);
    if (rc == QN_OK)
        rc = gauge(r, "queen_rpc_calls_open", "calls in progress (gRPC and gRPC-Web)",
                   &r->calls_open);
    if (rc == QN_OK)
        rc = gauge(r, "queen_rpc_calls_waiting",
                   "calls waiting for a database slot of their connection "
                   "(QUEEN_MAX_CONN_DB_CALLS)",
                   &r->calls_waiting);
    if (rc == QN_OK)
        rc = gauge(r, "queen_rpc_streams_open",
                   "long-lived streams open (Consume, health Watch; bounded by "
                   "QUEEN_MAX_STREAMS)",
                   &r->streams_open);
    if (rc == QN_OK)
        rc = gauge(r, "queen_ready", "1 while /readyz answers 200 (database up, not shutting down)",
                   &r->ready);
    if (rc == QN_OK)
        rc = gauge(r, "queen_start_time_seconds", "Unix time the broker process started serving",
                   &r->started);
    if (rc == QN_OK) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        qn_metric_set(r->started, (double)tv.tv_sec);
    }
    return rc;
}

/* ---------------------------------------------------------------- lifecycle */

void qn_http_routes_set_loops(struct qn_http_routes *r, struct qn_loops *loops)
{
    r->loops = loops;
}

int qn_http_routes_new(qn_side *side, qn_metrics *m, qn_rpc_server *rpc, qn_health *health,
                       bool console, struct qn_http_routes **out)
{
    struct qn_http_routes *r = calloc(1, sizeof *r);
    if (r == NULL)
        return QN_ENOMEM;
    r->side = side;
    r->m = m;
    r->rpc = rpc;
    r->health = health;
    int rc = register_process(r);
    if (rc == QN_OK)
        rc = qn_metrics_on_collect(m, collect, r);
    if (rc == QN_OK)
        rc = qn_side_route(side, "metrics", "/metrics", false, serve_metrics, r);
    if (rc == QN_OK)
        rc = qn_side_route(side, "healthz", "/healthz", false, serve_healthz, r);
    if (rc == QN_OK)
        rc = qn_side_route(side, "readyz", "/readyz", false, serve_readyz, r);
    if (rc == QN_OK && console) {
        rc = qn_console_new(&r->console);
        if (rc == QN_OK)
            rc = qn_side_route(side, "console", "/", true, qn_console_serve, r->console);
    }
    if (rc != QN_OK) {
        qn_http_routes_free(r);
        return rc;
    }
    *out = r;
    return QN_OK;
}

void qn_http_routes_shutdown(struct qn_http_routes *r)
{
    if (r != NULL)
        r->shutting_down = true;
}

void qn_http_routes_free(struct qn_http_routes *r)
{
    if (r == NULL)
        return;
    qn_metrics_off_collect(r->m, collect, r);
    qn_console_free(r->console);
    free(r);
}
