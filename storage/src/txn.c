/*
 * txn.c - several procedures in one database transaction (qn_store_txn_*).
 *
 * Does: build one request whose steps are strict pushes, strict acks,
 * check_leases_v1 and delete_dlq_v1 calls, sent in ONE pipeline sync, i.e. one
 * implicit transaction: the first step that raises aborts the rest and rolls
 * back the steps before it (store_engine.c explains why no explicit BEGIN/COMMIT).
 * Does not: retry a failed step alone (a conflict retries the whole transaction,
 * in the engine), or accept non-strict steps.
 *
 * Invariants:
 *   1. Steps keep the order they were added in; the result lists them so.
 *   2. A builder holds a request in REQ_BUILDING; commit hands it to the engine
 *      (or frees it), abandon frees it; either way the builder is gone.
 *   3. The tenant (a push parameter) is only known at commit: push steps get it
 *      then, through their last parameter.
 */
#include <stdlib.h>

#include "queen/error.h"
#include "store_int.h"

#define TXN_MAX_STEPS 256

enum { K_PUSH = 1, K_ACK = 2, K_CHECK = 3, K_DELETE_DLQ = 4 };

struct qn_store_txn {
    qn_store_req *r;
};

int qn_store_txn_new(qn_store *st, qn_store_txn **out)
{
    return qn_store_txn_new_steps(st, TXN_MAX_STEPS, out);
}

int qn_store_txn_new_steps(qn_store *st, int max_steps, qn_store_txn **out)
{
    if (out == NULL || max_steps < 1 || max_steps > QN_STORE_TXN_STEPS_MAX)
        return QN_EINVAL;
    qn_store_txn *t = calloc(1, sizeof *t);
    if (t == NULL)
        return QN_ENOMEM;
    int rc = qn__req_new(st, max_steps, NULL, &t->r);
    if (rc != QN_OK) {
        free(t);
        return rc;
    }
    *out = t;
    return QN_OK;
}

void qn_store_txn_abandon(qn_store_txn *t)
{
    if (t == NULL)
        return;
    qn__req_discard(t->r);
    free(t);
}

/* Adds a step; on a parameter failure removes it again and returns the error. */
static int added(qn_store_txn *t, struct qn__step *s, int kind, int rc)
{
    if (rc != QN_OK) {
        qn__req_pop_step(t->r);
        return rc;
    }
    s->kind = kind;
    return QN_OK;
}

int qn_store_txn_push(qn_store_txn *t, const struct qn_push_segment *segs, size_t n)
{
    if (t == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__req_add(t->r, QN_STMT_PUSH, qn__decode_push);
    if (s == NULL)
        return QN_ELIMIT;
    s->expect = n;
    return added(t, s, K_PUSH, qn__params_push(&s->p, segs, n, true, false, qn__default_tenant));
}

int qn_store_txn_ack(qn_store_txn *t, const struct qn_ack_args *a)
{
    if (t == NULL || a == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__req_add(t->r, QN_STMT_ACK, qn__decode_ack);
    if (s == NULL)
        return QN_ELIMIT;
    s->expect = a->n;
    return added(t, s, K_ACK, qn__params_ack(&s->p, a, true));
}

int qn_store_txn_check_leases(qn_store_txn *t, const char *const *workers, size_t n)
{
    if (t == NULL || workers == NULL || n == 0)
        return QN_EINVAL;
    struct qn__step *s = qn__req_add(t->r, QN_STMT_CHECK_LEASES, qn__decode_void);
    if (s == NULL)
        return QN_ELIMIT;
    qn__p_arr_text(&s->p, 0, workers, n, NULL);
    return added(t, s, K_CHECK, s->p.err);
}

int qn_store_txn_delete_dlq(qn_store_txn *t, const uint8_t dlq_id[16])
{
    if (t == NULL || dlq_id == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__req_add(t->r, QN_STMT_DELETE_DLQ, qn__decode_scalar_int);
    if (s == NULL)
        return QN_ELIMIT;
    qn__p_uuid(&s->p, 0, dlq_id);
    qn__p_null(&s->p, 1);
    qn__p_null(&s->p, 2);
    return added(t, s, K_DELETE_DLQ, s->p.err);
}

static void finish_txn(qn_store_req *r, const struct qn_store_status *st)
{
    qn_txn_cb cb = (qn_txn_cb)qn__req_cb(r);
    int n;
    struct qn__step *steps = qn__req_steps(r, &n);
    struct qn_txn_result res = {0, NULL, qn__req_failed_step(r)};
    struct qn_txn_step_result *v = NULL;
    if (st->code == QN_OK) {
        v = qn__arena_zalloc(qn__req_arena(r), sizeof *v * (size_t)n);
        if (v == NULL) {
            struct qn_store_status oom = {QN_ENOMEM, "", "out of memory"};
            cb(qn__req_ud(r), &oom, &res);
            return;
        }
        for (int i = 0; i < n; i++) {
            v[i].kind = steps[i].kind;
            if (steps[i].kind == K_PUSH)
                v[i].push = steps[i].out;
            else if (steps[i].kind == K_ACK)
                v[i].ack = steps[i].out;
            else if (steps[i].kind == K_DELETE_DLQ && steps[i].out != NULL)
                v[i].value = *(const int64_t *)steps[i].out;
        }
        res.n = (size_t)n;
        res.steps = v;
    }
    cb(qn__req_ud(r), st, &res);
}

int qn_store_txn_commit(qn_store_txn *t, const struct qn_call_opts *opts, qn_txn_cb cb, void *ud,
                        qn_store_req **req)
{
    if (t == NULL)
        return QN_EINVAL;
    qn_store_req *r = t->r;
    free(t);
    if (cb == NULL) {
        qn__req_discard(r);
        return QN_EINVAL;
    }
    int n;
    struct qn__step *steps = qn__req_steps(r, &n);
    if (opts != NULL) {
        qn__req_set_deadline(r, opts->deadline_ms);
        qn__req_set_tenant(r, opts->tenant);
    }
    for (int i = 0; i < n; i++)
        if (steps[i].kind == K_PUSH)
            qn__p_uuid(&steps[i].p, 7, qn__req_tenant(r));
    qn__req_set_finish(r, finish_txn, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}
