/*
 * queen/client_wire.h - the pure parts of a gRPC client
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md): message
 * framing, the grpc-status / grpc-message response headers, grpc-timeout.
 *
 * No sockets, no HTTP/2 session: everything here works on bytes and is what the
 * fuzz target (client/fuzz) and the unit suite (test/client) drive. All input is
 * untrusted: a length announced by the peer is checked against the caller's
 * limit before it sizes anything. Nothing here prints, aborts or keeps global
 * state.
 */
#ifndef QUEEN_CLIENT_WIRE_H
#define QUEEN_CLIENT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes before every gRPC message: 1 flag byte (0 = uncompressed), 4 bytes
 * big-endian length. */
#define QN_CLIENT_GRPC_PREFIX 5

/* gRPC status codes 0 (OK) .. 16 (UNAUTHENTICATED). */
#define QN_CLIENT_GRPC_CODES 17

/* Longest status message kept, NUL included; longer ones are cut (never inside
 * a UTF-8 sequence). */
#define QN_CLIENT_MSG_MAX 512

/* Room for a grpc-timeout value: 8 digits, a unit, NUL. */
#define QN_CLIENT_TIMEOUT_LEN 10

/* Writes the prefix of an uncompressed message of len bytes. */
void qn_client_grpc_prefix(uint8_t out[QN_CLIENT_GRPC_PREFIX], uint32_t len);

/* Called once per complete message; the bytes are borrowed until it returns.
 * A negative return stops the reader and is returned by qn_client_reader_feed(). */
typedef int (*qn_client_msg_fn)(const uint8_t *msg, size_t len, void *ud);

/*
 * Reassembles length-prefixed messages from DATA chunks of any size.
 * Invariants: buf != NULL exactly while a body is collected across chunks;
 * got <= want <= max.
 */
struct qn_client_reader {
    uint8_t hdr[QN_CLIENT_GRPC_PREFIX]; /* the prefix being collected */
    size_t hdr_len;                     /* bytes of hdr filled, 0..5 */
    uint8_t *buf;                       /* body of the current message; NULL between messages */
    size_t want;                        /* body length announced by the prefix; <= max */
    size_t got;                         /* body bytes collected, <= want */
    size_t max;                         /* largest message accepted */
    uint64_t messages;                  /* complete messages delivered */
};

/* An empty reader accepting messages of at most max bytes. */
void qn_client_reader_init(struct qn_client_reader *r, size_t max);

/*
 * Consumes len bytes of stream data, calling fn for each message completed.
 * Returns QN_OK, or:
 *   QN_ELIMIT  a prefix announced more than max bytes
 *   QN_EPROTO  the flag byte is not 0 (compression was never negotiated: the
 *              client sends no grpc-accept-encoding)
 *   QN_ENOMEM  the body buffer could not be allocated
 *   any negative value fn returned
 * After an error the reader must not be fed again (release it).
 */
int qn_client_reader_feed(struct qn_client_reader *r, const uint8_t *data, size_t len,
                          qn_client_msg_fn fn, void *ud);

/* True when the stream ended between messages (no partial prefix or body). */
bool qn_client_reader_idle(const struct qn_client_reader *r);

/* Frees the partial body, if any. Safe to call twice. */
void qn_client_reader_release(struct qn_client_reader *r);

/* Parses a status value (grpc-status, or :status): 1 to 3 ASCII digits, nothing
 * else. Returns false for anything else; *code is written only on success. */
bool qn_client_parse_status(const uint8_t *v, size_t len, int *code);

/*
 * Decodes a grpc-message value: "%XX" escapes (either hex case) become bytes; a
 * '%' without two hex digits after it stays literal (decoders must not fail).
 * Control characters (below 0x20, and 0x7F) become '?', so the text is safe to
 * print. Writes at most cap-1 bytes plus a NUL (cap >= 1), never cutting a UTF-8
 * sequence short; returns the length written.
 */
size_t qn_client_pct_decode(const uint8_t *in, size_t len, char *out, size_t cap);

/* "OK", "CANCELLED", ... "UNAUTHENTICATED"; NULL outside 0..16. */
const char *qn_client_code_name(int code);

/*
 * Formats a timeout of ms milliseconds as a grpc-timeout value ("250m", "90S",
 * ...): at most 8 digits, so long timeouts move to a coarser unit, rounding up.
 * ms <= 0 gives "0m". Returns the length written (out holds QN_CLIENT_TIMEOUT_LEN).
 */
size_t qn_client_timeout_format(int64_t ms, char out[QN_CLIENT_TIMEOUT_LEN]);

/*
 * What the response headers and trailers of one call said. Fed one header at a
 * time with qn_client_head_add(); keeps :status, grpc-status, grpc-message.
 * A later grpc-status replaces an earlier one (trailers after headers).
 */
struct qn_client_head {
    int http_status;                      /* :status, 0 when none (or malformed) */
    bool have_status;                     /* a well-formed grpc-status was seen */
    int grpc_status;                      /* valid when have_status; 0..999 */
    bool bad_status;                      /* a grpc-status that did not parse was seen */
    char grpc_message[QN_CLIENT_MSG_MAX]; /* decoded, NUL-terminated; "" when none */
};

/* Empties h. */
void qn_client_head_init(struct qn_client_head *h);

/* Records one response header (name lower-case, as HTTP/2 requires). Headers
 * other than the three above are ignored. Never fails. */
void qn_client_head_add(struct qn_client_head *h, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen);

#endif
