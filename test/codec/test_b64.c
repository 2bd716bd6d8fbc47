/*
 * test_b64.c - codec/src/b64.c: RFC 4648 vectors in both alphabets, padded and
 * unpadded; the strictness every caller relies on (one accepted text per byte
 * string); streaming in any split equals one shot; padded runs only when asked;
 * output capacity is never exceeded.
 */
#include <stdint.h>
#include <string.h>

#include "queen/b64.h"
#include "queen/error.h"

#include "codec_test.h"

/* RFC 4648 section 10. */
static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
static const char *const padded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                     "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
static const char *const unpadded[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};

START_TEST(rfc4648_vectors)
{
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        const uint8_t *in = (const uint8_t *)plain[i];
        size_t n = strlen(plain[i]);
        char text[16];
        ck_assert_uint_eq(qn_b64_encode(QN_B64_STD, true, in, n, text), strlen(padded[i]));
        ck_assert_str_eq(text, padded[i]);
        ck_assert_uint_eq(qn_b64_encoded_len(n, true), strlen(padded[i]));
        ck_assert_uint_eq(qn_b64_encode(QN_B64_URL, false, in, n, text), strlen(unpadded[i]));
        ck_assert_str_eq(text, unpadded[i]);
        ck_assert_uint_eq(qn_b64_encoded_len(n, false), strlen(unpadded[i]));

        uint8_t out[16];
        ck_assert_int_eq(
            qn_b64_decode(QN_B64_STD, 0, padded[i], strlen(padded[i]), out, sizeof out), (long)n);
        ck_assert(memcmp(out, in, n) == 0);
        ck_assert_int_eq(qn_b64_decode(QN_B64_URL, QN_B64_NOPAD, unpadded[i], strlen(unpadded[i]),
                                       out, sizeof out),
                         (long)n);
        ck_assert(memcmp(out, in, n) == 0);
    }
}
END_TEST

START_TEST(alphabets_differ_in_two_characters)
{
    const uint8_t in[3] = {0xfb, 0xff, 0xbf}; /* sextets 62 63 62 63 */
    char text[8];
    qn_b64_encode(QN_B64_STD, true, in, 3, text);
    ck_assert_str_eq(text, "+/+/");
    qn_b64_encode(QN_B64_URL, true, in, 3, text);
    ck_assert_str_eq(text, "-_-_");
    uint8_t out[3];
    ck_assert_int_eq(qn_b64_decode(QN_B64_STD, 0, "-_-_", 4, out, 3), -1);
    ck_assert_int_eq(qn_b64_decode(QN_B64_URL, 0, "+/+/", 4, out, 3), -1);
    ck_assert_int_eq(qn_b64_decode(QN_B64_URL, 0, "-_-_", 4, out, 3), 3);
    ck_assert(memcmp(out, in, 3) == 0);
}
END_TEST

START_TEST(strict_decoding_refuses)
{
    static const struct {
        const char *text;
        unsigned flags;
    } bad[] = {
        {"aGVsbG8", 0},          /* padded: ends inside a quantum */
        {"aG Vs", 0},            /* outside the alphabet */
        {"aGVs\n", 0},           /* whitespace is not skipped */
        {"a=Vs", 0},             /* padding inside a quantum */
        {"aG=s", 0},             /* ... */
        {"====", 0},             /* ... */
        {"a===", 0},             /* ... */
        {"aGk=aGk=", 0},         /* a second run without QN_B64_RUNS */
        {"aGk=a", QN_B64_RUNS},  /* a run cut short */
        {"Zh==", 0},             /* non-zero unused bits (canonical is Zg==) */
        {"Zm9=", 0},             /* ... (canonical is Zm8=) */
        {"Zh", QN_B64_NOPAD},    /* ... unpadded */
        {"Zg==", QN_B64_NOPAD},  /* padding in unpadded text */
        {"Zm9vY", QN_B64_NOPAD}, /* a 1-character tail carries no byte */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t out[16];
        ck_assert_msg(qn_b64_decode(QN_B64_STD, bad[i].flags, bad[i].text, strlen(bad[i].text), out,
                                    sizeof out) == -1,
                      "accepted %s", bad[i].text);
    }
}
END_TEST

START_TEST(padded_runs_when_asked)
{
    uint8_t out[8];
    ck_assert_int_eq(qn_b64_decode(QN_B64_STD, QN_B64_RUNS, "aGk=aGk=", 8, out, sizeof out), 4);
    ck_assert(memcmp(out, "hihi", 4) == 0);
    ck_assert_int_eq(qn_b64_decode(QN_B64_STD, QN_B64_RUNS, "YQ==Yg==", 8, out, sizeof out), 2);
    ck_assert(memcmp(out, "ab", 2) == 0);
}
END_TEST

START_TEST(capacity_is_never_exceeded)
{
    uint8_t out[8];
    memset(out, 0xAA, sizeof out);
    ck_assert_int_eq(qn_b64_decode(QN_B64_STD, 0, "Zm9vYmFy", 8, out, 5), -1);
    ck_assert_int_eq(out[5], 0xAA);
    ck_assert_int_eq(qn_b64_decode(QN_B64_URL, QN_B64_NOPAD, "Zm9vYmE", 7, out, 4), -1);
    ck_assert_int_eq(out[4], 0xAA);
    struct qn_b64_dec d;
    size_t n = 0;
    qn_b64_dec_init(&d, QN_B64_STD, 0);
    ck_assert_int_eq(qn_b64_dec_feed(&d, (const uint8_t *)"Zm9vYmFy", 8, out, 5, &n), QN_ELIMIT);
    ck_assert_int_eq(qn_b64_decode(QN_B64_STD, 0, "Zm9vYmFy", 8, out, 6), 6);
}
END_TEST

/* Any split of the text gives the bytes one shot gives, and the encoder's
 * text fed in two pieces is the one-shot text. */
START_TEST(streaming_equals_one_shot)
{
    uint8_t in[64];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (uint8_t)(i * 37 + 11);
    for (int alpha = QN_B64_STD; alpha <= QN_B64_URL; alpha++) {
        for (int pad = 0; pad <= 1; pad++) {
            for (size_t len = 0; len <= 10; len++) {
                char whole[32];
                size_t tl = qn_b64_encode((enum qn_b64_alphabet)alpha, pad, in, len, whole);
                for (size_t cut = 0; cut <= len; cut++) {
                    char text[32];
                    struct qn_b64_enc e;
                    qn_b64_enc_init(&e, (enum qn_b64_alphabet)alpha, pad);
                    size_t t = qn_b64_enc_feed(&e, in, cut, text);
                    t += qn_b64_enc_feed(&e, in + cut, len - cut, text + t);
                    t += qn_b64_enc_finish(&e, text + t);
                    ck_assert_uint_eq(t, tl);
                    ck_assert(memcmp(text, whole, t) == 0);
                }
                for (size_t cut = 0; cut <= tl; cut++) {
                    uint8_t out[16];
                    size_t a = 0, b = 0, c = 0;
                    struct qn_b64_dec d;
                    qn_b64_dec_init(&d, (enum qn_b64_alphabet)alpha, pad ? 0 : QN_B64_NOPAD);
                    ck_assert_int_eq(
                        qn_b64_dec_feed(&d, (const uint8_t *)whole, cut, out, sizeof out, &a),
                        QN_OK);
                    ck_assert_int_eq(qn_b64_dec_feed(&d, (const uint8_t *)whole + cut, tl - cut,
                                                     out + a, sizeof out - a, &b),
                                     QN_OK);
                    ck_assert_int_eq(qn_b64_dec_finish(&d, out + a + b, sizeof out - a - b, &c),
                                     QN_OK);
                    ck_assert_uint_eq(a + b + c, len);
                    ck_assert(memcmp(out, in, len) == 0);
                }
            }
        }
    }
}
END_TEST

Suite *qn_test_b64_suite(void)
{
    Suite *s = suite_create("b64");
    TCase *tc = tcase_create("b64");
    tcase_add_test(tc, rfc4648_vectors);
    tcase_add_test(tc, alphabets_differ_in_two_characters);
    tcase_add_test(tc, strict_decoding_refuses);
    tcase_add_test(tc, padded_runs_when_asked);
    tcase_add_test(tc, capacity_is_never_exceeded);
    tcase_add_test(tc, streaming_equals_one_shot);
    suite_add_tcase(s, tc);
    return s;
}
