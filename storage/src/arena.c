/*
 * arena.c - the per-call bump allocator (see store_int.h).
 *
 * Does: hand out 16-byte aligned blocks from a list of chunks, grow by doubling
 * chunk sizes, enforce a hard cap on the total, rewind to a mark, free all at once.
 * Does not: free single blocks, or zero memory unless asked (qn__arena_zalloc).
 *
 * Invariants:
 *   1. total == sum of the capacities of the chunks in the list, and total <= max.
 *   2. head->used <= head->cap; older chunks are never allocated from again.
 *   3. A mark names a chunk still in the list (rewind only moves backwards).
 */
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

struct qn__arena_chunk {
    struct qn__arena_chunk *next; /* older chunk */
    size_t cap;                   /* bytes in data */
    size_t used;                  /* bytes handed out (aligned) */
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN 2048u

void qn__arena_init(struct qn__arena *a, size_t max)
{
    a->head = NULL;
    a->total = 0;
    a->max = max;
}

static size_t align16(size_t n)
{
    return (n + 15u) & ~(size_t)15u;
}

void *qn__arena_alloc(struct qn__arena *a, size_t n)
{
    if (n > a->max)
        return NULL;
    size_t need = align16(n ? n : 1);
    struct qn__arena_chunk *h = a->head;
    if (h != NULL && h->cap - h->used >= need) {
        void *p = h->data + h->used;
        h->used += need;
        return p;
    }
    size_t cap = h ? h->cap * 2 : CHUNK_MIN;
    if (cap < need)
        cap = need;
    if (cap > a->max - a->total) {
        /* fall back to exactly what is needed before giving up */
        if (need > a->max - a->total)
            return NULL;
        cap = need;
    }
    struct qn__arena_chunk *c = malloc(sizeof *c + cap);
    if (c == NULL)
        return NULL;
    c->next = h;
    c->cap = cap;
    c->used = need;
    a->head = c;
    a->total += cap;
    return c->data;
}

void *qn__arena_zalloc(struct qn__arena *a, size_t n)
{
    void *p = qn__arena_alloc(a, n);
    if (p != NULL && n > 0)
        memset(p, 0, n);
    return p;
}

void *qn__arena_memdup(struct qn__arena *a, const void *p, size_t n)
{
    void *q = qn__arena_alloc(a, n);
    if (q != NULL && n > 0)
        memcpy(q, p, n);
    return q;
}

char *qn__arena_strndup(struct qn__arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    char *q = qn__arena_alloc(a, n + 1);
    if (q == NULL)
        return NULL;
    if (n > 0)
        memcpy(q, s, n);
    q[n] = '\0';
    return q;
}

char *qn__arena_strdup(struct qn__arena *a, const char *s)
{
    return qn__arena_strndup(a, s, strlen(s));
}

struct qn__arena_mark qn__arena_mark(const struct qn__arena *a)
{
    struct qn__arena_mark m = {a->head, a->head ? a->head->used : 0};
    return m;
}

void qn__arena_rewind(struct qn__arena *a, struct qn__arena_mark m)
{
    while (a->head != NULL && a->head != m.chunk) {
        struct qn__arena_chunk *c = a->head;
        a->head = c->next;
        a->total -= c->cap;
        free(c);
    }
    if (a->head != NULL)
        a->head->used = m.used;
}

void qn__arena_free(struct qn__arena *a)
{
    if (a == NULL)
        return;
    struct qn__arena_mark none = {NULL, 0};
    qn__arena_rewind(a, none);
}
