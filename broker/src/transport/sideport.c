/*
 * transport/sideport.c - the HTTP side port (implements sideport.h): it wires a
 * second net (listener and connections) to the HTTP/1.1 sessions of http1.c,
 * whose gRPC-Web calls join the gRPC server's call set.
 *
 *   net.c --struct qn_net_handler--> http1.c --call_binding.h--> call.c
 *   call.c --struct qn_call_ops--> http1.c;   http1.c --qn__net_conn_*--> net.c
 *
 * Why net.c and not libevent's evhttp: the binding needs what net.c already
 * gives the gRPC port and evhttp (libevent 2.1, Debian 12) does not: a cap on
 * connections (evhttp_set_max_connections is 2.2), output pulled from the call
 * only while the socket's buffer is below a watermark (evhttp queues whatever
 * it is handed), a connection's loss reported to the session that owns its
 * call (evhttp frees the request under a failed connection), and one
 * connection lifecycle with the same idle and flush timeouts and counters.
 * What evhttp would add, the request parser, is http_wire.c: one small pure
 * file, unit-tested and fuzzed.
 *
 * Does: build the net's settings from QUEEN_HTTP_* (its own port, bind
 * address, connection cap and idle time; no TLS, no keepalive pings), forward
 * routes, the shutdown and the counters.
 * Does not: know what a route serves (broker.c registers them) or HTTP itself.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "log.h"
#include "queen/error.h"
#include "queen/store.h"
#include "transport/call_binding.h"
#include "transport/http1.h"
#include "transport/net.h"
#include "transport/sideport.h"
#include "timer.h"

#define DRAIN_GRACE_MS 250

struct qn_side {
    struct qn_http1 *http;
    struct qn_calls *calls;
    qn_net *net;
    bool enabled; /* QUEEN_HTTP_PORT != -1 */
    bool listening;
    /* the drain (qn_side_drain) */
    bool draining;
    bool done_fired;
    int phase; /* 0: waiting for connections to finish; 1: their calls were ended */
    int64_t grace_ms;
    struct event *drain_ev; /* phase timer */
    struct event *done_ev;
    void (*done)(void *ud);
    void *done_ud;
};

static void maybe_drained(qn_side *s)
{
    if (s->draining && !s->done_fired && qn__net_conn_count(s->net) == 0) {
        s->done_fired = true;
        event_del(s->drain_ev);
        event_active(s->done_ev, 0, 0);
    }
}

/* The net's owner callback: a connection was freed. */
static void on_conn_freed(void *owner)
{
    maybe_drained(owner);
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    qn_side *s = arg;
    if (s->done != NULL)
        s->done(s->done_ud);
}

static void on_drain_timer(evutil_socket_t fd, short what, void *arg)
{
    qn_side *s = arg;
    if (s->phase == 0) {
        /* time is almost up: calls still running answer UNAVAILABLE now */
        s->phase = 1;
        qn__calls_end(s->calls, true);
        qn__net_flush_all(s->net);
        qn_timer_after(s->drain_ev, s->grace_ms);
        return;
    }
    qn__net_close_all(s->net);
    maybe_drained(s);
}

int qn_http_add_header(struct qn_http_response *resp, const char *name, const char *value)
{
    if (strpbrk(name, "\r\n:") != NULL || strpbrk(value, "\r\n") != NULL)
        return QN_EINVAL;
    size_t need = strlen(name) + strlen(value) + 4;
    if (need > sizeof resp->extra - 1 - resp->extra_len)
        return QN_ELIMIT;
    int n = snprintf(resp->extra + resp->extra_len, sizeof resp->extra - resp->extra_len,
                     "%s: %s\r\n", name, value);
    resp->extra_len += (size_t)n;
    return QN_OK;
}

int qn_side_new(struct event_base *base, const struct qn_config *cfg, qn_rpc_server *rpc,
                qn_metrics *metrics, qn_side **out)
{
    qn_side *s = calloc(1, sizeof *s);
    if (s == NULL)
        return QN_ENOMEM;
    s->enabled = cfg->http_port >= 0;
    struct qn_http1_limits lim = {
        .max_head = (size_t)cfg->http_max_header_bytes,
        .max_body = (size_t)cfg->max_recv_bytes + 5, /* one message and its prefix */
        .request_ms = cfg->http_request_timeout_ms,
    };
    s->calls = qn__rpc_server_calls(rpc);
    s->drain_ev = evtimer_new(base, on_drain_timer, s);
    s->done_ev = event_new(base, -1, 0, on_done, s);
    int rc = s->drain_ev && s->done_ev ? QN_OK : QN_ENOMEM;
    if (rc == QN_OK)
        rc = qn__http1_new(base, s->calls, &lim, metrics, &s->http);
    if (rc != QN_OK) {
        qn_side_free(s);
        return rc;
    }
    /* The net reads its listener settings from a configuration: the side
     * port's, in the gRPC port's fields (only these are read by qn__net_new;
     * the strings are borrowed for the call). */
    struct qn_config nc = *cfg;
    static char empty[] = "";
    nc.port = cfg->http_port < 0 ? 0 : cfg->http_port;
    nc.h2c = true;
    nc.tls_cert = empty;
    nc.tls_key = empty;
    nc.tls_client_ca = empty;
    nc.bind_addr = cfg->http_bind_addr[0] != '\0' ? cfg->http_bind_addr : cfg->bind_addr;
    nc.max_connections = cfg->http_max_connections;
    nc.idle_timeout_ms = cfg->http_idle_timeout_ms;
    nc.keepalive_ms = 3600000; /* no pings on HTTP/1.1 */
    struct qn_net_handler h;
    memset(&h, 0, sizeof h);
    qn__http1_handler(s->http, &h);
    h.owner = s;
    h.conn_freed = on_conn_freed;
    rc = qn__net_new(base, &nc, &h, &s->net);
    if (rc != QN_OK) {
        s->net = NULL;
        qn_side_free(s);
        return rc;
    }
    *out = s;
    return QN_OK;
}

int qn_side_route(qn_side *s, const char *name, const char *path, bool prefix, qn_http_handler h,
                  void *ud)
{
    return qn__http1_route(s->http, name, path, prefix, h, ud);
}

int qn_side_listen(qn_side *s)
{
    if (!s->enabled)
        return QN_OK;
    int rc = qn__net_listen(s->net);
    if (rc == QN_OK)
        s->listening = true;
    return rc;
}

int qn_side_port(const qn_side *s)
{
    return s->listening ? qn__net_port(s->net, false) : -1;
}

void qn_side_shutdown(qn_side *s)
{
    qn__http1_shutdown(s->http);
    qn__net_goaway_all(s->net);
}

void qn_side_drain(qn_side *s, int64_t timeout_ms, void (*done)(void *ud), void *ud)
{
    if (s->draining)
        return;
    s->draining = true;
    s->done = done;
    s->done_ud = ud;
    qn__http1_shutdown(s->http);
    qn__net_stop_accepting(s->net);
    qn__net_goaway_all(s->net);
    if (timeout_ms < 0)
        timeout_ms = 0;
    s->grace_ms = timeout_ms / 5 < DRAIN_GRACE_MS ? timeout_ms / 5 : DRAIN_GRACE_MS;
    int64_t first = timeout_ms - s->grace_ms;
    qn_timer_after(s->drain_ev, first);
    maybe_drained(s);
}

void qn_side_free(qn_side *s)
{
    if (s == NULL)
        return;
    qn__net_free(s->net); /* closes every session: their calls are cancelled */
    qn__http1_free(s->http);
    if (s->drain_ev)
        event_free(s->drain_ev);
    if (s->done_ev)
        event_free(s->done_ev);
    free(s);
}

void qn_side_stats(const qn_side *s, struct qn_side_stats *out)
{
    struct qn_net_stats ns;
    qn__net_stats(s->net, &ns);
    out->connections_accepted = ns.connections_accepted;
    out->bytes_in = ns.bytes_in;
    out->bytes_out = ns.bytes_out;
    size_t n = qn__net_conn_count(s->net);
    out->connections_open = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}
