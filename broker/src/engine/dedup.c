/*
 * engine/dedup.c - the dedup cache (see dedup.h and the dedup seed).
 *
 * Entry lifecycle (one entry per (tenant, queue, partition) this broker pushes to):
 *
 *   COLD --build admitted--> LOADING --rows + pending commits--> VOUCHING
 *    ^  \--build refused--> SUPPRESSED (cooldown) --cooldown over--> COLD
 *    |                                                          |
 *    +-- load failed / overlap / window changed / OOM <---------+
 *   VOUCHING --commit with a gap--> GAP --catch-up rows--> VOUCHING
 *
 * Only VOUCHING answers a watermark; every other state answers -1, which is
 * always sound.
 *
 * Invariants:
 *   1. In VOUCHING, the ring holds every hash of the partition committed in
 *      (hydrated window start, verified_upto], and hydrated window start is at or
 *      below now - window (the ring is a superset of the in-window hashes).
 *   2. verified_upto only grows by appending a commit whose base is exactly
 *      verified_upto + 1.
 *   3. total_bytes is the sum of every entry's accounted bytes.
 *   4. A load in flight has exactly one storage request; commits arriving meanwhile
 *      are kept (bounded) and applied after the rows, in base order.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "engine/dedup.h"
#include "engine/hring.h"
#include "log.h"
#include "engine/map.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/store.h"
#include "timer.h"

#define PENDING_MAX 256
#define ENTRY_OVERHEAD 256u

enum dd_state { DD_COLD, DD_LOADING, DD_VOUCHING, DD_GAP, DD_SUPPRESSED };

struct dd_pending {
    int64_t base;
    int64_t created_ms;
    size_t n;
    uint8_t *hashes;
};

struct dd_entry {
    struct qn_map_node node;
    struct qn_dedup *d;
    struct dd_entry *lru_prev, *lru_next; /* most recently used at the head */
    enum dd_state state;
    bool have_meta;
    bool full_load; /* the load in flight is a full hydration */
    uint8_t pid[16];
    int32_t window;      /* seconds, from meta or push results */
    int32_t load_window; /* window the ring was hydrated for */
    int64_t meta_at_ms;
    int64_t load_l0; /* allocator watermark read before the rows */
    int64_t verified_upto;
    int64_t last_used_ms;
    int64_t cooldown_until_ms;
    qn_store_req *req;
    bool req_stale; /* req's answer is to be dropped (forgotten) */
    struct dd_pending pending[PENDING_MAX];
    size_t npending;
    bool pending_overflow;
    struct qn_hring ring;
    size_t accounted; /* bytes counted in total_bytes */
    size_t klen;
    char key[]; /* tenant (16 bytes) queue \0 partition \0 */
};

/* footprint hints and nothing else: survives eviction, soft-capped */
struct dd_hint {
    struct qn_map_node node;
    size_t bytes;
    size_t klen;
    char key[];
};

struct qn_dedup {
    qn_store *store; /* borrowed */
    struct qn_dedup_config cfg;
    struct qn_map entries;
    struct qn_map hints;
    struct dd_entry *lru_head, *lru_tail;
    size_t total_bytes;
    size_t suppressed;
    int64_t last_warn_ms;
    struct event *sweep;
    struct qn_dedup_stats stats;
    struct qn_dedup_stats logged; /* counters at the last stats line */
};

void qn_dedup_config_defaults(struct qn_dedup_config *c, size_t budget_bytes)
{
    c->budget_bytes = budget_bytes;
    c->meta_ttl_ms = 30000;
    c->cooldown_ms = 30000;
    c->recent_ms = 5000;
    c->skew_ms = 5000;
    c->sweep_ms = 5000;
    c->fit = 0.9;
    c->side_cap = 100000;
}

bool qn_dedup_fits(size_t total_bytes, size_t own_bytes, size_t estimate, size_t cap, double fit)
{
    size_t others = total_bytes >= own_bytes ? total_bytes - own_bytes : 0;
    return (double)(others + estimate) <= fit * (double)cap;
}

static int64_t now_ms(void)
{
    return qn_store_now_ms();
}

/* Wall clock, comparable with the database's created_at stamps. */
static int64_t wall_ms(void)
{
    return (int64_t)qn_now_ms();
}

/* ---------------------------------------------------------------- accounting */

static void account(struct dd_entry *e)
{
    struct qn_dedup *d = e->d;
    size_t now = ENTRY_OVERHEAD + e->klen + e->ring.bytes;
    d->total_bytes = d->total_bytes - e->accounted + now;
    e->accounted = now;
}

static void lru_unlink(struct qn_dedup *d, struct dd_entry *e)
{
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        d->lru_head = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        d->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_touch(struct qn_dedup *d, struct dd_entry *e)
{
    if (d->lru_head == e)
        return;
    if (e->lru_prev || e->lru_next || d->lru_tail == e)
        lru_unlink(d, e);
    e->lru_next = d->lru_head;
    if (d->lru_head)
        d->lru_head->lru_prev = e;
    d->lru_head = e;
    if (d->lru_tail == NULL)
        d->lru_tail = e;
}

static void free_hint_cb(struct qn_map_node *n, void *ud)
{
    struct qn_dedup *d = ud;
    qn_map_remove(&d->hints, n);
    free(qn_container_of(n, struct dd_hint, node));
}

static void hint_set(struct qn_dedup *d, const struct dd_entry *e, size_t bytes)
{
    struct qn_map_node *n = qn_map_get(&d->hints, e->key, e->klen);
    if (n != NULL) {
        qn_container_of(n, struct dd_hint, node)->bytes = bytes;
        return;
    }
    if (d->hints.count >= d->cfg.side_cap) {
        /* soft cap: forget every hint; the cost is one re-measured estimate each */
        qn_map_each(&d->hints, free_hint_cb, d);
    }
    struct dd_hint *h = calloc(1, sizeof *h + e->klen);
    if (h == NULL)
        return;
    memcpy(h->key, e->key, e->klen);
    h->klen = e->klen;
    h->bytes = bytes;
    if (qn_map_put(&d->hints, &h->node, h->key, h->klen) != QN_OK)
        free(h);
}

static size_t hint_get(const struct qn_dedup *d, const struct dd_entry *e)
{
    struct qn_map_node *n = qn_map_get(&d->hints, e->key, e->klen);
    return n ? qn_container_of(n, struct dd_hint, node)->bytes : 0;
}

/* ---------------------------------------------------------------- entries */

static void pending_clear(struct dd_entry *e)
{
    for (size_t i = 0; i < e->npending; i++)
        free(e->pending[i].hashes);
    e->npending = 0;
    e->pending_overflow = false;
}

static void set_state(struct dd_entry *e, enum dd_state s)
{
    struct qn_dedup *d = e->d;
    if (e->state == DD_SUPPRESSED)
        d->suppressed--;
    if (s == DD_SUPPRESSED)
        d->suppressed++;
    e->state = s;
}

/* Drops what the entry knows (it can no longer vouch). A complete ring
 * (VOUCHING, GAP) is the partition's footprint as it grew since its load: it
 * becomes the estimate the next rebuild is gated on. A cold, loading or
 * suppressed entry's ring measures nothing and leaves the estimate alone. */
static void entry_forget(struct dd_entry *e, enum dd_state s)
{
    if (e->state == DD_VOUCHING || e->state == DD_GAP)
        hint_set(e->d, e, e->ring.bytes);
    /* A load or refresh in flight is not cancelled: a cancel reaches whatever
     * its connection runs when it lands, which may already be a neighbour's
     * push (the store cannot always tell, and the push then fails). Its answer
     * is dropped instead; the entry rebuilds once it has come back. */
    if (e->req != NULL)
        e->req_stale = true;
    pending_clear(e);
    qn_hring_clear(&e->ring);
    e->verified_upto = -1;
    set_state(e, s);
    account(e);
}

static void entry_free(struct qn_dedup *d, struct dd_entry *e)
{
    entry_forget(e, DD_COLD); /* keeps the footprint estimate */
    d->total_bytes -= e->accounted;
    lru_unlink(d, e);
    qn_map_remove(&d->entries, &e->node);
    free(e);
}

/* The parts of an entry's key: a tenant's queues are not another's. */
static const uint8_t *key_tenant(const struct dd_entry *e)
{
    return (const uint8_t *)e->key;
}
static const char *key_queue(const struct dd_entry *e)
{
    return e->key + 16;
}
static const char *key_partition(const struct dd_entry *e)
{
    return e->key + 16 + strlen(e->key + 16) + 1;
}

static struct dd_entry *entry_get(struct qn_dedup *d, const uint8_t tenant[16], const char *queue,
                                  const char *partition, bool create)
{
    size_t ql = strlen(queue), pl = strlen(partition);
    size_t klen = 16 + ql + 1 + pl + 1;
    char kbuf[620];
    if (klen > sizeof kbuf)
        return NULL;
    memcpy(kbuf, tenant, 16);
    memcpy(kbuf + 16, queue, ql + 1);
    memcpy(kbuf + 16 + ql + 1, partition, pl + 1);
    struct qn_map_node *n = qn_map_get(&d->entries, kbuf, klen);
    if (n != NULL)
        return qn_container_of(n, struct dd_entry, node);
    if (!create)
        return NULL;
    struct dd_entry *e = calloc(1, sizeof *e + klen);
    if (e == NULL)
        return NULL;
    memcpy(e->key, kbuf, klen);
    e->klen = klen;
    e->d = d;
    e->verified_upto = -1;
    qn_hring_init(&e->ring);
    if (qn_map_put(&d->entries, &e->node, e->key, klen) != QN_OK) {
        free(e);
        return NULL;
    }
    lru_touch(d, e);
    account(e);
    return e;
}

/* Evicts least recently used entries (not used within recent_ms, not `keep`,
 * not suppressed) until the cache holds at most `target` bytes. Returns true
 * when it does. A suppressed entry holds no hashes, only its cooldown deadline:
 * freeing it would let the partition re-test at once. The sweep frees it once
 * the cooldown is over. */
static bool evict_to(struct qn_dedup *d, size_t target, struct dd_entry *keep)
{
    int64_t now = now_ms();
    struct dd_entry *e = d->lru_tail;
    while (d->total_bytes > target && e != NULL) {
        struct dd_entry *prev = e->lru_prev;
        if (e != keep && now - e->last_used_ms >= d->cfg.recent_ms && e->req == NULL &&
            e->state != DD_SUPPRESSED) {
            entry_free(d, e);
            d->stats.evictions++;
        }
        e = prev;
    }
    return d->total_bytes <= target;
}

static void warn_pressure(struct qn_dedup *d, const struct dd_entry *e)
{
    int64_t now = now_ms();
    if (now - d->last_warn_ms < 60000)
        return;
    d->last_warn_ms = now;
    QN_WARN("dedup cache full: partition %s/%s answers without the cache for %lld s "
            "(suppressed=%zu budget_mb=%zu)",
            key_queue(e), key_partition(e), (long long)(d->cfg.cooldown_ms / 1000), d->suppressed,
            d->cfg.budget_bytes >> 20);
}

/* Keeps the cache within its budget after entry e grew (a load finished, a
 * commit was appended): idle entries are evicted first; when every other entry
 * was used within recent_ms, e itself, the newcomer or the grower, is dropped
 * and suppressed for a cooldown instead, its footprint kept as its estimate.
 * So the resident set stays under the budget plus one commit, and what does not
 * fit becomes suppressed overflow rather than memory the budget never allowed. */
static void enforce_budget(struct qn_dedup *d, struct dd_entry *e)
{
    if (d->total_bytes <= d->cfg.budget_bytes || evict_to(d, d->cfg.budget_bytes, e))
        return;
    if (e->state != DD_VOUCHING && e->state != DD_GAP)
        return;
    entry_forget(e, DD_SUPPRESSED);
    e->cooldown_until_ms = now_ms() + d->cfg.cooldown_ms;
    warn_pressure(d, e);
}

/* ---------------------------------------------------------------- loading */

static void load_start(struct dd_entry *e, bool full);

/* Appends a commit; false when it cannot (gap, overlap, memory). */
static bool apply_commit(struct dd_entry *e, int64_t base, int64_t created_ms,
                         const uint8_t *hashes, size_t n)
{
    if (base + (int64_t)n - 1 <= e->verified_upto)
        return true; /* already known (a load read it) */
    if (base != e->verified_upto + 1)
        return false;
    if (qn_hring_append(&e->ring, hashes, n, base, created_ms) != QN_OK)
        return false;
    e->verified_upto = base + (int64_t)n - 1;
    return true;
}

static int cmp_pending(const void *a, const void *b)
{
    const struct dd_pending *x = a, *y = b;
    return x->base < y->base ? -1 : x->base > y->base;
}

static void rows_done(void *ud, const struct qn_store_status *st,
                      const struct qn_segments_result *r)
{
    struct dd_entry *e = ud;
    struct qn_dedup *d = e->d;
    e->req = NULL;
    if (e->req_stale) {
        e->req_stale = false;
        return;
    }
    if (st->code != QN_OK) {
        QN_DEBUG("dedup load of %s failed: %s", key_queue(e), st->message);
        entry_forget(e, DD_COLD);
        return;
    }
    bool ok = true;
    if (e->full_load) {
        qn_hring_clear(&e->ring);
        e->verified_upto = -1;
        size_t total = 0;
        for (size_t i = 0; i < r->n; i++)
            total += r->rows[i].blob_len / 16;
        qn_hring_expect(&e->ring, total); /* one filter for the window, not ten */
        for (size_t i = 0; ok && i < r->n; i++) {
            const struct qn_segment_row *row = &r->rows[i];
            size_t n = (size_t)(row->end - row->base + 1);
            if (row->end < row->base || row->blob_len != n * 16) {
                ok = false;
                break;
            }
            ok = qn_hring_append(&e->ring, row->blob, n, row->base, row->created_at_us / 1000) ==
                 QN_OK;
            if (row->end > e->verified_upto)
                e->verified_upto = row->end;
        }
        /* Nothing in the window below the watermark read before the rows. */
        if (e->load_l0 > e->verified_upto)
            e->verified_upto = e->load_l0;
    } else {
        for (size_t i = 0; ok && i < r->n; i++) {
            const struct qn_segment_row *row = &r->rows[i];
            size_t n = (size_t)(row->end - row->base + 1);
            ok = row->end >= row->base && row->blob_len == n * 16 &&
                 apply_commit(e, row->base, row->created_at_us / 1000, row->blob, n);
        }
    }
    if (!ok) {
        entry_forget(e, DD_COLD);
        return;
    }
    /* The ring is now exact up to verified_upto. Commits heard meanwhile extend
     * it; one that does not follow on (another broker wrote in between, or too
     * many arrived) leaves a gap that a cheap catch-up closes. */
    bool gap = e->pending_overflow;
    qsort(e->pending, e->npending, sizeof e->pending[0], cmp_pending);
    for (size_t i = 0; !gap && i < e->npending; i++)
        gap = !apply_commit(e, e->pending[i].base, e->pending[i].created_ms, e->pending[i].hashes,
                            e->pending[i].n);
    pending_clear(e);
    set_state(e, gap ? DD_GAP : DD_VOUCHING);
    account(e);
    hint_set(d, e, e->ring.bytes);
    enforce_budget(d, e);
}

static void meta_done(void *ud, const struct qn_store_status *st, const struct qn_partition_meta *m)
{
    struct dd_entry *e = ud;
    struct qn_dedup *d = e->d;
    e->req = NULL;
    if (e->req_stale) {
        e->req_stale = false;
        return;
    }
    if (st->code != QN_OK || m == NULL) {
        entry_forget(e, DD_COLD);
        return;
    }
    bool window_changed = e->have_meta && m->window != e->window;
    bool pid_changed = e->have_meta && memcmp(e->pid, m->pid, 16) != 0;
    memcpy(e->pid, m->pid, 16);
    e->window = m->window;
    e->have_meta = true;
    e->meta_at_ms = now_ms();
    if (e->state != DD_LOADING) {
        /* A TTL refresh. Another partition id means the queue was deleted and
         * created again: offsets start over, the old watermark means nothing. */
        if ((window_changed || pid_changed) && (e->state == DD_VOUCHING || e->state == DD_GAP))
            entry_forget(e, DD_COLD);
        return;
    }
    if (e->window <= 0) {
        /* no dedup on this queue: SQL does not probe, nothing to cache */
        entry_forget(e, DD_COLD);
        return;
    }
    e->load_l0 = m->last_offset;
    e->load_window = e->window;
    int32_t secs = e->window + (int32_t)(d->cfg.skew_ms / 1000);
    int rc = qn_store_txns_window(d->store, e->pid, secs, NULL, rows_done, e, &e->req);
    if (rc != QN_OK) {
        e->req = NULL;
        entry_forget(e, DD_COLD);
    }
}

static void meta_refresh_done(void *ud, const struct qn_store_status *st,
                              const struct qn_partition_meta *m)
{
    meta_done(ud, st, m);
}

/* Starts a full hydration (meta, then the window's rows) or a gap catch-up
 * (rows after verified_upto). */
static void load_start(struct dd_entry *e, bool full)
{
    struct qn_dedup *d = e->d;
    if (e->req != NULL)
        return;
    pending_clear(e);
    e->full_load = full;
    set_state(e, DD_LOADING);
    int rc;
    if (full) {
        struct qn_call_opts o = {0, key_tenant(e), NULL};
        d->stats.hydrations++;
        rc = qn_store_partition_meta(d->store, key_queue(e), key_partition(e), &o, meta_done, e,
                                     &e->req);
    } else {
        d->stats.catchups++;
        rc = qn_store_txns_since(d->store, e->pid, e->verified_upto, NULL, rows_done, e, &e->req);
    }
    if (rc != QN_OK) {
        e->req = NULL;
        entry_forget(e, DD_COLD);
    }
}

/* Decides whether the entry may (re)build now: cheap catch-ups always may; a
 * full hydration must fit under fit * budget, evicting idle entries if needed. */
static void maybe_build(struct dd_entry *e)
{
    struct qn_dedup *d = e->d;
    int64_t now = now_ms();
    if (e->req != NULL)
        return;
    /* No dedup on the queue (window 0, from metadata younger than the TTL): SQL
     * does not probe, so -1 costs nothing and there is nothing to build. A push
     * result carrying a window again makes e->window > 0 at once. */
    if (e->have_meta && e->window <= 0 && now - e->meta_at_ms < d->cfg.meta_ttl_ms)
        return;
    if (e->state == DD_GAP) {
        load_start(e, false);
        return;
    }
    if (e->state == DD_SUPPRESSED) {
        if (now < e->cooldown_until_ms)
            return;
        set_state(e, DD_COLD);
    }
    size_t estimate = hint_get(d, e);
    size_t cap = d->cfg.budget_bytes;
    /* No footprint measured yet (first contact) estimates an empty window,
     * which is admitted whatever the pressure: it cannot start a thrash. */
    if (estimate > 0 && !qn_dedup_fits(d->total_bytes, e->accounted, estimate, cap, d->cfg.fit)) {
        size_t target = (size_t)(d->cfg.fit * (double)cap);
        target = target > estimate ? target - estimate : 0;
        evict_to(d, target + e->accounted, e);
        if (!qn_dedup_fits(d->total_bytes, e->accounted, estimate, cap, d->cfg.fit)) {
            set_state(e, DD_SUPPRESSED);
            e->cooldown_until_ms = now + d->cfg.cooldown_ms;
            warn_pressure(d, e);
            return;
        }
    }
    load_start(e, true);
}

/* ---------------------------------------------------------------- hooks */

int64_t qn_dedup_verified(void *ud, const uint8_t tenant[16], const char *queue,
                          const char *partition, const uint8_t *hashes, size_t n)
{
    struct qn_dedup *d = ud;
    struct dd_entry *e = entry_get(d, tenant, queue, partition, true);
    if (e == NULL) {
        d->stats.declined++;
        return -1;
    }
    int64_t now = now_ms();
    e->last_used_ms = now;
    lru_touch(d, e);
    if (e->state != DD_VOUCHING) {
        maybe_build(e);
        d->stats.declined++;
        return -1;
    }
    if (now - e->meta_at_ms > d->cfg.meta_ttl_ms && e->req == NULL) {
        /* refresh in the background; keep vouching meanwhile (push results also
         * carry the window, so a change is seen at the next commit anyway) */
        struct qn_call_opts o = {0, key_tenant(e), NULL};
        e->meta_at_ms = now;
        if (qn_store_partition_meta(d->store, key_queue(e), key_partition(e), &o, meta_refresh_done,
                                    e, &e->req) != QN_OK)
            e->req = NULL;
    }
    int64_t cutoff = wall_ms() - (int64_t)e->load_window * 1000 - d->cfg.skew_ms;
    if (qn_hring_expire(&e->ring, cutoff) >= 0)
        account(e);
    for (size_t i = 0; i < n; i++) {
        if (qn_hring_contains(&e->ring, hashes + i * 16)) {
            d->stats.local_hits++;
            d->stats.declined++;
            return -1;
        }
    }
    d->stats.vouched++;
    return e->verified_upto;
}

bool qn_dedup_vouched_for(void *ud, const uint8_t tenant[16], const char *queue,
                          const char *partition, int32_t *window, uint8_t pid[16])
{
    struct qn_dedup *d = ud;
    struct dd_entry *e = entry_get(d, tenant, queue, partition, false);
    if (e == NULL || e->state != DD_VOUCHING || !e->have_meta)
        return false;
    *window = e->load_window;
    memcpy(pid, e->pid, 16);
    return true;
}

void qn_dedup_committed(void *ud, const uint8_t tenant[16], const char *queue,
                        const char *partition, const uint8_t pid[16], int32_t window, int64_t base,
                        int64_t created_at_us, const uint8_t *hashes, size_t n)
{
    struct qn_dedup *d = ud;
    struct dd_entry *e = entry_get(d, tenant, queue, partition, false);
    if (e == NULL)
        return;
    if (e->have_meta && memcmp(e->pid, pid, 16) != 0) {
        /* the partition was deleted and created again */
        entry_forget(e, DD_COLD);
        e->have_meta = false;
        return;
    }
    if (e->have_meta && window != e->window) {
        e->window = window;
        if (e->state == DD_VOUCHING || e->state == DD_GAP || e->state == DD_LOADING)
            entry_forget(e, DD_COLD); /* rebuilt under the new window on next use */
        return;
    }
    int64_t created_ms = created_at_us / 1000;
    switch (e->state) {
    case DD_VOUCHING:
        if (base + (int64_t)n - 1 <= e->verified_upto) {
            entry_forget(e, DD_COLD); /* overlap: impossible unless state is wrong */
        } else if (base != e->verified_upto + 1) {
            set_state(e, DD_GAP); /* another broker wrote in between */
        } else if (!apply_commit(e, base, created_ms, hashes, n)) {
            entry_forget(e, DD_COLD);
        }
        account(e);
        enforce_budget(d, e);
        break;
    case DD_LOADING:
        if (e->npending >= PENDING_MAX) {
            e->pending_overflow = true;
            break;
        }
        {
            uint8_t *copy = malloc(n * 16);
            if (copy == NULL) {
                e->pending_overflow = true;
                break;
            }
            memcpy(copy, hashes, n * 16);
            e->pending[e->npending++] = (struct dd_pending){base, created_ms, n, copy};
        }
        break;
    default:
        break;
    }
}

/* ---------------------------------------------------------------- sweep */

static void sweep_one(struct qn_map_node *n, void *ud)
{
    struct qn_dedup *d = ud;
    struct dd_entry *e = qn_container_of(n, struct dd_entry, node);
    int64_t now = now_ms();
    if (e->req != NULL)
        return;
    if (e->state == DD_VOUCHING) {
        int64_t cutoff = wall_ms() - (int64_t)e->load_window * 1000 - d->cfg.skew_ms;
        if (qn_hring_expire(&e->ring, cutoff) >= 0)
            account(e);
    }
    /* an entry idle for longer than its window holds nothing in-window; a
     * suppressed one goes once its cooldown is served too */
    int64_t idle_ms = (int64_t)(e->window > 0 ? e->window : 60) * 1000 + d->cfg.skew_ms;
    if (now - e->last_used_ms > idle_ms &&
        (e->state != DD_SUPPRESSED || now >= e->cooldown_until_ms))
        entry_free(d, e);
}

static void sweep_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct qn_dedup *d = ud;
    qn_map_each(&d->entries, sweep_one, d);
    /* One debug line per sweep while the counters move: the only view of the
     * cache from outside the process (tests assert from it that it vouches). */
    if (qn_log_enabled(QN_LOG_DEBUG)) {
        struct qn_dedup_stats s;
        qn_dedup_stats(d, &s);
        if (s.vouched != d->logged.vouched || s.declined != d->logged.declined ||
            s.hydrations != d->logged.hydrations || s.evictions != d->logged.evictions ||
            s.suppressed != d->logged.suppressed) {
            QN_DEBUG("dedup stats entries=%zu vouching=%zu suppressed=%zu bytes=%zu hashes=%zu "
                     "hydrations=%llu catchups=%llu evictions=%llu vouched=%llu declined=%llu "
                     "local_hits=%llu",
                     s.entries, s.vouching, s.suppressed, s.bytes, s.hashes,
                     (unsigned long long)s.hydrations, (unsigned long long)s.catchups,
                     (unsigned long long)s.evictions, (unsigned long long)s.vouched,
                     (unsigned long long)s.declined, (unsigned long long)s.local_hits);
            d->logged = s;
        }
    }
}

/* ---------------------------------------------------------------- lifecycle */

int qn_dedup_new(struct event_base *base, qn_store *store, const struct qn_dedup_config *cfg,
                 struct qn_dedup **out)
{
    struct qn_dedup *d = calloc(1, sizeof *d);
    if (d == NULL)
        return QN_ENOMEM;
    d->store = store;
    d->cfg = *cfg;
    qn_map_init(&d->entries, 10u * 1000u * 1000u);
    qn_map_init(&d->hints, cfg->side_cap + 1);
    d->last_warn_ms = -60000;
    d->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, d);
    if (d->sweep == NULL) {
        free(d);
        return QN_ENOMEM;
    }
    qn_timer_after(d->sweep, cfg->sweep_ms);
    *out = d;
    return QN_OK;
}

static void free_entry_cb(struct qn_map_node *n, void *ud)
{
    struct qn_dedup *d = ud;
    struct dd_entry *e = qn_container_of(n, struct dd_entry, node);
    qn_store_cancel(e->req);
    e->req = NULL;
    pending_clear(e);
    qn_hring_clear(&e->ring);
    qn_map_remove(&d->entries, n);
    free(e);
}

void qn_dedup_free(struct qn_dedup *d)
{
    if (d == NULL)
        return;
    if (d->sweep)
        event_free(d->sweep);
    qn_map_each(&d->entries, free_entry_cb, d);
    qn_map_each(&d->hints, free_hint_cb, d);
    qn_map_destroy(&d->entries);
    qn_map_destroy(&d->hints);
    free(d);
}

static void count_entry(struct qn_map_node *n, void *ud)
{
    struct qn_dedup_stats *s = ud;
    struct dd_entry *e = qn_container_of(n, struct dd_entry, node);
    s->entries++;
    if (e->state == DD_VOUCHING)
        s->vouching++;
    s->hashes += e->ring.hashes;
}

void qn_dedup_stats(const struct qn_dedup *d, struct qn_dedup_stats *out)
{
    *out = d->stats;
    out->entries = out->vouching = out->hashes = 0;
    qn_map_each((struct qn_map *)&d->entries, count_entry, out);
    out->suppressed = d->suppressed;
    out->bytes = d->total_bytes;
}
