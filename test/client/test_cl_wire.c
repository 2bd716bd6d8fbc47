/*
 * test_cl_wire.c - client/src/cl_wire.c: message reassembly at every split
 * point and at its limits, grpc-status and :status values, grpc-message
 * decoding (escapes, control characters, UTF-8 cut at the buffer's end), code
 * names, grpc-timeout formatting, and the response header accumulator.
 */
#include <string.h>

#include "client_test.h"
#include "queen/client_wire.h"
#include "queen/error.h"

struct got {
    unsigned n;
    size_t lens[8];
    uint8_t first[8];
};

static int collect(const uint8_t *msg, size_t len, void *ud)
{
    struct got *g = ud;
    if (g->n < 8) {
        g->lens[g->n] = len;
        g->first[g->n] = len > 0 ? msg[0] : 0;
    }
    g->n++;
    return 0;
}

static int refuse(const uint8_t *msg, size_t len, void *ud)
{
    (void)msg;
    (void)len;
    (void)ud;
    return QN_ECANCELLED;
}

START_TEST(reader_every_split)
{
    uint8_t wire[5 + 3 + 5 + 5 + 300];
    qn_client_grpc_prefix(wire, 3);
    memcpy(wire + 5, "abc", 3);
    qn_client_grpc_prefix(wire + 8, 0);
    qn_client_grpc_prefix(wire + 13, 300);
    memset(wire + 18, 'z', 300);
    for (size_t cut1 = 0; cut1 <= sizeof wire; cut1++) {
        for (size_t cut2 = cut1; cut2 <= sizeof wire; cut2 += 11) {
            struct qn_client_reader rd;
            struct got g = {0};
            qn_client_reader_init(&rd, 300);
            ck_assert_int_eq(qn_client_reader_feed(&rd, wire, cut1, collect, &g), QN_OK);
            ck_assert_int_eq(qn_client_reader_feed(&rd, wire + cut1, cut2 - cut1, collect, &g),
                             QN_OK);
            ck_assert_int_eq(
                qn_client_reader_feed(&rd, wire + cut2, sizeof wire - cut2, collect, &g), QN_OK);
            ck_assert_uint_eq(g.n, 3);
            ck_assert_uint_eq(rd.messages, 3);
            ck_assert_uint_eq(g.lens[0], 3);
            ck_assert_uint_eq(g.first[0], 'a');
            ck_assert_uint_eq(g.lens[1], 0);
            ck_assert_uint_eq(g.lens[2], 300);
            ck_assert_uint_eq(g.first[2], 'z');
            ck_assert(qn_client_reader_idle(&rd));
            qn_client_reader_release(&rd);
        }
    }
}
END_TEST

START_TEST(reader_limits_and_flags)
{
    struct qn_client_reader rd;
    struct got g = {0};
    uint8_t p[5];
    qn_client_reader_init(&rd, 100);
    qn_client_grpc_prefix(p, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, p, 5, collect, &g), QN_OK);
    ck_assert(!qn_client_reader_idle(&rd)); /* waits for the body: the stream may not end here */
    qn_client_reader_release(&rd);
    qn_client_reader_release(&rd);

    qn_client_reader_init(&rd, 100);
    qn_client_grpc_prefix(p, 101);
    ck_assert_int_eq(qn_client_reader_feed(&rd, p, 5, collect, &g), QN_ELIMIT);
    ck_assert_ptr_null(rd.buf); /* nothing was allocated from the lying length */
    qn_client_reader_release(&rd);

    const uint8_t huge[5] = {0, 0xff, 0xff, 0xff, 0xff};
    qn_client_reader_init(&rd, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, huge, 5, collect, &g), QN_ELIMIT);
    qn_client_reader_release(&rd);

    const uint8_t compressed[5] = {1, 0, 0, 0, 1};
    qn_client_reader_init(&rd, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, compressed, 5, collect, &g), QN_EPROTO);
    qn_client_reader_release(&rd);
    ck_assert_uint_eq(g.n, 0);

    /* A callback's error stops the reader and comes back. */
    uint8_t two[10];
    qn_client_grpc_prefix(two, 0);
    qn_client_grpc_prefix(two + 5, 0);
    qn_client_reader_init(&rd, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, two, 10, refuse, NULL), QN_ECANCELLED);
    ck_assert_uint_eq(rd.messages, 1);
    qn_client_reader_release(&rd);
}
END_TEST

START_TEST(status_values)
{
    int c = -1;
    ck_assert(qn_client_parse_status((const uint8_t *)"0", 1, &c));
    ck_assert_int_eq(c, 0);
    ck_assert(qn_client_parse_status((const uint8_t *)"16", 2, &c));
    ck_assert_int_eq(c, 16);
    ck_assert(qn_client_parse_status((const uint8_t *)"999", 3, &c));
    ck_assert_int_eq(c, 999);
    c = 7;
    ck_assert(!qn_client_parse_status((const uint8_t *)"", 0, &c));
    ck_assert(!qn_client_parse_status((const uint8_t *)"1000", 4, &c));
    ck_assert(!qn_client_parse_status((const uint8_t *)"-1", 2, &c));
    ck_assert(!qn_client_parse_status((const uint8_t *)"1 ", 2, &c));
    ck_assert(!qn_client_parse_status((const uint8_t *)"0x1", 3, &c));
    ck_assert_int_eq(c, 7); /* untouched on failure */
    ck_assert_str_eq(qn_client_code_name(0), "OK");
    ck_assert_str_eq(qn_client_code_name(5), "NOT_FOUND");
    ck_assert_str_eq(qn_client_code_name(16), "UNAUTHENTICATED");
    ck_assert_ptr_null(qn_client_code_name(17));
    ck_assert_ptr_null(qn_client_code_name(-1));
}
END_TEST

static const char *dec(const char *in, size_t cap, char *out)
{
    size_t n = qn_client_pct_decode((const uint8_t *)in, strlen(in), out, cap);
    ck_assert_uint_eq(n, strlen(out));
    ck_assert_uint_lt(n, cap);
    return out;
}

START_TEST(message_decoding)
{
    char out[64];
    ck_assert_str_eq(dec("plain text", sizeof out, out), "plain text");
    ck_assert_str_eq(dec("a%20b%2Fc%2fd", sizeof out, out), "a b/c/d");
    ck_assert_str_eq(dec("100%", sizeof out, out), "100%");
    ck_assert_str_eq(dec("%zz%4", sizeof out, out), "%zz%4");
    ck_assert_str_eq(dec("line%0Anext%00end%7F", sizeof out, out), "line?next?end?");
    ck_assert_str_eq(dec("tab\there", sizeof out, out), "tab?here");
    ck_assert_str_eq(dec("%E2%9C%93 ok", sizeof out, out), "\xE2\x9C\x93 ok");
    /* Cut at the buffer's end: a 3-byte character that does not fit is dropped whole. */
    ck_assert_str_eq(dec("ab%E2%9C%93", 5, out), "ab");
    ck_assert_str_eq(dec("abc%E2%9C%93", 7, out), "abc\xE2\x9C\x93");
    ck_assert_str_eq(dec("abcdefgh", 4, out), "abc");
    ck_assert_uint_eq(qn_client_pct_decode((const uint8_t *)"x", 1, out, 1), 0);
    ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(timeout_format)
{
    static const struct {
        int64_t ms;
        const char *want;
    } cases[] = {
        {0, "0m"},
        {-5, "0m"},
        {1, "1m"},
        {30000, "30000m"},
        {99999999, "99999999m"},
        {100000000, "100000S"},
        {100000001, "100001S"}, /* rounded up */
        {INT64_C(99999999) * 1000 + 1, "1666667M"},
        {INT64_MAX, "99999999H"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[QN_CLIENT_TIMEOUT_LEN];
        size_t n = qn_client_timeout_format(cases[i].ms, out);
        ck_assert_str_eq(out, cases[i].want);
        ck_assert_uint_eq(n, strlen(cases[i].want));
    }
}
END_TEST

static void add(struct qn_client_head *h, const char *name, const char *value)
{
    qn_client_head_add(h, (const uint8_t *)name, strlen(name), (const uint8_t *)value,
                       strlen(value));
}

START_TEST(head_accumulates)
{
    struct qn_client_head h;
    qn_client_head_init(&h);
    add(&h, ":status", "200");
    add(&h, "content-type", "application/grpc");
    ck_assert_int_eq(h.http_status, 200);
    ck_assert(!h.have_status);
    add(&h, "grpc-status", "3");
    add(&h, "grpc-message", "bad%20item%201");
    ck_assert(h.have_status);
    ck_assert_int_eq(h.grpc_status, 3);
    ck_assert_str_eq(h.grpc_message, "bad item 1");
    add(&h, "grpc-status", "0"); /* trailers after headers: the later one wins */
    ck_assert_int_eq(h.grpc_status, 0);
    add(&h, "grpc-status", "x");
    ck_assert(h.bad_status);
    ck_assert_int_eq(h.grpc_status, 0);
    qn_client_head_init(&h);
    add(&h, ":status", "065");
    ck_assert_int_eq(h.http_status, 0);
    add(&h, ":status", "20");
    add(&h, "Grpc-Status", "1"); /* HTTP/2 header names are lower-case: ignored */
    ck_assert_int_eq(h.http_status, 0);
    ck_assert(!h.have_status);
}
END_TEST

Suite *qn_test_cl_wire_suite(void)
{
    Suite *s = suite_create("cl_wire");
    TCase *t = tcase_create("wire");
    tcase_add_test(t, reader_every_split);
    tcase_add_test(t, reader_limits_and_flags);
    tcase_add_test(t, status_values);
    tcase_add_test(t, message_decoding);
    tcase_add_test(t, timeout_format);
    tcase_add_test(t, head_accumulates);
    suite_add_tcase(s, t);
    return s;
}
