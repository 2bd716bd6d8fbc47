/*
 * services.c - registers queen.v1.QueueService and AdminService, and wires the
 * push path to the waiters: a commit on this broker wakes local waiters at once
 * and is announced to other brokers by a throttled NOTIFY; another broker's
 * NOTIFY wakes ours.
 *
 * Cross-broker wake-ups are cheap hints: NOTIFY is sent outside the push
 * transaction, at most once per NOTIFY_INTERVAL_MS per queue set, and a lost one
 * only delays a parked pop until its re-check timer (QUEEN_WAKE_RECHECK_MS).
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "config.h"
#include "log.h"
#include "engine/map.h"
#include "queen/error.h"
#include "rpc/svc.h"
#include "rpc/svc_batch.h"
#include "engine/waiters.h"

#define NOTIFY_INTERVAL_MS 20
#define NOTIFY_MAX_QUEUES 256
/* waiters woken per group and commit: enough to drain a burst in parallel */
#define WAKE_PER_GROUP 4

static struct qn_app *the_app;

struct qn_app *qn_svc_app(void)
{
    return the_app;
}

void qn_app_new_id(struct qn_app *app, uint8_t out[QN_UUID_LEN])
{
    qn_uuid7_next(&app->ids, qn_now_ms(), out);
}

extern const struct qn_method qn_admin_methods[];
extern const size_t qn_admin_methods_count;

#define Q(p, Type, cs, ss, on_msg, on_half, on_cxl)                                                \
    {.path = "/queen.v1.QueueService/" p, .request = &queen__v1__##Type##__descriptor,            \
     .client_streaming = cs, .server_streaming = ss, .on_message = on_msg,                         \
     .on_half_close = on_half, .on_cancel = on_cxl}

static const struct qn_method queue_methods[] = {
    Q("Push", push_request, false, false, qn_svc_push, NULL, qn_svc_push_cancel),
    Q("Pop", pop_request, false, false, qn_svc_pop, NULL, qn_svc_pop_cancel),
    Q("Consume", consume_request, true, true, qn_svc_consume, qn_svc_consume_half_close,
      qn_svc_consume_cancel),
    Q("Ack", ack_request, false, false, qn_svc_ack, NULL, qn_svc_ack_cancel),
    Q("RenewLease", renew_lease_request, false, false, qn_svc_renew, NULL, qn_svc_renew_cancel),
    Q("Transact", transact_request, false, false, qn_svc_transact, NULL, qn_svc_transact_cancel),
    Q("Fetch", fetch_request, false, false, qn_svc_fetch, NULL, qn_svc_fetch_cancel),
};

/* ---------------------------------------------------------------- wake-ups */

struct notifier {
    struct qn_app *app;
    struct event *timer;
    bool armed;
    char *queues[NOTIFY_MAX_QUEUES];
    size_t n;
    bool overflow;
};

static struct notifier notifier;

static void notify_sent(void *ud, const struct qn_store_status *st, int64_t value)
{
    (void)ud;
    (void)value;
    if (st->code != QN_OK)
        QN_DEBUG("push notify failed: %s", st->message);
}

static void notify_flush(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct notifier *nt = ud;
    nt->armed = false;
    if (nt->n > 0 && nt->app->store != NULL)
        qn_store_notify_push(nt->app->store, (const char *const *)nt->queues, nt->n, NULL,
                             notify_sent, NULL, NULL);
    for (size_t i = 0; i < nt->n; i++)
        free(nt->queues[i]);
    nt->n = 0;
    nt->overflow = false;
}

static void on_commit(void *ud, const char *queue, const char *partition)
{
    struct qn_app *app = ud;
    qn_waiters_notify(app->waiters, queue, partition, WAKE_PER_GROUP);
    struct notifier *nt = &notifier;
    if (nt->timer == NULL)
        return;
    for (size_t i = 0; i < nt->n; i++)
        if (strcmp(nt->queues[i], queue) == 0)
            goto arm;
    if (nt->n < NOTIFY_MAX_QUEUES) {
        char *q = strdup(queue);
        if (q != NULL)
            nt->queues[nt->n++] = q;
    } else {
        nt->overflow = true;
    }
arm:
    if (!nt->armed) {
        struct timeval tv = {0, NOTIFY_INTERVAL_MS * 1000};
        evtimer_add(nt->timer, &tv);
        nt->armed = true;
    }
}

void qn_services_committed(struct qn_app *app, const char *queue, const char *partition)
{
    on_commit(app, queue, partition);
}

/* A NOTIFY from any broker (ours included: waking twice is harmless). Payload
 * is "tenant/queue". */
static void on_listen(void *ud, const char *payload)
{
    struct qn_app *app = ud;
    const char *slash = strchr(payload, '/');
    const char *queue = slash ? slash + 1 : payload;
    qn_waiters_notify(app->waiters, queue, NULL, WAKE_PER_GROUP);
}

int qn_services_register(struct qn_app *app)
{
    the_app = app;
    int rc = qn_rpc_register(app->rpc, queue_methods, sizeof queue_methods / sizeof queue_methods[0]);
    if (rc == QN_OK)
        rc = qn_rpc_register(app->rpc, qn_admin_methods, qn_admin_methods_count);
    if (rc != QN_OK)
        return rc;
    qn_fusion_on_commit(app->fusion, on_commit, app);
    notifier.app = app;
    notifier.timer = evtimer_new(app->base, notify_flush, &notifier);
    if (notifier.timer == NULL)
        return QN_ENOMEM;
    return qn_store_listen_push(app->store, on_listen, app);
}

void qn_services_shutdown(struct qn_app *app)
{
    qn_svc_pop_gate_forget();
    (void)app;
    if (notifier.timer) {
        event_free(notifier.timer);
        notifier.timer = NULL;
    }
    for (size_t i = 0; i < notifier.n; i++)
        free(notifier.queues[i]);
    notifier.n = 0;
    if (app->store)
        qn_store_listen_push(app->store, NULL, NULL);
}
