/*
 * engine/conn_budget.h - private to broker/: how many calls of one client
 * connection wait on the database at once (QUEEN_MAX_CONN_DB_CALLS).
 *
 * One client must not fill the database pool for everyone: a connection that
 * sends hundreds of large reads at once would keep other clients' calls waiting
 * behind them. Each call that waits on the database holds one slot of its
 * connection while it does. A new call of a connection at the limit waits,
 * held by the transport (qn_method.admission), until one of its connection's
 * slots is given back (qn_conn_budget_on_room); the client sees a slower
 * answer, as under HTTP/2 flow control, never a refusal. A take past the limit
 * (QN_EBUSY) is left for a call started some other way.
 *
 * Keys are the transport's connection keys (qn_call_conn_key). A slot is
 * reference counted per key, so a call that outlives its connection (a push
 * being resolved) gives its slot back safely; a later connection that reuses the
 * key shares the count until then (bounded: at most the limit, briefly).
 */
#ifndef QN_BROKER_CONN_BUDGET_H
#define QN_BROKER_CONN_BUDGET_H

#include <stdbool.h>
#include <stddef.h>

struct qn_conn_budget;
struct qn_conn_slot;

/* limit >= 1. Returns QN_OK with *out, or QN_ENOMEM. */
int qn_conn_budget_new(size_t limit, struct qn_conn_budget **out);
/* Slots still held must not be given back afterwards. NULL allowed. */
void qn_conn_budget_free(struct qn_conn_budget *b);

/*
 * Takes a slot of connection `key` (NULL: the call's connection is gone; a slot
 * of no connection is handed out and counts nowhere). force: take it even past
 * the limit (a call already admitted asking again, e.g. a parked pop woken).
 * Returns QN_OK with *slot, QN_EBUSY when the connection holds `limit` already,
 * or QN_ENOMEM.
 */
int qn_conn_budget_take(struct qn_conn_budget *b, const void *key, bool force,
                        struct qn_conn_slot **slot);

/* Gives a slot back. NULL allowed. */
void qn_conn_budget_give(struct qn_conn_slot *slot);

/* fn(ud) runs when a connection's held slots drop below the limit (from inside
 * qn_conn_budget_give). NULL clears. */
void qn_conn_budget_on_room(struct qn_conn_budget *b, void (*fn)(void *ud), void *ud);

/* True when connection `key` holds fewer slots than the limit. */
bool qn_conn_budget_has_room(const struct qn_conn_budget *b, const void *key);

/* Slots held now by connection key (tests). */
size_t qn_conn_budget_held(const struct qn_conn_budget *b, const void *key);

/* The limit (for messages). */
size_t qn_conn_budget_limit(const struct qn_conn_budget *b);

#endif
