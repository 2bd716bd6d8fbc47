/*
 * pop.c - qn.pop_v1, qn.pop_one_v1, qn.pop_discover_v1, qn.has_pending_v1 and
 * qn.pop_gate_v1 (sql/004_log_pop.sql).
 *
 * Does: choose the procedure (a queue and a partition whose id the store's id
 * cache knows -> pop_one_v1, keyed on that id; another queue name -> pop_v1;
 * none -> discovery by namespace/task), encode the arguments, decode leased
 * segment rows, and teach the id cache the partition ids the rows carry. Blobs
 * are borrowed from the result (no copy).
 * Does not: decompress or slice segments (the codec does, from start_idx/take).
 *
 * Invariants:
 *   1. Every row has 0 <= start_idx, 1 <= take, start_idx + take within int32;
 *      anything else is QN_EPROTOCOL_DB (the broker slices frames with them).
 */
#include <stddef.h>
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

static const char *sub_mode_text(enum qn_sub_mode m)
{
    switch (m) {
    case QN_SUB_NEW:
        return "new";
    case QN_SUB_TIMESTAMP:
        return "timestamp";
    case QN_SUB_ALL:
        break;
    }
    return "all";
}

static bool pop_ok(const void *row)
{
    const struct qn_pop_segment *g = row;
    return g->start_idx >= 0 && g->take >= 1 && g->start_idx <= INT32_MAX - g->take && g->base >= 0;
}

static const struct qn__col pop_cols[] = {
    QN__TEXT(struct qn_pop_segment, queue),
    QN__TEXT(struct qn_pop_segment, partition),
    QN__UUID(struct qn_pop_segment, pid),
    QN__I64(struct qn_pop_segment, base),
    QN__I32(struct qn_pop_segment, start_idx),
    QN__I32(struct qn_pop_segment, take),
    QN__TS(struct qn_pop_segment, created_at_us),
    QN__BYTEA(struct qn_pop_segment, blob, blob_len),
    QN__TS_OR(struct qn_pop_segment, lease_expires_at_us, 0),
};

static const struct qn__rowspec pop_spec = {QN__NCOLS(pop_cols),
                                            pop_cols,
                                            sizeof(struct qn_pop_segment),
                                            0,
                                            -1,
                                            sizeof(struct qn_pop_result),
                                            offsetof(struct qn_pop_result, n),
                                            offsetof(struct qn_pop_result, segs),
                                            false,
                                            pop_ok};

int qn__decode_pop(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &pop_spec);
}

/* Delivers the result, after teaching the store's id cache the partition ids
 * the rows carry (the next pop naming one of them goes by id). */
static void finish_pop(qn_store_req *r, const struct qn_store_status *st)
{
    qn_pop_cb cb = (qn_pop_cb)qn__req_cb(r);
    const struct qn_pop_result *res = st->code == QN_OK ? qn__req_out(r, 0) : NULL;
    struct qn__pidcache *pids = qn__store_pids(qn__req_store(r));
    for (size_t i = 0; res != NULL && pids != NULL && i < res->n; i++) {
        const struct qn_pop_segment *g = &res->segs[i];
        if ((i == 0 || memcmp(res->segs[i - 1].pid, g->pid, 16) != 0) && g->queue && g->partition)
            qn__pidcache_put(pids, qn__req_tenant(r), g->queue, g->partition, g->pid);
    }
    cb(qn__req_ud(r), st, res);
}

/* pop_one_v1: a named partition whose id the store knows. */
static int pop_one(qn_store *st, const struct qn_pop_args *a, const struct qn_call_opts *opts,
                   const uint8_t pid[16], qn_pop_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    struct qn__step *s = qn__call_begin(st, QN_STMT_POP_ONE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    struct qn__params *p = &s->p;
    qn__p_uuid(p, 0, pid);
    qn__p_text(p, 1, a->queue);
    qn__p_text(p, 2, a->partition);
    qn__p_text(p, 3, a->group ? a->group : "");
    qn__p_i32(p, 4, a->budget);
    qn__p_i64(p, 5, a->max_bytes);
    qn__p_i32(p, 6, a->msg_overhead);
    qn__p_i32(p, 7, a->max_msg_bytes);
    qn__p_i32(p, 8, a->lease_seconds);
    qn__p_text(p, 9, a->worker);
    qn__p_bool(p, 10, a->auto_ack);
    qn__p_text(p, 11, sub_mode_text(a->sub_mode));
    if (a->sub_mode == QN_SUB_TIMESTAMP)
        qn__p_ts(p, 12, a->sub_from_us);
    else
        qn__p_null(p, 12);
    qn__p_uuid(p, 13, qn__req_tenant(r));
    return qn__call_submit(r, finish_pop, (qn__anyfn)cb, ud, req);
}

int qn_store_pop(qn_store *st, const struct qn_pop_args *a, const struct qn_call_opts *opts,
                 qn_pop_cb cb, void *ud, qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (a == NULL || cb == NULL || a->budget < 1)
        return QN_EINVAL;
    bool discover = a->queue == NULL || a->queue[0] == '\0';
    if (discover && (a->namespace_ == NULL || a->namespace_[0] == '\0') &&
        (a->task == NULL || a->task[0] == '\0'))
        return QN_EINVAL;
    uint8_t pid[16];
    struct qn__pidcache *cache = qn__store_pids(st);
    if (!discover && a->partition != NULL && a->partition[0] != '\0' && cache != NULL &&
        qn__pidcache_get(cache,
                         (opts != NULL && opts->tenant != NULL) ? opts->tenant : qn__default_tenant,
                         a->queue, a->partition, pid))
        return pop_one(st, a, opts, pid, cb, ud, req);
    struct qn__step *s =
        qn__call_begin(st, discover ? QN_STMT_POP_DISCOVER : QN_STMT_POP, opts, &r, &rc);
    if (s == NULL)
        return rc;
    struct qn__params *p = &s->p;
    qn__p_text(p, 0, discover ? (a->namespace_ ? a->namespace_ : "") : a->queue);
    qn__p_text(p, 1, discover ? (a->task ? a->task : "") : (a->partition ? a->partition : ""));
    qn__p_text(p, 2, a->group ? a->group : "");
    qn__p_i32(p, 3, a->budget);
    qn__p_i64(p, 4, a->max_bytes);
    qn__p_i32(p, 5, a->msg_overhead);
    qn__p_i32(p, 6, a->max_msg_bytes);
    qn__p_i32(p, 7, a->lease_seconds);
    qn__p_text(p, 8, a->worker);
    qn__p_bool(p, 9, a->auto_ack);
    qn__p_i32(p, 10, a->max_partitions);
    qn__p_text(p, 11, sub_mode_text(a->sub_mode));
    if (a->sub_mode == QN_SUB_TIMESTAMP)
        qn__p_ts(p, 12, a->sub_from_us);
    else
        qn__p_null(p, 12);
    qn__p_uuid(p, 13, qn__req_tenant(r));
    if (discover)
        qn__p_names(p, 14, opts ? opts->names : NULL);
    return qn__call_submit(r, finish_pop, (qn__anyfn)cb, ud, req);
}

int qn_store_has_pending(qn_store *st, const char *queue, const char *partition, const char *group,
                         const struct qn_call_opts *opts, qn_bool_cb cb, void *ud,
                         qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_HAS_PENDING, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, partition ? partition : "");
    qn__p_text(&s->p, 2, group ? group : "");
    qn__p_uuid(&s->p, 3, qn__req_tenant(r));
    return qn__call_submit(r, qn__finish_bool, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- pop gate */

struct gate_out {
    int64_t pending;
    int32_t min_wait;
};

static bool gate_ok(const void *row)
{
    const struct gate_out *o = row;
    return o->pending >= 0 && o->min_wait >= 0;
}

static const struct qn__col gate_cols[] = {
    QN__I64_OR(struct gate_out, pending, 0),
    QN__I32_OR(struct gate_out, min_wait, 0),
};

static const struct qn__rowspec gate_spec = {
    QN__NCOLS(gate_cols), gate_cols, sizeof(struct gate_out), 1, 1, 0, 0, 0, false, gate_ok};

int qn__decode_pop_gate(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &gate_spec);
}

static void finish_gate(qn_store_req *r, const struct qn_store_status *st)
{
    qn_pop_gate_cb cb = (qn_pop_gate_cb)qn__req_cb(r);
    const struct gate_out *o = st->code == QN_OK ? qn__req_out(r, 0) : NULL;
    cb(qn__req_ud(r), st, o ? o->pending : 0, o ? o->min_wait : 0);
}

int qn_store_pop_gate(qn_store *st, const char *queue, const char *partition, const char *group,
                      const struct qn_call_opts *opts, qn_pop_gate_cb cb, void *ud,
                      qn_store_req **req)
{
    qn_store_req *r;
    int rc;
    if (queue == NULL || queue[0] == '\0' || cb == NULL)
        return QN_EINVAL;
    struct qn__step *s = qn__call_begin(st, QN_STMT_POP_GATE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    qn__p_text(&s->p, 0, queue);
    qn__p_text(&s->p, 1, partition ? partition : "");
    qn__p_text(&s->p, 2, group ? group : "");
    qn__p_uuid(&s->p, 3, qn__req_tenant(r));
    return qn__call_submit(r, finish_gate, (qn__anyfn)cb, ud, req);
}

/* ---------------------------------------------------------------- bundled leases */

bool qn_store_pop_pid(qn_store *st, const struct qn_pop_args *a, const uint8_t *tenant,
                      uint8_t pid[16])
{
    struct qn__pidcache *cache = st ? qn__store_pids(st) : NULL;
    if (cache == NULL || a == NULL || a->auto_ack || a->queue == NULL || a->queue[0] == '\0' ||
        a->partition == NULL || a->partition[0] == '\0')
        return false;
    return qn__pidcache_get(cache, tenant ? tenant : qn__default_tenant, a->queue, a->partition,
                            pid);
}

struct bundle_row {
    int32_t member;
    struct qn_pop_segment g;
};

static bool bundle_ok(const void *row)
{
    const struct bundle_row *b = row;
    return b->member >= 0 && b->member < QN_POP_BUNDLE_MAX && pop_ok(&b->g);
}

#define BR struct bundle_row

static const struct qn__col bundle_cols[] = {
    QN__I32(BR, member),
    QN__TEXT(BR, g.queue),
    QN__TEXT(BR, g.partition),
    QN__UUID(BR, g.pid),
    QN__I64(BR, g.base),
    QN__I32(BR, g.start_idx),
    QN__I32(BR, g.take),
    QN__TS(BR, g.created_at_us),
    QN__BYTEA(BR, g.blob, g.blob_len),
    QN__TS_OR(BR, g.lease_expires_at_us, 0),
};

struct bundle_rows {
    size_t n;
    const struct bundle_row *rows;
};

static const struct qn__rowspec bundle_spec = {QN__NCOLS(bundle_cols),
                                               bundle_cols,
                                               sizeof(struct bundle_row),
                                               0,
                                               -1,
                                               sizeof(struct bundle_rows),
                                               offsetof(struct bundle_rows, n),
                                               offsetof(struct bundle_rows, rows),
                                               false,
                                               bundle_ok};

int qn__decode_pop_bundle(qn_store_req *r, int step, const PGresult *res)
{
    return qn__decode_rows(r, step, res, &bundle_spec);
}

/* Splits the rows per member (each member's rows keep their order), teaches
 * the id cache, delivers. A row naming a member that was not sent means the
 * committed leases cannot be told apart: every member is in doubt (each
 * releases its worker's leases). */
static void finish_bundle(qn_store_req *r, const struct qn_store_status *st)
{
    qn_pop_bundle_cb cb = (qn_pop_bundle_cb)qn__req_cb(r);
    size_t n = (size_t)(uintptr_t)qn__req_data(r);
    if (st->code != QN_OK) {
        cb(qn__req_ud(r), st, NULL, n);
        return;
    }
    const struct bundle_rows *br = qn__req_out(r, 0);
    struct qn__arena *ar = qn__req_arena(r);
    struct qn_pop_result *out = qn__arena_zalloc(ar, sizeof *out * n);
    struct qn_pop_segment *segs = qn__arena_alloc(ar, sizeof *segs * (br->n ? br->n : 1));
    size_t count[QN_POP_BUNDLE_MAX] = {0};
    bool bad = out == NULL || segs == NULL;
    for (size_t i = 0; !bad && i < br->n; i++) {
        if ((size_t)br->rows[i].member >= n)
            bad = true;
        else
            count[br->rows[i].member]++;
    }
    if (bad) {
        struct qn_store_status doubt = {QN_EINDOUBT, "", "a bundled lease's rows name no member"};
        cb(qn__req_ud(r), &doubt, NULL, n);
        return;
    }
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        out[k].segs = segs + at;
        at += count[k];
    }
    for (size_t i = 0; i < br->n; i++) {
        struct qn_pop_result *o = &out[br->rows[i].member];
        ((struct qn_pop_segment *)o->segs)[o->n++] = br->rows[i].g;
    }
    struct qn__pidcache *pids = qn__store_pids(qn__req_store(r));
    for (size_t k = 0; pids != NULL && k < n; k++)
        if (out[k].n > 0 && out[k].segs[0].queue && out[k].segs[0].partition)
            qn__pidcache_put(pids, qn__req_tenant(r), out[k].segs[0].queue,
                             out[k].segs[0].partition, out[k].segs[0].pid);
    cb(qn__req_ud(r), st, out, n);
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

int qn_store_pop_bundle(qn_store *st, const struct qn_pop_member *m, size_t n,
                        const struct qn_call_opts *opts, qn_pop_bundle_cb cb, void *ud,
                        qn_store_req **req)
{
    if (m == NULL || cb == NULL || n == 0 || n > QN_POP_BUNDLE_MAX)
        return QN_EINVAL;
    const uint8_t *pids[QN_POP_BUNDLE_MAX];
    int32_t lens16[QN_POP_BUNDLE_MAX], lens8[QN_POP_BUNDLE_MAX];
    const char *queues[QN_POP_BUNDLE_MAX], *parts[QN_POP_BUNDLE_MAX], *groups[QN_POP_BUNDLE_MAX];
    const char *workers[QN_POP_BUNDLE_MAX], *modes[QN_POP_BUNDLE_MAX];
    int32_t budgets[QN_POP_BUNDLE_MAX], overhead[QN_POP_BUNDLE_MAX], maxmsg[QN_POP_BUNDLE_MAX];
    int32_t lease[QN_POP_BUNDLE_MAX];
    int64_t maxb[QN_POP_BUNDLE_MAX];
    uint8_t from[QN_POP_BUNDLE_MAX][8];
    const uint8_t *fromp[QN_POP_BUNDLE_MAX];
    for (size_t k = 0; k < n; k++) {
        const struct qn_pop_args *a = m[k].a;
        if (a == NULL || a->auto_ack || a->budget < 1 || a->queue == NULL || a->queue[0] == '\0' ||
            a->partition == NULL || a->partition[0] == '\0' || a->worker == NULL ||
            a->worker[0] == '\0')
            return QN_EINVAL;
        pids[k] = m[k].pid;
        lens16[k] = 16;
        queues[k] = a->queue;
        parts[k] = a->partition;
        groups[k] = a->group ? a->group : "";
        workers[k] = a->worker;
        modes[k] = sub_mode_text(a->sub_mode);
        budgets[k] = a->budget;
        maxb[k] = a->max_bytes;
        overhead[k] = a->msg_overhead;
        maxmsg[k] = a->max_msg_bytes;
        lease[k] = a->lease_seconds;
        put_be64(from[k], (uint64_t)a->sub_from_us);
        fromp[k] = a->sub_mode == QN_SUB_TIMESTAMP ? from[k] : NULL;
        lens8[k] = a->sub_mode == QN_SUB_TIMESTAMP ? 8 : -1;
    }
    qn_store_req *r;
    int rc;
    struct qn__step *s = qn__call_begin(st, QN_STMT_POP_BUNDLE, opts, &r, &rc);
    if (s == NULL)
        return rc;
    struct qn__params *p = &s->p;
    qn__p_array(p, 0, QN_OID_UUID, pids, lens16, n);
    qn__p_arr_text(p, 1, queues, n, NULL);
    qn__p_arr_text(p, 2, parts, n, NULL);
    qn__p_arr_text(p, 3, groups, n, NULL);
    qn__p_arr_i32(p, 4, budgets, n);
    qn__p_arr_i64(p, 5, maxb, n);
    qn__p_arr_i32(p, 6, overhead, n);
    qn__p_arr_i32(p, 7, maxmsg, n);
    qn__p_arr_i32(p, 8, lease, n);
    qn__p_arr_text(p, 9, workers, n, NULL);
    qn__p_arr_text(p, 10, modes, n, NULL);
    qn__p_array(p, 11, QN_OID_INT8, fromp, lens8, n);
    qn__p_uuid(p, 12, qn__req_tenant(r));
    s->expect = n;
    qn__req_set_data(r, (void *)(uintptr_t)n);
    return qn__call_submit(r, finish_bundle, (qn__anyfn)cb, ud, req);
}
