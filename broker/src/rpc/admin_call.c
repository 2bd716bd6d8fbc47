/*
 * rpc/admin_call.c - the shared state and endings of AdminService RPCs (see
 * admin_call.h).
 *
 * Invariant: a qn_admin_call is owned by its call from qn_admin_new() until
 * exactly one ending (or qn_admin_cancel) frees it; every ending clears the
 * call's data first, so on_cancel never finds freed state.
 */
#include <stdio.h>
#include <stdlib.h>

#include "app.h"
#include "queen/error.h"
#include "rpc/admin_call.h"
#include "rpc/authz.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

struct qn_admin_call *qn_admin_new(qn_call *call, ProtobufCMessage *msg, size_t size)
{
    const char *refusal = qn_svc_refusal(qn_svc_app(call));
    if (refusal != NULL) {
        qn_svc_app(call)->rpcs++;
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, refusal);
        return NULL;
    }
    struct qn_conn_slot *slot = NULL;
    int rc = qn_svc_take_slot(qn_svc_app(call), call, false, &slot);
    struct qn_admin_call *a = rc == QN_OK ? calloc(1, size) : NULL;
    if (a == NULL) {
        qn_conn_budget_give(slot);
        qn_svc_app(call)->rpcs++;
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       rc == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
        return NULL;
    }
    a->slot = slot;
    a->app = qn_svc_app(call);
    a->app->rpcs++;
    a->call = call;
    a->req = msg;
    qn_arena_init(&a->arena);
    qn_call_set_data(call, a);
    return a;
}

static void admin_free(struct qn_admin_call *a)
{
    for (int i = 0; i < 2; i++)
        qn_store_cancel(a->sreq[i]);
    if (a->cleanup)
        a->cleanup(a);
    qn_arena_free(&a->arena);
    qn_conn_budget_give(a->slot);
    if (a->req)
        protobuf_c_message_free_unpacked(a->req, NULL);
    free(a);
}

/* Takes the call from a: nothing is cancelled any more (the callers end the
 * call because their storage calls answered). */
static qn_call *admin_take_call(struct qn_admin_call *a)
{
    qn_call *call = a->call;
    qn_call_set_data(call, NULL);
    a->sreq[0] = a->sreq[1] = NULL;
    return call;
}

void qn_admin_finish(struct qn_admin_call *a, enum qn_grpc_code code, const char *msg)
{
    qn_call_finish(admin_take_call(a), code, msg);
    admin_free(a);
}

void qn_admin_reply(struct qn_admin_call *a, const ProtobufCMessage *resp)
{
    qn_call *call = admin_take_call(a);
    if (qn_call_send(call, resp) == QN_OK)
        qn_call_finish(call, QN_GRPC_OK, NULL);
    else
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       "response larger than the send limit: ask for fewer rows");
    admin_free(a);
}

void qn_admin_store_error(struct qn_admin_call *a, const struct qn_store_status *st)
{
    qn_finish_store_error(admin_take_call(a), st);
    admin_free(a);
}

bool qn_admin_ok(struct qn_admin_call *a, const struct qn_store_status *st)
{
    a->sreq[0] = NULL;
    if (st->code == QN_OK)
        return true;
    qn_admin_store_error(a, st);
    return false;
}

bool qn_admin_sent(struct qn_admin_call *a, int rc)
{
    if (rc == QN_OK)
        return true;
    qn_admin_finish(a, qn_grpc_from_store(rc), qn_strerror(rc));
    return false;
}

bool qn_admin_check_name(struct qn_admin_call *a, const char *s, const char *what, bool allow_empty)
{
    char why[200];
    if (!qn_name_problem(s, what, allow_empty, why, sizeof why))
        return true;
    qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, why);
    return false;
}

struct qn_call_opts qn_admin_opts(const struct qn_admin_call *a)
{
    return qn_authz_opts(a->call, qn_call_deadline_ms(a->call));
}

bool qn_admin_authorize(struct qn_admin_call *a, const char *queue)
{
    char why[400];
    if (qn_authz_check(a->call, QN_SCOPE_ADMIN, queue, why, sizeof why))
        return true;
    qn_admin_finish(a, QN_GRPC_PERMISSION_DENIED, why);
    return false;
}

bool qn_admin_authorize_all(struct qn_admin_call *a, const char *what)
{
    struct qn_authz_names names;
    int reach = qn_authz_names(a->call, QN_SCOPE_ADMIN, &names);
    qn_authz_names_free(&names);
    if (reach == QN_REACH_ALL)
        return true;
    char why[400], reason[300];
    snprintf(reason, sizeof reason, "%s needs an admin grant on every queue (admin:*)", what);
    qn_authz_refuse(a->call, QN_SCOPE_ADMIN, "", reason, why, sizeof why);
    qn_admin_finish(a, QN_GRPC_PERMISSION_DENIED, why);
    return false;
}

int qn_admin_reach(struct qn_admin_call *a, struct qn_authz_names *names)
{
    int reach = qn_authz_names(a->call, QN_SCOPE_ADMIN, names);
    if (reach == QN_REACH_ALL)
        return 1;
    if (reach == QN_REACH_SOME)
        return 0;
    if (reach < 0) {
        qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    char why[400];
    qn_authz_refuse(a->call, QN_SCOPE_ADMIN, "", "no admin grant", why, sizeof why);
    qn_admin_finish(a, QN_GRPC_PERMISSION_DENIED, why);
    return -1;
}

void qn_admin_audit(const struct qn_admin_call *a, const char *queue, const char *what)
{
    qn_authz_audit_admin(a->call, queue, what);
}

void qn_admin_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct qn_admin_call *a = qn_call_data(call);
    if (a != NULL)
        admin_free(a);
}
