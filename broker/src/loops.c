/*
 * loops.c - the event loops of one broker process (see loops.h): their
 * inboxes, their published module state, and the counters each publishes for
 * the others.
 *
 * Does: post to a loop's inbox, hand out module state, keep every loop's last
 * published counters under one lock and sum them. Does not: start, run or stop
 * loops (broker.c), or read a loop's engines (only what it published).
 */
#include <pthread.h>

#include "loops.h"
#include "queen/error.h"

unsigned qn_loops_count(const struct qn_loops *l)
{
    return l->n;
}

int qn_loops_post(struct qn_loops *l, unsigned k, qn_inbox_fn fn, void *arg)
{
    if (k >= l->n || l->inbox[k] == NULL)
        return QN_EINVAL;
    return qn_inbox_post(l->inbox[k], fn, arg);
}

void *qn_loops_module_state(const struct qn_loops *l, unsigned k)
{
    return k < l->n ? l->module_state[k] : NULL;
}

void qn_loops_set_module_state(struct qn_loops *l, unsigned k, void *state)
{
    if (k < l->n)
        l->module_state[k] = state;
}

void qn_loops_publish(struct qn_loops *l, unsigned k, const struct qn_loop_counters *c)
{
    if (k >= l->n)
        return;
    pthread_mutex_lock(&l->counters_mu);
    l->counters[k] = *c;
    pthread_mutex_unlock(&l->counters_mu);
}

void qn_loops_publish_fast(struct qn_loops *l, unsigned k, const struct qn_loop_counters *c)
{
    if (k >= l->n)
        return;
    pthread_mutex_lock(&l->counters_mu);
    struct qn_dedup_stats keep = l->counters[k].dedup;
    l->counters[k] = *c;
    l->counters[k].dedup = keep;
    pthread_mutex_unlock(&l->counters_mu);
}

void qn_loops_add_others(struct qn_loops *l, unsigned self, struct qn_loop_counters *acc)
{
    pthread_mutex_lock(&l->counters_mu);
    for (unsigned k = 0; k < l->n; k++)
        if (k != self)
            qn_loop_counters_add(acc, &l->counters[k]);
    pthread_mutex_unlock(&l->counters_mu);
}

/* ---------------------------------------------------------------- counters */

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
    ADD(offloaded);
    ADD(packing);
    ADD(packed_waiting);
}

static void add_decode(struct qn_decode_stats *acc, const struct qn_decode_stats *c)
{
    ADD(batches);
    ADD(segments);
    ADD(bytes);
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
    ADD(pop_scans);
    ADD(pop_scans_skipped);
    ADD(pop_spare_hints);
    add_fusion(&acc->fusion, &c->fusion);
    add_decode(&acc->decode, &c->decode);
    add_dedup(&acc->dedup, &c->dedup);
    add_store(&acc->store, &c->store);
    add_maint(&acc->maint, &c->maint);
    qn_rpc_stats_add(&acc->rpc, &c->rpc);
}

#undef ADD
