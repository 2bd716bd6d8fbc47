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
 *   6. A bundled pop is in exactly one place: the queued list (not sent), a
 *      bundle in flight (its slot there), alone in flight (its store
 *      request), or its result with the decoder (dec, engine/decode.h); its
 *      callback runs once, then it is freed. The flush event is
 *      active whenever the queued list is not empty and a base is set.
 *   7. At most one ack bundle is in flight (ack_inflight); a queued ack is
 *      sent when none is: at the turn's flush, or the turn after the one in
 *      flight answered. An ack's callback runs once, after its bundle's
 *      outcome; a refused bundle's members go out alone, outside the flight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/event.h>

#include "engine/cfusion.h"
#include "engine/decode.h"
#include "engine/held.h"
#include "engine/map.h"
#include "engine/waiters.h"
#include "log.h"
#include "queen/error.h"
#include "queen/store.h"
#include "timer.h"

#define NAME_MAX_LEN 255

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
    uint64_t skey;      /* its key in the shared set while held there (held.h), else 0 */
    struct cf_entry *e;
    LIST_ENTRY(cf_lease) hlink; /* the held list while held */
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
    struct qn_held *shared;     /* borrowed: every loop's held leases; NULL: none */
    struct qn_map pids;
    struct qn_map names;
    size_t max;
    LIST_HEAD(, cf_lease) held; /* held list (invariant 4) */
    size_t nheld;
    struct event *timer; /* expiry; NULL without a base */
    int64_t timer_at;    /* when it fires; 0: not armed */
    /* bundled leases (invariant 6) */
    TAILQ_HEAD(, qn_cfusion_pop) queued; /* not sent yet, in arrival order */
    uint64_t pop_turn;                   /* flushes begun: a pop queued now waits for the next */
    struct event *flush_ev;              /* NULL without a base */
    struct qn_cfusion_pop_stats pstats;
    /* bundled acks (invariant 7) */
    TAILQ_HEAD(, qn_cfusion_ack) aq; /* queued, in arrival order */
    bool ack_inflight;               /* a bundle (or a bundle of one) is out */
    struct qn_cfusion_ack_stats astats;
    bool no_lease_bundle, no_ack_bundle; /* qn_cfusion_set_bundling */
    struct qn_decoder *decoder;          /* borrowed; NULL: every batch decodes on the loop */
};

static void unhold(struct qn_cfusion *cf, struct cf_lease *l)
{
    if (!l->held)
        return;
    LIST_REMOVE(l, hlink);
    l->held = false;
    if (l->skey != 0) {
        qn_held_del(cf->shared, l->skey);
        l->skey = 0;
    }
    free(l->gname);
    l->gname = NULL;
    cf->nheld--;
}

static void pop_free_queued(struct qn_cfusion *cf);
static void ack_free_queued(struct qn_cfusion *cf);
static void flush_cb(evutil_socket_t fd, short what, void *ud);

int qn_cfusion_new(struct qn_waiters *ws, size_t max_entries, struct qn_cfusion **out)
{
    struct qn_cfusion *cf = calloc(1, sizeof *cf);
    if (cf == NULL)
        return QN_ENOMEM;
    cf->waiters = ws;
    cf->max = max_entries ? max_entries : QN_CFUSION_MAX;
    qn_map_init(&cf->pids, cf->max + 1);
    qn_map_init(&cf->names, cf->max + 1);
    LIST_INIT(&cf->held);
    TAILQ_INIT(&cf->queued);
    TAILQ_INIT(&cf->aq);
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
    if (cf->pstats.bundles || cf->astats.bundles)
        QN_INFO("consume fusion: %llu lease bundles of %llu pops (%llu pops alone, %llu retried "
                "alone); %llu ack bundles of %llu acks (%llu alone, %llu retried alone)",
                (unsigned long long)cf->pstats.bundles, (unsigned long long)cf->pstats.bundled,
                (unsigned long long)cf->pstats.alone, (unsigned long long)cf->pstats.retried,
                (unsigned long long)cf->astats.bundles, (unsigned long long)cf->astats.bundled,
                (unsigned long long)cf->astats.alone, (unsigned long long)cf->astats.retried);
    drop_all(cf);
    if (cf->timer)
        event_free(cf->timer);
    pop_free_queued(cf);
    ack_free_queued(cf);
    if (cf->flush_ev)
        event_free(cf->flush_ev);
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
        group = QN_QUEUE_MODE;
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

/* The lease slot of group on e (NULL: not remembered), taken off the held
 * list: the lease has ended. */
static struct cf_lease *lease_ended(struct qn_cfusion *cf, struct cf_entry *e, const char *group)
{
    uint64_t gh = group_hash(group);
    struct cf_lease *l = NULL;
    for (unsigned i = 0; i < QN_CFUSION_GROUPS && l == NULL; i++)
        if (e->leases[i].group == gh)
            l = &e->leases[i];
    if (l != NULL)
        unhold(cf, l);
    return l;
}

static bool hint_released(struct qn_cfusion *cf, const uint8_t tenant[16], struct cf_entry *e,
                          const char *group);

bool qn_cfusion_released(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                         const char *group)
{
    if (cf == NULL)
        return false;
    struct cf_entry *e = by_pid(cf, tenant, pid);
    if (e == NULL)
        return false;
    struct cf_lease *l = lease_ended(cf, e, group);
    if (l != NULL && !l->full &&
        (e->commit_ms == INT64_MIN || e->commit_ms < l->lease_ms - QN_CFUSION_RACE_MS))
        return false; /* drained by that lease, nothing committed here since */
    return hint_released(cf, tenant, e, group);
}

bool qn_cfusion_ack_released(struct qn_cfusion *cf, const uint8_t tenant[16], const uint8_t pid[16],
                             const char *group, bool more, int64_t sent_ms)
{
    if (cf == NULL)
        return false;
    struct cf_entry *e = by_pid(cf, tenant, pid);
    if (e == NULL)
        return false;
    lease_ended(cf, e, group);
    if (!more && (e->commit_ms == INT64_MIN || e->commit_ms < sent_ms))
        return false; /* the ack saw the partition drained, and no commit since */
    return hint_released(cf, tenant, e, group);
}

/* Wakes one parked consumer of group, hinted with e's partition. */
static bool hint_released(struct qn_cfusion *cf, const uint8_t tenant[16], struct cf_entry *e,
                          const char *group)
{
    /* copies: a wake-up may run pops that learn (and so may free this entry) */
    char queue[NAME_MAX_LEN + 1], partition[NAME_MAX_LEN + 1];
    const char *q = e->name_key + 16, *p = e->name_key + 16 + e->qlen + 1;
    memcpy(queue, q, e->qlen + 1);
    memcpy(partition, p, strlen(p) + 1);
    uint8_t t[16];
    memcpy(t, tenant, 16);
    /* the waiters take "" and QN_QUEUE_MODE for one group (waiters.h) */
    qn_waiters_feed(cf->waiters, t, queue, group == NULL ? "" : group, partition, 0);
    return true;
}

/* ---------------------------------------------------------------- held leases */

static void arm(struct qn_cfusion *cf, int64_t at_ms)
{
    if (cf->timer == NULL || (cf->timer_at != 0 && cf->timer_at <= at_ms))
        return;
    int64_t now = qn_store_now_ms();
    qn_timer_after(cf->timer, at_ms - now);
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
    cf->flush_ev = event_new(base, -1, 0, flush_cb, cf);
    if (cf->timer == NULL || cf->flush_ev == NULL)
        return QN_ENOMEM;
    if (!TAILQ_EMPTY(&cf->queued) || !TAILQ_EMPTY(&cf->aq))
        event_active(cf->flush_ev, 0, 0);
    struct cf_lease *l;
    LIST_FOREACH(l, &cf->held, hlink)
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
        if (cf->shared != NULL) {
            l->skey = qn_held_key(qn_hash_bytes(e->name_key, e->name_klen), gh);
            qn_held_add(cf->shared, l->skey);
        }
        LIST_INSERT_HEAD(&cf->held, l, hlink);
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
    const struct cf_entry *e; /* NULL: not known on this loop */
    struct qn_held *shared;   /* NULL: this loop's leases only */
    uint64_t name_hash;       /* of the partition's name key, for shared */
    int64_t now_ms;
};

/* A consumer of this broker, on this loop or another, holds group's lease. */
static bool skip_held(void *ud, const char *group)
{
    const struct skip_ctx *c = ud;
    if (c->e != NULL && held_lease(c->e, group, c->now_ms) != NULL)
        return true;
    return c->shared != NULL &&
           qn_held_has(c->shared, qn_held_key(c->name_hash, group_hash(group)));
}

void qn_cfusion_commit_feed(struct qn_cfusion *cf, const uint8_t tenant[16], const char *queue,
                            const char *partition, size_t discovery, int64_t now_ms,
                            const struct qn_told *told_in, struct qn_told *told_out)
{
    if (told_out != NULL)
        *told_out = (struct qn_told){0}; /* incomplete until a feed says */
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
    struct qn_held *shared = kl > 0 ? cf->shared : NULL;
    struct skip_ctx c = {e, shared, shared ? qn_hash_bytes(kbuf, kl) : 0, now_ms};
    qn_waiters_feed_except(cf->waiters, tenant, queue, partition, discovery,
                           e || shared ? skip_held : NULL, &c, told_in, told_out);
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
    struct cf_lease *l;
    LIST_FOREACH(l, &cf->held, hlink)
    n += match(l, arg);
    if (n == 0)
        return 0;
    struct released *rs = calloc(n, sizeof *rs);
    size_t k = 0;
    struct cf_lease *next;
    for (l = LIST_FIRST(&cf->held); l != NULL; l = next) {
        next = LIST_NEXT(l, hlink);
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
    struct cf_lease *l;
    LIST_FOREACH(l, &cf->held, hlink)
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
    struct cf_lease *l;
    LIST_FOREACH(l, &cf->held, hlink)
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

/* ---------------------------------------------------------------- bundled leases */

struct qn_cfusion_pop {
    struct qn_cfusion *cf;
    TAILQ_ENTRY(qn_cfusion_pop) qlink; /* the queued list, while `queued` */
    bool queued;
    uint64_t turn;             /* the flush it waits for (qn_cfusion's pop_turn when queued) */
    struct pop_bundle *bundle; /* in flight in a bundle */
    qn_store_req *sreq;        /* in flight alone */
    struct qn_decode *dec;     /* its result is being decompressed (engine/decode.h) */
    qn_cfusion_pop_cb cb;      /* NULL once cancelled */
    void *ud;
    bool decode;          /* QN_CFUSION_DECODE */
    struct qn_pop_args a; /* strings point into names[] */
    uint8_t pid[16];
    uint8_t tenant[16];
    bool has_tenant; /* else the default tenant */
    const struct qn_name_filter *filter;
    struct qn_store *store;
    char names[4 * (NAME_MAX_LEN + 1)]; /* queue, partition, group, worker */
};

struct pop_bundle {
    struct qn_cfusion *cf;
    size_t n;
    struct qn_cfusion_pop *m[QN_POP_BUNDLE_MAX];
};

/* Copies s into *at (bounded by end); NULL stays NULL. false when too long. */
static bool keep_name(char **at, char *end, const char *s, const char **out)
{
    if (s == NULL) {
        *out = NULL;
        return true;
    }
    size_t l = strnlen(s, NAME_MAX_LEN + 1);
    if (l > NAME_MAX_LEN || (size_t)(end - *at) < l + 1)
        return false;
    memcpy(*at, s, l);
    (*at)[l] = '\0';
    *out = *at;
    *at += l + 1;
    return true;
}

/* The copy of p's result, decompressed off the loop. */
static void pop_decoded(void *ud, const struct qn_pop_segment *segs, size_t n)
{
    struct qn_cfusion_pop *p = ud;
    qn_cfusion_pop_cb cb = p->cb;
    void *cud = p->ud;
    free(p);
    struct qn_store_status st = {QN_OK, "", ""};
    struct qn_pop_result res = {n, segs};
    cb(cud, &st, &res);
}

/* p's answer: its callback runs and p is freed, or a large batch to decode
 * goes to the decoder first (p stays in flight until pop_decoded). */
static void pop_deliver(struct qn_cfusion_pop *p, const struct qn_store_status *st,
                        const struct qn_pop_result *res)
{
    if (p->cb != NULL && p->decode && st->code == QN_OK && res != NULL && res->n > 0 &&
        qn_decode_start(p->cf->decoder, res->segs, res->n, pop_decoded, p, &p->dec) == QN_OK)
        return;
    qn_cfusion_pop_cb cb = p->cb;
    void *cud = p->ud;
    free(p);
    if (cb)
        cb(cud, st, res);
}

static void pop_alone_done(void *ud, const struct qn_store_status *st,
                           const struct qn_pop_result *res)
{
    struct qn_cfusion_pop *p = ud;
    p->sreq = NULL;
    pop_deliver(p, st, res);
}

/* Sends p by itself; on a refused submit its callback runs now with the code
 * (never from inside qn_cfusion_pop: only from the flush). */
static void pop_send_alone(struct qn_cfusion_pop *p)
{
    struct qn_call_opts o = {0, p->has_tenant ? p->tenant : NULL, p->filter};
    p->cf->pstats.alone++;
    int rc = qn_store_pop(p->store, &p->a, &o, pop_alone_done, p, &p->sreq);
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        p->sreq = NULL;
        pop_alone_done(p, &st, NULL);
    }
}

static void bundle_done(void *ud, const struct qn_store_status *st, const struct qn_pop_result *res,
                        size_t n)
{
    struct pop_bundle *b = ud;
    (void)n;
    for (size_t k = 0; k < b->n; k++) {
        struct qn_cfusion_pop *p = b->m[k];
        p->bundle = NULL;
        if (st->code == QN_EDB && p->cb != NULL) {
            /* refused as a whole (nothing leased): each alone, for its own verdict */
            b->cf->pstats.retried++;
            pop_send_alone(p);
            continue;
        }
        pop_deliver(p, st, st->code == QN_OK ? &res[k] : NULL);
    }
    free(b);
}

/* Sends one tenant's members (1..QN_POP_BUNDLE_MAX, queued order). */
static void bundle_send(struct qn_cfusion *cf, struct qn_cfusion_pop **m, size_t n)
{
    if (n == 1) {
        pop_send_alone(m[0]);
        return;
    }
    struct pop_bundle *b = calloc(1, sizeof *b);
    struct qn_pop_member mem[QN_POP_BUNDLE_MAX];
    int rc = QN_ENOMEM;
    if (b != NULL) {
        b->cf = cf;
        b->n = n;
        for (size_t k = 0; k < n; k++) {
            b->m[k] = m[k];
            m[k]->bundle = b;
            mem[k].a = &m[k]->a;
            memcpy(mem[k].pid, m[k]->pid, 16);
        }
        struct qn_call_opts o = {0, m[0]->has_tenant ? m[0]->tenant : NULL, NULL};
        rc = qn_store_pop_bundle(m[0]->store, mem, n, &o, bundle_done, b, NULL);
        if (rc == QN_OK) {
            cf->pstats.bundles++;
            cf->pstats.bundled += n;
            return;
        }
        free(b);
    }
    /* not sent: every member as a pop refused at submit */
    struct qn_store_status st = {rc, "", qn_strerror(rc)};
    for (size_t k = 0; k < n; k++) {
        qn_cfusion_pop_cb cb = m[k]->cb;
        void *cud = m[k]->ud;
        free(m[k]);
        if (cb)
            cb(cud, &st, NULL);
    }
}

void qn_cfusion_pop_flush(struct qn_cfusion *cf)
{
    if (cf == NULL)
        return;
    /* this flush's pops (turn <= t, the front of the queue): a pop that
     * bundle_send's callbacks queue waits for the next flush. They stay on
     * cf->queued until sent, so a callback that cancels one of them (a refused
     * submit answers at once) takes it off the list it is on. Grouped by
     * (store, tenant), arrival order kept within each. */
    uint64_t t = cf->pop_turn++;
    struct qn_cfusion_pop *first;
    while ((first = TAILQ_FIRST(&cf->queued)) != NULL && first->turn <= t) {
        struct qn_cfusion_pop *m[QN_POP_BUNDLE_MAX];
        size_t n = 0;
        struct qn_cfusion_pop *next;
        for (struct qn_cfusion_pop *p = first; p != NULL && p->turn <= t && n < QN_POP_BUNDLE_MAX;
             p = next) {
            next = TAILQ_NEXT(p, qlink);
            if (p->store == first->store && p->has_tenant == first->has_tenant &&
                memcmp(p->tenant, first->tenant, 16) == 0) {
                TAILQ_REMOVE(&cf->queued, p, qlink);
                p->queued = false;
                m[n++] = p;
            }
        }
        bundle_send(cf, m, n);
    }
}

static void flush_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    qn_cfusion_pop_flush(ud);
    qn_cfusion_ack_flush(ud);
}

void qn_cfusion_set_decoder(struct qn_cfusion *cf, struct qn_decoder *dec)
{
    if (cf != NULL)
        cf->decoder = dec;
}

int qn_cfusion_pop(struct qn_cfusion *cf, struct qn_store *store, const struct qn_pop_args *a,
                   const struct qn_call_opts *opts, unsigned flags, qn_cfusion_pop_cb cb, void *ud,
                   struct qn_cfusion_pop **out)
{
    if (cf == NULL || a == NULL || cb == NULL || out == NULL)
        return QN_EINVAL;
    struct qn_cfusion_pop *p = calloc(1, sizeof *p);
    if (p == NULL)
        return QN_ENOMEM;
    p->cf = cf;
    p->store = store;
    p->cb = cb;
    p->ud = ud;
    p->decode = (flags & QN_CFUSION_DECODE) != 0;
    p->filter = opts ? opts->names : NULL;
    if (opts != NULL && opts->tenant != NULL) {
        memcpy(p->tenant, opts->tenant, 16);
        p->has_tenant = true;
    }
    const uint8_t *tenant = opts != NULL ? opts->tenant : NULL;
    if (cf->no_lease_bundle || !qn_store_pop_pid(store, a, tenant, p->pid)) {
        /* not by id: at once, as it is (opts' strings live until the callback) */
        p->a = *a;
        struct qn_call_opts o = {opts ? opts->deadline_ms : 0, tenant, p->filter};
        cf->pstats.alone++;
        int rc = qn_store_pop(store, a, &o, pop_alone_done, p, &p->sreq);
        if (rc != QN_OK) {
            free(p);
            return rc;
        }
        *out = p;
        return QN_OK;
    }
    p->a = *a;
    char *at = p->names, *end = p->names + sizeof p->names;
    if (!keep_name(&at, end, a->queue, &p->a.queue) ||
        !keep_name(&at, end, a->partition, &p->a.partition) ||
        !keep_name(&at, end, a->group, &p->a.group) ||
        !keep_name(&at, end, a->worker, &p->a.worker)) {
        free(p);
        return QN_EINVAL;
    }
    p->a.namespace_ = NULL;
    p->a.task = NULL;
    TAILQ_INSERT_TAIL(&cf->queued, p, qlink);
    p->queued = true;
    p->turn = cf->pop_turn;
    if (cf->flush_ev != NULL)
        event_active(cf->flush_ev, 0, 0);
    *out = p;
    return QN_OK;
}

void qn_cfusion_pop_cancel(struct qn_cfusion_pop *p)
{
    if (p == NULL)
        return;
    if (p->dec != NULL) {
        qn_decode_cancel(p->dec);
        free(p);
        return;
    }
    if (p->sreq != NULL) {
        qn_store_cancel(p->sreq);
        free(p);
        return;
    }
    if (p->bundle != NULL) {
        p->cb = NULL; /* bundle_done frees it */
        return;
    }
    if (p->queued)
        TAILQ_REMOVE(&p->cf->queued, p, qlink);
    free(p);
}

static void pop_free_queued(struct qn_cfusion *cf)
{
    struct qn_cfusion_pop *p;
    while ((p = TAILQ_FIRST(&cf->queued)) != NULL) {
        TAILQ_REMOVE(&cf->queued, p, qlink);
        free(p);
    }
}

void qn_cfusion_pop_stats(const struct qn_cfusion *cf, struct qn_cfusion_pop_stats *out)
{
    memset(out, 0, sizeof *out);
    if (cf != NULL)
        *out = cf->pstats;
}

/* ---------------------------------------------------------------- bundled acks */

struct qn_cfusion_ack {
    struct qn_cfusion *cf;
    TAILQ_ENTRY(qn_cfusion_ack) qlink; /* the queued list, while `queued` */
    bool queued;
    bool in_bundle;       /* in flight in a bundle */
    qn_store_req *sreq;   /* in flight alone */
    bool flight;          /* alone, holding the single flight */
    qn_cfusion_ack_cb cb; /* NULL once cancelled */
    void *ud;
    struct qn_store *store;
    struct qn_ack_args a; /* items, group and worker point into this struct */
    char group[NAME_MAX_LEN + 1];
    char worker[NAME_MAX_LEN + 1];
    struct qn_ack_item *items;
    uint8_t (*hashes)[16];
};

struct ack_bundle {
    struct qn_cfusion *cf;
    size_t n;
    bool flight; /* holds the single flight */
    struct qn_cfusion_ack *m[QN_ACK_BUNDLE_MAX];
};

static void ack_free(struct qn_cfusion_ack *k)
{
    free(k->items);
    free(k->hashes);
    free(k);
}

static void ack_deliver(struct qn_cfusion_ack *k, const struct qn_store_status *st,
                        const struct qn_ack_result *res)
{
    qn_cfusion_ack_cb cb = k->cb;
    void *ud = k->ud;
    ack_free(k);
    if (cb)
        cb(ud, st, res);
}

/* The flight ended: what queued meanwhile goes at the end of this turn. */
static void ack_flight_over(struct qn_cfusion *cf)
{
    cf->ack_inflight = false;
    if (!TAILQ_EMPTY(&cf->aq) && cf->flush_ev != NULL)
        event_active(cf->flush_ev, 0, 0);
}

static void ack_alone_done(void *ud, const struct qn_store_status *st,
                           const struct qn_ack_result *res)
{
    struct qn_cfusion_ack *k = ud;
    struct qn_cfusion *cf = k->cf;
    bool flight = k->flight;
    k->sreq = NULL;
    ack_deliver(k, st, res);
    if (flight)
        ack_flight_over(cf);
}

/* Sends k by itself (flight: it holds the single flight). A refused submit
 * answers it now (only ever from a flush or a bundle's answer). */
static void ack_send_alone(struct qn_cfusion_ack *k, bool flight)
{
    struct qn_cfusion *cf = k->cf;
    struct qn_call_opts o = {0, NULL, NULL};
    cf->astats.alone++;
    k->flight = flight;
    int rc = qn_store_ack(k->store, &k->a, &o, ack_alone_done, k, &k->sreq);
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        k->sreq = NULL;
        ack_deliver(k, &st, NULL);
        if (flight)
            ack_flight_over(cf);
    }
}

static void ack_bundle_done(void *ud, const struct qn_store_status *st,
                            const struct qn_ack_result *res, size_t n)
{
    struct ack_bundle *b = ud;
    struct qn_cfusion *cf = b->cf;
    (void)n;
    for (size_t i = 0; i < b->n; i++) {
        struct qn_cfusion_ack *k = b->m[i];
        k->in_bundle = false;
        if (st->code == QN_EDB && k->cb != NULL) {
            /* refused as a whole (nothing applied): each alone for its verdict */
            cf->astats.retried++;
            ack_send_alone(k, false);
            continue;
        }
        ack_deliver(k, st, st->code == QN_OK ? &res[i] : NULL);
    }
    bool flight = b->flight;
    free(b);
    if (flight)
        ack_flight_over(cf);
}

void qn_cfusion_ack_flush(struct qn_cfusion *cf)
{
    if (cf == NULL || cf->ack_inflight || TAILQ_EMPTY(&cf->aq))
        return;
    struct qn_cfusion_ack *m[QN_ACK_BUNDLE_MAX];
    size_t n = 0;
    struct qn_store *store = TAILQ_FIRST(&cf->aq)->store;
    for (struct qn_cfusion_ack *k = TAILQ_FIRST(&cf->aq), *next; k != NULL && n < QN_ACK_BUNDLE_MAX;
         k = next) {
        next = TAILQ_NEXT(k, qlink);
        if (k->store == store) {
            TAILQ_REMOVE(&cf->aq, k, qlink);
            k->queued = false;
            m[n++] = k;
        }
    }
    cf->ack_inflight = true;
    if (n == 1) {
        ack_send_alone(m[0], true);
        return;
    }
    struct ack_bundle *b = calloc(1, sizeof *b);
    struct qn_ack_args args[QN_ACK_BUNDLE_MAX];
    int rc = QN_ENOMEM;
    if (b != NULL) {
        b->cf = cf;
        b->n = n;
        b->flight = true;
        for (size_t i = 0; i < n; i++) {
            b->m[i] = m[i];
            m[i]->in_bundle = true;
            args[i] = m[i]->a;
        }
        struct qn_call_opts o = {0, NULL, NULL};
        rc = qn_store_ack_bundle(store, args, n, &o, ack_bundle_done, b, NULL);
        if (rc == QN_OK) {
            cf->astats.bundles++;
            cf->astats.bundled += n;
            return;
        }
        free(b);
    }
    struct qn_store_status st = {rc, "", qn_strerror(rc)};
    for (size_t i = 0; i < n; i++) {
        m[i]->in_bundle = false;
        ack_deliver(m[i], &st, NULL);
    }
    ack_flight_over(cf);
}

int qn_cfusion_ack(struct qn_cfusion *cf, struct qn_store *store, const struct qn_ack_args *a,
                   const struct qn_call_opts *opts, qn_cfusion_ack_cb cb, void *ud,
                   struct qn_cfusion_ack **out)
{
    if (cf == NULL || a == NULL || cb == NULL || out == NULL || a->n == 0 || a->items == NULL)
        return QN_EINVAL;
    const char *group = a->group ? a->group : "", *worker = a->worker ? a->worker : "";
    if (strnlen(group, NAME_MAX_LEN + 1) > NAME_MAX_LEN ||
        strnlen(worker, NAME_MAX_LEN + 1) > NAME_MAX_LEN)
        return QN_EINVAL;
    struct qn_cfusion_ack *k = calloc(1, sizeof *k);
    if (k == NULL)
        return QN_ENOMEM;
    k->items = calloc(a->n, sizeof *k->items);
    k->hashes = calloc(a->n, 16);
    if (k->items == NULL || k->hashes == NULL) {
        ack_free(k);
        return QN_ENOMEM;
    }
    k->cf = cf;
    k->store = store;
    k->cb = cb;
    k->ud = ud;
    k->a = *a;
    snprintf(k->group, sizeof k->group, "%s", group);
    snprintf(k->worker, sizeof k->worker, "%s", worker);
    k->a.group = k->group;
    k->a.worker = k->worker;
    for (size_t i = 0; i < a->n; i++) {
        k->items[i] = a->items[i];
        if (a->items[i].hash != NULL) {
            memcpy(k->hashes[i], a->items[i].hash, 16);
            k->items[i].hash = k->hashes[i];
        }
    }
    k->a.items = k->items;
    if (cf->no_ack_bundle) {
        /* at once, by itself (no flight) */
        struct qn_call_opts o = {opts ? opts->deadline_ms : 0, opts ? opts->tenant : NULL, NULL};
        cf->astats.alone++;
        int rc = qn_store_ack(store, &k->a, &o, ack_alone_done, k, &k->sreq);
        if (rc != QN_OK) {
            ack_free(k);
            return rc;
        }
        *out = k;
        return QN_OK;
    }
    TAILQ_INSERT_TAIL(&cf->aq, k, qlink);
    k->queued = true;
    if (cf->flush_ev != NULL && !cf->ack_inflight)
        event_active(cf->flush_ev, 0, 0);
    *out = k;
    return QN_OK;
}

void qn_cfusion_ack_cancel(struct qn_cfusion_ack *k)
{
    if (k == NULL)
        return;
    if (k->sreq != NULL) {
        struct qn_cfusion *cf = k->cf;
        bool flight = k->flight;
        qn_store_cancel(k->sreq);
        ack_free(k);
        if (flight)
            ack_flight_over(cf);
        return;
    }
    if (k->in_bundle) {
        k->cb = NULL; /* ack_bundle_done frees it */
        return;
    }
    if (k->queued)
        TAILQ_REMOVE(&k->cf->aq, k, qlink);
    ack_free(k);
}

static void ack_free_queued(struct qn_cfusion *cf)
{
    struct qn_cfusion_ack *k;
    while ((k = TAILQ_FIRST(&cf->aq)) != NULL) {
        TAILQ_REMOVE(&cf->aq, k, qlink);
        ack_free(k);
    }
}

void qn_cfusion_ack_stats(const struct qn_cfusion *cf, struct qn_cfusion_ack_stats *out)
{
    memset(out, 0, sizeof *out);
    if (cf != NULL)
        *out = cf->astats;
}

void qn_cfusion_share(struct qn_cfusion *cf, struct qn_held *shared)
{
    if (cf != NULL && cf->nheld == 0)
        cf->shared = shared;
}

void qn_cfusion_set_bundling(struct qn_cfusion *cf, bool leases, bool acks)
{
    if (cf == NULL)
        return;
    cf->no_lease_bundle = !leases;
    cf->no_ack_bundle = !acks;
}
