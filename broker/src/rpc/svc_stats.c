/*
 * rpc/svc_stats.c - AdminService.GetStats: per-queue figures from the database
 * and this broker's own counters (RPCs, messages pushed and delivered, fusion,
 * the dedup cache, the maintenance loop).
 *
 * With auth on, the per-queue figures cover only the queues the caller's admin
 * grants cover (its tenant's), and the broker's own counters (shared by every
 * tenant) are reported only to a caller with an admin grant on every queue
 * ("admin:*"); others get zeros there.
 * The broker's counters are the sum of its event loops' (app_stats.h).
 * Does not: aggregate other brokers' counters (each broker reports its own).
 */
#include <string.h>

#include "app.h"
#include "app_stats.h"
#include "engine/dedup.h"
#include "engine/fusion.h"
#include "engine/maint_loop.h"
#include "queen/error.h"
#include "queen/v1/admin.pb-c.h"
#include "rpc/admin_call.h"
#include "rpc/authz.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

/* ---------------------------------------------------------------- GetStats */

struct stats_call {
    struct qn_admin_call a; /* first: the admin helpers take &s->a */
    bool all;               /* the caller may see every queue and the broker's counters */
};

static void stats_done(void *ud, const struct qn_store_status *st, const struct qn_stats_result *r)
{
    struct qn_admin_call *a = ud;
    bool all = ((struct stats_call *)a)->all;
    if (!qn_admin_ok(a, st))
        return;
    Queen__V1__GetStatsResponse resp = QUEEN__V1__GET_STATS_RESPONSE__INIT;
    resp.queues = qn_arena_alloc(&a->arena, (r->n ? r->n : 1) * sizeof *resp.queues);
    for (size_t i = 0; resp.queues && i < r->n; i++) {
        const struct qn_stats_row *row = &r->rows[i];
        if (!all && !qn_authz_may(a->call, QN_SCOPE_ADMIN, row->queue))
            continue;
        Queen__V1__QueueStats *q = qn_arena_alloc(&a->arena, sizeof *q);
        if (q == NULL) {
            resp.queues = NULL;
            break;
        }
        queen__v1__queue_stats__init(q);
        q->queue = qn_arena_strndup(&a->arena, row->queue, strlen(row->queue));
        q->partitions = row->partitions < 0 ? 0 : (uint32_t)row->partitions;
        q->messages = row->messages;
        q->segments = row->segments;
        q->pending = row->pending;
        q->dead_letters = row->dead_letters;
        q->consumer_groups = row->groups < 0 ? 0 : (uint32_t)row->groups;
        q->bytes = row->bytes;
        resp.total_messages += row->messages;
        resp.total_pending += row->pending;
        resp.total_dead_letters += row->dead_letters;
        resp.queues[resp.n_queues++] = q;
    }
    if (resp.queues == NULL) {
        qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    if (!all) {
        qn_admin_reply(a, &resp.base); /* the broker's counters are every tenant's */
        return;
    }
    resp.uptime_seconds = (qn_store_now_ms() - a->app->started_ms) / 1000;
    /* every loop's counters (app_stats.h) */
    struct qn_loop_counters c;
    qn_app_counters_all(a->app, &c);
    resp.rpcs = (int64_t)c.rpcs;
    resp.pushed = (int64_t)(c.pushed + c.fusion.committed);
    resp.delivered = (int64_t)c.delivered;
    resp.push_commits = (int64_t)c.fusion.flushes;
    resp.push_segments = (int64_t)c.fusion.segments;
    if (a->app->dedup != NULL) {
        resp.dedup_partitions = (int64_t)c.dedup.entries;
        resp.dedup_vouching = (int64_t)c.dedup.vouching;
        resp.dedup_hashes = (int64_t)c.dedup.hashes;
        resp.dedup_bytes = (int64_t)c.dedup.bytes;
        resp.dedup_vouched = (int64_t)c.dedup.vouched;
        resp.dedup_declined = (int64_t)c.dedup.declined;
        resp.dedup_suppressed = (int64_t)c.dedup.suppressed;
    }
    resp.maint_cycles = (int64_t)c.maint.cycles_run;
    resp.maint_skipped = (int64_t)c.maint.cycles_skipped;
    resp.maint_segments_deleted =
        (int64_t)(c.maint.deleted[QN_MAINT_RETENTION] + c.maint.deleted[QN_MAINT_MAX_WAIT]);
    resp.maint_txns_purged = (int64_t)c.maint.deleted[QN_MAINT_TXNS_PURGE];
    resp.maint_partitions_deleted = (int64_t)c.maint.deleted[QN_MAINT_CLEANUP];
    qn_admin_reply(a, &resp.base);
}

void qn_svc_get_stats(qn_call *call, ProtobufCMessage *msg)
{
    struct stats_call *sc = (struct stats_call *)qn_admin_new(call, msg, sizeof *sc);
    if (sc == NULL)
        return;
    struct qn_admin_call *a = &sc->a;
    Queen__V1__GetStatsRequest *req = (Queen__V1__GetStatsRequest *)msg;
    if (!qn_admin_check_name(a, req->queue, "queue", true))
        return;
    struct qn_authz_names names;
    int all = qn_admin_reach(a, &names); /* rows are filtered in stats_done */
    if (all < 0)
        return;
    qn_authz_names_free(&names);
    sc->all = all == 1;
    if (req->queue && *req->queue && !qn_admin_authorize(a, req->queue))
        return;
    qn_app_counters_refresh(a->app); /* the other loops publish while the database answers */
    struct qn_call_opts opts = qn_admin_opts(a);
    qn_admin_sent(a, qn_store_stats(a->app->store, req->queue, &opts, stats_done, a, &a->sreq[0]));
}
