/*
 * push.c - qn.push_one_v1, qn.push_v1 and qn.segment_at_v1
 * (sql/003_log_push.sql).
 *
 * Does: choose the shape of a push. When the store knows the id of every
 * partition of the bundle (pidcache.c: learnt from earlier results), the bundle
 * is one push_one_v1 call per segment, in ascending (partition id, input
 * position), all in one pipeline sync: one round trip, one transaction, each
 * call keyed on one partition (what a distributed database routes on; see
 * docs/sql.md). Otherwise (first contact) one push_v1 call by names. Encode the
 * parameters, decode the verdicts into one result per input segment, in input
 * order, and remember the partition ids the results carry.
 * Does not: validate names or hashes beyond presence (the procedures do and
 * raise QPUSH), or dedup anything itself.
 *
 * Invariants:
 *   1. Every input segment gets exactly one result: a row whose r_ord is out of
 *      range, a segment without rows, or a queued segment with several rows is
 *      QN_EPROTOCOL_DB.
 *   2. Duplicate entries are strictly ascending by frame index (the procedures
 *      order them; anything else is a protocol error).
 *   3. The steps of a by-id push lock partitions in ascending id (the global
 *      lock order); a stale id (the partition was deleted since) makes that call
 *      find its partition by name, which may lock out of order: a deadlock is
 *      then possible, detected by the server and retried by the engine.
 *   4. A watermark vouched for another partition than the one a segment is sent
 *      to (cache_pid) is not sent (-1).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---------------------------------------------------------------- push_one_v1 */

enum { O_PID, O_WINDOW, O_STATUS, O_BASE, O_CREATED, O_DUP_IDX, O_DUP_OFF, O_N };
static const uint32_t one_types[O_N] = {QN_OID_UUID,    QN_OID_INT4,        QN_OID_INT2,
                                        QN_OID_INT8,    QN_OID_TIMESTAMPTZ, QN_OID_INT4_ARR,
                                        QN_OID_INT8_ARR};

/* The most segments a by-id push sends as separate calls in one sync. */
#define BY_ID_MAX 256

int qn__decode_push_one(qn_store_req *r, int step, const PGresult *res)
{
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, O_N, one_types) != QN_OK || PQntuples(res) != 1)
        return QN_EPROTOCOL_DB;
    struct qn_push_seg_result *g = qn__arena_zalloc(a, sizeof *g);
    if (g == NULL)
        return QN_ENOMEM;
    struct qn__row w = {res, 0, a, QN_OK, -1};
    qn__row_uuid(&w, O_PID, g->pid);
    g->window = qn__row_i32_or(&w, O_WINDOW, 0);
    int16_t status = qn__row_i16(&w, O_STATUS);
    if (w.err != QN_OK)
        return QN_EPROTOCOL_DB;
    g->status = status;
    if (status == QN_PUSH_QUEUED) {
        g->base = qn__row_i64(&w, O_BASE);
        g->created_at_us = qn__row_ts(&w, O_CREATED);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    } else if (status == QN_PUSH_DUPLICATE) {
        if (qn__row_isnull(&w, O_DUP_IDX) || qn__row_isnull(&w, O_DUP_OFF))
            return QN_EPROTOCOL_DB;
        struct qn__arr ai, ao;
        int32_t max = INT32_MAX / 16;
        if (qn__dec_array(PQgetvalue(res, 0, O_DUP_IDX), PQgetlength(res, 0, O_DUP_IDX),
                          QN_OID_INT4, max, &ai) != QN_OK ||
            qn__dec_array(PQgetvalue(res, 0, O_DUP_OFF), PQgetlength(res, 0, O_DUP_OFF),
                          QN_OID_INT8, max, &ao) != QN_OK ||
            ai.n < 1 || ai.n != ao.n || ai.has_null || ao.has_null)
            return QN_EPROTOCOL_DB;
        struct qn_push_dup *d = qn__arena_alloc(a, sizeof *d * (size_t)ai.n);
        if (d == NULL)
            return QN_ENOMEM;
        for (int32_t k = 0; k < ai.n; k++) {
            const uint8_t *pi, *po;
            int32_t li, lo;
            int32_t idx;
            int64_t off;
            if (qn__arr_next(&ai, &pi, &li) != 1 || qn__arr_next(&ao, &po, &lo) != 1 ||
                qn__dec_i32((const char *)pi, li, &idx) != QN_OK ||
                qn__dec_i64((const char *)po, lo, &off) != QN_OK || idx < 0 ||
                (k > 0 && (uint32_t)idx <= d[k - 1].idx))
                return QN_EPROTOCOL_DB;
            d[k].idx = (uint32_t)idx;
            d[k].offset = off;
        }
        g->ndups = (size_t)ai.n;
        g->dups = d;
    } else {
        return QN_EPROTOCOL_DB;
    }
    s->out = g;
    return QN_OK;
}

/* ---------------------------------------------------------------- push */

/* What a push keeps for its finish: the names of its segments (to learn the
 * partition ids of the results) and its shape. */
struct push_call {
    size_t n;
    const char **queue; /* arena copies */
    const char **part;  /* arena copies, NULL = "Default" */
    bool by_id;         /* one push_one_v1 step per segment, step->expect = input index */
};

static void finish_push(qn_store_req *r, const struct qn_store_status *st)
{
    qn_push_cb cb = (qn_push_cb)qn__req_cb(r);
    const struct push_call *pc = qn__req_data(r);
    const struct qn_push_result *res = NULL;
    struct qn_store_status oom = {QN_ENOMEM, "", "out of memory"};
    if (st->code == QN_OK && pc->by_id) {
        int nsteps;
        struct qn__step *steps = qn__req_steps(r, &nsteps);
        struct qn_push_result *out = qn__arena_zalloc(qn__req_arena(r), sizeof *out);
        struct qn_push_seg_result *segs = qn__arena_zalloc(qn__req_arena(r), sizeof *segs * pc->n);
        if (out == NULL || segs == NULL) {
            cb(qn__req_ud(r), &oom, NULL);
            return;
        }
        for (int i = 0; i < nsteps; i++)
            segs[steps[i].expect] = *(const struct qn_push_seg_result *)steps[i].out;
        out->n = pc->n;
        out->segs = segs;
        res = out;
    } else if (st->code == QN_OK) {
        res = qn__req_out(r, 0);
    } else if (pc->by_id && qn__req_failed_step(r) >= 0) {
        /* push_one_v1 does not know the segment's input position: name it as
         * push_v1 does ("... in segment 3") */
        size_t len = strlen(st->message);
        int nsteps;
        const struct qn__step *steps = qn__req_steps(r, &nsteps);
        char *m = len >= 7 && strcmp(st->message + len - 7, "segment") == 0
                      ? qn__arena_alloc(qn__req_arena(r), len + 24)
                      : NULL;
        if (m != NULL) {
            snprintf(m, len + 24, "%s %zu", st->message, steps[qn__req_failed_step(r)].expect);
            struct qn_store_status named = {st->code, st->sqlstate, m};
            cb(qn__req_ud(r), &named, NULL);
            return;
        }
    }
    if (res != NULL) {
        struct qn__pidcache *pids = qn__store_pids(qn__req_store(r));
        for (size_t i = 0; i < res->n && pids != NULL; i++)
            qn__pidcache_put(pids, qn__req_tenant(r), pc->queue[i], pc->part[i], res->segs[i].pid);
    }
    cb(qn__req_ud(r), st, res);
}

struct order {
    const uint8_t *pid;
    size_t ord;
};

static int by_pid(const void *a, const void *b)
{
    const struct order *x = a, *y = b;
    int c = memcmp(x->pid, y->pid, 16);
    if (c != 0)
        return c;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* One push_one_v1 step per segment, in ascending (pid, input index). */
static int add_by_id(qn_store_req *r, const struct qn_push_segment *segs, size_t n,
                     const uint8_t (*pids)[16], bool strict, bool resolve)
{
    struct order *o = malloc(sizeof *o * n);
    if (o == NULL)
        return QN_ENOMEM;
    for (size_t i = 0; i < n; i++)
        o[i] = (struct order){pids[i], i};
    qsort(o, n, sizeof *o, by_pid);
    int rc = QN_OK;
    for (size_t k = 0; k < n && rc == QN_OK; k++) {
        const struct qn_push_segment *g = &segs[o[k].ord];
        struct qn__step *s = qn__req_add(r, QN_STMT_PUSH_ONE, qn__decode_push_one);
        if (s == NULL) {
            rc = QN_ENOMEM;
            break;
        }
        s->expect = o[k].ord;
        bool foreign = g->cache_pid != NULL && memcmp(g->cache_pid, o[k].pid, 16) != 0;
        qn__p_uuid(&s->p, 0, o[k].pid);
        qn__p_i32(&s->p, 1, (int32_t)g->count);
        qn__p_bytea(&s->p, 2, g->hashes, (size_t)g->count * 16u);
        qn__p_i64(&s->p, 3, foreign ? -1 : g->verified);
        qn__p_bytea(&s->p, 4, g->blob, g->blob_len);
        qn__p_bool(&s->p, 5, strict);
        qn__p_i32(&s->p, 6, g->cache_window > 0 ? g->cache_window : INT32_MAX);
        qn__p_bool(&s->p, 7, resolve);
        qn__p_text(&s->p, 8, g->queue);
        qn__p_text_or(&s->p, 9, g->partition, "Default");
        qn__p_uuid(&s->p, 10, qn__req_tenant(r));
        rc = s->p.err;
    }
    free(o);
    return rc;
}

static int push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                bool resolve, const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                qn_store_req **req)
{
    if (st == NULL || cb == NULL || segs == NULL || n == 0 || n > (size_t)INT32_MAX / 16)
        return QN_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (segs[i].queue == NULL || segs[i].queue[0] == '\0' || segs[i].count < 1 ||
            segs[i].count > (uint32_t)INT32_MAX / 16 || segs[i].hashes == NULL ||
            segs[i].blob == NULL)
            return QN_EINVAL;
    const uint8_t *tenant =
        (opts != NULL && opts->tenant != NULL) ? opts->tenant : qn__default_tenant;
    uint8_t(*pids)[16] = NULL;
    struct qn__pidcache *cache = qn__store_pids(st);
    bool by_id = n <= BY_ID_MAX && cache != NULL;
    if (by_id) {
        pids = malloc(sizeof *pids * n);
        if (pids == NULL)
            return QN_ENOMEM;
        for (size_t i = 0; i < n && by_id; i++)
            by_id = qn__pidcache_get(cache, tenant, segs[i].queue, segs[i].partition, pids[i]);
    }
    qn_store_req *r = NULL;
    int rc = qn__req_new(st, by_id ? (int)n : 1, opts, &r);
    if (rc != QN_OK) {
        free(pids);
        return rc;
    }
    struct qn__arena *a = qn__req_arena(r);
    struct push_call *pc = qn__arena_zalloc(a, sizeof *pc);
    if (pc != NULL) {
        pc->n = n;
        pc->by_id = by_id;
        pc->queue = qn__arena_alloc(a, sizeof *pc->queue * n);
        pc->part = qn__arena_alloc(a, sizeof *pc->part * n);
    }
    if (pc == NULL || pc->queue == NULL || pc->part == NULL) {
        rc = QN_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        pc->queue[i] = qn__arena_strdup(a, segs[i].queue);
        pc->part[i] = segs[i].partition ? qn__arena_strdup(a, segs[i].partition) : NULL;
        if (pc->queue[i] == NULL || (segs[i].partition && pc->part[i] == NULL)) {
            rc = QN_ENOMEM;
            goto fail;
        }
    }
    if (by_id) {
        rc = add_by_id(r, segs, n, (const uint8_t(*)[16])pids, strict, resolve);
    } else {
        struct qn__step *s = qn__req_add(r, QN_STMT_PUSH, qn__decode_push);
        if (s == NULL) {
            rc = QN_ENOMEM;
        } else {
            s->expect = n;
            rc = qn__params_push(&s->p, segs, n, strict, resolve, qn__req_tenant(r));
        }
    }
    if (rc != QN_OK)
        goto fail;
    free(pids);
    qn__req_set_data(r, pc);
    return qn__call_submit(r, finish_push, (qn__anyfn)cb, ud, req);
fail:
    free(pids);
    qn__req_discard(r);
    return rc;
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
