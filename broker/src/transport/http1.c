/*
 * transport/http1.c - HTTP/1.1 sessions of the side port, its plain routes,
 * and the gRPC-Web binding of calls (see http1.h and sideport.h).
 *
 * Why one file of some 900 lines: an HTTP/1.1 connection is one state machine
 * (head, body, response, the next request) whose every transition is shared by
 * the plain routes and the gRPC-Web binding; the byte-level parsing it relies on
 * is already apart (http_wire.c, fuzzed on its own).
 *
 * Does, per connection: read request heads (http_wire.c: bounded by
 * QUEEN_HTTP_MAX_HEADER_BYTES, refusing what could be smuggled), one request
 * at a time (pipelined bytes wait, bounded); answer a GET or HEAD of a plain
 * route at once from its handler, with a Content-Length; turn a gRPC-Web POST
 * into a call of the call layer (call_binding.h) with the request's headers,
 * its grpc-timeout and its body (base64-decoded in text mode) streamed in as
 * it arrives, then write the call's output as the peer reads it: the response
 * head, the messages, and the trailer frame (0x80) last, in a chunked body
 * (HTTP/1.1) or one ended by closing the connection (HTTP/1.0); keep the
 * connection for the next request unless either side said close. A request
 * whose head and body do not arrive within QUEEN_HTTP_REQUEST_TIMEOUT_MS gets
 * 408 and the connection closes.
 * Does not: touch sockets (net.c), know what a call or a route does, accept
 * request bodies without a Content-Length, serve client-streaming methods
 * (UNIMPLEMENTED: gRPC-Web has no way to carry them), compress.
 *
 * Request and response lifecycle of a session (asserted below):
 *
 *   REQ_HEAD --head complete--> REQ_BODY (gRPC-Web, body to the call)
 *                          \--> REQ_DONE (a plain route, or an empty body)
 *   REQ_BODY --body complete--> REQ_DONE;  --the call answered first--> REQ_DISCARD
 *   REQ_DISCARD --body complete--> REQ_DONE
 *   REQ_DONE --response written, keep-alive--> REQ_HEAD (next request, next pass)
 *   any --close requested (either side, an error, 408, shutdown)--> REQ_CLOSED
 *
 *   RESP_NONE --plain answer / status-only answer--> RESP_DONE
 *   RESP_NONE --first message (respond)--> RESP_STREAM --trailers written--> RESP_DONE
 *
 * Invariants:
 *   1. A call is closed (qn__call_closed) once its trailers are in the output,
 *      or when the connection goes (qn__call_conn_close); a session never
 *      holds a closed call, and at most one call at a time.
 *   2. Buffered input never exceeds max_head bytes beyond the request being
 *      read; a peer that pipelines more is disconnected (QN_EFLOOD).
 *   3. Output is produced only while the net asks for it (send), so a call's
 *      queued bytes stay in the call layer (qn_call_pending_bytes) until the
 *      peer reads; the session holds at most OUT_TARGET plus one chunk.
 *   4. done() is true only when no response is in progress and nothing is
 *      left to write.
 *   5. Progress for the net's timers is a complete request head or a finished
 *      request, nothing less: the first head greets the connection (without
 *      one it closes at QUEEN_PREFACE_TIMEOUT_MS), and the idle time runs from
 *      the last progress (a peer trickling a head is bounded by the request
 *      timeout, then 408).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "queen/b64.h"
#include "queen/error.h"
#include "queen/store.h"
#include "transport/call_binding.h"
#include "transport/grpc_wire.h"
#include "transport/http1.h"
#include "transport/http_wire.h"
#include "timer.h"

#define SEND_MAX (64 * 1024)   /* bytes handed to the net per send() */
#define OUT_TARGET (64 * 1024) /* produce output until this much is queued */
#define PULL_CHUNK 16384       /* bytes taken from a call at a time */
#define MAX_NAME 256           /* longest header name passed to a call */

enum req_state { REQ_HEAD, REQ_BODY, REQ_DISCARD, REQ_DONE, REQ_CLOSED };
enum resp_state { RESP_NONE, RESP_STREAM, RESP_DONE };

struct route {
    char *name;
    char *path;
    size_t plen;
    bool prefix;
    qn_http_handler fn;
    void *ud;
};

struct qn_http1 {
    struct event_base *base;
    struct qn_calls *calls;
    struct qn_http1_limits lim;
    struct route *routes;
    size_t nroutes;
    bool shutting_down;
    int32_t next_id;                   /* call ids, for logs */
    struct qn_metric_family *requests; /* queen_http_requests_total{handler,code} */
};

struct session {
    struct qn_http1 *h;
    qn_conn *conn;
    struct qn_call_conn cc; /* its gRPC-Web call (one at a time) */
    enum req_state req;
    enum resp_state resp;
    struct evbuffer *in;  /* received and not yet consumed */
    struct evbuffer *out; /* to write; its first `handed` bytes were given to the net */
    size_t handed;
    size_t scanned;        /* bytes of `in` known not to end a head */
    struct event *next_ev; /* parse the next request, after the dispatch pass */
    struct event *timer;   /* the request timeout */
    bool closing;          /* close() runs: no more output */
    /* the current request */
    bool keep_alive;
    int minor;
    int64_t body_left;
    qn_call *call;
    enum qn_grpcweb_mode mode;
    struct qn_b64_dec dec;
    struct qn_b64_enc enc;
    bool b64_bad;      /* the text body was not base64: stop feeding it */
    bool chunked;      /* response body framing */
    const char *label; /* route name for the request counter */
    int status;        /* HTTP status answered */
};

static const struct qn_call_ops web_call_ops;
static void schedule_next(struct session *s);

/* ---------------------------------------------------------------- output */

static void flush_later(struct session *s)
{
    if (!s->closing)
        qn__net_conn_schedule_flush(s->conn);
}

static void count_request(struct session *s)
{
    if (s->h->requests == NULL || s->label == NULL)
        return;
    char code[8];
    snprintf(code, sizeof code, "%d", s->status);
    const char *v[2] = {s->label, code};
    qn_metric_inc(qn_metric_series(s->h->requests, v), 1);
}

/* Head of a response: status line, content type, framing, connection. */
static void add_head(struct session *s, int status, const char *ctype, int64_t length,
                     const char *extra, size_t extra_len)
{
    s->status = status;
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    evbuffer_add_printf(s->out, "HTTP/1.%d %d %s\r\ndate: %s\r\n", s->minor, status,
                        qn_http_reason(status), date);
    if (ctype != NULL && ctype[0] != '\0')
        evbuffer_add_printf(s->out, "content-type: %s\r\n", ctype);
    if (length >= 0)
        evbuffer_add_printf(s->out, "content-length: %lld\r\n", (long long)length);
    else if (s->chunked)
        evbuffer_add_printf(s->out, "transfer-encoding: chunked\r\n");
    if (extra_len > 0)
        evbuffer_add(s->out, extra, extra_len);
    if (!s->keep_alive || s->h->shutting_down)
        evbuffer_add_printf(s->out, "connection: close\r\n");
    evbuffer_add(s->out, "\r\n", 2);
}

/* Response body bytes, framed (chunked or not) and encoded (text mode). */
static void add_body(struct session *s, const uint8_t *data, size_t len)
{
    char tmp[4 * (PULL_CHUNK + 2) / 3 + 8];
    while (len > 0) {
        size_t n = len < PULL_CHUNK ? len : PULL_CHUNK;
        const void *p = data;
        size_t plen = n;
        if (s->mode == QN_GRPCWEB_TEXT) {
            plen = qn_b64_enc_feed(&s->enc, data, n, tmp);
            p = tmp;
        }
        if (plen > 0) {
            if (s->chunked)
                evbuffer_add_printf(s->out, "%zx\r\n", plen);
            evbuffer_add(s->out, p, plen);
            if (s->chunked)
                evbuffer_add(s->out, "\r\n", 2);
        }
        data += n;
        len -= n;
    }
}

static void end_body(struct session *s)
{
    if (s->mode == QN_GRPCWEB_TEXT) {
        char tail[4];
        size_t n = qn_b64_enc_finish(&s->enc, tail);
        if (n > 0) {
            if (s->chunked)
                evbuffer_add_printf(s->out, "%zx\r\n", n);
            evbuffer_add(s->out, tail, n);
            if (s->chunked)
                evbuffer_add(s->out, "\r\n", 2);
        }
    }
    if (s->chunked)
        evbuffer_add(s->out, "0\r\n\r\n", 5);
}

/* The request was read whole and its response written: the next one, or the
 * end of the connection. */
static void request_finished(struct session *s)
{
    assert(s->req == REQ_DONE && s->resp == RESP_DONE);
    if (s->timer)
        event_del(s->timer);
    if (!s->closing)
        qn__net_conn_progress(s->conn); /* the idle time counts from here */
    if (!s->keep_alive || s->h->shutting_down) {
        s->req = REQ_CLOSED;
        flush_later(s);
        return;
    }
    s->req = REQ_HEAD;
    s->resp = RESP_NONE;
    s->mode = QN_GRPCWEB_NONE;
    s->label = NULL;
    s->body_left = 0;
    s->b64_bad = false;
    if (evbuffer_get_length(s->in) > 0)
        schedule_next(s);
}

/* The whole response is in the output. */
static void response_done(struct session *s)
{
    s->resp = RESP_DONE;
    count_request(s);
    if (s->call != NULL) {
        if (!qn__call_is_closed(s->call))
            qn__call_closed(s->call); /* FINISHED: no handler runs */
        s->call = NULL;
    }
    if (s->req == REQ_BODY)
        s->req = REQ_DISCARD; /* the rest of the body is read and dropped */
    else if (s->req == REQ_DONE)
        request_finished(s);
    flush_later(s);
}

/* A complete answer without a call (errors, plain routes). */
static void answer(struct session *s, int status, const char *ctype, const void *body, size_t len,
                   const char *extra, size_t extra_len, bool head_only)
{
    assert(s->resp == RESP_NONE);
    s->chunked = false;
    add_head(s, status, ctype, (int64_t)len, extra, extra_len);
    if (!head_only && len > 0)
        evbuffer_add(s->out, body, len);
    response_done(s);
}

/* A short text answer (404, 405) to a request read whole: the connection
 * stays if it may. */
static void answer_text(struct session *s, int status, const char *text)
{
    char extra[64] = "";
    size_t elen = 0;
    if (status == 405)
        elen = (size_t)snprintf(extra, sizeof extra, "allow: GET, HEAD, POST\r\n");
    s->req = REQ_DONE;
    if (s->label == NULL)
        s->label = "none";
    char body[256];
    int n = snprintf(body, sizeof body, "%s\n", text);
    answer(s, status, "text/plain; charset=utf-8", body, (size_t)n, extra, elen, false);
}

/* An error answer after which the connection closes (the request may not have
 * been read whole). */
static void answer_error(struct session *s, int status, const char *text)
{
    s->keep_alive = false;
    answer_text(s, status, text);
}

/* Pulls the call's queued output; writes the trailers once they are due. */
static void produce(struct session *s)
{
    if (s->resp != RESP_STREAM || s->call == NULL)
        return;
    uint8_t buf[PULL_CHUNK];
    while (evbuffer_get_length(s->out) < OUT_TARGET) {
        size_t n = qn__call_take_output(s->call, buf, sizeof buf);
        if (n == 0)
            break;
        add_body(s, buf, n);
    }
    if (!qn__call_trailers_due(s->call))
        return;
    const char *code, *msg;
    qn__call_status(s->call, &code, &msg);
    uint8_t frame[5 + 64 + 3 * 1024 + 32];
    size_t n = qn_grpcweb_trailer_frame(code, msg, frame, sizeof frame);
    if (n == 0)
        n = qn_grpcweb_trailer_frame(code, NULL, frame, sizeof frame);
    add_body(s, frame, n);
    end_body(s);
    response_done(s);
}

/* ---------------------------------------------------------------- call ops */

static bool op_alive(const qn_call *c)
{
    const struct session *s = qn__call_link(c);
    return !s->closing && !qn__net_conn_is_dead(s->conn);
}

static const char *web_type(const struct session *s)
{
    return s->mode == QN_GRPCWEB_TEXT ? "application/grpc-web-text+proto"
                                      : "application/grpc-web+proto";
}

static int op_respond(qn_call *c)
{
    struct session *s = qn__call_link(c);
    if (s->closing || s->resp != RESP_NONE)
        return QN_ECLOSED;
    s->chunked = s->minor >= 1;
    if (!s->chunked)
        s->keep_alive = false; /* HTTP/1.0: the body ends with the connection */
    add_head(s, 200, web_type(s), -1, "cache-control: no-store\r\n", 25);
    s->resp = RESP_STREAM;
    flush_later(s);
    return QN_OK;
}

static void op_resume(qn_call *c)
{
    flush_later(qn__call_link(c));
}

static void op_respond_status(qn_call *c, int http_status, bool accept_encoding)
{
    struct session *s = qn__call_link(c);
    if (s->closing || s->resp != RESP_NONE)
        return;
    const char *code, *msg;
    qn__call_status(c, &code, &msg);
    uint8_t frame[5 + 64 + 3 * 1024 + 32];
    size_t n = qn_grpcweb_trailer_frame(code, msg, frame, sizeof frame);
    if (n == 0)
        n = qn_grpcweb_trailer_frame(code, NULL, frame, sizeof frame);
    size_t blen = s->mode == QN_GRPCWEB_TEXT ? 4 * ((n + 2) / 3) : n;
    char extra[96];
    size_t elen = (size_t)snprintf(extra, sizeof extra, "cache-control: no-store\r\n%s",
                                   accept_encoding ? "grpc-accept-encoding: identity\r\n" : "");
    s->chunked = false;
    add_head(s, http_status, web_type(s), (int64_t)blen, extra, elen);
    add_body(s, frame, n);
    end_body(s);
    response_done(s);
}

static const struct qn_call_ops web_call_ops = {
    .respond = op_respond,
    .resume = op_resume,
    .respond_status = op_respond_status,
    .alive = op_alive,
};

/* ---------------------------------------------------------------- requests */

static const char *req_header(const struct qn_http_request *req, const char *name)
{
    const struct qn_http_head *head = req->impl;
    size_t len;
    const char *v = qn_http_field(head, name, &len);
    /* field values end at their CRLF, which the parser checked: NUL-terminate a
     * copy-free view is not possible, so only whole-line values are offered */
    if (v == NULL)
        return NULL;
    char *end = (char *)v + len;
    *end = '\0'; /* the byte was whitespace or the CR ending the line (pulled-up copy) */
    return v;
}

static const struct route *find_route(const struct qn_http1 *h, const char *path)
{
    for (size_t i = 0; i < h->nroutes; i++) {
        const struct route *r = &h->routes[i];
        if (r->prefix ? strncmp(path, r->path, r->plen) == 0 : strcmp(path, r->path) == 0)
            return r;
    }
    return NULL;
}

static void serve_route(struct session *s, const struct qn_http_head *head, const char *path,
                        const char *query)
{
    bool get = head->method_len == 3 && memcmp(head->method, "GET", 3) == 0;
    bool is_head = head->method_len == 4 && memcmp(head->method, "HEAD", 4) == 0;
    const struct route *r = find_route(s->h, path);
    s->label = r ? r->name : "none";
    if (head->content_length > 0)
        s->keep_alive = false; /* the body is never read: the connection cannot continue */
    if (r == NULL) {
        answer_text(s, 404, "not found");
        return;
    }
    if (!get && !is_head) {
        answer_text(s, 405, "method not allowed");
        return;
    }
    struct qn_http_response resp;
    resp.status = 200;
    resp.content_type[0] = '\0';
    resp.extra_len = 0;
    resp.extra[0] = '\0';
    resp.body = evbuffer_new();
    if (resp.body == NULL) {
        answer_error(s, 500, "out of memory");
        return;
    }
    char method[8];
    snprintf(method, sizeof method, "%s", get ? "GET" : "HEAD");
    struct qn_http_request req = {method, path, query, is_head, req_header, head};
    r->fn(r->ud, &req, &resp);
    size_t len = evbuffer_get_length(resp.body);
    s->req = REQ_DONE;
    s->chunked = false;
    bool no_body = resp.status == 304 || resp.status == 204;
    add_head(s, resp.status, resp.content_type, no_body ? -1 : (int64_t)len, resp.extra,
             resp.extra_len);
    if (!is_head && resp.status != 304 && resp.status != 204)
        evbuffer_add_buffer(s->out, resp.body);
    evbuffer_free(resp.body);
    response_done(s);
}

/* Adds the request's fields to the call as lower-case gRPC metadata. */
static bool add_call_headers(qn_call *c, const struct qn_http_head *head, const char *path,
                             size_t plen)
{
    static const uint8_t post[] = "POST";
    qn__call_add_header(c, (const uint8_t *)":method", 7, post, 4);
    qn__call_add_header(c, (const uint8_t *)":path", 5, (const uint8_t *)path, plen);
    for (size_t i = 0; i < head->nfields; i++) {
        const struct qn_http_field *f = &head->fields[i];
        uint8_t name[MAX_NAME];
        if (f->name_len > MAX_NAME)
            return false;
        for (size_t k = 0; k < f->name_len; k++) {
            char ch = f->name[k];
            name[k] = (uint8_t)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
        }
        if (f->name_len == 4 && memcmp(name, "host", 4) == 0)
            qn__call_add_header(c, (const uint8_t *)":authority", 10, (const uint8_t *)f->value,
                                f->value_len);
        else
            qn__call_add_header(c, name, f->name_len, (const uint8_t *)f->value, f->value_len);
    }
    return !qn__call_headers_overflowed(c);
}

/* Body bytes of the current request: to the call, or dropped. Returns how many
 * were taken (at most body_left). */
static size_t feed_body(struct session *s, const uint8_t *data, size_t len)
{
    size_t n = (int64_t)len < s->body_left ? len : (size_t)s->body_left;
    if (s->req == REQ_BODY && s->call != NULL && !s->b64_bad) {
        if (s->mode == QN_GRPCWEB_TEXT) {
            uint8_t out[3 * 1024 + 3];
            for (size_t off = 0; off < n && !s->b64_bad;) {
                size_t k = n - off < 4 * 1024 ? n - off : 4 * 1024;
                size_t olen = 0;
                if (qn_b64_dec_feed(&s->dec, data + off, k, out, sizeof out, &olen) != QN_OK)
                    s->b64_bad = true; /* what was fed ends truncated: INTERNAL */
                else if (olen > 0)
                    qn__call_data(s->call, out, olen);
                off += k;
                if (s->call == NULL || s->req != REQ_BODY)
                    break; /* the call answered while being fed */
            }
        } else {
            qn__call_data(s->call, data, n);
        }
    }
    s->body_left -= (int64_t)n;
    if (s->body_left == 0) {
        event_del(s->timer);
        if (s->req == REQ_BODY) {
            s->req = REQ_DONE;
            if (s->call != NULL && !qn__call_is_closed(s->call))
                qn__call_remote_close(s->call);
        } else if (s->req == REQ_DISCARD) {
            s->req = REQ_DONE;
            if (s->resp == RESP_DONE)
                request_finished(s);
        }
    }
    return n;
}

static void start_web_call(struct session *s, const struct qn_http_head *head, const char *path,
                           size_t plen)
{
    struct qn_http1 *h = s->h;
    s->label = "grpc_web";
    bool post = head->method_len == 4 && memcmp(head->method, "POST", 4) == 0;
    if (!post) {
        answer_error(s, 405, "gRPC-Web calls are POST requests");
        return;
    }
    if (s->mode == QN_GRPCWEB_OTHER) {
        answer_error(s, 415,
                     "gRPC-Web bodies must be protobuf: application/grpc-web+proto or "
                     "application/grpc-web-text+proto");
        return;
    }
    int64_t len = head->content_length < 0 ? 0 : head->content_length;
    int64_t max = (int64_t)h->lim.max_body;
    if (s->mode == QN_GRPCWEB_TEXT)
        max = 4 * ((max + 2) / 3);
    if (len > max) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body of %lld bytes exceeds the limit of %lld bytes",
                 (long long)len, (long long)max);
        answer_error(s, 413, msg);
        return;
    }
    qn_call *c = qn__call_new(h->calls, &s->cc, &web_call_ops, s, ++h->next_id);
    if (c == NULL) {
        answer_error(s, 500, "out of memory");
        return;
    }
    s->call = c;
    s->body_left = len;
    s->req = len > 0 ? REQ_BODY : REQ_DONE;
    qn_b64_dec_init(&s->dec, QN_B64_STD, QN_B64_RUNS);
    qn_b64_enc_init(&s->enc, QN_B64_STD, true);
    if (head->expect_continue && len > 0)
        evbuffer_add_printf(s->out, "HTTP/1.1 100 Continue\r\n\r\n");

    size_t tlen = 0, elen = 0;
    const char *timeout = qn_http_field(head, "grpc-timeout", &tlen);
    const char *enc = qn_http_field(head, "grpc-encoding", &elen);
    int64_t timeout_ms = -1;
    const struct qn_method *m = qn__calls_route(h->calls, path);
    if (!add_call_headers(c, head, path, plen)) {
        qn__call_reject(c, 200, QN_GRPC_RESOURCE_EXHAUSTED, "request headers are too large", false);
    } else if (enc != NULL && elen > 0 && !(elen == 8 && memcmp(enc, "identity", 8) == 0)) {
        qn__call_reject(c, 200, QN_GRPC_UNIMPLEMENTED, "unsupported grpc-encoding", true);
    } else if (timeout != NULL && qn_grpc_timeout_parse(timeout, tlen, &timeout_ms) != QN_OK) {
        qn__call_reject(c, 200, QN_GRPC_INTERNAL, "malformed grpc-timeout", false);
    } else if (m != NULL && m->client_streaming) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "%.200s is a client-streaming method: gRPC-Web carries unary and "
                 "server-streaming calls only (use gRPC over HTTP/2)",
                 m->path);
        qn__call_reject(c, 200, QN_GRPC_UNIMPLEMENTED, msg, false);
    } else if (h->shutting_down) {
        qn__call_reject(c, 200, QN_GRPC_UNAVAILABLE, "the server is shutting down", false);
    } else {
        qn__call_start(c, timeout_ms);
    }
    if (s->req == REQ_DONE && s->call != NULL && !qn__call_is_closed(s->call))
        qn__call_remote_close(s->call); /* an empty body: the request is complete */
}

/* A complete head is at the start of `in`: route it. */
static void dispatch(struct session *s, const struct qn_http_head *head)
{
    s->minor = head->minor;
    s->keep_alive = head->keep_alive;
    /* origin-form; an absolute-form target is reduced to its path */
    const char *t = head->target;
    size_t tlen = head->target_len;
    if (tlen > 7 && (strncmp(t, "http://", 7) == 0 || strncmp(t, "https://", 8) == 0)) {
        const char *p = memchr(t + 8, '/', tlen - 8);
        size_t skip = p ? (size_t)(p - t) : tlen;
        t += skip;
        tlen -= skip;
        if (tlen == 0) {
            t = "/";
            tlen = 1;
        }
    }
    if (tlen == 0 || t[0] != '/') {
        answer_error(s, 400, "the request target must be a path");
        return;
    }
    const char *q = memchr(t, '?', tlen);
    size_t plen = q ? (size_t)(q - t) : tlen;
    char *path = malloc(tlen + 2);
    if (path == NULL) {
        answer_error(s, 500, "out of memory");
        return;
    }
    memcpy(path, t, plen);
    path[plen] = '\0';
    char *query = path + plen + 1;
    size_t qlen = q ? tlen - plen - 1 : 0;
    memcpy(query, q ? q + 1 : "", qlen);
    query[qlen] = '\0';

    size_t ctlen = 0;
    const char *ct = qn_http_field(head, "content-type", &ctlen);
    s->mode = qn_grpcweb_mode_of(ct, ctlen);
    if (s->mode != QN_GRPCWEB_NONE)
        start_web_call(s, head, path, plen);
    else
        serve_route(s, head, path, query);
    free(path);
    if (s->req != REQ_BODY && s->req != REQ_DISCARD)
        event_del(s->timer); /* the request was read whole */
}

/* Reads what `in` holds: request heads and bodies, as far as the state allows. */
static int process(struct session *s)
{
    while (!s->closing) {
        size_t have = evbuffer_get_length(s->in);
        if (have == 0)
            return QN_OK;
        if (s->req == REQ_BODY || s->req == REQ_DISCARD) {
            size_t n = evbuffer_get_contiguous_space(s->in);
            const uint8_t *p = evbuffer_pullup(s->in, (ssize_t)n);
            size_t used = feed_body(s, p, n);
            evbuffer_drain(s->in, used);
            continue;
        }
        if (s->req == REQ_CLOSED) {
            evbuffer_drain(s->in, have);
            return QN_OK;
        }
        if (s->req == REQ_DONE) {
            /* pipelined: wait for the current response, within a bound */
            return have > s->h->lim.max_head ? QN_EFLOOD : QN_OK;
        }
        /* REQ_HEAD: parse only once an empty line may have arrived */
        if (s->timer && !evtimer_pending(s->timer, NULL)) {
            int64_t ms = s->h->lim.request_ms;
            qn_timer_after(s->timer, ms);
        }
        size_t lim = have < s->h->lim.max_head ? have : s->h->lim.max_head;
        size_t from = s->scanned > 2 ? s->scanned - 2 : 0;
        const uint8_t *p = evbuffer_pullup(s->in, (ssize_t)lim);
        bool maybe = false;
        for (size_t i = from; i + 1 < lim && !maybe; i++)
            maybe = p[i] == '\n' && (p[i + 1] == '\n' || (p[i + 1] == '\r' && i + 2 < lim));
        s->scanned = lim;
        if (!maybe && have < s->h->lim.max_head)
            return QN_OK;
        struct qn_http_head head;
        bool complete = false;
        int status = 0;
        int rc = qn_http_parse_head(p, lim, s->h->lim.max_head, &head, &complete, &status);
        if (rc != QN_OK) {
            s->minor = 1;
            s->label = "none";
            answer_error(s, status,
                         status == 431   ? "request head too large"
                         : status == 414 ? "request target too long"
                         : status == 411 ? "a request body needs a Content-Length"
                         : status == 505 ? "HTTP/1.0 and HTTP/1.1 only"
                                         : "malformed request");
            evbuffer_drain(s->in, have);
            return QN_OK;
        }
        if (!complete)
            return QN_OK;
        s->scanned = 0;
        /* a whole request head is HTTP/1.1's unit of progress: the first one
         * meets the net's opening deadline (QUEEN_PREFACE_TIMEOUT_MS), each
         * one restarts the idle time; bytes of an unfinished head do neither */
        qn__net_conn_greeted(s->conn);
        qn__net_conn_progress(s->conn);
        /* the head stays in `in` (its pointers) until dispatched */
        size_t hl = head.head_len;
        dispatch(s, &head);
        evbuffer_drain(s->in, hl);
    }
    return QN_OK;
}

static void on_next(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;
    if (s->closing)
        return;
    if (process(s) != QN_OK) {
        s->keep_alive = false;
        s->req = REQ_CLOSED;
    }
    flush_later(s);
}

static void schedule_next(struct session *s)
{
    if (!s->closing)
        event_active(s->next_ev, 0, 0);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;
    if (s->closing || s->req == REQ_DONE || s->req == REQ_CLOSED)
        return;
    QN_DEBUG("http request timed out peer=%s", qn__net_conn_peer(s->conn));
    if (s->resp == RESP_NONE) {
        if (s->call != NULL && !qn__call_is_closed(s->call))
            qn__call_closed(s->call); /* the client's request never completed */
        s->call = NULL;
        s->label = s->label ? s->label : "none";
        s->minor = s->minor ? s->minor : 1;
        answer_error(s, 408, "request not received in time");
    } else {
        s->keep_alive = false;
        s->req = REQ_CLOSED; /* the answer is under way: close after it */
    }
    evbuffer_drain(s->in, evbuffer_get_length(s->in));
    flush_later(s);
}

/* ---------------------------------------------------------------- the net handler */

static void session_free(struct session *s)
{
    if (s->next_ev)
        event_free(s->next_ev);
    if (s->timer)
        event_free(s->timer);
    if (s->in)
        evbuffer_free(s->in);
    if (s->out)
        evbuffer_free(s->out);
    free(s);
}

static int h_open(void *proto, qn_conn *conn, void **out)
{
    struct qn_http1 *h = proto;
    struct session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return QN_ENOMEM;
    s->h = h;
    s->conn = conn;
    s->minor = 1;
    s->in = evbuffer_new();
    s->out = evbuffer_new();
    s->next_ev = event_new(h->base, -1, 0, on_next, s);
    s->timer = evtimer_new(h->base, on_timeout, s);
    if (s->in == NULL || s->out == NULL || s->next_ev == NULL || s->timer == NULL) {
        session_free(s);
        return QN_ENOMEM;
    }
    *out = s;
    return QN_OK;
}

static int h_recv(void *session, const uint8_t *data, size_t len)
{
    struct session *s = session;
    if (s->req == REQ_CLOSED)
        return QN_OK;
    size_t off = 0;
    if ((s->req == REQ_BODY || s->req == REQ_DISCARD) && evbuffer_get_length(s->in) == 0)
        off = feed_body(s, data, len); /* the common case: no copy */
    if (off < len && s->req != REQ_CLOSED) {
        if (evbuffer_add(s->in, data + off, len - off) != 0)
            return QN_ENOMEM;
    }
    int rc = process(s);
    flush_later(s);
    return rc;
}

static ssize_t h_send(void *session, const uint8_t **data)
{
    struct session *s = session;
    if (s->handed > 0) {
        evbuffer_drain(s->out, s->handed);
        s->handed = 0;
    }
    if (evbuffer_get_length(s->out) < OUT_TARGET)
        produce(s);
    size_t n = evbuffer_get_length(s->out);
    if (n == 0)
        return 0;
    if (n > SEND_MAX)
        n = SEND_MAX;
    *data = evbuffer_pullup(s->out, (ssize_t)n);
    if (*data == NULL)
        return QN_ENOMEM;
    s->handed = n;
    return (ssize_t)n;
}

static bool h_done(void *session)
{
    struct session *s = session;
    return s->req == REQ_CLOSED && s->resp != RESP_STREAM &&
           evbuffer_get_length(s->out) == s->handed;
}

static size_t h_active(void *session)
{
    const struct session *s = session;
    return s->req == REQ_BODY || s->req == REQ_DISCARD || s->req == REQ_DONE || s->call != NULL;
}

/* Response bytes not yet taken by the peer, beyond the socket's buffer: what
 * the call queued (the call layer's budgets count it too) and what the session
 * framed and has not handed to the net. */
static size_t h_backlog(void *session)
{
    const struct session *s = session;
    return s->cc.queued + (evbuffer_get_length(s->out) - s->handed);
}

static int h_ping(void *session)
{
    (void)session;
    return QN_EINVAL; /* HTTP/1.1 has no ping; idle time and the request timeout bound it */
}

static void h_goaway(void *session, bool graceful)
{
    struct session *s = session;
    s->keep_alive = false;
    if (!graceful || s->req == REQ_HEAD) {
        /* idle (nothing in progress), or shutting down between requests */
        if (s->call == NULL && s->resp != RESP_STREAM) {
            s->req = REQ_CLOSED;
            evbuffer_drain(s->in, evbuffer_get_length(s->in));
        }
    }
    flush_later(s);
}

static void h_close(void *session)
{
    struct session *s = session;
    s->closing = true; /* op_alive is false from here: handlers below do not write */
    s->call = NULL;
    qn__call_conn_close(&s->cc);
    session_free(s);
}

void qn__http1_handler(struct qn_http1 *h, struct qn_net_handler *out)
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

/* ---------------------------------------------------------------- shared state */

int qn__http1_new(struct event_base *base, struct qn_calls *calls,
                  const struct qn_http1_limits *lim, qn_metrics *metrics, struct qn_http1 **out)
{
    struct qn_http1 *h = calloc(1, sizeof *h);
    if (h == NULL)
        return QN_ENOMEM;
    h->base = base;
    h->calls = calls;
    h->lim = *lim;
    if (metrics != NULL) {
        static const char *labels[] = {"handler", "code"};
        int rc = qn_metrics_family(metrics, "queen_http_requests_total",
                                   "requests answered on the HTTP side port, by route and HTTP "
                                   "status",
                                   QN_METRIC_COUNTER, labels, 2, NULL, 0, &h->requests);
        if (rc != QN_OK) {
            free(h);
            return rc;
        }
    }
    *out = h;
    return QN_OK;
}

void qn__http1_free(struct qn_http1 *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->nroutes; i++) {
        free(h->routes[i].name);
        free(h->routes[i].path);
    }
    free(h->routes);
    free(h);
}

int qn__http1_route(struct qn_http1 *h, const char *name, const char *path, bool prefix,
                    qn_http_handler fn, void *ud)
{
    if (path == NULL || path[0] != '/' || name == NULL || fn == NULL)
        return QN_EINVAL;
    struct route *nr = realloc(h->routes, (h->nroutes + 1) * sizeof *nr);
    if (nr == NULL)
        return QN_ENOMEM;
    h->routes = nr;
    struct route *r = &h->routes[h->nroutes];
    r->name = strdup(name);
    r->path = strdup(path);
    if (r->name == NULL || r->path == NULL) {
        free(r->name);
        free(r->path);
        return QN_ENOMEM;
    }
    r->plen = strlen(path);
    r->prefix = prefix;
    r->fn = fn;
    r->ud = ud;
    h->nroutes++;
    return QN_OK;
}

void qn__http1_shutdown(struct qn_http1 *h)
{
    h->shutting_down = true;
}
