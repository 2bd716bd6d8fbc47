/*
 * rpc/push_route.c - partition affinity for pushes (see push_route.h).
 *
 * Does: hash a partition to its owner loop; submit locally owned items to this
 * loop's fusion; copy the others into one forwarded part per call, whose proxy
 * job runs on the owner's fusion and whose results come back to the calling
 * loop.
 * Does not: forward "in doubt" notices; block (a full inbox answers QN_ELIMIT).
 *
 * Lifecycle of a forwarded part (struct fwd), one thread at a time:
 *   BUILT (origin) --posted--> SUBMITTED (owner: proxy job in its fusion)
 *     --proxy done--> RETURNING (posted back) --origin resolves items--> freed
 * A part whose post fails is freed by the thread that tried.
 *
 * Invariants:
 *   1. The origin job has the forwarded items pending until the part returns, so
 *      it (and its call's state) outlives the part's trip.
 *   2. The proxy job's items borrow only the part's own copies (bytes, names,
 *      pre-packed segments), never the origin's request.
 *   3. A part touches the origin job only on the origin loop, the proxy job only
 *      on the owner loop.
 */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "loops.h"
#include "queen/error.h"
#include "rpc/push_route.h"

struct fwd {
    struct qn_app *origin;         /* the calling loop's app */
    struct qn_app *owner;          /* the owning loop's app */
    struct qn_push_job *ojob;      /* the call's job (origin loop only) */
    uint32_t *oidx;                /* n: the call's item indexes */
    struct qn_push_job job;        /* the proxy (owner loop only) */
    struct qn_push_item *items;    /* n: the proxy's items */
    struct qn_prepacked *pre;      /* n: pre-packed segments (unused slots zero) */
    struct qn_prepacked_dup *dups; /* room for every pre-packed frame */
    uint8_t *bytes;                /* every byte the items borrow */
    size_t n;
};

unsigned qn_push_owner(const uint8_t tenant[16], const char *queue, const char *partition,
                       unsigned n)
{
    if (n <= 1)
        return 0;
    /* FNV-1a 64 over tenant, queue, NUL, partition */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < 16; i++)
        h = (h ^ tenant[i]) * 1099511628211ULL;
    for (const char *s = queue; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    h = (h ^ 0) * 1099511628211ULL;
    for (const char *s = partition; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    h ^= h >> 29;
    return (unsigned)(h % n);
}

static void fwd_free(struct fwd *f)
{
    free(f->oidx);
    free(f->items);
    free(f->pre);
    free(f->dups);
    free(f->bytes);
    free(f);
}

/* Bytes one item borrows (what fwd_copy lays out). */
static size_t item_bytes(const struct qn_push_item *it)
{
    size_t b = strlen(it->queue) + 1 + strlen(it->partition) + 1;
    if (it->pre != NULL)
        return b + it->pre->blob_len + 32 * (size_t)it->pre->count;
    return b + it->frame.txn_len + it->frame.psub_len + it->frame.payload_len;
}

static uint8_t *put(uint8_t **at, const void *src, size_t len)
{
    uint8_t *p = *at;
    if (len > 0)
        memcpy(p, src, len);
    *at += len;
    return p;
}

/* The part for items idx[0..n) of job: every byte copied (invariant 2). */
static struct fwd *fwd_new(struct qn_app *origin, struct qn_app *owner, struct qn_push_job *job,
                           const uint32_t *idx, size_t n)
{
    struct fwd *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    f->origin = origin;
    f->owner = owner;
    f->ojob = job;
    f->n = n;
    size_t total = 0, ndups = 0;
    for (size_t i = 0; i < n; i++) {
        const struct qn_push_item *it = &job->items[idx[i]];
        total += item_bytes(it);
        if (it->pre != NULL)
            ndups += it->pre->count;
    }
    f->oidx = malloc(n * sizeof *f->oidx);
    f->items = calloc(n, sizeof *f->items);
    f->pre = calloc(n, sizeof *f->pre);
    f->dups = ndups ? calloc(ndups, sizeof *f->dups) : NULL;
    f->bytes = malloc(total ? total : 1);
    if (f->oidx == NULL || f->items == NULL || f->pre == NULL || (ndups && f->dups == NULL) ||
        f->bytes == NULL) {
        fwd_free(f);
        return NULL;
    }
    memcpy(f->oidx, idx, n * sizeof *idx);
    memcpy(f->job.tenant, job->tenant, 16);
    f->job.items = f->items;
    f->job.nitems = n;
    f->job.ud = f;
    uint8_t *at = f->bytes;
    size_t dup_at = 0;
    for (size_t i = 0; i < n; i++) {
        const struct qn_push_item *src = &job->items[idx[i]];
        struct qn_push_item *it = &f->items[i];
        it->queue = (const char *)put(&at, src->queue, strlen(src->queue) + 1);
        it->partition = (const char *)put(&at, src->partition, strlen(src->partition) + 1);
        memcpy(it->hash, src->hash, sizeof it->hash);
        it->minted_txn = src->minted_txn;
        it->status = QN_ITEM_PENDING;
        if (src->pre != NULL) {
            struct qn_prepacked *p = &f->pre[i];
            p->blob = put(&at, src->pre->blob, src->pre->blob_len);
            p->blob_len = src->pre->blob_len;
            p->count = src->pre->count;
            p->hashes = put(&at, src->pre->hashes, 16 * (size_t)src->pre->count);
            p->ids = put(&at, src->pre->ids, 16 * (size_t)src->pre->count);
            p->payload_bytes = src->pre->payload_bytes;
            p->dups = f->dups + dup_at;
            dup_at += p->count;
            it->pre = p;
            continue;
        }
        it->frame = src->frame; /* flags, ids, lengths; the pointers are ours below */
        it->frame.txn = put(&at, src->frame.txn, src->frame.txn_len);
        it->frame.psub = put(&at, src->frame.psub, src->frame.psub_len);
        it->frame.payload = put(&at, src->frame.payload, src->frame.payload_len);
    }
    return f;
}

/* Origin loop: the part's results resolve the call's items; the part is done. */
static void fwd_return(void *arg)
{
    struct fwd *f = arg;
    struct qn_push_job *job = f->ojob;
    for (size_t i = 0; i < f->n; i++) {
        const struct qn_push_item *r = &f->items[i];
        struct qn_push_item *it = &job->items[f->oidx[i]];
        if (it->pre != NULL && r->pre != NULL) {
            size_t nd = r->pre->ndups <= it->pre->count ? r->pre->ndups : it->pre->count;
            if (nd > 0 && it->pre->dups != NULL)
                memcpy(it->pre->dups, r->pre->dups, nd * sizeof *r->pre->dups);
            it->pre->ndups = nd;
        }
        int status = r->status == QN_ITEM_PENDING ? QN_ITEM_FAILED : r->status;
        int err = r->status == QN_ITEM_PENDING ? QN_EINDOUBT : r->err;
        qn_push_item_resolve(job, f->oidx[i], status, r->offset, r->pid, r->result_id, err);
    }
    fwd_free(f);
}

/* Owner loop: the proxy is resolved; the results go home. */
static void fwd_done(struct qn_push_job *job)
{
    struct fwd *f = job->ud;
    if (qn_loops_post(f->origin->loops, f->origin->worker, fwd_return, f) != QN_OK) {
        /* the origin loop is gone (shutdown): nobody waits for these results */
        QN_WARN("push results for worker %u dropped: its loop has stopped", f->origin->worker);
        fwd_free(f);
    }
}

/* Owner loop: the part joins the owner's fusion. */
static void fwd_submit(void *arg)
{
    struct fwd *f = arg;
    f->job.done = fwd_done;
    f->job.pending = f->n + 1; /* + 1 while submitting, as the push services do */
    uint32_t *all = malloc(f->n * sizeof *all);
    int rc = all == NULL ? QN_ENOMEM : QN_OK;
    for (size_t i = 0; all != NULL && i < f->n; i++)
        all[i] = (uint32_t)i;
    /* also while the owner drains: the call was accepted on its own loop, and
     * fusion fails what it still holds with QN_ESHUTDOWN when it is freed */
    if (rc == QN_OK)
        rc = qn_fusion_submit(f->owner->fusion, &f->job, all, f->n);
    free(all);
    if (rc != QN_OK)
        for (size_t i = 0; i < f->n; i++)
            qn_push_item_resolve(&f->job, (uint32_t)i, QN_ITEM_FAILED, -1, NULL, NULL,
                                 rc == QN_ELIMIT ? QN_EBUSY : rc);
    if (--f->job.pending == 0)
        f->job.done(&f->job);
}

int qn_push_route(struct qn_app *app, struct qn_push_job *job, const uint32_t *idx, size_t n)
{
    if (n == 0)
        return QN_OK;
    unsigned nloops = app->loops != NULL ? qn_loops_count(app->loops) : 1;
    const struct qn_push_item *first = &job->items[idx[0]];
    unsigned k = qn_push_owner(job->tenant, first->queue, first->partition, nloops);
    if (k == app->worker || nloops <= 1)
        return qn_fusion_submit(app->fusion, job, idx, n);
    struct qn_app *owner = qn_loops_module_state(app->loops, k);
    if (owner == NULL)
        return qn_fusion_submit(app->fusion, job, idx, n);
    struct fwd *f = fwd_new(app, owner, job, idx, n);
    if (f == NULL)
        return QN_ENOMEM;
    if (qn_loops_post(app->loops, k, fwd_submit, f) != QN_OK) {
        fwd_free(f);
        return QN_ELIMIT; /* the owner's inbox is full: back-pressure */
    }
    return QN_OK;
}
