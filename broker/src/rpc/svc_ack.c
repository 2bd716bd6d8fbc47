/*
 * rpc/svc_ack.c - QueueService.Ack and RenewLease.
 *
 * Does: validate (validate.h); hand the request to the ack engine
 * (ack_apply.h, which checks the consume grant of every partition's queue when
 * auth is on) and answer with its per-item results; renew a lease through the
 * same engine (qn_renew_run, which sends a renewal whose result was lost again
 * until it answers; one that cannot get through answers UNKNOWN).
 * Does not: apply acks itself; keep anything after the call ends (a cancelled
 * call cancels its storage work).
 *
 * Invariant: the request message lives until the ack op is done or cancelled
 * (the op borrows it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "queen/error.h"
#include "rpc/ack_apply.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

/* ---------------------------------------------------------------- Ack RPC */

struct ack_rpc {
    qn_call *call;
    Queen__V1__AckRequest *req;
    struct qn_ack_op *op;
    struct qn_conn_slot *slot;
};

static void ack_rpc_done(void *ud, enum qn_grpc_code code, const char *message,
                         const Queen__V1__AckResponse *resp)
{
    struct ack_rpc *a = ud;
    qn_call *call = a->call;
    qn_call_set_data(call, NULL);
    if (code == QN_GRPC_OK) {
        if (qn_call_send(call, &resp->base) == QN_OK)
            qn_call_finish(call, QN_GRPC_OK, NULL);
        else
            qn_call_finish(call, QN_GRPC_INTERNAL, "response larger than the send limit");
    } else {
        qn_call_finish(call, code, message);
    }
    qn_conn_budget_give(a->slot);
    protobuf_c_message_free_unpacked(&a->req->base, NULL);
    free(a);
}

void qn_svc_ack(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__AckRequest *req = (Queen__V1__AckRequest *)msg;
    char why[300];
    app->rpcs++;
    enum qn_grpc_code bad = QN_GRPC_OK;
    if (!qn_ack_request_ok(app->cfg, req, why, sizeof why))
        bad = QN_GRPC_INVALID_ARGUMENT;
    if (bad == QN_GRPC_OK && qn_svc_refusal(app) != NULL) {
        snprintf(why, sizeof why, "%s", qn_svc_refusal(app));
        bad = QN_GRPC_UNAVAILABLE;
    }
    if (bad != QN_GRPC_OK) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, bad, why);
        return;
    }
    struct ack_rpc *a = calloc(1, sizeof *a);
    if (a == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    a->call = call;
    a->req = req;
    int rc = qn_svc_take_slot(app, call, false, &a->slot);
    if (rc != QN_OK) {
        protobuf_c_message_free_unpacked(msg, NULL);
        free(a);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       rc == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
        return;
    }
    qn_call_set_data(call, a);
    rc = qn_ack_run(app, call, req, ack_rpc_done, a, qn_call_deadline_ms(call), &a->op);
    if (rc != QN_OK) {
        qn_call_set_data(call, NULL);
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_conn_budget_give(a->slot);
        free(a);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
    }
}

void qn_svc_ack_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct ack_rpc *a = qn_call_data(call);
    if (a == NULL)
        return;
    qn_ack_cancel(a->op);
    qn_conn_budget_give(a->slot);
    protobuf_c_message_free_unpacked(&a->req->base, NULL);
    free(a);
}

/* ---------------------------------------------------------------- RenewLease */

struct renew_rpc {
    qn_call *call;
    struct qn_renew_op *op;
    struct qn_conn_slot *slot;
};

static void renew_free(struct renew_rpc *r)
{
    qn_renew_cancel(r->op);
    qn_conn_budget_give(r->slot);
    free(r);
}

static void renew_done(void *ud, enum qn_grpc_code code, const char *message, int32_t renewed,
                       int64_t expires_at_us)
{
    struct renew_rpc *r = ud;
    r->op = NULL; /* finished: freed by the engine */
    qn_call *call = r->call;
    qn_call_set_data(call, NULL);
    renew_free(r);
    if (code != QN_GRPC_OK) {
        qn_call_finish(call, code, message);
        return;
    }
    Queen__V1__RenewLeaseResponse resp = QUEEN__V1__RENEW_LEASE_RESPONSE__INIT;
    resp.renewed = renewed > 0;
    resp.partitions = renewed > 0 ? (uint32_t)renewed : 0;
    resp.expires_at_us = renewed > 0 ? expires_at_us : 0;
    if (qn_call_send(call, &resp.base) == QN_OK)
        qn_call_finish(call, QN_GRPC_OK, NULL);
    else
        qn_call_finish(call, QN_GRPC_INTERNAL, "cannot send the response");
}

void qn_svc_renew(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__RenewLeaseRequest *req = (Queen__V1__RenewLeaseRequest *)msg;
    app->rpcs++;
    char why[300] = "";
    if (!qn_lease_problem(req->lease_id, "lease_id", false, why, sizeof why) &&
        req->seconds > 86400)
        snprintf(why, sizeof why, "seconds %u is over the limit of 86400", req->seconds);
    if (why[0]) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    const char *refusal = qn_svc_refusal(app);
    if (refusal != NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, refusal);
        return;
    }
    struct renew_rpc *r = calloc(1, sizeof *r);
    if (r == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    r->call = call;
    int src = qn_svc_take_slot(app, call, false, &r->slot);
    if (src != QN_OK) {
        protobuf_c_message_free_unpacked(msg, NULL);
        free(r);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       src == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
        return;
    }
    qn_call_set_data(call, r);
    /* the engine copies the lease: the request can go now */
    int rc = qn_renew_run(app, call, req->lease_id, (int32_t)(req->seconds ? req->seconds : 60),
                          qn_call_deadline_ms(call), renew_done, r, &r->op);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc != QN_OK) {
        qn_call_set_data(call, NULL);
        renew_free(r);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
    }
}

void qn_svc_renew_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct renew_rpc *r = qn_call_data(call);
    if (r != NULL)
        renew_free(r);
}
