/*
 * engine/waiters.h - private to broker/: pops, consume streams and fetches
 * waiting for data.
 *
 * A waiter parks under (tenant, queue, consumer group) - or under the discovery
 * list when it pops by namespace/task - and is woken when a push to that queue of
 * that tenant commits on this broker, or when another broker's NOTIFY names it
 * (a discovery waiter: any queue of its tenant). Two tenants' queues of one name
 * never wake each other's waiters. Waking unparks the
 * waiter and calls its wake() callback; the owner then pops again (and parks again
 * if it found nothing). Owners also re-check on their own timer
 * (QUEEN_WAKE_RECHECK_MS), which bounds any wake-up that was missed.
 *
 * A commit on this broker names its partition: qn_waiters_feed() then wakes only
 * as many "any partition" waiters per group as the commit can feed (one: a
 * (partition, group) has one lease at a time), preferring waiters that can pop
 * at once, and hands each the partition as a hint so that it leases there
 * without an any-partition scan.
 *
 * Parking holds no database connection.
 */
#ifndef QN_BROKER_WAITERS_H
#define QN_BROKER_WAITERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qn_waiters;
struct qn_wait_bucket;

/* Longest partition name a hint carries (longer: no hint, a plain wake-up). */
#define QN_WAITER_HINT_MAX 255

struct qn_waiter {
    /* set by the owner before parking */
    const char *partition; /* only wake for this partition; NULL = any */
    void (*wake)(struct qn_waiter *w);
    /* Optional: true when the owner would pop at once if woken now (no database
     * call in flight, room to receive). qn_waiters_feed() wakes such waiters
     * before the others. NULL: always ready. */
    bool (*ready)(const struct qn_waiter *w);
    void *ud;
    /* Set by qn_waiters_feed() on an "any partition" waiter it wakes: the
     * partition (NUL-terminated) the commit named. The owner leases there first
     * and clears `hinted`. Other wake-ups leave it as it is. */
    bool hinted;
    char hint[QN_WAITER_HINT_MAX + 1];
    /* owned by waiters.c */
    uint8_t tenant[16];            /* the tenant it parked in */
    struct qn_wait_bucket *bucket; /* non-NULL while parked */
    struct qn_waiter *prev, *next;
};

int qn_waiters_new(size_t max_parked, struct qn_waiters **out);
/* Frees; parked waiters are simply dropped (owners are torn down first). */
void qn_waiters_free(struct qn_waiters *ws);

/* max_parked becomes the limit of every waiters sharing count (one per loop:
 * QUEEN_MAX_PARKED_POPS is the process's), counted atomically there. Before
 * the first park; count outlives ws. */
void qn_waiters_share_count(struct qn_waiters *ws, _Atomic size_t *count);

/*
 * Parks w under (tenant, queue, group) (tenant: 16 bytes); queue NULL or ""
 * parks it on the discovery list (woken by a push to any queue of tenant).
 * Returns QN_OK, QN_EBUSY when max_parked waiters are already parked (here, or
 * with a shared count in every loop), or
 * QN_ENOMEM.
 */
int qn_waiters_park(struct qn_waiters *ws, struct qn_waiter *w, const uint8_t tenant[16],
                    const char *queue, const char *group);
/* (Groups "" and "__QUEUE_MODE__", the wire's two spellings of the default
 * group, are one group here, for parking and for qn_waiters_feed's group.) */

/* Unparks w if it is parked (no callback). Also takes w off a wake pass that
 * has not called it yet: an owner may unpark and free any of its waiters from
 * inside any wake callback. */
void qn_waiters_unpark(struct qn_waiters *ws, struct qn_waiter *w);

/* w is parked, or chosen by a wake pass that has not called it yet (parking it
 * again then is a no-op). */
bool qn_waiter_parked(const struct qn_waiter *w);

/*
 * Data arrived in (tenant, queue, partition); partition NULL = unknown (a NOTIFY
 * from another broker). Wakes, for every group waiting on the queue, up to
 * `per_group` waiters that want any partition, plus every waiter for exactly
 * this partition; and up to `per_group` discovery waiters of tenant (tenant NULL:
 * of any tenant, for the shutdown). Oldest waiters first (per bucket; at most
 * 256 per call). Each chosen waiter is unparked, then its wake() runs, from this
 * call, never for a waiter unparked in the meantime. Called from inside a
 * wake(), it only adds to the running pass.
 */
void qn_waiters_notify(struct qn_waiters *ws, const uint8_t *tenant, const char *queue,
                       const char *partition, size_t per_group);

/*
 * This broker committed to (tenant, queue, partition), or released a lease on
 * it (tenant, queue, partition non-NULL): wakes, for every group waiting on the
 * queue (only `group` when it is not NULL), ONE waiter that wants any
 * partition (the oldest whose ready() says yes, else the oldest), hinted with
 * the partition (see qn_waiter.hint), plus every waiter for exactly this
 * partition; and up to `discovery` discovery waiters of tenant (unhinted: they
 * pop through discovery). With a NULL tenant, queue or partition: as
 * qn_waiters_notify(ws, tenant, queue, partition, discovery).
 */
void qn_waiters_feed(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                     const char *group, const char *partition, size_t discovery);

/*
 * The groups one loop's feed of a commit told (an "any partition" waiter of
 * the group picked that can pop at once, its ready() true, or the group
 * skipped because its lease is held), for the process's other loops
 * (engine/notifier.h): there, those groups' "any partition" waiters are not
 * woken again (all but one of such pops would come back empty). complete =
 * false: more names than fit; treat it as none told.
 */
#define QN_TOLD_BYTES 512
struct qn_told {
    bool complete;
    uint16_t len;              /* bytes of names used */
    char names[QN_TOLD_BYTES]; /* group names, each NUL-terminated */
};

/*
 * As qn_waiters_feed(ws, tenant, queue, NULL, partition, discovery) (all
 * non-NULL), with, each optional (NULL):
 *   skip: no waiter of a group for which skip(ud, group) is true is woken
 *         (engine/cfusion.c: groups whose lease on the partition is held
 *         here); skip runs before any wake-up;
 *   told_in: groups told on another loop: only this partition's own waiters
 *         of those groups wake here, and they are not unfed;
 *   told_out: set to the groups this call told.
 */
void qn_waiters_feed_except(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                            const char *partition, size_t discovery,
                            bool (*skip)(void *ud, const char *group), void *ud,
                            const struct qn_told *told_in, struct qn_told *told_out);

/*
 * A count that moves whenever a feed (qn_waiters_feed, qn_waiters_feed_except)
 * for (tenant, queue) left a group of that queue without a hinted waiter on
 * this loop (none parked, or none at all): that commit's data may sit where no
 * consumer here was told. A consumer whose hinted partition came back empty
 * (or a stream after a hinted batch) looks at every partition only when this
 * moved since its last look at every partition (its last scan);
 * otherwise every partition with news had a consumer of its own, and it waits.
 * Queues share 64 slots, so a move may be another queue's (a needless scan,
 * never a missed one). A notify (news without a partition: another broker's
 * NOTIFY) moves it too: nobody in particular was told.
 */
uint64_t qn_waiters_unfed(const struct qn_waiters *ws, const uint8_t tenant[16], const char *queue);

/*
 * What a group's scans on this loop say. A scan is a pop that looked at every
 * partition of the queue (no hint, no partition named) for a consumer of
 * (tenant, queue, group); unfed is qn_waiters_unfed of the queue read before it
 * was issued. An empty scan is remembered (one per group; 256 slots shared by
 * hash, so a group may be forgotten, never confused with another), a scan that
 * found data forgets it.
 *
 * qn_waiters_known_empty: true (and *unfed set to that count) when the group's
 * last scan here came back empty at most max_age_ms before now_ms and the
 * queue's unfed count has not moved since that scan was issued: every commit or
 * release since then was handed to a consumer of the group, so a new consumer
 * of the group may wait for a hint instead of scanning. News this broker is
 * not told of (another writer, a lease of another broker ending) is seen by the
 * next scan, at most max_age_ms later or at the waiter's re-check. A NOTIFY
 * (qn_waiters_notify, a feed without a partition) moves the unfed count.
 */
void qn_waiters_scanned(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                        const char *group, uint64_t unfed, bool empty, int64_t now_ms);
bool qn_waiters_known_empty(const struct qn_waiters *ws, const uint8_t tenant[16],
                            const char *queue, const char *group, int64_t now_ms,
                            int64_t max_age_ms, uint64_t *unfed);

/*
 * Spare hints: what a feed could tell nobody. When a feed of a named partition
 * leaves a group without a hinted waiter on this loop (none of the group's
 * consumers is parked or has a pop in flight here, or the partition the
 * picked waiter was hinted with before is displaced), the loop keeps the
 * (queue, group, partition), or (queue, any group, partition) when nobody at
 * all waits on the queue; a new consumer of the group that would scan every
 * partition may take it and lease there instead. At most 8 per (tenant, queue)
 * slot (64 slots shared by hash; the oldest is displaced, a repeat refreshed),
 * names of at most 63 bytes.
 *
 * qn_waiters_take_spare: true and out set (NUL-terminated) to the oldest
 * partition kept for (tenant, queue, group) or for any group at most max_age_ms
 * before now_ms; it is forgotten. A spare is a guess: the partition may have
 * been leased or drained since (a scan, another loop, another broker), so a
 * pop that finds it empty must still look at every partition before it waits
 * or answers empty.
 * qn_waiters_drop_spare: a pop of the group leased in partition: forget it.
 */
bool qn_waiters_take_spare(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                           const char *group, int64_t now_ms, int64_t max_age_ms,
                           char out[QN_WAITER_HINT_MAX + 1]);
void qn_waiters_drop_spare(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                           const char *group, const char *partition);

size_t qn_waiters_count(const struct qn_waiters *ws);

/* Wakes every parked waiter (shutdown). */
void qn_waiters_wake_all(struct qn_waiters *ws);

#endif
