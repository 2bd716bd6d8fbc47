/*
 * app_stats.c - a loop's counters and the process's sums (see app_stats.h).
 *
 * Does: read one app's counters (its own, fusion's, the dedup cache's, the
 * pool's, the maintenance loop's, the server's), and sum the
 * process's from the live set of the calling loop and the published snapshots
 * of the others. Does not: publish (modules.c does, on a timer), or read
 * another loop's engines (never: only their snapshots, under the loops' lock).
 */
#include <string.h>

#include "app_stats.h"
#include "engine/waiters.h"

void qn_app_counters_own_fast(const struct qn_app *app, struct qn_loop_counters *out)
{
    memset(out, 0, sizeof *out);
    out->rpcs = app->rpcs;
    out->pushed = app->pushed;
    out->pushed_bytes = app->pushed_bytes;
    out->delivered = app->delivered;
    out->delivered_bytes = app->delivered_bytes;
    out->pop_scans = app->pop_scans;
    out->pop_scans_skipped = app->pop_scans_skipped;
    out->pop_spare_hints = app->pop_spare_hints;
    if (app->waiters != NULL)
        out->parked = qn_waiters_count(app->waiters);
    if (app->fusion != NULL)
        qn_fusion_stats(app->fusion, &out->fusion);
    qn_decoder_stats(app->decoder, &out->decode);
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
