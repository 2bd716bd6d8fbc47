/*
 * rpc/ack_apply.h - private to rpc/: the ack engine shared by Ack, Consume's
 * in-band acks and Transact's dead letters.
 */
#ifndef QN_BROKER_ACK_APPLY_H
#define QN_BROKER_ACK_APPLY_H

#include <stdbool.h>
#include <stdint.h>

#include "queen/store.h"
#include "queen/v1/queue.pb-c.h"
#include "transport/call.h"

struct qn_app;
struct qn_ack_op;

/*
 * Applies an AckRequest (validated; borrowed until done runs or the op is
 * cancelled) for call (its principal and tenant: with auth on, every partition
 * is looked up in the caller's tenant and its queue must carry the consume
 * grant; the call must outlive the op, i.e. cancel the op when the call ends).
 * done(ud, code, message, resp) runs exactly once, from a later loop callback:
 * code QN_GRPC_OK with resp (owned by the op, valid during the callback), or an
 * error status with message (PERMISSION_DENIED: nothing was acked).
 * deadline_ms (0 = none) bounds the database calls. Returns QN_OK with *out
 * (may be NULL), QN_EBADREQUEST (no items) or QN_ENOMEM; then done never runs.
 */
int qn_ack_run(struct qn_app *app, qn_call *call, const Queen__V1__AckRequest *req,
               void (*done)(void *ud, enum qn_grpc_code code, const char *message,
                            const Queen__V1__AckResponse *resp),
               void *ud, int64_t deadline_ms, struct qn_ack_op **out);

/* A lease renewal for call: with auth on, every live lease of `lease` must be in
 * the caller's tenant (a lease of another tenant answers as unknown: renewed 0)
 * and on a queue it may consume (else PERMISSION_DENIED, nothing renewed).
 * A renewal whose result was lost is sent again with backoff until it answers
 * or deadline_ms (30 s from now when 0) is near; one that cannot get through
 * answers UNKNOWN. done(ud, code, message, renewed, expires_at_us) runs once
 * from a later loop callback unless cancelled. Returns QN_OK with *out, or an
 * error (done will not run). */
struct qn_renew_op;
int qn_renew_run(struct qn_app *app, qn_call *call, const char *lease, int32_t seconds,
                 int64_t deadline_ms,
                 void (*done)(void *ud, enum qn_grpc_code code, const char *message,
                              int32_t renewed, int64_t expires_at_us),
                 void *ud, struct qn_renew_op **out);
/* Stops a renewal: done will not run. NULL allowed. */
void qn_renew_cancel(struct qn_renew_op *op);

/* Stops an op: done() will not run, its storage calls are cancelled. NULL
 * allowed. */
void qn_ack_cancel(struct qn_ack_op *op);

/* Files the dead letter an ack result handed off (QN_ACKF_DLQ_HANDOFF): decodes
 * the poison frame from the returned segment and calls dlq_head_v1 under
 * `worker`. done(ud, filed) runs once from a later loop callback when this
 * returns QN_OK; j must stay valid until then (cancel j->sreq to abandon). */
struct qn_dlq_job {
    void (*done)(void *ud, bool filed);
    void *ud;
    qn_store_req *sreq;
};
int qn_dlq_file(struct qn_app *app, const uint8_t pid[16], const char *group, const char *worker,
                const struct qn_ack_result *r, const char *error, int64_t deadline,
                struct qn_dlq_job *j);

#endif
