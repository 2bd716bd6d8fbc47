/*
 * transport/health.c - grpc.health.v1.Health: Check and Watch over a table of serving
 * states (see health.h).
 *
 * Does: answer Check from the table; keep Watch streams, send the current state at
 * once and every change after; count Watch streams against QUEEN_MAX_STREAMS.
 * Does not: decide health itself (the broker sets it); queue more than one state
 * per slow watcher: when a watcher has not taken its last update, only the newest
 * state is remembered and sent when its queue drains.
 *
 * Invariants:
 *   1. A watcher exists exactly while its call is OPEN: made in on_message, freed
 *      in on_cancel or right after qn_call_finish(); never touched afterwards.
 *   2. Each watcher holds one stream slot (qn_rpc_stream_acquire), released once.
 *   3. A watcher never sees the same state twice in a row.
 */
#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "transport/health.h"
#include "log.h"
#include "queen/error.h"
#include "transport/server.h"

/* A watcher with more than this queued waits for the drain before the next update. */
#define WATCH_PENDING_MAX 4096

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus serving_status;
#define ST_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define ST_NOT_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
#define ST_UNKNOWN GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN

struct entry {
    char *name;
    bool serving;
};

struct watcher {
    qn_health *h;
    qn_call *call;
    char *name;    /* the watched name (copy) */
    int last_sent; /* serving_status last queued, -1 before the first */
    struct watcher *prev, *next;
};

struct qn_health {
    qn_rpc_server *server;
    struct entry entries[QN_HEALTH_MAX_SERVICES];
    size_t nentries;
    struct watcher *watchers;
    size_t nwatchers;
    struct qn_method methods[2]; /* registered; data points back here */
};

static int find(const qn_health *h, const char *name)
{
    for (size_t i = 0; i < h->nentries; i++)
        if (strcmp(h->entries[i].name, name) == 0)
            return (int)i;
    return -1;
}

static serving_status status_of(const qn_health *h, const char *name)
{
    int i = find(h, name);
    if (i < 0)
        return ST_UNKNOWN;
    return h->entries[i].serving ? ST_SERVING : ST_NOT_SERVING;
}

int qn_health_get(const qn_health *h, const char *service)
{
    int i = find(h, service ? service : "");
    return i < 0 ? -1 : h->entries[i].serving ? 1 : 0;
}

size_t qn_health_watchers(const qn_health *h)
{
    return h->nwatchers;
}

/* ---------------------------------------------------------------- watchers */

static void watcher_free(struct watcher *w)
{
    qn_health *h = w->h;
    if (w->prev)
        w->prev->next = w->next;
    else
        h->watchers = w->next;
    if (w->next)
        w->next->prev = w->prev;
    h->nwatchers--;
    qn_rpc_stream_release(h->server);
    free(w->name);
    free(w);
}

static void watcher_update(struct watcher *w);

static void watcher_drained(qn_call *call)
{
    struct watcher *w = qn_call_data(call);
    if (w != NULL)
        watcher_update(w);
}

/* Sends the watched name's state unless the watcher already has it; may free w. */
static void watcher_update(struct watcher *w)
{
    serving_status st = status_of(w->h, w->name);
    if ((int)st == w->last_sent)
        return;
    int rc = QN_OK;
    if (qn_call_pending_bytes(w->call) > WATCH_PENDING_MAX) {
        rc = qn_call_on_drain(w->call, watcher_drained); /* the newest state goes then */
        if (rc == QN_OK)
            return;
    } else {
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        resp.status = st;
        rc = qn_call_send(w->call, &resp.base);
    }
    if (rc != QN_OK) {
        qn_call *call = w->call;
        qn_call_set_data(call, NULL);
        watcher_free(w);
        qn_call_finish(call, QN_GRPC_INTERNAL, "cannot send the health status");
        return;
    }
    w->last_sent = (int)st;
}

static void notify(qn_health *h, const char *name)
{
    for (struct watcher *w = h->watchers, *next; w != NULL; w = next) {
        next = w->next; /* watcher_update may free w */
        if (name == NULL || strcmp(w->name, name) == 0)
            watcher_update(w);
    }
}

/* ---------------------------------------------------------------- the table */

int qn_health_set_serving(qn_health *h, const char *service, bool serving)
{
    const char *name = service ? service : "";
    if (strlen(name) > QN_HEALTH_MAX_NAME)
        return QN_ELIMIT;
    int i = find(h, name);
    if (i < 0) {
        if (h->nentries == QN_HEALTH_MAX_SERVICES)
            return QN_ELIMIT;
        char *copy = strdup(name);
        if (copy == NULL)
            return QN_ENOMEM;
        i = (int)h->nentries++;
        h->entries[i].name = copy;
        h->entries[i].serving = !serving; /* forces the change below */
    }
    if (h->entries[i].serving == serving)
        return QN_OK;
    h->entries[i].serving = serving;
    QN_INFO("health service=\"%s\" status=%s", name, serving ? "SERVING" : "NOT_SERVING");
    notify(h, name);
    return QN_OK;
}

void qn_health_set_all(qn_health *h, bool serving)
{
    bool changed = false;
    for (size_t i = 0; i < h->nentries; i++) {
        changed |= h->entries[i].serving != serving;
        h->entries[i].serving = serving;
    }
    if (changed) {
        QN_INFO("health all services status=%s", serving ? "SERVING" : "NOT_SERVING");
        notify(h, NULL);
    }
}

/* ---------------------------------------------------------------- the RPCs */

static void check(qn_call *call, ProtobufCMessage *msg)
{
    qn_health *h = qn_call_method(call)->data;
    Grpc__Health__V1__HealthCheckRequest *req = (Grpc__Health__V1__HealthCheckRequest *)msg;
    serving_status st = status_of(h, req->service);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (st == ST_UNKNOWN) {
        qn_call_finish(call, QN_GRPC_NOT_FOUND, "unknown service");
        return;
    }
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = st;
    if (qn_call_send(call, &resp.base) != QN_OK) {
        qn_call_finish(call, QN_GRPC_INTERNAL, "cannot send the health status");
        return;
    }
    qn_call_finish(call, QN_GRPC_OK, NULL);
}

static void watch(qn_call *call, ProtobufCMessage *msg)
{
    qn_health *h = qn_call_method(call)->data;
    Grpc__Health__V1__HealthCheckRequest *req = (Grpc__Health__V1__HealthCheckRequest *)msg;
    if (strlen(req->service) > QN_HEALTH_MAX_NAME) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, "service name is too long");
        return;
    }
    if (qn_rpc_stream_acquire(h->server) != QN_OK) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       "too many open streams (QUEEN_MAX_STREAMS)");
        return;
    }
    struct watcher *w = calloc(1, sizeof *w);
    char *name = strdup(req->service);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (w == NULL || name == NULL) {
        free(w);
        free(name);
        qn_rpc_stream_release(h->server);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->h = h;
    w->call = call;
    w->name = name;
    w->last_sent = -1;
    w->next = h->watchers;
    if (h->watchers)
        h->watchers->prev = w;
    h->watchers = w;
    h->nwatchers++;
    qn_call_set_data(call, w);
    watcher_update(w);
}

static void watch_cancel(qn_call *call, int reason)
{
    struct watcher *w = qn_call_data(call);
    if (w == NULL)
        return;
    qn_call_set_data(call, NULL);
    watcher_free(w);
}

int qn_health_new(qn_rpc_server *s, qn_health **out)
{
    qn_health *h = calloc(1, sizeof *h);
    if (h == NULL)
        return QN_ENOMEM;
    h->server = s;
    h->methods[0] = (struct qn_method){
        .path = "/grpc.health.v1.Health/Check",
        .request = &grpc__health__v1__health_check_request__descriptor,
        .on_message = check,
        .data = h,
    };
    h->methods[1] = (struct qn_method){
        .path = "/grpc.health.v1.Health/Watch",
        .request = &grpc__health__v1__health_check_request__descriptor,
        .server_streaming = true,
        .on_message = watch,
        .on_cancel = watch_cancel,
        .data = h,
    };
    /* "" is known from the start, NOT_SERVING until the broker says otherwise. */
    h->entries[0].name = strdup("");
    h->entries[0].serving = false;
    h->nentries = 1;
    int rc = h->entries[0].name ? qn_rpc_register(s, h->methods, 2) : QN_ENOMEM;
    if (rc != QN_OK) {
        qn_health_free(h);
        return rc;
    }
    *out = h;
    return QN_OK;
}

void qn_health_free(qn_health *h)
{
    if (h == NULL)
        return;
    /* Normally empty: the server was freed first and cancelled every Watch. */
    while (h->watchers != NULL) {
        struct watcher *w = h->watchers;
        h->watchers = w->next;
        free(w->name);
        free(w);
    }
    for (size_t i = 0; i < h->nentries; i++)
        free(h->entries[i].name);
    free(h);
}
