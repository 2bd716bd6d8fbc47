/*
 * segment.c - segments: frames packed back to back and compressed as one zstd
 * frame; bounded decompression; walking, slicing and random access over the
 * decompressed bytes (codec/SPEC.md, "Segments").
 *
 * What it does: qn_segment_pack() sizes every frame, writes them into one
 * scratch buffer, compresses that with a reused ZSTD_CCtx (ZSTD_compress2, so the
 * zstd frame header records the content size that PostgreSQL's
 * zstd_content_size() reads to budget pops), and hashes each transaction id.
 * qn_segment_decompress*() undo the compression under a caller's size cap; the
 * iterator, qn_segment_frame_at() and qn_segment_count() read frames in place.
 * What it deliberately does not: copy payloads when reading, keep any global
 * state, print, abort, or trust a size field before checking it.
 *
 * Invariants:
 *   1. Packing n frames allocates at most three times (the returned blob, and the
 *      two scratch buffers when this segment is larger than any before on the
 *      context), independent of n; qn_segment_pack_borrow() drops the first.
 *   2. No scratch buffer grows past its hard maximum: pack buffers past
 *      ctx->pack_max (and its compress bound), decompression output past the
 *      max_raw of the call.
 *   3. Decompression never allocates, and never writes, more than max_raw bytes
 *      of output, whatever the zstd header claims: a declared size over the cap
 *      is refused before allocating, and decompression is one-shot into a
 *      destination of at most max_raw bytes, so zstd keeps no window buffer.
 *   4. Every out-parameter is written only on success (the hash blob too: hashes
 *      are computed after compression succeeded).
 */
#include <stdbool.h>
#include <stdlib.h>

#include <zstd.h>
#include <zstd_errors.h>

#include "queen/ids.h"
#include "queen/segment.h"

#include "codec_wire.h"

struct qn_zctx {
    ZSTD_CCtx *cctx;     /* never NULL */
    ZSTD_DCtx *dctx;     /* never NULL */
    int cctx_level;      /* compression level set on cctx; 0 before the first pack */
    size_t pack_max;     /* largest packed (raw) segment; > 0 */
    uint8_t *pack_raw;   /* frames before compression; NULL or pack_raw_cap bytes */
    size_t pack_raw_cap; /* <= pack_max */
    uint8_t *pack_out;   /* compressed output; NULL or pack_out_cap bytes */
    size_t pack_out_cap; /* <= ZSTD_compressBound(pack_max) */
    uint8_t *dec;        /* qn_segment_decompress() output; NULL or dec_cap bytes */
    size_t dec_cap;      /* <= the largest max_raw any call passed */
};

int qn_zctx_new(qn_zctx **out)
{
    int rc = QN_ENOMEM;
    qn_zctx *ctx = NULL;
    if (!out)
        return QN_EINVAL;
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        goto out;
    ctx->pack_max = QN_SEGMENT_RAW_MAX_DEFAULT;
    ctx->cctx = ZSTD_createCCtx();
    ctx->dctx = ZSTD_createDCtx();
    if (!ctx->cctx || !ctx->dctx)
        goto out;
    *out = ctx;
    ctx = NULL;
    rc = QN_OK;
out:
    qn_zctx_free(ctx);
    return rc;
}

void qn_zctx_free(qn_zctx *ctx)
{
    if (!ctx)
        return;
    ZSTD_freeCCtx(ctx->cctx);
    ZSTD_freeDCtx(ctx->dctx);
    free(ctx->pack_raw);
    free(ctx->pack_out);
    free(ctx->dec);
    free(ctx);
}

int qn_zctx_set_pack_max(qn_zctx *ctx, size_t max_raw)
{
    if (!ctx || max_raw == 0 || ZSTD_isError(ZSTD_compressBound(max_raw)) ||
        ZSTD_compressBound(max_raw) == 0)
        return QN_EINVAL;
    ctx->pack_max = max_raw;
    return QN_OK;
}

void qn_buf_free(struct qn_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

/*
 * Makes *buf hold at least need bytes, discarding its contents; grows by half
 * again to amortise slowly growing segments, but never past max (need <= max).
 */
static int reserve(uint8_t **buf, size_t *cap, size_t need, size_t max)
{
    if (need <= *cap)
        return QN_OK;
    size_t n = *cap + *cap / 2;
    if (n < need || n < *cap)
        n = need;
    if (n > max)
        n = max;
    uint8_t *p = malloc(n ? n : 1);
    if (!p)
        return QN_ENOMEM;
    free(*buf);
    *buf = p;
    *cap = n;
    return QN_OK;
}

/* Compress into ctx->pack_out; *z_len receives the compressed size. */
static int pack_core(qn_zctx *ctx, const struct qn_frame *frames, size_t n, int level,
                     size_t *z_len)
{
    if (!ctx || !frames || n == 0 || !z_len)
        return QN_EINVAL;
    if (level == 0)
        level = QN_ZSTD_LEVEL_DEFAULT;
    if (level < 1 || level > 19)
        return QN_EINVAL;

    /* Pass 1: validate and size; the running total never exceeds pack_max. */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t sz;
        int rc = qn__frame_check(&frames[i], &sz);
        if (rc != QN_OK)
            return rc;
        if (sz > ctx->pack_max - total)
            return QN_ELIMIT;
        total += sz;
    }

    size_t bound = ZSTD_compressBound(total);
    int rc = reserve(&ctx->pack_raw, &ctx->pack_raw_cap, total, ctx->pack_max);
    if (rc != QN_OK)
        return rc;
    rc = reserve(&ctx->pack_out, &ctx->pack_out_cap, bound, ZSTD_compressBound(ctx->pack_max));
    if (rc != QN_OK)
        return rc;

    /* Pass 2: write; sizes were checked above, so the writer checks nothing. */
    uint8_t *o = ctx->pack_raw;
    for (size_t i = 0; i < n; i++)
        o = qn__frame_put(o, &frames[i]);
    if ((size_t)(o - ctx->pack_raw) != total)
        return QN_EINTERNAL;

    if (ctx->cctx_level != level) {
        size_t r = ZSTD_CCtx_setParameter(ctx->cctx, ZSTD_c_compressionLevel, level);
        if (ZSTD_isError(r))
            return QN_EINTERNAL;
        ctx->cctx_level = level;
    }
    /* One-shot compression of a known-size input: zstd writes the content size
     * into the frame header (ZSTD_c_contentSizeFlag defaults to 1). */
    size_t z = ZSTD_compress2(ctx->cctx, ctx->pack_out, ctx->pack_out_cap, ctx->pack_raw, total);
    if (ZSTD_isError(z)) {
        /* A bound-sized destination cannot be too small: only memory can fail. */
        ctx->cctx_level = 0;
        return ZSTD_getErrorCode(z) == ZSTD_error_memory_allocation ? QN_ENOMEM : QN_EINTERNAL;
    }
    *z_len = z;
    return QN_OK;
}

static void hash_all(const struct qn_frame *frames, size_t n, uint8_t *hashes)
{
    for (size_t i = 0; i < n; i++)
        qn_txn_hash(frames[i].txn, frames[i].txn_len, hashes + i * QN_HASH_LEN);
}

int qn_segment_pack_borrow(qn_zctx *ctx, const struct qn_frame *frames, size_t n, int level,
                           const uint8_t **blob, size_t *blob_len, uint8_t *hashes)
{
    if (!blob || !blob_len)
        return QN_EINVAL;
    size_t z;
    int rc = pack_core(ctx, frames, n, level, &z);
    if (rc != QN_OK)
        return rc;
    if (hashes)
        hash_all(frames, n, hashes);
    *blob = ctx->pack_out;
    *blob_len = z;
    return QN_OK;
}

int qn_segment_pack(qn_zctx *ctx, const struct qn_frame *frames, size_t n, int level,
                    struct qn_buf *blob, uint8_t *hashes)
{
    if (!blob)
        return QN_EINVAL;
    size_t z;
    int rc = pack_core(ctx, frames, n, level, &z);
    if (rc != QN_OK)
        return rc;
    uint8_t *data = malloc(z);
    if (!data)
        return QN_ENOMEM;
    memcpy(data, ctx->pack_out, z);
    if (hashes)
        hash_all(frames, n, hashes);
    blob->data = data;
    blob->len = z;
    return QN_OK;
}

/* ---- decompression ---------------------------------------------------- */

/*
 * Decompresses blob, which must be exactly one zstd frame, into *buf (capacity
 * *cap, grown as needed, never past max_raw; with exact set, a fresh buffer is
 * sized to the content exactly). One-shot decompression writes straight into
 * the destination, so zstd allocates no window of its own: the destination is
 * the only buffer, and it is bounded by max_raw before it is allocated.
 *   declared size > max_raw   QN_ESEGMENT_TOO_LARGE, nothing allocated
 *   no declared size          destination of max_raw bytes (only the pages
 *                             written are touched); more output than that is
 *                             QN_ESEGMENT_TOO_LARGE
 */
static int decompress_into(ZSTD_DCtx *dctx, const uint8_t *blob, size_t blob_len, size_t max_raw,
                           uint8_t **buf, size_t *cap, size_t *len_out, bool exact)
{
    if (blob_len < 4 || qn__le32(blob) != ZSTD_MAGICNUMBER)
        return QN_ESEGMENT_CORRUPT; /* also refuses skippable frames */
    unsigned long long cs = ZSTD_getFrameContentSize(blob, blob_len);
    if (cs == ZSTD_CONTENTSIZE_ERROR)
        return QN_ESEGMENT_CORRUPT;
    bool sized = cs != ZSTD_CONTENTSIZE_UNKNOWN;
    if (sized && cs > max_raw)
        return QN_ESEGMENT_TOO_LARGE; /* before allocating anything */
    size_t fsz = ZSTD_findFrameCompressedSize(blob, blob_len);
    if (ZSTD_isError(fsz) || fsz != blob_len)
        return QN_ESEGMENT_CORRUPT; /* truncated, or bytes after the frame */
    size_t want = sized ? (size_t)cs : max_raw;
    uint8_t empty;
    uint8_t *dst = &empty;
    if (want) {
        int rc = reserve(buf, cap, want, exact ? want : max_raw);
        if (rc != QN_OK)
            return rc;
        dst = *buf;
    }
    size_t r = ZSTD_decompressDCtx(dctx, dst, want, blob, blob_len);
    if (ZSTD_isError(r)) {
        switch (ZSTD_getErrorCode(r)) {
        case ZSTD_error_memory_allocation:
            return QN_ENOMEM;
        case ZSTD_error_dstSize_tooSmall:
            return sized ? QN_ESEGMENT_CORRUPT : QN_ESEGMENT_TOO_LARGE;
        default:
            return QN_ESEGMENT_CORRUPT;
        }
    }
    if (sized && r != want)
        return QN_ESEGMENT_CORRUPT;
    *len_out = r;
    return QN_OK;
}

int qn_segment_raw_size(const uint8_t *blob, size_t blob_len, uint64_t *raw_len)
{
    if ((!blob && blob_len) || !raw_len)
        return QN_EINVAL;
    if (blob_len < 4 || qn__le32(blob) != ZSTD_MAGICNUMBER)
        return QN_ESEGMENT_CORRUPT;
    unsigned long long cs = ZSTD_getFrameContentSize(blob, blob_len);
    if (cs == ZSTD_CONTENTSIZE_ERROR)
        return QN_ESEGMENT_CORRUPT;
    if (cs == ZSTD_CONTENTSIZE_UNKNOWN)
        return QN_ENOTFOUND;
    *raw_len = (uint64_t)cs;
    return QN_OK;
}

int qn_segment_decompress(qn_zctx *ctx, const uint8_t *blob, size_t blob_len, size_t max_raw,
                          const uint8_t **raw, size_t *raw_len)
{
    static const uint8_t empty[1] = {0};
    if (!ctx || (!blob && blob_len) || !raw || !raw_len || max_raw == 0)
        return QN_EINVAL;
    size_t len;
    int rc =
        decompress_into(ctx->dctx, blob, blob_len, max_raw, &ctx->dec, &ctx->dec_cap, &len, false);
    if (rc != QN_OK)
        return rc;
    *raw = len ? ctx->dec : empty;
    *raw_len = len;
    return QN_OK;
}

int qn_segment_decompress_owned(qn_zctx *ctx, const uint8_t *blob, size_t blob_len, size_t max_raw,
                                struct qn_buf *out)
{
    if (!ctx || (!blob && blob_len) || !out || max_raw == 0)
        return QN_EINVAL;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    int rc = decompress_into(ctx->dctx, blob, blob_len, max_raw, &buf, &cap, &len, true);
    if (rc != QN_OK)
        goto out;
    if (len == 0) {
        free(buf);
        buf = NULL;
    } else if (cap - len > cap / 8) {
        /* A frame without a declared size was given max_raw bytes: shrink. */
        uint8_t *p = realloc(buf, len);
        if (p)
            buf = p;
    }
    out->data = buf;
    out->len = len;
    buf = NULL;
out:
    free(buf);
    return rc;
}

/* ---- reading frames --------------------------------------------------- */

void qn_frame_iter_init(struct qn_frame_iter *it, const uint8_t *raw, size_t len)
{
    it->raw = raw;
    it->len = len;
    it->pos = 0;
    it->index = 0;
    it->end_index = SIZE_MAX;
}

static void set_err(struct qn_frame_error *err, size_t index, size_t at)
{
    if (err) {
        err->index = index;
        err->byte_offset = at;
    }
}

/* Skips `count` frames from (*pos, *index), validating each. QN_ERANGE when the
 * buffer ends first. */
static int skip_frames(const uint8_t *raw, size_t len, size_t count, size_t *pos, size_t *index,
                       struct qn_frame_error *err)
{
    size_t p = *pos, i = *index;
    for (size_t k = 0; k < count; k++) {
        if (p == len)
            return QN_ERANGE;
        struct qn_frame f;
        size_t at;
        int rc = qn__frame_decode_at(raw, len, p, &f, &p, &at);
        if (rc != QN_OK) {
            set_err(err, i, at);
            return rc;
        }
        i++;
    }
    *pos = p;
    *index = i;
    return QN_OK;
}

int qn_frame_iter_span(struct qn_frame_iter *it, const uint8_t *raw, size_t len, size_t start,
                       size_t take, struct qn_frame_error *err)
{
    if (!it || (!raw && len))
        return QN_EINVAL;
    size_t pos = 0, index = 0;
    int rc = skip_frames(raw, len, start, &pos, &index, err);
    if (rc != QN_OK)
        return rc;
    it->raw = raw;
    it->len = len;
    it->pos = pos;
    it->index = index;
    it->end_index = take > SIZE_MAX - start ? SIZE_MAX : start + take;
    return QN_OK;
}

int qn_frame_iter_next(struct qn_frame_iter *it, struct qn_frame *f, struct qn_frame_error *err)
{
    if (it->index >= it->end_index)
        return 0;
    if (it->pos == it->len) {
        if (it->end_index == SIZE_MAX)
            return 0;
        set_err(err, it->index, it->len);
        return QN_ESEGMENT_COUNT;
    }
    size_t at;
    int rc = qn__frame_decode_at(it->raw, it->len, it->pos, f, &it->pos, &at);
    if (rc != QN_OK) {
        set_err(err, it->index, at);
        return rc;
    }
    it->index++;
    return 1;
}

int qn_segment_frame_at(const uint8_t *raw, size_t len, int64_t base, int64_t offset,
                        struct qn_frame *f, struct qn_frame_error *err)
{
    if (!f || (!raw && len))
        return QN_EINVAL;
    if (offset < base)
        return QN_ERANGE;
    uint64_t idx = (uint64_t)offset - (uint64_t)base;
    if (idx > SIZE_MAX)
        return QN_ERANGE;
    size_t pos = 0, index = 0;
    int rc = skip_frames(raw, len, (size_t)idx, &pos, &index, err);
    if (rc != QN_OK)
        return rc;
    if (pos == len)
        return QN_ERANGE;
    size_t at, next;
    rc = qn__frame_decode_at(raw, len, pos, f, &next, &at);
    if (rc != QN_OK)
        set_err(err, index, at);
    return rc;
}

int qn_segment_count(const uint8_t *raw, size_t len, size_t *count, struct qn_frame_error *err)
{
    if (!count || (!raw && len))
        return QN_EINVAL;
    size_t pos = 0, n = 0;
    while (pos < len) {
        struct qn_frame f;
        size_t at;
        int rc = qn__frame_decode_at(raw, len, pos, &f, &pos, &at);
        if (rc != QN_OK) {
            set_err(err, n, at);
            return rc;
        }
        n++;
    }
    *count = n;
    return QN_OK;
}

int qn_segment_verify(const uint8_t *raw, size_t len, size_t expect, struct qn_frame_error *err)
{
    if (!raw && len)
        return QN_EINVAL;
    size_t pos = 0, n = 0;
    while (n < expect) {
        if (pos == len) {
            set_err(err, n, len);
            return QN_ESEGMENT_COUNT;
        }
        struct qn_frame f;
        size_t at;
        int rc = qn__frame_decode_at(raw, len, pos, &f, &pos, &at);
        if (rc != QN_OK) {
            set_err(err, n, at);
            return rc;
        }
        n++;
    }
    if (pos != len) {
        set_err(err, n, pos);
        return QN_ESEGMENT_COUNT;
    }
    return QN_OK;
}
