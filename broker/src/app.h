/*
 * app.h - private to broker/: the state the queue services of one event loop
 * share (struct qn_app). The queue module (modules.c) builds it; every
 * queen.v1 method is registered with data = the app (rpc/methods.c), so a
 * handler reaches it through its call (qn_svc_app() in rpc/svc.h) and a second
 * loop could own a second app. Owned by the loop thread: no locks.
 *
 * Header only: nothing here calls back into the module that builds it.
 */
#ifndef QN_BROKER_APP_H
#define QN_BROKER_APP_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/maint_loop.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/store.h"
#include "transport/call.h"

struct event_base;
struct qn_config;
struct qn_conn_budget;
struct qn_cfusion;
struct qn_decoder;
struct qn_crypt;
struct qn_dedup;
struct qn_fusion;
struct qn_loops;
struct qn_method;
struct qn_notifier;
struct qn_offload;
struct qn_pop_gates;
struct qn_pop_release;
struct qn_security;
struct qn_waiters;

struct qn_app {
    struct event_base *base;
    const struct qn_config *cfg;
    qn_store *store;
    qn_rpc_server *rpc;
    struct qn_security *security;    /* credentials and the key ring (security.h); borrowed */
    qn_zctx *zctx;                   /* compression/decompression for the loop thread */
    struct qn_uuid7_gen ids;         /* message ids and lease ids */
    struct qn_fusion *fusion;        /* push batching */
    struct qn_waiters *waiters;      /* parked pops and consume streams */
    struct qn_notifier *notifier;    /* wake-ups from commits, ours and other brokers' */
    struct qn_cfusion *cfusion;      /* consume fusion: wake-ups from released leases */
    struct qn_pop_gates *gates;      /* queues' min_pop_wait_time */
    struct qn_crypt *crypt;          /* queues' encryption flags, sealing and opening payloads */
    struct qn_dedup *dedup;          /* NULL when QUEEN_DEDUP_CACHE is off */
    struct qn_conn_budget *budget;   /* database calls per client connection */
    qn_maint *maint;                 /* the process's maintenance loop; NULL when none */
    struct qn_method *methods;       /* the registered method table (rpc/methods.c) */
    struct qn_pop_release *releases; /* lease releases retried in the background
                                        (rpc/svc_batch.c) */
    struct qn_loops *loops;          /* the process's loops (loops.h); NULL in unit tests */
    struct qn_offload *offload;      /* the process's offload pool (engine/offload.h), borrowed;
                                        NULL: none */
    struct qn_decoder *decoder;      /* large batches decompressed off the loop
                                        (engine/decode.h); NULL without a pool */
    unsigned worker;                 /* this app's loop */
    int64_t started_ms;              /* qn_store_now_ms() at start */
    bool shutting_down;
    bool schema_ready; /* the schema was applied at start: the services may use the store */
    /* counters for GetStats */
    uint64_t pushed;    /* messages committed outside fusion (Transact, replays);
                           fusion counts its own (qn_fusion_stats.committed) */
    uint64_t delivered; /* messages handed to consumers */
    uint64_t rpcs;      /* RPCs started */
    /* pops over every partition of a queue (scans), and new pops that waited
     * for a hint instead (svc_pop.c) */
    uint64_t pop_scans;
    uint64_t pop_scans_skipped;
    uint64_t pop_spare_hints; /* new Pops that leased by a spare hint instead of a scan */
    /* payload bytes of `pushed` and `delivered` (metrics) */
    uint64_t pushed_bytes;
    uint64_t delivered_bytes;
};

/* A fresh UUIDv7 (message ids, lease ids). */
static inline void qn_app_new_id(struct qn_app *app, uint8_t out[QN_UUID_LEN])
{
    qn_uuid7_next(&app->ids, qn_now_ms(), out);
}

#endif
