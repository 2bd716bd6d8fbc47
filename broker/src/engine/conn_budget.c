/*
 * engine/conn_budget.c - database calls in flight per client connection (see
 * conn_budget.h).
 *
 * Does: count slots per connection key in an entry made by the first take and
 * freed by the last give; refuse a take past the limit.
 * Does not: queue refused calls (the client is told, and retries) or know what a
 * call does.
 *
 * Invariants:
 *   1. An entry is in the map exactly while held > 0; a slot is its entry.
 *   2. The "no connection" slot is a static sentinel never counted or freed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/conn_budget.h"
#include "engine/map.h"
#include "queen/error.h"

/* Connections tracked at once (entries exist only while a call holds a slot). */
#define MAX_ENTRIES (1u << 20)

struct qn_conn_slot {
    struct qn_map_node node;
    struct qn_conn_budget *b; /* NULL for the sentinel */
    const void *key;          /* the key bytes are this pointer's value */
    size_t held;
};

struct qn_conn_budget {
    struct qn_map map;
    size_t limit;
    void (*on_room)(void *ud);
    void *room_ud;
};

static const struct qn_conn_slot no_conn; /* invariant 2: never written */

int qn_conn_budget_new(size_t limit, struct qn_conn_budget **out)
{
    struct qn_conn_budget *b = calloc(1, sizeof *b);
    if (b == NULL)
        return QN_ENOMEM;
    qn_map_init(&b->map, MAX_ENTRIES);
    b->limit = limit ? limit : 1;
    *out = b;
    return QN_OK;
}

static void drop_entry(struct qn_map_node *n, void *ud)
{
    struct qn_conn_budget *b = ud;
    struct qn_conn_slot *e = qn_container_of(n, struct qn_conn_slot, node);
    qn_map_remove(&b->map, n);
    free(e);
}

void qn_conn_budget_free(struct qn_conn_budget *b)
{
    if (b == NULL)
        return;
    qn_map_each(&b->map, drop_entry, b);
    qn_map_destroy(&b->map);
    free(b);
}

static struct qn_conn_slot *find(const struct qn_conn_budget *b, const void *key)
{
    struct qn_map_node *n = qn_map_get(&b->map, &key, sizeof key);
    return n ? qn_container_of(n, struct qn_conn_slot, node) : NULL;
}

int qn_conn_budget_take(struct qn_conn_budget *b, const void *key, bool force,
                        struct qn_conn_slot **slot)
{
    if (key == NULL) {
        *slot = (struct qn_conn_slot *)&no_conn;
        return QN_OK;
    }
    struct qn_conn_slot *e = find(b, key);
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL)
            return QN_ENOMEM;
        e->b = b;
        e->key = key;
        int rc = qn_map_put(&b->map, &e->node, &e->key, sizeof e->key);
        if (rc != QN_OK) {
            free(e);
            return rc == QN_ELIMIT ? QN_EBUSY : rc;
        }
    } else if (e->held >= b->limit && !force) {
        return QN_EBUSY;
    }
    e->held++;
    *slot = e;
    return QN_OK;
}

void qn_conn_budget_give(struct qn_conn_slot *e)
{
    if (e == NULL || e == &no_conn)
        return;
    struct qn_conn_budget *b = e->b;
    if (--e->held + 1 == b->limit && b->on_room != NULL)
        b->on_room(b->room_ud); /* the connection can start a call again */
    if (e->held == 0) {
        qn_map_remove(&e->b->map, &e->node);
        free(e);
    }
}

size_t qn_conn_budget_held(const struct qn_conn_budget *b, const void *key)
{
    const struct qn_conn_slot *e = key ? find(b, key) : NULL;
    return e ? e->held : 0;
}

void qn_conn_budget_on_room(struct qn_conn_budget *b, void (*fn)(void *ud), void *ud)
{
    b->on_room = fn;
    b->room_ud = ud;
}

bool qn_conn_budget_has_room(const struct qn_conn_budget *b, const void *key)
{
    return qn_conn_budget_held(b, key) < b->limit;
}

size_t qn_conn_budget_limit(const struct qn_conn_budget *b)
{
    return b->limit;
}
