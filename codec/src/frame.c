/*
 * frame.c - one message frame: validate, size, encode, decode (codec/SPEC.md).
 *
 * What it does: converts between struct qn_frame and the wire form
 *   u32 body_len | u8 flags | u8[16] message_id | [u8[16] trace_id] | u16 txn_len
 *   | txn | [u16 psub_len | psub] | payload            (little-endian)
 * What it deliberately does not: allocate, copy payloads on decode, interpret
 * the payload, or look at more than one frame (segments are segment.c).
 *
 * Invariants:
 *   1. A frame that qn__frame_check() accepts encodes to exactly the size it
 *      reports, and decoding those bytes gives back the same fields (round trip).
 *   2. Encoding refuses what a decoder could not represent: unknown flag bits,
 *      txn or producer sub over 65535 bytes, a body over 2^32-1 bytes.
 *   3. The decoder is the single inline one in codec_wire.h, so a frame decoded
 *      here and one decoded while walking a segment are checked identically.
 */
#include "codec_wire.h"

int qn__frame_check(const struct qn_frame *f, size_t *size)
{
    if (f->flags & ~QN_FRAME_FLAGS_KNOWN)
        return QN_EFRAME_FLAGS;
    if (f->txn_len > QN_FRAME_TXN_MAX)
        return QN_EFRAME_FIELD_TOO_LONG;
    if (f->txn_len && !f->txn)
        return QN_EINVAL;
    size_t fixed = QN_FRAME_MIN_BODY + f->txn_len;
    if (f->flags & QN_FRAME_FLAG_TRACE)
        fixed += 16;
    if (f->flags & QN_FRAME_FLAG_PSUB) {
        if (f->psub_len > QN_FRAME_PSUB_MAX)
            return QN_EFRAME_FIELD_TOO_LONG;
        if (f->psub_len && !f->psub)
            return QN_EINVAL;
        fixed += 2 + f->psub_len;
    }
    if (f->payload_len && !f->payload)
        return QN_EINVAL;
    /* fixed <= 19 + 16 + 65535 + 2 + 65535, far below the u32 limit. */
    if (f->payload_len > (size_t)QN_FRAME_BODY_MAX - fixed)
        return QN_EFRAME_FIELD_TOO_LONG;
    size_t body = fixed + f->payload_len;
    if (body > SIZE_MAX - QN_FRAME_LEN_PREFIX)
        return QN_EFRAME_FIELD_TOO_LONG; /* only reachable where size_t is 32 bits */
    *size = QN_FRAME_LEN_PREFIX + body;
    return QN_OK;
}

int qn_frame_encoded_size(const struct qn_frame *f, size_t *size)
{
    if (!f || !size)
        return QN_EINVAL;
    return qn__frame_check(f, size);
}

int qn_frame_encode(const struct qn_frame *f, uint8_t *out, size_t cap, size_t *written)
{
    if (!f || !written || (!out && cap))
        return QN_EINVAL;
    size_t need;
    int rc = qn__frame_check(f, &need);
    if (rc != QN_OK)
        return rc;
    if (need > cap)
        return QN_ERANGE;
    qn__frame_put(out, f);
    *written = need;
    return QN_OK;
}

int qn_frame_decode(const uint8_t *buf, size_t len, struct qn_frame *f, size_t *consumed,
                    size_t *err_at)
{
    if (!f || !consumed || (!buf && len))
        return QN_EINVAL;
    size_t at = 0;
    int rc = qn__frame_decode_at(buf, len, 0, f, consumed, &at);
    if (rc != QN_OK && err_at)
        *err_at = at;
    return rc;
}
