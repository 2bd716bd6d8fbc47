/*
 * test_segment.c - codec/src/segment.c: packing (content size in the zstd header,
 * the hash blob, bounded allocations), decompression under a cap (declared and
 * produced bombs, frames without a declared size, corrupt blobs), and reading
 * frames back (iterator, spans, random access, counting) with exact error
 * positions.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "queen/error.h"
#include "queen/ids.h"
#include "queen/segment.h"

#include "codec_test.h"

/* ---- fixtures --------------------------------------------------------- */

/* n frames whose fields all live in one arena; frame i uses flags i % 8. */
struct frames {
    struct qn_frame *f;
    size_t n;
    uint8_t *arena;
};

static void frames_make(struct frames *fs, size_t n)
{
    fs->n = n;
    fs->f = calloc(n, sizeof(*fs->f));
    fs->arena = malloc(n * 160 + 1);
    ck_assert(fs->f && fs->arena);
    uint8_t *a = fs->arena;
    for (size_t i = 0; i < n; i++) {
        struct qn_frame *f = &fs->f[i];
        f->flags = (uint8_t)(i % 8);
        for (int k = 0; k < 16; k++) {
            f->message_id[k] = (uint8_t)(i >> (k % 8) ^ (size_t)k);
            f->trace_id[k] = (uint8_t)(0xa0 + k + i);
        }
        int len = snprintf((char *)a, 40, "txn-%zu", i);
        f->txn = a;
        f->txn_len = (size_t)len;
        a += len;
        if (f->flags & QN_FRAME_FLAG_PSUB) {
            len = snprintf((char *)a, 20, "user-%zu", i % 5);
            f->psub = a;
            f->psub_len = (size_t)len;
            a += len;
        }
        if (i % 13 != 5) { /* some empty payloads */
            len = snprintf((char *)a, 100, "{\"i\":%zu,\"price\":%zu.%02zu,\"tag\":\"t%zu\"}", i,
                           i * 37 % 1000, i % 100, i % 7);
            f->payload = a;
            f->payload_len = (size_t)len;
            a += len;
        }
    }
}

static void frames_free(struct frames *fs)
{
    free(fs->f);
    free(fs->arena);
}

static void assert_frame_eq(const struct qn_frame *a, const struct qn_frame *b)
{
    ck_assert_uint_eq(a->flags, b->flags);
    ck_assert_mem_eq(a->message_id, b->message_id, 16);
    if (a->flags & QN_FRAME_FLAG_TRACE)
        ck_assert_mem_eq(a->trace_id, b->trace_id, 16);
    ck_assert_uint_eq(a->txn_len, b->txn_len);
    if (a->txn_len)
        ck_assert_mem_eq(a->txn, b->txn, a->txn_len);
    if (a->flags & QN_FRAME_FLAG_PSUB) {
        ck_assert_uint_eq(a->psub_len, b->psub_len);
        if (a->psub_len)
            ck_assert_mem_eq(a->psub, b->psub, a->psub_len);
    }
    ck_assert_uint_eq(a->payload_len, b->payload_len);
    if (a->payload_len)
        ck_assert_mem_eq(a->payload, b->payload, a->payload_len);
}

/* Raw (uncompressed) segment of fs, encoded frame by frame with frame.h. */
static uint8_t *raw_of(const struct frames *fs, size_t *len, size_t *starts)
{
    size_t total = 0;
    for (size_t i = 0; i < fs->n; i++) {
        size_t sz;
        ck_assert_int_eq(qn_frame_encoded_size(&fs->f[i], &sz), QN_OK);
        total += sz;
    }
    uint8_t *raw = malloc(total ? total : 1);
    size_t pos = 0;
    for (size_t i = 0; i < fs->n; i++) {
        size_t w;
        if (starts)
            starts[i] = pos;
        ck_assert_int_eq(qn_frame_encode(&fs->f[i], raw + pos, total - pos, &w), QN_OK);
        pos += w;
    }
    *len = total;
    return raw;
}

/* Compresses src as one zstd frame WITHOUT a declared content size. */
static uint8_t *compress_unsized(const uint8_t *src, size_t len, size_t *out_len)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    size_t cap = ZSTD_compressBound(len) + 64;
    uint8_t *out = malloc(cap);
    ZSTD_outBuffer o = {out, cap, 0};
    size_t half = len / 2;
    ZSTD_inBuffer i1 = {src, half, 0};
    ck_assert(!ZSTD_isError(ZSTD_compressStream2(c, &o, &i1, ZSTD_e_continue)));
    ZSTD_inBuffer i2 = {src + half, len - half, 0};
    size_t r;
    do {
        r = ZSTD_compressStream2(c, &o, &i2, ZSTD_e_end);
        ck_assert(!ZSTD_isError(r));
    } while (r != 0);
    ZSTD_freeCCtx(c);
    ck_assert_uint_eq(ZSTD_getFrameContentSize(out, o.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    *out_len = o.pos;
    return out;
}

static qn_zctx *zctx(void)
{
    qn_zctx *z = NULL;
    ck_assert_int_eq(qn_zctx_new(&z), QN_OK);
    ck_assert_ptr_nonnull(z);
    return z;
}

/* Packs, checks the header's content size and the hashes, decompresses, and
 * walks every frame against the originals. */
static void round_trip(size_t n, int level)
{
    struct frames fs;
    frames_make(&fs, n);
    qn_zctx *z = zctx();
    struct qn_buf blob = {0};
    uint8_t *hashes = malloc(n * QN_HASH_LEN);
    ck_assert_int_eq(qn_segment_pack(z, fs.f, n, level, &blob, hashes), QN_OK);

    size_t want_len;
    uint8_t *want = raw_of(&fs, &want_len, NULL);
    ck_assert_uint_eq(ZSTD_getFrameContentSize(blob.data, blob.len), want_len);
    ck_assert_uint_eq(ZSTD_findFrameCompressedSize(blob.data, blob.len), blob.len);

    const uint8_t *raw;
    size_t raw_len;
    ck_assert_int_eq(qn_segment_decompress(z, blob.data, blob.len, want_len, &raw, &raw_len),
                     QN_OK);
    ck_assert_uint_eq(raw_len, want_len);
    ck_assert_mem_eq(raw, want, want_len);

    struct qn_frame_iter it;
    qn_frame_iter_init(&it, raw, raw_len);
    struct qn_frame f;
    struct qn_frame_error err;
    size_t i = 0;
    int rc;
    while ((rc = qn_frame_iter_next(&it, &f, &err)) == 1) {
        ck_assert_uint_lt(i, n);
        assert_frame_eq(&fs.f[i], &f);
        ck_assert(f.txn >= raw && f.txn + f.txn_len <= raw + raw_len); /* borrowed */
        uint8_t h[QN_HASH_LEN];
        qn_txn_hash(fs.f[i].txn, fs.f[i].txn_len, h);
        ck_assert_mem_eq(hashes + i * QN_HASH_LEN, h, QN_HASH_LEN);
        i++;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(i, n);
    size_t count = 0;
    ck_assert_int_eq(qn_segment_count(raw, raw_len, &count, NULL), QN_OK);
    ck_assert_uint_eq(count, n);
    ck_assert_int_eq(qn_segment_verify(raw, raw_len, n, NULL), QN_OK);

    free(want);
    free(hashes);
    qn_buf_free(&blob);
    qn_zctx_free(z);
    frames_free(&fs);
}

/* ---- packing ---------------------------------------------------------- */

START_TEST(pack_round_trip_small)
{
    round_trip(1, 0);
    round_trip(2, 3);
    round_trip(8, 0); /* every flag combination once */
    round_trip(1000, 0);
}
END_TEST

START_TEST(pack_round_trip_levels)
{
    round_trip(64, 1);
    round_trip(64, 9);
    round_trip(64, 19);
}
END_TEST

START_TEST(pack_round_trip_100000_frames)
{
    round_trip(100000, 0);
}
END_TEST

START_TEST(pack_refusals_write_nothing)
{
    struct frames fs;
    frames_make(&fs, 20);
    qn_zctx *z = zctx();
    struct qn_buf blob = {(uint8_t *)"sentinel", 8};
    uint8_t hashes[20 * 16];
    memset(hashes, 0x5a, sizeof(hashes));

    ck_assert_int_eq(qn_segment_pack(z, fs.f, 0, 0, &blob, hashes), QN_EINVAL);
    ck_assert_int_eq(qn_segment_pack(z, fs.f, 20, -1, &blob, hashes), QN_EINVAL);
    ck_assert_int_eq(qn_segment_pack(z, fs.f, 20, 20, &blob, hashes), QN_EINVAL);
    ck_assert_int_eq(qn_segment_pack(NULL, fs.f, 20, 0, &blob, hashes), QN_EINVAL);
    ck_assert_int_eq(qn_segment_pack(z, NULL, 20, 0, &blob, hashes), QN_EINVAL);

    fs.f[5].flags = 0x10;
    ck_assert_int_eq(qn_segment_pack(z, fs.f, 20, 0, &blob, hashes), QN_EFRAME_FLAGS);
    fs.f[5].flags = 0;
    fs.f[7].txn_len = 70000;
    ck_assert_int_eq(qn_segment_pack(z, fs.f, 20, 0, &blob, hashes), QN_EFRAME_FIELD_TOO_LONG);
    fs.f[7].txn_len = 3;

    /* pack limit */
    ck_assert_int_eq(qn_zctx_set_pack_max(z, 0), QN_EINVAL);
    ck_assert_int_eq(qn_zctx_set_pack_max(z, 100), QN_OK);
    ck_assert_int_eq(qn_segment_pack(z, fs.f, 20, 0, &blob, hashes), QN_ELIMIT);
    ck_assert_int_eq(qn_segment_pack(z, fs.f, 1, 0, &blob, hashes), QN_OK); /* one fits */
    ck_assert_uint_ne(hashes[0], 0x5a);
    ck_assert_uint_eq(hashes[16], 0x5a);
    qn_buf_free(&blob);
    ck_assert_ptr_null(blob.data);
    ck_assert_uint_eq(blob.len, 0);

    blob.data = (uint8_t *)"sentinel";
    blob.len = 8;
    memset(hashes, 0x5a, sizeof(hashes));
    ck_assert_int_eq(qn_segment_pack(z, fs.f, 20, 0, &blob, hashes), QN_ELIMIT);
    ck_assert_str_eq((char *)blob.data, "sentinel");
    for (size_t i = 0; i < sizeof(hashes); i++)
        ck_assert_uint_eq(hashes[i], 0x5a);

    qn_buf_free(NULL);
    qn_zctx_free(NULL);
    qn_zctx_free(z);
    frames_free(&fs);
}
END_TEST

START_TEST(pack_borrow_equals_pack)
{
    struct frames fs;
    frames_make(&fs, 300);
    qn_zctx *z = zctx();
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(z, fs.f, fs.n, 0, &blob, NULL), QN_OK);
    const uint8_t *b = NULL;
    size_t blen = 0;
    uint8_t h[300 * 16];
    ck_assert_int_eq(qn_segment_pack_borrow(z, fs.f, fs.n, 0, &b, &blen, h), QN_OK);
    ck_assert_uint_eq(blen, blob.len);
    ck_assert_mem_eq(b, blob.data, blen);
    qn_buf_free(&blob);
    qn_zctx_free(z);
    frames_free(&fs);
}
END_TEST

/* Codec-side allocations while packing 10,000 frames: a constant, not N. No
 * ck_assert inside a counting window: check itself allocates on each one. */
START_TEST(pack_allocations_bounded)
{
    struct frames big, small;
    frames_make(&big, 10000);
    frames_make(&small, 10);
    uint8_t *hashes = malloc(10000 * QN_HASH_LEN);
    struct qn_buf blob = {0};
    struct qn_alloc_stats s;
    int rc;

    /* fresh context: pack scratch + compress scratch + the blob */
    qn_zctx *z = zctx();
    qn_test_alloc_start();
    rc = qn_segment_pack(z, big.f, big.n, 0, &blob, hashes);
    s = qn_test_alloc_stop();
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_uint_le(s.calls, 3);
    qn_buf_free(&blob);

    /* warm context, same or smaller segments: only the blob */
    for (int round = 0; round < 3; round++) {
        qn_test_alloc_start();
        rc = qn_segment_pack(z, big.f, big.n, 0, &blob, hashes);
        s = qn_test_alloc_stop();
        ck_assert_int_eq(rc, QN_OK);
        ck_assert_uint_eq(s.calls, 1);
        qn_buf_free(&blob);
    }
    qn_test_alloc_start();
    rc = qn_segment_pack(z, small.f, small.n, 0, &blob, hashes);
    s = qn_test_alloc_stop();
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_uint_eq(s.calls, 1);
    qn_buf_free(&blob);

    /* borrowed output on a warm context: nothing at all */
    const uint8_t *b;
    size_t blen;
    qn_test_alloc_start();
    rc = qn_segment_pack_borrow(z, big.f, big.n, 0, &b, &blen, hashes);
    s = qn_test_alloc_stop();
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_uint_eq(s.calls, 0);

    /* the same bound holds for 10 frames on a fresh context */
    qn_zctx_free(z);
    z = zctx();
    qn_test_alloc_start();
    rc = qn_segment_pack(z, small.f, small.n, 0, &blob, hashes);
    s = qn_test_alloc_stop();
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_uint_le(s.calls, 3);
    qn_buf_free(&blob);

    /* decompressing into the context reuses its buffer too */
    ck_assert_int_eq(qn_segment_pack(z, big.f, big.n, 0, &blob, NULL), QN_OK);
    const uint8_t *raw;
    size_t raw_len;
    ck_assert_int_eq(qn_segment_decompress(z, blob.data, blob.len, 1u << 26, &raw, &raw_len),
                     QN_OK);
    int bad = 0;
    qn_test_alloc_start();
    for (int round = 0; round < 5; round++)
        bad |= qn_segment_decompress(z, blob.data, blob.len, 1u << 26, &raw, &raw_len);
    s = qn_test_alloc_stop();
    ck_assert_int_eq(bad, 0);
    ck_assert_uint_eq(s.calls, 0);

    qn_buf_free(&blob);
    qn_zctx_free(z);
    free(hashes);
    frames_free(&big);
    frames_free(&small);
}
END_TEST

/* ---- decompression ---------------------------------------------------- */

static void expect_decompress(qn_zctx *z, const uint8_t *blob, size_t len, size_t cap, int code)
{
    /* exact-size heap copy: ASan sees any read past the blob */
    uint8_t *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, blob, len);
    const uint8_t *raw = (const uint8_t *)"x";
    size_t raw_len = 4242;
    ck_assert_int_eq(qn_segment_decompress(z, copy, len, cap, &raw, &raw_len), code);
    if (code != QN_OK) {
        ck_assert_uint_eq(raw_len, 4242);
        struct qn_buf out = {(uint8_t *)"y", 77};
        ck_assert_int_eq(qn_segment_decompress_owned(z, copy, len, cap, &out), code);
        ck_assert_uint_eq(out.len, 77);
    }
    free(copy);
}

START_TEST(decompress_rejects_corrupt_blobs)
{
    struct frames fs;
    frames_make(&fs, 40);
    qn_zctx *z = zctx();
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(z, fs.f, fs.n, 0, &blob, NULL), QN_OK);
    const size_t cap = 1u << 20;

    expect_decompress(z, blob.data, 0, cap, QN_ESEGMENT_CORRUPT);
    expect_decompress(z, (const uint8_t *)"\x28\xb5\x2f", 3, cap, QN_ESEGMENT_CORRUPT);
    expect_decompress(z, (const uint8_t *)"not zstd at all", 15, cap, QN_ESEGMENT_CORRUPT);
    /* every strict prefix of a valid blob */
    for (size_t n = 0; n < blob.len; n++)
        expect_decompress(z, blob.data, n, cap, QN_ESEGMENT_CORRUPT);
    /* bytes after the frame (including a second frame) */
    uint8_t *two = malloc(blob.len * 2);
    memcpy(two, blob.data, blob.len);
    memcpy(two + blob.len, blob.data, blob.len);
    expect_decompress(z, two, blob.len + 1, cap, QN_ESEGMENT_CORRUPT);
    expect_decompress(z, two, blob.len * 2, cap, QN_ESEGMENT_CORRUPT);
    /* a skippable frame is not a segment */
    static const uint8_t skippable[] = {0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 'h', 'i'};
    expect_decompress(z, skippable, sizeof(skippable), cap, QN_ESEGMENT_CORRUPT);
    /* a valid header followed by garbage blocks */
    uint8_t *bad = malloc(blob.len);
    memcpy(bad, blob.data, blob.len);
    for (size_t i = 6; i < blob.len; i++)
        bad[i] = 0xff;
    expect_decompress(z, bad, blob.len, cap, QN_ESEGMENT_CORRUPT);
    /* argument checks */
    const uint8_t *raw;
    size_t raw_len;
    ck_assert_int_eq(qn_segment_decompress(z, blob.data, blob.len, 0, &raw, &raw_len), QN_EINVAL);
    ck_assert_int_eq(qn_segment_decompress(NULL, blob.data, blob.len, cap, &raw, &raw_len),
                     QN_EINVAL);
    /* and the context still works afterwards */
    expect_decompress(z, blob.data, blob.len, cap, QN_OK);

    free(bad);
    free(two);
    qn_buf_free(&blob);
    qn_zctx_free(z);
    frames_free(&fs);
}
END_TEST

START_TEST(decompress_cap_is_exact)
{
    struct frames fs;
    frames_make(&fs, 500);
    qn_zctx *z = zctx();
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(z, fs.f, fs.n, 0, &blob, NULL), QN_OK);
    size_t raw_size = (size_t)ZSTD_getFrameContentSize(blob.data, blob.len);

    expect_decompress(z, blob.data, blob.len, raw_size, QN_OK);
    qn_zctx *fresh = zctx();
    const uint8_t *raw;
    size_t raw_len;
    struct qn_buf refused = {0};
    qn_test_alloc_start();
    int rc1 = qn_segment_decompress(fresh, blob.data, blob.len, raw_size - 1, &raw, &raw_len);
    int rc2 = qn_segment_decompress_owned(fresh, blob.data, blob.len, raw_size - 1, &refused);
    struct qn_alloc_stats s = qn_test_alloc_stop();
    ck_assert_int_eq(rc1, QN_ESEGMENT_TOO_LARGE);
    ck_assert_int_eq(rc2, QN_ESEGMENT_TOO_LARGE);
    ck_assert_uint_eq(s.calls, 0);

    struct qn_buf out = {0};
    ck_assert_int_eq(qn_segment_decompress_owned(z, blob.data, blob.len, raw_size, &out), QN_OK);
    ck_assert_uint_eq(out.len, raw_size);
    size_t count = 0;
    ck_assert_int_eq(qn_segment_count(out.data, out.len, &count, NULL), QN_OK);
    ck_assert_uint_eq(count, 500);
    qn_buf_free(&out);

    qn_buf_free(&blob);
    qn_zctx_free(fresh);
    qn_zctx_free(z);
    frames_free(&fs);
}
END_TEST

/* A 15-byte blob whose header claims 1 TiB: refused before any allocation. */
START_TEST(declared_bomb_refused_without_allocating)
{
    uint8_t bomb[4 + 1 + 8 + 3];
    size_t p = 0;
    bomb[p++] = 0x28; /* magic 0xFD2FB528, little-endian */
    bomb[p++] = 0xb5;
    bomb[p++] = 0x2f;
    bomb[p++] = 0xfd;
    bomb[p++] = 0xe0; /* 8-byte content size, single segment, no checksum */
    uint64_t claim = UINT64_C(1) << 40;
    for (int i = 0; i < 8; i++)
        bomb[p++] = (uint8_t)(claim >> (8 * i));
    bomb[p++] = 0x01; /* last block, raw, size 0 */
    bomb[p++] = 0x00;
    bomb[p++] = 0x00;
    ck_assert_uint_eq(ZSTD_getFrameContentSize(bomb, p), claim);

    qn_zctx *z = zctx();
    const uint8_t *raw;
    size_t raw_len;
    struct qn_buf out = {0};
    qn_test_alloc_start();
    int rc1 = qn_segment_decompress(z, bomb, p, QN_SEGMENT_RAW_MAX_DEFAULT, &raw, &raw_len);
    int rc2 = qn_segment_decompress_owned(z, bomb, p, QN_SEGMENT_RAW_MAX_DEFAULT, &out);
    struct qn_alloc_stats s = qn_test_alloc_stop();
    ck_assert_int_eq(rc1, QN_ESEGMENT_TOO_LARGE);
    ck_assert_int_eq(rc2, QN_ESEGMENT_TOO_LARGE);
    ck_assert_uint_eq(s.calls, 0);
    /* a lying header under the cap: what it claims is allocated (the cap is the
     * bound), and the lie is corruption */
    bomb[5] = 0x00;
    bomb[6] = 0x10; /* claims 4096 bytes, holds none */
    for (int i = 7; i < 13; i++)
        bomb[i] = 0;
    ck_assert_uint_eq(ZSTD_getFrameContentSize(bomb, p), 4096);
    ck_assert_int_eq(qn_segment_decompress(z, bomb, p, 1u << 20, &raw, &raw_len),
                     QN_ESEGMENT_CORRUPT);
    qn_zctx_free(z);
}
END_TEST

/* The declared size is read from the header alone: what a pack wrote, what a
 * bomb claims (without allocating), no size for an unsized frame, corruption
 * for anything that is not a zstd frame. */
START_TEST(raw_size_reads_the_header)
{
    struct frames fs;
    frames_make(&fs, 40);
    qn_zctx *z = zctx();
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(z, fs.f, fs.n, 0, &blob, NULL), QN_OK);
    struct qn_buf out = {0};
    ck_assert_int_eq(qn_segment_decompress_owned(z, blob.data, blob.len, 1u << 20, &out), QN_OK);
    uint64_t size = 7;
    qn_test_alloc_start();
    int rc = qn_segment_raw_size(blob.data, blob.len, &size);
    struct qn_alloc_stats s = qn_test_alloc_stop();
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_uint_eq(size, out.len);
    ck_assert_uint_eq(s.calls, 0);
    /* a header claiming 1 TiB is read as such (the reader decides) */
    uint8_t bomb[] = {0x28, 0xb5, 0x2f, 0xfd, 0xe0, 0, 0, 0, 0, 0, 1, 0, 0, 0x01, 0, 0};
    ck_assert_int_eq(qn_segment_raw_size(bomb, sizeof bomb, &size), QN_OK);
    ck_assert_uint_eq(size, UINT64_C(1) << 40);
    /* a frame without a declared size */
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0)));
    uint8_t unsized[256];
    ZSTD_outBuffer o = {unsized, sizeof unsized, 0};
    ZSTD_inBuffer in = {"hello", 5, 0};
    ck_assert(!ZSTD_isError(ZSTD_compressStream2(c, &o, &in, ZSTD_e_end)));
    ZSTD_freeCCtx(c);
    size = 7;
    ck_assert_int_eq(qn_segment_raw_size(unsized, o.pos, &size), QN_ENOTFOUND);
    ck_assert_uint_eq(size, 7);
    /* not zstd, too short, a skippable frame */
    ck_assert_int_eq(qn_segment_raw_size((const uint8_t *)"not zstd", 8, &size),
                     QN_ESEGMENT_CORRUPT);
    ck_assert_int_eq(qn_segment_raw_size(blob.data, 3, &size), QN_ESEGMENT_CORRUPT);
    static const uint8_t skippable[] = {0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 'h', 'i'};
    ck_assert_int_eq(qn_segment_raw_size(skippable, sizeof skippable, &size), QN_ESEGMENT_CORRUPT);
    ck_assert_int_eq(qn_segment_raw_size(NULL, 4, &size), QN_EINVAL);
    ck_assert_int_eq(qn_segment_raw_size(blob.data, blob.len, NULL), QN_EINVAL);
    ck_assert_uint_eq(size, 7);
    qn_buf_free(&out);
    qn_buf_free(&blob);
    qn_zctx_free(z);
    frames_free(&fs);
}
END_TEST

/* 32 MiB of zeros streamed without a declared size (a small blob): refused at
 * the cap, and no buffer of ours ever exceeds the cap. */
START_TEST(produced_bomb_refused_at_cap)
{
    const size_t total = 32u << 20;
    static uint8_t zeros[1 << 20];
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 1)));
    size_t cap = 1 << 20;
    uint8_t *blob = malloc(cap);
    ZSTD_outBuffer o = {blob, cap, 0};
    for (size_t done = 0; done < total; done += sizeof(zeros)) {
        ZSTD_inBuffer in = {zeros, sizeof(zeros), 0};
        while (in.pos < in.size)
            ck_assert(!ZSTD_isError(ZSTD_compressStream2(c, &o, &in, ZSTD_e_continue)));
    }
    ZSTD_inBuffer none = {NULL, 0, 0};
    size_t r;
    do {
        r = ZSTD_compressStream2(c, &o, &none, ZSTD_e_end);
        ck_assert(!ZSTD_isError(r));
    } while (r);
    ZSTD_freeCCtx(c);
    ck_assert_uint_eq(ZSTD_getFrameContentSize(blob, o.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    ck_assert_uint_lt(o.pos, 64 * 1024);

    qn_zctx *z = zctx();
    static const size_t caps[] = {1u << 20, 8u << 20, (32u << 20) - 1};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        const uint8_t *raw;
        size_t raw_len;
        struct qn_buf out = {0};
        qn_test_alloc_start();
        int rc1 = qn_segment_decompress(z, blob, o.pos, caps[i], &raw, &raw_len);
        int rc2 = qn_segment_decompress_owned(z, blob, o.pos, caps[i], &out);
        struct qn_alloc_stats s = qn_test_alloc_stop();
        ck_assert_int_eq(rc1, QN_ESEGMENT_TOO_LARGE);
        ck_assert_int_eq(rc2, QN_ESEGMENT_TOO_LARGE);
        ck_assert_uint_le(s.largest, caps[i]);
    }
    /* at exactly its size it is fine */
    const uint8_t *raw;
    size_t raw_len;
    ck_assert_int_eq(qn_segment_decompress(z, blob, o.pos, total, &raw, &raw_len), QN_OK);
    ck_assert_uint_eq(raw_len, total);
    free(blob);
    qn_zctx_free(z);
}
END_TEST

/* Frames from other encoders may omit the content size: the stepped path. */
START_TEST(unsized_frames_decode)
{
    static const size_t sizes[] = {3, 40, 2000};
    for (size_t k = 0; k < 3; k++) {
        struct frames fs;
        frames_make(&fs, sizes[k]);
        size_t raw_size;
        uint8_t *want = raw_of(&fs, &raw_size, NULL);
        size_t blen;
        uint8_t *blob = compress_unsized(want, raw_size, &blen);
        qn_zctx *z = zctx();

        const uint8_t *raw;
        size_t raw_len;
        ck_assert_int_eq(qn_segment_decompress(z, blob, blen, 1u << 26, &raw, &raw_len), QN_OK);
        ck_assert_uint_eq(raw_len, raw_size);
        ck_assert_mem_eq(raw, want, raw_size);
        /* exactly at the cap, and one below */
        expect_decompress(z, blob, blen, raw_size, QN_OK);
        expect_decompress(z, blob, blen, raw_size - 1, QN_ESEGMENT_TOO_LARGE);
        struct qn_buf out = {0};
        ck_assert_int_eq(qn_segment_decompress_owned(z, blob, blen, raw_size, &out), QN_OK);
        ck_assert_uint_eq(out.len, raw_size);
        ck_assert_mem_eq(out.data, want, raw_size);
        qn_buf_free(&out);
        /* truncated and trailing bytes */
        for (size_t n = 0; n < blen; n += (blen / 50) + 1)
            expect_decompress(z, blob, n, 1u << 26, QN_ESEGMENT_CORRUPT);
        expect_decompress(z, blob, blen - 1, 1u << 26, QN_ESEGMENT_CORRUPT);
        uint8_t *longer = malloc(blen + 1);
        memcpy(longer, blob, blen);
        longer[blen] = 0;
        expect_decompress(z, longer, blen + 1, 1u << 26, QN_ESEGMENT_CORRUPT);

        free(longer);
        free(blob);
        free(want);
        qn_zctx_free(z);
        frames_free(&fs);
    }
}
END_TEST

START_TEST(empty_content_is_zero_frames)
{
    size_t zb = ZSTD_compressBound(0);
    uint8_t *blob = malloc(zb);
    size_t blen = ZSTD_compress(blob, zb, "", 0, 3);
    ck_assert(!ZSTD_isError(blen));
    qn_zctx *z = zctx();
    const uint8_t *raw = NULL;
    size_t raw_len = 9;
    ck_assert_int_eq(qn_segment_decompress(z, blob, blen, 100, &raw, &raw_len), QN_OK);
    ck_assert_uint_eq(raw_len, 0);
    ck_assert_ptr_nonnull(raw);
    size_t count = 9;
    ck_assert_int_eq(qn_segment_count(raw, raw_len, &count, NULL), QN_OK);
    ck_assert_uint_eq(count, 0);
    struct qn_frame_error err;
    ck_assert_int_eq(qn_segment_verify(raw, raw_len, 1, &err), QN_ESEGMENT_COUNT);
    ck_assert_uint_eq(err.index, 0);
    ck_assert_uint_eq(err.byte_offset, 0);
    struct qn_buf out = {(uint8_t *)"x", 5};
    ck_assert_int_eq(qn_segment_decompress_owned(z, blob, blen, 100, &out), QN_OK);
    ck_assert_uint_eq(out.len, 0);
    ck_assert_ptr_null(out.data);
    free(blob);
    qn_zctx_free(z);
}
END_TEST

/* ---- reading ---------------------------------------------------------- */

START_TEST(spans)
{
    const size_t n = 50;
    struct frames fs;
    frames_make(&fs, n);
    size_t len, starts[50];
    uint8_t *raw = raw_of(&fs, &len, starts);
    static const size_t takes[] = {0, 1, 5, 49, 50, SIZE_MAX};
    for (size_t start = 0; start <= n; start++) {
        for (size_t t = 0; t < sizeof(takes) / sizeof(takes[0]); t++) {
            size_t take = takes[t];
            struct qn_frame_iter it;
            struct qn_frame_error err = {0, 0};
            ck_assert_int_eq(qn_frame_iter_span(&it, raw, len, start, take, &err), QN_OK);
            ck_assert_uint_eq(it.pos, start < n ? starts[start] : len);
            size_t got = 0;
            struct qn_frame f;
            int rc;
            while ((rc = qn_frame_iter_next(&it, &f, &err)) == 1) {
                assert_frame_eq(&fs.f[start + got], &f);
                got++;
            }
            size_t avail = n - start;
            if (take == SIZE_MAX || take <= avail) {
                ck_assert_int_eq(rc, 0);
                ck_assert_uint_eq(got, take == SIZE_MAX ? avail : take);
            } else {
                /* the span runs past the segment: a count mismatch, at the end */
                ck_assert_int_eq(rc, QN_ESEGMENT_COUNT);
                ck_assert_uint_eq(got, avail);
                ck_assert_uint_eq(err.index, n);
                ck_assert_uint_eq(err.byte_offset, len);
            }
        }
    }
    struct qn_frame_iter it = {0};
    ck_assert_int_eq(qn_frame_iter_span(&it, raw, len, n + 1, 1, NULL), QN_ERANGE);
    ck_assert_ptr_null(it.raw); /* untouched */
    /* start + take overflowing means "to the end" */
    ck_assert_int_eq(qn_frame_iter_span(&it, raw, len, 10, SIZE_MAX - 3, NULL), QN_OK);
    ck_assert_uint_eq(it.end_index, SIZE_MAX);
    free(raw);
    frames_free(&fs);
}
END_TEST

START_TEST(random_access)
{
    const size_t n = 64;
    struct frames fs;
    frames_make(&fs, n);
    size_t len;
    uint8_t *raw = raw_of(&fs, &len, NULL);
    const int64_t base = 1000;
    struct qn_frame f;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(qn_segment_frame_at(raw, len, base, base + (int64_t)i, &f, NULL), QN_OK);
        assert_frame_eq(&fs.f[i], &f);
    }
    ck_assert_int_eq(qn_segment_frame_at(raw, len, base, base - 1, &f, NULL), QN_ERANGE);
    ck_assert_int_eq(qn_segment_frame_at(raw, len, base, base + (int64_t)n, &f, NULL), QN_ERANGE);
    ck_assert_int_eq(qn_segment_frame_at(raw, len, INT64_MIN, INT64_MAX, &f, NULL), QN_ERANGE);
    ck_assert_int_eq(qn_segment_frame_at(raw, len, INT64_MAX, INT64_MIN, &f, NULL), QN_ERANGE);
    ck_assert_int_eq(qn_segment_frame_at(raw, len, -5, -5, &f, NULL), QN_OK);
    assert_frame_eq(&fs.f[0], &f);
    ck_assert_int_eq(qn_segment_frame_at(raw, len, 0, 0, &f, NULL), QN_OK);
    ck_assert_int_eq(qn_segment_frame_at(raw, 0, 0, 0, &f, NULL), QN_ERANGE);
    free(raw);
    frames_free(&fs);
}
END_TEST

/* A bad frame in the middle is reported with its index and byte offset by
 * every reader, and the frames before it are still delivered. */
START_TEST(malformed_segment_positions)
{
    const size_t n = 6;
    struct frames fs;
    frames_make(&fs, n);
    size_t len, starts[6];
    uint8_t *raw = raw_of(&fs, &len, starts);
    raw[starts[3] + 4] |= 0x40; /* frame 3: unknown flag bit */

    size_t count = 77;
    struct qn_frame_error err = {0, 0};
    ck_assert_int_eq(qn_segment_count(raw, len, &count, &err), QN_EFRAME_FLAGS);
    ck_assert_uint_eq(count, 77);
    ck_assert_uint_eq(err.index, 3);
    ck_assert_uint_eq(err.byte_offset, starts[3] + 4);

    struct qn_frame_iter it;
    qn_frame_iter_init(&it, raw, len);
    struct qn_frame f;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(qn_frame_iter_next(&it, &f, &err), 1);
    for (int again = 0; again < 2; again++) {
        memset(&err, 0, sizeof(err));
        ck_assert_int_eq(qn_frame_iter_next(&it, &f, &err), QN_EFRAME_FLAGS);
        ck_assert_uint_eq(err.index, 3);
        ck_assert_uint_eq(err.byte_offset, starts[3] + 4);
    }
    ck_assert_int_eq(qn_frame_iter_next(&it, &f, NULL), QN_EFRAME_FLAGS);

    memset(&err, 0, sizeof(err));
    ck_assert_int_eq(qn_frame_iter_span(&it, raw, len, 5, 1, &err), QN_EFRAME_FLAGS);
    ck_assert_uint_eq(err.index, 3);
    ck_assert_int_eq(qn_frame_iter_span(&it, raw, len, 3, 1, &err), QN_OK);
    ck_assert_int_eq(qn_frame_iter_next(&it, &f, &err), QN_EFRAME_FLAGS);
    ck_assert_int_eq(qn_segment_frame_at(raw, len, 10, 12, &f, &err), QN_OK);
    memset(&err, 0, sizeof(err));
    ck_assert_int_eq(qn_segment_frame_at(raw, len, 10, 13, &f, &err), QN_EFRAME_FLAGS);
    ck_assert_uint_eq(err.index, 3);
    ck_assert_uint_eq(err.byte_offset, starts[3] + 4);
    ck_assert_int_eq(qn_segment_frame_at(raw, len, 10, 14, &f, &err), QN_EFRAME_FLAGS);
    ck_assert_uint_eq(err.index, 3);
    raw[starts[3] + 4] &= (uint8_t)~0x40;

    /* the last frame cut short: its body_len runs past the buffer */
    ck_assert_int_eq(qn_segment_count(raw, len - 1, &count, &err), QN_EFRAME_BODY_OVERRUN);
    ck_assert_uint_eq(err.index, n - 1);
    ck_assert_uint_eq(err.byte_offset, starts[n - 1]);
    /* two stray bytes after the last frame: a truncated length prefix */
    uint8_t *more = malloc(len + 2);
    memcpy(more, raw, len);
    more[len] = 1;
    more[len + 1] = 2;
    ck_assert_int_eq(qn_segment_count(more, len + 2, &count, &err), QN_EFRAME_TRUNCATED);
    ck_assert_uint_eq(err.index, n);
    ck_assert_uint_eq(err.byte_offset, len);
    /* an inner length overrun in frame 2 */
    size_t txn_at = starts[2] + 4 + 1 + 16 + ((fs.f[2].flags & QN_FRAME_FLAG_TRACE) ? 16 : 0);
    raw[txn_at] = 0xff;
    raw[txn_at + 1] = 0xff;
    ck_assert_int_eq(qn_segment_count(raw, len, &count, &err), QN_EFRAME_INNER_OVERRUN);
    ck_assert_uint_eq(err.index, 2);
    ck_assert_uint_eq(err.byte_offset, txn_at);
    free(more);
    free(raw);
    frames_free(&fs);
}
END_TEST

START_TEST(verify_counts)
{
    const size_t n = 9;
    struct frames fs;
    frames_make(&fs, n);
    size_t len, starts[9];
    uint8_t *raw = raw_of(&fs, &len, starts);
    struct qn_frame_error err;
    ck_assert_int_eq(qn_segment_verify(raw, len, n, &err), QN_OK);
    ck_assert_int_eq(qn_segment_verify(raw, len, n + 1, &err), QN_ESEGMENT_COUNT);
    ck_assert_uint_eq(err.index, n);
    ck_assert_uint_eq(err.byte_offset, len);
    ck_assert_int_eq(qn_segment_verify(raw, len, n - 2, &err), QN_ESEGMENT_COUNT);
    ck_assert_uint_eq(err.index, n - 2);
    ck_assert_uint_eq(err.byte_offset, starts[n - 2]);
    ck_assert_int_eq(qn_segment_verify(raw, len, 0, NULL), QN_ESEGMENT_COUNT);
    ck_assert_int_eq(qn_segment_verify(raw, 0, 0, NULL), QN_OK);
    free(raw);
    frames_free(&fs);
}
END_TEST

Suite *qn_test_segment_suite(void)
{
    Suite *s = suite_create("segment");
    TCase *tc = tcase_create("pack");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, pack_round_trip_small);
    tcase_add_test(tc, pack_round_trip_levels);
    tcase_add_test(tc, pack_round_trip_100000_frames);
    tcase_add_test(tc, pack_refusals_write_nothing);
    tcase_add_test(tc, pack_borrow_equals_pack);
    tcase_add_test(tc, pack_allocations_bounded);
    suite_add_tcase(s, tc);
    tc = tcase_create("decompress");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, decompress_rejects_corrupt_blobs);
    tcase_add_test(tc, decompress_cap_is_exact);
    tcase_add_test(tc, declared_bomb_refused_without_allocating);
    tcase_add_test(tc, raw_size_reads_the_header);
    tcase_add_test(tc, produced_bomb_refused_at_cap);
    tcase_add_test(tc, unsized_frames_decode);
    tcase_add_test(tc, empty_content_is_zero_frames);
    suite_add_tcase(s, tc);
    tc = tcase_create("read");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, spans);
    tcase_add_test(tc, random_access);
    tcase_add_test(tc, malformed_segment_positions);
    tcase_add_test(tc, verify_counts);
    suite_add_tcase(s, tc);
    return s;
}
