/*
 * test_store_call.c - store_call.c: the table-driven row decoder and the
 * decoders of the statement table, fed results built in memory (no database):
 * the right shape decodes into the right fields; a wrong column count, a wrong
 * column type, a text-format column, NULL where it is not allowed, too many or
 * too few rows, or a row its check rejects is QN_EPROTOCOL_DB and leaves the
 * step without a product; NULLs take their defaults; every statement of the
 * table has a decoder that rejects an empty shape.
 */
#include <stddef.h>
#include <string.h>

#include "queen/error.h"
#include "storage_test.h"
#include "store_int.h"

/* ---------------------------------------------------------------- results */

static PGresult *result(int ncols, const Oid *types, int format)
{
    PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    ck_assert_ptr_nonnull(r);
    PGresAttDesc at[16];
    ck_assert_int_le(ncols, 16);
    memset(at, 0, sizeof at);
    for (int c = 0; c < ncols; c++) {
        at[c].name = (char *)"c";
        at[c].typid = types[c];
        at[c].format = format;
        at[c].typlen = -1;
        at[c].atttypmod = -1;
    }
    ck_assert(PQsetResultAttrs(r, ncols, at));
    return r;
}

static void set(PGresult *r, int row, int col, const void *v, int len)
{
    ck_assert(PQsetvalue(r, row, col, (char *)v, len));
}

static void set_i32(PGresult *r, int row, int col, int32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    set(r, row, col, b, 4);
}

static void set_i64(PGresult *r, int row, int col, int64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)v >> (56 - 8 * i));
    set(r, row, col, b, 8);
}

/* ---------------------------------------------------------------- a spec */

struct thing {
    int32_t a;
    int64_t b;
    const char *name;
    const uint8_t *blob;
    size_t blob_len;
    bool flag;
};

struct things {
    size_t n;
    const struct thing *rows;
};

static bool thing_ok(const void *row)
{
    return ((const struct thing *)row)->a >= 0;
}

static const struct qn__col thing_cols[] = {
    QN__I32(struct thing, a),
    QN__I64_OR(struct thing, b, -7),
    QN__TEXT_OR(struct thing, name),
    QN__BYTEA_OR(struct thing, blob, blob_len),
    QN__BOOL_OR(struct thing, flag, true),
};
static const Oid thing_types[5] = {QN_OID_INT4, QN_OID_INT8, QN_OID_TEXT, QN_OID_BYTEA,
                                   QN_OID_BOOL};

static const struct qn__rowspec list_spec = {QN__NCOLS(thing_cols),
                                             thing_cols,
                                             sizeof(struct thing),
                                             0,
                                             3,
                                             sizeof(struct things),
                                             offsetof(struct things, n),
                                             offsetof(struct things, rows),
                                             false,
                                             thing_ok};

static const struct qn__rowspec one_spec = {
    QN__NCOLS(thing_cols), thing_cols, sizeof(struct thing), 0, 1, 0, 0, 0, false, NULL};

static const struct qn__rowspec one_or_null_spec = {
    QN__NCOLS(thing_cols), thing_cols, sizeof(struct thing), 0, 1, 0, 0, 0, true, NULL};

static const struct qn__rowspec exactly_one_spec = {
    QN__NCOLS(thing_cols), thing_cols, sizeof(struct thing), 1, 1, 0, 0, 0, false, NULL};

/* Decodes res with spec on a detached request; returns the code, *out the product. */
static int run(const PGresult *res, const struct qn__rowspec *spec, qn_store_req **rq, void **out)
{
    ck_assert_int_eq(qn__req_new_detached(1, rq), QN_OK);
    struct qn__step *s = qn__req_add(*rq, QN_STMT_DB_NOW, NULL);
    ck_assert_ptr_nonnull(s);
    int rc = qn__decode_rows(*rq, 0, res, spec);
    *out = qn__req_out(*rq, 0);
    return rc;
}

static PGresult *good(int rows)
{
    PGresult *r = result(5, thing_types, 1);
    for (int i = 0; i < rows; i++) {
        set_i32(r, i, 0, 10 + i);
        set_i64(r, i, 1, 100 + i);
        set(r, i, 2, "name", 4);
        set(r, i, 3, "\x00\x01\x02", 3);
        set(r, i, 4, "\x00", 1);
    }
    return r;
}

START_TEST(list_decodes_every_field)
{
    PGresult *r = good(2);
    qn_store_req *rq;
    void *out;
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_OK);
    const struct things *t = out;
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->n, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(t->rows[i].a, 10 + i);
        ck_assert_int_eq(t->rows[i].b, 100 + i);
        ck_assert_str_eq(t->rows[i].name, "name");
        ck_assert_uint_eq(t->rows[i].blob_len, 3);
        ck_assert_mem_eq(t->rows[i].blob, "\x00\x01\x02", 3);
        ck_assert(!t->rows[i].flag);
    }
    qn__req_discard(rq);
    PQclear(r);
}
END_TEST

START_TEST(nulls_take_defaults)
{
    PGresult *r = result(5, thing_types, 1);
    set_i32(r, 0, 0, 1);
    for (int c = 1; c < 5; c++)
        set(r, 0, c, NULL, -1);
    qn_store_req *rq;
    void *out;
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_OK);
    const struct things *t = out;
    ck_assert_int_eq(t->rows[0].b, -7);
    ck_assert_str_eq(t->rows[0].name, "");
    ck_assert_ptr_null(t->rows[0].blob);
    ck_assert_uint_eq(t->rows[0].blob_len, 0);
    ck_assert(t->rows[0].flag);
    qn__req_discard(rq);
    PQclear(r);
}
END_TEST

START_TEST(null_where_required_is_a_protocol_error)
{
    PGresult *r = good(2);
    set(r, 1, 0, NULL, -1); /* a is NOT NULL */
    qn_store_req *rq;
    void *out;
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    ck_assert_ptr_null(out);
    qn__req_discard(rq);
    PQclear(r);
}
END_TEST

START_TEST(wrong_shapes_are_protocol_errors)
{
    qn_store_req *rq;
    void *out;
    /* one column too few, one too many */
    PGresult *r = result(4, thing_types, 1);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
    Oid six[6] = {QN_OID_INT4, QN_OID_INT8, QN_OID_TEXT, QN_OID_BYTEA, QN_OID_BOOL, QN_OID_INT4};
    r = result(6, six, 1);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
    /* a column of another type (int8 where int4 is expected), text accepts varchar */
    Oid wrong[5] = {QN_OID_INT8, QN_OID_INT8, QN_OID_TEXT, QN_OID_BYTEA, QN_OID_BOOL};
    r = result(5, wrong, 1);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
    Oid varchar[5] = {QN_OID_INT4, QN_OID_INT8, QN_OID_VARCHAR, QN_OID_BYTEA, QN_OID_BOOL};
    r = result(5, varchar, 1);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_OK);
    qn__req_discard(rq);
    PQclear(r);
    /* text format */
    r = result(5, thing_types, 0);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
    /* a value of the wrong width: int4 sent as 8 bytes */
    r = good(1);
    set_i64(r, 0, 0, 5);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
    /* a text holding a NUL */
    r = good(1);
    set(r, 0, 2, "a\0b", 3);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
}
END_TEST

START_TEST(row_counts_are_checked)
{
    qn_store_req *rq;
    void *out;
    PGresult *r = good(4); /* max 3 */
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
    r = good(0);
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_OK);
    ck_assert_uint_eq(((const struct things *)out)->n, 0);
    qn__req_discard(rq);
    ck_assert_int_eq(run(r, &exactly_one_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    /* a single-row product: no row gives the defaults, or NULL */
    ck_assert_int_eq(run(r, &one_spec, &rq, &out), QN_OK);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(((const struct thing *)out)->b, -7);
    ck_assert(((const struct thing *)out)->flag);
    qn__req_discard(rq);
    ck_assert_int_eq(run(r, &one_or_null_spec, &rq, &out), QN_OK);
    ck_assert_ptr_null(out);
    qn__req_discard(rq);
    PQclear(r);
    r = good(2);
    ck_assert_int_eq(run(r, &one_spec, &rq, &out), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    PQclear(r);
}
END_TEST

START_TEST(row_check_rejects)
{
    PGresult *r = good(2);
    set_i32(r, 1, 0, -1); /* thing_ok: a >= 0 */
    qn_store_req *rq;
    void *out;
    ck_assert_int_eq(run(r, &list_spec, &rq, &out), QN_EPROTOCOL_DB);
    ck_assert_ptr_null(out);
    qn__req_discard(rq);
    PQclear(r);
}
END_TEST

/* Every statement of the table has a decoder (or a void result), and none
 * accepts a result with no column. */
START_TEST(every_statement_has_a_decoder)
{
    PGresult *empty = result(0, NULL, 1);
    for (int i = 0; i < QN_STMT_COUNT; i++) {
        const struct qn__stmt *d = &qn__stmts[i];
        ck_assert_msg(d->decode != NULL, "%s has no decoder", d->name);
        ck_assert_msg(strncmp(d->sql, "SELECT ", 7) == 0, "%s", d->name);
        if (d->decode == qn__decode_void)
            continue;
        qn_store_req *rq;
        ck_assert_int_eq(qn__req_new_detached(1, &rq), QN_OK);
        struct qn__step *s = qn__req_add(rq, i, d->decode);
        s->expect = 1;
        ck_assert_msg(d->decode(rq, 0, empty) == QN_EPROTOCOL_DB, "%s", d->name);
        ck_assert_ptr_null(qn__req_out(rq, 0));
        qn__req_discard(rq);
    }
    PQclear(empty);
    /* and every procedure is called in schema qn, never queen */
    for (int i = 0; i < QN_STMT_COUNT; i++)
        ck_assert_msg(strstr(qn__stmts[i].sql, "queen.") == NULL ||
                          strstr(qn__stmts[i].sql, "queen.log_partitions") != NULL,
                      "%s calls into schema queen", qn__stmts[i].name);
}
END_TEST

/* Found by fuzz_store: a sidecar row whose range overflows int64 arithmetic
 * (base INT64_MIN) is a protocol error, not undefined behaviour. */
START_TEST(txns_range_overflow)
{
    Oid t[4] = {QN_OID_INT8, QN_OID_INT8, QN_OID_TIMESTAMPTZ, QN_OID_BYTEA};
    PGresult *r = result(4, t, 1);
    set_i64(r, 0, 0, INT64_MIN);
    set_i64(r, 0, 1, 0);
    set_i64(r, 0, 2, 0);
    set(r, 0, 3, "0123456789abcdef", 16);
    qn_store_req *rq;
    ck_assert_int_eq(qn__req_new_detached(1, &rq), QN_OK);
    qn__req_add(rq, QN_STMT_TXNS_WINDOW, qn__decode_txns);
    ck_assert_int_eq(qn__decode_txns(rq, 0, r), QN_EPROTOCOL_DB);
    qn__req_discard(rq);
    /* and the well-formed row of one offset decodes */
    set_i64(r, 0, 0, 7);
    set_i64(r, 0, 1, 7);
    ck_assert_int_eq(qn__req_new_detached(1, &rq), QN_OK);
    qn__req_add(rq, QN_STMT_TXNS_WINDOW, qn__decode_txns);
    ck_assert_int_eq(qn__decode_txns(rq, 0, r), QN_OK);
    qn__req_discard(rq);
    PQclear(r);
}
END_TEST

/* A detached request decodes but can never be submitted. */
START_TEST(detached_request_is_not_submitted)
{
    qn_store_req *rq;
    ck_assert_int_eq(qn__req_new_detached(1, &rq), QN_OK);
    ck_assert_ptr_nonnull(qn__req_add(rq, QN_STMT_DB_NOW, qn__decode_scalar_int));
    ck_assert_int_eq(qn__req_submit(rq, NULL), QN_EINVAL); /* freed */
    ck_assert_int_eq(qn__req_new_detached(0, &rq), QN_EINVAL);
}
END_TEST

Suite *qn_test_store_call_suite(void)
{
    Suite *s = suite_create("store_call");
    TCase *t = tcase_create("store_call");
    tcase_add_test(t, list_decodes_every_field);
    tcase_add_test(t, nulls_take_defaults);
    tcase_add_test(t, null_where_required_is_a_protocol_error);
    tcase_add_test(t, wrong_shapes_are_protocol_errors);
    tcase_add_test(t, row_counts_are_checked);
    tcase_add_test(t, row_check_rejects);
    tcase_add_test(t, every_statement_has_a_decoder);
    tcase_add_test(t, txns_range_overflow);
    tcase_add_test(t, detached_request_is_not_submitted);
    suite_add_tcase(s, t);
    return s;
}
