/*
 * engine/pop_gate.h - private to broker/: the cache of queues' min_pop_wait_time.
 *
 * A pop of a queue with the option asks pop_gate_v1 first (is enough pending?);
 * this cache remembers each queue's option, learned from those answers, for
 * QN_POP_GATE_TTL_MS, so a queue without the option costs one extra read per
 * TTL, not per pop. One cache per loop, owned by its struct qn_app; loop thread
 * only.
 */
#ifndef QN_BROKER_POP_GATE_H
#define QN_BROKER_POP_GATE_H

#include <stddef.h>
#include <stdint.h>

struct qn_pop_gates;

#define QN_POP_GATE_TTL_MS 30000
/* Queues remembered; when full, the cache is emptied and starts over. */
#define QN_POP_GATE_MAX 100000

/* Returns QN_OK or QN_ENOMEM. */
int qn_pop_gates_new(struct qn_pop_gates **out);

/* The remembered min_pop_wait_time of the tenant's queue (>= 0), or -1 when
 * unknown or older than QN_POP_GATE_TTL_MS at now_ms (monotonic,
 * qn_store_now_ms()). tenant is 16 bytes. */
int32_t qn_pop_gates_get(const struct qn_pop_gates *g, const uint8_t tenant[16], const char *queue,
                         int64_t now_ms);

/* Remembers the tenant's queue's option as of now_ms (copies queue). A failed
 * allocation only forgets (the next pop asks again). */
void qn_pop_gates_put(struct qn_pop_gates *g, const uint8_t tenant[16], const char *queue,
                      int32_t min_wait_ms, int64_t now_ms);

/* Queues remembered (tests). */
size_t qn_pop_gates_count(const struct qn_pop_gates *g);

/* NULL allowed. */
void qn_pop_gates_free(struct qn_pop_gates *g);

#endif
