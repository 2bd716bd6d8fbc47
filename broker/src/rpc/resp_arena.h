/*
 * rpc/resp_arena.h - private to broker/: a bump allocator for one response's short-lived
 * allocations (strings and message structs built for serialization), freed at
 * once. Chunks grow geometrically; a single arena is capped (QN_ARENA_MAX) so a
 * runaway response cannot take the process's memory.
 */
#ifndef QN_BROKER_ARENA_H
#define QN_BROKER_ARENA_H

#include <stddef.h>

#define QN_ARENA_MAX (512u * 1024u * 1024u)

struct qn_arena_chunk;

struct qn_arena {
    struct qn_arena_chunk *head;
    size_t total;
};

void qn_arena_init(struct qn_arena *a);
/* Zeroed memory, 16-byte aligned; NULL when out of memory or past QN_ARENA_MAX. */
void *qn_arena_alloc(struct qn_arena *a, size_t n);
/* A NUL-terminated copy of p[0..n). */
char *qn_arena_strndup(struct qn_arena *a, const void *p, size_t n);
void qn_arena_free(struct qn_arena *a);

#endif
