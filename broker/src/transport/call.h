/*
 * rpc.h - private to broker/: the gRPC server as the services see it.
 *
 * The transport (net.c: libevent listeners, TLS, one nghttp2 session per
 * connection; grpc.c: gRPC framing, deadlines, trailers) turns each HTTP/2 stream
 * into a qn_call and hands decoded request messages to the method registered for
 * its :path. Services answer through qn_call_send() / qn_call_finish().
 *
 * Threading: everything runs on the loop thread that owns the server. No locks.
 *
 * Call lifecycle (asserted in grpc.c):
 *
 *     OPEN --on_message*--> OPEN --qn_call_finish()--> FINISHED
 *       |                     |
 *       +--(reset / connection lost / deadline / shutdown)--> on_cancel() --> DEAD
 *
 *   - A call stays valid from the first on_message() until the handler calls
 *     qn_call_finish(), or until on_cancel() returns, whichever comes first. After
 *     that the handler must never touch it again (the transport frees it later,
 *     after the dispatch pass - closing is a request, not an immediate free).
 *   - on_cancel() is never called after qn_call_finish().
 *   - When the deadline passes, the transport itself answers DEADLINE_EXCEEDED and
 *     then calls on_cancel(call, QN_EDEADLINE) so the handler can cancel its
 *     database calls.
 */
#ifndef QN_BROKER_RPC_H
#define QN_BROKER_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

struct event_base;
struct qn_config;

typedef struct qn_rpc_server qn_rpc_server;
typedef struct qn_call qn_call;

/* gRPC status codes (the numbers are the protocol's). */
enum qn_grpc_code {
    QN_GRPC_OK = 0,
    QN_GRPC_CANCELLED = 1,
    QN_GRPC_UNKNOWN = 2,
    QN_GRPC_INVALID_ARGUMENT = 3,
    QN_GRPC_DEADLINE_EXCEEDED = 4,
    QN_GRPC_NOT_FOUND = 5,
    QN_GRPC_ALREADY_EXISTS = 6,
    QN_GRPC_PERMISSION_DENIED = 7,
    QN_GRPC_RESOURCE_EXHAUSTED = 8,
    QN_GRPC_FAILED_PRECONDITION = 9,
    QN_GRPC_ABORTED = 10,
    QN_GRPC_OUT_OF_RANGE = 11,
    QN_GRPC_UNIMPLEMENTED = 12,
    QN_GRPC_INTERNAL = 13,
    QN_GRPC_UNAVAILABLE = 14,
    QN_GRPC_DATA_LOSS = 15,
    QN_GRPC_UNAUTHENTICATED = 16,
};

struct qn_method {
    const char *path; /* "/queen.v1.QueueService/Push" */
    const ProtobufCMessageDescriptor *request;
    bool client_streaming;
    bool server_streaming;
    /*
     * One decoded request message. The handler takes ownership of msg and frees it
     * with protobuf_c_message_free_unpacked(msg, NULL) when done with it. Unary and
     * server-streaming methods get exactly one. Client-streaming methods get one
     * per message, each after the previous handler returned; the transport grants
     * HTTP/2 flow-control window for a message only after its handler returned.
     */
    void (*on_message)(qn_call *call, ProtobufCMessage *msg);
    /* Client-streaming only: the client half-closed its side. May be NULL. */
    void (*on_half_close)(qn_call *call);
    /* The call ended without qn_call_finish() (see the lifecycle). reason is
     * QN_ECLOSED (client reset / connection lost), QN_EDEADLINE, QN_ESHUTDOWN, or
     * QN_EBADREQUEST (client-streaming: a later request message was malformed or
     * over QUEEN_MAX_RECV_BYTES; the transport already answered with the status).
     * May be NULL when the handler keeps no state beyond on_message(). */
    void (*on_cancel)(qn_call *call, int reason);
    /* Free for the service (e.g. its state); read back with qn_call_method(). */
    void *data;
};

/* ---------------------------------------------------------------- server */

/*
 * Makes a server on `base` with the network settings and limits of cfg (copied).
 * Listeners open in qn_rpc_server_listen(). Returns QN_OK, QN_ENOMEM, or QN_EINVAL
 * with a logged reason (e.g. unreadable TLS files).
 */
int qn_rpc_server_new(struct event_base *base, const struct qn_config *cfg,
                      qn_rpc_server **out);

/* Registers methods (the array must outlive the server). Paths must be unique.
 * Returns QN_OK, QN_EINVAL (duplicate or malformed path; nothing registered) or
 * QN_ENOMEM. */
int qn_rpc_register(qn_rpc_server *s, const struct qn_method *methods, size_t n);

/* True when a method of `service` (full name, "queen.v1.QueueService") is
 * registered. */
bool qn_rpc_has_service(const qn_rpc_server *s, const char *service);

/* Binds the h2c listener (QUEEN_PORT, unless QUEEN_H2C is false; port 0 binds a
 * free port) and the TLS listener (when a certificate is configured). Returns
 * QN_OK or QN_EIO with a logged reason. */
int qn_rpc_server_listen(qn_rpc_server *s);

/* The ports actually bound (useful when the configured port was 0). -1 if none. */
int qn_rpc_server_port(const qn_rpc_server *s);
int qn_rpc_server_tls_port(const qn_rpc_server *s);

/*
 * Graceful shutdown: stop accepting, GOAWAY on every connection, end every
 * streaming call with UNAVAILABLE (handlers get on_cancel(QN_ESHUTDOWN)), let
 * unary calls finish for up to timeout_ms, then close everything and call
 * done(ud) once, on the loop.
 */
void qn_rpc_server_shutdown(qn_rpc_server *s, int timeout_ms, void (*done)(void *ud), void *ud);

/* True once qn_rpc_server_shutdown() was called. */
bool qn_rpc_server_is_shutting_down(const qn_rpc_server *s);

/* Closes every connection at once (open calls get on_cancel(QN_ECLOSED)) and frees
 * the server. NULL is allowed. */
void qn_rpc_server_free(qn_rpc_server *s);

/*
 * Long-lived streams (Consume, health Watch) share one budget, QUEEN_MAX_STREAMS.
 * acquire returns QN_OK (the caller releases exactly once when its stream ends)
 * or QN_EBUSY when the budget is spent (answer RESOURCE_EXHAUSTED).
 */
int qn_rpc_stream_acquire(qn_rpc_server *s);
void qn_rpc_stream_release(qn_rpc_server *s);

struct qn_rpc_stats {
    uint64_t connections_accepted;
    uint32_t connections_open;
    uint64_t calls_started;
    uint32_t calls_open;
    uint64_t status_count[17]; /* calls finished, by gRPC status code */
    uint64_t bytes_in;
    uint64_t bytes_out;
};
void qn_rpc_server_stats(const qn_rpc_server *s, struct qn_rpc_stats *out);

/* ---------------------------------------------------------------- calls */

/*
 * Serializes msg and queues it as one gRPC message. Unary methods send at most one
 * message before finishing with OK. Returns QN_OK, QN_ELIMIT when the encoded
 * message exceeds QUEEN_MAX_SEND_BYTES or would take the call's queued bytes past
 * its hard cap (max(4 x QUEEN_MAX_SEND_BYTES, 16 MiB); nothing queued), QN_EINVAL
 * when a unary method sends a second message, QN_ENOMEM, or QN_ECLOSED when the
 * call can no longer send. Borrows msg (serialized before return).
 */
int qn_call_send(qn_call *call, const ProtobufCMessage *msg);

/*
 * Ends the call: trailers with grpc-status = code and grpc-message = message
 * (percent-encoded by the transport; NULL or "" for none), after every queued
 * message. A call with nothing sent yet gets a trailers-only response. The handler
 * must not touch call afterwards.
 */
void qn_call_finish(qn_call *call, enum qn_grpc_code code, const char *message);

/* Same, with printf-style formatting of the message. */
void qn_call_finishf(qn_call *call, enum qn_grpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Bytes queued for this call and not yet written to the peer (outbound flow
 * control: producers stop producing while this is above their threshold). */
size_t qn_call_pending_bytes(const qn_call *call);

/* cb(call) runs once, from the loop (never inside qn_call_send()), when the call's
 * queued bytes have all been handed to the peer (pending drops to 0); when nothing
 * is pending as it is set, it runs on the next loop pass. One callback; NULL clears.
 * It does not run after the call finished or was cancelled. */
void qn_call_on_drain(qn_call *call, void (*cb)(qn_call *call));

void qn_call_set_data(qn_call *call, void *data);
void *qn_call_data(const qn_call *call);

/* Monotonic milliseconds (qn_store_now_ms() clock) when the call's grpc-timeout
 * passes; 0 when the client set none. */
int64_t qn_call_deadline_ms(const qn_call *call);

/* The value of request header `name` (lower-case), or NULL. Borrowed for the
 * call's life. */
const char *qn_call_header(const qn_call *call, const char *name);

/* The server the call belongs to. */
qn_rpc_server *qn_call_server(const qn_call *call);

/* The method the call runs (its `data` carries the service's state). */
const struct qn_method *qn_call_method(const qn_call *call);

/* Limits the transport enforces, for services that size their own work. */
size_t qn_rpc_max_send_bytes(const qn_rpc_server *s);

#endif
