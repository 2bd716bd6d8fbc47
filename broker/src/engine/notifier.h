/*
 * engine/notifier.h - private to broker/: wake-ups of parked pops when data
 * arrives, from this broker's commits and from other brokers'.
 *
 * A commit on this broker (fusion, Transact, a replayed dead letter) wakes the
 * local waiters of its queue at once and is announced to other brokers by a
 * throttled NOTIFY queen_push; another broker's NOTIFY (heard on the store's
 * LISTEN connection) wakes ours. Cross-broker wake-ups are cheap hints: a lost
 * one only delays a parked pop until its re-check timer (QUEEN_WAKE_RECHECK_MS).
 *
 * One notifier per loop, owned by its struct qn_app; loop thread only.
 */
#ifndef QN_BROKER_NOTIFIER_H
#define QN_BROKER_NOTIFIER_H

#include <stdint.h>

#include "queen/store.h"

struct event_base;
struct qn_waiters;
struct qn_notifier;

/* Waiters woken per consumer group by another broker's NOTIFY (which names no
 * partition), and discovery waiters woken per local commit: enough to drain a
 * burst in parallel without waking every parked pop for one segment. A local
 * commit wakes one "any partition" waiter per group (qn_waiters_feed). */
#define QN_NOTIFY_WAKE_PER_GROUP 4
/* NOTIFY is sent at most once per this many milliseconds... */
#define QN_NOTIFY_INTERVAL_MS 20
/* ...naming at most this many queues (more: the ones past it are not named). */
#define QN_NOTIFY_MAX_QUEUES 256

/*
 * Makes the notifier and starts listening for other brokers' NOTIFY on store.
 * Borrows store and ws until qn_notifier_free(). Returns QN_OK, QN_ENOMEM, or
 * the store's error for the LISTEN registration.
 */
int qn_notifier_new(struct event_base *base, qn_store *store, struct qn_waiters *ws,
                    struct qn_notifier **out);

struct qn_cfusion;
/* Local commits are also told to cf (borrowed until qn_notifier_free; NULL:
 * not), which learns when partitions last received data and keeps a commit from
 * waking a group whose lease there this broker holds (engine/cfusion.h); cf's
 * lease expiry timer runs on the notifier's base. */
void qn_notifier_set_cfusion(struct qn_notifier *n, struct qn_cfusion *cf);

/*
 * Messages were committed to (tenant, queue, partition) on this broker: wakes
 * local waiters now and queues (tenant, queue) for the next NOTIFY. The
 * signature fits fusion's commit hook (ud is the notifier). Copies queue.
 */
void qn_notifier_committed(void *ud, const uint8_t tenant[16], const char *queue,
                           const char *partition);

/*
 * The other event loops of this process (QUEEN_WORKERS > 1): every commit
 * qn_notifier_committed hears is also given to fn (ud borrowed until
 * qn_notifier_free; NULL fn: none), which carries it to the other loops, where
 * qn_notifier_peer_committed wakes their waiters at once instead of after the
 * NOTIFY round trip. told (borrowed for the call): the groups the committing
 * loop told (waiters.h); the other loops wake only that partition's own
 * waiters of those groups. (Feeding every group on every loop woke one
 * consumer per group per loop, and all but one of those pops came back empty.)
 */
struct qn_told;
typedef void (*qn_notifier_peer_fn)(void *ud, const uint8_t tenant[16], const char *queue,
                                    const char *partition, const struct qn_told *told);
void qn_notifier_set_peers(struct qn_notifier *n, qn_notifier_peer_fn fn, void *ud);

/* Another loop of this process committed to (tenant, queue, partition): wakes
 * this loop's waiters as a local commit would (no NOTIFY: the committing loop
 * sends it). */
void qn_notifier_peer_committed(struct qn_notifier *n, const uint8_t tenant[16], const char *queue,
                                const char *partition, const struct qn_told *told);

/* Commits heard so far to (tenant, queue) (this loop's, other loops', other
 * brokers' NOTIFYs; counted per bucket of a hash, so another queue's may count
 * too): a pop that asks the database something compares it before and after,
 * so that a commit that raced its question (another loop commits in parallel)
 * is not lost on a pop that was not parked yet. */
#define QN_NOTIFY_COMMIT_BUCKETS 4096
uint64_t qn_notifier_commits(const struct qn_notifier *n, const uint8_t tenant[16],
                             const char *queue);

/* Stops listening, drops what was queued for NOTIFY and frees. Before the store
 * and the waiters are freed. NULL allowed. */
void qn_notifier_free(struct qn_notifier *n);

#endif
