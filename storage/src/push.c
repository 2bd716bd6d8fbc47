/*
 * push.c - qn.push_v1 and qn.segment_at_v1 (sql/003_log_push.sql).
 *
 * Does: encode a bundle of segments as six aligned binary arrays, decode the
 * verdict rows (one per queued segment, one per duplicate frame) into one result
 * per input segment, in input order.
 * Does not: validate names or hashes beyond presence (the procedure does and
 * raises QPUSH), or dedup anything itself.
 *
 * Invariants:
 *   1. Every input segment gets exactly one result: a row whose r_ord is out of
 *      range, a segment without rows, or a queued segment with several rows is
 *      QN_EPROTOCOL_DB.
 *   2. Duplicate entries are strictly ascending by frame index (the procedure
 *      orders them; anything else is a protocol error).
 */
#include <stddef.h>
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

enum { C_ORD, C_PID, C_WINDOW, C_STATUS, C_BASE, C_CREATED, C_DUP_IDX, C_DUP_OFF, C_N };
static const uint32_t push_types[C_N] = {QN_OID_INT4, QN_OID_UUID,        QN_OID_INT4, QN_OID_INT2,
                                         QN_OID_INT8, QN_OID_TIMESTAMPTZ, QN_OID_INT4, QN_OID_INT8};

int qn__params_push(struct qn__params *p, const struct qn_push_segment *segs, size_t n, bool strict,
                    bool resolve, const uint8_t *tenant)
{
    struct qn__arena *a = p->arena;
    if (segs == NULL || n == 0 || n > (size_t)INT32_MAX / 16)
        return p->err = QN_EINVAL;
    const char **queues = qn__arena_alloc(a, sizeof *queues * n);
    const char **parts = qn__arena_alloc(a, sizeof *parts * n);
    int32_t *counts = qn__arena_alloc(a, sizeof *counts * n);
    const uint8_t **hashes = qn__arena_alloc(a, sizeof *hashes * n);
    size_t *hlens = qn__arena_alloc(a, sizeof *hlens * n);
    int64_t *verified = qn__arena_alloc(a, sizeof *verified * n);
    int32_t *windows = qn__arena_alloc(a, sizeof *windows * n);
    const uint8_t **cpids = qn__arena_alloc(a, sizeof *cpids * n);
    int32_t *cplens = qn__arena_alloc(a, sizeof *cplens * n);
    const uint8_t **blobs = qn__arena_alloc(a, sizeof *blobs * n);
    size_t *blens = qn__arena_alloc(a, sizeof *blens * n);
    if (!queues || !parts || !counts || !hashes || !hlens || !verified || !windows || !cpids ||
        !cplens || !blobs || !blens)
        return p->err = QN_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct qn_push_segment *s = &segs[i];
        if (s->queue == NULL || s->queue[0] == '\0' || s->count < 1 ||
            s->count > (uint32_t)INT32_MAX / 16 || s->hashes == NULL || s->blob == NULL)
            return p->err = QN_EINVAL;
        queues[i] = s->queue;
        parts[i] = s->partition;
        counts[i] = (int32_t)s->count;
        hashes[i] = s->hashes;
        hlens[i] = (size_t)s->count * 16u;
        verified[i] = s->verified;
        /* 0 (unknown) must not make SQL ignore the watermark: send the largest */
        windows[i] = s->cache_window > 0 ? s->cache_window : INT32_MAX;
        cpids[i] = s->cache_pid;
        cplens[i] = s->cache_pid != NULL ? 16 : -1;
        blobs[i] = s->blob;
        blens[i] = s->blob_len;
    }
    qn__p_arr_text(p, 0, queues, n, NULL);
    qn__p_arr_text(p, 1, parts, n, "Default");
    qn__p_arr_i32(p, 2, counts, n);
    qn__p_arr_bytea(p, 3, hashes, hlens, n);
    qn__p_arr_i64(p, 4, verified, n);
    qn__p_arr_bytea(p, 5, blobs, blens, n);
    qn__p_bool(p, 6, strict);
    qn__p_uuid(p, 7, tenant);
    qn__p_arr_i32(p, 8, windows, n);
    qn__p_array(p, 9, QN_OID_UUID, cpids, cplens, n);
    qn__p_bool(p, 10, resolve);
    return p->err;
}

int qn__decode_push(qn_store_req *r, int step, const PGresult *res)
{
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    size_t n = s->expect;
    int rows = PQntuples(res);
    if (qn__res_shape(res, C_N, push_types) != QN_OK || rows < 0)
        return QN_EPROTOCOL_DB;

    struct qn_push_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_push_seg_result *segs = qn__arena_zalloc(a, sizeof *segs * n);
    uint32_t *nrows = qn__arena_zalloc(a, sizeof *nrows * n);
    if (out == NULL || segs == NULL || nrows == NULL)
        return QN_ENOMEM;

    /* pass 1: check ords and statuses, count rows per segment */
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        int32_t ord = qn__row_i32(&w, C_ORD);
        int16_t status = qn__row_i16(&w, C_STATUS);
        if (w.err != QN_OK || ord < 0 || (size_t)ord >= n ||
            (status != QN_PUSH_QUEUED && status != QN_PUSH_DUPLICATE))
            return QN_EPROTOCOL_DB;
        if (nrows[ord] > 0 && segs[ord].status != status)
            return QN_EPROTOCOL_DB;
        segs[ord].status = status;
        nrows[ord]++;
    }
    for (size_t k = 0; k < n; k++) {
        if (nrows[k] == 0 || (segs[k].status == QN_PUSH_QUEUED && nrows[k] != 1))
            return QN_EPROTOCOL_DB;
        if (segs[k].status == QN_PUSH_DUPLICATE) {
            segs[k].dups = qn__arena_alloc(a, sizeof *segs[k].dups * nrows[k]);
            if (segs[k].dups == NULL)
                return QN_ENOMEM;
        }
    }
    /* pass 2: fill */
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        int32_t ord = qn__row_i32(&w, C_ORD);
        struct qn_push_seg_result *g = &segs[ord];
        qn__row_uuid(&w, C_PID, g->pid);
        g->window = qn__row_i32_or(&w, C_WINDOW, 0);
        if (g->status == QN_PUSH_QUEUED) {
            g->base = qn__row_i64(&w, C_BASE);
            g->created_at_us = qn__row_ts(&w, C_CREATED);
        } else {
            int32_t idx = qn__row_i32(&w, C_DUP_IDX);
            int64_t off = qn__row_i64(&w, C_DUP_OFF);
            if (w.err != QN_OK || idx < 0 ||
                (g->ndups > 0 && (uint32_t)idx <= g->dups[g->ndups - 1].idx))
                return QN_EPROTOCOL_DB;
            struct qn_push_dup *d = (struct qn_push_dup *)&g->dups[g->ndups++];
            d->idx = (uint32_t)idx;
            d->offset = off;
        }
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    out->n = n;
    out->segs = segs;
    s->out = out;
    return QN_OK;
}

QN__FINISH_PTR(finish_push, qn_push_cb)

static int push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                bool resolve, const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_PUSH, opts, &r, &rc);
    if (s == NULL)
        return rc;
    s->expect = n;
    qn__params_push(&s->p, segs, n, strict, resolve, qn__req_tenant(r));
    return qn__call_submit(r, finish_push, (qn__anyfn)cb, ud, req);
}

int qn_store_push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                  const struct qn_call_opts *opts, qn_push_cb cb, void *ud, qn_store_req **req)
{
    return push(st, segs, n, strict, false, opts, cb, ud, req);
}

int qn_store_push_resolve(qn_store *st, const struct qn_push_segment *segs, size_t n,
                          const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                          qn_store_req **req)
{
    return push(st, segs, n, false, true, opts, cb, ud, req);
}

/* ---------------------------------------------------------------- segment_at */

static bool segment_ok(const void *row)
{
    const struct qn_segment_row *g = row;
    return g->end >= g->base;
}

static const struct qn__col segment_cols[] = {
    QN__I64(struct qn_segment_row, base),
    QN__I64(struct qn_segment_row, end),
    QN__TS(struct qn_segment_row, created_at_us),
    QN__BYTEA(struct qn_segment_row, blob, blob_len),
};

static const struct qn__rowspec segment_spec = {QN__NCOLS(segment_cols),
                                                segment_cols,
                                                sizeof(struct qn_segment_row),
                                                0,
                                                -1,
                                                sizeof(struct qn_segments_result),
                                                offsetof(struct qn_segments_result, n),
                                                offsetof(struct qn_segments_result, rows),
                                                false,
                                                segment_ok};

int qn__decode_segments(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &segment_spec);
}

QN__FINISH_PTR(finish_segments, qn_segments_cb)

int qn_store_segment_at(qn_store *st, const uint8_t pid[16], const int64_t *offsets, size_t n,
                        const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                        qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || pid == NULL || (n > 0 && offsets == NULL))
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_SEGMENT_AT, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    qn__p_arr_i64(&s->p, 1, offsets, n);
    return qn__call_submit(r, finish_segments, (qn__anyfn)cb, ud, req);
}
