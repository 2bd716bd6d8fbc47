/*
 * queen/frame.h - one message frame, as the storage-model seed specifies.
 *
 * Wire form (little-endian), see codec/SPEC.md for the byte-by-byte definition:
 *   u32 body_len
 *   body: u8 flags | u8[16] message_id | [u8[16] trace_id if flags&1]
 *         | u16 txn_len | txn | [u16 psub_len | psub if flags&2] | payload...
 *
 * Frames borrow: a decoded struct qn_frame points into the caller's buffer and is
 * valid as long as that buffer is. Nothing here allocates.
 */
#ifndef QUEEN_FRAME_H
#define QUEEN_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define QN_FRAME_FLAG_TRACE 0x01u
#define QN_FRAME_FLAG_PSUB 0x02u
#define QN_FRAME_FLAG_ENCRYPTED 0x04u
#define QN_FRAME_FLAGS_KNOWN 0x07u

#define QN_FRAME_LEN_PREFIX 4u
/* flags + message id + txn_len */
#define QN_FRAME_MIN_BODY (1u + 16u + 2u)
#define QN_FRAME_TXN_MAX 65535u
#define QN_FRAME_PSUB_MAX 65535u
/* body_len is a u32 */
#define QN_FRAME_BODY_MAX 0xFFFFFFFFu

struct qn_frame {
    uint8_t flags; /* QN_FRAME_FLAG_* bits; TRACE/PSUB must match presence */
    uint8_t message_id[16];
    uint8_t trace_id[16];   /* meaningful only when flags & QN_FRAME_FLAG_TRACE */
    const uint8_t *txn;     /* may be NULL when txn_len == 0 */
    size_t txn_len;         /* <= QN_FRAME_TXN_MAX */
    const uint8_t *psub;    /* meaningful only when flags & QN_FRAME_FLAG_PSUB */
    size_t psub_len;        /* <= QN_FRAME_PSUB_MAX */
    const uint8_t *payload; /* may be NULL when payload_len == 0 */
    size_t payload_len;
};

/* Where a decode failed: frame index in the segment and byte offset of the
 * offending field from the start of the decompressed buffer. */
struct qn_frame_error {
    size_t index;
    size_t byte_offset;
};

/*
 * Bytes qn_frame_encode() will write for f, length prefix included.
 * Returns QN_OK and writes *size, or QN_EFRAME_FIELD_TOO_LONG when a field is
 * over its limit, or QN_EFRAME_FLAGS when f->flags has unknown bits, or
 * QN_EINVAL when an argument is NULL or a non-zero length has a NULL pointer.
 * Fields whose flag is clear (trace id, producer sub) are ignored.
 */
int qn_frame_encoded_size(const struct qn_frame *f, size_t *size);

/*
 * Encodes f into out[0..cap). Returns QN_OK and writes *written, or the errors of
 * qn_frame_encoded_size(), or QN_ERANGE when cap is too small. Borrows f.
 */
int qn_frame_encode(const struct qn_frame *f, uint8_t *out, size_t cap, size_t *written);

/*
 * Decodes the frame starting at buf[0] (buf holds len bytes, possibly more
 * frames after it). On success fills *f (pointing into buf) and *consumed (prefix
 * + body). Errors: QN_EFRAME_TRUNCATED, QN_EFRAME_BODY_OVERRUN, QN_EFRAME_FLAGS,
 * QN_EFRAME_INNER_OVERRUN (checked in the order codec/SPEC.md section 1.3 gives);
 * *err_at (may be NULL) receives the byte offset within buf of the offending
 * field. QN_EINVAL for NULL f or consumed, or NULL buf with len > 0. A trace id
 * that is absent decodes as 16 zero bytes; an absent producer sub as NULL, 0.
 */
int qn_frame_decode(const uint8_t *buf, size_t len, struct qn_frame *f, size_t *consumed,
                    size_t *err_at);

#endif
