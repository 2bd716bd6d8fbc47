/*
 * transport/http_wire.h - private to broker/: the pure parts of the HTTP side
 * port: the HTTP/1.1 request head (RFC 9112), and the gRPC-Web framing that
 * differs from gRPC over HTTP/2 (https://github.com/grpc/grpc/blob/master/doc/
 * PROTOCOL-WEB.md): the base64 text mode and the trailer frame.
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
 * Incremental base64 decoder for the text mode: the request body is base64
 * (standard alphabet) of the binary body, possibly several padded runs one
 * after another. Whitespace is not allowed.
 */
struct qn_b64_dec {
    uint8_t q[4]; /* quantum collected so far */
    uint8_t nq;   /* 0..3 */
};

void qn_b64_dec_init(struct qn_b64_dec *d);
/*
 * Decodes in[0..len) into out (which must hold at least 3 * (len + 3) / 4
 * bytes). Returns QN_OK with *outlen, or QN_EBADREQUEST (a byte outside the
 * alphabet, or padding inside a quantum).
 */
int qn_b64_dec_feed(struct qn_b64_dec *d, const uint8_t *in, size_t len, uint8_t *out,
                    size_t *outlen);
/* The input ended: QN_OK when it ended on a quantum boundary. */
int qn_b64_dec_finish(const struct qn_b64_dec *d);

/*
 * Incremental base64 encoder for text-mode responses: the whole response body
 * is one base64 text, padded once at the end.
 */
struct qn_b64_enc {
    uint8_t carry[2]; /* input bytes not yet encoded (less than a 3-byte group) */
    uint8_t ncarry;
};

void qn_b64_enc_init(struct qn_b64_enc *e);
/* Encodes in[0..len) into out (at least 4 * (len + 2) / 3 + 4 bytes); returns
 * the bytes written. Keeps up to 2 input bytes for the next call. */
size_t qn_b64_enc_feed(struct qn_b64_enc *e, const uint8_t *in, size_t len, char *out);
/* Writes what is carried, padded (at most 4 bytes); returns the bytes written. */
size_t qn_b64_enc_finish(struct qn_b64_enc *e, char *out);

/*
 * The trailer frame that ends a gRPC-Web response body: flag byte 0x80, the
 * 4-byte big-endian length, then "grpc-status:<code>\r\n" and, when message is
 * not NULL, "grpc-message:<message>\r\n" (message already percent-encoded, as
 * the call layer keeps it). Writes at most cap bytes; returns the frame's
 * length, or 0 when it does not fit.
 */
size_t qn_grpcweb_trailer_frame(const char *code, const char *message, uint8_t *out, size_t cap);

#endif
