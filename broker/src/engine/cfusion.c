/*
 * engine/cfusion.c - consume fusion's partition directory (see cfusion.h).
 *
 * Does: map (tenant, partition id) -> (queue, partition name), learned from
 * pop results; on a released lease, hand the partition to one parked consumer
 * of the group through qn_waiters_feed.
 * Does not: touch the database, decide anything a lease decides (the woken pop
 * leases through SQL like any other and may find nothing), keep entries past
 * QN_CFUSION_MAX.
 *
 * Invariants:
 *   1. count <= max; learning a new partition into a full directory empties it
 *      first.
 *   2. An entry's names are the last ones learned for its key (a partition id
 *      is never reused for another partition, so they do not change in
 *      practice; a queue deleted and created again gets new ids).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cfusion.h"
#include "engine/map.h"
#include "engine/waiters.h"
#include "queen/error.h"

#define NAME_MAX_LEN 255
#define QUEUE_MODE_GROUP "__QUEUE_MODE__" /* the wire's default group (rpc/validate.h) */

struct cf_entry {
    struct qn_map_node node;
    uint8_t key[32]; /* tenant, then the partition id */
    char *partition; /* points into names */
    char names[];    /* queue NUL partition NUL */
};

struct qn_cfusion {
    struct qn_waiters *waiters; /* borrowed */
    struct qn_map map;
    size_t max;
};

int qn_cfusion_new(struct qn_waiters *ws, size_t max_entries, struct qn_cfusion **out)
{
    struct qn_cfusion *cf = calloc(1, sizeof *cf);
    if (cf == NULL)
        return QN_ENOMEM;
    cf->waiters = ws;
    cf->max = max_entries ? max_entries : QN_CFUSION_MAX;
    qn_map_init(&cf->map, cf->max + 1);
    *out = cf;
    return QN_OK;
}

static void entry_free(struct qn_map_node *n, void *ud)
{
    qn_map_remove(ud, n);
    free(qn_container_of(n, struct cf_entry, node));
}

void qn_cfusion_free(struct qn_cfusion *cf)
{
    if (cf == NULL)
        return;
    qn_map_each(&cf->map, entry_free, &cf->map);
    qn_map_destroy(&cf->map);
    free(cf);
}

static void make_key(const uint8_t tenant[16], const uint8_t pid[16], uint8_t key[32])
{
    memcpy(key, tenant, 16);
    memcpy(key + 16, pid, 16);
}

void qn_cfusion_learn(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                      const char *queue, const char *partition)
{
    if (cf == NULL || queue == NULL || partition == NULL)
        return;
    size_t ql = strnlen(queue, NAME_MAX_LEN + 1), pl = strnlen(partition, NAME_MAX_LEN + 1);
    if (ql == 0 || ql > NAME_MAX_LEN || pl > NAME_MAX_LEN)
        return;
    uint8_t key[32];
    make_key(tenant, pid, key);
    struct qn_map_node *n = qn_map_get(&cf->map, key, sizeof key);
    if (n != NULL) {
        struct cf_entry *e = qn_container_of(n, struct cf_entry, node);
        if (strcmp(e->names, queue) == 0 && strcmp(e->partition, partition) == 0)
            return; /* the common case: known already */
        entry_free(n, &cf->map);
    }
    if (cf->map.count >= cf->max)
        qn_map_each(&cf->map, entry_free, &cf->map);
    struct cf_entry *e = calloc(1, sizeof *e + ql + 1 + pl + 1);
    if (e == NULL)
        return;
    memcpy(e->key, key, sizeof key);
    memcpy(e->names, queue, ql);
    e->partition = e->names + ql + 1;
    memcpy(e->partition, partition, pl);
    if (qn_map_put(&cf->map, &e->node, e->key, sizeof e->key) != QN_OK)
        free(e);
}

bool qn_cfusion_released(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                         const char *group)
{
    if (cf == NULL)
        return false;
    uint8_t key[32];
    make_key(tenant, pid, key);
    struct qn_map_node *n = qn_map_get(&cf->map, key, sizeof key);
    if (n == NULL)
        return false;
    const struct cf_entry *e = qn_container_of(n, struct cf_entry, node);
    /* copies: a wake-up may run pops that learn (and so may free this entry) */
    char queue[NAME_MAX_LEN + 1], partition[NAME_MAX_LEN + 1];
    memcpy(queue, e->names, strlen(e->names) + 1);
    memcpy(partition, e->partition, strlen(e->partition) + 1);
    if (group == NULL || *group == '\0' || strcmp(group, QUEUE_MODE_GROUP) == 0) {
        /* pops park under the group as their request spelled it */
        qn_waiters_feed(cf->waiters, tenant, queue, "", partition, 0);
        qn_waiters_feed(cf->waiters, tenant, queue, QUEUE_MODE_GROUP, partition, 0);
    } else {
        qn_waiters_feed(cf->waiters, tenant, queue, group, partition, 0);
    }
    return true;
}

size_t qn_cfusion_count(const struct qn_cfusion *cf)
{
    return cf ? cf->map.count : 0;
}
