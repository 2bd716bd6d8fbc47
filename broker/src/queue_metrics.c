/*
 * queue_metrics.c - the queue module's metrics (see queue_metrics.h and
 * docs/metrics.md, which lists every family this file registers).
 *
 * Does: at each scrape, copy the counters the app, fusion, the dedup cache,
 * the waiters, the storage pool, the offload pool and the maintenance loop keep anyway into
 * their series (nothing on the hot paths changes for that); give fusion its two
 * segment histograms; advance the database's stats walk by small bounded
 * steps, paced by their own duration (stats_step_v1), and every
 * QUEEN_METRICS_REFRESH_MS read the per-queue figures and the consumer groups'
 * lag per queue of its last whole pass (stats_cached_v1, group_lags_cached_v1),
 * and rebuild the per-queue series from them.
 * Does not: read the database per scrape (a scrape never waits), keep series
 * for more than QUEEN_METRICS_MAX_QUEUES queues and QUEEN_METRICS_MAX_GROUPS
 * (queue, group) pairs, or use the loop's pool: the walk and the refresh run on
 * a session of their own (qm->st), so a step never holds the one connection a
 * loop's reads may have (a pool of 4 on 2 loops leaves each loop one besides
 * the write reserve: the hot pops of a million-partition database waited
 * behind the walk's 20 ms steps there).
 *
 * Which queues: the deepest (pending messages, ties by name), so the ones an
 * operator must look at are always there and the choice is the same on every
 * broker reading the same database; which pairs: the largest lags among the
 * chosen queues (ties by queue, then group). What the bound leaves out is
 * counted (queen_queue_stats_omitted_queues, ..._groups), never silently lost.
 *
 * Refresh lifecycle:
 *
 *   IDLE --timer--> STATS (stats_cached_v1 in flight) --rows--> GROUPS (group_lags_cached_v1)
 *   GROUPS --rows--> IDLE (series rebuilt);  STATS|GROUPS --error--> IDLE (series kept,
 *   failure counted)
 *
 * Invariants:
 *   1. At most one refresh is in flight; a tick that finds one running skips.
 *      At most one step of the walk is in flight (walk_req): its one-shot
 *      timer is armed only while none is.
 *   2. The per-queue series are replaced only by a complete refresh, so a
 *      scrape sees one refresh's figures, never a mix.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/event.h>

#include "app.h"
#include "app_stats.h"
#include "config.h"
#include "engine/dedup.h"
#include "engine/fusion.h"
#include "engine/maint_loop.h"
#include "engine/offload.h"
#include "engine/waiters.h"
#include "log.h"
#include "queen/error.h"
#include "queen/store.h"
#include "queue_metrics.h"
#include "timer.h"

enum refresh_state { REFRESH_IDLE, REFRESH_STATS, REFRESH_GROUPS };

/* The stats walk (stats_step_v1): steps of STATS_STEP_PARTITIONS partitions,
 * each followed by a pause of WALK_DUTY times its own duration (at least
 * QUEEN_METRICS_REFRESH_MS / 100), so the walk holds a backend for at most a
 * twentieth of the time, in slices of about 20 ms at a million partitions
 * (about 20 us a partition there); a pass starts at most ten times per
 * QUEEN_METRICS_REFRESH_MS (a database of up to STATS_STEP_PARTITIONS
 * partitions is one step a pass). Why: at a million partitions a step of 100,000 held a
 * backend for 0.65-0.9 s, and steps of 10,000 every 1.5 s for 70-150 ms; on a 2-core machine a hot
 * call that met such a step waited for it (bench/RESULTS.md, the hot subset beside an empty
 * database, round by round). A pass then takes about 7 minutes at a million partitions (19 s of a
 * backend's time, which the steps of 10,000 every 1.5 s spent in 2.5 minutes: 13 % of a core). */
#define STATS_STEP_PARTITIONS 1000
#define WALK_DUTY 20
#define WALK_GAP_MIN_MS 10

struct qstat {
    char *queue;
    int64_t pending, messages, dead_letters;
};

struct qpair {
    const char *queue; /* borrowed from the chosen qstats */
    char *group;
    int64_t lag;
};

/* A family and, when it has no labels, its one series. */
struct fam {
    struct qn_metric_family *f;
    struct qn_metric *s;
};

struct qn_queue_metrics {
    struct qn_app *app;
    qn_metrics *reg;
    /* collected at scrape */
    struct fam push_msgs, push_bytes, push_dups, commits, segments, inflight, pending_bytes;
    struct fam offloaded, offload_refused, read_offloaded, read_offloaded_bytes;
    struct fam pop_scans, pop_scans_skipped, pop_spare_hints;
    struct fam pop_msgs, pop_bytes, parked;
    struct fam dd_hits, dd_misses, dd_bytes, dd_hashes, dd_parts, dd_evictions;
    struct fam db_up, db_inflight, db_waiting, db_calls, db_doubt, db_hung, db_reconnects,
        db_retries;
    struct fam mt_cycles, mt_failures, mt_steps, mt_deleted;
    struct fam seg_msgs, seg_bytes;
    /* refreshed from the database */
    struct fam q_depth, q_messages, q_dead, g_lag;
    struct fam q_seen, q_omitted, g_omitted, q_stamp, q_failures;
    uint64_t failures;
    enum refresh_state state;
    struct event *timer;
    struct event *walk;     /* the stats walk's next step (one-shot) */
    qn_store_req *walk_req; /* the step in flight (at most one) */
    int64_t walk_step_at;   /* when the step in flight started (ms) */
    int64_t walk_pass_at;   /* when the pass under way started; 0: none */
    qn_store_req *req;
    qn_store *st;         /* the walk's and the refresh's own session (pool of 1) */
    struct qstat *chosen; /* the chosen queues of the refresh in flight, by name */
    size_t nchosen;
    size_t nqueues; /* queues the stats call returned */
};

static const char *const step_names[QN_MAINT_NKINDS] = {"retention", "txns_purge", "max_wait",
                                                        "cleanup"};

static int fam(struct qn_queue_metrics *qm, struct fam *out, const char *name, const char *help,
               enum qn_metric_type type, const char *label1, const char *label2,
               const double *bounds, size_t nbounds)
{
    const char *labels[2] = {label1, label2};
    size_t n = label2 ? 2 : label1 ? 1 : 0;
    int rc = qn_metrics_family(qm->reg, name, help, type, labels, n, bounds, nbounds, &out->f);
    if (rc != QN_OK) {
        QN_ERROR("cannot register metric %s: %s", name, qn_strerror(rc));
        return rc;
    }
    out->s = n == 0 ? qn_metric_series(out->f, NULL) : NULL;
    return QN_OK;
}

static void set_labelled(struct fam *f, const char *value, uint64_t total, bool counter)
{
    const char *v[1] = {value};
    struct qn_metric *s = qn_metric_series(f->f, v);
    if (counter)
        qn_metric_set_total(s, total);
    else
        qn_metric_set(s, (double)total);
}

/* ---------------------------------------------------------------- at each scrape */

static void collect(void *ud)
{
    struct qn_queue_metrics *qm = ud;
    struct qn_app *app = qm->app;
    /* every loop's counters (app_stats.h) */
    struct qn_loop_counters c;
    qn_app_counters_all(app, &c);
    const struct qn_fusion_stats *fs = &c.fusion;
    qn_metric_set_total(qm->push_msgs.s, c.pushed + fs->committed);
    qn_metric_set_total(qm->push_bytes.s, c.pushed_bytes + fs->committed_bytes);
    qn_metric_set_total(qm->push_dups.s, fs->duplicates);
    qn_metric_set_total(qm->commits.s, fs->flushes);
    qn_metric_set_total(qm->segments.s, fs->segments);
    qn_metric_set_total(qm->offloaded.s, fs->offloaded);
    qn_metric_set_total(qm->read_offloaded.s, c.decode.batches);
    qn_metric_set_total(qm->read_offloaded_bytes.s, c.decode.bytes);
    if (app->offload != NULL) { /* the process's pool: read once, not summed over loops */
        struct qn_offload_stats os;
        qn_offload_stats(app->offload, &os);
        qn_metric_set_total(qm->offload_refused.s, os.refused);
    }
    qn_metric_set(qm->inflight.s, (double)fs->inflight);
    qn_metric_set(qm->pending_bytes.s, (double)fs->pending_bytes);
    qn_metric_set_total(qm->pop_msgs.s, c.delivered);
    qn_metric_set_total(qm->pop_bytes.s, c.delivered_bytes);
    qn_metric_set(qm->parked.s, (double)c.parked);
    qn_metric_set_total(qm->pop_scans.s, c.pop_scans);
    qn_metric_set_total(qm->pop_scans_skipped.s, c.pop_scans_skipped);
    qn_metric_set_total(qm->pop_spare_hints.s, c.pop_spare_hints);

    const struct qn_dedup_stats *ds = &c.dedup;
    qn_metric_set_total(qm->dd_hits.s, ds->vouched);
    qn_metric_set_total(qm->dd_misses.s, ds->declined);
    qn_metric_set(qm->dd_bytes.s, (double)ds->bytes);
    qn_metric_set(qm->dd_hashes.s, (double)ds->hashes);
    qn_metric_set(qm->dd_parts.s, (double)ds->entries);
    qn_metric_set_total(qm->dd_evictions.s, ds->evictions);

    const struct qn_store_stats *ss = &c.store;
    qn_metric_set(qm->db_up.s, ss->connections_up);
    qn_metric_set(qm->db_inflight.s, ss->in_flight);
    qn_metric_set(qm->db_waiting.s, ss->waiting);
    qn_metric_set_total(qm->db_calls.s, ss->calls);
    qn_metric_set_total(qm->db_doubt.s, ss->in_doubt);
    qn_metric_set_total(qm->db_hung.s, ss->hung);
    qn_metric_set_total(qm->db_reconnects.s, ss->reconnects);
    qn_metric_set_total(qm->db_retries.s, ss->retries);

    const struct qn_maint_stats *ms = &c.maint;
    set_labelled(&qm->mt_cycles, "ran", ms->cycles_run, true);
    set_labelled(&qm->mt_cycles, "skipped", ms->cycles_skipped, true);
    qn_metric_set_total(qm->mt_failures.s, ms->cycles_failed);
    for (int k = 0; k < QN_MAINT_NKINDS; k++) {
        set_labelled(&qm->mt_steps, step_names[k], ms->steps[k], true);
        set_labelled(&qm->mt_deleted, step_names[k], ms->deleted[k], true);
    }
}

/* ---------------------------------------------------------------- the refresh */

static void chosen_free(struct qn_queue_metrics *qm)
{
    for (size_t i = 0; i < qm->nchosen; i++)
        free(qm->chosen[i].queue);
    free(qm->chosen);
    qm->chosen = NULL;
    qm->nchosen = 0;
}

static int by_depth(const void *a, const void *b)
{
    const struct qstat *x = a, *y = b;
    if (x->pending != y->pending)
        return x->pending > y->pending ? -1 : 1;
    return strcmp(x->queue, y->queue);
}

static int by_name(const void *a, const void *b)
{
    const struct qstat *x = a, *y = b;
    return strcmp(x->queue, y->queue);
}

static int by_lag(const void *a, const void *b)
{
    const struct qpair *x = a, *y = b;
    if (x->lag != y->lag)
        return x->lag > y->lag ? -1 : 1;
    int c = strcmp(x->queue, y->queue);
    return c != 0 ? c : strcmp(x->group, y->group);
}

static const struct qstat *find_chosen(const struct qn_queue_metrics *qm, const char *queue)
{
    struct qstat key = {(char *)queue, 0, 0, 0};
    return bsearch(&key, qm->chosen, qm->nchosen, sizeof key, by_name);
}

static void refresh_failed(struct qn_queue_metrics *qm, const char *what,
                           const struct qn_store_status *st)
{
    qm->failures++;
    qn_metric_set_total(qm->q_failures.s, qm->failures);
    QN_DEBUG("queue metrics refresh failed step=%s detail=\"%s\"", what,
             st->message[0] ? st->message : qn_strerror(st->code));
    chosen_free(qm);
    qm->state = REFRESH_IDLE;
}

static void groups_done(void *ud, const struct qn_store_status *st,
                        const struct qn_groups_result *r)
{
    struct qn_queue_metrics *qm = ud;
    assert(qm->state == REFRESH_GROUPS);
    qm->req = NULL;
    if (st->code != QN_OK) {
        refresh_failed(qm, "groups", st);
        return;
    }
    /* rows come ordered by group, queue: one per (group, queue) */
    struct qpair *pairs = calloc(r->n ? r->n : 1, sizeof *pairs);
    size_t np = 0;
    for (size_t i = 0; pairs != NULL && i < r->n; i++) {
        const struct qn_group_row *row = &r->rows[i];
        const struct qstat *q = find_chosen(qm, row->queue);
        if (q == NULL)
            continue;
        if (np > 0 && pairs[np - 1].queue == q->queue &&
            strcmp(pairs[np - 1].group, row->group) == 0) {
            pairs[np - 1].lag += row->lag;
            continue;
        }
        pairs[np].queue = q->queue;
        pairs[np].group = strdup(row->group);
        pairs[np].lag = row->lag;
        if (pairs[np].group == NULL)
            break;
        np++;
    }
    if (pairs == NULL) {
        struct qn_store_status oom = {QN_ENOMEM, "", "out of memory"};
        refresh_failed(qm, "groups", &oom);
        return;
    }
    qsort(pairs, np, sizeof *pairs, by_lag);
    size_t keep = np < (size_t)qm->app->cfg->metrics_max_groups
                      ? np
                      : (size_t)qm->app->cfg->metrics_max_groups;

    /* one complete refresh: replace every per-queue series at once */
    qn_metric_family_clear(qm->q_depth.f);
    qn_metric_family_clear(qm->q_messages.f);
    qn_metric_family_clear(qm->q_dead.f);
    qn_metric_family_clear(qm->g_lag.f);
    for (size_t i = 0; i < qm->nchosen; i++) {
        const char *v[1] = {qm->chosen[i].queue};
        qn_metric_set(qn_metric_series(qm->q_depth.f, v), (double)qm->chosen[i].pending);
        qn_metric_set(qn_metric_series(qm->q_messages.f, v), (double)qm->chosen[i].messages);
        qn_metric_set(qn_metric_series(qm->q_dead.f, v), (double)qm->chosen[i].dead_letters);
    }
    for (size_t i = 0; i < keep; i++) {
        const char *v[2] = {pairs[i].queue, pairs[i].group};
        qn_metric_set(qn_metric_series(qm->g_lag.f, v), (double)pairs[i].lag);
    }
    qn_metric_set(qm->q_seen.s, (double)qm->nqueues);
    qn_metric_set(qm->q_omitted.s, (double)(qm->nqueues - qm->nchosen));
    qn_metric_set(qm->g_omitted.s, (double)(np - keep));
    struct timeval tv;
    gettimeofday(&tv, NULL);
    qn_metric_set(qm->q_stamp.s, (double)tv.tv_sec + (double)tv.tv_usec / 1e6);
    for (size_t i = 0; i < np; i++)
        free(pairs[i].group);
    free(pairs);
    chosen_free(qm);
    qm->state = REFRESH_IDLE;
}

static void stats_done(void *ud, const struct qn_store_status *st, const struct qn_stats_result *r)
{
    struct qn_queue_metrics *qm = ud;
    assert(qm->state == REFRESH_STATS);
    qm->req = NULL;
    if (st->code != QN_OK) {
        refresh_failed(qm, "stats", st);
        return;
    }
    struct qstat *all = calloc(r->n ? r->n : 1, sizeof *all);
    size_t n = 0;
    for (size_t i = 0; all != NULL && i < r->n; i++) {
        all[n] = (struct qstat){(char *)r->rows[i].queue, r->rows[i].pending, r->rows[i].messages,
                                r->rows[i].dead_letters};
        n++;
    }
    if (all == NULL) {
        struct qn_store_status oom = {QN_ENOMEM, "", "out of memory"};
        refresh_failed(qm, "stats", &oom);
        return;
    }
    qsort(all, n, sizeof *all, by_depth);
    size_t keep =
        n < (size_t)qm->app->cfg->metrics_max_queues ? n : (size_t)qm->app->cfg->metrics_max_queues;
    qm->chosen = calloc(keep ? keep : 1, sizeof *qm->chosen);
    for (size_t i = 0; qm->chosen != NULL && i < keep; i++) {
        qm->chosen[i] = all[i];
        qm->chosen[i].queue = strdup(all[i].queue);
        if (qm->chosen[i].queue == NULL)
            break;
        qm->nchosen = i + 1;
    }
    free(all);
    if (qm->chosen == NULL || qm->nchosen != keep) {
        struct qn_store_status oom = {QN_ENOMEM, "", "out of memory"};
        refresh_failed(qm, "stats", &oom);
        return;
    }
    qm->nqueues = n;
    qsort(qm->chosen, qm->nchosen, sizeof *qm->chosen, by_name);
    qm->state = REFRESH_GROUPS;
    /* the default tenant's queues only (NULL): /metrics answers without
     * credentials, so other tenants' queue names never appear there */
    struct qn_call_opts opts = {qn_store_now_ms() + qm->app->cfg->metrics_refresh_ms, NULL, NULL};
    int rc = qn_store_group_lags(qm->st, &opts, groups_done, qm, &qm->req);
    if (rc != QN_OK) {
        qm->req = NULL;
        struct qn_store_status s = {rc, "", ""};
        refresh_failed(qm, "groups", &s);
    }
}

void qn_queue_metrics_refresh(struct qn_queue_metrics *qm)
{
    if (qm->state != REFRESH_IDLE || qm->app->cfg->metrics_max_queues == 0)
        return; /* invariant 1 */
    qm->state = REFRESH_STATS;
    /* the default tenant's queues only (NULL): /metrics answers without
     * credentials, so other tenants' queue names never appear there */
    struct qn_call_opts opts = {qn_store_now_ms() + qm->app->cfg->metrics_refresh_ms, NULL, NULL};
    int rc = qn_store_stats_cached(qm->st, 0, &opts, stats_done, qm, &qm->req);
    if (rc != QN_OK) {
        qm->req = NULL;
        struct qn_store_status s = {rc, "", ""};
        refresh_failed(qm, "stats", &s);
    }
}

/* A tenth of the refresh period: at most ten passes per refresh, and the
 * retry of a step that failed. */
static int64_t walk_tenth(const struct qn_queue_metrics *qm)
{
    return qm->app->cfg->metrics_refresh_ms / 10;
}

/* The pause after a step that took `took` ms: WALK_DUTY times it, at least a
 * hundredth of the refresh period. */
static int64_t walk_gap(const struct qn_queue_metrics *qm, int64_t took)
{
    int64_t gap = qm->app->cfg->metrics_refresh_ms / 100;
    if (gap < WALK_GAP_MIN_MS)
        gap = WALK_GAP_MIN_MS;
    if (took > 0 && took * WALK_DUTY > gap)
        gap = took * WALK_DUTY;
    return gap;
}

static void walk_done(void *ud, const struct qn_store_status *st, int64_t parts)
{
    struct qn_queue_metrics *qm = ud;
    qm->walk_req = NULL;
    int64_t now = qn_store_now_ms(), took = now - qm->walk_step_at;
    int64_t tenth = walk_tenth(qm), gap = walk_gap(qm, took);
    if (st->code != QN_OK) {
        QN_DEBUG("stats walk step failed detail=\"%s\"",
                 st->message[0] ? st->message : qn_strerror(st->code));
        qn_timer_after(qm->walk, tenth); /* try again a tenth of a refresh later */
        return;
    }
    if (parts >= 0 && parts < STATS_STEP_PARTITIONS) {
        /* the pass is over (published): the next begins a tenth of a refresh
         * period after this one began, so a refresh reads figures at most that
         * much older than itself where a pass fits in the time */
        int64_t next = qm->walk_pass_at + tenth - now;
        qm->walk_pass_at = 0;
        qn_timer_after(qm->walk, next > gap ? next : gap);
        return;
    }
    /* mid-pass, or -1: another broker's step holds the walk (stats_step_v1's
     * lock); look again after the same pause */
    qn_timer_after(qm->walk, gap);
}

/* One step of the stats walk; walk_done schedules the next. The timer is
 * one-shot and armed only once no step is in flight (walk_done, or here when
 * the call could not start), so a step never overlaps another. */
static void on_walk(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qn_queue_metrics *qm = arg;
    assert(qm->walk_req == NULL);
    qm->walk_step_at = qn_store_now_ms();
    if (qm->walk_pass_at == 0)
        qm->walk_pass_at = qm->walk_step_at;
    struct qn_call_opts opts = {qm->walk_step_at + qm->app->cfg->metrics_refresh_ms, NULL, NULL};
    if (qn_store_stats_step(qm->st, STATS_STEP_PARTITIONS, &opts, walk_done, qm, &qm->walk_req) !=
        QN_OK) {
        qm->walk_req = NULL;
        qn_timer_after(qm->walk, walk_tenth(qm));
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    qn_queue_metrics_refresh(arg);
}

/* ---------------------------------------------------------------- lifecycle */

static int register_all(struct qn_queue_metrics *qm)
{
    static const double seg_msgs[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};
    static const double seg_bytes[] = {256,    1024,    4096,    16384,    65536,
                                       262144, 1048576, 4194304, 16777216, 67108864};
    const enum qn_metric_type C = QN_METRIC_COUNTER, G = QN_METRIC_GAUGE, H = QN_METRIC_HISTOGRAM;
    int rc = QN_OK;
#define F(field, name, type, help)                                                                 \
    if (rc == QN_OK)                                                                               \
    rc = fam(qm, &qm->field, name, help, type, NULL, NULL, NULL, 0)
#define F1(field, name, type, label, help)                                                         \
    if (rc == QN_OK)                                                                               \
    rc = fam(qm, &qm->field, name, help, type, label, NULL, NULL, 0)
    F(push_msgs, "queen_push_messages_total", C,
      "messages committed by Push, Transact and dead-letter replays");
    F(push_bytes, "queen_push_bytes_total", C, "payload bytes of those messages");
    F(push_dups, "queen_push_duplicates_total", C,
      "pushed messages the database answered DUPLICATE (push fusion)");
    F(commits, "queen_push_commits_total", C, "push commits (one database call each)");
    F(segments, "queen_push_segments_total", C, "segments sent by push commits");
    F(offloaded, "queen_push_segments_offloaded_total", C,
      "segments packed by an offload thread instead of their event loop");
    F(offload_refused, "queen_offload_refused_total", C,
      "jobs the full offload pool refused (segments to pack, batches to decompress), done on "
      "their event loop instead");
    F(read_offloaded, "queen_read_batches_offloaded_total", C,
      "Pop, Consume and Fetch batches whose segments an offload thread decompressed");
    F(read_offloaded_bytes, "queen_read_bytes_offloaded_total", C,
      "decompressed bytes of those batches' segments");
    F(inflight, "queen_push_commits_in_flight", G, "push commits awaiting the database");
    F(pending_bytes, "queen_push_pending_bytes", G,
      "payload bytes waiting in push fusion for their commit");
    if (rc == QN_OK)
        rc = fam(qm, &qm->seg_msgs, "queen_push_segment_messages", "messages per committed segment",
                 H, NULL, NULL, seg_msgs, sizeof seg_msgs / sizeof seg_msgs[0]);
    if (rc == QN_OK)
        rc = fam(qm, &qm->seg_bytes, "queen_push_segment_bytes",
                 "compressed bytes per committed segment", H, NULL, NULL, seg_bytes,
                 sizeof seg_bytes / sizeof seg_bytes[0]);
    F(pop_msgs, "queen_pop_messages_total", C,
      "messages delivered to consumers by Pop, Consume and Fetch");
    F(pop_bytes, "queen_pop_bytes_total", C, "payload bytes of those messages");
    F(parked, "queen_pops_parked", G,
      "pops, Consume streams and fetches waiting for data (holding no database connection)");
    F(pop_scans, "queen_pop_scans_total", C,
      "Pop calls to the database that looked at every partition of a queue");
    F(pop_scans_skipped, "queen_pop_scans_skipped_total", C,
      "new Pops that waited for news instead of a scan: their group's last scan was empty");
    F(pop_spare_hints, "queen_pop_spare_hints_total", C,
      "new Pops that leased in a partition whose news no consumer of their group was told of, "
      "instead of a scan");
    F(dd_hits, "queen_dedup_cache_hits_total", C,
      "pushes the dedup cache vouched for (a narrowed database probe)");
    F(dd_misses, "queen_dedup_cache_misses_total", C,
      "pushes the dedup cache could not vouch for (a full-window probe)");
    F(dd_bytes, "queen_dedup_cache_bytes", G, "memory the dedup cache accounts for");
    F(dd_hashes, "queen_dedup_cache_hashes", G, "transaction-id hashes resident in the cache");
    F(dd_parts, "queen_dedup_cache_partitions", G, "partitions with a dedup cache entry");
    F(dd_evictions, "queen_dedup_cache_evictions_total", C,
      "dedup cache entries evicted to stay within QUEEN_DEDUP_CACHE_MB");
    F(db_up, "queen_db_connections_up", G, "connections of the storage pool that are up");
    F(db_inflight, "queen_db_calls_in_flight", G, "storage calls sent and awaiting their results");
    F(db_waiting, "queen_db_calls_waiting", G, "storage calls queued for a connection");
    F(db_calls, "queen_db_calls_total", C, "storage calls completed, any outcome");
    F(db_doubt, "queen_db_calls_in_doubt_total", C,
      "writes whose connection was lost before the result came (resolved by the broker)");
    F(db_hung, "queen_db_connections_hung_total", C,
      "connections declared hung (no answer in time) and closed");
    F(db_reconnects, "queen_db_reconnects_total", C, "connections re-established");
    F(db_retries, "queen_db_conflict_retries_total", C,
      "calls repeated after a deadlock or serialization failure");
    F1(mt_cycles, "queen_maintenance_cycles_total", C, "result",
       "maintenance cycles: ran (this broker held the lock) or skipped (another did)");
    F(mt_failures, "queen_maintenance_cycle_failures_total", C,
      "maintenance cycles ended by an error");
    F1(mt_steps, "queen_maintenance_steps_total", C, "step", "maintenance step calls, by step");
    F1(mt_deleted, "queen_maintenance_rows_deleted_total", C, "step",
       "rows maintenance deleted, by step (segments, hash-sidecar rows, partitions)");
    F1(q_depth, "queen_queue_depth_messages", G, "queue",
       "messages not yet consumed by the slowest group of each partition (refreshed)");
    F1(q_messages, "queen_queue_messages", G, "queue", "messages retained (refreshed)");
    F1(q_dead, "queen_queue_dead_letters", G, "queue", "dead letters of the queue (refreshed)");
    if (rc == QN_OK)
        rc = fam(qm, &qm->g_lag, "queen_consumer_group_lag_messages",
                 "messages past the group's cursors, summed over the queue's partitions "
                 "(refreshed)",
                 G, "queue", "group", NULL, 0);
    F(q_seen, "queen_queue_stats_queues", G, "queues the last refresh found");
    F(q_omitted, "queen_queue_stats_omitted_queues", G,
      "queues left without series by QUEEN_METRICS_MAX_QUEUES");
    F(g_omitted, "queen_queue_stats_omitted_groups", G,
      "(queue, group) pairs left without a lag series by QUEEN_METRICS_MAX_GROUPS");
    F(q_stamp, "queen_queue_stats_refresh_timestamp_seconds", G,
      "Unix time of the last complete per-queue refresh (0: none yet)");
    F(q_failures, "queen_queue_stats_refresh_failures_total", C, "per-queue refreshes that failed");
#undef F
#undef F1
    return rc;
}

int qn_queue_metrics_new(struct qn_app *app, qn_metrics *m, const struct qn_store_config *sc,
                         struct qn_queue_metrics **out)
{
    struct qn_queue_metrics *qm = calloc(1, sizeof *qm);
    if (qm == NULL)
        return QN_ENOMEM;
    qm->app = app;
    qm->reg = m;
    int rc = register_all(qm);
    if (rc == QN_OK)
        rc = qn_metrics_on_collect(m, collect, qm);
    if (rc != QN_OK) {
        free(qm);
        return rc;
    }
    struct qn_fusion_metrics fm;
    qn_queue_metrics_fusion(qm, &fm);
    qn_fusion_set_metrics(app->fusion, &fm);
    if (app->cfg->metrics_max_queues > 0) {
        struct qn_store_config own = *sc;
        own.pool_size = 1; /* one step or one read at a time (invariant 1) */
        own.write_reserve = 0;
        own.pipeline_depth = 1;
        own.max_waiting = 4; /* the refresh's read and a step, at most */
        own.pid_cache = 0;   /* it pushes nothing */
        own.family = NULL;   /* nor sends a NOTIFY */
        if ((rc = qn_store_new(app->base, &own, &qm->st)) != QN_OK) {
            qn_queue_metrics_free(qm);
            return rc;
        }
        qm->timer = event_new(app->base, -1, EV_PERSIST, on_timer, qm);
        if (qm->timer == NULL) {
            qn_queue_metrics_free(qm);
            return QN_ENOMEM;
        }
        int64_t ms = app->cfg->metrics_refresh_ms;
        qn_timer_after(qm->timer, ms);
        qm->walk = evtimer_new(app->base, on_walk, qm);
        if (qm->walk == NULL) {
            qn_queue_metrics_free(qm);
            return QN_ENOMEM;
        }
        qn_timer_after(qm->walk, walk_gap(qm, 0)); /* the first pass soon */
    }
    *out = qm;
    return QN_OK;
}

void qn_queue_metrics_free(struct qn_queue_metrics *qm)
{
    if (qm == NULL)
        return;
    if (qm->timer)
        event_free(qm->timer);
    if (qm->walk)
        event_free(qm->walk);
    qn_store_cancel(qm->req);
    qn_store_cancel(qm->walk_req);
    qn_store_free(qm->st);
    chosen_free(qm);
    qn_metrics_off_collect(qm->reg, collect, qm);
    struct qn_fusion_metrics none = {NULL, NULL, NULL};
    if (qm->app->fusion)
        qn_fusion_set_metrics(qm->app->fusion, &none);
    free(qm);
}

void qn_queue_metrics_fusion(const struct qn_queue_metrics *qm, struct qn_fusion_metrics *out)
{
    out->segment_messages = qm->seg_msgs.s;
    out->segment_bytes = qm->seg_bytes.s;
    out->registry = qm->reg;
}
