/*
 * fetch.c - qn.fetch_v1 (offset-addressed reads, sql/007_log_fetch.sql).
 *
 * Does: encode the entries as four aligned arrays, decode one header row per
 * entry (r_base NULL) and its segment rows into per-entry results in request
 * order. Blobs are borrowed from the result.
 * Does not: touch cursors or leases (fetch is read-only).
 *
 * Invariants:
 *   1. Every entry has exactly one header row; segment rows name an entry in
 *      range; otherwise QN_EPROTOCOL_DB.
 *   2. Segment rows keep the order the procedure sent them in (ascending base).
 */
#include "queen/error.h"
#include "store_int.h"

enum {
    C_ENTRY,
    C_ERROR,
    C_PID,
    C_HIGH,
    C_LOG_START,
    C_BASE,
    C_START,
    C_TAKE,
    C_CREATED,
    C_BLOB,
    C_N
};

int qn__decode_fetch(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[C_N] = {QN_OID_INT4,        QN_OID_INT2, QN_OID_UUID, QN_OID_INT8,
                                    QN_OID_INT8,        QN_OID_INT8, QN_OID_INT4, QN_OID_INT4,
                                    QN_OID_TIMESTAMPTZ, QN_OID_BYTEA};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    size_t n = s->expect;
    if (qn__res_shape(res, C_N, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_fetch_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_fetch_entry_result *e = qn__arena_zalloc(a, sizeof *e * n);
    uint32_t *nheads = qn__arena_zalloc(a, sizeof *nheads * n);
    if (out == NULL || e == NULL || nheads == NULL)
        return QN_ENOMEM;
    /* pass 1: headers and segment counts */
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        int32_t k = qn__row_i32(&w, C_ENTRY);
        if (w.err != QN_OK || k < 0 || (size_t)k >= n)
            return QN_EPROTOCOL_DB;
        if (!qn__row_isnull(&w, C_BASE)) {
            e[k].nsegs++;
            continue;
        }
        if (nheads[k]++ > 0)
            return QN_EPROTOCOL_DB;
        int16_t err = qn__row_i16(&w, C_ERROR);
        if (err < 0 || err > 2)
            return QN_EPROTOCOL_DB;
        e[k].error = err;
        qn__row_uuid_or0(&w, C_PID, e[k].pid, NULL);
        e[k].high = qn__row_i64_or(&w, C_HIGH, 0);
        e[k].log_start = qn__row_i64_or(&w, C_LOG_START, 0);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    for (size_t k = 0; k < n; k++) {
        if (nheads[k] != 1)
            return QN_EPROTOCOL_DB;
        if (e[k].nsegs > 0) {
            e[k].segs = qn__arena_zalloc(a, sizeof *e[k].segs * e[k].nsegs);
            if (e[k].segs == NULL)
                return QN_ENOMEM;
            e[k].nsegs = 0; /* refilled below */
        }
    }
    /* pass 2: segments */
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        int32_t k = qn__row_i32(&w, C_ENTRY);
        if (qn__row_isnull(&w, C_BASE))
            continue;
        struct qn_pop_segment *g = (struct qn_pop_segment *)&e[k].segs[e[k].nsegs++];
        g->queue = "";
        g->partition = "";
        qn__row_uuid_or0(&w, C_PID, g->pid, NULL);
        g->base = qn__row_i64(&w, C_BASE);
        g->start_idx = qn__row_i32(&w, C_START);
        g->take = qn__row_i32(&w, C_TAKE);
        g->created_at_us = qn__row_ts(&w, C_CREATED);
        g->blob = qn__row_bytea(&w, C_BLOB, &g->blob_len);
        if (w.err != QN_OK || g->start_idx < 0 || g->take < 1 || g->start_idx > INT32_MAX - g->take)
            return QN_EPROTOCOL_DB;
        bool zero = true;
        for (int b = 0; b < 16; b++)
            zero = zero && g->pid[b] == 0;
        if (zero)
            for (int b = 0; b < 16; b++)
                g->pid[b] = e[k].pid[b];
    }
    out->n = n;
    out->entries = e;
    s->out = out;
    return QN_OK;
}

QN__FINISH_PTR(finish_fetch, qn_fetch_cb)

int qn_store_fetch(qn_store *st, const struct qn_fetch_args *a, const struct qn_call_opts *opts,
                   qn_fetch_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (a == NULL || cb == NULL || a->n == 0 || a->entries == NULL || a->n > (size_t)INT32_MAX / 16)
        return QN_EINVAL;
    for (size_t i = 0; i < a->n; i++)
        if (a->entries[i].queue == NULL || a->entries[i].queue[0] == '\0')
            return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_FETCH, opts, &r, &rc);
    if (s == NULL)
        return rc;
    struct qn__arena *ar = qn__req_arena(r);
    size_t n = a->n;
    const char **queues = qn__arena_alloc(ar, sizeof *queues * n);
    const char **parts = qn__arena_alloc(ar, sizeof *parts * n);
    int64_t *offs = qn__arena_alloc(ar, sizeof *offs * n);
    int64_t *maxb = qn__arena_alloc(ar, sizeof *maxb * n);
    if (!queues || !parts || !offs || !maxb) {
        qn__req_discard(r);
        return QN_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        queues[i] = a->entries[i].queue;
        parts[i] = a->entries[i].partition;
        offs[i] = a->entries[i].offset;
        maxb[i] = a->entries[i].max_bytes;
    }
    s->expect = n;
    qn__p_arr_text(&s->p, 0, queues, n, NULL);
    qn__p_arr_text(&s->p, 1, parts, n, "Default");
    qn__p_arr_i64(&s->p, 2, offs, n);
    qn__p_arr_i64(&s->p, 3, maxb, n);
    qn__p_i64(&s->p, 4, a->budget);
    qn__p_i32(&s->p, 5, a->max_records);
    qn__p_i32(&s->p, 6, a->msg_overhead);
    qn__p_i32(&s->p, 7, a->max_msg_bytes);
    qn__p_uuid(&s->p, 8, qn__req_tenant(r));
    return qn__call_submit(r, finish_fetch, (qn__anyfn)cb, ud, req);
}
