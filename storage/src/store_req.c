/*
 * store_req.c - building a request: its steps (statements and parameters), its
 * class (lane, may write), tenant, deadline and finish function, the accessors
 * the call files use, and freeing it (see the request lifecycle in
 * store_engine.h; submitting and everything after is store_engine.c).
 *
 * Does: allocate a request and its arena, append steps (a statement of the
 * table, or raw SQL for tests and benches), derive the class from the steps'
 * statements, hand out the steps' products after decoding.
 * Does not: queue, send or deliver (store_engine.c), or know any procedure.
 *
 * Invariants:
 *   1. A request is BUILDING from qn__req_new until qn__req_submit (or
 *      qn__req_discard); only then do its steps change.
 *   2. Its class is write lane as soon as one step's statement is, and "may
 *      write" as soon as one step's statement may (a transaction of pushes and
 *      acks is a write).
 *   3. Everything a request owns lives in its arena, except its PGresults and
 *      its deadline event, which qn__req_free releases too.
 */
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "store_engine.h"

#define REQ_ARENA_MAX ((size_t)1088 << 20) /* 1 GiB field + the call's bookkeeping */
#define MAX_STEPS 4096

void qn__req_drop_results(qn_store_req *r)
{
    if (r->res != NULL)
        for (int i = 0; i < r->nsteps; i++)
            if (r->res[i] != NULL) {
                PQclear(r->res[i]);
                r->res[i] = NULL;
            }
}

void qn__req_free(qn_store_req *r)
{
    if (r == NULL)
        return;
    qn__req_drop_results(r);
    if (r->timer != NULL)
        event_free(r->timer);
    qn__arena_free(&r->arena);
    free(r);
}

const char *qn__req_current_stmt(const qn_store_req *r)
{
    int step = 0;
    if (r->items != NULL && r->cur < r->nitems) {
        const struct qn__item *it = &r->items[r->cur];
        if (it->kind == QN__ITEM_SYNC)
            return "the commit";
        if (it->kind == QN__ITEM_PREPARE) {
            const struct qn__stmt *d = qn__stmt_def(r->st, it->stmt);
            return d ? d->name : "a prepare";
        }
        step = it->step;
    }
    if (step < 0 || step >= r->nsteps)
        return "a statement";
    const struct qn__stmt *d = qn__stmt_def(r->st, r->steps[step].stmt);
    return d ? d->name : "an SQL statement";
}

int qn__req_new(qn_store *st, int nsteps, const struct qn_call_opts *opts, qn_store_req **out)
{
    if (st == NULL || nsteps < 1 || nsteps > MAX_STEPS)
        return QN_EINVAL;
    if (st->closing)
        return QN_ESHUTDOWN;
    qn_store_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return QN_ENOMEM;
    r->st = st;
    r->state = QN__REQ_BUILDING;
    r->lane = QN__LANE_READ;
    r->err_step = -1;
    qn__arena_init(&r->arena, REQ_ARENA_MAX);
    r->steps = qn__arena_zalloc(&r->arena, sizeof *r->steps * (size_t)nsteps);
    if (r->steps == NULL) {
        qn__req_free(r);
        return QN_ENOMEM;
    }
    r->capsteps = nsteps;
    r->deadline_ms = opts ? opts->deadline_ms : 0;
    memcpy(r->tenant, (opts && opts->tenant) ? opts->tenant : qn__default_tenant, 16);
    *out = r;
    return QN_OK;
}

struct qn__step *qn__req_add(qn_store_req *r, int stmt, qn__decode_fn decode)
{
    if (r->nsteps >= r->capsteps)
        return NULL;
    const struct qn__stmt *d = qn__stmt_def(r->st, stmt);
    if (d == NULL)
        return NULL;
    struct qn__step *s = &r->steps[r->nsteps++];
    memset(s, 0, sizeof *s);
    s->stmt = stmt;
    s->result_format = 1;
    s->decode = decode;
    qn__params_init(&s->p, &r->arena, d->nparams);
    if (d->lane == QN__LANE_WRITE)
        r->lane = QN__LANE_WRITE;
    r->writes = r->writes || d->writes;
    return s;
}

struct qn__step *qn__req_add_sql(qn_store_req *r, const char *sql, const uint32_t *types,
                                 int nparams)
{
    if (r->nsteps >= r->capsteps || nparams < 0 || nparams > QN_STMT_MAX_PARAMS)
        return NULL;
    struct qn__step *s = &r->steps[r->nsteps];
    memset(s, 0, sizeof *s);
    s->stmt = -1;
    s->result_format = 1;
    s->sql = qn__arena_strdup(&r->arena, sql);
    if (nparams > 0)
        s->types = qn__arena_memdup(&r->arena, types, sizeof(uint32_t) * (size_t)nparams);
    if (s->sql == NULL || (nparams > 0 && s->types == NULL) ||
        qn__params_init(&s->p, &r->arena, nparams) != QN_OK)
        return NULL;
    r->nsteps++;
    return s;
}

int qn__req_new_detached(int nsteps, qn_store_req **out)
{
    if (nsteps < 1 || nsteps > MAX_STEPS)
        return QN_EINVAL;
    qn_store_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return QN_ENOMEM;
    r->state = QN__REQ_BUILDING;
    r->lane = QN__LANE_READ;
    r->err_step = -1;
    qn__arena_init(&r->arena, REQ_ARENA_MAX);
    r->steps = qn__arena_zalloc(&r->arena, sizeof *r->steps * (size_t)nsteps);
    if (r->steps == NULL) {
        qn__req_free(r);
        return QN_ENOMEM;
    }
    r->capsteps = nsteps;
    memcpy(r->tenant, qn__default_tenant, 16);
    *out = r;
    return QN_OK;
}

void qn__req_set_class(qn_store_req *r, int lane, bool writes)
{
    r->lane = lane == QN__LANE_WRITE ? QN__LANE_WRITE : QN__LANE_READ;
    r->writes = writes;
}

void qn__req_pop_step(qn_store_req *r)
{
    if (r->nsteps > 0)
        r->nsteps--;
}

struct qn__arena *qn__req_arena(qn_store_req *r)
{
    return &r->arena;
}

struct qn__step *qn__req_steps(qn_store_req *r, int *n)
{
    *n = r->nsteps;
    return r->steps;
}

const uint8_t *qn__req_tenant(const qn_store_req *r)
{
    return r->tenant;
}

void qn__req_set_tenant(qn_store_req *r, const uint8_t *tenant)
{
    memcpy(r->tenant, tenant ? tenant : qn__default_tenant, 16);
}

void qn__req_set_deadline(qn_store_req *r, int64_t deadline_ms)
{
    r->deadline_ms = deadline_ms;
}

void qn__req_set_finish(qn_store_req *r, qn__finish_fn fin, qn__anyfn cb, void *ud)
{
    r->finish = fin;
    r->cb = cb;
    r->ud = ud;
}

qn__anyfn qn__req_cb(const qn_store_req *r)
{
    return r->cb;
}

void *qn__req_ud(const qn_store_req *r)
{
    return r->ud;
}

void qn__req_set_data(qn_store_req *r, void *data)
{
    r->call_data = data;
}

void *qn__req_data(const qn_store_req *r)
{
    return r->call_data;
}

qn_store *qn__req_store(const qn_store_req *r)
{
    return r->st;
}

int qn__req_failed_step(const qn_store_req *r)
{
    return r->err != QN_OK ? r->err_step : -1;
}

void *qn__req_out(const qn_store_req *r, int i)
{
    return (i >= 0 && i < r->nsteps) ? r->steps[i].out : NULL;
}

void qn__req_discard(qn_store_req *r)
{
    qn__req_free(r);
}
