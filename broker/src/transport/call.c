/*
 * grpc.c - gRPC calls on the HTTP/2 streams of net.c; implements rpc.h.
 *
 * Does: collect and check request headers, route :path to a registered method,
 * reassemble length-prefixed request messages (cap checked on the prefix),
 * decode them with protobuf-c, hand them to the method, queue responses behind an
 * nghttp2 data provider, send trailers (grpc-status always, grpc-message
 * percent-encoded) after the last DATA or as a trailers-only response, enforce
 * grpc-timeout deadlines, end streaming calls on shutdown.
 * Unary and server-streaming methods get their one request message at END_STREAM
 * (a second message is INTERNAL, none is INTERNAL); client-streaming methods get
 * each message as it completes and on_half_close() at END_STREAM.
 * Does not: compress (only identity is accepted; anything else is UNIMPLEMENTED),
 * touch sockets or TLS (net.c), know what a method does.
 *
 * Call lifecycle (the handler-visible part is rpc.h's OPEN / FINISHED / DEAD):
 *
 *   HEADERS --headers pass the checks--> RECEIVING --first dispatch--> OPEN
 *   HEADERS|RECEIVING|OPEN --call_end() (handler finish, bad input, deadline,
 *                           shutdown)--> FINISHED
 *   any --stream closed (or connection gone)--> CLOSED --reap pass--> freed
 *
 *   on_cancel() runs exactly when a call leaves OPEN by any way other than
 *   qn_call_finish(): call_end() by the transport, or the stream closing.
 *
 * Flow control (nghttp2 runs without automatic WINDOW_UPDATE):
 *   - inbound: every DATA chunk is fed to the call's reader and each message it
 *     completes is handed to its handler before nghttp2_session_consume() grants
 *     the chunk's bytes back, so the client can never have more in flight than
 *     the windows; bytes of a message still incomplete are granted as they are
 *     stored in its buffer, which the declared length (checked against
 *     QUEEN_MAX_RECV_BYTES on the prefix) bounds, or a message larger than the
 *     stream window could never arrive. Per connection the broker holds at most
 *     QUEEN_MAX_CONCURRENT_STREAMS partial messages.
 *   - outbound: qn_call_send() appends to the call's queue (hard cap); the data
 *     provider hands nghttp2 only what the peer's windows admit and returns
 *     NGHTTP2_ERR_DEFERRED when the queue is empty; sending resumes it with
 *     nghttp2_session_resume_data(). Services watch qn_call_pending_bytes() and
 *     wait for qn_call_on_drain().
 *
 * Invariants:
 *   1. A call is freed only in the reap pass, after its stream is gone; nghttp2
 *      never holds a pointer to a freed call (stream user data and data source
 *      die with the stream).
 *   2. Every response carries content-type: application/grpc and a grpc-status,
 *      in trailers after the last DATA or in a trailers-only HEADERS; DATA never
 *      carries END_STREAM.
 *   3. A handler never sees a call after qn_call_finish() or after on_cancel()
 *      returned; on_cancel never follows qn_call_finish().
 *   4. Buffers are bounded: request headers (QN_NET_MAX_HEADER_LIST bytes,
 *      MAX_HEADERS fields), one partial request message per call
 *      (QUEEN_MAX_RECV_BYTES), queued response bytes per call (max_pending).
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "config.h"
#include "transport/grpc_wire.h"
#include "log.h"
#include "transport/net.h"
#include "queen/error.h"
#include "transport/call.h"

#define MAX_HEADERS 64
#define MAX_STATUS_MSG 1024 /* raw bytes of a grpc-message we send */
#define MIN_PENDING_CAP (16u << 20)
#define PENDING_FACTOR 4
#define SHUTDOWN_GRACE_MS 250

enum call_state {
    CALL_HEADERS,   /* receiving request headers */
    CALL_RECEIVING, /* accepted; messages arriving; the handler has not seen the call */
    CALL_OPEN,      /* the handler owns it */
    CALL_FINISHED,  /* trailers queued; waiting for the stream to close */
    CALL_CLOSED,    /* stream gone; on the dead list */
};

struct hdr {
    uint32_t name;  /* offset of the NUL-terminated name in hbuf */
    uint32_t value; /* offset of the NUL-terminated value in hbuf */
};

struct grpc_conn {
    qn_rpc_server *server;
    qn_conn *conn;
    qn_call *calls; /* every call of this connection not CLOSED */
    size_t ncalls;
    size_t inbound; /* bytes held by its calls' partly received messages */
};

struct qn_call {
    enum call_state state;
    qn_rpc_server *server;
    struct grpc_conn *gc; /* NULL once CLOSED */
    int32_t stream_id;
    const struct qn_method *method; /* NULL until routed */
    qn_call *prev, *next;           /* in gc->calls, or server->dead when CLOSED */
    /* request headers */
    char *hbuf; /* name\0value\0 pairs; <= QN_NET_MAX_HEADER_LIST */
    uint32_t hlen, hcap;
    struct hdr hdrs[MAX_HEADERS];
    uint32_t nhdrs;
    bool hdr_overflow; /* more than the limits: rejected at END_HEADERS */
    /* inbound */
    struct qn_grpc_reader reader;
    uint32_t accounted;     /* reader bytes counted in gc->inbound */
    ProtobufCMessage *held; /* unary / server-streaming: request awaiting END_STREAM */
    bool remote_closed;
    /* outbound */
    struct evbuffer *out; /* encoded messages not yet taken by nghttp2 */
    uint32_t nsent;       /* messages queued so far */
    bool headers_sent;    /* response HEADERS submitted */
    bool trailers_due;    /* finished: trailers follow the queued data */
    enum qn_grpc_code status;
    char *status_msg; /* percent-encoded grpc-message, NULL for none */
    void (*on_drain)(qn_call *call);
    struct event *drain_ev; /* made on first qn_call_on_drain() */
    int64_t deadline_ms;    /* 0 = none */
    struct event *deadline_ev;
    void *data;
};

struct method_table {
    const struct qn_method *m;
    size_t n;
};

struct qn_rpc_server {
    struct event_base *base;
    qn_net *net;
    size_t max_recv, max_send, max_pending;
    size_t max_conn_recv; /* QUEEN_MAX_CONN_RECV_BYTES */
    uint64_t max_stream_slots, stream_slots;
    struct method_table *tables;
    size_t ntables;
    qn_call *dead; /* CLOSED calls waiting for the reap pass */
    struct event *reap_ev;
    /* shutdown */
    bool shutting_down;
    bool done_fired;
    int shutdown_phase;     /* 0 before phase 1 (cancel all), 1 before phase 2 (close) */
    int64_t shutdown_at_ms; /* when the shutdown started */
    int64_t shutdown_timeout_ms;
    struct event *shutdown_ev;
    struct event *done_ev;
    void (*done)(void *ud);
    void *done_ud;
    struct qn_rpc_stats stats;
};

static void call_end(qn_call *c, int http_status, enum qn_grpc_code code, const char *msg,
                     bool accept_encoding);

/* ---------------------------------------------------------------- lists */

static void call_push(qn_call **head, qn_call *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

static void call_unlink(qn_call **head, qn_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* ---------------------------------------------------------------- calls: lifetime */

/* Keeps gc->inbound equal to the bytes its calls' readers hold. */
static void reader_account(qn_call *c)
{
    if (c->gc != NULL)
        c->gc->inbound = c->gc->inbound - c->accounted + c->reader.cap;
    c->accounted = c->gc != NULL ? c->reader.cap : 0;
}

static void call_free(qn_call *c)
{
    if (c->deadline_ev)
        event_free(c->deadline_ev);
    if (c->drain_ev)
        event_free(c->drain_ev);
    if (c->out)
        evbuffer_free(c->out);
    if (c->held)
        protobuf_c_message_free_unpacked(c->held, NULL);
    qn_grpc_reader_reset(&c->reader);
    free(c->hbuf);
    free(c->status_msg);
    free(c);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    qn_rpc_server *s = arg;
    while (s->dead != NULL) {
        qn_call *c = s->dead;
        call_unlink(&s->dead, c);
        call_free(c);
    }
}

/* The stream is gone (or its connection): the call leaves every list but the dead
 * one; a handler that owned it hears on_cancel(reason). */
static void call_close(qn_call *c, int reason)
{
    enum call_state prev = c->state;
    assert(prev != CALL_CLOSED);
    qn_rpc_server *s = c->server;
    c->state = CALL_CLOSED;
    if (c->deadline_ev)
        event_del(c->deadline_ev);
    if (c->drain_ev)
        event_del(c->drain_ev);
    c->on_drain = NULL;
    if (c->held) {
        protobuf_c_message_free_unpacked(c->held, NULL);
        c->held = NULL;
    }
    qn_grpc_reader_reset(&c->reader);
    reader_account(c);
    if (prev != CALL_FINISHED)
        s->stats.status_count[QN_GRPC_CANCELLED]++;
    if (c->gc != NULL) {
        call_unlink(&c->gc->calls, c);
        c->gc->ncalls--;
        c->gc = NULL;
    }
    s->stats.calls_open--;
    call_push(&s->dead, c);
    event_active(s->reap_ev, 0, 0);
    if (prev == CALL_OPEN && c->method->on_cancel)
        c->method->on_cancel(c, reason);
}

static nghttp2_session *call_session(const qn_call *c)
{
    if (c->gc == NULL || qn__net_conn_is_dead(c->gc->conn))
        return NULL;
    return qn__net_session(c->gc->conn);
}

/* ---------------------------------------------------------------- calls: output */

static nghttp2_nv make_nv(const char *name, const char *value)
{
    nghttp2_nv nv = {(uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value),
                     NGHTTP2_NV_FLAG_NONE};
    return nv;
}

static void submit_trailers(qn_call *c, nghttp2_session *session)
{
    char code[12];
    snprintf(code, sizeof code, "%d", (int)c->status);
    nghttp2_nv nv[2];
    size_t n = 0;
    nv[n++] = make_nv("grpc-status", code);
    if (c->status_msg != NULL)
        nv[n++] = make_nv("grpc-message", c->status_msg);
    int rv = nghttp2_submit_trailer(session, c->stream_id, nv, n);
    if (rv != 0)
        QN_DEBUG("cannot submit trailers stream=%d detail=\"%s\"", c->stream_id,
                 nghttp2_strerror(rv));
}

static ssize_t read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *ud)
{
    qn_call *c = source->ptr;
    size_t avail = evbuffer_get_length(c->out);
    size_t n = avail < length ? avail : length;
    if (n > 0) {
        int got = evbuffer_remove(c->out, buf, n);
        if (got < 0 || (size_t)got != n)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (evbuffer_get_length(c->out) > 0)
        return (ssize_t)n;
    if (c->trailers_due) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        submit_trailers(c, session);
        return (ssize_t)n;
    }
    if (n > 0 && c->on_drain != NULL && c->drain_ev != NULL)
        event_active(c->drain_ev, 0, 0);
    return n > 0 ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

/* Submits the response HEADERS with the body behind the data provider. */
static int submit_headers(qn_call *c, nghttp2_session *session)
{
    nghttp2_nv nv[2] = {make_nv(":status", "200"), make_nv("content-type", "application/grpc")};
    nghttp2_data_provider prd;
    prd.source.ptr = c;
    prd.read_callback = read_body;
    int rv = nghttp2_submit_response(session, c->stream_id, nv, 2, &prd);
    if (rv != 0) {
        QN_DEBUG("cannot submit response stream=%d detail=\"%s\"", c->stream_id,
                 nghttp2_strerror(rv));
        return QN_ECLOSED;
    }
    c->headers_sent = true;
    return QN_OK;
}

/*
 * Ends the call on the wire: a trailers-only response when nothing was sent,
 * else trailers after the queued data. Moves to FINISHED. Never runs on_cancel
 * (callers that take the call from a handler do that).
 */
static void call_end(qn_call *c, int http_status, enum qn_grpc_code code, const char *msg,
                     bool accept_encoding)
{
    assert(c->state == CALL_HEADERS || c->state == CALL_RECEIVING || c->state == CALL_OPEN);
    qn_rpc_server *s = c->server;
    c->state = CALL_FINISHED;
    if (c->deadline_ev)
        event_del(c->deadline_ev);
    if (c->drain_ev)
        event_del(c->drain_ev);
    c->on_drain = NULL;
    if (c->held) {
        protobuf_c_message_free_unpacked(c->held, NULL);
        c->held = NULL;
    }
    qn_grpc_reader_reset(&c->reader);
    reader_account(c);
    if ((unsigned)code > QN_GRPC_UNAUTHENTICATED)
        code = QN_GRPC_UNKNOWN;
    s->stats.status_count[code]++;
    c->status = code;
    if (msg != NULL && msg[0] != '\0') {
        size_t len = strnlen(msg, MAX_STATUS_MSG);
        char enc[3 * MAX_STATUS_MSG + 1];
        qn_grpc_pct_encode(msg, len, enc, sizeof enc);
        c->status_msg = strdup(enc); /* NULL on OOM: the status still goes out */
    }
    if (code != QN_GRPC_OK)
        QN_DEBUG("call failed path=%s status=%d message=\"%s\"", c->method ? c->method->path : "?",
                 (int)code, msg ? msg : "");
    nghttp2_session *session = call_session(c);
    if (session == NULL)
        return;
    if (c->headers_sent) {
        c->trailers_due = true;
        nghttp2_session_resume_data(session, c->stream_id); /* fails harmlessly if not deferred */
    } else {
        char st[8], gs[12];
        snprintf(st, sizeof st, "%d", http_status);
        snprintf(gs, sizeof gs, "%d", (int)code);
        nghttp2_nv nv[5];
        size_t n = 0;
        nv[n++] = make_nv(":status", st);
        nv[n++] = make_nv("content-type", "application/grpc");
        if (accept_encoding)
            nv[n++] = make_nv("grpc-accept-encoding", "identity");
        nv[n++] = make_nv("grpc-status", gs);
        if (c->status_msg != NULL)
            nv[n++] = make_nv("grpc-message", c->status_msg);
        int rv = nghttp2_submit_response(session, c->stream_id, nv, n, NULL);
        if (rv != 0)
            QN_DEBUG("cannot submit response stream=%d detail=\"%s\"", c->stream_id,
                     nghttp2_strerror(rv));
        c->headers_sent = true;
    }
    qn__net_schedule_flush(c->gc->conn);
}

/* The transport takes the call away (bad input, deadline, shutdown): answer code,
 * and tell the handler if it had the call. */
static void call_abort(qn_call *c, enum qn_grpc_code code, const char *msg, int reason)
{
    bool owned = c->state == CALL_OPEN;
    /* Messages the peer's window has not admitted yet would only hold the status
     * back behind a slow reader: dropped, so the trailers (not flow-controlled) go
     * next. (On shutdown a send pass runs first, so what can go does.) */
    evbuffer_drain(c->out, evbuffer_get_length(c->out));
    call_end(c, 200, code, msg, false);
    if (owned && c->method->on_cancel)
        c->method->on_cancel(c, reason);
}

/* ---------------------------------------------------------------- calls: input */

static const char *find_header(const qn_call *c, const char *name)
{
    for (uint32_t i = 0; i < c->nhdrs; i++)
        if (strcmp(c->hbuf + c->hdrs[i].name, name) == 0)
            return c->hbuf + c->hdrs[i].value;
    return NULL;
}

static const struct qn_method *route(const qn_rpc_server *s, const char *path)
{
    if (path == NULL)
        return NULL;
    for (size_t t = 0; t < s->ntables; t++)
        for (size_t i = 0; i < s->tables[t].n; i++)
            if (strcmp(s->tables[t].m[i].path, path) == 0)
                return &s->tables[t].m[i];
    return NULL;
}

static bool is_streaming(const struct qn_method *m)
{
    return m->client_streaming || m->server_streaming;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    qn_call *c = arg;
    if (c->state != CALL_RECEIVING && c->state != CALL_OPEN)
        return;
    call_abort(c, QN_GRPC_DEADLINE_EXCEEDED, "deadline exceeded", QN_EDEADLINE);
}

/* END_HEADERS of the request: check, route, arm the deadline. */
static void call_start(qn_call *c)
{
    qn_rpc_server *s = c->server;
    if (c->state != CALL_HEADERS)
        return;
    if (c->hdr_overflow) {
        call_end(c, 200, QN_GRPC_RESOURCE_EXHAUSTED, "request headers are too large", false);
        return;
    }
    struct qn_grpc_req_headers h = {
        find_header(c, ":method"),       find_header(c, "content-type"), find_header(c, "te"),
        find_header(c, "grpc-encoding"), find_header(c, "grpc-timeout"),
    };
    struct qn_grpc_verdict v;
    int64_t timeout_ms = -1;
    if (!qn_grpc_check_request(&h, &timeout_ms, &v)) {
        call_end(c, v.http_status, v.code, v.message, v.accept_encoding);
        return;
    }
    const char *path = find_header(c, ":path");
    c->method = route(s, path);
    if (c->method == NULL) {
        char msg[300];
        snprintf(msg, sizeof msg, "unknown method %.256s", path ? path : "");
        call_end(c, 200, QN_GRPC_UNIMPLEMENTED, msg, false);
        return;
    }
    if (s->shutting_down && is_streaming(c->method)) {
        call_end(c, 200, QN_GRPC_UNAVAILABLE, "the server is shutting down", false);
        return;
    }
    c->state = CALL_RECEIVING;
    qn_grpc_reader_init(&c->reader, s->max_recv);
    if (timeout_ms >= 0) {
        c->deadline_ms = qn__net_now_ms() + timeout_ms;
        if (c->deadline_ms == 0)
            c->deadline_ms = 1;
        c->deadline_ev = evtimer_new(s->base, on_deadline, c);
        if (c->deadline_ev == NULL) {
            call_end(c, 200, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory", false);
            return;
        }
        struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
        evtimer_add(c->deadline_ev, &tv);
    }
}

/* One complete request message. */
static void call_message(qn_call *c, struct qn_grpc_msg *m)
{
    static const uint8_t empty[1] = {0};
    if (m->compressed) {
        free(m->body);
        call_abort(c, QN_GRPC_INTERNAL, "compressed message without grpc-encoding", QN_EBADREQUEST);
        return;
    }
    ProtobufCMessage *pm =
        protobuf_c_message_unpack(c->method->request, NULL, m->len, m->body ? m->body : empty);
    free(m->body);
    if (pm == NULL) {
        call_abort(c, QN_GRPC_INVALID_ARGUMENT, "cannot decode request", QN_EBADREQUEST);
        return;
    }
    if (!c->method->client_streaming) {
        if (c->held != NULL) {
            protobuf_c_message_free_unpacked(pm, NULL);
            call_abort(c, QN_GRPC_INTERNAL, "more than one request message for a unary method",
                       QN_EBADREQUEST);
            return;
        }
        c->held = pm; /* handed over at END_STREAM */
        return;
    }
    c->state = CALL_OPEN;
    c->method->on_message(c, pm);
}

/* The client ended its side of the stream. */
static void call_remote_close(qn_call *c)
{
    c->remote_closed = true;
    if (c->state != CALL_RECEIVING && c->state != CALL_OPEN)
        return;
    if (!qn_grpc_reader_is_idle(&c->reader)) {
        call_abort(c, QN_GRPC_INTERNAL, "request message truncated by the end of the stream",
                   QN_EBADREQUEST);
        return;
    }
    if (!c->method->client_streaming) {
        if (c->held == NULL) {
            call_end(c, 200, QN_GRPC_INTERNAL, "missing request message", false);
            return;
        }
        ProtobufCMessage *pm = c->held;
        c->held = NULL;
        c->state = CALL_OPEN;
        c->method->on_message(c, pm);
        return;
    }
    if (c->method->on_half_close != NULL) {
        c->state = CALL_OPEN;
        c->method->on_half_close(c);
    } else if (c->state == CALL_RECEIVING) {
        call_end(c, 200, QN_GRPC_OK, NULL, false); /* nothing was asked */
    }
}

/* ---------------------------------------------------------------- nghttp2 callbacks */

static qn_call *stream_call(nghttp2_session *session, int32_t stream_id)
{
    return nghttp2_session_get_stream_user_data(session, stream_id);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    qn_conn *conn = ud;
    struct grpc_conn *gc = qn__net_conn_data(conn);
    if (gc == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    qn_rpc_server *s = gc->server;
    qn_call *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    c->out = evbuffer_new();
    if (c->out == NULL) {
        free(c);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    c->state = CALL_HEADERS;
    c->server = s;
    c->gc = gc;
    c->stream_id = frame->hd.stream_id;
    qn_grpc_reader_init(&c->reader, s->max_recv);
    if (nghttp2_session_set_stream_user_data(session, c->stream_id, c) != 0) {
        evbuffer_free(c->out);
        free(c);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    call_push(&gc->calls, c);
    gc->ncalls++;
    s->stats.calls_started++;
    s->stats.calls_open++;
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers from the client carry nothing we use */
    qn_call *c = stream_call(session, frame->hd.stream_id);
    if (c == NULL || c->state != CALL_HEADERS || c->hdr_overflow)
        return 0;
    size_t need = namelen + valuelen + 2;
    if (c->nhdrs == MAX_HEADERS || need > QN_NET_MAX_HEADER_LIST - c->hlen) {
        c->hdr_overflow = true;
        return 0;
    }
    if (c->hlen + need > c->hcap) {
        size_t ncap = c->hcap ? (size_t)c->hcap * 2 : 1024;
        while (ncap < c->hlen + need)
            ncap *= 2;
        if (ncap > QN_NET_MAX_HEADER_LIST)
            ncap = QN_NET_MAX_HEADER_LIST;
        char *nb = realloc(c->hbuf, ncap);
        if (nb == NULL) {
            c->hdr_overflow = true;
            return 0;
        }
        c->hbuf = nb;
        c->hcap = (uint32_t)ncap;
    }
    /* nghttp2 rejects NUL in field names and values, so the C strings are exact. */
    c->hdrs[c->nhdrs].name = c->hlen;
    memcpy(c->hbuf + c->hlen, name, namelen);
    c->hbuf[c->hlen + namelen] = '\0';
    c->hlen += (uint32_t)namelen + 1;
    c->hdrs[c->nhdrs].value = c->hlen;
    memcpy(c->hbuf + c->hlen, value, valuelen);
    c->hbuf[c->hlen + valuelen] = '\0';
    c->hlen += (uint32_t)valuelen + 1;
    c->nhdrs++;
    return 0;
}

int qn__grpc_on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    qn_call *c = stream_call(session, frame->hd.stream_id);
    if (c == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        call_start(c);
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && c->state != CALL_CLOSED)
        call_remote_close(c);
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *ud)
{
    qn_call *c = stream_call(session, stream_id);
    size_t off = 0;
    while (c != NULL && (c->state == CALL_RECEIVING || c->state == CALL_OPEN) && off < len) {
        size_t used = 0;
        bool ready = false;
        struct qn_grpc_msg m;
        int rc = qn_grpc_reader_feed(&c->reader, data + off, len - off, &used, &ready, &m);
        off += used;
        reader_account(c);
        if (rc == QN_OK && !ready && c->gc != NULL &&
            c->gc->inbound > c->server->max_conn_recv) {
            /* many streams each holding part of a large message: refuse this one
             * rather than buffer without bound (its window is granted below) */
            char msg[160];
            snprintf(msg, sizeof msg,
                     "the connection holds more than %zu bytes of unfinished requests",
                     c->server->max_conn_recv);
            call_abort(c, QN_GRPC_RESOURCE_EXHAUSTED, msg, QN_EBADREQUEST);
        } else if (rc == QN_ELIMIT) {
            char msg[160];
            snprintf(msg, sizeof msg, "request message of %u bytes exceeds the limit of %zu bytes",
                     qn_grpc_reader_pending_len(&c->reader), c->server->max_recv);
            call_abort(c, QN_GRPC_RESOURCE_EXHAUSTED, msg, QN_EBADREQUEST);
        } else if (rc == QN_EBADREQUEST) {
            call_abort(c, QN_GRPC_INTERNAL, "invalid message prefix flags", QN_EBADREQUEST);
        } else if (rc != QN_OK) {
            call_abort(c, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory", QN_EBADREQUEST);
        } else if (ready) {
            call_message(c, &m);
        }
    }
    /* The chunk was handled (or discarded): grant its bytes back. */
    nghttp2_session_consume(session, stream_id, len);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *ud)
{
    qn_call *c = stream_call(session, stream_id);
    if (c != NULL && c->state != CALL_CLOSED)
        call_close(c, QN_ECLOSED);
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    /* Our side ended before the client's (early error, deadline): tell it to stop
     * sending, as RFC 9113 8.1 allows after a complete response. */
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        nghttp2_session_get_stream_remote_close(session, frame->hd.stream_id) == 0)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

void qn__grpc_set_callbacks(nghttp2_session_callbacks *cbs)
{
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, qn__grpc_on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
}

/* ---------------------------------------------------------------- connections */

int qn__grpc_conn_open(qn_rpc_server *s, qn_conn *conn)
{
    struct grpc_conn *gc = calloc(1, sizeof *gc);
    if (gc == NULL)
        return QN_ENOMEM;
    gc->server = s;
    gc->conn = conn;
    qn__net_conn_set_data(conn, gc);
    return QN_OK;
}

void qn__grpc_conn_closed(qn_rpc_server *s, qn_conn *conn)
{
    struct grpc_conn *gc = qn__net_conn_data(conn);
    if (gc == NULL)
        return;
    /* call_close() unlinks only its own call; handlers cannot close other streams
     * synchronously, so taking the head each time visits every call once. */
    while (gc->calls != NULL)
        call_close(gc->calls, QN_ECLOSED);
    qn__net_conn_set_data(conn, NULL);
    free(gc);
}

size_t qn__grpc_conn_calls(const qn_conn *conn)
{
    const struct grpc_conn *gc = qn__net_conn_data(conn);
    return gc ? gc->ncalls : 0;
}

static void maybe_done(qn_rpc_server *s)
{
    if (s->shutting_down && !s->done_fired && qn__net_conn_count(s->net) == 0) {
        s->done_fired = true;
        event_del(s->shutdown_ev);
        event_active(s->done_ev, 0, 0);
    }
}

void qn__grpc_conn_freed(qn_rpc_server *s)
{
    maybe_done(s);
}

void qn__grpc_count_bytes(qn_rpc_server *s, size_t in, size_t out)
{
    s->stats.bytes_in += in;
    s->stats.bytes_out += out;
}

void qn__grpc_count_accept(qn_rpc_server *s)
{
    s->stats.connections_accepted++;
}

/* ---------------------------------------------------------------- server */

static void on_shutdown_timer(evutil_socket_t fd, short what, void *arg);

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    qn_rpc_server *s = arg;
    if (s->done != NULL)
        s->done(s->done_ud);
}

int qn_rpc_server_new(struct event_base *base, const struct qn_config *cfg, qn_rpc_server **out)
{
    qn_rpc_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return QN_ENOMEM;
    s->base = base;
    s->max_recv = (size_t)cfg->max_recv_bytes;
    s->max_conn_recv = (size_t)cfg->max_conn_recv_bytes;
    s->max_send = (size_t)cfg->max_send_bytes;
    s->max_pending = PENDING_FACTOR * s->max_send;
    if (s->max_pending < MIN_PENDING_CAP)
        s->max_pending = MIN_PENDING_CAP;
    s->max_stream_slots = (uint64_t)cfg->max_streams;
    s->reap_ev = event_new(base, -1, 0, on_reap, s);
    s->done_ev = event_new(base, -1, 0, on_done, s);
    s->shutdown_ev = evtimer_new(base, on_shutdown_timer, s);
    if (s->reap_ev == NULL || s->done_ev == NULL || s->shutdown_ev == NULL) {
        qn_rpc_server_free(s);
        return QN_ENOMEM;
    }
    int rc = qn__net_new(base, cfg, s, &s->net);
    if (rc != QN_OK) {
        s->net = NULL;
        qn_rpc_server_free(s);
        return rc;
    }
    *out = s;
    return QN_OK;
}

static bool path_ok(const char *p)
{
    /* "/pkg.Service/Method": a leading slash, one more slash, no empty parts. */
    if (p == NULL || p[0] != '/')
        return false;
    const char *slash = strchr(p + 1, '/');
    return slash != NULL && slash > p + 1 && slash[1] != '\0' && strchr(slash + 1, '/') == NULL;
}

int qn_rpc_register(qn_rpc_server *s, const struct qn_method *methods, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!path_ok(methods[i].path) || methods[i].request == NULL ||
            methods[i].on_message == NULL) {
            QN_ERROR("cannot register method %s: malformed entry",
                     methods[i].path ? methods[i].path : "(null)");
            return QN_EINVAL;
        }
        if (route(s, methods[i].path) != NULL) {
            QN_ERROR("cannot register method %s: already registered", methods[i].path);
            return QN_EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(methods[i].path, methods[j].path) == 0) {
                QN_ERROR("cannot register method %s: listed twice", methods[i].path);
                return QN_EINVAL;
            }
    }
    struct method_table *t = realloc(s->tables, (s->ntables + 1) * sizeof *t);
    if (t == NULL)
        return QN_ENOMEM;
    s->tables = t;
    s->tables[s->ntables++] = (struct method_table){methods, n};
    return QN_OK;
}

bool qn_rpc_has_service(const qn_rpc_server *s, const char *service)
{
    size_t len = strlen(service);
    for (size_t t = 0; t < s->ntables; t++)
        for (size_t i = 0; i < s->tables[t].n; i++) {
            const char *p = s->tables[t].m[i].path;
            if (strncmp(p + 1, service, len) == 0 && p[1 + len] == '/')
                return true;
        }
    return false;
}

int qn_rpc_server_listen(qn_rpc_server *s)
{
    return qn__net_listen(s->net);
}

int qn_rpc_server_port(const qn_rpc_server *s)
{
    return qn__net_port(s->net, false);
}

int qn_rpc_server_tls_port(const qn_rpc_server *s)
{
    return qn__net_port(s->net, true);
}

/* Ends the calls of one connection with UNAVAILABLE: streaming ones only, or all. */
struct end_calls {
    bool all;
};

static void end_calls_on_conn(qn_conn *conn, void *ud)
{
    const struct end_calls *ec = ud;
    struct grpc_conn *gc = qn__net_conn_data(conn);
    if (gc == NULL)
        return;
    for (qn_call *c = gc->calls, *next; c != NULL; c = next) {
        next = c->next; /* call_abort never unlinks; handlers cannot close streams here */
        if (c->state != CALL_RECEIVING && c->state != CALL_OPEN && c->state != CALL_HEADERS)
            continue;
        if (!ec->all && (c->method == NULL || !is_streaming(c->method)))
            continue;
        if (c->state == CALL_HEADERS)
            call_end(c, 200, QN_GRPC_UNAVAILABLE, "the server is shutting down", false);
        else
            call_abort(c, QN_GRPC_UNAVAILABLE, "the server is shutting down", QN_ESHUTDOWN);
    }
    qn__net_schedule_flush(conn);
}

static void flush_conn(qn_conn *conn, void *ud)
{
    qn__net_flush(conn);
}

static void on_shutdown_timer(evutil_socket_t fd, short what, void *arg)
{
    qn_rpc_server *s = arg;
    if (s->shutdown_phase == 0) {
        /* Phase 1: time is almost up; every call still running gets UNAVAILABLE and
         * the grace period to write it. */
        s->shutdown_phase = 1;
        struct end_calls ec = {true};
        qn__net_each_conn(s->net, end_calls_on_conn, &ec);
        int64_t left = s->shutdown_at_ms + s->shutdown_timeout_ms - qn__net_now_ms();
        int64_t margin = s->shutdown_timeout_ms / 10 < 100 ? s->shutdown_timeout_ms / 10 : 100;
        int64_t wait = left > margin ? left - margin : 0;
        struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)(wait % 1000) * 1000};
        evtimer_add(s->shutdown_ev, &tv);
        return;
    }
    /* Phase 2: close whatever is left. */
    qn__net_close_all(s->net);
    maybe_done(s);
}

void qn_rpc_server_shutdown(qn_rpc_server *s, int timeout_ms, void (*done)(void *ud), void *ud)
{
    if (s->shutting_down)
        return;
    s->shutting_down = true;
    s->done = done;
    s->done_ud = ud;
    s->shutdown_at_ms = qn__net_now_ms();
    s->shutdown_timeout_ms = timeout_ms < 0 ? 0 : timeout_ms;
    QN_INFO("shutting down: draining %zu connections (up to %d ms)", qn__net_conn_count(s->net),
            timeout_ms);
    qn__net_stop_accepting(s->net);
    /* What the windows admit now (e.g. a Watch's NOT_SERVING) goes out before the
     * streams end. */
    qn__net_each_conn(s->net, flush_conn, NULL);
    struct end_calls ec = {false};
    qn__net_each_conn(s->net, end_calls_on_conn, &ec);
    qn__net_goaway_all(s->net);
    int64_t grace = s->shutdown_timeout_ms / 5;
    if (grace > SHUTDOWN_GRACE_MS)
        grace = SHUTDOWN_GRACE_MS;
    int64_t first = s->shutdown_timeout_ms - grace;
    struct timeval tv = {(time_t)(first / 1000), (suseconds_t)(first % 1000) * 1000};
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
    qn__net_free(s->net); /* cancels every call still open */
    s->net = NULL;
    on_reap(-1, 0, s);
    if (s->reap_ev)
        event_free(s->reap_ev);
    if (s->done_ev)
        event_free(s->done_ev);
    if (s->shutdown_ev)
        event_free(s->shutdown_ev);
    free(s->tables);
    free(s);
}

void qn_rpc_server_stats(const qn_rpc_server *s, struct qn_rpc_stats *out)
{
    *out = s->stats;
    size_t n = qn__net_conn_count(s->net);
    out->connections_open = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

int qn_rpc_stream_acquire(qn_rpc_server *s)
{
    if (s->stream_slots >= s->max_stream_slots)
        return QN_EBUSY;
    s->stream_slots++;
    return QN_OK;
}

void qn_rpc_stream_release(qn_rpc_server *s)
{
    if (s->stream_slots > 0)
        s->stream_slots--;
}

size_t qn_rpc_max_send_bytes(const qn_rpc_server *s)
{
    return s->max_send;
}

/* ---------------------------------------------------------------- calls: API */

static void free_ref(const void *data, size_t len, void *extra)
{
    free((void *)data);
}

int qn_call_send(qn_call *c, const ProtobufCMessage *msg)
{
    if (c == NULL || c->state != CALL_OPEN)
        return QN_ECLOSED;
    nghttp2_session *session = call_session(c);
    if (session == NULL)
        return QN_ECLOSED;
    if (!c->method->server_streaming && c->nsent > 0)
        return QN_EINVAL;
    size_t size = protobuf_c_message_get_packed_size(msg);
    qn_rpc_server *s = c->server;
    if (size > s->max_send || size > UINT32_MAX - 5)
        return QN_ELIMIT;
    if (evbuffer_get_length(c->out) + size + 5 > s->max_pending)
        return QN_ELIMIT;
    uint8_t *buf = malloc(size + 5);
    if (buf == NULL)
        return QN_ENOMEM;
    qn_grpc_prefix_write(buf, (uint32_t)size);
    size_t packed = protobuf_c_message_pack(msg, buf + 5);
    if (packed != size || evbuffer_add_reference(c->out, buf, size + 5, free_ref, NULL) != 0) {
        free(buf);
        return packed != size ? QN_EINTERNAL : QN_ENOMEM;
    }
    c->nsent++;
    if (!c->headers_sent) {
        if (submit_headers(c, session) != QN_OK)
            return QN_ECLOSED; /* the queued bytes die with the call */
    } else {
        nghttp2_session_resume_data(session, c->stream_id);
    }
    qn__net_schedule_flush(c->gc->conn);
    return QN_OK;
}

void qn_call_finish(qn_call *c, enum qn_grpc_code code, const char *message)
{
    if (c == NULL || c->state != CALL_OPEN)
        return; /* already ended by the transport (inside on_cancel) */
    call_end(c, 200, code, message, false);
}

void qn_call_finishf(qn_call *c, enum qn_grpc_code code, const char *fmt, ...)
{
    char buf[MAX_STATUS_MSG + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    qn_call_finish(c, code, buf);
}

size_t qn_call_pending_bytes(const qn_call *c)
{
    return c->out ? evbuffer_get_length(c->out) : 0;
}

static void on_drain_ev(evutil_socket_t fd, short what, void *arg)
{
    qn_call *c = arg;
    if (c->state != CALL_OPEN || c->on_drain == NULL || evbuffer_get_length(c->out) > 0)
        return;
    void (*cb)(qn_call *) = c->on_drain;
    c->on_drain = NULL;
    cb(c);
}

void qn_call_on_drain(qn_call *c, void (*cb)(qn_call *call))
{
    c->on_drain = cb;
    if (cb == NULL || c->state != CALL_OPEN)
        return;
    if (c->drain_ev == NULL) {
        c->drain_ev = event_new(c->server->base, -1, 0, on_drain_ev, c);
        if (c->drain_ev == NULL)
            return; /* the broker aborts on OOM elsewhere; here the wake-up is lost */
    }
    if (evbuffer_get_length(c->out) == 0)
        event_active(c->drain_ev, 0, 0);
}

void qn_call_set_data(qn_call *c, void *data)
{
    c->data = data;
}

void *qn_call_data(const qn_call *c)
{
    return c->data;
}

int64_t qn_call_deadline_ms(const qn_call *c)
{
    return c->deadline_ms;
}

const char *qn_call_header(const qn_call *c, const char *name)
{
    return find_header(c, name);
}

qn_rpc_server *qn_call_server(const qn_call *c)
{
    return c->server;
}

const struct qn_method *qn_call_method(const qn_call *c)
{
    return c->method;
}
