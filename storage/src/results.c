/*
 * results.c - decoding of binary result values (see store_int.h).
 *
 * Every value the database sends is untrusted: each decoder checks the exact
 * length of fixed-width types, arrays are walked element by element against the
 * buffer end before anything uses them, and a result's shape (column count,
 * format, types) is checked before any row is read. Anything malformed is
 * QN_EPROTOCOL_DB, never a crash and never a read past a buffer.
 *
 * Does not: allocate (values are borrowed from the PGresult, which the engine
 * keeps alive until the callback returns).
 *
 * Invariants:
 *   1. No read outside v[0..len) (texts: v[len], which libpq guarantees is NUL).
 *   2. Once a qn__row has err set, getters return neutral values and read nothing.
 */
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) << 32 | rd32(p + 4);
}

int qn__dec_bool(const char *v, int len, bool *out)
{
    if (v == NULL || len != 1 || ((uint8_t)v[0] != 0 && (uint8_t)v[0] != 1))
        return QN_EPROTOCOL_DB;
    *out = v[0] == 1;
    return QN_OK;
}

int qn__dec_i16(const char *v, int len, int16_t *out)
{
    if (v == NULL || len != 2)
        return QN_EPROTOCOL_DB;
    *out = (int16_t)rd16((const uint8_t *)v);
    return QN_OK;
}

int qn__dec_i32(const char *v, int len, int32_t *out)
{
    if (v == NULL || len != 4)
        return QN_EPROTOCOL_DB;
    *out = (int32_t)rd32((const uint8_t *)v);
    return QN_OK;
}

int qn__dec_i64(const char *v, int len, int64_t *out)
{
    if (v == NULL || len != 8)
        return QN_EPROTOCOL_DB;
    *out = (int64_t)rd64((const uint8_t *)v);
    return QN_OK;
}

int qn__dec_uuid(const char *v, int len, uint8_t out[16])
{
    if (v == NULL || len != 16)
        return QN_EPROTOCOL_DB;
    memcpy(out, v, 16);
    return QN_OK;
}

int qn__dec_ts(const char *v, int len, int64_t *out)
{
    int64_t pg;
    if (qn__dec_i64(v, len, &pg) != QN_OK)
        return QN_EPROTOCOL_DB;
    if (pg == INT64_MAX || pg == INT64_MIN)
        *out = pg; /* +-infinity */
    else if (pg > INT64_MAX - QN_PG_EPOCH_OFFSET_US)
        *out = INT64_MAX;
    else
        *out = pg + QN_PG_EPOCH_OFFSET_US;
    return QN_OK;
}

int qn__dec_text(const char *v, int len, const char **out)
{
    if (v == NULL || len < 0 || v[len] != '\0' || memchr(v, '\0', (size_t)len) != NULL)
        return QN_EPROTOCOL_DB;
    *out = v;
    return QN_OK;
}

int qn__dec_array(const char *v, int len, uint32_t elem_oid, int32_t max_n, struct qn__arr *a)
{
    const uint8_t *p = (const uint8_t *)v;
    if (v == NULL || len < 12)
        return QN_EPROTOCOL_DB;
    const uint8_t *end = p + len;
    uint32_t ndim = rd32(p), flag = rd32(p + 4), oid = rd32(p + 8);
    if (ndim > 1 || flag > 1 || oid != elem_oid)
        return QN_EPROTOCOL_DB;
    a->elem_oid = oid;
    a->has_null = flag == 1;
    a->next = 0;
    if (ndim == 0) {
        if (len != 12 || flag != 0)
            return QN_EPROTOCOL_DB;
        a->n = 0;
        a->pos = a->end = end;
        return QN_OK;
    }
    if (len < 20)
        return QN_EPROTOCOL_DB;
    uint32_t n = rd32(p + 12);
    /* the lower bound may be anything; it does not change the layout */
    if (n > (uint32_t)max_n || n > (uint32_t)(len - 20) / 4)
        return QN_EPROTOCOL_DB;
    a->n = (int32_t)n;
    a->pos = p + 20;
    a->end = end;
    /* walk every element once so that qn__arr_next cannot overrun */
    const uint8_t *w = a->pos;
    bool saw_null = false;
    for (uint32_t k = 0; k < n; k++) {
        if ((size_t)(end - w) < 4)
            return QN_EPROTOCOL_DB;
        uint32_t el = rd32(w);
        w += 4;
        if (el == UINT32_MAX) {
            saw_null = true;
            continue;
        }
        if (el > (uint32_t)INT32_MAX || el > (size_t)(end - w))
            return QN_EPROTOCOL_DB;
        w += el;
    }
    if (w != end || saw_null != a->has_null)
        return QN_EPROTOCOL_DB;
    return QN_OK;
}

int qn__arr_next(struct qn__arr *a, const uint8_t **p, int32_t *len)
{
    if (a->next >= a->n)
        return 0;
    uint32_t el = rd32(a->pos);
    a->pos += 4;
    a->next++;
    if (el == UINT32_MAX) {
        *p = NULL;
        *len = -1;
        return 1;
    }
    *p = a->pos;
    *len = (int32_t)el;
    a->pos += el;
    return 1;
}

/* ---------------------------------------------------------------- rows */

static bool texty(uint32_t oid)
{
    return oid == QN_OID_TEXT || oid == QN_OID_VARCHAR || oid == QN_OID_BPCHAR ||
           oid == QN_OID_NAME;
}

int qn__res_shape(const PGresult *r, int ncols, const uint32_t *oids)
{
    if (r == NULL || PQnfields(r) != ncols)
        return QN_EPROTOCOL_DB;
    for (int c = 0; c < ncols; c++) {
        uint32_t t = (uint32_t)PQftype(r, c);
        if (PQfformat(r, c) != 1)
            return QN_EPROTOCOL_DB;
        if (t != oids[c] && !(texty(t) && oids[c] == QN_OID_TEXT))
            return QN_EPROTOCOL_DB;
    }
    return QN_OK;
}

static void fail(struct qn__row *w, int col)
{
    if (w->err == QN_OK) {
        w->err = QN_EPROTOCOL_DB;
        w->bad_col = col;
    }
}

/* Value of column col; false (and err set unless null_ok) when NULL or bad. */
static bool value(struct qn__row *w, int col, bool null_ok, const char **v, int *len)
{
    if (w->err != QN_OK)
        return false;
    if (col < 0 || col >= PQnfields(w->r) || w->row < 0 || w->row >= PQntuples(w->r)) {
        fail(w, col);
        return false;
    }
    if (PQgetisnull(w->r, w->row, col)) {
        if (!null_ok)
            fail(w, col);
        return false;
    }
    *v = PQgetvalue(w->r, w->row, col);
    *len = PQgetlength(w->r, w->row, col);
    return true;
}

bool qn__row_isnull(struct qn__row *w, int col)
{
    if (w->err != QN_OK)
        return true;
    if (col < 0 || col >= PQnfields(w->r) || w->row < 0 || w->row >= PQntuples(w->r)) {
        fail(w, col);
        return true;
    }
    return PQgetisnull(w->r, w->row, col) != 0;
}

#define GETTER(name, type, dec, neutral)                                                           \
    static type name##_any(struct qn__row *w, int col, bool null_ok, type dflt)                    \
    {                                                                                              \
        const char *v;                                                                             \
        int len;                                                                                   \
        type out;                                                                                  \
        if (!value(w, col, null_ok, &v, &len))                                                     \
            return w->err == QN_OK ? dflt : (neutral);                                             \
        if (dec(v, len, &out) != QN_OK) {                                                          \
            fail(w, col);                                                                          \
            return neutral;                                                                        \
        }                                                                                          \
        return out;                                                                                \
    }

GETTER(get_bool, bool, qn__dec_bool, false)
GETTER(get_i16, int16_t, qn__dec_i16, 0)
GETTER(get_i32, int32_t, qn__dec_i32, 0)
GETTER(get_i64, int64_t, qn__dec_i64, 0)
GETTER(get_ts, int64_t, qn__dec_ts, 0)

bool qn__row_bool(struct qn__row *w, int col)
{
    return get_bool_any(w, col, false, false);
}

bool qn__row_bool_or(struct qn__row *w, int col, bool dflt)
{
    return get_bool_any(w, col, true, dflt);
}

int16_t qn__row_i16(struct qn__row *w, int col)
{
    return get_i16_any(w, col, false, 0);
}

int32_t qn__row_i32(struct qn__row *w, int col)
{
    return get_i32_any(w, col, false, 0);
}

int32_t qn__row_i32_or(struct qn__row *w, int col, int32_t dflt)
{
    return get_i32_any(w, col, true, dflt);
}

int64_t qn__row_i64(struct qn__row *w, int col)
{
    return get_i64_any(w, col, false, 0);
}

int64_t qn__row_i64_or(struct qn__row *w, int col, int64_t dflt)
{
    return get_i64_any(w, col, true, dflt);
}

int64_t qn__row_ts(struct qn__row *w, int col)
{
    return get_ts_any(w, col, false, 0);
}

int64_t qn__row_ts_or(struct qn__row *w, int col, int64_t dflt)
{
    return get_ts_any(w, col, true, dflt);
}

void qn__row_uuid(struct qn__row *w, int col, uint8_t out[16])
{
    const char *v;
    int len;
    memset(out, 0, 16);
    if (value(w, col, false, &v, &len) && qn__dec_uuid(v, len, out) != QN_OK)
        fail(w, col);
}

void qn__row_uuid_or0(struct qn__row *w, int col, uint8_t out[16], bool *was_null)
{
    const char *v;
    int len;
    memset(out, 0, 16);
    bool have = value(w, col, true, &v, &len);
    if (was_null != NULL)
        *was_null = !have;
    if (have && qn__dec_uuid(v, len, out) != QN_OK)
        fail(w, col);
}

static const char *text_any(struct qn__row *w, int col, bool null_ok)
{
    const char *v, *out;
    int len;
    if (!value(w, col, null_ok, &v, &len))
        return "";
    if (qn__dec_text(v, len, &out) != QN_OK) {
        fail(w, col);
        return "";
    }
    return out;
}

const char *qn__row_text_or(struct qn__row *w, int col)
{
    return text_any(w, col, true);
}

const char *qn__row_text(struct qn__row *w, int col)
{
    return text_any(w, col, false);
}

static const uint8_t *bytea_any(struct qn__row *w, int col, bool null_ok, size_t *len)
{
    const char *v;
    int l;
    *len = 0;
    if (!value(w, col, null_ok, &v, &l))
        return NULL;
    if (l < 0) {
        fail(w, col);
        return NULL;
    }
    *len = (size_t)l;
    return (const uint8_t *)v;
}

const uint8_t *qn__row_bytea_or(struct qn__row *w, int col, size_t *len)
{
    return bytea_any(w, col, true, len);
}

const uint8_t *qn__row_bytea(struct qn__row *w, int col, size_t *len)
{
    return bytea_any(w, col, false, len);
}
