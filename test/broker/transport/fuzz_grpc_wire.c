/*
 * fuzz_grpc_wire.c - libFuzzer target for the gRPC wire reader and encoders
 * (broker/src/transport/grpc_wire.c), with property checks.
 *
 * The first input byte picks a part (byte % 4); the rest is its input:
 *   0 message reader: byte 1 picks the size cap, byte 2 the chunking (0: one
 *     feed; else sizes 1..64 from a small generator); the rest is the DATA
 *     stream. Checked against a direct parse of the same stream: the same
 *     messages in order (flag, length, bytes), none longer than the cap, the
 *     error (QN_ELIMIT over the cap, QN_EBADREQUEST on a flags byte > 1) at the
 *     byte that ends the offending prefix, never more consumed than fed, the
 *     body buffer never beyond the declared length, and at the end is_idle and
 *     pending_len as the parse says. Every message read, re-framed with
 *     qn_grpc_prefix_write, reads back identical (round trip).
 *   1 grpc-timeout: accepted exactly when it is 1-8 digits and one unit of
 *     HMSmun; the value is then ceil(exact duration in ms), saturated at
 *     QN_GRPC_TIMEOUT_MAX_MS (computed here in 128-bit arithmetic), and 0 only
 *     for a zero count; on rejection *ms is untouched.
 *   2 grpc-message percent-encoding: byte 1 picks the output capacity (the
 *     buffer is malloc'd at exactly that size, so ASan sees any overrun). The
 *     encoding is NUL-terminated inside the capacity, printable ASCII, every '%'
 *     starts an upper-case %XX; decoding it gives back a prefix of the input
 *     (the whole input when 3*len+1 fits), in either hex case; a cut never
 *     splits a character of valid UTF-8. Decoding raw input stays in its
 *     capacity and never grows.
 *   3 request headers: up to five '\n'-separated fields (a field "\x01" is
 *     absent) for :method, content-type, te, grpc-encoding, grpc-timeout;
 *     qn_grpc_check_request accepts exactly when each single check does, and a
 *     rejection carries a non-OK code, a message and an HTTP status of 200, 405
 *     or 415.
 * A violation calls __builtin_trap(), which libFuzzer reports.
 * Built only with clang and -DQN_FUZZ=ON (test/broker/transport/grpc_wire.cmake);
 * run by scripts/fuzz.sh with the seeds of fuzz_grpc_wire_seed.c.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "transport/grpc_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

/* ---------------------------------------------------------------- reader */

static const size_t caps[] = {0, 1, 5, 16, 100, 1000, 16384, 70000};

/* What a direct parse of the whole stream expects, message by message. */
struct expect {
    size_t pos; /* stream offset of the current prefix */
};

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads one framed message back through a fresh reader in one feed. */
static void round_trip(size_t max, const struct qn_grpc_msg *m)
{
    size_t n = 5 + (size_t)m->len;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    qn_grpc_prefix_write(buf, m->len);
    CHECK(buf[0] == 0 && be32(buf + 1) == m->len);
    if (m->len)
        memcpy(buf + 5, m->body, m->len);
    struct qn_grpc_reader r;
    qn_grpc_reader_init(&r, max);
    size_t used = 0;
    bool ready = false;
    struct qn_grpc_msg back = {0};
    CHECK(qn_grpc_reader_feed(&r, buf, n, &used, &ready, &back) == QN_OK);
    CHECK(ready && used == n && !back.compressed && back.len == m->len);
    CHECK(m->len == 0 ? back.body == NULL : memcmp(back.body, m->body, m->len) == 0);
    CHECK(qn_grpc_reader_is_idle(&r));
    free(back.body);
    free(buf);
    qn_grpc_reader_reset(&r);
}

static void fuzz_reader(const uint8_t *d, size_t n)
{
    if (n < 2)
        return;
    size_t max = caps[d[0] & 7];
    uint32_t gen = d[1];
    const uint8_t *s = d + 2;
    size_t len = n - 2;

    struct qn_grpc_reader r;
    qn_grpc_reader_init(&r, max);
    struct expect e = {0};
    size_t off = 0;
    bool failed = false;
    while (off < len && !failed) {
        size_t chunk = len - off;
        if (gen != 0) {
            gen = gen * 1103515245u + 12345u;
            size_t c = 1 + (gen >> 16) % 64;
            if (c < chunk)
                chunk = c;
        }
        size_t done = 0;
        while (done < chunk) {
            size_t used = SIZE_MAX;
            bool ready = true;
            struct qn_grpc_msg m = {0};
            int rc = qn_grpc_reader_feed(&r, s + off + done, chunk - done, &used, &ready, &m);
            CHECK(used <= chunk - done);
            size_t at = off + done + used; /* stream offset after this feed */
            /* the parse's view of the message at e.pos */
            CHECK(e.pos + 5 <= at || rc == QN_OK);
            if (rc != QN_OK) {
                CHECK(!ready);
                CHECK(at == e.pos + 5);
                uint8_t flags = s[e.pos];
                uint32_t dl = be32(s + e.pos + 1);
                if (flags > 1)
                    CHECK(rc == QN_EBADREQUEST);
                else
                    CHECK(rc == QN_ELIMIT && dl > max);
                failed = true;
                break;
            }
            if (r.hdr_len == 5)
                CHECK(r.cap <= r.len && r.have <= r.len && r.len <= max);
            if (ready) {
                CHECK(e.pos + 5 <= at);
                uint8_t flags = s[e.pos];
                uint32_t dl = be32(s + e.pos + 1);
                CHECK(flags <= 1 && dl <= max);
                CHECK(at == e.pos + 5 + dl);
                CHECK(m.compressed == (flags == 1) && m.len == dl && m.len <= max);
                CHECK(dl == 0 ? m.body == NULL : memcmp(m.body, s + e.pos + 5, dl) == 0);
                round_trip(max, &m);
                free(m.body);
                e.pos = at;
                CHECK(qn_grpc_reader_is_idle(&r));
            } else {
                CHECK(used == chunk - done);
                CHECK(m.body == NULL);
            }
            done += used;
        }
        off += chunk;
    }
    if (!failed) {
        /* the whole stream was consumed; what is left of it is a partial message */
        size_t rest = len - e.pos;
        CHECK(qn_grpc_reader_is_idle(&r) == (rest == 0));
        uint32_t pending = rest >= 5 ? be32(s + e.pos + 1) : 0;
        CHECK(qn_grpc_reader_pending_len(&r) == pending);
        if (rest >= 5)
            CHECK(s[e.pos] <= 1 && pending <= max && rest < 5 + (size_t)pending);
    }
    qn_grpc_reader_reset(&r);
    CHECK(qn_grpc_reader_is_idle(&r) && r.body == NULL && r.max == max);
}

/* ---------------------------------------------------------------- grpc-timeout */

static void fuzz_timeout(const uint8_t *d, size_t n)
{
    if (n > 16)
        n = 16;
    const char *s = (const char *)d;
    bool valid = n >= 2 && n <= 9;
    uint64_t v = 0;
    for (size_t i = 0; valid && i + 1 < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            valid = false;
        else
            v = v * 10 + (uint64_t)(s[i] - '0');
    }
    unsigned __int128 unit_ns = 0;
    if (valid) {
        switch (s[n - 1]) {
        case 'H':
            unit_ns = (unsigned __int128)3600 * 1000000000u;
            break;
        case 'M':
            unit_ns = (unsigned __int128)60 * 1000000000u;
            break;
        case 'S':
            unit_ns = 1000000000u;
            break;
        case 'm':
            unit_ns = 1000000u;
            break;
        case 'u':
            unit_ns = 1000u;
            break;
        case 'n':
            unit_ns = 1u;
            break;
        default:
            valid = false;
        }
    }
    int64_t ms = -12345;
    int rc = qn_grpc_timeout_parse(s, n, &ms);
    if (!valid) {
        CHECK(rc == QN_EINVAL && ms == -12345);
        return;
    }
    CHECK(rc == QN_OK);
    unsigned __int128 ns = (unsigned __int128)v * unit_ns;
    unsigned __int128 want = (ns + 999999u) / 1000000u;
    if (want > (unsigned __int128)QN_GRPC_TIMEOUT_MAX_MS)
        want = QN_GRPC_TIMEOUT_MAX_MS;
    CHECK(ms >= 0 && ms <= QN_GRPC_TIMEOUT_MAX_MS);
    CHECK((unsigned __int128)ms == want);
    CHECK((ms == 0) == (v == 0));
}

/* ---------------------------------------------------------------- grpc-message */

static bool plain(uint8_t c)
{
    return c >= 0x20 && c <= 0x7e && c != '%';
}

static bool is_hex_upper(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

/* Well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF). */
static bool utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1, cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2, cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

static void fuzz_pct(const uint8_t *d, size_t n)
{
    if (n < 1)
        return;
    const uint8_t *in = d + 1;
    size_t len = n - 1;
    size_t cap = d[0] == 255 ? 3 * len + 1 : (size_t)d[0] + 1;
    char *enc = malloc(cap);
    char *dec = malloc(len + 1);
    char *dec2 = malloc(len + 1);
    CHECK(enc && dec && dec2);

    size_t en = qn_grpc_pct_encode((const char *)in, len, enc, cap);
    CHECK(en < cap && enc[en] == '\0' && strlen(enc) == en);
    for (size_t i = 0; i < en; i++) {
        CHECK((uint8_t)enc[i] >= 0x20 && (uint8_t)enc[i] <= 0x7e);
        if (enc[i] == '%')
            CHECK(i + 2 < en && is_hex_upper(enc[i + 1]) && is_hex_upper(enc[i + 2]));
    }
    size_t k = qn_grpc_pct_decode(enc, en, dec, len + 1);
    CHECK(k <= len && dec[k] == '\0' && memcmp(dec, in, k) == 0);
    size_t want_en = 0;
    for (size_t i = 0; i < k; i++)
        want_en += plain(in[i]) ? 1 : 3;
    CHECK(want_en == en); /* the encoding is exactly the first k bytes */
    if (cap >= 3 * len + 1)
        CHECK(k == len);
    if (k < len) {
        CHECK(cap - 1 - en < 12); /* stopped only when a character did not fit */
        if (utf8_valid(in, len))
            CHECK((in[k] & 0xc0) != 0x80); /* never inside a character */
    }
    /* the same encoding in lower-case hex decodes the same */
    for (size_t i = 0; i < en; i++) {
        if (enc[i] != '%')
            continue;
        for (size_t j = i + 1; j <= i + 2; j++)
            if (enc[j] >= 'A' && enc[j] <= 'F')
                enc[j] = (char)(enc[j] - 'A' + 'a');
        i += 2;
    }
    size_t k2 = qn_grpc_pct_decode(enc, en, dec2, len + 1);
    CHECK(k2 == k && memcmp(dec, dec2, k) == 0);
    free(enc);
    free(dec);
    free(dec2);

    /* decoding raw input: within the capacity, never longer than the input */
    size_t dcap = (size_t)d[0] % 64 + 1;
    char *raw = malloc(dcap);
    CHECK(raw != NULL);
    size_t rn = qn_grpc_pct_decode((const char *)in, len, raw, dcap);
    CHECK(rn < dcap && rn <= len && raw[rn] == '\0');
    free(raw);
}

/* ---------------------------------------------------------------- request headers */

static void fuzz_headers(const uint8_t *d, size_t n)
{
    char *buf = malloc(n + 1);
    CHECK(buf != NULL);
    memcpy(buf, d, n);
    buf[n] = '\0';
    const char *f[5] = {NULL, NULL, NULL, NULL, NULL};
    char *p = buf;
    for (int i = 0; i < 5 && p != NULL; i++) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        f[i] = strcmp(p, "\x01") == 0 ? NULL : p;
        p = nl ? nl + 1 : NULL;
    }
    struct qn_grpc_req_headers h = {f[0], f[1], f[2], f[3], f[4]};
    int64_t tmo = -7;
    struct qn_grpc_verdict v;
    memset(&v, 0xa5, sizeof v);
    bool ok = qn_grpc_check_request(&h, &tmo, &v);
    int64_t parsed = -1;
    bool tmo_ok =
        h.timeout == NULL || qn_grpc_timeout_parse(h.timeout, strlen(h.timeout), &parsed) == QN_OK;
    bool want = h.method != NULL && strcmp(h.method, "POST") == 0 &&
                qn_grpc_content_type_ok(h.content_type) && qn_grpc_te_ok(h.te) &&
                qn_grpc_encoding_ok(h.encoding) && tmo_ok;
    CHECK(ok == want);
    if (ok) {
        CHECK(tmo == (h.timeout == NULL ? -1 : parsed));
    } else {
        CHECK(tmo == -7);
        CHECK(v.http_status == 200 || v.http_status == 405 || v.http_status == 415);
        CHECK(v.code != QN_GRPC_OK && v.message != NULL && v.message[0] != '\0');
        CHECK(!v.accept_encoding || v.code == QN_GRPC_UNIMPLEMENTED);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 4) {
    case 0:
        fuzz_reader(data + 1, size - 1);
        break;
    case 1:
        fuzz_timeout(data + 1, size - 1);
        break;
    case 2:
        fuzz_pct(data + 1, size - 1);
        break;
    default:
        fuzz_headers(data + 1, size - 1);
        break;
    }
    return 0;
}
