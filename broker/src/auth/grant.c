/*
 * grant.c - principals, grants and the grant matcher (auth.h).
 *
 * What it does: holds a principal (name, tenant, grants), parses grant text,
 * answers whether a principal may use a scope on a queue, and exports the
 * grants for discovery and listing.
 * What it deliberately does not: verify credentials (jwt.c, mtls.c) or know
 * about calls and RPCs (the broker maps each RPC to a scope and a queue).
 *
 * Invariants:
 *   1. Every stored pattern satisfies the grammar of auth.h; matching assumes
 *      it and never scans past either string.
 *   2. A principal is never modified after its verifier returns it.
 *   3. A principal holds at most QN_AUTH_GRANTS_MAX grants, so a check costs at
 *      most that many prefix comparisons.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "queen/error.h"

#include "auth_int.h"

void qn__auth_msg(char *msg, size_t cap, const char *fmt, ...)
{
    if (!msg || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

bool qn__auth_text_ok(const char *s, size_t n, size_t max)
{
    if (!s || n == 0 || n > max)
        return false;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c < 0x20 || c == 0x7F)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0)
            k = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            k = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            k = 4, cp = c & 0x07, min = 0x10000;
        else
            return false;
        if (k > n - i)
            return false;
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k;
    }
    return true;
}

int qn__principal_new(enum qn_principal_kind kind, const char *sub, size_t sub_len,
                      const uint8_t tenant[16], qn_principal **out)
{
    if (!qn__auth_text_ok(sub, sub_len, QN_AUTH_SUB_MAX))
        return QN_EAUTH_CLAIM;
    qn_principal *p = calloc(1, sizeof *p);
    if (!p)
        return QN_ENOMEM;
    p->sub = malloc(sub_len + 1);
    if (!p->sub) {
        free(p);
        return QN_ENOMEM;
    }
    memcpy(p->sub, sub, sub_len);
    p->sub[sub_len] = '\0';
    p->kind = kind;
    memcpy(p->tenant, tenant, 16);
    *out = p;
    return QN_OK;
}

void qn_principal_free(qn_principal *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->grants[i].pattern);
    free(p->grants);
    free(p->sub);
    free(p);
}

static const struct {
    const char *word;
    unsigned scope;
} scope_words[] = {
    {"produce", QN_SCOPE_PRODUCE},
    {"consume", QN_SCOPE_CONSUME},
    {"admin", QN_SCOPE_ADMIN},
};

int qn_grant_parse(const char *s, size_t n, unsigned *scope, const char **pattern,
                   size_t *pattern_len)
{
    if (!s || !scope || !pattern || !pattern_len)
        return QN_EINVAL;
    const char *colon = memchr(s, ':', n);
    if (!colon)
        return QN_EINVAL;
    size_t wl = (size_t)(colon - s);
    unsigned sc = 0;
    for (size_t i = 0; i < sizeof scope_words / sizeof scope_words[0]; i++)
        if (strlen(scope_words[i].word) == wl && memcmp(scope_words[i].word, s, wl) == 0)
            sc = scope_words[i].scope;
    if (!sc)
        return QN_EINVAL;
    const char *pat = colon + 1;
    size_t pl = n - wl - 1;
    if (pl == 0 || pl > QN_AUTH_PATTERN_MAX)
        return QN_EAUTH_CLAIM;
    /* '*' only last; the rest a valid name (a lone "*" has no rest) */
    const char *star = memchr(pat, '*', pl);
    if (star && star != pat + pl - 1)
        return QN_EAUTH_CLAIM;
    size_t body = star ? pl - 1 : pl;
    if (body > 255 || (body && !qn__auth_text_ok(pat, body, 255)) || (!body && !star))
        return QN_EAUTH_CLAIM;
    *scope = sc;
    *pattern = pat;
    *pattern_len = pl;
    return QN_OK;
}

int qn__principal_add_grant(qn_principal *p, const char *s, size_t n, bool strict, char *msg,
                            size_t cap)
{
    unsigned scope;
    const char *pat;
    size_t pl;
    int rc = qn_grant_parse(s, n, &scope, &pat, &pl);
    if (rc == QN_EINVAL) {
        if (!strict)
            return QN_OK;
        qn__auth_msg(msg, cap, "grant %zu has no scope produce, consume or admin before ':'",
                     p->n + 1);
        return QN_EAUTH_CLAIM;
    }
    if (rc != QN_OK) {
        qn__auth_msg(msg, cap,
                     "grant %zu has an invalid queue pattern ('*' only at the end, "
                     "at most 255 bytes of UTF-8 before it)",
                     p->n + 1);
        return rc;
    }
    if (p->n == QN_AUTH_GRANTS_MAX) {
        qn__auth_msg(msg, cap, "more than %u grants", QN_AUTH_GRANTS_MAX);
        return QN_EAUTH_CLAIM;
    }
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 8;
        if (nc > QN_AUTH_GRANTS_MAX)
            nc = QN_AUTH_GRANTS_MAX;
        struct qn_grant *g = realloc(p->grants, nc * sizeof *g);
        if (!g)
            return QN_ENOMEM;
        p->grants = g;
        p->cap = nc;
    }
    struct qn_grant *g = &p->grants[p->n];
    g->pattern = malloc(pl + 1);
    if (!g->pattern)
        return QN_ENOMEM;
    memcpy(g->pattern, pat, pl);
    g->pattern[pl] = '\0';
    g->scope = scope;
    g->prefix = pat[pl - 1] == '*';
    g->len = g->prefix ? pl - 1 : pl;
    p->n++;
    return QN_OK;
}

const char *qn_principal_sub(const qn_principal *p)
{
    return p->sub;
}

const uint8_t *qn_principal_tenant(const qn_principal *p)
{
    return p->tenant;
}

enum qn_principal_kind qn_principal_kind(const qn_principal *p)
{
    return p->kind;
}

size_t qn_principal_grant_count(const qn_principal *p)
{
    return p ? p->n : 0;
}

int qn_principal_grant(const qn_principal *p, size_t i, unsigned *scope, const char **pattern)
{
    if (!p || i >= p->n)
        return QN_ERANGE;
    if (scope)
        *scope = p->grants[i].scope;
    if (pattern)
        *pattern = p->grants[i].pattern;
    return QN_OK;
}

bool qn_pattern_matches(const char *pattern, size_t plen, const char *name, size_t len)
{
    if (plen && pattern[plen - 1] == '*')
        return len >= plen - 1 && memcmp(pattern, name, plen - 1) == 0;
    return len == plen && memcmp(pattern, name, len) == 0;
}

static bool one_scope(unsigned scope)
{
    return scope == QN_SCOPE_PRODUCE || scope == QN_SCOPE_CONSUME || scope == QN_SCOPE_ADMIN;
}

bool qn_auth_allows(const qn_principal *p, unsigned scope, const char *queue, size_t len)
{
    if (!p || !one_scope(scope) || (!queue && len))
        return false;
    for (size_t i = 0; i < p->n; i++) {
        const struct qn_grant *g = &p->grants[i];
        if (g->scope != scope)
            continue;
        if (g->prefix ? (len >= g->len && memcmp(g->pattern, queue, g->len) == 0)
                      : (len == g->len && memcmp(g->pattern, queue, len) == 0))
            return true;
    }
    return false;
}

enum qn_reach qn_auth_reach(const qn_principal *p, unsigned scope)
{
    if (!p || !one_scope(scope))
        return QN_REACH_NONE;
    enum qn_reach r = QN_REACH_NONE;
    for (size_t i = 0; i < p->n; i++) {
        const struct qn_grant *g = &p->grants[i];
        if (g->scope != scope)
            continue;
        if (g->prefix && g->len == 0)
            return QN_REACH_ALL;
        r = QN_REACH_SOME;
    }
    return r;
}

size_t qn_auth_patterns(const qn_principal *p, unsigned scope, struct qn_pattern *out, size_t cap)
{
    size_t k = 0;
    if (!p || !one_scope(scope))
        return 0;
    for (size_t i = 0; i < p->n; i++) {
        const struct qn_grant *g = &p->grants[i];
        if (g->scope != scope)
            continue;
        if (out && k < cap)
            out[k] = (struct qn_pattern){g->pattern, g->len, g->prefix};
        k++;
    }
    return k;
}

size_t qn_auth_filter(const qn_principal *p, unsigned scope, const char **names, size_t *lens,
                      size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!qn_auth_allows(p, scope, names[i], lens[i]))
            continue;
        names[k] = names[i];
        lens[k] = lens[i];
        k++;
    }
    return k;
}

int qn_auth_bearer(const char *value, size_t len, const char **token, size_t *token_len)
{
    if (!value || len == 0)
        return QN_EAUTH_MISSING;
    if (!token || !token_len)
        return QN_EINVAL;
    if (len < 7 || strncasecmp(value, "bearer", 6) != 0 || value[6] != ' ')
        return QN_EAUTH_MALFORMED;
    size_t i = 6;
    while (i < len && value[i] == ' ')
        i++;
    if (i == len)
        return QN_EAUTH_MALFORMED;
    for (size_t j = i; j < len; j++)
        if ((unsigned char)value[j] <= 0x20 || (unsigned char)value[j] >= 0x7F)
            return QN_EAUTH_MALFORMED;
    *token = value + i;
    *token_len = len - i;
    return QN_OK;
}
