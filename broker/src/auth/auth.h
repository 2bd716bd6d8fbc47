/*
 * auth.h - principals and grants: who a call is, which tenant it acts in, and
 * what it may do to which queues.
 *
 * A principal is made by a verifier (jwt.h from a bearer token, mtls.h from a
 * client certificate) and is immutable: it may be read from any thread. The
 * broker keeps one per call (JWT) or per connection (mTLS) and frees it when
 * that ends.
 *
 * Grants. A grant is a scope over a queue-name pattern, written "<scope>:<pattern>":
 *   scope    produce | consume | admin
 *   pattern  "*"            every queue
 *            "<prefix>*"    every queue whose name starts with <prefix>; '*'
 *                           matches zero or more bytes of any kind, dots
 *                           included ("orders.*" matches "orders.eu" and
 *                           "orders.eu.paid", not "orders"; "orders*" matches
 *                           "orders" and "orders-archive")
 *            "<name>"       exactly that queue
 *   '*' may appear only as the last character; the rest is 1..255 bytes of
 *   UTF-8 without control characters (queue names' own rules). A queue whose
 *   name contains '*' is reached only through a wildcard covering it.
 * Scopes do not imply each other: admin does not grant produce or consume.
 * Matching is byte-wise and case-sensitive.
 */
#ifndef QN_AUTH_H
#define QN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Scopes (bits, so that a grant table can hold several). */
#define QN_SCOPE_PRODUCE 1u
#define QN_SCOPE_CONSUME 2u
#define QN_SCOPE_ADMIN 4u

/* The tenant of principals without one, when the configuration allows it. */
#define QN_TENANT_DEFAULT "00000000-0000-0000-0000-000000000001"

#define QN_AUTH_PATTERN_MAX 256u /* bytes of a pattern, '*' included */
#define QN_AUTH_GRANTS_MAX 256u  /* grants one principal may hold */
#define QN_AUTH_SUB_MAX 255u     /* bytes of a principal's name */

enum qn_principal_kind {
    QN_PRINCIPAL_JWT = 1,  /* from a bearer token; sub is the token's sub claim */
    QN_PRINCIPAL_MTLS = 2, /* from a client certificate; sub is its CN or SAN */
};

typedef struct qn_principal qn_principal;

/* How far a principal reaches with one scope (for discovery, see qn_auth_reach). */
enum qn_reach {
    QN_REACH_NONE = 0, /* no grant of this scope: refuse at once */
    QN_REACH_SOME = 1, /* some queues: filter candidates (qn_auth_allows, qn_auth_patterns) */
    QN_REACH_ALL = 2,  /* a "*" grant: every queue, no filtering needed */
};

/* One grant's pattern as the SQL side needs it: a queue matches when
 * prefix ? name starts with text[0..len) : name equals text[0..len). */
struct qn_pattern {
    const char *text; /* borrowed from the principal; not NUL-terminated when prefix */
    size_t len;       /* 0 only for the "*" grant (prefix with nothing before '*') */
    bool prefix;
};

/* The principal's name: the JWT sub, or the certificate identity. NUL-terminated,
 * 1..QN_AUTH_SUB_MAX bytes of UTF-8 without control characters; borrowed. */
const char *qn_principal_sub(const qn_principal *p);

/* The tenant's 16 UUID bytes; borrowed. */
const uint8_t *qn_principal_tenant(const qn_principal *p);

enum qn_principal_kind qn_principal_kind(const qn_principal *p);

/* Number of grants (0..QN_AUTH_GRANTS_MAX). */
size_t qn_principal_grant_count(const qn_principal *p);

/*
 * Grant i: its scope bits and pattern text ("produce:orders.*" gives
 * QN_SCOPE_PRODUCE and "orders.*"). Returns QN_OK, or QN_ERANGE when i is out
 * of range. The pattern is borrowed, NUL-terminated.
 */
int qn_principal_grant(const qn_principal *p, size_t i, unsigned *scope, const char **pattern);

/* Frees a principal. NULL is fine. */
void qn_principal_free(qn_principal *p);

/*
 * Whether p may use `scope` (one QN_SCOPE_* bit) on the queue named
 * queue[0..len). False for a NULL principal and for scope values that are not
 * exactly one known bit.
 */
bool qn_auth_allows(const qn_principal *p, unsigned scope, const char *queue, size_t len);

/*
 * Discovery (Pop/Consume by namespace or task, lists, stats). Queue names do not
 * encode namespaces, so no grant can be judged by namespace alone: the broker
 * asks qn_auth_reach() first (NONE: refuse or return nothing without touching
 * storage; ALL: no filter), and for SOME passes the principal's patterns
 * (qn_auth_patterns) into the storage call, so that the SQL only ever claims a
 * queue the caller may use (a filter applied after a pop would already hold
 * the lease), or filters listed names with qn_auth_allows / qn_auth_filter.
 */
enum qn_reach qn_auth_reach(const qn_principal *p, unsigned scope);

/*
 * Writes up to cap patterns of the grants of `scope` to out and returns how many
 * the principal has (which may exceed cap: call again with a larger array).
 * The "*" grant appears as {text "", len 0, prefix true}.
 */
size_t qn_auth_patterns(const qn_principal *p, unsigned scope, struct qn_pattern *out, size_t cap);

/*
 * Keeps the names p may use with `scope`: compacts names[0..n) (and lens) in
 * place, preserving order, and returns the number kept.
 */
size_t qn_auth_filter(const qn_principal *p, unsigned scope, const char **names, size_t *lens,
                      size_t n);

/*
 * Parses one grant "<scope>:<pattern>" (the grammar above) from s[0..n).
 * Returns QN_OK and writes *scope and the pattern's span within s (pattern
 * points into s), or QN_EINVAL when the text before ':' is not a scope word
 * (callers decide whether to skip it), or QN_EAUTH_CLAIM when the scope is
 * known but the pattern breaks the grammar.
 */
int qn_grant_parse(const char *s, size_t n, unsigned *scope, const char **pattern,
                   size_t *pattern_len);

/* Whether name[0..len) matches pattern[0..plen) (the grammar above; the
 * pattern is assumed valid). */
bool qn_pattern_matches(const char *pattern, size_t plen, const char *name, size_t len);

/*
 * Extracts the credential of an `authorization` header value: "Bearer <token>"
 * (scheme case-insensitive, one or more spaces, no trailing space). Returns
 * QN_OK with *token pointing into value, or QN_EAUTH_MISSING when value is
 * NULL/empty, or QN_EAUTH_MALFORMED for another scheme or an empty token.
 */
int qn_auth_bearer(const char *value, size_t len, const char **token, size_t *token_len);

#endif
