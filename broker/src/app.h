/*
 * app.h - private to broker/: the state one broker process shares between its
 * services, owned by the loop thread (no locks).
 */
#ifndef QN_BROKER_APP_H
#define QN_BROKER_APP_H

#include <stdbool.h>
#include <stdint.h>

#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/store.h"

struct event_base;
struct qn_config;
typedef struct qn_rpc_server qn_rpc_server;
struct qn_fusion;
struct qn_waiters;
struct qn_dedup;

struct qn_app {
    struct event_base *base;
    const struct qn_config *cfg;
    qn_store *store;
    qn_rpc_server *rpc;
    qn_zctx *zctx;               /* compression/decompression for the loop thread */
    struct qn_uuid7_gen ids;     /* message ids and lease ids */
    struct qn_fusion *fusion;    /* push batching */
    struct qn_waiters *waiters;  /* parked pops and consume streams */
    struct qn_dedup *dedup;      /* NULL when QUEEN_DEDUP_CACHE is off */
    int64_t started_ms;          /* qn_store_now_ms() at start */
    bool shutting_down;
    /* counters for GetStats */
    uint64_t pushed;             /* messages committed by this broker */
    uint64_t delivered;          /* messages handed to consumers */
    uint64_t rpcs;               /* RPCs started */
};

/* The broker module (see broker.h) that owns a struct qn_app. */
struct qn_broker_ctx;
int qn_app_start(struct qn_broker_ctx *ctx, void **state);
void qn_app_shutdown(void *state);
void qn_app_stop(void *state);

/* A fresh UUIDv7 (message ids, lease ids). */
void qn_app_new_id(struct qn_app *app, uint8_t out[QN_UUID_LEN]);

#endif
