/*
 * rpc/svc.h - private to rpc/: the entry points of the queen.v1 handlers, which
 * rpc/methods.c puts in the method tables, and how a handler reaches its state.
 *
 * Every handler runs on the loop that owns the call. Its state is the struct
 * qn_app the method was registered with (qn_svc_app()): no handler keeps or
 * reads anything at file scope.
 */
#ifndef QN_BROKER_SVC_H
#define QN_BROKER_SVC_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "app.h"
#include "engine/conn_budget.h"
#include "transport/call.h"

/* Sorts n item indices with cmp (qsort_r's), unless they are in order already:
 * a request's items usually are (one partition, one lease, request order),
 * and checking costs n - 1 comparisons where the sort took n log n, each of
 * them a strcmp of ids that are equal up to their end. */
static inline void qn_svc_sort_idx(uint32_t *idx, size_t n,
                                   int (*cmp)(const void *, const void *, void *), void *ud)
{
    for (size_t i = 1; i < n; i++) {
        if (cmp(&idx[i - 1], &idx[i], ud) > 0) {
            qsort_r(idx, n, sizeof *idx, cmp, ud);
            return;
        }
    }
}

/* The app of the call's method (rpc/methods.c registers every method with data =
 * its app). */
static inline struct qn_app *qn_svc_app(const qn_call *call)
{
    return qn_call_method(call)->data;
}

/* Why the app takes no new call now (answered UNAVAILABLE: nothing was written),
 * or NULL when it does: shutting down, or the schema not applied yet (a broker
 * started before its database). */
static inline const char *qn_svc_refusal(const struct qn_app *app)
{
    if (app->shutting_down)
        return "the broker is shutting down";
    if (!app->schema_ready)
        return "the database is not ready: the broker is waiting for it to apply its schema; "
               "nothing was written, retry";
    return NULL;
}

#define QN_MSG_CONN_DB_BUSY                                                                        \
    "too many calls of this connection are waiting on the database "                               \
    "(QUEEN_MAX_CONN_DB_CALLS): wait for answers before sending more"

/* Takes a database slot of the call's connection while the call waits on the
 * database (engine/conn_budget.h). force: past the limit too (a call admitted
 * before, asking again). QN_OK, QN_EBUSY (answer RESOURCE_EXHAUSTED with
 * QN_MSG_CONN_DB_BUSY) or QN_ENOMEM. */
static inline int qn_svc_take_slot(struct qn_app *app, const qn_call *call, bool force,
                                   struct qn_conn_slot **slot)
{
    return qn_conn_budget_take(app->budget, call ? qn_call_conn_key(call) : NULL, force, slot);
}

/* QueueService (svc_push.c, svc_pop.c, svc_consume.c, svc_ack.c, svc_txn.c,
 * svc_fetch.c) */
void qn_svc_push(qn_call *call, ProtobufCMessage *msg);
void qn_svc_push_cancel(qn_call *call, int reason);
void qn_svc_pop(qn_call *call, ProtobufCMessage *msg);
void qn_svc_pop_cancel(qn_call *call, int reason);
void qn_svc_consume(qn_call *call, ProtobufCMessage *msg);
void qn_svc_consume_half_close(qn_call *call);
void qn_svc_consume_cancel(qn_call *call, int reason);
void qn_svc_ack(qn_call *call, ProtobufCMessage *msg);
void qn_svc_ack_cancel(qn_call *call, int reason);
void qn_svc_renew(qn_call *call, ProtobufCMessage *msg);
void qn_svc_renew_cancel(qn_call *call, int reason);
void qn_svc_transact(qn_call *call, ProtobufCMessage *msg);
void qn_svc_transact_cancel(qn_call *call, int reason);
void qn_svc_fetch(qn_call *call, ProtobufCMessage *msg);
void qn_svc_fetch_cancel(qn_call *call, int reason);
void qn_svc_push_segments(qn_call *call, ProtobufCMessage *msg); /* svc_segments.c */
void qn_svc_push_segments_cancel(qn_call *call, int reason);

/* AdminService (svc_queues.c, svc_groups.c, svc_dlq.c, svc_stats.c); every
 * admin method cancels with qn_admin_cancel (admin_call.h). */
void qn_svc_configure_queue(qn_call *call, ProtobufCMessage *msg);
void qn_svc_get_queue(qn_call *call, ProtobufCMessage *msg);
void qn_svc_list_queues(qn_call *call, ProtobufCMessage *msg);
void qn_svc_delete_queue(qn_call *call, ProtobufCMessage *msg);
void qn_svc_list_groups(qn_call *call, ProtobufCMessage *msg);
void qn_svc_seek_group(qn_call *call, ProtobufCMessage *msg);
void qn_svc_delete_group(qn_call *call, ProtobufCMessage *msg);
void qn_svc_list_dlq(qn_call *call, ProtobufCMessage *msg);
void qn_svc_delete_dlq(qn_call *call, ProtobufCMessage *msg);
void qn_svc_replay_dlq(qn_call *call, ProtobufCMessage *msg);
void qn_svc_get_stats(qn_call *call, ProtobufCMessage *msg);

#endif
