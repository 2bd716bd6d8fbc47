/*
 * queen/client.h - a gRPC client for Queen in C: HTTP/2 (h2c, or TLS with ALPN
 * h2) on nghttp2, messages as protobuf-c.
 *
 * Two ways to use one connection (a qn_client):
 *
 *   Blocking (a command-line tool, a simple producer): qn_client_dial() resolves,
 *   connects and waits for the session; qn_client_unary() makes one call and
 *   waits for its answer; qn_client_stream_*() runs a streaming call (client-,
 *   server- or bidirectional) with "send a message" and "wait for the next
 *   message or the end, at most so long".
 *
 *   Poll loop (a load generator, an event-driven program): qn_client_new() on a
 *   resolved address; each round put qn_client_fd()/qn_client_events() in a
 *   pollfd, call qn_client_io() with what poll returned (0 on a timeout) and
 *   qn_client_flush() after starting calls; calls report through callbacks.
 *   Such a connection may reconnect by itself after a failure, with a backoff.
 *   qn_client_run() is one such round for a blocking program that mixes both.
 *
 * Failures: every call and connection failure is described by a struct
 * qn_client_status: which stage failed (connect, TLS, HTTP/2, the response, the
 * deadline...) and a one-line message for people, or, when the call reached the
 * server and back, the gRPC status code and its decoded grpc-message. Functions
 * return QN_OK or a negative code of queen/error.h; the mapping of stages to
 * codes is given with enum qn_client_fail.
 *
 * Limits: the largest response message accepted, the bytes a call may queue for
 * sending, the bytes of unread responses a blocking stream may hold, and the
 * connection's write buffer all have hard maxima.
 *
 * The library never prints, exits or keeps global state. A qn_client and
 * everything made from it belong to one thread at a time. SIGPIPE is never
 * raised by its sockets (MSG_NOSIGNAL, and TLS writes go through the same path).
 */
#ifndef QUEEN_CLIENT_H
#define QUEEN_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <protobuf-c/protobuf-c.h>

#include "queen/client_wire.h"

typedef struct qn_client qn_client;
typedef struct qn_client_call qn_client_call;
typedef struct qn_client_tls qn_client_tls;
typedef struct qn_client_stream qn_client_stream;

/* Defaults used when an option is 0. */
#define QN_CLIENT_DEFAULT_MAX_MSG (8u * 1024u * 1024u)     /* largest response message */
#define QN_CLIENT_DEFAULT_WINDOW (1u * 1024u * 1024u)      /* HTTP/2 stream window */
#define QN_CLIENT_DEFAULT_MAX_SEND (64u * 1024u * 1024u)   /* bytes a call may queue to send */
#define QN_CLIENT_DEFAULT_MAX_QUEUED (32u * 1024u * 1024u) /* unread bytes of a blocking stream */
#define QN_CLIENT_DEFAULT_CONNECT_MS 10000                 /* qn_client_dial's wait */

/* Which stage a failure happened in, and the code functions return for it. */
enum qn_client_fail {
    QN_CLIENT_FAIL_NONE = 0, /* none: the call got a gRPC status (code says which) */
    QN_CLIENT_FAIL_CONFIG,   /* QN_EINVAL / QN_EIO: a bad option, or a file it names */
    QN_CLIENT_FAIL_RESOLVE,  /* QN_ECLOSED: the host name did not resolve */
    QN_CLIENT_FAIL_CONNECT,  /* QN_ECLOSED: TCP connect refused, unreachable or timed out */
    QN_CLIENT_FAIL_TLS,      /* QN_EPROTO: handshake, certificate verification, ALPN h2 */
    QN_CLIENT_FAIL_HTTP2,    /* QN_ECLOSED: HTTP/2 error, GOAWAY, connection lost or
                                closed, or a stream ended without a grpc-status */
    QN_CLIENT_FAIL_RESPONSE, /* QN_EPROTO: the response broke gRPC framing or did not decode;
                                QN_ELIMIT: it was larger than the largest message accepted */
    QN_CLIENT_FAIL_DEADLINE, /* QN_EDEADLINE: the call's deadline passed here */
    QN_CLIENT_FAIL_LIMIT,    /* QN_ELIMIT: a local bound (send buffer, unread responses,
                                no stream room left on the connection) */
    QN_CLIENT_FAIL_MEMORY,   /* QN_ENOMEM */
};

/* The outcome of a call or of a connection attempt. */
struct qn_client_status {
    enum qn_client_fail fail;        /* QN_CLIENT_FAIL_NONE when code is the server's */
    int code;                        /* gRPC status (0 = OK) when fail is NONE, else -1 */
    char message[QN_CLIENT_MSG_MAX]; /* grpc-message (decoded, may be ""), or what failed */
};

/* "config", "resolve", "connect", "tls", "http2", "response", "deadline",
 * "limit", "memory", or "" for NONE. */
const char *qn_client_fail_name(enum qn_client_fail f);

/* Clears st to "no outcome yet" (fail NONE, code -1, empty message). */
void qn_client_status_clear(struct qn_client_status *st);

/* ---------------------------------------------------------------- TLS */

enum qn_client_verify {
    QN_CLIENT_VERIFY_FULL = 0, /* the chain, and the server name (DNS) or address (IP) */
    QN_CLIENT_VERIFY_CHAIN,    /* the chain only */
    QN_CLIENT_VERIFY_NONE,     /* nothing (tests and benchmarks only) */
};

struct qn_client_tls_opts {
    const char *ca_file;   /* PEM CA bundle; NULL: the system's default trust store */
    const char *cert_file; /* PEM client certificate chain (mTLS); NULL: none */
    const char *key_file;  /* PEM private key of cert_file; required with it */
    enum qn_client_verify verify;
};

/*
 * Makes a TLS client context (TLS 1.2 or newer, ALPN "h2") that any number of
 * connections may share; it must outlive them. Files are read here.
 * Returns QN_OK and *out, or QN_EINVAL (a key without a certificate or the other
 * way round, a key that does not match), QN_EIO (a file cannot be read or is not
 * PEM), QN_ENOMEM; st says which file and why.
 */
int qn_client_tls_new(const struct qn_client_tls_opts *o, qn_client_tls **out,
                      struct qn_client_status *st);

/* NULL is ignored. */
void qn_client_tls_free(qn_client_tls *t);

/* ---------------------------------------------------------------- addresses */

/* A resolved target. */
struct qn_client_addr {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char host[256];      /* the host part, without brackets */
    char authority[300]; /* "host:port" (brackets kept for IPv6), for :authority */
    bool ip_literal;     /* host is an IPv4 or IPv6 address */
};

/*
 * Parses "host:port", "[ipv6]:port" or "host" (then default_port) and resolves
 * it (getaddrinfo: this may block). Returns QN_OK and *out, QN_EINVAL (malformed;
 * fail CONFIG) or QN_ECLOSED (did not resolve; fail RESOLVE); st says why.
 */
int qn_client_resolve(const char *target, const char *default_port, struct qn_client_addr *out,
                      struct qn_client_status *st);

/* ---------------------------------------------------------------- connections */

struct qn_client_opts {
    struct sockaddr_storage addr; /* where to connect */
    socklen_t addrlen;
    const char *authority;   /* :authority, "host:port"; borrowed for the connection's life */
    qn_client_tls *tls;      /* non-NULL: TLS; borrowed, must outlive the connection */
    const char *server_name; /* TLS: SNI and the name verified (an IP literal is checked
                                as an address, without SNI); NULL: none. Borrowed. */
    const char *token;       /* non-NULL: "authorization: Bearer <token>" on every call;
                                copied. Printable ASCII without spaces. */
    size_t max_msg;          /* largest response message accepted (0: default) */
    uint32_t window;         /* local stream window in bytes (0: default) */
    size_t max_send;         /* bytes one call may queue to send (0: default) */
    size_t max_queued;       /* unread response bytes of a blocking stream (0: default) */
    bool reconnect;          /* after a failure, reconnect with a backoff; else stay down */
    const char *user_agent;  /* NULL: "queen-client/<version>"; borrowed */
};

/*
 * Makes a connection and starts connecting (never blocks). opts is copied, its
 * pointers are borrowed except token. Returns QN_OK and *out, QN_EINVAL (a token
 * a header cannot carry), QN_ENOMEM. A connect that fails at once is not an
 * error here: see qn_client_failures() / qn_client_last_error().
 */
int qn_client_new(const struct qn_client_opts *opts, qn_client **out);

/* Closes the connection; open calls end with QN_CLIENT_END_CONN_LOST (their
 * on_close runs inside this function). Frees what qn_client_dial made. NULL is
 * ignored. */
void qn_client_free(qn_client *c);

/* The socket to poll (-1 while down) and the events wanted. */
int qn_client_fd(const qn_client *c);
short qn_client_events(const qn_client *c);

/* Handles poll results (revents may be 0) and timers (reconnect, connect
 * timeout, call deadlines); now_ns is qn_client_now_ns(). Never fails: a
 * connection failure is counted and described by qn_client_last_error(). */
void qn_client_io(qn_client *c, short revents, uint64_t now_ns);

/* Serialises queued frames and writes what the socket takes. */
void qn_client_flush(qn_client *c);

/* Earliest monotonic time qn_client_io must be called even without events
 * (0 = none). */
uint64_t qn_client_deadline(const qn_client *c);

/* True when calls may be started. */
bool qn_client_ready(const qn_client *c);

/* True when the connection failed and will not reconnect (reconnect off). */
bool qn_client_dead(const qn_client *c);

/* Open calls, and how many more the server allows (its MAX_CONCURRENT_STREAMS). */
unsigned qn_client_active(const qn_client *c);
unsigned qn_client_room(const qn_client *c);

/* Connection failures so far, and the last one (fail NONE, "" if none). The
 * status is borrowed until the next call on c. */
uint64_t qn_client_failures(const qn_client *c);
const char *qn_client_last_error(const qn_client *c);
const struct qn_client_status *qn_client_last_status(const qn_client *c);

/* Monotonic clock in nanoseconds. */
uint64_t qn_client_now_ns(void);

/* ---------------------------------------------------------------- calls (poll loop) */

enum qn_client_end {
    QN_CLIENT_END_STATUS,    /* the stream closed after a grpc-status */
    QN_CLIENT_END_NO_STATUS, /* the stream closed (or was reset) without a grpc-status */
    QN_CLIENT_END_BAD_FRAME, /* a response message broke the gRPC framing or size limit */
    QN_CLIENT_END_CONN_LOST, /* the connection failed while the call was open */
    QN_CLIENT_END_DEADLINE,  /* the call's deadline passed here; the stream was reset */
};

struct qn_client_call_result {
    enum qn_client_end end;
    int grpc_status;          /* 0..999 when end == QN_CLIENT_END_STATUS, else -1 */
    const char *grpc_message; /* decoded grpc-message, "" when none; borrowed */
    int http_status;          /* :status, 0 when none was received */
    uint32_t h2_error;        /* RST_STREAM / GOAWAY code the stream closed with */
    const uint8_t *msg;       /* last response message when on_message is NULL; borrowed */
    size_t msg_len;
    uint64_t messages; /* response messages received */
    int frame_error;   /* end == BAD_FRAME: QN_ELIMIT (over max_msg), QN_EPROTO, QN_ENOMEM */
};

struct qn_client_call_cbs {
    /* Optional: each response message as it arrives (streaming). The bytes are
     * borrowed until it returns. It may call qn_client_call_send/close_send on
     * this call, nothing else. When NULL the last message is kept for on_close. */
    void (*on_message)(qn_client_call *call, const uint8_t *msg, size_t len, void *ud);
    /* Required: the call ended. r and its pointers are borrowed until return. */
    void (*on_close)(qn_client_call *call, const struct qn_client_call_result *r, void *ud);
};

/* Per-call options; NULL means all defaults. */
struct qn_client_call_opts {
    int64_t timeout_ms; /* > 0: sent as grpc-timeout, and the call ends with
                           QN_CLIENT_END_DEADLINE here when it passes; 0: none */
    const char *token;  /* non-NULL: this bearer token instead of the connection's;
                           "" sends none. Copied into the request headers. */
};

/* Describes r for people ("NOT_FOUND: queue x does not exist", "the connection
 * was lost", ...) and classifies it into st. */
void qn_client_result_status(const struct qn_client_call_result *r, struct qn_client_status *st);

/*
 * Opens a call to path ("/package.Service/Method"; copied). Every started call
 * ends with exactly one on_close, never from inside qn_client_call_start/send/
 * close_send/cancel: only from qn_client_io, qn_client_flush or qn_client_free.
 * The handle is valid until on_close returns.
 * Returns QN_OK and *out, or QN_ECLOSED (not ready), QN_ELIMIT (no stream room),
 * QN_EINVAL (a token a header cannot carry), QN_ENOMEM, QN_EINTERNAL (nghttp2
 * refused; see qn_client_last_error).
 */
int qn_client_call_start(qn_client *c, const char *path, const struct qn_client_call_opts *o,
                         const struct qn_client_call_cbs *cbs, void *ud, qn_client_call **out);

/* Queues one message (packed here, with its gRPC prefix). Returns QN_OK,
 * QN_EINVAL after close_send or once the call ended, QN_ELIMIT past the call's
 * send limit, QN_ENOMEM. */
int qn_client_call_send(qn_client_call *call, const ProtobufCMessage *msg);

/* Queues bytes that already carry gRPC prefixes. Same returns. */
int qn_client_call_send_raw(qn_client_call *call, const uint8_t *data, size_t len);

/* Half-closes: END_STREAM follows the queued messages. Idempotent. */
void qn_client_call_close_send(qn_client_call *call);

/* True once END_STREAM went out after every queued byte (the whole request was
 * handed to the socket). */
bool qn_client_call_sent(const qn_client_call *call);

/* Resets the stream (CANCEL); on_close follows with QN_CLIENT_END_NO_STATUS. */
void qn_client_call_cancel(qn_client_call *call);

/* Monotonic time the call was started, in ns. */
uint64_t qn_client_call_started_ns(const qn_client_call *call);

/* ---------------------------------------------------------------- blocking use */

/* Everything qn_client_dial needs. Strings are borrowed for the call only. */
struct qn_client_config {
    const char *target;      /* "host:port", "[ipv6]:port", or "host" (port 6632) */
    bool tls;                /* TLS with ALPN h2 (the fields below); else h2c */
    const char *ca_file;     /* TLS: CA bundle; NULL: the system's trust store */
    const char *cert_file;   /* TLS: client certificate (mTLS) */
    const char *key_file;    /* TLS: its private key */
    const char *server_name; /* TLS: name to send and verify; NULL: the target's host */
    enum qn_client_verify verify;
    const char *token;      /* bearer token for every call; NULL: none */
    size_t max_msg;         /* 0: default */
    size_t max_queued;      /* unread response bytes per blocking stream; 0: default */
    int connect_timeout_ms; /* <= 0: default */
};

/*
 * Resolves, connects, does the TLS handshake and starts the HTTP/2 session,
 * waiting at most connect_timeout_ms; the connection does not reconnect.
 * Returns QN_OK and *out, or the code of the failed stage (enum qn_client_fail)
 * with st describing it, e.g. "connect 127.0.0.1:6632: connection refused".
 */
int qn_client_dial(const struct qn_client_config *cfg, qn_client **out,
                   struct qn_client_status *st);

/*
 * One poll round: flush, wait at most timeout_ms (0: do not wait; < 0: until
 * something happens) for the socket or the next timer, handle it.
 * Returns QN_OK; QN_ECANCELLED when a signal interrupted the wait (so a caller
 * can check its flags); QN_ECLOSED when the connection is dead (qn_client_dead).
 */
int qn_client_run(qn_client *c, int timeout_ms);

/*
 * One unary call: sends req to path, waits for the answer (bounded by o's
 * timeout, if any) and decodes it with resp_desc into *resp (free it with
 * protobuf_c_message_free_unpacked(*resp, NULL)).
 * Returns QN_OK when a gRPC status arrived: st->code is it, and *resp is set
 * only when it is 0 (OK). Otherwise the code of the failed stage, with st
 * describing it and *resp untouched.
 */
int qn_client_unary(qn_client *c, const char *path, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc,
                    const struct qn_client_call_opts *o, ProtobufCMessage **resp,
                    struct qn_client_status *st);

/*
 * Opens a streaming call. Messages arriving are queued (at most the
 * connection's max_queued bytes; past it the stream fails with QN_CLIENT_FAIL_LIMIT) until
 * qn_client_stream_recv takes them. Returns QN_OK and *out, or the code of the failed stage with
 * st.
 */
int qn_client_stream_open(qn_client *c, const char *path, const struct qn_client_call_opts *o,
                          qn_client_stream **out, struct qn_client_status *st);

/* Queues one message and writes what the socket takes. Returns QN_OK, QN_EINVAL
 * (after close_send, or the stream ended), QN_ELIMIT, QN_ENOMEM. */
int qn_client_stream_send(qn_client_stream *s, const ProtobufCMessage *msg);

/* Half-closes the sending side. Idempotent. */
void qn_client_stream_close_send(qn_client_stream *s);

/*
 * Waits at most timeout_ms (< 0: no limit) for the next message and decodes it
 * with desc into *msg (free with protobuf_c_message_free_unpacked(*msg, NULL)).
 * Returns:
 *   QN_OK with *msg set       a message
 *   QN_OK with *msg NULL      the stream ended; st holds its status (code 0 = OK)
 *   QN_ETIMEOUT               nothing arrived in time, or a signal interrupted the
 *                             wait; the stream is still open
 *   another negative code     the stream failed (st says how), or the message did
 *                             not decode (QN_EPROTO, fail RESPONSE)
 */
int qn_client_stream_recv(qn_client_stream *s, const ProtobufCMessageDescriptor *desc,
                          int timeout_ms, ProtobufCMessage **msg, struct qn_client_status *st);

/* True when the stream ended and every queued message was taken. */
bool qn_client_stream_done(const qn_client_stream *s);

/* Cancels the call if still open and frees the stream. NULL is ignored. */
void qn_client_stream_free(qn_client_stream *s);

#endif
