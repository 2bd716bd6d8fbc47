/*
 * broker.c - the serving process: wires listeners, services and storage to one
 * libevent loop. (Skeleton: the gRPC server lands with the broker issue.)
 */
#include "broker.h"
#include "log.h"
#include "queen/error.h"

int qn_broker_run(const struct qn_config *cfg)
{
    (void)cfg;
    QN_ERROR("serving is not built yet");
    return QN_EINTERNAL;
}
