/*
 * test_http_wire.c - broker/src/transport/http_wire.c: the HTTP/1.1 request
 * head parser, the gRPC-Web content types, the trailer frame (base64: test/codec/test_b64.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "transport/http_wire.h"
#include "transport_test.h"

/* Parses s whole with limit max; returns the status (0 when complete, -1 when
 * more is needed). */
static int parse(const char *s, size_t max, struct qn_http_head *h)
{
    bool complete = false;
    int status = 0;
    int rc = qn_http_parse_head((const uint8_t *)s, strlen(s), max, h, &complete, &status);
    if (rc != QN_OK) {
        ck_assert_int_eq(rc, QN_EBADREQUEST);
        return status;
    }
    return complete ? 0 : -1;
}

static bool field_is(const struct qn_http_head *h, const char *name, const char *want)
{
    size_t len;
    const char *v = qn_http_field(h, name, &len);
    return v != NULL && len == strlen(want) && memcmp(v, want, len) == 0;
}

START_TEST(head_complete)
{
    struct qn_http_head h;
    const char *req = "POST /queen.v1.QueueService/Push?x=1 HTTP/1.1\r\n"
                      "Host: broker:6680\r\n"
                      "Content-Type:application/grpc-web+proto  \r\n"
                      "content-length: 12\r\n"
                      "X-Empty:\r\n"
                      "\r\n"
                      "BODY";
    ck_assert_int_eq(parse(req, 16384, &h), 0);
    ck_assert_uint_eq(h.head_len, strlen(req) - 4);
    ck_assert_int_eq((int)h.method_len, 4);
    ck_assert(memcmp(h.method, "POST", 4) == 0);
    ck_assert(h.target_len == strlen("/queen.v1.QueueService/Push?x=1"));
    ck_assert_int_eq(h.minor, 1);
    ck_assert_uint_eq(h.nfields, 4);
    ck_assert(field_is(&h, "host", "broker:6680"));
    ck_assert(field_is(&h, "CONTENT-TYPE", "application/grpc-web+proto")); /* OWS trimmed */
    ck_assert(field_is(&h, "x-empty", ""));
    ck_assert_int_eq(h.content_length, 12);
    ck_assert(h.keep_alive);
    ck_assert(!h.expect_continue);
    size_t len;
    ck_assert_ptr_null(qn_http_field(&h, "absent", &len));
    ck_assert_uint_eq(len, 0);
}
END_TEST

START_TEST(head_incomplete_until_the_empty_line)
{
    struct qn_http_head h;
    ck_assert_int_eq(parse("", 100, &h), -1);
    ck_assert_int_eq(parse("GET / HTTP/1.1", 100, &h), -1);
    ck_assert_int_eq(parse("GET / HTTP/1.1\r\nhost: x\r\n", 100, &h), -1);
    ck_assert_int_eq(parse("GET / HTTP/1.1\r\nhost: x\r\n\r", 100, &h), -1);
    ck_assert_int_eq(parse("GET / HTTP/1.1\r\nhost: x\r\n\r\n", 100, &h), 0);
    /* leading empty lines are skipped, a few */
    ck_assert_int_eq(parse("\r\n\r\nGET / HTTP/1.1\r\n\r\n", 100, &h), 0);
    ck_assert_int_eq(parse("\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", 100, &h), 400);
}
END_TEST

START_TEST(head_connection_semantics)
{
    struct qn_http_head h;
    ck_assert_int_eq(parse("GET / HTTP/1.0\r\n\r\n", 100, &h), 0);
    ck_assert(!h.keep_alive);
    ck_assert_int_eq(parse("GET / HTTP/1.0\r\nconnection: Keep-Alive\r\n\r\n", 100, &h), 0);
    ck_assert(h.keep_alive);
    ck_assert_int_eq(parse("GET / HTTP/1.1\r\nconnection: foo, close\r\n\r\n", 100, &h), 0);
    ck_assert(!h.keep_alive);
    ck_assert_int_eq(parse("GET / HTTP/1.1\r\nexpect: 100-Continue\r\n\r\n", 100, &h), 0);
    ck_assert(h.expect_continue);
    ck_assert_int_eq(
        parse("GET / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n", 100, &h), 0);
    ck_assert_int_eq(h.content_length, 5);
    ck_assert_int_eq(parse("GET / HTTP/1.1\r\n\r\n", 100, &h), 0);
    ck_assert_int_eq(h.content_length, -1);
}
END_TEST

START_TEST(head_refusals)
{
    struct qn_http_head h;
    static const struct {
        const char *req;
        int status;
    } cases[] = {
        {"GET / HTTP/1.1\nhost: x\n\n", 400},                  /* bare LF */
        {"GET / HTTP/1.1\r\nhost: x\n\r\n", 400},              /* bare LF in a field */
        {"GET /\r HTTP/1.1\r\n\r\n", 400},                     /* CR inside a line */
        {"GET / HTTP/1.1\r\nhost : x\r\n\r\n", 400},           /* space before the colon */
        {"GET / HTTP/1.1\r\nhost: x\r\n  y\r\n\r\n", 400},     /* obs-fold */
        {"GET / HTTP/1.1\r\n: x\r\n\r\n", 400},                /* no name */
        {"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400},           /* no colon */
        {"GET / HTTP/1.1\r\nx: a\x01z\r\n\r\n", 400},          /* control character */
        {"GET  / HTTP/1.1\r\n\r\n", 400},                      /* two spaces */
        {"GET / HTTP/1.1 \r\n\r\n", 400},                      /* trailing space */
        {"G(T / HTTP/1.1\r\n\r\n", 400},                       /* not a token */
        {"GET / HTTX/1.1\r\n\r\n", 400},                       /* not HTTP */
        {"GET / HTTP/2.0\r\n\r\n", 505},                       /* version */
        {"GET / HTTP/1.2\r\n\r\n", 505},                       /* version */
        {"GET / HTTP/1.1\r\ncontent-length: 1x\r\n\r\n", 400}, /* not a number */
        {"GET / HTTP/1.1\r\ncontent-length: \r\n\r\n", 400},   /* empty */
        {"GET / HTTP/1.1\r\ncontent-length: 1234567890123456789\r\n\r\n", 400}, /* too long */
        {"GET / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n", 411},
        {"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(parse(cases[i].req, 1024, &h) == cases[i].status, "case %zu: %s", i,
                      cases[i].req);
}
END_TEST

START_TEST(head_limits)
{
    struct qn_http_head h;
    char *big = malloc(4096);
    ck_assert_ptr_nonnull(big);
    /* a field making the head longer than max: 431 once max bytes are in */
    snprintf(big, 4096, "GET / HTTP/1.1\r\nx: %0*d\r\n\r\n", 2000, 7);
    ck_assert_int_eq(parse(big, 1024, &h), 431);
    ck_assert_int_eq(parse(big, 4096, &h), 0);
    /* still waiting below max */
    big[1000] = '\0';
    ck_assert_int_eq(parse(big, 1024, &h), -1);
    /* a target longer than max / 2 */
    snprintf(big, 4096, "GET /%0*d HTTP/1.1\r\n\r\n", 600, 1);
    ck_assert_int_eq(parse(big, 1024, &h), 414);
    /* more fields than QN_HTTP_MAX_FIELDS */
    size_t n = (size_t)snprintf(big, 4096, "GET / HTTP/1.1\r\n");
    for (int i = 0; i <= QN_HTTP_MAX_FIELDS; i++)
        n += (size_t)snprintf(big + n, 4096 - n, "f%d: v\r\n", i);
    snprintf(big + n, 4096 - n, "\r\n");
    ck_assert_int_eq(parse(big, 4096, &h), 431);
    free(big);
}
END_TEST

START_TEST(grpcweb_modes)
{
    static const struct {
        const char *v;
        enum qn_grpcweb_mode m;
    } cases[] = {
        {"application/grpc-web", QN_GRPCWEB_BINARY},
        {"application/grpc-web+proto", QN_GRPCWEB_BINARY},
        {"Application/GRPC-Web+Proto; charset=x", QN_GRPCWEB_BINARY},
        {"application/grpc-web-text", QN_GRPCWEB_TEXT},
        {"application/grpc-web-text+proto", QN_GRPCWEB_TEXT},
        {"application/grpc-web+json", QN_GRPCWEB_OTHER},
        {"application/grpc-web-text+json", QN_GRPCWEB_OTHER},
        {"application/grpc", QN_GRPCWEB_NONE},
        {"application/grpc-webx", QN_GRPCWEB_NONE},
        {"text/plain", QN_GRPCWEB_NONE},
        {"", QN_GRPCWEB_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(qn_grpcweb_mode_of(cases[i].v, strlen(cases[i].v)) == cases[i].m, "%s",
                      cases[i].v);
    ck_assert(qn_grpcweb_mode_of(NULL, 0) == QN_GRPCWEB_NONE);
}
END_TEST

START_TEST(trailer_frame)
{
    uint8_t f[128];
    size_t n = qn_grpcweb_trailer_frame("0", NULL, f, sizeof f);
    ck_assert_uint_eq(n, 5 + 15);
    ck_assert_int_eq(f[0], 0x80);
    ck_assert_int_eq(f[4], 15);
    ck_assert(memcmp(f + 5, "grpc-status:0\r\n", 15) == 0);
    n = qn_grpcweb_trailer_frame("5", "no%20such", f, sizeof f);
    const char *body = "grpc-status:5\r\ngrpc-message:no%20such\r\n";
    ck_assert_uint_eq(n, 5 + strlen(body));
    ck_assert(memcmp(f + 5, body, strlen(body)) == 0);
    ck_assert_uint_eq(qn_grpcweb_trailer_frame("5", "no%20such", f, 20), 0); /* does not fit */
}
END_TEST

START_TEST(reasons)
{
    ck_assert_str_eq(qn_http_reason(200), "OK");
    ck_assert_str_eq(qn_http_reason(431), "Request Header Fields Too Large");
    ck_assert_str_eq(qn_http_reason(299), "Unknown");
}
END_TEST

Suite *qn_test_http_wire_suite(void)
{
    Suite *s = suite_create("http_wire");
    TCase *t = tcase_create("head");
    tcase_add_test(t, head_complete);
    tcase_add_test(t, head_incomplete_until_the_empty_line);
    tcase_add_test(t, head_connection_semantics);
    tcase_add_test(t, head_refusals);
    tcase_add_test(t, head_limits);
    suite_add_tcase(s, t);
    t = tcase_create("grpcweb");
    tcase_add_test(t, grpcweb_modes);
    tcase_add_test(t, trailer_frame);
    tcase_add_test(t, reasons);
    suite_add_tcase(s, t);
    return s;
}
