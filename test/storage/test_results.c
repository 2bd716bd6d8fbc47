/*
 * test_results.c - results.c: every decoder against wrong lengths, truncation at
 * every byte, oversized and lying length words, wrong types; run under ASan so an
 * out-of-bounds read fails the test. (Decoding real PGresults, including
 * malformed ones, is in test_store_engine.c; built in memory, test_store_call.c.)
 */
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "storage_test.h"
#include "store_int.h"

/* A heap copy of exactly n bytes (plus the NUL libpq adds), so ASan catches any
 * read past n + 1. */
static char *exact(const void *p, size_t n)
{
    char *b = malloc(n + 1);
    ck_assert_ptr_nonnull(b);
    if (n)
        memcpy(b, p, n);
    b[n] = '\0';
    return b;
}

START_TEST(fixed_width_lengths)
{
    const uint8_t buf[32] = {0, 0, 0, 0, 0, 0, 0, 1};
    bool b;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint8_t u[16];
    for (int len = -1; len <= 17; len++) {
        char *v = exact(buf, len > 0 ? (size_t)len : 0);
        ck_assert_int_eq(qn__dec_bool(v, len, &b), len == 1 ? QN_OK : QN_EPROTOCOL_DB);
        ck_assert_int_eq(qn__dec_i16(v, len, &i16), len == 2 ? QN_OK : QN_EPROTOCOL_DB);
        ck_assert_int_eq(qn__dec_i32(v, len, &i32), len == 4 ? QN_OK : QN_EPROTOCOL_DB);
        ck_assert_int_eq(qn__dec_i64(v, len, &i64), len == 8 ? QN_OK : QN_EPROTOCOL_DB);
        ck_assert_int_eq(qn__dec_ts(v, len, &i64), len == 8 ? QN_OK : QN_EPROTOCOL_DB);
        ck_assert_int_eq(qn__dec_uuid(v, len, u), len == 16 ? QN_OK : QN_EPROTOCOL_DB);
        free(v);
    }
    ck_assert_int_eq(qn__dec_i64(NULL, 8, &i64), QN_EPROTOCOL_DB);
}
END_TEST

START_TEST(values)
{
    int16_t i16;
    int32_t i32;
    int64_t i64;
    bool b;
    ck_assert_int_eq(qn__dec_i16("\xff\xfe", 2, &i16), QN_OK);
    ck_assert_int_eq(i16, -2);
    ck_assert_int_eq(qn__dec_i32("\x80\x00\x00\x00", 4, &i32), QN_OK);
    ck_assert_int_eq(i32, INT32_MIN);
    ck_assert_int_eq(qn__dec_i64("\x00\x00\x00\x00\x00\x00\x01\x00", 8, &i64), QN_OK);
    ck_assert_int_eq(i64, 256);
    ck_assert_int_eq(qn__dec_bool("\x01", 1, &b), QN_OK);
    ck_assert(b);
    ck_assert_int_eq(qn__dec_bool("\x00", 1, &b), QN_OK);
    ck_assert(!b);
    ck_assert_int_eq(qn__dec_bool("\x02", 1, &b), QN_EPROTOCOL_DB);
}
END_TEST

START_TEST(timestamps)
{
    int64_t us;
    /* 1 s after 2000-01-01 */
    ck_assert_int_eq(qn__dec_ts("\x00\x00\x00\x00\x00\x0f\x42\x40", 8, &us), QN_OK);
    ck_assert_int_eq(us, INT64_C(946684801000000));
    ck_assert_int_eq(qn__dec_ts("\x7f\xff\xff\xff\xff\xff\xff\xff", 8, &us), QN_OK);
    ck_assert_int_eq(us, INT64_MAX);
    ck_assert_int_eq(qn__dec_ts("\x80\x00\x00\x00\x00\x00\x00\x00", 8, &us), QN_OK);
    ck_assert_int_eq(us, INT64_MIN);
    /* finite but beyond what Unix microseconds hold: saturates, never overflows */
    ck_assert_int_eq(qn__dec_ts("\x7f\xff\xff\xff\xff\xff\xff\xfe", 8, &us), QN_OK);
    ck_assert_int_eq(us, INT64_MAX);
}
END_TEST

START_TEST(texts)
{
    const char *out;
    ck_assert_int_eq(qn__dec_text("abc", 3, &out), QN_OK);
    ck_assert_str_eq(out, "abc");
    ck_assert_int_eq(qn__dec_text("", 0, &out), QN_OK);
    ck_assert_int_eq(qn__dec_text("a\0c", 3, &out), QN_EPROTOCOL_DB); /* embedded NUL */
    ck_assert_int_eq(qn__dec_text("abcd", 3, &out), QN_EPROTOCOL_DB); /* not terminated */
    ck_assert_int_eq(qn__dec_text(NULL, 0, &out), QN_EPROTOCOL_DB);
    ck_assert_int_eq(qn__dec_text("abc", -1, &out), QN_EPROTOCOL_DB);
}
END_TEST

/* A valid int8[] of three elements (one NULL). */
static size_t good_array(uint8_t *b)
{
    static const uint8_t a[] = {0, 0, 0, 1, 0,    0,    0,    1,    0,    0,    0,    20,
                                0, 0, 0, 3, 0,    0,    0,    1,    0,    0,    0,    8,
                                0, 0, 0, 0, 0,    0,    0,    7,    0xff, 0xff, 0xff, 0xff,
                                0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    memcpy(b, a, sizeof a);
    return sizeof a;
}

START_TEST(array_ok)
{
    uint8_t b[64];
    size_t n = good_array(b);
    char *v = exact(b, n);
    struct qn__arr a;
    ck_assert_int_eq(qn__dec_array(v, (int)n, QN_OID_INT8, 3, &a), QN_OK);
    ck_assert_int_eq(a.n, 3);
    const uint8_t *p;
    int32_t len;
    int64_t x;
    ck_assert_int_eq(qn__arr_next(&a, &p, &len), 1);
    ck_assert_int_eq(qn__dec_i64((const char *)p, len, &x), QN_OK);
    ck_assert_int_eq(x, 7);
    ck_assert_int_eq(qn__arr_next(&a, &p, &len), 1);
    ck_assert_int_eq(len, -1);
    ck_assert_int_eq(qn__arr_next(&a, &p, &len), 1);
    ck_assert_int_eq(qn__dec_i64((const char *)p, len, &x), QN_OK);
    ck_assert_int_eq(x, -1);
    ck_assert_int_eq(qn__arr_next(&a, &p, &len), 0);
    free(v);
}
END_TEST

START_TEST(array_truncated_everywhere)
{
    uint8_t b[64];
    size_t n = good_array(b);
    struct qn__arr a;
    for (size_t cut = 0; cut < n; cut++) {
        char *v = exact(b, cut);
        ck_assert_int_eq(qn__dec_array(v, (int)cut, QN_OID_INT8, 100, &a), QN_EPROTOCOL_DB);
        free(v);
    }
    /* trailing garbage */
    b[n] = 0;
    char *v = exact(b, n + 1);
    ck_assert_int_eq(qn__dec_array(v, (int)n + 1, QN_OID_INT8, 100, &a), QN_EPROTOCOL_DB);
    free(v);
}
END_TEST

START_TEST(array_lies)
{
    uint8_t b[64], c[64];
    size_t n = good_array(b);
    struct qn__arr a;
#define TRY(mutate, want)                                                                          \
    do {                                                                                           \
        memcpy(c, b, n);                                                                           \
        mutate;                                                                                    \
        char *v = exact(c, n);                                                                     \
        ck_assert_int_eq(qn__dec_array(v, (int)n, QN_OID_INT8, 100, &a), want);                    \
        free(v);                                                                                   \
    } while (0)
    TRY((void)0, QN_OK);
    TRY(c[3] = 2, QN_EPROTOCOL_DB);                     /* ndim 2 */
    TRY(c[7] = 0, QN_EPROTOCOL_DB);                     /* has-null flag lies */
    TRY(c[7] = 2, QN_EPROTOCOL_DB);                     /* flag not 0/1 */
    TRY(c[11] = 23, QN_EPROTOCOL_DB);                   /* wrong element type */
    TRY(c[15] = 4, QN_EPROTOCOL_DB);                    /* more elements than bytes */
    TRY((c[12] = 0x7f, c[15] = 0xff), QN_EPROTOCOL_DB); /* huge count */
    TRY(c[15] = 2, QN_EPROTOCOL_DB);                    /* fewer elements: trailing bytes */
    TRY(c[23] = 9, QN_EPROTOCOL_DB);                    /* element longer than the rest */
    TRY((c[20] = 0x7f, c[23] = 0xff), QN_EPROTOCOL_DB); /* element length huge */
    TRY((c[20] = 0x80, c[23] = 0), QN_EPROTOCOL_DB);    /* negative, not -1 */
    TRY((c[16] = 0xff, c[19] = 0xfb), QN_OK);           /* any lower bound is fine */
    /* max_n */
    char *v = exact(b, n);
    ck_assert_int_eq(qn__dec_array(v, (int)n, QN_OID_INT8, 2, &a), QN_EPROTOCOL_DB);
    free(v);
    /* the empty array: exactly 12 bytes, no null flag */
    const uint8_t e[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20};
    v = exact(e, sizeof e);
    ck_assert_int_eq(qn__dec_array(v, 12, QN_OID_INT8, 0, &a), QN_OK);
    ck_assert_int_eq(a.n, 0);
    free(v);
#undef TRY
}
END_TEST

/* Random bytes never crash the array decoder (ASan watches). */
START_TEST(array_fuzz)
{
    uint64_t x = 88172645463325252ull;
    uint8_t b[64];
    size_t good = good_array(b);
    struct qn__arr a;
    for (int round = 0; round < 20000; round++) {
        uint8_t c[64];
        memcpy(c, b, sizeof c);
        size_t n = good;
        for (int k = 0; k < 3; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c[x % n] = (uint8_t)(x >> 24);
        }
        n = (size_t)(x >> 40) % (good + 1);
        char *v = exact(c, n);
        if (qn__dec_array(v, (int)n, QN_OID_INT8, 1000, &a) == QN_OK) {
            const uint8_t *p;
            int32_t len;
            int cnt = 0;
            while (qn__arr_next(&a, &p, &len) == 1) {
                if (len > 0)
                    ck_assert((const char *)p + len <= v + n);
                cnt++;
            }
            ck_assert_int_eq(cnt, a.n);
        }
        free(v);
    }
}
END_TEST

Suite *qn_test_results_suite(void)
{
    Suite *s = suite_create("results");
    TCase *t = tcase_create("results");
    tcase_add_test(t, fixed_width_lengths);
    tcase_add_test(t, values);
    tcase_add_test(t, timestamps);
    tcase_add_test(t, texts);
    tcase_add_test(t, array_ok);
    tcase_add_test(t, array_truncated_everywhere);
    tcase_add_test(t, array_lies);
    tcase_add_test(t, array_fuzz);
    suite_add_tcase(s, t);
    return s;
}
