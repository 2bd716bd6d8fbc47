/*
 * http_routes.h - private to broker/: what the serving process answers on the
 * HTTP side port besides gRPC-Web: /metrics, /healthz, /readyz and the web
 * console's files (console.h), and the process-wide metrics (connections,
 * calls, readiness) that /metrics adds to the modules' own.
 */
#ifndef QN_BROKER_HTTP_ROUTES_H
#define QN_BROKER_HTTP_ROUTES_H

#include <stdbool.h>

#include "obs/metrics.h"
#include "transport/health.h"
#include "transport/server.h"
#include "transport/sideport.h"

struct qn_http_routes;

/*
 * Registers the routes on side (console: also the console's files at /) and
 * the process collector on m. Borrows side, m, rpc and health until
 * qn_http_routes_free(). Returns QN_OK, QN_ENOMEM or a registry error.
 */
int qn_http_routes_new(qn_side *side, qn_metrics *m, qn_rpc_server *rpc, qn_health *health,
                       bool console, struct qn_http_routes **out);

/* Worker 0 serves the side port: with several loops the connection, call
 * and byte series add the other loops' published counters (loops.h). */
struct qn_loops;
void qn_http_routes_set_loops(struct qn_http_routes *r, struct qn_loops *loops);

/* SIGTERM: /readyz answers 503 from now on. */
void qn_http_routes_shutdown(struct qn_http_routes *r);

/* Removes the collector and frees. NULL allowed. */
void qn_http_routes_free(struct qn_http_routes *r);

#endif
