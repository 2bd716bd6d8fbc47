/*
 * engine/map.c - see map.h.
 *
 * Invariants: nbuckets is 0 or a power of two; every node is in the bucket
 * hash & (nbuckets - 1); count is the number of nodes reachable from buckets.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/map.h"
#include "queen/error.h"

uint64_t qn_hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void qn_map_init(struct qn_map *m, size_t max_entries)
{
    memset(m, 0, sizeof *m);
    m->max_entries = max_entries;
}

void qn_map_destroy(struct qn_map *m)
{
    free(m->buckets);
    memset(m, 0, sizeof *m);
}

struct qn_map_node *qn_map_get(const struct qn_map *m, const void *key, size_t klen)
{
    if (m->nbuckets == 0)
        return NULL;
    uint64_t h = qn_hash_bytes(key, klen);
    for (struct qn_map_node *n = m->buckets[h & (m->nbuckets - 1)]; n; n = n->next)
        if (n->hash == h && n->klen == klen && memcmp(n->key, key, klen) == 0)
            return n;
    return NULL;
}

static int grow(struct qn_map *m)
{
    size_t nb = m->nbuckets ? m->nbuckets * 2 : 16;
    struct qn_map_node **b = calloc(nb, sizeof *b);
    if (b == NULL)
        return QN_ENOMEM;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct qn_map_node *n = m->buckets[i];
        while (n) {
            struct qn_map_node *next = n->next;
            size_t j = n->hash & (nb - 1);
            n->next = b[j];
            b[j] = n;
            n = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = nb;
    return QN_OK;
}

int qn_map_put(struct qn_map *m, struct qn_map_node *node, const void *key, size_t klen)
{
    if (m->count >= m->max_entries)
        return QN_ELIMIT;
    /* A failed growth only lengthens the chains; without any bucket array the
     * node cannot go in at all. */
    if ((m->nbuckets == 0 || m->count >= m->nbuckets) && grow(m) != QN_OK && m->nbuckets == 0)
        return QN_ENOMEM;
    node->hash = qn_hash_bytes(key, klen);
    node->key = key;
    node->klen = klen;
    size_t i = node->hash & (m->nbuckets - 1);
    node->next = m->buckets[i];
    m->buckets[i] = node;
    m->count++;
    return QN_OK;
}

void qn_map_remove(struct qn_map *m, struct qn_map_node *node)
{
    if (m->nbuckets == 0)
        return;
    struct qn_map_node **pp = &m->buckets[node->hash & (m->nbuckets - 1)];
    while (*pp && *pp != node)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = node->next;
        node->next = NULL;
        m->count--;
    }
}

void qn_map_each(struct qn_map *m, void (*fn)(struct qn_map_node *n, void *ud), void *ud)
{
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct qn_map_node *n = m->buckets[i];
        while (n) {
            struct qn_map_node *next = n->next;
            fn(n, ud);
            n = next;
        }
    }
}
