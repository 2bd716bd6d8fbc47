/*
 * bench_dedup.c - what the broker's dedup cache buys on the push path: push
 * throughput and SQL time per push with the cache on and off, with a full
 * window in every partition pushed to, and the cache's memory per cached hash.
 *
 * Usage: bench_dedup [--partitions N] [--hashes H] [--seconds S] [--window W]
 *                    [--segment K] [--keep] [URL]
 * URL (or QUEEN_DATABASE_URL) names a cluster; the bench works in a fresh
 * database `queen_bench_dedup` on it. Start one with fsync on:
 *   scripts/pg.sh start /tmp/qn-bench-pg
 *
 * What runs: the broker's own push path in this process, on one event loop, no
 * gRPC: push fusion (broker/src/fusion.c) feeding the store (storage/, push_v1),
 * with the dedup cache (broker/src/engine/dedup.c) wired exactly as modules.c wires it, or
 * not at all (QUEEN_DEDUP_CACHE=0). Every partition keeps one job of K messages
 * (default 100) in flight, each with its own client transaction id and a
 * 256-byte JSON payload (bench/e2e's generator), so every
 * segment is K messages, none is a duplicate, and the cache has to vouch for all
 * of them (a minted id would be vouched for without the cache).
 *
 * Before the runs each partition is filled with H hashes (default 1,000,000)
 * inside a W-second window (default 3600): sidecar rows of 100 realistic hashes
 * (xxh3_128 of transaction ids) and their segments, inserted in SQL, created
 * over the last 3000 s. Then:
 *   off   no cache: push_v1 probes the whole window on every push
 *   on    the cache: it hydrates each partition (full window) on first use; the
 *         measurement starts once every partition vouches
 * Figures: msg/s; push latency (job submitted -> answered); per push_v1 call the
 * round trip seen by the store and the server-side execution time of push_v1
 * (pg_stat_user_functions, track_functions = pl); the share of segments sent
 * with a watermark; the cache's accounted bytes, and the RSS and heap growth of
 * this process, per cached hash.
 */
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "app.h"
#include "config.h"
#include "engine/dedup.h"
#include "e2e_payload.h"
#include "engine/fusion.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/migrate.h"
#include "queen/segment.h"
#include "queen/store.h"

#define BENCH_DB "queen_bench_dedup"
#define QUEUE "bench.dedup"
#define SEG_MAX 1000
#define PAYLOAD 256
#define PREFILL_ROWS 1000 /* sidecar rows per INSERT */
#define LAT_MAX 2000000   /* latency samples kept per phase */

/* ---------------------------------------------------------------- options */

struct opts {
    unsigned partitions;
    size_t hashes;
    double seconds;
    int window;
    unsigned segment;
    bool keep;
    const char *url;
};

/* ---------------------------------------------------------------- samples */

struct lat {
    double *v; /* milliseconds */
    size_t n;
};

static void lat_add(struct lat *l, double ms)
{
    if (l->n < LAT_MAX)
        l->v[l->n++] = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double lat_q(struct lat *l, double q)
{
    if (l->n == 0)
        return 0;
    qsort(l->v, l->n, sizeof *l->v, cmp_double);
    size_t i = (size_t)(q * (double)(l->n - 1) + 0.5);
    return l->v[i];
}

static double lat_mean(const struct lat *l)
{
    double s = 0;
    for (size_t i = 0; i < l->n; i++)
        s += l->v[i];
    return l->n ? s / (double)l->n : 0;
}

/* ---------------------------------------------------------------- the run */

struct bench;

struct job {
    struct qn_push_job pj;
    struct qn_push_item items[SEG_MAX];
    char txn[SEG_MAX][48];
    uint8_t *pay; /* segment * PAYLOAD bytes, refilled per job */
    uint32_t idx[SEG_MAX];
    struct bench *b;
    unsigned part;
    uint64_t seq;
    int64_t t0_us;
    bool busy;
};

enum phase { PH_IDLE, PH_WARM, PH_MEASURE, PH_DRAIN };

struct bench {
    struct opts o;
    struct event_base *base;
    struct qn_config cfg;
    struct qn_app app;
    PGconn *db;
    char conninfo[1024];
    char (*pname)[16];
    struct job *jobs;
    struct e2e_payload_gen gen; /* JSON order events, every one different */
    const char *tag;            /* "off" / "on": part of every transaction id */
    enum phase phase;
    unsigned busy;
    int64_t measure_from_us, measure_to_us;
    uint64_t msgs, failed, dups;
    struct lat push_lat; /* per job */
    struct lat sql_lat;  /* per qn_store_push call */
    uint64_t calls, segs, vouched, declined;
    struct event *tick;
    int64_t warm_from_us, warm_deadline_us;
    int64_t ready_us; /* when every partition vouched (0: not yet) */
};

static struct bench *the_bench; /* for the qn_store_push wrapper */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void job_submit(struct bench *b, struct job *j);

static void job_done(struct qn_push_job *pj)
{
    struct job *j = (struct job *)pj;
    struct bench *b = j->b;
    int64_t t = now_us();
    uint64_t queued = 0;
    for (size_t i = 0; i < pj->nitems; i++) {
        if (pj->items[i].status == QN_ITEM_QUEUED)
            queued++;
        else if (pj->items[i].status == QN_ITEM_DUPLICATE)
            b->dups++;
        else
            b->failed++;
    }
    /* Throughput counts stored messages only: a failed or duplicate item is not one. */
    if (b->phase == PH_MEASURE && t >= b->measure_from_us && t <= b->measure_to_us) {
        b->msgs += queued;
        lat_add(&b->push_lat, (double)(t - j->t0_us) / 1000.0);
    }
    j->busy = false;
    b->busy--;
    if (b->phase == PH_WARM || b->phase == PH_MEASURE)
        job_submit(b, j);
    else if (b->busy == 0)
        event_base_loopbreak(b->base);
}

static void job_submit(struct bench *b, struct job *j)
{
    size_t k = b->o.segment;
    memset(j->items, 0, k * sizeof j->items[0]);
    uint64_t now = qn_now_ms();
    for (size_t i = 0; i < k; i++) {
        struct qn_push_item *it = &j->items[i];
        int n = snprintf(j->txn[i], sizeof j->txn[i], "%s-%u-%" PRIu64, b->tag, j->part, j->seq++);
        it->queue = QUEUE;
        it->partition = b->pname[j->part];
        qn_uuid7_next(&b->app.ids, now, it->frame.message_id);
        it->frame.txn = (const uint8_t *)j->txn[i];
        it->frame.txn_len = (size_t)n;
        e2e_payload_fill(&b->gen, j->pay + i * PAYLOAD, now * 1000);
        it->frame.payload = j->pay + i * PAYLOAD;
        it->frame.payload_len = PAYLOAD;
        qn_txn_hash(it->frame.txn, it->frame.txn_len, it->hash);
        j->idx[i] = (uint32_t)i;
    }
    j->pj.items = j->items;
    j->pj.nitems = k;
    j->pj.pending = k;
    j->pj.done = job_done;
    j->t0_us = now_us();
    j->busy = true;
    b->busy++;
    int rc = qn_fusion_submit(b->app.fusion, &j->pj, j->idx, k);
    if (rc != QN_OK) {
        fprintf(stderr, "bench_dedup: submit: %s\n", qn_strerror(rc));
        exit(1);
    }
}

/* The store's push, timed: linked with --wrap=qn_store_push, fusion's calls
 * come here. Counts the segments sent with a watermark (the cache vouched). */
int __real_qn_store_push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                         const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                         qn_store_req **req);
int __wrap_qn_store_push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                         const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                         qn_store_req **req);

struct timed {
    qn_push_cb cb;
    void *ud;
    int64_t t0;
    bool count;
};

static void timed_done(void *ud, const struct qn_store_status *st, const struct qn_push_result *r)
{
    struct timed *t = ud;
    struct bench *b = the_bench;
    int64_t now = now_us();
    if (t->count && b->phase == PH_MEASURE && now <= b->measure_to_us)
        lat_add(&b->sql_lat, (double)(now - t->t0) / 1000.0);
    qn_push_cb cb = t->cb;
    void *cud = t->ud;
    free(t);
    cb(cud, st, r);
}

int __wrap_qn_store_push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                         const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                         qn_store_req **req)
{
    struct bench *b = the_bench;
    struct timed *t = malloc(sizeof *t);
    if (t == NULL)
        return QN_ENOMEM;
    t->cb = cb;
    t->ud = ud;
    t->t0 = now_us();
    t->count = b->phase == PH_MEASURE && t->t0 >= b->measure_from_us;
    if (t->count) {
        b->calls++;
        b->segs += n;
        for (size_t i = 0; i < n; i++) {
            if (segs[i].verified >= 0)
                b->vouched++;
            else
                b->declined++;
        }
    }
    int rc = __real_qn_store_push(st, segs, n, strict, opts, timed_done, t, req);
    if (rc != QN_OK)
        free(t);
    return rc;
}

/* ---------------------------------------------------------------- database */

static void die_pg(PGconn *c, const char *what)
{
    fprintf(stderr, "bench_dedup: %s: %s\n", what, PQerrorMessage(c));
    exit(1);
}

static void exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        fprintf(stderr, "bench_dedup: %s\n  %s", sql, PQresultErrorMessage(r));
        exit(1);
    }
    PQclear(r);
}

/* One text value of a one-row query; the caller frees it. */
static char *query1(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) < 1) {
        fprintf(stderr, "bench_dedup: %s\n  %s", sql, PQresultErrorMessage(r));
        exit(1);
    }
    char *v = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static void make_database(struct bench *b)
{
    PGconn *c = PQconnectdb(b->o.url);
    if (PQstatus(c) != CONNECTION_OK)
        die_pg(c, "connect");
    exec_ok(c, "SET client_min_messages = warning");
    exec_ok(c, "DROP DATABASE IF EXISTS " BENCH_DB " WITH (FORCE)");
    exec_ok(c, "CREATE DATABASE " BENCH_DB);
    snprintf(b->conninfo, sizeof b->conninfo,
             "host=%s port=%s user=%s dbname=" BENCH_DB " options='-c track_functions=pl'",
             PQhost(c), PQport(c), PQuser(c));
    PQfinish(c);
    char err[512];
    struct qn_migrate_report rep;
    if (qn_migrate(b->conninfo, 30000, &rep, err, sizeof err) != QN_OK) {
        fprintf(stderr, "bench_dedup: migrate: %s\n", err);
        exit(1);
    }
    b->db = PQconnectdb(b->conninfo);
    if (PQstatus(b->db) != CONNECTION_OK)
        die_pg(b->db, "connect");
    exec_ok(b->db, "SET client_min_messages = warning");
}

/* A realistic segment blob (100 frames of the bench's payload) stored with
 * every pre-filled row. */
static void sample_blob(struct bench *b, struct qn_buf *blob, uint8_t hashes[100 * 16])
{
    struct qn_frame fr[100];
    char txn[100][32];
    static uint8_t pay[100][PAYLOAD];
    memset(fr, 0, sizeof fr);
    for (int i = 0; i < 100; i++) {
        int n = snprintf(txn[i], sizeof txn[i], "prefill-%d", i);
        qn_uuid7_next(&b->app.ids, qn_now_ms(), fr[i].message_id);
        e2e_payload_fill(&b->gen, pay[i], qn_now_ms() * 1000);
        fr[i].txn = (const uint8_t *)txn[i];
        fr[i].txn_len = (size_t)n;
        fr[i].payload = pay[i];
        fr[i].payload_len = PAYLOAD;
    }
    if (qn_segment_pack(b->app.zctx, fr, 100, 3, blob, hashes) != QN_OK) {
        fprintf(stderr, "bench_dedup: pack failed\n");
        exit(1);
    }
}

/* Fills every partition with o.hashes hashes in the window: one real push_v1
 * creates the partition, then sidecar rows of 100 hashes and their segments
 * created over the last 3000 s (ascending), then the allocator. The sample
 * segment's own hashes (offsets 0..99) are its frames' (segment_pack). */
static void prefill(struct bench *b)
{
    char sql[2048];
    snprintf(sql, sizeof sql, "UPDATE queen.queues SET dedup_window_seconds = %d WHERE name = '%s'",
             b->o.window, QUEUE);
    struct qn_buf blob = {NULL, 0};
    uint8_t blob_hashes[100 * 16];
    sample_blob(b, &blob, blob_hashes);
    size_t rows = (b->o.hashes + 99) / 100;
    uint8_t *hashes = malloc(PREFILL_ROWS * 100 * 16);
    if (hashes == NULL)
        exit(1);
    int64_t t0 = now_us();
    for (unsigned p = 0; p < b->o.partitions; p++) {
        /* the partition, with the sample segment at offsets 0..99 */
        const char *pv[4] = {QUEUE, b->pname[p], (const char *)blob_hashes,
                             (const char *)blob.data};
        int pl[4] = {0, 0, 100 * 16, (int)blob.len};
        int pf[4] = {0, 0, 1, 1};
        PGresult *r = PQexecParams(b->db,
                                   "SELECT r_pid FROM qn.push_v1(ARRAY[$1::text], ARRAY[$2::text], "
                                   "ARRAY[100], ARRAY[$3::bytea], NULL, ARRAY[$4::bytea])",
                                   4, NULL, pv, pl, pf, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
            die_pg(b->db, "first push");
        char pid[64];
        snprintf(pid, sizeof pid, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        if (p == 0)
            exec_ok(b->db, sql); /* the queue exists now: its window */
        /* offset 0 predates the pre-filled rows (created_at stays monotone) */
        char upd[512];
        snprintf(upd, sizeof upd,
                 "UPDATE queen.log_txns SET created_at = now() - interval '3001 s' "
                 "WHERE partition_id = '%s';"
                 "UPDATE queen.log_segments SET created_at = now() - interval '3001 s' "
                 "WHERE partition_id = '%s'",
                 pid, pid);
        exec_ok(b->db, upd);
        for (size_t r0 = 0; r0 < rows; r0 += PREFILL_ROWS) {
            size_t nr = rows - r0 < PREFILL_ROWS ? rows - r0 : PREFILL_ROWS;
            for (size_t i = 0; i < nr * 100; i++) {
                char t[48];
                int n = snprintf(t, sizeof t, "pf-%u-%zu", p, r0 * 100 + i);
                qn_txn_hash(t, (size_t)n, hashes + i * 16);
            }
            char s_base[32], s_n[32], s_first[32], s_step[32];
            snprintf(s_base, sizeof s_base, "%zu", 100 + r0 * 100);
            snprintf(s_n, sizeof s_n, "%zu", nr);
            /* row k of the partition is created 3000 - 2990 k / rows seconds ago */
            snprintf(s_first, sizeof s_first, "%.6f", 3000.0 - 2990.0 * (double)r0 / (double)rows);
            snprintf(s_step, sizeof s_step, "%.9f", 2990.0 / (double)rows);
            const char *v[7] = {pid,     s_base, s_n, (const char *)hashes, (const char *)blob.data,
                                s_first, s_step};
            int l[7] = {0, 0, 0, (int)(nr * 1600), (int)blob.len, 0, 0};
            int f[7] = {0, 0, 0, 1, 1, 0, 0};
            r = PQexecParams(
                b->db,
                "WITH g AS (SELECT i, $2::int8 + i * 100 AS base, now() - make_interval(secs => "
                "$6::float8 - i * $7::float8) AS at FROM generate_series(0, $3::int4 - 1) i), "
                "t AS (INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, "
                "created_at, "
                "hashes) SELECT $1::uuid, base, base + 99, at, substring($4::bytea FROM i * 1600 + "
                "1 "
                "FOR 1600) FROM g) "
                "INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, "
                "created_at, "
                "blob) SELECT $1::uuid, base, base + 99, at, $5::bytea FROM g",
                7, NULL, v, l, f, 0);
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                die_pg(b->db, "prefill insert");
            PQclear(r);
        }
        snprintf(upd, sizeof upd,
                 "UPDATE queen.log_partitions SET last_offset = %zu WHERE id = '%s'",
                 rows * 100 + 99, pid);
        exec_ok(b->db, upd);
        printf("  partition %s: %zu hashes in the window (%.1f s)\n", b->pname[p], rows * 100 + 100,
               (double)(now_us() - t0) / 1e6);
        fflush(stdout);
    }
    free(hashes);
    qn_buf_free(&blob);
    exec_ok(b->db, "ANALYZE queen.log_txns");
    exec_ok(b->db, "ANALYZE queen.log_segments");
    exec_ok(b->db, "ANALYZE queen.log_partitions");
    exec_ok(b->db, "CHECKPOINT");
}

struct fnstat {
    double calls, total_ms;
};

static struct fnstat push_fn_stats(struct bench *b)
{
    /* backends flush their function counters about a second after going idle */
    usleep(1500000);
    exec_ok(b->db, "SELECT pg_stat_clear_snapshot()");
    char *c = query1(b->db,
                     "SELECT coalesce(sum(calls), 0)::text || ' ' || coalesce(sum(total_time), 0)"
                     "::text FROM pg_stat_user_functions WHERE schemaname = 'queen' AND funcname = "
                     "'push_v1'");
    struct fnstat s = {0, 0};
    if (sscanf(c, "%lf %lf", &s.calls, &s.total_ms) != 2)
        s.calls = s.total_ms = 0;
    free(c);
    return s;
}

/* ---------------------------------------------------------------- memory */

static double rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    fclose(f);
    return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

static double heap_bytes(void)
{
    struct mallinfo2 m = mallinfo2();
    return (double)m.uordblks + (double)m.hblkhd;
}

/* ---------------------------------------------------------------- phases */

static void tick_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct bench *b = ud;
    int64_t t = now_us();
    if (b->phase == PH_WARM) {
        bool ready = true;
        if (b->app.dedup != NULL) {
            struct qn_dedup_stats s;
            qn_dedup_stats(b->app.dedup, &s);
            ready = s.vouching == b->o.partitions;
        }
        if (!ready && t >= b->warm_deadline_us) {
            fprintf(stderr, "bench_dedup: the cache did not vouch for every partition in time\n");
            exit(1);
        }
        if (ready && b->ready_us == 0)
            b->ready_us = t;
        if (ready && t >= b->warm_from_us + 1000000) {
            b->phase = PH_MEASURE;
            b->measure_from_us = t;
            b->measure_to_us = t + (int64_t)(b->o.seconds * 1e6);
        }
    } else if (b->phase == PH_MEASURE && t > b->measure_to_us) {
        b->phase = PH_DRAIN;
        if (b->busy == 0)
            event_base_loopbreak(b->base);
    }
}

struct result {
    double ready_s; /* from the first push to every partition vouching (cache on) */
    double msgs_s, push_p50, push_p99, sql_mean, sql_p50, sql_p99, fn_ms, segs_per_call,
        vouched_share;
    uint64_t failed, dups;
};

static struct result run_phase(struct bench *b, const char *tag)
{
    b->tag = tag;
    b->msgs = b->failed = b->dups = 0;
    b->calls = b->segs = b->vouched = b->declined = 0;
    b->push_lat.n = b->sql_lat.n = 0;
    struct fnstat f0 = push_fn_stats(b);
    b->phase = PH_WARM;
    /* warm-up: one second, or (cache on) until every partition vouches, at most
     * two minutes (a hydration reads the whole window) */
    b->warm_from_us = now_us();
    b->ready_us = 0;
    b->warm_deadline_us = b->warm_from_us + 120000000;
    for (unsigned p = 0; p < b->o.partitions; p++)
        job_submit(b, &b->jobs[p]);
    struct timeval tv = {0, 100000};
    b->tick = event_new(b->base, -1, EV_PERSIST, tick_cb, b);
    event_add(b->tick, &tv);
    event_base_dispatch(b->base);
    event_free(b->tick);
    b->phase = PH_IDLE;
    struct fnstat f1 = push_fn_stats(b);

    struct result r;
    double secs = (double)(b->measure_to_us - b->measure_from_us) / 1e6;
    r.ready_s = (double)(b->ready_us - b->warm_from_us) / 1e6;
    r.msgs_s = (double)b->msgs / secs;
    r.push_p50 = lat_q(&b->push_lat, 0.5);
    r.push_p99 = lat_q(&b->push_lat, 0.99);
    r.sql_mean = lat_mean(&b->sql_lat);
    r.sql_p50 = lat_q(&b->sql_lat, 0.5);
    r.sql_p99 = lat_q(&b->sql_lat, 0.99);
    double calls = f1.calls - f0.calls;
    /* server time covers warm-up and drain too: a per-call mean is still right */
    r.fn_ms = calls > 0 ? (f1.total_ms - f0.total_ms) / calls : 0;
    r.segs_per_call = b->calls ? (double)b->segs / (double)b->calls : 0;
    r.vouched_share = b->segs ? (double)b->vouched / (double)b->segs : 0;
    r.failed = b->failed;
    r.dups = b->dups;
    return r;
}

static void print_result(const char *name, const struct result *r)
{
    printf("  %-4s %10.0f msg/s  push p50 %8.2f ms p99 %8.2f ms  push_v1 call: round trip "
           "mean %8.2f p50 %8.2f p99 %8.2f ms, server %8.2f ms  segs/call %.1f  vouched %5.1f%%",
           name, r->msgs_s, r->push_p50, r->push_p99, r->sql_mean, r->sql_p50, r->sql_p99, r->fn_ms,
           r->segs_per_call, 100.0 * r->vouched_share);
    printf("  failed %" PRIu64 " duplicate %" PRIu64, r->failed, r->dups);
    printf("\n");
    fflush(stdout);
}

/* ---------------------------------------------------------------- main */

static const char *no_env(const char *name, void *ud)
{
    (void)name;
    (void)ud;
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_dedup [--partitions N] [--hashes H] [--seconds S] "
                    "[--window W] [--segment K] [--keep] [URL]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static struct bench bench;
    struct bench *b = &bench;
    the_bench = b;
    b->o = (struct opts){4, 1000000, 10.0, 3600, 100, false, NULL};
    static const struct option lo[] = {{"partitions", required_argument, NULL, 'p'},
                                       {"hashes", required_argument, NULL, 'h'},
                                       {"seconds", required_argument, NULL, 's'},
                                       {"window", required_argument, NULL, 'w'},
                                       {"segment", required_argument, NULL, 'k'},
                                       {"keep", no_argument, NULL, 'K'},
                                       {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        switch (ch) {
        case 'p':
            b->o.partitions = (unsigned)strtoul(optarg, &end, 10);
            break;
        case 'h':
            b->o.hashes = (size_t)strtoull(optarg, &end, 10);
            break;
        case 's':
            b->o.seconds = strtod(optarg, &end);
            break;
        case 'w':
            b->o.window = (int)strtol(optarg, &end, 10);
            break;
        case 'k':
            b->o.segment = (unsigned)strtoul(optarg, &end, 10);
            break;
        case 'K':
            b->o.keep = true;
            continue;
        default:
            usage();
        }
        if (end == NULL || *end != '\0')
            usage();
    }
    if (optind < argc)
        b->o.url = argv[optind];
    else
        b->o.url = getenv("QUEEN_DATABASE_URL");
    if (b->o.url == NULL || b->o.partitions < 1 || b->o.partitions > 256 || b->o.segment < 1 ||
        b->o.segment > SEG_MAX || b->o.seconds <= 0 || b->o.window < 1)
        usage();

    e2e_payload_init(&b->gen, E2E_PAYLOAD_JSON, PAYLOAD, 42);
    b->pname = calloc(b->o.partitions, sizeof *b->pname);
    b->jobs = calloc(b->o.partitions, sizeof *b->jobs);
    b->push_lat.v = malloc(LAT_MAX * sizeof(double));
    b->sql_lat.v = malloc(LAT_MAX * sizeof(double));
    if (b->pname == NULL || b->jobs == NULL || b->push_lat.v == NULL || b->sql_lat.v == NULL)
        return 1;
    for (unsigned p = 0; p < b->o.partitions; p++) {
        snprintf(b->pname[p], sizeof b->pname[p], "p%u", p);
        b->jobs[p].b = b;
        b->jobs[p].part = p;
        b->jobs[p].pay = malloc((size_t)b->o.segment * PAYLOAD);
        if (b->jobs[p].pay == NULL)
            return 1;
    }

    char err[256];
    if (qn_config_load_from(&b->cfg, no_env, NULL, err, sizeof err) != QN_OK) {
        fprintf(stderr, "bench_dedup: config: %s\n", err);
        return 1;
    }
    if (qn_uuid7_init(&b->app.ids) != QN_OK || qn_zctx_new(&b->app.zctx) != QN_OK)
        return 1;

    printf("bench_dedup: %u partitions x %zu hashes in a %d s window, %u-message segments, "
           "%.0f s per run\n",
           b->o.partitions, b->o.hashes, b->o.window, b->o.segment, b->o.seconds);
    make_database(b);
    prefill(b);

    b->base = event_base_new();
    b->app.base = b->base;
    b->app.cfg = &b->cfg;
    struct qn_store_config sc;
    qn_store_config_defaults(&sc);
    sc.conninfo = b->conninfo;
    sc.pool_size = (int)b->cfg.db_pool_size;
    sc.stmt_timeout_ms = 600000;
    if (qn_store_new(b->base, &sc, &b->app.store) != QN_OK ||
        qn_fusion_new(b->base, &b->cfg, b->app.store, b->app.zctx, &b->app.fusion) != QN_OK)
        return 1;

    /* off: no cache at all, as with QUEEN_DEDUP_CACHE=0 */
    struct result off = run_phase(b, "off");
    print_result("off", &off);

    /* on: the cache wired as modules.c wires it */
    malloc_trim(0);
    double rss0 = rss_bytes(), heap0 = heap_bytes();
    struct qn_dedup_config dc;
    qn_dedup_config_defaults(&dc, (size_t)b->cfg.dedup_cache_mb << 20);
    if (qn_dedup_new(b->base, b->app.store, &dc, &b->app.dedup) != QN_OK)
        return 1;
    struct qn_fusion_dedup_hooks hooks = {qn_dedup_verified, qn_dedup_vouched_for,
                                          qn_dedup_committed, b->app.dedup};
    qn_fusion_set_dedup(b->app.fusion, &hooks);
    struct result on = run_phase(b, "on");
    print_result("on", &on);
    printf("  hydration: every partition vouched %.2f s after the first push\n", on.ready_s);
    malloc_trim(0);
    double rss1 = rss_bytes(), heap1 = heap_bytes();
    struct qn_dedup_stats ds;
    qn_dedup_stats(b->app.dedup, &ds);

    double mh = (double)ds.hashes / 1e6;
    printf("  speedup on/off: %.1fx msg/s, %.1fx push_v1 server time\n",
           off.msgs_s > 0 ? on.msgs_s / off.msgs_s : 0, on.fn_ms > 0 ? off.fn_ms / on.fn_ms : 0);
    printf("  cache: %zu hashes in %zu partitions (%zu vouching), %llu hydrations, "
           "%llu catch-ups, %llu local hits\n",
           ds.hashes, ds.entries, ds.vouching, (unsigned long long)ds.hydrations,
           (unsigned long long)ds.catchups, (unsigned long long)ds.local_hits);
    printf("  memory per cached hash: accounted %.1f B, heap +%.1f B, RSS +%.1f B "
           "(per million: %.1f / %.1f / %.1f MB)\n",
           (double)ds.bytes / (double)ds.hashes, (heap1 - heap0) / (double)ds.hashes,
           (rss1 - rss0) / (double)ds.hashes, (double)ds.bytes / mh / 1e6,
           (heap1 - heap0) / mh / 1e6, (rss1 - rss0) / mh / 1e6);

    qn_fusion_set_dedup(b->app.fusion, NULL);
    qn_store_free(b->app.store);
    qn_dedup_free(b->app.dedup);
    qn_fusion_free(b->app.fusion);
    event_base_free(b->base);
    qn_zctx_free(b->app.zctx);
    qn_config_free(&b->cfg);
    PQfinish(b->db);
    if (!b->o.keep) {
        PGconn *c = PQconnectdb(b->o.url);
        if (PQstatus(c) == CONNECTION_OK)
            exec_ok(c, "DROP DATABASE IF EXISTS " BENCH_DB " WITH (FORCE)");
        PQfinish(c);
    }
    for (unsigned p = 0; p < b->o.partitions; p++)
        free(b->jobs[p].pay);
    free(b->pname);
    free(b->jobs);
    free(b->push_lat.v);
    free(b->sql_lat.v);
    /* Every transaction id is unique, so any item not QUEUED makes the figures void. */
    if (off.failed || off.dups || on.failed || on.dups) {
        fprintf(stderr,
                "bench_dedup: INVALID RUN: %" PRIu64 " failed and %" PRIu64
                " duplicate items (every item should have been queued)\n",
                off.failed + on.failed, off.dups + on.dups);
        return 1;
    }
    return 0;
}
