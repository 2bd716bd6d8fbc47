/*
 * engine/held.h - private to broker/: the leases this broker's consumers hold,
 * shared by every event loop.
 *
 * Each loop's consume fusion (cfusion.h) knows the leases its own consumers
 * hold, and a commit to a partition whose lease is held wakes nobody of that
 * group (the holder's release hints it). With several loops a commit is fed on
 * every loop, and a loop that did not know of another loop's lease woke a
 * consumer into a pop that found the partition leased: most hinted pops came
 * back empty with two loops. This set is what every loop asks instead.
 *
 * A key is a 64-bit hash of (tenant, queue, partition, group); a collision
 * only skips a wake-up (re-check timers and the holder's release cover it).
 * Counts: two loops may hold one key (a lease expired on one and re-taken on
 * the other before the first noticed). Thread-safe (one mutex); bounded by the
 * leases held, which the consumers' own limits bound.
 */
#ifndef QN_BROKER_HELD_H
#define QN_BROKER_HELD_H

#include <stdbool.h>
#include <stdint.h>

struct qn_held;

/* Returns QN_OK or QN_ENOMEM. */
int qn_held_new(struct qn_held **out);
/* NULL allowed. After every loop stopped using it. */
void qn_held_free(struct qn_held *h);

/* key != 0. An add that cannot allocate is dropped (the lease is then not
 * seen by other loops: a needless wake-up, as without this set). */
void qn_held_add(struct qn_held *h, uint64_t key);
/* Undoes one qn_held_add of key (a key not held is ignored). */
void qn_held_del(struct qn_held *h, uint64_t key);
bool qn_held_has(struct qn_held *h, uint64_t key);
/* Keys held (tests, stats). */
uint64_t qn_held_count(struct qn_held *h);

/* The key of (tenant, queue, partition) as name_key bytes (cfusion.c) and a
 * group's hash. */
uint64_t qn_held_key(uint64_t name_hash, uint64_t group_hash);

#endif
