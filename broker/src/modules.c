/*
 * app.c - the product module that owns the queue broker's state (struct
 * qn_app): the storage pool, compression context, id generator, push fusion,
 * waiters, the dedup cache and the queen.v1 services.
 *
 * Does: start them in dependency order, report NOT_SERVING while no database
 * connection is up, refuse new work and answer parked pops at shutdown, and tear
 * everything down in reverse once the server is gone.
 *
 * Invariant: teardown frees the store first (its pending callbacks still find
 * fusion, waiters and the dedup cache alive), then those, then the contexts.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "app.h"
#include "broker.h"
#include "engine/dedup.h"
#include "engine/fusion.h"
#include "transport/health.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "queen/store.h"
#include "rpc/svc.h"
#include "engine/waiters.h"

/* Seconds between rate log lines (only written when something moved). */
#define RATES_INTERVAL_S 10

struct app_module {
    struct qn_app app;
    qn_health *health;
    struct event *rates;           /* periodic rate line */
    struct qn_fusion_stats last;   /* fusion counters at the previous line */
    uint64_t last_delivered;
};

/* One INFO line every RATES_INTERVAL_S when messages moved: what operators read
 * to see segment sizes emerge from load (pushed/s, segments/s, frames/segment). */
static void rates_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct app_module *m = ud;
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

static void on_store_state(void *ud, bool up)
{
    struct app_module *m = ud;
    qn_health_set_all(m->health, up);
    if (up)
        QN_INFO("database connected");
    else
        QN_WARN("database unavailable");
}

int qn_app_start(struct qn_broker_ctx *ctx, void **state)
{
    struct app_module *m = calloc(1, sizeof *m);
    if (m == NULL)
        return QN_ENOMEM;
    struct qn_app *app = &m->app;
    const struct qn_config *cfg = ctx->cfg;
    int rc;
    *state = m;
    m->health = ctx->health;
    app->base = ctx->base;
    app->cfg = cfg;
    app->rpc = ctx->server;
    app->started_ms = qn_store_now_ms();

    if ((rc = qn_uuid7_init(&app->ids)) != QN_OK) {
        QN_ERROR("no source of randomness for ids: %s", qn_strerror(rc));
        return rc;
    }
    if ((rc = qn_zctx_new(&app->zctx)) != QN_OK)
        return rc;

    struct qn_store_config sc;
    qn_store_config_defaults(&sc);
    sc.conninfo = cfg->database_url;
    sc.pool_size = (int)cfg->db_pool_size;
    sc.stmt_timeout_ms = (int)cfg->stmt_timeout_ms;
    if ((rc = qn_store_new(ctx->base, &sc, &app->store)) != QN_OK) {
        QN_ERROR("cannot set up the database pool: %s", qn_strerror(rc));
        return rc;
    }
    /* SERVING only once a connection is up */
    qn_health_set_all(m->health, false);
    qn_store_on_state(app->store, on_store_state, m);

    if ((rc = qn_waiters_new((size_t)cfg->max_parked_pops, &app->waiters)) != QN_OK)
        return rc;
    if ((rc = qn_fusion_new(app, &app->fusion)) != QN_OK)
        return rc;
    if (cfg->dedup_cache) {
        struct qn_dedup_config dc;
        qn_dedup_config_defaults(&dc, (size_t)cfg->dedup_cache_mb << 20);
        if ((rc = qn_dedup_new(app, &dc, &app->dedup)) != QN_OK)
            return rc;
        struct qn_fusion_dedup_hooks hooks = {qn_dedup_verified, qn_dedup_vouched_for,
                                              qn_dedup_committed, app->dedup};
        qn_fusion_set_dedup(app->fusion, &hooks);
    }
    if ((rc = qn_services_register(app)) != QN_OK) {
        QN_ERROR("cannot register the queue services: %s", qn_strerror(rc));
        return rc;
    }
    m->rates = event_new(ctx->base, -1, EV_PERSIST, rates_cb, m);
    if (m->rates == NULL)
        return QN_ENOMEM;
    struct timeval tv = {RATES_INTERVAL_S, 0};
    event_add(m->rates, &tv);
    return QN_OK;
}

void qn_app_shutdown(void *state)
{
    struct app_module *m = state;
    m->app.shutting_down = true;
    /* parked pops answer now (empty) instead of holding the drain */
    if (m->app.waiters)
        qn_waiters_wake_all(m->app.waiters);
}

void qn_app_stop(void *state)
{
    struct app_module *m = state;
    if (m == NULL)
        return;
    struct qn_app *app = &m->app;
    if (m->rates)
        event_free(m->rates);
    if (app->store) {
        qn_services_shutdown(app);
        qn_store_on_state(app->store, NULL, NULL);
        qn_store_free(app->store);
        app->store = NULL;
    }
    qn_dedup_free(app->dedup);
    qn_fusion_free(app->fusion);
    qn_waiters_free(app->waiters);
    qn_zctx_free(app->zctx);
    free(m);
}
