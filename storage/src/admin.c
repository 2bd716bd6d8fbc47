/*
 * admin.c - the admin procedures (queues, partitions, consumer groups, dead
 * letters, stats) and qn.notify_push_v1 (sql/008_configure.sql and
 * sql/009_admin.sql).
 *
 * Does: encode arguments (queue options as a JSONB text parameter holding only
 * the options that are set), decode typed rows; texts and payloads are borrowed
 * from the result.
 * Does not: validate option ranges (configure_queue_v1 raises QCONF, which comes
 * back as QN_EDB with its message), or page results itself.
 *
 * Invariants:
 *   1. Every decoded row comes from a result whose shape (columns, types, binary
 *      format) was checked first; NULL texts become "" and NULL numbers 0.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

static const char *const opt_names[QN_OPT_COUNT] = {"lease_time",
                                                    "retry_limit",
                                                    "retry_delay",
                                                    "max_size",
                                                    "ttl",
                                                    "dead_letter_queue",
                                                    "dlq_after_max_retries",
                                                    "delayed_processing",
                                                    "window_buffer",
                                                    "retention_seconds",
                                                    "completed_retention_seconds",
                                                    "retention_enabled",
                                                    "encryption_enabled",
                                                    "max_wait_time_seconds",
                                                    "min_pop_wait_time",
                                                    "dedup_window_seconds",
                                                    "priority",
                                                    "namespace",
                                                    "task"};

/* Appends s as a JSON string to b[*len..cap). false when it does not fit. */
static bool json_str(char *b, size_t cap, size_t *len, const char *s)
{
    size_t n = *len;
    if (n + 1 >= cap)
        return false;
    b[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (n + 7 >= cap)
            return false;
        if (*p == '"' || *p == '\\') {
            b[n++] = '\\';
            b[n++] = (char)*p;
        } else if (*p < 0x20) {
            n += (size_t)snprintf(b + n, cap - n, "\\u%04x", *p);
        } else {
            b[n++] = (char)*p;
        }
    }
    if (n + 1 >= cap)
        return false;
    b[n++] = '"';
    *len = n;
    return true;
}

/* The set options as a JSON object in the arena; NULL on ENOMEM / too long. */
static char *options_json(struct qn__arena *a, const struct qn_queue_options *o)
{
    size_t cap = 1024;
    if (o != NULL) {
        cap += o->namespace_ ? 6 * strlen(o->namespace_) : 0;
        cap += o->task ? 6 * strlen(o->task) : 0;
    }
    char *b = qn__arena_alloc(a, cap);
    if (b == NULL)
        return NULL;
    size_t n = 0;
    b[n++] = '{';
    bool first = true;
    for (int i = 0; o != NULL && i < QN_OPT_COUNT; i++) {
        if (!(o->set & (1u << i)))
            continue;
        int w = snprintf(b + n, cap - n, "%s\"%s\":", first ? "" : ",", opt_names[i]);
        if (w < 0 || (size_t)w >= cap - n)
            return NULL;
        n += (size_t)w;
        first = false;
        int32_t iv = 0;
        bool bv = false, is_bool = false;
        const char *sv = NULL;
        switch (i) {
        case QN_OPT_LEASE_TIME:
            iv = o->lease_time;
            break;
        case QN_OPT_RETRY_LIMIT:
            iv = o->retry_limit;
            break;
        case QN_OPT_RETRY_DELAY:
            iv = o->retry_delay;
            break;
        case QN_OPT_MAX_SIZE:
            iv = o->max_size;
            break;
        case QN_OPT_TTL:
            iv = o->ttl;
            break;
        case QN_OPT_DEAD_LETTER_QUEUE:
            is_bool = true;
            bv = o->dead_letter_queue;
            break;
        case QN_OPT_DLQ_AFTER_MAX_RETRIES:
            is_bool = true;
            bv = o->dlq_after_max_retries;
            break;
        case QN_OPT_DELAYED_PROCESSING:
            iv = o->delayed_processing;
            break;
        case QN_OPT_WINDOW_BUFFER:
            iv = o->window_buffer;
            break;
        case QN_OPT_RETENTION_SECONDS:
            iv = o->retention_seconds;
            break;
        case QN_OPT_COMPLETED_RETENTION_SECONDS:
            iv = o->completed_retention_seconds;
            break;
        case QN_OPT_RETENTION_ENABLED:
            is_bool = true;
            bv = o->retention_enabled;
            break;
        case QN_OPT_ENCRYPTION_ENABLED:
            is_bool = true;
            bv = o->encryption_enabled;
            break;
        case QN_OPT_MAX_WAIT_TIME_SECONDS:
            iv = o->max_wait_time_seconds;
            break;
        case QN_OPT_MIN_POP_WAIT_TIME:
            iv = o->min_pop_wait_time;
            break;
        case QN_OPT_DEDUP_WINDOW_SECONDS:
            iv = o->dedup_window_seconds;
            break;
        case QN_OPT_PRIORITY:
            iv = o->priority;
            break;
        case QN_OPT_NAMESPACE:
            sv = o->namespace_ ? o->namespace_ : "";
            break;
        case QN_OPT_TASK:
            sv = o->task ? o->task : "";
            break;
        default:
            break;
        }
        if (sv != NULL) {
            if (!json_str(b, cap, &n, sv))
                return NULL;
            continue;
        }
        w = is_bool ? snprintf(b + n, cap - n, "%s", bv ? "true" : "false")
                    : snprintf(b + n, cap - n, "%d", iv);
        if (w < 0 || (size_t)w >= cap - n)
            return NULL;
        n += (size_t)w;
    }
    if (n + 2 > cap)
        return NULL;
    b[n++] = '}';
    b[n] = '\0';
    return b;
}

/* ---------------------------------------------------------------- queues */

/* The queue columns (queues_v1; configure_queue_v1 after its r_created), in
 * the procedures' order, for a row type T that holds the queue at member path
 * Q (empty, or e.g. `q.`). */
#define QUEUE_COLS(T, Q)                                                                           \
    QN__UUID(T, Q id), QN__TEXT(T, Q name), QN__TEXT_OR(T, Q options.namespace_),                  \
        QN__TEXT_OR(T, Q options.task), QN__TS_OR(T, Q created_at_us, 0),                          \
        QN__I32_OR(T, Q options.priority, 0), QN__I32_OR(T, Q options.lease_time, 0),              \
        QN__I32_OR(T, Q options.retry_limit, 0), QN__I32_OR(T, Q options.retry_delay, 0),          \
        QN__I32_OR(T, Q options.max_size, 0), QN__I32_OR(T, Q options.ttl, 0),                     \
        QN__BOOL_OR(T, Q options.dead_letter_queue, false),                                        \
        QN__BOOL_OR(T, Q options.dlq_after_max_retries, false),                                    \
        QN__I32_OR(T, Q options.delayed_processing, 0), QN__I32_OR(T, Q options.window_buffer, 0), \
        QN__I32_OR(T, Q options.retention_seconds, 0),                                             \
        QN__I32_OR(T, Q options.completed_retention_seconds, 0),                                   \
        QN__BOOL_OR(T, Q options.retention_enabled, false),                                        \
        QN__BOOL_OR(T, Q options.encryption_enabled, false),                                       \
        QN__I32_OR(T, Q options.max_wait_time_seconds, 0),                                         \
        QN__I32_OR(T, Q options.min_pop_wait_time, 0),                                             \
        QN__I32_OR(T, Q options.dedup_window_seconds, 0), QN__I32_OR(T, Q partitions, 0),          \
        QN__I64_OR(T, Q segments, 0), QN__I64_OR(T, Q messages, 0)

#define QI struct qn_queue_info
static const struct qn__col queue_cols[] = {QUEUE_COLS(QI, )};
#undef QI

static bool queue_ok(const void *row)
{
    struct qn_queue_info *q = (struct qn_queue_info *)row;
    q->options.set = (1u << QN_OPT_COUNT) - 1; /* results set every option */
    return true;
}

static const struct qn__rowspec queue_spec = {QN__NCOLS(queue_cols),
                                              queue_cols,
                                              sizeof(struct qn_queue_info),
                                              0,
                                              -1,
                                              sizeof(struct qn_queues_result),
                                              offsetof(struct qn_queues_result, n),
                                              offsetof(struct qn_queues_result, queues),
                                              false,
                                              queue_ok};

int qn__decode_queues(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &queue_spec);
}

/* configure_queue_v1: r_created, then the queue columns (one row). */
struct configured {
    bool created;
    struct qn_queue_info q;
};

#define CQ struct configured
static const struct qn__col configure_cols[] = {QN__BOOL_OR(CQ, created, false),
                                                QUEUE_COLS(CQ, q.)};
#undef CQ

static bool configured_ok(const void *row)
{
    return queue_ok(&((struct configured *)row)->q);
}

static const struct qn__rowspec configure_spec = {QN__NCOLS(configure_cols),
                                                  configure_cols,
                                                  sizeof(struct configured),
                                                  0,
                                                  1,
                                                  0,
                                                  0,
                                                  0,
                                                  true,
                                                  configured_ok};

int qn__decode_configure(qn_store_req *r, int step, const PGresult *res)
{
    int rc = qn__decode_rows(r, step, res, &configure_spec);
    if (rc != QN_OK)
        return rc;
    int n;
    struct qn__step *s = &qn__req_steps(r, &n)[step];
    const struct configured *c = s->out;
    struct qn_queues_result *out = qn__arena_zalloc(qn__req_arena(r), sizeof *out);
    if (out == NULL)
        return QN_ENOMEM;
    if (c != NULL) {
        out->n = 1;
        out->queues = &c->q;
        out->created = c->created;
    }
    s->out = out;
    return QN_OK;
}

QN__FINISH_PTR(finish_queues, qn_queues_cb)

int qn_store_configure_queue(qn_store *st, const char *queue, const struct qn_queue_options *o,
                             bool replace, const struct qn_call_opts *opts, qn_queues_cb cb,
                             void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_CONFIGURE_QUEUE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    char *json = options_json(qn__req_arena(r), o);
    if (json == NULL) {
        qn__req_discard(r);
        return QN_ENOMEM;
    }
    qn__p_text(&s->p, 0, queue);
    qn__p_textfmt(&s->p, 1, json);
    qn__p_bool(&s->p, 2, replace);
    qn__p_uuid(&s->p, 3, qn__req_tenant(r));
    return qn__call_submit(r, finish_queues, (qn__anyfn)cb, ud, req);
}

int qn_store_get_queue(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                       qn_queues_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_GET_QUEUE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    return qn__call_submit(r, finish_queues, (qn__anyfn)cb, ud, req);
}

int qn_store_queue_encrypted(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                             qn_bool_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_QUEUE_ENCRYPTED, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    return qn__call_submit(r, qn__finish_bool, (qn__anyfn)cb, ud, req);
}

int qn_store_list_queues(qn_store *st, const char *namespace_, const char *task, int32_t limit,
                         int32_t offset, const struct qn_call_opts *opts, qn_queues_cb cb, void *ud,
                         qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_LIST_QUEUES, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, namespace_);
    qn__p_text(&s->p, 1, task);
    qn__p_i32(&s->p, 2, limit);
    qn__p_i32(&s->p, 3, offset);
    qn__p_uuid(&s->p, 4, qn__req_tenant(r));
    qn__p_names(&s->p, 5, opts ? opts->names : NULL);
    return qn__call_submit(r, finish_queues, (qn__anyfn)cb, ud, req);
}

int qn_store_list_queues_page(qn_store *st, const char *namespace_, const char *task,
                              const char *after, int32_t limit, const struct qn_call_opts *opts,
                              qn_queues_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_LIST_QUEUES_PAGE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, namespace_);
    qn__p_text(&s->p, 1, task);
    qn__p_text(&s->p, 2, after);
    qn__p_i32(&s->p, 3, limit);
    qn__p_uuid(&s->p, 4, qn__req_tenant(r));
    qn__p_names(&s->p, 5, opts ? opts->names : NULL);
    return qn__call_submit(r, finish_queues, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- partitions */

#define PI struct qn_partition_info
static const struct qn__col partition_cols[] = {
    QN__TEXT(PI, partition),         QN__UUID(PI, pid),
    QN__I64_OR(PI, last_offset, -1), QN__I64_OR(PI, log_start, 0),
    QN__I64_OR(PI, committed, -1),   QN__I64_OR(PI, depth, 0),
    QN__BOOL_OR(PI, leased, false),  QN__TS_OR(PI, last_write_at_us, 0),
};
#undef PI

static const struct qn__rowspec partition_spec = {QN__NCOLS(partition_cols),
                                                  partition_cols,
                                                  sizeof(struct qn_partition_info),
                                                  0,
                                                  -1,
                                                  sizeof(struct qn_partitions_result),
                                                  offsetof(struct qn_partitions_result, n),
                                                  offsetof(struct qn_partitions_result, parts),
                                                  false,
                                                  NULL};

int qn__decode_partitions(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &partition_spec);
}

QN__FINISH_PTR(finish_partitions, qn_partitions_cb)

int qn_store_queue_partitions(qn_store *st, const char *queue, const char *group,
                              const struct qn_call_opts *opts, qn_partitions_cb cb, void *ud,
                              qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_QUEUE_PARTITIONS, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group ? group : "");
    qn__p_uuid(&s->p, 2, qn__req_tenant(r));
    return qn__call_submit(r, finish_partitions, (qn__anyfn)cb, ud, req);
}

int qn_store_queue_partitions_page(qn_store *st, const char *queue, const char *group,
                                   const char *after, int32_t limit,
                                   const struct qn_call_opts *opts, qn_partitions_cb cb, void *ud,
                                   qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_QUEUE_PARTITIONS_PAGE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group ? group : "");
    qn__p_text(&s->p, 2, after);
    qn__p_i32(&s->p, 3, limit);
    qn__p_uuid(&s->p, 4, qn__req_tenant(r));
    return qn__call_submit(r, finish_partitions, (qn__anyfn)cb, ud, req);
}

int qn_store_queue_depth(qn_store *st, const char *queue, const char *group,
                         const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                         qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_QUEUE_DEPTH, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group ? group : "");
    qn__p_uuid(&s->p, 2, qn__req_tenant(r));
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

int qn_store_delete_queue(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                          qn_bool_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_DELETE_QUEUE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    return qn__call_submit(r, qn__finish_bool, (qn__anyfn)cb, ud, req);
}

int qn_store_delete_queue_step(qn_store *st, const char *queue, int32_t max_rows, bool first,
                               const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                               qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL || max_rows < 1)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_DELETE_QUEUE_STEP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    qn__p_i32(&s->p, 2, max_rows);
    qn__p_bool(&s->p, 3, first);
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- consumer groups */

#define GR struct qn_group_row
static const struct qn__col group_cols[] = {
    QN__TEXT(GR, group),
    QN__TEXT(GR, queue),
    QN__TEXT_OR(GR, sub_mode),
    QN__TS_OR(GR, sub_from_us, 0),
    QN__TEXT_OR(GR, partition),
    QN__UUID_OR0(GR, pid),
    QN__I64_OR(GR, committed, -1),
    QN__I64_OR(GR, last_offset, -1),
    QN__I64_OR(GR, lag, 0),
    QN__I64_OR(GR, time_lag_seconds, 0),
    QN__BOOL_OR(GR, leased, false),
    QN__TEXT_OR(GR, worker),
    QN__I64_OR(GR, total_consumed, 0),
    QN__I32_OR(GR, retry_count, 0),
    QN__I32_OR(GR, attempt_count, 0),
};
#undef GR

static const struct qn__rowspec group_spec = {QN__NCOLS(group_cols),
                                              group_cols,
                                              sizeof(struct qn_group_row),
                                              0,
                                              -1,
                                              sizeof(struct qn_groups_result),
                                              offsetof(struct qn_groups_result, n),
                                              offsetof(struct qn_groups_result, rows),
                                              false,
                                              NULL};

int qn__decode_groups(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &group_spec);
}

QN__FINISH_PTR(finish_groups, qn_groups_cb)

int qn_store_list_consumer_groups(qn_store *st, const char *queue, const char *group,
                                  const struct qn_call_opts *opts, qn_groups_cb cb, void *ud,
                                  qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_LIST_GROUPS, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group);
    qn__p_uuid(&s->p, 2, qn__req_tenant(r));
    return qn__call_submit(r, finish_groups, (qn__anyfn)cb, ud, req);
}

#define GR struct qn_group_row
static const struct qn__col group_page_cols[] = {
    QN__TEXT(GR, group),
    QN__TEXT(GR, queue),
    QN__TEXT_OR(GR, sub_mode),
    QN__TS_OR(GR, sub_from_us, 0),
    QN__TEXT_OR(GR, partition),
    QN__UUID_OR0(GR, pid),
    QN__I64_OR(GR, committed, -1),
    QN__I64_OR(GR, last_offset, -1),
    QN__I64_OR(GR, lag, 0),
    QN__I64_OR(GR, time_lag_seconds, 0),
    QN__BOOL_OR(GR, leased, false),
    QN__TEXT_OR(GR, worker),
    QN__I64_OR(GR, total_consumed, 0),
    QN__I32_OR(GR, retry_count, 0),
    QN__I32_OR(GR, attempt_count, 0),
    QN__I64_OR(GR, total_lag, 0),
    QN__I64_OR(GR, max_time_lag_seconds, 0),
};
#undef GR

static const struct qn__rowspec group_page_spec = {QN__NCOLS(group_page_cols),
                                                   group_page_cols,
                                                   sizeof(struct qn_group_row),
                                                   0,
                                                   -1,
                                                   sizeof(struct qn_groups_result),
                                                   offsetof(struct qn_groups_result, n),
                                                   offsetof(struct qn_groups_result, rows),
                                                   false,
                                                   NULL};

int qn__decode_groups_page(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &group_page_spec);
}

int qn_store_list_consumer_groups_page(qn_store *st, const char *queue, const char *group,
                                       const char *after_group, const char *after_queue,
                                       const char *after_partition, int32_t limit,
                                       const struct qn_call_opts *opts, qn_groups_cb cb, void *ud,
                                       qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    bool after = after_group != NULL;
    if (cb == NULL || (after && (after_queue == NULL || after_partition == NULL)))
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_LIST_GROUPS_PAGE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group);
    qn__p_text(&s->p, 2, after ? after_group : NULL);
    qn__p_text(&s->p, 3, after ? after_queue : NULL);
    qn__p_text(&s->p, 4, after ? after_partition : NULL);
    qn__p_i32(&s->p, 5, limit);
    qn__p_uuid(&s->p, 6, qn__req_tenant(r));
    qn__p_names(&s->p, 7, opts ? opts->names : NULL);
    return qn__call_submit(r, finish_groups, (qn__anyfn)cb, ud, req);
}

int qn_store_group_lags(qn_store *st, const struct qn_call_opts *opts, qn_groups_cb cb, void *ud,
                        qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_GROUP_LAGS, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, qn__req_tenant(r));
    return qn__call_submit(r, finish_groups, (qn__anyfn)cb, ud, req);
}

int qn_store_seek_consumer_group(qn_store *st, const char *group, const char *queue,
                                 const char *partition, bool to_end, int64_t ts_us,
                                 const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                                 qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_SEEK_GROUP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, group ? group : "");
    qn__p_text(&s->p, 1, queue);
    qn__p_text(&s->p, 2, (partition && *partition) ? partition : NULL);
    qn__p_bool(&s->p, 3, to_end);
    if (to_end)
        qn__p_null(&s->p, 4);
    else
        qn__p_ts(&s->p, 4, ts_us);
    qn__p_uuid(&s->p, 5, qn__req_tenant(r));
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

#define SS struct qn_seek_step
static const struct qn__col seek_step_cols[] = {QN__I32_OR(SS, updated, 0), QN__TEXT_OR(SS, next)};
#undef SS

static const struct qn__rowspec seek_step_spec = {QN__NCOLS(seek_step_cols),
                                                  seek_step_cols,
                                                  sizeof(struct qn_seek_step),
                                                  1,
                                                  1,
                                                  0,
                                                  0,
                                                  0,
                                                  false,
                                                  NULL};

int qn__decode_seek_step(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &seek_step_spec);
}

QN__FINISH_PTR(finish_seek_step, qn_seek_step_cb)

int qn_store_seek_consumer_group_step(qn_store *st, const char *group, const char *queue,
                                      const char *partition, bool to_end, int64_t ts_us,
                                      const char *after, int32_t limit,
                                      const struct qn_call_opts *opts, qn_seek_step_cb cb, void *ud,
                                      qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL || limit < 1)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_SEEK_GROUP_STEP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, group ? group : "");
    qn__p_text(&s->p, 1, queue);
    qn__p_text(&s->p, 2, (partition && *partition) ? partition : NULL);
    qn__p_bool(&s->p, 3, to_end);
    if (to_end)
        qn__p_null(&s->p, 4);
    else
        qn__p_ts(&s->p, 4, ts_us);
    qn__p_text(&s->p, 5, after);
    qn__p_i32(&s->p, 6, limit);
    qn__p_uuid(&s->p, 7, qn__req_tenant(r));
    return qn__call_submit(r, finish_seek_step, (qn__anyfn)cb, ud, req);
}

int qn_store_delete_consumer_group(qn_store *st, const char *group, const char *queue,
                                   bool delete_metadata, const struct qn_call_opts *opts,
                                   qn_int_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_DELETE_GROUP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, group ? group : "");
    qn__p_text(&s->p, 1, (queue && *queue) ? queue : NULL);
    qn__p_bool(&s->p, 2, delete_metadata);
    qn__p_uuid(&s->p, 3, qn__req_tenant(r));
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- dead letters */

#define DR struct qn_dlq_row
static const struct qn__col dlq_cols[] = {
    QN__UUID(DR, id),
    QN__TEXT_OR(DR, queue),
    QN__TEXT_OR(DR, partition),
    QN__UUID_OR0(DR, pid),
    QN__TEXT_OR(DR, group),
    QN__I64_OR(DR, offset, -1),
    QN__UUID_OR0(DR, message_id),
    QN__TEXT_OR(DR, txn),
    QN__BYTEA_OR(DR, payload, payload_len),
    QN__TEXT_OR(DR, error),
    QN__I32_OR(DR, retry_count, 0),
    QN__TS_OR(DR, failed_at_us, 0),
};
#undef DR

static const struct qn__rowspec dlq_spec = {QN__NCOLS(dlq_cols),
                                            dlq_cols,
                                            sizeof(struct qn_dlq_row),
                                            0,
                                            -1,
                                            sizeof(struct qn_dlq_result),
                                            offsetof(struct qn_dlq_result, n),
                                            offsetof(struct qn_dlq_result, rows),
                                            false,
                                            NULL};

int qn__decode_dlq(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &dlq_spec);
}

QN__FINISH_PTR(finish_dlq, qn_dlq_cb)

int qn_store_list_dlq(qn_store *st, const char *queue, const char *group, const char *partition,
                      int32_t limit, int32_t offset, const struct qn_call_opts *opts, qn_dlq_cb cb,
                      void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_LIST_DLQ, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group);
    qn__p_text(&s->p, 2, partition);
    qn__p_i32(&s->p, 3, limit);
    qn__p_i32(&s->p, 4, offset);
    qn__p_uuid(&s->p, 5, qn__req_tenant(r));
    qn__p_names(&s->p, 6, opts ? opts->names : NULL);
    return qn__call_submit(r, finish_dlq, (qn__anyfn)cb, ud, req);
}

int qn_store_list_dlq_page(qn_store *st, const char *queue, const char *group,
                           const char *partition, int64_t after_failed_at_us,
                           const uint8_t *after_id, int32_t limit, const struct qn_call_opts *opts,
                           qn_dlq_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    bool after = after_failed_at_us != QN_STORE_NO_TS;
    if (cb == NULL || (after && after_id == NULL))
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_LIST_DLQ_PAGE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group);
    qn__p_text(&s->p, 2, partition);
    if (after)
        qn__p_ts(&s->p, 3, after_failed_at_us);
    else
        qn__p_null(&s->p, 3);
    qn__p_uuid(&s->p, 4, after ? after_id : NULL);
    qn__p_i32(&s->p, 5, limit);
    qn__p_uuid(&s->p, 6, qn__req_tenant(r));
    qn__p_names(&s->p, 7, opts ? opts->names : NULL);
    return qn__call_submit(r, finish_dlq, (qn__anyfn)cb, ud, req);
}

int qn_store_get_dlq(qn_store *st, const uint8_t id[16], const struct qn_call_opts *opts,
                     qn_dlq_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (id == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_GET_DLQ, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, id);
    return qn__call_submit(r, finish_dlq, (qn__anyfn)cb, ud, req);
}

int qn_store_delete_dlq(qn_store *st, const uint8_t *id, const uint8_t *pid, const char *txn,
                        const struct qn_call_opts *opts, qn_int_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || (id == NULL && (pid == NULL || txn == NULL)))
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_DELETE_DLQ, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, id);
    qn__p_uuid(&s->p, 1, id ? NULL : pid);
    qn__p_text(&s->p, 2, id ? NULL : txn);
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- stats */

#define SR struct qn_stats_row
static const struct qn__col stats_cols[] = {
    QN__TEXT(SR, queue),         QN__I32_OR(SR, partitions, 0), QN__I64_OR(SR, messages, 0),
    QN__I64_OR(SR, segments, 0), QN__I64_OR(SR, pending, 0),    QN__I64_OR(SR, dead_letters, 0),
    QN__I32_OR(SR, groups, 0),   QN__I64_OR(SR, bytes, 0),
};
#undef SR

static const struct qn__rowspec stats_spec = {QN__NCOLS(stats_cols),
                                              stats_cols,
                                              sizeof(struct qn_stats_row),
                                              0,
                                              -1,
                                              sizeof(struct qn_stats_result),
                                              offsetof(struct qn_stats_result, n),
                                              offsetof(struct qn_stats_result, rows),
                                              false,
                                              NULL};

int qn__decode_stats(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &stats_spec);
}

QN__FINISH_PTR(finish_stats, qn_stats_cb)

int qn_store_stats(qn_store *st, const char *queue, const struct qn_call_opts *opts, qn_stats_cb cb,
                   void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_STATS, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, (queue && *queue) ? queue : NULL);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    return qn__call_submit(r, finish_stats, (qn__anyfn)cb, ud, req);
}

int qn_store_stats_cached(qn_store *st, int32_t step_parts, const struct qn_call_opts *opts,
                          qn_stats_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || step_parts < 0)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_STATS_CACHED, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, qn__req_tenant(r));
    qn__p_i32(&s->p, 1, step_parts);
    return qn__call_submit(r, finish_stats, (qn__anyfn)cb, ud, req);
}

int qn_store_stats_step(qn_store *st, int32_t step_parts, const struct qn_call_opts *opts,
                        qn_int_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (step_parts < 1 || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_STATS_STEP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_i32(&s->p, 0, step_parts);
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- notify */

int qn_store_notify_push(qn_store *st, const char *const *queues, size_t n,
                         const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                         qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queues == NULL || n == 0)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_NOTIFY_PUSH, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_arr_text(&s->p, 0, queues, n, NULL);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- authorization lookups */

#define PQ struct qn_pid_queue
static const struct qn__col pid_queue_cols[] = {QN__UUID(PQ, pid), QN__TEXT_OR(PQ, queue)};
#undef PQ

static const struct qn__rowspec pid_queue_spec = {QN__NCOLS(pid_queue_cols),
                                                  pid_queue_cols,
                                                  sizeof(struct qn_pid_queue),
                                                  0,
                                                  -1,
                                                  sizeof(struct qn_pid_queues_result),
                                                  offsetof(struct qn_pid_queues_result, n),
                                                  offsetof(struct qn_pid_queues_result, rows),
                                                  false,
                                                  NULL};

int qn__decode_pid_queues(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &pid_queue_spec);
}

QN__FINISH_PTR(finish_pid_queues, qn_pid_queues_cb)

int qn_store_partition_queues(qn_store *st, const uint8_t (*pids)[16], size_t n,
                              const struct qn_call_opts *opts, qn_pid_queues_cb cb, void *ud,
                              qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || (n > 0 && pids == NULL) || n > (size_t)INT32_MAX / 32)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_PARTITION_QUEUES, opts, &r, &rc);
    if (s == NULL)
        return rc;
    const uint8_t **ptrs = qn__arena_alloc(qn__req_arena(r), sizeof *ptrs * (n ? n : 1));
    int32_t *lens = qn__arena_alloc(qn__req_arena(r), sizeof *lens * (n ? n : 1));
    if (ptrs == NULL || lens == NULL) {
        qn__req_discard(r);
        return QN_ENOMEM;
    }
    for (size_t k = 0; k < n; k++) {
        ptrs[k] = pids[k];
        lens[k] = 16;
    }
    qn__p_array(&s->p, 0, QN_OID_UUID, ptrs, lens, n);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    return qn__call_submit(r, finish_pid_queues, (qn__anyfn)cb, ud, req);
}

int qn_store_lease_queues(qn_store *st, const char *worker, const struct qn_call_opts *opts,
                          qn_pid_queues_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || worker == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_LEASE_QUEUES, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, worker);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    return qn__call_submit(r, finish_pid_queues, (qn__anyfn)cb, ud, req);
}
