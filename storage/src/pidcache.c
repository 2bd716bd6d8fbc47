/*
 * pidcache.c - the store's memory of partition ids: (tenant, queue, partition)
 * -> the partition's id, learnt from what push and pop return, so that later
 * calls can address the partition by id (push_one_v1: one primary-key probe,
 * the shape a distributed database routes on) instead of by name.
 *
 * Does: a fixed-size set-associative table (4 ways per set), least recently
 * used way replaced; lookups and inserts are O(1) and never allocate beyond one
 * key copy per entry.
 * Does not: decide anything. An entry is a hint: the procedures take the names
 * too and fall back to them when the id is gone (the queue was deleted and made
 * again, the partition cleaned up), and the result teaches the new id. A
 * partition's id never changes and is never reused, so an entry is either right
 * or names a partition that no longer exists.
 *
 * Invariants:
 *   1. At most cap entries (a power of two, 4 ways per set); key bytes are
 *      tenant (16) + queue + NUL + partition, partition "" meaning "Default".
 *   2. A way with key == NULL is empty.
 */
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

#define WAYS 4

/* Builds the key into buf (at most QN__PIDCACHE_KEY_MAX bytes); 0 when too long. */
static size_t make_key(uint8_t *buf, const uint8_t tenant[16], const char *queue, const char *part)
{
    if (part == NULL || part[0] == '\0')
        part = "Default";
    size_t ql = strlen(queue), pl = strlen(part);
    if (16 + ql + 1 + pl > QN__PIDCACHE_KEY_MAX)
        return 0;
    memcpy(buf, tenant, 16);
    memcpy(buf + 16, queue, ql + 1);
    memcpy(buf + 17 + ql, part, pl);
    return 17 + ql + pl;
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int qn__pidcache_init(struct qn__pidcache *c, uint32_t cap)
{
    memset(c, 0, sizeof *c);
    if (cap == 0)
        return QN_OK;
    uint32_t sets = 1;
    while (sets * WAYS < cap && sets < (1u << 24))
        sets <<= 1;
    c->e = calloc((size_t)sets * WAYS, sizeof *c->e);
    if (c->e == NULL)
        return QN_ENOMEM;
    c->sets = sets;
    return QN_OK;
}

void qn__pidcache_free(struct qn__pidcache *c)
{
    if (c->e != NULL)
        for (size_t i = 0; i < (size_t)c->sets * WAYS; i++)
            free(c->e[i].key);
    free(c->e);
    memset(c, 0, sizeof *c);
}

/* The way holding key in its set, or NULL. */
static struct qn__pidcache_entry *find(struct qn__pidcache *c, const uint8_t *key, size_t klen,
                                       uint64_t h)
{
    struct qn__pidcache_entry *set = &c->e[(size_t)(h & (c->sets - 1)) * WAYS];
    for (int w = 0; w < WAYS; w++)
        if (set[w].key != NULL && set[w].h == h && set[w].klen == klen &&
            memcmp(set[w].key, key, klen) == 0)
            return &set[w];
    return NULL;
}

bool qn__pidcache_get(struct qn__pidcache *c, const uint8_t tenant[16], const char *queue,
                      const char *part, uint8_t pid[16])
{
    uint8_t key[QN__PIDCACHE_KEY_MAX];
    size_t klen;
    if (c->e == NULL || queue == NULL || (klen = make_key(key, tenant, queue, part)) == 0)
        return false;
    uint64_t h = fnv1a(key, klen);
    struct qn__pidcache_entry *e = find(c, key, klen, h);
    if (e == NULL) {
        c->misses++;
        return false;
    }
    e->tick = ++c->tick;
    memcpy(pid, e->pid, 16);
    c->hits++;
    return true;
}

void qn__pidcache_put(struct qn__pidcache *c, const uint8_t tenant[16], const char *queue,
                      const char *part, const uint8_t pid[16])
{
    uint8_t key[QN__PIDCACHE_KEY_MAX];
    size_t klen;
    if (c->e == NULL || queue == NULL || (klen = make_key(key, tenant, queue, part)) == 0)
        return;
    uint64_t h = fnv1a(key, klen);
    struct qn__pidcache_entry *e = find(c, key, klen, h);
    if (e == NULL) {
        struct qn__pidcache_entry *set = &c->e[(size_t)(h & (c->sets - 1)) * WAYS];
        e = &set[0];
        for (int w = 0; w < WAYS; w++) {
            if (set[w].key == NULL) {
                e = &set[w];
                break;
            }
            if (set[w].tick < e->tick)
                e = &set[w];
        }
        uint8_t *k = malloc(klen);
        if (k == NULL)
            return; /* a hint not kept: the names still work */
        free(e->key);
        memcpy(k, key, klen);
        e->key = k;
        e->klen = klen;
        e->h = h;
    }
    memcpy(e->pid, pid, 16);
    e->tick = ++c->tick;
}
