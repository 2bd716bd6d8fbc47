/*
 * transport/grpc_wire.h - private to broker/: the pure parts of gRPC over HTTP/2
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md): grpc-timeout,
 * grpc-message percent-encoding, the 5-byte message prefix, request header checks.
 *
 * No sockets, no nghttp2, no event loop: everything here is unit-tested alone
 * (test/broker/test_grpc_wire.c). All input is untrusted.
 */
#ifndef QN_BROKER_GRPC_WIRE_H
#define QN_BROKER_GRPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/call.h"

/* ---------------------------------------------------------------- grpc-timeout */

/* Longest timeout we represent (about 10 years); larger values saturate here. */
#define QN_GRPC_TIMEOUT_MAX_MS (INT64_C(10) * 366 * 24 * 3600 * 1000)

/*
 * Parses a grpc-timeout value: 1 to 8 ASCII digits followed by one unit of
 * H (hours), M (minutes), S (seconds), m (milliseconds), u (microseconds) or
 * n (nanoseconds), nothing else (no sign, no spaces). Writes the timeout in
 * milliseconds, rounded up (so "1n" is 1 ms and only "0<unit>" is 0 ms), and
 * saturated at QN_GRPC_TIMEOUT_MAX_MS.
 * Returns QN_OK, or QN_EINVAL (empty, more than 8 digits, no digits, bad unit,
 * trailing bytes). *ms is written only on success.
 */
int qn_grpc_timeout_parse(const char *s, size_t len, int64_t *ms);

/* ---------------------------------------------------------------- grpc-message */

/*
 * Percent-encodes a status message as the spec says: bytes 0x20..0x7E except '%'
 * pass through; every other byte becomes "%XX" (upper-case hex). Writes at most
 * cap-1 bytes plus a NUL into out (cap >= 1); never splits an escape, and when the
 * input does not fit, stops before a UTF-8 sequence that would be cut. Returns the
 * length written (without the NUL).
 */
size_t qn_grpc_pct_encode(const char *in, size_t len, char *out, size_t cap);

/*
 * Decodes "%XX" escapes (either hex case). A '%' not followed by two hex digits is
 * kept literally (decoders must not fail). Writes at most cap-1 bytes plus a NUL
 * (cap >= 1); returns the length written.
 */
size_t qn_grpc_pct_decode(const char *in, size_t len, char *out, size_t cap);

/* ---------------------------------------------------------------- messages */

/*
 * Reassembles length-prefixed messages from DATA chunks of any size.
 *
 * State: PREFIX (collecting the 5 bytes: flags, big-endian uint32 length) then
 * BODY (collecting `length` bytes) then back to PREFIX. The declared length is
 * checked against `max` as soon as the prefix is complete, before anything is
 * allocated; the body buffer grows with the bytes actually received (never to
 * more than the declared length), so a prefix alone reserves nothing.
 */
struct qn_grpc_reader {
    size_t max;      /* largest accepted message body, fixed at init */
    uint8_t hdr[5];  /* prefix bytes collected so far */
    uint8_t hdr_len; /* 0..5; 5 means the body is being collected */
    uint32_t len;    /* declared body length (valid when hdr_len == 5) */
    uint8_t *body;   /* body bytes so far; NULL until the first one */
    uint32_t have;   /* body bytes collected, <= len */
    uint32_t cap;    /* allocated size of body, <= len */
};

/* One complete message. body is malloc'd and owned by the receiver (free()); it is
 * NULL when len is 0 (the empty message is valid: proto3 encodes defaults as no
 * bytes at all). */
struct qn_grpc_msg {
    bool compressed;
    uint8_t *body;
    uint32_t len;
};

void qn_grpc_reader_init(struct qn_grpc_reader *r, size_t max);
void qn_grpc_reader_reset(struct qn_grpc_reader *r); /* frees the partial body */

/*
 * Feeds bytes. Consumes input up to and including the end of at most one message
 * and reports how much in *used. When a message completed, *ready is true and *msg
 * holds it; otherwise all input was consumed and *ready is false.
 * Returns QN_OK; QN_ELIMIT when a declared length exceeds max (the reader is then
 * unusable until reset; *used covers the prefix); QN_EBADREQUEST when the flags
 * byte is neither 0 nor 1; QN_ENOMEM when the body cannot be allocated.
 */
int qn_grpc_reader_feed(struct qn_grpc_reader *r, const uint8_t *data, size_t len, size_t *used,
                        bool *ready, struct qn_grpc_msg *msg);

/* True when no message is partly received (the stream may end here). */
bool qn_grpc_reader_is_idle(const struct qn_grpc_reader *r);

/* The declared length of the message being received (0 before its prefix). */
uint32_t qn_grpc_reader_pending_len(const struct qn_grpc_reader *r);

/* Writes the 5-byte prefix of an uncompressed message of len bytes. */
void qn_grpc_prefix_write(uint8_t out[5], uint32_t len);

/* ---------------------------------------------------------------- request headers */

/* The request headers the transport checks (values NUL-terminated; NULL = absent). */
struct qn_grpc_req_headers {
    const char *method;       /* :method */
    const char *content_type; /* content-type */
    const char *te;           /* te */
    const char *encoding;     /* grpc-encoding */
    const char *timeout;      /* grpc-timeout */
};

/* How to answer a request that fails the checks. */
struct qn_grpc_verdict {
    int http_status;        /* 200, or 405 (method) / 415 (content-type) */
    enum qn_grpc_code code; /* grpc-status */
    const char *message;    /* static text for the client */
    bool accept_encoding;   /* add grpc-accept-encoding: identity */
};

/* application/grpc, optionally followed by "+subtype" or ";params" (case-insensitive
 * type). */
bool qn_grpc_content_type_ok(const char *v);

/* The te header lists the "trailers" token (comma-separated, case-insensitive). */
bool qn_grpc_te_ok(const char *v);

/* grpc-encoding absent, empty or "identity". */
bool qn_grpc_encoding_ok(const char *v);

/*
 * Checks h in the order a gRPC server must: :method POST (else HTTP 405, INTERNAL),
 * content-type (else HTTP 415, INTERNAL), te: trailers (else INTERNAL), grpc-encoding
 * identity (else UNIMPLEMENTED with grpc-accept-encoding), grpc-timeout syntax (else
 * INTERNAL). Returns true when all pass (*timeout_ms is the parsed timeout or -1 when
 * none was sent); false with *out filled otherwise. The :path is checked by the
 * caller (unknown method -> UNIMPLEMENTED) after these.
 */
bool qn_grpc_check_request(const struct qn_grpc_req_headers *h, int64_t *timeout_ms,
                           struct qn_grpc_verdict *out);

#endif
