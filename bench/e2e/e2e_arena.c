/*
 * e2e_arena.c - bump allocator (see e2e_arena.h).
 *
 * Invariants:
 *   1. used <= max at all times.
 *   2. after a reset, at most one chunk (the newest, which is the largest) is kept.
 */
#include "e2e_arena.h"

#include <stdint.h>
#include <stdlib.h>

#define CHUNK_MIN (64u * 1024u)

struct e2e_arena_chunk {
    struct e2e_arena_chunk *next;
    size_t cap; /* usable bytes after the header */
    size_t off; /* bytes handed out from this chunk */
    _Alignas(16) unsigned char data[];
};

static void *pb_alloc(void *ud, size_t n)
{
    return e2e_arena_alloc(ud, n);
}

static void pb_free(void *ud, void *p)
{
    (void)ud;
    (void)p;
}

void e2e_arena_init(struct e2e_arena *a, size_t max)
{
    a->head = NULL;
    a->used = 0;
    a->max = max;
    a->pb.alloc = pb_alloc;
    a->pb.free = pb_free;
    a->pb.allocator_data = a;
}

void *e2e_arena_alloc(struct e2e_arena *a, size_t n)
{
    size_t need = (n + 15u) & ~(size_t)15u;
    if (need < n || need > a->max - a->used)
        return NULL;
    struct e2e_arena_chunk *c = a->head;
    if (c == NULL || c->cap - c->off < need) {
        size_t cap = CHUNK_MIN;
        if (c != NULL && c->cap * 2 > cap)
            cap = c->cap * 2;
        if (cap < need)
            cap = need;
        struct e2e_arena_chunk *nc = malloc(sizeof *nc + cap);
        if (nc == NULL)
            return NULL;
        nc->next = c;
        nc->cap = cap;
        nc->off = 0;
        a->head = nc;
        c = nc;
    }
    void *p = c->data + c->off;
    c->off += need;
    a->used += need;
    return p;
}

void e2e_arena_reset(struct e2e_arena *a)
{
    struct e2e_arena_chunk *c = a->head;
    if (c == NULL)
        return;
    /* Keep the biggest (newest) chunk: the next response is likely as large. */
    struct e2e_arena_chunk *rest = c->next;
    c->next = NULL;
    c->off = 0;
    while (rest != NULL) {
        struct e2e_arena_chunk *n = rest->next;
        free(rest);
        rest = n;
    }
    a->used = 0;
}

void e2e_arena_release(struct e2e_arena *a)
{
    struct e2e_arena_chunk *c = a->head;
    while (c != NULL) {
        struct e2e_arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used = 0;
}
