/*
 * engine/cfusion.c - consume fusion's partition directory (see cfusion.h).
 *
 * Does: map (tenant, partition id) -> (queue, partition name), learned from
 * pop results, with a second index by (tenant, queue, partition) for commits;
 * remember per partition this broker's last commit, and per group its last
 * lease (when, full or not); on a released lease that likely left something,
 * hand the partition to one parked consumer of the group (qn_waiters_feed).
 * Does not: touch the database, decide anything a lease decides (the woken pop
 * leases through SQL like any other and may find nothing), keep entries past
 * its bound.
 *
 * Invariants:
 *   1. count <= max; learning a new partition into a full directory empties it
 *      first.
 *   2. An entry is in both maps or in neither; its keys live in the entry.
 *   3. Every decision here is a hint: a wrong one costs one pop that finds
 *      nothing, or a wake-up left to the next commit or re-check timer.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cfusion.h"
#include "engine/map.h"
#include "engine/waiters.h"
#include "queen/error.h"

#define NAME_MAX_LEN 255
#define QUEUE_MODE_GROUP "__QUEUE_MODE__" /* the wire's default group (rpc/validate.h) */

struct cf_lease {
    uint64_t group;   /* qn_hash_bytes of the group's name; 0 = unused slot */
    int64_t lease_ms; /* when its last batch here came back */
    bool full;        /* that batch took all it was allowed */
};

struct cf_entry {
    struct qn_map_node by_pid;
    struct qn_map_node by_name;
    uint8_t pid_key[32]; /* tenant, then the partition id */
    int64_t commit_ms;   /* this broker's last commit here; INT64_MIN: none seen */
    struct cf_lease leases[QN_CFUSION_GROUPS];
    unsigned next_slot; /* round robin over leases[] */
    size_t qlen;        /* name_key: tenant, queue, NUL, partition, NUL */
    size_t name_klen;   /* the key's length: without the last NUL */
    char name_key[];
};

struct qn_cfusion {
    struct qn_waiters *waiters; /* borrowed */
    struct qn_map pids;
    struct qn_map names;
    size_t max;
};

int qn_cfusion_new(struct qn_waiters *ws, size_t max_entries, struct qn_cfusion **out)
{
    struct qn_cfusion *cf = calloc(1, sizeof *cf);
    if (cf == NULL)
        return QN_ENOMEM;
    cf->waiters = ws;
    cf->max = max_entries ? max_entries : QN_CFUSION_MAX;
    qn_map_init(&cf->pids, cf->max + 1);
    qn_map_init(&cf->names, cf->max + 1);
    *out = cf;
    return QN_OK;
}

static void entry_drop(struct qn_cfusion *cf, struct cf_entry *e)
{
    qn_map_remove(&cf->pids, &e->by_pid);
    qn_map_remove(&cf->names, &e->by_name);
    free(e);
}

static void drop_cb(struct qn_map_node *n, void *ud)
{
    entry_drop(ud, qn_container_of(n, struct cf_entry, by_pid));
}

static void drop_all(struct qn_cfusion *cf)
{
    qn_map_each(&cf->pids, drop_cb, cf);
}

void qn_cfusion_free(struct qn_cfusion *cf)
{
    if (cf == NULL)
        return;
    drop_all(cf);
    qn_map_destroy(&cf->pids);
    qn_map_destroy(&cf->names);
    free(cf);
}

/* (tenant, queue, partition) as a name key in buf (>= 16 + 2 * 256 bytes); its
 * length, or 0 when a name is missing or too long. */
static size_t name_key(const uint8_t tenant[16], const char *queue, const char *partition,
                       char *buf, size_t *qlen)
{
    if (queue == NULL || partition == NULL)
        return 0;
    size_t ql = strnlen(queue, NAME_MAX_LEN + 1), pl = strnlen(partition, NAME_MAX_LEN + 1);
    if (ql == 0 || ql > NAME_MAX_LEN || pl > NAME_MAX_LEN)
        return 0;
    memcpy(buf, tenant, 16);
    memcpy(buf + 16, queue, ql);
    buf[16 + ql] = '\0';
    memcpy(buf + 16 + ql + 1, partition, pl);
    buf[16 + ql + 1 + pl] = '\0';
    *qlen = ql;
    return 16 + ql + 1 + pl;
}

static uint64_t group_hash(const char *group)
{
    if (group == NULL || *group == '\0')
        group = QUEUE_MODE_GROUP;
    uint64_t h = qn_hash_bytes(group, strlen(group));
    return h ? h : 1;
}

static struct cf_entry *by_pid(const struct qn_cfusion *cf, const uint8_t tenant[16],
                               const uint8_t pid[16])
{
    uint8_t key[32];
    memcpy(key, tenant, 16);
    memcpy(key + 16, pid, 16);
    struct qn_map_node *n = qn_map_get(&cf->pids, key, sizeof key);
    return n ? qn_container_of(n, struct cf_entry, by_pid) : NULL;
}

void qn_cfusion_learn(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                      const char *queue, const char *partition, const char *group, bool full,
                      int64_t now_ms)
{
    if (cf == NULL)
        return;
    char kbuf[16 + 2 * (NAME_MAX_LEN + 1)];
    size_t ql = 0;
    size_t kl = name_key(tenant, queue, partition, kbuf, &ql);
    if (kl == 0)
        return;
    struct cf_entry *e = by_pid(cf, tenant, pid);
    if (e != NULL && (e->name_klen != kl || memcmp(e->name_key, kbuf, kl) != 0)) {
        entry_drop(cf, e); /* names changed (invariant 2 keeps both maps right) */
        e = NULL;
    }
    if (e == NULL) {
        if (cf->pids.count >= cf->max)
            drop_all(cf);
        e = calloc(1, sizeof *e + kl + 1);
        if (e == NULL)
            return;
        memcpy(e->pid_key, tenant, 16);
        memcpy(e->pid_key + 16, pid, 16);
        memcpy(e->name_key, kbuf, kl + 1); /* with the partition's NUL */
        e->name_klen = kl;
        e->qlen = ql;
        e->commit_ms = INT64_MIN;
        if (qn_map_put(&cf->pids, &e->by_pid, e->pid_key, sizeof e->pid_key) != QN_OK) {
            free(e);
            return;
        }
        /* a name key may be held by a stale entry (a queue made again) */
        struct qn_map_node *old = qn_map_get(&cf->names, e->name_key, kl);
        if (old != NULL)
            entry_drop(cf, qn_container_of(old, struct cf_entry, by_name));
        if (qn_map_put(&cf->names, &e->by_name, e->name_key, kl) != QN_OK) {
            qn_map_remove(&cf->pids, &e->by_pid);
            free(e);
            return;
        }
    }
    uint64_t gh = group_hash(group);
    struct cf_lease *l = NULL;
    for (unsigned i = 0; i < QN_CFUSION_GROUPS && l == NULL; i++)
        if (e->leases[i].group == gh)
            l = &e->leases[i];
    if (l == NULL) {
        l = &e->leases[e->next_slot];
        e->next_slot = (e->next_slot + 1) % QN_CFUSION_GROUPS;
        l->group = gh;
    }
    l->lease_ms = now_ms;
    l->full = full;
}

void qn_cfusion_committed(struct qn_cfusion *cf, const uint8_t tenant[16], const char *queue,
                          const char *partition, int64_t now_ms)
{
    if (cf == NULL)
        return;
    char kbuf[16 + 2 * (NAME_MAX_LEN + 1)];
    size_t ql = 0;
    size_t kl = name_key(tenant, queue, partition, kbuf, &ql);
    if (kl == 0)
        return;
    struct qn_map_node *n = qn_map_get(&cf->names, kbuf, kl);
    if (n != NULL)
        qn_container_of(n, struct cf_entry, by_name)->commit_ms = now_ms;
}

bool qn_cfusion_released(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                         const char *group)
{
    if (cf == NULL)
        return false;
    const struct cf_entry *e = by_pid(cf, tenant, pid);
    if (e == NULL)
        return false;
    uint64_t gh = group_hash(group);
    const struct cf_lease *l = NULL;
    for (unsigned i = 0; i < QN_CFUSION_GROUPS && l == NULL; i++)
        if (e->leases[i].group == gh)
            l = &e->leases[i];
    if (l != NULL && !l->full &&
        (e->commit_ms == INT64_MIN || e->commit_ms < l->lease_ms - QN_CFUSION_RACE_MS))
        return false; /* drained by that lease, nothing committed here since */
    /* copies: a wake-up may run pops that learn (and so may free this entry) */
    char queue[NAME_MAX_LEN + 1], partition[NAME_MAX_LEN + 1];
    const char *q = e->name_key + 16, *p = e->name_key + 16 + e->qlen + 1;
    memcpy(queue, q, e->qlen + 1);
    memcpy(partition, p, strlen(p) + 1);
    uint8_t t[16];
    memcpy(t, tenant, 16);
    if (group == NULL || *group == '\0' || strcmp(group, QUEUE_MODE_GROUP) == 0) {
        /* pops park under the group as their request spelled it */
        qn_waiters_feed(cf->waiters, t, queue, "", partition, 0);
        qn_waiters_feed(cf->waiters, t, queue, QUEUE_MODE_GROUP, partition, 0);
    } else {
        qn_waiters_feed(cf->waiters, t, queue, group, partition, 0);
    }
    return true;
}

size_t qn_cfusion_count(const struct qn_cfusion *cf)
{
    return cf ? cf->pids.count : 0;
}
