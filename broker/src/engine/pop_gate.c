/*
 * engine/pop_gate.c - the min_pop_wait_time cache (see pop_gate.h).
 *
 * A map from (tenant, queue name) to (option, when learned). Invariant: count <=
 * QN_POP_GATE_MAX; putting a new queue into a full cache empties it first.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/map.h"
#include "engine/pop_gate.h"
#include "queen/error.h"

struct gate_entry {
    struct qn_map_node node;
    int32_t min_wait_ms;
    int64_t at_ms;
    char key[]; /* tenant (16 bytes) then the queue name */
};

/* The map key of (tenant, queue) in buf (>= 16 + 255 bytes); its length. */
static size_t gate_key(const uint8_t tenant[16], const char *queue, char *buf)
{
    size_t ql = strnlen(queue, 255);
    memcpy(buf, tenant, 16);
    memcpy(buf + 16, queue, ql);
    return 16 + ql;
}

struct qn_pop_gates {
    struct qn_map map;
};

int qn_pop_gates_new(struct qn_pop_gates **out)
{
    struct qn_pop_gates *g = calloc(1, sizeof *g);
    if (g == NULL)
        return QN_ENOMEM;
    qn_map_init(&g->map, QN_POP_GATE_MAX + 1);
    *out = g;
    return QN_OK;
}

static void entry_free(struct qn_map_node *n, void *ud)
{
    qn_map_remove(ud, n);
    free(qn_container_of(n, struct gate_entry, node));
}

int32_t qn_pop_gates_get(const struct qn_pop_gates *g, const uint8_t tenant[16], const char *queue,
                         int64_t now_ms)
{
    char k[16 + 255];
    struct qn_map_node *n = qn_map_get(&g->map, k, gate_key(tenant, queue, k));
    if (n == NULL)
        return -1;
    const struct gate_entry *e = qn_container_of(n, struct gate_entry, node);
    return now_ms - e->at_ms > QN_POP_GATE_TTL_MS ? -1 : e->min_wait_ms;
}

void qn_pop_gates_put(struct qn_pop_gates *g, const uint8_t tenant[16], const char *queue,
                      int32_t min_wait_ms, int64_t now_ms)
{
    char k[16 + 255];
    size_t l = gate_key(tenant, queue, k);
    struct qn_map_node *n = qn_map_get(&g->map, k, l);
    if (n == NULL) {
        if (g->map.count >= QN_POP_GATE_MAX)
            qn_map_each(&g->map, entry_free, &g->map);
        struct gate_entry *e = calloc(1, sizeof *e + l);
        if (e == NULL)
            return;
        memcpy(e->key, k, l);
        if (qn_map_put(&g->map, &e->node, e->key, l) != QN_OK) {
            free(e);
            return;
        }
        n = &e->node;
    }
    struct gate_entry *e = qn_container_of(n, struct gate_entry, node);
    e->min_wait_ms = min_wait_ms;
    e->at_ms = now_ms;
}

size_t qn_pop_gates_count(const struct qn_pop_gates *g)
{
    return g->map.count;
}

void qn_pop_gates_free(struct qn_pop_gates *g)
{
    if (g == NULL)
        return;
    qn_map_each(&g->map, entry_free, &g->map);
    qn_map_destroy(&g->map);
    free(g);
}
