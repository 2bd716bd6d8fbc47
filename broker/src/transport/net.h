/*
 * net.h - private to broker/ (net.c and grpc.c only): listeners, connections, TLS
 * and the nghttp2 session of each connection.
 *
 * net.c owns sockets, bufferevents, the SSL_CTX, nghttp2 sessions, connection
 * timers (idle, keepalive PING, flush) and connection lifetimes. grpc.c owns
 * everything per stream: it supplies the stream-level nghttp2 callbacks and gets
 * told when a connection opens and when it goes away (qn__grpc_* below). The
 * session's user_data is the qn_conn.
 *
 * Connection lifecycle (asserted in net.c):
 *
 *   HANDSHAKE --TLS done, ALPN h2--> OPEN            (h2c connections start OPEN)
 *   OPEN --GOAWAY submitted (shutdown / idle / keepalive / protocol error)--> DRAINING
 *   OPEN|DRAINING --nghttp2 wants neither read nor write--> FLUSHING
 *   FLUSHING --output written, or flush timeout--> DEAD
 *   any --EOF / socket or TLS error / hard close--> DEAD
 *   DEAD: queued; freed in the reap pass after the current dispatch pass, where
 *   qn__grpc_conn_closed() runs first. Nothing reads or writes a DEAD connection.
 */
#ifndef QN_BROKER_NET_H
#define QN_BROKER_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

struct event_base;
struct qn_config;
struct qn_rpc_server;

typedef struct qn_net qn_net;
typedef struct qn_conn qn_conn;

/* Per-stream initial window we advertise, and the connection window. Request
 * bytes are granted back (nghttp2_session_consume) only after grpc.c handled
 * them; see grpc.c's invariants. */
#define QN_NET_STREAM_WINDOW (1 << 20)
#define QN_NET_CONN_WINDOW (8 << 20)
/* Request header list we accept per stream (SETTINGS_MAX_HEADER_LIST_SIZE). */
#define QN_NET_MAX_HEADER_LIST 16384

/* Monotonic milliseconds: qn_store_now_ms(), the deadline clock of rpc.h. */
int64_t qn__net_now_ms(void);

/* Makes the network layer (listeners not yet bound). Reads the TLS files when a
 * certificate is configured. Returns QN_OK, QN_ENOMEM, or QN_EINVAL (logged). */
int qn__net_new(struct event_base *base, const struct qn_config *cfg, struct qn_rpc_server *owner,
                qn_net **out);
/* Binds the listeners. QN_OK or QN_EIO (logged). */
int qn__net_listen(qn_net *n);
/* Bound port of the plain / TLS listener, -1 when none. */
int qn__net_port(const qn_net *n, bool tls);
/* Closes the listeners (no new connections). */
void qn__net_stop_accepting(qn_net *n);
/* Graceful: GOAWAY(NO_ERROR, last processed stream) on every connection; each
 * closes once its streams are done and its output is written. */
void qn__net_goaway_all(qn_net *n);
/* Hard: every connection becomes DEAD now (freed in the reap pass). */
void qn__net_close_all(qn_net *n);
/* Connections not yet freed. */
size_t qn__net_conn_count(const qn_net *n);
/* Calls fn(conn, ud) for every live (not DEAD) connection. fn must not free. */
void qn__net_each_conn(qn_net *n, void (*fn)(qn_conn *c, void *ud), void *ud);
/* Frees every connection at once (qn__grpc_conn_closed() runs for each), then n. */
void qn__net_free(qn_net *n);

/* ------------------------------------------------ per connection, for grpc.c */

nghttp2_session *qn__net_session(qn_conn *c);
void *qn__net_conn_data(const qn_conn *c);
void qn__net_conn_set_data(qn_conn *c, void *data);
/* Sends what nghttp2 has queued, after the current dispatch pass (one event). */
void qn__net_schedule_flush(qn_conn *c);
/* Same, now. Never from inside an nghttp2 callback. */
void qn__net_flush(qn_conn *c);
/* The connection is being torn down (DEAD): submitting to it is pointless. */
bool qn__net_conn_is_dead(const qn_conn *c);

/* ------------------------------------------------ implemented by grpc.c */

/* Fills the stream-level callbacks (begin_headers, header, frame_recv,
 * data_chunk_recv, stream_close, frame_send). net.c adds its own around them. */
void qn__grpc_set_callbacks(nghttp2_session_callbacks *cbs);
/* Frame received: net.c calls it from its own on_frame_recv (after PING handling). */
int qn__grpc_on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *conn);
/* A connection opened (session made): grpc.c attaches its state with
 * qn__net_conn_set_data(). QN_OK or QN_ENOMEM (the connection is then closed). */
int qn__grpc_conn_open(struct qn_rpc_server *s, qn_conn *c);
/* The connection is going away (reap pass, or qn__net_free): every call on it ends
 * (handlers get on_cancel(QN_ECLOSED)) and grpc.c frees its state. No nghttp2 call
 * may be made on the session from here. */
void qn__grpc_conn_closed(struct qn_rpc_server *s, qn_conn *c);
/* Open calls on the connection (idle timeout and keepalive look at it). */
size_t qn__grpc_conn_calls(const qn_conn *c);
/* A connection was freed (the shutdown watches the count reach zero). */
void qn__grpc_conn_freed(struct qn_rpc_server *s);
/* Traffic counters. */
void qn__grpc_count_bytes(struct qn_rpc_server *s, size_t in, size_t out);
void qn__grpc_count_accept(struct qn_rpc_server *s);

#endif
