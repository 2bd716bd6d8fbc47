/*
 * rpc/methods.c - the method tables of queen.v1.QueueService and AdminService.
 *
 * Does: copy the two static tables into one array owned by the app, set every
 * entry's data to the app, register it with the app's server.
 * Does not: hold any state of its own; the tables below are constant templates.
 *
 * Invariant: every registered queen.v1 method has data == the app it serves, so
 * qn_svc_app(call) is that app for the call's whole life. Every unary one is
 * marked `admission`: it takes a database slot of its connection (svc.h,
 * qn_svc_take_slot), so the transport holds it while the connection has none.
 */
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "queen/v1/admin.pb-c.h"
#include "queen/v1/queue.pb-c.h"
#include "rpc/admin_call.h"
#include "rpc/methods.h"
#include "rpc/svc.h"
#include "transport/server.h"

#define Q(p, Type, cs, ss, on_msg, on_half, on_cxl)                                                \
    {                                                                                              \
        .path = "/queen.v1.QueueService/" p, .request = &queen__v1__##Type##__descriptor,          \
        .client_streaming = cs, .server_streaming = ss, .on_message = on_msg,                      \
        .on_half_close = on_half, .on_cancel = on_cxl, .admission = !(cs) && !(ss)                 \
    }

#define ADMIN(p, Type, fn)                                                                         \
    {                                                                                              \
        .path = "/queen.v1.AdminService/" p, .request = &queen__v1__##Type##__descriptor,          \
        .on_message = fn, .on_cancel = qn_admin_cancel, .admission = true                          \
    }

static const struct qn_method templates[] = {
    Q("Push", push_request, false, false, qn_svc_push, NULL, qn_svc_push_cancel),
    Q("Pop", pop_request, false, false, qn_svc_pop, NULL, qn_svc_pop_cancel),
    Q("Consume", consume_request, true, true, qn_svc_consume, qn_svc_consume_half_close,
      qn_svc_consume_cancel),
    Q("Ack", ack_request, false, false, qn_svc_ack, NULL, qn_svc_ack_cancel),
    Q("RenewLease", renew_lease_request, false, false, qn_svc_renew, NULL, qn_svc_renew_cancel),
    Q("Transact", transact_request, false, false, qn_svc_transact, NULL, qn_svc_transact_cancel),
    Q("Fetch", fetch_request, false, false, qn_svc_fetch, NULL, qn_svc_fetch_cancel),
    Q("PushSegments", push_segments_request, false, false, qn_svc_push_segments, NULL,
      qn_svc_push_segments_cancel),
    ADMIN("ConfigureQueue", configure_queue_request, qn_svc_configure_queue),
    ADMIN("GetQueue", get_queue_request, qn_svc_get_queue),
    ADMIN("ListQueues", list_queues_request, qn_svc_list_queues),
    ADMIN("DeleteQueue", delete_queue_request, qn_svc_delete_queue),
    ADMIN("ListConsumerGroups", list_consumer_groups_request, qn_svc_list_groups),
    ADMIN("SeekConsumerGroup", seek_consumer_group_request, qn_svc_seek_group),
    ADMIN("DeleteConsumerGroup", delete_consumer_group_request, qn_svc_delete_group),
    ADMIN("ListDeadLetters", list_dead_letters_request, qn_svc_list_dlq),
    ADMIN("DeleteDeadLetter", delete_dead_letter_request, qn_svc_delete_dlq),
    ADMIN("ReplayDeadLetter", replay_dead_letter_request, qn_svc_replay_dlq),
    ADMIN("GetStats", get_stats_request, qn_svc_get_stats),
};

#define NMETHODS (sizeof templates / sizeof templates[0])

int qn_rpc_methods_register(struct qn_app *app)
{
    struct qn_method *m = malloc(sizeof templates);
    if (m == NULL)
        return QN_ENOMEM;
    memcpy(m, templates, sizeof templates);
    for (size_t i = 0; i < NMETHODS; i++)
        m[i].data = app;
    int rc = qn_rpc_register(app->rpc, m, NMETHODS);
    if (rc != QN_OK) {
        free(m);
        return rc;
    }
    app->methods = m;
    return QN_OK;
}
