/*
 * services.h - private to broker/: the queen.v1 services and the pieces they
 * share. Each svc_*.c file implements some RPCs; qn_services_register() puts all
 * of them in the server.
 */
#ifndef QN_BROKER_SERVICES_H
#define QN_BROKER_SERVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/store.h"

#include "queen/v1/queue.pb-c.h"
#include "engine/fusion.h"
#include "transport/call.h"

struct qn_app;

/* Registers QueueService and AdminService methods with app->rpc. */
int qn_services_register(struct qn_app *app);
/* Stops wake-up notifications (before the store and waiters are freed). */
void qn_services_shutdown(struct qn_app *app);

/* One method entry per RPC, defined by the svc_*.c files (ud is the app). */
void qn_svc_push(qn_call *call, ProtobufCMessage *msg);
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
void qn_svc_push_cancel(qn_call *call, int reason);

/* The app the services run in (set once by qn_services_register). */
struct qn_app *qn_svc_app(void);

/* Messages committed to (queue, partition) outside fusion (Transact, replayed
 * dead letters): wakes this broker's waiters and tells other brokers, as a
 * fusion commit does. */
void qn_services_committed(struct qn_app *app, const char *queue, const char *partition);

/* ---- shared by Ack, Consume and Transact ---- */

struct qn_ack_op;
/*
 * Applies an AckRequest (borrowed until done runs). done(ud, code, message, resp)
 * runs exactly once, from a later loop callback: code QN_GRPC_OK with resp (owned
 * by the op, valid during the callback), or an error status with message.
 */
int qn_ack_run(struct qn_app *app, const Queen__V1__AckRequest *req,
               void (*done)(void *ud, enum qn_grpc_code code, const char *message,
                            const Queen__V1__AckResponse *resp),
               void *ud, int64_t deadline_ms, struct qn_ack_op **out);
/* Stops an op: done() will not run. NULL allowed. */
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

/* Checks one PushItem (prefix names it in the message, e.g. "items[3]"); writes a
 * message and returns false when it is bad. */
struct qn_config;
bool qn_push_item_ok(const struct qn_config *cfg, const Queen__V1__PushItem *it,
                     const char *prefix, char *buf, size_t cap);

/* Validates one AckItem: writes a message into buf and returns QN_EBADREQUEST
 * when bad, QN_OK when good. */
int qn_ack_item_check(const Queen__V1__AckItem *it, size_t i, char *buf, size_t cap);

/* Validates a whole AckRequest (item count, group name, every item) as the Ack
 * RPC does, for Ack and Consume's in-band acks; false with a message naming
 * the field. */
bool qn_ack_request_ok(const struct qn_config *cfg, const Queen__V1__AckRequest *req, char *why,
                       size_t cap);

#endif
