/*
 * rpc/status.h - private to broker/: gRPC statuses for storage outcomes.
 */
#ifndef QN_BROKER_STATUS_H
#define QN_BROKER_STATUS_H

#include "queen/store.h"
#include "transport/call.h"

/* gRPC status for a storage outcome (a QN_E* code). */
enum qn_grpc_code qn_grpc_from_store(int code);

/* Finishes call with the status and message of a failed storage call (an
 * invalid_parameter_value raised by a procedure is INVALID_ARGUMENT: the
 * caller's mistake). */
void qn_finish_store_error(qn_call *call, const struct qn_store_status *st);

#endif
