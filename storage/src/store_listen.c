/*
 * store_listen.c - LISTEN queen_push on a dedicated connection, so that pops
 * parked on this broker wake up when another broker commits a push (see
 * qn_store_listen_push in queen/store.h).
 *
 * Does: start and stop the listener connection (the pool's connection code
 * drives it: connect, set up with LISTEN in the same sync, reconnect with
 * backoff), read the notifications libpq buffered and hand each payload to the
 * callback, except those a pool connection of this store's family sent, whichever
 * store (event loop) it belongs to: the broker woke the waiters of every loop
 * at its commits, and its own NOTIFY coming back would only wake more,
 * unhinted, into empty any-partition scans. Keep the family's list of backends.
 * Does not: carry calls (only its own setup runs on it), count for
 * qn_store_is_up(), or deliver a notification twice (libpq queues each once).
 *
 * Invariants:
 *   1. The listener is wanted exactly while a callback is set; a stop closes it
 *      on the next loop pass (never inside its own handler) and cancels any
 *      reconnect.
 *   2. A notification is handed out only while the store is not closing, and
 *      the pump stops as soon as the callback closed the connection or the store.
 */
#include <pthread.h>
#include <stdlib.h>

#include "queen/error.h"
#include "store_engine.h"

const char *const qn__listen_setup_sql = "LISTEN queen_push";

bool qn__listen_wanted(const qn_store *st)
{
    return st->listen_cb != NULL;
}

/* The backends of a family's pool connections: a short array, read once per
 * notification and written at each connect and disconnect. */
struct qn_store_family {
    pthread_mutex_t mu;
    int *pids;
    size_t n, cap;
};

int qn_store_family_new(struct qn_store_family **out)
{
    struct qn_store_family *f = calloc(1, sizeof *f);
    if (f == NULL)
        return QN_ENOMEM;
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return QN_OK;
}

void qn_store_family_free(struct qn_store_family *f)
{
    if (f == NULL)
        return;
    pthread_mutex_destroy(&f->mu);
    free(f->pids);
    free(f);
}

void qn__own_backend_add(struct qn__conn *c)
{
    struct qn_store_family *f = c->st->family;
    int pid = PQbackendPID(c->pg);
    if (f == NULL || pid <= 0 || c->be_pid != 0)
        return;
    pthread_mutex_lock(&f->mu);
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        int *p = realloc(f->pids, cap * sizeof *p);
        if (p != NULL) {
            f->pids = p;
            f->cap = cap;
        }
    }
    if (f->n < f->cap) { /* out of memory: its NOTIFYs wake as another broker's */
        f->pids[f->n++] = pid;
        c->be_pid = pid;
    }
    pthread_mutex_unlock(&f->mu);
}

void qn__own_backend_remove(struct qn__conn *c)
{
    struct qn_store_family *f = c->st->family;
    if (c->be_pid == 0 || f == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n; i++)
        if (f->pids[i] == c->be_pid) {
            f->pids[i] = f->pids[--f->n];
            break;
        }
    pthread_mutex_unlock(&f->mu);
    c->be_pid = 0;
}

/* be_pid is the backend of a pool connection of this store's family (any event
 * loop's store of this broker): the NOTIFY came from this broker, whose commits
 * woke the waiters of all its loops already. */
static bool own_backend(qn_store *st, int be_pid)
{
    struct qn_store_family *f = st->family;
    bool own = false;
    if (f == NULL)
        return false;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n && !own; i++)
        own = f->pids[i] == be_pid;
    pthread_mutex_unlock(&f->mu);
    return own;
}

void qn__listen_pump(struct qn__conn *c)
{
    qn_store *st = c->st;
    PGnotify *n;
    while (c->pg != NULL && !st->closing && (n = PQnotifies(c->pg)) != NULL) {
        if (st->listen_cb != NULL && n->extra != NULL && !own_backend(st, n->be_pid))
            st->listen_cb(st->listen_ud, n->extra);
        PQfreemem(n);
    }
}

int qn_store_listen_push(qn_store *st, void (*cb)(void *ud, const char *payload), void *ud)
{
    if (st == NULL)
        return QN_EINVAL;
    if (st->closing)
        return QN_ESHUTDOWN;
    bool was = st->listen_cb != NULL;
    st->listen_cb = cb;
    st->listen_ud = ud;
    struct qn__conn *c = &st->listener;
    if (cb != NULL && !was && c->state == QN__CONN_IDLE) {
        c->backoff_ms = 0;
        event_del(c->timer);
        qn__conn_start(c); /* its failure runs no user callback: the listener has none */
    } else if (cb == NULL && was) {
        /* stopping; maybe inside this connection's own handler: close on the
         * next loop pass (the pool's connection timer sees it is not wanted) */
        qn__set_timer(c->timer, 0);
    }
    return QN_OK;
}
