/*
 * mtls.c - the policy file and principals from client certificates (mtls.h).
 *
 * What it does: parses the policy document into entries (identity pattern,
 * tenant, grant texts, all validated up front); reads a certificate's CN or
 * SANs with OpenSSL; picks the first entry that names one of them and builds
 * the principal from it.
 * What it deliberately does not: verify certificates (the TLS handshake did,
 * against QUEEN_TLS_CLIENT_CA) or look at anything but the subject and SANs.
 *
 * Invariants:
 *   1. A policy is immutable after qn_policy_parse(); every grant text in it
 *      has been parsed once already, so building a principal cannot fail on it.
 *   2. A certificate identity is used only when it is 1..255 bytes without NUL
 *      or control characters ("good.example\0.evil" names no one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/x509v3.h>

#include "queen/error.h"
#include "queen/ids.h"

#include "auth_int.h"
#include "mtls.h"

enum identity { ID_CN, ID_DNS, ID_URI, ID_EMAIL };

struct entry {
    char *match; /* owned; at most one '*' */
    uint8_t tenant[16];
    size_t n_grants;
    char **grants; /* owned texts, each valid for qn__principal_add_grant(strict) */
};

struct qn_policy {
    enum identity identity;
    size_t n;
    struct entry *entries;
};

void qn_policy_free(qn_policy *pol)
{
    if (!pol)
        return;
    for (size_t i = 0; i < pol->n; i++) {
        for (size_t j = 0; j < pol->entries[i].n_grants; j++)
            free(pol->entries[i].grants[j]);
        free(pol->entries[i].grants);
        free(pol->entries[i].match);
    }
    free(pol->entries);
    free(pol);
}

static const struct {
    const char *name;
    enum identity id;
} identity_words[] = {
    {"cn", ID_CN}, {"san:dns", ID_DNS}, {"san:uri", ID_URI}, {"san:email", ID_EMAIL}};

int qn_policy_set_identity(qn_policy *pol, const char *identity)
{
    if (!pol || !identity)
        return QN_EINVAL;
    for (size_t i = 0; i < sizeof identity_words / sizeof identity_words[0]; i++)
        if (strcmp(identity, identity_words[i].name) == 0) {
            pol->identity = identity_words[i].id;
            return QN_OK;
        }
    return QN_EINVAL;
}

size_t qn_policy_count(const qn_policy *pol)
{
    return pol ? pol->n : 0;
}

static bool only_members(json_t *o, const char *const *allowed, size_t n, const char **bad)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool ok = false;
        for (size_t i = 0; i < n; i++)
            ok |= strcmp(k, allowed[i]) == 0;
        if (!ok) {
            *bad = k;
            return false;
        }
    }
    return true;
}

static int parse_entry(json_t *e, size_t i, struct entry *out, char *msg, size_t cap)
{
    static const char *const members[] = {"match", "tenant", "grants"};
    const char *bad = NULL;
    if (!json_is_object(e)) {
        qn__auth_msg(msg, cap, "principals[%zu] is not an object", i);
        return QN_EAUTH_CONFIG;
    }
    if (!only_members(e, members, 3, &bad)) {
        qn__auth_msg(msg, cap, "principals[%zu] has an unknown member \"%.40s\"", i, bad);
        return QN_EAUTH_CONFIG;
    }
    json_t *m = json_object_get(e, "match"), *t = json_object_get(e, "tenant");
    json_t *g = json_object_get(e, "grants");
    if (!json_is_string(m) || !qn__auth_text_ok(json_string_value(m), json_string_length(m), 255)) {
        qn__auth_msg(msg, cap, "principals[%zu].match must be 1..255 bytes of text", i);
        return QN_EAUTH_CONFIG;
    }
    const char *ms = json_string_value(m), *star = strchr(ms, '*');
    if (star && strchr(star + 1, '*')) {
        qn__auth_msg(msg, cap, "principals[%zu].match may hold one '*' at most", i);
        return QN_EAUTH_CONFIG;
    }
    const char *ts = t ? json_string_value(t) : QN_TENANT_DEFAULT;
    if (!ts || qn_uuid_parse(ts, strlen(ts), out->tenant) != QN_OK) {
        qn__auth_msg(msg, cap, "principals[%zu].tenant is not a UUID", i);
        return QN_EAUTH_CONFIG;
    }
    if (g && !json_is_array(g)) {
        qn__auth_msg(msg, cap, "principals[%zu].grants is not an array", i);
        return QN_EAUTH_CONFIG;
    }
    size_t ng = g ? json_array_size(g) : 0;
    if (ng > QN_AUTH_GRANTS_MAX) {
        qn__auth_msg(msg, cap, "principals[%zu] has more than %u grants", i, QN_AUTH_GRANTS_MAX);
        return QN_EAUTH_CONFIG;
    }
    out->match = strdup(ms);
    out->grants = calloc(ng ? ng : 1, sizeof *out->grants);
    if (!out->match || !out->grants)
        return QN_ENOMEM;
    for (size_t j = 0; j < ng; j++) {
        json_t *s = json_array_get(g, j);
        unsigned scope;
        const char *pat;
        size_t pl;
        if (!json_is_string(s) || qn_grant_parse(json_string_value(s), json_string_length(s),
                                                 &scope, &pat, &pl) != QN_OK) {
            qn__auth_msg(msg, cap,
                         "principals[%zu].grants[%zu] is not \"produce|consume|admin:<pattern>\""
                         " ('*' only at the end of the pattern)",
                         i, j);
            return QN_EAUTH_CONFIG;
        }
        out->grants[j] = strdup(json_string_value(s));
        if (!out->grants[j])
            return QN_ENOMEM;
        out->n_grants++;
    }
    return QN_OK;
}

int qn_policy_parse(const uint8_t *json, size_t len, qn_policy **out, char *msg, size_t cap)
{
    if (!out || (!json && len))
        return QN_EINVAL;
    static const char *const members[] = {"identity", "principals"};
    json_error_t jerr;
    const char *bad = NULL;
    int rc = QN_EAUTH_CONFIG;
    qn_policy *pol = NULL;
    json_t *doc = json_loadb((const char *)json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc || !json_is_object(doc)) {
        if (doc)
            qn__auth_msg(msg, cap, "policy is not a JSON object");
        else
            qn__auth_msg(msg, cap, "policy is not valid JSON (line %d: %s)", jerr.line, jerr.text);
        goto out;
    }
    if (!only_members(doc, members, 2, &bad)) {
        qn__auth_msg(msg, cap, "policy has an unknown member \"%.40s\"", bad);
        goto out;
    }
    pol = calloc(1, sizeof *pol);
    if (!pol) {
        rc = QN_ENOMEM;
        goto out;
    }
    json_t *idv = json_object_get(doc, "identity");
    pol->identity = ID_CN;
    if (idv) {
        bool found = false;
        for (size_t i = 0; i < sizeof identity_words / sizeof identity_words[0]; i++)
            if (json_is_string(idv) &&
                strcmp(json_string_value(idv), identity_words[i].name) == 0) {
                pol->identity = identity_words[i].id;
                found = true;
            }
        if (!found) {
            qn__auth_msg(msg, cap, "policy identity must be cn, san:dns, san:uri or san:email");
            goto out;
        }
    }
    json_t *ps = json_object_get(doc, "principals");
    size_t n = json_is_array(ps) ? json_array_size(ps) : 0;
    if (n == 0 || n > QN_POLICY_ENTRIES_MAX) {
        qn__auth_msg(msg, cap, "policy principals must be an array of 1..%u entries",
                     QN_POLICY_ENTRIES_MAX);
        goto out;
    }
    pol->entries = calloc(n, sizeof *pol->entries);
    if (!pol->entries) {
        rc = QN_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        pol->n = i + 1; /* so that qn_policy_free frees what entry i holds */
        rc = parse_entry(json_array_get(ps, i), i, &pol->entries[i], msg, cap);
        if (rc != QN_OK)
            goto out;
    }
    rc = QN_OK;
out:
    json_decref(doc);
    if (rc != QN_OK) {
        qn_policy_free(pol);
        return rc;
    }
    *out = pol;
    return QN_OK;
}

int qn_policy_load(const char *path, qn_policy **out, char *msg, size_t cap)
{
    if (!path || !out)
        return QN_EINVAL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        qn__auth_msg(msg, cap, "%s: cannot be opened", path);
        return QN_EIO;
    }
    uint8_t *b = malloc(QN_POLICY_FILE_MAX + 1);
    if (!b) {
        fclose(f);
        return QN_ENOMEM;
    }
    size_t n = fread(b, 1, QN_POLICY_FILE_MAX + 1, f);
    int err = ferror(f);
    fclose(f);
    int rc;
    if (err) {
        qn__auth_msg(msg, cap, "%s: cannot be read", path);
        rc = QN_EIO;
    } else if (n > QN_POLICY_FILE_MAX) {
        qn__auth_msg(msg, cap, "%s: larger than %u bytes", path, QN_POLICY_FILE_MAX);
        rc = QN_EAUTH_CONFIG;
    } else {
        rc = qn_policy_parse(b, n, out, msg, cap);
    }
    free(b);
    return rc;
}

/* Glob with at most one '*' (zero or more bytes). */
static bool match_one_star(const char *pat, const char *s, size_t n)
{
    const char *star = strchr(pat, '*');
    if (!star)
        return strlen(pat) == n && memcmp(pat, s, n) == 0;
    size_t pre = (size_t)(star - pat), post = strlen(star + 1);
    return n >= pre + post && memcmp(pat, s, pre) == 0 && memcmp(star + 1, s + n - post, post) == 0;
}

/* Tries identity s[0..n) against every entry; builds the principal of the first match. */
static int try_identity(const qn_policy *pol, const char *s, size_t n, qn_principal **out,
                        char *msg, size_t cap)
{
    if (!qn__auth_text_ok(s, n, QN_AUTH_SUB_MAX))
        return QN_ENOTFOUND;
    for (size_t i = 0; i < pol->n; i++) {
        const struct entry *e = &pol->entries[i];
        if (!match_one_star(e->match, s, n))
            continue;
        qn_principal *p = NULL;
        int rc = qn__principal_new(QN_PRINCIPAL_MTLS, s, n, e->tenant, &p);
        for (size_t j = 0; rc == QN_OK && j < e->n_grants; j++)
            rc = qn__principal_add_grant(p, e->grants[j], strlen(e->grants[j]), true, msg, cap);
        if (rc != QN_OK) {
            qn_principal_free(p);
            return rc;
        }
        *out = p;
        return QN_OK;
    }
    return QN_ENOTFOUND;
}

static const char *id_name(enum identity id)
{
    static const char *const names[] = {"subject CN", "DNS SAN", "URI SAN", "email SAN"};
    return names[id];
}

int qn_mtls_principal(const qn_policy *pol, X509 *cert, qn_principal **out, char *msg, size_t cap)
{
    if (!pol || !cert || !out)
        return QN_EINVAL;
    int rc = QN_ENOTFOUND;
    bool any = false;
    if (pol->identity == ID_CN) {
        X509_NAME *name = X509_get_subject_name(cert);
        int idx = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
        if (idx >= 0 && X509_NAME_get_index_by_NID(name, NID_commonName, idx) < 0) {
            ASN1_STRING *d = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
            unsigned char *utf8 = NULL;
            int n = ASN1_STRING_to_UTF8(&utf8, d);
            if (n > 0) {
                any = true;
                rc = try_identity(pol, (const char *)utf8, (size_t)n, out, msg, cap);
            }
            OPENSSL_free(utf8);
        }
    } else {
        int type = pol->identity == ID_DNS   ? GEN_DNS
                   : pol->identity == ID_URI ? GEN_URI
                                             : GEN_EMAIL;
        GENERAL_NAMES *sans = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
        int count = sans ? sk_GENERAL_NAME_num(sans) : 0;
        for (int i = 0; i < count && rc == QN_ENOTFOUND; i++) {
            const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
            if (g->type != type)
                continue;
            const ASN1_IA5STRING *s = g->d.ia5; /* dNSName, URI and rfc822Name are IA5 */
            any = true;
            rc = try_identity(pol, (const char *)ASN1_STRING_get0_data(s),
                              (size_t)ASN1_STRING_length(s), out, msg, cap);
        }
        GENERAL_NAMES_free(sans);
    }
    if (rc == QN_ENOTFOUND) {
        if (any)
            qn__auth_msg(msg, cap, "no policy entry matches the client certificate's %s",
                         id_name(pol->identity));
        else
            qn__auth_msg(msg, cap, "the client certificate has no usable %s",
                         id_name(pol->identity));
        return QN_EAUTH_CERT;
    }
    return rc;
}
