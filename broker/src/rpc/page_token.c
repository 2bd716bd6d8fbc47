/*
 * rpc/page_token.c - the admin listings' page tokens (see page_token.h for
 * the format and what the binding does and does not protect).
 *
 * Does: encode a keyset position with its binding; decode and check every
 * byte of a client's token before any of it reaches SQL.
 * Does not: know the listings' SQL or the admin calls.
 *
 * Invariants:
 * 1. A decoded key is exactly what was encoded: text keys are NUL-free, at
 *    most QN_NAME_MAX bytes, and their count is the kind's.
 * 2. Decoding reads at most QN_PAGE_TOKEN_MAX characters and writes no byte
 *    of *k unless the whole token is valid.
 */
#include "rpc/page_token.h"

#include <string.h>

#include "queen/b64.h"
#include "queen/error.h"

#define TOKEN_VERSION 1
/* Raw bytes of the largest token: header, count, three maximal keys. */
#define RAW_MAX (1 + 1 + 8 + 1 + QN_PAGE_KEYS_MAX * (2 + QN_NAME_MAX))

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t qn_page_binding(enum qn_page_kind kind, const uint8_t *tenant, const char *const *filters,
                         size_t n_filters)
{
    static const uint8_t default_tenant[16] = {[15] = 1};
    uint64_t h = 0xcbf29ce484222325ull;
    uint8_t k = (uint8_t)kind;
    h = fnv(h, &k, 1);
    h = fnv(h, tenant ? tenant : default_tenant, 16);
    for (size_t i = 0; i < n_filters; i++) {
        const char *f = filters[i] ? filters[i] : "";
        uint32_t len = (uint32_t)strlen(f);
        h = fnv(h, &len, sizeof len); /* length-prefixed: ("ab","") != ("a","b") */
        h = fnv(h, f, len);
    }
    return h;
}

uint32_t qn_page_size(uint32_t page_size, uint32_t legacy_limit)
{
    uint32_t n = page_size ? page_size : legacy_limit ? legacy_limit : QN_PAGE_DEFAULT;
    return n > QN_PAGE_MAX ? QN_PAGE_MAX : n;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int qn_page_key_set_text(struct qn_page_key *k, size_t i, const char *s)
{
    size_t len = strnlen(s, QN_NAME_MAX + 1);
    if (i >= QN_PAGE_KEYS_MAX || len > QN_NAME_MAX)
        return QN_EINVAL;
    memcpy(k->text[i], s, len);
    k->text[i][len] = '\0';
    if (k->n_text < i + 1)
        k->n_text = i + 1;
    return QN_OK;
}

int qn_page_token_encode(enum qn_page_kind kind, uint64_t binding, const struct qn_page_key *k,
                         char *out, size_t cap)
{
    uint8_t raw[RAW_MAX];
    size_t n = 0;
    if (cap > 0)
        out[0] = '\0';
    raw[n++] = TOKEN_VERSION;
    raw[n++] = (uint8_t)kind;
    put_u64(raw + n, binding);
    n += 8;
    if (kind == QN_PAGE_DLQ) {
        put_u64(raw + n, (uint64_t)k->ts_us);
        n += 8;
        memcpy(raw + n, k->id, 16);
        n += 16;
    } else {
        if (k->n_text == 0 || k->n_text > QN_PAGE_KEYS_MAX)
            return QN_EINVAL;
        raw[n++] = (uint8_t)k->n_text;
        for (size_t i = 0; i < k->n_text; i++) {
            size_t len = strnlen(k->text[i], QN_NAME_MAX + 1);
            if (len > QN_NAME_MAX)
                return QN_EINVAL;
            raw[n++] = (uint8_t)(len & 0xff);
            raw[n++] = (uint8_t)(len >> 8);
            memcpy(raw + n, k->text[i], len);
            n += len;
        }
    }
    size_t need = qn_b64_encoded_len(n, false) + 1;
    if (need > cap || need > QN_PAGE_TOKEN_MAX + 1)
        return QN_EINVAL;
    qn_b64_encode(QN_B64_URL, false, raw, n, out);
    return QN_OK;
}

#define BAD(msg)                                                                                   \
    do {                                                                                           \
        *why = (msg);                                                                              \
        return QN_EINVAL;                                                                          \
    } while (0)

int qn_page_token_decode(const char *tok, enum qn_page_kind kind, uint64_t binding,
                         size_t n_text_expected, struct qn_page_key *k, const char **why)
{
    uint8_t raw[RAW_MAX];
    size_t len = strnlen(tok, QN_PAGE_TOKEN_MAX + 1);
    if (len > QN_PAGE_TOKEN_MAX)
        BAD("page_token is too long");
    long got = qn_b64_decode(QN_B64_URL, QN_B64_NOPAD, tok, len, raw, sizeof raw);
    if (got < 0)
        BAD("page_token is malformed");
    size_t n = (size_t)got;
    if (n < 10 || raw[0] != TOKEN_VERSION)
        BAD("page_token is malformed");
    if (raw[1] != (uint8_t)kind)
        BAD("page_token belongs to another listing");
    if (get_u64(raw + 2) != binding)
        BAD("page_token was issued for other filters or another tenant");
    struct qn_page_key out;
    memset(&out, 0, sizeof out);
    size_t p = 10;
    if (kind == QN_PAGE_DLQ) {
        if (n != p + 24)
            BAD("page_token is malformed");
        out.ts_us = (int64_t)get_u64(raw + p);
        memcpy(out.id, raw + p + 8, 16);
    } else {
        if (p >= n || raw[p] != n_text_expected || n_text_expected > QN_PAGE_KEYS_MAX)
            BAD("page_token is malformed");
        out.n_text = raw[p++];
        for (size_t i = 0; i < out.n_text; i++) {
            if (p + 2 > n)
                BAD("page_token is malformed");
            size_t l = (size_t)raw[p] | (size_t)raw[p + 1] << 8;
            p += 2;
            if (l > QN_NAME_MAX || p + l > n || memchr(raw + p, '\0', l) != NULL)
                BAD("page_token is malformed");
            memcpy(out.text[i], raw + p, l);
            out.text[i][l] = '\0';
            p += l;
        }
        if (p != n)
            BAD("page_token is malformed");
    }
    *k = out;
    return QN_OK;
}
