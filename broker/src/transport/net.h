/*
 * transport/net.h - private to transport/: listeners, connections and TLS, for
 * any protocol.
 *
 * net.c owns sockets, bufferevents, the SSL_CTX, connection timers (handshake,
 * idle, keepalive, flush) and connection lifetimes. What the bytes mean is the
 * protocol's: net calls it only through the struct qn_net_handler given at
 * creation (function pointers and user data, as nghttp2 takes its callbacks and
 * user_data), and the protocol (h2.c for HTTP/2) calls back down through the
 * qn__net_conn_* functions below.
 *
 * Connection lifecycle (asserted in net.c):
 *
 *   HANDSHAKE --TLS done, ALPN h2--> OPEN            (h2c connections start OPEN)
 *   HANDSHAKE --QUEEN_TLS_HANDSHAKE_TIMEOUT_MS--> DEAD
 *   OPEN, not greeted --QUEEN_PREFACE_TIMEOUT_MS--> DEAD   (qn__net_conn_greeted)
 *   OPEN --goodbye queued (shutdown / idle / a fatal protocol error)--> DRAINING
 *   OPEN|DRAINING --the session is done (wants neither read nor write)--> FLUSHING
 *   OPEN|DRAINING --output backlog at QUEEN_CONN_SEND_HARD_BYTES, or at
 *                   QUEEN_CONN_SEND_SOFT_BYTES for QUEEN_CONN_SEND_SOFT_MS--> DEAD
 *   FLUSHING --output written, or flush timeout--> DEAD
 *   any --EOF / socket or TLS error / hard close--> DEAD
 *   DEAD: queued; freed in the reap pass after the current dispatch pass, where
 *   the handler's close() runs first. Nothing reads or writes a DEAD connection.
 */
#ifndef QN_BROKER_NET_H
#define QN_BROKER_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
struct sockaddr;
struct qn_config;

typedef struct qn_net qn_net;
typedef struct qn_conn qn_conn;

/*
 * The protocol a listener serves, and the owner of the net. No callback may free
 * a connection (closing is a request: the connection becomes DEAD and is freed
 * in the reap pass).
 */
struct qn_net_handler {
    /* ---- the protocol; proto is passed to open() */
    void *proto;
    /* The connection is ready for traffic (accepted h2c, or TLS done with ALPN
     * h2): make its session. Returns QN_OK with *session, or an error (the
     * connection is closed at once). */
    int (*open)(void *proto, qn_conn *c, void **session);
    /* Bytes arrived; the session takes all of them. Returns QN_OK, or an error:
     * in the connection-fatal range (qn_err_is_fatal: QN_EPROTO, QN_EFLOOD) the
     * session has queued its goodbye and the connection is torn down once it is
     * written; any other error (QN_ENOMEM) closes the connection at once. */
    int (*recv)(void *session, const uint8_t *data, size_t len);
    /* The next bytes to write: their length with *data (valid until the next
     * call), 0 when nothing is due, or a negative error (the connection closes). */
    ssize_t (*send)(void *session, const uint8_t **data);
    /* The session wants neither to read nor to write: the connection is done. */
    bool (*done)(void *session);
    /* Work in progress (calls past their headers): an idle connection has
     * none; keepalive pings only while there is some. */
    size_t (*active)(void *session);
    /* Output the session holds that the peer has not taken yet (bytes); with
     * what the socket buffer holds, checked against the output limits. May be
     * NULL (none). */
    size_t (*backlog)(void *session);
    /* Queue a keepalive ping; QN_OK when one was queued. The session reports
     * its acknowledgement with qn__net_ping_acked(). */
    int (*ping)(void *session);
    /* Queue a goodbye: graceful (shutdown: work in progress finishes) or not
     * (idle: the session ends once it is written). */
    void (*goaway)(void *session, bool graceful);
    /* The connection is going away (reap pass, or qn__net_free): end everything
     * on it and free the session. No qn__net_conn_* call for c after this. */
    void (*close)(void *session);
    /* ---- the owner; owner is passed to conn_freed() */
    void *owner;
    /* A connection was freed (the owner's shutdown watches the count). May be
     * NULL. */
    void (*conn_freed)(void *owner);
};

/* Makes the network layer (listeners not yet bound); copies *h. Reads the TLS
 * files when a certificate is configured. Returns QN_OK, QN_ENOMEM, or QN_EINVAL
 * (logged). */
int qn__net_new(struct event_base *base, const struct qn_config *cfg,
                const struct qn_net_handler *h, qn_net **out);
/*
 * A socket just accepted on this net's listener (tls: the TLS one): return true
 * to take it (fd, and sa copied before returning, are the callee's: it hands them
 * to another loop's net, qn__net_adopt), false to let this net serve it.
 */
typedef bool (*qn_net_handoff_fn)(void *ud, int fd, const struct sockaddr *sa, int salen, bool tls);
/* Installs the handoff (NULL: none). Before listening. */
void qn__net_set_handoff(qn_net *n, qn_net_handoff_fn fn, void *ud);
/* Serves a socket another loop's listener accepted (on this net's loop): the
 * same caps and setup as one accepted here; refuse closes it instead (shutting
 * down). Takes fd (closed on failure) and its place in the shared count
 * (qn__net_share_live_count), given back when it does not become a connection. */
void qn__net_adopt(qn_net *n, int fd, const struct sockaddr *sa, int salen, bool tls, bool refuse);

/* Several loops' nets share one QUEEN_MAX_CONNECTIONS: count (borrowed until
 * the net is freed) holds the live connections of all of them. Before listening. */
void qn__net_share_live_count(qn_net *n, _Atomic size_t *count);

/* One QUEEN_MAX_CONNECTIONS_PER_PEER count for several loops' nets: a table
 * (with its lock) made once; share it before listening; free it after every net
 * that shares it. */
struct qn_net_peers;
int qn__net_peers_new(size_t max_connections, struct qn_net_peers **out);
void qn__net_peers_free(struct qn_net_peers *t);
void qn__net_share_peers(qn_net *n, struct qn_net_peers *t);

/* Binds the listeners. QN_OK or QN_EIO (logged). */
int qn__net_listen(qn_net *n);
/* Bound port of the plain / TLS listener, -1 when none. */
int qn__net_port(const qn_net *n, bool tls);
/* Closes the listeners (no new connections). */
void qn__net_stop_accepting(qn_net *n);
/* Writes what every live connection's session has queued, now. */
void qn__net_flush_all(qn_net *n);
/* Graceful: a goodbye on every connection (handler goaway(graceful)); each
 * closes once its session is done and its output is written. Connections still
 * in the TLS handshake or before their preface are closed. */
void qn__net_goaway_all(qn_net *n);
/* Hard: every connection becomes DEAD now (freed in the reap pass). */
void qn__net_close_all(qn_net *n);
/* Connections not yet freed. */
size_t qn__net_conn_count(const qn_net *n);

struct qn_net_stats {
    uint64_t connections_accepted;
    uint64_t bytes_in;
    uint64_t bytes_out;
};
void qn__net_stats(const qn_net *n, struct qn_net_stats *out);

/* Frees every connection at once (the handler's close() runs for each), then n. */
void qn__net_free(qn_net *n);

/* ------------------------------------------------ per connection, for the protocol */

/* Sends what the session has queued, after the current dispatch pass (one event). */
void qn__net_conn_schedule_flush(qn_conn *c);
/* The connection is being torn down (DEAD): producing output for it is pointless. */
bool qn__net_conn_is_dead(const qn_conn *c);
/* The keepalive ping was acknowledged. */
void qn__net_ping_acked(qn_conn *c);
/* The protocol's opening arrived complete (HTTP/2: the client preface and its
 * SETTINGS): the preface deadline is met and the idle timer starts. */
void qn__net_conn_greeted(qn_conn *c);
/* A complete unit of work arrived (HTTP/2: a frame that opens, carries or ends
 * a stream, or a stream closed): the idle timer starts again. Nothing else
 * restarts it - bytes of an unfinished frame, PINGs, SETTINGS do not. */
void qn__net_conn_progress(qn_conn *c);
/* "addr:port" of the peer, for logs. */
const char *qn__net_conn_peer(const qn_conn *c);
/* The client certificate of a TLS connection whose handshake verified it
 * (QUEEN_TLS_CLIENT_CA), else NULL. Borrowed (X509 *) for the connection's life. */
struct x509_st *qn__net_conn_peer_cert(const qn_conn *c);

#endif
