/*
 * pb_scan.c - the request pre-scan (pb_scan.h): NUL bytes and invalid UTF-8 in
 * any string field of a serialized request, found on the wire.
 *
 * What it does: walks the protobuf wire format of one message, looking each
 * field number up in the message's descriptor; checks the bytes of every
 * length-delimited field declared `string`; descends into every field declared
 * as a message (repeated ones too, hence oneofs and map entries); skips
 * everything else by its wire type, unknown fields included.
 * What it deliberately does not: allocate, unpack, check anything protobuf-c
 * checks itself (wire-type mismatches, enum values), or judge `bytes` fields.
 *
 * Invariants:
 *   1. Every read is preceded by a bounds check against the bytes left in the
 *      current message (varints: at most 10 bytes, the 10th <= 1; lengths: no
 *      more than what remains); nothing is read past buf + len.
 *   2. Recursion depth is bounded by QN_PB_SCAN_MAX_DEPTH.
 *   3. On the error path only, each level names the field it was in, with its
 *      repeat index counted by re-walking that level up to the failing field;
 *      the happy path keeps no per-field state.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "queen/error.h"

#include "pb_scan.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

/* Where an error lies: one entry per level, innermost last. */
struct at {
    const ProtobufCFieldDescriptor *field;
    size_t index; /* repeat index when the field is repeated */
};

struct scan {
    const uint8_t *base;
    struct at path[QN_PB_SCAN_MAX_DEPTH + 1];
    size_t depth;  /* entries of path filled (from the innermost outwards) */
    char what[96]; /* the problem, without the path */
    bool protobuf; /* a wire-format problem (no field path prefix needed) */
};

/* Reads a varint at *p (< e). Returns false when it runs past e or is over 64 bits. */
static bool varint(const uint8_t **p, const uint8_t *e, uint64_t *v)
{
    uint64_t r = 0;
    const uint8_t *q = *p;
    for (unsigned i = 0; i < 10; i++) {
        if (q >= e)
            return false;
        uint8_t b = *q++;
        if (i == 9 && b > 1)
            return false;
        r |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *p = q;
            *v = r;
            return true;
        }
    }
    return false;
}

static int wire_error(struct scan *s, const char *what, const uint8_t *at)
{
    snprintf(s->what, sizeof s->what, "%s at byte %zu", what, (size_t)(at - s->base));
    s->protobuf = true;
    return QN_EBADREQUEST;
}

/* UTF-8 as RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF. */
static bool utf8_problem(const uint8_t *p, size_t n, size_t *bad, bool *nul)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        if (c == 0) {
            *bad = i;
            *nul = true;
            return true;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) {
            k = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 4, cp = c & 0x07, min = 0x10000;
        } else {
            *bad = i;
            *nul = false;
            return true;
        }
        if (k > n - i)
            goto bad;
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                goto bad;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            goto bad;
        i += k;
        continue;
    bad:
        *bad = i;
        *nul = false;
        return true;
    }
    return false;
}

/* The repeat index of the field numbered `num` starting at `at`: how many fields
 * with that number precede it from `p` (the start of its message). */
static size_t repeat_index(const uint8_t *p, const uint8_t *at, uint32_t num)
{
    size_t n = 0;
    while (p < at) {
        uint64_t key, v;
        if (!varint(&p, at, &key))
            break;
        if ((uint32_t)(key >> 3) == num)
            n++;
        switch (key & 7) {
        case WT_VARINT:
            if (!varint(&p, at, &v))
                return n;
            break;
        case WT_I64:
            p += 8;
            break;
        case WT_I32:
            p += 4;
            break;
        case WT_LEN:
            if (!varint(&p, at, &v) || v > (uint64_t)(at - p))
                return n;
            p += v;
            break;
        default:
            return n;
        }
    }
    return n;
}

static int scan_message(struct scan *s, const uint8_t *p, const uint8_t *e,
                        const ProtobufCMessageDescriptor *desc, size_t depth)
{
    const uint8_t *start = p;
    while (p < e) {
        const uint8_t *field_at = p;
        uint64_t key, v;
        if (!varint(&p, e, &key))
            return wire_error(s, "truncated or over-long field tag", field_at);
        uint64_t num = key >> 3;
        unsigned wt = (unsigned)(key & 7);
        if (num == 0 || num > 536870911u)
            return wire_error(s, "invalid field number", field_at);
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(desc, (unsigned)num);
        const uint8_t *val_at = p;
        switch (wt) {
        case WT_VARINT:
            if (!varint(&p, e, &v))
                return wire_error(s, "truncated or over-long varint", val_at);
            break;
        case WT_I64:
            if (e - p < 8)
                return wire_error(s, "truncated fixed64", val_at);
            p += 8;
            break;
        case WT_I32:
            if (e - p < 4)
                return wire_error(s, "truncated fixed32", val_at);
            p += 4;
            break;
        case WT_LEN: {
            if (!varint(&p, e, &v))
                return wire_error(s, "truncated or over-long length", val_at);
            if (v > (uint64_t)(e - p))
                return wire_error(s, "length past the end of the message", val_at);
            const uint8_t *body = p;
            p += v;
            if (!f)
                break;
            int rc = QN_OK;
            if (f->type == PROTOBUF_C_TYPE_STRING) {
                size_t bad;
                bool nul;
                if (utf8_problem(body, (size_t)v, &bad, &nul)) {
                    snprintf(s->what, sizeof s->what, "%s at byte %zu",
                             nul ? "contains a NUL byte" : "is not valid UTF-8", bad);
                    rc = QN_EBADREQUEST;
                }
            } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (depth + 1 > QN_PB_SCAN_MAX_DEPTH) {
                    snprintf(s->what, sizeof s->what, "nests messages deeper than %d",
                             QN_PB_SCAN_MAX_DEPTH);
                    s->protobuf = true;
                    return QN_EBADREQUEST;
                }
                rc = scan_message(s, body, p, f->descriptor, depth + 1);
            }
            if (rc != QN_OK) {
                /* name this level's field; the inner levels named theirs already */
                struct at *a = &s->path[s->depth++];
                a->field = f;
                a->index = f->label == PROTOBUF_C_LABEL_REPEATED
                               ? repeat_index(start, field_at, (uint32_t)num)
                               : 0;
                return rc;
            }
            break;
        }
        default:
            return wire_error(s, "unsupported wire type (groups)", field_at);
        }
    }
    return QN_OK;
}

int qn_pb_scan(const uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *desc, char *msg,
               size_t cap)
{
    if (!desc || (!buf && len) || (!msg && cap))
        return QN_EINVAL;
    struct scan s;
    s.base = buf;
    s.depth = 0;
    s.what[0] = '\0';
    s.protobuf = false;
    int rc = scan_message(&s, buf, buf + len, desc, 0);
    if (rc == QN_OK || cap == 0)
        return rc;
    /* path entries are innermost first: print them outermost first */
    char path[256];
    size_t n = 0;
    path[0] = '\0';
    for (size_t i = s.depth; i-- > 0 && n < sizeof path;) {
        const struct at *a = &s.path[i];
        int k = a->field->label == PROTOBUF_C_LABEL_REPEATED
                    ? snprintf(path + n, sizeof path - n, "%s%s[%zu]", n ? "." : "", a->field->name,
                               a->index)
                    : snprintf(path + n, sizeof path - n, "%s%s", n ? "." : "", a->field->name);
        if (k < 0)
            break;
        n += (size_t)k < sizeof path - n ? (size_t)k : sizeof path - n - 1;
    }
    if (s.protobuf && n)
        snprintf(msg, cap, "request is not valid protobuf: %s (in %s)", s.what, path);
    else if (s.protobuf)
        snprintf(msg, cap, "request is not valid protobuf: %s", s.what);
    else
        snprintf(msg, cap, "%s %s", path, s.what);
    return rc;
}
