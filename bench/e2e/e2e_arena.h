/*
 * e2e_arena.h - private to bench/e2e: a bump allocator for protobuf-c unpacking.
 *
 * A response is unpacked into the arena, read, and forgotten by resetting the
 * arena: no per-field free. protobuf-c's free hook is a no-op.
 */
#ifndef QN_BENCH_E2E_ARENA_H
#define QN_BENCH_E2E_ARENA_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

struct e2e_arena_chunk;

struct e2e_arena {
    struct e2e_arena_chunk *head; /* newest chunk first; NULL when nothing allocated */
    size_t used;                  /* bytes handed out since the last reset */
    size_t max;                   /* hard limit on used; an allocation past it fails */
    ProtobufCAllocator pb;        /* allocator_data == this arena */
};

/* Prepares an empty arena that will never hand out more than max bytes. */
void e2e_arena_init(struct e2e_arena *a, size_t max);

/* Forgets everything allocated; keeps the first chunk for reuse. */
void e2e_arena_reset(struct e2e_arena *a);

/* Frees all memory. Safe on a zeroed or already released arena. */
void e2e_arena_release(struct e2e_arena *a);

/* 16-byte aligned memory valid until the next reset; NULL past max or on ENOMEM. */
void *e2e_arena_alloc(struct e2e_arena *a, size_t n);

#endif
