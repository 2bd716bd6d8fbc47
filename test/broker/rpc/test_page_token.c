/*
 * test_page_token.c - rpc/page_token.c: the admin listings' page tokens.
 * Round trips of every kind, the binding (kind, tenant, filters), page sizes,
 * and every malformed token refused with a message and *k left unwritten.
 */
#include <string.h>

#include "process_test.h"
#include "queen/error.h"
#include "rpc/page_token.h"

static const uint8_t TENANT_B[16] = {1, 2, 3};

static char *enc(enum qn_page_kind kind, uint64_t b, const struct qn_page_key *k, char *out)
{
    ck_assert_int_eq(qn_page_token_encode(kind, b, k, out, QN_PAGE_TOKEN_MAX + 1), QN_OK);
    return out;
}

START_TEST(test_round_trips)
{
    char tok[QN_PAGE_TOKEN_MAX + 1];
    const char *why = NULL;
    struct qn_page_key k = {0}, out;
    const char *f[] = {"orders", "billing"};
    uint64_t b = qn_page_binding(QN_PAGE_GROUPS, NULL, f, 2);
    ck_assert_int_eq(qn_page_key_set_text(&k, 0, "billing"), QN_OK);
    ck_assert_int_eq(qn_page_key_set_text(&k, 1, "orders"), QN_OK);
    ck_assert_int_eq(qn_page_key_set_text(&k, 2, "p-7"), QN_OK);
    enc(QN_PAGE_GROUPS, b, &k, tok);
    ck_assert_int_eq(qn_page_token_decode(tok, QN_PAGE_GROUPS, b, 3, &out, &why), QN_OK);
    ck_assert_uint_eq(out.n_text, 3);
    ck_assert_str_eq(out.text[0], "billing");
    ck_assert_str_eq(out.text[2], "p-7");
    /* url-safe: no padding, no '+', '/' or '=' */
    ck_assert_ptr_null(strpbrk(tok, "+/="));
    /* the longest names fit */
    char longest[QN_NAME_MAX + 1];
    memset(longest, 'x', QN_NAME_MAX);
    longest[QN_NAME_MAX] = '\0';
    for (size_t i = 0; i < 3; i++)
        ck_assert_int_eq(qn_page_key_set_text(&k, i, longest), QN_OK);
    enc(QN_PAGE_GROUPS, b, &k, tok);
    ck_assert_int_eq(qn_page_token_decode(tok, QN_PAGE_GROUPS, b, 3, &out, &why), QN_OK);
    ck_assert_str_eq(out.text[1], longest);
    /* one longer is refused */
    char over[QN_NAME_MAX + 2];
    memset(over, 'x', QN_NAME_MAX + 1);
    over[QN_NAME_MAX + 1] = '\0';
    ck_assert_int_eq(qn_page_key_set_text(&k, 0, over), QN_EINVAL);
    /* dead letters: a time and an id */
    struct qn_page_key d = {.ts_us = -123456789};
    memset(d.id, 0xab, 16);
    uint64_t bd = qn_page_binding(QN_PAGE_DLQ, NULL, NULL, 0);
    enc(QN_PAGE_DLQ, bd, &d, tok);
    ck_assert_int_eq(qn_page_token_decode(tok, QN_PAGE_DLQ, bd, 0, &out, &why), QN_OK);
    ck_assert_int_eq(out.ts_us, -123456789);
    ck_assert_mem_eq(out.id, d.id, 16);
}
END_TEST

START_TEST(test_binding)
{
    const char *f1[] = {"a", "bc"}, *f2[] = {"ab", "c"}, *f3[] = {"a", NULL}, *f4[] = {"a", ""};
    uint64_t b = qn_page_binding(QN_PAGE_PARTITIONS, NULL, f1, 2);
    ck_assert_uint_ne(b, qn_page_binding(QN_PAGE_PARTITIONS, NULL, f2, 2));
    ck_assert_uint_ne(b, qn_page_binding(QN_PAGE_QUEUES, NULL, f1, 2));
    ck_assert_uint_ne(b, qn_page_binding(QN_PAGE_PARTITIONS, TENANT_B, f1, 2));
    ck_assert_uint_eq(qn_page_binding(QN_PAGE_PARTITIONS, NULL, f3, 2),
                      qn_page_binding(QN_PAGE_PARTITIONS, NULL, f4, 2));
    /* the default tenant, named or not */
    static const uint8_t deflt[16] = {[15] = 1};
    ck_assert_uint_eq(b, qn_page_binding(QN_PAGE_PARTITIONS, deflt, f1, 2));

    char tok[QN_PAGE_TOKEN_MAX + 1];
    struct qn_page_key k = {0}, out;
    memset(&out, 0x5a, sizeof out);
    ck_assert_int_eq(qn_page_key_set_text(&k, 0, "p1"), QN_OK);
    enc(QN_PAGE_PARTITIONS, b, &k, tok);
    const char *why = NULL;
    uint64_t other = qn_page_binding(QN_PAGE_PARTITIONS, TENANT_B, f1, 2);
    ck_assert_int_eq(qn_page_token_decode(tok, QN_PAGE_PARTITIONS, other, 1, &out, &why),
                     QN_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "other filters or another tenant"));
    ck_assert_int_eq(qn_page_token_decode(tok, QN_PAGE_QUEUES, b, 1, &out, &why), QN_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "another listing"));
    ck_assert_uint_eq(out.n_text, 0x5a5a5a5a5a5a5a5aull); /* untouched */
}
END_TEST

START_TEST(test_malformed)
{
    char tok[QN_PAGE_TOKEN_MAX + 1], buf[QN_PAGE_TOKEN_MAX + 8];
    struct qn_page_key k = {0}, out;
    const char *why = NULL;
    uint64_t b = qn_page_binding(QN_PAGE_QUEUES, NULL, NULL, 0);
    ck_assert_int_eq(qn_page_key_set_text(&k, 0, "q"), QN_OK);
    enc(QN_PAGE_QUEUES, b, &k, tok);
    const char *bad[] = {"", "A", "AB", "!!!!", "AAAA AAAA", "AAAAAAAAAAAAAAAAAAAA"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why = NULL;
        ck_assert_int_eq(qn_page_token_decode(bad[i], QN_PAGE_QUEUES, b, 1, &out, &why), QN_EINVAL);
        ck_assert_ptr_nonnull(why);
    }
    /* too long: refused unread */
    memset(buf, 'A', QN_PAGE_TOKEN_MAX + 1);
    buf[QN_PAGE_TOKEN_MAX + 1] = '\0';
    ck_assert_int_eq(qn_page_token_decode(buf, QN_PAGE_QUEUES, b, 1, &out, &why), QN_EINVAL);
    ck_assert_str_eq(why, "page_token is too long");
    /* every truncation of a good token is refused */
    size_t n = strlen(tok);
    for (size_t cut = 0; cut < n; cut++) {
        memcpy(buf, tok, cut);
        buf[cut] = '\0';
        ck_assert_int_eq(qn_page_token_decode(buf, QN_PAGE_QUEUES, b, 1, &out, &why), QN_EINVAL);
    }
    /* a key count other than the kind's */
    ck_assert_int_eq(qn_page_token_decode(tok, QN_PAGE_QUEUES, b, 3, &out, &why), QN_EINVAL);
    /* too many keys or none cannot be encoded */
    struct qn_page_key none = {0};
    ck_assert_int_eq(qn_page_token_encode(QN_PAGE_QUEUES, b, &none, buf, sizeof buf), QN_EINVAL);
    ck_assert_int_eq(qn_page_token_encode(QN_PAGE_QUEUES, b, &k, buf, 4), QN_EINVAL);
    ck_assert_str_eq(buf, "");
}
END_TEST

START_TEST(test_page_size)
{
    ck_assert_uint_eq(qn_page_size(0, 0), QN_PAGE_DEFAULT);
    ck_assert_uint_eq(qn_page_size(7, 0), 7);
    ck_assert_uint_eq(qn_page_size(0, 9), 9);
    ck_assert_uint_eq(qn_page_size(7, 9), 7);
    ck_assert_uint_eq(qn_page_size(QN_PAGE_MAX, 0), QN_PAGE_MAX);
    ck_assert_uint_eq(qn_page_size(QN_PAGE_MAX + 1, 0), QN_PAGE_MAX);
    ck_assert_uint_eq(qn_page_size(0, UINT32_MAX), QN_PAGE_MAX);
}
END_TEST

Suite *qn_test_page_token_suite(void)
{
    Suite *s = suite_create("page_token");
    TCase *tc = tcase_create("page_token");
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_binding);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_page_size);
    suite_add_tcase(s, tc);
    return s;
}
