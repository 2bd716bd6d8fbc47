/*
 * transport/h2.c - HTTP/2 sessions (nghttp2, server side) and the gRPC binding
 * on their streams (see h2.h).
 *
 * Does, per connection: make the nghttp2 session and send our SETTINGS (stream
 * limit, stream window, header list size) and connection window; feed it the
 * bytes net.c receives and hand net.c what it produces; keepalive PINGs and
 * their ACKs; GOAWAY (graceful at shutdown, terminating when idle, PROTOCOL_ERROR
 * on a violation, which is reported to net.c as connection-fatal).
 * Does, per stream: make a call (call_binding.h), pass it the request headers,
 * check them as gRPC over HTTP/2 requires (qn_grpc_check_request), start or
 * reject it, feed it DATA and grant the window once the call layer has the
 * bytes, report END_STREAM and the stream's close; answer through the call ops:
 * response HEADERS with the body behind an nghttp2 data provider, trailers
 * after the last DATA, a trailers-only HEADERS when nothing was sent, RST_STREAM
 * (NO_ERROR) once our side ended before the client's.
 * Does not: know what a call means (call.c), touch sockets or TLS (net.c).
 *
 * Invariants:
 *   1. nghttp2 never holds a pointer to a freed call: a stream's user data is
 *      its call until the stream closes, and the call layer frees calls only
 *      after qn__call_closed.
 *   2. Every response carries content-type: application/grpc and a grpc-status,
 *      in trailers after the last DATA or in a trailers-only HEADERS; DATA
 *      never carries END_STREAM.
 *   3. No nghttp2 call is made for a connection being torn down (the net says
 *      it is DEAD, or the session is closing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "log.h"
#include "queen/error.h"
#include "transport/call_binding.h"
#include "transport/grpc_wire.h"
#include "transport/h2.h"

struct qn_h2 {
    struct qn_calls *calls;
    uint32_t max_streams;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
};

/* One connection's session. */
struct h2_session {
    struct qn_h2 *h2;
    qn_conn *conn;
    nghttp2_session *ng;
    struct qn_call_conn cc; /* its calls */
    bool closing;           /* close() runs: no more nghttp2 calls */
};

static const struct qn_call_ops h2_call_ops;

static nghttp2_nv make_nv(const char *name, const char *value)
{
    nghttp2_nv nv = {(uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value),
                     NGHTTP2_NV_FLAG_NONE};
    return nv;
}

static qn_call *stream_call(nghttp2_session *ng, int32_t stream_id)
{
    return nghttp2_session_get_stream_user_data(ng, stream_id);
}

/* ---------------------------------------------------------------- call ops */

static bool op_alive(const qn_call *c)
{
    const struct h2_session *s = qn__call_link(c);
    return !s->closing && !qn__net_conn_is_dead(s->conn);
}

static void submit_trailers(qn_call *c, nghttp2_session *ng)
{
    const char *code, *msg;
    qn__call_status(c, &code, &msg);
    nghttp2_nv nv[2];
    size_t n = 0;
    nv[n++] = make_nv("grpc-status", code);
    if (msg != NULL)
        nv[n++] = make_nv("grpc-message", msg);
    int rv = nghttp2_submit_trailer(ng, qn__call_stream_id(c), nv, n);
    if (rv != 0)
        QN_DEBUG("cannot submit trailers stream=%d detail=\"%s\"", qn__call_stream_id(c),
                 nghttp2_strerror(rv));
}

/* The data provider: the call's queued bytes, then the trailers. */
static ssize_t read_body(nghttp2_session *ng, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *ud)
{
    qn_call *c = source->ptr;
    size_t n = qn__call_take_output(c, buf, length);
    if (qn_call_pending_bytes(c) > 0)
        return (ssize_t)n;
    if (qn__call_trailers_due(c)) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        submit_trailers(c, ng);
        return (ssize_t)n;
    }
    return n > 0 ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

static int op_respond(qn_call *c)
{
    struct h2_session *s = qn__call_link(c);
    nghttp2_nv nv[2] = {make_nv(":status", "200"), make_nv("content-type", "application/grpc")};
    nghttp2_data_provider prd;
    prd.source.ptr = c;
    prd.read_callback = read_body;
    int rv = nghttp2_submit_response(s->ng, qn__call_stream_id(c), nv, 2, &prd);
    if (rv != 0) {
        QN_DEBUG("cannot submit response stream=%d detail=\"%s\"", qn__call_stream_id(c),
                 nghttp2_strerror(rv));
        return QN_ECLOSED;
    }
    qn__net_conn_schedule_flush(s->conn);
    return QN_OK;
}

static void op_resume(qn_call *c)
{
    struct h2_session *s = qn__call_link(c);
    /* fails harmlessly when the provider is not deferred */
    nghttp2_session_resume_data(s->ng, qn__call_stream_id(c));
    qn__net_conn_schedule_flush(s->conn);
}

static void op_respond_status(qn_call *c, int http_status, bool accept_encoding)
{
    struct h2_session *s = qn__call_link(c);
    const char *code, *msg;
    qn__call_status(c, &code, &msg);
    char st[8];
    snprintf(st, sizeof st, "%d", http_status);
    nghttp2_nv nv[5];
    size_t n = 0;
    nv[n++] = make_nv(":status", st);
    nv[n++] = make_nv("content-type", "application/grpc");
    if (accept_encoding)
        nv[n++] = make_nv("grpc-accept-encoding", "identity");
    nv[n++] = make_nv("grpc-status", code);
    if (msg != NULL)
        nv[n++] = make_nv("grpc-message", msg);
    int rv = nghttp2_submit_response(s->ng, qn__call_stream_id(c), nv, n, NULL);
    if (rv != 0)
        QN_DEBUG("cannot submit response stream=%d detail=\"%s\"", qn__call_stream_id(c),
                 nghttp2_strerror(rv));
    qn__net_conn_schedule_flush(s->conn);
}

static const struct qn_call_ops h2_call_ops = {
    .respond = op_respond,
    .resume = op_resume,
    .respond_status = op_respond_status,
    .alive = op_alive,
};

/* ---------------------------------------------------------------- nghttp2 callbacks */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct h2_session *s = ud;
    qn_call *c = qn__call_new(s->h2->calls, &s->cc, &h2_call_ops, s, frame->hd.stream_id);
    if (c == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (nghttp2_session_set_stream_user_data(ng, frame->hd.stream_id, c) != 0) {
        qn__call_closed(c); /* freed in the reap pass */
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers from the client carry nothing we use */
    qn_call *c = stream_call(ng, frame->hd.stream_id);
    /* nghttp2 rejects NUL in field names and values */
    if (c != NULL)
        qn__call_add_header(c, name, namelen, value, valuelen);
    return 0;
}

/* END_HEADERS of a request: check the headers as gRPC over HTTP/2 requires, then
 * start (route, deadline) or reject the call. */
static void headers_done(qn_call *c)
{
    if (!qn__call_in_headers(c))
        return;
    if (qn__call_headers_overflowed(c)) {
        qn__call_reject(c, 200, QN_GRPC_RESOURCE_EXHAUSTED, "request headers are too large", false);
        return;
    }
    struct qn_grpc_req_headers h = {
        qn_call_header(c, ":method"),      qn_call_header(c, "content-type"),
        qn_call_header(c, "te"),           qn_call_header(c, "grpc-encoding"),
        qn_call_header(c, "grpc-timeout"),
    };
    struct qn_grpc_verdict v;
    int64_t timeout_ms = -1;
    if (!qn_grpc_check_request(&h, &timeout_ms, &v)) {
        qn__call_reject(c, v.http_status, v.code, v.message, v.accept_encoding);
        return;
    }
    qn__call_start(c, timeout_ms);
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    struct h2_session *s = ud;
    switch (frame->hd.type) {
    case NGHTTP2_SETTINGS:
        /* the client preface is the magic then SETTINGS (nghttp2 refuses any
         * other first frame): it is complete with the first one */
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
            qn__net_conn_greeted(s->conn);
        return 0;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            qn__net_ping_acked(s->conn);
        return 0; /* never progress: a PING-only connection is idle */
    case NGHTTP2_RST_STREAM:
        qn__net_conn_progress(s->conn);
        return 0;
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA:
        qn__net_conn_progress(s->conn);
        break;
    default:
        return 0; /* WINDOW_UPDATE, PRIORITY, GOAWAY, unknown: not work */
    }
    qn_call *c = stream_call(ng, frame->hd.stream_id);
    if (c == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        headers_done(c);
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !qn__call_is_closed(c))
        qn__call_remote_close(c);
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *ud)
{
    qn_call *c = stream_call(ng, stream_id);
    if (c != NULL)
        qn__call_data(c, data, len);
    /* The chunk was handled (or discarded): grant its bytes back. */
    nghttp2_session_consume(ng, stream_id, len);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t stream_id, uint32_t error_code, void *ud)
{
    struct h2_session *s = ud;
    if (!s->closing)
        qn__net_conn_progress(s->conn); /* the idle time counts from the last call's end */
    qn_call *c = stream_call(ng, stream_id);
    if (c != NULL && !qn__call_is_closed(c))
        qn__call_closed(c);
    return 0;
}

static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    /* Our side ended before the client's (early error, deadline): tell it to stop
     * sending, as RFC 9113 8.1 allows after a complete response. */
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        nghttp2_session_get_stream_remote_close(ng, frame->hd.stream_id) == 0)
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

/* ---------------------------------------------------------------- the net handler */

static int h_open(void *proto, qn_conn *conn, void **out)
{
    struct qn_h2 *h2 = proto;
    struct h2_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return QN_ENOMEM;
    s->h2 = h2;
    s->conn = conn;
    s->cc.peer_cert = qn__net_conn_peer_cert(conn);
    s->cc.peer = qn__net_conn_peer(conn);
    if (nghttp2_session_server_new2(&s->ng, h2->cbs, s, h2->opt) != 0) {
        free(s);
        return QN_ENOMEM;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, h2->max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, QN_H2_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, QN_CALL_MAX_HEADER_BYTES},
    };
    if (nghttp2_submit_settings(s->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
        nghttp2_session_set_local_window_size(s->ng, NGHTTP2_FLAG_NONE, 0, QN_H2_CONN_WINDOW) !=
            0) {
        nghttp2_session_del(s->ng);
        free(s);
        return QN_ENOMEM;
    }
    *out = s;
    return QN_OK;
}

static int h_recv(void *session, const uint8_t *data, size_t len)
{
    struct h2_session *s = session;
    size_t off = 0;
    while (off < len) {
        ssize_t rv = nghttp2_session_mem_recv(s->ng, data + off, len - off);
        if (rv >= 0) {
            off += (size_t)rv;
            if (rv == 0)
                break;
            continue;
        }
        QN_DEBUG("http2 receive failed peer=%s detail=\"%s\"", qn__net_conn_peer(s->conn),
                 nghttp2_strerror((int)rv));
        if (rv == NGHTTP2_ERR_NOMEM)
            return QN_ENOMEM;
        /* a GOAWAY saying why goes out before the connection closes */
        nghttp2_session_terminate_session(s->ng, NGHTTP2_PROTOCOL_ERROR);
        return rv == NGHTTP2_ERR_FLOODED ? QN_EFLOOD : QN_EPROTO;
    }
    return QN_OK;
}

static ssize_t h_send(void *session, const uint8_t **data)
{
    struct h2_session *s = session;
    ssize_t n = nghttp2_session_mem_send(s->ng, data);
    if (n < 0)
        QN_DEBUG("http2 send failed peer=%s detail=\"%s\"", qn__net_conn_peer(s->conn),
                 nghttp2_strerror((int)n));
    return n;
}

static bool h_done(void *session)
{
    struct h2_session *s = session;
    return !nghttp2_session_want_read(s->ng) && !nghttp2_session_want_write(s->ng);
}

static size_t h_active(void *session)
{
    const struct h2_session *s = session;
    return qn__call_conn_active(&s->cc); /* a stream still in HEADERS is not work */
}

static size_t h_backlog(void *session)
{
    const struct h2_session *s = session;
    return s->cc.queued;
}

static int h_ping(void *session)
{
    static const uint8_t opaque[8] = {'q', 'n', 'k', 'a', 'l', 'i', 'v', 'e'};
    struct h2_session *s = session;
    return nghttp2_submit_ping(s->ng, NGHTTP2_FLAG_NONE, opaque) == 0 ? QN_OK : QN_ENOMEM;
}

static void h_goaway(void *session, bool graceful)
{
    struct h2_session *s = session;
    if (graceful) {
        int32_t last = nghttp2_session_get_last_proc_stream_id(s->ng);
        nghttp2_submit_goaway(s->ng, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, NULL, 0);
    } else {
        nghttp2_session_terminate_session(s->ng, NGHTTP2_NO_ERROR);
    }
}

static void h_close(void *session)
{
    struct h2_session *s = session;
    s->closing = true; /* invariant 3: handlers run below and must not submit */
    qn__call_conn_close(&s->cc);
    nghttp2_session_del(s->ng);
    free(s);
}

void qn__h2_handler(struct qn_h2 *h, struct qn_net_handler *out)
{
    out->proto = h;
    out->open = h_open;
    out->recv = h_recv;
    out->send = h_send;
    out->done = h_done;
    out->active = h_active;
    out->backlog = h_backlog;
    out->ping = h_ping;
    out->goaway = h_goaway;
    out->close = h_close;
}

int qn__h2_new(struct qn_calls *calls, uint32_t max_streams, struct qn_h2 **out)
{
    struct qn_h2 *h = calloc(1, sizeof *h);
    if (h == NULL)
        return QN_ENOMEM;
    h->calls = calls;
    h->max_streams = max_streams;
    if (nghttp2_session_callbacks_new(&h->cbs) != 0 || nghttp2_option_new(&h->opt) != 0) {
        qn__h2_free(h);
        return QN_ENOMEM;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(h->cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(h->cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(h->cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(h->cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(h->cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(h->cbs, on_frame_send);
    /* Window updates are ours: bytes are granted back once the call layer has
     * handled them. */
    nghttp2_option_set_no_auto_window_update(h->opt, 1);
    /* PING and SETTINGS floods: past this many ACKs the peer has not read,
     * nghttp2 fails the session (NGHTTP2_ERR_FLOODED -> QN_EFLOOD), so a peer
     * that sends PINGs and never reads costs at most this many queued ACKs
     * (nghttp2's default, made explicit). */
    nghttp2_option_set_max_outbound_ack(h->opt, 1000);
    *out = h;
    return QN_OK;
}

void qn__h2_free(struct qn_h2 *h)
{
    if (h == NULL)
        return;
    if (h->cbs)
        nghttp2_session_callbacks_del(h->cbs);
    if (h->opt)
        nghttp2_option_del(h->opt);
    free(h);
}
