/*
 * transport/http1.h - private to transport/: HTTP/1.1 sessions for the side
 * port (one per connection, driven by net.c through the handler
 * qn__http1_handler() fills), the plain routes, and the gRPC-Web binding of
 * calls (call_binding.h) through http1.c's struct qn_call_ops.
 */
#ifndef QN_BROKER_HTTP1_H
#define QN_BROKER_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"
#include "transport/net.h"
#include "transport/sideport.h"

struct event_base;
struct qn_calls;

struct qn_http1_limits {
    size_t max_head;    /* QUEEN_HTTP_MAX_HEADER_BYTES */
    size_t max_body;    /* a gRPC-Web request body: QUEEN_MAX_RECV_BYTES + 5 */
    int64_t request_ms; /* QUEEN_HTTP_REQUEST_TIMEOUT_MS: head and body within it */
};

/* What every session of one side port shares. */
struct qn_http1;

/* Sessions make their gRPC-Web calls in calls (borrowed until qn__http1_free);
 * metrics may be NULL. Returns QN_OK or QN_ENOMEM. */
int qn__http1_new(struct event_base *base, struct qn_calls *calls,
                  const struct qn_http1_limits *lim, qn_metrics *metrics, struct qn_http1 **out);
/* After every session was closed (qn__net_free). NULL allowed. */
void qn__http1_free(struct qn_http1 *h);

/* See qn_side_route(). */
int qn__http1_route(struct qn_http1 *h, const char *name, const char *path, bool prefix,
                    qn_http_handler fn, void *ud);

/* From now on: responses close their connection, new gRPC-Web calls are
 * refused with UNAVAILABLE. */
void qn__http1_shutdown(struct qn_http1 *h);

/* Fills the protocol half of a net handler (proto and every callback up to
 * close); the owner half is left as it is. */
void qn__http1_handler(struct qn_http1 *h, struct qn_net_handler *out);

#endif
