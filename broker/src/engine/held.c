/*
 * engine/held.c - see held.h.
 *
 * Layout: a fixed array of buckets, each a singly linked list of (key, count)
 * nodes, under one mutex. A loop takes it at each lease it holds or lets go and
 * at each commit it feeds, a few thousand times a second at most: contention is
 * not a concern at that rate.
 *
 * Invariants:
 *   1. A key is in at most one node, in bucket key % NBUCKETS, with count >= 1.
 *   2. n == the number of nodes.
 */
#include <pthread.h>
#include <stdlib.h>

#include "engine/held.h"
#include "queen/error.h"

enum { NBUCKETS = 4096 };

struct held_node {
    uint64_t key;
    uint32_t count;
    struct held_node *next;
};

struct qn_held {
    pthread_mutex_t mu;
    uint64_t n;
    struct held_node *b[NBUCKETS];
};

int qn_held_new(struct qn_held **out)
{
    struct qn_held *h = calloc(1, sizeof *h);
    if (h == NULL)
        return QN_ENOMEM;
    pthread_mutex_init(&h->mu, NULL);
    *out = h;
    return QN_OK;
}

void qn_held_free(struct qn_held *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < NBUCKETS; i++)
        while (h->b[i] != NULL) {
            struct held_node *x = h->b[i];
            h->b[i] = x->next;
            free(x);
        }
    pthread_mutex_destroy(&h->mu);
    free(h);
}

static struct held_node **find(struct qn_held *h, uint64_t key)
{
    struct held_node **pp = &h->b[key % NBUCKETS];
    while (*pp != NULL && (*pp)->key != key)
        pp = &(*pp)->next;
    return pp;
}

void qn_held_add(struct qn_held *h, uint64_t key)
{
    pthread_mutex_lock(&h->mu);
    struct held_node **pp = find(h, key);
    if (*pp != NULL) {
        (*pp)->count++;
    } else {
        struct held_node *x = malloc(sizeof *x);
        if (x != NULL) {
            x->key = key;
            x->count = 1;
            x->next = NULL;
            *pp = x;
            h->n++;
        }
    }
    pthread_mutex_unlock(&h->mu);
}

void qn_held_del(struct qn_held *h, uint64_t key)
{
    pthread_mutex_lock(&h->mu);
    struct held_node **pp = find(h, key);
    struct held_node *x = *pp;
    if (x != NULL && --x->count == 0) {
        *pp = x->next;
        free(x);
        h->n--;
    }
    pthread_mutex_unlock(&h->mu);
}

bool qn_held_has(struct qn_held *h, uint64_t key)
{
    pthread_mutex_lock(&h->mu);
    bool has = *find(h, key) != NULL;
    pthread_mutex_unlock(&h->mu);
    return has;
}

uint64_t qn_held_count(struct qn_held *h)
{
    pthread_mutex_lock(&h->mu);
    uint64_t n = h->n;
    pthread_mutex_unlock(&h->mu);
    return n;
}

uint64_t qn_held_key(uint64_t name_hash, uint64_t group_hash)
{
    uint64_t k = name_hash ^ (group_hash * 0x9e3779b97f4a7c15ull);
    k ^= k >> 31;
    return k ? k : 1;
}
