/*
 * svc_pop.h - private to broker/: the batch builder shared by Pop, Consume and
 * Fetch.
 */
#ifndef QN_BROKER_SVC_POP_H
#define QN_BROKER_SVC_POP_H

#include <stddef.h>
#include <stdint.h>

#include "rpc/resp_arena.h"
#include "queen/store.h"
#include "queen/v1/common.pb-c.h"

struct qn_app;

/*
 * Decompresses segs and builds one queen.v1.Message per frame of each segment's
 * span [start_idx, start_idx + take), in order, allocating everything in arena
 * (payloads are copied, so the result does not depend on the decompression
 * buffer). queue/partition fill messages whose segment row carries none; lease
 * and group are copied into every message. Returns QN_OK with *out and *count, or a
 * codec error for a corrupt segment, or QN_ENOMEM.
 */
int qn_build_messages(struct qn_app *app, struct qn_arena *arena,
                      const struct qn_pop_segment *segs, size_t nsegs, const char *queue,
                      const char *partition, const char *group, const char *lease,
                      Queen__V1__Message ***out, size_t *count);

/* Frees the cache of queues' min_pop_wait_time (shutdown). */
void qn_svc_pop_gate_forget(void);

#endif
