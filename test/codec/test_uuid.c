/*
 * test_uuid.c - codec/src/uuid.c: UUIDv7 layout (RFC 9562), strict order within
 * a generator whatever the clock does, canonical text formatting and parsing.
 */
#include <stdint.h>
#include <string.h>

#include "queen/error.h"
#include "queen/ids.h"

#include "codec_test.h"

static uint64_t ts_of(const uint8_t u[16])
{
    uint64_t t = 0;
    for (int i = 0; i < 6; i++)
        t = t << 8 | u[i];
    return t;
}

static uint64_t counter_of(const uint8_t u[16])
{
    uint64_t a = ((uint64_t)(u[6] & 0x0f) << 8) | u[7];
    uint64_t b =
        ((uint64_t)(u[8] & 0x3f) << 24) | ((uint64_t)u[9] << 16) | ((uint64_t)u[10] << 8) | u[11];
    return a << 30 | b;
}

static void assert_v7(const uint8_t u[16])
{
    ck_assert_uint_eq(u[6] >> 4, 7); /* version */
    ck_assert_uint_eq(u[8] >> 6, 2); /* variant 10 */
}

START_TEST(layout_and_timestamp)
{
    struct qn_uuid7_gen g;
    qn_uuid7_init_seed(&g, 1);
    uint8_t u[16];
    uint64_t now = UINT64_C(0x017F22E279B0); /* RFC 9562 appendix A.6 timestamp */
    qn_uuid7_next(&g, now, u);
    assert_v7(u);
    ck_assert_uint_eq(ts_of(u), now);
    ck_assert_uint_eq(g.last_ms, now);
    ck_assert_uint_eq(counter_of(u), g.counter);
    /* a new millisecond seeds the counter with its top bit clear */
    ck_assert_uint_lt(g.counter, UINT64_C(1) << 41);
    char s[QN_UUID_STR_LEN];
    qn_uuid_format(u, s);
    ck_assert_int_eq(strncmp(s, "017f22e2-79b0-7", 15), 0);
}
END_TEST

static void assert_increasing(const uint8_t prev[16], const uint8_t cur[16])
{
    ck_assert_msg(memcmp(prev, cur, 16) < 0, "ids not strictly increasing");
}

START_TEST(strictly_increasing_with_moving_clock)
{
    struct qn_uuid7_gen g;
    qn_uuid7_init_seed(&g, 7);
    uint8_t prev[16], cur[16];
    uint64_t now = UINT64_C(1700000000000);
    qn_uuid7_next(&g, now, prev);
    for (int i = 0; i < 1000000; i++) {
        if (i % 1000 == 0)
            now++;
        qn_uuid7_next(&g, now, cur);
        assert_v7(cur);
        assert_increasing(prev, cur);
        memcpy(prev, cur, 16);
    }
}
END_TEST

START_TEST(strictly_increasing_when_clock_stalls)
{
    struct qn_uuid7_gen g;
    qn_uuid7_init_seed(&g, 8);
    uint8_t prev[16], cur[16];
    uint64_t now = UINT64_C(1700000000000);
    qn_uuid7_next(&g, now, prev);
    for (int i = 0; i < 200000; i++) {
        qn_uuid7_next(&g, now, cur);
        assert_increasing(prev, cur);
        ck_assert_uint_eq(ts_of(cur), now);
        memcpy(prev, cur, 16);
    }
}
END_TEST

START_TEST(strictly_increasing_when_clock_steps_back)
{
    struct qn_uuid7_gen g;
    qn_uuid7_init_seed(&g, 9);
    uint8_t prev[16], cur[16];
    uint64_t now = UINT64_C(1700000005000);
    qn_uuid7_next(&g, now, prev);
    uint64_t issued_ms = now;
    /* the clock jumps back five seconds, then crawls forward again */
    now -= 5000;
    for (int i = 0; i < 100000; i++) {
        if (i % 100 == 0)
            now++; /* ends 4 s behind the last issued timestamp */
        qn_uuid7_next(&g, now, cur);
        assert_increasing(prev, cur);
        ck_assert_uint_eq(ts_of(cur), issued_ms); /* keeps the last timestamp */
        memcpy(prev, cur, 16);
    }
    /* once the clock passes the old time, ids follow the clock again */
    qn_uuid7_next(&g, issued_ms + 1, cur);
    assert_increasing(prev, cur);
    ck_assert_uint_eq(ts_of(cur), issued_ms + 1);

    /* random jitter around a slowly moving clock */
    uint64_t x = 42;
    memcpy(prev, cur, 16);
    for (int i = 0; i < 200000; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        uint64_t t = issued_ms + (uint64_t)(i / 100) + ((x >> 60) & 7) - 4;
        qn_uuid7_next(&g, t, cur);
        assert_increasing(prev, cur);
        memcpy(prev, cur, 16);
    }
}
END_TEST

START_TEST(counter_overflow_advances_timestamp)
{
    struct qn_uuid7_gen g;
    qn_uuid7_init_seed(&g, 10);
    uint8_t prev[16], cur[16];
    uint64_t now = UINT64_C(1700000000000);
    qn_uuid7_next(&g, now, prev);
    g.counter = (UINT64_C(1) << 42) - 2; /* two steps from exhaustion */
    qn_uuid7_next(&g, now, cur);
    ck_assert_uint_eq(counter_of(cur), (UINT64_C(1) << 42) - 1);
    memcpy(prev, cur, 16);
    qn_uuid7_next(&g, now, cur);
    assert_increasing(prev, cur);
    ck_assert_uint_eq(ts_of(cur), now + 1);
    ck_assert_uint_lt(counter_of(cur), UINT64_C(1) << 41);
}
END_TEST

START_TEST(timestamp_clamped_to_48_bits)
{
    struct qn_uuid7_gen g;
    qn_uuid7_init_seed(&g, 11);
    uint8_t u[16];
    qn_uuid7_next(&g, UINT64_MAX, u);
    ck_assert_uint_eq(ts_of(u), (UINT64_C(1) << 48) - 1);
    assert_v7(u);
}
END_TEST

START_TEST(seeding)
{
    struct qn_uuid7_gen a, b;
    uint8_t ua[16], ub[16];
    qn_uuid7_init_seed(&a, 99);
    qn_uuid7_init_seed(&b, 99);
    qn_uuid7_next(&a, 1000, ua);
    qn_uuid7_next(&b, 1000, ub);
    ck_assert_mem_eq(ua, ub, 16);

    ck_assert_int_eq(qn_uuid7_init(&a), QN_OK);
    ck_assert_int_eq(qn_uuid7_init(&b), QN_OK);
    qn_uuid7_next(&a, 1000, ua);
    qn_uuid7_next(&b, 1000, ub);
    ck_assert(memcmp(ua + 6, ub + 6, 10) != 0);
}
END_TEST

START_TEST(now_is_plausible)
{
    uint64_t t = qn_now_ms();
    ck_assert_uint_gt(t, UINT64_C(1577836800000)); /* after 2020-01-01 */
    ck_assert_uint_lt(t, UINT64_C(1) << 48);
}
END_TEST

START_TEST(format_and_parse)
{
    uint8_t u[16], back[16];
    for (int i = 0; i < 16; i++)
        u[i] = (uint8_t)(i + 1);
    char s[QN_UUID_STR_LEN];
    qn_uuid_format(u, s);
    ck_assert_str_eq(s, "01020304-0506-0708-090a-0b0c0d0e0f10");
    ck_assert_int_eq(qn_uuid_parse(s, strlen(s), back), QN_OK);
    ck_assert_mem_eq(u, back, 16);

    const char *upper = "017F22E2-79B0-7CC3-98C4-DC0C0C07398F"; /* RFC 9562 A.6 */
    ck_assert_int_eq(qn_uuid_parse(upper, strlen(upper), back), QN_OK);
    qn_uuid_format(back, s);
    ck_assert_str_eq(s, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
    ck_assert_uint_eq(ts_of(back), UINT64_C(0x017F22E279B0));
    assert_v7(back);

    /* round trip of generated ids */
    struct qn_uuid7_gen g;
    qn_uuid7_init_seed(&g, 5);
    for (int i = 0; i < 1000; i++) {
        qn_uuid7_next(&g, 1700000000000u + (uint64_t)i, u);
        qn_uuid_format(u, s);
        ck_assert_uint_eq(strlen(s), 36);
        ck_assert_int_eq(qn_uuid_parse(s, 36, back), QN_OK);
        ck_assert_mem_eq(u, back, 16);
    }
}
END_TEST

START_TEST(parse_rejects)
{
    static const char *bad[] = {
        "",
        "01020304-0506-0708-090a-0b0c0d0e0f1",   /* 35 */
        "01020304-0506-0708-090a-0b0c0d0e0f100", /* 37 */
        "0102030405060708090a0b0c0d0e0f10",      /* no hyphens */
        "01020304-0506-0708-090a0-b0c0d0e0f10",  /* hyphen moved */
        "01020304_0506-0708-090a-0b0c0d0e0f10",  /* wrong separator */
        "0102030g-0506-0708-090a-0b0c0d0e0f10",  /* not hex */
        "{1020304-0506-0708-090a-0b0c0d0e0f1}",  /* braces */
        "01020304-0506-0708-090a-0b0c0d0e0f1 ",  /* trailing space */
        "-1020304-0506-0708-090a-0b0c0d0e0f10",
    };
    uint8_t out[16];
    memset(out, 0x77, sizeof(out));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(qn_uuid_parse(bad[i], strlen(bad[i]), out) == QN_EUUID_PARSE, "%s", bad[i]);
    /* the length counts, not a NUL */
    const char *ok = "01020304-0506-0708-090a-0b0c0d0e0f10xyz";
    ck_assert_int_eq(qn_uuid_parse(ok, 39, out), QN_EUUID_PARSE);
    ck_assert_int_eq(qn_uuid_parse(NULL, 36, out), QN_EUUID_PARSE);
    for (int i = 0; i < 16; i++)
        ck_assert_uint_eq(out[i], 0x77); /* untouched on failure */
    ck_assert_int_eq(qn_uuid_parse(ok, 36, out), QN_OK);
}
END_TEST

Suite *qn_test_uuid_suite(void)
{
    Suite *s = suite_create("uuid");
    TCase *tc = tcase_create("uuid7");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, layout_and_timestamp);
    tcase_add_test(tc, strictly_increasing_with_moving_clock);
    tcase_add_test(tc, strictly_increasing_when_clock_stalls);
    tcase_add_test(tc, strictly_increasing_when_clock_steps_back);
    tcase_add_test(tc, counter_overflow_advances_timestamp);
    tcase_add_test(tc, timestamp_clamped_to_48_bits);
    tcase_add_test(tc, seeding);
    tcase_add_test(tc, now_is_plausible);
    suite_add_tcase(s, tc);
    tc = tcase_create("text");
    tcase_add_test(tc, format_and_parse);
    tcase_add_test(tc, parse_rejects);
    suite_add_tcase(s, tc);
    return s;
}
