/*
 * b64.c - base64 (RFC 4648), both alphabets; see queen/b64.h.
 */
#include "queen/b64.h"

#include "queen/error.h"

#define PAD 64 /* the sextet value '=' decodes to */

static const char ALPHA[2][65] = {
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
};

static int sextet(uint8_t c, unsigned alpha)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (alpha == QN_B64_URL ? '-' : '+'))
        return 62;
    if (c == (alpha == QN_B64_URL ? '_' : '/'))
        return 63;
    if (c == '=')
        return PAD;
    return -1;
}

void qn_b64_dec_init(struct qn_b64_dec *d, enum qn_b64_alphabet alpha, unsigned flags)
{
    d->nq = 0;
    d->alpha = (uint8_t)alpha;
    d->flags = (uint8_t)flags;
    d->ended = 0;
}

/* The bytes of a quantum of nq sextets (2..4, no padding among them); QN_EINVAL
 * when the unused low bits of the last sextet are not zero. */
static int quantum(const uint8_t *q, size_t nq, uint8_t *out, size_t *o, size_t cap)
{
    uint32_t w = 0;
    for (size_t i = 0; i < 4; i++)
        w = w << 6 | (i < nq ? q[i] : 0);
    size_t k = nq - 1; /* 4 sextets: 3 bytes, 3: 2, 2: 1 */
    if ((k == 1 && (w & 0xFFFF)) || (k == 2 && (w & 0xFF)))
        return QN_EINVAL;
    if (cap - *o < k)
        return QN_ELIMIT;
    for (size_t i = 0; i < k; i++)
        out[(*o)++] = (uint8_t)(w >> (16 - 8 * i));
    return QN_OK;
}

int qn_b64_dec_feed(struct qn_b64_dec *d, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                    size_t *outlen)
{
    size_t o = 0;
    *outlen = 0;
    for (size_t i = 0; i < len; i++) {
        int v = sextet(in[i], d->alpha);
        if (v < 0 || d->ended || (v == PAD && (d->flags & QN_B64_NOPAD)))
            return QN_EINVAL;
        d->q[d->nq++] = (uint8_t)v;
        if (d->nq < 4)
            continue;
        d->nq = 0;
        /* padding only at the end of a quantum: xx==, xxx= */
        size_t n = 4;
        if (d->q[3] == PAD)
            n = d->q[2] == PAD ? 2 : 3;
        for (size_t j = 0; j < n; j++)
            if (d->q[j] == PAD)
                return QN_EINVAL;
        int rc = quantum(d->q, n, out, &o, cap);
        if (rc != QN_OK)
            return rc;
        if (n < 4 && !(d->flags & QN_B64_RUNS))
            d->ended = 1;
        *outlen = o;
    }
    *outlen = o;
    return QN_OK;
}

int qn_b64_dec_finish(struct qn_b64_dec *d, uint8_t *out, size_t cap, size_t *outlen)
{
    size_t o = 0;
    *outlen = 0;
    if (d->nq == 0)
        return QN_OK;
    if (!(d->flags & QN_B64_NOPAD) || d->nq == 1)
        return QN_EINVAL;
    int rc = quantum(d->q, d->nq, out, &o, cap);
    if (rc == QN_OK) {
        d->nq = 0;
        *outlen = o;
    }
    return rc;
}

long qn_b64_decode(enum qn_b64_alphabet alpha, unsigned flags, const char *s, size_t len,
                   uint8_t *out, size_t cap)
{
    struct qn_b64_dec d;
    size_t a = 0, b = 0;
    qn_b64_dec_init(&d, alpha, flags);
    if (qn_b64_dec_feed(&d, (const uint8_t *)s, len, out, cap, &a) != QN_OK ||
        qn_b64_dec_finish(&d, out + a, cap - a, &b) != QN_OK)
        return -1;
    return (long)(a + b);
}

void qn_b64_enc_init(struct qn_b64_enc *e, enum qn_b64_alphabet alpha, bool pad)
{
    e->ncarry = 0;
    e->alpha = (uint8_t)alpha;
    e->pad = pad;
}

/* n (1..3) bytes of g as n + 1 chars, then padding up to 4 when asked. */
static size_t group(const char *al, const uint8_t *g, size_t n, bool pad, char *out)
{
    uint32_t w = (uint32_t)g[0] << 16 | (n > 1 ? (uint32_t)g[1] << 8 : 0) | (n > 2 ? g[2] : 0);
    size_t o = 0;
    for (size_t i = 0; i <= n; i++)
        out[o++] = al[(w >> (18 - 6 * i)) & 63];
    while (pad && o < 4)
        out[o++] = '=';
    return o;
}

size_t qn_b64_enc_feed(struct qn_b64_enc *e, const uint8_t *in, size_t len, char *out)
{
    const char *al = ALPHA[e->alpha == QN_B64_URL];
    size_t o = 0, i = 0;
    while (e->ncarry + (len - i) >= 3) {
        uint8_t g[3];
        size_t k = 0;
        for (; k < e->ncarry; k++)
            g[k] = e->carry[k];
        for (; k < 3; k++)
            g[k] = in[i++];
        e->ncarry = 0;
        o += group(al, g, 3, false, out + o);
    }
    while (i < len)
        e->carry[e->ncarry++] = in[i++];
    return o;
}

size_t qn_b64_enc_finish(struct qn_b64_enc *e, char *out)
{
    if (e->ncarry == 0)
        return 0;
    size_t n = group(ALPHA[e->alpha == QN_B64_URL], e->carry, e->ncarry, e->pad, out);
    e->ncarry = 0;
    return n;
}

size_t qn_b64_encoded_len(size_t n, bool pad)
{
    return pad ? (n + 2) / 3 * 4 : n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

size_t qn_b64_encode(enum qn_b64_alphabet alpha, bool pad, const uint8_t *in, size_t n, char *out)
{
    struct qn_b64_enc e;
    qn_b64_enc_init(&e, alpha, pad);
    size_t o = qn_b64_enc_feed(&e, in, n, out);
    o += qn_b64_enc_finish(&e, out + o);
    out[o] = '\0';
    return o;
}
