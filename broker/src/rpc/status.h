/*
 * rpc/status.h - private to broker/: gRPC statuses for storage outcomes.
 */
#ifndef QN_BROKER_STATUS_H
#define QN_BROKER_STATUS_H

#include "queen/store.h"
#include "transport/call.h"

/* What a client reads with the two statuses whose meaning is about what was
 * written: UNKNOWN (a write was sent and its result never came back) and
 * UNAVAILABLE (nothing was written). */
#define QN_MSG_OUTCOME_UNKNOWN                                                                     \
    "outcome unknown: the database connection was lost after the write was sent and it could "     \
    "not be resolved in time; it may or may not have been applied"
#define QN_MSG_NOTHING_WRITTEN "database unavailable: nothing was written, retry"

/* gRPC status for a storage outcome (a QN_E* code): QN_EUNAVAILABLE (nothing
 * was written) is UNAVAILABLE, QN_EINDOUBT (it may have committed) UNKNOWN. */
enum qn_grpc_code qn_grpc_from_store(int code);

/* Same, for a full status: a procedure's deliberate SQLSTATE refines QN_EDB
 * (22023 invalid_parameter_value is INVALID_ARGUMENT, the caller's mistake;
 * 55000 object_not_in_prerequisite_state is FAILED_PRECONDITION, e.g. popping a
 * group Queen MQ consumes by conflation). */
enum qn_grpc_code qn_grpc_from_status(const struct qn_store_status *st);

/* The message for a client: the procedure's own, or one saying what was written
 * (QN_MSG_OUTCOME_UNKNOWN, QN_MSG_NOTHING_WRITTEN). Borrowed from st or static. */
const char *qn_status_message(const struct qn_store_status *st);

/* Finishes call with the status and message of a failed storage call. */
void qn_finish_store_error(qn_call *call, const struct qn_store_status *st);

#endif
