/*
 * envelope.c - AES-256-GCM payload envelopes under a key ring (codec/SPEC.md 6).
 *
 * What it does: parses key ring text into an immutable ring; encrypts a payload
 * under the ring's active key into the binary envelope; decrypts an envelope
 * with whichever key its id names; reads Queen MQ's JSON envelope.
 * What it deliberately does not: read files, write Queen MQ's JSON form, keep
 * any state outside a ring, or cache cipher contexts (one EVP_CIPHER_CTX per
 * call keeps a ring safe to share between threads without locks).
 *
 * Invariants:
 *   1. A ring is never modified after qn_keyring_parse() returns it.
 *   2. Key bytes live only inside a ring (and OpenSSL's context for the length
 *      of one call) and are wiped with OPENSSL_cleanse when the ring is freed.
 *   3. Decryption writes to the caller's buffer only what it then either
 *      authenticates or wipes: on any failure the bytes it wrote are cleared
 *      and *written is untouched, so ciphertext or unauthenticated plaintext is
 *      never handed out as a payload.
 *   4. The envelope header (version, key id) is GCM additional data, ahead of
 *      the caller's; a header names exactly one key, so no key is tried twice.
 *   5. Every length read from an envelope is checked against the bytes present
 *      before it is used; every size is bounded (QN_ENVELOPE_PAYLOAD_MAX,
 *      QN_ENVELOPE_AAD_MAX, QN_KEYRING_TEXT_MAX).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "queen/b64.h"
#include "queen/envelope.h"
#include "queen/error.h"

struct qn_key {
    size_t id_len;              /* 1..QN_KEY_ID_MAX */
    char id[QN_KEY_ID_MAX + 1]; /* NUL-terminated, [A-Za-z0-9._-] */
    uint8_t key[QN_ENVELOPE_KEY_LEN];
};

struct qn_keyring {
    EVP_CIPHER *cipher; /* AES-256-GCM, fetched once per ring */
    size_t n;           /* 1..QN_KEYRING_MAX_KEYS */
    size_t active;      /* n - 1: the last key line of the file */
    struct qn_key keys[QN_KEYRING_MAX_KEYS];
};

/* ---- key ring ---- */

static bool id_char(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool blank(uint8_t c)
{
    return c == ' ' || c == '\t';
}

static const struct qn_key *find_key(const qn_keyring *kr, const uint8_t *id, size_t id_len)
{
    for (size_t i = 0; i < kr->n; i++)
        if (kr->keys[i].id_len == id_len && memcmp(kr->keys[i].id, id, id_len) == 0)
            return &kr->keys[i];
    return NULL;
}

/* One non-comment line [p, e) -> kr->keys[kr->n]. */
static int parse_line(qn_keyring *kr, const uint8_t *p, const uint8_t *e)
{
    const uint8_t *id = p;
    while (p < e && !blank(*p))
        p++;
    size_t id_len = (size_t)(p - id);
    if (id_len == 0 || id_len > QN_KEY_ID_MAX)
        return QN_EKEYRING_PARSE;
    for (size_t i = 0; i < id_len; i++)
        if (!id_char(id[i]))
            return QN_EKEYRING_PARSE;
    if (find_key(kr, id, id_len))
        return QN_EKEYRING_PARSE;
    if (p == e)
        return QN_EKEYRING_PARSE;
    while (p < e && blank(*p))
        p++;
    const uint8_t *hex = p;
    while (p < e && !blank(*p))
        p++;
    if ((size_t)(p - hex) != 2 * QN_ENVELOPE_KEY_LEN)
        return QN_EKEYRING_PARSE;
    while (p < e && blank(*p))
        p++;
    if (p != e)
        return QN_EKEYRING_PARSE;
    if (kr->n == QN_KEYRING_MAX_KEYS)
        return QN_EKEYRING_PARSE;
    struct qn_key *k = &kr->keys[kr->n];
    for (size_t i = 0; i < QN_ENVELOPE_KEY_LEN; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            OPENSSL_cleanse(k->key, sizeof k->key);
            return QN_EKEYRING_PARSE;
        }
        k->key[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(k->id, id, id_len);
    k->id[id_len] = '\0';
    k->id_len = id_len;
    kr->n++;
    return QN_OK;
}

int qn_keyring_parse(const uint8_t *text, size_t len, qn_keyring **out, size_t *err_line)
{
    if (!out || (!text && len))
        return QN_EINVAL;
    if (err_line)
        *err_line = 0;
    if (len > QN_KEYRING_TEXT_MAX)
        return QN_EKEYRING_PARSE;
    qn_keyring *kr = calloc(1, sizeof *kr);
    if (!kr)
        return QN_ENOMEM;
    int rc = QN_OK;
    size_t line = 0;
    const uint8_t *p = text, *end = text + len;
    while (p < end) {
        line++;
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *e = nl ? nl : end;
        const uint8_t *next = nl ? nl + 1 : end;
        if (e > p && e[-1] == '\r')
            e--;
        while (p < e && blank(*p))
            p++;
        if (p < e && *p != '#') {
            rc = parse_line(kr, p, e);
            if (rc != QN_OK)
                goto out;
        }
        p = next;
    }
    line = 0;
    if (kr->n == 0) {
        rc = QN_EKEYRING_PARSE;
        goto out;
    }
    kr->active = kr->n - 1;
    kr->cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    if (!kr->cipher) {
        rc = QN_ECRYPTO;
        goto out;
    }
out:
    if (rc != QN_OK) {
        if (err_line)
            *err_line = line;
        qn_keyring_free(kr);
        return rc;
    }
    *out = kr;
    return QN_OK;
}

void qn_keyring_free(qn_keyring *kr)
{
    if (!kr)
        return;
    EVP_CIPHER_free(kr->cipher);
    OPENSSL_cleanse(kr, sizeof *kr);
    free(kr);
}

size_t qn_keyring_count(const qn_keyring *kr)
{
    return kr ? kr->n : 0;
}

const char *qn_keyring_active_id(const qn_keyring *kr)
{
    return kr ? kr->keys[kr->active].id : "";
}

bool qn_keyring_has(const qn_keyring *kr, const uint8_t *id, size_t id_len)
{
    return kr && (id || !id_len) && find_key(kr, id, id_len) != NULL;
}

/* ---- GCM ---- */

/*
 * One AES-256-GCM pass. enc: encrypt in -> out and write tag; else decrypt
 * in -> out and verify tag. aad1 and aad2 are fed in order (either may be empty).
 * Returns QN_OK, QN_EENVELOPE_AUTH (decrypt: tag mismatch), QN_ECRYPTO, QN_ENOMEM.
 * On failure the first n bytes of out are wiped.
 */
static int gcm(const qn_keyring *kr, bool enc, const uint8_t *key, const uint8_t *iv, size_t iv_len,
               const uint8_t *aad1, size_t aad1_len, const uint8_t *aad2, size_t aad2_len,
               const uint8_t *in, size_t n, uint8_t *out, uint8_t *tag)
{
    /* All lengths are bounded far below INT_MAX by the callers. */
    if (n > INT_MAX || aad1_len > INT_MAX || aad2_len > INT_MAX)
        return QN_ECRYPTO;
    int rc = QN_ECRYPTO, l = 0;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return QN_ENOMEM;
    if (EVP_CipherInit_ex2(ctx, kr->cipher, NULL, NULL, enc ? 1 : 0, NULL) != 1)
        goto out;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, (int)iv_len, NULL) != 1)
        goto out;
    if (EVP_CipherInit_ex2(ctx, NULL, key, iv, enc ? 1 : 0, NULL) != 1)
        goto out;
    if (aad1_len && EVP_CipherUpdate(ctx, NULL, &l, aad1, (int)aad1_len) != 1)
        goto out;
    if (aad2_len && EVP_CipherUpdate(ctx, NULL, &l, aad2, (int)aad2_len) != 1)
        goto out;
    if (n && EVP_CipherUpdate(ctx, out, &l, in, (int)n) != 1)
        goto out;
    if (!enc &&
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, QN_ENVELOPE_TAG_LEN, (void *)tag) != 1)
        goto out;
    /* GCM produces no bytes at the end; a scratch buffer keeps `out + n` out of it. */
    uint8_t scratch[16];
    if (EVP_CipherFinal_ex(ctx, scratch, &l) != 1) {
        rc = enc ? QN_ECRYPTO : QN_EENVELOPE_AUTH;
        goto out;
    }
    if (enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, QN_ENVELOPE_TAG_LEN, tag) != 1)
        goto out;
    rc = QN_OK;
out:
    EVP_CIPHER_CTX_free(ctx);
    if (rc != QN_OK && n)
        OPENSSL_cleanse(out, n);
    return rc;
}

/* ---- binary envelope ---- */

int qn_envelope_size(const qn_keyring *kr, size_t payload_len, size_t *size)
{
    if (!kr || !size)
        return QN_EINVAL;
    if (payload_len > QN_ENVELOPE_PAYLOAD_MAX)
        return QN_ELIMIT;
    *size = QN_ENVELOPE_OVERHEAD(kr->keys[kr->active].id_len) + payload_len;
    return QN_OK;
}

int qn_envelope_encrypt(const qn_keyring *kr, const uint8_t *aad, size_t aad_len,
                        const uint8_t *payload, size_t payload_len, uint8_t *out, size_t cap,
                        size_t *written)
{
    if (!kr || !written || (!payload && payload_len) || (!aad && aad_len) || (!out && cap))
        return QN_EINVAL;
    if (aad_len > QN_ENVELOPE_AAD_MAX)
        return QN_ELIMIT;
    size_t need;
    int rc = qn_envelope_size(kr, payload_len, &need);
    if (rc != QN_OK)
        return rc;
    if (need > cap)
        return QN_ERANGE;
    const struct qn_key *k = &kr->keys[kr->active];
    size_t hdr = 2 + k->id_len;
    out[0] = QN_ENVELOPE_VERSION;
    out[1] = (uint8_t)k->id_len;
    memcpy(out + 2, k->id, k->id_len);
    uint8_t *iv = out + hdr;
    if (RAND_bytes(iv, QN_ENVELOPE_IV_LEN) != 1) {
        OPENSSL_cleanse(out, need);
        return QN_ECRYPTO;
    }
    uint8_t *ct = iv + QN_ENVELOPE_IV_LEN;
    rc = gcm(kr, true, k->key, iv, QN_ENVELOPE_IV_LEN, out, hdr, aad, aad_len, payload, payload_len,
             ct, ct + payload_len);
    if (rc != QN_OK) {
        OPENSSL_cleanse(out, need);
        return rc;
    }
    *written = need;
    return QN_OK;
}

int qn_envelope_inspect(const uint8_t *env, size_t len, const uint8_t **key_id, size_t *key_id_len,
                        size_t *payload_len)
{
    if (!env && len)
        return QN_EINVAL;
    if (len < 2 || env[0] != QN_ENVELOPE_VERSION)
        return QN_EENVELOPE_MALFORMED;
    size_t id_len = env[1];
    if (id_len == 0 || id_len > QN_KEY_ID_MAX)
        return QN_EENVELOPE_MALFORMED;
    if (len - 2 < id_len + QN_ENVELOPE_IV_LEN + QN_ENVELOPE_TAG_LEN)
        return QN_EENVELOPE_MALFORMED;
    for (size_t i = 0; i < id_len; i++)
        if (!id_char(env[2 + i]))
            return QN_EENVELOPE_MALFORMED;
    size_t plen = len - QN_ENVELOPE_OVERHEAD(id_len);
    if (plen > QN_ENVELOPE_PAYLOAD_MAX)
        return QN_EENVELOPE_MALFORMED;
    if (key_id)
        *key_id = env + 2;
    if (key_id_len)
        *key_id_len = id_len;
    if (payload_len)
        *payload_len = plen;
    return QN_OK;
}

int qn_envelope_decrypt(const qn_keyring *kr, const uint8_t *aad, size_t aad_len,
                        const uint8_t *env, size_t len, uint8_t *out, size_t cap, size_t *written)
{
    if (!kr || !written || (!aad && aad_len) || (!out && cap))
        return QN_EINVAL;
    const uint8_t *id;
    size_t id_len, plen;
    int rc = qn_envelope_inspect(env, len, &id, &id_len, &plen);
    if (rc != QN_OK)
        return rc;
    const struct qn_key *k = find_key(kr, id, id_len);
    if (!k)
        return QN_EENVELOPE_UNKNOWN_KEY;
    if (plen > cap)
        return QN_ERANGE;
    if (aad_len > QN_ENVELOPE_AAD_MAX)
        return QN_ELIMIT;
    size_t hdr = 2 + id_len;
    const uint8_t *iv = env + hdr;
    const uint8_t *ct = iv + QN_ENVELOPE_IV_LEN;
    rc = gcm(kr, false, k->key, iv, QN_ENVELOPE_IV_LEN, env, hdr, aad, aad_len, ct, plen, out,
             (uint8_t *)(uintptr_t)(ct + plen));
    if (rc != QN_OK)
        return rc;
    *written = plen;
    return QN_OK;
}

/* ---- Queen MQ's JSON envelope ---- */

static const uint8_t *skip_ws(const uint8_t *p, const uint8_t *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A JSON string without escapes at *pp (which points at the opening quote). */
static bool json_plain_string(const uint8_t **pp, const uint8_t *e, const uint8_t **s, size_t *n)
{
    const uint8_t *p = *pp;
    if (p >= e || *p != '"')
        return false;
    const uint8_t *start = ++p;
    while (p < e && *p != '"') {
        if (*p == '\\' || *p < 0x20)
            return false;
        p++;
    }
    if (p >= e)
        return false;
    *s = start;
    *n = (size_t)(p - start);
    *pp = p + 1;
    return true;
}

enum { J_ENC, J_IV, J_TAG, J_N };

static int parse_queen_json(const uint8_t *text, size_t len, const uint8_t *val[J_N],
                            size_t vlen[J_N])
{
    static const char *const names[J_N] = {"encrypted", "iv", "authTag"};
    const uint8_t *p = text, *e = text + len;
    bool seen[J_N] = {false};
    p = skip_ws(p, e);
    if (p >= e || *p++ != '{')
        return QN_EENVELOPE_MALFORMED;
    for (int m = 0; m < J_N; m++) {
        const uint8_t *k, *v;
        size_t kn, vn;
        p = skip_ws(p, e);
        if (!json_plain_string(&p, e, &k, &kn))
            return QN_EENVELOPE_MALFORMED;
        int which = -1;
        for (int j = 0; j < J_N; j++)
            if (strlen(names[j]) == kn && memcmp(names[j], k, kn) == 0)
                which = j;
        if (which < 0 || seen[which])
            return QN_EENVELOPE_MALFORMED;
        seen[which] = true;
        p = skip_ws(p, e);
        if (p >= e || *p++ != ':')
            return QN_EENVELOPE_MALFORMED;
        p = skip_ws(p, e);
        if (!json_plain_string(&p, e, &v, &vn))
            return QN_EENVELOPE_MALFORMED;
        val[which] = v;
        vlen[which] = vn;
        p = skip_ws(p, e);
        if (p >= e || *p++ != (m == J_N - 1 ? '}' : ','))
            return QN_EENVELOPE_MALFORMED;
    }
    if (skip_ws(p, e) != e)
        return QN_EENVELOPE_MALFORMED;
    return QN_OK;
}

int qn_envelope_decrypt_queen_json(const qn_keyring *kr, const uint8_t *text, size_t len,
                                   uint8_t *out, size_t cap, size_t *written)
{
    if (!kr || !written || (!text && len) || (!out && cap))
        return QN_EINVAL;
    if (len > (size_t)QN_ENVELOPE_PAYLOAD_MAX / 3 * 4 + 1024)
        return QN_EENVELOPE_MALFORMED;
    const uint8_t *val[J_N];
    size_t vlen[J_N];
    int rc = parse_queen_json(text, len, val, vlen);
    if (rc != QN_OK)
        return rc;
    uint8_t iv[16], tag[QN_ENVELOPE_TAG_LEN + 1];
    long iv_len = qn_b64_decode(QN_B64_STD, 0, (const char *)val[J_IV], vlen[J_IV], iv, sizeof iv);
    long tag_len =
        qn_b64_decode(QN_B64_STD, 0, (const char *)val[J_TAG], vlen[J_TAG], tag, sizeof tag);
    if ((iv_len != 12 && iv_len != 16) || tag_len != QN_ENVELOPE_TAG_LEN)
        return QN_EENVELOPE_MALFORMED;
    size_t ct_max = vlen[J_ENC] / 4 * 3;
    if (ct_max > QN_ENVELOPE_PAYLOAD_MAX)
        return QN_EENVELOPE_MALFORMED;
    uint8_t *ct = malloc(ct_max ? ct_max : 1);
    if (!ct)
        return QN_ENOMEM;
    long ct_len = qn_b64_decode(QN_B64_STD, 0, (const char *)val[J_ENC], vlen[J_ENC], ct, ct_max);
    if (ct_len < 0) {
        rc = QN_EENVELOPE_MALFORMED;
        goto out;
    }
    if ((size_t)ct_len > cap) {
        rc = QN_ERANGE;
        goto out;
    }
    rc = QN_EENVELOPE_AUTH;
    /* Active key first, then the others newest to oldest. */
    for (size_t t = 0; t < kr->n && rc == QN_EENVELOPE_AUTH; t++) {
        const struct qn_key *k = &kr->keys[kr->n - 1 - t];
        rc = gcm(kr, false, k->key, iv, (size_t)iv_len, NULL, 0, NULL, 0, ct, (size_t)ct_len, out,
                 tag);
        if (rc == QN_EENVELOPE_AUTH && iv_len == 16)
            rc = gcm(kr, false, k->key, iv, 12, NULL, 0, NULL, 0, ct, (size_t)ct_len, out, tag);
    }
    if (rc == QN_OK)
        *written = (size_t)ct_len;
out:
    free(ct);
    return rc;
}
