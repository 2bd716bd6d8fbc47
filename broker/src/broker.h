/*
 * broker.h - private to broker/: the serving process.
 */
#ifndef QN_BROKER_BROKER_H
#define QN_BROKER_BROKER_H

#include <stddef.h>

#include "config.h"
#include "transport/health.h"
#include "transport/call.h"

struct event_base;

/* What a module gets at start: borrowed for the whole run. */
struct qn_broker_ctx {
    struct event_base *base;
    const struct qn_config *cfg;
    qn_rpc_server *server;
    qn_health *health; /* "" starts SERVING; a module may set it (e.g. storage down) */
};

/*
 * A part of the broker with a lifetime: storage, the queue and admin services,
 * maintenance. Modules start in order after the server is made (before it
 * listens) and stop in reverse order after the server was freed. The product's
 * list is `product_modules` in broker.c.
 */
struct qn_broker_module {
    const char *name; /* NULL ends a module array */
    /* Registers methods, opens resources; *state is the module's. Returns QN_OK or
     * an error (logged by the module), which aborts the start. */
    int (*start)(struct qn_broker_ctx *ctx, void **state);
    /* SIGTERM/SIGINT, before the server drains: stop taking new work, wake parked
     * requests. May be NULL. */
    void (*shutdown)(void *state);
    /* After the loop ended and the server was freed (every call is gone). May be
     * NULL. */
    void (*stop)(void *state);
};

/*
 * Serves until SIGTERM/SIGINT, then drains and returns QN_OK; returns an error
 * when the listeners or the loop cannot be set up (logged).
 */
int qn_broker_run(const struct qn_config *cfg);

/* Same, with `modules` (NULL-name terminated) in place of the product's own
 * (health and reflection are always there). Test binaries use it to serve
 * test-only services without a database. */
int qn_broker_serve(const struct qn_config *cfg, const struct qn_broker_module *modules);

#endif
