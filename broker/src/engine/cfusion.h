/*
 * engine/cfusion.h - private to broker/: consume fusion, the part of the consume
 * path that learns from this broker's own pops and acks where data waits.
 *
 * Pops return each leased segment with its partition's id and names. The
 * directory here remembers, per (tenant, partition id), the queue and partition
 * names, when this broker last committed to it and whether the last lease
 * taken there was a full batch, so that an ack (which names only the partition
 * id) that released a lease can wake one parked consumer of that group hinted
 * with the partition (qn_waiters_feed) when something is likely left there: a
 * full batch (more was pending), or a commit since (or just before) the lease
 * was taken. That is leased again at once, without an any-partition scan and
 * without waiting for the next commit or a re-check timer; a drained partition
 * wakes nobody.
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

struct qn_told; /* engine/waiters.h */

struct event_base;
struct qn_waiters;
struct qn_cfusion;

/* Partitions remembered; when full, the directory is emptied and starts over
 * (as the pop gate cache does): bounded memory, one relearn per partition. */
#define QN_CFUSION_MAX 100000

/* A commit this old before a lease's batch came back may have been missed by
 * the pop that took it (the pop's snapshot came first): the release still wakes. */
#define QN_CFUSION_RACE_MS 200
/* Groups whose last lease each partition entry remembers; a release by a group
 * it does not remember always wakes. */
#define QN_CFUSION_GROUPS 4

/* Borrows ws until qn_cfusion_free(). max_entries 0: QN_CFUSION_MAX. Returns
 * QN_OK or QN_ENOMEM. */
int qn_cfusion_new(struct qn_waiters *ws, size_t max_entries, struct qn_cfusion **out);

/* NULL allowed. Before the waiters are freed. */
void qn_cfusion_free(struct qn_cfusion *cf);

/*
 * A pop of this broker for group returned rows of (tenant, pid) = (queue,
 * partition) at now_ms (monotonic): remembers the names (copies them), and, per
 * group (the last QN_CFUSION_GROUPS groups), when the lease came back and
 * whether the batch was full (it took all it was allowed: more may be pending). Names longer than
 * 255 bytes, or a failed allocation, are not remembered (no hint later,
 * nothing else).
 */
void qn_cfusion_learn(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                      const char *queue, const char *partition, const char *group, bool full,
                      int64_t now_ms);

/* This broker committed to (tenant, queue, partition) at now_ms. Unknown
 * partitions are ignored (their first pop learns them). */
void qn_cfusion_committed(struct qn_cfusion *cf, const uint8_t tenant[16], const char *queue,
                          const char *partition, int64_t now_ms);

/*
 * Group's lease on (tenant, pid) ended without an ack that says what it saw
 * (a DLQ hand-off filed, a worker's release, an expiry; an ack_v1 that
 * released it: qn_cfusion_ack_released), so it is no longer held:
 * when the partition is known and likely holds more (the last lease there was
 * a full batch, or this broker committed to it since QN_CFUSION_RACE_MS before
 * that lease), wakes one parked "any partition" consumer of that group on the
 * partition's queue, hinted with it (qn_waiters_feed). The queue-mode group
 * matches both of its spellings ("" and "__QUEUE_MODE__"). Returns true when a
 * wake-up was offered, false otherwise.
 */
bool qn_cfusion_released(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                         const char *group);

/*
 * As qn_cfusion_released, for an ack_v1 that released the lease and says what
 * it saw: more (QN_ACKF_MORE) means the partition held messages past the new
 * cursor when the ack read it; what it could not see was committed after the
 * ack was sent at sent_ms (monotonic), and this broker learns such a commit at
 * or after sent_ms. So it wakes one parked consumer exactly when more is set
 * or this broker committed there at or after sent_ms (on any loop: another
 * loop's commit reaches this one later still). Guessing from the lease (a full
 * batch, a commit shortly before it came back) hinted after nearly every ack
 * at 50,000 msg/s, and about half of all hinted pops came back empty.
 */
bool qn_cfusion_ack_released(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                             const char *group, bool more, int64_t sent_ms);

/*
 * Leases this broker's consumers hold. A commit to a partition whose lease a
 * consumer of this broker holds for group G wakes nobody of G (that consumer
 * holds the only lease; the release hints the partition to a parked consumer
 * when something is likely left, as above). Every way a lease ends is learned
 * so that no data waits for a re-check: an ack that released it
 * (qn_cfusion_ack_released), release_lease_v1 of its worker
 * (qn_cfusion_worker_released), its expiry (qn_cfusion_expire, from a timer when
 * a base is set) and a DLQ hand-off (qn_cfusion_released).
 */

/* Arms the expiry timer on base (NULL: none; tests call qn_cfusion_expire). */
int qn_cfusion_set_base(struct qn_cfusion *cf, struct event_base *base);

/*
 * With several loops: every lease held here is entered in shared (held.h,
 * borrowed; one per broker) as well, and a commit fed here wakes nobody of a
 * group whose lease a consumer on any loop holds. Call before the first hold.
 */
struct qn_held;
void qn_cfusion_share(struct qn_cfusion *cf, struct qn_held *shared);

/*
 * A pop of this broker leased (tenant, pid) for group to worker (its lease id,
 * non-empty) until expires_ms (monotonic, as qn_store_now_ms). Call after
 * qn_cfusion_learn for the same partition (an unknown partition is not held).
 */
void qn_cfusion_hold(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                     const char *group, const char *worker, int64_t expires_ms);

/* A lease expiry as the database returns it (wall clock, µs) on the monotonic
 * clock of now_ms (qn_store_now_ms), clamped to [now_ms, now_ms + 24 h]. */
int64_t qn_cfusion_lease_ms(int64_t expires_at_us, int64_t now_ms);

/* RenewLease (or a stream's in-band renewal) of worker (tenant's) answered:
 * its holds here last until expires_ms (monotonic) at least. */
void qn_cfusion_renewed(struct qn_cfusion *cf, const uint8_t tenant[16], const char *worker,
                        int64_t expires_ms);

/* Whether a consumer of this broker holds group's lease on (tenant, queue,
 * partition) at now_ms (tests, diagnostics). */
bool qn_cfusion_holds(const struct qn_cfusion *cf, const uint8_t tenant[16], const char *queue,
                      const char *partition, const char *group, int64_t now_ms);

/*
 * This broker committed to (tenant, queue, partition) at now_ms: records it
 * (qn_cfusion_committed) and wakes waiters as qn_waiters_feed(..., NULL group,
 * ..., discovery) does, except every group whose lease on the partition a
 * consumer of this broker holds; told_in and told_out (optional) as for
 * qn_waiters_feed_except.
 */
void qn_cfusion_commit_feed(struct qn_cfusion *cf, const uint8_t tenant[16], const char *queue,
                            const char *partition, size_t discovery, int64_t now_ms,
                            const struct qn_told *told_in, struct qn_told *told_out);

/* release_lease_v1 of worker (tenant's) answered: every lease it held here is
 * released as an ack's release is (qn_cfusion_released). */
void qn_cfusion_worker_released(struct qn_cfusion *cf, const uint8_t tenant[16],
                                const char *worker);

/* Leases held here whose expiry passed by now_ms are released as an ack's
 * release is. Returns how many. */
size_t qn_cfusion_expire(struct qn_cfusion *cf, int64_t now_ms);

/*
 * Bundled leases. A pop that names a partition whose id the store knows
 * (qn_store_pop_pid: a hinted wake-up, or a Pop naming its partition) is not
 * sent at once: it joins this turn's bundle, and once the loop has run every
 * callback of the turn (an event made active), the bundle goes out as one
 * pop_bundle_v1 call per tenant (up to QN_POP_BUNDLE_MAX members each; a
 * bundle of one goes out as the pop it is). Every other pop goes out at once.
 * Each member's callback then runs exactly once with its own result, as if it
 * had been a qn_store_pop:
 *   - the bundle leased: each member gets its own rows (maybe none);
 *   - QN_EDB (the database refused one member, so the bundle's transaction
 *     rolled back and nothing was leased): every member is sent again alone
 *     and gets its own verdict;
 *   - anything else (QN_EINDOUBT, QN_EUNAVAILABLE, ...): every member gets
 *     that status, and resolves it as a pop does (a pop in doubt releases its
 *     worker's leases).
 * A caller whose call ended keeps its pop (its callback releases what it got);
 * qn_cfusion_pop_cancel drops a pop not sent yet, and otherwise only stops its
 * callback (what it leases stays until its expiry, as qn_store_cancel).
 */
struct qn_store;
struct qn_pop_args;
struct qn_call_opts;
struct qn_store_status;
struct qn_pop_result;
struct qn_cfusion_pop;
typedef void (*qn_cfusion_pop_cb)(void *ud, const struct qn_store_status *st,
                                  const struct qn_pop_result *res);

/* qn_cfusion_pop's flags. QN_CFUSION_DECODE: the batch will be decoded
 * (not sent as raw segments), so a large one is decompressed by an offload
 * thread before the callback runs (qn_cfusion_set_decoder); the callback then
 * gets that copy, raw set (engine/decode.h), and the pop stays in flight
 * (cancellable, its caller's state unchanged) until then. */
#define QN_CFUSION_DECODE 1u

/* As qn_store_pop (same arguments, same callback; a and opts are copied, the
 * name filter of opts is borrowed until the callback). *out is the handle for
 * qn_cfusion_pop_cancel, valid until the callback runs or the cancel returns.
 * Without a base (qn_cfusion_set_base) bundled pops wait for
 * qn_cfusion_pop_flush. */
int qn_cfusion_pop(struct qn_cfusion *cf, struct qn_store *store, const struct qn_pop_args *a,
                   const struct qn_call_opts *opts, unsigned flags, qn_cfusion_pop_cb cb, void *ud,
                   struct qn_cfusion_pop **out);

/* The decoder (borrowed; NULL: none) for QN_CFUSION_DECODE pops (cf NULL allowed). Free it before
 * cf (qn_decoder_free runs the callbacks of the pops it holds). */
struct qn_decoder;
void qn_cfusion_set_decoder(struct qn_cfusion *cf, struct qn_decoder *dec);
/* NULL allowed. */
void qn_cfusion_pop_cancel(struct qn_cfusion_pop *p);
/* Sends this turn's bundles now (the loop does it by itself; tests). */
void qn_cfusion_pop_flush(struct qn_cfusion *cf);

/* Bundling on or off (both on by default; QUEEN_LEASE_BUNDLE, QUEEN_ACK_BUNDLE).
 * Off: every pop, or every ack, is sent at once by itself, as before bundling. */
void qn_cfusion_set_bundling(struct qn_cfusion *cf, bool leases, bool acks);

struct qn_cfusion_pop_stats {
    uint64_t alone;   /* pops sent by themselves (not by id, or a bundle of one) */
    uint64_t bundles; /* pop_bundle_v1 calls */
    uint64_t bundled; /* members of those calls */
    uint64_t retried; /* members sent again alone after a refused bundle */
};
void qn_cfusion_pop_stats(const struct qn_cfusion *cf, struct qn_cfusion_pop_stats *out);

/*
 * Bundled acks. Every ack_v1 of this loop (an Ack call's groups, a Consume
 * stream's in-band acks) joins the ack queue; one bundle is in flight at a time
 * (single flight on the write lane, as push fusion's slots): the queue goes out
 * at the end of the turn when none is, else when the one in flight answers, as
 * one ack_bundle_v1 call of up to QN_ACK_BUNDLE_MAX members (a bundle of one
 * as the ack_v1 it is). Each member's callback runs exactly once, after the
 * bundle's transaction committed or failed, as if it had been a qn_store_ack:
 *   - committed: each member its own result;
 *   - QN_EDB (refused as a whole, nothing applied): each member alone again;
 *   - anything else (QN_EINDOUBT, ...): every member gets it and resolves as
 *     an ack does (rpc/ack_apply.c: re-sends completed-only groups, answers the
 *     others UNKNOWN).
 * qn_cfusion_ack_cancel drops an ack not sent yet, and otherwise only stops its
 * callback (the ack may still commit, as after qn_store_cancel).
 */
struct qn_ack_args;
struct qn_ack_result;
struct qn_cfusion_ack;
typedef void (*qn_cfusion_ack_cb)(void *ud, const struct qn_store_status *st,
                                  const struct qn_ack_result *res);
/* As qn_store_ack (a is copied, items and hashes too; opts' deadline and
 * tenant are used only when acks are not bundled: a bundle has no deadline, the
 * caller's call ends at its own). Returns QN_OK (cb will run, never inside) or
 * QN_EINVAL / QN_ENOMEM (it will not; unbundled, any refusal of qn_store_ack). */
int qn_cfusion_ack(struct qn_cfusion *cf, struct qn_store *store, const struct qn_ack_args *a,
                   const struct qn_call_opts *opts, qn_cfusion_ack_cb cb, void *ud,
                   struct qn_cfusion_ack **out);
/* NULL allowed. */
void qn_cfusion_ack_cancel(struct qn_cfusion_ack *k);
/* Sends the queued acks now if none is in flight (the loop does it; tests). */
void qn_cfusion_ack_flush(struct qn_cfusion *cf);

struct qn_cfusion_ack_stats {
    uint64_t alone;   /* ack_v1 calls (a bundle of one, or a refused bundle's retries) */
    uint64_t bundles; /* ack_bundle_v1 calls */
    uint64_t bundled; /* members of those calls */
    uint64_t retried; /* members sent again alone after a refused bundle */
};
void qn_cfusion_ack_stats(const struct qn_cfusion *cf, struct qn_cfusion_ack_stats *out);

/* Leases held (tests). */
size_t qn_cfusion_held_count(const struct qn_cfusion *cf);

/* Partitions remembered (tests). */
size_t qn_cfusion_count(const struct qn_cfusion *cf);

#endif
