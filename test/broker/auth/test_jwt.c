/*
 * test_jwt.c - broker/src/auth/jwt.c: key sets (secret, PEM, JWKS, files,
 * reload), verification of HS256, RS256 and ES256 tokens signed here with plain
 * OpenSSL (an independent signer: base64url, HMAC, PKCS#1 v1.5 and ECDSA with
 * the DER signature converted to JOSE's r||s), every refusal with its error,
 * algorithm confusion, messages that never quote the token or its claims, and
 * minting. Keys are generated per test case (in the parent, once per TCase).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "queen/error.h"
#include "queen/ids.h"

#include "auth_test.h"
#include "jwt.h"

#define NOW 1800000000LL
#define SECRET "an HS256 test secret of 32+ bytes, test only"
#define TENANT "6f1c2a4e-0d7b-4c39-9a51-3e8f2b7d1c05"

static EVP_PKEY *rsa_key, *rsa_key2, *ec_key;
static char *rsa_pem, *rsa2_pem, *ec_pem, *ec_priv_pem;

static char *pem_of(EVP_PKEY *k, bool priv)
{
    BIO *b = BIO_new(BIO_s_mem());
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(priv ? PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL)
                          : PEM_write_bio_PUBKEY(b, k),
                     1);
    char *data;
    long n = BIO_get_mem_data(b, &data);
    char *s = strndup(data, (size_t)n);
    BIO_free(b);
    return s;
}

static void keys_setup(void)
{
    rsa_key = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    rsa_key2 = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    ec_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (!rsa_key || !rsa_key2 || !ec_key)
        abort();
    rsa_pem = pem_of(rsa_key, false);
    rsa2_pem = pem_of(rsa_key2, false);
    ec_pem = pem_of(ec_key, false);
    ec_priv_pem = pem_of(ec_key, true);
}

static void keys_teardown(void)
{
    EVP_PKEY_free(rsa_key);
    EVP_PKEY_free(rsa_key2);
    EVP_PKEY_free(ec_key);
    free(rsa_pem);
    free(rsa2_pem);
    free(ec_pem);
    free(ec_priv_pem);
}

/* ---- the independent signer ---- */

static size_t b64url(const uint8_t *p, size_t n, char *out)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[k++] = al[v >> 18 & 63];
        out[k++] = al[v >> 12 & 63];
        if (i + 1 < n)
            out[k++] = al[v >> 6 & 63];
        if (i + 2 < n)
            out[k++] = al[v & 63];
    }
    out[k] = '\0';
    return k;
}

enum how { HS, RS, ES, NONE_SIG };

/* header.payload.signature; key: the secret for HS, an EVP_PKEY for RS/ES. */
static char *sign(const char *header, const char *payload, enum how how, const void *key,
                  size_t key_len)
{
    size_t hl = strlen(header), pl = strlen(payload);
    char *t = malloc(2 * (hl + pl) + 1024);
    ck_assert_ptr_nonnull(t);
    size_t n = b64url((const uint8_t *)header, hl, t);
    t[n++] = '.';
    n += b64url((const uint8_t *)payload, pl, t + n);
    uint8_t sig[512];
    size_t sl = 0;
    if (how == HS) {
        unsigned int ml = 0;
        ck_assert_ptr_nonnull(
            HMAC(EVP_sha256(), key, (int)key_len, (const uint8_t *)t, n, sig, &ml));
        sl = ml;
    } else if (how == RS || how == ES) {
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        uint8_t der[512];
        size_t dl = sizeof der;
        ck_assert_int_eq(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, (EVP_PKEY *)key), 1);
        ck_assert_int_eq(EVP_DigestSign(md, der, &dl, (const uint8_t *)t, n), 1);
        EVP_MD_CTX_free(md);
        if (how == RS) {
            memcpy(sig, der, dl);
            sl = dl;
        } else {
            const uint8_t *p = der;
            ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)dl);
            ck_assert_ptr_nonnull(es);
            ck_assert_int_eq(BN_bn2binpad(ECDSA_SIG_get0_r(es), sig, 32), 32);
            ck_assert_int_eq(BN_bn2binpad(ECDSA_SIG_get0_s(es), sig + 32, 32), 32);
            ECDSA_SIG_free(es);
            sl = 64;
        }
    } else {
        memcpy(sig, "not a signature", 15);
        sl = 15;
    }
    t[n++] = '.';
    b64url(sig, sl, t + n);
    return t;
}

static char *payload_json(const char *extra)
{
    char *p = malloc(1024);
    ck_assert_ptr_nonnull(p);
    snprintf(p, 1024,
             "{\"sub\":\"svc-orders\",\"tenant\":\"" TENANT "\",\"iat\":%lld,\"exp\":%lld,"
             "\"scopes\":[\"produce:orders.*\",\"consume:*\",\"openid\"]%s%s}",
             NOW - 10, NOW + 600, extra ? "," : "", extra ? extra : "");
    return p;
}

static qn_jwt_keys *keyset(const struct qn_jwt_source *src, size_t n)
{
    qn_jwt_keys *k = NULL;
    char msg[256] = "";
    int rc = qn_jwt_keys_build(src, n, &k, msg, sizeof msg);
    ck_assert_msg(rc == QN_OK, "key set: %s (%s)", qn_strerror(rc), msg);
    return k;
}

#define SRC_SECRET(kid)                                                                            \
    {                                                                                              \
        QN_JWT_SRC_SECRET, kid, (const uint8_t *)SECRET, sizeof SECRET - 1, "s"                    \
    }
#define SRC_PEM(kid, pem)                                                                          \
    {                                                                                              \
        QN_JWT_SRC_PEM, kid, (const uint8_t *)(pem), strlen(pem), "pem"                            \
    }

static const struct qn_jwt_policy default_policy = {.clock_skew_s = 30, .require_exp = true};

/* Verifies; on success returns the principal, else NULL with *rc and msg. */
static qn_principal *verify_with(const qn_jwt_keys *k, const struct qn_jwt_policy *pol,
                                 const char *tok, int *rc, char *msg, size_t cap)
{
    qn_principal *p = NULL;
    *rc = qn_jwt_verify(k, pol, tok, strlen(tok), NOW, &p, msg, cap);
    if (*rc != QN_OK)
        ck_assert_ptr_null(p);
    return p;
}

/* Expects refusal rc; the message must not quote the token or any of its parts. */
static void refused(const qn_jwt_keys *k, const struct qn_jwt_policy *pol, const char *tok,
                    int want)
{
    char msg[256] = "";
    int rc;
    qn_principal *p = verify_with(k, pol, tok, &rc, msg, sizeof msg);
    ck_assert_msg(rc == want, "want %s, got %s (%s)", qn_strerror(want), qn_strerror(rc), msg);
    ck_assert_ptr_null(p);
    ck_assert_msg(msg[0] != '\0', "no message for %s", qn_strerror(want));
    ck_assert_msg(strstr(msg, "svc-orders") == NULL && strstr(msg, TENANT) == NULL &&
                      strstr(msg, "evil") == NULL,
                  "message quotes a claim: %s", msg);
    const char *dot = strchr(tok, '.');
    if (dot && dot - tok >= 8) {
        char head[9];
        memcpy(head, tok, 8);
        head[8] = '\0';
        ck_assert_msg(strstr(msg, head) == NULL, "message quotes the token: %s", msg);
    }
}

static void accepted(const qn_jwt_keys *k, const struct qn_jwt_policy *pol, const char *tok)
{
    char msg[256] = "";
    int rc;
    qn_principal *p = verify_with(k, pol, tok, &rc, msg, sizeof msg);
    ck_assert_msg(rc == QN_OK, "refused: %s (%s)", qn_strerror(rc), msg);
    qn_principal_free(p);
}

START_TEST(three_algorithms)
{
    struct qn_jwt_source src[] = {SRC_SECRET("hs"), SRC_PEM("rs", rsa_pem), SRC_PEM("es", ec_pem)};
    qn_jwt_keys *k = keyset(src, 3);
    ck_assert_uint_eq(qn_jwt_keys_count(k), 3);
    char *pl = payload_json(NULL);
    char *hs = sign("{\"alg\":\"HS256\",\"kid\":\"hs\",\"typ\":\"JWT\"}", pl, HS, SECRET,
                    sizeof SECRET - 1);
    char *rs = sign("{\"alg\":\"RS256\",\"kid\":\"rs\"}", pl, RS, rsa_key, 0);
    char *es = sign("{\"alg\":\"ES256\",\"kid\":\"es\"}", pl, ES, ec_key, 0);
    const char *toks[] = {hs, rs, es};
    for (int i = 0; i < 3; i++) {
        char msg[256] = "";
        int rc;
        qn_principal *p = verify_with(k, &default_policy, toks[i], &rc, msg, sizeof msg);
        ck_assert_msg(rc == QN_OK, "token %d: %s (%s)", i, qn_strerror(rc), msg);
        ck_assert_str_eq(qn_principal_sub(p), "svc-orders");
        ck_assert_int_eq(qn_principal_kind(p), QN_PRINCIPAL_JWT);
        uint8_t want[16];
        qn_uuid_parse(TENANT, 36, want);
        ck_assert(memcmp(qn_principal_tenant(p), want, 16) == 0);
        ck_assert_uint_eq(qn_principal_grant_count(p), 2); /* "openid" is not ours: skipped */
        ck_assert(qn_auth_allows(p, QN_SCOPE_PRODUCE, "orders.eu", 9));
        ck_assert(!qn_auth_allows(p, QN_SCOPE_PRODUCE, "billing", 7));
        ck_assert(qn_auth_allows(p, QN_SCOPE_CONSUME, "billing", 7));
        ck_assert(!qn_auth_allows(p, QN_SCOPE_ADMIN, "orders.eu", 9));
        qn_principal_free(p);
    }
    /* without a kid, the one key of the token's algorithm is used */
    char *hs2 = sign("{\"alg\":\"HS256\"}", pl, HS, SECRET, sizeof SECRET - 1);
    char *es2 = sign("{\"alg\":\"ES256\"}", pl, ES, ec_key, 0);
    accepted(k, &default_policy, hs2);
    accepted(k, &default_policy, es2);
    free(hs);
    free(rs);
    free(es);
    free(hs2);
    free(es2);
    free(pl);
    qn_jwt_keys_release(k);
}
END_TEST

START_TEST(algorithm_confusion_and_none)
{
    struct qn_jwt_source src[] = {SRC_PEM("rs", rsa_pem)};
    qn_jwt_keys *k = keyset(src, 1);
    char *pl = payload_json(NULL);
    /* HS256 "signed" with the RSA public key's PEM text as the HMAC secret */
    char *conf = sign("{\"alg\":\"HS256\",\"kid\":\"rs\"}", pl, HS, rsa_pem, strlen(rsa_pem));
    refused(k, &default_policy, conf, QN_EAUTH_ALG);
    char *conf2 = sign("{\"alg\":\"HS256\"}", pl, HS, rsa_pem, strlen(rsa_pem));
    refused(k, &default_policy, conf2, QN_EAUTH_ALG);
    char *none = sign("{\"alg\":\"none\"}", pl, NONE_SIG, NULL, 0);
    refused(k, &default_policy, none, QN_EAUTH_ALG);
    char *rs512 = sign("{\"alg\":\"RS512\",\"kid\":\"rs\"}", pl, RS, rsa_key, 0);
    refused(k, &default_policy, rs512, QN_EAUTH_ALG);
    char *weird = sign("{\"alg\":\"X-Y\"}", pl, NONE_SIG, NULL, 0);
    refused(k, &default_policy, weird, QN_EAUTH_ALG);
    free(weird);
    weird = sign("{\"alg\":\"HS256\\u0000\"}", pl, NONE_SIG, NULL, 0); /* jansson refuses NUL */
    refused(k, &default_policy, weird, QN_EAUTH_MALFORMED);
    char *noalg = sign("{\"kid\":\"rs\"}", pl, RS, rsa_key, 0);
    refused(k, &default_policy, noalg, QN_EAUTH_MALFORMED);
    /* "none" with an empty signature is not even a well-formed JWS here */
    char *bare = strdup(none);
    *(strrchr(bare, '.') + 1) = '\0';
    refused(k, &default_policy, bare, QN_EAUTH_MALFORMED);
    qn_jwt_keys_release(k);

    /* RS256 against a set holding only a secret */
    struct qn_jwt_source s2[] = {SRC_SECRET("hs")};
    k = keyset(s2, 1);
    char *rs = sign("{\"alg\":\"RS256\",\"kid\":\"hs\"}", pl, RS, rsa_key, 0);
    refused(k, &default_policy, rs, QN_EAUTH_ALG);
    char *es = sign("{\"alg\":\"ES256\"}", pl, ES, ec_key, 0);
    refused(k, &default_policy, es, QN_EAUTH_ALG);
    qn_jwt_keys_release(k);
    free(conf);
    free(conf2);
    free(none);
    free(rs512);
    free(weird);
    free(noalg);
    free(bare);
    free(rs);
    free(es);
    free(pl);
}
END_TEST

START_TEST(signatures_and_kids)
{
    struct qn_jwt_source src[] = {SRC_PEM("a", rsa_pem), SRC_PEM("b", rsa2_pem),
                                  SRC_PEM("e", ec_pem)};
    qn_jwt_keys *k = keyset(src, 3);
    char *pl = payload_json(NULL);
    char *good = sign("{\"alg\":\"RS256\",\"kid\":\"b\"}", pl, RS, rsa_key2, 0);
    accepted(k, &default_policy, good);
    /* signed by a's key but naming b */
    char *wrong = sign("{\"alg\":\"RS256\",\"kid\":\"b\"}", pl, RS, rsa_key, 0);
    refused(k, &default_policy, wrong, QN_EAUTH_SIGNATURE);
    /* any changed signature byte */
    char *flip = strdup(good);
    char *s = strrchr(flip, '.') + 5;
    *s = *s == 'A' ? 'B' : 'A';
    refused(k, &default_policy, flip, QN_EAUTH_SIGNATURE);
    /* a changed payload under the old signature */
    char *pl2 = payload_json("\"role\":\"evil\"");
    char *other = sign("{\"alg\":\"RS256\",\"kid\":\"b\"}", pl2, RS, rsa_key2, 0);
    char *spliced = malloc(strlen(good) + strlen(other) + 1);
    const char *od1 = strchr(other, '.'), *od2 = strrchr(other, '.');
    const char *gd2 = strrchr(good, '.');
    sprintf(spliced, "%.*s%.*s%s", (int)(strchr(good, '.') - good), good, (int)(od2 - od1), od1,
            gd2);
    refused(k, &default_policy, spliced, QN_EAUTH_SIGNATURE);
    /* ES256 with a truncated signature */
    char *es = sign("{\"alg\":\"ES256\",\"kid\":\"e\"}", pl, ES, ec_key, 0);
    accepted(k, &default_policy, es);
    es[strlen(es) - 4] = '\0';
    refused(k, &default_policy, es, QN_EAUTH_SIGNATURE);
    /* unknown kid; no kid with two RS256 keys */
    char *unk = sign("{\"alg\":\"RS256\",\"kid\":\"zz\"}", pl, RS, rsa_key, 0);
    refused(k, &default_policy, unk, QN_EAUTH_UNKNOWN_KID);
    char *nokid = sign("{\"alg\":\"RS256\"}", pl, RS, rsa_key, 0);
    refused(k, &default_policy, nokid, QN_EAUTH_UNKNOWN_KID);
    char *numkid = sign("{\"alg\":\"RS256\",\"kid\":7}", pl, RS, rsa_key, 0);
    refused(k, &default_policy, numkid, QN_EAUTH_MALFORMED);
    qn_jwt_keys_release(k);
    free(good);
    free(wrong);
    free(flip);
    free(pl2);
    free(other);
    free(spliced);
    free(es);
    free(unk);
    free(nokid);
    free(numkid);
    free(pl);
}
END_TEST

static char *hs_token(const char *payload)
{
    return sign("{\"alg\":\"HS256\"}", payload, HS, SECRET, sizeof SECRET - 1);
}

static void claims_case(const struct qn_jwt_policy *pol, const char *payload, int want)
{
    struct qn_jwt_source src[] = {SRC_SECRET(NULL)};
    qn_jwt_keys *k = keyset(src, 1);
    char *t = hs_token(payload);
    if (want == QN_OK)
        accepted(k, pol, t);
    else
        refused(k, pol, t, want);
    free(t);
    qn_jwt_keys_release(k);
}

START_TEST(time_claims)
{
    char p[512];
    const struct qn_jwt_policy *pol = &default_policy; /* skew 30 s */
    static const struct {
        const char *fmt;
        long long v;
        int want;
    } t[] = {
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":%lld}", NOW - 31, QN_EAUTH_EXPIRED},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":%lld}", NOW - 30, QN_EAUTH_EXPIRED},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":%lld}", NOW - 29, QN_OK},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":%lld.5}", NOW - 29, QN_OK},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":9e300,\"nbf\":%lld}", NOW + 31,
         QN_EAUTH_NOT_YET_VALID},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":9e300,\"nbf\":%lld}", NOW + 30, QN_OK},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":9e300,\"iat\":%lld}", NOW + 31,
         QN_EAUTH_NOT_YET_VALID},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":\"%lld\"}", NOW + 100, QN_EAUTH_CLAIM},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"nbf\":%lld}", NOW,
         QN_EAUTH_CLAIM}, /* no exp */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        snprintf(p, sizeof p, t[i].fmt, t[i].v);
        claims_case(pol, p, t[i].want);
    }
    struct qn_jwt_policy lax = {.clock_skew_s = 0, .require_exp = false};
    snprintf(p, sizeof p, "{\"sub\":\"s\",\"tenant\":\"" TENANT "\"}");
    claims_case(&lax, p, QN_OK);
    snprintf(p, sizeof p, "{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"exp\":%lld}", NOW);
    claims_case(&lax, p, QN_EAUTH_EXPIRED); /* exp is exclusive */
    struct qn_jwt_policy bad = {.clock_skew_s = QN_JWT_SKEW_MAX + 1};
    struct qn_jwt_source src[] = {SRC_SECRET(NULL)};
    qn_jwt_keys *k = keyset(src, 1);
    qn_principal *out = NULL;
    ck_assert_int_eq(qn_jwt_verify(k, &bad, "a.b.c", 5, NOW, &out, NULL, 0), QN_EAUTH_CONFIG);
    qn_jwt_keys_release(k);
}
END_TEST

START_TEST(identity_claims)
{
    struct qn_jwt_policy pol = {.clock_skew_s = 30,
                                .issuer = "https://idp.example",
                                .audience = "queen",
                                .allow_default_tenant = false};
    static const struct {
        const char *payload;
        int want;
    } t[] = {
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT
         "\",\"iss\":\"https://idp.example\",\"aud\":\"queen\"}",
         QN_OK},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"iss\":\"https://idp.example\","
         "\"aud\":[\"other\",\"queen\"]}",
         QN_OK},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"iss\":\"https://evil\",\"aud\":\"queen\"}",
         QN_EAUTH_ISSUER},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"aud\":\"queen\"}", QN_EAUTH_ISSUER},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT
         "\",\"iss\":\"https://idp.example\",\"aud\":\"evil\"}",
         QN_EAUTH_AUDIENCE},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"iss\":\"https://idp.example\","
         "\"aud\":[\"evil\"]}",
         QN_EAUTH_AUDIENCE},
        {"{\"sub\":\"s\",\"tenant\":\"" TENANT "\",\"iss\":\"https://idp.example\"}",
         QN_EAUTH_AUDIENCE},
        {"{\"tenant\":\"" TENANT "\",\"iss\":\"https://idp.example\",\"aud\":\"queen\"}",
         QN_EAUTH_CLAIM},
        {"{\"sub\":\"ev\\nil\",\"tenant\":\"" TENANT "\",\"iss\":\"https://idp.example\","
         "\"aud\":\"queen\"}",
         QN_EAUTH_CLAIM},
        {"{\"sub\":\"ev\\u0000il\",\"tenant\":\"" TENANT "\",\"iss\":\"https://idp.example\","
         "\"aud\":\"queen\"}",
         QN_EAUTH_MALFORMED}, /* jansson refuses \u0000 in the payload */
        {"{\"sub\":7,\"tenant\":\"" TENANT "\",\"iss\":\"https://idp.example\",\"aud\":\"queen\"}",
         QN_EAUTH_CLAIM},
        {"{\"sub\":\"s\",\"tenant\":\"evil\",\"iss\":\"https://idp.example\",\"aud\":\"queen\"}",
         QN_EAUTH_CLAIM},
        {"{\"sub\":\"s\",\"iss\":\"https://idp.example\",\"aud\":\"queen\"}", QN_EAUTH_CLAIM},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        claims_case(&pol, t[i].payload, t[i].want);

    /* the default tenant when allowed */
    pol.allow_default_tenant = true;
    struct qn_jwt_source src[] = {SRC_SECRET(NULL)};
    qn_jwt_keys *k = keyset(src, 1);
    char *tok = hs_token("{\"sub\":\"s\",\"iss\":\"https://idp.example\",\"aud\":\"queen\"}");
    int rc;
    char msg[256];
    qn_principal *p = verify_with(k, &pol, tok, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_OK);
    uint8_t def[16];
    qn_uuid_parse(QN_TENANT_DEFAULT, 36, def);
    ck_assert(memcmp(qn_principal_tenant(p), def, 16) == 0);
    qn_principal_free(p);
    free(tok);

    /* configured claim names */
    pol.tenant_claim = "org";
    pol.scopes_claim = "scope";
    tok = hs_token("{\"sub\":\"s\",\"iss\":\"https://idp.example\",\"aud\":\"queen\","
                   "\"org\":\"" TENANT "\",\"scope\":\"openid  admin:ops.* consume:x\"}");
    p = verify_with(k, &pol, tok, &rc, msg, sizeof msg);
    ck_assert_msg(rc == QN_OK, "%s", msg);
    ck_assert_uint_eq(qn_principal_grant_count(p), 2);
    ck_assert(qn_auth_allows(p, QN_SCOPE_ADMIN, "ops.db", 6));
    ck_assert(qn_auth_allows(p, QN_SCOPE_CONSUME, "x", 1));
    qn_principal_free(p);
    free(tok);
    qn_jwt_keys_release(k);
}
END_TEST

START_TEST(scope_claims)
{
    struct qn_jwt_policy pol = {.clock_skew_s = 0, .allow_default_tenant = true};
    static const struct {
        const char *payload;
        int want;
    } t[] = {
        {"{\"sub\":\"s\"}", QN_OK}, /* no grants at all */
        {"{\"sub\":\"s\",\"scopes\":[]}", QN_OK},
        {"{\"sub\":\"s\",\"scopes\":[\"consume:a*b\"]}", QN_EAUTH_CLAIM},
        {"{\"sub\":\"s\",\"scopes\":[\"consume:\"]}", QN_EAUTH_CLAIM},
        {"{\"sub\":\"s\",\"scopes\":[1]}", QN_EAUTH_CLAIM},
        {"{\"sub\":\"s\",\"scopes\":{\"consume\":\"*\"}}", QN_EAUTH_CLAIM},
        {"{\"sub\":\"s\",\"scopes\":\"consume:* admin:a*b\"}", QN_EAUTH_CLAIM},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        claims_case(&pol, t[i].payload, t[i].want);
}
END_TEST

START_TEST(malformed_tokens)
{
    struct qn_jwt_source src[] = {SRC_SECRET(NULL)};
    qn_jwt_keys *k = keyset(src, 1);
    const struct qn_jwt_policy *pol = &default_policy;
    static const char *const bad[] = {
        "",        "abc",     "a.b",
        "a.b.c.d", ".b.c",    "a..c",
        "a.b.",    "!!!.b.c", "eyJhbGciOiJIUzI1NiJ9", /* header only */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        refused(k, pol, bad[i], QN_EAUTH_MALFORMED);
    /* header not an object, crit, duplicate members */
    char *t1 = sign("[1]", "{}", HS, SECRET, sizeof SECRET - 1);
    refused(k, pol, t1, QN_EAUTH_MALFORMED);
    char *t2 = sign("{\"alg\":\"HS256\",\"crit\":[\"exp\"],\"exp\":1}", "{}", HS, SECRET,
                    sizeof SECRET - 1);
    refused(k, pol, t2, QN_EAUTH_MALFORMED);
    char *t3 = sign("{\"alg\":\"HS256\",\"alg\":\"none\"}", "{}", HS, SECRET, sizeof SECRET - 1);
    refused(k, pol, t3, QN_EAUTH_MALFORMED);
    /* signed, but the payload is not a JSON object */
    char *t4 = hs_token("[\"sub\"]");
    refused(k, pol, t4, QN_EAUTH_MALFORMED);
    char *t5 = hs_token("{\"sub\":\"a\",\"sub\":\"b\"}");
    refused(k, pol, t5, QN_EAUTH_MALFORMED);
    /* over the length limit */
    char *big = malloc(QN_JWT_TOKEN_MAX + 2);
    memset(big, 'a', QN_JWT_TOKEN_MAX + 1);
    big[10] = '.';
    big[20] = '.';
    big[QN_JWT_TOKEN_MAX + 1] = '\0';
    refused(k, pol, big, QN_EAUTH_MALFORMED);
    qn_principal *p = NULL;
    ck_assert_int_eq(qn_jwt_verify(NULL, pol, "a.b.c", 5, NOW, &p, NULL, 0), QN_EINVAL);
    ck_assert_int_eq(qn_jwt_verify(k, pol, "a.b.c", 5, NOW, NULL, NULL, 0), QN_EINVAL);
    free(t1);
    free(t2);
    free(t3);
    free(t4);
    free(t5);
    free(big);
    qn_jwt_keys_release(k);
}
END_TEST

/* ---- key sets ---- */

static int build_err(const struct qn_jwt_source *src, size_t n, char *msg, size_t cap)
{
    qn_jwt_keys *k = (qn_jwt_keys *)(uintptr_t)1;
    int rc = qn_jwt_keys_build(src, n, &k, msg, cap);
    if (rc != QN_OK)
        ck_assert_ptr_eq(k, (qn_jwt_keys *)(uintptr_t)1);
    else
        qn_jwt_keys_release(k);
    return rc;
}

START_TEST(key_set_errors)
{
    char msg[256];
    EVP_PKEY *small = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)1024);
    EVP_PKEY *p384 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
    char *small_pem = pem_of(small, false), *p384_pem = pem_of(p384, false);
    struct qn_jwt_source s[] = {
        {QN_JWT_SRC_SECRET, NULL, (const uint8_t *)"short\n", 6, "short"},
        SRC_PEM(NULL, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"),
        SRC_PEM(NULL, small_pem),
        SRC_PEM(NULL, p384_pem),
        SRC_PEM(NULL, ec_priv_pem), /* a private key is not a public key file */
        {QN_JWT_SRC_JWKS, NULL, (const uint8_t *)"{", 1, "j"},
        {QN_JWT_SRC_JWKS, NULL, (const uint8_t *)"{\"keys\":{}}", 11, "j"},
        {QN_JWT_SRC_JWKS, NULL, (const uint8_t *)"{\"keys\":[]}", 11, "j"},
        {QN_JWT_SRC_JWKS, NULL, (const uint8_t *)"{\"keys\":[{\"kty\":\"OKP\"}]}", 24, "j"},
        {QN_JWT_SRC_JWKS, NULL, (const uint8_t *)"{\"keys\":[7]}", 12, "j"},
        {QN_JWT_SRC_JWKS, NULL, (const uint8_t *)"{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAAA\"}]}",
         35, "j"},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        msg[0] = '\0';
        int rc = build_err(&s[i], 1, msg, sizeof msg);
        ck_assert_msg(rc == QN_EAUTH_CONFIG, "source %zu: %s", i, qn_strerror(rc));
        ck_assert_msg(msg[0] != '\0', "source %zu: no message", i);
    }
    /* the secret's exact bytes: 32 bytes plus one newline is enough, 31 is not */
    const char *s32 = "0123456789abcdef0123456789abcdef\r\n";
    struct qn_jwt_source ok32 = {QN_JWT_SRC_SECRET, NULL, (const uint8_t *)s32, 34, "s"};
    ck_assert_int_eq(build_err(&ok32, 1, msg, sizeof msg), QN_OK);
    ok32.len = 32;
    ck_assert_int_eq(build_err(&ok32, 1, msg, sizeof msg), QN_OK);
    ok32.len = 31;
    ck_assert_int_eq(build_err(&ok32, 1, msg, sizeof msg), QN_EAUTH_CONFIG);
    /* duplicate kids; no sources */
    struct qn_jwt_source dup[] = {SRC_SECRET("x"), SRC_PEM("x", rsa_pem)};
    ck_assert_int_eq(build_err(dup, 2, msg, sizeof msg), QN_EAUTH_CONFIG);
    ck_assert_int_eq(build_err(NULL, 0, msg, sizeof msg), QN_EAUTH_CONFIG);
    EVP_PKEY_free(small);
    EVP_PKEY_free(p384);
    free(small_pem);
    free(p384_pem);
}
END_TEST

static void b64url_bn(const BIGNUM *bn, size_t pad, char *out)
{
    uint8_t b[512];
    size_t n = pad ? pad : (size_t)BN_num_bytes(bn);
    BN_bn2binpad(bn, b, (int)n);
    b64url(b, n, out);
}

START_TEST(jwks)
{
    BIGNUM *n = NULL, *e = NULL, *x = NULL, *y = NULL;
    ck_assert_int_eq(EVP_PKEY_get_bn_param(rsa_key, OSSL_PKEY_PARAM_RSA_N, &n), 1);
    ck_assert_int_eq(EVP_PKEY_get_bn_param(rsa_key, OSSL_PKEY_PARAM_RSA_E, &e), 1);
    ck_assert_int_eq(EVP_PKEY_get_bn_param(ec_key, OSSL_PKEY_PARAM_EC_PUB_X, &x), 1);
    ck_assert_int_eq(EVP_PKEY_get_bn_param(ec_key, OSSL_PKEY_PARAM_EC_PUB_Y, &y), 1);
    char nb[600], eb[16], xb[64], yb[64], kb[64];
    b64url_bn(n, 0, nb);
    b64url_bn(e, 0, eb);
    b64url_bn(x, 32, xb);
    b64url_bn(y, 32, yb);
    b64url((const uint8_t *)SECRET, sizeof SECRET - 1, kb);
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"keys\":["
             "{\"kty\":\"RSA\",\"kid\":\"r1\",\"use\":\"sig\",\"alg\":\"RS256\",\"n\":\"%s\","
             "\"e\":\"%s\"},"
             "{\"kty\":\"EC\",\"kid\":\"e1\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"},"
             "{\"kty\":\"oct\",\"kid\":\"h1\",\"k\":\"%s\"},"
             "{\"kty\":\"RSA\",\"kid\":\"enc\",\"use\":\"enc\",\"n\":\"%s\",\"e\":\"%s\"},"
             "{\"kty\":\"RSA\",\"kid\":\"r512\",\"alg\":\"RS512\",\"n\":\"%s\",\"e\":\"%s\"},"
             "{\"kty\":\"OKP\",\"kid\":\"ed\",\"crv\":\"Ed25519\",\"x\":\"AAAA\"}"
             "]}",
             nb, eb, xb, yb, kb, nb, eb, nb, eb);
    struct qn_jwt_source src = {QN_JWT_SRC_JWKS, NULL, (const uint8_t *)doc, strlen(doc), "jwks"};
    qn_jwt_keys *k = keyset(&src, 1);
    ck_assert_uint_eq(qn_jwt_keys_count(k), 3); /* enc, RS512 and OKP keys skipped */
    char *pl = payload_json(NULL);
    char *rs = sign("{\"alg\":\"RS256\",\"kid\":\"r1\"}", pl, RS, rsa_key, 0);
    char *es = sign("{\"alg\":\"ES256\",\"kid\":\"e1\"}", pl, ES, ec_key, 0);
    char *hs = sign("{\"alg\":\"HS256\",\"kid\":\"h1\"}", pl, HS, SECRET, sizeof SECRET - 1);
    char *enc = sign("{\"alg\":\"RS256\",\"kid\":\"enc\"}", pl, RS, rsa_key, 0);
    char *cross = sign("{\"alg\":\"ES256\",\"kid\":\"r1\"}", pl, ES, ec_key, 0);
    accepted(k, &default_policy, rs);
    accepted(k, &default_policy, es);
    accepted(k, &default_policy, hs);
    refused(k, &default_policy, enc, QN_EAUTH_UNKNOWN_KID);
    refused(k, &default_policy, cross, QN_EAUTH_ALG);
    qn_jwt_keys_release(k);
    BN_free(n);
    BN_free(e);
    BN_free(x);
    BN_free(y);
    free(pl);
    free(rs);
    free(es);
    free(hs);
    free(enc);
    free(cross);
}
END_TEST

static char *temp_file(const char *content)
{
    char *path = strdup("/tmp/qn_auth_test_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t n = strlen(content);
    ck_assert_int_eq(write(fd, content, n), (ssize_t)n);
    close(fd);
    return path;
}

START_TEST(files_and_rotation)
{
    char *pa = temp_file(rsa_pem), *pb = temp_file(rsa2_pem), *bad = temp_file("garbage");
    char *pl = payload_json(NULL);
    char *ta = sign("{\"alg\":\"RS256\",\"kid\":\"2025\"}", pl, RS, rsa_key, 0);
    char *tb = sign("{\"alg\":\"RS256\",\"kid\":\"2026\"}", pl, RS, rsa_key2, 0);
    char msg[256];

    struct qn_jwt_file f1[] = {{QN_JWT_SRC_PEM, "2025", pa}};
    qn_jwt_keys *live = NULL;
    ck_assert_int_eq(qn_jwt_keys_load(f1, 1, &live, msg, sizeof msg), QN_OK);
    accepted(live, &default_policy, ta);
    refused(live, &default_policy, tb, QN_EAUTH_UNKNOWN_KID);

    /* rotation: the new key is added, the old one still verifies */
    struct qn_jwt_file f2[] = {{QN_JWT_SRC_PEM, "2025", pa}, {QN_JWT_SRC_PEM, "2026", pb}};
    qn_jwt_keys *next = NULL;
    ck_assert_int_eq(qn_jwt_keys_load(f2, 2, &next, msg, sizeof msg), QN_OK);
    qn_jwt_keys *held = qn_jwt_keys_retain(live); /* a call still verifying with the old set */
    qn_jwt_keys_release(live);
    live = next;
    accepted(live, &default_policy, ta);
    accepted(live, &default_policy, tb);
    accepted(held, &default_policy, ta); /* the old set lives while referenced */
    qn_jwt_keys_release(held);

    /* a failed reload leaves the live set alone and says why */
    struct qn_jwt_file f3[] = {{QN_JWT_SRC_PEM, "2026", pb}, {QN_JWT_SRC_PEM, "x", bad}};
    next = (qn_jwt_keys *)(uintptr_t)1;
    msg[0] = '\0';
    ck_assert_int_eq(qn_jwt_keys_load(f3, 2, &next, msg, sizeof msg), QN_EAUTH_CONFIG);
    ck_assert_ptr_eq(next, (qn_jwt_keys *)(uintptr_t)1);
    ck_assert_msg(strstr(msg, bad) != NULL, "message does not name the file: %s", msg);
    struct qn_jwt_file f4[] = {{QN_JWT_SRC_PEM, "2026", "/nonexistent/queen-key.pem"}};
    ck_assert_int_eq(qn_jwt_keys_load(f4, 1, &next, msg, sizeof msg), QN_EIO);
    accepted(live, &default_policy, ta);

    /* retire the old key */
    struct qn_jwt_file f5[] = {{QN_JWT_SRC_PEM, "2026", pb}};
    ck_assert_int_eq(qn_jwt_keys_load(f5, 1, &next, msg, sizeof msg), QN_OK);
    qn_jwt_keys_release(live);
    live = next;
    refused(live, &default_policy, ta, QN_EAUTH_UNKNOWN_KID);
    accepted(live, &default_policy, tb);
    qn_jwt_keys_release(live);
    qn_jwt_keys_release(NULL);
    unlink(pa);
    unlink(pb);
    unlink(bad);
    free(pa);
    free(pb);
    free(bad);
    free(pl);
    free(ta);
    free(tb);
}
END_TEST

START_TEST(minting)
{
    const char *scopes[] = {"produce:orders.*", "admin:orders"};
    struct qn_jwt_mint c = {.sub = "dev",
                            .tenant = TENANT,
                            .scopes = scopes,
                            .n_scopes = 2,
                            .iss = "queen-dev",
                            .aud = "queen",
                            .kid = "dev-1",
                            .iat = NOW - 5,
                            .exp = NOW + 3600};
    struct qn_jwt_policy pol = {
        .clock_skew_s = 5, .require_exp = true, .issuer = "queen-dev", .audience = "queen"};
    char msg[256];
    char *hs = NULL, *es = NULL;
    ck_assert_int_eq(
        qn_jwt_mint("HS256", (const uint8_t *)SECRET, sizeof SECRET - 1, &c, &hs, msg, sizeof msg),
        QN_OK);
    ck_assert_int_eq(qn_jwt_mint("ES256", (const uint8_t *)ec_priv_pem, strlen(ec_priv_pem), &c,
                                 &es, msg, sizeof msg),
                     QN_OK);
    struct qn_jwt_source src[] = {SRC_SECRET("dev-1")};
    qn_jwt_keys *k = keyset(src, 1);
    int rc;
    qn_principal *p = verify_with(k, &pol, hs, &rc, msg, sizeof msg);
    ck_assert_msg(rc == QN_OK, "%s", msg);
    ck_assert_str_eq(qn_principal_sub(p), "dev");
    ck_assert(qn_auth_allows(p, QN_SCOPE_ADMIN, "orders", 6));
    ck_assert(!qn_auth_allows(p, QN_SCOPE_ADMIN, "orders.x", 8));
    qn_principal_free(p);
    qn_jwt_keys_release(k);
    struct qn_jwt_source s2[] = {SRC_PEM("dev-1", ec_pem)};
    k = keyset(s2, 1);
    accepted(k, &pol, es);
    qn_jwt_keys_release(k);
    free(hs);
    free(es);

    char *t = NULL;
    ck_assert_int_eq(qn_jwt_mint("HS256", (const uint8_t *)"short", 5, &c, &t, msg, sizeof msg),
                     QN_EAUTH_CONFIG);
    ck_assert_int_eq(qn_jwt_mint("RS256", (const uint8_t *)SECRET, 40, &c, &t, msg, sizeof msg),
                     QN_EAUTH_CONFIG);
    ck_assert_int_eq(
        qn_jwt_mint("ES256", (const uint8_t *)ec_pem, strlen(ec_pem), &c, &t, msg, sizeof msg),
        QN_EAUTH_CONFIG); /* a public key cannot sign */
    c.sub = NULL;
    ck_assert_int_eq(qn_jwt_mint("HS256", (const uint8_t *)SECRET, 40, &c, &t, msg, sizeof msg),
                     QN_EINVAL);
    ck_assert_ptr_null(t);
}
END_TEST

Suite *qn_test_jwt_suite(void)
{
    Suite *s = suite_create("jwt");
    TCase *tc = tcase_create("jwt");
    tcase_add_unchecked_fixture(tc, keys_setup, keys_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, three_algorithms);
    tcase_add_test(tc, algorithm_confusion_and_none);
    tcase_add_test(tc, signatures_and_kids);
    tcase_add_test(tc, time_claims);
    tcase_add_test(tc, identity_claims);
    tcase_add_test(tc, scope_claims);
    tcase_add_test(tc, malformed_tokens);
    tcase_add_test(tc, key_set_errors);
    tcase_add_test(tc, jwks);
    tcase_add_test(tc, files_and_rotation);
    tcase_add_test(tc, minting);
    suite_add_tcase(s, tc);
    return s;
}
