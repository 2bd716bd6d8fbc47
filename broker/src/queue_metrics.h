/*
 * queue_metrics.h - private to broker/: the queue module's metrics (the app's
 * counters, the engines, the storage pool, the maintenance loop, and the
 * per-queue depth and per-(queue, group) lag series), as docs/metrics.md lists
 * them.
 */
#ifndef QN_BROKER_QUEUE_METRICS_H
#define QN_BROKER_QUEUE_METRICS_H

#include "obs/metrics.h"

struct qn_app;
struct qn_queue_metrics;

/*
 * Registers the families in m, a collector that copies the app's counters at
 * each scrape, the fusion histograms, and (unless QUEEN_METRICS_MAX_QUEUES is
 * 0) the per-queue refresh every QUEEN_METRICS_REFRESH_MS, on a database
 * session of its own configured from sc (its pool size, write reserve,
 * pipeline and metrics family are set here). Borrows app and m until
 * qn_queue_metrics_free(). Returns QN_OK, QN_ENOMEM or QN_EINVAL.
 */
struct qn_store_config;
int qn_queue_metrics_new(struct qn_app *app, qn_metrics *m, const struct qn_store_config *sc,
                         struct qn_queue_metrics **out);

/* Stops the refresh (a database read in flight is cancelled, the session
 * closed), removes the collector and frees. NULL allowed. */
void qn_queue_metrics_free(struct qn_queue_metrics *qm);

/* The segment histograms (and their registry, to lock) that every loop's
 * fusion observes: worker 0 renders them. */
struct qn_fusion_metrics;
void qn_queue_metrics_fusion(const struct qn_queue_metrics *qm, struct qn_fusion_metrics *out);

/* One refresh now (tests and the first one at start). */
void qn_queue_metrics_refresh(struct qn_queue_metrics *qm);

#endif
