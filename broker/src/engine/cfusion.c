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
 *   4. A lease slot is on the held list iff its `held` is set; it holds its own
 *      copy of the group's name then. Dropping an entry or reusing a slot takes
 *      it off the list first.
 *   5. While a lease is held the timer is armed at or before its expiry (+
 *      slack), when a base is set: a lease nobody acks still hints at expiry.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "engine/cfusion.h"
#include "engine/map.h"
#include "engine/waiters.h"
#include "queen/error.h"
#include "queen/store.h"

#define NAME_MAX_LEN 255
#define QUEUE_MODE_GROUP "__QUEUE_MODE__" /* the wire's default group (rpc/validate.h) */

/* The database compares a lease's expiry with its own now(): the expiry wake-up
 * comes this much later, so the woken pop finds the lease gone. */
#define EXPIRY_SLACK_MS 20

struct cf_entry;

struct cf_lease {
    uint64_t group;   /* qn_hash_bytes of the group's name; 0 = unused slot */
    int64_t lease_ms; /* when its last batch here came back */
    bool full;        /* that batch took all it was allowed */
    /* held by a consumer of this broker (invariant 4) */
    bool held;
    uint64_t worker;    /* qn_hash_bytes of its lease id */
    int64_t expires_ms; /* monotonic */
    char *gname;        /* the group as the pop spelled it */
    struct cf_entry *e;
    struct cf_lease *hprev, *hnext;
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
    struct cf_lease *held; /* held list (invariant 4) */
    size_t nheld;
    struct event *timer; /* expiry; NULL without a base */
    int64_t timer_at;    /* when it fires; 0: not armed */
};

static void unhold(struct qn_cfusion *cf, struct cf_lease *l)
{
    if (!l->held)
        return;
    if (l->hprev)
        l->hprev->hnext = l->hnext;
    else
        cf->held = l->hnext;
    if (l->hnext)
        l->hnext->hprev = l->hprev;
    l->hprev = l->hnext = NULL;
    l->held = false;
    free(l->gname);
    l->gname = NULL;
    cf->nheld--;
}

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
    for (unsigned i = 0; i < QN_CFUSION_GROUPS; i++)
        unhold(cf, &e->leases[i]);
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
    if (cf->timer)
        event_free(cf->timer);
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
        unhold(cf, l); /* a fifth group: its hold is forgotten (a hint) */
        l->group = gh;
        l->e = e;
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
    struct cf_entry *e = by_pid(cf, tenant, pid);
    if (e == NULL)
        return false;
    uint64_t gh = group_hash(group);
    struct cf_lease *l = NULL;
    for (unsigned i = 0; i < QN_CFUSION_GROUPS && l == NULL; i++)
        if (e->leases[i].group == gh)
            l = &e->leases[i];
    if (l != NULL)
        unhold(cf, l);
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

/* ---------------------------------------------------------------- held leases */

static void arm(struct qn_cfusion *cf, int64_t at_ms)
{
    if (cf->timer == NULL || (cf->timer_at != 0 && cf->timer_at <= at_ms))
        return;
    int64_t now = qn_store_now_ms();
    int64_t d = at_ms > now ? at_ms - now : 0;
    struct timeval tv = {(time_t)(d / 1000), (suseconds_t)((d % 1000) * 1000)};
    evtimer_add(cf->timer, &tv);
    cf->timer_at = at_ms;
}

static void expiry_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct qn_cfusion *cf = ud;
    cf->timer_at = 0;
    qn_cfusion_expire(cf, qn_store_now_ms());
}

int qn_cfusion_set_base(struct qn_cfusion *cf, struct event_base *base)
{
    if (cf == NULL || base == NULL || cf->timer != NULL)
        return QN_OK;
    cf->timer = evtimer_new(base, expiry_cb, cf);
    if (cf->timer == NULL)
        return QN_ENOMEM;
    for (struct cf_lease *l = cf->held; l; l = l->hnext)
        arm(cf, l->expires_ms + EXPIRY_SLACK_MS);
    return QN_OK;
}

int64_t qn_cfusion_lease_ms(int64_t expires_at_us, int64_t now_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int64_t left = expires_at_us / 1000 - wall_ms;
    if (left < 0)
        left = 0;
    if (left > 24 * 3600 * 1000)
        left = 24 * 3600 * 1000;
    return now_ms + left;
}

static uint64_t worker_hash(const char *worker)
{
    uint64_t h = qn_hash_bytes(worker, strlen(worker));
    return h ? h : 1;
}

void qn_cfusion_hold(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                     const char *group, const char *worker, int64_t expires_ms)
{
    if (cf == NULL || worker == NULL || *worker == '\0')
        return;
    struct cf_entry *e = by_pid(cf, tenant, pid);
    if (e == NULL)
        return;
    uint64_t gh = group_hash(group);
    struct cf_lease *l = NULL;
    for (unsigned i = 0; i < QN_CFUSION_GROUPS && l == NULL; i++)
        if (e->leases[i].group == gh)
            l = &e->leases[i];
    if (l == NULL)
        return; /* not learned for this group */
    if (!l->held) {
        const char *g = group ? group : "";
        size_t gl = strnlen(g, NAME_MAX_LEN + 1);
        if (gl > NAME_MAX_LEN || (l->gname = malloc(gl + 1)) == NULL)
            return;
        memcpy(l->gname, g, gl + 1);
        l->held = true;
        l->hprev = NULL;
        l->hnext = cf->held;
        if (cf->held)
            cf->held->hprev = l;
        cf->held = l;
        cf->nheld++;
    }
    l->e = e;
    l->worker = worker_hash(worker);
    l->expires_ms = expires_ms;
    arm(cf, expires_ms + EXPIRY_SLACK_MS);
}

static const struct cf_lease *held_lease(const struct cf_entry *e, const char *group,
                                         int64_t now_ms)
{
    uint64_t gh = group_hash(group);
    for (unsigned i = 0; i < QN_CFUSION_GROUPS; i++) {
        const struct cf_lease *l = &e->leases[i];
        if (l->group == gh && l->held && l->expires_ms > now_ms)
            return l;
    }
    return NULL;
}

bool qn_cfusion_holds(const struct qn_cfusion *cf, const uint8_t tenant[16], const char *queue,
                      const char *partition, const char *group, int64_t now_ms)
{
    if (cf == NULL)
        return false;
    char kbuf[16 + 2 * (NAME_MAX_LEN + 1)];
    size_t ql = 0;
    size_t kl = name_key(tenant, queue, partition, kbuf, &ql);
    if (kl == 0)
        return false;
    struct qn_map_node *n = qn_map_get(&cf->names, kbuf, kl);
    return n != NULL &&
           held_lease(qn_container_of(n, struct cf_entry, by_name), group, now_ms) != NULL;
}

struct skip_ctx {
    const struct cf_entry *e;
    int64_t now_ms;
};

static bool skip_held(void *ud, const char *group)
{
    const struct skip_ctx *c = ud;
    return held_lease(c->e, group, c->now_ms) != NULL;
}

void qn_cfusion_commit_feed(struct qn_cfusion *cf, const uint8_t tenant[16], const char *queue,
                            const char *partition, size_t discovery, int64_t now_ms)
{
    struct cf_entry *e = NULL;
    char kbuf[16 + 2 * (NAME_MAX_LEN + 1)];
    size_t ql = 0;
    size_t kl = cf ? name_key(tenant, queue, partition, kbuf, &ql) : 0;
    if (kl > 0) {
        struct qn_map_node *n = qn_map_get(&cf->names, kbuf, kl);
        if (n != NULL) {
            e = qn_container_of(n, struct cf_entry, by_name);
            e->commit_ms = now_ms;
        }
    }
    if (cf == NULL)
        return;
    /* the entry lives through the skip calls: they run before any wake-up */
    struct skip_ctx c = {e, now_ms};
    qn_waiters_feed_except(cf->waiters, tenant, queue, partition, discovery, e ? skip_held : NULL,
                           &c);
}

struct released {
    uint8_t tenant[16], pid[16];
    char group[NAME_MAX_LEN + 1];
};

/* Releases (as an ack's release) every held lease for which match() says so:
 * copies first, since a wake-up may run pops that change the directory. */
static size_t release_matching(struct qn_cfusion *cf,
                               bool (*match)(const struct cf_lease *l, const void *arg),
                               const void *arg)
{
    size_t n = 0;
    for (struct cf_lease *l = cf->held; l; l = l->hnext)
        n += match(l, arg);
    if (n == 0)
        return 0;
    struct released *rs = calloc(n, sizeof *rs);
    size_t k = 0;
    for (struct cf_lease *l = cf->held, *next; l; l = next) {
        next = l->hnext;
        if (!match(l, arg))
            continue;
        if (rs != NULL && k < n) {
            memcpy(rs[k].tenant, l->e->pid_key, 16);
            memcpy(rs[k].pid, l->e->pid_key + 16, 16);
            memcpy(rs[k].group, l->gname, strlen(l->gname) + 1);
            k++;
        }
        unhold(cf, l);
    }
    for (size_t i = 0; i < k; i++)
        qn_cfusion_released(cf, rs[i].tenant, rs[i].pid, rs[i].group);
    free(rs);
    return n;
}

struct worker_arg {
    const uint8_t *tenant;
    uint64_t worker;
};

static bool match_worker(const struct cf_lease *l, const void *arg)
{
    const struct worker_arg *a = arg;
    return l->worker == a->worker && memcmp(l->e->pid_key, a->tenant, 16) == 0;
}

void qn_cfusion_worker_released(struct qn_cfusion *cf, const uint8_t tenant[16], const char *worker)
{
    if (cf == NULL || worker == NULL || *worker == '\0')
        return;
    struct worker_arg a = {tenant, worker_hash(worker)};
    release_matching(cf, match_worker, &a);
}

void qn_cfusion_renewed(struct qn_cfusion *cf, const uint8_t tenant[16], const char *worker,
                        int64_t expires_ms)
{
    if (cf == NULL || worker == NULL || *worker == '\0')
        return;
    uint64_t wh = worker_hash(worker);
    for (struct cf_lease *l = cf->held; l; l = l->hnext)
        if (l->worker == wh && memcmp(l->e->pid_key, tenant, 16) == 0 && l->expires_ms < expires_ms)
            l->expires_ms = expires_ms; /* the timer finds it later and re-arms */
}

static bool match_expired(const struct cf_lease *l, const void *arg)
{
    return l->expires_ms <= *(const int64_t *)arg;
}

size_t qn_cfusion_expire(struct qn_cfusion *cf, int64_t now_ms)
{
    if (cf == NULL)
        return 0;
    size_t n = release_matching(cf, match_expired, &now_ms);
    for (struct cf_lease *l = cf->held; l; l = l->hnext)
        arm(cf, l->expires_ms + EXPIRY_SLACK_MS);
    return n;
}

size_t qn_cfusion_held_count(const struct qn_cfusion *cf)
{
    return cf ? cf->nheld : 0;
}

size_t qn_cfusion_count(const struct qn_cfusion *cf)
{
    return cf ? cf->pids.count : 0;
}
