/*
 * store_call.c - the storage-call helper and the table-driven row decoder that
 * every qn_store_* function and every result decoder is built on (see the
 * "calls" section of store_int.h), the shared scalar decoders and finishes, and
 * the raw-SQL hooks for tests and benches.
 *
 * Does: make a one-step request for a statement of the table with that
 * statement's decoder; submit it with a finish function; decode a result by a
 * rowspec (shape, row count, NULLs, per-row check) into the request's arena.
 * Does not: know any procedure (the specs live beside their calls: push.c,
 * pop.c, ack.c, fetch.c, admin.c, maint.c), or copy values (texts and byteas are
 * borrowed from the PGresult, which lives until the callback returns).
 *
 * Invariants:
 *   1. A decoder reads no row before the result's shape and row count are
 *      checked, and no value without its length checked (results.c getters).
 *   2. A decoder either sets the step's product and returns QN_OK, or returns an
 *      error and leaves the product unset.
 *   3. Every column a spec marks required is non-NULL in every row it accepts.
 */
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "store_engine.h"

/* ---------------------------------------------------------------- calls */

struct qn__step *qn__call_begin(qn_store *st, int stmt, const struct qn_call_opts *opts,
                                qn_store_req **r, int *rc)
{
    *r = NULL;
    const struct qn__stmt *d = qn__stmt_def(st, stmt);
    if (d == NULL) {
        *rc = QN_EINVAL;
        return NULL;
    }
    *rc = qn__req_new(st, 1, opts, r);
    if (*rc != QN_OK)
        return NULL;
    struct qn__step *s = qn__req_add(*r, stmt, d->decode);
    if (s == NULL) {
        qn__req_discard(*r);
        *r = NULL;
        *rc = QN_ENOMEM;
    }
    return s;
}

int qn__call_submit(qn_store_req *r, qn__finish_fn fin, qn__anyfn cb, void *ud, qn_store_req **req)
{
    qn__req_set_finish(r, fin, cb, ud);
    return qn__req_submit(r, req);
}

void qn__finish_int(qn_store_req *r, const struct qn_store_status *st)
{
    qn_int_cb cb = (qn_int_cb)qn__req_cb(r);
    const int64_t *v = qn__req_out(r, 0);
    if (cb != NULL)
        cb(qn__req_ud(r), st, (st->code == QN_OK && v) ? *v : 0);
}

void qn__finish_bool(qn_store_req *r, const struct qn_store_status *st)
{
    qn_bool_cb cb = (qn_bool_cb)qn__req_cb(r);
    const bool *v = qn__req_out(r, 0);
    if (cb != NULL)
        cb(qn__req_ud(r), st, (st->code == QN_OK && v) ? *v : false);
}

/* ---------------------------------------------------------------- rowspec */

static uint32_t kind_oid(uint8_t kind)
{
    switch (kind) {
    case QN__C_BOOL:
        return QN_OID_BOOL;
    case QN__C_I16:
        return QN_OID_INT2;
    case QN__C_I32:
        return QN_OID_INT4;
    case QN__C_I64:
        return QN_OID_INT8;
    case QN__C_TS:
        return QN_OID_TIMESTAMPTZ;
    case QN__C_UUID:
        return QN_OID_UUID;
    case QN__C_TEXT:
        return QN_OID_TEXT;
    case QN__C_BYTEA:
        return QN_OID_BYTEA;
    }
    return 0;
}

/* Writes column col of row w into the row structure at base. */
static void fill(struct qn__row *w, int col, const struct qn__col *c, uint8_t *base)
{
    void *f = base + c->off;
    switch (c->kind) {
    case QN__C_BOOL: {
        bool v = c->nullable ? qn__row_bool_or(w, col, c->dflt != 0) : qn__row_bool(w, col);
        memcpy(f, &v, sizeof v);
        break;
    }
    case QN__C_I16: {
        int16_t v = c->nullable && qn__row_isnull(w, col) ? (int16_t)c->dflt : qn__row_i16(w, col);
        memcpy(f, &v, sizeof v);
        break;
    }
    case QN__C_I32: {
        int32_t v = c->nullable ? qn__row_i32_or(w, col, (int32_t)c->dflt) : qn__row_i32(w, col);
        memcpy(f, &v, sizeof v);
        break;
    }
    case QN__C_I64: {
        int64_t v = c->nullable ? qn__row_i64_or(w, col, c->dflt) : qn__row_i64(w, col);
        memcpy(f, &v, sizeof v);
        break;
    }
    case QN__C_TS: {
        int64_t v = c->nullable ? qn__row_ts_or(w, col, c->dflt) : qn__row_ts(w, col);
        memcpy(f, &v, sizeof v);
        break;
    }
    case QN__C_UUID:
        if (c->nullable)
            qn__row_uuid_or0(w, col, f, NULL);
        else
            qn__row_uuid(w, col, f);
        break;
    case QN__C_TEXT: {
        const char *v = c->nullable ? qn__row_text_or(w, col) : qn__row_text(w, col);
        memcpy(f, &v, sizeof v);
        break;
    }
    case QN__C_BYTEA: {
        size_t len = 0;
        const uint8_t *v =
            c->nullable ? qn__row_bytea_or(w, col, &len) : qn__row_bytea(w, col, &len);
        memcpy(f, &v, sizeof v);
        memcpy(base + c->len_off, &len, sizeof len);
        break;
    }
    default:
        w->err = QN_EPROTOCOL_DB;
        break;
    }
}

/* The row a missing single row stands for: every nullable column's default. */
static void fill_defaults(const struct qn__rowspec *sp, uint8_t *base)
{
    for (int c = 0; c < sp->ncols; c++) {
        const struct qn__col *k = &sp->cols[c];
        void *f = base + k->off;
        switch (k->kind) {
        case QN__C_BOOL: {
            bool v = k->dflt != 0;
            memcpy(f, &v, sizeof v);
            break;
        }
        case QN__C_I16: {
            int16_t v = (int16_t)k->dflt;
            memcpy(f, &v, sizeof v);
            break;
        }
        case QN__C_I32: {
            int32_t v = (int32_t)k->dflt;
            memcpy(f, &v, sizeof v);
            break;
        }
        case QN__C_I64:
        case QN__C_TS:
            memcpy(f, &k->dflt, sizeof k->dflt);
            break;
        case QN__C_TEXT: {
            const char *v = "";
            memcpy(f, &v, sizeof v);
            break;
        }
        default:
            break; /* uuid and bytea: zero */
        }
    }
}

int qn__decode_rows(qn_store_req *r, int step, const PGresult *res, const struct qn__rowspec *sp)
{
    uint32_t oids[QN__ROWSPEC_MAX_COLS];
    if (sp->ncols < 1 || sp->ncols > QN__ROWSPEC_MAX_COLS)
        return QN_EINTERNAL;
    for (int c = 0; c < sp->ncols; c++)
        oids[c] = kind_oid(sp->cols[c].kind);
    if (qn__res_shape(res, sp->ncols, oids) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    if (rows < sp->min_rows || (sp->max_rows >= 0 && rows > sp->max_rows))
        return QN_EPROTOCOL_DB;
    if (sp->list_size == 0 && rows > 1)
        return QN_EINTERNAL; /* a single-row spec must say max_rows <= 1 */
    struct qn__arena *a = qn__req_arena(r);
    size_t nrows = (size_t)rows;
    uint8_t *v = qn__arena_zalloc(a, sp->row_size * (nrows ? nrows : 1));
    if (v == NULL)
        return QN_ENOMEM;
    for (size_t i = 0; i < nrows; i++) {
        struct qn__row w = {res, (int)i, a, QN_OK, -1};
        uint8_t *row = v + i * sp->row_size;
        for (int c = 0; c < sp->ncols && w.err == QN_OK; c++)
            fill(&w, c, &sp->cols[c], row);
        if (w.err != QN_OK || (sp->row_ok != NULL && !sp->row_ok(row)))
            return QN_EPROTOCOL_DB;
    }
    void *product = v;
    if (sp->list_size > 0) {
        uint8_t *list = qn__arena_zalloc(a, sp->list_size);
        if (list == NULL)
            return QN_ENOMEM;
        const void *rowsp = v;
        memcpy(list + sp->list_n_off, &nrows, sizeof nrows);
        memcpy(list + sp->list_rows_off, &rowsp, sizeof rowsp);
        product = list;
    } else if (nrows == 0) {
        if (sp->empty_null)
            product = NULL;
        else
            fill_defaults(sp, v);
    }
    int n;
    qn__req_steps(r, &n)[step].out = product;
    return QN_OK;
}

/* ---------------------------------------------------------------- scalars */

int qn__decode_scalar_int(qn_store_req *r, int step, const PGresult *res)
{
    if (PQnfields(res) != 1 || PQntuples(res) != 1 || PQfformat(res, 0) != 1)
        return QN_EPROTOCOL_DB;
    struct qn__row w = {res, 0, qn__req_arena(r), QN_OK, -1};
    int64_t v;
    switch (PQftype(res, 0)) {
    case QN_OID_INT2:
        v = qn__row_isnull(&w, 0) ? 0 : qn__row_i16(&w, 0);
        break;
    case QN_OID_INT4:
        v = qn__row_i32_or(&w, 0, 0);
        break;
    case QN_OID_INT8:
        v = qn__row_i64_or(&w, 0, 0);
        break;
    default:
        return QN_EPROTOCOL_DB;
    }
    if (w.err != QN_OK)
        return QN_EPROTOCOL_DB;
    int64_t *out = qn__arena_memdup(qn__req_arena(r), &v, sizeof v);
    if (out == NULL)
        return QN_ENOMEM;
    int n;
    qn__req_steps(r, &n)[step].out = out;
    return QN_OK;
}

int qn__decode_scalar_bool(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[1] = {QN_OID_BOOL};
    if (qn__res_shape(res, 1, t) != QN_OK || PQntuples(res) != 1)
        return QN_EPROTOCOL_DB;
    struct qn__row w = {res, 0, qn__req_arena(r), QN_OK, -1};
    bool v = qn__row_bool_or(&w, 0, false);
    if (w.err != QN_OK)
        return QN_EPROTOCOL_DB;
    bool *out = qn__arena_memdup(qn__req_arena(r), &v, sizeof v);
    if (out == NULL)
        return QN_ENOMEM;
    int n;
    qn__req_steps(r, &n)[step].out = out;
    return QN_OK;
}

int qn__decode_void(qn_store_req *r, int step, const PGresult *res)
{
    (void)r;
    (void)step;
    return PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK
               ? QN_OK
               : QN_EPROTOCOL_DB;
}

/* ---------------------------------------------------------------- tests, benches */

int qn__store_register(qn_store *st, const char *name, const char *sql, int nparams,
                       const uint32_t *types)
{
    if (st == NULL || name == NULL || sql == NULL || nparams < 0 || nparams > QN_STMT_MAX_PARAMS ||
        (nparams > 0 && types == NULL))
        return QN_EINVAL;
    if (st->ndyn >= QN_STMT_DYN_MAX)
        return QN_ELIMIT;
    struct qn__dyn_stmt *d = &st->dyn[st->ndyn];
    d->name = strdup(name);
    d->sql = strdup(sql);
    if (d->name == NULL || d->sql == NULL) {
        free(d->name);
        free(d->sql);
        d->name = d->sql = NULL;
        return QN_ENOMEM;
    }
    d->def.name = d->name;
    d->def.sql = d->sql;
    d->def.nparams = nparams;
    d->def.lane = QN__LANE_READ;
    d->def.writes = false;
    d->def.decode = NULL;
    for (int i = 0; i < nparams; i++)
        d->def.types[i] = types[i];
    return QN_STMT_COUNT + st->ndyn++;
}

int qn__store_set_class(qn_store *st, int stmt, int lane, bool writes)
{
    if (st == NULL || stmt < QN_STMT_COUNT || stmt >= QN_STMT_COUNT + st->ndyn)
        return QN_EINVAL;
    struct qn__stmt *d = &st->dyn[stmt - QN_STMT_COUNT].def;
    d->lane = lane == QN__LANE_WRITE ? QN__LANE_WRITE : QN__LANE_READ;
    d->writes = writes;
    return QN_OK;
}

static int decode_raw(qn_store_req *r, int step, const PGresult *res)
{
    int n;
    qn__req_steps(r, &n)[step].out = (void *)res;
    return QN_OK;
}

static void finish_raw(qn_store_req *r, const struct qn_store_status *st)
{
    qn__sql_cb cb = (qn__sql_cb)qn__req_cb(r);
    int n;
    struct qn__step *steps = qn__req_steps(r, &n);
    const PGresult *last = n > 0 ? steps[n - 1].out : NULL;
    if (cb != NULL)
        cb(qn__req_ud(r), st, st->code == QN_OK ? last : NULL);
}

/* Raw statements; cls < 0: the class of the registered statements (raw SQL is
 * read lane, read-only), else (lane, writes) = (cls >> 1, cls & 1). */
static int sql_many(qn_store *st, int cls, int nstmts, const int *stmt, const char *const *sql,
                    const uint32_t *const *types, const struct qn__params *params,
                    int result_format, const struct qn_call_opts *opts, qn__sql_cb cb, void *ud,
                    qn_store_req **req)
{
    qn_store_req *r = NULL;
    int rc = qn__req_new(st, nstmts, opts, &r);
    if (rc != QN_OK)
        return rc;
    for (int i = 0; i < nstmts; i++) {
        const struct qn__params *in = &params[i];
        struct qn__step *s;
        if (stmt != NULL && stmt[i] >= 0) {
            const struct qn__stmt *d = qn__stmt_def(st, stmt[i]);
            if (d == NULL || d->nparams != in->n || (s = qn__req_add(r, stmt[i], NULL)) == NULL) {
                qn__req_discard(r);
                return QN_EINVAL;
            }
        } else if ((s = qn__req_add_sql(r, sql[i], types[i], in->n)) == NULL) {
            qn__req_discard(r);
            return QN_ENOMEM;
        }
        s->result_format = result_format;
        s->decode = decode_raw;
        qn__params_init(&s->p, qn__req_arena(r), in->n);
        if (in->err != QN_OK)
            s->p.err = in->err;
        for (int k = 0; k < in->n && s->p.err == QN_OK; k++) {
            if (in->values[k] == NULL)
                continue;
            if (in->formats[k] == 0)
                qn__p_textfmt(&s->p, k, in->values[k]);
            else
                qn__p_bytea(&s->p, k, in->values[k], (size_t)in->lengths[k]);
        }
    }
    if (cls >= 0)
        qn__req_set_class(r, cls >> 1, (cls & 1) != 0);
    else if (stmt == NULL || stmt[0] < 0)
        qn__req_set_class(r, QN__LANE_READ, false);
    qn__req_set_finish(r, finish_raw, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn__store_sql_many(qn_store *st, int nstmts, const int *stmt, const char *const *sql,
                       const uint32_t *const *types, const struct qn__params *params,
                       const struct qn_call_opts *opts, qn__sql_cb cb, void *ud, qn_store_req **req)
{
    return sql_many(st, -1, nstmts, stmt, sql, types, params, 1, opts, cb, ud, req);
}

int qn__store_sql(qn_store *st, int stmt, const char *sql, const uint32_t *types,
                  const struct qn__params *params, int result_format,
                  const struct qn_call_opts *opts, qn__sql_cb cb, void *ud, qn_store_req **req)
{
    struct qn__params none = {0};
    const char *sqls[1] = {sql};
    const uint32_t *tys[1] = {types};
    int stmts[1] = {stmt};
    return sql_many(st, -1, 1, stmts, sqls, tys, params ? params : &none, result_format, opts, cb,
                    ud, req);
}

int qn__store_sql_as(qn_store *st, int lane, bool writes, const char *sql, const uint32_t *types,
                     const struct qn__params *params, int result_format,
                     const struct qn_call_opts *opts, qn__sql_cb cb, void *ud, qn_store_req **req)
{
    struct qn__params none = {0};
    const char *sqls[1] = {sql};
    const uint32_t *tys[1] = {types};
    int cls = (lane == QN__LANE_WRITE ? QN__LANE_WRITE : QN__LANE_READ) << 1 | (writes ? 1 : 0);
    return sql_many(st, cls, 1, NULL, sqls, tys, params ? params : &none, result_format, opts, cb,
                    ud, req);
}
