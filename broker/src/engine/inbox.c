/*
 * engine/inbox.c - a loop's bounded inbox (see inbox.h).
 *
 * Does: keep a fixed ring under a mutex (producers are other loops, a few posts
 * per call at most; the lock is held for a copy of two pointers), activate the
 * owner's event when the ring goes from empty to non-empty, and drain the ring
 * on the owner in batches: the batch is copied out under the lock and run
 * without it, so a message may post again (even to its own inbox).
 * Does not: grow, block a producer, or run a message on any thread but the
 * owner's.
 *
 * Invariants:
 *   1. 0 <= n <= cap; head indexes the oldest message; slots [head, head+n) mod
 *      cap hold messages.
 *   2. armed is true from the post that found the ring empty until the owner's
 *      drain starts; so every message is followed by one activation that runs it.
 *   3. After closed is set no post succeeds; ev is NULL only once closed.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <event2/event.h>

#include "engine/inbox.h"
#include "queen/error.h"

/* Messages run per drain pass before the loop gets to its other events. */
#define DRAIN_BATCH 256

struct msg {
    qn_inbox_fn fn;
    void *arg;
};

struct qn_inbox {
    pthread_mutex_t mu;
    struct event *ev; /* on the owner's base; activated by producers */
    struct msg *ring; /* cap slots */
    size_t cap;
    size_t head;
    size_t n;
    bool armed;
    bool closed;
    uint64_t refused;
};

static size_t take(struct qn_inbox *ib, struct msg *out, size_t max)
{
    size_t k = 0;
    pthread_mutex_lock(&ib->mu);
    while (k < max && ib->n > 0) {
        out[k++] = ib->ring[ib->head];
        ib->head = (ib->head + 1) % ib->cap;
        ib->n--;
    }
    if (ib->n == 0)
        ib->armed = false;
    pthread_mutex_unlock(&ib->mu);
    return k;
}

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct qn_inbox *ib = arg;
    struct msg batch[DRAIN_BATCH];
    size_t k = take(ib, batch, DRAIN_BATCH);
    for (size_t i = 0; i < k; i++)
        batch[i].fn(batch[i].arg);
    /* more left: run them on the next pass, after the loop's other events */
    pthread_mutex_lock(&ib->mu);
    bool more = ib->n > 0;
    pthread_mutex_unlock(&ib->mu);
    if (more && ib->ev != NULL)
        event_active(ib->ev, EV_READ, 0);
}

int qn_inbox_new(struct event_base *base, size_t cap, struct qn_inbox **out)
{
    if (base == NULL || cap == 0 || cap > SIZE_MAX / sizeof(struct msg))
        return QN_EINVAL;
    struct qn_inbox *ib = calloc(1, sizeof *ib);
    if (ib == NULL)
        return QN_ENOMEM;
    ib->ring = calloc(cap, sizeof *ib->ring);
    ib->ev = event_new(base, -1, 0, on_ready, ib);
    if (ib->ring == NULL || ib->ev == NULL || pthread_mutex_init(&ib->mu, NULL) != 0) {
        if (ib->ev)
            event_free(ib->ev);
        free(ib->ring);
        free(ib);
        return QN_ENOMEM;
    }
    ib->cap = cap;
    *out = ib;
    return QN_OK;
}

int qn_inbox_post(struct qn_inbox *ib, qn_inbox_fn fn, void *arg)
{
    pthread_mutex_lock(&ib->mu);
    if (ib->closed || ib->n == ib->cap) {
        ib->refused++;
        pthread_mutex_unlock(&ib->mu);
        return QN_EBUSY;
    }
    ib->ring[(ib->head + ib->n) % ib->cap] = (struct msg){fn, arg};
    ib->n++;
    bool wake = !ib->armed;
    ib->armed = true;
    /* activated under the lock: the owner cannot free the event meanwhile
     * (qn_inbox_free closes under the same lock first) */
    if (wake)
        event_active(ib->ev, EV_READ, 0);
    pthread_mutex_unlock(&ib->mu);
    return QN_OK;
}

size_t qn_inbox_depth(struct qn_inbox *ib)
{
    pthread_mutex_lock(&ib->mu);
    size_t n = ib->n;
    pthread_mutex_unlock(&ib->mu);
    return n;
}

uint64_t qn_inbox_refused(struct qn_inbox *ib)
{
    pthread_mutex_lock(&ib->mu);
    uint64_t r = ib->refused;
    pthread_mutex_unlock(&ib->mu);
    return r;
}

void qn_inbox_close(struct qn_inbox *ib)
{
    if (ib == NULL)
        return;
    pthread_mutex_lock(&ib->mu);
    ib->closed = true;
    pthread_mutex_unlock(&ib->mu);
    struct msg batch[DRAIN_BATCH];
    size_t k;
    while ((k = take(ib, batch, DRAIN_BATCH)) > 0)
        for (size_t i = 0; i < k; i++)
            batch[i].fn(batch[i].arg);
    pthread_mutex_lock(&ib->mu);
    struct event *ev = ib->ev;
    ib->ev = NULL;
    pthread_mutex_unlock(&ib->mu);
    if (ev)
        event_free(ev);
}

void qn_inbox_free(struct qn_inbox *ib)
{
    if (ib == NULL)
        return;
    qn_inbox_close(ib);
    pthread_mutex_destroy(&ib->mu);
    free(ib->ring);
    free(ib);
}
