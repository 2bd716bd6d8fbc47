/*
 * jwt.c - JWT key sets and verification (jwt.h) over libcjose.
 *
 * What it does: turns key files (HS256 secrets, PEM public keys, JWKS) into
 * cjose JWKs each bound to exactly one algorithm; verifies a compact JWS with
 * the key its kid (or its alg, when it has no kid) selects; checks the
 * registered claims and builds the principal. Minting is jwt_mint.c.
 * What it deliberately does not: parse JWS or JWK structures itself (cjose
 * does; we read only the protected header's alg/kid/crit with jansson after
 * cjose's base64url decoder, to pick the key and to refuse algorithms before
 * any cryptography), fetch JWKS over the network, or cache verdicts.
 *
 * Invariants:
 *   1. Every key verifies exactly one algorithm, fixed when the set is built:
 *      the token's alg must equal it, so an RSA public key can never be used
 *      as an HMAC secret (algorithm confusion) and "none" never verifies.
 *   2. Claims are read only after the signature verified.
 *   3. A key set is immutable after qn_jwt_keys_build(); only its reference
 *      count changes (atomically).
 *   4. No message written to msg contains the token or a claim's value.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjose/cjose.h>
#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "queen/error.h"
#include "queen/ids.h"

#include "auth_int.h"
#include "jwt.h"
#include "jwt_int.h"

static const char *const alg_names[] = {"HS256", "RS256", "ES256"};

struct key {
    char *kid;        /* owned; NULL when the key has none */
    enum alg alg;     /* the one algorithm this key verifies */
    cjose_jwk_t *jwk; /* owned */
};

struct qn_jwt_keys {
    atomic_size_t refs;
    size_t n;
    struct key keys[QN_JWT_KEYS_MAX];
};

#define KID_MAX 256u

/* ---- key set ---- */

static void keys_free(qn_jwt_keys *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->n; i++) {
        free(k->keys[i].kid);
        cjose_jwk_release(k->keys[i].jwk);
    }
    free(k);
}

qn_jwt_keys *qn_jwt_keys_retain(qn_jwt_keys *k)
{
    if (k)
        atomic_fetch_add(&k->refs, 1);
    return k;
}

void qn_jwt_keys_release(qn_jwt_keys *k)
{
    if (k && atomic_fetch_sub(&k->refs, 1) == 1)
        keys_free(k);
}

size_t qn_jwt_keys_count(const qn_jwt_keys *k)
{
    return k ? k->n : 0;
}

static const char *nm(const struct qn_jwt_source *s)
{
    return s->name ? s->name : "key source";
}

/* Adds jwk (taken: released on failure) under kid to the set. */
static int add_key(qn_jwt_keys *k, const char *kid, size_t kid_len, enum alg alg, cjose_jwk_t *jwk,
                   const char *name, char *msg, size_t cap)
{
    if (k->n == QN_JWT_KEYS_MAX) {
        cjose_jwk_release(jwk);
        qn__auth_msg(msg, cap, "%s: more than %u keys in the key set", name, QN_JWT_KEYS_MAX);
        return QN_EAUTH_CONFIG;
    }
    char *copy = NULL;
    if (kid) {
        if (kid_len == 0 || kid_len > KID_MAX || memchr(kid, '\0', kid_len)) {
            cjose_jwk_release(jwk);
            qn__auth_msg(msg, cap, "%s: a kid must be 1..%u bytes", name, KID_MAX);
            return QN_EAUTH_CONFIG;
        }
        for (size_t i = 0; i < k->n; i++) {
            if (k->keys[i].kid && strlen(k->keys[i].kid) == kid_len &&
                memcmp(k->keys[i].kid, kid, kid_len) == 0) {
                cjose_jwk_release(jwk);
                qn__auth_msg(msg, cap, "%s: two keys share one kid", name);
                return QN_EAUTH_CONFIG;
            }
        }
        copy = malloc(kid_len + 1);
        if (!copy) {
            cjose_jwk_release(jwk);
            return QN_ENOMEM;
        }
        memcpy(copy, kid, kid_len);
        copy[kid_len] = '\0';
    }
    k->keys[k->n++] = (struct key){copy, alg, jwk};
    return QN_OK;
}

/* A BIGNUM parameter of pkey as big-endian bytes, left-padded to pad (0: minimal). */
static uint8_t *bn_param(const EVP_PKEY *pkey, const char *param, size_t pad, size_t *len)
{
    BIGNUM *bn = NULL;
    if (EVP_PKEY_get_bn_param(pkey, param, &bn) != 1)
        return NULL;
    size_t n = pad ? pad : (size_t)BN_num_bytes(bn);
    uint8_t *b = malloc(n ? n : 1);
    if (b && (pad ? BN_bn2binpad(bn, b, (int)n) : BN_bn2bin(bn, b)) < 0) {
        free(b);
        b = NULL;
    }
    BN_clear_free(bn);
    *len = n;
    return b;
}

/* jwt_int.h */
int qn__jwt_pem_jwk(const uint8_t *pem, size_t len, bool priv, cjose_jwk_t **out, enum alg *alg,
                    const char *name, char *msg, size_t cap)
{
    int rc = QN_EAUTH_CONFIG;
    uint8_t *x = NULL, *y = NULL, *d = NULL, *n = NULL, *e = NULL;
    size_t xl = 0, yl = 0, dl = 0, nl = 0, el = 0;
    EVP_PKEY *pkey = NULL;
    BIO *bio = len <= INT32_MAX ? BIO_new_mem_buf(pem, (int)len) : NULL;
    if (!bio)
        goto out;
    pkey = priv ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL)
                : PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
    if (!pkey) {
        qn__auth_msg(msg, cap, "%s: not a PEM %s key", name, priv ? "private" : "public");
        goto out;
    }
    cjose_err err;
    if (EVP_PKEY_is_a(pkey, "RSA") && !priv) {
        if (EVP_PKEY_get_bits(pkey) < 2048) {
            qn__auth_msg(msg, cap, "%s: RSA keys must have at least 2048 bits", name);
            goto out;
        }
        n = bn_param(pkey, OSSL_PKEY_PARAM_RSA_N, 0, &nl);
        e = bn_param(pkey, OSSL_PKEY_PARAM_RSA_E, 0, &el);
        if (!n || !e)
            goto bad;
        cjose_jwk_rsa_keyspec spec = {.e = e, .elen = el, .n = n, .nlen = nl};
        *out = cjose_jwk_create_RSA_spec(&spec, &err);
        *alg = ALG_RS256;
    } else if (EVP_PKEY_is_a(pkey, "EC")) {
        char group[64];
        size_t gl = 0;
        if (EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group,
                                           &gl) != 1 ||
            (strcmp(group, "prime256v1") != 0 && strcmp(group, "P-256") != 0)) {
            qn__auth_msg(msg, cap, "%s: EC keys must be on curve P-256 (ES256)", name);
            goto out;
        }
        x = bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_X, 32, &xl);
        y = bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_Y, 32, &yl);
        if (priv)
            d = bn_param(pkey, OSSL_PKEY_PARAM_PRIV_KEY, 32, &dl);
        if (!x || !y || (priv && !d))
            goto bad;
        cjose_jwk_ec_keyspec spec = {
            .crv = CJOSE_JWK_EC_P_256, .d = d, .dlen = dl, .x = x, .xlen = xl, .y = y, .ylen = yl};
        *out = cjose_jwk_create_EC_spec(&spec, &err);
        *alg = ALG_ES256;
    } else {
        qn__auth_msg(msg, cap, "%s: only %sEC P-256 keys are supported", name,
                     priv ? "" : "RSA and ");
        goto out;
    }
    if (!*out)
        goto bad;
    rc = QN_OK;
    goto out;
bad:
    qn__auth_msg(msg, cap, "%s: the key cannot be used", name);
out:
    if (d)
        OPENSSL_cleanse(d, dl);
    free(x);
    free(y);
    free(d);
    free(n);
    free(e);
    EVP_PKEY_free(pkey);
    BIO_free(bio);
    return rc;
}

static int add_secret(qn_jwt_keys *k, const struct qn_jwt_source *s, char *msg, size_t cap)
{
    size_t len = s->len;
    if (len && s->data[len - 1] == '\n') {
        len--;
        if (len && s->data[len - 1] == '\r')
            len--;
    }
    if (len < QN_JWT_HS_SECRET_MIN) {
        qn__auth_msg(msg, cap, "%s: an HS256 secret needs at least %u bytes", nm(s),
                     QN_JWT_HS_SECRET_MIN);
        return QN_EAUTH_CONFIG;
    }
    cjose_err err;
    cjose_jwk_t *jwk = cjose_jwk_create_oct_spec(s->data, len, &err);
    if (!jwk)
        return QN_ENOMEM;
    return add_key(k, s->kid, s->kid ? strlen(s->kid) : 0, ALG_HS256, jwk, nm(s), msg, cap);
}

static int add_pem(qn_jwt_keys *k, const struct qn_jwt_source *s, char *msg, size_t cap)
{
    cjose_jwk_t *jwk = NULL;
    enum alg alg;
    int rc = qn__jwt_pem_jwk(s->data, s->len, false, &jwk, &alg, nm(s), msg, cap);
    if (rc != QN_OK)
        return rc;
    return add_key(k, s->kid, s->kid ? strlen(s->kid) : 0, alg, jwk, nm(s), msg, cap);
}

static const char *jstr(json_t *o, const char *member)
{
    json_t *v = json_object_get(o, member);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int add_jwks(qn_jwt_keys *k, const struct qn_jwt_source *s, char *msg, size_t cap)
{
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)s->data, s->len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *keys = doc ? json_object_get(doc, "keys") : NULL;
    if (!json_is_array(keys)) {
        json_decref(doc);
        qn__auth_msg(msg, cap, "%s: not a JWKS document ({\"keys\": [...]})", nm(s));
        return QN_EAUTH_CONFIG;
    }
    size_t before = k->n, i;
    json_t *jwk_json;
    int rc = QN_OK;
    json_array_foreach(keys, i, jwk_json)
    {
        if (!json_is_object(jwk_json)) {
            qn__auth_msg(msg, cap, "%s: key %zu is not an object", nm(s), i);
            rc = QN_EAUTH_CONFIG;
            break;
        }
        const char *kty = jstr(jwk_json, "kty"), *use = jstr(jwk_json, "use");
        const char *alg_s = jstr(jwk_json, "alg"), *crv = jstr(jwk_json, "crv");
        json_t *kidv = json_object_get(jwk_json, "kid");
        if (kidv && !json_is_string(kidv)) {
            qn__auth_msg(msg, cap, "%s: key %zu has a kid that is not a string", nm(s), i);
            rc = QN_EAUTH_CONFIG;
            break;
        }
        enum alg alg;
        if (!kty || (use && strcmp(use, "sig") != 0))
            continue;
        if (strcmp(kty, "oct") == 0)
            alg = ALG_HS256;
        else if (strcmp(kty, "RSA") == 0)
            alg = ALG_RS256;
        else if (strcmp(kty, "EC") == 0 && crv && strcmp(crv, "P-256") == 0)
            alg = ALG_ES256;
        else
            continue; /* a kind of key we do not verify with */
        if (alg_s && strcmp(alg_s, alg_names[alg]) != 0)
            continue;
        cjose_err err;
        cjose_jwk_t *jwk = cjose_jwk_import_json((cjose_header_t *)jwk_json, &err);
        if (!jwk) {
            qn__auth_msg(msg, cap, "%s: key %zu is not a valid JWK", nm(s), i);
            rc = QN_EAUTH_CONFIG;
            break;
        }
        if (alg == ALG_HS256 && cjose_jwk_get_keysize(jwk, &err) / 8 < QN_JWT_HS_SECRET_MIN) {
            cjose_jwk_release(jwk);
            qn__auth_msg(msg, cap, "%s: key %zu: an HS256 secret needs at least %u bytes", nm(s), i,
                         QN_JWT_HS_SECRET_MIN);
            rc = QN_EAUTH_CONFIG;
            break;
        }
        if (alg == ALG_RS256 && cjose_jwk_get_keysize(jwk, &err) < 2048) {
            cjose_jwk_release(jwk);
            qn__auth_msg(msg, cap, "%s: key %zu: RSA keys must have at least 2048 bits", nm(s), i);
            rc = QN_EAUTH_CONFIG;
            break;
        }
        const char *kid = kidv ? json_string_value(kidv) : NULL;
        rc = add_key(k, kid, kid ? json_string_length(kidv) : 0, alg, jwk, nm(s), msg, cap);
        if (rc != QN_OK)
            break;
    }
    json_decref(doc);
    if (rc == QN_OK && k->n == before) {
        qn__auth_msg(msg, cap, "%s: no HS256, RS256 or ES256 signing key in the JWKS", nm(s));
        rc = QN_EAUTH_CONFIG;
    }
    return rc;
}

int qn_jwt_keys_build(const struct qn_jwt_source *src, size_t n, qn_jwt_keys **out, char *msg,
                      size_t cap)
{
    if (!out || (!src && n))
        return QN_EINVAL;
    qn_jwt_keys *k = calloc(1, sizeof *k);
    if (!k)
        return QN_ENOMEM;
    atomic_init(&k->refs, 1);
    int rc = QN_OK;
    for (size_t i = 0; i < n && rc == QN_OK; i++) {
        const struct qn_jwt_source *s = &src[i];
        if (!s->data && s->len) {
            rc = QN_EINVAL;
            break;
        }
        switch (s->kind) {
        case QN_JWT_SRC_SECRET:
            rc = add_secret(k, s, msg, cap);
            break;
        case QN_JWT_SRC_PEM:
            rc = add_pem(k, s, msg, cap);
            break;
        case QN_JWT_SRC_JWKS:
            rc = add_jwks(k, s, msg, cap);
            break;
        default:
            rc = QN_EINVAL;
        }
    }
    if (rc == QN_OK && k->n == 0) {
        qn__auth_msg(msg, cap, "the key set is empty");
        rc = QN_EAUTH_CONFIG;
    }
    if (rc != QN_OK) {
        keys_free(k);
        return rc;
    }
    *out = k;
    return QN_OK;
}

/* Reads a whole file of at most QN_JWT_FILE_MAX bytes into a malloc'd buffer. */
static int read_file(const char *path, uint8_t **data, size_t *len, char *msg, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        qn__auth_msg(msg, cap, "%s: cannot be opened", path);
        return QN_EIO;
    }
    uint8_t *b = malloc(QN_JWT_FILE_MAX + 1);
    if (!b) {
        fclose(f);
        return QN_ENOMEM;
    }
    size_t n = fread(b, 1, QN_JWT_FILE_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > QN_JWT_FILE_MAX) {
        free(b);
        qn__auth_msg(msg, cap, bad ? "%s: cannot be read" : "%s: larger than 1 MiB", path);
        return bad ? QN_EIO : QN_EAUTH_CONFIG;
    }
    *data = b;
    *len = n;
    return QN_OK;
}

int qn_jwt_keys_load(const struct qn_jwt_file *files, size_t n, qn_jwt_keys **out, char *msg,
                     size_t cap)
{
    if (!out || (!files && n) || n > QN_JWT_KEYS_MAX)
        return QN_EINVAL;
    struct qn_jwt_source src[QN_JWT_KEYS_MAX] = {0};
    uint8_t *bufs[QN_JWT_KEYS_MAX] = {NULL};
    int rc = QN_OK;
    size_t i;
    for (i = 0; i < n && rc == QN_OK; i++) {
        size_t len = 0;
        if (!files[i].path) {
            rc = QN_EINVAL;
            break;
        }
        rc = read_file(files[i].path, &bufs[i], &len, msg, cap);
        src[i] = (struct qn_jwt_source){files[i].kind, files[i].kid, bufs[i], len, files[i].path};
    }
    if (rc == QN_OK)
        rc = qn_jwt_keys_build(src, n, out, msg, cap);
    for (i = 0; i < n; i++) {
        if (bufs[i])
            OPENSSL_cleanse(bufs[i], src[i].len); /* secrets do not linger */
        free(bufs[i]);
    }
    return rc;
}

/* ---- verification ---- */

/* A NumericDate claim (integer or real seconds), clamped to int64. */
static bool num_claim(json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (isnan(d))
            return false;
        *out = d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : (int64_t)floor(d);
        return true;
    }
    return false;
}

static bool known_jose_alg(const char *a)
{
    static const char *const algs[] = {"none",  "HS256", "HS384", "HS512",  "RS256",
                                       "RS384", "RS512", "PS256", "PS384",  "PS512",
                                       "ES256", "ES384", "ES512", "ES256K", "EdDSA"};
    for (size_t i = 0; i < sizeof algs / sizeof algs[0]; i++)
        if (strcmp(a, algs[i]) == 0)
            return true;
    return false;
}

/* The protected header as a JSON object (decoded with cjose, parsed with jansson). */
static json_t *header_of(const char *token, size_t hlen)
{
    uint8_t *raw = NULL;
    size_t rl = 0;
    cjose_err err;
    if (!cjose_base64url_decode(token, hlen, &raw, &rl, &err))
        return NULL;
    json_t *h = json_loadb((const char *)raw, rl, JSON_REJECT_DUPLICATES, NULL);
    cjose_get_dealloc()(raw);
    if (h && !json_is_object(h)) {
        json_decref(h);
        h = NULL;
    }
    return h;
}

static int pick_key(const qn_jwt_keys *keys, json_t *hdr, const struct key **out, char *msg,
                    size_t cap)
{
    const char *alg_s = jstr(hdr, "alg");
    if (!alg_s) {
        qn__auth_msg(msg, cap, "token header has no alg");
        return QN_EAUTH_MALFORMED;
    }
    int alg = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(alg_s, alg_names[i]) == 0)
            alg = i;
    if (alg < 0) {
        if (known_jose_alg(alg_s))
            qn__auth_msg(msg, cap, "token algorithm %s is not allowed (HS256, RS256, ES256)",
                         alg_s);
        else
            qn__auth_msg(msg, cap, "token algorithm is not allowed (HS256, RS256, ES256)");
        return QN_EAUTH_ALG;
    }
    json_t *kidv = json_object_get(hdr, "kid");
    if (kidv && !json_is_string(kidv)) {
        qn__auth_msg(msg, cap, "token kid is not a string");
        return QN_EAUTH_MALFORMED;
    }
    const struct key *k = NULL;
    if (kidv) {
        const char *kid = json_string_value(kidv);
        size_t kl = json_string_length(kidv);
        for (size_t i = 0; i < keys->n && !k; i++)
            if (keys->keys[i].kid && strlen(keys->keys[i].kid) == kl &&
                memcmp(keys->keys[i].kid, kid, kl) == 0)
                k = &keys->keys[i];
        if (!k) {
            qn__auth_msg(msg, cap, "token key id is not in the key set");
            return QN_EAUTH_UNKNOWN_KID;
        }
    } else {
        size_t candidates = 0;
        for (size_t i = 0; i < keys->n; i++)
            if (keys->keys[i].alg == (enum alg)alg) {
                candidates++;
                k = &keys->keys[i];
            }
        if (candidates == 0) {
            qn__auth_msg(msg, cap, "no key of the key set verifies %s", alg_names[alg]);
            return QN_EAUTH_ALG;
        }
        if (candidates > 1) {
            qn__auth_msg(msg, cap, "token has no kid and %zu keys verify %s", candidates,
                         alg_names[alg]);
            return QN_EAUTH_UNKNOWN_KID;
        }
    }
    if (k->alg != (enum alg)alg) {
        qn__auth_msg(msg, cap, "token algorithm %s does not match its key (%s)", alg_names[alg],
                     alg_names[k->alg]);
        return QN_EAUTH_ALG;
    }
    *out = k;
    return QN_OK;
}

static int check_claims(json_t *c, const struct qn_jwt_policy *pol, int64_t now, char *msg,
                        size_t cap)
{
    int64_t skew = pol->clock_skew_s, t;
    json_t *v = json_object_get(c, "exp");
    if (v) {
        if (!num_claim(v, &t)) {
            qn__auth_msg(msg, cap, "token exp is not a number");
            return QN_EAUTH_CLAIM;
        }
        if (now - skew >= t) {
            qn__auth_msg(msg, cap, "token expired");
            return QN_EAUTH_EXPIRED;
        }
    } else if (pol->require_exp) {
        qn__auth_msg(msg, cap, "token has no exp");
        return QN_EAUTH_CLAIM;
    }
    static const char *const not_before[] = {"nbf", "iat"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(c, not_before[i]);
        if (!v)
            continue;
        if (!num_claim(v, &t)) {
            qn__auth_msg(msg, cap, "token %s is not a number", not_before[i]);
            return QN_EAUTH_CLAIM;
        }
        if (t > now + skew) {
            qn__auth_msg(msg, cap, "token not valid yet (%s is in the future)", not_before[i]);
            return QN_EAUTH_NOT_YET_VALID;
        }
    }
    if (pol->issuer) {
        const char *iss = jstr(c, "iss");
        if (!iss || strcmp(iss, pol->issuer) != 0) {
            qn__auth_msg(msg, cap, "token issuer is not the configured issuer");
            return QN_EAUTH_ISSUER;
        }
    }
    if (pol->audience) {
        v = json_object_get(c, "aud");
        bool ok = json_is_string(v) && strcmp(json_string_value(v), pol->audience) == 0;
        size_t i;
        json_t *a;
        if (json_is_array(v)) {
            json_array_foreach(v, i, a)
            {
                if (json_is_string(a) && strcmp(json_string_value(a), pol->audience) == 0)
                    ok = true;
            }
        }
        if (!ok) {
            qn__auth_msg(msg, cap, "token audience does not include the configured audience");
            return QN_EAUTH_AUDIENCE;
        }
    }
    return QN_OK;
}

static int build_principal(json_t *c, const struct qn_jwt_policy *pol, qn_principal **out,
                           char *msg, size_t cap)
{
    json_t *sub = json_object_get(c, "sub");
    uint8_t tenant[16];
    const char *tc = pol->tenant_claim ? pol->tenant_claim : "tenant";
    const char *sc = pol->scopes_claim ? pol->scopes_claim : "scopes";
    json_t *tv = json_object_get(c, tc);
    if (tv) {
        if (!json_is_string(tv) ||
            qn_uuid_parse(json_string_value(tv), json_string_length(tv), tenant) != QN_OK) {
            qn__auth_msg(msg, cap, "token claim %s is not a UUID", tc);
            return QN_EAUTH_CLAIM;
        }
    } else if (pol->allow_default_tenant) {
        qn_uuid_parse(QN_TENANT_DEFAULT, strlen(QN_TENANT_DEFAULT), tenant);
    } else {
        qn__auth_msg(msg, cap, "token has no %s claim", tc);
        return QN_EAUTH_CLAIM;
    }
    if (!json_is_string(sub)) {
        qn__auth_msg(msg, cap, "token has no sub");
        return QN_EAUTH_CLAIM;
    }
    qn_principal *p = NULL;
    int rc = qn__principal_new(QN_PRINCIPAL_JWT, json_string_value(sub), json_string_length(sub),
                               tenant, &p);
    if (rc == QN_EAUTH_CLAIM)
        qn__auth_msg(msg, cap, "token sub must be 1..%u bytes of UTF-8 without control characters",
                     QN_AUTH_SUB_MAX);
    if (rc != QN_OK)
        return rc;
    json_t *sv = json_object_get(c, sc);
    if (json_is_array(sv)) {
        size_t i;
        json_t *e;
        json_array_foreach(sv, i, e)
        {
            if (!json_is_string(e)) {
                qn__auth_msg(msg, cap, "token claim %s holds a value that is not a string", sc);
                rc = QN_EAUTH_CLAIM;
                break;
            }
            rc = qn__principal_add_grant(p, json_string_value(e), json_string_length(e), false, msg,
                                         cap);
            if (rc != QN_OK)
                break;
        }
    } else if (json_is_string(sv)) {
        const char *s = json_string_value(sv), *end = s + json_string_length(sv);
        while (s < end && rc == QN_OK) {
            while (s < end && *s == ' ')
                s++;
            const char *w = s;
            while (s < end && *s != ' ')
                s++;
            if (s > w)
                rc = qn__principal_add_grant(p, w, (size_t)(s - w), false, msg, cap);
        }
    } else if (sv) {
        qn__auth_msg(msg, cap, "token claim %s is neither an array nor a string", sc);
        rc = QN_EAUTH_CLAIM;
    }
    if (rc != QN_OK) {
        qn_principal_free(p);
        return rc;
    }
    *out = p;
    return QN_OK;
}

int qn_jwt_verify(const qn_jwt_keys *keys, const struct qn_jwt_policy *pol, const char *token,
                  size_t len, int64_t now_s, qn_principal **out, char *msg, size_t cap)
{
    if (!keys || !pol || !out || (!token && len) || (!msg && cap))
        return QN_EINVAL;
    if (pol->clock_skew_s > QN_JWT_SKEW_MAX) {
        qn__auth_msg(msg, cap, "clock skew over %u s", QN_JWT_SKEW_MAX);
        return QN_EAUTH_CONFIG;
    }
    if (len == 0) {
        qn__auth_msg(msg, cap, "empty token");
        return QN_EAUTH_MALFORMED;
    }
    if (len > QN_JWT_TOKEN_MAX) {
        qn__auth_msg(msg, cap, "token longer than %u bytes", QN_JWT_TOKEN_MAX);
        return QN_EAUTH_MALFORMED;
    }
    const char *d1 = memchr(token, '.', len);
    const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - token)) : NULL;
    if (!d1 || !d2 || d1 == token || d2 == d1 + 1 || d2 + 1 == token + len ||
        memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - token))) {
        qn__auth_msg(msg, cap, "token is not a compact JWS (three base64url parts)");
        return QN_EAUTH_MALFORMED;
    }
    int rc;
    json_t *hdr = header_of(token, (size_t)(d1 - token)), *claims = NULL;
    cjose_jws_t *jws = NULL;
    if (!hdr) {
        qn__auth_msg(msg, cap, "token header is not a base64url JSON object");
        return QN_EAUTH_MALFORMED;
    }
    if (json_object_get(hdr, "crit")) {
        qn__auth_msg(msg, cap, "token has critical header parameters");
        rc = QN_EAUTH_MALFORMED;
        goto out;
    }
    const struct key *k;
    rc = pick_key(keys, hdr, &k, msg, cap);
    if (rc != QN_OK)
        goto out;
    cjose_err err;
    jws = cjose_jws_import(token, len, &err);
    if (!jws) {
        qn__auth_msg(msg, cap, "token is not a valid JWS");
        rc = err.code == CJOSE_ERR_NO_MEMORY ? QN_ENOMEM : QN_EAUTH_MALFORMED;
        goto out;
    }
    if (!cjose_jws_verify(jws, k->jwk, &err)) {
        qn__auth_msg(msg, cap, "token signature does not verify");
        rc = err.code == CJOSE_ERR_NO_MEMORY ? QN_ENOMEM : QN_EAUTH_SIGNATURE;
        goto out;
    }
    uint8_t *pt = NULL;
    size_t ptl = 0;
    if (!cjose_jws_get_plaintext(jws, &pt, &ptl, &err) ||
        !(claims = json_loadb((const char *)pt, ptl, JSON_REJECT_DUPLICATES, NULL)) ||
        !json_is_object(claims)) {
        qn__auth_msg(msg, cap, "token payload is not a JSON object");
        rc = QN_EAUTH_MALFORMED;
        goto out;
    }
    rc = check_claims(claims, pol, now_s, msg, cap);
    if (rc == QN_OK)
        rc = build_principal(claims, pol, out, msg, cap);
out:
    json_decref(claims);
    json_decref(hdr);
    cjose_jws_release(jws);
    return rc;
}
