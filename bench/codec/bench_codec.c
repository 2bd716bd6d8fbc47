/*
 * bench_codec - codec throughput on one core.
 *
 * For JSON-like payloads (small objects with varying numbers and strings, the
 * kind clients push) and for incompressible random bytes, at 64 B, 256 B and
 * 4 KiB, in segments of 100 and 1000 frames, it measures:
 *   pack+compress     qn_segment_pack() at level 3 with the hash blob: frames
 *                     validated, written, compressed, txn ids hashed, blob
 *                     allocated (what the broker's push path does per flush)
 *   decompress+walk   qn_segment_decompress() into the context's buffer, then
 *                     qn_frame_iter_next() over every frame, touching each
 *                     payload (what the pop path does per segment)
 * and prints frames/s, MB/s of raw (uncompressed) segment bytes, and the
 * compression ratio raw/compressed. Transaction ids are 36-character UUID
 * texts, as when clients leave them to the broker.
 *
 * Usage: bench_codec [--seconds S] (time per measurement, default 1).
 * Deliberately single-threaded; no warm-up is reported, but every
 * measurement runs one untimed round first.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "queen/error.h"
#include "queen/frame.h"
#include "queen/ids.h"
#include "queen/segment.h"

#define POOL 20000 /* distinct frames per configuration */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1du;
}

static const char *words[] = {"alpha", "bravo", "charlie", "delta",  "echo", "foxtrot",
                              "golf",  "hotel", "india",   "juliet", "kilo", "lima"};
static const char *currencies[] = {"EUR", "USD", "GBP", "CHF", "JPY"};

/* A JSON object of exactly `size` bytes (size >= 48): realistic fields with
 * varying values, then a filler string to reach the size. */
static void json_payload(char *out, size_t size)
{
    char buf[8192];
    size_t n = 0;
    n += (size_t)snprintf(
        buf + n, sizeof(buf) - n, "{\"orderId\":%llu,\"amount\":%llu.%02llu,\"currency\":\"%s\"",
        (unsigned long long)(rnd() % 100000000), (unsigned long long)(rnd() % 100000),
        (unsigned long long)(rnd() % 100), currencies[rnd() % 5]);
    int item = 0;
    for (;;) {
        char field[256];
        int k;
        switch (item % 4) {
        case 0:
            k = snprintf(field, sizeof(field), ",\"customer\":\"%s-%04llu\"", words[rnd() % 12],
                         (unsigned long long)(rnd() % 10000));
            break;
        case 1:
            k = snprintf(field, sizeof(field), ",\"ts\":%llu",
                         (unsigned long long)(1764480000000ull + rnd() % 100000000));
            break;
        case 2:
            k = snprintf(field, sizeof(field),
                         ",\"item%d\":{\"sku\":\"SKU-%05llu\",\"qty\":%llu,\"price\":%llu.%02llu}",
                         item, (unsigned long long)(rnd() % 100000),
                         (unsigned long long)(1 + rnd() % 9), (unsigned long long)(rnd() % 500),
                         (unsigned long long)(rnd() % 100));
            break;
        default:
            k = snprintf(field, sizeof(field), ",\"status\":\"%s\",\"priority\":%llu",
                         words[rnd() % 12], (unsigned long long)(rnd() % 10));
            break;
        }
        /* keep room for ,"p":"" and } */
        if (n + (size_t)k + 8 > size)
            break;
        memcpy(buf + n, field, (size_t)k);
        n += (size_t)k;
        item++;
    }
    size_t fill = size - n - 8;
    memcpy(buf + n, ",\"p\":\"", 6);
    n += 6;
    for (size_t i = 0; i < fill; i++)
        buf[n++] = (char)('a' + rnd() % 26);
    buf[n++] = '"';
    buf[n++] = '}';
    memcpy(out, buf, size);
}

struct config {
    const char *kind; /* "json" or "random" */
    size_t payload;
    size_t seg;
};

struct pool {
    struct qn_frame *frames;
    uint8_t *payloads;
    char *txns;
    size_t raw_bytes; /* encoded size of all POOL frames */
};

static int make_pool(struct pool *p, const char *kind, size_t payload)
{
    struct qn_uuid7_gen gen;
    qn_uuid7_init_seed(&gen, 1);
    p->frames = calloc(POOL, sizeof(*p->frames));
    p->payloads = malloc((size_t)POOL * payload);
    p->txns = malloc((size_t)POOL * QN_UUID_STR_LEN);
    if (!p->frames || !p->payloads || !p->txns)
        return -1;
    p->raw_bytes = 0;
    uint64_t t = 1764480000000ull;
    for (size_t i = 0; i < POOL; i++) {
        struct qn_frame *f = &p->frames[i];
        uint8_t *pl = p->payloads + i * payload;
        if (strcmp(kind, "json") == 0) {
            json_payload((char *)pl, payload);
        } else {
            for (size_t k = 0; k < payload; k += 8) {
                uint64_t r = rnd();
                memcpy(pl + k, &r, payload - k < 8 ? payload - k : 8);
            }
        }
        qn_uuid7_next(&gen, t + i / 50, f->message_id);
        char *tx = p->txns + i * QN_UUID_STR_LEN;
        qn_uuid_format(f->message_id, tx);
        f->txn = (const uint8_t *)tx;
        f->txn_len = QN_UUID_STR_LEN - 1;
        f->payload = pl;
        f->payload_len = payload;
        size_t sz;
        if (qn_frame_encoded_size(f, &sz) != QN_OK)
            return -1;
        p->raw_bytes += sz;
    }
    return 0;
}

static void free_pool(struct pool *p)
{
    free(p->frames);
    free(p->payloads);
    free(p->txns);
}

static volatile uint64_t sink;

static int run(const struct config *c, double seconds)
{
    struct pool p;
    qn_zctx *z = NULL;
    if (make_pool(&p, c->kind, c->payload) != 0 || qn_zctx_new(&z) != QN_OK) {
        fprintf(stderr, "bench_codec: out of memory\n");
        return -1;
    }
    size_t nseg = POOL / c->seg;
    uint8_t *hashes = malloc(c->seg * QN_HASH_LEN);
    struct qn_buf *blobs = calloc(nseg, sizeof(*blobs));
    size_t raw_per_frame = p.raw_bytes / POOL;

    /* pack+compress */
    size_t frames = 0, zbytes = 0, rawbytes = 0;
    for (size_t s = 0; s < nseg; s++) /* untimed round, keeps the blobs */
        if (qn_segment_pack(z, p.frames + s * c->seg, c->seg, 0, &blobs[s], hashes) != QN_OK)
            return -1;
    double t0 = now_s(), t1;
    size_t s = 0;
    do {
        for (int k = 0; k < 16; k++) {
            struct qn_buf b;
            if (qn_segment_pack(z, p.frames + s * c->seg, c->seg, 0, &b, hashes) != QN_OK)
                return -1;
            frames += c->seg;
            zbytes += b.len;
            rawbytes += c->seg * raw_per_frame;
            qn_buf_free(&b);
            s = (s + 1) % nseg;
        }
        t1 = now_s();
    } while (t1 - t0 < seconds);
    double pack_fps = (double)frames / (t1 - t0);
    double pack_mbs = (double)rawbytes / (t1 - t0) / 1e6;
    double ratio = (double)rawbytes / (double)zbytes;

    /* decompress+walk */
    frames = 0;
    rawbytes = 0;
    uint64_t touch = 0;
    t0 = now_s();
    s = 0;
    do {
        for (int k = 0; k < 16; k++) {
            const uint8_t *raw;
            size_t raw_len;
            if (qn_segment_decompress(z, blobs[s].data, blobs[s].len, QN_SEGMENT_RAW_MAX_DEFAULT,
                                      &raw, &raw_len) != QN_OK)
                return -1;
            struct qn_frame_iter it;
            struct qn_frame f;
            qn_frame_iter_init(&it, raw, raw_len);
            int rc;
            while ((rc = qn_frame_iter_next(&it, &f, NULL)) == 1) {
                touch += f.payload_len + f.payload[0] + f.txn_len;
                frames++;
            }
            if (rc != 0)
                return -1;
            rawbytes += raw_len;
            s = (s + 1) % nseg;
        }
        t1 = now_s();
    } while (t1 - t0 < seconds);
    sink = touch;
    double walk_fps = (double)frames / (t1 - t0);
    double walk_mbs = (double)rawbytes / (t1 - t0) / 1e6;

    printf("%-6s %5zu B  seg %4zu | pack+compress %10.0f frames/s %8.1f MB/s | "
           "decompress+walk %10.0f frames/s %8.1f MB/s | ratio %5.2f\n",
           c->kind, c->payload, c->seg, pack_fps, pack_mbs, walk_fps, walk_mbs, ratio);
    fflush(stdout);

    for (size_t i = 0; i < nseg; i++)
        qn_buf_free(&blobs[i]);
    free(blobs);
    free(hashes);
    qn_zctx_free(z);
    free_pool(&p);
    return 0;
}

int main(int argc, char **argv)
{
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            char *end;
            seconds = strtod(argv[++i], &end);
            if (*end || seconds <= 0) {
                fprintf(stderr, "bench_codec: --seconds wants a positive number\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_codec [--seconds S]\n");
            return 2;
        }
    }
    static const char *kinds[] = {"json", "random"};
    static const size_t payloads[] = {64, 256, 4096};
    static const size_t segs[] = {100, 1000};
    printf("bench_codec: zstd level %d, one thread, MB/s of raw segment bytes, txn = 36-byte "
           "uuid text\n",
           QN_ZSTD_LEVEL_DEFAULT);
    for (size_t k = 0; k < 2; k++)
        for (size_t p = 0; p < 3; p++)
            for (size_t s = 0; s < 2; s++) {
                struct config c = {kinds[k], payloads[p], segs[s]};
                if (run(&c, seconds) != 0) {
                    fprintf(stderr, "bench_codec: failed\n");
                    return 1;
                }
            }
    return 0;
}
