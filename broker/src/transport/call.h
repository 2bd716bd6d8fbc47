/*
 * transport/call.h - private to broker/: a gRPC call as the services see it.
 *
 * The transport turns each request stream into a qn_call and hands decoded
 * request messages to the method registered for its :path (server.h registers
 * methods). Services answer through qn_call_send() / qn_call_finish(). How the
 * call travels (an HTTP/2 stream: h2.c) is not visible here.
 *
 * Threading: everything runs on the loop thread that owns the server. No locks.
 *
 * Call lifecycle (asserted in call.c):
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
#ifndef QN_BROKER_CALL_H
#define QN_BROKER_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

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
    /* Unary only: the handler takes a database slot of the call's connection.
     * While the server's admission hook (qn_rpc_server_set_admission) says the
     * connection has none free, the transport holds the call, its request
     * decoded, and hands it over in arrival order once a slot frees
     * (qn_rpc_server_admission_room): the client waits, as under HTTP/2 flow
     * control, instead of being refused. A held call that meets its deadline or
     * loses its stream ends without the handler ever seeing it. */
    bool admission;
    /* Free for the service (e.g. its state); read back with qn_call_method(). */
    void *data;
};

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
 * It does not run after the call finished or was cancelled. Returns QN_OK, or
 * QN_ENOMEM when the callback cannot be scheduled (it will not run: end the
 * call rather than wait for it). */
int qn_call_on_drain(qn_call *call, void (*cb)(qn_call *call));

/*
 * The outbound budget. What a connection's calls queued and its client has not
 * read, plus what producers on it reserved for responses they are about to
 * build, stays under QUEEN_MAX_CONN_SEND_BYTES per connection and
 * QUEEN_MAX_SEND_BUFFER_BYTES over the broker. A service that produces large
 * responses (Fetch, Pop, Consume) reserves before it starts a database read
 * and sizes the read to what it was granted, so a client that does not read
 * stops the reads for it, not the broker's memory. New calls on a connection
 * at its budget are refused by the transport (RESOURCE_EXHAUSTED).
 *
 * qn_call_reserve() reserves between min and want bytes (min <= want) for the
 * call's next response: *granted is as much of want as both budgets have room
 * for. It replaces a reservation the call held. The reservation lasts until
 * qn_call_unreserve(), qn_call_finish() or the end of the call (a response
 * queued with qn_call_send() counts as queued bytes on its own; the producer
 * unreserves once it sent what it reserved for). Returns QN_OK; QN_EBUSY when
 * responses its client (or the broker's clients) have not read leave less than
 * min free: the client does not read, refuse (nothing reserved; why[0..cap)
 * says which limit, for the client); QN_ELIMIT when less than min is free only
 * because other calls reserved for reads in flight: wait (qn_call_on_budget),
 * they release it soon; QN_ECLOSED when the call can no longer send. why may
 * be NULL when cap is 0.
 */
int qn_call_reserve(qn_call *call, size_t min, size_t want, size_t *granted, char *why, size_t cap);
void qn_call_unreserve(qn_call *call);

/* cb(call) runs once, from the loop, when at least min bytes of budget may be
 * reserved for the call (after a qn_call_reserve() that returned QN_EBUSY):
 * producing resumes as clients drain. Waiters are woken in the order they
 * waited. One callback; a later call replaces it, NULL clears. It does not run
 * after the call finished or was cancelled. QN_OK, or QN_ECLOSED. */
int qn_call_on_budget(qn_call *call, size_t min, void (*cb)(qn_call *call));

void qn_call_set_data(qn_call *call, void *data);
void *qn_call_data(const qn_call *call);

/* Monotonic milliseconds (qn_store_now_ms() clock) when the call's grpc-timeout
 * passes; 0 when the client set none. */
int64_t qn_call_deadline_ms(const qn_call *call);

/* An opaque key of the client connection the call arrived on: the same for every
 * call of that connection while the call is open, NULL once it is closed. A key
 * may be reused by a later connection after this one is gone. Services use it
 * to bound what one connection may hold (e.g. database calls in flight). */
const void *qn_call_conn_key(const qn_call *call);

/* The value of request header `name` (lower-case), or NULL. Borrowed for the
 * call's life. */
const char *qn_call_header(const qn_call *call, const char *name);

/* The server the call belongs to. */
qn_rpc_server *qn_call_server(const qn_call *call);

/* The method the call runs (its `data` carries the service's state). */
const struct qn_method *qn_call_method(const qn_call *call);

/* ---------------------------------------------------------------- authentication
 *
 * The transport knows nothing of credentials: the process installs a gate on the
 * server (qn_rpc_server_set_gate) that runs once per call, after routing and
 * before any request byte reaches the method; a refusal ends the call with the
 * gate's status and the method never sees it. What the gate learned (the
 * principal) travels with the call. */

/* Decides whether `call` may run: QN_GRPC_OK, or the status to answer with and a
 * message in msg[0..cap) (NUL-terminated). Runs on the loop; may read headers,
 * qn_call_peer_cert and set the call's auth. */
typedef enum qn_grpc_code (*qn_call_gate_fn)(void *ud, qn_call *call, char *msg, size_t cap);

/* Admission of calls of methods marked `admission`: true when the call's
 * connection may start one more now. Runs on the loop; must not touch the call
 * beyond reading it. */
typedef bool (*qn_call_admit_fn)(void *ud, const qn_call *call);

/* Attaches what authenticated the call (taken: free_fn(auth) runs when the call
 * is freed, after its handler is done with it). One per call; a second call
 * frees the first. */
void qn_call_set_auth(qn_call *call, void *auth, void (*free_fn)(void *auth));

/* The call's auth, or NULL (no gate, or the gate attached none). Borrowed for
 * the call's life. */
void *qn_call_auth(const qn_call *call);

/* The TLS client certificate of the call's connection, verified by the
 * handshake against QUEEN_TLS_CLIENT_CA; NULL on h2c, without a client CA, or
 * once the call is closed. Borrowed (X509 *) for the connection's life. */
struct x509_st *qn_call_peer_cert(const qn_call *call);

/* "addr:port" of the call's peer for logs; "" when unknown. Borrowed. */
const char *qn_call_peer(const qn_call *call);

#endif
