/*
 * engine/notifier.c - wake-ups from commits, local and remote (see notifier.h).
 *
 * Does: wake one waiter per group of a queue when this broker commits to one of
 * its partitions, hinted with that partition (qn_waiters_feed); collect the queues committed to and
 * send one NOTIFY naming them at most every QN_NOTIFY_INTERVAL_MS (one per tenant); wake waiters of
 * the queue another broker's NOTIFY names (payload "tenant/queue", so a tenant's waiters are woken
 * only by its own queues). Does not: send NOTIFY inside the push transaction (it follows the
 * commit), retry a NOTIFY that failed (re-check timers cover it).
 *
 * Invariants:
 *   1. armed is true iff the timer is pending; it is armed by the first commit
 *      after a NOTIFY went out, so NOTIFY follows a commit by at most
 *      QN_NOTIFY_INTERVAL_MS and is sent at most once per interval.
 *   2. At most QN_NOTIFY_MAX_QUEUES names are held, each a distinct copy; a
 *      queue past the cap is not named (its remote waiters re-check).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "engine/cfusion.h"
#include "engine/notifier.h"
#include "engine/waiters.h"
#include "log.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "timer.h"

struct qn_notifier {
    qn_store *store;                            /* borrowed */
    struct qn_waiters *waiters;                 /* borrowed */
    struct qn_cfusion *cfusion;                 /* borrowed; NULL allowed */
    qn_notifier_peer_fn peers;                  /* the process's other loops; NULL: none */
    uint64_t commits[QN_NOTIFY_COMMIT_BUCKETS]; /* per queue bucket (qn_notifier_commits) */
    void *peers_ud;
    struct event *timer;
    bool armed;
    char *queues[QN_NOTIFY_MAX_QUEUES];        /* owned copies */
    uint8_t tenants[QN_NOTIFY_MAX_QUEUES][16]; /* queues[i]'s tenant */
    size_t n;
};

static const uint8_t default_tenant[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

static size_t bucket(const uint8_t tenant[16], const char *queue)
{
    uint32_t h = 2166136261u; /* FNV-1a over tenant and queue */
    for (size_t i = 0; i < 16; i++)
        h = (h ^ tenant[i]) * 16777619u;
    for (const char *s = queue; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h % QN_NOTIFY_COMMIT_BUCKETS;
}

static void notify_sent(void *ud, const struct qn_store_status *st, int64_t value)
{
    (void)ud;
    (void)value;
    if (st->code != QN_OK)
        QN_DEBUG("push notify failed: %s", st->message);
}

static void drop_queues(struct qn_notifier *nt)
{
    for (size_t i = 0; i < nt->n; i++)
        free(nt->queues[i]);
    nt->n = 0;
}

static void notify_flush(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct qn_notifier *nt = ud;
    nt->armed = false;
    /* one NOTIFY call per tenant (notify_push_v1 takes one), names in order */
    const char *batch[QN_NOTIFY_MAX_QUEUES];
    bool sent[QN_NOTIFY_MAX_QUEUES] = {false};
    for (size_t i = 0; i < nt->n; i++) {
        if (sent[i])
            continue;
        size_t k = 0;
        for (size_t j = i; j < nt->n; j++)
            if (!sent[j] && memcmp(nt->tenants[j], nt->tenants[i], 16) == 0) {
                batch[k++] = nt->queues[j];
                sent[j] = true;
            }
        struct qn_call_opts opts = {0, nt->tenants[i], NULL};
        qn_store_notify_push(nt->store, batch, k, &opts, notify_sent, NULL, NULL);
    }
    drop_queues(nt);
}

/* Feeds this loop's waiters; told_in: groups another loop told; told_out: the
 * groups told here. */
static void feed_here(struct qn_notifier *nt, const uint8_t tenant[16], const char *queue,
                      const char *partition, const struct qn_told *told_in,
                      struct qn_told *told_out)
{
    QN_DEBUG("commit fed here: queue %s partition %s (%s)", queue, partition ? partition : "?",
             told_in != NULL ? "from another loop" : "this loop's");
    nt->commits[bucket(tenant, queue)]++;
    /* a local commit names its partition: wake as many as it can feed (one per
     * group), hinted with the partition (waiters.h), and nobody of a group whose
     * lease there a consumer of this loop holds (its release hints: cfusion.h) */
    if (nt->cfusion != NULL)
        qn_cfusion_commit_feed(nt->cfusion, tenant, queue, partition, QN_NOTIFY_WAKE_PER_GROUP,
                               qn_store_now_ms(), told_in, told_out);
    else
        qn_waiters_feed_except(nt->waiters, tenant, queue, partition, QN_NOTIFY_WAKE_PER_GROUP,
                               NULL, NULL, told_in, told_out);
}

void qn_notifier_peer_committed(struct qn_notifier *nt, const uint8_t tenant[16], const char *queue,
                                const char *partition, const struct qn_told *told)
{
    feed_here(nt, tenant, queue, partition, told, NULL);
}

void qn_notifier_set_peers(struct qn_notifier *nt, qn_notifier_peer_fn fn, void *ud)
{
    nt->peers = fn;
    nt->peers_ud = ud;
}

void qn_notifier_committed(void *ud, const uint8_t tenant[16], const char *queue,
                           const char *partition)
{
    struct qn_notifier *nt = ud;
    struct qn_told told;
    feed_here(nt, tenant, queue, partition, NULL, &told);
    if (nt->peers != NULL)
        nt->peers(nt->peers_ud, tenant, queue, partition, &told);
    bool known = false;
    for (size_t i = 0; i < nt->n && !known; i++)
        known = strcmp(nt->queues[i], queue) == 0 && memcmp(nt->tenants[i], tenant, 16) == 0;
    if (!known && nt->n < QN_NOTIFY_MAX_QUEUES) {
        char *q = strdup(queue);
        if (q != NULL) {
            memcpy(nt->tenants[nt->n], tenant, 16);
            nt->queues[nt->n++] = q;
        }
    }
    if (!nt->armed) {
        qn_timer_after(nt->timer, QN_NOTIFY_INTERVAL_MS);
        nt->armed = true;
    }
}

/* A NOTIFY from another broker (the store drops our own: our commits woke our
 * waiters already, hinted). */
static void on_listen(void *ud, const char *payload)
{
    struct qn_notifier *nt = ud;
    const char *slash = strchr(payload, '/');
    const char *queue = slash ? slash + 1 : payload;
    uint8_t tenant[16];
    /* "tenant/queue"; a payload without a tenant is the default tenant's */
    if (slash == NULL || qn_uuid_parse(payload, (size_t)(slash - payload), tenant) != QN_OK)
        memcpy(tenant, default_tenant, 16);
    nt->commits[bucket(tenant, queue)]++;
    qn_waiters_notify(nt->waiters, tenant, queue, NULL, QN_NOTIFY_WAKE_PER_GROUP);
}

uint64_t qn_notifier_commits(const struct qn_notifier *nt, const uint8_t tenant[16],
                             const char *queue)
{
    return nt != NULL && queue != NULL ? nt->commits[bucket(tenant, queue)] : 0;
}

int qn_notifier_new(struct event_base *base, qn_store *store, struct qn_waiters *ws,
                    struct qn_notifier **out)
{
    struct qn_notifier *nt = calloc(1, sizeof *nt);
    if (nt == NULL)
        return QN_ENOMEM;
    nt->store = store;
    nt->waiters = ws;
    nt->timer = evtimer_new(base, notify_flush, nt);
    if (nt->timer == NULL) {
        free(nt);
        return QN_ENOMEM;
    }
    int rc = qn_store_listen_push(store, on_listen, nt);
    if (rc != QN_OK) {
        event_free(nt->timer);
        free(nt);
        return rc;
    }
    *out = nt;
    return QN_OK;
}

void qn_notifier_set_cfusion(struct qn_notifier *nt, struct qn_cfusion *cf)
{
    nt->cfusion = cf;
    /* held leases expire on this loop's clock (cfusion.h) */
    if (qn_cfusion_set_base(cf, event_get_base(nt->timer)) != QN_OK)
        QN_WARN("consume fusion: no lease expiry timer (out of memory); expired leases wait "
                "for the re-check");
}

void qn_notifier_free(struct qn_notifier *nt)
{
    if (nt == NULL)
        return;
    event_free(nt->timer);
    drop_queues(nt);
    qn_store_listen_push(nt->store, NULL, NULL);
    free(nt);
}
