/*
 * codec_wire.h - PRIVATE to codec/src: byte-order helpers and the one frame
 * decoder, inline so the segment walk (qn_frame_iter_next) and the public
 * qn_frame_decode() share exactly the same checks without a call per field.
 *
 * Not installed, not included from outside codec/src.
 *
 * Invariants the decoder keeps (codec/SPEC.md, "Decoding"):
 *   1. It never reads outside buf[pos .. len).
 *   2. Checks run in one fixed order, so a given malformed frame always yields
 *      the same error code and byte offset, whichever entry point decoded it.
 *   3. *out, *next and *err_at are written only as documented: out/next on
 *      success, err_at on failure.
 */
#ifndef QN_CODEC_WIRE_H
#define QN_CODEC_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "queen/error.h"
#include "queen/frame.h"

static inline uint32_t qn__le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint16_t qn__le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline void qn__put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void qn__put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/*
 * Decodes the frame that starts at buf[pos] (pos <= len). On success fills *out
 * (borrowing from buf) and *next (position of the following frame). On failure
 * writes *err_at, the offset within buf of the offending field:
 *   QN_EFRAME_TRUNCATED      fewer than 4 bytes left for body_len (at pos), or the
 *                            body ends inside a fixed-size field its flags require
 *                            (at that field);
 *   QN_EFRAME_BODY_OVERRUN   body_len is larger than the bytes left (at pos);
 *   QN_EFRAME_FLAGS          flags has bits outside QN_FRAME_FLAGS_KNOWN (at pos+4);
 *   QN_EFRAME_INNER_OVERRUN  txn_len or psub_len runs past the body (at that u16).
 */
static inline int qn__frame_decode_at(const uint8_t *buf, size_t len, size_t pos,
                                      struct qn_frame *out, size_t *next, size_t *err_at)
{
    size_t avail = len - pos;
    if (avail < QN_FRAME_LEN_PREFIX) {
        *err_at = pos;
        return QN_EFRAME_TRUNCATED;
    }
    uint32_t body_len = qn__le32(buf + pos);
    if (body_len > avail - QN_FRAME_LEN_PREFIX) {
        *err_at = pos;
        return QN_EFRAME_BODY_OVERRUN;
    }
    size_t base = pos + QN_FRAME_LEN_PREFIX; /* body start within buf */
    const uint8_t *b = buf + base;
    size_t blen = body_len;
    if (blen < 1) {
        *err_at = base;
        return QN_EFRAME_TRUNCATED;
    }
    struct qn_frame f;
    f.flags = b[0];
    if (f.flags & ~QN_FRAME_FLAGS_KNOWN) {
        *err_at = base;
        return QN_EFRAME_FLAGS;
    }
    size_t p = 1;
    if (blen - p < 16) {
        *err_at = base + p;
        return QN_EFRAME_TRUNCATED;
    }
    memcpy(f.message_id, b + p, 16);
    p += 16;
    if (f.flags & QN_FRAME_FLAG_TRACE) {
        if (blen - p < 16) {
            *err_at = base + p;
            return QN_EFRAME_TRUNCATED;
        }
        memcpy(f.trace_id, b + p, 16);
        p += 16;
    } else {
        memset(f.trace_id, 0, 16);
    }
    if (blen - p < 2) {
        *err_at = base + p;
        return QN_EFRAME_TRUNCATED;
    }
    f.txn_len = qn__le16(b + p);
    p += 2;
    if (f.txn_len > blen - p) {
        *err_at = base + p - 2;
        return QN_EFRAME_INNER_OVERRUN;
    }
    f.txn = b + p;
    p += f.txn_len;
    if (f.flags & QN_FRAME_FLAG_PSUB) {
        if (blen - p < 2) {
            *err_at = base + p;
            return QN_EFRAME_TRUNCATED;
        }
        f.psub_len = qn__le16(b + p);
        p += 2;
        if (f.psub_len > blen - p) {
            *err_at = base + p - 2;
            return QN_EFRAME_INNER_OVERRUN;
        }
        f.psub = b + p;
        p += f.psub_len;
    } else {
        f.psub = NULL;
        f.psub_len = 0;
    }
    f.payload = b + p;
    f.payload_len = blen - p;
    *out = f;
    *next = base + blen;
    return QN_OK;
}

/* Body bytes of f without checks; callers validated f with qn__frame_check(). */
static inline size_t qn__frame_body_size(const struct qn_frame *f)
{
    size_t n = QN_FRAME_MIN_BODY + f->txn_len + f->payload_len;
    if (f->flags & QN_FRAME_FLAG_TRACE)
        n += 16;
    if (f->flags & QN_FRAME_FLAG_PSUB)
        n += 2 + f->psub_len;
    return n;
}

/* Writes f (already validated) at o; returns the position after it. */
static inline uint8_t *qn__frame_put(uint8_t *o, const struct qn_frame *f)
{
    qn__put_le32(o, (uint32_t)qn__frame_body_size(f));
    o += 4;
    *o++ = f->flags;
    memcpy(o, f->message_id, 16);
    o += 16;
    if (f->flags & QN_FRAME_FLAG_TRACE) {
        memcpy(o, f->trace_id, 16);
        o += 16;
    }
    qn__put_le16(o, (uint16_t)f->txn_len);
    o += 2;
    if (f->txn_len) {
        memcpy(o, f->txn, f->txn_len);
        o += f->txn_len;
    }
    if (f->flags & QN_FRAME_FLAG_PSUB) {
        qn__put_le16(o, (uint16_t)f->psub_len);
        o += 2;
        if (f->psub_len) {
            memcpy(o, f->psub, f->psub_len);
            o += f->psub_len;
        }
    }
    if (f->payload_len) {
        memcpy(o, f->payload, f->payload_len);
        o += f->payload_len;
    }
    return o;
}

/* Validates f for encoding and returns its full encoded size (prefix included)
 * in *size. Shared by qn_frame_encoded_size() and the segment packer. */
int qn__frame_check(const struct qn_frame *f, size_t *size);

#endif
