/*
 * store_listen.c - LISTEN queen_push on a dedicated connection, so that pops
 * parked on this broker wake up when another broker commits a push (see
 * qn_store_listen_push in queen/store.h).
 *
 * Does: start and stop the listener connection (the pool's connection code
 * drives it: connect, set up with LISTEN in the same sync, reconnect with
 * backoff), read the notifications libpq buffered and hand each payload to the
 * callback, except those this store's own connections sent (the broker woke its
 * own waiters at its commits; its own NOTIFY coming back would only wake more,
 * unhinted, into empty any-partition scans).
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
#include "queen/error.h"
#include "store_engine.h"

const char *const qn__listen_setup_sql = "LISTEN queen_push";

bool qn__listen_wanted(const qn_store *st)
{
    return st->listen_cb != NULL;
}

/* be_pid is the backend of one of this store's own pool connections: the
 * NOTIFY came from this broker, whose commits woke its waiters already. */
static bool own_backend(const qn_store *st, int be_pid)
{
    for (int i = 0; i < st->cfg.pool_size; i++)
        if (st->conns[i].pg != NULL && PQstatus(st->conns[i].pg) == CONNECTION_OK &&
            PQbackendPID(st->conns[i].pg) == be_pid)
            return true;
    return false;
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
