/*
 * rpc/svc_batch.h - private to rpc/: the batch builder shared by Pop, Consume
 * and Fetch, and the pop request Pop and Consume share.
 */
#ifndef QN_BROKER_SVC_BATCH_H
#define QN_BROKER_SVC_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/store.h"
#include "queen/v1/common.pb-c.h"
#include "queen/v1/queue.pb-c.h"
#include "rpc/resp_arena.h"
#include "transport/call.h"

struct qn_app;
struct qn_config;

/*
 * Decompresses segs (a segment whose raw is set was decompressed already:
 * engine/decode.h) and builds one queen.v1.Message per frame of each segment's
 * span [start_idx, start_idx + take), in order, allocating everything in arena
 * (payloads are copied, so the result does not depend on the decompression
 * buffer; an encrypted one is decrypted, and one that cannot be is delivered
 * empty with payload_error saying why). queue/partition fill messages whose
 * segment row carries none; lease
 * and group are copied into every message. Returns QN_OK with *out and *count, or a
 * codec error for a corrupt segment, or QN_ENOMEM.
 */
int qn_build_messages(struct qn_app *app, struct qn_arena *arena, const struct qn_pop_segment *segs,
                      size_t nsegs, const char *queue, const char *partition, const char *group,
                      const char *lease, Queen__V1__Message ***out, size_t *count);

/* The pop parameters PopRequest and ConsumeSubscribe both carry (borrowed). */
struct qn_pop_params {
    const char *queue, *partition, *namespace_, *task, *group;
    uint32_t batch, max_partitions, lease_seconds;
    bool auto_ack;
    Queen__V1__SubscriptionMode mode;
    int64_t from_us;
};

/* Validates pp and fills the storage arguments a (which borrow pp's strings and
 * worker); false with a message for the client in why. */
bool qn_pop_prepare(const struct qn_config *cfg, const struct qn_pop_params *pp,
                    struct qn_pop_args *a, const char *worker, char *why, size_t cap);

/* Reserves outbound budget for the next batch of a (qn_call_reserve: a client
 * that does not read stops the reads for it) and sizes a->max_bytes to the
 * grant: at least one message as large as allowed, at most what
 * QUEEN_MAX_SEND_BYTES holds, no more than a->budget such messages. *min is
 * the least it asks for (for qn_call_on_budget). Returns qn_call_reserve's
 * result: QN_OK, QN_EBUSY (why says which limit) or QN_ECLOSED. */
int qn_pop_reserve(qn_call *call, const struct qn_config *cfg, struct qn_pop_args *a, size_t *min,
                   char *why, size_t cap);

struct qn_waiter;

/*
 * Consumes w's hint (engine/waiters.h: the partition a commit of this broker
 * named when it woke w) into a pop's arguments: an "any partition" pop of one
 * named queue and at most one partition then leases in that partition only
 * (pop_v1 without its candidate scan). a->partition borrows w->hint, so a is
 * good only until w is woken again (qn_store_pop copies it at once). Clears
 * w->hinted whatever it does; true when it narrowed a to the hint.
 */
bool qn_pop_take_hint(struct qn_waiter *w, struct qn_pop_args *a);

/*
 * w will not pop again soon (its call ends, or its stream has no credit) but
 * holds a hint it has not used: unparks w and hands the hint to another parked
 * consumer of the same (tenant, queue, group), so the commit it announces is not
 * left to a re-check. No-op without a hint or for discovery.
 */
void qn_pop_pass_hint(struct qn_app *app, const uint8_t tenant[16], struct qn_waiter *w,
                      const struct qn_pop_args *a);

/* qn_pop_send_batch's flags. */
#define QN_BATCH_WRAP 1u /* inside a ConsumeResponse (Consume, request_id 0) */
#define QN_BATCH_RAW 2u  /* the stored segments (PopResponse.segments), not messages */

struct qn_authz_names;

/*
 * The consume grant of a pop (a): a named queue must be covered; discovery
 * needs some consume grant, and unless a "*" grant covers everything, *names
 * becomes the filter the pop must carry (*filtered true; free it with
 * qn_authz_names_free). Returns QN_GRPC_OK, or PERMISSION_DENIED (audited) /
 * RESOURCE_EXHAUSTED with a message in why.
 */
enum qn_grpc_code qn_pop_authorize(qn_call *call, const struct qn_pop_args *a,
                                   struct qn_authz_names *names, bool *filtered, char *why,
                                   size_t cap);

/* Teaches consume fusion (engine/cfusion.h) what a pop of tenant with args a
 * leased: each partition's names and, unless auto-ack, the lease a->worker now
 * holds there until its expiry. full: the batch took all it was allowed.
 * Returns the number of partitions. qn_pop_send_batch calls it; a pop whose
 * batch nobody receives calls it before releasing, so the release hints. */
size_t qn_pop_learn(struct qn_app *app, const uint8_t tenant[16], const struct qn_pop_args *a,
                    const struct qn_pop_result *res, bool full);

/* Sends one PopResponse built from res on call (Pop) or inside a
 * ConsumeResponse (QN_BATCH_WRAP), with decoded messages or, with QN_BATCH_RAW,
 * the segments as stored (never decompressed), and counts the messages as
 * delivered. Returns the number of messages sent, or a negative error (a codec
 * error, QN_ENOMEM, or qn_call_send's). */
long qn_pop_send_batch(struct qn_app *app, qn_call *call, const struct qn_pop_args *a,
                       const struct qn_pop_result *res, unsigned flags);

/* Releases every lease held under worker, in the background: sent again with
 * backoff while the database is unreachable or the result is lost, for up to
 * 10 minutes (then logged; the leases expire on their own). tenant (16 bytes,
 * copied) is the popping caller's (qn_authz_tenant). */
void qn_pop_release_worker(struct qn_app *app, const uint8_t tenant[16], const char *worker);

/* For a pop in doubt (released again later, as qn_pop_release_worker_doubt);
 * first(ud, code) runs once, from a later loop callback, with the outcome
 * of the first attempt (QN_OK: released; otherwise it goes on in the
 * background). Returns QN_OK or QN_ENOMEM (nothing started, first never runs). */
int qn_pop_release_worker_then(struct qn_app *app, const uint8_t tenant[16], const char *worker,
                               void (*first)(void *ud, int code), void *ud);

/* The release of a pop in doubt (its result was lost with the connection): as
 * qn_pop_release_worker, and once it has answered, sent once more
 * QN_POP_RELEASE_LATE_MS later. The lost statement may still be running on the
 * server and commit its lease after the first release ran (a bundle of several
 * leases runs longer than one pop): the second release frees that lease too
 * (release_lease_v1 is idempotent). qn_pop_release_worker_then does the same. */
#define QN_POP_RELEASE_LATE_MS 2000
void qn_pop_release_worker_doubt(struct qn_app *app, const uint8_t tenant[16], const char *worker);

/* first() of the releases started with ud will not run (ud is going away). */
void qn_pop_release_cancel(struct qn_app *app, void *ud);

/* Stops every background release (the module's stop, after the store). */
void qn_pop_releases_free(struct qn_app *app);

/* The status for a batch that could not be built or sent (qn_pop_send_batch's
 * error). */
enum qn_grpc_code qn_pop_batch_error_code(int rc);

#endif
