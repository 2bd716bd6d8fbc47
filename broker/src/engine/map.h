/*
 * engine/map.h - private to broker/: an intrusive hash map keyed by byte strings.
 *
 * The owner embeds a struct qn_map_node and keeps the key bytes alive for as long
 * as the node is in a map (usually in the same allocation). The map never
 * allocates nodes; it grows its bucket array by doubling up to a hard maximum
 * entry count fixed at creation (insert past it is QN_ELIMIT).
 */
#ifndef QN_BROKER_MAP_H
#define QN_BROKER_MAP_H

#include <stddef.h>
#include <stdint.h>

struct qn_map_node {
    struct qn_map_node *next; /* bucket chain */
    uint64_t hash;
    const void *key; /* borrowed from the owner */
    size_t klen;
};

struct qn_map {
    struct qn_map_node **buckets;
    size_t nbuckets; /* power of two, or 0 before the first insert */
    size_t count;
    size_t max_entries;
};

/* 64-bit FNV-1a; also used to pick shards. */
uint64_t qn_hash_bytes(const void *p, size_t n);

void qn_map_init(struct qn_map *m, size_t max_entries);
/* Frees the bucket array; nodes belong to their owners. */
void qn_map_destroy(struct qn_map *m);

struct qn_map_node *qn_map_get(const struct qn_map *m, const void *key, size_t klen);

/* Inserts node with key (borrowed). The key must not be present. Returns QN_OK
 * (inserted; a failed growth of the bucket array only lengthens chains), or
 * QN_ENOMEM (no bucket array could be made) or QN_ELIMIT (max_entries reached),
 * and then the node is not in the map. */
int qn_map_put(struct qn_map *m, struct qn_map_node *node, const void *key, size_t klen);

void qn_map_remove(struct qn_map *m, struct qn_map_node *node);

/* Calls fn for each node; fn may remove the node it is given (and only it). */
void qn_map_each(struct qn_map *m, void (*fn)(struct qn_map_node *n, void *ud), void *ud);

#define qn_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
