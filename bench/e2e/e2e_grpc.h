/*
 * e2e_grpc.h - private to bench/e2e: gRPC message framing and status codes.
 *
 * A gRPC message on an HTTP/2 stream is a 5-byte prefix (1 byte compressed
 * flag, 4 bytes big-endian length) followed by that many bytes. The reader
 * reassembles messages from DATA chunks of any size; it never trusts the length
 * field further than the limit it was given.
 */
#ifndef QN_BENCH_E2E_GRPC_H
#define QN_BENCH_E2E_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define E2E_GRPC_PREFIX 5

/* gRPC status codes 0..16 (https://grpc.github.io/grpc/core/md_doc_statuscodes.html). */
#define E2E_GRPC_CODES 17

/* Writes the 5-byte prefix of an uncompressed message of len bytes. */
void e2e_grpc_prefix(uint8_t out[E2E_GRPC_PREFIX], uint32_t len);

/* Called once per complete message; the bytes are borrowed until it returns.
 * A negative return stops the reader and is returned by e2e_grpc_feed(). */
typedef int (*e2e_grpc_msg_fn)(const uint8_t *msg, size_t len, void *ud);

struct e2e_grpc_reader {
    uint8_t hdr[E2E_GRPC_PREFIX]; /* the prefix being collected */
    size_t hdr_len;               /* bytes of hdr filled, 0..5 */
    uint8_t *buf;                 /* body of the current message; NULL between messages */
    size_t want;                  /* body length announced by the prefix; <= max */
    size_t got;                   /* body bytes collected, <= want */
    size_t max;                   /* largest message accepted */
    uint64_t messages;            /* complete messages delivered */
};

/* An empty reader accepting messages of at most max bytes. */
void e2e_grpc_reader_init(struct e2e_grpc_reader *r, size_t max);

/*
 * Consumes len bytes of stream data, calling fn for each message completed.
 * Returns 0, or:
 *   QN_ELIMIT  a prefix announced more than max bytes
 *   QN_EPROTO  the compressed flag is set (no grpc-encoding was negotiated) or
 *              holds a value other than 0 or 1
 *   QN_ENOMEM  the body buffer could not be allocated
 *   any negative value fn returned
 * After an error the reader must not be fed again (release it).
 */
int e2e_grpc_feed(struct e2e_grpc_reader *r, const uint8_t *data, size_t len,
                  e2e_grpc_msg_fn fn, void *ud);

/* True when the stream ended between messages (no partial prefix or body). */
bool e2e_grpc_reader_idle(const struct e2e_grpc_reader *r);

/* Frees the partial body, if any. Safe to call twice. */
void e2e_grpc_reader_release(struct e2e_grpc_reader *r);

/* Parses a grpc-status header value (decimal, 1 to 3 digits) into *code.
 * Returns false for anything else; *code is written only on success. */
bool e2e_grpc_parse_status(const uint8_t *v, size_t len, int *code);

/* "OK", "CANCELLED", ... "UNAUTHENTICATED"; "CODE_<n>" style text is not
 * produced here: codes outside 0..16 return NULL. */
const char *e2e_grpc_code_name(int code);

#endif
