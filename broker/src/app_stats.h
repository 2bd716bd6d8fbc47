/*
 * app_stats.h - private to broker/: a loop's counters and the process's sums
 * (QUEEN_WORKERS), for GetStats (rpc/svc_stats.c) and /metrics
 * (queue_metrics.c).
 *
 * Each loop reads its own counters live; the other loops' come from the
 * snapshots they publish (loops.h, qn_loops_publish) every
 * QN_APP_STATS_PUBLISH_MS, so a sum is at most that old for other loops' work
 * and exact for its own. With one worker there is nothing to publish.
 */
#ifndef QN_BROKER_APP_STATS_H
#define QN_BROKER_APP_STATS_H

#include "app.h"
#include "loops.h"

/* How often a loop publishes its counters for the others. */
#define QN_APP_STATS_PUBLISH_MS 100

/* app's own counters, live (its loop thread). */
void qn_app_counters_own(const struct qn_app *app, struct qn_loop_counters *out);

/* The same without the dedup cache's (a walk over its entries): left zero. */
void qn_app_counters_own_fast(const struct qn_app *app, struct qn_loop_counters *out);

/* The process's counters: app's live ones plus every other loop's published
 * snapshot (its loop thread). */
void qn_app_counters_all(const struct qn_app *app, struct qn_loop_counters *out);

/* Asks every other loop to publish its counters now (a GetStats does, before
 * its database read, so that the sum it answers after that read is fresh). */
void qn_app_counters_refresh(struct qn_app *app);

#endif
