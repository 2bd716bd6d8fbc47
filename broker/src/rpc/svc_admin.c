/*
 * svc_admin.c - queen.v1.AdminService: queue configuration and inspection,
 * consumer groups, dead letters, stats.
 *
 * Each RPC validates, makes one or two storage calls and maps rows to messages.
 * ReplayDeadLetter reads the dead letter, packs it as a fresh message
 * (transaction id "dlq:<id>") and commits the push together with the removal of
 * the dead letter.
 *
 * Invariant: every call either finishes with a response or is cancelled; an
 * admin_rpc owns the request message and every storage request it started.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "queen/v1/admin.pb-c.h"
#include "app.h"
#include "config.h"
#include "engine/fusion.h"
#include "engine/dedup.h"
#include "log.h"
#include "engine/maint_loop.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/resp_arena.h"
#include "rpc/svc.h"
#include "rpc/svc_util.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000

struct admin_rpc {
    struct qn_app *app;
    qn_call *call;
    ProtobufCMessage *req;
    qn_store_req *sreq[2];
    int pending;
    /* GetQueue: the two halves */
    struct qn_arena arena;
    Queen__V1__QueueInfo *qinfo;
    bool qfound;
    Queen__V1__PartitionInfo **parts;
    size_t nparts;
    int64_t depth;
    enum qn_grpc_code fail;
    char failmsg[256];
    /* ReplayDeadLetter */
    uint8_t dlq_id[16];
    char dlq_txn[64];
    char queue[256], partition[256];
    uint8_t msgid[16];
    struct qn_buf blob;
    uint8_t hash[16];
    /* DeleteQueue: partitions to empty step by step */
    uint8_t *del_pids;
    size_t del_n, del_next, del_steps;
    int del_phase;          /* 0 segments, 1 sidecar */
};

static struct admin_rpc *admin_new(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = calloc(1, sizeof *a);
    if (a == NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return NULL;
    }
    a->app = qn_svc_app();
    a->app->rpcs++;
    a->call = call;
    a->req = msg;
    qn_arena_init(&a->arena);
    qn_call_set_data(call, a);
    return a;
}

static void admin_free(struct admin_rpc *a)
{
    for (int i = 0; i < 2; i++)
        qn_store_cancel(a->sreq[i]);
    qn_arena_free(&a->arena);
    qn_buf_free(&a->blob);
    if (a->req)
        protobuf_c_message_free_unpacked(a->req, NULL);
    free(a);
}

static void admin_finish(struct admin_rpc *a, enum qn_grpc_code code, const char *msg)
{
    qn_call *call = a->call;
    qn_call_set_data(call, NULL);
    a->sreq[0] = a->sreq[1] = NULL;
    qn_call_finish(call, code, msg);
    admin_free(a);
}

static void admin_reply(struct admin_rpc *a, const ProtobufCMessage *resp)
{
    qn_call *call = a->call;
    qn_call_set_data(call, NULL);
    a->sreq[0] = a->sreq[1] = NULL;
    if (qn_call_send(call, resp) == QN_OK)
        qn_call_finish(call, QN_GRPC_OK, NULL);
    else
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       "response larger than the send limit: ask for fewer rows");
    admin_free(a);
}

static void admin_store_error(struct admin_rpc *a, const struct qn_store_status *st)
{
    qn_call *call = a->call;
    qn_call_set_data(call, NULL);
    a->sreq[0] = a->sreq[1] = NULL;
    qn_finish_store_error(call, st);
    admin_free(a);
}

/* The first storage call answered: true when it succeeded; otherwise the call
 * was finished with its error (and a is freed). */
static bool admin_ok(struct admin_rpc *a, const struct qn_store_status *st)
{
    a->sreq[0] = NULL;
    if (st->code == QN_OK)
        return true;
    admin_store_error(a, st);
    return false;
}

/* Fails the call when a storage call could not even be sent. */
static bool sent(struct admin_rpc *a, int rc)
{
    if (rc == QN_OK)
        return true;
    a->sreq[0] = a->sreq[1] = NULL;
    admin_finish(a, qn_grpc_from_store(rc), qn_strerror(rc));
    return false;
}

void qn_svc_admin_cancel(qn_call *call, int reason);
void qn_svc_admin_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct admin_rpc *a = qn_call_data(call);
    if (a != NULL)
        admin_free(a);
}

static bool check_name(struct admin_rpc *a, const char *s, const char *what, bool allow_empty)
{
    char why[200];
    if (!qn_name_problem(s, what, allow_empty, why, sizeof why))
        return true;
    admin_finish(a, QN_GRPC_INVALID_ARGUMENT, why);
    return false;
}

static uint32_t list_limit(uint32_t limit)
{
    return limit == 0 ? LIST_DEFAULT : limit > LIST_MAX ? LIST_MAX : limit;
}

/* ---------------------------------------------------------------- options */

static bool in_range(uint32_t v, uint32_t lo, uint32_t hi)
{
    return v >= lo && v <= hi;
}

/* Proto options -> storage options; false with a message when out of range. */
static bool options_in(const Queen__V1__QueueOptions *o, struct qn_queue_options *out, char *why,
                       size_t cap)
{
    memset(out, 0, sizeof *out);
    if (o == NULL)
        return true;
#define U32OPT(field, bit, lo, hi)                                                                 \
    if (o->_##field##_case) {                                                                      \
        if (!in_range(o->field, (uint32_t)(lo), (uint32_t)(hi))) {                                \
            snprintf(why, cap, "options." #field " %u is outside %u..%u", o->field,              \
                     (unsigned)(lo), (unsigned)(hi));                                              \
            return false;                                                                          \
        }                                                                                          \
        out->field = (int32_t)o->field;                                                            \
        out->set |= 1u << (bit);                                                                   \
    }
#define BOOLOPT(field, bit)                                                                        \
    if (o->_##field##_case) {                                                                      \
        out->field = o->field != 0;                                                                \
        out->set |= 1u << (bit);                                                                   \
    }
    U32OPT(lease_time, QN_OPT_LEASE_TIME, 1, 86400);
    U32OPT(retry_limit, QN_OPT_RETRY_LIMIT, 0, 1000000);
    U32OPT(retry_delay, QN_OPT_RETRY_DELAY, 0, 86400000);
    U32OPT(max_size, QN_OPT_MAX_SIZE, 0, INT32_MAX);
    U32OPT(ttl, QN_OPT_TTL, 0, INT32_MAX);
    BOOLOPT(dead_letter_queue, QN_OPT_DEAD_LETTER_QUEUE);
    BOOLOPT(dlq_after_max_retries, QN_OPT_DLQ_AFTER_MAX_RETRIES);
    U32OPT(delayed_processing, QN_OPT_DELAYED_PROCESSING, 0, 31536000);
    U32OPT(window_buffer, QN_OPT_WINDOW_BUFFER, 0, 86400);
    U32OPT(retention_seconds, QN_OPT_RETENTION_SECONDS, 0, INT32_MAX);
    U32OPT(completed_retention_seconds, QN_OPT_COMPLETED_RETENTION_SECONDS, 0, INT32_MAX);
    BOOLOPT(retention_enabled, QN_OPT_RETENTION_ENABLED);
    BOOLOPT(encryption_enabled, QN_OPT_ENCRYPTION_ENABLED);
    U32OPT(max_wait_time_seconds, QN_OPT_MAX_WAIT_TIME_SECONDS, 0, INT32_MAX);
    U32OPT(min_pop_wait_time, QN_OPT_MIN_POP_WAIT_TIME, 0, 60000);
    U32OPT(dedup_window_seconds, QN_OPT_DEDUP_WINDOW_SECONDS, 0, 31536000);
#undef U32OPT
#undef BOOLOPT
    if (o->_priority_case) {
        out->priority = o->priority;
        out->set |= 1u << QN_OPT_PRIORITY;
    }
    if (o->_namespace_case) {
        if (qn_name_problem(o->namespace_, "options.namespace", true, why, cap))
            return false;
        out->namespace_ = o->namespace_;
        out->set |= 1u << QN_OPT_NAMESPACE;
    }
    if (o->_task_case) {
        if (qn_name_problem(o->task, "options.task", true, why, cap))
            return false;
        out->task = o->task;
        out->set |= 1u << QN_OPT_TASK;
    }
    return true;
}

/* Storage queue row -> QueueInfo in the arena (every option set). */
static Queen__V1__QueueInfo *queue_out(struct qn_arena *ar, const struct qn_queue_info *q)
{
    Queen__V1__QueueInfo *qi = qn_arena_alloc(ar, sizeof *qi);
    Queen__V1__QueueOptions *o = qn_arena_alloc(ar, sizeof *o);
    char *id = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    if (qi == NULL || o == NULL || id == NULL)
        return NULL;
    queen__v1__queue_info__init(qi);
    queen__v1__queue_options__init(o);
    const struct qn_queue_options *s = &q->options;
#define SETU(field, Case)                                                                          \
    o->_##field##_case = QUEEN__V1__QUEUE_OPTIONS___##Case##_##Case;                               \
    o->field = (uint32_t)(s->field < 0 ? 0 : s->field);
#define SETB(field, Case)                                                                          \
    o->_##field##_case = QUEEN__V1__QUEUE_OPTIONS___##Case##_##Case;                               \
    o->field = s->field;
    SETU(lease_time, LEASE_TIME);
    SETU(retry_limit, RETRY_LIMIT);
    SETU(retry_delay, RETRY_DELAY);
    SETU(max_size, MAX_SIZE);
    SETU(ttl, TTL);
    SETB(dead_letter_queue, DEAD_LETTER_QUEUE);
    SETB(dlq_after_max_retries, DLQ_AFTER_MAX_RETRIES);
    SETU(delayed_processing, DELAYED_PROCESSING);
    SETU(window_buffer, WINDOW_BUFFER);
    SETU(retention_seconds, RETENTION_SECONDS);
    SETU(completed_retention_seconds, COMPLETED_RETENTION_SECONDS);
    SETB(retention_enabled, RETENTION_ENABLED);
    SETB(encryption_enabled, ENCRYPTION_ENABLED);
    SETU(max_wait_time_seconds, MAX_WAIT_TIME_SECONDS);
    SETU(min_pop_wait_time, MIN_POP_WAIT_TIME);
    SETU(dedup_window_seconds, DEDUP_WINDOW_SECONDS);
#undef SETU
#undef SETB
    o->_priority_case = QUEEN__V1__QUEUE_OPTIONS___PRIORITY_PRIORITY;
    o->priority = s->priority;
    o->_namespace_case = QUEEN__V1__QUEUE_OPTIONS___NAMESPACE_NAMESPACE;
    o->namespace_ = qn_arena_strndup(ar, s->namespace_ ? s->namespace_ : "",
                                     s->namespace_ ? strlen(s->namespace_) : 0);
    o->_task_case = QUEEN__V1__QUEUE_OPTIONS___TASK_TASK;
    o->task = qn_arena_strndup(ar, s->task ? s->task : "", s->task ? strlen(s->task) : 0);
    qi->queue = qn_arena_strndup(ar, q->name ? q->name : "", q->name ? strlen(q->name) : 0);
    if (o->namespace_ == NULL || o->task == NULL || qi->queue == NULL)
        return NULL;
    qn_uuid_format(q->id, id);
    qi->queue_id = id;
    qi->options = o;
    qi->created_at_us = q->created_at_us;
    qi->partitions = q->partitions < 0 ? 0 : (uint32_t)q->partitions;
    qi->segments = q->segments;
    qi->messages = q->messages;
    qi->storage = "segments";
    return qi;
}

/* ---------------------------------------------------------------- ConfigureQueue */

static void configure_done(void *ud, const struct qn_store_status *st,
                           const struct qn_queues_result *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    if (r->n != 1) {
        admin_finish(a, QN_GRPC_INTERNAL, "the database returned no queue row");
        return;
    }
    Queen__V1__ConfigureQueueResponse resp = QUEEN__V1__CONFIGURE_QUEUE_RESPONSE__INIT;
    resp.queue = queue_out(&a->arena, &r->queues[0]);
    resp.created = r->created;
    if (resp.queue == NULL) {
        admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    admin_reply(a, &resp.base);
}

static void svc_configure(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__ConfigureQueueRequest *req = (Queen__V1__ConfigureQueueRequest *)msg;
    if (!check_name(a, req->queue, "queue", false))
        return;
    struct qn_queue_options o;
    char why[200];
    if (!options_in(req->options, &o, why, sizeof why)) {
        admin_finish(a, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_configure_queue(a->app->store, req->queue, &o, req->replace, &opts,
                                     configure_done, a, &a->sreq[0]));
}

/* ---------------------------------------------------------------- GetQueue */

static void getq_step(struct admin_rpc *a)
{
    if (--a->pending > 0)
        return;
    if (a->fail != QN_GRPC_OK) {
        admin_finish(a, a->fail, a->failmsg);
        return;
    }
    if (!a->qfound) {
        admin_finish(a, QN_GRPC_NOT_FOUND, "queue not found");
        return;
    }
    Queen__V1__GetQueueResponse resp = QUEEN__V1__GET_QUEUE_RESPONSE__INIT;
    resp.queue = a->qinfo;
    resp.partitions = a->parts;
    resp.n_partitions = a->nparts;
    resp.depth = a->depth;
    admin_reply(a, &resp.base);
}

static void getq_fail(struct admin_rpc *a, const struct qn_store_status *st)
{
    if (a->fail == QN_GRPC_OK) {
        a->fail = qn_grpc_from_store(st->code);
        snprintf(a->failmsg, sizeof a->failmsg, "%s",
                 st->message && *st->message ? st->message : qn_strerror(st->code));
    }
}

static void getq_info_done(void *ud, const struct qn_store_status *st,
                           const struct qn_queues_result *r)
{
    struct admin_rpc *a = ud;
    a->sreq[0] = NULL;
    if (st->code != QN_OK) {
        getq_fail(a, st);
    } else if (r->n > 0) {
        a->qfound = true;
        a->qinfo = queue_out(&a->arena, &r->queues[0]);
        if (a->qinfo == NULL) {
            a->fail = QN_GRPC_RESOURCE_EXHAUSTED;
            snprintf(a->failmsg, sizeof a->failmsg, "out of memory");
        }
    }
    getq_step(a);
}

static void getq_parts_done(void *ud, const struct qn_store_status *st,
                            const struct qn_partitions_result *r)
{
    struct admin_rpc *a = ud;
    a->sreq[1] = NULL;
    if (st->code != QN_OK) {
        getq_fail(a, st);
        getq_step(a);
        return;
    }
    a->parts = qn_arena_alloc(&a->arena, (r->n ? r->n : 1) * sizeof *a->parts);
    for (size_t i = 0; a->parts && i < r->n; i++) {
        const struct qn_partition_info *p = &r->parts[i];
        Queen__V1__PartitionInfo *pi = qn_arena_alloc(&a->arena, sizeof *pi);
        char *pid = qn_arena_alloc(&a->arena, QN_UUID_STR_LEN);
        char *name = qn_arena_strndup(&a->arena, p->partition, strlen(p->partition));
        if (pi == NULL || pid == NULL || name == NULL) {
            a->parts = NULL;
            break;
        }
        queen__v1__partition_info__init(pi);
        qn_uuid_format(p->pid, pid);
        pi->partition = name;
        pi->partition_id = pid;
        pi->last_offset = p->last_offset;
        pi->log_start = p->log_start;
        pi->committed = p->committed;
        pi->depth = p->depth;
        pi->leased = p->leased;
        pi->last_write_at_us = p->last_write_at_us;
        a->depth += p->depth;
        a->parts[a->nparts++] = pi;
    }
    if (a->parts == NULL) {
        a->fail = QN_GRPC_RESOURCE_EXHAUSTED;
        snprintf(a->failmsg, sizeof a->failmsg, "out of memory");
    }
    getq_step(a);
}

static void svc_get_queue(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__GetQueueRequest *req = (Queen__V1__GetQueueRequest *)msg;
    if (!check_name(a, req->queue, "queue", false) ||
        !check_name(a, req->consumer_group, "consumer_group", true))
        return;
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    int rc = qn_store_get_queue(a->app->store, req->queue, &opts, getq_info_done, a, &a->sreq[0]);
    if (!sent(a, rc))
        return;
    a->pending = 2;
    rc = qn_store_queue_partitions(a->app->store, req->queue,
                                   qn_or_default(req->consumer_group, QN_QUEUE_MODE), &opts,
                                   getq_parts_done, a, &a->sreq[1]);
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        a->sreq[1] = NULL;
        getq_fail(a, &st);
        a->pending--; /* getq_info_done will finish */
    }
}

/* ---------------------------------------------------------------- ListQueues */

static void listq_done(void *ud, const struct qn_store_status *st,
                       const struct qn_queues_result *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    Queen__V1__ListQueuesResponse resp = QUEEN__V1__LIST_QUEUES_RESPONSE__INIT;
    resp.queues = qn_arena_alloc(&a->arena, (r->n ? r->n : 1) * sizeof *resp.queues);
    for (size_t i = 0; resp.queues && i < r->n; i++) {
        resp.queues[i] = queue_out(&a->arena, &r->queues[i]);
        if (resp.queues[i] == NULL) {
            resp.queues = NULL;
            break;
        }
        resp.n_queues++;
    }
    if (resp.queues == NULL) {
        admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    admin_reply(a, &resp.base);
}

static void svc_list_queues(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__ListQueuesRequest *req = (Queen__V1__ListQueuesRequest *)msg;
    if (!check_name(a, req->namespace_, "namespace", true) ||
        !check_name(a, req->task, "task", true))
        return;
    if (req->offset > INT32_MAX) {
        admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "offset is too large");
        return;
    }
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_list_queues(a->app->store, req->namespace_, req->task,
                                 (int32_t)list_limit(req->limit), (int32_t)req->offset, &opts,
                                 listq_done, a, &a->sreq[0]));
}

/* ---------------------------------------------------------------- DeleteQueue */

/*
 * A large queue is emptied first, partition by partition, with the retention
 * and sidecar-purge steps (each its own short transaction of at most
 * DELQ_BATCH rows, under the statement timeout, holding one partition lock), so
 * no single statement has to delete millions of segments. delete_queue_v1 then
 * removes what is left (cursors, dead letters, the rows) in one transaction.
 * Interrupted (deadline, broker gone), the queue stays with its oldest segments
 * gone, exactly as retention would have left it; DeleteQueue again finishes it.
 */
#define DELQ_BATCH 2000

static void delq_next(struct admin_rpc *a);

static void delq_done(void *ud, const struct qn_store_status *st, bool existed)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    if (existed)
        QN_INFO("queue deleted queue=%s partitions_emptied=%zu steps=%zu",
                ((Queen__V1__DeleteQueueRequest *)a->req)->queue, a->del_n, a->del_steps);
    Queen__V1__DeleteQueueResponse resp = QUEEN__V1__DELETE_QUEUE_RESPONSE__INIT;
    resp.existed = existed;
    admin_reply(a, &resp.base);
}

static void delq_step_done(void *ud, const struct qn_store_status *st,
                           const struct qn_maint_step *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    a->del_steps++;
    if (r->done)
        a->del_phase++; /* segments done -> sidecar; sidecar done -> next partition */
    delq_next(a);
}

/* The next bounded step, or the final delete once every partition is empty. */
static void delq_next(struct admin_rpc *a)
{
    Queen__V1__DeleteQueueRequest *req = (Queen__V1__DeleteQueueRequest *)a->req;
    struct qn_call_opts opts = {qn_call_deadline_ms(a->call), NULL};
    if (a->del_phase >= 2) {
        a->del_phase = 0;
        a->del_next++;
    }
    if (a->del_next >= a->del_n) {
        sent(a, qn_store_delete_queue(a->app->store, req->queue, &opts, delq_done, a,
                                      &a->sreq[0]));
        return;
    }
    const uint8_t *pid = a->del_pids + 16 * a->del_next;
    if (a->del_phase == 0)
        sent(a, qn_store_retention_step(a->app->store, pid, INT64_MAX, QN_STORE_NO_TS,
                                        DELQ_BATCH, &opts, delq_step_done, a, &a->sreq[0]));
    else
        sent(a, qn_store_txns_purge_step(a->app->store, pid, INT64_MAX, DELQ_BATCH, &opts,
                                         delq_step_done, a, &a->sreq[0]));
}

static void delq_parts_done(void *ud, const struct qn_store_status *st,
                            const struct qn_partitions_result *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    /* only partitions holding enough to matter are emptied step by step */
    a->del_pids = qn_arena_alloc(&a->arena, (r->n ? r->n : 1) * 16);
    if (a->del_pids == NULL) {
        admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < r->n; i++)
        if (r->parts[i].last_offset - r->parts[i].log_start + 1 > DELQ_BATCH)
            memcpy(a->del_pids + 16 * a->del_n++, r->parts[i].pid, 16);
    delq_next(a);
}

static void svc_delete_queue(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__DeleteQueueRequest *req = (Queen__V1__DeleteQueueRequest *)msg;
    if (!check_name(a, req->queue, "queue", false))
        return;
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_queue_partitions(a->app->store, req->queue, QN_QUEUE_MODE, &opts,
                                      delq_parts_done, a, &a->sreq[0]));
}

/* ---------------------------------------------------------------- consumer groups */

static Queen__V1__SubscriptionMode mode_out(const char *m)
{
    if (m && strcmp(m, "new") == 0)
        return QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_NEW;
    if (m && strcmp(m, "timestamp") == 0)
        return QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_FROM_TIMESTAMP;
    return QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_ALL;
}

static void groups_done(void *ud, const struct qn_store_status *st,
                        const struct qn_groups_result *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    struct qn_arena *ar = &a->arena;
    Queen__V1__ListConsumerGroupsResponse resp = QUEEN__V1__LIST_CONSUMER_GROUPS_RESPONSE__INIT;
    Queen__V1__ConsumerGroupInfo **groups = qn_arena_alloc(ar, (r->n ? r->n : 1) * sizeof *groups);
    Queen__V1__ConsumerGroupPartition **parts =
        qn_arena_alloc(ar, (r->n ? r->n : 1) * sizeof *parts);
    if (groups == NULL || parts == NULL)
        goto oom;
    /* rows arrive grouped by (group, queue); each run becomes one group entry */
    Queen__V1__ConsumerGroupInfo *cur = NULL;
    for (size_t i = 0; i < r->n; i++) {
        const struct qn_group_row *row = &r->rows[i];
        if (cur == NULL || strcmp(cur->consumer_group, row->group) != 0 ||
            strcmp(cur->queue, row->queue) != 0) {
            cur = qn_arena_alloc(ar, sizeof *cur);
            if (cur == NULL)
                goto oom;
            queen__v1__consumer_group_info__init(cur);
            cur->consumer_group = qn_arena_strndup(ar, row->group, strlen(row->group));
            cur->queue = qn_arena_strndup(ar, row->queue, strlen(row->queue));
            if (cur->consumer_group == NULL || cur->queue == NULL)
                goto oom;
            cur->subscription_mode = mode_out(row->sub_mode);
            cur->subscription_from_us = row->sub_from_us;
            cur->partitions = parts + i;
            cur->state = QUEEN__V1__GROUP_STATE__GROUP_STATE_STABLE;
            groups[resp.n_groups++] = cur;
        }
        if (row->partition == NULL || row->partition[0] == '\0')
            continue; /* a group registered on a queue without partitions yet */
        Queen__V1__ConsumerGroupPartition *p = qn_arena_alloc(ar, sizeof *p);
        char *pid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
        if (p == NULL || pid == NULL)
            goto oom;
        queen__v1__consumer_group_partition__init(p);
        qn_uuid_format(row->pid, pid);
        p->partition = qn_arena_strndup(ar, row->partition, strlen(row->partition));
        p->partition_id = pid;
        p->committed = row->committed;
        p->last_offset = row->last_offset;
        p->lag = row->lag;
        p->time_lag_seconds = row->time_lag_seconds;
        p->leased = row->leased;
        p->lease_id = qn_arena_strndup(ar, row->worker ? row->worker : "",
                                       row->worker ? strlen(row->worker) : 0);
        p->total_consumed = row->total_consumed;
        p->retry_count = row->retry_count < 0 ? 0 : (uint32_t)row->retry_count;
        p->attempt_count = row->attempt_count < 0 ? 0 : (uint32_t)row->attempt_count;
        if (p->partition == NULL || p->lease_id == NULL)
            goto oom;
        cur->partitions[cur->n_partitions++] = p;
        cur->total_lag += row->lag;
        if (row->time_lag_seconds > cur->max_time_lag_seconds)
            cur->max_time_lag_seconds = row->time_lag_seconds;
        if (cur->max_time_lag_seconds > 300)
            cur->state = QUEEN__V1__GROUP_STATE__GROUP_STATE_LAGGING;
    }
    resp.groups = groups;
    admin_reply(a, &resp.base);
    return;
oom:
    admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

static void svc_list_groups(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__ListConsumerGroupsRequest *req = (Queen__V1__ListConsumerGroupsRequest *)msg;
    if (!check_name(a, req->queue, "queue", true) ||
        !check_name(a, req->consumer_group, "consumer_group", true))
        return;
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_list_consumer_groups(a->app->store, req->queue, req->consumer_group, &opts,
                                          groups_done, a, &a->sreq[0]));
}

static void seek_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    Queen__V1__SeekConsumerGroupResponse resp = QUEEN__V1__SEEK_CONSUMER_GROUP_RESPONSE__INIT;
    resp.partitions_updated = value < 0 ? 0 : (uint32_t)value;
    admin_reply(a, &resp.base);
}

static void svc_seek(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__SeekConsumerGroupRequest *req = (Queen__V1__SeekConsumerGroupRequest *)msg;
    if (!check_name(a, req->consumer_group, "consumer_group", true) ||
        !check_name(a, req->queue, "queue", false) ||
        !check_name(a, req->partition, "partition", true))
        return;
    bool to_end = false;
    int64_t ts = 0;
    if (req->target_case == QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__TARGET_TO_END && req->to_end) {
        to_end = true;
    } else if (req->target_case == QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__TARGET_TO_TIMESTAMP_US) {
        ts = req->to_timestamp_us;
    } else {
        admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "set to_end or to_timestamp_us");
        return;
    }
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_seek_consumer_group(a->app->store,
                                         qn_or_default(req->consumer_group, QN_QUEUE_MODE),
                                         req->queue, req->partition, to_end, ts, &opts, seek_done,
                                         a, &a->sreq[0]));
}

static void delgroup_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    Queen__V1__DeleteConsumerGroupResponse resp = QUEEN__V1__DELETE_CONSUMER_GROUP_RESPONSE__INIT;
    resp.partitions_deleted = value < 0 ? 0 : (uint32_t)value;
    admin_reply(a, &resp.base);
}

static void svc_delete_group(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__DeleteConsumerGroupRequest *req = (Queen__V1__DeleteConsumerGroupRequest *)msg;
    if (!check_name(a, req->consumer_group, "consumer_group", false) ||
        !check_name(a, req->queue, "queue", true))
        return;
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_delete_consumer_group(a->app->store, req->consumer_group, req->queue,
                                           req->delete_metadata, &opts, delgroup_done, a,
                                           &a->sreq[0]));
}

/* ---------------------------------------------------------------- dead letters */

static Queen__V1__DeadLetter *dlq_out(struct qn_arena *ar, const struct qn_dlq_row *d)
{
    Queen__V1__DeadLetter *x = qn_arena_alloc(ar, sizeof *x);
    char *id = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    char *pid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    char *mid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    if (!x || !id || !pid || !mid)
        return NULL;
    queen__v1__dead_letter__init(x);
    qn_uuid_format(d->id, id);
    qn_uuid_format(d->pid, pid);
    qn_uuid_format(d->message_id, mid);
    x->id = id;
    x->partition_id = pid;
    x->message_id = mid;
#define DUP(dst, s) dst = qn_arena_strndup(ar, (s) ? (s) : "", (s) ? strlen(s) : 0)
    DUP(x->queue, d->queue);
    DUP(x->partition, d->partition);
    DUP(x->consumer_group, d->group);
    DUP(x->transaction_id, d->txn);
    DUP(x->error, d->error);
#undef DUP
    if (!x->queue || !x->partition || !x->consumer_group || !x->transaction_id || !x->error)
        return NULL;
    if (d->payload_len > 0) {
        uint8_t *p = qn_arena_alloc(ar, d->payload_len);
        if (p == NULL)
            return NULL;
        memcpy(p, d->payload, d->payload_len);
        x->payload.data = p;
        x->payload.len = d->payload_len;
    }
    x->offset = d->offset;
    x->retry_count = d->retry_count < 0 ? 0 : (uint32_t)d->retry_count;
    x->failed_at_us = d->failed_at_us;
    return x;
}

static void listdlq_done(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    Queen__V1__ListDeadLettersResponse resp = QUEEN__V1__LIST_DEAD_LETTERS_RESPONSE__INIT;
    resp.dead_letters = qn_arena_alloc(&a->arena, (r->n ? r->n : 1) * sizeof *resp.dead_letters);
    for (size_t i = 0; resp.dead_letters && i < r->n; i++) {
        Queen__V1__DeadLetter *d = dlq_out(&a->arena, &r->rows[i]);
        if (d == NULL) {
            resp.dead_letters = NULL;
            break;
        }
        resp.dead_letters[resp.n_dead_letters++] = d;
    }
    if (resp.dead_letters == NULL) {
        admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    admin_reply(a, &resp.base);
}

static void svc_list_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__ListDeadLettersRequest *req = (Queen__V1__ListDeadLettersRequest *)msg;
    if (!check_name(a, req->queue, "queue", true) ||
        !check_name(a, req->consumer_group, "consumer_group", true) ||
        !check_name(a, req->partition, "partition", true))
        return;
    if (req->offset > INT32_MAX) {
        admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "offset is too large");
        return;
    }
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_list_dlq(a->app->store, req->queue, req->consumer_group, req->partition,
                              (int32_t)list_limit(req->limit), (int32_t)req->offset, &opts,
                              listdlq_done, a, &a->sreq[0]));
}

static void deldlq_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    if (value == 0) {
        admin_finish(a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    Queen__V1__DeleteDeadLetterResponse resp = QUEEN__V1__DELETE_DEAD_LETTER_RESPONSE__INIT;
    resp.deleted = (uint32_t)value;
    admin_reply(a, &resp.base);
}

static void svc_delete_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__DeleteDeadLetterRequest *req = (Queen__V1__DeleteDeadLetterRequest *)msg;
    uint8_t id[16], pid[16];
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    if (req->target_case == QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ID) {
        if (!qn_parse_uuid_str(req->id, id)) {
            admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "id is not a UUID");
            return;
        }
        sent(a, qn_store_delete_dlq(a->app->store, id, NULL, NULL, &opts, deldlq_done, a,
                                    &a->sreq[0]));
    } else if (req->target_case == QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ADDRESS &&
               req->address != NULL) {
        if (!qn_parse_uuid_str(req->address->partition_id, pid)) {
            admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "address.partition_id is not a UUID");
            return;
        }
        if (req->address->transaction_id == NULL || *req->address->transaction_id == '\0') {
            admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "address.transaction_id is required");
            return;
        }
        sent(a, qn_store_delete_dlq(a->app->store, NULL, pid, req->address->transaction_id,
                                    &opts, deldlq_done, a, &a->sreq[0]));
    } else {
        admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "set id or address");
    }
}

/* Replay: get the dead letter, then push + delete in one transaction. */
static void replay_committed(void *ud, const struct qn_store_status *st,
                             const struct qn_txn_result *r)
{
    struct admin_rpc *a = ud;
    a->sreq[0] = NULL;
    Queen__V1__ReplayDeadLetterResponse resp = QUEEN__V1__REPLAY_DEAD_LETTER_RESPONSE__INIT;
    Queen__V1__PushResult pr = QUEEN__V1__PUSH_RESULT__INIT;
    char mid[QN_UUID_STR_LEN] = "", pid[QN_UUID_STR_LEN] = "";
    pr.queue = a->queue;
    pr.partition = a->partition;
    pr.transaction_id = a->dlq_txn;
    resp.replayed_as = &pr;
    if (st->code == QN_EDUPLICATE) {
        /* replayed before inside the dedup window: report it, keep the row */
        pr.status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE;
        pr.message_id = mid;
        pr.partition_id = pid;
        pr.offset = -1;
        admin_reply(a, &resp.base);
        return;
    }
    if (st->code != QN_OK) {
        admin_store_error(a, st);
        return;
    }
    const struct qn_push_result *p = r->n > 0 ? r->steps[0].push : NULL;
    if (p == NULL || p->n != 1) {
        admin_finish(a, QN_GRPC_INTERNAL, "the database returned no push result");
        return;
    }
    qn_uuid_format(a->msgid, mid);
    qn_uuid_format(p->segs[0].pid, pid);
    pr.status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED;
    pr.message_id = mid;
    pr.partition_id = pid;
    pr.offset = p->segs[0].base;
    resp.dead_letter_removed = r->n > 1 && r->steps[1].value > 0;
    a->app->pushed++;
    qn_services_committed(a->app, a->queue, a->partition);
    admin_reply(a, &resp.base);
}

static void replay_got(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    if (r->n == 0) {
        admin_finish(a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    const struct qn_dlq_row *d = &r->rows[0];
    Queen__V1__ReplayDeadLetterRequest *req = (Queen__V1__ReplayDeadLetterRequest *)a->req;
    snprintf(a->queue, sizeof a->queue, "%s", req->queue && *req->queue ? req->queue : d->queue);
    snprintf(a->partition, sizeof a->partition, "%s",
             req->partition && *req->partition ? req->partition
             : req->queue && *req->queue      ? QN_DEFAULT_PARTITION
                                              : d->partition);
    char idtext[QN_UUID_STR_LEN];
    qn_uuid_format(a->dlq_id, idtext);
    snprintf(a->dlq_txn, sizeof a->dlq_txn, "dlq:%s", idtext);
    qn_app_new_id(a->app, a->msgid);
    struct qn_frame f;
    memset(&f, 0, sizeof f);
    memcpy(f.message_id, a->msgid, 16);
    f.txn = (const uint8_t *)a->dlq_txn;
    f.txn_len = strlen(a->dlq_txn);
    f.payload = d->payload;
    f.payload_len = d->payload_len;
    qn_txn_hash(f.txn, f.txn_len, a->hash);
    int rc = qn_segment_pack(a->app->zctx, &f, 1, (int)a->app->cfg->zstd_level, &a->blob, NULL);
    qn_store_txn *t = NULL;
    if (rc == QN_OK)
        rc = qn_store_txn_new(a->app->store, &t);
    if (rc == QN_OK) {
        struct qn_push_segment seg = {.queue = a->queue, .partition = a->partition, .count = 1,
                                      .hashes = a->hash, .verified = -1, .blob = a->blob.data,
                                      .blob_len = a->blob.len};
        rc = qn_store_txn_push(t, &seg, 1);
    }
    if (rc == QN_OK)
        rc = qn_store_txn_delete_dlq(t, a->dlq_id);
    if (rc == QN_OK) {
        struct qn_call_opts opts = {qn_call_deadline_ms(a->call), NULL};
        rc = qn_store_txn_commit(t, &opts, replay_committed, a, &a->sreq[0]);
        t = NULL;
    }
    if (rc != QN_OK) {
        qn_store_txn_abandon(t);
        sent(a, rc);
    }
}

static void svc_replay_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__ReplayDeadLetterRequest *req = (Queen__V1__ReplayDeadLetterRequest *)msg;
    if (!qn_parse_uuid_str(req->id, a->dlq_id)) {
        admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "id is not a UUID");
        return;
    }
    if (!check_name(a, req->queue, "queue", true) ||
        !check_name(a, req->partition, "partition", true))
        return;
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_get_dlq(a->app->store, a->dlq_id, &opts, replay_got, a, &a->sreq[0]));
}

/* ---------------------------------------------------------------- GetStats */

static void stats_done(void *ud, const struct qn_store_status *st, const struct qn_stats_result *r)
{
    struct admin_rpc *a = ud;
    if (!admin_ok(a, st))
        return;
    Queen__V1__GetStatsResponse resp = QUEEN__V1__GET_STATS_RESPONSE__INIT;
    resp.queues = qn_arena_alloc(&a->arena, (r->n ? r->n : 1) * sizeof *resp.queues);
    for (size_t i = 0; resp.queues && i < r->n; i++) {
        const struct qn_stats_row *row = &r->rows[i];
        Queen__V1__QueueStats *q = qn_arena_alloc(&a->arena, sizeof *q);
        if (q == NULL) {
            resp.queues = NULL;
            break;
        }
        queen__v1__queue_stats__init(q);
        q->queue = qn_arena_strndup(&a->arena, row->queue, strlen(row->queue));
        q->partitions = row->partitions < 0 ? 0 : (uint32_t)row->partitions;
        q->messages = row->messages;
        q->segments = row->segments;
        q->pending = row->pending;
        q->dead_letters = row->dead_letters;
        q->consumer_groups = row->groups < 0 ? 0 : (uint32_t)row->groups;
        q->bytes = row->bytes;
        resp.total_messages += row->messages;
        resp.total_pending += row->pending;
        resp.total_dead_letters += row->dead_letters;
        resp.queues[resp.n_queues++] = q;
    }
    if (resp.queues == NULL) {
        admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    resp.uptime_seconds = (qn_store_now_ms() - a->app->started_ms) / 1000;
    resp.rpcs = (int64_t)a->app->rpcs;
    resp.pushed = (int64_t)a->app->pushed;
    resp.delivered = (int64_t)a->app->delivered;
    struct qn_fusion_stats fs;
    qn_fusion_stats(a->app->fusion, &fs);
    resp.push_commits = (int64_t)fs.flushes;
    resp.push_segments = (int64_t)fs.segments;
    if (a->app->dedup != NULL) {
        struct qn_dedup_stats ds;
        qn_dedup_stats(a->app->dedup, &ds);
        resp.dedup_partitions = (int64_t)ds.entries;
        resp.dedup_vouching = (int64_t)ds.vouching;
        resp.dedup_hashes = (int64_t)ds.hashes;
        resp.dedup_bytes = (int64_t)ds.bytes;
        resp.dedup_vouched = (int64_t)ds.vouched;
        resp.dedup_declined = (int64_t)ds.declined;
        resp.dedup_suppressed = (int64_t)ds.suppressed;
    }
    qn_maint *m = qn_maint_current();
    if (m != NULL) {
        struct qn_maint_stats ms;
        qn_maint_get_stats(m, &ms);
        resp.maint_cycles = (int64_t)ms.cycles_run;
        resp.maint_skipped = (int64_t)ms.cycles_skipped;
        resp.maint_segments_deleted =
            (int64_t)(ms.deleted[QN_MAINT_RETENTION] + ms.deleted[QN_MAINT_MAX_WAIT]);
        resp.maint_txns_purged = (int64_t)ms.deleted[QN_MAINT_TXNS_PURGE];
        resp.maint_partitions_deleted = (int64_t)ms.deleted[QN_MAINT_CLEANUP];
    }
    admin_reply(a, &resp.base);
}

static void svc_stats(qn_call *call, ProtobufCMessage *msg)
{
    struct admin_rpc *a = admin_new(call, msg);
    if (a == NULL)
        return;
    Queen__V1__GetStatsRequest *req = (Queen__V1__GetStatsRequest *)msg;
    if (!check_name(a, req->queue, "queue", true))
        return;
    struct qn_call_opts opts = {qn_call_deadline_ms(call), NULL};
    sent(a, qn_store_stats(a->app->store, req->queue, &opts, stats_done, a, &a->sreq[0]));
}

/* ---------------------------------------------------------------- registration */

#define ADMIN(p, Type, fn)                                                                         \
    {.path = "/queen.v1.AdminService/" p, .request = &queen__v1__##Type##__descriptor,            \
     .on_message = fn, .on_cancel = qn_svc_admin_cancel}

const struct qn_method qn_admin_methods[] = {
    ADMIN("ConfigureQueue", configure_queue_request, svc_configure),
    ADMIN("GetQueue", get_queue_request, svc_get_queue),
    ADMIN("ListQueues", list_queues_request, svc_list_queues),
    ADMIN("DeleteQueue", delete_queue_request, svc_delete_queue),
    ADMIN("ListConsumerGroups", list_consumer_groups_request, svc_list_groups),
    ADMIN("SeekConsumerGroup", seek_consumer_group_request, svc_seek),
    ADMIN("DeleteConsumerGroup", delete_consumer_group_request, svc_delete_group),
    ADMIN("ListDeadLetters", list_dead_letters_request, svc_list_dlq),
    ADMIN("DeleteDeadLetter", delete_dead_letter_request, svc_delete_dlq),
    ADMIN("ReplayDeadLetter", replay_dead_letter_request, svc_replay_dlq),
    ADMIN("GetStats", get_stats_request, svc_stats),
};
const size_t qn_admin_methods_count = sizeof qn_admin_methods / sizeof qn_admin_methods[0];
