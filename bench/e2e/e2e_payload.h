/*
 * e2e_payload.h - private to bench/e2e: message payloads with an embedded send
 * time.
 *
 * Two kinds, each exactly `size` bytes:
 *   json    a realistic small JSON object (an order event: ids, names, amounts,
 *           tags, a free-text note) whose numbers and strings vary from message
 *           to message, so a segment compresses the way real JSON does. It
 *           starts with {"ts":<16 decimal digits>, the send time in
 *           microseconds since the epoch.
 *   random  incompressible bytes from a xorshift generator; the first 8 bytes
 *           are the send time (little-endian microseconds since the epoch).
 * Every message is generated fresh (no pool), so nothing repeats inside a
 * segment and compression sees what it would see in production.
 */
#ifndef QN_BENCH_E2E_PAYLOAD_H
#define QN_BENCH_E2E_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum e2e_payload_kind {
    E2E_PAYLOAD_JSON,
    E2E_PAYLOAD_RANDOM,
};

/* Smallest size a payload may have (room for the embedded time). */
#define E2E_PAYLOAD_MIN 24

struct e2e_payload_gen {
    enum e2e_payload_kind kind;
    size_t size;  /* bytes per payload, >= E2E_PAYLOAD_MIN */
    uint64_t rng; /* xorshift64 state, never 0 */
    uint64_t seq; /* payloads generated so far */
};

/* Prepares a generator; size must be >= E2E_PAYLOAD_MIN. seed may be 0. */
void e2e_payload_init(struct e2e_payload_gen *g, enum e2e_payload_kind kind, size_t size,
                      uint64_t seed);

/* Writes exactly g->size bytes into out, embedding ts_us. */
void e2e_payload_fill(struct e2e_payload_gen *g, uint8_t *out, uint64_t ts_us);

/* Reads the embedded send time of a payload of the given kind. Returns false
 * when the payload is too short or does not carry one; *ts_us is written only
 * on success. */
bool e2e_payload_ts(enum e2e_payload_kind kind, const uint8_t *p, size_t len, uint64_t *ts_us);

/* Parses "json" or "random". */
bool e2e_payload_kind_parse(const char *s, enum e2e_payload_kind *out);
const char *e2e_payload_kind_name(enum e2e_payload_kind kind);

#endif
