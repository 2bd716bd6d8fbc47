/*
 * rpc/svc_queues.c - AdminService: ConfigureQueue, GetQueue, ListQueues and
 * DeleteQueue.
 *
 * Does: validate names and options (each option against its documented range);
 * check the admin grant on the queue (ListQueues: show only the queues the
 * grants cover); audit every change;
 * map queue and partition rows to QueueInfo / PartitionInfo; empty a large queue
 * partition by partition before the final delete (see DeleteQueue below).
 * Does not: decide anything about a queue's data (the procedures do).
 *
 * Invariant: every call either finishes with a response or is cancelled; its
 * qn_admin_call owns the request and every storage request it started.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "engine/maint_loop.h"
#include "log.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/v1/admin.pb-c.h"
#include "rpc/admin_call.h"
#include "rpc/authz.h"
#include "rpc/page_token.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

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
        if (!in_range(o->field, (uint32_t)(lo), (uint32_t)(hi))) {                                 \
            snprintf(why, cap, "options." #field " %u is outside %u..%u", o->field,                \
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
    struct qn_admin_call *a = ud;
    if (!qn_admin_ok(a, st))
        return;
    if (r->n != 1) {
        qn_admin_finish(a, QN_GRPC_INTERNAL, "the database returned no queue row");
        return;
    }
    Queen__V1__ConfigureQueueResponse resp = QUEEN__V1__CONFIGURE_QUEUE_RESPONSE__INIT;
    resp.queue = queue_out(&a->arena, &r->queues[0]);
    resp.created = r->created;
    if (resp.queue == NULL) {
        qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    qn_admin_reply(a, &resp.base);
}

void qn_svc_configure_queue(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_admin_call *a = qn_admin_new(call, msg, sizeof *a);
    if (a == NULL)
        return;
    Queen__V1__ConfigureQueueRequest *req = (Queen__V1__ConfigureQueueRequest *)msg;
    if (!qn_admin_check_name(a, req->queue, "queue", false))
        return;
    struct qn_queue_options o;
    char why[200];
    if (!options_in(req->options, &o, why, sizeof why)) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    if (!qn_admin_authorize(a, req->queue))
        return;
    qn_admin_audit(a, req->queue, req->replace ? "configure (replace)" : "configure");
    struct qn_call_opts opts = qn_admin_opts(a);
    qn_admin_sent(a, qn_store_configure_queue(a->app->store, req->queue, &o, req->replace, &opts,
                                              configure_done, a, &a->sreq[0]));
}

/* ---------------------------------------------------------------- GetQueue */

/* The queue row and a page of its partitions are read at once, then the
 * whole queue's depth (on the connection slot the page used); the answer waits
 * for all three. The page asks one row more than page_size: that row only says
 * another page follows. */
struct getq {
    struct qn_admin_call a; /* first: the admin helpers take &g->a */
    int pending;            /* reads not answered yet */
    Queen__V1__QueueInfo *qinfo;
    bool qfound;
    Queen__V1__PartitionInfo **parts;
    size_t nparts;
    uint32_t page_size;
    uint64_t binding; /* the page token's binding (kind, tenant, filters) */
    char *next_token; /* arena; "" on the last page */
    int64_t depth;
    enum qn_grpc_code fail; /* the first failure, if any */
    char failmsg[256];
};

static void getq_step(struct getq *a)
{
    if (--a->pending > 0)
        return;
    if (a->fail != QN_GRPC_OK) {
        qn_admin_finish(&a->a, a->fail, a->failmsg);
        return;
    }
    if (!a->qfound) {
        qn_admin_finish(&a->a, QN_GRPC_NOT_FOUND, "queue not found");
        return;
    }
    Queen__V1__GetQueueResponse resp = QUEEN__V1__GET_QUEUE_RESPONSE__INIT;
    resp.queue = a->qinfo;
    resp.partitions = a->parts;
    resp.n_partitions = a->nparts;
    resp.depth = a->depth;
    resp.next_page_token = a->next_token ? a->next_token : "";
    qn_admin_reply(&a->a, &resp.base);
}

static void getq_fail(struct getq *a, const struct qn_store_status *st)
{
    if (a->fail == QN_GRPC_OK) {
        a->fail = qn_grpc_from_status(st);
        snprintf(a->failmsg, sizeof a->failmsg, "%s", qn_status_message(st));
    }
}

static void getq_info_done(void *ud, const struct qn_store_status *st,
                           const struct qn_queues_result *r)
{
    struct getq *a = ud;
    a->a.sreq[0] = NULL;
    if (st->code != QN_OK) {
        getq_fail(a, st);
    } else if (r->n > 0) {
        a->qfound = true;
        a->qinfo = queue_out(&a->a.arena, &r->queues[0]);
        if (a->qinfo == NULL) {
            a->fail = QN_GRPC_RESOURCE_EXHAUSTED;
            snprintf(a->failmsg, sizeof a->failmsg, "out of memory");
        }
    }
    getq_step(a);
}

static void getq_depth_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct getq *a = ud;
    a->a.sreq[1] = NULL;
    if (st->code != QN_OK)
        getq_fail(a, st);
    else
        a->depth = value;
    getq_step(a);
}

/* The token naming the page after the partition called last. */
static char *getq_token(struct getq *a, const char *last)
{
    struct qn_page_key k;
    memset(&k, 0, sizeof k);
    char *tok = qn_arena_alloc(&a->a.arena, QN_PAGE_TOKEN_MAX + 1);
    if (tok != NULL && qn_page_key_set_text(&k, 0, last) != QN_OK)
        tok = NULL;
    if (tok != NULL && qn_page_token_encode(QN_PAGE_PARTITIONS, a->binding, &k, tok,
                                            QN_PAGE_TOKEN_MAX + 1) != QN_OK)
        tok = NULL;
    return tok;
}

static void getq_parts_done(void *ud, const struct qn_store_status *st,
                            const struct qn_partitions_result *r)
{
    struct getq *a = ud;
    a->a.sreq[1] = NULL;
    if (st->code != QN_OK) {
        getq_fail(a, st);
        a->pending--; /* the depth is not asked */
        getq_step(a);
        return;
    }
    size_t n = r->n > a->page_size ? a->page_size : r->n;
    a->parts = qn_arena_alloc(&a->a.arena, (n ? n : 1) * sizeof *a->parts);
    if (a->parts != NULL && r->n > n) {
        a->next_token = getq_token(a, r->parts[n - 1].partition);
        if (a->next_token == NULL)
            a->parts = NULL;
    }
    for (size_t i = 0; a->parts && i < n; i++) {
        const struct qn_partition_info *p = &r->parts[i];
        Queen__V1__PartitionInfo *pi = qn_arena_alloc(&a->a.arena, sizeof *pi);
        char *pid = qn_arena_alloc(&a->a.arena, QN_UUID_STR_LEN);
        char *name = qn_arena_strndup(&a->a.arena, p->partition, strlen(p->partition));
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
        a->parts[a->nparts++] = pi;
    }
    if (a->parts == NULL) {
        a->fail = QN_GRPC_RESOURCE_EXHAUSTED;
        snprintf(a->failmsg, sizeof a->failmsg, "out of memory");
    }
    if (a->fail == QN_GRPC_OK) {
        Queen__V1__GetQueueRequest *req = (Queen__V1__GetQueueRequest *)a->a.req;
        struct qn_call_opts opts = qn_admin_opts(&a->a);
        int rc = qn_store_queue_depth(a->a.app->store, req->queue,
                                      qn_or_default(req->consumer_group, QN_QUEUE_MODE), &opts,
                                      getq_depth_done, a, &a->a.sreq[1]);
        if (rc == QN_OK) {
            a->pending--; /* the page's; getq_depth_done steps the depth's */
            return;
        }
        struct qn_store_status fst = {rc, "", qn_strerror(rc)};
        a->a.sreq[1] = NULL;
        getq_fail(a, &fst);
    }
    a->pending--; /* the depth is not asked */
    getq_step(a);
}

void qn_svc_get_queue(qn_call *call, ProtobufCMessage *msg)
{
    struct getq *a = (struct getq *)qn_admin_new(call, msg, sizeof *a);
    if (a == NULL)
        return;
    Queen__V1__GetQueueRequest *req = (Queen__V1__GetQueueRequest *)msg;
    if (!qn_admin_check_name(&a->a, req->queue, "queue", false) ||
        !qn_admin_check_name(&a->a, req->consumer_group, "consumer_group", true) ||
        !qn_admin_authorize(&a->a, req->queue))
        return;
    struct qn_call_opts opts = qn_admin_opts(&a->a);
    const char *group = qn_or_default(req->consumer_group, QN_QUEUE_MODE);
    const char *filters[] = {req->queue, group};
    a->binding = qn_page_binding(QN_PAGE_PARTITIONS, opts.tenant, filters, 2);
    a->page_size = qn_page_size(req->page_size, 0);
    struct qn_page_key after;
    const char *why = NULL;
    bool has_after = req->page_token != NULL && req->page_token[0] != '\0';
    if (has_after && qn_page_token_decode(req->page_token, QN_PAGE_PARTITIONS, a->binding, 1,
                                          &after, &why) != QN_OK) {
        qn_admin_finish(&a->a, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    int rc =
        qn_store_get_queue(a->a.app->store, req->queue, &opts, getq_info_done, a, &a->a.sreq[0]);
    if (!qn_admin_sent(&a->a, rc))
        return;
    a->pending = 3;
    rc = qn_store_queue_partitions_page(a->a.app->store, req->queue, group,
                                        has_after ? after.text[0] : NULL, (int32_t)a->page_size + 1,
                                        &opts, getq_parts_done, a, &a->a.sreq[1]);
    if (rc != QN_OK) {
        struct qn_store_status st = {rc, "", qn_strerror(rc)};
        a->a.sreq[1] = NULL;
        getq_fail(a, &st);
        a->pending -= 2; /* neither the page nor the depth: getq_info_done will finish */
    }
}

/* ---------------------------------------------------------------- ListQueues */

/* ListQueues with the name filter of the caller's admin grants. It asks one
 * row more than the page: that row only says another page follows. */
struct listq {
    struct qn_admin_call a; /* first: the admin helpers take &l->a */
    struct qn_authz_names names;
    uint32_t page_size;
    uint64_t binding; /* the page token's binding (kind, tenant, filters) */
};

static void listq_done(void *ud, const struct qn_store_status *st, const struct qn_queues_result *r)
{
    struct qn_admin_call *a = ud;
    struct listq *l = ud;
    if (!qn_admin_ok(a, st))
        return;
    Queen__V1__ListQueuesResponse resp = QUEEN__V1__LIST_QUEUES_RESPONSE__INIT;
    size_t n = r->n > l->page_size ? l->page_size : r->n;
    resp.next_page_token = "";
    if (r->n > n) {
        struct qn_page_key k;
        memset(&k, 0, sizeof k);
        char *tok = qn_arena_alloc(&a->arena, QN_PAGE_TOKEN_MAX + 1);
        if (tok == NULL || qn_page_key_set_text(&k, 0, r->queues[n - 1].name) != QN_OK ||
            qn_page_token_encode(QN_PAGE_QUEUES, l->binding, &k, tok, QN_PAGE_TOKEN_MAX + 1) !=
                QN_OK) {
            qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        resp.next_page_token = tok;
    }
    resp.queues = qn_arena_alloc(&a->arena, (n ? n : 1) * sizeof *resp.queues);
    for (size_t i = 0; resp.queues && i < n; i++) {
        resp.queues[i] = queue_out(&a->arena, &r->queues[i]);
        if (resp.queues[i] == NULL) {
            resp.queues = NULL;
            break;
        }
        resp.n_queues++;
    }
    if (resp.queues == NULL) {
        qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    qn_admin_reply(a, &resp.base);
}

static void listq_cleanup(struct qn_admin_call *a)
{
    qn_authz_names_free(&((struct listq *)a)->names);
}

void qn_svc_list_queues(qn_call *call, ProtobufCMessage *msg)
{
    struct listq *l = (struct listq *)qn_admin_new(call, msg, sizeof *l);
    if (l == NULL)
        return;
    struct qn_admin_call *a = &l->a;
    a->cleanup = listq_cleanup;
    Queen__V1__ListQueuesRequest *req = (Queen__V1__ListQueuesRequest *)msg;
    if (!qn_admin_check_name(a, req->namespace_, "namespace", true) ||
        !qn_admin_check_name(a, req->task, "task", true))
        return;
    if (req->offset > INT32_MAX) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "offset is too large");
        return;
    }
    bool has_after = req->page_token != NULL && req->page_token[0] != '\0';
    if (has_after && req->offset > 0) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "offset cannot be combined with page_token");
        return;
    }
    struct qn_call_opts opts = qn_admin_opts(a);
    const char *filters[] = {req->namespace_, req->task};
    l->binding = qn_page_binding(QN_PAGE_QUEUES, opts.tenant, filters, 2);
    l->page_size = qn_page_size(req->page_size, req->limit);
    struct qn_page_key after;
    const char *why = NULL;
    if (has_after && qn_page_token_decode(req->page_token, QN_PAGE_QUEUES, l->binding, 1, &after,
                                          &why) != QN_OK) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    int all = qn_admin_reach(a, &l->names);
    if (all < 0)
        return;
    opts.names = all ? NULL : &l->names.f;
    int32_t ask = (int32_t)l->page_size + 1;
    if (req->offset > 0) /* legacy offset paging: the same order, so a token still follows */
        qn_admin_sent(a, qn_store_list_queues(a->app->store, req->namespace_, req->task, ask,
                                              (int32_t)req->offset, &opts, listq_done, a,
                                              &a->sreq[0]));
    else
        qn_admin_sent(a, qn_store_list_queues_page(a->app->store, req->namespace_, req->task,
                                                   has_after ? after.text[0] : NULL, ask, &opts,
                                                   listq_done, a, &a->sreq[0]));
}

/* ---------------------------------------------------------------- DeleteQueue */

/*
 * In committed steps (delete_queue_step_v1): the first moves the queue out of
 * sight of every name and id lookup (so pushes by name make a new queue and no
 * pop, listing or id-keyed push finds the old one); each next one deletes at
 * most DELQ_ROWS of its rows (segments, sidecar rows, dead letters, cursors,
 * then partitions a window at a time, then the queue row), so no transaction
 * holds millions of rows (a 60M-message queue hit the statement timeout and
 * stayed whole). Interrupted (deadline, broker gone), the queue stays hidden
 * and the maintenance cycle deletes the rest, a step per cycle; DeleteQueue
 * again continues it.
 */
#define DELQ_ROWS 10000

struct delq {
    struct qn_admin_call a; /* first: the admin helpers take &q->a */
    size_t steps;
    bool existed;
};

static void delq_step(struct delq *q);

static void delq_step_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct delq *q = ud;
    if (!qn_admin_ok(&q->a, st))
        return;
    if (q->steps++ == 0)
        q->existed = value >= 0;
    if (value > 0) {
        delq_step(q);
        return;
    }
    if (q->existed)
        QN_INFO("queue deleted queue=%s steps=%zu",
                ((Queen__V1__DeleteQueueRequest *)q->a.req)->queue, q->steps);
    Queen__V1__DeleteQueueResponse resp = QUEEN__V1__DELETE_QUEUE_RESPONSE__INIT;
    resp.existed = q->existed;
    qn_admin_reply(&q->a, &resp.base);
}

static void delq_step(struct delq *q)
{
    Queen__V1__DeleteQueueRequest *req = (Queen__V1__DeleteQueueRequest *)q->a.req;
    struct qn_call_opts opts = qn_admin_opts(&q->a);
    qn_admin_sent(&q->a,
                  qn_store_delete_queue_step(q->a.app->store, req->queue, DELQ_ROWS, q->steps == 0,
                                             &opts, delq_step_done, q, &q->a.sreq[0]));
}

void qn_svc_delete_queue(qn_call *call, ProtobufCMessage *msg)
{
    struct delq *q = (struct delq *)qn_admin_new(call, msg, sizeof *q);
    if (q == NULL)
        return;
    Queen__V1__DeleteQueueRequest *req = (Queen__V1__DeleteQueueRequest *)msg;
    if (!qn_admin_check_name(&q->a, req->queue, "queue", false) ||
        !qn_admin_authorize(&q->a, req->queue))
        return;
    qn_admin_audit(&q->a, req->queue, "delete queue");
    delq_step(q);
}
