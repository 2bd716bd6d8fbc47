/*
 * engine/decode.c - a batch's segments decompressed off the loop (see
 * decode.h).
 *
 * Does: weigh a batch by the sizes its segments' headers declare; copy the
 * rows, names and blobs into one block; decompress on a pool thread into one
 * buffer per segment; hand the copy to the owner on its loop.
 * Does not: report a decompression error (the builder decompresses such a
 * segment again on the loop and reports it), or wait for a pool slot.
 *
 * Decode lifecycle (the decoder's list holds every decode it started):
 *
 *     start --submitted--> RUNNING (pool) --work returns--> back on the loop:
 *         cb ran unless cancelled; freed
 *     RUNNING --cancel--> RUNNING, no owner: freed when it comes back
 *     RUNNING --qn_decoder_free--> (work awaited) cb ran unless cancelled; freed
 *
 * Invariants:
 *   1. The copy is written by the pool thread only between submit and the
 *      job's return (raw, raw_len and the buffers); the loop reads it after.
 *   2. cb runs at most once per decode, on the loop, and never after cancel.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/decode.h"
#include "engine/map.h"
#include "engine/offload.h"
#include "queen/error.h"
#include "queen/segment.h"

struct qn_decoder {
    struct qn_offload_port *port;
    size_t min_bytes, max_bytes, max_raw;
    struct qn_decode *live; /* started, not yet back */
    bool closing;
    struct qn_decode_stats stats;
};

struct qn_decode {
    struct qn_offload_job job;
    struct qn_decoder *d;
    struct qn_decode *prev, *next; /* d->live */
    qn_decode_cb cb;               /* NULL once cancelled */
    void *ud;
    size_t n;
    struct qn_pop_segment *segs; /* the copy, in block */
    struct qn_buf *raws;         /* one per segment, in block */
    size_t done_segs, done_bytes;
    unsigned char block[]; /* segs, raws, then names and blobs */
};

int qn_decoder_new(struct qn_offload *pool, struct event_base *base, size_t min_bytes,
                   size_t max_bytes, size_t max_raw, struct qn_decoder **out)
{
    if (pool == NULL || base == NULL || min_bytes < 1 || max_bytes < min_bytes || max_raw < 1 ||
        out == NULL)
        return QN_EINVAL;
    struct qn_decoder *d = calloc(1, sizeof *d);
    if (d == NULL)
        return QN_ENOMEM;
    int rc = qn_offload_port_new(pool, base, &d->port);
    if (rc != QN_OK) {
        free(d);
        return rc;
    }
    d->min_bytes = min_bytes;
    d->max_bytes = max_bytes;
    d->max_raw = max_raw;
    *out = d;
    return QN_OK;
}

static void unlink_decode(struct qn_decode *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        x->d->live = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

static void decode_free(struct qn_decode *x)
{
    for (size_t i = 0; i < x->n; i++)
        qn_buf_free(&x->raws[i]);
    free(x);
}

/* Back on the loop (or from qn_decoder_free): the owner gets the copy. */
static void finish(struct qn_decode *x)
{
    struct qn_decoder *d = x->d;
    unlink_decode(x);
    if (x->cb != NULL) {
        d->stats.batches++;
        d->stats.segments += x->done_segs;
        d->stats.bytes += x->done_bytes;
        x->cb(x->ud, x->segs, x->n);
    }
    decode_free(x);
}

static void decode_done(struct qn_offload_job *job)
{
    finish(qn_container_of(job, struct qn_decode, job));
}

/* On a pool thread (invariant 1). */
static void decode_work(struct qn_offload_job *job, qn_zctx *z)
{
    struct qn_decode *x = qn_container_of(job, struct qn_decode, job);
    if (z == NULL)
        return; /* the thread has no context: the loop decompresses all of it */
    for (size_t i = 0; i < x->n; i++) {
        struct qn_pop_segment *s = &x->segs[i];
        if (s->take <= 0 || s->start_idx < 0)
            continue;
        if (qn_segment_decompress_owned(z, s->blob, s->blob_len, x->d->max_raw, &x->raws[i]) !=
            QN_OK)
            continue; /* decompressed again on the loop, which reports why */
        s->raw = x->raws[i].data != NULL ? x->raws[i].data : (const uint8_t *)"";
        s->raw_len = x->raws[i].len;
        x->done_segs++;
        x->done_bytes += x->raws[i].len;
    }
}

/* Whether segs go: the declared sizes of the segments with a span add up to
 * min_bytes..max_bytes, and every one of them declares its size (decode.h). */
static bool worth_it(const struct qn_decoder *d, const struct qn_pop_segment *segs, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (segs[i].take <= 0 || segs[i].start_idx < 0)
            continue;
        uint64_t raw = 0;
        if (qn_segment_raw_size(segs[i].blob, segs[i].blob_len, &raw) != QN_OK ||
            raw > d->max_raw || raw > d->max_bytes - total)
            return false; /* no size, corrupt, too large: the loop decides */
        total += (size_t)raw;
    }
    return total >= d->min_bytes;
}

static size_t name_size(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* Copies s into *at and advances it; NULL stays NULL. */
static const char *copy_name(unsigned char **at, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t l = strlen(s) + 1;
    char *c = memcpy(*at, s, l);
    *at += l;
    return c;
}

int qn_decode_start(struct qn_decoder *d, const struct qn_pop_segment *segs, size_t n,
                    qn_decode_cb cb, void *ud, struct qn_decode **out)
{
    if (d == NULL || d->closing || n == 0 || !worth_it(d, segs, n))
        return QN_EBUSY;
    size_t size = n * (sizeof(struct qn_pop_segment) + sizeof(struct qn_buf));
    for (size_t i = 0; i < n; i++) {
        size_t add = name_size(segs[i].queue) + name_size(segs[i].partition) + segs[i].blob_len;
        if (add > SIZE_MAX - sizeof(struct qn_decode) - size)
            return QN_ENOMEM;
        size += add;
    }
    struct qn_decode *x = calloc(1, sizeof *x + size);
    if (x == NULL)
        return QN_ENOMEM;
    x->d = d;
    x->cb = cb;
    x->ud = ud;
    x->n = n;
    x->segs = (struct qn_pop_segment *)(void *)x->block;
    x->raws = (struct qn_buf *)(void *)(x->segs + n);
    unsigned char *at = (unsigned char *)(x->raws + n);
    for (size_t i = 0; i < n; i++) {
        struct qn_pop_segment *c = &x->segs[i];
        *c = segs[i];
        c->queue = copy_name(&at, segs[i].queue);
        c->partition = copy_name(&at, segs[i].partition);
        if (segs[i].blob_len > 0)
            c->blob = memcpy(at, segs[i].blob, segs[i].blob_len);
        at += segs[i].blob_len;
        c->raw = NULL;
        c->raw_len = 0;
    }
    x->job.work = decode_work;
    x->job.done = decode_done;
    if (qn_offload_submit(d->port, &x->job) != QN_OK) {
        free(x);
        return QN_EBUSY;
    }
    x->next = d->live;
    if (d->live)
        d->live->prev = x;
    d->live = x;
    *out = x;
    return QN_OK;
}

void qn_decode_cancel(struct qn_decode *x)
{
    if (x != NULL)
        x->cb = NULL; /* invariant 2; freed when its job comes back */
}

void qn_decoder_free(struct qn_decoder *d)
{
    if (d == NULL)
        return;
    d->closing = true;
    /* every job's work has ended; none of their done will run from the port */
    qn_offload_port_free(d->port);
    while (d->live != NULL)
        finish(d->live);
    free(d);
}

void qn_decoder_stats(const struct qn_decoder *d, struct qn_decode_stats *out)
{
    memset(out, 0, sizeof *out);
    if (d != NULL)
        *out = d->stats;
}
