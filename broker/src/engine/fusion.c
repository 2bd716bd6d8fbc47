/*
 * engine/fusion.c - per-partition single-flight push batching (see fusion.h).
 *
 * Why one file of some 1,400 lines: a slot's single write in flight is the one
 * invariant every part serves (dispatch, packing, verdicts, re-sends of
 * survivors, duplicate lookups, and the resolution of a flush in doubt, which
 * must keep the slot INFLIGHT until its outcome is known so that no later push
 * overtakes it); split, the doubt list and the slots it pins would live in
 * different files that each see half of that invariant.
 *
 * Does: keep one slot per (tenant, queue, partition) that has frames waiting or
 * a flush in flight; dispatch ready slots in bundles (one tenant per bundle:
 * push_v1 takes one tenant) on the next loop turn with a lane open; pack and
 * compress each slot's frames into one segment; apply layer-2 dedup; resolve
 * items from push_v1's verdicts; re-send the survivors of a segment that held
 * duplicates; look up the original message ids of duplicates. Send a client's
 * pre-packed entry (PushSegments) as its own segment in its slot's turn, its
 * bytes as they came: stored whole, or not at all (DUPLICATE when every frame
 * was stored, else FAILED with QN_EDUPLICATE and the duplicates named).
 * Resolve a bundle whose push_v1 result was lost (QN_EINDOUBT): keep it on the
 * doubt list with its slots still INFLIGHT, and send the same segments with
 * qn_store_push_resolve when the pool is up (qn_fusion_store_up) or at the next
 * backoff, again and again while that is in doubt or refused, for up to
 * QN_FUSION_RESOLVE_MAX_MS. Its answer is applied as a push's, except that a
 * duplicate whose original turns out to be the item itself (same message id,
 * read back from the stored segment) is the lost commit: QUEUED at that offset.
 * Does not: decide duplicates (SQL does); retry a failed bundle (a failure other
 * than QN_EINDOUBT means nothing was written: the client retries, and dedup
 * makes that safe with transaction ids).
 *
 * Slot lifecycle:
 *
 *     (absent) --submit--> READY --dispatch--> INFLIGHT --done, frames waiting--> READY
 *                                                 |  ^
 *                                                 |  +--in doubt: stays INFLIGHT
 *                                                 |     until resolved or failed
 *                                                 +--done, nothing waiting--> (freed)
 *
 * Bundle lifecycle (`inflight` counts SENT bundles, at most FUSION_MAX_INFLIGHT,
 * each holding one lane; a bundle in doubt or RESOLVING holds none):
 *
 *     (built) --a segment large enough and the pool takes it--> PACKING
 *     PACKING (on f->packing) --every segment back, a place free--> SENT
 *     PACKING --every segment back, no place--> QUEUED (f->sendq) --place--> SENT
 *     (built) --packed on the loop--> SENT
 *     SENT --answer--> (applied, freed)
 *     SENT --QN_EINDOUBT--> DOUBT --pool up / backoff--> RESOLVING
 *     RESOLVING --answer--> (applied, freed)
 *     RESOLVING --in doubt, refused, failed--> DOUBT (backoff)
 *     DOUBT|RESOLVING --QN_FUSION_RESOLVE_MAX_MS, or shutdown--> (items failed
 *                                                   with QN_EINDOUBT, freed)
 *
 * Invariants:
 *   1. At most one flush per slot is in flight (state INFLIGHT), so a partition's
 *      offsets follow its arrival order and no two flushes race on its allocator.
 *   2. A slot is in the ready list iff its state is READY; READY implies
 *      npending > 0.
 *   3. Every submitted item is resolved exactly once (qn_push_item_resolve), and
 *      a job's done() runs exactly once, when its last item is resolved.
 *   4. Survivors of a segment with duplicates go back to the FRONT of their slot,
 *      so their order relative to later arrivals is kept.
 *   5. A slot whose flush is in doubt stays INFLIGHT until the flush is resolved,
 *      so no later frame of that partition is sent before the lost one's fate
 *      is known and applied (its survivors, if any, go first).
 *   6. An item is answered QUEUED only for a segment the database answered
 *      QUEUED, or whose frame the database holds with the item's own message id.
 *   7. A pre-packed entry is never merged, split or re-packed: its segment is
 *      the client's bytes. A slot's flush is one segment: the entry at its
 *      head, or the frames up to its next entry (so a Push item and an entry's
 *      frame are never in one flush of a partition: the later one is judged
 *      against the earlier one's commit).
 */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "engine/fusion.h"
#include "engine/map.h"
#include "engine/offload.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "queen/store.h"
#include "timer.h"

/* A segment carries at most this many frames and raw bytes; the rest waits for
 * the slot's next flush. Keeps every segment far below QUEEN_SEGMENT_RAW_MAX. */
#define SEG_MAX_FRAMES 10000
#define SEG_MAX_RAW (8u * 1024u * 1024u)
/* Bytes of payload and transaction ids fusion may hold waiting. */
#define FUSION_MAX_PENDING_BYTES (256ull * 1024u * 1024u)
/* Bundles in flight at once, at most. With QUEEN_PUSH_LANE_MS > 0 one lane is
 * open, plus one for each bundle in flight that long (a slow round trip, a lock
 * wait), or when a full bundle is waiting: under load, what arrives while a
 * commit is in flight leaves together in the next, so a loop makes fewer, larger
 * commits; a stuck commit still lets the others by. */
#define FUSION_MAX_INFLIGHT 4
/* Backoff between attempts to resolve a bundle in doubt. */
#define RESOLVE_MIN_MS 50
#define RESOLVE_MAX_MS 2000

enum slot_state { SLOT_READY = 1, SLOT_INFLIGHT = 2 };

struct slot {
    struct qn_map_node node;
    enum slot_state state;
    const char *queue;           /* points into key */
    const char *partition;       /* points into key */
    struct qn_item_ref *pending; /* waiting frames, arrival order */
    size_t npending;
    size_t cap;
    uint64_t pending_bytes;
    struct slot *ready_next;
    size_t klen;
    char key[]; /* tenant (16 bytes) queue \0 partition \0 */
};

static const uint8_t *slot_tenant(const struct slot *s)
{
    return (const uint8_t *)s->key;
}

struct seg {
    struct slot *slot;
    struct qn_item_ref *leaders; /* the segment's frames, in order; or its one
                                    pre-packed entry */
    size_t nleaders;
    bool pre;            /* leaders[0] is a pre-packed entry (nleaders == 1) */
    uint32_t count;      /* frames in the segment: nleaders, or the entry's count */
    uint8_t *hashes;     /* count * 16 */
    struct qn_buf blob;  /* packed here (empty for a pre-packed entry) */
    const uint8_t *data; /* the bytes sent: blob's, or the entry's (borrowed) */
    size_t len;
    uint8_t cache_pid[16]; /* partition the dedup watermark is for */
    /* packed off the loop (engine/offload.h): frames wait here until the job
     * is back with blob or pack_rc */
    struct qn_frame *frames;
    bool packing;
    int pack_rc;
    struct bundle *owner;
    struct qn_offload_job job;
};

struct bundle {
    struct qn_fusion *f;
    struct seg *segs;
    size_t nsegs;
    /* in doubt (its push_v1 result was lost): on f->doubt until resolved */
    bool doubt;
    bool resolving;         /* a qn_store_push_resolve is in flight */
    int64_t doubt_since_ms; /* when the result was lost */
    int64_t next_try_ms;    /* the next resolve attempt, at the earliest */
    int64_t backoff_ms;
    unsigned attempts;
    struct bundle *dprev, *dnext;
    /* segments being packed off the loop; the bundle is on f->packing meanwhile,
     * then on f->sendq until a place in flight is free */
    unsigned packing;
    uint8_t tenant[16];
    struct bundle *pprev, *pnext;
    struct bundle *snext;
    int lane; /* its place in f->lane_sent while SENT; -1: none */
};

/* Original-message-id lookup for duplicates of one segment. */
struct lookup {
    struct qn_fusion *f;
    uint8_t pid[16];
    struct qn_item_ref *refs;
    int64_t *offsets;
    size_t n;
    /* The segment was a resolve's: a duplicate whose original carries the item's
     * own message id is the lost commit (QUEUED). own_guess: what to assume when
     * the originals cannot be read (every frame listed at consecutive offsets,
     * as a committed segment would be). */
    bool resolve;
    bool own_guess;
    char *queue, *partition; /* resolve: for the commit hook (copies) */
    uint8_t tenant[16];      /* resolve: the slot's tenant, for the commit hook */
    struct qn_item_ref pre;  /* a pre-packed entry's lookup (refs unused) */
};

struct qn_fusion {
    struct event_base *base;
    const struct qn_config *cfg; /* segment_raw_max, max_send_bytes, zstd_level, bundle_max */
    qn_store *store;
    qn_zctx *zctx;
    struct qn_map slots;
    struct slot *ready_head, *ready_tail;
    struct event *dispatch_ev;
    bool dispatch_scheduled;
    uint32_t inflight;
    int64_t lane_sent[FUSION_MAX_INFLIGHT]; /* when each lane's bundle was sent; -1: free */
    struct event *lane_ev;                  /* the next lane to open with ready slots waiting */
    size_t nready;                          /* slots in the ready list */
    uint32_t lookups;
    uint64_t pending_bytes;
    struct qn_fusion_dedup_hooks dedup;
    struct qn_fusion_metrics metrics; /* segment histograms (NULL series: none) */
    void (*on_commit)(void *ud, const uint8_t tenant[16], const char *queue, const char *partition);
    void *on_commit_ud;
    struct bundle *doubt; /* bundles in doubt, oldest first */
    struct bundle *doubt_tail;
    struct event *resolve_ev;          /* the next resolve pass */
    struct qn_offload_port *offload;   /* NULL: every segment is packed on the loop */
    size_t offload_min;                /* raw bytes from which a segment is packed off it */
    struct bundle *packing;            /* bundles waiting for segments packed off the loop */
    struct bundle *sendq, *sendq_tail; /* packed, waiting for a place in flight */
    struct qn_fusion_stats stats;
};

static struct qn_push_item *item_of(struct qn_item_ref r)
{
    return &r.job->items[r.idx];
}

static size_t item_bytes(const struct qn_push_item *it)
{
    if (it->pre != NULL)
        return it->pre->blob_len + (size_t)it->pre->count * 32 + 64;
    return it->frame.payload_len + it->frame.txn_len + 64;
}

/* ---------------------------------------------------------------- items */

void qn_push_item_follow(struct qn_push_job *ljob, uint32_t leader, struct qn_push_job *fjob,
                         uint32_t follower)
{
    struct qn_push_item *l = &ljob->items[leader];
    struct qn_push_item *fi = &fjob->items[follower];
    /* Flatten: the follower's own followers follow the leader too. */
    struct qn_item_ref chain = fi->first_follower;
    fi->first_follower = (struct qn_item_ref){NULL, 0};
    fi->next_follower = l->first_follower;
    l->first_follower = (struct qn_item_ref){fjob, follower};
    if (chain.job != NULL) {
        struct qn_item_ref end = chain;
        while (item_of(end)->next_follower.job != NULL)
            end = item_of(end)->next_follower;
        item_of(end)->next_follower = fi->next_follower;
        fi->next_follower = chain;
    }
}

static void finish_one(struct qn_push_job *job)
{
    assert(job->pending > 0);
    if (--job->pending == 0)
        job->done(job);
}

void qn_push_item_resolve(struct qn_push_job *job, uint32_t idx, int status, int64_t offset,
                          const uint8_t *pid, const uint8_t *result_id, int err)
{
    struct qn_push_item *it = &job->items[idx];
    assert(it->status == QN_ITEM_PENDING);
    it->status = status;
    it->offset = offset;
    it->err = err;
    if (pid != NULL)
        memcpy(it->pid, pid, 16);
    if (result_id != NULL)
        memcpy(it->result_id, result_id, QN_UUID_LEN);
    else
        memset(it->result_id, 0, QN_UUID_LEN);

    /* Followers inherit: a duplicate of whatever the leader became. Collect the
     * chain first: resolving a follower may complete (and free) its job. */
    struct qn_item_ref r = it->first_follower;
    it->first_follower = (struct qn_item_ref){NULL, 0};
    int fstatus = status == QN_ITEM_FAILED ? QN_ITEM_FAILED : QN_ITEM_DUPLICATE;
    uint8_t rid[QN_UUID_LEN], rpid[16];
    memcpy(rid, it->result_id, sizeof rid);
    memcpy(rpid, it->pid, sizeof rpid);
    while (r.job != NULL) {
        struct qn_push_item *fi = item_of(r);
        struct qn_item_ref next = fi->next_follower;
        fi->next_follower = (struct qn_item_ref){NULL, 0};
        fi->status = fstatus;
        fi->offset = offset;
        fi->err = err;
        memcpy(fi->pid, rpid, 16);
        memcpy(fi->result_id, rid, QN_UUID_LEN);
        if (r.job != job)
            finish_one(r.job);
        else
            job->pending--; /* our own job completes below, once */
        r = next;
    }
    finish_one(job);
}

/* ---------------------------------------------------------------- slots */

static void ready_push(struct qn_fusion *f, struct slot *s)
{
    assert(s->npending > 0);
    s->state = SLOT_READY;
    s->ready_next = NULL;
    f->nready++;
    if (f->ready_tail)
        f->ready_tail->ready_next = s;
    else
        f->ready_head = s;
    f->ready_tail = s;
}

/* The first ready slot of tenant (any tenant when NULL), taken off the list;
 * NULL when there is none. Slots of other tenants keep their places. */
static struct slot *ready_pop(struct qn_fusion *f, const uint8_t *tenant)
{
    struct slot *prev = NULL, *s = f->ready_head;
    while (s != NULL && tenant != NULL && memcmp(slot_tenant(s), tenant, 16) != 0) {
        prev = s;
        s = s->ready_next;
    }
    if (s == NULL)
        return NULL;
    if (prev)
        prev->ready_next = s->ready_next;
    else
        f->ready_head = s->ready_next;
    if (f->ready_tail == s)
        f->ready_tail = prev;
    s->ready_next = NULL;
    f->nready--;
    return s;
}

static void slot_free(struct qn_fusion *f, struct slot *s)
{
    qn_map_remove(&f->slots, &s->node);
    free(s->pending);
    free(s);
}

static void schedule_dispatch(struct qn_fusion *f)
{
    if (!f->dispatch_scheduled && f->ready_head != NULL) {
        f->dispatch_scheduled = true;
        event_active(f->dispatch_ev, 0, 0);
    }
}

/* Room for `more` entries; the pending array never exceeds the fusion byte budget
 * in aggregate, so its length is bounded too. */
static int slot_reserve(struct slot *s, size_t more)
{
    if (s->npending + more <= s->cap)
        return QN_OK;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < s->npending + more)
        cap *= 2;
    struct qn_item_ref *p = realloc(s->pending, cap * sizeof *p);
    if (p == NULL)
        return QN_ENOMEM;
    s->pending = p;
    s->cap = cap;
    return QN_OK;
}

int qn_fusion_submit(struct qn_fusion *f, struct qn_push_job *job, const uint32_t *idx, size_t n)
{
    if (n == 0)
        return QN_OK;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += item_bytes(&job->items[idx[i]]);
    if (f->pending_bytes + bytes > FUSION_MAX_PENDING_BYTES)
        return QN_ELIMIT;

    const struct qn_push_item *first = &job->items[idx[0]];
    size_t ql = strlen(first->queue), pl = strlen(first->partition);
    size_t klen = 16 + ql + 1 + pl + 1;
    char kbuf[620];
    if (klen > sizeof kbuf)
        return QN_EINVAL;
    memcpy(kbuf, job->tenant, 16);
    memcpy(kbuf + 16, first->queue, ql + 1);
    memcpy(kbuf + 16 + ql + 1, first->partition, pl + 1);

    struct slot *s = NULL;
    struct qn_map_node *node = qn_map_get(&f->slots, kbuf, klen);
    if (node != NULL) {
        s = qn_container_of(node, struct slot, node);
    } else {
        s = calloc(1, sizeof *s + klen);
        if (s == NULL)
            return QN_ENOMEM;
        memcpy(s->key, kbuf, klen);
        s->klen = klen;
        s->queue = s->key + 16;
        s->partition = s->key + 16 + ql + 1;
        int rc = qn_map_put(&f->slots, &s->node, s->key, klen);
        if (rc != QN_OK) {
            free(s);
            return rc;
        }
    }
    if (slot_reserve(s, n) != QN_OK) {
        if (s->npending == 0 && s->state == 0)
            slot_free(f, s);
        return QN_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        s->pending[s->npending++] = (struct qn_item_ref){job, idx[i]};
    s->pending_bytes += bytes;
    f->pending_bytes += bytes;
    f->stats.pending_bytes = f->pending_bytes;
    if (s->state == 0) {
        ready_push(f, s);
        schedule_dispatch(f);
    }
    return QN_OK;
}

/* ---------------------------------------------------------------- flush */

/* Open-addressing set of 16-byte hashes -> leader position, for layer 2. */
struct hset {
    uint32_t *slots; /* leader index + 1; 0 = empty */
    size_t mask;
};

static int hset_init(struct hset *h, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2)
        cap *= 2;
    h->slots = calloc(cap, sizeof *h->slots);
    h->mask = cap - 1;
    return h->slots ? QN_OK : QN_ENOMEM;
}

static uint64_t hash_slot(const uint8_t *h)
{
    uint64_t v;
    memcpy(&v, h + 8, sizeof v); /* xxh3 bits are already well mixed */
    return v;
}

/* Returns the leader position holding hash, or inserts pos and returns -1. */
static long hset_find_or_add(struct hset *h, const uint8_t *hashes, const uint8_t *hash,
                             uint32_t pos)
{
    size_t i = hash_slot(hash) & h->mask;
    while (h->slots[i] != 0) {
        uint32_t l = h->slots[i] - 1;
        if (memcmp(hashes + (size_t)l * 16, hash, 16) == 0)
            return (long)l;
        i = (i + 1) & h->mask;
    }
    h->slots[i] = pos + 1;
    return -1;
}

static void seg_release(struct seg *sg)
{
    free(sg->leaders);
    free(sg->hashes);
    free(sg->frames);
    qn_buf_free(&sg->blob);
    memset(sg, 0, sizeof *sg);
}

static void bundle_free(struct bundle *b)
{
    for (size_t i = 0; i < b->nsegs; i++)
        seg_release(&b->segs[i]);
    free(b->segs);
    free(b);
}

/* Fails every leader of a segment (their followers fail with them). */
static void seg_fail(struct seg *sg, int err)
{
    for (size_t j = 0; j < sg->nleaders; j++) {
        struct qn_item_ref r = sg->leaders[j];
        qn_push_item_resolve(r.job, r.idx, QN_ITEM_FAILED, -1, NULL, NULL, err);
    }
}

/* Takes frames from the head of the slot, up to its first pre-packed entry,
 * into a segment: layer-2 dedup, caps, packing. */
static int seg_build(struct qn_fusion *f, struct seg *sg, struct slot *s)
{
    /* A segment stays readable: never larger than what readers may decompress.
     * And it stays cheap to read: a pop can only take what surely fits its
     * response (QUEEN_MAX_SEND_BYTES) and the sizes inside a segment are not
     * known to SQL, so a segment larger than the response was read a few
     * messages at a time (every one of those pops decompressing all of it).
     * An eighth of the send limit: a Pop takes several whole, and a Fetch of
     * the default 1 MiB one whole. */
    size_t raw_cap = SEG_MAX_RAW;
    if ((size_t)f->cfg->segment_raw_max / 2 < raw_cap)
        raw_cap = (size_t)f->cfg->segment_raw_max / 2;
    if (f->cfg->max_send_bytes > 0 && (size_t)f->cfg->max_send_bytes / 8 < raw_cap)
        raw_cap = (size_t)f->cfg->max_send_bytes / 8;
    size_t take = 0, raw = 0;
    while (take < s->npending && take < SEG_MAX_FRAMES && item_of(s->pending[take])->pre == NULL) {
        size_t b = item_bytes(item_of(s->pending[take]));
        if (take > 0 && raw + b > raw_cap)
            break;
        raw += b;
        take++;
    }
    int rc = QN_ENOMEM;
    struct qn_frame *frames = NULL;
    struct hset set = {NULL, 0};
    sg->slot = s;
    sg->leaders = malloc(take * sizeof *sg->leaders);
    sg->hashes = malloc(take * 16);
    frames = malloc(take * sizeof *frames);
    if (sg->leaders == NULL || sg->hashes == NULL || frames == NULL ||
        hset_init(&set, take) != QN_OK)
        goto out;

    for (size_t i = 0; i < take; i++) {
        struct qn_item_ref r = s->pending[i];
        struct qn_push_item *it = item_of(r);
        uint64_t b = item_bytes(it);
        s->pending_bytes -= b;
        f->pending_bytes -= b;
        long l = hset_find_or_add(&set, sg->hashes, it->hash, (uint32_t)sg->nleaders);
        if (l >= 0) {
            struct qn_item_ref lr = sg->leaders[l];
            qn_push_item_follow(lr.job, lr.idx, r.job, r.idx);
            continue;
        }
        memcpy(sg->hashes + sg->nleaders * 16, it->hash, 16);
        frames[sg->nleaders] = it->frame;
        sg->leaders[sg->nleaders++] = r;
    }
    memmove(s->pending, s->pending + take, (s->npending - take) * sizeof *s->pending);
    s->npending -= take;
    f->stats.pending_bytes = f->pending_bytes;

    sg->count = (uint32_t)sg->nleaders;
    /* Large, or not so large at a high level: a pool thread packs it (see
     * offload_segs), the loop goes on serving. */
    if (f->offload != NULL &&
        (raw >= f->offload_min || (f->cfg->zstd_level >= 10 && raw >= f->offload_min / 8))) {
        sg->frames = frames;
        frames = NULL;
        sg->packing = true;
        rc = QN_OK;
        goto out;
    }
    rc = qn_segment_pack(f->zctx, frames, sg->nleaders, (int)f->cfg->zstd_level, &sg->blob, NULL);
    sg->data = sg->blob.data;
    sg->len = sg->blob.len;
out:
    free(frames);
    free(set.slots);
    return rc;
}

/* Takes the pre-packed entry at the head of the slot as a segment of its own:
 * the client's bytes, sent as they are. On failure the entry is failed. */
static int seg_take_pre(struct qn_fusion *f, struct seg *sg, struct slot *s)
{
    struct qn_item_ref r = s->pending[0];
    struct qn_push_item *it = item_of(r);
    struct qn_prepacked *pe = it->pre;
    assert(pe != NULL && pe->count > 0);
    uint64_t by = item_bytes(it);
    memmove(s->pending, s->pending + 1, (s->npending - 1) * sizeof *s->pending);
    s->npending--;
    s->pending_bytes -= by;
    f->pending_bytes -= by;
    f->stats.pending_bytes = f->pending_bytes;
    sg->slot = s;
    sg->pre = true;
    sg->leaders = malloc(sizeof *sg->leaders);
    sg->hashes = malloc((size_t)pe->count * 16);
    if (sg->leaders == NULL || sg->hashes == NULL) {
        qn_push_item_resolve(r.job, r.idx, QN_ITEM_FAILED, -1, NULL, NULL, QN_ENOMEM);
        return QN_ENOMEM;
    }
    sg->leaders[0] = r;
    sg->nleaders = 1;
    sg->count = pe->count;
    memcpy(sg->hashes, pe->hashes, (size_t)pe->count * 16);
    sg->data = pe->blob;
    sg->len = pe->blob_len;
    return QN_OK;
}

/* Whether every frame's transaction id is a freshly minted message id: nothing
 * stored can match it, so the broker may vouch for the whole partition. */
static bool seg_all_minted(const struct seg *sg)
{
    if (sg->pre)
        return false;
    for (size_t j = 0; j < sg->nleaders; j++)
        if (!item_of(sg->leaders[j])->minted_txn)
            return false;
    return true;
}

static void lookup_free(struct lookup *lk)
{
    free(lk->refs);
    free(lk->offsets);
    free(lk->queue);
    free(lk->partition);
    free(lk);
}

/* Resolves the duplicates of lk: ids[i] is the original's message id of entry i
 * when known[i] (either may be NULL: nothing known; the zero id is answered).
 * Frees lk. */
static void lookup_apply(struct qn_fusion *f, struct lookup *lk, uint8_t (*ids)[QN_UUID_LEN],
                         const bool *known)
{
    /* Which entries are the item itself (a resolve's lost commit), decided before
     * anything is resolved: resolving the last item of a job frees it. */
    size_t own = 0;
    bool *is_own = lk->resolve ? calloc(lk->n ? lk->n : 1, sizeof *is_own) : NULL;
    for (size_t i = 0; is_own && i < lk->n; i++) {
        const struct qn_push_item *it = item_of(lk->refs[i]);
        bool k = known != NULL && ids != NULL && known[i];
        is_own[i] = k ? memcmp(ids[i], it->frame.message_id, QN_UUID_LEN) == 0 : lk->own_guess;
        own += is_own[i];
    }
    if (lk->resolve && is_own == NULL && lk->own_guess)
        own = lk->n; /* out of memory: the store's own rule (every frame listed) */
    if (own > 0) {
        f->stats.resolved_committed += own;
        f->stats.committed += own;
        f->stats.duplicates -= own;
        if (f->on_commit && lk->queue && lk->partition)
            f->on_commit(f->on_commit_ud, lk->tenant, lk->queue, lk->partition);
    }
    for (size_t i = 0; i < lk->n; i++) {
        struct qn_item_ref r = lk->refs[i];
        bool mine = is_own ? is_own[i] : (lk->resolve && lk->own_guess);
        if (mine) {
            f->stats.committed_bytes += item_of(r)->frame.payload_len;
            uint8_t id[QN_UUID_LEN];
            memcpy(id, item_of(r)->frame.message_id, sizeof id);
            qn_push_item_resolve(r.job, r.idx, QN_ITEM_QUEUED, lk->offsets[i], lk->pid, id, QN_OK);
        } else {
            bool k = known != NULL && ids != NULL && known[i];
            qn_push_item_resolve(r.job, r.idx, QN_ITEM_DUPLICATE, lk->offsets[i], lk->pid,
                                 k ? ids[i] : NULL, QN_OK);
        }
    }
    free(is_own);
    lookup_free(lk);
}

static void lookup_done(void *ud, const struct qn_store_status *st,
                        const struct qn_segments_result *res)
{
    struct lookup *lk = ud;
    struct qn_fusion *f = lk->f;
    f->lookups--;
    uint8_t(*ids)[QN_UUID_LEN] = calloc(lk->n ? lk->n : 1, QN_UUID_LEN);
    bool *known = calloc(lk->n ? lk->n : 1, sizeof *known);
    for (size_t i = 0; ids != NULL && known != NULL && i < lk->n; i++) {
        if (st->code != QN_OK)
            continue;
        for (size_t k = 0; k < res->n; k++) {
            const struct qn_segment_row *row = &res->rows[k];
            if (lk->offsets[i] < row->base || lk->offsets[i] > row->end)
                continue;
            const uint8_t *raw;
            size_t rawlen;
            struct qn_frame fr;
            if (qn_segment_decompress(f->zctx, row->blob, row->blob_len,
                                      (size_t)f->cfg->segment_raw_max, &raw, &rawlen) == QN_OK &&
                qn_segment_frame_at(raw, rawlen, row->base, lk->offsets[i], &fr, NULL) == QN_OK) {
                memcpy(ids[i], fr.message_id, QN_UUID_LEN);
                known[i] = true;
            }
            break;
        }
    }
    lookup_apply(f, lk, ids, known);
    free(ids);
    free(known);
}

/* Resolves duplicates (after looking up the originals' ids) and puts the
 * survivors back at the front of the slot. resolve: r answers a resolve (see
 * struct lookup). */
static void seg_duplicates(struct qn_fusion *f, struct seg *sg, const struct qn_push_seg_result *r,
                           bool resolve)
{
    struct slot *s = sg->slot;
    struct lookup *lk = calloc(1, sizeof *lk);
    bool *dup = calloc(sg->nleaders, sizeof *dup);
    int64_t *orig = calloc(sg->nleaders, sizeof *orig);
    if (lk)
        lk->refs = calloc(r->ndups ? r->ndups : 1, sizeof *lk->refs);
    if (lk)
        lk->offsets = calloc(r->ndups ? r->ndups : 1, sizeof *lk->offsets);
    if (lk && resolve) {
        lk->queue = strdup(s->queue);
        lk->partition = strdup(s->partition);
        memcpy(lk->tenant, slot_tenant(s), 16);
    }
    size_t nsurv = sg->nleaders;
    for (size_t k = 0; dup && orig && k < r->ndups; k++) {
        uint32_t i = r->dups[k].idx;
        if (i < sg->nleaders && !dup[i]) {
            dup[i] = true;
            orig[i] = r->dups[k].offset;
            nsurv--;
        }
    }
    if (lk == NULL || lk->refs == NULL || lk->offsets == NULL || dup == NULL || orig == NULL ||
        (resolve && (lk->queue == NULL || lk->partition == NULL)) ||
        slot_reserve(s, nsurv) != QN_OK) {
        /* Out of memory on a rare path: fail the segment rather than guess (a
         * resolve's items: their outcome stays unknown). */
        seg_fail(sg, resolve ? QN_EINDOUBT : QN_ENOMEM);
        goto out;
    }
    memcpy(lk->pid, r->pid, 16);
    lk->f = f;
    lk->resolve = resolve;
    /* A committed segment comes back whole, at consecutive offsets in frame order. */
    lk->own_guess = resolve && nsurv == 0;
    for (size_t i = 1; lk->own_guess && i < sg->nleaders; i++)
        lk->own_guess = orig[i] == orig[i - 1] + 1;
    /* survivors first, in order, ahead of later arrivals */
    memmove(s->pending + nsurv, s->pending, s->npending * sizeof *s->pending);
    size_t w = 0;
    for (size_t i = 0; i < sg->nleaders; i++) {
        struct qn_item_ref ref = sg->leaders[i];
        if (dup[i]) {
            lk->refs[lk->n] = ref;
            lk->offsets[lk->n++] = orig[i];
            continue;
        }
        uint64_t b = item_bytes(item_of(ref));
        s->pending[w++] = ref;
        s->pending_bytes += b;
        f->pending_bytes += b;
    }
    s->npending += nsurv;
    f->stats.duplicates += lk->n;
    if (lk->n > 0) {
        f->lookups++;
        struct qn_call_opts opts = {0, slot_tenant(s), NULL};
        if (qn_store_segment_at(f->store, r->pid, lk->offsets, lk->n, &opts, lookup_done, lk,
                                NULL) == QN_OK) {
            lk = NULL;
        } else {
            f->lookups--;
            /* lookup not sent: the originals cannot be read */
            lookup_apply(f, lk, NULL, NULL);
            lk = NULL;
        }
    }
out:
    if (lk)
        lookup_free(lk);
    free(dup);
    free(orig);
}

/* A pre-packed entry's duplicates are known (known[k]: dups[k].id was read
 * back; NULL: nothing was): resolves the entry and frees lk. */
static void pre_apply(struct qn_fusion *f, struct lookup *lk, const bool *known)
{
    struct qn_item_ref r = lk->pre;
    struct qn_prepacked *pe = item_of(r)->pre;
    /* A resolve that finds every frame stored at consecutive offsets with the
     * frames' own message ids found its own lost commit. */
    bool own = lk->resolve && lk->own_guess;
    for (size_t k = 0; own && known != NULL && k < pe->ndups; k++)
        if (known[k])
            own = memcmp(pe->dups[k].id, pe->ids + (size_t)pe->dups[k].idx * QN_UUID_LEN,
                         QN_UUID_LEN) == 0;
    if (own) {
        int64_t base = pe->dups[0].offset;
        uint8_t id[QN_UUID_LEN];
        memcpy(id, pe->ids, QN_UUID_LEN);
        f->stats.resolved_committed += pe->count;
        f->stats.committed += pe->count;
        f->stats.duplicates -= pe->ndups;
        f->stats.committed_bytes += pe->payload_bytes;
        pe->ndups = 0;
        if (f->on_commit && lk->queue && lk->partition)
            f->on_commit(f->on_commit_ud, lk->tenant, lk->queue, lk->partition);
        qn_push_item_resolve(r.job, r.idx, QN_ITEM_QUEUED, base, lk->pid, id, QN_OK);
    } else if (pe->ndups == pe->count) {
        uint8_t id[QN_UUID_LEN];
        memcpy(id, pe->dups[0].id, QN_UUID_LEN);
        qn_push_item_resolve(r.job, r.idx, QN_ITEM_DUPLICATE, pe->dups[0].offset, lk->pid, id,
                             QN_OK);
    } else {
        qn_push_item_resolve(r.job, r.idx, QN_ITEM_FAILED, -1, lk->pid, NULL, QN_EDUPLICATE);
    }
    lookup_free(lk);
}

static void pre_lookup_done(void *ud, const struct qn_store_status *st,
                            const struct qn_segments_result *res)
{
    struct lookup *lk = ud;
    struct qn_fusion *f = lk->f;
    struct qn_prepacked *pe = item_of(lk->pre)->pre;
    f->lookups--;
    bool *known = calloc(pe->ndups ? pe->ndups : 1, sizeof *known);
    for (size_t k = 0; known != NULL && st->code == QN_OK && k < pe->ndups; k++) {
        for (size_t j = 0; j < res->n; j++) {
            const struct qn_segment_row *row = &res->rows[j];
            if (pe->dups[k].offset < row->base || pe->dups[k].offset > row->end)
                continue;
            const uint8_t *raw;
            size_t rawlen;
            struct qn_frame fr;
            if (qn_segment_decompress(f->zctx, row->blob, row->blob_len,
                                      (size_t)f->cfg->segment_raw_max, &raw, &rawlen) == QN_OK &&
                qn_segment_frame_at(raw, rawlen, row->base, pe->dups[k].offset, &fr, NULL) ==
                    QN_OK) {
                memcpy(pe->dups[k].id, fr.message_id, QN_UUID_LEN);
                known[k] = true;
            }
            break;
        }
    }
    pre_apply(f, lk, known);
    free(known);
}

/* SQL found duplicates in a pre-packed entry's segment (nothing was written):
 * records them, looks up the originals' ids, then resolves the entry. No
 * survivors: a pre-packed segment is stored whole or not at all. */
static void pre_duplicates(struct qn_fusion *f, struct seg *sg, const struct qn_push_seg_result *r,
                           bool resolve)
{
    struct qn_item_ref ref = sg->leaders[0];
    struct qn_prepacked *pe = item_of(ref)->pre;
    pe->ndups = 0;
    for (size_t k = 0; k < r->ndups && pe->ndups < pe->count; k++) {
        if (r->dups[k].idx >= pe->count)
            continue;
        struct qn_prepacked_dup *d = &pe->dups[pe->ndups++];
        d->idx = r->dups[k].idx;
        d->offset = r->dups[k].offset;
        memset(d->id, 0, QN_UUID_LEN);
    }
    if (pe->ndups == 0) {
        QN_ERROR("push: database answered a duplicate without duplicate frames (%s/%s)",
                 sg->slot->queue, sg->slot->partition);
        qn_push_item_resolve(ref.job, ref.idx, QN_ITEM_FAILED, -1, NULL, NULL, QN_EPROTOCOL_DB);
        return;
    }
    f->stats.duplicates += pe->ndups;
    struct lookup *lk = calloc(1, sizeof *lk);
    if (lk)
        lk->offsets = malloc(pe->ndups * sizeof *lk->offsets);
    if (lk && resolve) {
        lk->queue = strdup(sg->slot->queue);
        lk->partition = strdup(sg->slot->partition);
        memcpy(lk->tenant, slot_tenant(sg->slot), 16);
    }
    if (lk == NULL || lk->offsets == NULL ||
        (resolve && (lk->queue == NULL || lk->partition == NULL))) {
        if (lk)
            lookup_free(lk);
        qn_push_item_resolve(ref.job, ref.idx, QN_ITEM_FAILED, -1, NULL, NULL,
                             resolve ? QN_EINDOUBT : QN_ENOMEM);
        return;
    }
    lk->f = f;
    lk->pre = ref;
    lk->resolve = resolve;
    memcpy(lk->pid, r->pid, 16);
    /* A committed segment comes back whole, at consecutive offsets in frame order. */
    lk->own_guess = resolve && pe->ndups == pe->count;
    for (size_t k = 0; k < pe->ndups; k++) {
        lk->offsets[k] = pe->dups[k].offset;
        if (pe->dups[k].idx != k || pe->dups[k].offset != pe->dups[0].offset + (int64_t)k)
            lk->own_guess = false;
    }
    f->lookups++;
    struct qn_call_opts opts = {0, slot_tenant(sg->slot), NULL};
    if (qn_store_segment_at(f->store, r->pid, lk->offsets, pe->ndups, &opts, pre_lookup_done, lk,
                            NULL) != QN_OK) {
        f->lookups--;
        pre_apply(f, lk, NULL); /* the originals cannot be read */
    }
}

/* A pre-packed entry's segment committed at r->base. */
static void pre_queued(struct qn_fusion *f, struct seg *sg, const struct qn_push_seg_result *r)
{
    struct qn_item_ref ref = sg->leaders[0];
    struct qn_prepacked *pe = item_of(ref)->pre;
    uint8_t id[QN_UUID_LEN];
    memcpy(id, pe->ids, QN_UUID_LEN);
    pe->ndups = 0;
    f->stats.committed += pe->count;
    f->stats.committed_bytes += pe->payload_bytes;
    qn_push_item_resolve(ref.job, ref.idx, QN_ITEM_QUEUED, r->base, r->pid, id, QN_OK);
}

static void slot_settle(struct qn_fusion *f, struct slot *s)
{
    if (s->npending > 0)
        ready_push(f, s);
    else
        slot_free(f, s);
}

/* Applies the database's answer (or failure) to every segment of b, settles
 * their slots and frees b. resolve: the answer is a resolve's. */
static void bundle_apply(struct qn_fusion *f, struct bundle *b, const struct qn_store_status *st,
                         const struct qn_push_result *res, bool resolve)
{
    bool ok = st->code == QN_OK && res != NULL && res->n == b->nsegs;
    if (st->code == QN_OK && !ok)
        QN_ERROR("push: database answered %zu segment results for %zu segments", res ? res->n : 0,
                 b->nsegs);
    for (size_t i = 0; i < b->nsegs; i++) {
        struct seg *sg = &b->segs[i];
        if (!ok) {
            seg_fail(sg, st->code == QN_OK ? QN_EPROTOCOL_DB : st->code);
        } else {
            const struct qn_push_seg_result *r = &res->segs[i];
            if (r->status == QN_PUSH_QUEUED && sg->pre) {
                pre_queued(f, sg, r);
            } else if (r->status == QN_PUSH_QUEUED) {
                for (size_t j = 0; j < sg->nleaders; j++) {
                    struct qn_item_ref ref = sg->leaders[j];
                    uint8_t id[QN_UUID_LEN];
                    memcpy(id, item_of(ref)->frame.message_id, sizeof id);
                    f->stats.committed_bytes += item_of(ref)->frame.payload_len;
                    qn_push_item_resolve(ref.job, ref.idx, QN_ITEM_QUEUED, r->base + (int64_t)j,
                                         r->pid, id, QN_OK);
                }
                f->stats.committed += sg->nleaders;
            } else if (sg->pre) {
                pre_duplicates(f, sg, r, resolve);
            } else {
                seg_duplicates(f, sg, r, resolve);
            }
            if (r->status == QN_PUSH_QUEUED) {
                if (f->metrics.registry != NULL)
                    qn_metrics_lock(f->metrics.registry);
                qn_metric_observe(f->metrics.segment_messages, (double)sg->count);
                qn_metric_observe(f->metrics.segment_bytes, (double)sg->len);
                if (f->metrics.registry != NULL)
                    qn_metrics_unlock(f->metrics.registry);
                if (f->dedup.committed)
                    f->dedup.committed(f->dedup.ud, slot_tenant(sg->slot), sg->slot->queue,
                                       sg->slot->partition, r->pid, r->window, r->base,
                                       r->created_at_us, sg->hashes, sg->count);
                if (f->on_commit)
                    f->on_commit(f->on_commit_ud, slot_tenant(sg->slot), sg->slot->queue,
                                 sg->slot->partition);
            }
        }
        slot_settle(f, sg->slot);
    }
    bundle_free(b);
    schedule_dispatch(f);
}

/* ---------------------------------------------------------------- flushes in doubt */

static void doubt_unlink(struct qn_fusion *f, struct bundle *b)
{
    assert(b->doubt);
    if (b->dprev)
        b->dprev->dnext = b->dnext;
    else
        f->doubt = b->dnext;
    if (b->dnext)
        b->dnext->dprev = b->dprev;
    else
        f->doubt_tail = b->dprev;
    b->dprev = b->dnext = NULL;
    b->doubt = false;
    f->stats.doubt_now--;
}

static size_t bundle_frames(const struct bundle *b)
{
    size_t n = 0;
    for (size_t i = 0; i < b->nsegs; i++)
        n += b->segs[i].count;
    return n;
}

/* Marks every item of b (leaders and their followers) in doubt and tells their
 * jobs (each job once per run of consecutive items). */
static void bundle_mark_doubt(struct bundle *b)
{
    struct qn_push_job *last = NULL;
    for (size_t i = 0; i < b->nsegs; i++) {
        const struct seg *sg = &b->segs[i];
        for (size_t j = 0; j < sg->nleaders; j++) {
            struct qn_item_ref r = sg->leaders[j];
            for (struct qn_item_ref x = r; x.job != NULL; x = x.job == r.job && x.idx == r.idx
                                                                  ? item_of(r)->first_follower
                                                                  : item_of(x)->next_follower) {
                item_of(x)->in_doubt = true;
                if (x.job != last && x.job->doubt != NULL)
                    x.job->doubt(x.job);
                last = x.job;
            }
        }
    }
}

static void resolve_arm(struct qn_fusion *f, int64_t now);

/* Its push_v1 was sent and its result lost: keep b until it is resolved. */
static void bundle_doubt(struct qn_fusion *f, struct bundle *b)
{
    int64_t now = qn_store_now_ms();
    b->doubt = true;
    b->doubt_since_ms = now;
    b->backoff_ms = RESOLVE_MIN_MS;
    b->next_try_ms = now;
    b->dprev = f->doubt_tail;
    b->dnext = NULL;
    if (f->doubt_tail)
        f->doubt_tail->dnext = b;
    else
        f->doubt = b;
    f->doubt_tail = b;
    f->stats.in_doubt++;
    f->stats.doubt_now++;
    QN_WARN("push in doubt: the database connection was lost after a flush of %zu partition(s), "
            "%zu message(s) was sent (first partition %s/%s); resolving it before answering",
            b->nsegs, bundle_frames(b), b->segs[0].slot->queue, b->segs[0].slot->partition);
    bundle_mark_doubt(b);
    resolve_arm(f, now);
}

/* Fails b's items with QN_EINDOUBT ("outcome unknown") and frees it. */
static void bundle_give_up(struct qn_fusion *f, struct bundle *b)
{
    doubt_unlink(f, b);
    f->stats.doubt_failed += bundle_frames(b);
    struct qn_store_status st = {QN_EINDOUBT, "", ""};
    bundle_apply(f, b, &st, NULL, true);
}

static void resolve_done(void *ud, const struct qn_store_status *st,
                         const struct qn_push_result *res)
{
    struct bundle *b = ud;
    struct qn_fusion *f = b->f;
    b->resolving = false;
    int64_t now = qn_store_now_ms();
    if (st->code == QN_OK && res != NULL && res->n == b->nsegs) {
        size_t frames = bundle_frames(b);
        doubt_unlink(f, b);
        QN_INFO("push in doubt resolved after %lld ms and %u attempt(s): %zu message(s) in %zu "
                "partition(s) (first %s/%s)",
                (long long)(now - b->doubt_since_ms), b->attempts, frames, b->nsegs,
                b->segs[0].slot->queue, b->segs[0].slot->partition);
        bundle_apply(f, b, st, res, true);
        return;
    }
    if (st->code == QN_ESHUTDOWN) {
        QN_WARN("push in doubt left unresolved at shutdown: %zu message(s) answered outcome "
                "unknown",
                bundle_frames(b));
        bundle_give_up(f, b);
        return;
    }
    if (now - b->doubt_since_ms >= QN_FUSION_RESOLVE_MAX_MS) {
        QN_ERROR("push in doubt not resolved within %d s (%u attempts, last: %s): %zu "
                 "message(s) answered outcome unknown",
                 QN_FUSION_RESOLVE_MAX_MS / 1000, b->attempts,
                 st->message && *st->message ? st->message : qn_strerror(st->code),
                 bundle_frames(b));
        bundle_give_up(f, b);
        return;
    }
    QN_DEBUG("push resolve attempt %u: %s; retrying in %lld ms", b->attempts, qn_strerror(st->code),
             (long long)b->backoff_ms);
    b->next_try_ms = now + b->backoff_ms;
    b->backoff_ms = b->backoff_ms * 2 > RESOLVE_MAX_MS ? RESOLVE_MAX_MS : b->backoff_ms * 2;
    resolve_arm(f, now);
}

/* Sends b's segments again with qn_store_push_resolve. */
static void resolve_send(struct qn_fusion *f, struct bundle *b)
{
    struct qn_push_segment *ps = calloc(b->nsegs, sizeof *ps);
    int rc = QN_ENOMEM;
    if (ps != NULL) {
        for (size_t i = 0; i < b->nsegs; i++) {
            const struct seg *sg = &b->segs[i];
            ps[i].queue = sg->slot->queue;
            ps[i].partition = sg->slot->partition;
            ps[i].count = sg->count;
            ps[i].hashes = sg->hashes;
            ps[i].verified = -1; /* a resolve probes the whole sidecar anyway */
            ps[i].blob = sg->data;
            ps[i].blob_len = sg->len;
        }
        b->resolving = true;
        b->attempts++;
        f->stats.resolves++;
        /* the bundle's tenant (one per bundle): the re-send must land where the
         * first send did, and push_v1 takes one tenant */
        struct qn_call_opts opts = {0, slot_tenant(b->segs[0].slot), NULL};
        rc = qn_store_push_resolve(f->store, ps, b->nsegs, &opts, resolve_done, b, NULL);
        free(ps);
    }
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        resolve_done(b, &st, NULL); /* refused: nothing was sent; backoff */
    }
}

/* Sends the resolves that are due (when the pool is up); arms the timer for
 * the next one. */
static void resolve_pass(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qn_fusion *f = arg;
    int64_t now = qn_store_now_ms();
    bool up = qn_store_is_up(f->store);
    for (struct bundle *b = f->doubt, *next; b != NULL; b = next) {
        next = b->dnext;
        if (b->resolving || b->next_try_ms > now)
            continue;
        if (!up) {
            if (now - b->doubt_since_ms >= QN_FUSION_RESOLVE_MAX_MS) {
                struct qn_store_status st = {QN_EUNAVAILABLE, "", "database unavailable"};
                resolve_done(b, &st, NULL); /* gives up */
                continue;
            }
            /* waits for qn_fusion_store_up; the timer is the fallback */
            b->next_try_ms = now + RESOLVE_MAX_MS;
            continue;
        }
        resolve_send(f, b); /* may unlink b (a refusal); next was taken before */
    }
    resolve_arm(f, qn_store_now_ms());
}

/* Arms the resolve timer for the earliest due bundle (none: disarmed). */
static void resolve_arm(struct qn_fusion *f, int64_t now)
{
    int64_t due = INT64_MAX;
    for (const struct bundle *b = f->doubt; b != NULL; b = b->dnext)
        if (!b->resolving && b->next_try_ms < due)
            due = b->next_try_ms;
    evtimer_del(f->resolve_ev);
    if (due == INT64_MAX)
        return;
    qn_timer_after(f->resolve_ev, due - now);
}

void qn_fusion_store_up(struct qn_fusion *f)
{
    if (f->doubt == NULL)
        return;
    int64_t now = qn_store_now_ms();
    for (struct bundle *b = f->doubt; b != NULL; b = b->dnext)
        if (!b->resolving)
            b->next_try_ms = now;
    resolve_arm(f, now); /* from the loop, not inside the store's callback */
}

static void push_done(void *ud, const struct qn_store_status *st, const struct qn_push_result *res)
{
    struct bundle *b = ud;
    struct qn_fusion *f = b->f;
    f->inflight--;
    if (b->lane >= 0)
        f->lane_sent[b->lane] = -1;
    b->lane = -1;
    f->stats.inflight = f->inflight;
    if (f->sendq != NULL)
        schedule_dispatch(f); /* a packed bundle takes the place */
    if (st->code == QN_EINDOUBT) {
        /* it may have committed: resolve before answering (invariant 5) */
        bundle_doubt(f, b);
        schedule_dispatch(f);
        return;
    }
    bundle_apply(f, b, st, res, false);
}

/* Fails the frames at the head of s, up to its first pre-packed entry. */
static void fail_head_frames(struct qn_fusion *f, struct slot *s, int err)
{
    size_t k = 0;
    while (k < s->npending && item_of(s->pending[k])->pre == NULL) {
        struct qn_item_ref r = s->pending[k++];
        uint64_t by = item_bytes(item_of(r));
        s->pending_bytes -= by;
        f->pending_bytes -= by;
        qn_push_item_resolve(r.job, r.idx, QN_ITEM_FAILED, -1, NULL, NULL, err);
    }
    memmove(s->pending, s->pending + k, (s->npending - k) * sizeof *s->pending);
    s->npending -= k;
    f->stats.pending_bytes = f->pending_bytes;
}

/* The push parameters of segment sg (in tenant's bundle): its bytes and the
 * dedup watermark. */
static void seg_param(struct qn_fusion *f, const uint8_t tenant[16], struct seg *sg,
                      struct qn_push_segment *p)
{
    struct slot *s = sg->slot;
    p->queue = s->queue;
    p->partition = s->partition;
    p->count = sg->count;
    p->hashes = sg->hashes;
    p->blob = sg->data;
    p->blob_len = sg->len;
    p->cache_pid = NULL;
    if (seg_all_minted(sg)) {
        /* fresh ids cannot repeat anything stored, whatever the window */
        p->verified = INT64_MAX;
        p->cache_window = INT32_MAX;
    } else if (f->dedup.verified) {
        p->verified =
            f->dedup.verified(f->dedup.ud, tenant, s->queue, s->partition, sg->hashes, sg->count);
        p->cache_window = 0;
        if (p->verified >= 0 && f->dedup.vouched_for(f->dedup.ud, tenant, s->queue, s->partition,
                                                     &p->cache_window, sg->cache_pid))
            p->cache_pid = sg->cache_pid;
        else
            p->verified = -1; /* cannot say what it vouched for: probe */
    } else {
        p->verified = -1;
        p->cache_window = 0;
    }
    f->stats.frames += sg->count;
}

/* Sends bundle b (every segment packed): one push_v1 call, in flight from here
 * with a lane of its own (the caller saw f->inflight below the cap). A bundle
 * counts from its send: one whose segments are packed off the loop holds no
 * place meanwhile, so it does not keep the loop's other partitions waiting. */
static void bundle_send(struct qn_fusion *f, struct bundle *b)
{
    f->inflight++;
    f->stats.inflight = f->inflight;
    b->lane = -1;
    for (int i = 0; i < FUSION_MAX_INFLIGHT; i++) {
        if (f->lane_sent[i] < 0) {
            f->lane_sent[i] = qn_store_now_ms();
            b->lane = i;
            break;
        }
    }
    struct qn_push_segment *ps = calloc(b->nsegs, sizeof *ps);
    if (ps == NULL) {
        struct qn_store_status st = {QN_ENOMEM, "", ""};
        push_done(b, &st, NULL);
        return;
    }
    for (size_t i = 0; i < b->nsegs; i++)
        seg_param(f, b->tenant, &b->segs[i], &ps[i]);
    struct qn_call_opts opts = {0, b->tenant, NULL};
    int rc = qn_store_push(f->store, ps, b->nsegs, false, &opts, push_done, b, NULL);
    free(ps);
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", ""};
        push_done(b, &st, NULL);
    }
}

static void packing_unlink(struct qn_fusion *f, struct bundle *b)
{
    if (b->pprev)
        b->pprev->pnext = b->pnext;
    else
        f->packing = b->pnext;
    if (b->pnext)
        b->pnext->pprev = b->pprev;
    b->pprev = b->pnext = NULL;
}

/* Every segment of b is packed: drops those whose packing failed (their items
 * failed, their slots settled) and sends the rest. */
static void bundle_packed(struct qn_fusion *f, struct bundle *b)
{
    size_t kept = 0;
    for (size_t i = 0; i < b->nsegs; i++) {
        struct seg *sg = &b->segs[i];
        free(sg->frames);
        sg->frames = NULL;
        if (sg->pack_rc != QN_OK) {
            struct slot *s = sg->slot;
            seg_fail(sg, sg->pack_rc);
            seg_release(sg);
            s->state = 0;
            slot_settle(f, s);
            continue;
        }
        if (kept != i)
            b->segs[kept] = *sg; /* no job of b is out any more: segments may move */
        kept++;
    }
    memset(b->segs + kept, 0, (b->nsegs - kept) * sizeof *b->segs); /* moved: not b's twice */
    b->nsegs = kept;
    if (kept == 0) {
        bundle_free(b);
        schedule_dispatch(f);
        return;
    }
    if (f->inflight < FUSION_MAX_INFLIGHT) {
        bundle_send(f, b);
        return;
    }
    b->snext = NULL; /* sent by dispatch, first, when a place is free */
    if (f->sendq_tail)
        f->sendq_tail->snext = b;
    else
        f->sendq = b;
    f->sendq_tail = b;
}

/* On a pool thread: packs one segment with the thread's context. */
static void pack_work(struct qn_offload_job *job, qn_zctx *z)
{
    struct seg *sg = qn_container_of(job, struct seg, job);
    struct qn_fusion *f = sg->owner->f;
    sg->pack_rc = z == NULL ? QN_ENOMEM
                            : qn_segment_pack(z, sg->frames, sg->nleaders, (int)f->cfg->zstd_level,
                                              &sg->blob, NULL);
}

/* Back on the loop. */
static void pack_done(struct qn_offload_job *job)
{
    struct seg *sg = qn_container_of(job, struct seg, job);
    struct bundle *b = sg->owner;
    sg->data = sg->blob.data;
    sg->len = sg->blob.len;
    sg->packing = false;
    if (--b->packing == 0) {
        packing_unlink(b->f, b);
        bundle_packed(b->f, b);
    }
}

/* Hands b's large segments to the pool (one job each; packed here when the pool
 * is full). True when some are out: b waits on f->packing. */
static bool offload_segs(struct qn_fusion *f, struct bundle *b)
{
    for (size_t i = 0; i < b->nsegs; i++) {
        struct seg *sg = &b->segs[i];
        if (!sg->packing)
            continue;
        sg->owner = b;
        sg->job.work = pack_work;
        sg->job.done = pack_done;
        if (qn_offload_submit(f->offload, &sg->job) == QN_OK) {
            b->packing++;
            f->stats.offloaded++;
            continue;
        }
        sg->packing = false; /* the pool is full: pack it here */
        sg->pack_rc = qn_segment_pack(f->zctx, sg->frames, sg->nleaders, (int)f->cfg->zstd_level,
                                      &sg->blob, NULL);
        sg->data = sg->blob.data;
        sg->len = sg->blob.len;
    }
    if (b->packing == 0)
        return false;
    b->pnext = f->packing;
    if (f->packing)
        f->packing->pprev = b;
    f->packing = b;
    return true;
}

/* Lanes open now (see FUSION_MAX_INFLIGHT); *next_at: when the next one opens
 * by age (INT64_MAX: none in flight to wait for). */
static uint32_t lanes_open(const struct qn_fusion *f, int64_t *next_at)
{
    *next_at = INT64_MAX;
    int64_t lane_ms = f->cfg->push_lane_ms;
    if (lane_ms <= 0)
        return FUSION_MAX_INFLIGHT;
    int64_t now = qn_store_now_ms();
    uint32_t open = 1;
    for (int i = 0; i < FUSION_MAX_INFLIGHT; i++) {
        int64_t sent = f->lane_sent[i];
        if (sent < 0)
            continue;
        if (now - sent >= lane_ms)
            open++;
        else if (sent + lane_ms < *next_at)
            *next_at = sent + lane_ms;
    }
    return open < FUSION_MAX_INFLIGHT ? open : FUSION_MAX_INFLIGHT;
}

static void lane_opens(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qn_fusion *f = arg;
    schedule_dispatch(f);
}

static void dispatch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qn_fusion *f = arg;
    f->dispatch_scheduled = false;
    size_t bundle_max = (size_t)f->cfg->bundle_max;
    int64_t lane_at;
    uint32_t open = lanes_open(f, &lane_at);

    /* Packed bundles first: they left their slots before anything ready now.
     * A new bundle is built only with the queue empty and a place free, so the
     * bundles packing or queued stay within what the pool holds (it refuses
     * past its bound, and a refused segment is packed here and sent). */
    while (f->sendq != NULL && f->inflight < FUSION_MAX_INFLIGHT) {
        struct bundle *b = f->sendq;
        f->sendq = b->snext;
        if (f->sendq == NULL)
            f->sendq_tail = NULL;
        bundle_send(f, b);
    }
    /* A full bundle waiting goes whatever the lanes: waiting would not make it
     * larger. */
    while (f->sendq == NULL && f->ready_head != NULL && f->inflight < FUSION_MAX_INFLIGHT &&
           (f->inflight < open || f->nready >= bundle_max)) {
        struct bundle *b = calloc(1, sizeof *b);
        if (b)
            b->segs = calloc(bundle_max, sizeof *b->segs);
        if (b == NULL || b->segs == NULL) {
            free(b);
            /* retry on the next event: the slots stay ready */
            schedule_dispatch(f);
            return;
        }
        b->f = f;
        /* the bundle's tenant: the first slot's */
        memcpy(b->tenant, slot_tenant(f->ready_head), 16);
        bool offload = false;
        struct slot *s;
        while (b->nsegs < bundle_max && (s = ready_pop(f, b->tenant)) != NULL) {
            s->state = SLOT_INFLIGHT;
            /* One segment per slot and flush, as for items: the pre-packed entry
             * at the head of the slot (its own segment, as sent), or the frames
             * up to the next entry, packed as one. Never both in one flush: a
             * second segment of a partition in one transaction would make SQL
             * probe it past the first (the cache's watermark cannot vouch for
             * rows not yet committed), and frames ahead of an entry in a flush
             * would break invariant 4 for their survivors. */
            struct seg *sg = &b->segs[b->nsegs];
            int rc;
            if (item_of(s->pending[0])->pre != NULL) {
                rc = seg_take_pre(f, sg, s); /* a failure failed the entry */
            } else {
                rc = seg_build(f, sg, s);
                if (rc != QN_OK) {
                    seg_fail(sg, rc);
                    /* nothing was taken: fail the frames that wait ahead of the
                     * next entry, or this slot would be dispatched again at once */
                    if (sg->nleaders == 0)
                        fail_head_frames(f, s, rc);
                }
            }
            if (rc != QN_OK) {
                seg_release(sg);
                s->state = 0;
                slot_settle(f, s);
                continue;
            }
            offload |= sg->packing;
            b->nsegs++;
        }
        if (b->nsegs == 0) {
            bundle_free(b);
            continue;
        }
        f->stats.flushes++;
        f->stats.segments += b->nsegs;
        if (offload && offload_segs(f, b))
            continue; /* sent when its segments are back (pack_done) */
        if (offload) {
            bundle_packed(f, b); /* packed here after all: the pool was full */
            continue;
        }
        bundle_send(f, b);
    }
    if (f->ready_head != NULL && f->sendq == NULL && f->inflight < FUSION_MAX_INFLIGHT &&
        lane_at != INT64_MAX) {
        int64_t wait = lane_at - qn_store_now_ms();
        qn_timer_after(f->lane_ev, wait > 0 ? wait : 0);
    }
}

/* ---------------------------------------------------------------- lifecycle */

int qn_fusion_new(struct event_base *base, const struct qn_config *cfg, qn_store *store,
                  qn_zctx *zctx, struct qn_fusion **out)
{
    struct qn_fusion *f = calloc(1, sizeof *f);
    if (f == NULL)
        return QN_ENOMEM;
    f->base = base;
    f->cfg = cfg;
    f->store = store;
    f->zctx = zctx;
    qn_map_init(&f->slots, 10u * 1000u * 1000u);
    f->dispatch_ev = event_new(base, -1, 0, dispatch, f);
    f->resolve_ev = evtimer_new(base, resolve_pass, f);
    f->lane_ev = evtimer_new(base, lane_opens, f);
    for (int i = 0; i < FUSION_MAX_INFLIGHT; i++)
        f->lane_sent[i] = -1;
    if (f->dispatch_ev == NULL || f->resolve_ev == NULL || f->lane_ev == NULL) {
        if (f->dispatch_ev)
            event_free(f->dispatch_ev);
        if (f->resolve_ev)
            event_free(f->resolve_ev);
        if (f->lane_ev)
            event_free(f->lane_ev);
        free(f);
        return QN_ENOMEM;
    }
    *out = f;
    return QN_OK;
}

static void fail_slot(struct qn_map_node *n, void *ud)
{
    struct qn_fusion *f = ud;
    struct slot *s = qn_container_of(n, struct slot, node);
    while (s->npending > 0) {
        struct qn_item_ref r = s->pending[--s->npending];
        qn_push_item_resolve(r.job, r.idx, QN_ITEM_FAILED, -1, NULL, NULL, QN_ESHUTDOWN);
    }
    slot_free(f, s);
}

void qn_fusion_free(struct qn_fusion *f)
{
    if (f == NULL)
        return;
    /* Bundles whose segments a pool thread packs: wait for those to finish, then
     * fail their items (nothing was sent). Their slots are INFLIGHT and freed
     * below. */
    qn_offload_port_free(f->offload);
    while (f->packing != NULL || f->sendq != NULL) {
        struct bundle *b = f->packing ? f->packing : f->sendq;
        if (b == f->packing)
            packing_unlink(f, b);
        else
            f->sendq = b->snext;
        for (size_t i = 0; i < b->nsegs; i++)
            seg_fail(&b->segs[i], QN_ESHUTDOWN);
        bundle_free(b);
    }
    f->sendq_tail = NULL;
    /* Flushes still in doubt: their outcome stays unknown (the store, freed
     * before, answered their resolves with QN_ESHUTDOWN already). Their slots
     * are INFLIGHT and freed below. */
    while (f->doubt != NULL) {
        struct bundle *b = f->doubt;
        doubt_unlink(f, b);
        for (size_t i = 0; i < b->nsegs; i++)
            seg_fail(&b->segs[i], QN_EINDOUBT);
        bundle_free(b);
    }
    f->ready_head = f->ready_tail = NULL;
    qn_map_each(&f->slots, fail_slot, f);
    qn_map_destroy(&f->slots);
    event_free(f->dispatch_ev);
    event_free(f->resolve_ev);
    event_free(f->lane_ev);
    free(f);
}

int qn_fusion_set_offload(struct qn_fusion *f, struct qn_offload *pool, size_t min_bytes)
{
    if (pool == NULL || f->offload != NULL)
        return QN_EINVAL;
    int rc = qn_offload_port_new(pool, f->base, &f->offload);
    if (rc == QN_OK)
        f->offload_min = min_bytes;
    return rc;
}

void qn_fusion_set_metrics(struct qn_fusion *f, const struct qn_fusion_metrics *m)
{
    f->metrics = *m;
}

void qn_fusion_set_dedup(struct qn_fusion *f, const struct qn_fusion_dedup_hooks *hooks)
{
    if (hooks)
        f->dedup = *hooks;
    else
        memset(&f->dedup, 0, sizeof f->dedup);
}

void qn_fusion_on_commit(struct qn_fusion *f,
                         void (*cb)(void *ud, const uint8_t tenant[16], const char *queue,
                                    const char *partition),
                         void *ud)
{
    f->on_commit = cb;
    f->on_commit_ud = ud;
}

void qn_fusion_stats(const struct qn_fusion *f, struct qn_fusion_stats *out)
{
    *out = f->stats;
    out->inflight = f->inflight;
    out->packing = out->packed_waiting = 0; /* short lists: the pool's bound */
    for (const struct bundle *b = f->packing; b != NULL; b = b->pnext)
        out->packing++;
    for (const struct bundle *b = f->sendq; b != NULL; b = b->snext)
        out->packed_waiting++;
    out->pending_bytes = f->pending_bytes;
}
