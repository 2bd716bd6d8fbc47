/*
 * rpc/svc_txn.c - QueueService.Transact: pushes and acks in one database transaction.
 *
 * Does: validate every operation before anything is sent; pack the pushes into
 * one segment per (queue, partition) (first occurrence wins inside the request:
 * a repeated transaction id answers DUPLICATE with the first one's id, as Push
 * does); group the acks per (partition, group, lease); add the required-lease
 * check last; commit all of it as one transaction in which every push and every
 * ack is strict; file dead letters the acks handed off, after the commit.
 * The required-lease check is the transaction's first step: it is about the
 * leases the client held when it sent the call, and an ack of a whole batch
 * releases that batch's lease inside the same transaction.
 * With auth on: the produce grant of every pushed queue and the consume grant
 * of every acked partition's queue (found in the caller's tenant first; a
 * partition of another tenant fails the call as not found) are checked before
 * the transaction is built; pushes are stamped with the principal as producer.
 * Payloads of encrypted queues are sealed (rpc/crypt.h).
 * Does not: use the dedup cache (pushes here always probe the full window).
 *
 * Invariant: the client sees results only when everything committed; any failure
 * answers ABORTED (or the transport status) and nothing was written.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "engine/notifier.h"
#include "log.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "rpc/ack_apply.h"
#include "rpc/authz.h"
#include "rpc/crypt.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

struct top {           /* one operation */
    int seg;           /* push: segment index */
    uint32_t frame;    /* push: frame index in the segment */
    int leader;        /* push: op index it repeats, -1 if none */
    int ackg;          /* ack: group index */
    uint32_t ack_item; /* ack: item index in the group */
    uint8_t msgid[16];
    char minted[QN_UUID_STR_LEN];
    uint8_t hash[16];
};

struct tseg {
    const char *queue, *partition;
    uint32_t *ops; /* frame order */
    size_t n;
    uint8_t *hashes;
    struct qn_buf blob;
};

struct tack {
    uint8_t pid[16];
    const char *group, *lease;
    uint32_t *ops;
    size_t n;
    struct qn_ack_result copy; /* DLQ hand-off data kept past the callback */
    uint8_t *blob;
    struct qn_dlq_job dlq;
    struct txn_rpc *t;
    long dlq_op;
};

struct txn_rpc {
    struct qn_crypt_wait wait; /* learning which pushed queues are encrypted */
    struct qn_app *app;
    qn_call *call;
    Queen__V1__TransactRequest *req;
    const char **queues; /* distinct pushed queues (borrowed from req) */
    size_t nqueues;
    struct top *ops;
    struct tseg *segs;
    size_t nsegs;
    struct tack *acks;
    size_t nacks;
    uint32_t *idx; /* backing store for segs/acks op lists */
    qn_store_req *sreq;
    Queen__V1__TransactResult *res;
    Queen__V1__TransactResult **ptrs;
    Queen__V1__PushResult *pres;
    Queen__V1__AckResult *ares;
    char (*ids)[QN_UUID_STR_LEN];
    char (*pids)[QN_UUID_STR_LEN];
    size_t pending_dlq;
    struct qn_conn_slot *slot; /* the connection's database slot */
    char why[300];             /* a sealing failure's message */
};

static void txn_free(struct txn_rpc *t)
{
    qn_conn_budget_give(t->slot);
    qn_crypt_cancel(&t->wait);
    free(t->queues);
    for (size_t i = 0; i < t->nsegs; i++) {
        free(t->segs[i].hashes);
        qn_buf_free(&t->segs[i].blob);
    }
    for (size_t i = 0; i < t->nacks; i++) {
        qn_store_cancel(t->acks[i].dlq.sreq);
        free(t->acks[i].blob);
    }
    free(t->segs);
    free(t->acks);
    free(t->ops);
    free(t->idx);
    free(t->res);
    free(t->ptrs);
    free(t->pres);
    free(t->ares);
    free(t->ids);
    free(t->pids);
    if (t->req)
        protobuf_c_message_free_unpacked(&t->req->base, NULL);
    free(t);
}

static void txn_answer(struct txn_rpc *t)
{
    qn_call *call = t->call;
    Queen__V1__TransactResponse resp = QUEEN__V1__TRANSACT_RESPONSE__INIT;
    resp.n_results = t->req->n_ops;
    resp.results = t->ptrs;
    qn_call_set_data(call, NULL);
    if (qn_call_send(call, &resp.base) == QN_OK)
        qn_call_finish(call, QN_GRPC_OK, NULL);
    else
        qn_call_finish(call, QN_GRPC_INTERNAL, "response larger than the send limit");
    txn_free(t);
}

static void txn_dlq_done(void *ud, bool filed)
{
    struct tack *g = ud;
    struct txn_rpc *t = g->t;
    g->dlq.sreq = NULL;
    if (g->dlq_op >= 0)
        t->res[g->dlq_op].ack->dlq = filed;
    if (--t->pending_dlq == 0)
        txn_answer(t);
}

static void txn_done(void *ud, const struct qn_store_status *st, const struct qn_txn_result *r)
{
    struct txn_rpc *t = ud;
    t->sreq = NULL;
    qn_call *call = t->call;
    if (st->code != QN_OK) {
        char msg[400];
        int step = r ? r->failed_step : -1;
        const char *detail = qn_status_message(st);
        int checks = t->req->n_required_leases > 0 ? 1 : 0;
        int ackbase = checks + (t->nsegs > 0 ? 1 : 0);
        if (st->code == QN_EDUPLICATE)
            snprintf(msg, sizeof msg, "a push duplicates a stored transaction id: %s", detail);
        else if (checks && step == 0)
            snprintf(msg, sizeof msg, "required_leases: %s", detail);
        else if (step >= ackbase && (size_t)(step - ackbase) < t->nacks)
            snprintf(msg, sizeof msg, "operation %u (ack): %s", t->acks[step - ackbase].ops[0],
                     detail);
        else
            snprintf(msg, sizeof msg, "%s", detail);
        enum qn_grpc_code code = qn_grpc_from_store(st->code);
        if (st->code == QN_EDB || st->code == QN_EDUPLICATE)
            code = QN_GRPC_ABORTED;
        qn_call_set_data(call, NULL);
        qn_call_finish(call, code, msg);
        txn_free(t);
        return;
    }
    size_t step = t->req->n_required_leases > 0 ? 1 : 0; /* the lease check */
    if (t->nsegs > 0) {
        const struct qn_push_result *pr = r->steps[step++].push;
        for (size_t s = 0; s < t->nsegs && pr && s < pr->n; s++) {
            const struct qn_push_seg_result *sr = &pr->segs[s];
            for (size_t j = 0; j < t->segs[s].n; j++) {
                uint32_t op = t->segs[s].ops[j];
                Queen__V1__PushResult *p = t->res[op].push;
                p->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED;
                p->offset = sr->base + (int64_t)j;
                qn_uuid_format(sr->pid, t->pids[op]);
                p->partition_id = t->pids[op];
            }
        }
    }
    for (size_t i = 0; i < t->req->n_ops; i++) {
        struct top *o = &t->ops[i];
        if (t->req->ops[i]->op_case != QUEEN__V1__TRANSACT_OP__OP_PUSH)
            continue;
        Queen__V1__PushResult *p = t->res[i].push;
        if (o->leader >= 0) {
            Queen__V1__PushResult *l = t->res[o->leader].push;
            p->status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE;
            p->offset = l->offset;
            p->message_id = l->message_id;
            p->partition_id = l->partition_id;
        } else {
            t->app->pushed++;
            t->app->pushed_bytes += t->req->ops[i]->push->payload.len;
        }
    }
    for (size_t a = 0; a < t->nacks; a++) {
        const struct qn_ack_result *ar = r->steps[step++].ack;
        struct tack *g = &t->acks[a];
        for (size_t k = 0; ar && k < g->n && k < ar->n; k++) {
            Queen__V1__AckResult *x = t->res[g->ops[k]].ack;
            x->outcome = (Queen__V1__AckOutcome)ar->items[k].outcome;
            x->success = true;
            x->offset = ar->items[k].offset;
            x->lease_released = (ar->flags & QN_ACKF_RELEASED) != 0;
            if (ar->items[k].offset == ar->dlq_offset && (ar->flags & QN_ACKF_DLQ_HANDOFF))
                g->dlq_op = (long)g->ops[k];
            if ((ar->flags & QN_ACKF_DROPPED) && ar->items[k].offset == ar->committed)
                x->dropped = true;
        }
        if (ar && (ar->flags & QN_ACKF_DLQ_HANDOFF)) {
            /* keep what the hand-off needs: the result dies with this callback */
            g->copy = *ar;
            g->copy.items = NULL;
            g->copy.n = 0;
            if (ar->dlq_blob) {
                g->blob = malloc(ar->dlq_blob_len ? ar->dlq_blob_len : 1);
                if (g->blob)
                    memcpy(g->blob, ar->dlq_blob, ar->dlq_blob_len);
                g->copy.dlq_blob = g->blob;
            }
        } else {
            g->copy.flags = 0;
        }
    }
    /* committed: parked pops and fetches of the pushed partitions wake */
    for (size_t sg = 0; sg < t->nsegs; sg++)
        qn_notifier_committed(t->app->notifier, qn_authz_tenant(t->call), t->segs[sg].queue,
                              t->segs[sg].partition);
    /* dead letters are filed after the commit */
    t->pending_dlq = 1;
    for (size_t a = 0; a < t->nacks; a++) {
        struct tack *g = &t->acks[a];
        if (!(g->copy.flags & QN_ACKF_DLQ_HANDOFF))
            continue;
        g->t = t;
        g->dlq.done = txn_dlq_done;
        g->dlq.ud = g;
        const char *err = g->dlq_op >= 0 ? t->req->ops[g->dlq_op]->ack->item->error : NULL;
        if (qn_dlq_file(t->app, g->pid, g->group, g->lease ? g->lease : "", &g->copy, err, 0,
                        &g->dlq) == QN_OK)
            t->pending_dlq++;
    }
    if (--t->pending_dlq == 0)
        txn_answer(t);
}

static int cmp_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}

/* Validation of every operation; false with a message naming it. */
static bool txn_validate(const struct qn_config *cfg, const Queen__V1__TransactRequest *req,
                         char *why, size_t cap)
{
    if (req->n_ops == 0) {
        snprintf(why, cap, "ops is empty: a transaction needs at least one operation");
        return false;
    }
    if (req->n_ops > (size_t)cfg->max_push_items) {
        snprintf(why, cap, "too many operations: %zu (the limit is %lld)", req->n_ops,
                 (long long)cfg->max_push_items);
        return false;
    }
    for (size_t i = 0; i < req->n_ops; i++) {
        const Queen__V1__TransactOp *op = req->ops[i];
        char prefix[32];
        snprintf(prefix, sizeof prefix, "ops[%zu].push", i);
        if (op->op_case == QUEEN__V1__TRANSACT_OP__OP_PUSH) {
            if (!qn_push_item_ok(cfg, op->push, prefix, why, cap))
                return false;
        } else if (op->op_case == QUEEN__V1__TRANSACT_OP__OP_ACK) {
            char tmp[300];
            if (op->ack->item == NULL) {
                snprintf(why, cap, "ops[%zu].ack.item is required", i);
                return false;
            }
            if (qn_name_problem(op->ack->consumer_group, "consumer_group", true, tmp, sizeof tmp)) {
                snprintf(why, cap, "ops[%zu].ack: %s", i, tmp);
                return false;
            }
            if (qn_ack_item_check(op->ack->item, 0, tmp, sizeof tmp) != QN_OK) {
                /* the check names the item "items[0]": here it is ops[i].ack.item */
                snprintf(why, cap, "ops[%zu].ack.item%s", i,
                         strncmp(tmp, "items[0]", 8) == 0 ? tmp + 8 : tmp);
                return false;
            }
        } else {
            snprintf(why, cap, "ops[%zu] is neither a push nor an ack", i);
            return false;
        }
    }
    for (size_t i = 0; i < req->n_required_leases; i++) {
        char what[48];
        snprintf(what, sizeof what, "required_leases[%zu]", i);
        if (qn_lease_problem(req->required_leases[i], what, false, why, cap))
            return false;
    }
    return true;
}

/* Builds segments and ack groups. Returns QN_OK or QN_ENOMEM / codec error. */
static int txn_plan(struct txn_rpc *t)
{
    struct qn_app *app = t->app;
    const Queen__V1__TransactRequest *req = t->req;
    size_t n = req->n_ops;
    t->ops = calloc(n, sizeof *t->ops);
    t->segs = calloc(n, sizeof *t->segs);
    t->acks = calloc(n, sizeof *t->acks);
    t->idx = calloc(2 * n, sizeof *t->idx);
    if (!t->ops || !t->segs || !t->acks || !t->idx)
        return QN_ENOMEM;
    uint32_t *next = t->idx;
    uint64_t now = qn_now_ms();
    /* pushes: one segment per (queue, partition), in first-appearance order */
    for (size_t i = 0; i < n; i++) {
        struct top *o = &t->ops[i];
        o->leader = -1;
        o->seg = -1;
        o->ackg = -1;
        if (req->ops[i]->op_case != QUEEN__V1__TRANSACT_OP__OP_PUSH)
            continue;
        const Queen__V1__PushItem *it = req->ops[i]->push;
        const char *part = qn_or_default(it->partition, QN_DEFAULT_PARTITION);
        qn_uuid7_next(&app->ids, now, o->msgid);
        const char *txn = it->transaction_id;
        if (txn == NULL || *txn == '\0') {
            qn_uuid_format(o->msgid, o->minted);
            txn = o->minted;
        }
        qn_txn_hash(txn, strlen(txn), o->hash);
        size_t s = 0;
        while (s < t->nsegs && (strcmp(t->segs[s].queue, it->queue) != 0 ||
                                strcmp(t->segs[s].partition, part) != 0))
            s++;
        if (s == t->nsegs) {
            t->segs[s].queue = it->queue;
            t->segs[s].partition = part;
            t->segs[s].ops = next; /* filled contiguously below */
            t->nsegs++;
        }
        o->seg = (int)s;
    }
    /* lay out each segment's ops contiguously, dedup inside the segment */
    for (size_t s = 0; s < t->nsegs; s++) {
        struct tseg *sg = &t->segs[s];
        sg->ops = next;
        for (size_t i = 0; i < n; i++) {
            struct top *o = &t->ops[i];
            if (o->seg != (int)s)
                continue;
            for (size_t k = 0; k < sg->n && o->leader < 0; k++)
                if (memcmp(t->ops[sg->ops[k]].hash, o->hash, 16) == 0)
                    o->leader = (int)sg->ops[k];
            if (o->leader >= 0)
                continue;
            o->frame = (uint32_t)sg->n;
            sg->ops[sg->n++] = (uint32_t)i;
        }
        next += sg->n;
        sg->hashes = malloc(sg->n * 16);
        struct qn_frame *frames = calloc(sg->n, sizeof *frames);
        uint8_t **sealed = calloc(sg->n, sizeof *sealed);
        if (sg->hashes == NULL || frames == NULL || sealed == NULL) {
            free(frames);
            free(sealed);
            return QN_ENOMEM;
        }
        bool enc = qn_crypt_encrypted(app->crypt, qn_authz_tenant(t->call), sg->queue);
        const qn_principal *who = qn_authz_principal(t->call);
        int rc = QN_OK;
        for (size_t k = 0; k < sg->n; k++) {
            struct top *o = &t->ops[sg->ops[k]];
            const Queen__V1__PushItem *it = req->ops[sg->ops[k]]->push;
            struct qn_frame *f = &frames[k];
            memcpy(f->message_id, o->msgid, 16);
            if (it->trace_id && *it->trace_id && qn_parse_uuid_str(it->trace_id, f->trace_id))
                f->flags |= QN_FRAME_FLAG_TRACE;
            const char *txn =
                it->transaction_id && *it->transaction_id ? it->transaction_id : o->minted;
            f->txn = (const uint8_t *)txn;
            f->txn_len = strlen(txn);
            f->payload = it->payload.data;
            f->payload_len = it->payload.len;
            if (who != NULL) {
                f->psub = (const uint8_t *)qn_principal_sub(who);
                f->psub_len = strlen(qn_principal_sub(who));
                f->flags |= QN_FRAME_FLAG_PSUB;
            }
            if (enc && rc == QN_OK) {
                size_t elen = 0;
                rc = qn_crypt_seal(app, o->msgid, it->payload.data, it->payload.len, &sealed[k],
                                   &elen, t->why, sizeof t->why);
                f->payload = sealed[k];
                f->payload_len = elen;
                f->flags |= QN_FRAME_FLAG_ENCRYPTED;
            }
            memcpy(sg->hashes + k * 16, o->hash, 16);
        }
        if (rc == QN_OK)
            rc = qn_segment_pack(app->zctx, frames, sg->n, (int)app->cfg->zstd_level, &sg->blob,
                                 NULL);
        for (size_t k = 0; k < sg->n; k++)
            free(sealed[k]);
        free(sealed);
        free(frames);
        if (rc != QN_OK)
            return rc;
    }
    /* acks: group per (partition, group, lease) */
    const char *single = req->n_required_leases == 1 ? req->required_leases[0] : NULL;
    for (size_t i = 0; i < n; i++) {
        if (req->ops[i]->op_case != QUEEN__V1__TRANSACT_OP__OP_ACK)
            continue;
        const Queen__V1__TransactAck *a = req->ops[i]->ack;
        uint8_t pid[16];
        qn_parse_uuid_str(a->item->partition_id, pid);
        const char *group = qn_or_default(a->consumer_group, QN_QUEUE_MODE);
        const char *lease = a->item->lease_id && *a->item->lease_id ? a->item->lease_id : single;
        size_t g = 0;
        while (g < t->nacks &&
               (memcmp(t->acks[g].pid, pid, 16) != 0 || strcmp(t->acks[g].group, group) != 0 ||
                cmp_str(t->acks[g].lease, lease) != 0))
            g++;
        if (g == t->nacks) {
            memcpy(t->acks[g].pid, pid, 16);
            t->acks[g].group = group;
            t->acks[g].lease = lease;
            t->acks[g].dlq_op = -1;
            t->nacks++;
        }
        t->ops[i].ackg = (int)g;
    }
    for (size_t g = 0; g < t->nacks; g++) {
        t->acks[g].ops = next;
        for (size_t i = 0; i < n; i++)
            if (t->ops[i].ackg == (int)g) {
                t->ops[i].ack_item = (uint32_t)t->acks[g].n;
                t->acks[g].ops[t->acks[g].n++] = (uint32_t)i;
            }
        next += t->acks[g].n;
    }
    return QN_OK;
}

/* Result structures, pre-filled with what is known before the commit. */
static int txn_results(struct txn_rpc *t)
{
    size_t n = t->req->n_ops;
    t->res = calloc(n, sizeof *t->res);
    t->ptrs = calloc(n, sizeof *t->ptrs);
    t->pres = calloc(n, sizeof *t->pres);
    t->ares = calloc(n, sizeof *t->ares);
    t->ids = calloc(n, QN_UUID_STR_LEN);
    t->pids = calloc(n, QN_UUID_STR_LEN);
    if (!t->res || !t->ptrs || !t->pres || !t->ares || !t->ids || !t->pids)
        return QN_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        Queen__V1__TransactResult *r = &t->res[i];
        queen__v1__transact_result__init(r);
        r->index = (uint32_t)i;
        t->ptrs[i] = r;
        const Queen__V1__TransactOp *op = t->req->ops[i];
        if (op->op_case == QUEEN__V1__TRANSACT_OP__OP_PUSH) {
            Queen__V1__PushResult *p = &t->pres[i];
            queen__v1__push_result__init(p);
            p->index = (uint32_t)i;
            p->queue = op->push->queue;
            p->partition = (char *)qn_or_default(op->push->partition, QN_DEFAULT_PARTITION);
            p->transaction_id = op->push->transaction_id && *op->push->transaction_id
                                    ? op->push->transaction_id
                                    : t->ops[i].minted;
            qn_uuid_format(t->ops[i].msgid, t->ids[i]);
            p->message_id = t->ids[i];
            p->partition_id = "";
            r->push = p;
        } else {
            Queen__V1__AckResult *a = &t->ares[i];
            queen__v1__ack_result__init(a);
            a->index = (uint32_t)i;
            a->offset = -1;
            r->ack = a;
        }
    }
    return QN_OK;
}

/* Builds the transaction and commits it (every check passed, every pushed
 * queue's encryption flag known). */
static void txn_go(struct txn_rpc *t)
{
    struct qn_app *app = t->app;
    qn_call *call = t->call;
    Queen__V1__TransactRequest *req = t->req;
    qn_store_txn *st = NULL;
    int rc = txn_plan(t);
    if (rc == QN_OK)
        rc = txn_results(t);
    if (rc == QN_ENOTFOUND || (rc != QN_OK && t->why[0])) {
        /* sealing refused: encrypted queue without a key ring */
        qn_call_set_data(call, NULL);
        qn_call_finish(call, rc == QN_ENOTFOUND ? QN_GRPC_FAILED_PRECONDITION : QN_GRPC_INTERNAL,
                       t->why);
        txn_free(t);
        return;
    }
    /* one step for the pushes, one per ack group, one for the lease check */
    size_t steps = (t->nsegs > 0) + t->nacks + (req->n_required_leases > 0);
    if (rc == QN_OK && steps > QN_STORE_TXN_STEPS_MAX) {
        size_t nacks = t->nacks;
        qn_call_set_data(call, NULL);
        txn_free(t);
        qn_call_finishf(call, QN_GRPC_INVALID_ARGUMENT,
                        "this transaction acks in %zu (partition, group, lease) combinations; "
                        "the limit is %d",
                        nacks, QN_STORE_TXN_STEPS_MAX - 2);
        return;
    }
    if (rc == QN_OK)
        rc = qn_store_txn_new_steps(app->store, steps > 0 ? (int)steps : 1, &st);
    /* first: the leases must be held when the transaction starts (a later ack
     * of a whole batch releases its lease) */
    if (rc == QN_OK && req->n_required_leases > 0)
        rc = qn_store_txn_check_leases(st, (const char *const *)req->required_leases,
                                       req->n_required_leases);
    if (rc == QN_OK && t->nsegs > 0) {
        struct qn_push_segment *ps = calloc(t->nsegs, sizeof *ps);
        if (ps == NULL) {
            rc = QN_ENOMEM;
        } else {
            for (size_t s = 0; s < t->nsegs; s++) {
                ps[s].queue = t->segs[s].queue;
                ps[s].partition = t->segs[s].partition;
                ps[s].count = (uint32_t)t->segs[s].n;
                ps[s].hashes = t->segs[s].hashes;
                ps[s].verified = -1;
                ps[s].blob = t->segs[s].blob.data;
                ps[s].blob_len = t->segs[s].blob.len;
            }
            rc = qn_store_txn_push(st, ps, t->nsegs);
            free(ps);
        }
    }
    for (size_t g = 0; rc == QN_OK && g < t->nacks; g++) {
        struct tack *a = &t->acks[g];
        struct qn_ack_item *items = calloc(a->n, sizeof *items);
        uint8_t(*hashes)[16] = calloc(a->n, 16);
        if (items == NULL || hashes == NULL) {
            free(items);
            free(hashes);
            rc = QN_ENOMEM;
            break;
        }
        for (size_t k = 0; k < a->n; k++) {
            const Queen__V1__AckItem *in = req->ops[a->ops[k]]->ack->item;
            switch (in->status) {
            case QUEEN__V1__ACK_STATUS__ACK_STATUS_FAILED:
                items[k].status = QN_ACK_FAILED;
                break;
            case QUEEN__V1__ACK_STATUS__ACK_STATUS_RETRY:
                items[k].status = QN_ACK_RETRY;
                break;
            case QUEEN__V1__ACK_STATUS__ACK_STATUS_DLQ:
                items[k].status = QN_ACK_DLQ;
                break;
            default:
                items[k].status = QN_ACK_COMPLETED;
                break;
            }
            if (in->target_case == QUEEN__V1__ACK_ITEM__TARGET_TRANSACTION_ID) {
                qn_txn_hash(in->transaction_id, strlen(in->transaction_id), hashes[k]);
                items[k].hash = hashes[k];
            } else {
                items[k].offset = in->offset;
            }
        }
        struct qn_ack_args args;
        memcpy(args.pid, a->pid, 16);
        args.group = a->group;
        args.worker = a->lease ? a->lease : "";
        args.items = items;
        args.n = a->n;
        rc = qn_store_txn_ack(st, &args);
        free(items);
        free(hashes);
    }
    if (rc == QN_OK) {
        struct qn_call_opts opts = qn_authz_opts(call, qn_call_deadline_ms(call));
        rc = qn_store_txn_commit(st, &opts, txn_done, t, &t->sreq);
        st = NULL; /* owned by the store now */
    }
    if (rc != QN_OK) {
        qn_store_txn_abandon(st);
        qn_call_set_data(call, NULL);
        txn_free(t);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
    }
}

static void txn_ready(struct qn_crypt_wait *w, int rc)
{
    struct txn_rpc *t = (struct txn_rpc *)((char *)w - offsetof(struct txn_rpc, wait));
    if (rc != QN_OK) {
        qn_call *call = t->call;
        qn_call_set_data(call, NULL);
        txn_free(t);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
        return;
    }
    txn_go(t);
}

/* The checks passed: learn which pushed queues are encrypted, then go. */
static void txn_learn(struct txn_rpc *t)
{
    t->wait.done = txn_ready;
    int rc =
        qn_crypt_ready(t->app->crypt, &t->wait, qn_authz_tenant(t->call), t->queues, t->nqueues);
    if (rc == 1) {
        txn_go(t);
    } else if (rc < 0) {
        qn_call *call = t->call;
        qn_call_set_data(call, NULL);
        txn_free(t);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    }
}

/* partition_queues_v1 answered for the acked partitions (auth on). */
static void txn_authorized(void *ud, const struct qn_store_status *st,
                           const struct qn_pid_queues_result *res)
{
    struct txn_rpc *t = ud;
    t->sreq = NULL;
    qn_call *call = t->call;
    if (st->code != QN_OK) {
        qn_call_set_data(call, NULL);
        txn_free(t);
        qn_finish_store_error(call, st);
        return;
    }
    for (size_t i = 0; i < t->req->n_ops; i++) {
        const Queen__V1__TransactOp *op = t->req->ops[i];
        if (op->op_case != QUEEN__V1__TRANSACT_OP__OP_ACK)
            continue;
        uint8_t pid[16];
        qn_parse_uuid_str(op->ack->item->partition_id, pid);
        const char *queue = NULL;
        for (size_t k = 0; k < res->n && queue == NULL; k++)
            if (memcmp(res->rows[k].pid, pid, 16) == 0)
                queue = res->rows[k].queue;
        char why[400];
        if (queue == NULL) {
            qn_call_set_data(call, NULL);
            txn_free(t);
            qn_call_finishf(call, QN_GRPC_ABORTED, "operation %zu (ack): partition not found", i);
            return;
        }
        if (!qn_authz_check(call, QN_SCOPE_CONSUME, queue, why, sizeof why)) {
            qn_call_set_data(call, NULL);
            txn_free(t);
            qn_call_finish(call, QN_GRPC_PERMISSION_DENIED, why);
            return;
        }
    }
    txn_learn(t);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void qn_svc_transact(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__TransactRequest *req = (Queen__V1__TransactRequest *)msg;
    char why[400];
    app->rpcs++;
    if (!txn_validate(app->cfg, req, why, sizeof why)) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    for (size_t i = 0; i < req->n_ops; i++) {
        if (req->ops[i]->op_case != QUEEN__V1__TRANSACT_OP__OP_PUSH)
            continue;
        if (!qn_authz_check(call, QN_SCOPE_PRODUCE, req->ops[i]->push->queue, why, sizeof why)) {
            protobuf_c_message_free_unpacked(msg, NULL);
            qn_call_finish(call, QN_GRPC_PERMISSION_DENIED, why);
            return;
        }
    }
    const char *refusal = qn_svc_refusal(app);
    if (refusal != NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, refusal);
        return;
    }
    struct txn_rpc *t = calloc(1, sizeof *t);
    const char **queues = calloc(req->n_ops, sizeof *queues);
    if (t == NULL || queues == NULL) {
        free(t);
        free(queues);
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    t->app = app;
    t->call = call;
    t->req = req;
    t->queues = queues;
    /* the connection's database slot, before the first lookup */
    int src = qn_svc_take_slot(app, call, false, &t->slot);
    if (src != QN_OK) {
        txn_free(t);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                       src == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
        return;
    }
    qn_call_set_data(call, t);
    size_t np = 0;
    for (size_t i = 0; i < req->n_ops; i++)
        if (req->ops[i]->op_case == QUEEN__V1__TRANSACT_OP__OP_PUSH)
            queues[np++] = req->ops[i]->push->queue;
    qsort(queues, np, sizeof *queues, cmp_name);
    for (size_t i = 0; i < np; i++)
        if (t->nqueues == 0 || strcmp(queues[t->nqueues - 1], queues[i]) != 0)
            queues[t->nqueues++] = queues[i];
    size_t nacks = req->n_ops - np;
    if (qn_authz_principal(call) == NULL || nacks == 0) {
        txn_learn(t);
        return;
    }
    uint8_t(*pids)[16] = calloc(nacks, 16);
    size_t k = 0;
    int rc = QN_ENOMEM;
    if (pids != NULL) {
        for (size_t i = 0; i < req->n_ops; i++)
            if (req->ops[i]->op_case == QUEEN__V1__TRANSACT_OP__OP_ACK)
                qn_parse_uuid_str(req->ops[i]->ack->item->partition_id, pids[k++]);
        struct qn_call_opts opts = qn_authz_opts(call, qn_call_deadline_ms(call));
        rc = qn_store_partition_queues(app->store, (const uint8_t(*)[16])pids, k, &opts,
                                       txn_authorized, t, &t->sreq);
        free(pids);
    }
    if (rc != QN_OK) {
        t->sreq = NULL;
        qn_call_set_data(call, NULL);
        txn_free(t);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
    }
}

void qn_svc_transact_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct txn_rpc *t = qn_call_data(call);
    if (t == NULL)
        return;
    qn_store_cancel(t->sreq);
    txn_free(t);
}
