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
