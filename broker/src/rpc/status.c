/*
 * rpc/status.c - storage outcomes as gRPC statuses (see status.h), mapped at
 * this one boundary between storage's error codes and the wire's.
 */
#include <string.h>

#include "queen/error.h"
#include "rpc/status.h"

enum qn_grpc_code qn_grpc_from_store(int code)
{
    switch (code) {
    case QN_OK:
        return QN_GRPC_OK;
    case QN_EUNAVAILABLE:
    case QN_ESHUTDOWN:
        return QN_GRPC_UNAVAILABLE;
    case QN_ETIMEOUT:
    case QN_EDEADLINE:
        return QN_GRPC_DEADLINE_EXCEEDED;
    case QN_ECONFLICT:
    case QN_EDUPLICATE:
        return QN_GRPC_ABORTED;
    case QN_ENOTFOUND:
        return QN_GRPC_NOT_FOUND;
    case QN_EINVAL:
    case QN_EBADREQUEST:
        return QN_GRPC_INVALID_ARGUMENT;
    case QN_EBUSY:
    case QN_ELIMIT:
        return QN_GRPC_RESOURCE_EXHAUSTED;
    case QN_ECANCELLED:
        return QN_GRPC_CANCELLED;
    case QN_EINDOUBT:
        /* a write was sent and its result never came: it may have committed */
        return QN_GRPC_UNKNOWN;
    default:
        return QN_GRPC_INTERNAL;
    }
}

/* SQLSTATEs a procedure raises on purpose, and what they mean to a client. */
static const struct {
    const char *sqlstate;
    enum qn_grpc_code code;
} sqlstates[] = {
    {"22023", QN_GRPC_INVALID_ARGUMENT},    /* invalid_parameter_value: the caller's mistake */
    {"55000", QN_GRPC_FAILED_PRECONDITION}, /* object_not_in_prerequisite_state: e.g. a group
                                               Queen MQ consumes by conflation */
};

enum qn_grpc_code qn_grpc_from_status(const struct qn_store_status *st)
{
    if (st->code == QN_EDB && st->sqlstate != NULL)
        for (size_t i = 0; i < sizeof sqlstates / sizeof sqlstates[0]; i++)
            if (strcmp(st->sqlstate, sqlstates[i].sqlstate) == 0)
                return sqlstates[i].code;
    return qn_grpc_from_store(st->code);
}

const char *qn_status_message(const struct qn_store_status *st)
{
    if (st->code == QN_EINDOUBT)
        return QN_MSG_OUTCOME_UNKNOWN;
    if (st->code == QN_EUNAVAILABLE)
        return QN_MSG_NOTHING_WRITTEN;
    return st->message && *st->message ? st->message : qn_strerror(st->code);
}

void qn_finish_store_error(qn_call *call, const struct qn_store_status *st)
{
    qn_call_finish(call, qn_grpc_from_status(st), qn_status_message(st));
}
