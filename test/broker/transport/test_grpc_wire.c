/*
 * test_grpc_wire.c - broker/src/grpc_wire.c: grpc-timeout, percent-encoding, the
 * message reader, request header checks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "transport_test.h"
#include "transport/grpc_wire.h"
#include "queen/error.h"

/* ---------------------------------------------------------------- grpc-timeout */

static int64_t tmo(const char *s)
{
    int64_t ms = -12345;
    int rc = qn_grpc_timeout_parse(s, strlen(s), &ms);
    return rc == QN_OK ? ms : -1;
}

START_TEST(timeout_units)
{
    ck_assert_int_eq(tmo("1H"), 3600000);
    ck_assert_int_eq(tmo("2M"), 120000);
    ck_assert_int_eq(tmo("3S"), 3000);
    ck_assert_int_eq(tmo("250m"), 250);
    ck_assert_int_eq(tmo("1500u"), 2); /* rounded up */
    ck_assert_int_eq(tmo("1000u"), 1);
    ck_assert_int_eq(tmo("1n"), 1); /* any positive timeout is at least 1 ms */
    ck_assert_int_eq(tmo("1000000n"), 1);
    ck_assert_int_eq(tmo("1000001n"), 2);
    ck_assert_int_eq(tmo("0m"), 0);
    ck_assert_int_eq(tmo("0n"), 0);
    ck_assert_int_eq(tmo("00000001S"), 1000); /* 8 digits with leading zeros */
}
END_TEST

/* Every positive timeout rounds up, at each unit's boundary: "1u" is 1 ms, not
 * 0 (a deadline of 0 ms would expire the call at once). Exhaustive over the
 * values where rounding changes, against the exact ceiling. */
START_TEST(timeout_rounds_up_at_the_boundaries)
{
    ck_assert_int_eq(tmo("1u"), 1);
    ck_assert_int_eq(tmo("999u"), 1);
    ck_assert_int_eq(tmo("1001u"), 2);
    ck_assert_int_eq(tmo("999999n"), 1);
    ck_assert_int_eq(tmo("1999999n"), 2);
    ck_assert_int_eq(tmo("2000001n"), 3);
    char buf[32];
    for (int64_t v = 0; v <= 5000; v++) {
        snprintf(buf, sizeof buf, "%lldu", (long long)v);
        ck_assert_msg(tmo(buf) == (v + 999) / 1000, "%s -> %lld", buf, (long long)tmo(buf));
    }
    for (int64_t k = 0; k <= 99; k++) {
        const int64_t around[] = {k * 1000000 - 1, k * 1000000, k * 1000000 + 1};
        for (size_t i = 0; i < 3; i++) {
            int64_t v = around[i];
            if (v < 0)
                continue;
            snprintf(buf, sizeof buf, "%lldn", (long long)v);
            int64_t want = v / 1000000 + (v % 1000000 != 0);
            ck_assert_msg(tmo(buf) == want, "%s -> %lld, want %lld", buf, (long long)tmo(buf),
                          (long long)want);
        }
    }
}
END_TEST

START_TEST(timeout_limits)
{
    /* 8 digits is the maximum; 99999999 hours saturates at about 10 years. */
    ck_assert_int_eq(tmo("99999999H"), QN_GRPC_TIMEOUT_MAX_MS);
    ck_assert_int_eq(tmo("99999999M"), QN_GRPC_TIMEOUT_MAX_MS);
    ck_assert_int_eq(tmo("99999999S"), 99999999000LL);
    ck_assert_int_eq(tmo("99999999n"), 100);
    ck_assert_int_eq(tmo("100000000m"), -1); /* 9 digits */
    ck_assert_int_eq(tmo("999999999999999999999H"), -1);
}
END_TEST

START_TEST(timeout_garbage)
{
    const char *bad[] = {"",    "S",   "m",   "10",   "10s",   "10h",  "10x", "-1S", "+1S",
                         " 1S", "1S ", "1 S", "1.5S", "0x10m", "10mm", "1SS", "１S"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tmo(bad[i]) == -1, "accepted \"%s\"", bad[i]);
    int64_t ms = 77;
    ck_assert_int_eq(qn_grpc_timeout_parse(NULL, 0, &ms), QN_EINVAL);
    ck_assert_int_eq(ms, 77); /* untouched on failure */
    /* Length is honoured: no reading past len. */
    ck_assert_int_eq(qn_grpc_timeout_parse("5S9", 2, &ms), QN_OK);
    ck_assert_int_eq(ms, 5000);
}
END_TEST

/* ---------------------------------------------------------------- percent-encoding */

static const char *enc(const char *in, size_t cap)
{
    static char out[512];
    ck_assert_uint_le(cap, sizeof out);
    size_t n = qn_grpc_pct_encode(in, strlen(in), out, cap);
    ck_assert_uint_eq(n, strlen(out));
    return out;
}

START_TEST(pct_encode_spec)
{
    ck_assert_str_eq(enc("plain text, ok!", 64), "plain text, ok!");
    ck_assert_str_eq(enc("100%", 64), "100%25");
    ck_assert_str_eq(enc("a\nb\tc\r", 64), "a%0Ab%09c%0D");
    ck_assert_str_eq(enc("\x7f~ ", 64), "%7F~ ");
    /* UTF-8 is escaped byte by byte: "é" is C3 A9. */
    ck_assert_str_eq(enc("caf\xc3\xa9", 64), "caf%C3%A9");
    ck_assert_str_eq(enc("", 64), "");
}
END_TEST

START_TEST(pct_encode_truncation)
{
    /* Never splits an escape, never splits a UTF-8 character. */
    ck_assert_str_eq(enc("ab%", 5), "ab"); /* "%25" needs 3, only 2 left */
    ck_assert_str_eq(enc("ab%", 6), "ab%25");
    ck_assert_str_eq(enc("a\xc3\xa9z", 7), "a"); /* "%C3%A9" needs 6, 5 left */
    ck_assert_str_eq(enc("a\xc3\xa9z", 8), "a%C3%A9");
    ck_assert_str_eq(enc("hello", 1), "");
    char out[4] = "xyz";
    ck_assert_uint_eq(qn_grpc_pct_encode("abc", 3, out, 0), 0);
    ck_assert_str_eq(out, "xyz"); /* cap 0 writes nothing */
    /* A truncated UTF-8 sequence at the end of the input is still escaped. */
    ck_assert_str_eq(enc("a\xe2\x82", 64), "a%E2%82");
}
END_TEST

static const char *dec(const char *in, size_t cap)
{
    static char out[512];
    size_t n = qn_grpc_pct_decode(in, strlen(in), out, cap);
    ck_assert_uint_eq(n, strlen(out));
    return out;
}

START_TEST(pct_decode_spec)
{
    ck_assert_str_eq(dec("100%25", 64), "100%");
    ck_assert_str_eq(dec("a%0Ab", 64), "a\nb");
    ck_assert_str_eq(dec("a%0ab", 64), "a\nb"); /* lower-case hex too */
    ck_assert_str_eq(dec("caf%C3%A9", 64), "caf\xc3\xa9");
    /* Invalid escapes are kept literally, never an error. */
    ck_assert_str_eq(dec("%", 64), "%");
    ck_assert_str_eq(dec("%4", 64), "%4");
    ck_assert_str_eq(dec("%zz", 64), "%zz");
    ck_assert_str_eq(dec("%%41", 64), "%A");
    ck_assert_str_eq(dec("abcdef", 4), "abc");
}
END_TEST

START_TEST(pct_roundtrip)
{
    char raw[256], e[800], d[300];
    for (int i = 0; i < 255; i++)
        raw[i] = (char)(i + 1);
    raw[255] = '\0';
    size_t n = qn_grpc_pct_encode(raw, 255, e, sizeof e);
    ck_assert_uint_gt(n, 255);
    for (size_t i = 0; i < n; i++)
        ck_assert(e[i] >= 0x20 && e[i] <= 0x7e);
    size_t m = qn_grpc_pct_decode(e, n, d, sizeof d);
    ck_assert_uint_eq(m, 255);
    ck_assert_mem_eq(raw, d, 255);
}
END_TEST

/* ---------------------------------------------------------------- message reader */

static void frame(uint8_t *out, uint8_t flags, uint32_t len)
{
    out[0] = flags;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

START_TEST(reader_whole_and_split)
{
    uint8_t buf[5 + 300];
    frame(buf, 0, 300);
    for (int i = 0; i < 300; i++)
        buf[5 + i] = (uint8_t)i;
    /* Fed in every chunk size from 1 to the whole. */
    for (size_t chunk = 1; chunk <= sizeof buf; chunk++) {
        struct qn_grpc_reader r;
        qn_grpc_reader_init(&r, 1024);
        size_t off = 0;
        bool got = false;
        while (off < sizeof buf) {
            size_t len = sizeof buf - off < chunk ? sizeof buf - off : chunk;
            size_t used = 0;
            bool ready = false;
            struct qn_grpc_msg m;
            ck_assert_int_eq(qn_grpc_reader_feed(&r, buf + off, len, &used, &ready, &m), QN_OK);
            ck_assert_uint_le(used, len);
            off += used;
            if (ready) {
                ck_assert(!got);
                got = true;
                ck_assert(!m.compressed);
                ck_assert_uint_eq(m.len, 300);
                ck_assert_mem_eq(m.body, buf + 5, 300);
                free(m.body);
            } else {
                ck_assert_uint_eq(used, len);
                ck_assert(!qn_grpc_reader_is_idle(&r));
            }
        }
        ck_assert(got);
        ck_assert(qn_grpc_reader_is_idle(&r));
        qn_grpc_reader_reset(&r);
    }
}
END_TEST

START_TEST(reader_empty_message_and_sequence)
{
    /* Three messages in one chunk: empty, 3 bytes, empty. */
    uint8_t buf[5 + 5 + 3 + 5];
    frame(buf, 0, 0);
    frame(buf + 5, 0, 3);
    memcpy(buf + 10, "abc", 3);
    frame(buf + 13, 0, 0);
    struct qn_grpc_reader r;
    qn_grpc_reader_init(&r, 16);
    size_t off = 0, used;
    bool ready;
    struct qn_grpc_msg m;
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, sizeof buf, &used, &ready, &m), QN_OK);
    ck_assert(ready);
    ck_assert_uint_eq(used, 5);
    ck_assert_uint_eq(m.len, 0);
    ck_assert_ptr_null(m.body); /* proto3: the empty message is valid */
    off += used;
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf + off, sizeof buf - off, &used, &ready, &m),
                     QN_OK);
    ck_assert(ready);
    ck_assert_uint_eq(m.len, 3);
    ck_assert_mem_eq(m.body, "abc", 3);
    free(m.body);
    off += used;
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf + off, sizeof buf - off, &used, &ready, &m),
                     QN_OK);
    ck_assert(ready);
    ck_assert_uint_eq(m.len, 0);
    off += used;
    ck_assert_uint_eq(off, sizeof buf);
    ck_assert(qn_grpc_reader_is_idle(&r));
}
END_TEST

START_TEST(reader_partial_prefix_is_not_idle)
{
    uint8_t buf[5];
    frame(buf, 0, 2);
    struct qn_grpc_reader r;
    qn_grpc_reader_init(&r, 16);
    size_t used;
    bool ready;
    struct qn_grpc_msg m;
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, 3, &used, &ready, &m), QN_OK);
    ck_assert(!ready);
    ck_assert_uint_eq(used, 3);
    ck_assert(!qn_grpc_reader_is_idle(&r)); /* END_STREAM here is a truncated message */
    ck_assert_uint_eq(qn_grpc_reader_pending_len(&r), 0);
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf + 3, 2, &used, &ready, &m), QN_OK);
    ck_assert_uint_eq(qn_grpc_reader_pending_len(&r), 2);
    ck_assert_ptr_null(r.body); /* a prefix alone reserves nothing */
    ck_assert_int_eq(qn_grpc_reader_feed(&r, (const uint8_t *)"x", 1, &used, &ready, &m), QN_OK);
    ck_assert(!ready);
    ck_assert(!qn_grpc_reader_is_idle(&r));
    qn_grpc_reader_reset(&r); /* frees the partial body */
    ck_assert(qn_grpc_reader_is_idle(&r));
}
END_TEST

START_TEST(reader_limit_checked_on_prefix)
{
    struct qn_grpc_reader r;
    qn_grpc_reader_init(&r, 100);
    uint8_t buf[5];
    size_t used;
    bool ready;
    struct qn_grpc_msg m;
    frame(buf, 0, 100); /* at the limit: fine */
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, 5, &used, &ready, &m), QN_OK);
    qn_grpc_reader_reset(&r);
    frame(buf, 0, 101); /* one past: refused before any body byte */
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, 5, &used, &ready, &m), QN_ELIMIT);
    ck_assert_uint_eq(used, 5);
    ck_assert_uint_eq(qn_grpc_reader_pending_len(&r), 101);
    ck_assert_ptr_null(r.body);
    qn_grpc_reader_reset(&r);
    frame(buf, 0, 0xffffffffu);
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, 5, &used, &ready, &m), QN_ELIMIT);
    ck_assert_ptr_null(r.body);
    qn_grpc_reader_reset(&r);
}
END_TEST

START_TEST(reader_flags)
{
    struct qn_grpc_reader r;
    qn_grpc_reader_init(&r, 100);
    uint8_t buf[6];
    size_t used;
    bool ready;
    struct qn_grpc_msg m;
    frame(buf, 1, 1); /* compressed: reported, the caller decides */
    buf[5] = 'z';
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, 6, &used, &ready, &m), QN_OK);
    ck_assert(ready && m.compressed);
    free(m.body);
    for (int f = 2; f < 256; f += 37) {
        qn_grpc_reader_reset(&r);
        frame(buf, (uint8_t)f, 1);
        ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, 6, &used, &ready, &m), QN_EBADREQUEST);
    }
    qn_grpc_reader_reset(&r);
}
END_TEST

START_TEST(reader_body_grows_with_data)
{
    /* A 1 MiB declaration followed by 10 bytes holds ~16 KiB, not 1 MiB. */
    struct qn_grpc_reader r;
    qn_grpc_reader_init(&r, 4u << 20);
    uint8_t buf[15];
    frame(buf, 0, 1u << 20);
    memset(buf + 5, 'a', 10);
    size_t used;
    bool ready;
    struct qn_grpc_msg m;
    ck_assert_int_eq(qn_grpc_reader_feed(&r, buf, sizeof buf, &used, &ready, &m), QN_OK);
    ck_assert(!ready);
    ck_assert_uint_le(r.cap, 64u * 1024u);
    ck_assert_uint_ge(r.cap, 10);
    qn_grpc_reader_reset(&r);
}
END_TEST

START_TEST(prefix_write)
{
    uint8_t p[5];
    qn_grpc_prefix_write(p, 0x01020304u);
    ck_assert_mem_eq(p, "\x00\x01\x02\x03\x04", 5);
}
END_TEST

/* ---------------------------------------------------------------- headers */

START_TEST(content_type)
{
    ck_assert(qn_grpc_content_type_ok("application/grpc"));
    ck_assert(qn_grpc_content_type_ok("application/grpc+proto"));
    ck_assert(qn_grpc_content_type_ok("application/grpc+json")); /* subtype is the codec's */
    ck_assert(qn_grpc_content_type_ok("application/grpc;charset=utf-8"));
    ck_assert(qn_grpc_content_type_ok("Application/GRPC"));
    ck_assert(!qn_grpc_content_type_ok(NULL));
    ck_assert(!qn_grpc_content_type_ok(""));
    ck_assert(!qn_grpc_content_type_ok("application/grpcx"));
    ck_assert(!qn_grpc_content_type_ok("application/grpc-web"));
    ck_assert(!qn_grpc_content_type_ok("application/json"));
    ck_assert(!qn_grpc_content_type_ok("text/plain"));
}
END_TEST

START_TEST(te_trailers)
{
    ck_assert(qn_grpc_te_ok("trailers"));
    ck_assert(qn_grpc_te_ok("Trailers"));
    ck_assert(qn_grpc_te_ok("deflate, trailers"));
    ck_assert(qn_grpc_te_ok("trailers;q=1"));
    ck_assert(!qn_grpc_te_ok(NULL));
    ck_assert(!qn_grpc_te_ok(""));
    ck_assert(!qn_grpc_te_ok("gzip"));
    ck_assert(!qn_grpc_te_ok("trailersx"));
    ck_assert(!qn_grpc_te_ok("xtrailers"));
}
END_TEST

START_TEST(encoding)
{
    ck_assert(qn_grpc_encoding_ok(NULL));
    ck_assert(qn_grpc_encoding_ok(""));
    ck_assert(qn_grpc_encoding_ok("identity"));
    ck_assert(!qn_grpc_encoding_ok("gzip"));
    ck_assert(!qn_grpc_encoding_ok("identity,gzip"));
}
END_TEST

START_TEST(check_request_order)
{
    struct qn_grpc_req_headers good = {"POST", "application/grpc", "trailers", NULL, NULL};
    struct qn_grpc_verdict v;
    int64_t ms = 99;
    ck_assert(qn_grpc_check_request(&good, &ms, &v));
    ck_assert_int_eq(ms, -1);

    struct qn_grpc_req_headers h = good;
    h.timeout = "150m";
    ck_assert(qn_grpc_check_request(&h, &ms, &v));
    ck_assert_int_eq(ms, 150);

    h = good;
    h.method = "GET";
    h.content_type = "text/html"; /* the method is reported first */
    ck_assert(!qn_grpc_check_request(&h, &ms, &v));
    ck_assert_int_eq(v.http_status, 405);
    ck_assert_int_eq(v.code, QN_GRPC_INTERNAL);

    h = good;
    h.content_type = "application/json";
    ck_assert(!qn_grpc_check_request(&h, &ms, &v));
    ck_assert_int_eq(v.http_status, 415);
    h.content_type = NULL;
    ck_assert(!qn_grpc_check_request(&h, &ms, &v));
    ck_assert_int_eq(v.http_status, 415);

    h = good;
    h.te = NULL;
    ck_assert(!qn_grpc_check_request(&h, &ms, &v));
    ck_assert_int_eq(v.http_status, 200);
    ck_assert_int_eq(v.code, QN_GRPC_INTERNAL);

    h = good;
    h.encoding = "gzip";
    ck_assert(!qn_grpc_check_request(&h, &ms, &v));
    ck_assert_int_eq(v.http_status, 200);
    ck_assert_int_eq(v.code, QN_GRPC_UNIMPLEMENTED);
    ck_assert(v.accept_encoding);
    h.encoding = "identity";
    ck_assert(qn_grpc_check_request(&h, &ms, &v));

    h = good;
    h.timeout = "soon";
    ck_assert(!qn_grpc_check_request(&h, &ms, &v));
    ck_assert_int_eq(v.code, QN_GRPC_INTERNAL);
    ck_assert(v.message != NULL && v.message[0] != '\0');
}
END_TEST

Suite *qn_test_grpc_wire_suite(void)
{
    Suite *s = suite_create("grpc_wire");
    TCase *t = tcase_create("timeout");
    tcase_add_test(t, timeout_units);
    tcase_add_test(t, timeout_rounds_up_at_the_boundaries);
    tcase_add_test(t, timeout_limits);
    tcase_add_test(t, timeout_garbage);
    suite_add_tcase(s, t);
    t = tcase_create("percent");
    tcase_add_test(t, pct_encode_spec);
    tcase_add_test(t, pct_encode_truncation);
    tcase_add_test(t, pct_decode_spec);
    tcase_add_test(t, pct_roundtrip);
    suite_add_tcase(s, t);
    t = tcase_create("reader");
    tcase_add_test(t, reader_whole_and_split);
    tcase_add_test(t, reader_empty_message_and_sequence);
    tcase_add_test(t, reader_partial_prefix_is_not_idle);
    tcase_add_test(t, reader_limit_checked_on_prefix);
    tcase_add_test(t, reader_flags);
    tcase_add_test(t, reader_body_grows_with_data);
    tcase_add_test(t, prefix_write);
    suite_add_tcase(s, t);
    t = tcase_create("headers");
    tcase_add_test(t, content_type);
    tcase_add_test(t, te_trailers);
    tcase_add_test(t, encoding);
    tcase_add_test(t, check_request_order);
    suite_add_tcase(s, t);
    return s;
}
