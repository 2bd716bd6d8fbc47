/*
 * engine/cfusion.h - private to broker/: consume fusion, the part of the consume
 * path that learns from this broker's own pops and acks where data waits.
 *
 * Pops return each leased segment with its partition's id and names. The
 * directory here remembers, per (tenant, partition id), the queue and partition
 * names, so that an ack (which names only the partition id) that released a
 * lease can wake one parked consumer of that group hinted with the partition
 * (qn_waiters_feed): what is left there after the lease, or what was committed
 * while it was held, is leased again at once, without an any-partition scan and
 * without waiting for the next commit or a re-check timer.
 *
 * Every entry is a hint: a missing, stale or evicted one only means the wake-up
 * does not happen (parked pops still re-check every QUEEN_WAKE_RECHECK_MS).
 * One per loop, owned by its struct qn_app; loop thread only; no globals.
 */
#ifndef QN_BROKER_CFUSION_H
#define QN_BROKER_CFUSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qn_waiters;
struct qn_cfusion;

/* Partitions remembered; when full, the directory is emptied and starts over
 * (as the pop gate cache does): bounded memory, one relearn per partition. */
#define QN_CFUSION_MAX 100000

/* Borrows ws until qn_cfusion_free(). max_entries 0: QN_CFUSION_MAX. Returns
 * QN_OK or QN_ENOMEM. */
int qn_cfusion_new(struct qn_waiters *ws, size_t max_entries, struct qn_cfusion **out);

/* NULL allowed. Before the waiters are freed. */
void qn_cfusion_free(struct qn_cfusion *cf);

/*
 * A pop of this broker returned rows of (tenant, pid) = (queue, partition):
 * remembers the names (copies them). Names longer than 255 bytes, or a failed
 * allocation, are not remembered (no hint later, nothing else).
 */
void qn_cfusion_learn(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                      const char *queue, const char *partition);

/*
 * An ack of this broker committed and released group's lease on (tenant, pid):
 * wakes one parked "any partition" consumer of that group on the partition's
 * queue, hinted with it (qn_waiters_feed). The queue-mode group matches both of
 * its spellings ("" and "__QUEUE_MODE__"). Returns true when the partition was
 * known (a wake-up was offered), false otherwise.
 */
bool qn_cfusion_released(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                         const char *group);

/* Partitions remembered (tests). */
size_t qn_cfusion_count(const struct qn_cfusion *cf);

#endif
