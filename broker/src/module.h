/*
 * module.h - private to broker/: the contract between the serving process
 * (broker.c) and the parts of the broker with a lifetime (modules.c for the
 * product; test binaries bring their own).
 */
#ifndef QN_BROKER_MODULE_H
#define QN_BROKER_MODULE_H

#include "config.h"
#include "obs/metrics.h"
#include "transport/call.h"
#include "transport/health.h"

struct event_base;
struct qn_loops;
struct qn_security;

/* What a module gets at start: borrowed for the whole run. */
struct qn_broker_ctx {
    struct event_base *base;
    const struct qn_config *cfg;
    qn_rpc_server *server;
    qn_health *health; /* "" starts SERVING; a module may set it (e.g. storage down) */
    /* the process's metrics registry (the side port's /metrics) */
    qn_metrics *metrics;
    struct qn_security *security; /* credentials and keys (security.h) */
    /* the loop this module instance runs on (QUEEN_WORKERS): worker 0 is the main
     * thread with the side port, the signals and the process-wide duties (the
     * maintenance loop); loops reaches the others (loops.h) */
    unsigned worker;
    unsigned nworkers;
    struct qn_loops *loops;
    /* every loop's database store is of this family: a NOTIFY this process
     * sent wakes none of its loops (they were woken at the commit) */
    struct qn_store_family *store_family;
    /* the leases every loop's consumers hold (engine/held.h) */
    struct qn_held *held;
    /* the process's pool for CPU-heavy work (engine/offload.h); NULL: none */
    struct qn_offload *offload;
};

/*
 * A part of the broker with a lifetime. Modules start in order after the server
 * is made (before it listens) and stop in reverse order after the server was
 * freed. With several workers every worker starts its own instance of every
 * module, on its own thread (ctx->worker), worker 0 first.
 */
struct qn_broker_module {
    const char *name; /* NULL ends a module array */
    /* Registers methods, opens resources; *state is the module's. Returns QN_OK or
     * an error (logged by the module), which aborts the start. */
    int (*start)(struct qn_broker_ctx *ctx, void **state);
    /* SIGTERM/SIGINT, before the server drains: stop taking new work, wake parked
     * requests. May be NULL. */
    void (*shutdown)(void *state);
    /* After the loop ended and the server was freed (every call is gone). May be
     * NULL. */
    void (*stop)(void *state);
};

#endif
