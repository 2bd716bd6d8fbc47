/*
 * test_fusion.c - suite "fusion": broker/src/engine/fusion.c, push batching,
 * without a database.
 *
 * The runner is linked with --wrap for the two store calls fusion makes
 * (qn_store_push, qn_store_segment_at). The fake store below records each call
 * with the frames of every segment (decompressed, so the test sees what would be
 * stored and in which order) and answers only when a test says so, with the
 * verdicts it likes. Dispatch runs on the test's own event loop, one
 * non-blocking pass at a time, so every interleaving is chosen by the test.
 *
 * What is asserted is fusion.h's contract: items of one partition are stored in
 * arrival order, also when the survivors of a flush that held duplicates go back
 * (never behind a push that arrived after them); at most one flush per partition
 * is in flight; a bundle holds at most QUEEN_V2_BUNDLE_MAX segments and at most
 * four bundles fly at once; every item is resolved exactly once and every job's
 * done() runs exactly once, never inside qn_fusion_submit(); a duplicate gets the
 * original's offset and message id; a failure fails every item of the bundle.
 * And for a flush whose result was lost (QN_EINDOUBT): its items are marked in
 * doubt and their jobs told, nothing later of the partition is sent before it is
 * resolved, the resolve carries the same frames, waits for the pool to be up, is
 * repeated while in doubt, answers QUEUED with the original offsets when the
 * stored frames carry the items' own message ids (and DUPLICATE otherwise), and
 * gives up with QN_EINDOUBT only after QN_FUSION_RESOLVE_MAX_MS.
 * Pre-packed entries (PushSegments): sent as their own segment, the client's
 * very bytes, in arrival order among the items of their slot, bundled with
 * other partitions, in their tenant; a duplicate frame fails the entry whole;
 * all frames duplicate is DUPLICATE; a lost flush holding entries is resolved
 * (their own ids found: QUEUED); the dedup cache's watermark and hooks apply.
 * Large segments: packed by the offload pool while the loop goes on, their
 * bundle holding no place in flight until they are back; packed on the loop and
 * sent at once when the pool is full.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "config.h"
#include "engine/fusion.h"
#include "engine/offload.h"
#include "engine_test.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/store.h"

#define MAX_CALLS 64
#define MAX_SEGS 16
#define MAX_FRAMES 512
#define MAX_ITEMS 512
#define NPART 16

/* ---------------------------------------------------------------- fake store */

struct fake_seg {
    char queue[32], partition[32];
    uint32_t count;
    int64_t verified;
    const uint8_t *blob; /* the bytes sent (a pre-packed entry's are the client's own) */
    size_t blob_len;
    int seq[MAX_FRAMES]; /* the frames' payloads, in segment order */
};

struct fake_push {
    struct fake_seg segs[MAX_SEGS];
    size_t nsegs;
    bool resolve;       /* qn_store_push_resolve, not qn_store_push */
    uint8_t tenant[16]; /* the bundle's (push_v1 takes one) */
    qn_push_cb cb;
    void *ud;
    bool answered;
};

struct fake_lookup {
    uint8_t pid[16];
    int64_t offsets[MAX_FRAMES];
    size_t n;
    qn_segments_cb cb;
    void *ud;
    bool answered;
};

static struct fake_push pushes[MAX_CALLS];
static size_t npushes;
static struct fake_lookup lookups[MAX_CALLS];
static size_t nlookups;
static int push_refuse; /* != QN_OK: qn_store_push refuses with it */
static bool store_up;   /* what qn_store_is_up answers */
static qn_zctx *test_zctx;
static bool in_submit; /* a done() now would run inside qn_fusion_submit */

int __wrap_qn_store_push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                         const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                         qn_store_req **req);
int __wrap_qn_store_segment_at(qn_store *st, const uint8_t pid[16], const int64_t *offsets,
                               size_t n, const struct qn_call_opts *opts, qn_segments_cb cb,
                               void *ud, qn_store_req **req);

int __wrap_qn_store_push_resolve(qn_store *st, const struct qn_push_segment *segs, size_t n,
                                 const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                                 qn_store_req **req);
bool __wrap_qn_store_is_up(const qn_store *st);

bool __wrap_qn_store_is_up(const qn_store *st)
{
    (void)st;
    return store_up;
}

static int record_push(const struct qn_push_segment *segs, size_t n, bool resolve,
                       const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                       qn_store_req **req);

int __wrap_qn_store_push_resolve(qn_store *st, const struct qn_push_segment *segs, size_t n,
                                 const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                                 qn_store_req **req)
{
    (void)st;
    ck_assert_msg(store_up, "a resolve was sent while the pool was down");
    return record_push(segs, n, true, opts, cb, ud, req);
}

int __wrap_qn_store_push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                         const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                         qn_store_req **req)
{
    (void)st;
    ck_assert(!strict); /* fusion never sends strict pushes */
    return record_push(segs, n, false, opts, cb, ud, req);
}

/* A push or its resolve: both in the bundle's tenant. */
static int record_push(const struct qn_push_segment *segs, size_t n, bool resolve,
                       const struct qn_call_opts *opts, qn_push_cb cb, void *ud, qn_store_req **req)
{
    ck_assert_ptr_nonnull(opts);
    ck_assert_ptr_nonnull(opts->tenant); /* names mean nothing without their tenant */
    if (push_refuse != QN_OK)
        return push_refuse;
    ck_assert_uint_lt(npushes, MAX_CALLS);
    ck_assert_uint_le(n, MAX_SEGS);
    struct fake_push *p = &pushes[npushes++];
    memset(p, 0, sizeof *p);
    p->resolve = resolve;
    p->cb = cb;
    p->ud = ud;
    p->nsegs = n;
    memcpy(p->tenant, opts->tenant, 16);
    for (size_t i = 0; i < n; i++) {
        struct fake_seg *fs = &p->segs[i];
        snprintf(fs->queue, sizeof fs->queue, "%s", segs[i].queue);
        snprintf(fs->partition, sizeof fs->partition, "%s", segs[i].partition);
        fs->count = segs[i].count;
        fs->verified = segs[i].verified;
        fs->blob = segs[i].blob;
        fs->blob_len = segs[i].blob_len;
        ck_assert_uint_le(fs->count, MAX_FRAMES);
        const uint8_t *raw;
        size_t rawlen;
        ck_assert_int_eq(qn_segment_decompress(test_zctx, segs[i].blob, segs[i].blob_len, 64u << 20,
                                               &raw, &rawlen),
                         QN_OK);
        struct qn_frame_iter it;
        struct qn_frame f;
        qn_frame_iter_init(&it, raw, rawlen);
        uint32_t k = 0;
        while (qn_frame_iter_next(&it, &f, NULL) == 1) {
            ck_assert_uint_lt(k, fs->count);
            char num[16];
            size_t l = f.payload_len < sizeof num - 1 ? f.payload_len : sizeof num - 1;
            memcpy(num, f.payload, l);
            num[l] = '\0';
            fs->seq[k] = atoi(num);
            /* the hash sent for a frame is its transaction id's */
            uint8_t h[QN_HASH_LEN];
            qn_txn_hash(f.txn, f.txn_len, h);
            ck_assert_mem_eq(h, segs[i].hashes + 16 * k, 16);
            k++;
        }
        ck_assert_uint_eq(k, fs->count);
    }
    if (req)
        *req = NULL;
    return QN_OK;
}

int __wrap_qn_store_segment_at(qn_store *st, const uint8_t pid[16], const int64_t *offsets,
                               size_t n, const struct qn_call_opts *opts, qn_segments_cb cb,
                               void *ud, qn_store_req **req)
{
    (void)st;
    (void)opts;
    ck_assert_uint_lt(nlookups, MAX_CALLS);
    ck_assert_uint_le(n, MAX_FRAMES);
    struct fake_lookup *l = &lookups[nlookups++];
    memset(l, 0, sizeof *l);
    memcpy(l->pid, pid, 16);
    memcpy(l->offsets, offsets, n * sizeof *offsets);
    l->n = n;
    l->cb = cb;
    l->ud = ud;
    if (req)
        *req = NULL;
    return QN_OK;
}

static void pid_of(const char *partition, uint8_t pid[16])
{
    memset(pid, 0, 16);
    size_t n = strlen(partition); /* the fake id is the name's first 15 bytes */
    memcpy(pid, partition, n < 15 ? n : 15);
}

/* Answers push call k: every segment QUEUED at bases[i] (NULL: 1000 * i). */
static void answer_queued(size_t k, const int64_t *bases)
{
    ck_assert_uint_lt(k, npushes);
    struct fake_push *p = &pushes[k];
    ck_assert(!p->answered);
    struct qn_push_seg_result r[MAX_SEGS];
    memset(r, 0, sizeof r);
    for (size_t i = 0; i < p->nsegs; i++) {
        r[i].status = QN_PUSH_QUEUED;
        pid_of(p->segs[i].partition, r[i].pid);
        r[i].window = 0;
        r[i].base = bases ? bases[i] : (int64_t)(1000 * i);
        r[i].created_at_us = 1;
    }
    struct qn_push_result res = {p->nsegs, r};
    struct qn_store_status st = {QN_OK, "", ""};
    p->answered = true;
    p->cb(p->ud, &st, &res);
}

/* Answers push call k (one segment): nothing written, frames dups[] (indices into
 * the segment, ascending) are duplicates of the originals at orig[]. */
static void answer_dups(size_t k, const uint32_t *dups, const int64_t *orig, size_t ndups)
{
    struct fake_push *p = &pushes[k];
    ck_assert_uint_eq(p->nsegs, 1);
    ck_assert(!p->answered);
    struct qn_push_dup d[MAX_FRAMES];
    for (size_t i = 0; i < ndups; i++)
        d[i] = (struct qn_push_dup){dups[i], orig[i]};
    struct qn_push_seg_result r;
    memset(&r, 0, sizeof r);
    r.status = QN_PUSH_DUPLICATE;
    pid_of(p->segs[0].partition, r.pid);
    r.ndups = ndups;
    r.dups = d;
    struct qn_push_result res = {1, &r};
    struct qn_store_status st = {QN_OK, "", ""};
    p->answered = true;
    p->cb(p->ud, &st, &res);
}

static void answer_error(size_t k, int code)
{
    struct fake_push *p = &pushes[k];
    ck_assert(!p->answered);
    struct qn_store_status st = {code, "", qn_strerror(code)};
    p->answered = true;
    p->cb(p->ud, &st, NULL);
}

/* ---------------------------------------------------------------- jobs */

struct tjob {
    struct qn_push_job job; /* first */
    struct qn_push_item items[MAX_ITEMS];
    char txn[MAX_ITEMS][24];
    char payload[MAX_ITEMS][16];
    uint8_t pad[MAX_ITEMS][1024];
    int done_calls;
    int doubt_calls; /* job.doubt() ran */
};

static struct event_base *base;
static struct qn_config cfg;
static struct qn_fusion *fusion;
static struct tjob *jobs[64];
static size_t njobs;

static void job_done(struct qn_push_job *j)
{
    struct tjob *t = (struct tjob *)j;
    ck_assert_msg(!in_submit, "done() ran inside qn_fusion_submit()");
    t->done_calls++;
    for (size_t i = 0; i < j->nitems; i++)
        ck_assert_int_ne(j->items[i].status, QN_ITEM_PENDING);
}

/*
 * A job of n items for (queue, partition) whose payloads are seq0, seq0+1, ...
 * (the arrival order the test checks). txn: "t<seq>" (distinct), or minted
 * (the message id as text). pad adds that many payload bytes (size tests).
 */
static void job_doubt(struct qn_push_job *j)
{
    struct tjob *t = (struct tjob *)j;
    t->doubt_calls++;
}

static struct tjob *job_make(const char *queue, const char *partition, int seq0, size_t n,
                             bool minted, size_t pad)
{
    ck_assert_uint_le(n, MAX_ITEMS);
    ck_assert_uint_lt(njobs, 64);
    ck_assert_uint_le(pad, 1000);
    struct tjob *t = calloc(1, sizeof *t);
    ck_assert_ptr_nonnull(t);
    jobs[njobs++] = t;
    t->job.items = t->items;
    t->job.nitems = n;
    t->job.pending = n;
    t->job.done = job_done;
    t->job.doubt = job_doubt;
    t->job.ud = t;
    for (size_t i = 0; i < n; i++) {
        struct qn_push_item *it = &t->items[i];
        int seq = seq0 + (int)i;
        memset(it->frame.message_id, 0, 16);
        memcpy(it->frame.message_id, &seq, sizeof seq);
        it->frame.message_id[15] = 0x5a;
        if (minted)
            snprintf(t->txn[i], sizeof t->txn[i], "m-%08d", seq);
        else
            snprintf(t->txn[i], sizeof t->txn[i], "t%d", seq);
        it->minted_txn = minted;
        it->frame.txn = (const uint8_t *)t->txn[i];
        it->frame.txn_len = strlen(t->txn[i]);
        /* payload: the decimal seq, padded with spaces (atoi stops there) */
        int l = snprintf(t->payload[i], sizeof t->payload[i], "%d", seq);
        memcpy(t->pad[i], t->payload[i], (size_t)l);
        memset(t->pad[i] + l, ' ', pad > (size_t)l ? pad - (size_t)l : 0);
        it->frame.payload = t->pad[i];
        it->frame.payload_len = pad > (size_t)l ? pad : (size_t)l;
        qn_txn_hash(it->frame.txn, it->frame.txn_len, it->hash);
        it->queue = queue;
        it->partition = partition;
    }
    return t;
}

static void submit(struct tjob *t)
{
    uint32_t idx[MAX_ITEMS];
    for (size_t i = 0; i < t->job.nitems; i++)
        idx[i] = (uint32_t)i;
    in_submit = true;
    ck_assert_int_eq(qn_fusion_submit(fusion, &t->job, idx, t->job.nitems), QN_OK);
    in_submit = false;
    ck_assert_int_eq(t->done_calls, 0);
}

/* One pass of the loop: fusion dispatches what is ready. */
static void turn(void)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
}

static void setup_with(int64_t bundle_max, int64_t segment_raw_max)
{
    memset(pushes, 0, sizeof pushes);
    npushes = 0;
    nlookups = 0;
    njobs = 0;
    push_refuse = QN_OK;
    store_up = true;
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    ck_assert_int_eq(qn_zctx_new(&test_zctx), QN_OK);
    /* fusion reads these four settings only (fusion.h); max_send_bytes 0: no
     * cap from the send limit */
    memset(&cfg, 0, sizeof cfg);
    cfg.bundle_max = bundle_max;
    cfg.segment_raw_max = segment_raw_max;
    cfg.zstd_level = 1;
    ck_assert_int_eq(qn_fusion_new(base, &cfg, NULL, test_zctx, &fusion), QN_OK);
}

static void setup(void)
{
    setup_with(16, 64 << 20);
}

static void pres_teardown(void);

static void teardown(void)
{
    qn_fusion_free(fusion);
    pres_teardown();
    for (size_t i = 0; i < njobs; i++) {
        ck_assert_msg(jobs[i]->done_calls == 1, "job %zu: done() ran %d times", i,
                      jobs[i]->done_calls);
        free(jobs[i]);
    }
    qn_zctx_free(test_zctx);
    event_base_free(base);
}

/* The partition's stored sequence: the frames of every answered QUEUED segment
 * of that partition, in commit order; checked strictly increasing (arrival
 * order) with no repeats. */
static struct {
    int seq[MAX_ITEMS * 4];
    size_t n;
} stored;

static void record_stored(size_t k, const char *partition)
{
    const struct fake_push *p = &pushes[k];
    for (size_t i = 0; i < p->nsegs; i++) {
        if (strcmp(p->segs[i].partition, partition) != 0)
            continue;
        for (uint32_t j = 0; j < p->segs[i].count; j++) {
            int s = p->segs[i].seq[j];
            ck_assert_msg(stored.n == 0 || stored.seq[stored.n - 1] < s,
                          "partition %s: frame %d stored after frame %d (arrival order broken)",
                          partition, s, stored.seq[stored.n - 1]);
            stored.seq[stored.n++] = s;
        }
    }
}

/* ---------------------------------------------------------------- tests */

START_TEST(one_flush_per_partition_in_flight)
{
    setup();
    struct tjob *a = job_make("q", "p0", 0, 3, false, 0);
    submit(a);
    ck_assert_uint_eq(npushes, 0); /* dispatched on the next loop turn, not inside submit */
    turn();
    ck_assert_uint_eq(npushes, 1);
    ck_assert_uint_eq(pushes[0].nsegs, 1);
    ck_assert_uint_eq(pushes[0].segs[0].count, 3);

    /* more for p0 while its flush is in flight: they wait */
    struct tjob *b = job_make("q", "p0", 3, 2, false, 0);
    submit(b);
    turn();
    turn();
    ck_assert_uint_eq(npushes, 1);
    /* another partition is not held back by p0 */
    struct tjob *c = job_make("q", "p1", 100, 1, false, 0);
    submit(c);
    turn();
    ck_assert_uint_eq(npushes, 2);
    ck_assert_str_eq(pushes[1].segs[0].partition, "p1");

    int64_t bases0[] = {10};
    answer_queued(0, bases0);
    ck_assert_int_eq(a->done_calls, 1);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a->items[i].status, QN_ITEM_QUEUED);
        ck_assert_int_eq(a->items[i].offset, 10 + i);
        ck_assert_mem_eq(a->items[i].result_id, a->items[i].frame.message_id, 16);
    }
    ck_assert_int_eq(b->done_calls, 0);
    turn(); /* p0's waiting frames go now, together */
    ck_assert_uint_eq(npushes, 3);
    ck_assert_str_eq(pushes[2].segs[0].partition, "p0");
    ck_assert_uint_eq(pushes[2].segs[0].count, 2);
    ck_assert_int_eq(pushes[2].segs[0].seq[0], 3);
    ck_assert_int_eq(pushes[2].segs[0].seq[1], 4);
    int64_t bases2[] = {13};
    answer_queued(2, bases2);
    answer_queued(1, NULL);
    ck_assert_int_eq(b->items[1].offset, 14);
    ck_assert_int_eq(c->items[0].status, QN_ITEM_QUEUED);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.committed, 6);
    ck_assert_uint_eq(fs.segments, 3);
    ck_assert_uint_eq(fs.flushes, 3);
    ck_assert_uint_eq(fs.inflight, 0);
    teardown();
}
END_TEST

/* Four bundles in flight: `part` waits, and leaves as the fifth once bundle
 * `back` is answered; then every bundle is answered. */
static void fifth_waits_for_one_back(const char *part, int64_t seq, size_t back)
{
    submit(job_make("q", part, seq, 1, false, 0));
    turn();
    turn();
    ck_assert_uint_eq(npushes, 4);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.inflight, 4);
    answer_queued(back, NULL);
    turn();
    ck_assert_uint_eq(npushes, 5);
    ck_assert_str_eq(pushes[4].segs[0].partition, part);
    for (size_t k = 0; k < npushes; k++)
        if (k != back)
            answer_queued(k, NULL);
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.inflight, 0);
}

START_TEST(bundles_bounded_by_bundle_max)
{
    setup_with(4, 64 << 20);
    static const char *parts[] = {"p0", "p1", "p2", "p3", "p4",  "p5",
                                  "p6", "p7", "p8", "p9", "p10", "p11"};
    for (int i = 0; i < 10; i++)
        submit(job_make("q", parts[i], i * 10, 1, false, 0));
    turn();
    /* 10 ready partitions: bundles of 4, 4 and 2 */
    ck_assert_uint_eq(npushes, 3);
    bool seen[12] = {false};
    size_t total = 0;
    for (size_t k = 0; k < npushes; k++) {
        ck_assert_uint_le(pushes[k].nsegs, 4);
        for (size_t i = 0; i < pushes[k].nsegs; i++) {
            int p = atoi(pushes[k].segs[i].partition + 1);
            ck_assert_msg(!seen[p], "partition p%d in two segments at once", p);
            seen[p] = true;
            total++;
        }
    }
    ck_assert_uint_eq(total, 10);
    /* a fourth bundle may fly, a fifth may not */
    submit(job_make("q", parts[10], 100, 1, false, 0));
    turn();
    ck_assert_uint_eq(npushes, 4);
    fifth_waits_for_one_back(parts[11], 110, 0);
    teardown();
}
END_TEST

/* The lanes' opening move: p0 leaves at once; p1 and p2 arrive while it is
 * in flight, and the loop turns. */
static void p0_out_then_p1_p2(void)
{
    submit(job_make("q", "p0", 0, 1, false, 0));
    turn();
    ck_assert_uint_eq(npushes, 1);
    submit(job_make("q", "p1", 10, 1, false, 0));
    submit(job_make("q", "p2", 20, 1, false, 0));
    turn();
}

/* QUEEN_PUSH_LANE_MS: one bundle in flight while it is younger than the lane
 * time; what arrives meanwhile leaves together when it is back, or when the
 * flight has aged (a stuck commit lets the others by). */
START_TEST(one_lane_until_the_flight_ages)
{
    setup();
    cfg.push_lane_ms = 25;
    p0_out_then_p1_p2();
    turn();
    ck_assert_uint_eq(npushes, 1); /* the one lane is taken */
    answer_queued(0, NULL);
    turn();
    ck_assert_uint_eq(npushes, 2); /* both waiting partitions, one bundle */
    ck_assert_uint_eq(pushes[1].nsegs, 2);

    submit(job_make("q", "p3", 30, 1, false, 0));
    turn();
    ck_assert_uint_eq(npushes, 2);
    /* the flight is as old as the lane time: a second lane opens when the
     * lane's timer fires (armed for the flight's age to reach it) */
    qt_engine_mono_ms += 25;
    event_base_loop(base, EVLOOP_ONCE);
    turn();
    ck_assert_uint_eq(npushes, 3);
    ck_assert_str_eq(pushes[2].segs[0].partition, "p3");
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.inflight, 2);
    answer_queued(1, NULL);
    answer_queued(2, NULL);
    teardown();
}
END_TEST

/* A full bundle does not wait for a lane: waiting would not make it larger. */
START_TEST(a_full_bundle_takes_no_lane_turn)
{
    setup_with(2, 64 << 20);
    cfg.push_lane_ms = 60000;
    p0_out_then_p1_p2();
    ck_assert_uint_eq(npushes, 2);
    ck_assert_uint_eq(pushes[1].nsegs, 2);
    submit(job_make("q", "p3", 30, 1, false, 0));
    turn();
    ck_assert_uint_eq(npushes, 2); /* one segment waits for a lane */
    for (size_t k = 0; k < 2; k++)
        answer_queued(k, NULL);
    turn();
    ck_assert_uint_eq(npushes, 3);
    answer_queued(2, NULL);
    teardown();
}
END_TEST

/* Lanes open with age up to the cap and no further: four bundles in flight,
 * however long, and a fifth waits for one of them to come back. */
START_TEST(lanes_stop_at_four_however_old_the_flights)
{
    setup();
    cfg.push_lane_ms = 25;
    static const char *parts[] = {"p0", "p1", "p2", "p3", "p4"};
    for (int i = 0; i < 4; i++) {
        submit(job_make("q", parts[i], i * 10, 1, false, 0));
        turn();
        ck_assert_uint_eq(npushes, (size_t)i + 1); /* every flight before it has aged */
        qt_engine_mono_ms += 25;
    }
    qt_engine_mono_ms += 1000;
    fifth_waits_for_one_back(parts[4], 40, 1);
    teardown();
}
END_TEST

START_TEST(survivors_stay_ahead_of_later_arrivals)
{
    setup();
    stored.n = 0;
    struct tjob *a = job_make("q", "p", 0, 5, false, 0);
    submit(a);
    turn();
    ck_assert_uint_eq(npushes, 1);
    /* 5 and 6 arrive while the first flush is in flight */
    struct tjob *b = job_make("q", "p", 5, 2, false, 0);
    submit(b);
    turn();
    ck_assert_uint_eq(npushes, 1);
    /* SQL: frames 1 and 3 repeat stored messages; nothing was written */
    uint32_t dups[] = {1, 3};
    int64_t orig[] = {40, 41};
    answer_dups(0, dups, orig, 2);
    turn();
    /* the survivors went back to the front: 0, 2, 4 before 5, 6 */
    ck_assert_uint_eq(npushes, 2);
    ck_assert_uint_eq(pushes[1].segs[0].count, 5);
    static const int want[] = {0, 2, 4, 5, 6};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(pushes[1].segs[0].seq[i], want[i]);
    int64_t base1[] = {50};
    record_stored(1, "p");
    answer_queued(1, base1);
    ck_assert_int_eq(a->items[0].offset, 50);
    ck_assert_int_eq(a->items[2].offset, 51);
    ck_assert_int_eq(a->items[4].offset, 52);
    ck_assert_int_eq(b->items[0].offset, 53);
    ck_assert_int_eq(b->items[1].offset, 54);
    /* the duplicates wait for the originals' ids (one lookup), then resolve */
    ck_assert_uint_eq(nlookups, 1);
    ck_assert_uint_eq(lookups[0].n, 2);
    ck_assert_int_eq(a->done_calls, 0);
    /* the lookup answers with the original segment: ids come from its frames */
    struct qn_frame f[2];
    memset(f, 0, sizeof f);
    for (int i = 0; i < 2; i++) {
        memset(f[i].message_id, 0xa0 + i, 16);
        f[i].txn = (const uint8_t *)(i ? "t3" : "t1");
        f[i].txn_len = 2;
        f[i].payload = (const uint8_t *)"x";
        f[i].payload_len = 1;
    }
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(test_zctx, f, 2, 1, &blob, NULL), QN_OK);
    struct qn_segment_row row = {40, 41, 1, blob.data, blob.len};
    struct qn_segments_result sr = {1, &row};
    struct qn_store_status ok = {QN_OK, "", ""};
    lookups[0].cb(lookups[0].ud, &ok, &sr);
    qn_buf_free(&blob);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(a->items[1].status, QN_ITEM_DUPLICATE);
    ck_assert_int_eq(a->items[1].offset, 40);
    uint8_t id0[16], id1[16];
    memset(id0, 0xa0, 16);
    memset(id1, 0xa1, 16);
    ck_assert_mem_eq(a->items[1].result_id, id0, 16);
    ck_assert_int_eq(a->items[3].status, QN_ITEM_DUPLICATE);
    ck_assert_int_eq(a->items[3].offset, 41);
    ck_assert_mem_eq(a->items[3].result_id, id1, 16);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.duplicates, 2);
    ck_assert_uint_eq(fs.committed, 5);
    teardown();
}
END_TEST

/*
 * A flush takes only what fits a segment (QUEEN_SEGMENT_RAW_MAX / 2); the rest
 * waits. When that flush comes back with duplicates, its survivors must go
 * ahead of the frames left behind (which arrived after them) and of everything
 * that arrived during the flush. Every round, one more frame is a duplicate.
 */
START_TEST(survivors_stay_ahead_when_flushes_are_split)
{
    setup_with(16, 64 * 1024); /* segments of at most 32 KiB raw: ~30 of these frames */
    stored.n = 0;
    submit(job_make("q", "p", 0, 60, false, 1000));
    turn();
    ck_assert_uint_eq(npushes, 1);
    uint32_t first = pushes[0].segs[0].count;
    ck_assert_uint_lt(first, 60); /* split */
    ck_assert_uint_gt(first, 1);
    int next_seq = 60;
    size_t dups_total = 0, k = 0;
    bool dup_seen[200] = {false};
    while (k < npushes) {
        /* more arrives during every flush */
        submit(job_make("q", "p", next_seq, 7, false, 1000));
        next_seq += 7;
        turn();
        ck_assert_uint_eq(npushes, k + 1); /* still one flush in flight */
        const struct fake_seg *sg = &pushes[k].segs[0];
        if (k < 6 && sg->count > 2) {
            /* the second frame repeats a stored message */
            uint32_t d[] = {1};
            int64_t o[] = {7};
            ck_assert(!dup_seen[sg->seq[1]]);
            dup_seen[sg->seq[1]] = true;
            dups_total++;
            answer_dups(k, d, o, 1);
            /* lookup fails: the duplicate still resolves, with no id */
            struct qn_store_status down = {QN_EUNAVAILABLE, "", "down"};
            lookups[nlookups - 1].cb(lookups[nlookups - 1].ud, &down, NULL);
        } else {
            record_stored(k, "p");
            answer_queued(k, NULL);
        }
        k++;
        turn();
        if (next_seq > 150)
            break;
    }
    /* drain what is left */
    while (k < npushes) {
        record_stored(k, "p");
        answer_queued(k, NULL);
        k++;
        turn();
    }
    ck_assert_uint_eq(k, npushes);
    /* everything arrived once: stored in arrival order, or answered DUPLICATE */
    ck_assert_uint_eq(stored.n + dups_total, (size_t)next_seq);
    for (size_t i = 0; i < njobs; i++)
        for (size_t j = 0; j < jobs[i]->job.nitems; j++) {
            int st = jobs[i]->items[j].status;
            int seq = atoi(jobs[i]->payload[j]);
            ck_assert_int_eq(st, dup_seen[seq] ? QN_ITEM_DUPLICATE : QN_ITEM_QUEUED);
        }
    teardown();
}
END_TEST

/* A segment holds at most an eighth of QUEEN_MAX_SEND_BYTES raw, so that a pop
 * can take it whole; a frame larger than that still goes, alone. */
START_TEST(segments_stay_within_an_eighth_of_the_send_limit)
{
    setup();
    cfg.max_send_bytes = 256 * 1024; /* 32 KiB segments: ~30 frames of 1000 bytes */
    stored.n = 0;
    submit(job_make("q", "p", 0, 70, false, 1000));
    turn();
    ck_assert_uint_eq(npushes, 1);
    uint32_t first = pushes[0].segs[0].count;
    ck_assert_uint_lt(first, 33);
    ck_assert_uint_gt(first, 25);
    size_t k = 0, total = 0;
    while (k < npushes) {
        ck_assert_uint_le(pushes[k].segs[0].count, first);
        total += pushes[k].segs[0].count;
        record_stored(k, "p");
        answer_queued(k, NULL);
        k++;
        turn(); /* the rest, in the next flush */
    }
    ck_assert_uint_eq(k, 3);
    ck_assert_uint_eq(total, 70);
    /* a frame larger than the cap still goes, alone */
    cfg.max_send_bytes = 4096;
    submit(job_make("q", "p", 100, 2, false, 1000));
    turn();
    ck_assert_uint_eq(npushes, k + 1);
    ck_assert_uint_eq(pushes[k].segs[0].count, 1);
    record_stored(k, "p");
    answer_queued(k, NULL);
    turn();
    ck_assert_uint_eq(npushes, k + 2);
    ck_assert_uint_eq(pushes[k + 1].segs[0].count, 1);
    record_stored(k + 1, "p");
    answer_queued(k + 1, NULL);
    turn();
    ck_assert_uint_eq(stored.n, 72);
    teardown();
}
END_TEST

START_TEST(layer2_followers_inherit_the_leader)
{
    setup();
    /* two jobs carry the same transaction id into one flush: one frame */
    struct tjob *a = job_make("q", "p", 0, 2, false, 0);
    struct tjob *b = job_make("q", "p", 2, 1, false, 0);
    snprintf(b->txn[0], sizeof b->txn[0], "%s", a->txn[1]);
    b->items[0].frame.txn_len = strlen(b->txn[0]);
    qn_txn_hash(b->items[0].frame.txn, b->items[0].frame.txn_len, b->items[0].hash);
    submit(a);
    submit(b);
    turn();
    ck_assert_uint_eq(npushes, 1);
    ck_assert_uint_eq(pushes[0].segs[0].count, 2);
    int64_t b0[] = {70};
    answer_queued(0, b0);
    ck_assert_int_eq(b->done_calls, 1);
    ck_assert_int_eq(b->items[0].status, QN_ITEM_DUPLICATE);
    ck_assert_int_eq(b->items[0].offset, 71);
    ck_assert_mem_eq(b->items[0].result_id, a->items[1].frame.message_id, 16);
    teardown();
}
END_TEST

START_TEST(failure_fails_every_item_once)
{
    setup();
    struct tjob *a = job_make("q", "p0", 0, 3, false, 0);
    struct tjob *b = job_make("q", "p1", 10, 2, false, 0);
    struct tjob *c = job_make("q", "p1", 12, 1, false, 0);
    submit(a);
    submit(b);
    turn();
    ck_assert_uint_eq(npushes, 1);
    ck_assert_uint_eq(pushes[0].nsegs, 2);
    submit(c); /* arrives while p1's flush is in flight */
    answer_error(0, QN_EUNAVAILABLE);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(b->done_calls, 1);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a->items[i].status, QN_ITEM_FAILED);
        ck_assert_int_eq(a->items[i].err, QN_EUNAVAILABLE);
    }
    /* c was waiting, not in the failed bundle: it goes next */
    ck_assert_int_eq(c->done_calls, 0);
    turn();
    ck_assert_uint_eq(npushes, 2);
    /* the store refuses at once: the items fail, done() still comes later */
    push_refuse = QN_EUNAVAILABLE;
    struct tjob *d = job_make("q", "p2", 20, 2, false, 0);
    submit(d);
    turn();
    ck_assert_int_eq(d->done_calls, 1);
    ck_assert_int_eq(d->items[0].status, QN_ITEM_FAILED);
    ck_assert_int_eq(d->items[1].err, QN_EUNAVAILABLE);
    push_refuse = QN_OK;
    answer_queued(1, NULL);
    ck_assert_int_eq(c->items[0].status, QN_ITEM_QUEUED);
    teardown();
}
END_TEST

START_TEST(minted_ids_are_vouched_for)
{
    setup();
    submit(job_make("q", "minted", 0, 3, true, 0));
    submit(job_make("q", "given", 10, 1, false, 0));
    turn();
    ck_assert_uint_eq(npushes, 1);
    for (size_t i = 0; i < pushes[0].nsegs; i++) {
        const struct fake_seg *s = &pushes[0].segs[i];
        if (strcmp(s->partition, "minted") == 0)
            ck_assert_int_eq(s->verified, INT64_MAX); /* nothing stored can match */
        else
            ck_assert_int_eq(s->verified, -1); /* no dedup cache: SQL probes */
    }
    answer_queued(0, NULL);
    teardown();
}
END_TEST

/* Two tenants' partitions of one (queue, partition) name are two slots: both
 * fly at once, never in one bundle, each bundle carrying its own tenant; and a
 * bundle of one tenant leaves the other's slots ready, in their order. */
START_TEST(tenants_have_their_own_slots_and_bundles)
{
    static const uint8_t TA[16] = {1};
    static const uint8_t TB[16] = {2};
    setup();
    struct tjob *a = job_make("q", "p0", 0, 2, false, 0);
    memcpy(a->job.tenant, TA, 16);
    struct tjob *b = job_make("q", "p0", 100, 3, false, 0);
    memcpy(b->job.tenant, TB, 16);
    struct tjob *c = job_make("q", "p1", 200, 1, false, 0);
    memcpy(c->job.tenant, TA, 16);
    submit(a);
    submit(b);
    submit(c);
    turn();
    /* TA's two partitions in one bundle, TB's slot in another, both in flight */
    ck_assert_uint_eq(npushes, 2);
    ck_assert_mem_eq(pushes[0].tenant, TA, 16);
    ck_assert_uint_eq(pushes[0].nsegs, 2);
    ck_assert_str_eq(pushes[0].segs[0].partition, "p0");
    ck_assert_int_eq(pushes[0].segs[0].seq[0], 0);
    ck_assert_str_eq(pushes[0].segs[1].partition, "p1");
    ck_assert_mem_eq(pushes[1].tenant, TB, 16);
    ck_assert_uint_eq(pushes[1].nsegs, 1);
    ck_assert_uint_eq(pushes[1].segs[0].count, 3);
    ck_assert_int_eq(pushes[1].segs[0].seq[0], 100);
    answer_queued(1, NULL);
    ck_assert_int_eq(b->done_calls, 1);
    ck_assert_int_eq(a->done_calls, 0);
    answer_queued(0, NULL);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(c->done_calls, 1);
    teardown();
}
END_TEST

START_TEST(free_fails_what_waits)
{
    setup();
    struct tjob *a = job_make("q", "p", 0, 4, false, 0);
    submit(a);
    /* never dispatched: freeing fusion answers every item */
    qn_fusion_free(fusion);
    fusion = NULL;
    ck_assert_int_eq(a->done_calls, 1);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(a->items[i].status, QN_ITEM_FAILED);
        ck_assert_int_eq(a->items[i].err, QN_ESHUTDOWN);
    }
    teardown();
}
END_TEST

/* ---------------------------------------------------------------- offload */

/* The pool's one thread, held by a gate job of a port of the test's own. */
struct held_pool {
    struct qn_offload *pool;
    struct qn_offload_port *port;
    struct qn_test_gate gate;
};

static void held_pool_start(struct held_pool *h, size_t cap)
{
    ck_assert_int_eq(qn_offload_new(1, cap, &h->pool), QN_OK);
    ck_assert_int_eq(qn_offload_port_new(h->pool, base, &h->port), QN_OK);
    qn_test_gate_init(&h->gate);
    ck_assert_int_eq(qn_offload_submit(h->port, &h->gate.job), QN_OK);
    qn_test_gate_wait_started(&h->gate);
    ck_assert_int_eq(qn_fusion_set_offload(fusion, h->pool, 64 * 1024), QN_OK);
}

/* After qn_fusion_free (which freed fusion's port). */
static void held_pool_end(struct held_pool *h)
{
    qn_offload_port_free(h->port);
    qn_offload_free(h->pool);
    qn_test_gate_destroy(&h->gate);
}

/* A large segment is packed by a pool thread: its bundle is sent when the
 * segment is back, with the frames in arrival order and the other segments it
 * was bundled with; meanwhile the loop goes on dispatching other partitions.
 * Small segments are packed on the loop. */
START_TEST(large_segments_are_packed_off_the_loop)
{
    ck_assert_int_eq(evthread_use_pthreads(), 0); /* before the loop: the pool wakes it */
    setup();
    struct held_pool h;
    held_pool_start(&h, 8);
    struct tjob *big = job_make("q", "p0", 0, 200, false, 1000); /* ~200 KB raw */
    struct tjob *small = job_make("q", "p1", 1000, 3, false, 0);
    submit(big);
    submit(small);
    turn();
    ck_assert_uint_eq(npushes, 0); /* the bundle waits for its large segment */
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.offloaded, 1);
    ck_assert_uint_eq(fs.inflight, 0); /* counted from its send */
    ck_assert_uint_eq(fs.packing, 1);
    struct tjob *later = job_make("q", "p2", 2000, 2, false, 0);
    submit(later);
    turn();
    ck_assert_uint_eq(npushes, 1); /* not behind the packing one */
    ck_assert_uint_eq(pushes[0].nsegs, 1);
    ck_assert_str_eq(pushes[0].segs[0].partition, "p2");
    qn_test_gate_open(&h.gate);
    while (npushes < 2)
        turn(); /* until the pool hands the segment back */
    ck_assert_uint_eq(pushes[1].nsegs, 2);
    ck_assert_str_eq(pushes[1].segs[0].partition, "p0");
    ck_assert_uint_eq(pushes[1].segs[0].count, 200);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(pushes[1].segs[0].seq[i], i);
    ck_assert_str_eq(pushes[1].segs[1].partition, "p1");
    ck_assert_uint_eq(pushes[1].segs[1].count, 3);
    answer_queued(0, NULL);
    answer_queued(1, NULL);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(big->items[i].status, QN_ITEM_QUEUED);
    ck_assert_int_eq(small->done_calls, 1);
    ck_assert_int_eq(later->done_calls, 1);
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.offloaded, 1);
    ck_assert_uint_eq(fs.inflight, 0);
    qn_fusion_free(fusion);
    fusion = NULL;
    held_pool_end(&h);
    teardown();
}
END_TEST

/* A bundle whose segment a pool thread packs holds no place in flight: four
 * other partitions are sent meanwhile; packed with no place free, it waits and
 * goes first when one frees, ahead of what became ready after it. */
START_TEST(a_packing_bundle_holds_no_place_in_flight)
{
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    setup_with(1, 64 << 20); /* one partition a bundle */
    struct held_pool h;
    held_pool_start(&h, 8);
    struct tjob *big = job_make("q", "p0", 0, 200, false, 1000);
    submit(big);
    turn();
    char part[4][4] = {"p1", "p2", "p3", "p4"};
    struct tjob *small[4];
    for (int i = 0; i < 4; i++) {
        small[i] = job_make("q", part[i], 100 * (i + 1), 2, false, 0);
        submit(small[i]);
    }
    turn();
    ck_assert_uint_eq(npushes, 4); /* all four: the packing one holds no place */
    qn_test_gate_open(&h.gate);
    struct qn_fusion_stats fs;
    do {
        turn(); /* until the packed bundle is back (and waits: no place) */
        qn_fusion_stats(fusion, &fs);
    } while (fs.packed_waiting == 0);
    ck_assert_uint_eq(fs.packing, 0);
    ck_assert_uint_eq(fs.inflight, 4);
    struct tjob *p5 = job_make("q", "p5", 600, 1, false, 0);
    submit(p5);
    turn();
    ck_assert_uint_eq(npushes, 4); /* no place: p0 waits, and p5 behind it */
    answer_queued(0, NULL);
    turn();
    ck_assert_uint_eq(npushes, 5);
    ck_assert_str_eq(pushes[4].segs[0].partition, "p0");
    ck_assert_uint_eq(pushes[4].segs[0].count, 200);
    answer_queued(1, NULL);
    turn();
    ck_assert_uint_eq(npushes, 6);
    ck_assert_str_eq(pushes[5].segs[0].partition, "p5");
    for (size_t k = 2; k < 6; k++)
        answer_queued(k, NULL);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(big->items[i].status, QN_ITEM_QUEUED);
    qn_fusion_free(fusion);
    fusion = NULL;
    held_pool_end(&h);
    teardown();
}
END_TEST

/* The pool is full (its only place held by the gate job): the large segment is
 * packed on the loop after all, and its bundle sent in the same turn with the
 * segments it was bundled with, its frames intact and in arrival order. The
 * pool counts the refusal; fusion counts nothing offloaded or packing. */
START_TEST(a_full_pool_packs_on_the_loop)
{
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    setup();
    struct held_pool h;
    held_pool_start(&h, 1);
    struct tjob *big = job_make("q", "p0", 0, 200, false, 1000); /* ~200 KB raw: offloaded */
    struct tjob *small = job_make("q", "p1", 1000, 3, false, 0);
    submit(big);
    submit(small);
    turn();
    ck_assert_uint_eq(npushes, 1); /* nothing waits for the pool */
    ck_assert_uint_eq(pushes[0].nsegs, 2);
    ck_assert_str_eq(pushes[0].segs[0].partition, "p0");
    ck_assert_uint_eq(pushes[0].segs[0].count, 200);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(pushes[0].segs[0].seq[i], i);
    ck_assert_str_eq(pushes[0].segs[1].partition, "p1");
    ck_assert_uint_eq(pushes[0].segs[1].count, 3);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.offloaded, 0);
    ck_assert_uint_eq(fs.packing, 0);
    ck_assert_uint_eq(fs.inflight, 1);
    struct qn_offload_stats os;
    qn_offload_stats(h.pool, &os);
    ck_assert_uint_eq(os.submitted, 1); /* the gate */
    ck_assert_uint_eq(os.refused, 1);
    answer_queued(0, NULL);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(big->items[i].status, QN_ITEM_QUEUED);
    ck_assert_int_eq(big->done_calls, 1);
    ck_assert_int_eq(small->done_calls, 1);
    qn_test_gate_open(&h.gate); /* freeing the test's port waits for its work */
    qn_fusion_free(fusion);
    fusion = NULL;
    held_pool_end(&h);
    teardown();
}
END_TEST

/* Freed while a pool thread packs: fusion waits for the thread, then fails
 * the segment's items (nothing was sent). */
START_TEST(free_while_packing_fails_the_items)
{
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    setup();
    struct held_pool h;
    held_pool_start(&h, 8);
    struct tjob *big = job_make("q", "p0", 0, 200, false, 1000);
    submit(big);
    turn();
    qn_test_gate_open(&h.gate); /* packs now; its hand-back is never run */
    qn_fusion_free(fusion);
    fusion = NULL;
    ck_assert_uint_eq(npushes, 0);
    ck_assert_int_eq(big->done_calls, 1);
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(big->items[i].status, QN_ITEM_FAILED);
        ck_assert_int_eq(big->items[i].err, QN_ESHUTDOWN);
    }
    held_pool_end(&h);
    teardown();
}
END_TEST

/* ---------------------------------------------------------------- flushes in doubt */

/* Answers lookup k with one segment at base holding the frames of items
 * [first, first + n) of job t (their own message ids), except that entries of
 * `other` (may be NULL) carry a foreign message id instead. */
static void answer_lookup_with(size_t k, int64_t at, const struct tjob *t, size_t first, size_t n,
                               const bool *other)
{
    ck_assert_uint_lt(k, nlookups);
    struct fake_lookup *l = &lookups[k];
    ck_assert(!l->answered);
    struct qn_frame f[MAX_FRAMES];
    memset(f, 0, sizeof f);
    for (size_t i = 0; i < n; i++) {
        f[i] = t->items[first + i].frame;
        if (other && other[i])
            memset(f[i].message_id, 0xee, 16);
    }
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(test_zctx, f, n, 1, &blob, NULL), QN_OK);
    struct qn_segment_row row = {at, at + (int64_t)n - 1, 1, blob.data, blob.len};
    struct qn_segments_result sr = {1, &row};
    struct qn_store_status ok = {QN_OK, "", ""};
    l->answered = true;
    l->cb(l->ud, &ok, &sr);
    qn_buf_free(&blob);
}

static void assert_same_frames(size_t a, size_t b)
{
    ck_assert_uint_eq(pushes[a].nsegs, pushes[b].nsegs);
    for (size_t i = 0; i < pushes[a].nsegs; i++) {
        ck_assert_str_eq(pushes[a].segs[i].partition, pushes[b].segs[i].partition);
        ck_assert_uint_eq(pushes[a].segs[i].count, pushes[b].segs[i].count);
        for (uint32_t j = 0; j < pushes[a].segs[i].count; j++)
            ck_assert_int_eq(pushes[a].segs[i].seq[j], pushes[b].segs[i].seq[j]);
    }
}

/* The lost flush had committed: the resolve finds every frame stored with the
 * items' own message ids and answers QUEUED at those offsets; what arrived
 * meanwhile for the partition goes only after that. */
START_TEST(doubt_committed_is_queued_in_order)
{
    setup();
    struct tjob *a = job_make("q", "p", 0, 3, false, 0);
    submit(a);
    turn();
    ck_assert_uint_eq(npushes, 1);
    struct tjob *b = job_make("q", "p", 3, 2, false, 0);
    submit(b);
    turn();
    answer_error(0, QN_EINDOUBT);
    /* not failed: in doubt, and its job told */
    ck_assert_int_eq(a->done_calls, 0);
    ck_assert_int_ge(a->doubt_calls, 1);
    for (int i = 0; i < 3; i++) {
        ck_assert(a->items[i].in_doubt);
        ck_assert_int_eq(a->items[i].status, QN_ITEM_PENDING);
    }
    ck_assert(!b->items[0].in_doubt);
    turn();
    turn();
    /* the resolve: the same frames, and nothing of b yet */
    ck_assert_uint_eq(npushes, 2);
    ck_assert(pushes[1].resolve);
    assert_same_frames(0, 1);
    uint32_t all[] = {0, 1, 2};
    int64_t at[] = {100, 101, 102};
    answer_dups(1, all, at, 3);
    /* a is stored (at 100..102): b may be sent now, behind it, while a's
     * answer waits for the originals' ids */
    turn();
    ck_assert_uint_eq(nlookups, 1);
    answer_lookup_with(0, 100, a, 0, 3, NULL);
    ck_assert_int_eq(a->done_calls, 1);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a->items[i].status, QN_ITEM_QUEUED);
        ck_assert_int_eq(a->items[i].offset, 100 + i);
        ck_assert_mem_eq(a->items[i].result_id, a->items[i].frame.message_id, 16);
    }
    turn();
    ck_assert_uint_eq(npushes, 3);
    ck_assert(!pushes[2].resolve);
    ck_assert_int_eq(pushes[2].segs[0].seq[0], 3);
    int64_t b0[] = {103};
    answer_queued(2, b0);
    ck_assert_int_eq(b->items[0].offset, 103);
    ck_assert_int_eq(b->items[1].offset, 104);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.in_doubt, 1);
    ck_assert_uint_eq(fs.resolved_committed, 3);
    ck_assert_uint_eq(fs.committed, 5);
    ck_assert_uint_eq(fs.duplicates, 0);
    ck_assert_uint_eq(fs.doubt_now, 0);
    teardown();
}
END_TEST

/* The lost flush had not committed: the resolve stores it, still ahead of what
 * arrived meanwhile. */
START_TEST(doubt_uncommitted_is_stored_by_the_resolve)
{
    setup();
    stored.n = 0;
    struct tjob *a = job_make("q", "p", 0, 4, true, 0);
    submit(a);
    turn();
    struct tjob *b = job_make("q", "p", 4, 3, true, 0);
    submit(b);
    answer_error(0, QN_EINDOUBT);
    turn();
    turn();
    ck_assert_uint_eq(npushes, 2);
    ck_assert(pushes[1].resolve);
    /* a resolve probes the whole sidecar: it never vouches */
    ck_assert_int_eq(pushes[1].segs[0].verified, -1);
    record_stored(1, "p");
    int64_t b0[] = {7};
    answer_queued(1, b0);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(a->items[3].status, QN_ITEM_QUEUED);
    ck_assert_int_eq(a->items[3].offset, 10);
    turn();
    ck_assert_uint_eq(npushes, 3);
    record_stored(2, "p");
    answer_queued(2, NULL);
    ck_assert_uint_eq(stored.n, 7);
    teardown();
}
END_TEST

/* No resolve while the pool is down; the pool coming up sends it; a resolve in
 * doubt is sent again; another partition is never held back meanwhile. */
START_TEST(doubt_waits_for_the_pool_and_repeats)
{
    setup();
    store_up = false;
    struct tjob *a = job_make("q", "p", 0, 2, false, 0);
    submit(a);
    turn();
    answer_error(0, QN_EINDOUBT);
    turn();
    turn();
    ck_assert_uint_eq(npushes, 1);
    struct tjob *c = job_make("q", "other", 50, 1, false, 0);
    submit(c);
    turn();
    ck_assert_uint_eq(npushes, 2); /* another partition goes */
    ck_assert(!pushes[1].resolve);
    answer_queued(1, NULL);
    ck_assert_int_eq(c->done_calls, 1);
    store_up = true;
    qn_fusion_store_up(fusion);
    turn();
    turn();
    ck_assert_uint_eq(npushes, 3);
    ck_assert(pushes[2].resolve);
    assert_same_frames(0, 2);
    answer_error(2, QN_EINDOUBT); /* in doubt again */
    ck_assert_int_eq(a->done_calls, 0);
    qn_fusion_store_up(fusion); /* no backoff wait in the test */
    turn();
    turn();
    ck_assert_uint_eq(npushes, 4);
    ck_assert(pushes[3].resolve);
    answer_error(3, QN_EUNAVAILABLE); /* the resolve was never sent */
    ck_assert_int_eq(a->done_calls, 0);
    qn_fusion_store_up(fusion);
    turn();
    turn();
    ck_assert_uint_eq(npushes, 5);
    int64_t b0[] = {20};
    answer_queued(4, b0);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(a->items[1].status, QN_ITEM_QUEUED);
    ck_assert_int_eq(a->items[1].offset, 21);
    teardown();
}
END_TEST

/* A resolve answering duplicates of another message (not the item's own id):
 * the lost flush had not committed; those are DUPLICATE and the survivors go
 * first, ahead of later arrivals. A frame whose original cannot be read falls
 * back to the storage's rule (a whole segment at consecutive offsets is ours). */
START_TEST(doubt_foreign_duplicates_stay_duplicates)
{
    setup();
    struct tjob *a = job_make("q", "p", 0, 3, false, 0);
    submit(a);
    turn();
    struct tjob *b = job_make("q", "p", 3, 1, false, 0);
    submit(b);
    answer_error(0, QN_EINDOUBT);
    turn();
    turn();
    ck_assert(pushes[1].resolve);
    uint32_t one[] = {1};
    int64_t at[] = {5};
    answer_dups(1, one, at, 1);
    bool other[] = {true};
    answer_lookup_with(0, 5, a, 1, 1, other);
    ck_assert_int_eq(a->items[1].status, QN_ITEM_DUPLICATE);
    ck_assert_int_eq(a->items[1].offset, 5);
    uint8_t ee[16];
    memset(ee, 0xee, 16);
    ck_assert_mem_eq(a->items[1].result_id, ee, 16);
    turn();
    ck_assert_uint_eq(npushes, 3);
    ck_assert(!pushes[2].resolve);
    ck_assert_uint_eq(pushes[2].segs[0].count, 3);
    ck_assert_int_eq(pushes[2].segs[0].seq[0], 0);
    ck_assert_int_eq(pushes[2].segs[0].seq[1], 2);
    ck_assert_int_eq(pushes[2].segs[0].seq[2], 3);
    answer_queued(2, NULL);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(b->done_calls, 1);

    /* a second lost flush whose originals cannot be read: whole and consecutive */
    struct tjob *d = job_make("q", "p2", 10, 2, false, 0);
    submit(d);
    turn();
    ck_assert_uint_eq(npushes, 4);
    answer_error(3, QN_EINDOUBT);
    turn();
    turn();
    ck_assert(pushes[4].resolve);
    uint32_t both[] = {0, 1};
    int64_t at2[] = {30, 31};
    answer_dups(4, both, at2, 2);
    struct qn_store_status down = {QN_EUNAVAILABLE, "", "down"};
    lookups[nlookups - 1].answered = true;
    lookups[nlookups - 1].cb(lookups[nlookups - 1].ud, &down, NULL);
    ck_assert_int_eq(d->done_calls, 1);
    ck_assert_int_eq(d->items[0].status, QN_ITEM_QUEUED);
    ck_assert_int_eq(d->items[1].offset, 31);
    teardown();
}
END_TEST

/* Unresolved after QN_FUSION_RESOLVE_MAX_MS: the items fail with QN_EINDOUBT
 * (outcome unknown), the partition moves on. Freeing fusion with a flush in
 * doubt answers its items the same way. */
START_TEST(doubt_gives_up_only_after_the_limit)
{
    setup();
    struct tjob *a = job_make("q", "p", 0, 2, false, 0);
    submit(a);
    turn();
    struct tjob *b = job_make("q", "p", 2, 1, false, 0);
    submit(b);
    answer_error(0, QN_EINDOUBT);
    turn();
    turn();
    ck_assert(pushes[1].resolve);
    qt_engine_mono_ms += QN_FUSION_RESOLVE_MAX_MS - 1000;
    answer_error(1, QN_EINDOUBT);
    ck_assert_int_eq(a->done_calls, 0); /* not yet */
    qt_engine_mono_ms += 1000;
    qn_fusion_store_up(fusion);
    turn();
    turn();
    ck_assert_uint_eq(npushes, 3);
    answer_error(2, QN_ETIMEOUT);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(a->items[0].status, QN_ITEM_FAILED);
    ck_assert_int_eq(a->items[0].err, QN_EINDOUBT);
    turn();
    ck_assert_uint_eq(npushes, 4); /* b goes now */
    ck_assert(!pushes[3].resolve);
    answer_queued(3, NULL);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.doubt_failed, 2);

    struct tjob *c = job_make("q", "p", 5, 2, false, 0);
    submit(c);
    turn();
    answer_error(4, QN_EINDOUBT);
    qn_fusion_free(fusion);
    fusion = NULL;
    ck_assert_int_eq(c->done_calls, 1);
    ck_assert_int_eq(c->items[1].err, QN_EINDOUBT);
    teardown();
}
END_TEST

/* ---------------------------------------------------------------- pre-packed entries */

#define PRE_FRAMES 8

/* A client's own segment (PushSegments): one job of one item whose `pre` is
 * the segment of n frames with payloads seq0, seq0+1, ... (the arrival order
 * the tests check) and transaction ids "t<seq>" unless txns names them. */
struct tpre {
    struct qn_push_job job; /* first */
    struct qn_push_item item;
    struct qn_prepacked pe;
    struct qn_prepacked_dup dups[PRE_FRAMES];
    struct qn_frame frames[PRE_FRAMES];
    char txn[PRE_FRAMES][24];
    char payload[PRE_FRAMES][16];
    uint8_t hashes[PRE_FRAMES * 16];
    uint8_t ids[PRE_FRAMES * 16];
    struct qn_buf blob;
    int done_calls;
    int doubt_calls;
};

static struct tpre *pres[16];
static size_t npres;

static void pre_done(struct qn_push_job *j)
{
    struct tpre *t = (struct tpre *)j;
    ck_assert_msg(!in_submit, "done() ran inside qn_fusion_submit()");
    ck_assert_int_ne(t->item.status, QN_ITEM_PENDING);
    t->done_calls++;
}

static void pre_doubt(struct qn_push_job *j)
{
    ((struct tpre *)j)->doubt_calls++;
}

static struct tpre *pre_make(const char *queue, const char *partition, int seq0, size_t n,
                             const char *const *txns)
{
    ck_assert_uint_le(n, PRE_FRAMES);
    ck_assert_uint_lt(npres, 16);
    struct tpre *t = calloc(1, sizeof *t);
    ck_assert_ptr_nonnull(t);
    pres[npres++] = t;
    for (size_t i = 0; i < n; i++) {
        struct qn_frame *f = &t->frames[i];
        int seq = seq0 + (int)i;
        memcpy(f->message_id, &seq, sizeof seq);
        f->message_id[14] = 0x9e; /* not an item's id */
        f->message_id[15] = 0x5a;
        if (txns && txns[i])
            snprintf(t->txn[i], sizeof t->txn[i], "%s", txns[i]);
        else
            snprintf(t->txn[i], sizeof t->txn[i], "t%d", seq);
        f->txn = (const uint8_t *)t->txn[i];
        f->txn_len = strlen(t->txn[i]);
        snprintf(t->payload[i], sizeof t->payload[i], "%d", seq);
        f->payload = (const uint8_t *)t->payload[i];
        f->payload_len = strlen(t->payload[i]);
        qn_txn_hash(f->txn, f->txn_len, t->hashes + 16 * i);
        memcpy(t->ids + 16 * i, f->message_id, 16);
        t->pe.payload_bytes += f->payload_len;
    }
    /* packed at another level than fusion's (1): a re-pack would show */
    ck_assert_int_eq(qn_segment_pack(test_zctx, t->frames, n, 5, &t->blob, NULL), QN_OK);
    t->pe.blob = t->blob.data;
    t->pe.blob_len = t->blob.len;
    t->pe.count = (uint32_t)n;
    t->pe.hashes = t->hashes;
    t->pe.ids = t->ids;
    t->pe.dups = t->dups;
    t->item.pre = &t->pe;
    t->item.queue = queue;
    t->item.partition = partition;
    t->job.items = &t->item;
    t->job.nitems = 1;
    t->job.pending = 1;
    t->job.done = pre_done;
    t->job.doubt = pre_doubt;
    return t;
}

static void pre_submit(struct tpre *t)
{
    uint32_t idx = 0;
    in_submit = true;
    ck_assert_int_eq(qn_fusion_submit(fusion, &t->job, &idx, 1), QN_OK);
    in_submit = false;
    ck_assert_int_eq(t->done_calls, 0);
}

static void pres_teardown(void)
{
    for (size_t i = 0; i < npres; i++) {
        ck_assert_msg(pres[i]->done_calls == 1, "pre-packed entry %zu: done() ran %d times", i,
                      pres[i]->done_calls);
        qn_buf_free(&pres[i]->blob);
        free(pres[i]);
    }
    npres = 0;
}

/* Segment i of push k is entry t's segment: its very bytes, not a re-pack. */
static void assert_sent_as_is(size_t k, size_t i, const struct tpre *t)
{
    const struct fake_seg *fs = &pushes[k].segs[i];
    ck_assert_ptr_eq(fs->blob, t->blob.data);
    ck_assert_uint_eq(fs->blob_len, t->blob.len);
    ck_assert_uint_eq(fs->count, t->pe.count);
}

/* Answers push k segment by segment: ndup[i] == 0 is QUEUED at bases[i], else
 * DUPLICATE of frames dups[i][0..ndup[i]) at the originals orig[i][...]. */
static void answer_each(size_t k, const int64_t *bases, const size_t *ndup,
                        const uint32_t (*dups)[PRE_FRAMES], const int64_t (*orig)[PRE_FRAMES])
{
    ck_assert_uint_lt(k, npushes);
    struct fake_push *p = &pushes[k];
    ck_assert(!p->answered);
    struct qn_push_seg_result r[MAX_SEGS];
    struct qn_push_dup d[MAX_SEGS][PRE_FRAMES];
    memset(r, 0, sizeof r);
    for (size_t i = 0; i < p->nsegs; i++) {
        pid_of(p->segs[i].partition, r[i].pid);
        if (ndup == NULL || ndup[i] == 0) {
            r[i].status = QN_PUSH_QUEUED;
            r[i].base = bases[i];
            r[i].created_at_us = 1;
            continue;
        }
        for (size_t j = 0; j < ndup[i]; j++)
            d[i][j] = (struct qn_push_dup){dups[i][j], orig[i][j]};
        r[i].status = QN_PUSH_DUPLICATE;
        r[i].ndups = ndup[i];
        r[i].dups = d[i];
    }
    struct qn_push_result res = {p->nsegs, r};
    struct qn_store_status st = {QN_OK, "", ""};
    p->answered = true;
    p->cb(p->ud, &st, &res);
}

/* Answers lookup k with one stored segment at `at` holding frames f[0..n). */
static void answer_lookup_frames(size_t k, int64_t at, const struct qn_frame *f, size_t n)
{
    ck_assert_uint_lt(k, nlookups);
    struct fake_lookup *l = &lookups[k];
    ck_assert(!l->answered);
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(test_zctx, f, n, 1, &blob, NULL), QN_OK);
    struct qn_segment_row row = {at, at + (int64_t)n - 1, 1, blob.data, blob.len};
    struct qn_segments_result sr = {1, &row};
    struct qn_store_status ok = {QN_OK, "", ""};
    l->answered = true;
    l->cb(l->ud, &ok, &sr);
    qn_buf_free(&blob);
}

/* Items and pre-packed entries of one partition, interleaved, are stored in
 * arrival order: an entry takes its turn in the slot's single flush in flight,
 * is sent whole as its own segment (never merged with the frames around it,
 * never re-packed), and rides one bundle with other partitions' segments. */
START_TEST(prepacked_keeps_arrival_order_with_items)
{
    setup();
    stored.n = 0;
    struct tjob *a = job_make("q", "p", 0, 2, false, 0);
    submit(a);
    turn();
    ck_assert_uint_eq(npushes, 1);
    /* while p's first flush flies: items, an entry, items, an entry, items */
    struct tjob *b = job_make("q", "p", 2, 2, false, 0);
    submit(b);
    struct tpre *P = pre_make("q", "p", 4, 3, NULL);
    pre_submit(P);
    struct tjob *c = job_make("q", "p", 7, 2, false, 0);
    submit(c);
    struct tpre *P2 = pre_make("q", "p", 9, 1, NULL);
    pre_submit(P2);
    struct tjob *d = job_make("q", "p", 10, 1, false, 0);
    submit(d);
    turn();
    ck_assert_uint_eq(npushes, 1); /* nothing overtakes the flush in flight */

    record_stored(0, "p");
    int64_t b0[] = {0};
    answer_queued(0, b0);
    /* another partition's entry becomes ready: it rides p's next bundle */
    struct tpre *P3 = pre_make("q", "p3", 100, 2, NULL);
    pre_submit(P3);
    turn();
    ck_assert_uint_eq(npushes, 2);
    ck_assert_uint_eq(pushes[1].nsegs, 2);
    ck_assert_str_eq(pushes[1].segs[0].partition, "p");
    ck_assert_uint_eq(pushes[1].segs[0].count, 2); /* b only: the entry after it waits */
    ck_assert_str_eq(pushes[1].segs[1].partition, "p3");
    assert_sent_as_is(1, 1, P3);
    record_stored(1, "p");
    int64_t b1[] = {2, 0};
    answer_queued(1, b1);
    ck_assert_int_eq(b->done_calls, 1);
    ck_assert_int_eq(P3->item.status, QN_ITEM_QUEUED);
    ck_assert_int_eq(P3->item.offset, 0);
    ck_assert_mem_eq(P3->item.result_id, P3->ids, 16);

    turn();
    ck_assert_uint_eq(npushes, 3);
    ck_assert_uint_eq(pushes[2].nsegs, 1); /* the entry alone: one segment per flush */
    assert_sent_as_is(2, 0, P);
    record_stored(2, "p");
    int64_t b2[] = {4};
    answer_queued(2, b2);
    ck_assert_int_eq(P->item.status, QN_ITEM_QUEUED);
    ck_assert_int_eq(P->item.offset, 4);
    ck_assert_uint_eq(P->pe.ndups, 0);

    turn();
    ck_assert_uint_eq(npushes, 4);
    ck_assert_uint_eq(pushes[3].segs[0].count, 2); /* c, up to the next entry */
    record_stored(3, "p");
    int64_t b3[] = {7};
    answer_queued(3, b3);
    ck_assert_int_eq(c->items[0].offset, 7);

    turn();
    ck_assert_uint_eq(npushes, 5);
    assert_sent_as_is(4, 0, P2);
    record_stored(4, "p");
    int64_t b4[] = {9};
    answer_queued(4, b4);
    turn();
    ck_assert_uint_eq(npushes, 6);
    record_stored(5, "p");
    int64_t b5[] = {10};
    answer_queued(5, b5);
    ck_assert_int_eq(d->items[0].offset, 10);
    ck_assert_uint_eq(stored.n, 11);
    for (size_t i = 0; i < stored.n; i++)
        ck_assert_int_eq(stored.seq[i], (int)i);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.committed, 13);
    ck_assert_uint_eq(fs.inflight, 0);
    teardown();
}
END_TEST

/* An entry with a duplicate frame, in a bundle with another partition's items
 * and with items behind it in its slot: the entry is not stored (FAILED,
 * QN_EDUPLICATE, the duplicate named with its original's offset and id), the
 * items are. An item with the same transaction id as one of the entry's frames
 * is never in the entry's flush: it is judged against the entry's outcome. An
 * entry whose every frame is stored is DUPLICATE. */
START_TEST(prepacked_duplicate_next_to_items)
{
    setup();
    struct tjob *a = job_make("q", "p", 0, 1, false, 0);
    submit(a);
    turn();
    static const char *const ptx[] = {NULL, "t0", "t4"};
    struct tpre *P = pre_make("q", "p", 1, 3, ptx);
    pre_submit(P);
    struct tjob *c = job_make("q", "p", 4, 2, false, 0); /* "t4", "t5" */
    submit(c);
    struct tjob *e = job_make("q", "p2", 50, 2, false, 0);
    submit(e);
    int64_t b0[] = {0};
    answer_queued(0, b0);
    turn();
    ck_assert_uint_eq(npushes, 2);
    ck_assert_uint_eq(pushes[1].nsegs, 2);
    ck_assert_str_eq(pushes[1].segs[0].partition, "p2"); /* ready first */
    assert_sent_as_is(1, 1, P);                          /* p's flush: the entry only, not c */
    ck_assert_int_eq(pushes[1].segs[1].verified, -1);
    size_t nd[] = {0, 1};
    const uint32_t dx[2][PRE_FRAMES] = {{0}, {1}};
    const int64_t dof[2][PRE_FRAMES] = {{0}, {0}};
    int64_t bases[] = {0, 0};
    answer_each(1, bases, nd, dx, dof);
    /* the other partition's items are answered at once; the entry waits for
     * its original's id, and c goes now */
    ck_assert_int_eq(e->done_calls, 1);
    ck_assert_int_eq(e->items[1].offset, 1);
    ck_assert_int_eq(P->done_calls, 0);
    turn();
    ck_assert_uint_eq(npushes, 3);
    ck_assert_uint_eq(pushes[2].segs[0].count, 2);
    ck_assert_int_eq(pushes[2].segs[0].seq[0], 4);
    ck_assert_uint_eq(nlookups, 1);
    ck_assert_uint_eq(lookups[0].n, 1);
    ck_assert_int_eq(lookups[0].offsets[0], 0);
    answer_lookup_frames(0, 0, &a->items[0].frame, 1);
    ck_assert_int_eq(P->done_calls, 1);
    ck_assert_int_eq(P->item.status, QN_ITEM_FAILED);
    ck_assert_int_eq(P->item.err, QN_EDUPLICATE);
    ck_assert_uint_eq(P->pe.ndups, 1);
    ck_assert_uint_eq(P->dups[0].idx, 1);
    ck_assert_int_eq(P->dups[0].offset, 0);
    ck_assert_mem_eq(P->dups[0].id, a->items[0].frame.message_id, 16);
    int64_t b2[] = {1};
    answer_queued(2, b2);
    ck_assert_int_eq(c->items[0].status, QN_ITEM_QUEUED);
    ck_assert_int_eq(c->items[0].offset, 1);

    /* the same frames again, all stored: DUPLICATE, nothing written */
    struct tpre *R = pre_make("q", "p", 1, 2, NULL);
    pre_submit(R);
    turn();
    ck_assert_uint_eq(npushes, 4);
    size_t nd2[] = {2};
    const uint32_t dx2[1][PRE_FRAMES] = {{0, 1}};
    const int64_t dof2[1][PRE_FRAMES] = {{30, 31}};
    answer_each(3, NULL, nd2, dx2, dof2);
    answer_lookup_frames(1, 30, R->frames, 2);
    ck_assert_int_eq(R->item.status, QN_ITEM_DUPLICATE);
    ck_assert_int_eq(R->item.offset, 30);
    ck_assert_uint_eq(R->pe.ndups, 2);
    ck_assert_mem_eq(R->item.result_id, R->ids, 16);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.duplicates, 3);
    ck_assert_uint_eq(fs.committed, 5);
    teardown();
}
END_TEST

/* A bundle holding entries is lost (QN_EINDOUBT): the entries are in doubt,
 * their partition waits, the resolve sends the same bytes; an entry found
 * stored with its own message ids at consecutive offsets is QUEUED there, one
 * found stored under other ids stays DUPLICATE. */
START_TEST(prepacked_in_doubt_resolved)
{
    setup();
    struct tpre *P = pre_make("q", "p", 0, 3, NULL);
    pre_submit(P);
    struct tjob *a = job_make("q", "p2", 10, 2, false, 0);
    submit(a);
    struct tpre *O = pre_make("q", "p3", 20, 2, NULL);
    pre_submit(O);
    turn();
    ck_assert_uint_eq(npushes, 1);
    ck_assert_uint_eq(pushes[0].nsegs, 3);
    struct tjob *b = job_make("q", "p", 3, 1, false, 0);
    submit(b);
    answer_error(0, QN_EINDOUBT);
    ck_assert_int_ge(P->doubt_calls, 1);
    ck_assert(P->item.in_doubt);
    ck_assert_int_eq(P->item.status, QN_ITEM_PENDING);
    turn();
    turn();
    ck_assert_uint_eq(npushes, 2); /* the resolve; b waits behind P */
    ck_assert(pushes[1].resolve);
    ck_assert_uint_eq(pushes[1].nsegs, 3);
    assert_sent_as_is(1, 0, P);
    assert_sent_as_is(1, 2, O);
    ck_assert_int_eq(pushes[1].segs[0].verified, -1);
    size_t nd[] = {3, 0, 2};
    const uint32_t dx[3][PRE_FRAMES] = {{0, 1, 2}, {0}, {0, 1}};
    const int64_t dof[3][PRE_FRAMES] = {{50, 51, 52}, {0}, {60, 61}};
    int64_t bases[] = {0, 7, 0};
    answer_each(1, bases, nd, dx, dof);
    ck_assert_int_eq(a->items[1].offset, 8);
    ck_assert_uint_eq(nlookups, 2);
    answer_lookup_frames(0, 50, P->frames, 3);
    ck_assert_int_eq(P->done_calls, 1);
    ck_assert_int_eq(P->item.status, QN_ITEM_QUEUED);
    ck_assert_int_eq(P->item.offset, 50);
    ck_assert_uint_eq(P->pe.ndups, 0);
    ck_assert_mem_eq(P->item.result_id, P->ids, 16);
    /* O's frames are stored under other ids: someone else's, not our commit */
    struct qn_frame other[2];
    memcpy(other, O->frames, sizeof other);
    memset(other[0].message_id, 0xee, 16);
    memset(other[1].message_id, 0xee, 16);
    answer_lookup_frames(1, 60, other, 2);
    ck_assert_int_eq(O->item.status, QN_ITEM_DUPLICATE);
    ck_assert_int_eq(O->item.offset, 60);
    ck_assert_uint_eq(O->pe.ndups, 2);
    turn();
    ck_assert_uint_eq(npushes, 3);
    ck_assert(!pushes[2].resolve);
    ck_assert_int_eq(pushes[2].segs[0].seq[0], 3);
    int64_t b2[] = {53};
    answer_queued(2, b2);
    struct qn_fusion_stats fs;
    qn_fusion_stats(fusion, &fs);
    ck_assert_uint_eq(fs.resolved_committed, 3);
    ck_assert_uint_eq(fs.committed, 3 + 2 + 1);
    ck_assert_uint_eq(fs.duplicates, 2);
    ck_assert_uint_eq(fs.doubt_now, 0);
    teardown();
}
END_TEST

/* Entries keep their tenant: two tenants' entries for one (queue, partition)
 * name go in two bundles, each with its own tenant; one tenant's entry and
 * items share its bundle. */
START_TEST(prepacked_tenants)
{
    static const uint8_t TA[16] = {1};
    static const uint8_t TB[16] = {2};
    setup();
    struct tpre *P = pre_make("q", "p0", 0, 2, NULL);
    memcpy(P->job.tenant, TA, 16);
    struct tpre *Q = pre_make("q", "p0", 100, 1, NULL);
    memcpy(Q->job.tenant, TB, 16);
    struct tjob *c = job_make("q", "p1", 200, 1, false, 0);
    memcpy(c->job.tenant, TA, 16);
    pre_submit(P);
    pre_submit(Q);
    submit(c);
    turn();
    ck_assert_uint_eq(npushes, 2);
    ck_assert_mem_eq(pushes[0].tenant, TA, 16);
    ck_assert_uint_eq(pushes[0].nsegs, 2);
    assert_sent_as_is(0, 0, P);
    ck_assert_str_eq(pushes[0].segs[1].partition, "p1");
    ck_assert_mem_eq(pushes[1].tenant, TB, 16);
    ck_assert_uint_eq(pushes[1].nsegs, 1);
    assert_sent_as_is(1, 0, Q);
    int64_t bq[] = {5};
    answer_queued(1, bq);
    ck_assert_int_eq(Q->item.offset, 5);
    ck_assert_int_eq(P->done_calls, 0);
    answer_queued(0, NULL);
    ck_assert_int_eq(P->item.status, QN_ITEM_QUEUED);
    ck_assert_int_eq(c->done_calls, 1);
    teardown();
}
END_TEST

/* A fake dedup cache: vouches 41 for any hashes, records every commit. */
static struct {
    int verified_calls;
    size_t ncommits;
    struct {
        char partition[32];
        int64_t base;
        size_t n;
        uint8_t first_hash[16];
    } commits[8];
    int woken; /* the commit hook (waiters) */
} fake_dd;

static int64_t fake_verified(void *ud, const uint8_t tenant[16], const char *queue,
                             const char *partition, const uint8_t *hashes, size_t n)
{
    (void)ud, (void)tenant, (void)queue, (void)partition, (void)hashes, (void)n;
    fake_dd.verified_calls++;
    return 41;
}

static bool fake_vouched_for(void *ud, const uint8_t tenant[16], const char *queue,
                             const char *partition, int32_t *window, uint8_t pid[16])
{
    (void)ud, (void)tenant, (void)queue;
    *window = 3600;
    pid_of(partition, pid);
    return true;
}

static void fake_committed(void *ud, const uint8_t tenant[16], const char *queue,
                           const char *partition, const uint8_t pid[16], int32_t window, int64_t at,
                           int64_t created_at_us, const uint8_t *hashes, size_t n)
{
    (void)ud, (void)tenant, (void)queue, (void)pid, (void)window, (void)created_at_us;
    ck_assert_uint_lt(fake_dd.ncommits, 8);
    snprintf(fake_dd.commits[fake_dd.ncommits].partition, 32, "%s", partition);
    fake_dd.commits[fake_dd.ncommits].base = at;
    fake_dd.commits[fake_dd.ncommits].n = n;
    memcpy(fake_dd.commits[fake_dd.ncommits].first_hash, hashes, 16);
    fake_dd.ncommits++;
}

static void fake_woken(void *ud, const uint8_t tenant[16], const char *queue, const char *partition)
{
    (void)ud, (void)tenant, (void)queue, (void)partition;
    fake_dd.woken++;
}

/* Entries get the dedup cache's watermark for their hashes, and the cache's
 * committed hook and the waiters' hook after their commit, in commit order. */
START_TEST(prepacked_uses_the_dedup_cache_and_wakes_waiters)
{
    setup();
    memset(&fake_dd, 0, sizeof fake_dd);
    struct qn_fusion_dedup_hooks h = {fake_verified, fake_vouched_for, fake_committed, NULL};
    qn_fusion_set_dedup(fusion, &h);
    qn_fusion_on_commit(fusion, fake_woken, NULL);
    struct tjob *a = job_make("q", "p", 0, 1, false, 0);
    submit(a);
    turn();
    struct tpre *P = pre_make("q", "p", 1, 3, NULL);
    pre_submit(P);
    struct tpre *P2 = pre_make("q", "p", 4, 2, NULL);
    pre_submit(P2);
    int64_t b0[] = {0};
    answer_queued(0, b0);
    turn();
    ck_assert_uint_eq(npushes, 2);
    ck_assert_uint_eq(pushes[1].nsegs, 1);
    assert_sent_as_is(1, 0, P);
    ck_assert_int_eq(pushes[1].segs[0].verified, 41);
    int64_t b1[] = {1};
    answer_queued(1, b1);
    turn();
    ck_assert_uint_eq(npushes, 3);
    assert_sent_as_is(2, 0, P2);
    ck_assert_int_eq(pushes[2].segs[0].verified, 41);
    ck_assert_int_eq(fake_dd.verified_calls, 3);
    int64_t b2[] = {4};
    answer_queued(2, b2);
    ck_assert_uint_eq(fake_dd.ncommits, 3);
    ck_assert_int_eq(fake_dd.commits[1].base, 1);
    ck_assert_uint_eq(fake_dd.commits[1].n, 3);
    ck_assert_mem_eq(fake_dd.commits[1].first_hash, P->hashes, 16);
    ck_assert_int_eq(fake_dd.commits[2].base, 4);
    ck_assert_uint_eq(fake_dd.commits[2].n, 2);
    ck_assert_mem_eq(fake_dd.commits[2].first_hash, P2->hashes, 16);
    ck_assert_int_eq(fake_dd.woken, 3);
    ck_assert_int_eq(P2->item.offset, 4);
    teardown();
}
END_TEST

Suite *qn_test_fusion_suite(void)
{
    Suite *s = suite_create("fusion");
    TCase *tc = tcase_create("fusion");
    tcase_add_test(tc, one_flush_per_partition_in_flight);
    tcase_add_test(tc, bundles_bounded_by_bundle_max);
    tcase_add_test(tc, one_lane_until_the_flight_ages);
    tcase_add_test(tc, a_full_bundle_takes_no_lane_turn);
    tcase_add_test(tc, lanes_stop_at_four_however_old_the_flights);
    tcase_add_test(tc, survivors_stay_ahead_of_later_arrivals);
    tcase_add_test(tc, survivors_stay_ahead_when_flushes_are_split);
    tcase_add_test(tc, segments_stay_within_an_eighth_of_the_send_limit);
    tcase_add_test(tc, layer2_followers_inherit_the_leader);
    tcase_add_test(tc, failure_fails_every_item_once);
    tcase_add_test(tc, minted_ids_are_vouched_for);
    tcase_add_test(tc, tenants_have_their_own_slots_and_bundles);
    tcase_add_test(tc, free_fails_what_waits);
    tcase_add_test(tc, large_segments_are_packed_off_the_loop);
    tcase_add_test(tc, free_while_packing_fails_the_items);
    tcase_add_test(tc, a_packing_bundle_holds_no_place_in_flight);
    tcase_add_test(tc, a_full_pool_packs_on_the_loop);
    tcase_add_test(tc, doubt_committed_is_queued_in_order);
    tcase_add_test(tc, doubt_uncommitted_is_stored_by_the_resolve);
    tcase_add_test(tc, doubt_waits_for_the_pool_and_repeats);
    tcase_add_test(tc, doubt_foreign_duplicates_stay_duplicates);
    tcase_add_test(tc, doubt_gives_up_only_after_the_limit);
    tcase_add_test(tc, prepacked_keeps_arrival_order_with_items);
    tcase_add_test(tc, prepacked_duplicate_next_to_items);
    tcase_add_test(tc, prepacked_in_doubt_resolved);
    tcase_add_test(tc, prepacked_tenants);
    tcase_add_test(tc, prepacked_uses_the_dedup_cache_and_wakes_waiters);
    suite_add_tcase(s, tc);
    return s;
}
