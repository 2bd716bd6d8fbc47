/*
 * fuzz_codec.c - libFuzzer target for frame and segment decoding.
 *
 * Each input is read two ways:
 *   1. as decompressed segment bytes: walked by the iterator, counted,
 *      verified, sliced and randomly accessed;
 *   2. as a compressed blob: decompressed under a 1 MiB cap (owned and
 *      context-buffer variants), then walked as in 1.
 * Beyond "no crash, no sanitizer report", it checks properties:
 *   - every reader agrees on the frames and on where the first bad one is;
 *   - re-encoding a decoded frame gives back exactly its original bytes (the
 *     wire form is canonical);
 *   - decompression never returns more than the cap.
 * A property violation calls __builtin_trap(), which libFuzzer reports.
 *
 * Built only with clang and -DQN_FUZZ=ON (codec/fuzz/CMakeLists.txt); run by
 * scripts/fuzz.sh with a seed corpus from fuzz_codec_seed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "queen/frame.h"
#include "queen/segment.h"

#define CAP (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static uint8_t scratch[CAP + 64];

static void same_frame(const struct qn_frame *a, const struct qn_frame *b)
{
    CHECK(a->flags == b->flags);
    CHECK(memcmp(a->message_id, b->message_id, 16) == 0);
    CHECK(memcmp(a->trace_id, b->trace_id, 16) == 0);
    CHECK(a->txn == b->txn && a->txn_len == b->txn_len);
    CHECK(a->psub == b->psub && a->psub_len == b->psub_len);
    CHECK(a->payload == b->payload && a->payload_len == b->payload_len);
}

static void walk(const uint8_t *raw, size_t len)
{
    struct qn_frame_iter it;
    struct qn_frame f, g;
    struct qn_frame_error ierr = {0, 0}, cerr = {0, 0};
    qn_frame_iter_init(&it, raw, len);
    size_t n = 0;
    int rc;
    for (;;) {
        size_t pos = it.pos;
        rc = qn_frame_iter_next(&it, &f, &ierr);
        if (rc != 1)
            break;
        /* the single-frame decoder agrees */
        size_t used = 0, at = 0;
        CHECK(qn_frame_decode(raw + pos, len - pos, &g, &used, &at) == QN_OK);
        CHECK(used == it.pos - pos);
        same_frame(&f, &g);
        /* canonical: encoding the frame reproduces its bytes */
        size_t size = 0, w = 0;
        CHECK(qn_frame_encoded_size(&f, &size) == QN_OK && size == used);
        if (size <= sizeof(scratch)) {
            CHECK(qn_frame_encode(&f, scratch, sizeof(scratch), &w) == QN_OK && w == size);
            CHECK(memcmp(scratch, raw + pos, size) == 0);
        }
        /* random access finds the same frame (a few indices: it is O(index)) */
        if (n < 4 || n % 64 == 0) {
            struct qn_frame h;
            CHECK(qn_segment_frame_at(raw, len, 100, 100 + (int64_t)n, &h, NULL) == QN_OK);
            same_frame(&f, &h);
        }
        n++;
    }
    size_t count = 0;
    int crc = qn_segment_count(raw, len, &count, &cerr);
    if (rc == 0) {
        CHECK(crc == QN_OK && count == n);
        CHECK(qn_segment_verify(raw, len, n, NULL) == QN_OK);
        CHECK(qn_segment_verify(raw, len, n + 1, NULL) == QN_ESEGMENT_COUNT);
        struct qn_frame h;
        CHECK(qn_segment_frame_at(raw, len, 100, 100 + (int64_t)n, &h, NULL) == QN_ERANGE);
    } else {
        /* every reader reports the same first bad frame */
        CHECK(rc < 0 && crc == rc);
        CHECK(cerr.index == ierr.index && cerr.byte_offset == ierr.byte_offset);
        CHECK(ierr.index == n && ierr.byte_offset <= len);
        struct qn_frame_error serr = {0, 0};
        struct qn_frame_iter sp;
        CHECK(qn_frame_iter_span(&sp, raw, len, n + 1, 1, &serr) == rc);
        CHECK(serr.index == n && serr.byte_offset == ierr.byte_offset);
    }
    /* a span from the middle yields the same frames as the full walk */
    if (n > 1) {
        struct qn_frame_iter sp;
        CHECK(qn_frame_iter_span(&sp, raw, len, n / 2, 1, NULL) == QN_OK);
        CHECK(qn_frame_iter_next(&sp, &f, NULL) == 1);
        CHECK(qn_segment_frame_at(raw, len, 0, (int64_t)(n / 2), &g, NULL) == QN_OK);
        same_frame(&f, &g);
        CHECK(qn_frame_iter_next(&sp, &f, NULL) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static qn_zctx *z; /* one context for the whole run, as a worker thread keeps one */
    if (!z && qn_zctx_new(&z) != QN_OK)
        return 0;

    /* exact-size copy so ASan sees any read past the input */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    walk(copy, size);

    const uint8_t *raw;
    size_t raw_len = 0;
    int rc = qn_segment_decompress(z, copy, size, CAP, &raw, &raw_len);
    struct qn_buf out = {0};
    int rc2 = qn_segment_decompress_owned(z, copy, size, CAP, &out);
    CHECK(rc == rc2);
    if (rc == QN_OK) {
        CHECK(raw_len <= CAP && out.len == raw_len);
        CHECK(raw_len == 0 || memcmp(raw, out.data, raw_len) == 0);
        walk(out.data, out.len);
    } else {
        CHECK(rc == QN_ESEGMENT_CORRUPT || rc == QN_ESEGMENT_TOO_LARGE || rc == QN_ENOMEM);
    }
    qn_buf_free(&out);
    free(copy);
    return 0;
}
