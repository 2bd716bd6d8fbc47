/*
 * modules.c - the product's module ("queue"): it builds the state one loop's
 * queue services share (struct qn_app, app.h): the storage pool, the
 * compression context and id generator, push fusion, waiters, the wake-up
 * notifier, the pop gate cache, the dedup cache, the maintenance loop, and the
 * queen.v1 method table.
 *
 * Does: start them in dependency order; apply the schema off the loop and
 * retry it with backoff until the database answers (boot_schema.c), so the
 * broker listens at once; report NOT_SERVING (health "", queen.v1.QueueService,
 * queen.v1.AdminService) until the schema is applied and while no database
 * connection is up; tell fusion when the pool is up again (pushes in doubt
 * resolve then); pass the pool's own log lines to the broker log; log a rates
 * line every RATES_INTERVAL_S; refuse new work and answer parked pops at
 * shutdown; tear everything down in reverse once the server is gone.
 * Does not: serve anything itself (the handlers are in rpc/), run a second loop
 * (one app per loop: a multi-loop process makes one per loop).
 *
 * Invariants:
 *   1. Start order: ids, zctx, store, waiters, consume fusion, fusion, dedup cache, notifier,
 *      gates, crypt, methods, the schema attempts; the maintenance loop once the
 *      schema is applied. Stop ends the schema attempts and frees the maintenance
 *      loop first, then the notifier (LISTEN off), crypt (its lookups) and the
 *      store (its pending callbacks still find fusion, waiters and the dedup
 *      cache alive), then those, then the contexts and the method table (the
 *      server that used it is gone).
 *   2. Shutdown marks the app shutting down before waking parked pops, so a
 *      woken pop answers at once instead of parking again.
 *   3. Until app->schema_ready the services answer UNAVAILABLE without touching
 *      the store (rpc/svc.h, qn_svc_refused).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "app.h"
#include "app_stats.h"
#include "boot_schema.h"
#include "config.h"
#include "engine/conn_budget.h"
#include "engine/dedup.h"
#include "engine/fusion.h"
#include "engine/maint_loop.h"
#include "engine/notifier.h"
#include "engine/pop_gate.h"
#include "engine/waiters.h"
#include "engine/cfusion.h"
#include "engine/decode.h"
#include "log.h"
#include "loops.h"
#include "modules.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "queen/store.h"
#include "queue_metrics.h"
#include "rpc/crypt.h"
#include "rpc/methods.h"
#include "rpc/svc_batch.h"
#include "transport/call.h"
#include "transport/health.h"
#include "transport/server.h"
#include "timer.h"

/* Seconds between rate log lines (only written when something moved). */
#define RATES_INTERVAL_S 10

struct queue_module {
    struct qn_app app;
    struct qn_loops *loops; /* the process's loops (loops.h) */
    unsigned worker;        /* this instance's loop */
    unsigned nworkers;
    qn_health *health;
    qn_boot_schema *boot;        /* applies the schema; NULL once it did */
    bool db_up;                  /* the pool has a connection (qn_store_on_state) */
    struct event *rates;         /* periodic rate line */
    struct event *publish;       /* counters for the other loops (app_stats.h); NULL with one */
    struct event *publish_soon;  /* after commits: the same, without the dedup walk */
    struct qn_fusion_stats last; /* fusion counters at the previous line */
    uint64_t last_delivered;
    struct qn_queue_metrics *metrics; /* docs/metrics.md; NULL without a registry */
};

/* One INFO line every RATES_INTERVAL_S when messages moved: what operators read
 * to see segment sizes emerge from load (pushed/s, segments/s, frames/segment). */
static void rates_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct queue_module *m = ud;
    struct qn_fusion_stats now;
    qn_fusion_stats(m->app.fusion, &now);
    uint64_t frames = now.frames - m->last.frames;
    uint64_t segs = now.segments - m->last.segments;
    uint64_t flushes = now.flushes - m->last.flushes;
    uint64_t delivered = m->app.delivered - m->last_delivered;
    if (frames > 0 || delivered > 0)
        QN_INFO("rates pushed_per_s=%llu delivered_per_s=%llu commits_per_s=%llu "
                "segments_per_s=%llu frames_per_segment=%.1f duplicates=%llu",
                (unsigned long long)(frames / RATES_INTERVAL_S),
                (unsigned long long)(delivered / RATES_INTERVAL_S),
                (unsigned long long)(flushes / RATES_INTERVAL_S),
                (unsigned long long)(segs / RATES_INTERVAL_S),
                segs ? (double)frames / (double)segs : 0.0,
                (unsigned long long)(now.duplicates - m->last.duplicates));
    m->last = now;
    m->last_delivered = m->app.delivered;
}

/* This loop's counters, for the other loops' GetStats and /metrics. */
static void publish_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct queue_module *m = ud;
    struct qn_loop_counters c;
    qn_app_counters_own(&m->app, &c);
    qn_loops_publish(m->loops, m->worker, &c);
}

/* After a loop turn with commits: what a scrape or GetStats on another loop
 * sums includes them before the pushes' answers reach their clients. */
static void publish_fast_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct queue_module *m = ud;
    struct qn_loop_counters c;
    qn_app_counters_own_fast(&m->app, &c);
    qn_loops_publish_fast(m->loops, m->worker, &c);
}

/* The queen.v1 services serve once the schema is applied and while the pool
 * has a connection; "" (the broker as a whole) follows them. */
static void set_serving(struct queue_module *m)
{
    bool serving = m->app.schema_ready && m->db_up && !m->app.shutting_down;
    static const char *const names[] = {"", "queen.v1.QueueService", "queen.v1.AdminService"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (qn_health_set_serving(m->health, names[i], serving) != QN_OK)
            QN_WARN("cannot record the health of %s", names[i][0] ? names[i] : "the broker");
}

static void on_store_state(void *ud, bool up)
{
    struct queue_module *m = ud;
    m->db_up = up;
    set_serving(m);
    if (up && m->app.schema_ready)
        QN_INFO("database connected");
    else if (up)
        QN_INFO("database pool connected; waiting for the schema");
    else
        QN_WARN("database unavailable: every pool connection is down (reconnecting)");
    if (up && m->app.fusion)
        qn_fusion_store_up(m->app.fusion); /* pushes in doubt resolve now */
}

/* The pool's settings from the broker's configuration (QUEEN_DB_*). With
 * several workers QUEEN_DB_POOL_SIZE is the process's total, split evenly
 * (rounded up) over the loops, each at least QUEEN_DB_WRITE_RESERVE + 1. */
static void store_config_from(struct qn_store_config *sc, const struct qn_config *cfg,
                              unsigned nworkers)
{
    qn_store_config_defaults(sc);
    sc->conninfo = cfg->database_url;
    int64_t pool = (cfg->db_pool_size + nworkers - 1) / nworkers;
    if (pool <= cfg->db_write_reserve)
        pool = cfg->db_write_reserve + 1;
    sc->pool_size = (int)pool;
    sc->stmt_timeout_ms = (int)cfg->stmt_timeout_ms;
    sc->write_reserve = (int)cfg->db_write_reserve;
    sc->call_timeout_ms = (int)cfg->db_call_timeout_ms;
    sc->cancel_grace_ms = (int)cfg->db_cancel_grace_ms;
    sc->keepalives_idle_s = (int)cfg->db_keepalive_idle_s;
    sc->keepalives_interval_s = (int)cfg->db_keepalive_interval_s;
    sc->keepalives_count = (int)cfg->db_keepalive_count;
    sc->tcp_user_timeout_ms = (int)cfg->db_tcp_user_timeout_ms;
}

/* The storage module's own lines (hung connections, reconnects). */
static void store_log(void *ud, int level, const char *msg)
{
    (void)ud;
    if (level < QN_LOG_DEBUG || level > QN_LOG_ERROR)
        level = QN_LOG_WARN;
    if (level == QN_LOG_DEBUG && !qn_log_enabled(QN_LOG_DEBUG))
        return;
    qn_log((enum qn_log_level)level, "database: %s", msg);
}

/* The maintenance loop on its own session (one per process). */
static int maint_start(struct qn_app *app)
{
    struct qn_maint_config mc;
    qn_maint_config_from(&mc, app->cfg);
    int rc = qn_maint_new(app->base, &mc, app->cfg->database_url, &app->maint);
    if (rc != QN_OK) {
        app->maint = NULL;
        QN_ERROR("cannot set up the maintenance loop: %s", qn_strerror(rc));
        return rc;
    }
    rc = qn_maint_start(app->maint);
    if (rc != QN_OK) {
        QN_ERROR("cannot start the maintenance loop: %s", qn_strerror(rc));
        return rc;
    }
    QN_INFO("maintenance loop every %lld ms batch=%d cleanup=%s", (long long)mc.interval_ms,
            (int)mc.batch_size, mc.cleanup_enabled ? "on" : "off");
    return QN_OK;
}

/* The schema is applied: the services may use the database from now on. */
static void schema_done(void *ud)
{
    struct queue_module *m = ud;
    qn_boot_schema_free(m->boot);
    m->boot = NULL;
    m->app.schema_ready = true;
    set_serving(m);
    if (m->db_up)
        QN_INFO("database connected");
    if (m->worker != 0)
        return; /* one maintenance loop per process: worker 0's */
    if (maint_start(&m->app) != QN_OK)
        QN_ERROR("the broker serves without its maintenance loop (retention, cleanup)");
}

/* A commit on another loop, on its way to this one. */
struct peer_commit {
    struct qn_app *app; /* the receiving loop's */
    uint8_t tenant[16];
    char *queue;
    char *partition;
    struct qn_told told; /* the groups the committing loop told (waiters.h) */
};

static void peer_commit_run(void *arg)
{
    struct peer_commit *pc = arg;
    if (pc->app->notifier != NULL && !pc->app->shutting_down)
        qn_notifier_peer_committed(pc->app->notifier, pc->tenant, pc->queue, pc->partition,
                                   &pc->told);
    free(pc->queue);
    free(pc->partition);
    free(pc);
}

/* Every commit of this loop wakes the waiters of the others (notifier.h). A
 * full inbox drops the hint: that loop's waiters find the data at their next
 * re-check (QUEEN_WAKE_RECHECK_MS); the NOTIFY does not reach them, since a
 * store ignores every NOTIFY this process sent (store_listen.c). */
static void broadcast_commit(void *ud, const uint8_t tenant[16], const char *queue,
                             const char *partition, const struct qn_told *told)
{
    struct queue_module *m = ud;
    if (m->publish_soon != NULL)
        event_active(m->publish_soon, 0, 0); /* once per loop turn, however many commits */
    for (unsigned k = 0; k < m->nworkers; k++) {
        if (k == m->worker)
            continue;
        struct qn_app *peer = qn_loops_module_state(m->loops, k);
        if (peer == NULL)
            continue;
        struct peer_commit *pc = calloc(1, sizeof *pc);
        if (pc == NULL)
            return;
        pc->app = peer;
        pc->told.complete = told->complete;
        pc->told.len = told->len;
        memcpy(pc->told.names, told->names, told->len);
        memcpy(pc->tenant, tenant, 16);
        pc->queue = strdup(queue);
        pc->partition = partition ? strdup(partition) : NULL;
        if (pc->queue == NULL || (partition && pc->partition == NULL) ||
            qn_loops_post(m->loops, k, peer_commit_run, pc) != QN_OK) {
            free(pc->queue);
            free(pc->partition);
            free(pc);
        }
    }
}

/* The transport's admission hook: a call starts while its connection holds
 * fewer than QUEEN_MAX_CONN_DB_CALLS database slots (engine/conn_budget.h). */
static bool admit_call(void *ud, const qn_call *call)
{
    const struct qn_app *app = ud;
    return qn_conn_budget_has_room(app->budget, qn_call_conn_key(call));
}

/* A connection gave a slot back below the limit: its held calls may start. */
static void budget_room(void *ud)
{
    struct qn_app *app = ud;
    if (app->rpc != NULL) /* NULL once the server is gone (queue_stop) */
        qn_rpc_server_admission_room(app->rpc);
}

static int queue_start(struct qn_broker_ctx *ctx, void **state)
{
    struct queue_module *m = calloc(1, sizeof *m);
    if (m == NULL)
        return QN_ENOMEM;
    struct qn_app *app = &m->app;
    const struct qn_config *cfg = ctx->cfg;
    int rc;
    *state = m;
    m->health = ctx->health;
    m->loops = ctx->loops;
    m->worker = ctx->worker;
    m->nworkers = ctx->nworkers < 1 ? 1 : ctx->nworkers;
    app->loops = ctx->loops;
    app->worker = ctx->worker;
    app->offload = ctx->offload;
    app->base = ctx->base;
    app->cfg = cfg;
    app->rpc = ctx->server;
    app->security = ctx->security;
    app->started_ms = qn_store_now_ms();

    if ((rc = qn_uuid7_init(&app->ids)) != QN_OK) {
        QN_ERROR("no source of randomness for ids: %s", qn_strerror(rc));
        return rc;
    }
    if ((rc = qn_zctx_new(&app->zctx)) != QN_OK)
        return rc;

    struct qn_store_config sc;
    store_config_from(&sc, cfg, m->nworkers);
    sc.family = ctx->store_family;
    sc.log = store_log;
    if ((rc = qn_store_new(ctx->base, &sc, &app->store)) != QN_OK) {
        QN_ERROR("cannot set up the database pool: %s", qn_strerror(rc));
        return rc;
    }
    /* SERVING only once the schema is applied and a connection is up */
    set_serving(m);
    qn_store_on_state(app->store, on_store_state, m);

    if ((rc = qn_waiters_new((size_t)cfg->max_parked_pops, &app->waiters)) != QN_OK)
        return rc;
    if (m->nworkers > 1) /* QUEEN_MAX_PARKED_POPS is the process's */
        qn_waiters_share_count(app->waiters, &ctx->loops->parked);
    if ((rc = qn_cfusion_new(app->waiters, 0, &app->cfusion)) != QN_OK)
        return rc;
    qn_cfusion_set_bundling(app->cfusion, cfg->lease_bundle, cfg->ack_bundle);
    if (m->nworkers > 1) /* one loop: its own list of held leases is all there is */
        qn_cfusion_share(app->cfusion, ctx->held);
    if ((rc = qn_conn_budget_new((size_t)cfg->max_conn_db_calls, &app->budget)) != QN_OK)
        return rc;
    /* a call of a connection at QUEEN_MAX_CONN_DB_CALLS waits in the transport */
    qn_conn_budget_on_room(app->budget, budget_room, app);
    if (ctx->server != NULL)
        qn_rpc_server_set_admission(ctx->server, admit_call, app);
    if ((rc = qn_fusion_new(app->base, cfg, app->store, app->zctx, &app->fusion)) != QN_OK)
        return rc;
    if (ctx->offload != NULL &&
        (rc = qn_fusion_set_offload(app->fusion, ctx->offload, (size_t)cfg->offload_min_bytes)) !=
            QN_OK)
        return rc;
    if (ctx->offload != NULL) {
        /* a batch decompressed at once holds its segments whole: up to twice
         * the largest response (a span rarely covers less than half of them) */
        size_t most = 2 * (size_t)cfg->max_send_bytes;
        if (most < (size_t)cfg->offload_min_bytes)
            most = (size_t)cfg->offload_min_bytes;
        if ((rc = qn_decoder_new(ctx->offload, app->base, (size_t)cfg->offload_min_bytes, most,
                                 (size_t)cfg->segment_raw_max, &app->decoder)) != QN_OK)
            return rc;
        qn_cfusion_set_decoder(app->cfusion, app->decoder);
    }
    if (cfg->dedup_cache) {
        struct qn_dedup_config dc;
        /* QUEEN_DEDUP_CACHE_MB is the process's: each loop's shard gets its share */
        size_t mb = (size_t)cfg->dedup_cache_mb / m->nworkers;
        qn_dedup_config_defaults(&dc, (mb < 1 ? 1 : mb) << 20);
        if ((rc = qn_dedup_new(app->base, app->store, &dc, &app->dedup)) != QN_OK)
            return rc;
        struct qn_fusion_dedup_hooks hooks = {qn_dedup_verified, qn_dedup_vouched_for,
                                              qn_dedup_committed, app->dedup};
        qn_fusion_set_dedup(app->fusion, &hooks);
    }
    if ((rc = qn_notifier_new(app->base, app->store, app->waiters, &app->notifier)) != QN_OK) {
        QN_ERROR("cannot listen for other brokers' commits: %s", qn_strerror(rc));
        return rc;
    }
    qn_notifier_set_cfusion(app->notifier, app->cfusion);
    qn_fusion_on_commit(app->fusion, qn_notifier_committed, app->notifier);
    if (m->nworkers > 1 && m->loops != NULL)
        qn_notifier_set_peers(app->notifier, broadcast_commit, m);
    if ((rc = qn_pop_gates_new(&app->gates)) != QN_OK)
        return rc;
    if ((rc = qn_crypt_new(app, &app->crypt)) != QN_OK)
        return rc;
    if ((rc = qn_rpc_methods_register(app)) != QN_OK) {
        QN_ERROR("cannot register the queue services: %s", qn_strerror(rc));
        return rc;
    }
    /* /metrics is worker 0's (it sums every loop's counters: app_stats.h) */
    if (ctx->metrics != NULL && m->worker == 0 &&
        (rc = qn_queue_metrics_new(app, ctx->metrics, &sc, &m->metrics)) != QN_OK) {
        QN_ERROR("cannot set up the queue metrics: %s", qn_strerror(rc));
        return rc;
    }
    if (m->worker > 0 && m->loops != NULL) {
        /* worker 0 started first: its segment histograms count this loop's too */
        const struct queue_module *m0 = qn_loops_module_state(m->loops, 0);
        if (m0 != NULL && m0->metrics != NULL) {
            struct qn_fusion_metrics fm;
            qn_queue_metrics_fusion(m0->metrics, &fm);
            qn_fusion_set_metrics(app->fusion, &fm);
        }
    }
    m->rates = event_new(ctx->base, -1, EV_PERSIST, rates_cb, m);
    if (m->rates == NULL)
        return QN_ENOMEM;
    struct timeval tv = {RATES_INTERVAL_S, 0};
    event_add(m->rates, &tv);
    if (m->nworkers > 1 && m->loops != NULL) {
        qn_loops_set_module_state(m->loops, m->worker, app);
        m->publish = event_new(ctx->base, -1, EV_PERSIST, publish_cb, m);
        m->publish_soon = event_new(ctx->base, -1, 0, publish_fast_cb, m);
        if (m->publish == NULL || m->publish_soon == NULL)
            return QN_ENOMEM;
        qn_timer_after(m->publish, QN_APP_STATS_PUBLISH_MS);
    }
    /* Listening starts now; the schema is applied off the loop, retried until
     * the database answers (schema_done). */
    if ((rc = qn_boot_schema_start(ctx->base, cfg->database_url, cfg->db_start_retry_max_ms,
                                   schema_done, m, &m->boot)) != QN_OK)
        return rc;
    return QN_OK;
}

static void queue_shutdown(void *state)
{
    struct queue_module *m = state;
    m->app.shutting_down = true;
    qn_boot_schema_free(m->boot);
    m->boot = NULL;
    /* parked pops answer now (empty) instead of holding the drain */
    if (m->app.waiters)
        qn_waiters_wake_all(m->app.waiters);
    if (m->app.maint)
        qn_maint_shutdown(m->app.maint);
}

static void queue_stop(void *state)
{
    struct queue_module *m = state;
    if (m == NULL)
        return;
    struct qn_app *app = &m->app;
    app->rpc = NULL; /* the server was freed before the modules stop (module.h) */
    qn_boot_schema_free(m->boot);
    m->boot = NULL;
    qn_maint_free(app->maint);
    app->maint = NULL;
    if (m->rates)
        event_free(m->rates);
    if (m->publish_soon)
        event_free(m->publish_soon);
    if (m->publish) {
        publish_cb(-1, 0, m); /* the last word of this loop's counters */
        event_free(m->publish);
    }
    /* before the store: its collector reads the store's counters */
    qn_queue_metrics_free(m->metrics);
    m->metrics = NULL;
    qn_notifier_free(app->notifier);
    app->notifier = NULL;
    qn_crypt_free(app->crypt); /* cancels its lookups: before the store goes */
    app->crypt = NULL;
    /* pops whose batch it holds finish (an orphaned one releases its lease):
     * before the store goes */
    qn_decoder_free(app->decoder);
    app->decoder = NULL;
    qn_cfusion_set_decoder(app->cfusion, NULL);
    if (app->store) {
        qn_store_on_state(app->store, NULL, NULL);
        qn_store_free(app->store);
        app->store = NULL;
    }
    qn_pop_releases_free(app); /* after the store: none is in flight any more */
    qn_pop_gates_free(app->gates);
    qn_dedup_free(app->dedup);
    qn_fusion_free(app->fusion);
    qn_cfusion_free(app->cfusion);
    qn_waiters_free(app->waiters);
    qn_zctx_free(app->zctx);
    qn_conn_budget_free(app->budget); /* last: every call gave its slot back */
    free(app->methods);
    free(m);
}

const struct qn_broker_module qn_product_modules[] = {
    {"queue", queue_start, queue_shutdown, queue_stop},
    {NULL, NULL, NULL, NULL},
};
