/*
 * auth_int.h - PRIVATE to broker/src/auth: the principal's layout and the
 * helpers the verifiers (jwt.c, mtls.c) build principals with.
 */
#ifndef QN_AUTH_INT_H
#define QN_AUTH_INT_H

#include <stdarg.h>

#include "auth.h"

struct qn_grant {
    unsigned scope; /* exactly one QN_SCOPE_* bit */
    char *pattern;  /* owned, NUL-terminated, valid per auth.h's grammar */
    size_t len;     /* bytes of pattern before a trailing '*', or all of it */
    bool prefix;    /* pattern ends with '*' */
};

struct qn_principal {
    enum qn_principal_kind kind;
    char *sub; /* owned; qn__auth_name_ok */
    uint8_t tenant[16];
    size_t n;                /* grants used, <= QN_AUTH_GRANTS_MAX */
    size_t cap;              /* grants allocated */
    struct qn_grant *grants; /* owned */
};

/* True when s[0..n) is 1..max bytes of UTF-8 without control characters
 * (bytes < 0x20 and 0x7f), NUL included. */
bool qn__auth_text_ok(const char *s, size_t n, size_t max);

/* A new principal with no grants. Returns QN_OK, QN_EAUTH_CLAIM when sub is
 * not a valid name (1..QN_AUTH_SUB_MAX bytes, qn__auth_text_ok), QN_ENOMEM. */
int qn__principal_new(enum qn_principal_kind kind, const char *sub, size_t sub_len,
                      const uint8_t tenant[16], qn_principal **out);

/*
 * Adds the grant written in s[0..n). An entry whose scope word is unknown is
 * skipped when !strict (tokens may carry other services' scopes) and refused
 * when strict (a policy file is ours). Returns QN_OK, QN_EAUTH_CLAIM (bad
 * pattern; unknown scope when strict; over QN_AUTH_GRANTS_MAX) with a message
 * in msg, or QN_ENOMEM.
 */
int qn__principal_add_grant(qn_principal *p, const char *s, size_t n, bool strict, char *msg,
                            size_t cap);

/* snprintf into msg[0..cap) when cap > 0. */
void qn__auth_msg(char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
