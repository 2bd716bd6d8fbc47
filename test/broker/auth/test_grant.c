/*
 * test_grant.c - broker/src/auth/grant.c: the grant grammar, a table of matcher
 * cases, a property test of the matcher against a slow reference glob,
 * discovery helpers (reach, patterns, filter) and the bearer header parser.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"

#include "auth_int.h"
#include "auth_test.h"

static const uint8_t tenant0[16] = {0};

qn_principal *qn_test_principal(const char *const *grants, size_t n)
{
    qn_principal *p = NULL;
    ck_assert_int_eq(qn__principal_new(QN_PRINCIPAL_JWT, "tester", 6, tenant0, &p), QN_OK);
    for (size_t i = 0; i < n; i++) {
        char msg[160] = "";
        int rc = qn__principal_add_grant(p, grants[i], strlen(grants[i]), true, msg, sizeof msg);
        ck_assert_msg(rc == QN_OK, "grant %s: %s", grants[i], msg);
    }
    return p;
}

static bool allows(const qn_principal *p, unsigned scope, const char *q)
{
    return qn_auth_allows(p, scope, q, strlen(q));
}

START_TEST(grammar)
{
    static const struct {
        const char *text;
        int rc;
        unsigned scope;
        const char *pattern;
    } cases[] = {
        {"produce:orders", QN_OK, QN_SCOPE_PRODUCE, "orders"},
        {"consume:*", QN_OK, QN_SCOPE_CONSUME, "*"},
        {"admin:orders.*", QN_OK, QN_SCOPE_ADMIN, "orders.*"},
        {"admin:caf\xc3\xa9*", QN_OK, QN_SCOPE_ADMIN, "caf\xc3\xa9*"},
        {"consume:a:b", QN_OK, QN_SCOPE_CONSUME, "a:b"}, /* ':' is a name byte */
        {"produce:", QN_EAUTH_CLAIM, 0, NULL},
        {"produce:**", QN_EAUTH_CLAIM, 0, NULL},
        {"produce:*x", QN_EAUTH_CLAIM, 0, NULL},
        {"produce:or*ders", QN_EAUTH_CLAIM, 0, NULL},
        {"produce:a\tb", QN_EAUTH_CLAIM, 0, NULL},
        {"produce:a\xff", QN_EAUTH_CLAIM, 0, NULL},
        {"Produce:x", QN_EINVAL, 0, NULL},
        {"write:x", QN_EINVAL, 0, NULL},
        {"openid", QN_EINVAL, 0, NULL},
        {":x", QN_EINVAL, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned scope = 0;
        const char *pat = NULL;
        size_t pl = 0;
        int rc = qn_grant_parse(cases[i].text, strlen(cases[i].text), &scope, &pat, &pl);
        ck_assert_msg(rc == cases[i].rc, "%s: %d", cases[i].text, rc);
        if (rc == QN_OK) {
            ck_assert_uint_eq(scope, cases[i].scope);
            ck_assert_uint_eq(pl, strlen(cases[i].pattern));
            ck_assert(memcmp(pat, cases[i].pattern, pl) == 0);
        }
    }
    /* lengths: 255 name bytes (+ '*') fine, 256 not */
    char g[300];
    memcpy(g, "admin:", 6);
    memset(g + 6, 'a', 255);
    unsigned sc;
    const char *pat;
    size_t pl;
    ck_assert_int_eq(qn_grant_parse(g, 6 + 255, &sc, &pat, &pl), QN_OK);
    g[6 + 255] = '*';
    ck_assert_int_eq(qn_grant_parse(g, 6 + 256, &sc, &pat, &pl), QN_OK);
    g[6 + 255] = 'a';
    ck_assert_int_eq(qn_grant_parse(g, 6 + 256, &sc, &pat, &pl), QN_EAUTH_CLAIM);

    /* strict refuses unknown scope words, lenient skips them */
    qn_principal *p = NULL;
    ck_assert_int_eq(qn__principal_new(QN_PRINCIPAL_JWT, "x", 1, tenant0, &p), QN_OK);
    char msg[160];
    ck_assert_int_eq(qn__principal_add_grant(p, "openid", 6, false, msg, sizeof msg), QN_OK);
    ck_assert_uint_eq(qn_principal_grant_count(p), 0);
    ck_assert_int_eq(qn__principal_add_grant(p, "openid", 6, true, msg, sizeof msg),
                     QN_EAUTH_CLAIM);
    ck_assert_int_eq(qn__principal_add_grant(p, "consume:a*b", 11, false, msg, sizeof msg),
                     QN_EAUTH_CLAIM);
    ck_assert_msg(strstr(msg, "a*b") == NULL, "message quotes the grant: %s", msg);
    for (unsigned i = 0; i < QN_AUTH_GRANTS_MAX; i++)
        ck_assert_int_eq(qn__principal_add_grant(p, "consume:x", 9, true, msg, sizeof msg), QN_OK);
    ck_assert_int_eq(qn__principal_add_grant(p, "consume:x", 9, true, msg, sizeof msg),
                     QN_EAUTH_CLAIM);
    unsigned scope;
    const char *pattern;
    ck_assert_int_eq(qn_principal_grant(p, 0, &scope, &pattern), QN_OK);
    ck_assert_str_eq(pattern, "x");
    ck_assert_int_eq(qn_principal_grant(p, QN_AUTH_GRANTS_MAX, &scope, &pattern), QN_ERANGE);
    qn_principal_free(p);
    qn_principal_free(NULL);

    /* principal names */
    ck_assert_int_eq(qn__principal_new(QN_PRINCIPAL_JWT, "", 0, tenant0, &p), QN_EAUTH_CLAIM);
    ck_assert_int_eq(qn__principal_new(QN_PRINCIPAL_JWT, "a\nb", 3, tenant0, &p), QN_EAUTH_CLAIM);
    ck_assert_int_eq(qn__principal_new(QN_PRINCIPAL_JWT, "a\0b", 3, tenant0, &p), QN_EAUTH_CLAIM);
}
END_TEST

START_TEST(matcher_table)
{
    static const char *const grants[] = {
        "produce:orders", "produce:logs.*", "consume:*",
        "admin:billing*", "admin:ops.",     "produce:caf\xc3\xa9.*",
    };
    qn_principal *p = qn_test_principal(grants, sizeof grants / sizeof grants[0]);
    static const struct {
        unsigned scope;
        const char *queue;
        bool want;
    } t[] = {
        {QN_SCOPE_PRODUCE, "orders", true},
        {QN_SCOPE_PRODUCE, "orders.eu", false}, /* exact is exact */
        {QN_SCOPE_PRODUCE, "order", false},
        {QN_SCOPE_PRODUCE, "Orders", false}, /* case-sensitive */
        {QN_SCOPE_PRODUCE, "logs.app", true},
        {QN_SCOPE_PRODUCE, "logs.app.eu.1", true}, /* '*' crosses dots */
        {QN_SCOPE_PRODUCE, "logs.", true},         /* '*' matches nothing too */
        {QN_SCOPE_PRODUCE, "logs", false},
        {QN_SCOPE_PRODUCE, "logsx", false},
        {QN_SCOPE_PRODUCE, "caf\xc3\xa9.x", true},
        {QN_SCOPE_PRODUCE, "cafe.x", false},
        {QN_SCOPE_CONSUME, "anything.at.all", true},
        {QN_SCOPE_CONSUME, "", true},
        {QN_SCOPE_ADMIN, "billing", true},
        {QN_SCOPE_ADMIN, "billing-archive", true},
        {QN_SCOPE_ADMIN, "bill", false},
        {QN_SCOPE_ADMIN, "ops.", true},
        {QN_SCOPE_ADMIN, "ops.x", false},
        {QN_SCOPE_ADMIN, "orders", false},                      /* produce does not imply admin */
        {QN_SCOPE_PRODUCE, "billing", false},                   /* nor admin produce */
        {QN_SCOPE_PRODUCE | QN_SCOPE_CONSUME, "orders", false}, /* one scope per question */
        {0, "orders", false},
        {8, "orders", false},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        ck_assert_msg(allows(p, t[i].scope, t[i].queue) == t[i].want, "case %zu: %u %s", i,
                      t[i].scope, t[i].queue);
    ck_assert(!qn_auth_allows(NULL, QN_SCOPE_CONSUME, "x", 1));
    /* names are compared with their length, not as C strings */
    ck_assert(!qn_auth_allows(p, QN_SCOPE_PRODUCE, "orders\0x", 8));
    ck_assert(qn_auth_allows(p, QN_SCOPE_PRODUCE, "ordersXYZ", 6));
    qn_principal_free(p);
}
END_TEST

/* ---- property test: the matcher against a slow reference glob ---- */

/* '*' matches any run of bytes, anywhere in the pattern (a superset grammar). */
static bool ref_glob(const char *p, size_t pn, const char *s, size_t sn)
{
    if (pn == 0)
        return sn == 0;
    if (p[0] == '*') {
        for (size_t k = 0; k <= sn; k++)
            if (ref_glob(p + 1, pn - 1, s + k, sn - k))
                return true;
        return false;
    }
    return sn > 0 && p[0] == s[0] && ref_glob(p + 1, pn - 1, s + 1, sn - 1);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t random_text(char *out, size_t max)
{
    static const char *const atoms[] = {"a", "b", ".", "-", "\xc3\xa9", "ab", "a."};
    size_t n = 0, want = rnd() % (max / 2);
    while (n < want) {
        const char *a = atoms[rnd() % 7];
        size_t l = strlen(a);
        if (n + l > max - 2)
            break;
        memcpy(out + n, a, l);
        n += l;
    }
    return n;
}

START_TEST(matcher_property)
{
    rng_state = 0x9E3779B97F4A7C15ull;
    char pat[64], name[64], grant[80];
    for (int iter = 0; iter < 200000; iter++) {
        size_t pl = random_text(pat, 24);
        int shape = (int)(rnd() % 3); /* exact, trailing star, a star inserted before the end */
        if (shape == 1) {
            pat[pl++] = '*';
        } else if (shape == 2 && pl > 0) {
            size_t at = rnd() % pl;
            memmove(pat + at + 1, pat + at, pl - at);
            pat[at] = '*';
            pl++;
        }
        /* names often share the pattern's prefix */
        size_t nl;
        if (rnd() % 2 && pl) {
            nl = rnd() % (pl + 1);
            memcpy(name, pat, nl);
            for (size_t i = 0; i < nl; i++)
                if (name[i] == '*')
                    name[i] = 'a';
            nl += random_text(name + nl, 64 - nl);
        } else {
            nl = random_text(name, 32);
        }
        int gl = snprintf(grant, sizeof grant, "consume:%.*s", (int)pl, pat);
        unsigned scope;
        const char *gp;
        size_t gpl;
        int rc = qn_grant_parse(grant, (size_t)gl, &scope, &gp, &gpl);
        const char *star = memchr(pat, '*', pl);
        bool valid = pl > 0 && (!star || star == pat + pl - 1);
        ck_assert_msg((rc == QN_OK) == valid, "iter %d: grammar of \"%.*s\"", iter, (int)pl, pat);
        if (rc != QN_OK)
            continue;
        bool want = ref_glob(pat, pl, name, nl);
        ck_assert_msg(qn_pattern_matches(pat, pl, name, nl) == want, "iter %d: \"%.*s\" ~ \"%.*s\"",
                      iter, (int)pl, pat, (int)nl, name);
        qn_principal *p = NULL;
        ck_assert_int_eq(qn__principal_new(QN_PRINCIPAL_JWT, "x", 1, tenant0, &p), QN_OK);
        ck_assert_int_eq(qn__principal_add_grant(p, grant, (size_t)gl, true, NULL, 0), QN_OK);
        ck_assert(qn_auth_allows(p, QN_SCOPE_CONSUME, name, nl) == want);
        ck_assert(!qn_auth_allows(p, QN_SCOPE_PRODUCE, name, nl));
        qn_principal_free(p);
    }
}
END_TEST

START_TEST(discovery)
{
    static const char *const g1[] = {"consume:orders.*", "consume:audit", "produce:*"};
    qn_principal *p = qn_test_principal(g1, 3);
    ck_assert_int_eq(qn_auth_reach(p, QN_SCOPE_CONSUME), QN_REACH_SOME);
    ck_assert_int_eq(qn_auth_reach(p, QN_SCOPE_PRODUCE), QN_REACH_ALL);
    ck_assert_int_eq(qn_auth_reach(p, QN_SCOPE_ADMIN), QN_REACH_NONE);
    ck_assert_int_eq(qn_auth_reach(NULL, QN_SCOPE_ADMIN), QN_REACH_NONE);

    struct qn_pattern pats[4];
    ck_assert_uint_eq(qn_auth_patterns(p, QN_SCOPE_CONSUME, pats, 1), 2); /* count beyond cap */
    ck_assert_uint_eq(qn_auth_patterns(p, QN_SCOPE_CONSUME, pats, 4), 2);
    ck_assert(pats[0].prefix && pats[0].len == 7 && memcmp(pats[0].text, "orders.", 7) == 0);
    ck_assert(!pats[1].prefix && pats[1].len == 5 && memcmp(pats[1].text, "audit", 5) == 0);
    ck_assert_uint_eq(qn_auth_patterns(p, QN_SCOPE_PRODUCE, pats, 4), 1);
    ck_assert(pats[0].prefix && pats[0].len == 0);
    ck_assert_uint_eq(qn_auth_patterns(p, QN_SCOPE_ADMIN, pats, 4), 0);

    const char *names[] = {"orders.eu", "audit", "billing", "orders", "orders.us", "audit2"};
    size_t lens[6];
    for (int i = 0; i < 6; i++)
        lens[i] = strlen(names[i]);
    size_t k = qn_auth_filter(p, QN_SCOPE_CONSUME, names, lens, 6);
    ck_assert_uint_eq(k, 3);
    ck_assert_str_eq(names[0], "orders.eu");
    ck_assert_str_eq(names[1], "audit");
    ck_assert_str_eq(names[2], "orders.us");
    ck_assert_uint_eq(lens[2], 9);
    qn_principal_free(p);
}
END_TEST

START_TEST(bearer)
{
    const char *tok;
    size_t n;
    ck_assert_int_eq(qn_auth_bearer("Bearer abc.def.ghi", 18, &tok, &n), QN_OK);
    ck_assert(n == 11 && memcmp(tok, "abc.def.ghi", 11) == 0);
    ck_assert_int_eq(qn_auth_bearer("bearer   x", 10, &tok, &n), QN_OK);
    ck_assert(n == 1 && *tok == 'x');
    ck_assert_int_eq(qn_auth_bearer(NULL, 0, &tok, &n), QN_EAUTH_MISSING);
    ck_assert_int_eq(qn_auth_bearer("", 0, &tok, &n), QN_EAUTH_MISSING);
    ck_assert_int_eq(qn_auth_bearer("Basic dXNlcjpwdw==", 18, &tok, &n), QN_EAUTH_MALFORMED);
    ck_assert_int_eq(qn_auth_bearer("Bearer", 6, &tok, &n), QN_EAUTH_MALFORMED);
    ck_assert_int_eq(qn_auth_bearer("Bearer ", 7, &tok, &n), QN_EAUTH_MALFORMED);
    ck_assert_int_eq(qn_auth_bearer("Bearerx abc", 11, &tok, &n), QN_EAUTH_MALFORMED);
    ck_assert_int_eq(qn_auth_bearer("Bearer a b", 10, &tok, &n), QN_EAUTH_MALFORMED);
    ck_assert_int_eq(qn_auth_bearer("Bearer a\n", 9, &tok, &n), QN_EAUTH_MALFORMED);
}
END_TEST

Suite *qn_test_grant_suite(void)
{
    Suite *s = suite_create("grant");
    TCase *tc = tcase_create("grant");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, grammar);
    tcase_add_test(tc, matcher_table);
    tcase_add_test(tc, matcher_property);
    tcase_add_test(tc, discovery);
    tcase_add_test(tc, bearer);
    suite_add_tcase(s, tc);
    return s;
}
