/*
 * pop.c - pop_v1, pop_discover_v1 and has_pending_v1 (sql/004_log_pop.sql).
 *
 * Does: choose the procedure (a queue name -> pop_v1, none -> discovery by
 * namespace/task), encode the arguments, decode leased segment rows. Blobs are
 * borrowed from the result (no copy).
 * Does not: decompress or slice segments (the codec does, from start_idx/take).
 *
 * Invariants:
 *   1. Every row has 0 <= start_idx, 1 <= take, start_idx + take within int32;
 *      anything else is QN_EPROTOCOL_DB (the broker slices frames with them).
 */
#include "queen/error.h"
#include "store_int.h"

static const char *sub_mode_text(enum qn_sub_mode m)
{
    switch (m) {
    case QN_SUB_NEW:
        return "new";
    case QN_SUB_TIMESTAMP:
        return "timestamp";
    case QN_SUB_ALL:
        break;
    }
    return "all";
}

enum { C_QUEUE, C_PART, C_PID, C_BASE, C_START, C_TAKE, C_CREATED, C_BLOB, C_LEASE, C_N };

static int decode_pop(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[C_N] = {QN_OID_TEXT,  QN_OID_TEXT, QN_OID_UUID,
                                    QN_OID_INT8,  QN_OID_INT4, QN_OID_INT4,
                                    QN_OID_TIMESTAMPTZ, QN_OID_BYTEA, QN_OID_TIMESTAMPTZ};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, C_N, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_pop_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_pop_segment *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        struct qn_pop_segment *g = &v[i];
        g->queue = qn__row_text(&w, C_QUEUE);
        g->partition = qn__row_text(&w, C_PART);
        qn__row_uuid(&w, C_PID, g->pid);
        g->base = qn__row_i64(&w, C_BASE);
        g->start_idx = qn__row_i32(&w, C_START);
        g->take = qn__row_i32(&w, C_TAKE);
        g->created_at_us = qn__row_ts(&w, C_CREATED);
        g->blob = qn__row_bytea(&w, C_BLOB, &g->blob_len);
        g->lease_expires_at_us = qn__row_ts_or(&w, C_LEASE, 0);
        if (w.err != QN_OK || g->start_idx < 0 || g->take < 1 ||
            g->start_idx > INT32_MAX - g->take || g->base < 0)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->segs = v;
    s->out = out;
    return QN_OK;
}

static void finish_pop(qn_store_req *r, const struct qn_store_status *st)
{
    qn_pop_cb cb = (qn_pop_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_pop(qn_store *st, const struct qn_pop_args *a, const struct qn_call_opts *opts,
                 qn_pop_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r = NULL;
    if (a == NULL || cb == NULL || a->budget < 1)
        return QN_EINVAL;
    bool discover = a->queue == NULL || a->queue[0] == '\0';
    if (discover && (a->namespace_ == NULL || a->namespace_[0] == '\0') &&
        (a->task == NULL || a->task[0] == '\0'))
        return QN_EINVAL;
    int rc = qn__req_new(st, 1, opts, &r);
    if (rc != QN_OK)
        return rc;
    struct qn__step *s =
        qn__req_add(r, discover ? QN_STMT_POP_DISCOVER : QN_STMT_POP, decode_pop);
    struct qn__params *p = &s->p;
    if (discover) {
        qn__p_text(p, 0, a->namespace_ ? a->namespace_ : "");
        qn__p_text(p, 1, a->task ? a->task : "");
    } else {
        qn__p_text(p, 0, a->queue);
        qn__p_text(p, 1, a->partition ? a->partition : "");
    }
    qn__p_text(p, 2, a->group ? a->group : "");
    qn__p_i32(p, 3, a->budget);
    qn__p_i64(p, 4, a->max_bytes);
    qn__p_i32(p, 5, a->msg_overhead);
    qn__p_i32(p, 6, a->max_msg_bytes);
    qn__p_i32(p, 7, a->lease_seconds);
    qn__p_text(p, 8, a->worker);
    qn__p_bool(p, 9, a->auto_ack);
    qn__p_i32(p, 10, a->max_partitions);
    qn__p_text(p, 11, sub_mode_text(a->sub_mode));
    if (a->sub_mode == QN_SUB_TIMESTAMP)
        qn__p_ts(p, 12, a->sub_from_us);
    else
        qn__p_null(p, 12);
    qn__p_uuid(p, 13, qn__req_tenant(r));
    qn__req_set_finish(r, finish_pop, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_has_pending(qn_store *st, const char *queue, const char *partition,
                         const char *group, const struct qn_call_opts *opts, qn_bool_cb cb,
                         void *ud, qn_store_req **req)
{
    qn_store_req *r = NULL;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    int rc = qn__req_new(st, 1, opts, &r);
    if (rc != QN_OK)
        return rc;
    struct qn__step *s = qn__req_add(r, QN_STMT_HAS_PENDING, qn__decode_scalar_bool);
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, partition ? partition : "");
    qn__p_text(&s->p, 2, group ? group : "");
    qn__p_uuid(&s->p, 3, qn__req_tenant(r));
    qn__req_set_finish(r, qn__finish_bool, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- pop gate */

struct gate_out {
    int64_t pending;
    int32_t min_wait;
};

static int decode_gate(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[2] = {QN_OID_INT8, QN_OID_INT4};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 2, t) != QN_OK || PQntuples(res) != 1)
        return QN_EPROTOCOL_DB;
    struct gate_out *o = qn__arena_zalloc(a, sizeof *o);
    if (o == NULL)
        return QN_ENOMEM;
    struct qn__row w = {res, 0, a, QN_OK, -1};
    o->pending = qn__row_i64_or(&w, 0, 0);
    o->min_wait = qn__row_i32_or(&w, 1, 0);
    if (w.err != QN_OK || o->pending < 0 || o->min_wait < 0)
        return QN_EPROTOCOL_DB;
    s->out = o;
    return QN_OK;
}

static void finish_gate(qn_store_req *r, const struct qn_store_status *st)
{
    qn_pop_gate_cb cb = (qn_pop_gate_cb)qn__req_cb(r);
    const struct gate_out *o = st->code == QN_OK ? qn__req_out(r, 0) : NULL;
    cb(qn__req_ud(r), st, o ? o->pending : 0, o ? o->min_wait : 0);
}

int qn_store_pop_gate(qn_store *st, const char *queue, const char *partition, const char *group,
                      const struct qn_call_opts *opts, qn_pop_gate_cb cb, void *ud,
                      qn_store_req **req)
{
    qn_store_req *r = NULL;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    int rc = qn__req_new(st, 1, opts, &r);
    if (rc != QN_OK)
        return rc;
    struct qn__step *s = qn__req_add(r, QN_STMT_POP_GATE, decode_gate);
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, partition ? partition : "");
    qn__p_text(&s->p, 2, group ? group : "");
    qn__p_uuid(&s->p, 3, qn__req_tenant(r));
    qn__req_set_finish(r, finish_gate, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}
