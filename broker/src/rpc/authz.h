/*
 * rpc/authz.h - private to rpc/: what the principal of a call may do, asked
 * by every queen.v1 handler before its first storage call.
 *
 * The principal is what the server's gate (security.c) attached to the call;
 * without auth (QUEEN_AUTH=none) there is none, every check passes and every
 * call acts in the default tenant. Scopes per RPC:
 *   produce  Push items, Transact pushes
 *   consume  Pop, Consume, Ack, RenewLease, Transact acks, Fetch
 *   admin    every AdminService RPC (ReplayDeadLetter: on the dead letter's
 *            queue and on the queue it is replayed into)
 * A refusal answers PERMISSION_DENIED before anything is written and writes an
 * audit line (security.h, qn_audit).
 */
#ifndef QN_BROKER_AUTHZ_H
#define QN_BROKER_AUTHZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/auth.h"
#include "queen/store.h"
#include "transport/call.h"

/* The call's principal, NULL without auth. Borrowed for the call's life. */
const qn_principal *qn_authz_principal(const qn_call *call);

/* The tenant the call acts in (16 bytes): its principal's, else the default
 * tenant. Borrowed for the call's life. */
const uint8_t *qn_authz_tenant(const qn_call *call);

/* The default tenant's 16 bytes (00000000-0000-0000-0000-000000000001). */
const uint8_t *qn_authz_default_tenant(void);

/* Options of a storage call made for this call: its deadline (deadline_ms
 * argument, 0 = none) and its tenant. */
struct qn_call_opts qn_authz_opts(const qn_call *call, int64_t deadline_ms);

/* "produce", "consume" or "admin". */
const char *qn_authz_scope_name(unsigned scope);

/* Whether the call may use scope (QN_SCOPE_*) on queue (true without auth). */
bool qn_authz_may(const qn_call *call, unsigned scope, const char *queue);

/*
 * qn_authz_may, and on a refusal: an audit line (event "denied") and the
 * client's message in why[0..cap) ("permission denied: ..."). The caller then
 * answers PERMISSION_DENIED with it, having written nothing.
 */
bool qn_authz_check(const qn_call *call, unsigned scope, const char *queue, char *why, size_t cap);

/* Refuses a call that names no queue or several (audit line + message), for
 * reasons decided by the caller (e.g. "name a queue"). */
void qn_authz_refuse(const qn_call *call, unsigned scope, const char *queue, const char *reason,
                     char *why, size_t cap);

/* The names a call may reach with one scope, as a storage filter (store.h). */
struct qn_authz_names {
    struct qn_name_filter f;
    char **exact;  /* owned, NUL-terminated */
    char **prefix; /* owned, NUL-terminated (the pattern without its '*') */
};

/*
 * How far the call reaches with scope (auth.h, enum qn_reach): QN_REACH_ALL
 * without auth or with a "*" grant (no filter needed), QN_REACH_NONE without
 * any grant of the scope, QN_REACH_SOME otherwise: then *out holds the filter
 * (free it with qn_authz_names_free). Returns -1 when out of memory.
 */
int qn_authz_names(const qn_call *call, unsigned scope, struct qn_authz_names *out);
void qn_authz_names_free(struct qn_authz_names *n);

/* An audit line for an admin mutation the call is about to make (event
 * "admin"): principal, tenant, RPC, queue. */
void qn_authz_audit_admin(const qn_call *call, const char *queue, const char *what);

#endif
