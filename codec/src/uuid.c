/*
 * uuid.c - UUIDv7 (RFC 9562) generation, canonical text formatting and parsing.
 *
 * Layout of an id from qn_uuid7_next() (big-endian, byte-wise comparable):
 *   bits   0..47   unix_ts_ms      milliseconds since the Unix epoch
 *   bits  48..51   ver = 0111
 *   bits  52..63   rand_a          top 12 bits of the 42-bit counter
 *   bits  64..65   var = 10
 *   bits  66..95                   low 30 bits of the counter
 *   bits  96..127                  32 random bits
 * This is RFC 9562 section 6.2, method 1 (fixed-length dedicated counter).
 *
 * What it does not do: read the clock by itself (the caller passes now_ms, so
 * tests can stall or rewind it), share state between generators, or validate a
 * parsed UUID's version (trace ids may be any UUID).
 *
 * Invariants of a generator g (after qn_uuid7_init*):
 *   1. (g->last_ms, g->counter) is the (timestamp, counter) of the last id issued,
 *      and every id issued compares greater than all earlier ones, because each
 *      call strictly increases that pair in lexicographic order.
 *   2. A new millisecond reseeds the counter with 41 random bits (its top bit
 *      clear), leaving at least 2^41 increments before it can overflow.
 *   3. When the clock stalls or steps back, the last timestamp is kept and the
 *      counter incremented; if the counter is exhausted the timestamp moves one
 *      millisecond ahead of the clock instead (RFC 9562 section 6.2).
 *   4. last_ms <= 2^48-1: a clock beyond year 10889 is clamped. Only there, with
 *      the counter exhausted too, could an id repeat.
 */
#include <errno.h>
#include <sys/random.h>
#include <time.h>

#include "queen/error.h"
#include "queen/ids.h"

#define TS_MAX ((UINT64_C(1) << 48) - 1)
#define COUNTER_MAX ((UINT64_C(1) << 42) - 1)
#define COUNTER_SEED_MASK ((UINT64_C(1) << 41) - 1)

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna). */
static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* splitmix64, to expand one seed into the four state words. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void qn_uuid7_init_seed(struct qn_uuid7_gen *g, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        g->rng[i] = splitmix64(&seed);
    g->last_ms = 0;
    g->counter = 0;
}

int qn_uuid7_init(struct qn_uuid7_gen *g)
{
    uint64_t seed[4];
    size_t got = 0;
    while (got < sizeof(seed)) {
        ssize_t r = getrandom((uint8_t *)seed + got, sizeof(seed) - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return QN_EIO;
        }
        got += (size_t)r;
    }
    if ((seed[0] | seed[1] | seed[2] | seed[3]) == 0)
        return QN_EIO; /* xoshiro's one forbidden state; a real source never gives it */
    for (int i = 0; i < 4; i++)
        g->rng[i] = seed[i];
    g->last_ms = 0;
    g->counter = 0;
    return QN_OK;
}

uint64_t qn_now_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0; /* cannot happen for CLOCK_REALTIME; ids stay ordered regardless */
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void qn_uuid7_next(struct qn_uuid7_gen *g, uint64_t now_ms, uint8_t out[QN_UUID_LEN])
{
    if (now_ms > TS_MAX)
        now_ms = TS_MAX;
    if (now_ms > g->last_ms) {
        g->last_ms = now_ms;
        g->counter = rng_next(g->rng) & COUNTER_SEED_MASK;
    } else if (g->counter < COUNTER_MAX) {
        g->counter++;
    } else if (g->last_ms < TS_MAX) {
        g->last_ms++;
        g->counter = rng_next(g->rng) & COUNTER_SEED_MASK;
    }
    uint64_t ms = g->last_ms, c = g->counter;
    uint32_t r = (uint32_t)(rng_next(g->rng) >> 32);

    out[0] = (uint8_t)(ms >> 40);
    out[1] = (uint8_t)(ms >> 32);
    out[2] = (uint8_t)(ms >> 24);
    out[3] = (uint8_t)(ms >> 16);
    out[4] = (uint8_t)(ms >> 8);
    out[5] = (uint8_t)ms;
    out[6] = (uint8_t)(0x70 | ((c >> 38) & 0x0f)); /* version 7, counter bits 41..38 */
    out[7] = (uint8_t)(c >> 30);                   /* counter bits 37..30 */
    out[8] = (uint8_t)(0x80 | ((c >> 24) & 0x3f)); /* variant 10, counter bits 29..24 */
    out[9] = (uint8_t)(c >> 16);
    out[10] = (uint8_t)(c >> 8);
    out[11] = (uint8_t)c;
    out[12] = (uint8_t)(r >> 24);
    out[13] = (uint8_t)(r >> 16);
    out[14] = (uint8_t)(r >> 8);
    out[15] = (uint8_t)r;
}

void qn_uuid_format(const uint8_t u[QN_UUID_LEN], char out[QN_UUID_STR_LEN])
{
    static const char digits[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < QN_UUID_LEN; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = digits[u[i] >> 4];
        out[o++] = digits[u[i] & 15];
    }
    out[o] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int qn_uuid_parse(const char *s, size_t len, uint8_t out[QN_UUID_LEN])
{
    uint8_t u[QN_UUID_LEN];
    if (!s || len != QN_UUID_STR_LEN - 1)
        return QN_EUUID_PARSE;
    size_t p = 0;
    for (int i = 0; i < QN_UUID_LEN; i++) {
        if (p == 8 || p == 13 || p == 18 || p == 23) {
            if (s[p] != '-')
                return QN_EUUID_PARSE;
            p++;
        }
        int hi = hexval(s[p]), lo = hexval(s[p + 1]);
        if (hi < 0 || lo < 0)
            return QN_EUUID_PARSE;
        u[i] = (uint8_t)(hi << 4 | lo);
        p += 2;
    }
    for (int i = 0; i < QN_UUID_LEN; i++)
        out[i] = u[i];
    return QN_OK;
}
