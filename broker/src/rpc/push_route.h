/*
 * rpc/push_route.h - private to broker/: partition affinity for pushes
 * (QUEEN_WORKERS > 1; docs/broker.md "Workers").
 *
 * A partition (tenant, queue, partition) is owned by one event loop:
 * qn_push_owner, a hash of the three mod the number of loops. Its fusion slot,
 * its dedup-cache entry and the in-flight duplicate check live on that loop
 * only. Push and PushSegments hand their items to qn_push_route instead of
 * fusion: items of a partition this loop owns go to its fusion directly (with
 * one loop always); the others are copied (bytes and names: the forwarded part
 * owns them, the call may end meanwhile) into a message to the owner's inbox,
 * submitted to the owner's fusion there, and their results travel back to
 * this loop, which resolves the call's items (the call is answered on its own
 * loop, in request order, as always).
 *
 * Lifetime: the caller's job stays alive until its items are resolved (the
 * push services free a job in done() only), so a result coming back never
 * finds a freed job; a job whose call was cancelled is resolved and freed as
 * usual when its forwarded parts return.
 * Not forwarded: a forwarded item's "in doubt" notice (the origin's call waits
 * for the resolution, or its deadline, instead of answering UNKNOWN early).
 */
#ifndef QN_BROKER_PUSH_ROUTE_H
#define QN_BROKER_PUSH_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "app.h"
#include "engine/fusion.h"

/* The loop that owns (tenant, queue, partition), of n loops (n >= 1). */
unsigned qn_push_owner(const uint8_t tenant[16], const char *queue, const char *partition,
                       unsigned n);

/*
 * As qn_fusion_submit (same contract for job and idx[0..n): one queue and
 * partition, the job's tenant), on the partition's owner loop. Returns QN_OK,
 * QN_ELIMIT (the owner's fusion is over its byte budget, or its inbox is full:
 * nothing was queued, the caller fails those items) or QN_ENOMEM.
 */
int qn_push_route(struct qn_app *app, struct qn_push_job *job, const uint32_t *idx, size_t n);

#endif
