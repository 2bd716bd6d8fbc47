/*
 * transport/grpc_wire.c - pure parsers and encoders of gRPC over HTTP/2 (see grpc_wire.h).
 *
 * Does: grpc-timeout, percent-encoding of grpc-message, message reassembly from
 * arbitrary chunks with the size cap checked on the prefix, request header checks.
 * Does not: touch sockets, nghttp2 or protobuf; decide what a status means to a
 * call (call.c does) or which headers a binding checks when (h2.c does).
 *
 * Invariants:
 *   1. A peer's length field is compared with the reader's max before it sizes
 *      any allocation; the body buffer never exceeds the declared length.
 *   2. Every output buffer is written within its capacity and NUL-terminated.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "transport/grpc_wire.h"
#include "queen/error.h"

/* ---------------------------------------------------------------- grpc-timeout */

int qn_grpc_timeout_parse(const char *s, size_t len, int64_t *ms)
{
    if (s == NULL || len < 2 || len > 9)
        return QN_EINVAL;
    size_t digits = len - 1;
    int64_t v = 0;
    for (size_t i = 0; i < digits; i++) {
        if (s[i] < '0' || s[i] > '9')
            return QN_EINVAL;
        v = v * 10 + (s[i] - '0'); /* at most 99999999: no overflow */
    }
    /* Milliseconds, rounded up; every product below stays far inside int64. */
    int64_t out;
    switch (s[digits]) {
    case 'H':
        out = v * 3600 * 1000;
        break;
    case 'M':
        out = v * 60 * 1000;
        break;
    case 'S':
        out = v * 1000;
        break;
    case 'm':
        out = v;
        break;
    case 'u':
        out = (v + 999) / 1000;
        break;
    case 'n':
        out = (v + 999999) / 1000000;
        break;
    default:
        return QN_EINVAL;
    }
    if (out > QN_GRPC_TIMEOUT_MAX_MS)
        out = QN_GRPC_TIMEOUT_MAX_MS;
    *ms = out;
    return QN_OK;
}

/* ---------------------------------------------------------------- grpc-message */

static bool pct_plain(unsigned char c)
{
    return c >= 0x20 && c <= 0x7e && c != '%';
}

/* Length of the UTF-8 sequence starting with lead byte c (1 for anything else). */
static size_t utf8_seq_len(unsigned char c)
{
    if (c >= 0xf0 && c <= 0xf7)
        return 4;
    if (c >= 0xe0)
        return c <= 0xef ? 3 : 1;
    if (c >= 0xc0)
        return 2;
    return 1;
}

size_t qn_grpc_pct_encode(const char *in, size_t len, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    if (cap == 0)
        return 0;
    size_t i = 0;
    while (i < len) {
        const unsigned char *p = (const unsigned char *)in + i;
        size_t seq = pct_plain(p[0]) ? 1 : utf8_seq_len(p[0]);
        if (seq > len - i)
            seq = len - i;
        /* Room needed for the whole sequence, so a cut never splits a character. */
        size_t need = 0;
        for (size_t k = 0; k < seq; k++)
            need += pct_plain(p[k]) ? 1 : 3;
        if (n + need > cap - 1)
            break;
        for (size_t k = 0; k < seq; k++) {
            if (pct_plain(p[k])) {
                out[n++] = (char)p[k];
            } else {
                out[n++] = '%';
                out[n++] = hex[p[k] >> 4];
                out[n++] = hex[p[k] & 0x0f];
            }
        }
        i += seq;
    }
    out[n] = '\0';
    return n;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t qn_grpc_pct_decode(const char *in, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    if (cap == 0)
        return 0;
    for (size_t i = 0; i < len && n < cap - 1; i++) {
        if (in[i] == '%' && i + 2 < len) {
            int hi = hexval(in[i + 1]), lo = hexval(in[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out[n++] = (char)(hi << 4 | lo);
                i += 2;
                continue;
            }
        }
        out[n++] = in[i];
    }
    out[n] = '\0';
    return n;
}

/* ---------------------------------------------------------------- messages */

/* First allocation for a body; grown by doubling up to the declared length. */
#define BODY_MIN_ALLOC (16u * 1024u)

void qn_grpc_reader_init(struct qn_grpc_reader *r, size_t max)
{
    memset(r, 0, sizeof *r);
    r->max = max;
}

void qn_grpc_reader_reset(struct qn_grpc_reader *r)
{
    free(r->body);
    qn_grpc_reader_init(r, r->max);
}

bool qn_grpc_reader_is_idle(const struct qn_grpc_reader *r)
{
    return r->hdr_len == 0;
}

uint32_t qn_grpc_reader_pending_len(const struct qn_grpc_reader *r)
{
    return r->hdr_len == 5 ? r->len : 0;
}

void qn_grpc_prefix_write(uint8_t out[5], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

static void emit(struct qn_grpc_reader *r, bool *ready, struct qn_grpc_msg *msg)
{
    msg->compressed = r->hdr[0] == 1;
    msg->body = r->body;
    msg->len = r->len;
    *ready = true;
    r->body = NULL;
    r->have = r->cap = 0;
    r->len = 0;
    r->hdr_len = 0;
}

int qn_grpc_reader_feed(struct qn_grpc_reader *r, const uint8_t *data, size_t len, size_t *used,
                        bool *ready, struct qn_grpc_msg *msg)
{
    size_t i = 0;
    *ready = false;
    while (i < len) {
        if (r->hdr_len < 5) {
            r->hdr[r->hdr_len++] = data[i++];
            if (r->hdr_len < 5)
                continue;
            if (r->hdr[0] > 1) {
                *used = i;
                return QN_EBADREQUEST;
            }
            r->len = (uint32_t)r->hdr[1] << 24 | (uint32_t)r->hdr[2] << 16 |
                     (uint32_t)r->hdr[3] << 8 | (uint32_t)r->hdr[4];
            if ((uint64_t)r->len > (uint64_t)r->max) {
                *used = i;
                return QN_ELIMIT;
            }
            if (r->len == 0) {
                emit(r, ready, msg);
                *used = i;
                return QN_OK;
            }
            continue;
        }
        size_t want = r->len - r->have;
        size_t take = len - i < want ? len - i : want;
        if (r->have + take > r->cap) {
            uint64_t ncap = r->cap ? (uint64_t)r->cap * 2 : BODY_MIN_ALLOC;
            if (ncap < (uint64_t)r->have + take)
                ncap = (uint64_t)r->have + take;
            if (ncap > r->len)
                ncap = r->len;
            uint8_t *nb = realloc(r->body, (size_t)ncap);
            if (nb == NULL) {
                *used = i;
                return QN_ENOMEM;
            }
            r->body = nb;
            r->cap = (uint32_t)ncap;
        }
        memcpy(r->body + r->have, data + i, take);
        r->have += (uint32_t)take;
        i += take;
        if (r->have == r->len) {
            emit(r, ready, msg);
            *used = i;
            return QN_OK;
        }
    }
    *used = i;
    return QN_OK;
}

/* ---------------------------------------------------------------- request headers */

bool qn_grpc_content_type_ok(const char *v)
{
    static const char base[] = "application/grpc";
    size_t n = sizeof base - 1;
    if (v == NULL || strncasecmp(v, base, n) != 0)
        return false;
    return v[n] == '\0' || v[n] == '+' || v[n] == ';';
}

bool qn_grpc_te_ok(const char *v)
{
    if (v == NULL)
        return false;
    const char *p = v;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        if ((size_t)(p - start) == 8 && strncasecmp(start, "trailers", 8) == 0)
            return true;
        while (*p && *p != ',')
            p++;
    }
    return false;
}

bool qn_grpc_encoding_ok(const char *v)
{
    return v == NULL || v[0] == '\0' || strcmp(v, "identity") == 0;
}

static bool reject(struct qn_grpc_verdict *out, int http, enum qn_grpc_code code,
                   const char *message, bool accept_encoding)
{
    out->http_status = http;
    out->code = code;
    out->message = message;
    out->accept_encoding = accept_encoding;
    return false;
}

bool qn_grpc_check_request(const struct qn_grpc_req_headers *h, int64_t *timeout_ms,
                           struct qn_grpc_verdict *out)
{
    if (h->method == NULL || strcmp(h->method, "POST") != 0)
        return reject(out, 405, QN_GRPC_INTERNAL, "grpc requires the POST method", false);
    if (!qn_grpc_content_type_ok(h->content_type))
        return reject(out, 415, QN_GRPC_INTERNAL, "content-type must be application/grpc", false);
    if (!qn_grpc_te_ok(h->te))
        return reject(out, 200, QN_GRPC_INTERNAL, "te: trailers is required", false);
    if (!qn_grpc_encoding_ok(h->encoding))
        return reject(out, 200, QN_GRPC_UNIMPLEMENTED,
                      "unsupported grpc-encoding (only identity is accepted)", true);
    int64_t ms = -1;
    if (h->timeout != NULL && qn_grpc_timeout_parse(h->timeout, strlen(h->timeout), &ms) != QN_OK)
        return reject(out, 200, QN_GRPC_INTERNAL, "malformed grpc-timeout", false);
    *timeout_ms = ms;
    return true;
}
