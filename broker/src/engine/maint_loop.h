/*
 * engine/maint_loop.h - private to broker/: the maintenance loop (retention,
 * hash-sidecar purge, max-wait eviction, partition cleanup, metrics purge) on
 * its own database session. The queue module (modules.c) runs one per process.
 *
 * The loop is usable without the broker: qn_maint_new() on any event_base, then
 * either qn_maint_start() (a cycle every interval_ms) or qn_maint_run_once()
 * (one cycle now, with a completion callback). Everything runs on the loop
 * thread that owns the event_base; nothing here is thread-safe.
 */
#ifndef QN_BROKER_MAINT_LOOP_H
#define QN_BROKER_MAINT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "queen/store.h"

struct event_base;
struct qn_config;

/* The session advisory lock that makes one broker sweep per cycle. */
#define QN_MAINT_LOCK_KEY 737001

struct qn_maint_config {
    int64_t interval_ms;       /* RETENTION_INTERVAL: from the end of a cycle to the next, > 0 */
    int32_t batch_size;        /* RETENTION_BATCH_SIZE: rows per step call, >= 1 */
    int32_t worklist_limit;    /* partitions per work-list fetch, 1 .. 100000 */
    int32_t max_fetches;       /* work-list fetches per phase per cycle, >= 1 */
    bool cleanup_enabled;      /* QUEEN_PARTITION_CLEANUP_ENABLED */
    int64_t cleanup_days;      /* PARTITION_CLEANUP_DAYS, >= 1 */
    int64_t cleanup_period_ms; /* cleanup runs at most this often (60000; 0 = every cycle) */
    int64_t metrics_days;      /* METRICS_RETENTION_DAYS, >= 1 */
    int stmt_timeout_ms;       /* statement_timeout of the loop's session, > 0 */
};

/* The broker's settings: interval, batch, cleanup, metrics and statement timeout
 * from cfg; work list limit 5 x batch (at most 100000, the reference's due cap);
 * 1000 fetches; cleanup period 60 s. */
void qn_maint_config_from(struct qn_maint_config *mc, const struct qn_config *cfg);

/* Step kinds, for counters. */
enum qn_maint_kind {
    QN_MAINT_RETENTION = 0, /* retention_step_v1: segments (both rules) */
    QN_MAINT_TXNS_PURGE,    /* txns_purge_step_v1: hash-sidecar rows */
    QN_MAINT_MAX_WAIT,      /* evict_max_wait_step_v1: segments */
    QN_MAINT_CLEANUP,       /* partition_cleanup_step_v1: partitions */
    QN_MAINT_NKINDS
};

/* One cycle's outcome (borrowed by the completion callback). */
struct qn_maint_cycle {
    int code;                          /* QN_OK, or the error that ended the cycle early */
    bool skipped;                      /* the lock was held elsewhere: nothing was done */
    bool cleanup_ran;                  /* the cleanup phase was due and ran */
    uint32_t fetches;                  /* work-list calls */
    uint64_t worklist_rows[3];         /* rows of the work lists, phases 1..3 */
    uint64_t steps[QN_MAINT_NKINDS];   /* step calls by kind */
    uint64_t deleted[QN_MAINT_NKINDS]; /* rows deleted by kind */
    uint64_t frames;                   /* messages in the segments deleted (retention, eviction) */
    int64_t metrics_purged;            /* rows; -1 when the purge failed or did not run */
    int64_t queues; /* distinct queues with deletions (over at most 65536 partitions);
                       -1 when unknown (the cycle failed before counting) */
    int64_t elapsed_ms;
};

/* Totals since qn_maint_new(). */
struct qn_maint_stats {
    uint64_t cycles_run;     /* cycles that took the lock (completed or failed) */
    uint64_t cycles_skipped; /* lock held elsewhere */
    uint64_t cycles_failed;  /* ended by an error, before or after the lock */
    uint64_t worklist_fetches;
    uint64_t worklist_rows[3]; /* phases 1..3 */
    uint64_t steps[QN_MAINT_NKINDS];
    uint64_t deleted[QN_MAINT_NKINDS];
    uint64_t frames;
    uint64_t metrics_purged;
    uint64_t metrics_failures;
};

typedef struct qn_maint qn_maint;

/*
 * Makes the loop with its own store on conninfo (copied): pool_size 1, so the
 * advisory lock and every call of a cycle share one session. Does not schedule
 * anything (see qn_maint_start). Returns QN_OK and *out, QN_EINVAL (bad config or
 * conninfo NULL), QN_ENOMEM, or the store's error.
 */
int qn_maint_new(struct event_base *base, const struct qn_maint_config *cfg, const char *conninfo,
                 qn_maint **out);

/* Schedules a cycle every cfg.interval_ms, each after the previous one ended.
 * Returns QN_OK or QN_ESHUTDOWN. */
int qn_maint_start(qn_maint *m);

/*
 * The cycle's completion: cb(ud, result) runs once on the loop, never inside the
 * call that started the cycle; result is borrowed until cb returns. cb may start
 * another cycle (qn_maint_run_once) but must not free m.
 */
typedef void (*qn_maint_done_cb)(void *ud, const struct qn_maint_cycle *result);

/*
 * Starts one cycle now (a pending periodic one is moved to interval_ms after this
 * one ends). Returns QN_OK, then cb runs exactly once (with QN_ESHUTDOWN in
 * result->code when qn_maint_shutdown interrupts it); or QN_EBUSY (a cycle is
 * running), QN_ESHUTDOWN, or the store's refusal of the first call
 * (QN_EUNAVAILABLE, ...), and then cb never runs. cb may be NULL.
 */
int qn_maint_run_once(qn_maint *m, qn_maint_done_cb cb, void *ud);

/* A cycle is running. */
bool qn_maint_is_running(const qn_maint *m);

void qn_maint_get_stats(const qn_maint *m, struct qn_maint_stats *out);

/* The loop's own store (borrowed until qn_maint_free): tests read its counters. */
qn_store *qn_maint_store(qn_maint *m);

/*
 * Stops scheduling, cancels the call in flight, sends the advisory unlock when
 * the lock is held and completes a running cycle with QN_ESHUTDOWN. Idempotent.
 */
void qn_maint_shutdown(qn_maint *m);

/* Shuts down if needed, closes the session (which releases any lock still held)
 * and frees m. NULL is allowed. Not from inside m's completion callback. */
void qn_maint_free(qn_maint *m);

#endif
