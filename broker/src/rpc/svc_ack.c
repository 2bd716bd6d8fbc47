/*
 * rpc/svc_ack.c - QueueService.Ack and RenewLease.
 *
 * Does: validate (validate.h); hand the request to the ack engine
 * (ack_apply.h) and answer with its per-item results; renew a lease with one
 * renew_lease_v1 call.
 * Does not: apply acks itself; keep anything after the call ends (a cancelled
 * call cancels its storage work).
 *
 * Invariant: the request message lives until the ack op is done or cancelled
 * (the op borrows it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (bad == QN_GRPC_OK && app->shutting_down) {
        snprintf(why, sizeof why, "the broker is shutting down");
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
    qn_call_set_data(call, a);
    int rc = qn_ack_run(app, req, ack_rpc_done, a, qn_call_deadline_ms(call), &a->op);
    if (rc != QN_OK) {
        qn_call_set_data(call, NULL);
        protobuf_c_message_free_unpacked(msg, NULL);
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
    protobuf_c_message_free_unpacked(&a->req->base, NULL);
    free(a);
}

/* ---------------------------------------------------------------- RenewLease */

struct renew_rpc {
    qn_call *call;
    qn_store_req *sreq;
};

static void renew_done(void *ud, const struct qn_store_status *st, int32_t renewed,
                       int64_t expires_at_us)
{
    struct renew_rpc *r = ud;
    qn_call *call = r->call;
    qn_call_set_data(call, NULL);
    free(r);
    if (st->code != QN_OK) {
        qn_finish_store_error(call, st);
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
    char why[200];
    if (req->lease_id == NULL || *req->lease_id == '\0') {
        snprintf(why, sizeof why, "lease_id is required");
    } else if (strlen(req->lease_id) > 255) {
        snprintf(why, sizeof why, "lease_id is longer than 255 bytes");
    } else if (req->seconds > 86400) {
        snprintf(why, sizeof why, "seconds %u is over the limit of 86400", req->seconds);
    } else {
        why[0] = '\0';
    }
    if (why[0]) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    struct renew_rpc *r = calloc(1, sizeof *r);
    if (r == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    r->call = call;
    qn_call_set_data(call, r);
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    int rc =
        qn_store_renew_lease(app->store, req->lease_id, (int32_t)(req->seconds ? req->seconds : 60),
                             &opts, renew_done, r, &r->sreq);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc != QN_OK) {
        qn_call_set_data(call, NULL);
        free(r);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
    }
}

void qn_svc_renew_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct renew_rpc *r = qn_call_data(call);
    if (r == NULL)
        return;
    qn_store_cancel(r->sreq);
    free(r);
}
