/*
 * engine/fusion.c - per-partition single-flight push batching (see fusion.h).
 *
 * Does: keep one slot per (queue, partition) that has frames waiting or a flush
 * in flight; dispatch ready slots in bundles on the next loop turn; pack and
 * compress each slot's frames into one segment; apply layer-2 dedup; resolve
 * items from push_v1's verdicts; re-send the survivors of a segment that held
 * duplicates; look up the original message ids of duplicates.
 * Does not: decide duplicates (SQL does), retry a failed bundle (a failed push
 * may or may not have committed only if the connection died mid-commit; the
 * client retries with its transaction ids and dedup makes that safe).
 *
 * Slot lifecycle:
 *
 *     (absent) --submit--> READY --dispatch--> INFLIGHT --done, frames waiting--> READY
 *                                                 |
 *                                                 +--done, nothing waiting--> (freed)
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
 */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "engine/fusion.h"
#include "log.h"
#include "engine/map.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "queen/store.h"

/* A segment carries at most this many frames and raw bytes; the rest waits for
 * the slot's next flush. Keeps every segment far below QUEEN_SEGMENT_RAW_MAX. */
#define SEG_MAX_FRAMES 10000
#define SEG_MAX_RAW (8u * 1024u * 1024u)
/* Bytes of payload and transaction ids fusion may hold waiting. */
#define FUSION_MAX_PENDING_BYTES (256ull * 1024u * 1024u)
/* Bundles in flight at once. */
#define FUSION_MAX_INFLIGHT 4

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
    char key[]; /* queue \0 partition \0 */
};

struct seg {
    struct slot *slot;
    struct qn_item_ref *leaders; /* the segment's frames, in order */
    size_t nleaders;
    uint8_t *hashes; /* nleaders * 16 */
    struct qn_buf blob;
    uint8_t cache_pid[16]; /* partition the dedup watermark is for */
};

struct bundle {
    struct qn_fusion *f;
    struct seg *segs;
    size_t nsegs;
};

/* Original-message-id lookup for duplicates of one segment. */
struct lookup {
    struct qn_fusion *f;
    uint8_t pid[16];
    struct qn_item_ref *refs;
    int64_t *offsets;
    size_t n;
};

struct qn_fusion {
    struct event_base *base;
    const struct qn_config *cfg; /* segment_raw_max, zstd_level, bundle_max */
    qn_store *store;
    qn_zctx *zctx;
    struct qn_map slots;
    struct slot *ready_head, *ready_tail;
    struct event *dispatch_ev;
    bool dispatch_scheduled;
    uint32_t inflight;
    uint32_t lookups;
    uint64_t pending_bytes;
    struct qn_fusion_dedup_hooks dedup;
    void (*on_commit)(void *ud, const char *queue, const char *partition);
    void *on_commit_ud;
    struct qn_fusion_stats stats;
};

static struct qn_push_item *item_of(struct qn_item_ref r)
{
    return &r.job->items[r.idx];
}

static size_t item_bytes(const struct qn_push_item *it)
{
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
    if (f->ready_tail)
        f->ready_tail->ready_next = s;
    else
        f->ready_head = s;
    f->ready_tail = s;
}

static struct slot *ready_pop(struct qn_fusion *f)
{
    struct slot *s = f->ready_head;
    if (s) {
        f->ready_head = s->ready_next;
        if (f->ready_head == NULL)
            f->ready_tail = NULL;
        s->ready_next = NULL;
    }
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
    size_t klen = ql + 1 + pl + 1;
    char kbuf[600];
    if (klen > sizeof kbuf)
        return QN_EINVAL;
    memcpy(kbuf, first->queue, ql + 1);
    memcpy(kbuf + ql + 1, first->partition, pl + 1);

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
        s->queue = s->key;
        s->partition = s->key + ql + 1;
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
    qn_buf_free(&sg->blob);
    sg->leaders = NULL;
    sg->hashes = NULL;
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

/* Takes frames from the slot into a segment: layer-2 dedup, caps, packing. */
static int seg_build(struct qn_fusion *f, struct seg *sg, struct slot *s)
{
    /* A segment stays readable: never larger than what readers may decompress. */
    size_t raw_cap = SEG_MAX_RAW;
    if ((size_t)f->cfg->segment_raw_max / 2 < raw_cap)
        raw_cap = (size_t)f->cfg->segment_raw_max / 2;
    size_t take = 0, raw = 0;
    while (take < s->npending && take < SEG_MAX_FRAMES) {
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

    rc = qn_segment_pack(f->zctx, frames, sg->nleaders, (int)f->cfg->zstd_level, &sg->blob, NULL);
out:
    free(frames);
    free(set.slots);
    return rc;
}

/* Whether every frame's transaction id is a freshly minted message id: nothing
 * stored can match it, so the broker may vouch for the whole partition. */
static bool seg_all_minted(const struct seg *sg)
{
    for (size_t j = 0; j < sg->nleaders; j++)
        if (!item_of(sg->leaders[j])->minted_txn)
            return false;
    return true;
}

static void lookup_done(void *ud, const struct qn_store_status *st,
                        const struct qn_segments_result *res)
{
    struct lookup *lk = ud;
    struct qn_fusion *f = lk->f;
    for (size_t i = 0; i < lk->n; i++) {
        uint8_t id[QN_UUID_LEN] = {0};
        if (st->code == QN_OK) {
            for (size_t k = 0; k < res->n; k++) {
                const struct qn_segment_row *row = &res->rows[k];
                if (lk->offsets[i] < row->base || lk->offsets[i] > row->end)
                    continue;
                const uint8_t *raw;
                size_t rawlen;
                struct qn_frame fr;
                if (qn_segment_decompress(f->zctx, row->blob, row->blob_len,
                                          (size_t)f->cfg->segment_raw_max, &raw,
                                          &rawlen) == QN_OK &&
                    qn_segment_frame_at(raw, rawlen, row->base, lk->offsets[i], &fr, NULL) == QN_OK)
                    memcpy(id, fr.message_id, sizeof id);
                break;
            }
        }
        qn_push_item_resolve(lk->refs[i].job, lk->refs[i].idx, QN_ITEM_DUPLICATE, lk->offsets[i],
                             lk->pid, id, QN_OK);
    }
    f->lookups--;
    free(lk->refs);
    free(lk->offsets);
    free(lk);
}

/* Resolves duplicates (after looking up the originals' ids) and puts the
 * survivors back at the front of the slot. */
static void seg_duplicates(struct qn_fusion *f, struct seg *sg, const struct qn_push_seg_result *r)
{
    struct slot *s = sg->slot;
    struct lookup *lk = calloc(1, sizeof *lk);
    bool *dup = calloc(sg->nleaders, sizeof *dup);
    int64_t *orig = calloc(sg->nleaders, sizeof *orig);
    if (lk)
        lk->refs = calloc(r->ndups, sizeof *lk->refs);
    if (lk)
        lk->offsets = calloc(r->ndups, sizeof *lk->offsets);
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
        slot_reserve(s, nsurv) != QN_OK) {
        /* Out of memory on a rare path: fail the segment rather than guess. */
        seg_fail(sg, QN_ENOMEM);
        goto out;
    }
    memcpy(lk->pid, r->pid, 16);
    lk->f = f;
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
        if (qn_store_segment_at(f->store, r->pid, lk->offsets, lk->n, NULL, lookup_done, lk,
                                NULL) == QN_OK)
            lk = NULL;
        else
            f->lookups--;
    }
    if (lk != NULL) {
        /* lookup not sent: answer with the zero id (the original cannot be read) */
        for (size_t i = 0; i < lk->n; i++)
            qn_push_item_resolve(lk->refs[i].job, lk->refs[i].idx, QN_ITEM_DUPLICATE,
                                 lk->offsets[i], r->pid, NULL, QN_OK);
    }
out:
    if (lk) {
        free(lk->refs);
        free(lk->offsets);
        free(lk);
    }
    free(dup);
    free(orig);
}

static void slot_settle(struct qn_fusion *f, struct slot *s)
{
    if (s->npending > 0)
        ready_push(f, s);
    else
        slot_free(f, s);
}

static void push_done(void *ud, const struct qn_store_status *st, const struct qn_push_result *res)
{
    struct bundle *b = ud;
    struct qn_fusion *f = b->f;
    f->inflight--;
    f->stats.inflight = f->inflight;
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
            if (r->status == QN_PUSH_QUEUED) {
                for (size_t j = 0; j < sg->nleaders; j++) {
                    struct qn_item_ref ref = sg->leaders[j];
                    uint8_t id[QN_UUID_LEN];
                    memcpy(id, item_of(ref)->frame.message_id, sizeof id);
                    qn_push_item_resolve(ref.job, ref.idx, QN_ITEM_QUEUED, r->base + (int64_t)j,
                                         r->pid, id, QN_OK);
                }
                f->stats.committed += sg->nleaders;
                if (f->dedup.committed)
                    f->dedup.committed(f->dedup.ud, sg->slot->queue, sg->slot->partition, r->pid,
                                       r->window, r->base, r->created_at_us, sg->hashes,
                                       sg->nleaders);
                if (f->on_commit)
                    f->on_commit(f->on_commit_ud, sg->slot->queue, sg->slot->partition);
            } else {
                seg_duplicates(f, sg, r);
            }
        }
        slot_settle(f, sg->slot);
    }
    bundle_free(b);
    schedule_dispatch(f);
}

static void dispatch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qn_fusion *f = arg;
    f->dispatch_scheduled = false;
    size_t bundle_max = (size_t)f->cfg->bundle_max;

    while (f->ready_head != NULL && f->inflight < FUSION_MAX_INFLIGHT) {
        struct bundle *b = calloc(1, sizeof *b);
        struct qn_push_segment *ps = calloc(bundle_max, sizeof *ps);
        if (b)
            b->segs = calloc(bundle_max, sizeof *b->segs);
        if (b == NULL || ps == NULL || b->segs == NULL) {
            free(ps);
            if (b)
                free(b->segs);
            free(b);
            /* retry on the next event: the slots stay ready */
            schedule_dispatch(f);
            return;
        }
        b->f = f;
        while (b->nsegs < bundle_max && f->ready_head != NULL) {
            struct slot *s = ready_pop(f);
            s->state = SLOT_INFLIGHT;
            struct seg *sg = &b->segs[b->nsegs];
            int rc = seg_build(f, sg, s);
            if (rc != QN_OK) {
                seg_fail(sg, rc);
                if (sg->nleaders == 0) {
                    /* nothing was taken: fail what waits, or this slot would be
                     * dispatched again at once */
                    while (s->npending > 0) {
                        struct qn_item_ref r = s->pending[--s->npending];
                        uint64_t by = item_bytes(item_of(r));
                        s->pending_bytes -= by;
                        f->pending_bytes -= by;
                        qn_push_item_resolve(r.job, r.idx, QN_ITEM_FAILED, -1, NULL, NULL, rc);
                    }
                }
                seg_release(sg);
                s->state = 0;
                slot_settle(f, s);
                continue;
            }
            struct qn_push_segment *p = &ps[b->nsegs];
            p->queue = s->queue;
            p->partition = s->partition;
            p->count = (uint32_t)sg->nleaders;
            p->hashes = sg->hashes;
            p->blob = sg->blob.data;
            p->blob_len = sg->blob.len;
            if (seg_all_minted(sg)) {
                /* fresh ids cannot repeat anything stored, whatever the window */
                p->verified = INT64_MAX;
                p->cache_window = INT32_MAX;
            } else if (f->dedup.verified) {
                p->verified = f->dedup.verified(f->dedup.ud, s->queue, s->partition, sg->hashes,
                                                sg->nleaders);
                p->cache_window = 0;
                if (p->verified >= 0 && f->dedup.vouched_for(f->dedup.ud, s->queue, s->partition,
                                                             &p->cache_window, sg->cache_pid))
                    p->cache_pid = sg->cache_pid;
                else
                    p->verified = -1; /* cannot say what it vouched for: probe */
            } else {
                p->verified = -1;
                p->cache_window = 0;
            }
            f->stats.frames += sg->nleaders;
            b->nsegs++;
        }
        if (b->nsegs == 0) {
            free(ps);
            bundle_free(b);
            continue;
        }
        f->stats.flushes++;
        f->stats.segments += b->nsegs;
        f->inflight++;
        f->stats.inflight = f->inflight;
        int rc = qn_store_push(f->store, ps, b->nsegs, false, NULL, push_done, b, NULL);
        free(ps);
        if (rc != QN_OK) {
            struct qn_store_status st = {rc, "", ""};
            push_done(b, &st, NULL);
        }
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
    if (f->dispatch_ev == NULL) {
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
    f->ready_head = f->ready_tail = NULL;
    qn_map_each(&f->slots, fail_slot, f);
    qn_map_destroy(&f->slots);
    event_free(f->dispatch_ev);
    free(f);
}

void qn_fusion_set_dedup(struct qn_fusion *f, const struct qn_fusion_dedup_hooks *hooks)
{
    if (hooks)
        f->dedup = *hooks;
    else
        memset(&f->dedup, 0, sizeof f->dedup);
}

void qn_fusion_on_commit(struct qn_fusion *f,
                         void (*cb)(void *ud, const char *queue, const char *partition), void *ud)
{
    f->on_commit = cb;
    f->on_commit_ud = ud;
}

void qn_fusion_stats(const struct qn_fusion *f, struct qn_fusion_stats *out)
{
    *out = f->stats;
    out->inflight = f->inflight;
    out->pending_bytes = f->pending_bytes;
}
