/*
 * queen/ids.h - transaction-id hashes and UUIDs.
 *
 * Hash: xxh3_128 of the transaction id's bytes, serialized big-endian, high 64
 * bits first: exactly the 32 hex digits `xxhsum -H2` prints. PostgreSQL stores
 * and compares these 16 bytes; it never hashes.
 *
 * UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, then a 42-bit counter
 * (12 bits of rand_a and the top 30 bits of rand_b) seeded randomly each
 * millisecond, then 32 random bits. Ids from one generator strictly increase
 * (byte-wise) even when the clock stalls or steps back.
 */
#ifndef QUEEN_IDS_H
#define QUEEN_IDS_H

#include <stddef.h>
#include <stdint.h>

#define QN_HASH_LEN 16
#define QN_UUID_LEN 16
/* 36 characters plus NUL */
#define QN_UUID_STR_LEN 37

/* xxh3_128 of data[0..len) into out[16], big-endian. data may be NULL if len==0. */
void qn_txn_hash(const void *data, size_t len, uint8_t out[QN_HASH_LEN]);

/* Lower-case hex of a 16-byte hash into out[33] (NUL-terminated). */
void qn_hash_hex(const uint8_t h[QN_HASH_LEN], char out[33]);

/* A UUIDv7 generator. Plain value struct; zero is not valid, use qn_uuid7_init. */
struct qn_uuid7_gen {
    uint64_t last_ms; /* timestamp of the last id issued */
    uint64_t counter; /* 42-bit counter of the last id issued */
    uint64_t rng[4];  /* xoshiro256** state */
};

/* Seeds g from the operating system's random source. QN_EIO if none is usable. */
int qn_uuid7_init(struct qn_uuid7_gen *g);

/* Seeds g deterministically (tests). */
void qn_uuid7_init_seed(struct qn_uuid7_gen *g, uint64_t seed);

/* Next id, using now_ms as the clock (pass qn_now_ms() in production). Strictly
 * greater than every id this generator issued before. */
void qn_uuid7_next(struct qn_uuid7_gen *g, uint64_t now_ms, uint8_t out[QN_UUID_LEN]);

/* Wall-clock milliseconds since the Unix epoch. */
uint64_t qn_now_ms(void);

/* Canonical lower-case text "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into out[37]. */
void qn_uuid_format(const uint8_t u[QN_UUID_LEN], char out[QN_UUID_STR_LEN]);

/* Parses canonical UUID text (either case, exactly 36 characters). Returns QN_OK
 * or QN_EUUID_PARSE. */
int qn_uuid_parse(const char *s, size_t len, uint8_t out[QN_UUID_LEN]);

#endif
