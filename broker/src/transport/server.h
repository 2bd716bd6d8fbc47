/*
 * transport/server.h - private to broker/: the gRPC server: listeners, the
 * method table, the shutdown, the budgets shared by all calls.
 *
 * Made of transport/net.c (connections), h2.c (HTTP/2 and the gRPC binding on
 * its streams) and call.c (the calls); server.c wires them. Threading: the loop
 * thread that owns the server, no locks.
 */
#ifndef QN_BROKER_SERVER_H
#define QN_BROKER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"
#include "transport/call.h"

struct event_base;
struct sockaddr;
struct qn_config;

/*
 * Makes a server on `base` with the network settings and limits of cfg (copied).
 * Listeners open in qn_rpc_server_listen(). Returns QN_OK, QN_ENOMEM, or QN_EINVAL
 * with a logged reason (e.g. unreadable TLS files).
 */
int qn_rpc_server_new(struct event_base *base, const struct qn_config *cfg, qn_rpc_server **out);

/* Registers methods (the array must outlive the server). Paths must be unique.
 * Returns QN_OK, QN_EINVAL (duplicate or malformed path; nothing registered) or
 * QN_ENOMEM. */
int qn_rpc_register(qn_rpc_server *s, const struct qn_method *methods, size_t n);

/* Installs the authentication gate every call passes before its method sees it
 * (call.h, qn_call_gate_fn); NULL removes it. Borrows ud. */
void qn_rpc_server_set_gate(qn_rpc_server *s, qn_call_gate_fn gate, void *ud);

/* Installs the admission hook for methods marked `admission` (call.h): a call
 * it refuses waits, held by the transport, until qn_rpc_server_admission_room()
 * and the hook agree. NULL admits every call. Borrows ud. */
void qn_rpc_server_set_admission(qn_rpc_server *s, qn_call_admit_fn admit, void *ud);

/* Some connection may have room for a held call again (cheap when none is
 * held; the calls are looked at on the next loop pass). */
void qn_rpc_server_admission_room(qn_rpc_server *s);

/* True when a method of `service` (full name, "queen.v1.QueueService") is
 * registered. */
bool qn_rpc_has_service(const qn_rpc_server *s, const char *service);

/* Binds the h2c listener (QUEEN_PORT, unless QUEEN_H2C is false; port 0 binds a
 * free port) and the TLS listener (when a certificate is configured). Returns
 * QN_OK or QN_EIO with a logged reason. */
int qn_rpc_server_listen(qn_rpc_server *s);

/*
 * Spreading connections over loops (broker.c): the handoff hears every socket
 * this server's listeners accept and returns true to take it (fd and sa are the
 * callee's; it gives them to another loop's server with qn_rpc_server_adopt),
 * false to let this server serve it. Install before listening; NULL: none.
 */
typedef bool (*qn_rpc_handoff_fn)(void *ud, int fd, const struct sockaddr *sa, int salen, bool tls);
void qn_rpc_server_set_handoff(qn_rpc_server *s, qn_rpc_handoff_fn fn, void *ud);
/* On s's loop: serves a socket another server accepted, under s's limits (a
 * server shutting down closes it). Takes fd. */
void qn_rpc_server_adopt(qn_rpc_server *s, int fd, const struct sockaddr *sa, int salen, bool tls);

/* Servers of several loops share one QUEEN_MAX_CONNECTIONS: count (borrowed
 * until s is freed) holds the live connections of all of them. Before listening. */
void qn_rpc_server_share_conn_count(qn_rpc_server *s, _Atomic size_t *count);

/* Servers of several loops share one QUEEN_MAX_RECV_BUFFER_BYTES: count
 * (borrowed until s is freed) holds every loop's unfinished request bytes. */
void qn_rpc_server_share_recv_count(qn_rpc_server *s, _Atomic size_t *count);
/* QUEEN_MAX_STREAMS becomes the limit of every server sharing *count (the
 * process's long-lived streams). Before the server serves. */
void qn_rpc_server_share_stream_count(qn_rpc_server *s, _Atomic uint64_t *count);

/* Servers of n loops split one QUEEN_MAX_SEND_BUFFER_BYTES: each loop's calls
 * hold at most an n-th of it unread (never less than QUEEN_MAX_CONN_SEND_BYTES),
 * so the process holds at most the total. Before listening. */
void qn_rpc_server_split_send_buffer(qn_rpc_server *s, unsigned n);

/* Servers of several loops share one QUEEN_MAX_CONNECTIONS_PER_PEER count:
 * made once (qn_rpc_peers_new, sized for cfg's QUEEN_MAX_CONNECTIONS), shared
 * before listening, freed after every server that shares it. */
struct qn_net_peers;
int qn_rpc_peers_new(const struct qn_config *cfg, struct qn_net_peers **out);
void qn_rpc_peers_free(struct qn_net_peers *t);
void qn_rpc_server_share_peers(qn_rpc_server *s, struct qn_net_peers *t);

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
    uint32_t streams_open;     /* long-lived streams holding the QUEEN_MAX_STREAMS budget */
    uint32_t calls_waiting;    /* calls held for admission (a database slot of their connection) */
    uint64_t status_count[17]; /* calls finished, by gRPC status code */
    uint64_t bytes_in;
    uint64_t bytes_out;
};
void qn_rpc_server_stats(const qn_rpc_server *s, struct qn_rpc_stats *out);
/* *acc += *s, field by field (several loops' servers). */
void qn_rpc_stats_add(struct qn_rpc_stats *acc, const struct qn_rpc_stats *s);

/* Counts every call in the families queen_rpc_requests_total and
 * queen_rpc_duration_seconds of m (borrowed until the server is freed).
 * Returns QN_OK or the registry's error. */
int qn_rpc_server_set_metrics(qn_rpc_server *s, qn_metrics *m);

/* Limits the transport enforces, for services that size their own work. */
size_t qn_rpc_max_send_bytes(const qn_rpc_server *s);

#endif
