/*
 * engine/waiters.c - see waiters.h.
 *
 * Layout: a map from (tenant, queue name) to a queue entry holding one bucket
 * per consumer group (a short list: groups waiting on one queue are few), each
 * bucket a FIFO of waiters. Discovery waiters live in one extra bucket and are
 * woken only by commits of their own tenant. Empty buckets and queue
 * entries are freed as soon as their last waiter leaves.
 *
 * A wake pass first moves the waiters it wakes, oldest first, from their buckets
 * to the `waking` list, then calls them one by one from its head. A callback may
 * park again (itself or others) or unpark, and so free, another waiter still on
 * the list: unparking takes it off the list, so it is never called. A pass
 * started from inside a callback only adds to the list; the outer pass calls.
 *
 * A commit of this broker names its partition (qn_waiters_feed): per group it
 * wakes one "any partition" waiter, since one (partition, group) has one lease
 * at a time and a second woken pop would only come back empty; the partition
 * travels as the waiter's hint so that its pop skips the any-partition scan.
 *
 * Invariants:
 *   1. w->bucket != NULL iff w is linked in that bucket's list (a real bucket,
 *      or `waking`).
 *   2. A real bucket with no waiters does not exist; a queue entry with no
 *      buckets does not exist.
 *   3. count == number of waiters in real buckets (parked) <= max_parked.
 *   4. Every waiter on `waking` is called exactly once, unless it is unparked
 *      first; none is called after it was unparked.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/map.h"
#include "queen/error.h"
#include "queen/store.h"
#include "engine/waiters.h"

struct qn_wait_queue;

struct qn_wait_bucket {
    struct qn_wait_queue *q;     /* NULL for the discovery bucket */
    struct qn_wait_bucket *next; /* sibling buckets of q */
    struct qn_waiter *head, *tail;
    char group[];
};

struct qn_wait_queue {
    struct qn_map_node node;
    struct qn_wait_bucket *buckets;
    size_t klen;
    char key[]; /* tenant (16 bytes) then the queue name, NUL-terminated */
};

enum { UNFED_SLOTS = 64, SCAN_SLOTS = 256, SPARE_SLOTS = 64, SPARE_WAYS = 8, SPARE_NAME_MAX = 63 };

/* A group's last scan on this loop (qn_waiters_scanned); key 0: none. */
struct scan_slot {
    uint64_t key;   /* hash of (tenant, queue, group) */
    uint64_t unfed; /* the queue's unfed count when that scan was issued */
    int64_t at_ms;  /* when it came back empty */
};

/* A partition whose news reached no consumer of a group here (waiters.h,
 * spare hints); qkey 0: free. */
struct spare {
    uint64_t qkey; /* hash of (tenant, queue) */
    uint64_t gkey; /* scan_key of the group; 0: any group */
    uint64_t seq;  /* order kept (or told to nobody again) */
    int64_t at_ms;
    char partition[SPARE_NAME_MAX + 1];
};

struct qn_waiters {
    struct qn_map queues;
    struct spare spares[SPARE_SLOTS][SPARE_WAYS]; /* by qkey */
    uint64_t spare_seq;
    uint64_t unfed[UNFED_SLOTS];        /* qn_waiters_unfed, per (tenant, queue) slot */
    struct scan_slot scans[SCAN_SLOTS]; /* direct-mapped by key */
    struct qn_wait_bucket *discovery;
    struct qn_wait_bucket waking; /* the wake pass's list (not a real bucket) */
    bool passing;                 /* a wake pass is calling waiters */
    size_t count;
    size_t max_parked;
    _Atomic size_t *shared; /* every loop's parked count (qn_waiters_share_count); NULL: count */
};

int qn_waiters_new(size_t max_parked, struct qn_waiters **out)
{
    struct qn_waiters *ws = calloc(1, sizeof *ws);
    if (ws == NULL)
        return QN_ENOMEM;
    qn_map_init(&ws->queues, max_parked + 1);
    ws->max_parked = max_parked;
    *out = ws;
    return QN_OK;
}

static void free_queue(struct qn_map_node *n, void *ud)
{
    struct qn_waiters *ws = ud;
    struct qn_wait_queue *q = qn_container_of(n, struct qn_wait_queue, node);
    while (q->buckets) {
        struct qn_wait_bucket *b = q->buckets;
        q->buckets = b->next;
        for (struct qn_waiter *w = b->head; w; w = w->next)
            w->bucket = NULL;
        free(b);
    }
    qn_map_remove(&ws->queues, n);
    free(q);
}

void qn_waiters_free(struct qn_waiters *ws)
{
    if (ws == NULL)
        return;
    qn_map_each(&ws->queues, free_queue, ws);
    qn_map_destroy(&ws->queues);
    if (ws->discovery) {
        for (struct qn_waiter *w = ws->discovery->head; w; w = w->next)
            w->bucket = NULL;
        free(ws->discovery);
    }
    for (struct qn_waiter *w = ws->waking.head; w; w = w->next)
        w->bucket = NULL;
    free(ws);
}

bool qn_waiter_parked(const struct qn_waiter *w)
{
    return w->bucket != NULL;
}

size_t qn_waiters_count(const struct qn_waiters *ws)
{
    return ws->count;
}

static struct qn_wait_bucket *bucket_new(struct qn_wait_queue *q, const char *group)
{
    size_t gl = strlen(group);
    struct qn_wait_bucket *b = calloc(1, sizeof *b + gl + 1);
    if (b == NULL)
        return NULL;
    memcpy(b->group, group, gl + 1);
    b->q = q;
    return b;
}

static void list_append(struct qn_wait_bucket *b, struct qn_waiter *w)
{
    w->bucket = b;
    w->next = NULL;
    w->prev = b->tail;
    if (b->tail)
        b->tail->next = w;
    else
        b->head = w;
    b->tail = w;
}

static void list_unlink(struct qn_wait_bucket *b, struct qn_waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        b->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        b->tail = w->prev;
    w->bucket = NULL;
    w->prev = w->next = NULL;
}

/* The map key of (tenant, queue) in buf (>= 16 + 256 bytes); its length. */
static size_t queue_key(const uint8_t tenant[16], const char *queue, char *buf)
{
    size_t ql = strnlen(queue, 255);
    memcpy(buf, tenant, 16);
    memcpy(buf + 16, queue, ql);
    buf[16 + ql] = '\0';
    return 16 + ql;
}

/* The bucket name of a group: the wire's default group is spelled "" or
 * QN_QUEUE_MODE (queen/store.h), one group either way. */
static const char *group_key(const char *group)
{
    return group == NULL || strcmp(group, QN_QUEUE_MODE) == 0 ? "" : group;
}

void qn_waiters_share_count(struct qn_waiters *ws, _Atomic size_t *count)
{
    ws->shared = count;
}

static int park_in_bucket(struct qn_waiters *ws, struct qn_waiter *w, const uint8_t tenant[16],
                          const char *queue, const char *group);

int qn_waiters_park(struct qn_waiters *ws, struct qn_waiter *w, const uint8_t tenant[16],
                    const char *queue, const char *group)
{
    if (w->bucket != NULL)
        return QN_OK; /* parked already, or about to be called by a wake pass */
    if (ws->count >= ws->max_parked)
        return QN_EBUSY;
    /* the process's limit: a place taken first, given back on failure */
    if (ws->shared != NULL && atomic_fetch_add(ws->shared, 1) >= ws->max_parked) {
        atomic_fetch_sub(ws->shared, 1);
        return QN_EBUSY;
    }
    int rc = park_in_bucket(ws, w, tenant, queue, group);
    if (rc != QN_OK && ws->shared != NULL)
        atomic_fetch_sub(ws->shared, 1);
    return rc;
}

static int park_in_bucket(struct qn_waiters *ws, struct qn_waiter *w, const uint8_t tenant[16],
                          const char *queue, const char *group)
{
    group = group_key(group);
    memcpy(w->tenant, tenant, 16);
    struct qn_wait_bucket *b = NULL;
    if (queue == NULL || *queue == '\0') {
        if (ws->discovery == NULL && (ws->discovery = bucket_new(NULL, "")) == NULL)
            return QN_ENOMEM;
        b = ws->discovery;
    } else {
        char kbuf[16 + 256];
        size_t klen = queue_key(tenant, queue, kbuf);
        struct qn_wait_queue *q = NULL;
        struct qn_map_node *n = qn_map_get(&ws->queues, kbuf, klen);
        if (n != NULL) {
            q = qn_container_of(n, struct qn_wait_queue, node);
        } else {
            q = calloc(1, sizeof *q + klen + 1);
            if (q == NULL)
                return QN_ENOMEM;
            memcpy(q->key, kbuf, klen + 1);
            q->klen = klen;
            int rc = qn_map_put(&ws->queues, &q->node, q->key, klen);
            if (rc != QN_OK) {
                free(q);
                return rc == QN_ELIMIT ? QN_EBUSY : rc;
            }
        }
        for (b = q->buckets; b && strcmp(b->group, group) != 0; b = b->next)
            ;
        if (b == NULL) {
            b = bucket_new(q, group);
            if (b == NULL) {
                if (q->buckets == NULL) {
                    qn_map_remove(&ws->queues, &q->node);
                    free(q);
                }
                return QN_ENOMEM;
            }
            b->next = q->buckets;
            q->buckets = b;
        }
    }
    list_append(b, w);
    ws->count++;
    return QN_OK;
}

/* Takes w out of its real bucket, freeing the bucket (and its queue entry) when
 * it was the last. */
static void leave_bucket(struct qn_waiters *ws, struct qn_waiter *w)
{
    struct qn_wait_bucket *b = w->bucket;
    list_unlink(b, w);
    ws->count--;
    if (ws->shared != NULL)
        atomic_fetch_sub(ws->shared, 1);
    if (b->head != NULL)
        return;
    if (b->q == NULL) {
        ws->discovery = NULL;
        free(b);
        return;
    }
    struct qn_wait_queue *q = b->q;
    struct qn_wait_bucket **pp = &q->buckets;
    while (*pp != b)
        pp = &(*pp)->next;
    *pp = b->next;
    free(b);
    if (q->buckets == NULL) {
        qn_map_remove(&ws->queues, &q->node);
        free(q);
    }
}

void qn_waiters_unpark(struct qn_waiters *ws, struct qn_waiter *w)
{
    if (w->bucket == NULL)
        return;
    if (w->bucket == &ws->waking)
        list_unlink(&ws->waking, w); /* its wake-up will not run */
    else
        leave_bucket(ws, w);
}

/* Collects the waiters to wake from one bucket into `out`, oldest first, so that
 * they leave their buckets (which may free them) after the walk. */
static size_t collect(struct qn_waiters *ws, struct qn_wait_bucket *b, const uint8_t *tenant,
                      const char *partition, size_t per_group, struct qn_waiter **out, size_t cap,
                      size_t n)
{
    size_t any = 0;
    struct qn_waiter *w = b->head;
    while (w && n < cap) {
        struct qn_waiter *next = w->next;
        bool specific = w->partition != NULL;
        bool match = (!specific || partition == NULL || strcmp(w->partition, partition) == 0) &&
                     (tenant == NULL || memcmp(w->tenant, tenant, 16) == 0);
        if (match && (specific || any < per_group)) {
            if (!specific)
                any++;
            out[n++] = w;
        }
        w = next;
    }
    return n;
}

/* Picks, for a commit to `partition` (feed mode), the one "any partition"
 * waiter of bucket b to wake: the oldest ready one, else the oldest. Every
 * waiter for exactly this partition is taken as well. *fed: an "any
 * partition" waiter was picked; *displaced: the partition the pick was hinted
 * with and had not taken yet ("" if none), now told to nobody. */
static size_t collect_feed(struct qn_wait_bucket *b, const char *partition, struct qn_waiter **out,
                           size_t cap, size_t n, bool *fed, bool *ready_pick,
                           char displaced[QN_WAITER_HINT_MAX + 1])
{
    displaced[0] = '\0';
    struct qn_waiter *any = NULL, *ready = NULL;
    for (struct qn_waiter *w = b->head; w && n < cap; w = w->next) {
        if (w->partition != NULL) {
            if (strcmp(w->partition, partition) == 0)
                out[n++] = w;
            continue;
        }
        if (any == NULL)
            any = w;
        if (ready == NULL && (w->ready == NULL || w->ready(w)))
            ready = w;
    }
    struct qn_waiter *pick = ready ? ready : any;
    *ready_pick = ready != NULL;
    if (pick != NULL && n < cap) {
        /* a hint it has not taken yet (parked, waiting for budget) is replaced:
         * that partition was told to nobody */
        *fed = true;
        if (pick->hinted)
            memcpy(displaced, pick->hint, sizeof pick->hint);
        size_t pl = strlen(partition);
        if (pl <= QN_WAITER_HINT_MAX) {
            memcpy(pick->hint, partition, pl + 1);
            pick->hinted = true;
        }
        out[n++] = pick;
    }
    return n;
}

/* Moves the chosen waiters to the waking list and, unless a pass is already
 * running (we are inside a wake-up), calls them. */
static void wake_chosen(struct qn_waiters *ws, struct qn_waiter **wake, size_t n)
{
    /* Move all to the waking list first (this may free buckets), then call back
     * from its head: a waiter unparked meanwhile is off the list (invariant 4). */
    for (size_t i = 0; i < n; i++) {
        leave_bucket(ws, wake[i]);
        list_append(&ws->waking, wake[i]);
    }
    if (ws->passing)
        return; /* called from a wake-up: the pass below us calls them */
    ws->passing = true;
    while (ws->waking.head != NULL) {
        struct qn_waiter *w = ws->waking.head;
        list_unlink(&ws->waking, w);
        w->wake(w);
    }
    ws->passing = false;
}

enum { WAKE_BATCH = 256 };

static size_t unfed_slot(const char *key, size_t klen);

void qn_waiters_notify(struct qn_waiters *ws, const uint8_t *tenant, const char *queue,
                       const char *partition, size_t per_group)
{
    struct qn_waiter *wake[WAKE_BATCH];
    size_t n = 0;
    if (per_group == 0)
        per_group = 1;
    if (queue == NULL || tenant == NULL) {
        /* news of no known partition, maybe of any queue: any group may have
         * data no consumer here was told of */
        for (size_t i = 0; i < UNFED_SLOTS; i++)
            ws->unfed[i]++;
    } else {
        char kbuf[16 + 256];
        size_t klen = queue_key(tenant, queue, kbuf);
        ws->unfed[unfed_slot(kbuf, klen)]++; /* no partition named: told to nobody in particular */
        struct qn_map_node *node = qn_map_get(&ws->queues, kbuf, klen);
        if (node != NULL) {
            struct qn_wait_queue *q = qn_container_of(node, struct qn_wait_queue, node);
            for (struct qn_wait_bucket *b = q->buckets; b && n < WAKE_BATCH; b = b->next)
                n = collect(ws, b, NULL, partition, per_group, wake, WAKE_BATCH, n);
        }
    }
    if (ws->discovery != NULL && n < WAKE_BATCH)
        n = collect(ws, ws->discovery, tenant, NULL, per_group, wake, WAKE_BATCH, n);
    wake_chosen(ws, wake, n);
}

static size_t unfed_slot(const char *key, size_t klen)
{
    uint32_t h = 2166136261u; /* FNV-1a over the (tenant, queue) key */
    for (size_t i = 0; i < klen; i++)
        h = (h ^ (uint8_t)key[i]) * 16777619u;
    return h % UNFED_SLOTS;
}

uint64_t qn_waiters_unfed(const struct qn_waiters *ws, const uint8_t tenant[16], const char *queue)
{
    char kbuf[16 + 256];
    size_t klen = queue_key(tenant, queue, kbuf);
    return ws->unfed[unfed_slot(kbuf, klen)];
}

static uint64_t scan_key(const uint8_t tenant[16], const char *queue, const char *group)
{
    char kbuf[16 + 256 + 256];
    size_t klen = queue_key(tenant, queue, kbuf) + 1; /* with the NUL */
    const char *g = group_key(group);
    size_t gl = strnlen(g, 255);
    memcpy(kbuf + klen, g, gl);
    uint64_t k = qn_hash_bytes(kbuf, klen + gl);
    return k != 0 ? k : 1;
}

void qn_waiters_scanned(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                        const char *group, uint64_t unfed, bool empty, int64_t now_ms)
{
    if (queue == NULL || *queue == '\0')
        return;
    uint64_t k = scan_key(tenant, queue, group);
    struct scan_slot *s = &ws->scans[k % SCAN_SLOTS];
    if (empty) {
        s->key = k;
        s->unfed = unfed;
        s->at_ms = now_ms;
    } else if (s->key == k) {
        s->key = 0; /* data was there untold: the next consumers look again */
    }
}

bool qn_waiters_known_empty(const struct qn_waiters *ws, const uint8_t tenant[16],
                            const char *queue, const char *group, int64_t now_ms,
                            int64_t max_age_ms, uint64_t *unfed)
{
    if (queue == NULL || *queue == '\0')
        return false;
    uint64_t k = scan_key(tenant, queue, group);
    const struct scan_slot *s = &ws->scans[k % SCAN_SLOTS];
    if (s->key != k || now_ms - s->at_ms > max_age_ms || now_ms < s->at_ms ||
        qn_waiters_unfed(ws, tenant, queue) != s->unfed)
        return false;
    *unfed = s->unfed;
    return true;
}

static uint64_t spare_qkey_of(const char *kbuf, size_t klen)
{
    uint64_t k = qn_hash_bytes(kbuf, klen);
    return k != 0 ? k : 1;
}

static uint64_t spare_qkey(const uint8_t tenant[16], const char *queue)
{
    char kbuf[16 + 256];
    size_t klen = queue_key(tenant, queue, kbuf);
    return spare_qkey_of(kbuf, klen);
}

/* Keeps (queue, group, partition) as a spare hint; gkey 0: any group. */
static void spare_keep(struct qn_waiters *ws, uint64_t qkey, uint64_t gkey, const char *partition,
                       int64_t now_ms)
{
    size_t pl = strlen(partition);
    if (pl > SPARE_NAME_MAX)
        return;
    struct spare *set = ws->spares[qkey % SPARE_SLOTS], *victim = &set[0];
    for (size_t i = 0; i < SPARE_WAYS; i++) {
        struct spare *e = &set[i];
        if (e->qkey == qkey && e->gkey == gkey && strcmp(e->partition, partition) == 0) {
            e->at_ms = now_ms; /* told to nobody again: keep it as fresh news */
            e->seq = ++ws->spare_seq;
            return;
        }
        if (victim->qkey != 0 && (e->qkey == 0 || e->seq < victim->seq))
            victim = e;
    }
    victim->qkey = qkey;
    victim->gkey = gkey;
    victim->seq = ++ws->spare_seq;
    victim->at_ms = now_ms;
    memcpy(victim->partition, partition, pl + 1);
}

bool qn_waiters_take_spare(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                           const char *group, int64_t now_ms, int64_t max_age_ms,
                           char out[QN_WAITER_HINT_MAX + 1])
{
    if (queue == NULL || *queue == '\0')
        return false;
    uint64_t qkey = spare_qkey(tenant, queue), gkey = scan_key(tenant, queue, group);
    struct spare *set = ws->spares[qkey % SPARE_SLOTS], *best = NULL;
    for (size_t i = 0; i < SPARE_WAYS; i++) {
        struct spare *e = &set[i];
        if (e->qkey != qkey || (e->gkey != 0 && e->gkey != gkey))
            continue;
        if (now_ms - e->at_ms > max_age_ms || now_ms < e->at_ms) {
            e->qkey = 0; /* too old to trust */
            continue;
        }
        if (best == NULL || e->seq < best->seq)
            best = e;
    }
    if (best == NULL)
        return false;
    memcpy(out, best->partition, strlen(best->partition) + 1);
    best->qkey = 0;
    return true;
}

void qn_waiters_drop_spare(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                           const char *group, const char *partition)
{
    if (queue == NULL || *queue == '\0' || partition == NULL)
        return;
    uint64_t qkey = spare_qkey(tenant, queue), gkey = scan_key(tenant, queue, group);
    struct spare *set = ws->spares[qkey % SPARE_SLOTS];
    for (size_t i = 0; i < SPARE_WAYS; i++) {
        struct spare *e = &set[i];
        if (e->qkey == qkey && (e->gkey == 0 || e->gkey == gkey) &&
            strcmp(e->partition, partition) == 0)
            e->qkey = 0;
    }
}

static bool told_has(const struct qn_told *t, const char *group)
{
    for (size_t i = 0; t->complete && i < t->len; i += strlen(t->names + i) + 1)
        if (strcmp(t->names + i, group) == 0)
            return true;
    return false;
}

static void told_add(struct qn_told *t, const char *group)
{
    size_t gl = strlen(group) + 1;
    if (t->len + gl > QN_TOLD_BYTES) {
        t->complete = false;
        return;
    }
    memcpy(t->names + t->len, group, gl);
    t->len = (uint16_t)(t->len + gl);
}

/* What feed needs to keep spares, computed at its first keep: most feeds tell
 * a consumer and keep nothing. */
struct keeper {
    const uint8_t *tenant;
    const char *queue, *kbuf;
    size_t klen;
    uint64_t qkey; /* 0 until the first keep */
    int64_t now_ms;
};

static void keep(struct qn_waiters *ws, struct keeper *k, const char *group, const char *partition)
{
    if (k->qkey == 0) {
        k->qkey = spare_qkey_of(k->kbuf, k->klen);
        k->now_ms = qn_store_now_ms();
    }
    spare_keep(ws, k->qkey, group != NULL ? scan_key(k->tenant, k->queue, group) : 0, partition,
               k->now_ms);
}

static void feed(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                 const char *group, const char *partition, size_t discovery,
                 bool (*skip)(void *ud, const char *group), void *ud, const struct qn_told *told_in,
                 struct qn_told *told_out)
{
    struct qn_waiter *wake[WAKE_BATCH];
    size_t n = 0;
    char kbuf[16 + 256];
    size_t klen = queue_key(tenant, queue, kbuf);
    struct qn_map_node *node = qn_map_get(&ws->queues, kbuf, klen);
    if (group != NULL)
        group = group_key(group);
    if (told_out != NULL) {
        told_out->complete = true;
        told_out->len = 0;
    }
    /* unfed: some group of the queue may have no consumer on this loop that
     * was told (no waiter parked, or past the pass's cap); what was told to
     * nobody is kept as a spare hint */
    bool unfed = node == NULL;
    struct keeper k = {.tenant = tenant, .queue = queue, .kbuf = kbuf, .klen = klen};
    char displaced[QN_WAITER_HINT_MAX + 1];
    if (node == NULL)
        keep(ws, &k, group, partition);
    if (node != NULL) {
        struct qn_wait_queue *q = qn_container_of(node, struct qn_wait_queue, node);
        bool seen = false;
        for (struct qn_wait_bucket *b = q->buckets; b; b = b->next) {
            if (group != NULL && strcmp(b->group, group) != 0)
                continue;
            seen = true;
            if (told_in != NULL && told_has(told_in, b->group)) {
                /* told on another loop: this partition's own waiters only */
                if (n < WAKE_BATCH)
                    n = collect(ws, b, NULL, partition, 0, wake, WAKE_BATCH, n);
                continue;
            }
            if (skip != NULL && skip(ud, b->group)) {
                if (told_out != NULL)
                    told_add(told_out, b->group);
                continue; /* its lease is held here: the release hints */
            }
            bool fed = false, ready = false;
            displaced[0] = '\0'; /* stays empty when the pass is full */
            if (n < WAKE_BATCH)
                n = collect_feed(b, partition, wake, WAKE_BATCH, n, &fed, &ready, displaced);
            if (!fed || displaced[0] != '\0')
                keep(ws, &k, b->group, fed ? displaced : partition);
            unfed = unfed || !fed || displaced[0] != '\0';
            if (fed && ready && told_out != NULL)
                told_add(told_out, b->group); /* a consumer that pops at once */
        }
        if (group != NULL && !seen) {
            unfed = true;
            keep(ws, &k, group, partition);
        }
    }
    if (unfed)
        ws->unfed[unfed_slot(kbuf, klen)]++;
    if (ws->discovery != NULL && n < WAKE_BATCH && discovery > 0)
        n = collect(ws, ws->discovery, tenant, NULL, discovery, wake, WAKE_BATCH, n);
    wake_chosen(ws, wake, n);
}

void qn_waiters_feed(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                     const char *group, const char *partition, size_t discovery)
{
    if (tenant == NULL || queue == NULL || partition == NULL) {
        qn_waiters_notify(ws, tenant, queue, partition, discovery);
        return;
    }
    feed(ws, tenant, queue, group, partition, discovery, NULL, NULL, NULL, NULL);
}

void qn_waiters_feed_except(struct qn_waiters *ws, const uint8_t tenant[16], const char *queue,
                            const char *partition, size_t discovery,
                            bool (*skip)(void *ud, const char *group), void *ud,
                            const struct qn_told *told_in, struct qn_told *told_out)
{
    if (tenant == NULL || queue == NULL || partition == NULL) {
        if (told_out != NULL)
            *told_out = (struct qn_told){0}; /* incomplete: none told */
        qn_waiters_notify(ws, tenant, queue, partition, discovery);
        return;
    }
    feed(ws, tenant, queue, NULL, partition, discovery, skip, ud, told_in, told_out);
}

struct name_list {
    char **names;
    size_t n, cap;
};

static void collect_name(struct qn_map_node *n, void *ud)
{
    struct name_list *l = ud;
    struct qn_wait_queue *q = qn_container_of(n, struct qn_wait_queue, node);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **p = realloc(l->names, cap * sizeof *p);
        if (p == NULL)
            return;
        l->names = p;
        l->cap = cap;
    }
    char *copy = malloc(q->klen + 1);
    if (copy != NULL) {
        memcpy(copy, q->key, q->klen + 1);
        l->names[l->n++] = copy;
    }
}

void qn_waiters_wake_all(struct qn_waiters *ws)
{
    /* Names first: waking unparks (and may free) the map's nodes. A woken owner
     * may park again; passes stop when a pass wakes nobody new. */
    for (int pass = 0; pass < 1000 && ws->count > 0; pass++) {
        size_t before = ws->count;
        struct name_list l = {NULL, 0, 0};
        qn_map_each(&ws->queues, collect_name, &l);
        for (size_t i = 0; i < l.n; i++) {
            /* a key is the tenant's 16 bytes, then the queue name */
            qn_waiters_notify(ws, (const uint8_t *)l.names[i], l.names[i] + 16, NULL, SIZE_MAX);
            free(l.names[i]);
        }
        free(l.names);
        if (ws->discovery != NULL)
            qn_waiters_notify(ws, NULL, NULL, NULL, SIZE_MAX);
        if (ws->count >= before)
            break;
    }
}
