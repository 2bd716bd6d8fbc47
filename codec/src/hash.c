/*
 * hash.c - transaction-id hashes: xxh3_128, serialized big-endian (high 64 bits
 * first), which is the byte order `xxhsum -H2` prints and PostgreSQL stores.
 */
#include <xxhash.h>

#include "queen/ids.h"

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

void qn_txn_hash(const void *data, size_t len, uint8_t out[QN_HASH_LEN])
{
    static const uint8_t empty[1] = {0};
    XXH128_hash_t h = XXH3_128bits(len ? data : empty, len);
    put_be64(out, h.high64);
    put_be64(out + 8, h.low64);
}

void qn_hash_hex(const uint8_t h[QN_HASH_LEN], char out[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < QN_HASH_LEN; i++) {
        out[2 * i] = digits[h[i] >> 4];
        out[2 * i + 1] = digits[h[i] & 15];
    }
    out[32] = '\0';
}
