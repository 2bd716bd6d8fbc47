/*
 * app_stats.c - a loop's counters and the process's sums (see app_stats.h).
 *
 * Does: read one app's counters (its own, fusion's, the dedup cache's, the
 * pool's, the maintenance loop's), add two sets field by field, and sum the
 * process's from the live set of the calling loop and the published snapshots
 * of the others. Does not: publish (modules.c does, on a timer), or read
 * another loop's engines (never: only their snapshots, under the loops' lock).
 */
#include <string.h>

#include "app_stats.h"
#include "engine/waiters.h"

#define ADD(f) acc->f += c->f

static void add_fusion(struct qn_fusion_stats *acc, const struct qn_fusion_stats *c)
{
    ADD(flushes);
    ADD(segments);
    ADD(frames);
    ADD(duplicates);
    ADD(committed);
    ADD(inflight);
    ADD(pending_bytes);
    ADD(in_doubt);
    ADD(resolves);
    ADD(resolved_committed);
    ADD(doubt_now);
    ADD(doubt_failed);
    ADD(committed_bytes);
}

static void add_dedup(struct qn_dedup_stats *acc, const struct qn_dedup_stats *c)
{
    ADD(entries);
    ADD(vouching);
    ADD(suppressed);
    ADD(bytes);
    ADD(hashes);
    ADD(hydrations);
    ADD(catchups);
    ADD(evictions);
    ADD(vouched);
    ADD(declined);
    ADD(local_hits);
}

static void add_store(struct qn_store_stats *acc, const struct qn_store_stats *c)
{
    ADD(calls);
    ADD(statements);
    ADD(round_trips);
    ADD(retries);
    ADD(reconnects);
    ADD(connections_up);
    ADD(waiting);
    ADD(in_flight);
    if (c->in_flight_peak > acc->in_flight_peak) /* a peak, not a sum */
        acc->in_flight_peak = c->in_flight_peak;
    ADD(in_doubt);
    ADD(hung);
}

static void add_maint(struct qn_maint_stats *acc, const struct qn_maint_stats *c)
{
    ADD(cycles_run);
    ADD(cycles_skipped);
    ADD(cycles_failed);
    ADD(worklist_fetches);
    for (int i = 0; i < 3; i++)
        ADD(worklist_rows[i]);
    for (int k = 0; k < QN_MAINT_NKINDS; k++) {
        ADD(steps[k]);
        ADD(deleted[k]);
    }
    ADD(frames);
    ADD(metrics_purged);
    ADD(metrics_failures);
}

void qn_loop_counters_add(struct qn_loop_counters *acc, const struct qn_loop_counters *c)
{
    ADD(rpcs);
    ADD(pushed);
    ADD(pushed_bytes);
    ADD(delivered);
    ADD(delivered_bytes);
    ADD(parked);
    add_fusion(&acc->fusion, &c->fusion);
    add_dedup(&acc->dedup, &c->dedup);
    add_store(&acc->store, &c->store);
    add_maint(&acc->maint, &c->maint);
    qn_rpc_stats_add(&acc->rpc, &c->rpc);
}

void qn_app_counters_own_fast(const struct qn_app *app, struct qn_loop_counters *out)
{
    memset(out, 0, sizeof *out);
    out->rpcs = app->rpcs;
    out->pushed = app->pushed;
    out->pushed_bytes = app->pushed_bytes;
    out->delivered = app->delivered;
    out->delivered_bytes = app->delivered_bytes;
    if (app->waiters != NULL)
        out->parked = qn_waiters_count(app->waiters);
    if (app->fusion != NULL)
        qn_fusion_stats(app->fusion, &out->fusion);
    if (app->store != NULL)
        qn_store_get_stats(app->store, &out->store);
    if (app->maint != NULL)
        qn_maint_get_stats(app->maint, &out->maint);
    if (app->rpc != NULL)
        qn_rpc_server_stats(app->rpc, &out->rpc);
}

void qn_app_counters_own(const struct qn_app *app, struct qn_loop_counters *out)
{
    qn_app_counters_own_fast(app, out);
    if (app->dedup != NULL)
        qn_dedup_stats(app->dedup, &out->dedup);
}

static void publish_now(void *arg)
{
    struct qn_app *app = arg; /* the receiving loop's: alive while its inbox runs */
    struct qn_loop_counters c;
    qn_app_counters_own(app, &c);
    qn_loops_publish(app->loops, app->worker, &c);
}

void qn_app_counters_refresh(struct qn_app *app)
{
    if (app->loops == NULL)
        return;
    unsigned n = qn_loops_count(app->loops);
    for (unsigned k = 0; k < n; k++) {
        struct qn_app *other = k == app->worker ? NULL : qn_loops_module_state(app->loops, k);
        if (other != NULL)
            (void)qn_loops_post(app->loops, k, publish_now, other); /* full: the timer's */
    }
}

void qn_app_counters_all(const struct qn_app *app, struct qn_loop_counters *out)
{
    qn_app_counters_own(app, out);
    if (app->loops != NULL)
        qn_loops_add_others(app->loops, app->worker, out);
}
