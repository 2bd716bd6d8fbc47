/*
 * ack.c - qn.ack_v1, qn.dlq_head_v1, qn.renew_lease_v1, qn.release_lease_v1
 * (sql/005_log_ack.sql).
 *
 * Does: encode ack items as three aligned arrays (hash or offset per item, the
 * other NULL), decode one outcome per item plus the summary row (cursor, flags,
 * DLQ hand-off segment, borrowed from the result).
 * Does not: decide outcomes (the procedure does), or walk the DLQ segment.
 *
 * Invariants:
 *   1. Every input item gets exactly one outcome row and the call exactly one
 *      summary row (r_idx = -1); otherwise QN_EPROTOCOL_DB.
 *   2. Outcomes are within QN_ACK_APPLIED..QN_ACK_DEFERRED.
 */
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

static void be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

int qn__params_ack(struct qn__params *p, const struct qn_ack_args *a, bool strict)
{
    struct qn__arena *ar = p->arena;
    size_t n = a->n;
    if (n == 0 || a->items == NULL || n > (size_t)INT32_MAX / 16)
        return p->err = QN_EINVAL;
    const uint8_t **hp = qn__arena_alloc(ar, sizeof *hp * n);
    int32_t *hl = qn__arena_alloc(ar, sizeof *hl * n);
    const uint8_t **op = qn__arena_alloc(ar, sizeof *op * n);
    int32_t *ol = qn__arena_alloc(ar, sizeof *ol * n);
    uint8_t *ov = qn__arena_alloc(ar, 8 * n);
    int16_t *statuses = qn__arena_alloc(ar, sizeof *statuses * n);
    if (!hp || !hl || !op || !ol || !ov || !statuses)
        return p->err = QN_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct qn_ack_item *it = &a->items[i];
        if (it->status < 0 || it->status > QN_ACK_DLQ)
            return p->err = QN_EINVAL;
        statuses[i] = (int16_t)it->status;
        if (it->hash != NULL) {
            hp[i] = it->hash;
            hl[i] = 16;
            op[i] = NULL;
            ol[i] = -1;
        } else {
            hp[i] = NULL;
            hl[i] = -1;
            be64(ov + 8 * i, (uint64_t)it->offset);
            op[i] = ov + 8 * i;
            ol[i] = 8;
        }
    }
    qn__p_uuid(p, 0, a->pid);
    qn__p_text(p, 1, a->group ? a->group : "");
    qn__p_text(p, 2, a->worker ? a->worker : "");
    qn__p_array(p, 3, QN_OID_BYTEA, hp, hl, n);
    qn__p_array(p, 4, QN_OID_INT8, op, ol, n);
    qn__p_arr_i16(p, 5, statuses, n);
    qn__p_bool(p, 6, strict);
    return p->err;
}

enum { C_IDX, C_OUTCOME, C_OFF, C_FLAGS, C_COMMITTED, C_BASE, C_BLOB, C_N };

int qn__decode_ack(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[C_N] = {QN_OID_INT4, QN_OID_INT2, QN_OID_INT8, QN_OID_INT4,
                                    QN_OID_INT8, QN_OID_INT8, QN_OID_BYTEA};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    size_t n = s->expect;
    if (qn__res_shape(res, C_N, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_ack_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_ack_item_result *items = qn__arena_zalloc(a, sizeof *items * n);
    bool *seen = qn__arena_zalloc(a, n);
    if (out == NULL || items == NULL || seen == NULL)
        return QN_ENOMEM;
    bool summary = false;
    size_t nseen = 0;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        int32_t idx = qn__row_i32(&w, C_IDX);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
        if (idx == -1) {
            if (summary)
                return QN_EPROTOCOL_DB;
            summary = true;
            out->committed = qn__row_i64_or(&w, C_COMMITTED, -1);
            out->flags = (uint32_t)qn__row_i32_or(&w, C_FLAGS, 0);
            out->dlq_offset = qn__row_i64_or(&w, C_OFF, -1);
            out->dlq_base = qn__row_i64_or(&w, C_BASE, -1);
            out->dlq_blob = qn__row_bytea_or(&w, C_BLOB, &out->dlq_blob_len);
        } else {
            if (idx < 0 || (size_t)idx >= n || seen[idx])
                return QN_EPROTOCOL_DB;
            seen[idx] = true;
            nseen++;
            int16_t oc = qn__row_i16(&w, C_OUTCOME);
            if (oc < QN_ACK_APPLIED || oc > QN_ACK_DEFERRED)
                return QN_EPROTOCOL_DB;
            items[idx].outcome = oc;
            items[idx].offset = qn__row_i64_or(&w, C_OFF, -1);
        }
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    if (!summary || nseen != n)
        return QN_EPROTOCOL_DB;
    if (!(out->flags & QN_ACKF_DLQ_HANDOFF)) {
        out->dlq_offset = -1;
        out->dlq_base = -1;
        out->dlq_blob = NULL;
        out->dlq_blob_len = 0;
    }
    out->n = n;
    out->items = items;
    s->out = out;
    return QN_OK;
}

QN__FINISH_PTR(finish_ack, qn_ack_cb)

int qn_store_ack(qn_store *st, const struct qn_ack_args *a, const struct qn_call_opts *opts,
                 qn_ack_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (a == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_ACK, opts, &r, &rc);
    if (s == NULL)
        return rc;
    s->expect = a->n;
    qn__params_ack(&s->p, a, false);
    return qn__call_submit(r, finish_ack, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- bundled acks */

struct ack_bundle_ctx {
    size_t n;
    size_t total;
    size_t start[QN_ACK_BUNDLE_MAX]; /* member k's first item in the flat arrays */
    size_t count[QN_ACK_BUNDLE_MAX];
};

enum { B_MEMBER, B_IDX, B_OUTCOME, B_OFF, B_FLAGS, B_COMMITTED, B_BASE, B_BLOB, B_N };

/* One outcome row per item of every member and one summary row per member;
 * anything else is QN_EPROTOCOL_DB (the bundle committed: its caller treats
 * that as in doubt). */
int qn__decode_ack_bundle(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[B_N] = {QN_OID_INT4, QN_OID_INT4, QN_OID_INT2, QN_OID_INT8,
                                    QN_OID_INT4, QN_OID_INT8, QN_OID_INT8, QN_OID_BYTEA};
    struct qn__arena *a = qn__req_arena(r);
    const struct ack_bundle_ctx *cx = qn__req_data(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (cx == NULL || qn__res_shape(res, B_N, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    struct qn_ack_result *out = qn__arena_zalloc(a, sizeof *out * cx->n);
    struct qn_ack_item_result *items = qn__arena_zalloc(a, sizeof *items * cx->total);
    bool *seen = qn__arena_zalloc(a, cx->total);
    bool summary[QN_ACK_BUNDLE_MAX] = {false};
    if (out == NULL || items == NULL || seen == NULL)
        return QN_ENOMEM;
    size_t nseen = 0, nsum = 0;
    int rows = PQntuples(res);
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        int32_t m = qn__row_i32(&w, B_MEMBER);
        int32_t idx = qn__row_i32(&w, B_IDX);
        if (w.err != QN_OK || m < 0 || (size_t)m >= cx->n)
            return QN_EPROTOCOL_DB;
        struct qn_ack_result *o = &out[m];
        if (idx == -1) {
            if (summary[m])
                return QN_EPROTOCOL_DB;
            summary[m] = true;
            nsum++;
            o->committed = qn__row_i64_or(&w, B_COMMITTED, -1);
            o->flags = (uint32_t)qn__row_i32_or(&w, B_FLAGS, 0);
            o->dlq_offset = qn__row_i64_or(&w, B_OFF, -1);
            o->dlq_base = qn__row_i64_or(&w, B_BASE, -1);
            o->dlq_blob = qn__row_bytea_or(&w, B_BLOB, &o->dlq_blob_len);
        } else {
            if (idx < 0 || (size_t)idx >= cx->count[m])
                return QN_EPROTOCOL_DB;
            size_t at = cx->start[m] + (size_t)idx;
            if (seen[at])
                return QN_EPROTOCOL_DB;
            seen[at] = true;
            nseen++;
            int16_t oc = qn__row_i16(&w, B_OUTCOME);
            if (oc < QN_ACK_APPLIED || oc > QN_ACK_DEFERRED)
                return QN_EPROTOCOL_DB;
            items[at].outcome = oc;
            items[at].offset = qn__row_i64_or(&w, B_OFF, -1);
        }
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    if (nsum != cx->n || nseen != cx->total)
        return QN_EPROTOCOL_DB;
    for (size_t k = 0; k < cx->n; k++) {
        struct qn_ack_result *o = &out[k];
        if (!(o->flags & QN_ACKF_DLQ_HANDOFF)) {
            o->dlq_offset = -1;
            o->dlq_base = -1;
            o->dlq_blob = NULL;
            o->dlq_blob_len = 0;
        }
        o->n = cx->count[k];
        o->items = items + cx->start[k];
    }
    s->out = out;
    return QN_OK;
}

static void finish_ack_bundle(qn_store_req *r, const struct qn_store_status *st)
{
    qn_ack_bundle_cb cb = (qn_ack_bundle_cb)qn__req_cb(r);
    const struct ack_bundle_ctx *cx = qn__req_data(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL, cx->n);
}

int qn_store_ack_bundle(qn_store *st, const struct qn_ack_args *a, size_t n,
                        const struct qn_call_opts *opts, qn_ack_bundle_cb cb, void *ud,
                        qn_store_req **req)
{
    if (a == NULL || cb == NULL || n == 0 || n > QN_ACK_BUNDLE_MAX)
        return QN_EINVAL;
    size_t total = 0;
    for (size_t k = 0; k < n; k++) {
        if (a[k].n == 0 || a[k].items == NULL || a[k].n > (size_t)INT32_MAX / 16 - total)
            return QN_EINVAL;
        total += a[k].n;
    }
    qn_store_req *r;
    int rc;
    struct qn__step *s = qn__call_begin(st, QN_STMT_ACK_BUNDLE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    struct qn__params *p = &s->p;
    struct qn__arena *ar = p->arena;
    struct ack_bundle_ctx *cx = qn__arena_zalloc(ar, sizeof *cx);
    const uint8_t **pids = qn__arena_alloc(ar, sizeof *pids * n);
    int32_t *pl = qn__arena_alloc(ar, sizeof *pl * n);
    const char **groups = qn__arena_alloc(ar, sizeof *groups * n);
    const char **workers = qn__arena_alloc(ar, sizeof *workers * n);
    int32_t *counts = qn__arena_alloc(ar, sizeof *counts * n);
    const uint8_t **hp = qn__arena_alloc(ar, sizeof *hp * total);
    int32_t *hl = qn__arena_alloc(ar, sizeof *hl * total);
    const uint8_t **op = qn__arena_alloc(ar, sizeof *op * total);
    int32_t *ol = qn__arena_alloc(ar, sizeof *ol * total);
    uint8_t *ov = qn__arena_alloc(ar, 8 * total);
    int16_t *statuses = qn__arena_alloc(ar, sizeof *statuses * total);
    if (!cx || !pids || !pl || !groups || !workers || !counts || !hp || !hl || !op || !ol || !ov ||
        !statuses) {
        qn__req_discard(r);
        return QN_ENOMEM;
    }
    cx->n = n;
    cx->total = total;
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        pids[k] = a[k].pid;
        pl[k] = 16;
        groups[k] = a[k].group ? a[k].group : "";
        workers[k] = a[k].worker ? a[k].worker : "";
        counts[k] = (int32_t)a[k].n;
        cx->start[k] = at;
        cx->count[k] = a[k].n;
        for (size_t i = 0; i < a[k].n; i++, at++) {
            const struct qn_ack_item *it = &a[k].items[i];
            if (it->status < 0 || it->status > QN_ACK_DLQ) {
                qn__req_discard(r);
                return QN_EINVAL;
            }
            statuses[at] = (int16_t)it->status;
            if (it->hash != NULL) {
                hp[at] = it->hash;
                hl[at] = 16;
                op[at] = NULL;
                ol[at] = -1;
            } else {
                hp[at] = NULL;
                hl[at] = -1;
                be64(ov + 8 * at, (uint64_t)it->offset);
                op[at] = ov + 8 * at;
                ol[at] = 8;
            }
        }
    }
    qn__p_array(p, 0, QN_OID_UUID, pids, pl, n);
    qn__p_arr_text(p, 1, groups, n, NULL);
    qn__p_arr_text(p, 2, workers, n, NULL);
    qn__p_arr_i32(p, 3, counts, n);
    qn__p_array(p, 4, QN_OID_BYTEA, hp, hl, total);
    qn__p_array(p, 5, QN_OID_INT8, op, ol, total);
    qn__p_arr_i16(p, 6, statuses, total);
    s->expect = total;
    qn__req_set_data(r, cx);
    return qn__call_submit(r, finish_ack_bundle, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- dlq_head */

struct dlq_head_out {
    bool ok;
    uint8_t id[16]; /* all zero: no id (gen_random_uuid never makes that one) */
};

static const struct qn__col dlq_head_cols[] = {
    QN__BOOL_OR(struct dlq_head_out, ok, false),
    QN__UUID_OR0(struct dlq_head_out, id),
};

static const struct qn__rowspec dlq_head_spec = {QN__NCOLS(dlq_head_cols),
                                                 dlq_head_cols,
                                                 sizeof(struct dlq_head_out),
                                                 0,
                                                 1,
                                                 0,
                                                 0,
                                                 0,
                                                 false,
                                                 NULL};

int qn__decode_dlq_head(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &dlq_head_spec);
}

static void finish_dlq_head(qn_store_req *r, const struct qn_store_status *st)
{
    static const uint8_t zero[16];
    qn_dlq_head_cb cb = (qn_dlq_head_cb)qn__req_cb(r);
    const struct dlq_head_out *o = st->code == QN_OK ? qn__req_out(r, 0) : NULL;
    bool has_id = o != NULL && memcmp(o->id, zero, 16) != 0;
    cb(qn__req_ud(r), st, o ? o->ok : false, has_id ? o->id : NULL);
}

int qn_store_dlq_head(qn_store *st, const struct qn_dlq_head_args *a,
                      const struct qn_call_opts *opts, qn_dlq_head_cb cb, void *ud,
                      qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (a == NULL || cb == NULL || (a->txn == NULL && a->txn_len > 0) ||
        (a->payload == NULL && a->payload_len > 0))
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_DLQ_HEAD, opts, &r, &rc);
    if (s == NULL)
        return rc;
    struct qn__params *p = &s->p;
    qn__p_uuid(p, 0, a->pid);
    qn__p_text(p, 1, a->group ? a->group : "");
    qn__p_text(p, 2, a->worker ? a->worker : "");
    qn__p_i64(p, 3, a->offset);
    qn__p_uuid(p, 4, a->message_id);
    qn__p_bytea(p, 5, a->txn ? a->txn : "", a->txn_len); /* text: raw bytes in binary */
    qn__p_bytea(p, 6, a->payload ? (const void *)a->payload : "", a->payload_len);
    qn__p_text(p, 7, a->error);
    return qn__call_submit(r, finish_dlq_head, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- leases */

struct renew_out {
    int32_t renewed;
    int64_t expires_at_us;
};

static bool renew_ok(const void *row)
{
    return ((const struct renew_out *)row)->renewed >= 0;
}

static const struct qn__col renew_cols[] = {
    QN__I32_OR(struct renew_out, renewed, 0),
    QN__TS_OR(struct renew_out, expires_at_us, 0),
};

static const struct qn__rowspec renew_spec = {
    QN__NCOLS(renew_cols), renew_cols, sizeof(struct renew_out), 0, 1, 0, 0, 0, false, renew_ok};

int qn__decode_renew(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &renew_spec);
}

static void finish_renew(qn_store_req *r, const struct qn_store_status *st)
{
    qn_renew_cb cb = (qn_renew_cb)qn__req_cb(r);
    const struct renew_out *o = st->code == QN_OK ? qn__req_out(r, 0) : NULL;
    cb(qn__req_ud(r), st, o ? o->renewed : 0, o ? o->expires_at_us : 0);
}

int qn_store_renew_lease(qn_store *st, const char *worker, int32_t seconds,
                         const struct qn_call_opts *opts, qn_renew_cb cb, void *ud,
                         qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (worker == NULL || worker[0] == '\0' || cb == NULL || seconds < 0)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_RENEW, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, worker);
    qn__p_i32(&s->p, 1, seconds);
    return qn__call_submit(r, finish_renew, (qn__anyfn)cb, ud, req);
}

int qn_store_release_lease(qn_store *st, const char *worker, const struct qn_call_opts *opts,
                           qn_int_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (worker == NULL || worker[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_RELEASE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, worker);
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}
