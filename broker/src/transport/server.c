/*
 * transport/server.c - the gRPC server (implements server.h): it wires the
 * layers of the transport and runs the shutdown.
 *
 *   net.c (connections, TLS) --struct qn_net_handler--> h2.c (HTTP/2 sessions,
 *   the gRPC binding) --call_binding.h--> call.c (calls, methods)
 *   call.c --struct qn_call_ops--> h2.c;   h2.c --qn__net_conn_*--> net.c
 *
 * Does: make the three layers, give net the h2 handler (with this server as the
 * owner that hears connections freed), forward registration, budgets and
 * counters, and shut down in phases: stop accepting, write what can go now, end
 * streaming calls with UNAVAILABLE, GOAWAY everywhere; just before the timeout
 * end every remaining call and give them a grace period to write it; at the
 * timeout close whatever is left; call done() once every connection is gone.
 * Does not: know HTTP/2 or any method.
 *
 * Invariants:
 *   1. done() runs once, on the loop, after qn_rpc_server_shutdown() and only
 *      when no connection is left (or the timeout closed them).
 *   2. Teardown order: net (closes every connection, so every call) -> h2 ->
 *      calls; nothing frees a layer another still points into.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "log.h"
#include "queen/error.h"
#include "queen/store.h"
#include "transport/call_binding.h"
#include "transport/h2.h"
#include "transport/net.h"
#include "transport/server.h"
#include "timer.h"

#define SHUTDOWN_GRACE_MS 250

struct qn_rpc_server {
    struct event_base *base;
    struct qn_calls *calls;
    struct qn_h2 *h2;
    qn_net *net;
    /* shutdown */
    bool shutting_down;
    bool done_fired;
    int shutdown_phase;     /* 0 before phase 1 (end all calls), 1 before phase 2 (close) */
    int64_t shutdown_at_ms; /* when the shutdown started */
    int64_t shutdown_timeout_ms;
    struct event *shutdown_ev;
    struct event *done_ev;
    void (*done)(void *ud);
    void *done_ud;
};

static void maybe_done(qn_rpc_server *s)
{
    if (s->shutting_down && !s->done_fired && qn__net_conn_count(s->net) == 0) {
        s->done_fired = true;
        event_del(s->shutdown_ev);
        event_active(s->done_ev, 0, 0);
    }
}

/* The net's owner callback: a connection was freed. */
static void on_conn_freed(void *owner)
{
    maybe_done(owner);
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    qn_rpc_server *s = arg;
    if (s->done != NULL)
        s->done(s->done_ud);
}

static void on_shutdown_timer(evutil_socket_t fd, short what, void *arg)
{
    qn_rpc_server *s = arg;
    if (s->shutdown_phase == 0) {
        /* Phase 1: time is almost up; every call still running gets UNAVAILABLE and
         * the grace period to write it. */
        s->shutdown_phase = 1;
        qn__calls_end(s->calls, true);
        int64_t left = s->shutdown_at_ms + s->shutdown_timeout_ms - qn_store_now_ms();
        int64_t margin = s->shutdown_timeout_ms / 10 < 100 ? s->shutdown_timeout_ms / 10 : 100;
        int64_t wait = left > margin ? left - margin : 0;
        struct timeval tv = qn_tv_ms(wait);
        event_base_update_cache_time(s->base); /* from now, not from this turn's start */
        evtimer_add(s->shutdown_ev, &tv);
        return;
    }
    /* Phase 2: close whatever is left. */
    qn__net_close_all(s->net);
    maybe_done(s);
}

int qn_rpc_server_new(struct event_base *base, const struct qn_config *cfg, qn_rpc_server **out)
{
    qn_rpc_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return QN_ENOMEM;
    s->base = base;
    int rc = QN_ENOMEM;
    s->done_ev = event_new(base, -1, 0, on_done, s);
    s->shutdown_ev = evtimer_new(base, on_shutdown_timer, s);
    if (s->done_ev == NULL || s->shutdown_ev == NULL)
        goto fail;
    if ((rc = qn__calls_new(base, cfg, s, &s->calls)) != QN_OK)
        goto fail;
    if ((rc = qn__h2_new(s->calls, (uint32_t)cfg->max_concurrent_streams, &s->h2)) != QN_OK)
        goto fail;
    struct qn_net_handler h;
    memset(&h, 0, sizeof h);
    qn__h2_handler(s->h2, &h);
    h.owner = s;
    h.conn_freed = on_conn_freed;
    if ((rc = qn__net_new(base, cfg, &h, &s->net)) != QN_OK) {
        s->net = NULL;
        goto fail;
    }
    *out = s;
    return QN_OK;
fail:
    qn_rpc_server_free(s);
    return rc;
}

int qn_rpc_register(qn_rpc_server *s, const struct qn_method *methods, size_t n)
{
    return qn__calls_register(s->calls, methods, n);
}

void qn_rpc_server_set_gate(qn_rpc_server *s, qn_call_gate_fn gate, void *ud)
{
    qn__calls_set_gate(s->calls, gate, ud);
}

void qn_rpc_server_set_admission(qn_rpc_server *s, qn_call_admit_fn admit, void *ud)
{
    qn__calls_set_admission(s->calls, admit, ud);
}

void qn_rpc_server_admission_room(qn_rpc_server *s)
{
    qn__calls_admission_room(s->calls);
}

bool qn_rpc_has_service(const qn_rpc_server *s, const char *service)
{
    return qn__calls_has_service(s->calls, service);
}

int qn_rpc_server_listen(qn_rpc_server *s)
{
    return qn__net_listen(s->net);
}

void qn_rpc_server_set_handoff(qn_rpc_server *s, qn_rpc_handoff_fn fn, void *ud)
{
    qn__net_set_handoff(s->net, fn, ud);
}

void qn_rpc_server_adopt(qn_rpc_server *s, int fd, const struct sockaddr *sa, int salen, bool tls)
{
    qn__net_adopt(s->net, fd, sa, salen, tls, s->shutting_down);
}

void qn_rpc_server_share_conn_count(qn_rpc_server *s, _Atomic size_t *count)
{
    qn__net_share_live_count(s->net, count);
}

void qn_rpc_server_share_recv_count(qn_rpc_server *s, _Atomic size_t *count)
{
    qn__calls_share_inbound(s->calls, count);
}

void qn_rpc_server_share_stream_count(qn_rpc_server *s, _Atomic uint64_t *count)
{
    qn__calls_share_streams(s->calls, count);
}

void qn_rpc_server_split_send_buffer(qn_rpc_server *s, unsigned n)
{
    qn__calls_split_send_buffer(s->calls, n);
}

int qn_rpc_peers_new(const struct qn_config *cfg, struct qn_net_peers **out)
{
    return qn__net_peers_new((size_t)cfg->max_connections, out);
}

void qn_rpc_peers_free(struct qn_net_peers *t)
{
    qn__net_peers_free(t);
}

void qn_rpc_server_share_peers(qn_rpc_server *s, struct qn_net_peers *t)
{
    qn__net_share_peers(s->net, t);
}

int qn_rpc_server_port(const qn_rpc_server *s)
{
    return qn__net_port(s->net, false);
}

int qn_rpc_server_tls_port(const qn_rpc_server *s)
{
    return qn__net_port(s->net, true);
}

void qn_rpc_server_shutdown(qn_rpc_server *s, int timeout_ms, void (*done)(void *ud), void *ud)
{
    if (s->shutting_down)
        return;
    s->shutting_down = true;
    qn__calls_shutdown(s->calls);
    s->done = done;
    s->done_ud = ud;
    s->shutdown_at_ms = qn_store_now_ms();
    s->shutdown_timeout_ms = timeout_ms < 0 ? 0 : timeout_ms;
    QN_INFO("shutting down: draining %zu connections (up to %d ms)", qn__net_conn_count(s->net),
            timeout_ms);
    qn__net_stop_accepting(s->net);
    /* What the windows admit now (e.g. a Watch's NOT_SERVING) goes out before the
     * streams end. */
    qn__net_flush_all(s->net);
    qn__calls_end(s->calls, false);
    qn__net_goaway_all(s->net);
    int64_t grace = s->shutdown_timeout_ms / 5;
    if (grace > SHUTDOWN_GRACE_MS)
        grace = SHUTDOWN_GRACE_MS;
    int64_t first = s->shutdown_timeout_ms - grace;
    struct timeval tv = qn_tv_ms(first);
    /* libevent counts a timer from the time it cached at the start of this loop
     * turn: the phases would end early by the time this turn has run so far (the
     * drain logged 798 ms for a phase 1 of 800 in CI) */
    event_base_update_cache_time(s->base);
    evtimer_add(s->shutdown_ev, &tv);
    maybe_done(s);
}

bool qn_rpc_server_is_shutting_down(const qn_rpc_server *s)
{
    return s->shutting_down;
}

void qn_rpc_server_free(qn_rpc_server *s)
{
    if (s == NULL)
        return;
    qn__net_free(s->net); /* closes every connection: every call is cancelled */
    s->net = NULL;
    qn__h2_free(s->h2);
    qn__calls_free(s->calls);
    if (s->done_ev)
        event_free(s->done_ev);
    if (s->shutdown_ev)
        event_free(s->shutdown_ev);
    free(s);
}

void qn_rpc_server_stats(const qn_rpc_server *s, struct qn_rpc_stats *out)
{
    memset(out, 0, sizeof *out);
    qn__calls_stats(s->calls, out);
    struct qn_net_stats ns;
    qn__net_stats(s->net, &ns);
    out->connections_accepted = ns.connections_accepted;
    out->bytes_in = ns.bytes_in;
    out->bytes_out = ns.bytes_out;
    size_t n = qn__net_conn_count(s->net);
    out->connections_open = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

void qn_rpc_stats_add(struct qn_rpc_stats *acc, const struct qn_rpc_stats *s)
{
    acc->connections_accepted += s->connections_accepted;
    acc->connections_open += s->connections_open;
    acc->calls_started += s->calls_started;
    acc->calls_open += s->calls_open;
    acc->streams_open += s->streams_open;
    acc->calls_waiting += s->calls_waiting;
    for (size_t i = 0; i < sizeof acc->status_count / sizeof acc->status_count[0]; i++)
        acc->status_count[i] += s->status_count[i];
    acc->bytes_in += s->bytes_in;
    acc->bytes_out += s->bytes_out;
}

int qn_rpc_stream_acquire(qn_rpc_server *s)
{
    return qn__calls_stream_acquire(s->calls);
}

void qn_rpc_stream_release(qn_rpc_server *s)
{
    qn__calls_stream_release(s->calls);
}

struct qn_calls *qn__rpc_server_calls(qn_rpc_server *s)
{
    return s->calls;
}

int qn_rpc_server_set_metrics(qn_rpc_server *s, qn_metrics *m)
{
    return qn__calls_set_metrics(s->calls, m);
}

size_t qn_rpc_max_send_bytes(const qn_rpc_server *s)
{
    return qn__calls_max_send(s->calls);
}
