/*
 * engine/maint_loop.c - the maintenance loop of the retention seed (003): every
 * RETENTION_INTERVAL ms one cycle on one dedicated database session.
 *
 * A cycle:
 *   1. pg_try_advisory_lock(737001); not obtained -> the cycle is skipped (another
 *      broker sweeps this one);
 *   2. one database now(): every cutoff of the cycle derives from it;
 *   3. phases 1 retention, 2 hash-sidecar purge, 3 max-wait eviction: fetch the
 *      phase's work list (at most worklist_limit partitions, oldest first), call
 *      the phase's step for each partition with batch_size rows until it reports
 *      done, fetch again while the list came back full and the pass deleted
 *      something;
 *   4. partition cleanup, when enabled and not run within cleanup_period_ms,
 *      stepped until done;
 *   5. the metrics purge; its failure is logged and swallowed;
 *   6. when something was deleted, the number of distinct queues touched (for
 *      the log line); then the unlock.
 * One INFO line when the cycle deleted segments, sidecar rows or partitions,
 * DEBUG otherwise.
 *
 * Does not: wrap anything in a transaction (each call autocommits, each step
 * holds one partition lock for its own batch only); run two calls at once; block
 * the loop (every call is asynchronous); retry a failed cycle early (the next one
 * comes at the normal interval).
 *
 * Lifecycle of the loop (enum state; the one call in flight is m->req):
 *
 *   IDLE --timer / run_once--> LOCKING
 *   LOCKING --lock busy--> IDLE (skipped)      LOCKING --error--> IDLE (failed)
 *   LOCKING --locked--> CLOCK --now--> LISTING(phase 1)
 *   LISTING --rows--> STEPPING --done, next item--> STEPPING
 *   STEPPING --list exhausted, full and progress--> LISTING (same phase)
 *   STEPPING/LISTING --phase over--> LISTING(phase + 1) | CLEANUP | METRICS
 *   CLEANUP --done--> METRICS --> COUNTING | UNLOCKING
 *   COUNTING --> UNLOCKING --> IDLE
 *   any state after LOCKING --error--> UNLOCKING (or IDLE when the session is gone)
 *   any --qn_maint_shutdown--> IDLE with m->shut (nothing is scheduled again)
 *
 * Invariants:
 *   1. At most one call is in flight (m->req), so the session runs the cycle's
 *      statements strictly in order and cycles never overlap: the next cycle is
 *      scheduled only when the previous one has ended.
 *   2. m->held counts the lock acquisitions not yet released on the current
 *      session. Every exit path after a successful lock goes through UNLOCKING
 *      while held > 0 and the session is the one that took it; a lost session
 *      releases the lock by itself (held becomes 0).
 *   3. After the lock, no call is sent once the store has reconnected (the new
 *      session does not hold the lock): the cycle ends with QN_EUNAVAILABLE.
 *   4. Every buffer has a hard maximum fixed at qn_maint_new: the work list
 *      (worklist_limit items) and the touched-partition list (TOUCHED_MAX).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "log.h"
#include "engine/maint_loop.h"
#include "queen/error.h"
#include "queen/store.h"
#include "timer.h"

#define WORKLIST_LIMIT_MAX 100000
#define TOUCHED_MAX 65536 /* partitions remembered per cycle for the queues= figure */
#define US_PER_DAY (86400LL * 1000000LL)

enum state {
    M_IDLE,
    M_LOCKING,
    M_CLOCK,
    M_LISTING,
    M_STEPPING,
    M_CLEANUP,
    M_METRICS,
    M_COUNTING,
    M_UNLOCKING,
};

struct cycle {
    int64_t started_ms;     /* qn_store_now_ms() at the start */
    int64_t now_us;         /* the database's now(), the cycle's one clock */
    int phase;              /* 1..3 while LISTING/STEPPING */
    size_t n;               /* items in the current work list, <= worklist_limit */
    size_t idx;             /* item being stepped, < n while STEPPING */
    bool item_touched;      /* items[idx] deleted something (its pid is recorded) */
    bool list_full;         /* the current list came back with worklist_limit rows */
    bool pass_progress;     /* a step of the current list deleted something */
    uint32_t phase_fetches; /* work-list calls of the current phase */
    size_t ntouched;        /* pids in m->touched, <= TOUCHED_MAX */
    bool touched_overflow;  /* more partitions deleted from than TOUCHED_MAX: queues is
                               then a lower bound (counted over the first TOUCHED_MAX) */
    const char *failed_at;  /* stage of the first error, NULL if none */
    char detail[256];       /* its message from the database */
    struct qn_maint_cycle res;
    qn_maint_done_cb cb; /* run_once's completion, NULL for timer cycles */
    void *ud;
};

struct qn_maint {
    struct event_base *base;
    struct qn_maint_config cfg;
    qn_store *st;        /* pool_size 1: the session that holds the lock */
    struct event *timer; /* next periodic cycle; pending only in M_IDLE */
    enum state state;
    bool periodic;               /* qn_maint_start was called and not shut down */
    bool shut;                   /* qn_maint_shutdown was called: terminal */
    qn_store_req *req;           /* the one call in flight, NULL in M_IDLE */
    int held;                    /* lock acquisitions not released on this session */
    uint64_t session;            /* store reconnect count when held became > 0 */
    int64_t last_cleanup_ms;     /* qn_store_now_ms() of the last cleanup, 0 = never */
    struct qn_maint_item *items; /* the current work list, worklist_limit entries */
    uint8_t (*touched)[16];      /* partitions that had rows deleted this cycle */
    struct qn_maint_stats stats;
    struct cycle c;
};

static void phase_begin(qn_maint *m, int phase);
static void step_next(qn_maint *m);
static void cleanup_begin(qn_maint *m);
static void metrics_begin(qn_maint *m);
static void count_begin(qn_maint *m);
static void unlock_begin(qn_maint *m);
static void cycle_end(qn_maint *m);

/* ---------------------------------------------------------------- helpers */

static uint64_t reconnects(const qn_maint *m)
{
    struct qn_store_stats s;
    qn_store_get_stats(m->st, &s);
    return s.reconnects;
}

/* The session that took the lock is still the store's session (invariant 3). */
static bool session_ok(qn_maint *m)
{
    if (m->held > 0 && reconnects(m) != m->session) {
        m->held = 0; /* the lost session released it */
        return false;
    }
    return true;
}

static void fail(qn_maint *m, int code, const char *where, const char *detail)
{
    if (m->c.failed_at == NULL) {
        m->c.res.code = code;
        m->c.failed_at = where;
        snprintf(m->c.detail, sizeof m->c.detail, "%s", detail ? detail : "");
    }
}

/* Error after the lock was taken: release it and end. */
static void abort_cycle(qn_maint *m, int code, const char *where, const char *detail)
{
    fail(m, code, where, detail);
    unlock_begin(m);
}

/* A call's outcome; true when the cycle may go on. */
static bool call_ok(qn_maint *m, const struct qn_store_status *st, const char *where)
{
    m->req = NULL;
    if (st->code == QN_OK)
        return true;
    abort_cycle(m, st->code, where, st->message);
    return false;
}

/* Before every call after the lock: the session must still be ours. */
static bool may_send(qn_maint *m)
{
    if (session_ok(m))
        return true;
    fail(m, QN_EUNAVAILABLE, "session", "the maintenance session was lost");
    cycle_end(m);
    return false;
}

static void touch(qn_maint *m, const uint8_t pid[16])
{
    if (m->c.item_touched)
        return;
    m->c.item_touched = true;
    if (m->c.ntouched == TOUCHED_MAX) {
        m->c.touched_overflow = true;
        return;
    }
    memcpy(m->touched[m->c.ntouched++], pid, 16);
}

static uint64_t deleted_total(const struct qn_maint_cycle *r)
{
    uint64_t t = 0;
    for (int k = 0; k < QN_MAINT_NKINDS; k++)
        t += r->deleted[k];
    return t;
}

/* ---------------------------------------------------------------- lock and clock */

static void on_now(void *ud, const struct qn_store_status *st, int64_t value)
{
    qn_maint *m = ud;
    assert(m->state == M_CLOCK);
    if (!call_ok(m, st, "clock"))
        return;
    m->c.now_us = value;
    phase_begin(m, 1);
}

static void on_lock(void *ud, const struct qn_store_status *st, bool value)
{
    qn_maint *m = ud;
    assert(m->state == M_LOCKING);
    m->req = NULL;
    if (st->code != QN_OK) {
        fail(m, st->code, "lock", st->message);
        cycle_end(m);
        return;
    }
    if (!value) {
        m->c.res.skipped = true;
        cycle_end(m);
        return;
    }
    (void)session_ok(m); /* drops a count owed by a session lost meanwhile */
    if (m->held == 0)
        m->session = reconnects(m);
    m->held++;
    m->stats.cycles_run++;
    m->state = M_CLOCK;
    int rc = qn_store_db_now(m->st, NULL, on_now, m, &m->req);
    if (rc != QN_OK)
        abort_cycle(m, rc, "clock", NULL);
}

/* Starts a cycle: the lock call. On an immediate refusal nothing changed (state
 * stays IDLE) and the code is returned. */
static int cycle_begin(qn_maint *m, qn_maint_done_cb cb, void *ud)
{
    assert(m->state == M_IDLE && m->req == NULL);
    int rc = qn_store_try_advisory_lock(m->st, QN_MAINT_LOCK_KEY, NULL, on_lock, m, &m->req);
    if (rc != QN_OK) {
        m->req = NULL;
        return rc;
    }
    memset(&m->c, 0, sizeof m->c);
    m->c.started_ms = qn_store_now_ms();
    m->c.res.metrics_purged = -1;
    m->c.res.queues = -1;
    m->c.cb = cb;
    m->c.ud = ud;
    m->state = M_LOCKING;
    return QN_OK;
}

/* ---------------------------------------------------------------- phases 1-3 */

static const char *const phase_names[4] = {"", "retention", "sidecar purge", "max-wait eviction"};
static const enum qn_maint_kind phase_kinds[4] = {QN_MAINT_RETENTION, QN_MAINT_RETENTION,
                                                  QN_MAINT_TXNS_PURGE, QN_MAINT_MAX_WAIT};

static void on_list(void *ud, const struct qn_store_status *st, const struct qn_maint_list *l)
{
    qn_maint *m = ud;
    assert(m->state == M_LISTING);
    if (!call_ok(m, st, phase_names[m->c.phase]))
        return;
    size_t cap = (size_t)m->cfg.worklist_limit;
    size_t n = l->n < cap ? l->n : cap; /* the procedure honours the limit; trust nothing */
    memcpy(m->items, l->items, n * sizeof *m->items);
    m->c.n = n;
    m->c.idx = 0;
    m->c.item_touched = false;
    m->c.list_full = n == cap;
    m->c.pass_progress = false;
    m->c.res.worklist_rows[m->c.phase - 1] += n;
    m->stats.worklist_rows[m->c.phase - 1] += n;
    m->state = M_STEPPING;
    step_next(m);
}

static void list_fetch(qn_maint *m)
{
    if (!may_send(m))
        return;
    m->state = M_LISTING;
    m->c.phase_fetches++;
    m->c.res.fetches++;
    m->stats.worklist_fetches++;
    int rc = qn_store_maint_worklist(m->st, m->c.now_us, m->c.phase, m->cfg.worklist_limit, NULL,
                                     on_list, m, &m->req);
    if (rc != QN_OK)
        abort_cycle(m, rc, phase_names[m->c.phase], NULL);
}

static void phase_begin(qn_maint *m, int phase)
{
    if (phase > 3) {
        cleanup_begin(m);
        return;
    }
    m->c.phase = phase;
    m->c.phase_fetches = 0;
    list_fetch(m);
}

static void on_step(void *ud, const struct qn_store_status *st, const struct qn_maint_step *r)
{
    qn_maint *m = ud;
    assert(m->state == M_STEPPING && m->c.idx < m->c.n);
    if (!call_ok(m, st, phase_names[m->c.phase]))
        return;
    enum qn_maint_kind k = phase_kinds[m->c.phase];
    uint64_t d = r->deleted > 0 ? (uint64_t)r->deleted : 0;
    uint64_t f = (k != QN_MAINT_TXNS_PURGE && r->frames > 0) ? (uint64_t)r->frames : 0;
    m->c.res.steps[k]++;
    m->stats.steps[k]++;
    m->c.res.deleted[k] += d;
    m->stats.deleted[k] += d;
    m->c.res.frames += f;
    m->stats.frames += f;
    if (d > 0) {
        m->c.pass_progress = true;
        touch(m, m->items[m->c.idx].pid);
    }
    /* a step that deleted nothing is done whatever it says: never spin on it */
    if (!(d > 0 && !r->done)) {
        m->c.idx++;
        m->c.item_touched = false;
    }
    step_next(m);
}

/* Sends the step for items[idx], or moves on when the list is exhausted. */
static void step_next(qn_maint *m)
{
    for (;;) {
        if (m->c.idx == m->c.n) {
            /* Fetch again only while the list was full AND the pass deleted
             * something: partitions that are listed but cannot be trimmed (rule 2
             * pinned by an unconsumed cursor) would otherwise come back forever. */
            if (m->c.list_full && m->c.pass_progress &&
                m->c.phase_fetches < (uint32_t)m->cfg.max_fetches) {
                list_fetch(m);
                return;
            }
            if (m->c.list_full)
                QN_DEBUG("retention %s: work list still full after %u fetches",
                         phase_names[m->c.phase], m->c.phase_fetches);
            phase_begin(m, m->c.phase + 1);
            return;
        }
        const struct qn_maint_item *it = &m->items[m->c.idx];
        if (m->c.phase != 1 && it->cutoff_us == QN_STORE_NO_TS) {
            m->c.idx++; /* no rule applies (the procedure never lists such a row) */
            continue;
        }
        break;
    }
    if (!may_send(m))
        return;
    const struct qn_maint_item *it = &m->items[m->c.idx];
    int32_t rows = m->cfg.batch_size;
    int rc;
    switch (m->c.phase) {
    case 1:
        rc = qn_store_retention_step(m->st, it->pid, it->all_cutoff_us, it->completed_cutoff_us,
                                     rows, NULL, on_step, m, &m->req);
        break;
    case 2:
        rc = qn_store_txns_purge_step(m->st, it->pid, it->cutoff_us, rows, NULL, on_step, m,
                                      &m->req);
        break;
    default:
        rc = qn_store_evict_max_wait_step(m->st, it->pid, it->cutoff_us, rows, NULL, on_step, m,
                                          &m->req);
        break;
    }
    if (rc != QN_OK)
        abort_cycle(m, rc, phase_names[m->c.phase], NULL);
}

/* ---------------------------------------------------------------- cleanup, metrics */

static void on_cleanup(void *ud, const struct qn_store_status *st, const struct qn_maint_step *r)
{
    qn_maint *m = ud;
    assert(m->state == M_CLEANUP);
    if (!call_ok(m, st, "partition cleanup"))
        return;
    uint64_t d = r->deleted > 0 ? (uint64_t)r->deleted : 0;
    m->c.res.steps[QN_MAINT_CLEANUP]++;
    m->stats.steps[QN_MAINT_CLEANUP]++;
    m->c.res.deleted[QN_MAINT_CLEANUP] += d;
    m->stats.deleted[QN_MAINT_CLEANUP] += d;
    if (d > 0 && !r->done)
        cleanup_begin(m);
    else
        metrics_begin(m);
}

static void cleanup_begin(qn_maint *m)
{
    int64_t now = qn_store_now_ms();
    if (m->state != M_CLEANUP) {
        bool due = m->cfg.cleanup_enabled && (m->last_cleanup_ms == 0 ||
                                              now - m->last_cleanup_ms >= m->cfg.cleanup_period_ms);
        if (!due) {
            metrics_begin(m);
            return;
        }
        m->last_cleanup_ms = now > 0 ? now : 1;
        m->c.res.cleanup_ran = true;
    }
    if (!may_send(m))
        return;
    m->state = M_CLEANUP;
    int64_t cutoff = m->c.now_us - m->cfg.cleanup_days * US_PER_DAY;
    int rc = qn_store_partition_cleanup_step(m->st, cutoff, m->cfg.batch_size, NULL, on_cleanup, m,
                                             &m->req);
    if (rc != QN_OK)
        abort_cycle(m, rc, "partition cleanup", NULL);
}

static void on_metrics(void *ud, const struct qn_store_status *st, int64_t value)
{
    qn_maint *m = ud;
    assert(m->state == M_METRICS);
    m->req = NULL;
    /* Swallowed: the deletes before it have committed statement by statement. */
    if (st->code != QN_OK) {
        m->stats.metrics_failures++;
        QN_WARN("metrics purge failed: %s detail=%s", qn_strerror(st->code), st->message);
    } else {
        m->c.res.metrics_purged = value;
        m->stats.metrics_purged += value > 0 ? (uint64_t)value : 0;
    }
    count_begin(m);
}

static void metrics_begin(qn_maint *m)
{
    if (!may_send(m))
        return;
    m->state = M_METRICS;
    int64_t cutoff = m->c.now_us - m->cfg.metrics_days * US_PER_DAY;
    int rc = qn_store_metrics_purge(m->st, cutoff, NULL, on_metrics, m, &m->req);
    if (rc != QN_OK) {
        m->req = NULL;
        m->stats.metrics_failures++;
        QN_WARN("metrics purge failed: %s", qn_strerror(rc));
        count_begin(m);
    }
}

/* ---------------------------------------------------------------- log figure, unlock */

static void on_count(void *ud, const struct qn_store_status *st, int64_t value)
{
    qn_maint *m = ud;
    assert(m->state == M_COUNTING);
    m->req = NULL;
    if (st->code == QN_OK)
        m->c.res.queues = value;
    else
        QN_DEBUG("retention: cannot count queues: %s", qn_strerror(st->code));
    unlock_begin(m);
}

/* Only a cycle that deleted segments or sidecar rows asks (idle cycles cost
 * nothing extra); cleanup alone leaves nothing to look up (its partitions are
 * gone). */
static void count_begin(qn_maint *m)
{
    if (m->c.ntouched == 0) {
        m->c.res.queues = 0;
        unlock_begin(m);
        return;
    }
    if (!may_send(m))
        return;
    m->state = M_COUNTING;
    int rc = qn_store_count_queues_of(m->st, (const uint8_t(*)[16])m->touched, m->c.ntouched, NULL,
                                      on_count, m, &m->req);
    if (rc != QN_OK) {
        m->req = NULL;
        unlock_begin(m);
    }
}

static void on_unlock(void *ud, const struct qn_store_status *st, bool value)
{
    qn_maint *m = ud;
    assert(m->state == M_UNLOCKING);
    m->req = NULL;
    if (st->code != QN_OK) {
        /* Still held if the session survived: the next cycle's end retries
         * (session_ok drops the count when the session was lost meanwhile). */
        if (session_ok(m))
            QN_WARN("cannot release the maintenance lock: %s detail=%s", qn_strerror(st->code),
                    st->message);
        fail(m, st->code, "unlock", st->message);
        cycle_end(m);
        return;
    }
    if (value)
        m->held--;
    else
        m->held = 0; /* not ours any more (cannot happen on a live session) */
    unlock_begin(m);
}

static void unlock_begin(qn_maint *m)
{
    if (m->held == 0 || !session_ok(m)) {
        cycle_end(m);
        return;
    }
    m->state = M_UNLOCKING;
    int rc = qn_store_advisory_unlock(m->st, QN_MAINT_LOCK_KEY, NULL, on_unlock, m, &m->req);
    if (rc != QN_OK) {
        m->req = NULL;
        fail(m, rc, "unlock", NULL);
        cycle_end(m);
    }
}

/* ---------------------------------------------------------------- end, schedule */

static void schedule(qn_maint *m)
{
    if (!m->periodic || m->shut || m->state != M_IDLE)
        return;
    qn_timer_after(m->timer, m->cfg.interval_ms);
}

static void log_cycle(qn_maint *m)
{
    const struct qn_maint_cycle *r = &m->c.res;
    if (r->skipped) {
        QN_DEBUG("retention skipped: lock %d held by another broker", QN_MAINT_LOCK_KEY);
        return;
    }
    /* INFO only when something was deleted (even by a cycle that failed later);
     * an idle cycle is DEBUG, a failed idle one only its WARN */
    bool deleted = deleted_total(r) > 0;
    enum qn_log_level lvl = deleted ? QN_LOG_INFO : QN_LOG_DEBUG;
    if ((deleted || m->c.failed_at == NULL) && qn_log_enabled(lvl))
        qn_log(lvl,
               "retention swept queues=%lld segments_deleted=%llu txns_purged=%llu "
               "max_wait_evicted=%llu partitions_deleted=%llu metrics_purge=%lld elapsed_ms=%lld",
               (long long)r->queues, (unsigned long long)r->deleted[QN_MAINT_RETENTION],
               (unsigned long long)r->deleted[QN_MAINT_TXNS_PURGE],
               (unsigned long long)r->deleted[QN_MAINT_MAX_WAIT],
               (unsigned long long)r->deleted[QN_MAINT_CLEANUP], (long long)r->metrics_purged,
               (long long)r->elapsed_ms);
    if (m->c.failed_at != NULL && r->code != QN_ESHUTDOWN)
        QN_WARN("retention cycle failed at %s: %s detail=%s", m->c.failed_at, qn_strerror(r->code),
                m->c.detail);
}

/* The cycle is over (every call answered or abandoned): account, log, report,
 * schedule the next one. */
static void cycle_end(qn_maint *m)
{
    m->state = M_IDLE;
    m->req = NULL;
    m->c.res.elapsed_ms = qn_store_now_ms() - m->c.started_ms;
    if (m->c.res.skipped)
        m->stats.cycles_skipped++;
    if (m->c.res.code != QN_OK)
        m->stats.cycles_failed++;
    log_cycle(m);
    qn_maint_done_cb cb = m->c.cb;
    m->c.cb = NULL;
    if (cb)
        cb(m->c.ud, &m->c.res); /* may start the next cycle itself */
    schedule(m);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    qn_maint *m = arg;
    if (m->shut || m->state != M_IDLE)
        return;
    int rc = cycle_begin(m, NULL, NULL);
    if (rc != QN_OK) {
        m->stats.cycles_failed++;
        QN_DEBUG("retention cycle not started: %s", qn_strerror(rc));
        schedule(m);
    }
}

/* ---------------------------------------------------------------- public */

void qn_maint_config_from(struct qn_maint_config *mc, const struct qn_config *cfg)
{
    memset(mc, 0, sizeof *mc);
    mc->interval_ms = cfg->retention_interval_ms;
    mc->batch_size = (int32_t)cfg->retention_batch_size;
    int64_t limit = cfg->retention_batch_size * 5;
    mc->worklist_limit = (int32_t)(limit > WORKLIST_LIMIT_MAX ? WORKLIST_LIMIT_MAX : limit);
    mc->max_fetches = 1000;
    mc->cleanup_enabled = cfg->partition_cleanup_enabled;
    mc->cleanup_days = cfg->partition_cleanup_days;
    mc->cleanup_period_ms = 60000;
    mc->metrics_days = cfg->metrics_retention_days;
    mc->stmt_timeout_ms = (int)cfg->stmt_timeout_ms;
}

static bool config_ok(const struct qn_maint_config *c)
{
    return c->interval_ms > 0 && c->batch_size >= 1 && c->worklist_limit >= 1 &&
           c->worklist_limit <= WORKLIST_LIMIT_MAX && c->max_fetches >= 1 && c->cleanup_days >= 1 &&
           c->cleanup_days <= 36500 && c->cleanup_period_ms >= 0 && c->metrics_days >= 1 &&
           c->metrics_days <= 36500 && c->stmt_timeout_ms > 0;
}

int qn_maint_new(struct event_base *base, const struct qn_maint_config *cfg, const char *conninfo,
                 qn_maint **out)
{
    if (base == NULL || cfg == NULL || conninfo == NULL || out == NULL || !config_ok(cfg))
        return QN_EINVAL;
    int rc = QN_ENOMEM;
    qn_maint *m = calloc(1, sizeof *m);
    if (m == NULL)
        goto out;
    m->base = base;
    m->cfg = *cfg;
    m->items = calloc((size_t)cfg->worklist_limit, sizeof *m->items);
    m->touched = calloc(TOUCHED_MAX, sizeof *m->touched);
    m->timer = evtimer_new(base, on_timer, m);
    if (m->items == NULL || m->touched == NULL || m->timer == NULL)
        goto out;
    struct qn_store_config sc;
    qn_store_config_defaults(&sc);
    sc.conninfo = conninfo;
    sc.pool_size = 1;      /* one session: the lock and every step share it */
    sc.pipeline_depth = 1; /* one call at a time anyway (invariant 1) */
    sc.stmt_timeout_ms = cfg->stmt_timeout_ms;
    sc.max_waiting = 16;
    rc = qn_store_new(base, &sc, &m->st);
    if (rc != QN_OK)
        goto out;
    *out = m;
    m = NULL;
out:
    qn_maint_free(m);
    return rc;
}

int qn_maint_start(qn_maint *m)
{
    if (m->shut)
        return QN_ESHUTDOWN;
    if (!m->periodic) {
        m->periodic = true;
        schedule(m);
    }
    return QN_OK;
}

int qn_maint_run_once(qn_maint *m, qn_maint_done_cb cb, void *ud)
{
    if (m->shut)
        return QN_ESHUTDOWN;
    if (m->state != M_IDLE)
        return QN_EBUSY;
    int rc = cycle_begin(m, cb, ud);
    if (rc == QN_OK)
        evtimer_del(m->timer); /* rescheduled when this cycle ends */
    return rc;
}

bool qn_maint_is_running(const qn_maint *m)
{
    return m->state != M_IDLE;
}

void qn_maint_get_stats(const qn_maint *m, struct qn_maint_stats *out)
{
    *out = m->stats;
}

qn_store *qn_maint_store(qn_maint *m)
{
    return m->st;
}

static void on_final_unlock(void *ud, const struct qn_store_status *st, bool value)
{
    (void)ud;
    (void)value;
    if (st->code != QN_OK && st->code != QN_ESHUTDOWN)
        QN_DEBUG("maintenance lock not released at shutdown: %s (the session end releases it)",
                 qn_strerror(st->code));
}

void qn_maint_shutdown(qn_maint *m)
{
    if (m == NULL || m->shut)
        return;
    m->shut = true;
    m->periodic = false;
    if (m->timer)
        evtimer_del(m->timer);
    if (m->st == NULL)
        return;
    if (m->req != NULL) {
        qn_store_cancel(m->req); /* its callback never runs */
        m->req = NULL;
    }
    /* Release now rather than when the session closes at stop: the other brokers
     * may sweep while this one drains. Queued behind the cancelled call. */
    if (m->held > 0 && session_ok(m)) {
        for (int i = 0; i < m->held; i++)
            qn_store_advisory_unlock(m->st, QN_MAINT_LOCK_KEY, NULL, on_final_unlock, NULL, NULL);
        m->held = 0;
    }
    if (m->state != M_IDLE) {
        fail(m, QN_ESHUTDOWN, "shutdown", NULL);
        cycle_end(m);
    }
}

void qn_maint_free(qn_maint *m)
{
    if (m == NULL)
        return;
    qn_maint_shutdown(m);
    qn_store_free(m->st); /* closes the session: releases anything still held */
    if (m->timer)
        event_free(m->timer);
    free(m->items);
    free(m->touched);
    free(m);
}
