/*
 * security.h - private to broker/: the process's credentials and keys: who may
 * call (QUEEN_AUTH: JWT key set, mTLS policy), and the key ring of encrypted
 * queues (QUEEN_ENCRYPTION_KEYRING).
 *
 * broker.c makes one at start (files read before the loop serves; a bad file
 * stops the start), installs qn_security_gate on the server so that every call
 * is authenticated before anything else of it runs, and calls
 * qn_security_reload on SIGHUP: the files are read again on a thread of their
 * own (reading blocks), and the new key set, policy and key ring are swapped in
 * on the loop; a part that fails keeps its old value and the log says why. No
 * connection is dropped by a reload.
 *
 * Threading: the loop thread only, except the reload thread, which touches
 * nothing here but its own result slot (under a mutex).
 */
#ifndef QN_BROKER_SECURITY_H
#define QN_BROKER_SECURITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/auth.h"
#include "queen/envelope.h"
#include "transport/call.h"

struct event_base;
struct qn_config;
struct qn_security;

/*
 * Reads the key files, the policy and the key ring cfg names (blocking: before
 * the loop serves) and logs what was loaded, and a warning when QUEEN_AUTH is
 * none on an address other than loopback. Returns QN_OK with *out, or an error
 * with a message naming the file and what is wrong (logged as well).
 */
int qn_security_new(struct event_base *base, const struct qn_config *cfg, struct qn_security **out);

/* Joins a reload in progress and frees. NULL allowed. */
void qn_security_free(struct qn_security *s);

/* SIGHUP: reads every file again on a thread; the loop swaps in each part that
 * loaded and keeps (and logs) each that did not. A reload asked for while one
 * runs runs again once it finished. */
void qn_security_reload(struct qn_security *s);

/* Reloads completed since start (tests wait on the log line instead). */
uint64_t qn_security_reloads(const struct qn_security *s);

/* QUEEN_AUTH is not none: calls carry principals. */
bool qn_security_auth_on(const struct qn_security *s);

/* The current key ring (NULL when QUEEN_ENCRYPTION_KEYRING is unset). Borrowed
 * until the callback that asked returns: a reload may free it on a later turn. */
const qn_keyring *qn_security_keyring(const struct qn_security *s);

/*
 * The server's gate (qn_call_gate_fn; ud is the qn_security): with auth on,
 * every call but health and reflection (when QUEEN_AUTH_OPEN_* leave them open)
 * must carry a bearer token (jwt) or come over TLS with a client certificate
 * the policy names (mtls). With jwt,mtls either does; a call that carries a
 * token is judged by its token. The principal is attached to the call
 * (qn_call_auth). Refusals answer UNAUTHENTICATED with a message that says what
 * was wrong and never contains the token, and write an audit line.
 */
enum qn_grpc_code qn_security_gate(void *ud, qn_call *call, char *msg, size_t cap);

/* One audit line (level WARN for event "denied" and "unauthenticated", INFO
 * otherwise): event, principal (sub, or "-" without auth), tenant, RPC (the
 * method's last path element), queue, and a reason. Strings are quoted, with
 * '"' and '\' escaped and control bytes dropped. */
void qn_audit(const char *event, const qn_principal *p, const char *rpc_path, const char *queue,
              const char *reason);

#endif
