/*
 * rpc/authz.c - the grants of a call's principal, for the handlers (see
 * authz.h).
 *
 * Does: read the principal the gate attached, answer scope checks with the
 * grant matcher (auth/grant.c), turn grants into storage name filters, write
 * audit lines for refusals and admin mutations.
 * Does not: authenticate (security.c did, before the handler ran) or know any
 * RPC's request (the handlers pass the queue names they are about to touch).
 *
 * Invariant: without a principal (QUEEN_AUTH=none) every check passes and the
 * tenant is the default one, so the services behave exactly as they did before
 * auth existed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/authz.h"
#include "security.h"

static const uint8_t default_tenant[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

const uint8_t *qn_authz_default_tenant(void)
{
    return default_tenant;
}

const qn_principal *qn_authz_principal(const qn_call *call)
{
    return qn_call_auth(call);
}

const uint8_t *qn_authz_tenant(const qn_call *call)
{
    const qn_principal *p = qn_authz_principal(call);
    return p ? qn_principal_tenant(p) : default_tenant;
}

struct qn_call_opts qn_authz_opts(const qn_call *call, int64_t deadline_ms)
{
    struct qn_call_opts o = {deadline_ms, qn_authz_tenant(call), NULL};
    return o;
}

const char *qn_authz_scope_name(unsigned scope)
{
    return scope == QN_SCOPE_PRODUCE   ? "produce"
           : scope == QN_SCOPE_CONSUME ? "consume"
           : scope == QN_SCOPE_ADMIN   ? "admin"
                                       : "?";
}

bool qn_authz_may(const qn_call *call, unsigned scope, const char *queue)
{
    const qn_principal *p = qn_authz_principal(call);
    return p == NULL || qn_auth_allows(p, scope, queue, strlen(queue));
}

static const char *rpc_path(const qn_call *call)
{
    const struct qn_method *m = qn_call_method(call);
    return m ? m->path : "?";
}

void qn_authz_refuse(const qn_call *call, unsigned scope, const char *queue, const char *reason,
                     char *why, size_t cap)
{
    snprintf(why, cap, "permission denied: %s", reason);
    char audit[512]; /* reason is at most 400 bytes (qn_authz_check), the scope a word */
    snprintf(audit, sizeof audit, "%.400s (scope %s)", reason, qn_authz_scope_name(scope));
    qn_audit("denied", qn_authz_principal(call), rpc_path(call), queue, audit);
}

bool qn_authz_check(const qn_call *call, unsigned scope, const char *queue, char *why, size_t cap)
{
    if (qn_authz_may(call, scope, queue))
        return true;
    char reason[400];
    snprintf(reason, sizeof reason, "no %s grant covers queue \"%.255s\"",
             qn_authz_scope_name(scope), queue);
    qn_authz_refuse(call, scope, queue, reason, why, cap);
    return false;
}

void qn_authz_names_free(struct qn_authz_names *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; n->exact && i < n->f.n_exact; i++)
        free(n->exact[i]);
    for (size_t i = 0; n->prefix && i < n->f.n_prefix; i++)
        free(n->prefix[i]);
    free(n->exact);
    free(n->prefix);
    memset(n, 0, sizeof *n);
}

int qn_authz_names(const qn_call *call, unsigned scope, struct qn_authz_names *out)
{
    memset(out, 0, sizeof *out);
    const qn_principal *p = qn_authz_principal(call);
    if (p == NULL)
        return QN_REACH_ALL;
    enum qn_reach reach = qn_auth_reach(p, scope);
    if (reach != QN_REACH_SOME)
        return reach;
    size_t n = qn_auth_patterns(p, scope, NULL, 0);
    struct qn_pattern *pats = calloc(n ? n : 1, sizeof *pats);
    out->exact = calloc(n ? n : 1, sizeof *out->exact);
    out->prefix = calloc(n ? n : 1, sizeof *out->prefix);
    if (pats == NULL || out->exact == NULL || out->prefix == NULL)
        goto oom;
    qn_auth_patterns(p, scope, pats, n);
    for (size_t i = 0; i < n; i++) {
        char *c = malloc(pats[i].len + 1);
        if (c == NULL)
            goto oom;
        memcpy(c, pats[i].text, pats[i].len);
        c[pats[i].len] = '\0';
        if (pats[i].prefix)
            out->prefix[out->f.n_prefix++] = c;
        else
            out->exact[out->f.n_exact++] = c;
    }
    free(pats);
    out->f.exact = (const char *const *)out->exact;
    out->f.prefix = (const char *const *)out->prefix;
    return QN_REACH_SOME;
oom:
    free(pats);
    qn_authz_names_free(out);
    return -1;
}

void qn_authz_audit_admin(const qn_call *call, const char *queue, const char *what)
{
    qn_audit("admin", qn_authz_principal(call), rpc_path(call), queue, what);
}
