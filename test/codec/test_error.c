/*
 * test_error.c - codec/src/error.c: every code has its own text; unknown codes
 * and the fatal range behave as error.h documents.
 */
#include <string.h>

#include "queen/error.h"

#include "codec_test.h"

static const int all_codes[] = {
    QN_OK,
    QN_ENOMEM,
    QN_EINVAL,
    QN_ERANGE,
    QN_ELIMIT,
    QN_ENOTFOUND,
    QN_EIO,
    QN_EINTERNAL,
    QN_EFRAME_TRUNCATED,
    QN_EFRAME_BODY_OVERRUN,
    QN_EFRAME_FLAGS,
    QN_EFRAME_INNER_OVERRUN,
    QN_EFRAME_FIELD_TOO_LONG,
    QN_ESEGMENT_CORRUPT,
    QN_ESEGMENT_TOO_LARGE,
    QN_ESEGMENT_COUNT,
    QN_EUUID_PARSE,
    QN_EUNAVAILABLE,
    QN_EDB,
    QN_ETIMEOUT,
    QN_ECANCELLED,
    QN_ECONFLICT,
    QN_EDUPLICATE,
    QN_EPROTOCOL_DB,
    QN_EINDOUBT,
    QN_EBADREQUEST,
    QN_EBUSY,
    QN_EDEADLINE,
    QN_ESHUTDOWN,
    QN_EPROTO,
    QN_ECLOSED,
    QN_EFLOOD,
    QN_EENVELOPE_MALFORMED,
    QN_EENVELOPE_UNKNOWN_KEY,
    QN_EENVELOPE_AUTH,
    QN_EKEYRING_PARSE,
    QN_ECRYPTO,
    QN_EAUTH_MISSING,
    QN_EAUTH_MALFORMED,
    QN_EAUTH_ALG,
    QN_EAUTH_SIGNATURE,
    QN_EAUTH_UNKNOWN_KID,
    QN_EAUTH_EXPIRED,
    QN_EAUTH_NOT_YET_VALID,
    QN_EAUTH_ISSUER,
    QN_EAUTH_AUDIENCE,
    QN_EAUTH_CLAIM,
    QN_EAUTH_CERT,
    QN_EAUTH_DENIED,
    QN_EAUTH_CONFIG,
};
#define NCODES (sizeof(all_codes) / sizeof(all_codes[0]))

START_TEST(every_code_has_distinct_text)
{
    const char *unknown = qn_strerror(12345);
    ck_assert_str_eq(unknown, "unknown error");
    for (size_t i = 0; i < NCODES; i++) {
        const char *t = qn_strerror(all_codes[i]);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_ne(t, unknown);
        ck_assert_uint_gt(strlen(t), 0);
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(t, qn_strerror(all_codes[j]));
    }
}
END_TEST

START_TEST(messages_are_lower_case)
{
    for (size_t i = 0; i < NCODES; i++) {
        const char *t = qn_strerror(all_codes[i]);
        ck_assert(!(t[0] >= 'A' && t[0] <= 'Z'));
    }
}
END_TEST

/* Append-only: a code's number never changes (clients and logs keep them). */
START_TEST(storage_codes_keep_their_numbers)
{
    ck_assert_int_eq(QN_EPROTOCOL_DB, -206);
    ck_assert_int_eq(QN_EINDOUBT, -207);
    ck_assert_str_eq(qn_strerror(QN_EINDOUBT), "outcome unknown");
}
END_TEST

START_TEST(fatal_range)
{
    ck_assert(!qn_err_is_fatal(QN_OK));
    ck_assert(!qn_err_is_fatal(QN_ESEGMENT_CORRUPT));
    ck_assert(!qn_err_is_fatal(-899));
    ck_assert(qn_err_is_fatal(QN_EPROTO));
    ck_assert(qn_err_is_fatal(QN_EFLOOD));
    ck_assert(qn_err_is_fatal(-999));
    ck_assert(!qn_err_is_fatal(-1000));
}
END_TEST

Suite *qn_test_error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("strerror");
    tcase_add_test(tc, every_code_has_distinct_text);
    tcase_add_test(tc, messages_are_lower_case);
    tcase_add_test(tc, storage_codes_keep_their_numbers);
    tcase_add_test(tc, fatal_range);
    suite_add_tcase(s, tc);
    return s;
}
