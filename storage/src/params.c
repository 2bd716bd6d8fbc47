/*
 * params.c - binary parameter encoding for libpq (see store_int.h).
 *
 * Does: copy every value into the call's arena in PostgreSQL's binary send format
 * (network byte order), including one-dimensional arrays; keep the first error.
 * Does not: talk to libpq, or know any statement (types are declared when the
 * statement is prepared, see stmts.c).
 *
 * Invariants:
 *   1. After qn__params_init every parameter is SQL NULL until set; a setter
 *      either writes value, length and format of parameter i, or records err.
 *   2. No encoded value is longer than QN_PG_MAX_FIELD; lengths fit in int.
 *   3. An array's has-null flag is 1 exactly when one of its elements is NULL.
 */
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

static void be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void be64(uint8_t *p, uint64_t v)
{
    be32(p, (uint32_t)(v >> 32));
    be32(p + 4, (uint32_t)v);
}

int qn__params_init(struct qn__params *p, struct qn__arena *a, int n)
{
    p->arena = a;
    p->n = n;
    p->err = QN_OK;
    p->values = NULL;
    p->lengths = NULL;
    p->formats = NULL;
    if (n < 0 || n > QN_STMT_MAX_PARAMS)
        return p->err = QN_EINVAL;
    if (n == 0)
        return QN_OK;
    p->values = qn__arena_zalloc(a, sizeof *p->values * (size_t)n);
    p->lengths = qn__arena_zalloc(a, sizeof *p->lengths * (size_t)n);
    p->formats = qn__arena_alloc(a, sizeof *p->formats * (size_t)n);
    if (p->values == NULL || p->lengths == NULL || p->formats == NULL)
        return p->err = QN_ENOMEM;
    for (int i = 0; i < n; i++)
        p->formats[i] = 1;
    return QN_OK;
}

/* A slot of len bytes for parameter i, or NULL with err set. */
static uint8_t *slot(struct qn__params *p, int i, size_t len)
{
    if (p->err != QN_OK)
        return NULL;
    if (i < 0 || i >= p->n || len > QN_PG_MAX_FIELD) {
        p->err = QN_EINVAL;
        return NULL;
    }
    uint8_t *b = qn__arena_alloc(p->arena, len);
    if (b == NULL) {
        p->err = QN_ENOMEM;
        return NULL;
    }
    p->values[i] = (const char *)b;
    p->lengths[i] = (int)len;
    p->formats[i] = 1;
    return b;
}

void qn__p_null(struct qn__params *p, int i)
{
    if (p->err != QN_OK)
        return;
    if (i < 0 || i >= p->n) {
        p->err = QN_EINVAL;
        return;
    }
    p->values[i] = NULL;
    p->lengths[i] = 0;
}

void qn__p_bool(struct qn__params *p, int i, bool v)
{
    uint8_t *b = slot(p, i, 1);
    if (b)
        b[0] = v ? 1 : 0;
}

void qn__p_i16(struct qn__params *p, int i, int16_t v)
{
    uint8_t *b = slot(p, i, 2);
    if (b)
        be16(b, (uint16_t)v);
}

void qn__p_i32(struct qn__params *p, int i, int32_t v)
{
    uint8_t *b = slot(p, i, 4);
    if (b)
        be32(b, (uint32_t)v);
}

void qn__p_i64(struct qn__params *p, int i, int64_t v)
{
    uint8_t *b = slot(p, i, 8);
    if (b)
        be64(b, (uint64_t)v);
}

void qn__p_uuid(struct qn__params *p, int i, const uint8_t u[16])
{
    if (u == NULL) {
        qn__p_null(p, i);
        return;
    }
    uint8_t *b = slot(p, i, 16);
    if (b)
        memcpy(b, u, 16);
}

void qn__p_ts(struct qn__params *p, int i, int64_t unix_us)
{
    int64_t pg;
    if (unix_us == INT64_MAX || unix_us == INT64_MIN)
        pg = unix_us; /* PostgreSQL's +-infinity */
    else if (unix_us < INT64_MIN + QN_PG_EPOCH_OFFSET_US)
        pg = INT64_MIN;
    else
        pg = unix_us - QN_PG_EPOCH_OFFSET_US;
    qn__p_i64(p, i, pg);
}

void qn__p_bytea(struct qn__params *p, int i, const void *v, size_t len)
{
    if (v == NULL) {
        qn__p_null(p, i);
        return;
    }
    uint8_t *b = slot(p, i, len);
    if (b && len)
        memcpy(b, v, len);
}

void qn__p_text(struct qn__params *p, int i, const char *s)
{
    if (s == NULL) {
        qn__p_null(p, i);
        return;
    }
    qn__p_bytea(p, i, s, strlen(s));
}

void qn__p_text_or(struct qn__params *p, int i, const char *s, const char *dflt)
{
    qn__p_text(p, i, (s == NULL || *s == '\0') ? dflt : s);
}

void qn__p_textfmt(struct qn__params *p, int i, const char *s)
{
    if (s == NULL) {
        qn__p_null(p, i);
        return;
    }
    size_t len = strlen(s);
    /* text format is NUL-terminated for libpq */
    uint8_t *b = slot(p, i, len + 1);
    if (b) {
        memcpy(b, s, len + 1);
        p->lengths[i] = (int)len;
        p->formats[i] = 0;
    }
}

/* Size of an array of n elements whose payload bytes total `bytes`. */
static int array_size(size_t n, size_t bytes, size_t *out)
{
    if (n > (size_t)INT32_MAX / 4 || bytes > QN_PG_MAX_FIELD)
        return QN_EINVAL;
    size_t sz = (n == 0 ? 12u : 20u) + 4u * n + bytes;
    if (sz > QN_PG_MAX_FIELD)
        return QN_EINVAL;
    *out = sz;
    return QN_OK;
}

/* Writes the header; returns the position of the first element. */
static uint8_t *array_header(uint8_t *b, uint32_t oid, size_t n, bool has_null)
{
    be32(b, n == 0 ? 0 : 1);
    be32(b + 4, has_null ? 1 : 0);
    be32(b + 8, oid);
    if (n == 0)
        return b + 12;
    be32(b + 12, (uint32_t)n);
    be32(b + 16, 1);
    return b + 20;
}

int qn__enc_array(struct qn__arena *a, uint32_t elem_oid, size_t n, const uint8_t *const *ptrs,
                  const int32_t *lens, uint8_t **out, size_t *out_len)
{
    size_t bytes = 0, sz;
    bool has_null = false;
    for (size_t k = 0; k < n; k++) {
        if (lens[k] < 0) {
            has_null = true;
            continue;
        }
        bytes += (size_t)lens[k];
        if (bytes > QN_PG_MAX_FIELD)
            return QN_EINVAL;
    }
    int rc = array_size(n, bytes, &sz);
    if (rc != QN_OK)
        return rc;
    uint8_t *b = qn__arena_alloc(a, sz);
    if (b == NULL)
        return QN_ENOMEM;
    uint8_t *w = array_header(b, elem_oid, n, has_null);
    for (size_t k = 0; k < n; k++) {
        if (lens[k] < 0) {
            be32(w, UINT32_MAX); /* -1 */
            w += 4;
            continue;
        }
        be32(w, (uint32_t)lens[k]);
        w += 4;
        if (lens[k] > 0)
            memcpy(w, ptrs[k], (size_t)lens[k]);
        w += lens[k];
    }
    *out = b;
    *out_len = sz;
    return QN_OK;
}

/* Fixed-width arrays: width 2, 4 or 8 bytes per element, never NULL. */
static void arr_fixed(struct qn__params *p, int i, uint32_t oid, const void *v, size_t n, int width)
{
    size_t sz;
    if (p->err != QN_OK)
        return;
    if (n > 0 && v == NULL) {
        p->err = QN_EINVAL;
        return;
    }
    if (array_size(n, n * (size_t)width, &sz) != QN_OK) {
        p->err = QN_EINVAL;
        return;
    }
    uint8_t *b = slot(p, i, sz);
    if (b == NULL)
        return;
    uint8_t *w = array_header(b, oid, n, false);
    for (size_t k = 0; k < n; k++) {
        be32(w, (uint32_t)width);
        w += 4;
        if (width == 2)
            be16(w, (uint16_t)((const int16_t *)v)[k]);
        else if (width == 4)
            be32(w, (uint32_t)((const int32_t *)v)[k]);
        else
            be64(w, (uint64_t)((const int64_t *)v)[k]);
        w += width;
    }
}

void qn__p_arr_i16(struct qn__params *p, int i, const int16_t *v, size_t n)
{
    arr_fixed(p, i, QN_OID_INT2, v, n, 2);
}

void qn__p_arr_i32(struct qn__params *p, int i, const int32_t *v, size_t n)
{
    arr_fixed(p, i, QN_OID_INT4, v, n, 4);
}

void qn__p_arr_i64(struct qn__params *p, int i, const int64_t *v, size_t n)
{
    arr_fixed(p, i, QN_OID_INT8, v, n, 8);
}

void qn__p_array(struct qn__params *p, int i, uint32_t oid, const uint8_t *const *ptrs,
                 const int32_t *lens, size_t n)
{
    uint8_t *b;
    size_t len;
    if (p->err != QN_OK)
        return;
    if (i < 0 || i >= p->n) {
        p->err = QN_EINVAL;
        return;
    }
    int rc = qn__enc_array(p->arena, oid, n, ptrs, lens, &b, &len);
    if (rc != QN_OK) {
        p->err = rc;
        return;
    }
    p->values[i] = (const char *)b;
    p->lengths[i] = (int)len;
    p->formats[i] = 1;
}

void qn__p_arr_text(struct qn__params *p, int i, const char *const *v, size_t n, const char *dflt)
{
    if (p->err != QN_OK)
        return;
    if ((n > 0 && v == NULL) || n > (size_t)INT32_MAX / 4) {
        p->err = QN_EINVAL;
        return;
    }
    const uint8_t **ptrs = qn__arena_alloc(p->arena, sizeof *ptrs * n);
    int32_t *lens = qn__arena_alloc(p->arena, sizeof *lens * n);
    if (ptrs == NULL || lens == NULL) {
        p->err = QN_ENOMEM;
        return;
    }
    for (size_t k = 0; k < n; k++) {
        const char *s = v[k];
        if (dflt != NULL && (s == NULL || *s == '\0'))
            s = dflt;
        size_t l = s ? strlen(s) : 0;
        if (l > QN_PG_MAX_FIELD) {
            p->err = QN_EINVAL;
            return;
        }
        ptrs[k] = (const uint8_t *)s;
        lens[k] = s ? (int32_t)l : -1;
    }
    /* the scratch arrays stay in the arena until the call ends: small */
    qn__p_array(p, i, QN_OID_TEXT, ptrs, lens, n);
}

void qn__p_arr_bytea(struct qn__params *p, int i, const uint8_t *const *ptrs, const size_t *lens,
                     size_t n)
{
    if (p->err != QN_OK)
        return;
    if ((n > 0 && (ptrs == NULL || lens == NULL)) || n > (size_t)INT32_MAX / 4) {
        p->err = QN_EINVAL;
        return;
    }
    int32_t *l32 = qn__arena_alloc(p->arena, sizeof *l32 * n);
    if (l32 == NULL) {
        p->err = QN_ENOMEM;
        return;
    }
    for (size_t k = 0; k < n; k++) {
        if (ptrs[k] != NULL && lens[k] > QN_PG_MAX_FIELD) {
            p->err = QN_EINVAL;
            return;
        }
        l32[k] = ptrs[k] ? (int32_t)lens[k] : -1;
    }
    qn__p_array(p, i, QN_OID_BYTEA, ptrs, l32, n);
}

void qn__p_names(struct qn__params *p, int i, const struct qn_name_filter *f)
{
    if (f == NULL) {
        qn__p_null(p, i);
        qn__p_null(p, i + 1);
        return;
    }
    qn__p_arr_text(p, i, f->exact, f->n_exact, NULL);
    qn__p_arr_text(p, i + 1, f->prefix, f->n_prefix, NULL);
}
