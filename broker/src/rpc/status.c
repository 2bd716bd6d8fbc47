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
    default:
        return QN_GRPC_INTERNAL;
    }
}

void qn_finish_store_error(qn_call *call, const struct qn_store_status *st)
{
    enum qn_grpc_code code = qn_grpc_from_store(st->code);
    /* invalid_parameter_value raised by a procedure is the caller's mistake */
    if (st->code == QN_EDB && strcmp(st->sqlstate, "22023") == 0)
        code = QN_GRPC_INVALID_ARGUMENT;
    const char *msg = st->message && *st->message ? st->message : qn_strerror(st->code);
    qn_call_finish(call, code, msg);
}
