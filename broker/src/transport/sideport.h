/*
 * transport/sideport.h - private to broker/: the HTTP side port (QUEEN_HTTP_PORT),
 * HTTP/1.1 on the broker's loop: plain routes the process registers (metrics,
 * health, the web console) and gRPC-Web calls of the gRPC server's method
 * table.
 *
 * Made of transport/net.c (a second listener and its connections, with their
 * own cap and idle time) and http1.c (the HTTP/1.1 sessions, the routes, and
 * the gRPC-Web binding of calls, a sibling of h2.c over the same call layer:
 * same method table, limits, deadlines, cancellation and status counts).
 * Threading: the loop thread that owns the gRPC server, no locks.
 */
#ifndef QN_BROKER_SIDEPORT_H
#define QN_BROKER_SIDEPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"
#include "transport/server.h"

struct event_base;
struct evbuffer;
struct qn_config;

typedef struct qn_side qn_side;

/* A GET or HEAD request to a plain route. Strings borrowed for the handler's
 * call. */
struct qn_http_request {
    const char *method; /* "GET" or "HEAD" */
    const char *path;   /* the target up to '?', as sent (no percent-decoding) */
    const char *query;  /* after '?', "" when none */
    bool head;          /* HEAD: the body is computed for its length, not sent */
    /* request header lookup (name lower-case); NULL when absent */
    const char *(*header)(const struct qn_http_request *req, const char *name);
    const void *impl;
};

#define QN_HTTP_MAX_EXTRA_HEADERS 1024

/* What a handler answers. The side port fills status 200, no content type and
 * an empty body before calling it. */
struct qn_http_response {
    int status;
    char content_type[128];                /* "" = none */
    char extra[QN_HTTP_MAX_EXTRA_HEADERS]; /* more header lines, "name: value\r\n" each */
    size_t extra_len;
    struct evbuffer *body; /* the handler appends (copied or referenced) */
};

/* Adds "name: value\r\n" to resp->extra. Returns QN_OK, or QN_ELIMIT when it
 * does not fit (the header is then left out), or QN_EINVAL for a CR or LF. */
int qn_http_add_header(struct qn_http_response *resp, const char *name, const char *value);

/* A plain route's handler: runs on the loop, answers at once (no waiting). */
typedef void (*qn_http_handler)(void *ud, const struct qn_http_request *req,
                                struct qn_http_response *resp);

/*
 * Makes the side port on base with cfg's QUEEN_HTTP_* settings (cfg borrowed
 * for the side port's life); gRPC-Web calls go to rpc's calls (rpc must outlive
 * the side port: free the side port first). metrics may be NULL. Returns QN_OK,
 * QN_ENOMEM or QN_EINVAL (logged).
 */
int qn_side_new(struct event_base *base, const struct qn_config *cfg, qn_rpc_server *rpc,
                qn_metrics *metrics, qn_side **out);

/*
 * Routes GET and HEAD requests for path (exactly, or every path starting with
 * it when prefix) to h. name labels the route in queen_http_requests_total
 * (copied). Routes match in the order added. Returns QN_OK, QN_EINVAL (path
 * not starting with '/') or QN_ENOMEM.
 */
int qn_side_route(qn_side *s, const char *name, const char *path, bool prefix, qn_http_handler h,
                  void *ud);

/* Binds QUEEN_HTTP_PORT (0: any free port) on QUEEN_HTTP_BIND_ADDR, or does
 * nothing when the port is -1. Returns QN_OK or QN_EIO (logged). */
int qn_side_listen(qn_side *s);

/* The bound port, -1 when not listening. */
int qn_side_port(const qn_side *s);

/* SIGTERM: every connection closes after its current response; new gRPC-Web
 * requests are refused with UNAVAILABLE. Plain routes keep answering (a
 * readiness probe sees 503 from its handler). */
void qn_side_shutdown(qn_side *s);

/*
 * After the gRPC server drained: stop accepting, let every connection finish
 * its current response, end the calls still running with UNAVAILABLE shortly
 * before timeout_ms, close what is left at timeout_ms, then call done(ud) once,
 * on the loop.
 */
void qn_side_drain(qn_side *s, int64_t timeout_ms, void (*done)(void *ud), void *ud);

/* Closes every connection (their calls are cancelled) and frees. Call before
 * freeing the gRPC server. NULL allowed. */
void qn_side_free(qn_side *s);

struct qn_side_stats {
    uint64_t connections_accepted;
    uint32_t connections_open;
    uint64_t bytes_in;
    uint64_t bytes_out;
};
void qn_side_stats(const qn_side *s, struct qn_side_stats *out);

#endif
