/*
 * maint.c - the retention loop's procedures (sql/006_log_maintenance.sql) and the
 * dedup cache's reads (qn.partition_meta_v1, qn.txns_window_v1, qn.txns_since_v1
 * of sql/009_admin.sql), plus the session helpers (advisory lock, database
 * clock) and the queues-of probe behind the loop's log line.
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
#include <stddef.h>

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

#define PM struct qn_partition_meta
static const struct qn__col meta_cols[] = {
    QN__UUID(PM, pid),
    QN__I32_OR(PM, window, 0),
    QN__I64(PM, last_offset),
    QN__I64(PM, txns_start),
};
#undef PM

static const struct qn__rowspec meta_spec = {QN__NCOLS(meta_cols),
                                             meta_cols,
                                             sizeof(struct qn_partition_meta),
                                             0,
                                             1,
                                             0,
                                             0,
                                             0,
                                             true, /* missing: NULL */
                                             NULL};

int qn__decode_partition_meta(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &meta_spec);
}

QN__FINISH_PTR(finish_meta, qn_partition_meta_cb)

int qn_store_partition_meta(qn_store *st, const char *queue, const char *partition,
                            const struct qn_call_opts *opts, qn_partition_meta_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_PARTITION_META, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, partition ? partition : "");
    qn__p_uuid(&s->p, 2, qn__req_tenant(r));
    return qn__call_submit(r, finish_meta, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- txns window */

/* The hashes must cover [base, end] exactly: the cache indexes into them. */
static bool txns_ok(const void *row)
{
    const struct qn_segment_row *v = row;
    if (v->end < v->base)
        return false;
    uint64_t span = (uint64_t)v->end - (uint64_t)v->base; /* no signed overflow */
    return span < (uint64_t)INT32_MAX && v->blob_len == (size_t)(span + 1) * 16u;
}

static const struct qn__col txns_cols[] = {
    QN__I64(struct qn_segment_row, base),
    QN__I64(struct qn_segment_row, end),
    QN__TS(struct qn_segment_row, created_at_us),
    QN__BYTEA(struct qn_segment_row, blob, blob_len),
};

static const struct qn__rowspec txns_spec = {QN__NCOLS(txns_cols),
                                             txns_cols,
                                             sizeof(struct qn_segment_row),
                                             0,
                                             -1,
                                             sizeof(struct qn_segments_result),
                                             offsetof(struct qn_segments_result, n),
                                             offsetof(struct qn_segments_result, rows),
                                             false,
                                             txns_ok};

int qn__decode_txns(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &txns_spec);
}

QN__FINISH_PTR(finish_txns, qn_segments_cb)

int qn_store_txns_window(qn_store *st, const uint8_t pid[16], int32_t seconds,
                         const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                         qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL || seconds < 0)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_TXNS_WINDOW, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    qn__p_i32(&s->p, 1, seconds);
    return qn__call_submit(r, finish_txns, (qn__anyfn)cb, ud, req);
}

int qn_store_txns_since(qn_store *st, const uint8_t pid[16], int64_t after,
                        const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                        qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_TXNS_SINCE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    qn__p_i64(&s->p, 1, after);
    return qn__call_submit(r, finish_txns, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- work list */

#define MI struct qn_maint_item
static const struct qn__col worklist_cols[] = {
    QN__UUID(MI, pid),
    QN__TS_OR(MI, all_cutoff_us, QN_STORE_NO_TS),
    QN__TS_OR(MI, completed_cutoff_us, QN_STORE_NO_TS),
    QN__TS_OR(MI, cutoff_us, QN_STORE_NO_TS),
};
#undef MI

static const struct qn__rowspec worklist_spec = {QN__NCOLS(worklist_cols),
                                                 worklist_cols,
                                                 sizeof(struct qn_maint_item),
                                                 0,
                                                 -1,
                                                 sizeof(struct qn_maint_list),
                                                 offsetof(struct qn_maint_list, n),
                                                 offsetof(struct qn_maint_list, items),
                                                 false,
                                                 NULL};

int qn__decode_worklist(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &worklist_spec);
}

QN__FINISH_PTR(finish_worklist, qn_maint_list_cb)

int qn_store_maint_worklist(qn_store *st, int64_t now_us, int phase, int32_t limit,
                            const struct qn_call_opts *opts, qn_maint_list_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || phase < 1 || phase > 3 || now_us == QN_STORE_NO_TS)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_MAINT_WORKLIST, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_ts(&s->p, 0, now_us);
    qn__p_i16(&s->p, 1, (int16_t)phase);
    qn__p_i32(&s->p, 2, limit);
    return qn__call_submit(r, finish_worklist, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- steps */

static bool step_ok(const void *row)
{
    return ((const struct qn_maint_step *)row)->deleted >= 0;
}

#define MS struct qn_maint_step
static const struct qn__col step_cols[] = {
    QN__I32_OR(MS, deleted, 0),
    QN__I64_OR(MS, frames, 0),
    QN__I64_OR(MS, new_start, -1),
    QN__BOOL_OR(MS, done, true),
};
#undef MS

static const struct qn__rowspec step_spec = {
    QN__NCOLS(step_cols), step_cols, sizeof(struct qn_maint_step), 1, 1, 0, 0, 0, false, step_ok};

int qn__decode_maint_step(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &step_spec);
}

QN__FINISH_PTR(finish_step, qn_maint_step_cb)

int qn_store_retention_step(qn_store *st, const uint8_t pid[16], int64_t all_cutoff_us,
                            int64_t completed_cutoff_us, int32_t max_rows,
                            const struct qn_call_opts *opts, qn_maint_step_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_RETENTION_STEP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    p_ts_or_null(&s->p, 1, all_cutoff_us);
    p_ts_or_null(&s->p, 2, completed_cutoff_us);
    qn__p_i32(&s->p, 3, max_rows);
    return qn__call_submit(r, finish_step, (qn__anyfn)cb, ud, req);
}

static int pid_cutoff_step(qn_store *st, int stmt, const uint8_t pid[16], int64_t cutoff_us,
                           int32_t max_rows, const struct qn_call_opts *opts, qn_maint_step_cb cb,
                           void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, stmt, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    p_ts_or_null(&s->p, 1, cutoff_us);
    qn__p_i32(&s->p, 2, max_rows);
    return qn__call_submit(r, finish_step, (qn__anyfn)cb, ud, req);
}

int qn_store_txns_purge_step(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                             int32_t max_rows, const struct qn_call_opts *opts, qn_maint_step_cb cb,
                             void *ud, qn_store_req **req)
{
    return pid_cutoff_step(st, QN_STMT_TXNS_PURGE_STEP, pid, cutoff_us, max_rows, opts, cb, ud,
                           req);
}

int qn_store_evict_max_wait_step(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                                 int32_t max_rows, const struct qn_call_opts *opts,
                                 qn_maint_step_cb cb, void *ud, qn_store_req **req)
{
    return pid_cutoff_step(st, QN_STMT_EVICT_MAX_WAIT_STEP, pid, cutoff_us, max_rows, opts, cb, ud,
                           req);
}

int qn_store_partition_dead(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                            const struct qn_call_opts *opts, qn_bool_cb cb, void *ud,
                            qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (pid == NULL || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_PARTITION_DEAD, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_uuid(&s->p, 0, pid);
    p_ts_or_null(&s->p, 1, cutoff_us);
    return qn__call_submit(r, qn__finish_bool, (qn__anyfn)cb, ud, req);
}

int qn_store_partition_cleanup_step(qn_store *st, int64_t cutoff_us, int32_t max_rows,
                                    const struct qn_call_opts *opts, qn_maint_step_cb cb, void *ud,
                                    qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_PARTITION_CLEANUP_STEP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    p_ts_or_null(&s->p, 0, cutoff_us);
    qn__p_i32(&s->p, 1, max_rows);
    return qn__call_submit(r, finish_step, (qn__anyfn)cb, ud, req);
}

int qn_store_metrics_purge(qn_store *st, int64_t cutoff_us, const struct qn_call_opts *opts,
                           qn_int_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_METRICS_PURGE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    p_ts_or_null(&s->p, 0, cutoff_us);
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
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
    struct qn__step *s = qn__call_begin(st, stmt, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_i64(&s->p, 0, key);
    return qn__call_submit(r, qn__finish_bool, (qn__anyfn)cb, ud, req);
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
    struct qn__step *s = qn__call_begin(st, QN_STMT_DB_NOW, opts, &r, &rc);
    if (s == NULL)
        return rc;
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}

int qn_store_count_queues_of(qn_store *st, const uint8_t (*pids)[16], size_t n,
                             const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                             qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (cb == NULL || (n > 0 && pids == NULL) || n > (size_t)INT32_MAX / 32)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_QUEUES_OF, opts, &r, &rc);
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
    return qn__call_submit(r, qn__finish_int, (qn__anyfn)cb, ud, req);
}
