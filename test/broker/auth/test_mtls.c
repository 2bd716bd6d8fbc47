/*
 * test_mtls.c - broker/src/auth/mtls.c: the policy file (grammar and every
 * refusal) and principals from client certificates made here with OpenSSL
 * (CN, DNS, URI and email SANs, several SANs, two CNs, an embedded NUL).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/x509v3.h>

#include "queen/error.h"
#include "queen/ids.h"

#include "auth_test.h"
#include "mtls.h"

#define T1 "6f1c2a4e-0d7b-4c39-9a51-3e8f2b7d1c05"

static EVP_PKEY *key;

static void key_setup(void)
{
    key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (!key)
        abort();
}

static void key_teardown(void)
{
    EVP_PKEY_free(key);
}

/* A self-signed certificate; cn2 adds a second CN; sans is an OpenSSL
 * subjectAltName string ("DNS:a,URI:b") or NULL. */
static X509 *cert(const char *cn, const char *cn2, const char *sans)
{
    X509 *x = X509_new();
    ck_assert_ptr_nonnull(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"queen test", -1, -1,
                               0);
    if (cn)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0);
    if (cn2)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn2, -1, -1,
                                   0);
    X509_set_issuer_name(x, name);
    if (sans) {
        X509V3_CTX ctx;
        X509V3_set_ctx_nodb(&ctx);
        X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
        X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, NID_subject_alt_name, sans);
        ck_assert_ptr_nonnull(ext);
        X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
    }
    ck_assert_int_gt(X509_sign(x, key, EVP_sha256()), 0);
    return x;
}

static qn_policy *policy(const char *json)
{
    qn_policy *p = NULL;
    char msg[256] = "";
    int rc = qn_policy_parse((const uint8_t *)json, strlen(json), &p, msg, sizeof msg);
    ck_assert_msg(rc == QN_OK, "policy: %s (%s)", qn_strerror(rc), msg);
    return p;
}

static qn_principal *principal(const qn_policy *pol, X509 *x, int *rc, char *msg, size_t cap)
{
    qn_principal *p = NULL;
    *rc = qn_mtls_principal(pol, x, &p, msg, cap);
    if (*rc != QN_OK)
        ck_assert_ptr_null(p);
    return p;
}

START_TEST(policy_grammar)
{
    qn_policy *p = policy("{\"identity\":\"san:uri\",\"principals\":["
                          "{\"match\":\"a\",\"tenant\":\"" T1 "\",\"grants\":[\"consume:*\"]},"
                          "{\"match\":\"b*\"}]}");
    ck_assert_uint_eq(qn_policy_count(p), 2);
    qn_policy_free(p);
    qn_policy_free(NULL);
    static const struct {
        const char *json;
        const char *says;
    } bad[] = {
        {"", "not valid JSON"},
        {"[]", "not a JSON object"},
        {"{\"principals\":[]}", "1..4096"},
        {"{}", "1..4096"},
        {"{\"identity\":\"san:ip\",\"principals\":[{\"match\":\"a\"}]}", "identity"},
        {"{\"principals\":[{\"match\":\"a\"}],\"extra\":1}", "unknown member \"extra\""},
        {"{\"principals\":[{\"match\":\"a\",\"grant\":[]}]}", "principals[0] has an unknown"},
        {"{\"principals\":[{\"match\":\"a\"},{\"match\":\"*a*\"}]}", "principals[1].match"},
        {"{\"principals\":[{\"match\":\"\"}]}", "principals[0].match"},
        {"{\"principals\":[{\"match\":7}]}", "principals[0].match"},
        {"{\"principals\":[{\"match\":\"a\",\"tenant\":\"default\"}]}", "tenant"},
        {"{\"principals\":[{\"match\":\"a\",\"grants\":\"consume:*\"}]}", "not an array"},
        {"{\"principals\":[{\"match\":\"a\",\"grants\":[\"read:*\"]}]}", "grants[0]"},
        {"{\"principals\":[{\"match\":\"a\",\"grants\":[\"consume:*\",\"consume:a*b\"]}]}",
         "grants[1]"},
        {"{\"principals\":[{\"match\":\"a\"}],\"principals\":[]}", "not valid JSON"},
        {"{\"principals\":[7]}", "principals[0] is not an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qn_policy *out = NULL;
        char msg[256] = "";
        int rc = qn_policy_parse((const uint8_t *)bad[i].json, strlen(bad[i].json), &out, msg,
                                 sizeof msg);
        ck_assert_msg(rc == QN_EAUTH_CONFIG, "accepted %zu: %s", i, bad[i].json);
        ck_assert_ptr_null(out);
        ck_assert_msg(strstr(msg, bad[i].says) != NULL, "case %zu: message \"%s\" lacks \"%s\"", i,
                      msg, bad[i].says);
    }
    /* from a file; a missing file */
    char path[] = "/tmp/qn_policy_XXXXXX";
    int fd = mkstemp(path);
    const char *doc = "{\"principals\":[{\"match\":\"x\"}]}";
    ck_assert_int_eq(write(fd, doc, strlen(doc)), (ssize_t)strlen(doc));
    close(fd);
    char msg[256];
    ck_assert_int_eq(qn_policy_load(path, &p, msg, sizeof msg), QN_OK);
    qn_policy_free(p);
    unlink(path);
    ck_assert_int_eq(qn_policy_load(path, &p, msg, sizeof msg), QN_EIO);
}
END_TEST

START_TEST(common_name)
{
    qn_policy *pol = policy("{\"principals\":["
                            "{\"match\":\"billing\",\"tenant\":\"" T1 "\","
                            "\"grants\":[\"consume:orders.*\",\"produce:invoices\"]},"
                            "{\"match\":\"worker-*\",\"grants\":[\"consume:jobs\"]}]}");
    char msg[256];
    int rc;
    X509 *x = cert("billing", NULL, "DNS:ignored.example");
    qn_principal *p = principal(pol, x, &rc, msg, sizeof msg);
    ck_assert_msg(rc == QN_OK, "%s", msg);
    ck_assert_str_eq(qn_principal_sub(p), "billing");
    ck_assert_int_eq(qn_principal_kind(p), QN_PRINCIPAL_MTLS);
    uint8_t t1[16];
    qn_uuid_parse(T1, 36, t1);
    ck_assert(memcmp(qn_principal_tenant(p), t1, 16) == 0);
    ck_assert(qn_auth_allows(p, QN_SCOPE_CONSUME, "orders.eu", 9));
    ck_assert(qn_auth_allows(p, QN_SCOPE_PRODUCE, "invoices", 8));
    ck_assert(!qn_auth_allows(p, QN_SCOPE_PRODUCE, "orders.eu", 9));
    qn_principal_free(p);
    X509_free(x);

    x = cert("worker-17", NULL, NULL);
    p = principal(pol, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_OK);
    uint8_t def[16];
    qn_uuid_parse(QN_TENANT_DEFAULT, 36, def);
    ck_assert(memcmp(qn_principal_tenant(p), def, 16) == 0);
    ck_assert(qn_auth_allows(p, QN_SCOPE_CONSUME, "jobs", 4));
    qn_principal_free(p);
    X509_free(x);

    /* no match, no CN, two CNs */
    x = cert("billing2", NULL, NULL);
    principal(pol, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_EAUTH_CERT);
    ck_assert_msg(strstr(msg, "billing2") == NULL, "message quotes the certificate: %s", msg);
    ck_assert(strstr(msg, "no policy entry") != NULL);
    X509_free(x);
    x = cert(NULL, NULL, "DNS:billing");
    principal(pol, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_EAUTH_CERT);
    ck_assert(strstr(msg, "no usable subject CN") != NULL);
    X509_free(x);
    x = cert("billing", "worker-1", NULL);
    principal(pol, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_EAUTH_CERT);
    X509_free(x);
    qn_policy_free(pol);
}
END_TEST

START_TEST(subject_alt_names)
{
    qn_policy *dns = policy("{\"identity\":\"san:dns\",\"principals\":["
                            "{\"match\":\"*.workers.example.com\",\"grants\":[\"consume:jobs.*\"]},"
                            "{\"match\":\"api.example.com\",\"grants\":[\"admin:*\"]}]}");
    char msg[256];
    int rc;
    /* SANs in certificate order: the first one that some entry matches */
    X509 *x = cert("api.example.com", NULL,
                   "DNS:unknown.example.org,DNS:api.example.com,DNS:a.workers.example.com");
    qn_principal *p = principal(dns, x, &rc, msg, sizeof msg);
    ck_assert_msg(rc == QN_OK, "%s", msg);
    ck_assert_str_eq(qn_principal_sub(p), "api.example.com");
    ck_assert(qn_auth_allows(p, QN_SCOPE_ADMIN, "anything", 8));
    qn_principal_free(p);
    X509_free(x);
    x = cert(NULL, NULL, "URI:spiffe://td/w,DNS:b.workers.example.com");
    p = principal(dns, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_str_eq(qn_principal_sub(p), "b.workers.example.com");
    qn_principal_free(p);
    X509_free(x);
    x = cert("api.example.com", NULL, "email:a@example.com"); /* CN is not a DNS SAN */
    principal(dns, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_EAUTH_CERT);
    ck_assert(strstr(msg, "no usable DNS SAN") != NULL);
    X509_free(x);
    qn_policy_free(dns);

    qn_policy *uri = policy("{\"identity\":\"san:uri\",\"principals\":["
                            "{\"match\":\"spiffe://td/ns/*\",\"grants\":[\"produce:x\"]}]}");
    x = cert(NULL, NULL, "DNS:x.example,URI:spiffe://td/ns/orders");
    p = principal(uri, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_str_eq(qn_principal_sub(p), "spiffe://td/ns/orders");
    qn_principal_free(p);
    X509_free(x);
    qn_policy_free(uri);

    qn_policy *mail = policy("{\"identity\":\"san:email\",\"principals\":["
                             "{\"match\":\"*@ops.example.com\",\"grants\":[\"admin:ops.*\"]}]}");
    x = cert(NULL, NULL, "email:alice@ops.example.com");
    p = principal(mail, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_OK);
    ck_assert_str_eq(qn_principal_sub(p), "alice@ops.example.com");
    qn_principal_free(p);
    X509_free(x);
    qn_policy_free(mail);
}
END_TEST

START_TEST(embedded_nul)
{
    /* a DNS SAN "good.example\0.evil" must not name good.example or anyone */
    qn_policy *pol = policy("{\"identity\":\"san:dns\",\"principals\":["
                            "{\"match\":\"good.example*\",\"grants\":[\"admin:*\"]}]}");
    X509 *x = cert(NULL, NULL, NULL);
    GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
    GENERAL_NAME *g = GENERAL_NAME_new();
    ASN1_IA5STRING *s = ASN1_IA5STRING_new();
    ASN1_STRING_set(s, "good.example\0.evil", 18);
    GENERAL_NAME_set0_value(g, GEN_DNS, s);
    sk_GENERAL_NAME_push(gens, g);
    X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT);
    GENERAL_NAMES_free(gens);
    char msg[256];
    int rc;
    principal(pol, x, &rc, msg, sizeof msg);
    ck_assert_int_eq(rc, QN_EAUTH_CERT);
    X509_free(x);
    qn_policy_free(pol);
    qn_principal *out = NULL;
    ck_assert_int_eq(qn_mtls_principal(NULL, NULL, &out, NULL, 0), QN_EINVAL);
}
END_TEST

Suite *qn_test_mtls_suite(void)
{
    Suite *s = suite_create("mtls");
    TCase *tc = tcase_create("mtls");
    tcase_add_unchecked_fixture(tc, key_setup, key_teardown);
    tcase_add_test(tc, policy_grammar);
    tcase_add_test(tc, common_name);
    tcase_add_test(tc, subject_alt_names);
    tcase_add_test(tc, embedded_nul);
    suite_add_tcase(s, tc);
    return s;
}
