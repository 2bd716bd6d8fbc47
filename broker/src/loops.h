/*
 * loops.h - private to broker/: the event loops (workers) of one broker
 * process, as a module sees them (QUEEN_WORKERS, broker.c).
 *
 * Each worker thread owns an event_base, a gRPC server and one instance of
 * every module (modules.c builds a whole struct qn_app per worker). Work that
 * belongs to another loop travels as a message to that loop's inbox
 * (engine/inbox.h): qn_loops_post. A module publishes its per-loop state with
 * qn_loops_set_module_state during its start, so that a message addressed to
 * loop k finds loop k's state (qn_loops_module_state) when it runs there.
 *
 * Threading: qn_loops_post and the getters from any worker thread. Every loop's
 * module state is published before any loop serves (broker.c starts the
 * workers one after the other, then listens), so readers need no lock. A
 * message posted to a loop that is tearing down is refused (QN_EBUSY).
 */
#ifndef QN_BROKER_LOOPS_H
#define QN_BROKER_LOOPS_H

#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "engine/decode.h"
#include "engine/dedup.h"
#include "engine/fusion.h"
#include "engine/inbox.h"
#include "engine/maint_loop.h"
#include "queen/store.h"
#include "transport/server.h"

struct qn_loops; /* defined at the end: broker.c embeds it */

/* One loop's counters, as GetStats and /metrics report them (summed over the
 * loops: app_stats.h). */
struct qn_loop_counters {
    uint64_t rpcs;
    uint64_t pushed; /* outside fusion (Transact, replays) */
    uint64_t pushed_bytes;
    uint64_t delivered;
    uint64_t delivered_bytes;
    uint64_t parked; /* parked pops and streams now */
    uint64_t pop_scans, pop_scans_skipped, pop_spare_hints;
    struct qn_fusion_stats fusion;
    struct qn_decode_stats decode; /* batches decompressed off the loop */
    struct qn_dedup_stats dedup;
    struct qn_store_stats store;
    struct qn_maint_stats maint; /* worker 0's loop only */
    struct qn_rpc_stats rpc;     /* the loop's connections, calls and bytes */
};

/* Workers of the process (>= 1). */
unsigned qn_loops_count(const struct qn_loops *l);

/* Queues fn(arg) on worker k's loop. QN_OK (arg is the message's) or QN_EBUSY
 * (inbox full or closing: arg stays the caller's) or QN_EINVAL (no such worker). */
int qn_loops_post(struct qn_loops *l, unsigned k, qn_inbox_fn fn, void *arg);

/* The product module's state on worker k (modules.c: its struct qn_app), as
 * published at start; NULL before. */
void *qn_loops_module_state(const struct qn_loops *l, unsigned k);
void qn_loops_set_module_state(struct qn_loops *l, unsigned k, void *state);

/* Loop k's latest counters (each loop publishes its own a few times a second,
 * app_stats.h), copied under a lock: the only state loops read of each other. */
void qn_loops_publish(struct qn_loops *l, unsigned k, const struct qn_loop_counters *c);
/* As qn_loops_publish, but keeps the dedup counters of the last full publish
 * (reading the dedup cache's costs a walk over its entries). */
void qn_loops_publish_fast(struct qn_loops *l, unsigned k, const struct qn_loop_counters *c);
/* Adds every loop's published counters but `self`'s to *acc. */
void qn_loops_add_others(struct qn_loops *l, unsigned self, struct qn_loop_counters *acc);

/* acc += c, field by field (gauges too: a process's parked pops are the sum). */
void qn_loop_counters_add(struct qn_loop_counters *acc, const struct qn_loop_counters *c);

/* The process's loops. broker.c embeds it and fills n and the inboxes before
 * any worker starts; everyone else goes through the functions above. */
struct qn_loops {
    unsigned n;
    struct qn_inbox *inbox[QN_MAX_WORKERS]; /* NULL with one worker */
    void *module_state[QN_MAX_WORKERS];     /* published at start */
    pthread_mutex_t counters_mu;            /* guards counters */
    struct qn_loop_counters counters[QN_MAX_WORKERS];
    _Atomic size_t parked; /* parked pops of every loop (QUEEN_MAX_PARKED_POPS) */
};

#endif
