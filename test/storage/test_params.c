/*
 * test_params.c - params.c: binary encodings byte by byte, NULLs, limits and the
 * sticky error. (Round trips through a real server are in test_store_engine.c.)
 */
#include <string.h>

#include "queen/error.h"
#include "storage_test.h"
#include "store_int.h"

static struct qn__arena arena;
static struct qn__params P;

static void setup(void)
{
    qn__arena_init(&arena, 1 << 24);
    ck_assert_int_eq(qn__params_init(&P, &arena, 8), QN_OK);
}

static void teardown(void)
{
    qn__arena_free(&arena);
}

static void expect(int i, const uint8_t *bytes, int len, int format)
{
    ck_assert_int_eq(P.err, QN_OK);
    ck_assert_ptr_nonnull(P.values[i]);
    ck_assert_int_eq(P.lengths[i], len);
    ck_assert_int_eq(P.formats[i], format);
    ck_assert_mem_eq(P.values[i], bytes, (size_t)len);
}

START_TEST(scalars)
{
    qn__p_bool(&P, 0, true);
    qn__p_i16(&P, 1, -2);
    qn__p_i32(&P, 2, 0x01020304);
    qn__p_i64(&P, 3, -1);
    expect(0, (const uint8_t[]){1}, 1, 1);
    expect(1, (const uint8_t[]){0xff, 0xfe}, 2, 1);
    expect(2, (const uint8_t[]){1, 2, 3, 4}, 4, 1);
    expect(3, (const uint8_t[]){0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 8, 1);
    uint8_t u[16];
    qt_bytes16(7, u);
    qn__p_uuid(&P, 4, u);
    expect(4, u, 16, 1);
    qn__p_uuid(&P, 5, NULL);
    ck_assert_ptr_null(P.values[5]);
    qn__p_text(&P, 6, "héllo");
    expect(6, (const uint8_t *)"héllo", 6, 1);
    qn__p_textfmt(&P, 7, "{\"a\":1}");
    expect(7, (const uint8_t *)"{\"a\":1}", 7, 0);
    ck_assert_int_eq(P.values[7][7], '\0');
}
END_TEST

START_TEST(timestamps)
{
    /* 2000-01-01 00:00:01 UTC is 1 s after PostgreSQL's epoch */
    qn__p_ts(&P, 0, INT64_C(946684801000000));
    expect(0, (const uint8_t[]){0, 0, 0, 0, 0, 0x0f, 0x42, 0x40}, 8, 1);
    /* the Unix epoch is before it: negative */
    qn__p_ts(&P, 1, 0);
    int64_t v = -INT64_C(946684800000000);
    uint8_t be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)((uint64_t)v >> (56 - 8 * i));
    expect(1, be, 8, 1);
    /* infinities pass through; below the range saturates to -infinity */
    qn__p_ts(&P, 2, INT64_MAX);
    expect(2, (const uint8_t[]){0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 8, 1);
    qn__p_ts(&P, 3, INT64_MIN + 5);
    expect(3, (const uint8_t[]){0x80, 0, 0, 0, 0, 0, 0, 0}, 8, 1);
}
END_TEST

START_TEST(int_arrays)
{
    int64_t v[3] = {1, -2, INT64_MAX};
    qn__p_arr_i64(&P, 0, v, 3);
    const uint8_t want[] = {0,    0,    0, 1, 0, 0, 0,    0,    0,    0,    0,    20,   0,    0,
                            0,    3,    0, 0, 0, 1, 0,    0,    0,    8,    0,    0,    0,    0,
                            0,    0,    0, 1, 0, 0, 0,    8,    0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                            0xff, 0xfe, 0, 0, 0, 8, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    expect(0, want, (int)sizeof want, 1);
    int16_t s[2] = {1, -1};
    qn__p_arr_i16(&P, 1, s, 2);
    const uint8_t w16[] = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 21, 0, 0, 0,    2,
                           0, 0, 0, 1, 0, 0, 0, 2, 0, 1, 0, 0,  0, 2, 0xff, 0xff};
    expect(1, w16, (int)sizeof w16, 1);
    int32_t i4[1] = {258};
    qn__p_arr_i32(&P, 2, i4, 1);
    const uint8_t w32[] = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0,
                           0, 1, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0,  1, 2};
    expect(2, w32, (int)sizeof w32, 1);
    /* empty: ndim 0, no dimensions */
    qn__p_arr_i64(&P, 3, NULL, 0);
    const uint8_t empty[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20};
    expect(3, empty, (int)sizeof empty, 1);
}
END_TEST

START_TEST(text_and_bytea_arrays)
{
    const char *t[3] = {"ab", NULL, ""};
    qn__p_arr_text(&P, 0, t, 3, NULL);
    const uint8_t want[] = {0, 0, 0, 1, 0, 0, 0, 1,   0,   0,    0,    25,   0,    0, 0, 3, 0,
                            0, 0, 1, 0, 0, 0, 2, 'a', 'b', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    expect(0, want, (int)sizeof want, 1);
    /* a default replaces NULL and "" and clears the has-null flag */
    qn__p_arr_text(&P, 1, t, 3, "D");
    const uint8_t want2[] = {0, 0, 0, 1, 0, 0, 0,   0,   0, 0, 0, 25, 0,   0, 0, 3, 0, 0,
                             0, 1, 0, 0, 0, 2, 'a', 'b', 0, 0, 0, 1,  'D', 0, 0, 0, 1, 'D'};
    expect(1, want2, (int)sizeof want2, 1);
    const uint8_t blob[3] = {0, 1, 2};
    const uint8_t *ptrs[2] = {blob, NULL};
    size_t lens[2] = {3, 0};
    qn__p_arr_bytea(&P, 2, ptrs, lens, 2);
    const uint8_t want3[] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 17,   0,    0,    0,   2,
                             0, 0, 0, 1, 0, 0, 0, 3, 0, 1, 2, 0xff, 0xff, 0xff, 0xff};
    expect(2, want3, (int)sizeof want3, 1);
}
END_TEST

START_TEST(errors_are_sticky)
{
    qn__p_i32(&P, 8, 1); /* out of range index */
    ck_assert_int_eq(P.err, QN_EINVAL);
    qn__p_i32(&P, 0, 1); /* ignored after the first error */
    ck_assert_ptr_null(P.values[0]);
    struct qn__params q;
    ck_assert_int_eq(qn__params_init(&q, &arena, QN_STMT_MAX_PARAMS + 1), QN_EINVAL);
    ck_assert_int_eq(qn__params_init(&q, &arena, 2), QN_OK);
    qn__p_arr_i64(&q, 0, NULL, 3); /* n > 0 without values */
    ck_assert_int_eq(q.err, QN_EINVAL);
    ck_assert_int_eq(qn__params_init(&q, &arena, 2), QN_OK);
    qn__p_arr_i64(&q, 0, (const int64_t *)"", (size_t)INT32_MAX);
    ck_assert_int_eq(q.err, QN_EINVAL);
    ck_assert_int_eq(qn__params_init(&q, &arena, 2), QN_OK);
    qn__p_bytea(&q, 0, "x", QN_PG_MAX_FIELD + 1);
    ck_assert_int_eq(q.err, QN_EINVAL);
}
END_TEST

START_TEST(arena_cap_is_enomem)
{
    struct qn__arena small;
    struct qn__params q;
    qn__arena_init(&small, 4096);
    ck_assert_int_eq(qn__params_init(&q, &small, 1), QN_OK);
    static uint8_t big[8192];
    qn__p_bytea(&q, 0, big, sizeof big);
    ck_assert_int_eq(q.err, QN_ENOMEM);
    qn__arena_free(&small);
}
END_TEST

START_TEST(enc_array_generic)
{
    uint8_t *out;
    size_t len;
    const uint8_t *ptrs[2] = {(const uint8_t *)"xy", NULL};
    int32_t lens[2] = {2, -1};
    ck_assert_int_eq(qn__enc_array(&arena, QN_OID_TEXT, 2, ptrs, lens, &out, &len), QN_OK);
    ck_assert_uint_eq(len, 20 + 4 + 2 + 4);
    struct qn__arr a;
    ck_assert_int_eq(qn__dec_array((const char *)out, (int)len, QN_OID_TEXT, 10, &a), QN_OK);
    ck_assert_int_eq(a.n, 2);
    ck_assert(a.has_null);
    const uint8_t *p;
    int32_t l;
    ck_assert_int_eq(qn__arr_next(&a, &p, &l), 1);
    ck_assert_int_eq(l, 2);
    ck_assert_mem_eq(p, "xy", 2);
    ck_assert_int_eq(qn__arr_next(&a, &p, &l), 1);
    ck_assert_int_eq(l, -1);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(qn__arr_next(&a, &p, &l), 0);
}
END_TEST

Suite *qn_test_params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *t = tcase_create("params");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, scalars);
    tcase_add_test(t, timestamps);
    tcase_add_test(t, int_arrays);
    tcase_add_test(t, text_and_bytea_arrays);
    tcase_add_test(t, errors_are_sticky);
    tcase_add_test(t, arena_cap_is_enomem);
    tcase_add_test(t, enc_array_generic);
    suite_add_tcase(s, t);
    return s;
}
