/*
 * rpc/admin_call.h - private to rpc/: the state and the endings every
 * AdminService RPC shares (svc_queues.c, svc_groups.c, svc_dlq.c, svc_stats.c).
 *
 * An admin RPC validates, makes one or two storage calls and maps rows to a
 * response. Its state is a struct qn_admin_call, or a bigger struct whose first
 * member is one (qn_admin_new() is given the size). Every ending below clears
 * the call's data, ends the call and frees the state, so after any of them the
 * handler must not touch either.
 */
#ifndef QN_BROKER_ADMIN_CALL_H
#define QN_BROKER_ADMIN_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/store.h"
#include "rpc/resp_arena.h"
#include "transport/call.h"

struct qn_app;

struct qn_admin_call {
    struct qn_app *app;
    qn_call *call;
    ProtobufCMessage *req; /* owned: the request */
    qn_store_req *sreq[2]; /* storage calls in flight; cancelled when the call ends early */
    struct qn_arena arena; /* the response's allocations */
    /* Extra teardown of the bigger struct (its own buffers), or NULL. Runs
     * once, before the state is freed. */
    void (*cleanup)(struct qn_admin_call *a);
    struct qn_conn_slot *slot; /* the connection's database slot (QUEEN_MAX_CONN_DB_CALLS) */
};

/*
 * Makes the state of one admin RPC: size bytes (>= sizeof struct
 * qn_admin_call), zeroed, owning msg, set as the call's data; counts the RPC.
 * NULL when out of memory: then the call was finished and msg freed.
 */
struct qn_admin_call *qn_admin_new(qn_call *call, ProtobufCMessage *msg, size_t size);

/* Ends the call with code and message (no response message). */
void qn_admin_finish(struct qn_admin_call *a, enum qn_grpc_code code, const char *msg);

/* Sends resp and ends the call OK (RESOURCE_EXHAUSTED when resp is over the
 * send limit). */
void qn_admin_reply(struct qn_admin_call *a, const ProtobufCMessage *resp);

/* Ends the call with the status of a failed storage call. */
void qn_admin_store_error(struct qn_admin_call *a, const struct qn_store_status *st);

/* The first storage call answered: true when it succeeded; otherwise the call
 * was ended with its error (and a is freed). */
bool qn_admin_ok(struct qn_admin_call *a, const struct qn_store_status *st);

/* rc of sending a storage call: true when sent; otherwise the call was ended
 * with rc's status (and a is freed). */
bool qn_admin_sent(struct qn_admin_call *a, int rc);

/* True when s is a valid name for `what`; otherwise the call was ended with
 * INVALID_ARGUMENT naming it (and a is freed). */
bool qn_admin_check_name(struct qn_admin_call *a, const char *s, const char *what,
                         bool allow_empty);

/* Options of the call's storage calls: its deadline and its tenant. */
struct qn_call_opts qn_admin_opts(const struct qn_admin_call *a);

/* True when the call may administer queue; otherwise the call was ended with
 * PERMISSION_DENIED (audited; a is freed). */
bool qn_admin_authorize(struct qn_admin_call *a, const char *queue);

/* The same for every queue (a call that names none, e.g. deleting a group on
 * all queues): only an "admin:*" grant (or no auth) passes. */
bool qn_admin_authorize_all(struct qn_admin_call *a, const char *what);

struct qn_authz_names;

/*
 * For list and stats calls that name no queue: returns 1 when the caller sees
 * every queue (no auth, or an "admin:*" grant), 0 when it sees some (*names is
 * then the filter to apply; the state's cleanup must free it with
 * qn_authz_names_free), or -1 when it has no admin grant at all or memory ran
 * out (the call was ended: PERMISSION_DENIED or RESOURCE_EXHAUSTED; a is freed).
 */
int qn_admin_reach(struct qn_admin_call *a, struct qn_authz_names *names);

/* An audit line for the admin mutation the call is about to make on queue. */
void qn_admin_audit(const struct qn_admin_call *a, const char *queue, const char *what);

/* on_cancel of every admin method: cancels the storage calls, frees the state. */
void qn_admin_cancel(qn_call *call, int reason);

#endif
