/*
 * e2e_conn.h - private to bench/e2e: one HTTP/2 client connection (h2c, or TLS
 * with ALPN h2) carrying many concurrent gRPC calls, driven by the caller's
 * poll loop.
 *
 * Usage: make a connection with e2e_conn_new(); each loop iteration put
 * e2e_conn_fd()/e2e_conn_events() into a pollfd, then call e2e_conn_io() with
 * the returned events (0 on a timeout) and e2e_conn_flush() after starting
 * calls. A connection reconnects by itself after a failure, with a backoff;
 * calls that were open when it failed end with E2E_END_CONN_LOST.
 *
 * Calls: e2e_call_start() opens a stream (HEADERS go out on the next flush);
 * e2e_call_send() queues one message, e2e_call_close_send() half-closes. Every
 * started call ends with exactly one on_close callback, which is never invoked
 * from inside e2e_call_start/send/close_send, only from e2e_conn_io,
 * e2e_conn_flush or e2e_conn_free. The call handle is valid until on_close
 * returns.
 */
#ifndef QN_BENCH_E2E_CONN_H
#define QN_BENCH_E2E_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <openssl/ssl.h>
#include <protobuf-c/protobuf-c.h>

typedef struct e2e_conn e2e_conn;
typedef struct e2e_call e2e_call;

struct e2e_conn_opts {
    struct sockaddr_storage addr; /* where to connect */
    socklen_t addrlen;
    const char *authority;        /* :authority, "host:port"; borrowed for the conn's life */
    SSL_CTX *ssl_ctx;             /* non-NULL: TLS with ALPN h2; borrowed */
    const char *sni;              /* server name for TLS (may be NULL) */
    size_t max_msg;               /* largest response message accepted */
    uint32_t window;              /* local stream window (bytes) */
};

enum e2e_call_end {
    E2E_END_STATUS,     /* the stream closed after a grpc-status (trailers or trailers-only) */
    E2E_END_NO_STATUS,  /* the stream closed (or was reset) without a grpc-status */
    E2E_END_BAD_FRAME,  /* a response message broke the gRPC framing or size limit */
    E2E_END_CONN_LOST,  /* the connection failed while the call was open */
};

struct e2e_call_result {
    enum e2e_call_end end;
    int grpc_status;          /* 0..999 when end == E2E_END_STATUS, else -1 */
    const char *grpc_message; /* raw (percent-encoded) grpc-message, "" when none; borrowed */
    int http_status;          /* :status, 0 when none was received */
    uint32_t h2_error;        /* RST_STREAM / GOAWAY code the stream closed with */
    const uint8_t *msg;       /* last response message when on_message is NULL; borrowed */
    size_t msg_len;
    uint64_t messages;        /* response messages received */
};

struct e2e_call_cbs {
    /* Optional: each response message as it arrives (streaming). The bytes are
     * borrowed until it returns. It may call e2e_call_send/close_send on this
     * call, nothing else. When NULL the last message is kept for on_close. */
    void (*on_message)(e2e_call *call, const uint8_t *msg, size_t len, void *ud);
    /* Required: the call ended. r and its pointers are borrowed until return. */
    void (*on_close)(e2e_call *call, const struct e2e_call_result *r, void *ud);
};

/*
 * Makes a connection and starts connecting. opts is copied (its pointers are
 * borrowed). Returns QN_OK and *out, QN_ENOMEM. A connect that fails at once is
 * not an error here: the connection retries.
 */
int e2e_conn_new(const struct e2e_conn_opts *opts, e2e_conn **out);

/* Closes the connection; open calls end with E2E_END_CONN_LOST (their on_close
 * runs inside this function). NULL is ignored. */
void e2e_conn_free(e2e_conn *c);

/* The socket to poll (-1 while waiting to reconnect) and the events wanted. */
int e2e_conn_fd(const e2e_conn *c);
short e2e_conn_events(const e2e_conn *c);

/* Handles poll results (revents may be 0) and timers (reconnect, connect
 * timeout); now_ns is CLOCK_MONOTONIC. Never fails: errors are counted. */
void e2e_conn_io(e2e_conn *c, short revents, uint64_t now_ns);

/* Serialises queued frames and writes what the socket takes. */
void e2e_conn_flush(e2e_conn *c);

/* Earliest time e2e_conn_io must be called even without events (0 = none). */
uint64_t e2e_conn_deadline(const e2e_conn *c);

/* True when calls may be started. */
bool e2e_conn_ready(const e2e_conn *c);

/* Open calls, and how many more the server allows (its MAX_CONCURRENT_STREAMS). */
unsigned e2e_conn_active(const e2e_conn *c);
unsigned e2e_conn_room(const e2e_conn *c);

/* Connection failures so far, and a description of the last one ("" if none). */
uint64_t e2e_conn_failures(const e2e_conn *c);
const char *e2e_conn_last_error(const e2e_conn *c);

/*
 * Opens a call to path ("/pkg.Service/Method"; borrowed until the next flush).
 * Returns QN_OK and *out, or QN_ECLOSED (not ready), QN_ELIMIT (no stream
 * room), QN_ENOMEM, QN_EINTERNAL (nghttp2 refused; detail in last_error).
 */
int e2e_call_start(e2e_conn *c, const char *path, const struct e2e_call_cbs *cbs, void *ud,
                   e2e_call **out);

/* Queues one message (packed here, with its gRPC prefix). Returns QN_OK,
 * QN_EINVAL after close_send or once the call ended, QN_ELIMIT past the
 * call's send buffer limit, QN_ENOMEM. */
int e2e_call_send(e2e_call *call, const ProtobufCMessage *msg);

/* Queues bytes that already carry gRPC prefixes. Same returns. */
int e2e_call_send_raw(e2e_call *call, const uint8_t *data, size_t len);

/* Half-closes: END_STREAM follows the queued messages. Idempotent. */
void e2e_call_close_send(e2e_call *call);

/* Resets the stream (CANCEL); on_close follows with E2E_END_NO_STATUS. */
void e2e_call_cancel(e2e_call *call);

/* Monotonic time the call was started, in ns. */
uint64_t e2e_call_started_ns(const e2e_call *call);

/* Monotonic clock in nanoseconds. */
uint64_t e2e_now_ns(void);

#endif
