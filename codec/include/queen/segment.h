/*
 * queen/segment.h - segments: many frames packed and compressed as one zstd
 * buffer, plus the 16-bytes-per-frame transaction-id hash blob that mirrors them.
 *
 * A segment based at offset B holds frames for offsets B .. B+n-1 in order; the
 * frame of offset O is frame index O-B. Packing is two-pass (sizes, then bytes) so
 * a segment of N frames costs a constant number of allocations, not N.
 *
 * All state lives in a qn_zctx owned by the caller (one per thread); the codec
 * keeps no globals, never prints and never aborts.
 */
#ifndef QUEEN_SEGMENT_H
#define QUEEN_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "queen/frame.h"

#define QN_ZSTD_LEVEL_DEFAULT 3
/* Default cap on a decompressed segment; callers pass their own. */
#define QN_SEGMENT_RAW_MAX_DEFAULT (64u * 1024u * 1024u)

/* Compression and decompression contexts plus reusable scratch. Not thread-safe:
 * one per thread. */
typedef struct qn_zctx qn_zctx;

/* Makes a context. Returns QN_OK and *out, or QN_ENOMEM. Its pack limit starts at
 * QN_SEGMENT_RAW_MAX_DEFAULT. */
int qn_zctx_new(qn_zctx **out);
/* Frees ctx and every buffer it owns (borrowed results die with it); NULL is
 * allowed. */
void qn_zctx_free(qn_zctx *ctx);

/*
 * Sets the largest uncompressed segment qn_segment_pack() will build with ctx
 * (the hard maximum of its scratch buffers); a bigger one is QN_ELIMIT. Keep it
 * no larger than the max_raw your readers pass, or they will refuse what you
 * wrote. Errors: QN_EINVAL when max_raw is 0.
 */
int qn_zctx_set_pack_max(qn_zctx *ctx, size_t max_raw);

/* An owned byte buffer returned by the codec; free with qn_buf_free(). */
struct qn_buf {
    uint8_t *data; /* malloc'd; may be NULL when len is 0 */
    size_t len;
};
/* Frees b->data and resets *b to {NULL, 0}; b may be NULL. */
void qn_buf_free(struct qn_buf *b);

/*
 * Packs frames[0..n) and compresses them at `level` (1..19; 0 means
 * QN_ZSTD_LEVEL_DEFAULT) as ONE zstd frame whose header records the content size.
 * On success *blob owns the compressed bytes (malloc'd; free with qn_buf_free);
 * when hashes is non-NULL it receives n*16 bytes: xxh3_128 of each frame's txn
 * (frame order, see qn_txn_hash()). n must be >= 1. Borrows frames. Nothing is
 * written on failure. Allocations: one for *blob, plus scratch growth in ctx only
 * when this segment is bigger than any before (never per frame).
 * Errors: QN_EINVAL (n == 0, bad level, NULL pointers), QN_EFRAME_FLAGS and
 * QN_EFRAME_FIELD_TOO_LONG (a frame cannot be encoded), QN_ELIMIT (the packed
 * frames exceed the ctx pack limit), QN_ENOMEM.
 */
int qn_segment_pack(qn_zctx *ctx, const struct qn_frame *frames, size_t n, int level,
                    struct qn_buf *blob, uint8_t *hashes);

/*
 * Same as qn_segment_pack(), but *blob and *blob_len borrow a buffer owned by ctx,
 * valid until the next pack on ctx or qn_zctx_free (no allocation at all once
 * ctx has seen a segment this large). For callers that copy the bytes at once.
 */
int qn_segment_pack_borrow(qn_zctx *ctx, const struct qn_frame *frames, size_t n, int level,
                           const uint8_t **blob, size_t *blob_len, uint8_t *hashes);

/*
 * Decompresses blob into a buffer owned by ctx (valid until the next call on ctx
 * that decompresses, or qn_zctx_free). blob must be exactly one zstd frame
 * (codec/SPEC.md). Refuses to produce more than max_raw bytes: a header that
 * declares more is QN_ESEGMENT_TOO_LARGE before anything is allocated; a frame
 * without a declared size (other encoders) gets a buffer of max_raw bytes, of
 * which only the pages written are touched, and more output than that is
 * QN_ESEGMENT_TOO_LARGE. An empty result (content size 0) is QN_OK with
 * *raw_len 0.
 * Errors: QN_EINVAL (NULL pointers, max_raw 0), QN_ESEGMENT_CORRUPT,
 * QN_ESEGMENT_TOO_LARGE, QN_ENOMEM.
 */
int qn_segment_decompress(qn_zctx *ctx, const uint8_t *blob, size_t blob_len, size_t max_raw,
                          const uint8_t **raw, size_t *raw_len);

/* The decompressed size blob's zstd header declares, read without
 * decompressing (a few bytes of header). QN_OK and *raw_len; QN_ESEGMENT_CORRUPT
 * when blob is not a zstd frame; QN_ENOTFOUND when the frame declares no size
 * (other encoders); QN_EINVAL for NULL pointers. */
int qn_segment_raw_size(const uint8_t *blob, size_t blob_len, uint64_t *raw_len);

/* Same, into a caller-owned buffer *out (allocated here, never more than max_raw
 * bytes; free with qn_buf_free). *out is written only on success. */
int qn_segment_decompress_owned(qn_zctx *ctx, const uint8_t *blob, size_t blob_len, size_t max_raw,
                                struct qn_buf *out);

/*
 * Iterates frames of a decompressed segment without copying: each frame borrows
 * from raw. Initialise with qn_frame_iter_init() (whole segment) or
 * qn_frame_iter_span() (a slice).
 */
struct qn_frame_iter {
    const uint8_t *raw;
    size_t len;
    size_t pos;       /* byte position of the next frame */
    size_t index;     /* frame index of the next frame */
    size_t end_index; /* stop before this index (SIZE_MAX: to the end of the buffer) */
};

void qn_frame_iter_init(struct qn_frame_iter *it, const uint8_t *raw, size_t len);

/*
 * Positions it on frames [start, start+take) of raw; take == SIZE_MAX (or a sum
 * past SIZE_MAX) means "to the end of the buffer". Skips `start` frames, fully
 * validating each. *it is written only on success. Errors: frame decode errors
 * with *err filled, QN_ERANGE when the segment has fewer than `start` frames.
 */
int qn_frame_iter_span(struct qn_frame_iter *it, const uint8_t *raw, size_t len, size_t start,
                       size_t take, struct qn_frame_error *err);

/*
 * Next frame. Returns 1 and fills *f; 0 at the end of the span (or, for an
 * iterator without a span end, at the end of the buffer); or a negative error
 * with *err (may be NULL) filled: a frame decode error, or QN_ESEGMENT_COUNT when
 * the buffer ends before a bounded span does (err->byte_offset is then len).
 * After an error the iterator does not move: calling again repeats the error.
 */
int qn_frame_iter_next(struct qn_frame_iter *it, struct qn_frame *f, struct qn_frame_error *err);

/*
 * Random access: decodes the frame of offset `offset` in a segment based at
 * `base` (frame index offset - base), validating every frame before it.
 * QN_ERANGE when offset < base or the segment is too short; frame decode errors
 * with *err (may be NULL) filled.
 */
int qn_segment_frame_at(const uint8_t *raw, size_t len, int64_t base, int64_t offset,
                        struct qn_frame *f, struct qn_frame_error *err);

/* Counts and validates every frame of raw (an empty buffer holds 0 frames).
 * Errors: frame decode errors with *err (may be NULL) filled. */
int qn_segment_count(const uint8_t *raw, size_t len, size_t *count, struct qn_frame_error *err);

/*
 * Validates that raw holds exactly `expect` well-formed frames (the count the
 * database row claims). Errors: frame decode errors; QN_ESEGMENT_COUNT with
 * err->index = the first missing or surplus frame index and err->byte_offset =
 * where it would start or starts. *err may be NULL.
 */
int qn_segment_verify(const uint8_t *raw, size_t len, size_t expect, struct qn_frame_error *err);

#endif
