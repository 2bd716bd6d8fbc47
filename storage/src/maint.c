/*
 * maint.c - the retention loop's procedures and the dedup cache's two reads
 * (sql/006_log_maintenance.sql, partition_meta_v1, txns_window_v1 and txns_since_v1 of
 * sql/009_admin.sql), plus the session helpers (advisory lock, database clock) and
 * the queues-of probe behind the loop's log line.
 *
 * Does: encode arguments (a QN_STORE_NO_TS timestamp is SQL NULL: "rule off"),
 * decode the work list and step results. Hash blobs of txns_window are borrowed
 * from the result.
 * Does not: schedule, lock or loop (the broker's maintenance timer does: each
 * step is its own short autocommitted call, as the procedures require).
 *
 * Invariants:
 *   1. Every step result comes from exactly one row; anything else is
 *      QN_EPROTOCOL_DB.
 */
#include "queen/error.h"
#include "store_int.h"

static void p_ts_or_null(struct qn__params *p, int i, int64_t us)
{
    if (us == QN_STORE_NO_TS)
        qn__p_null(p, i);
    else
        qn__p_ts(p, i, us);
}

/* ---------------------------------------------------------------- partition meta */

static int decode_meta(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[4] = {QN_OID_UUID, QN_OID_INT4, QN_OID_INT8, QN_OID_INT8};
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 4, t) != QN_OK || PQntuples(res) > 1)
        return QN_EPROTOCOL_DB;
    if (PQntuples(res) == 0)
        return QN_OK; /* missing: out stays NULL */
    struct qn_partition_meta *m = qn__arena_zalloc(qn__req_arena(r), sizeof *m);
    if (m == NULL)
        return QN_ENOMEM;
    struct qn__row w = {res, 0, NULL, QN_OK, -1};
    qn__row_uuid(&w, 0, m->pid);
    m->window = qn__row_i32_or(&w, 1, 0);
    m->last_offset = qn__row_i64(&w, 2);
    m->txns_start = qn__row_i64(&w, 3);
    if (w.err != QN_OK)
        return QN_EPROTOCOL_DB;
    s->out = m;
    return QN_OK;
}

static void finish_meta(qn_store_req *r, const struct qn_store_status *st)
{
    qn_partition_meta_cb cb = (qn_partition_meta_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_partition_meta(qn_store *st, const char *queue, const char *partition,
                            const struct qn_call_opts *opts, qn_partition_meta_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r = NULL;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    int rc = qn__req_new(st, 1, opts, &r);
    if (rc != QN_OK)
        return rc;
    struct qn__step *s = qn__req_add(r, QN_STMT_PARTITION_META, decode_meta);
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, partition ? partition : "");
    qn__p_uuid(&s->p, 2, qn__req_tenant(r));
    qn__req_set_finish(r, finish_meta, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- txns window */

static int decode_window(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[4] = {QN_OID_INT8, QN_OID_INT8, QN_OID_TIMESTAMPTZ, QN_OID_BYTEA};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 4, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_segments_result *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_segment_row *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        v[i].base = qn__row_i64(&w, 0);
        v[i].end = qn__row_i64(&w, 1);
        v[i].created_at_us = qn__row_ts(&w, 2);
        v[i].blob = qn__row_bytea(&w, 3, &v[i].blob_len);
        /* the hashes must cover [base, end] exactly: the cache indexes into them */
        if (w.err != QN_OK || v[i].end < v[i].base ||
            (uint64_t)(v[i].end - v[i].base) >= (uint64_t)INT32_MAX ||
            v[i].blob_len != (size_t)(v[i].end - v[i].base + 1) * 16u)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->rows = v;
    s->out = out;
    return QN_OK;
}

static void finish_window(qn_store_req *r, const struct qn_store_status *st)
{
    qn_segments_cb cb = (qn_segments_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_txns_window(qn_store *st, const uint8_t pid[16], int32_t seconds,
                         const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                         qn_store_req **req)
{
    qn_store_req *r = NULL;
    if (pid == NULL || cb == NULL || seconds < 0)
        return QN_EINVAL;
    int rc = qn__req_new(st, 1, opts, &r);
    if (rc != QN_OK)
        return rc;
    struct qn__step *s = qn__req_add(r, QN_STMT_TXNS_WINDOW, decode_window);
    qn__p_uuid(&s->p, 0, pid);
    qn__p_i32(&s->p, 1, seconds);
    qn__req_set_finish(r, finish_window, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_txns_since(qn_store *st, const uint8_t pid[16], int64_t after,
                        const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                        qn_store_req **req)
{
    qn_store_req *r = NULL;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    int rc = qn__req_new(st, 1, opts, &r);
    if (rc != QN_OK)
        return rc;
    struct qn__step *s = qn__req_add(r, QN_STMT_TXNS_SINCE, decode_window);
    qn__p_uuid(&s->p, 0, pid);
    qn__p_i64(&s->p, 1, after);
    qn__req_set_finish(r, finish_window, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- work list */

static int decode_worklist(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[4] = {QN_OID_UUID, QN_OID_TIMESTAMPTZ, QN_OID_TIMESTAMPTZ,
                                  QN_OID_TIMESTAMPTZ};
    struct qn__arena *a = qn__req_arena(r);
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 4, t) != QN_OK)
        return QN_EPROTOCOL_DB;
    int rows = PQntuples(res);
    struct qn_maint_list *out = qn__arena_zalloc(a, sizeof *out);
    struct qn_maint_item *v = qn__arena_zalloc(a, sizeof *v * (size_t)rows);
    if (out == NULL || v == NULL)
        return QN_ENOMEM;
    for (int i = 0; i < rows; i++) {
        struct qn__row w = {res, i, a, QN_OK, -1};
        qn__row_uuid(&w, 0, v[i].pid);
        v[i].all_cutoff_us = qn__row_ts_or(&w, 1, QN_STORE_NO_TS);
        v[i].completed_cutoff_us = qn__row_ts_or(&w, 2, QN_STORE_NO_TS);
        v[i].cutoff_us = qn__row_ts_or(&w, 3, QN_STORE_NO_TS);
        if (w.err != QN_OK)
            return QN_EPROTOCOL_DB;
    }
    out->n = (size_t)rows;
    out->items = v;
    s->out = out;
    return QN_OK;
}

static void finish_worklist(qn_store_req *r, const struct qn_store_status *st)
{
    qn_maint_list_cb cb = (qn_maint_list_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

int qn_store_maint_worklist(qn_store *st, int64_t now_us, int phase, int32_t limit,
                            const struct qn_call_opts *opts, qn_maint_list_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r = NULL;
    if (cb == NULL || phase < 1 || phase > 3 || now_us == QN_STORE_NO_TS)
        return QN_EINVAL;
    int rc = qn__req_new(st, 1, opts, &r);
    if (rc != QN_OK)
        return rc;
    struct qn__step *s = qn__req_add(r, QN_STMT_MAINT_WORKLIST, decode_worklist);
    qn__p_ts(&s->p, 0, now_us);
    qn__p_i16(&s->p, 1, (int16_t)phase);
    qn__p_i32(&s->p, 2, limit);
    qn__req_set_finish(r, finish_worklist, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- steps */

static int decode_step(qn_store_req *r, int step, const PGresult *res)
{
    static const uint32_t t[4] = {QN_OID_INT4, QN_OID_INT8, QN_OID_INT8, QN_OID_BOOL};
    int nsteps;
    struct qn__step *s = &qn__req_steps(r, &nsteps)[step];
    if (qn__res_shape(res, 4, t) != QN_OK || PQntuples(res) != 1)
        return QN_EPROTOCOL_DB;
    struct qn_maint_step *o = qn__arena_zalloc(qn__req_arena(r), sizeof *o);
    if (o == NULL)
        return QN_ENOMEM;
    struct qn__row w = {res, 0, NULL, QN_OK, -1};
    o->deleted = qn__row_i32_or(&w, 0, 0);
    o->frames = qn__row_i64_or(&w, 1, 0);
    o->new_start = qn__row_i64_or(&w, 2, -1);
    o->done = qn__row_bool_or(&w, 3, true);
    if (w.err != QN_OK || o->deleted < 0)
        return QN_EPROTOCOL_DB;
    s->out = o;
    return QN_OK;
}

static void finish_step(qn_store_req *r, const struct qn_store_status *st)
{
    qn_maint_step_cb cb = (qn_maint_step_cb)qn__req_cb(r);
    cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);
}

/* A one-step call of stmt whose params are filled by the caller. */
static struct qn__step *start(qn_store *st, int stmt, qn__decode_fn dec,
                              const struct qn_call_opts *opts, qn_store_req **r, int *rc)
{
    *r = NULL;
    *rc = qn__req_new(st, 1, opts, r);
    return *rc == QN_OK ? qn__req_add(*r, stmt, dec) : NULL;
}

int qn_store_retention_step(qn_store *st, const uint8_t pid[16], int64_t all_cutoff_us,
                            int64_t completed_cutoff_us, int32_t max_rows,
                            const struct qn_call_opts *opts, qn_maint_step_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_RETENTION_STEP, decode_step, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    p_ts_or_null(&s->p, 1, all_cutoff_us);
    p_ts_or_null(&s->p, 2, completed_cutoff_us);
    qn__p_i32(&s->p, 3, max_rows);
    qn__req_set_finish(r, finish_step, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

static int pid_cutoff_step(qn_store *st, int stmt, const uint8_t pid[16], int64_t cutoff_us,
                           int32_t max_rows, const struct qn_call_opts *opts,
                           qn_maint_step_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, stmt, decode_step, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    p_ts_or_null(&s->p, 1, cutoff_us);
    qn__p_i32(&s->p, 2, max_rows);
    qn__req_set_finish(r, finish_step, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_txns_purge_step(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                             int32_t max_rows, const struct qn_call_opts *opts,
                             qn_maint_step_cb cb, void *ud, qn_store_req **req)
{
    return pid_cutoff_step(st, QN_STMT_TXNS_PURGE_STEP, pid, cutoff_us, max_rows, opts, cb, ud,
                           req);
}

int qn_store_evict_max_wait_step(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                                 int32_t max_rows, const struct qn_call_opts *opts,
                                 qn_maint_step_cb cb, void *ud, qn_store_req **req)
{
    return pid_cutoff_step(st, QN_STMT_EVICT_MAX_WAIT_STEP, pid, cutoff_us, max_rows, opts, cb,
                           ud, req);
}

int qn_store_partition_dead(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                            const struct qn_call_opts *opts, qn_bool_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_PARTITION_DEAD, qn__decode_scalar_bool, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    p_ts_or_null(&s->p, 1, cutoff_us);
    qn__req_set_finish(r, qn__finish_bool, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_partition_cleanup_step(qn_store *st, int64_t cutoff_us, int32_t max_rows,
                                    const struct qn_call_opts *opts, qn_maint_step_cb cb,
                                    void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_PARTITION_CLEANUP_STEP, decode_step, opts, &r, &rc);
    if (s == NULL)
        return rc;
    p_ts_or_null(&s->p, 0, cutoff_us);
    qn__p_i32(&s->p, 1, max_rows);
    qn__req_set_finish(r, finish_step, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_metrics_purge(qn_store *st, int64_t cutoff_us, const struct qn_call_opts *opts,
                           qn_int_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_METRICS_PURGE, qn__decode_scalar_int, opts, &r, &rc);
    if (s == NULL)
        return rc;
    p_ts_or_null(&s->p, 0, cutoff_us);
    qn__req_set_finish(r, qn__finish_int, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

/* ---------------------------------------------------------------- session helpers */

/* pg_try_advisory_lock / pg_advisory_unlock on this store's session. */
static int lock_call(qn_store *st, int stmt, int64_t key, const struct qn_call_opts *opts,
                     qn_bool_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, stmt, qn__decode_scalar_bool, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_i64(&s->p, 0, key);
    qn__req_set_finish(r, qn__finish_bool, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_try_advisory_lock(qn_store *st, int64_t key, const struct qn_call_opts *opts,
                               qn_bool_cb cb, void *ud, qn_store_req **req)
{
    return lock_call(st, QN_STMT_TRY_LOCK, key, opts, cb, ud, req);
}

int qn_store_advisory_unlock(qn_store *st, int64_t key, const struct qn_call_opts *opts,
                             qn_bool_cb cb, void *ud, qn_store_req **req)
{
    return lock_call(st, QN_STMT_UNLOCK, key, opts, cb, ud, req);
}

int qn_store_db_now(qn_store *st, const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                    qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_DB_NOW, qn__decode_scalar_int, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__req_set_finish(r, qn__finish_int, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}

int qn_store_count_queues_of(qn_store *st, const uint8_t (*pids)[16], size_t n,
                             const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                             qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || (n > 0 && pids == NULL) || n > (size_t)INT32_MAX / 32)
        return QN_EINVAL;
    struct qn__step *s = start(st, QN_STMT_QUEUES_OF, qn__decode_scalar_int, opts, &r, &rc);
    if (s == NULL)
        return rc;
    /* the array encoder copies the elements: the caller's pids are not kept */
    const uint8_t **ptrs = qn__arena_alloc(qn__req_arena(r), sizeof *ptrs * (n ? n : 1));
    int32_t *lens = qn__arena_alloc(qn__req_arena(r), sizeof *lens * (n ? n : 1));
    if (ptrs == NULL || lens == NULL) {
        qn__req_discard(r);
        return QN_ENOMEM;
    }
    for (size_t k = 0; k < n; k++) {
        ptrs[k] = pids[k];
        lens[k] = 16;
    }
    qn__p_array(&s->p, 0, QN_OID_UUID, ptrs, lens, n);
    qn__req_set_finish(r, qn__finish_int, (qn__anyfn)cb, ud);
    return qn__req_submit(r, req);
}
