/*
 * transport/health.h - private to broker/: the grpc.health.v1.Health service (Check and
 * Watch) and the serving state it reports.
 *
 * The state is a small table of service names ("" is the broker as a whole), each
 * SERVING or NOT_SERVING, set by the broker (e.g. from the database state). A
 * name never set is unknown: Check answers NOT_FOUND, Watch sends SERVICE_UNKNOWN
 * and keeps watching (the name may become known later).
 */
#ifndef QN_BROKER_HEALTH_H
#define QN_BROKER_HEALTH_H

#include <stdbool.h>

#include "transport/call.h"

typedef struct qn_health qn_health;

/* Most names the table holds. */
#define QN_HEALTH_MAX_SERVICES 64
/* Longest service name accepted, in bytes. */
#define QN_HEALTH_MAX_NAME 256

/*
 * Makes the service and registers /grpc.health.v1.Health/Check and /Watch with s.
 * The table starts with "" NOT_SERVING. h must outlive s (free s first).
 * Returns QN_OK, QN_ENOMEM or the registration error.
 */
int qn_health_new(qn_rpc_server *s, qn_health **out);

/*
 * Sets the state of `service` (NULL or "" for the whole broker), adding the name
 * when new; watchers of that name get the new state. Copies service. Returns
 * QN_OK, QN_ELIMIT (table full, or name longer than QN_HEALTH_MAX_NAME) or
 * QN_ENOMEM.
 */
int qn_health_set_serving(qn_health *h, const char *service, bool serving);

/* Sets every known name at once (shutdown: NOT_SERVING). */
void qn_health_set_all(qn_health *h, bool serving);

/* 1 SERVING, 0 NOT_SERVING, -1 unknown name. */
int qn_health_get(const qn_health *h, const char *service);

/* Open Watch streams (tests, stats). */
size_t qn_health_watchers(const qn_health *h);

/* NULL allowed. Call after qn_rpc_server_free(). */
void qn_health_free(qn_health *h);

#endif
