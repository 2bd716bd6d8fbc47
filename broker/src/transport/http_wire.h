/*
 * transport/http_wire.h - private to broker/: the pure parts of the HTTP side
 * port: the HTTP/1.1 request head (RFC 9112), and the gRPC-Web framing that
 * differs from gRPC over HTTP/2 (https://github.com/grpc/grpc/blob/master/doc/
 * PROTOCOL-WEB.md): the trailer frame. The text mode's base64 is the codec's
 * streaming one (queen/b64.h: standard alphabet, padded runs).
 *
 * No sockets, no event loop: everything here is unit-tested alone
 * (test/broker/transport/test_http_wire.c) and fuzzed (fuzz_http_wire.c). All
 * input is untrusted.
 */
#ifndef QN_BROKER_HTTP_WIRE_H
#define QN_BROKER_HTTP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- request head */

/* Most header fields of one request (more: 431). */
#define QN_HTTP_MAX_FIELDS 64

struct qn_http_field {
    const char *name; /* borrowed from the parsed buffer; not NUL-terminated */
    size_t name_len;
    const char *value; /* without leading and trailing whitespace */
    size_t value_len;
};

struct qn_http_head {
    const char *method; /* borrowed; a token */
    size_t method_len;
    const char *target; /* borrowed; the request-target as sent */
    size_t target_len;
    int minor;       /* HTTP/1.<minor>: 0 or 1 */
    size_t head_len; /* bytes of the head, its final empty line included */
    struct qn_http_field fields[QN_HTTP_MAX_FIELDS];
    size_t nfields;
    /* derived from the fields */
    int64_t content_length; /* -1 when absent */
    bool keep_alive;        /* HTTP/1.1 unless "connection: close"; 1.0 only with keep-alive */
    bool expect_continue;   /* "expect: 100-continue" */
};

/*
 * Parses a request head at the start of buf[0..len): the request line, header
 * fields, and the empty line that ends them, each line ending in CRLF (a bare
 * LF is refused, as are obsolete line folding, whitespace before a colon, and
 * control characters other than HTAB in values, so nothing downstream can be
 * smuggled a different request). Pointers in *head point into buf.
 *
 * Returns:
 *   QN_OK with *complete true and *head filled: the head is head->head_len bytes;
 *   QN_OK with *complete false: more bytes are needed (only while len < max);
 *   QN_EBADREQUEST with *status the HTTP status to answer:
 *     400 malformed (request line, field syntax, Content-Length not a number or
 *         given twice with different values, both Content-Length and
 *         Transfer-Encoding);
 *     411 a Transfer-Encoding (bodies must come with a Content-Length);
 *     414 a request-target longer than half of max;
 *     431 the head is longer than max bytes, or has more than QN_HTTP_MAX_FIELDS
 *         fields;
 *     505 a version other than HTTP/1.0 and HTTP/1.1.
 * *head is unspecified unless complete.
 */
int qn_http_parse_head(const uint8_t *buf, size_t len, size_t max, struct qn_http_head *head,
                       bool *complete, int *status);

/* The value of field `name` (case-insensitive; the first when repeated), or
 * NULL with *len 0. */
const char *qn_http_field(const struct qn_http_head *head, const char *name, size_t *len);

/* The reason phrase of an HTTP status we send ("OK", "Not Found", ...). */
const char *qn_http_reason(int status);

/* ---------------------------------------------------------------- gRPC-Web */

/* What a gRPC-Web content-type asks for. */
enum qn_grpcweb_mode {
    QN_GRPCWEB_NONE,   /* not gRPC-Web */
    QN_GRPCWEB_BINARY, /* application/grpc-web, application/grpc-web+proto */
    QN_GRPCWEB_TEXT,   /* application/grpc-web-text, application/grpc-web-text+proto */
    QN_GRPCWEB_OTHER,  /* a gRPC-Web type with another codec (+json ...): 415 */
};

/* Classifies a content-type value (len bytes; parameters after ';' ignored,
 * type case-insensitive). */
enum qn_grpcweb_mode qn_grpcweb_mode_of(const char *v, size_t len);

/*
 * The trailer frame that ends a gRPC-Web response body: flag byte 0x80, the
 * 4-byte big-endian length, then "grpc-status:<code>\r\n" and, when message is
 * not NULL, "grpc-message:<message>\r\n" (message already percent-encoded, as
 * the call layer keeps it). Writes at most cap bytes; returns the frame's
 * length, or 0 when it does not fit.
 */
size_t qn_grpcweb_trailer_frame(const char *code, const char *message, uint8_t *out, size_t cap);

#endif
