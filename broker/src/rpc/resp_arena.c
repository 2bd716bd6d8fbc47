/*
 * rpc/resp_arena.c - see resp_arena.h. Invariant: used <= size in every chunk; total is the sum
 * of chunk sizes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/resp_arena.h"

struct qn_arena_chunk {
    struct qn_arena_chunk *next;
    size_t size;
    size_t used;
    _Alignas(16) unsigned char data[];
};

void qn_arena_init(struct qn_arena *a)
{
    a->head = NULL;
    a->total = 0;
}

void *qn_arena_alloc(struct qn_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct qn_arena_chunk *c = a->head;
    if (c == NULL || c->size - c->used < n) {
        size_t size = c ? c->size * 2 : 8192;
        if (size < n)
            size = n;
        if (size > 64u * 1024u * 1024u && n <= 64u * 1024u * 1024u)
            size = 64u * 1024u * 1024u;
        if (a->total + size > QN_ARENA_MAX)
            return NULL;
        c = malloc(sizeof *c + size);
        if (c == NULL)
            return NULL;
        c->next = a->head;
        c->size = size;
        c->used = 0;
        a->head = c;
        a->total += size;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *qn_arena_strndup(struct qn_arena *a, const void *p, size_t n)
{
    char *s = qn_arena_alloc(a, n + 1);
    if (s != NULL && n > 0)
        memcpy(s, p, n);
    return s;
}

void qn_arena_free(struct qn_arena *a)
{
    struct qn_arena_chunk *c = a->head;
    while (c) {
        struct qn_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}
