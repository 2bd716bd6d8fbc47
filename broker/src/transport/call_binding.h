/*
 * transport/call_binding.h - private to transport/: the call layer's side that
 * the server (server.c) and the bindings (h2.c) use.
 *
 * The call layer (call.c) is what a gRPC call is, whatever carries it: routing
 * by :path to the method table, request framing and size limits, the deadline,
 * the lifecycle (call.h), send/finish/trailers semantics, queued bytes and
 * drain callbacks, counters. A binding is how calls travel: h2.c binds them to
 * HTTP/2 streams through nghttp2; an HTTP/1.1 gRPC-Web binding would be a
 * second one, using the same functions below and its own struct qn_call_ops.
 *
 * A binding:
 *   - makes a call per request stream (qn__call_new) inside the qn_call_conn of
 *     its connection, with its ops and its link (its per-connection state) and
 *     stream id;
 *   - feeds it headers (qn__call_add_header), then either rejects it
 *     (qn__call_reject: headers too large, or its protocol's header checks
 *     failed) or starts it (qn__call_start: routing and deadline);
 *   - feeds it body bytes (qn__call_data) and the end of the request
 *     (qn__call_remote_close), and grants flow-control window for the bytes
 *     once qn__call_data returned;
 *   - pulls response bytes (qn__call_take_output) when its ops were told output
 *     is due, and sends the trailers once qn__call_trailers_due();
 *   - reports the stream gone (qn__call_closed) and the connection gone
 *     (qn__call_conn_close).
 * The call layer calls the binding only through the ops: nothing in call.c
 * names a binding.
 */
#ifndef QN_BROKER_CALL_BINDING_H
#define QN_BROKER_CALL_BINDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/call.h"
#include "transport/server.h"

struct event_base;
struct qn_config;

/* Request header bytes a call stores (names and values), and fields. */
#define QN_CALL_MAX_HEADER_BYTES 16384
#define QN_CALL_MAX_HEADERS 64

/* ---------------------------------------------------------------- the call set */

/* Every call of one server: the method table, the limits, the counters, the
 * calls not yet freed. */
struct qn_calls;

/* Limits from cfg (max_recv_bytes, max_conn_recv_bytes, max_recv_buffer_bytes,
 * max_send_bytes, max_conn_send_bytes, max_send_buffer_bytes, max_streams);
 * owner is what qn_call_server() answers. QN_OK or QN_ENOMEM. */
int qn__calls_new(struct event_base *base, const struct qn_config *cfg, qn_rpc_server *owner,
                  struct qn_calls **out);
/* Frees the calls already closed; every connection must have been closed first
 * (qn__call_conn_close). NULL allowed. */
void qn__calls_free(struct qn_calls *set);

int qn__calls_register(struct qn_calls *set, const struct qn_method *methods, size_t n);
/* The authentication gate qn__call_start runs for every routed call (NULL: none). */
void qn__calls_set_gate(struct qn_calls *set, qn_call_gate_fn gate, void *ud);
/* The admission hook (call.h); NULL admits every call. Borrows ud. */
void qn__calls_set_admission(struct qn_calls *set, qn_call_admit_fn admit, void *ud);
/* A connection may have room again: held calls are looked at on the next loop
 * pass. */
void qn__calls_admission_room(struct qn_calls *set);
bool qn__calls_has_service(const struct qn_calls *set, const char *service);
/* The method registered for path, or NULL (a binding that must refuse some
 * methods before starting the call: gRPC-Web and client streaming). */
const struct qn_method *qn__calls_route(const struct qn_calls *set, const char *path);

/* Counts calls in queen_rpc_requests_total and queen_rpc_duration_seconds of m
 * (borrowed until the set is freed). Returns QN_OK, or the registry's error
 * (then nothing is counted). */
int qn__calls_set_metrics(struct qn_calls *set, struct qn_metrics *m);
/* Several loops' call sets share one QUEEN_MAX_RECV_BUFFER_BYTES: count (borrowed
 * until the set is freed) holds the unfinished request bytes of all of them. */
void qn__calls_share_inbound(struct qn_calls *set, _Atomic size_t *count);
/* QUEEN_MAX_STREAMS counted in *count, every loop's streams (QUEEN_WORKERS > 1). */
void qn__calls_share_streams(struct qn_calls *set, _Atomic uint64_t *count);
/* QUEEN_MAX_SEND_BUFFER_BYTES / n for this set, at least QUEEN_MAX_CONN_SEND_BYTES. */
void qn__calls_split_send_buffer(struct qn_calls *set, unsigned n);

/* The call set of a gRPC server (server.c), for a second binding (the HTTP
 * side port's gRPC-Web) to make its calls in. */
struct qn_calls *qn__rpc_server_calls(qn_rpc_server *s);

/* New streaming calls are refused with UNAVAILABLE from now on. */
void qn__calls_shutdown(struct qn_calls *set);
bool qn__calls_shutting_down(const struct qn_calls *set);
/* Ends every open call (all), or every open streaming call, with UNAVAILABLE
 * (handlers get on_cancel(QN_ESHUTDOWN)). */
void qn__calls_end(struct qn_calls *set, bool all);

int qn__calls_stream_acquire(struct qn_calls *set);
void qn__calls_stream_release(struct qn_calls *set);
size_t qn__calls_max_send(const struct qn_calls *set);
/* The call counters of struct qn_rpc_stats (calls_started, calls_open,
 * status_count); the connection and byte counters are left as they are. */
void qn__calls_stats(const struct qn_calls *set, struct qn_rpc_stats *out);

/* ---------------------------------------------------------------- bindings */

/* What the call layer asks of the binding that carries a call. Every op runs on
 * the loop, never after the call is closed; none may close or free the call. */
struct qn_call_ops {
    /* The first response message is queued: send the response head; the body
     * follows as the binding pulls it. QN_OK, or QN_ECLOSED (nothing can be
     * sent on this stream any more). */
    int (*respond)(qn_call *c);
    /* More output is queued, or the trailers became due: pull again. */
    void (*resume)(qn_call *c);
    /* The call ended with nothing sent: answer with the status alone
     * (qn__call_status), under http_status (200, or 405 / 415 for a request the
     * binding's checks refused), adding grpc-accept-encoding: identity when
     * accept_encoding. */
    void (*respond_status)(qn_call *c, int http_status, bool accept_encoding);
    /* The call's stream can still carry output (its connection is not going
     * away). When false the call layer skips the ops above. */
    bool (*alive)(const qn_call *c);
};

/* The calls of one connection, kept by the call layer. The binding embeds one
 * per connection, zeroed, and closes it with qn__call_conn_close(). */
struct qn_call_conn {
    qn_call *calls; /* not closed */
    size_t ncalls;
    size_t nheaders;           /* of ncalls, those still in HEADERS (not yet work: see active) */
    size_t inbound;            /* bytes held by its calls' partly received messages */
    size_t queued;             /* response bytes its calls queued and the binding has not taken */
    size_t reserved;           /* response bytes its producers reserved (qn_call_reserve) */
    struct x509_st *peer_cert; /* verified TLS client certificate, or NULL (borrowed) */
    const char *peer;          /* "addr:port" for logs, or NULL (borrowed) */
    /* calls held for admission (call.h, qn_method.admission), oldest first, and
     * the connection's place among those that hold some (call.c owns these) */
    qn_call *adm_head, *adm_tail;
    struct qn_call_conn *adm_prev, *adm_next;
    bool adm_listed;
};

/* Calls of the connection past their request headers: its work in progress (a
 * connection with none is idle, whatever else it receives). */
size_t qn__call_conn_active(const struct qn_call_conn *cc);

/* A request stream began: a call in HEADERS. link and stream_id are the
 * binding's (qn__call_link, qn__call_stream_id). NULL when out of memory. */
qn_call *qn__call_new(struct qn_calls *set, struct qn_call_conn *cc, const struct qn_call_ops *ops,
                      void *link, int32_t stream_id);

void *qn__call_link(const qn_call *c);
int32_t qn__call_stream_id(const qn_call *c);

/* One request header (not NUL-terminated; no NUL inside). Past
 * QN_CALL_MAX_HEADER_BYTES or QN_CALL_MAX_HEADERS the call is marked
 * overflowed; ignored once the headers are done. */
void qn__call_add_header(qn_call *c, const uint8_t *name, size_t namelen, const uint8_t *value,
                         size_t valuelen);
/* The headers were over the limits: reject with RESOURCE_EXHAUSTED. */
bool qn__call_headers_overflowed(const qn_call *c);
/* The call is in HEADERS (not yet started or rejected). */
bool qn__call_in_headers(const qn_call *c);

/* The binding refused the request (its header checks): ends the call with code
 * and message under http_status. Only in HEADERS. */
void qn__call_reject(qn_call *c, int http_status, enum qn_grpc_code code, const char *msg,
                     bool accept_encoding);
/* Headers accepted: route :path (unknown -> UNIMPLEMENTED), refuse a streaming
 * call during shutdown, refuse any call on a connection over its outbound
 * budget (RESOURCE_EXHAUSTED, see qn_call_reserve), arm the deadline
 * (timeout_ms < 0: none). Only in HEADERS. */
void qn__call_start(qn_call *c, int64_t timeout_ms);

/* Request body bytes: framed messages are checked (the pre-scan, pb_scan.h),
 * decoded and handed to the method as they complete (limits:
 * QUEEN_MAX_RECV_BYTES per message, QUEEN_MAX_CONN_RECV_BYTES per connection,
 * QUEEN_MAX_RECV_BUFFER_BYTES over the broker). Ignored unless the call is
 * receiving. The binding grants the bytes' window after this returns. */
void qn__call_data(qn_call *c, const uint8_t *data, size_t len);
/* The client ended its side of the stream. */
void qn__call_remote_close(qn_call *c);
/* The stream is gone (reset, closed, or its connection): the call is closed and
 * freed later; a handler that owned it hears on_cancel(QN_ECLOSED). */
void qn__call_closed(qn_call *c);
bool qn__call_is_closed(const qn_call *c);

/* Moves up to cap queued response bytes into buf; returns how many. When that
 * empties the queue, a drain callback (qn_call_on_drain) is scheduled. */
size_t qn__call_take_output(qn_call *c, uint8_t *buf, size_t cap);
/* The call finished and everything queued was taken: the trailers go now. */
bool qn__call_trailers_due(const qn_call *c);
/* The final status: the code as decimal text, and the percent-encoded
 * grpc-message or NULL. Borrowed until the call is freed. */
void qn__call_status(const qn_call *c, const char **code, const char **message);

/* The connection is gone: every call on it is closed (handlers get
 * on_cancel(QN_ECLOSED)). */
void qn__call_conn_close(struct qn_call_conn *cc);

#endif
