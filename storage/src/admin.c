/*
 * admin.c - the admin procedures (queues, partitions, consumer groups, dead
 * letters, stats) and notify_push_v1 (sql/010_admin.sql and neighbours).
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
#include <stdio.h>
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

#define T QN_OID_TEXT
#define I4 QN_OID_INT4
#define I8 QN_OID_INT8
#define B QN_OID_BOOL
#define U QN_OID_UUID
#define TS QN_OID_TIMESTAMPTZ
#define BY QN_OID_BYTEA

static const char *const opt_names[QN_OPT_COUNT] = {
    "lease_time",       "retry_limit",          "retry_delay",
    "max_size",         "ttl",                  "dead_letter_queue",
    "dlq_after_max_retries", "delayed_processing", "window_buffer",
    "retention_seconds", "completed_retention_seconds", "retention_enabled",
    "encryption_enabled", "max_wait_time_seconds", "min_pop_wait_time",
    "dedup_window_seconds", "priority",         "namespace",
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
        case QN_OPT_LEASE_TIME: iv = o->lease_time; break;
        case QN_OPT_RETRY_LIMIT: iv = o->retry_limit; break;
        case QN_OPT_RETRY_DELAY: iv = o->retry_delay; break;
        case QN_OPT_MAX_SIZE: iv = o->max_size; break;
        case QN_OPT_TTL: iv = o->ttl; break;
        case QN_OPT_DEAD_LETTER_QUEUE: is_bool = true; bv = o->dead_letter_queue; break;
        case QN_OPT_DLQ_AFTER_MAX_RETRIES: is_bool = true; bv = o->dlq_after_max_retries; break;
        case QN_OPT_DELAYED_PROCESSING: iv = o->delayed_processing; break;
        case QN_OPT_WINDOW_BUFFER: iv = o->window_buffer; break;
        case QN_OPT_RETENTION_SECONDS: iv = o->retention_seconds; break;
        case QN_OPT_COMPLETED_RETENTION_SECONDS: iv = o->completed_retention_seconds; break;
        case QN_OPT_RETENTION_ENABLED: is_bool = true; bv = o->retention_enabled; break;
        case QN_OPT_ENCRYPTION_ENABLED: is_bool = true; bv = o->encryption_enabled; break;
        case QN_OPT_MAX_WAIT_TIME_SECONDS: iv = o->max_wait_time_seconds; break;
        case QN_OPT_MIN_POP_WAIT_TIME: iv = o->min_pop_wait_time; break;
        case QN_OPT_DEDUP_WINDOW_SECONDS: iv = o->dedup_window_seconds; break;
        case QN_OPT_PRIORITY: iv = o->priority; break;
        case QN_OPT_NAMESPACE: sv = o->namespace_ ? o->namespace_ : ""; break;
        case QN_OPT_TASK: sv = o->task ? o->task : ""; break;
        default: break;
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

#define QCOLS 25
static const uint32_t queue_types[QCOLS] = {U,  T,  T,  T,  TS, I4, I4, I4, I4, I4, I4, B, B,
                                            I4, I4, I4, I4, B,  B,  I4, I4, I4, I4, I8, I8};

/* Decodes the queue columns starting at column c0 of row w. */
static void queue_row(struct qn__row *w, int c0, struct qn_queue_info *q)
{
    struct qn_queue_options *o = &q->options;
    int c = c0;
    qn__row_uuid(w, c++, q->id);
    q->name = qn__row_text(w, c++);
    o->namespace_ = qn__row_text_or(w, c++);
    o->task = qn__row_text_or(w, c++);
    q->created_at_us = qn__row_ts_or(w, c++, 0);
    o->priority = qn__row_i32_or(w, c++, 0);
    o->lease_time = qn__row_i32_or(w, c++, 0);
    o->retry_limit = qn__row_i32_or(w, c++, 0);
    o->retry_delay = qn__row_i32_or(w, c++, 0);
    o->max_size = qn__row_i32_or(w, c++, 0);
    o->ttl = qn__row_i32_or(w, c++, 0);
    o->dead_letter_queue = qn__row_bool_or(w, c++, false);
    o->dlq_after_max_retries = qn__row_bool_or(w, c++, false);
    o->delayed_processing = qn__row_i32_or(w, c++, 0);
    o->window_buffer = qn__row_i32_or(w, c++, 0);
    o->retention_seconds = qn__row_i32_or(w, c++, 0);
    o->completed_retention_seconds = qn__row_i32_or(w, c++, 0);
    o->retention_enabled = qn__row_bool_or(w, c++, false);
    o->encryption_enabled = qn__row_bool_or(w, c++, false);
    o->max_wait_time_seconds = qn__row_i32_or(w, c++, 0);
    o->min_pop_wait_time = qn__row_i32_or(w, c++, 0);
    o->dedup_window_seconds = qn__row_i32_or(w, c++, 0);
    q->partitions = qn__row_i32_or(w, c++, 0);
    q->segments = qn__row_i64_or(w, c++, 0);
    q->messages = qn__row_i64_or(w, c++, 0);
    o->set = (1u << QN_OPT_COUNT) - 1;
}

static int decode_queues_at(qn_store_req *r, int step, const PGresult *res, int c0)
{
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    uint32_t types[QCOLS + 1];
    types[0] = B;
    memcpy(types + c0, queue_types, sizeof queue_types);
    if (qn__res_shape(res, QCOLS + c0, c0 ? types : queue_types) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_queues_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_queue_info *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        if (c0 == 1)
            out->created = qn__row_bool_or(&w, 0, false);
        queue_row(&w, c0, &v[i]);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->queues = v;
    s->out = out;
    return QN_OK;
}

static int decode_queues(qn_store_req *r, int step, const PGresult *res)
{
    return decode_queues_at(r, step, res, 0);
}

static int decode_configure(qn_store_req *r, int step, const PGresult *res)
{
    return decode_queues_at(r, step, res, 1);
}

static void finish_queues(qn_store_req *r, const struct qn_store_status *st)
{
    qn_queues_cb cb = (qn_queues_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

/* Starts a one-step admin call; NULL with *rc set on failure. */
static struct qn__step *start(qn_store *st, int stmt, qn__decode_fn dec,
                              const struct qn_call_opts *opts, qn_store_req **r, int *rc)
{
    *r = NULL;
    *rc = qn__req_new(st, 1, opts, r);
    if (*rc != QN_OK)
        return NULL;
    return qn__req_add(*r, stmt, dec);
}

int qn_store_configure_queue(qn_store *st, const char *queue, const struct qn_queue_options *o,
                             bool replace, const struct qn_call_opts *opts, qn_queues_cb cb,
                             void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_CONFIGURE_QUEUE, decode_configure, opts, &r, &rc);
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
    qn__req_set_finish(r, finish_queues, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_get_queue(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                       qn_queues_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_GET_QUEUE, decode_queues, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    qn__req_set_finish(r, finish_queues, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_list_queues(qn_store *st, const char *namespace_, const char *task, int32_t limit,
                         int32_t offset, const struct qn_call_opts *opts, qn_queues_cb cb,
                         void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_LIST_QUEUES, decode_queues, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, namespace_);
    qn__p_text(&s->p, 1, task);
    qn__p_i32(&s->p, 2, limit);
    qn__p_i32(&s->p, 3, offset);
    qn__p_uuid(&s->p, 4, qn__req_tenant(r));
    qn__req_set_finish(r, finish_queues, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- partitions */

static int decode_partitions(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[8] = {T, U, I8, I8, I8, I8, B, TS};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 8, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_partitions_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_partition_info *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        v[i].partition = qn__row_text(&w, 0);
        qn__row_uuid(&w, 1, v[i].pid);
        v[i].last_offset = qn__row_i64_or(&w, 2, -1);
        v[i].log_start = qn__row_i64_or(&w, 3, 0);
        v[i].committed = qn__row_i64_or(&w, 4, -1);
        v[i].depth = qn__row_i64_or(&w, 5, 0);
        v[i].leased = qn__row_bool_or(&w, 6, false);
        v[i].last_write_at_us = qn__row_ts_or(&w, 7, 0);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->parts = v;
    s->out = out;
    return QN_OK;
}

static void finish_partitions(qn_store_req *r, const struct qn_store_status *st)
{
    qn_partitions_cb cb = (qn_partitions_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_queue_partitions(qn_store *st, const char *queue, const char *group,
                              const struct qn_call_opts *opts, qn_partitions_cb cb, void *ud,
                              qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_QUEUE_PARTITIONS, decode_partitions, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group ? group : "");
    qn__p_uuid(&s->p, 2, qn__req_tenant(r));
    qn__req_set_finish(r, finish_partitions, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_delete_queue(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                          qn_bool_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_DELETE_QUEUE, qn__decode_scalar_bool, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    qn__req_set_finish(r, qn__finish_bool, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- consumer groups */

static int decode_groups(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[15] = {T, T, T, TS, T, U, I8, I8, I8, I8, B, T, I8, I4, I4};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 15, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_groups_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_group_row *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        struct qn_group_row *g = &v[i];
        g->group = qn__row_text(&w, 0);
        g->queue = qn__row_text(&w, 1);
        g->sub_mode = qn__row_text_or(&w, 2);
        g->sub_from_us = qn__row_ts_or(&w, 3, 0);
        g->partition = qn__row_text_or(&w, 4);
        qn__row_uuid_or0(&w, 5, g->pid, NULL);
        g->committed = qn__row_i64_or(&w, 6, -1);
        g->last_offset = qn__row_i64_or(&w, 7, -1);
        g->lag = qn__row_i64_or(&w, 8, 0);
        g->time_lag_seconds = qn__row_i64_or(&w, 9, 0);
        g->leased = qn__row_bool_or(&w, 10, false);
        g->worker = qn__row_text_or(&w, 11);
        g->total_consumed = qn__row_i64_or(&w, 12, 0);
        g->retry_count = qn__row_i32_or(&w, 13, 0);
        g->attempt_count = qn__row_i32_or(&w, 14, 0);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->rows = v;
    s->out = out;
    return QN_OK;
}

static void finish_groups(qn_store_req *r, const struct qn_store_status *st)
{
    qn_groups_cb cb = (qn_groups_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_list_consumer_groups(qn_store *st, const char *queue, const char *group,
                                  const struct qn_call_opts *opts, qn_groups_cb cb, void *ud,
                                  qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_LIST_GROUPS, decode_groups, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group);
    qn__p_uuid(&s->p, 2, qn__req_tenant(r));
    qn__req_set_finish(r, finish_groups, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
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
    struct qn__step *s = start(st, QN_STMT_SEEK_GROUP, qn__decode_scalar_int, opts, &r, &rc);
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
    qn__req_set_finish(r, qn__finish_int, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_delete_consumer_group(qn_store *st, const char *group, const char *queue,
                                   bool delete_metadata, const struct qn_call_opts *opts,
                                   qn_int_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_DELETE_GROUP, qn__decode_scalar_int, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, group ? group : "");
    qn__p_text(&s->p, 1, (queue && *queue) ? queue : NULL);
    qn__p_bool(&s->p, 2, delete_metadata);
    qn__p_uuid(&s->p, 3, qn__req_tenant(r));
    qn__req_set_finish(r, qn__finish_int, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- dead letters */

static int decode_dlq(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[12] = {U, T, T, U, T, I8, U, T, BY, T, I4, TS};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 12, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_dlq_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_dlq_row *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        struct qn_dlq_row *d = &v[i];
        qn__row_uuid(&w, 0, d->id);
        d->queue = qn__row_text_or(&w, 1);
        d->partition = qn__row_text_or(&w, 2);
        qn__row_uuid_or0(&w, 3, d->pid, NULL);
        d->group = qn__row_text_or(&w, 4);
        d->offset = qn__row_i64_or(&w, 5, -1);
        qn__row_uuid_or0(&w, 6, d->message_id, NULL);
        d->txn = qn__row_text_or(&w, 7);
        d->payload = qn__row_bytea_or(&w, 8, &d->payload_len);
        d->error = qn__row_text_or(&w, 9);
        d->retry_count = qn__row_i32_or(&w, 10, 0);
        d->failed_at_us = qn__row_ts_or(&w, 11, 0);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->rows = v;
    s->out = out;
    return QN_OK;
}

static void finish_dlq(qn_store_req *r, const struct qn_store_status *st)
{
    qn_dlq_cb cb = (qn_dlq_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_list_dlq(qn_store *st, const char *queue, const char *group, const char *partition,
                      int32_t limit, int32_t offset, const struct qn_call_opts *opts,
                      qn_dlq_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_LIST_DLQ, decode_dlq, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, group);
    qn__p_text(&s->p, 2, partition);
    qn__p_i32(&s->p, 3, limit);
    qn__p_i32(&s->p, 4, offset);
    qn__p_uuid(&s->p, 5, qn__req_tenant(r));
    qn__req_set_finish(r, finish_dlq, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_get_dlq(qn_store *st, const uint8_t id[16], const struct qn_call_opts *opts,
                     qn_dlq_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (id == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_GET_DLQ, decode_dlq, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, id);
    qn__req_set_finish(r, finish_dlq, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_delete_dlq(qn_store *st, const uint8_t *id, const uint8_t *pid, const char *txn,
                        const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                        qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || (id == NULL && (pid == NULL || txn == NULL)))
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_DELETE_DLQ, qn__decode_scalar_int, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, id);
    qn__p_uuid(&s->p, 1, id ? NULL : pid);
    qn__p_text(&s->p, 2, id ? NULL : txn);
    qn__req_set_finish(r, qn__finish_int, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- stats */

static int decode_stats(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[8] = {T, I4, I8, I8, I8, I8, I4, I8};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 8, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_stats_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_stats_row *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        v[i].queue = qn__row_text(&w, 0);
        v[i].partitions = qn__row_i32_or(&w, 1, 0);
        v[i].messages = qn__row_i64_or(&w, 2, 0);
        v[i].segments = qn__row_i64_or(&w, 3, 0);
        v[i].pending = qn__row_i64_or(&w, 4, 0);
        v[i].dead_letters = qn__row_i64_or(&w, 5, 0);
        v[i].groups = qn__row_i32_or(&w, 6, 0);
        v[i].bytes = qn__row_i64_or(&w, 7, 0);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->rows = v;
    s->out = out;
    return QN_OK;
}

static void finish_stats(qn_store_req *r, const struct qn_store_status *st)
{
    qn_stats_cb cb = (qn_stats_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_stats(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                   qn_stats_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_STATS, decode_stats, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, (queue && *queue) ? queue : NULL);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    qn__req_set_finish(r, finish_stats, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
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
    struct qn__step *s = start(st, QN_STMT_NOTIFY_PUSH, qn__decode_void, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_arr_text(&s->p, 0, queues, n, NULL);
    qn__p_uuid(&s->p, 1, qn__req_tenant(r));
    qn__req_set_finish(r, qn__finish_int, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}
