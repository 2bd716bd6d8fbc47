/*
 * engine/fusion.h - private to broker/: per-partition single-flight push batching.
 *
 * A push RPC becomes a qn_push_job whose items are routed to the fusion slot of
 * their (tenant, queue, partition). A slot with frames and no flush in flight is
 * dispatched on the next loop turn that has a lane open (QUEEN_PUSH_LANE_MS: one
 * bundle in flight, more when flights age or a full bundle waits); while its
 * flush is in flight new frames
 * accumulate and go out together when it completes. Segment size is therefore
 * emergent: whatever arrived during the previous flush's round trip. Several
 * ready slots of one tenant ride one database transaction (a bundle, up to
 * QUEEN_V2_BUNDLE_MAX partitions).
 *
 * A segment a client packed itself (PushSegments) is one pre-packed entry (struct
 * qn_prepacked): it takes its turn in its slot like any frame and rides the
 * same bundles, but is its own segment, sent as it came, stored whole or not
 * at all.
 *
 * Dedup layer 2 lives here: inside one flush of one partition, frames with the
 * same transaction-id hash keep the first as leader; later ones are followers
 * that inherit the leader's final result (DUPLICATE with the leader's id and
 * offset, or the leader's failure). SQL (push_v1) is the authority.
 *
 * A flush whose result never came (QN_EINDOUBT: the connection was lost or
 * declared hung after it was sent) is resolved, never failed: its segments and
 * items are kept, its partitions stay in flight (nothing later overtakes them),
 * and once the pool is up the same segments are sent with
 * qn_store_push_resolve until it answers. A segment that committed the first
 * time is answered QUEUED with its original offsets; one that had not is stored
 * then. Only a flush still unresolved after QN_FUSION_RESOLVE_MAX_MS fails, with
 * QN_EINDOUBT (the client hears "outcome unknown"). QN_EUNAVAILABLE (nothing was
 * sent) fails the items at once: nothing was written.
 */
#ifndef QN_BROKER_FUSION_H
#define QN_BROKER_FUSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"
#include "queen/frame.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/store.h"

struct event_base;
struct qn_config;
struct qn_push_job;

#define QN_ITEM_PENDING 0
#define QN_ITEM_QUEUED 1
#define QN_ITEM_DUPLICATE 2
#define QN_ITEM_FAILED 3

/* How long fusion keeps resolving a flush in doubt before it fails its items
 * with QN_EINDOUBT: below the 900 s for which storage can resolve a push
 * (qn_store_push_resolve). */
#define QN_FUSION_RESOLVE_MAX_MS (600 * 1000)

/* A reference to one item of one job (follower chains link these). */
struct qn_item_ref {
    struct qn_push_job *job;
    uint32_t idx;
};

/* A frame of a pre-packed segment whose transaction id was already stored. */
struct qn_prepacked_dup {
    uint32_t idx;            /* frame index in the segment */
    int64_t offset;          /* the original's offset */
    uint8_t id[QN_UUID_LEN]; /* the original's message id (zero when it is gone) */
};

/*
 * A segment a codec-linked client packed itself (PushSegments), submitted as one
 * item whose `pre` points here. It takes its turn in its partition's slot like
 * any message (a partition's order is arrival order, items and segments alike)
 * and rides the same bundles, but it is its own segment: stored whole, exactly
 * these bytes, or not at all; never merged with other frames, never re-packed.
 * Its result is the item's: QUEUED with offset = the segment's base (frame i at
 * base + i) and result_id = frame 0's id; DUPLICATE when every frame was
 * already stored (offset and result_id are frame 0's original, dups lists all);
 * FAILED with QN_EDUPLICATE when only some were (nothing written, dups names
 * them); FAILED otherwise as any item.
 */
struct qn_prepacked {
    /* input, borrowed until the job is done */
    const uint8_t *blob; /* the client's compressed bytes */
    size_t blob_len;
    uint32_t count;         /* frames in blob, >= 1 */
    const uint8_t *hashes;  /* count * 16: the frames' transaction-id hashes, distinct */
    const uint8_t *ids;     /* count * 16: the frames' message ids */
    uint64_t payload_bytes; /* of its frames (metrics) */
    /* result: the owner provides room for `count` entries; fusion fills ndups */
    struct qn_prepacked_dup *dups;
    size_t ndups;
};

/* One message to push. Filled by the job's owner before submission; the result
 * fields are written by fusion. */
struct qn_push_item {
    /* input */
    struct qn_prepacked *pre;  /* NULL: one message (below); else a pre-packed segment,
                                  and frame, hash and minted_txn are unused */
    struct qn_frame frame;     /* message id set; txn/payload borrowed from the job */
    uint8_t hash[QN_HASH_LEN]; /* xxh3_128 of the txn */
    bool minted_txn;           /* txn is the minted message id (never a duplicate) */
    const char *queue;         /* borrowed from the job */
    const char *partition;     /* borrowed; "Default" when the client sent none */
    /* follower links (fusion-internal) */
    struct qn_item_ref first_follower;
    struct qn_item_ref next_follower;
    /* set by fusion while the item's flush is in doubt (sent, result lost) and
     * being resolved; status stays PENDING until it is */
    bool in_doubt;
    /* result */
    int status;                     /* QN_ITEM_* */
    int64_t offset;                 /* queued: own offset; duplicate: the original's */
    uint8_t pid[16];                /* partition id (when known) */
    uint8_t result_id[QN_UUID_LEN]; /* queued: own id; duplicate: the original's (zero if gone) */
    int err;                        /* failed: a QN_E* code */
};

struct qn_push_job {
    uint8_t tenant[16]; /* every item's queue is this tenant's (set before submission) */
    struct qn_push_item *items;
    size_t nitems;
    size_t pending; /* items not yet resolved */
    /* Called once, when every item is resolved. Fusion never calls it inside
     * qn_fusion_submit() (always from a later loop callback); an owner that
     * resolves items itself may complete the job earlier. */
    void (*done)(struct qn_push_job *job);
    /* May be NULL. Called (from a loop callback, possibly several times) when
     * items of the job become in doubt (their in_doubt is set): the owner may
     * answer "outcome unknown" before its deadline instead of waiting. */
    void (*doubt)(struct qn_push_job *job);
    void *ud;
};

struct qn_fusion;

/* Hooks for the dedup cache; NULL hooks mean "cannot vouch". A partition is
 * (tenant, queue, partition): tenant is 16 bytes. */
struct qn_fusion_dedup_hooks {
    /* The p_verified watermark for these hashes in (queue, partition), -1 when the
     * cache cannot vouch (a local hit also answers -1). */
    int64_t (*verified)(void *ud, const uint8_t tenant[16], const char *queue,
                        const char *partition, const uint8_t *hashes, size_t n);
    /* The dedup window (seconds) and the partition id the watermark was computed
     * under; false when unknown. */
    bool (*vouched_for)(void *ud, const uint8_t tenant[16], const char *queue,
                        const char *partition, int32_t *window, uint8_t pid[16]);
    /* A segment committed at base with these hashes. */
    void (*committed)(void *ud, const uint8_t tenant[16], const char *queue, const char *partition,
                      const uint8_t pid[16], int32_t window, int64_t base, int64_t created_at_us,
                      const uint8_t *hashes, size_t n);
    void *ud;
};

/*
 * Makes fusion on base. Borrows cfg (segment_raw_max, max_send_bytes (0: no
 * cap from it), zstd_level, bundle_max),
 * store and zctx until qn_fusion_free(). Returns QN_OK or QN_ENOMEM.
 */
int qn_fusion_new(struct event_base *base, const struct qn_config *cfg, qn_store *store,
                  qn_zctx *zctx, struct qn_fusion **out);
/* Fails every pending item with QN_ESHUTDOWN (their jobs complete) and frees. */
void qn_fusion_free(struct qn_fusion *f);

void qn_fusion_set_dedup(struct qn_fusion *f, const struct qn_fusion_dedup_hooks *hooks);

/* Histograms observed at each committed segment (NULL series: not observed). */
struct qn_fusion_metrics {
    struct qn_metric *segment_messages; /* messages per segment */
    struct qn_metric *segment_bytes;    /* compressed bytes per segment */
    qn_metrics *registry; /* held (qn_metrics_lock) around the observations: every loop's
                             fusion observes worker 0's series; NULL: not locked */
};
void qn_fusion_set_metrics(struct qn_fusion *f, const struct qn_fusion_metrics *m);

/* Segments of at least min_bytes raw bytes (min_bytes / 8 at zstd levels of 10
 * and more) are packed by a thread of pool (engine/offload.h), not on the
 * loop; their bundle is sent when they are back. Once, after qn_fusion_new;
 * fusion frees its port. QN_OK, QN_EINVAL or QN_ENOMEM. */
struct qn_offload;
int qn_fusion_set_offload(struct qn_fusion *f, struct qn_offload *pool, size_t min_bytes);

/*
 * Routes items idx[0..n) of job (all of the same queue and partition, in the
 * job's tenant) to their slot. The items' input fields must be set and stay valid until the job is
 * done. Items that are layer-1 followers must not be submitted (their owner
 * resolves them). Returns QN_OK, or QN_ELIMIT when fusion holds more than its
 * byte budget (nothing was queued; the caller fails those items).
 */
int qn_fusion_submit(struct qn_fusion *f, struct qn_push_job *job, const uint32_t *idx, size_t n);

/* Marks an item resolved with the given outcome and resolves its followers;
 * completes the job when it was the last. Used by fusion and by job owners for
 * items they resolve themselves (layer-1 followers, validation failures). */
void qn_push_item_resolve(struct qn_push_job *job, uint32_t idx, int status, int64_t offset,
                          const uint8_t *pid, const uint8_t *result_id, int err);

/* Makes item `follower` of fjob follow `leader` of ljob (it will be resolved as a
 * DUPLICATE of the leader, or fail with it). */
void qn_push_item_follow(struct qn_push_job *ljob, uint32_t leader, struct qn_push_job *fjob,
                         uint32_t follower);

/* The pool is up again (qn_store_on_state): flushes in doubt are resolved now
 * rather than at their next backoff. */
void qn_fusion_store_up(struct qn_fusion *f);

struct qn_fusion_stats {
    uint64_t flushes;            /* bundles sent */
    uint64_t segments;           /* segments sent */
    uint64_t frames;             /* frames sent (re-sends counted again) */
    uint64_t duplicates;         /* frames answered DUPLICATE by SQL */
    uint64_t committed;          /* frames committed (QUEUED) */
    uint32_t inflight;           /* bundles in flight now */
    uint64_t pending_bytes;      /* payload bytes waiting in slots */
    uint64_t in_doubt;           /* flushes whose result was lost (QN_EINDOUBT) */
    uint64_t resolves;           /* qn_store_push_resolve calls sent */
    uint64_t resolved_committed; /* frames found committed by their lost flush */
    uint32_t doubt_now;          /* flushes in doubt now */
    uint64_t doubt_failed;       /* frames failed after QN_FUSION_RESOLVE_MAX_MS */
    uint64_t committed_bytes;    /* payload bytes of the committed frames */
    uint64_t offloaded;          /* segments packed by the offload pool */
    uint32_t packing;            /* bundles whose segments the pool packs now */
    uint32_t packed_waiting;     /* bundles packed by the pool, waiting for a place in flight */
};
void qn_fusion_stats(const struct qn_fusion *f, struct qn_fusion_stats *out);

/* Queues the notify hook: cb(ud, tenant, queue, partition) runs after each
 * commit for every partition that received messages (waiters wake-up). */
void qn_fusion_on_commit(struct qn_fusion *f,
                         void (*cb)(void *ud, const uint8_t tenant[16], const char *queue,
                                    const char *partition),
                         void *ud);

#endif
