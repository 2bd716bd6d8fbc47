/*
 * fuzz_http_wire.c - libFuzzer target for the side port's request parsing
 * (broker/src/transport/http_wire.c): the HTTP/1.1 request head and the
 * gRPC-Web text mode's base64, with property checks.
 *
 * The first input byte picks the limit and a split point; the rest is the
 * request. Properties (abort on violation):
 *   1. A complete head lies within the input and within the limit; every field
 *      and the request line point inside it; a Content-Length is >= 0.
 *   2. Parsing only the head's bytes gives the same verdict and length (what
 *      follows a head never changes it); parsing a strict prefix of the head
 *      never claims a complete head.
 *   3. A refusal carries one of the documented statuses.
 *   4. base64: decoding in two feeds split anywhere equals decoding in one;
 *      what the encoder writes (fed in two pieces) decodes back to its input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queen/b64.h"
#include "queen/error.h"
#include "transport/http_wire.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            abort();                                                                               \
    } while (0)

static bool inside(const uint8_t *buf, size_t len, const char *p, size_t n)
{
    return (const uint8_t *)p >= buf && (const uint8_t *)p + n <= buf + len;
}

static void head_props(const uint8_t *buf, size_t len, size_t max)
{
    struct qn_http_head h;
    bool complete = false;
    int status = 0;
    int rc = qn_http_parse_head(buf, len, max, &h, &complete, &status);
    if (rc != QN_OK) {
        CHECK(rc == QN_EBADREQUEST);
        CHECK(status == 400 || status == 411 || status == 414 || status == 431 || status == 505);
        return;
    }
    if (!complete) {
        CHECK(len < max);
        return;
    }
    CHECK(h.head_len <= len && h.head_len <= max);
    CHECK(inside(buf, h.head_len, h.method, h.method_len) && h.method_len > 0);
    CHECK(inside(buf, h.head_len, h.target, h.target_len) && h.target_len > 0);
    CHECK(h.minor == 0 || h.minor == 1);
    CHECK(h.nfields <= QN_HTTP_MAX_FIELDS);
    for (size_t i = 0; i < h.nfields; i++) {
        CHECK(inside(buf, h.head_len, h.fields[i].name, h.fields[i].name_len));
        CHECK(inside(buf, h.head_len, h.fields[i].value, h.fields[i].value_len));
        CHECK(memchr(h.fields[i].value, '\n', h.fields[i].value_len) == NULL);
        CHECK(memchr(h.fields[i].value, '\0', h.fields[i].value_len) == NULL);
    }
    CHECK(h.content_length >= -1);
    size_t vlen;
    (void)qn_http_field(&h, "content-type", &vlen);
    (void)qn_grpcweb_mode_of(qn_http_field(&h, "content-type", &vlen), vlen);

    /* 2: the head alone, and a strict prefix of it */
    struct qn_http_head h2;
    bool c2 = false;
    int s2 = 0;
    CHECK(qn_http_parse_head(buf, h.head_len, max, &h2, &c2, &s2) == QN_OK);
    CHECK(c2 && h2.head_len == h.head_len && h2.nfields == h.nfields);
    CHECK(h2.content_length == h.content_length && h2.keep_alive == h.keep_alive);
    if (h.head_len > 1) {
        c2 = false;
        int rc3 = qn_http_parse_head(buf, h.head_len - 1, max, &h2, &c2, &s2);
        CHECK(rc3 != QN_OK || !c2);
    }
}

static void b64_props(const uint8_t *data, size_t len, size_t split)
{
    if (split > len)
        split = len;
    uint8_t *one = malloc(3 * (len + 3) / 4 + 8), *two = malloc(3 * (len + 3) / 4 + 8);
    CHECK(one != NULL && two != NULL);
    struct qn_b64_dec d1, d2;
    qn_b64_dec_init(&d1, QN_B64_STD, QN_B64_RUNS);
    qn_b64_dec_init(&d2, QN_B64_STD, QN_B64_RUNS);
    size_t n1 = 0, na = 0, nb = 0;
    size_t cap = 3 * (len + 3) / 4 + 8;
    int r1 = qn_b64_dec_feed(&d1, data, len, one, cap, &n1);
    int ra = qn_b64_dec_feed(&d2, data, split, two, cap, &na);
    int rb =
        ra == QN_OK ? qn_b64_dec_feed(&d2, data + split, len - split, two + na, cap - na, &nb) : ra;
    CHECK((r1 == QN_OK) == (rb == QN_OK));
    if (r1 == QN_OK) {
        CHECK(n1 == na + nb && memcmp(one, two, n1) == 0);
        size_t f1 = 0, f2 = 0;
        CHECK(qn_b64_dec_finish(&d1, one, cap, &f1) == qn_b64_dec_finish(&d2, two, cap, &f2));
    }
    free(one);
    free(two);

    /* the encoder's text, fed in two pieces, decodes back to the input */
    char *text = malloc(4 * (len + 2) / 3 + 16);
    uint8_t *back = malloc(len + 8);
    CHECK(text != NULL && back != NULL);
    struct qn_b64_enc e;
    qn_b64_enc_init(&e, QN_B64_STD, true);
    size_t t = qn_b64_enc_feed(&e, data, split, text);
    t += qn_b64_enc_feed(&e, data + split, len - split, text + t);
    t += qn_b64_enc_finish(&e, text + t);
    CHECK(t == 4 * ((len + 2) / 3));
    struct qn_b64_dec d3;
    qn_b64_dec_init(&d3, QN_B64_STD, QN_B64_RUNS);
    size_t nback = 0;
    CHECK(qn_b64_dec_feed(&d3, (const uint8_t *)text, t, back, len + 8, &nback) == QN_OK);
    size_t ftail = 0;
    CHECK(qn_b64_dec_finish(&d3, back, len + 8, &ftail) == QN_OK && ftail == 0);
    CHECK(nback == len && (len == 0 || memcmp(back, data, len) == 0));
    free(text);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    /* a copy of exactly len bytes, so a read past the end is a sanitizer report */
    uint8_t *buf = malloc(len ? len : 1);
    CHECK(buf != NULL);
    if (len > 0)
        memcpy(buf, in, len);
    size_t max = (sel & 1) ? 1024 + (size_t)(sel >> 1) * 64 : 16384;
    head_props(buf, len, max);
    b64_props(buf, len, len ? (size_t)sel % (len + 1) : 0);

    uint8_t frame[5 + 64 + 64];
    char code[8] = "0";
    char msg[32];
    size_t ml = len < sizeof msg - 1 ? len : sizeof msg - 1;
    memcpy(msg, buf, ml);
    msg[ml] = '\0';
    size_t fl = qn_grpcweb_trailer_frame(code, msg, frame, sizeof frame);
    CHECK(fl == 0 ||
          (frame[0] == 0x80 && fl == 5 + ((size_t)frame[1] << 24 | (size_t)frame[2] << 16 |
                                          (size_t)frame[3] << 8 | frame[4])));
    free(buf);
    return 0;
}
