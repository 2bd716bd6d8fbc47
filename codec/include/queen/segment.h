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

/* Makes a context. Returns QN_OK and *out, or QN_ENOMEM. */
int qn_zctx_new(qn_zctx **out);
/* Frees ctx; NULL is allowed. */
void qn_zctx_free(qn_zctx *ctx);

/* An owned byte buffer returned by the codec; free with qn_buf_free(). */
struct qn_buf {
    uint8_t *data;
    size_t len;
};
void qn_buf_free(struct qn_buf *b);

/*
 * Packs frames[0..n) and compresses them at `level` (1..19; 0 means
 * QN_ZSTD_LEVEL_DEFAULT). On success *blob owns the compressed bytes; when hashes
 * is non-NULL it receives n*16 bytes: xxh3_128 of each frame's txn (frame order,
 * see qn_txn_hash()). n must be >= 1. Borrows frames.
 * Errors: QN_EINVAL (n == 0, bad level), frame encode errors, QN_ENOMEM.
 */
int qn_segment_pack(qn_zctx *ctx, const struct qn_frame *frames, size_t n, int level,
                    struct qn_buf *blob, uint8_t *hashes);

/*
 * Decompresses blob into a buffer owned by ctx (valid until the next call on ctx
 * that decompresses, or qn_zctx_free). Refuses to produce more than max_raw bytes
 * (a decompression bomb is QN_ESEGMENT_TOO_LARGE, never an allocation of the
 * claimed size). Errors: QN_ESEGMENT_CORRUPT, QN_ESEGMENT_TOO_LARGE, QN_ENOMEM.
 */
int qn_segment_decompress(qn_zctx *ctx, const uint8_t *blob, size_t blob_len, size_t max_raw,
                          const uint8_t **raw, size_t *raw_len);

/* Same, into a caller-owned buffer *out (allocated here; free with qn_buf_free). */
int qn_segment_decompress_owned(qn_zctx *ctx, const uint8_t *blob, size_t blob_len,
                                size_t max_raw, struct qn_buf *out);

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
 * Positions it on frames [start, start+take) of raw. Skips `start` frames by their
 * length prefixes (validating each). Errors: frame decode errors with *err filled,
 * QN_ERANGE when the segment has fewer than `start` frames.
 */
int qn_frame_iter_span(struct qn_frame_iter *it, const uint8_t *raw, size_t len, size_t start,
                       size_t take, struct qn_frame_error *err);

/*
 * Next frame. Returns 1 and fills *f, 0 at the end (of span or buffer), or a
 * negative frame decode error with *err (may be NULL) filled.
 */
int qn_frame_iter_next(struct qn_frame_iter *it, struct qn_frame *f, struct qn_frame_error *err);

/*
 * Random access: decodes the frame of offset `offset` in a segment based at
 * `base`. QN_ERANGE when offset < base or the segment is too short.
 */
int qn_segment_frame_at(const uint8_t *raw, size_t len, int64_t base, int64_t offset,
                        struct qn_frame *f, struct qn_frame_error *err);

/* Counts and validates every frame of raw. */
int qn_segment_count(const uint8_t *raw, size_t len, size_t *count, struct qn_frame_error *err);

#endif
