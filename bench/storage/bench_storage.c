/*
 * bench_storage.c - push and pop+ack throughput through the store (qn_store_*)
 * against a real PostgreSQL, next to the raw limit of the same machine: identical
 * pre-built segment rows inserted into an identical plain table through the same
 * pipelined libpq engine. No network of ours, no broker: one event loop drives
 * the store.
 *
 * Usage: bench_storage [--seconds S] [--pool N] [--depth N] [--only push|raw|pop]
 *                      [--sizes 1,100,1000] [--shapes 1x1,16x1,16x16,256x16]
 *                      [--warmup S] [URL]
 * URL (or QUEEN_DATABASE_URL) names a cluster; the bench works in a fresh
 * database `queen_bench` on it (dropped and re-created). Start one with fsync on:
 *   scripts/pg.sh start /tmp/qn-bench-pg
 *
 * Shapes (per segment size 1, 100, 1000 messages, 256-byte JSON-like payloads
 * packed and compressed by the codec, level 3):
 *   P=1   B=1   one partition, one call in flight (a partition is one flush at a time)
 *   P=16  B=1   16 partitions, one segment per call, 16 calls in flight
 *   P=16  B=16  16 partitions bundled in one call (one commit for all)
 *   P=256 B=16  256 partitions, bundles of 16, 16 calls in flight
 * A partition is in at most one call at a time (as with the broker's fusion), and
 * each push passes p_verified = the partition's last offset, so the dedup probe
 * is skipped, as the broker's cache will make it.
 *   push     qn_store_push (push_v1)
 *   raw      INSERT of the same segment rows (unnest of arrays, B rows per
 *            statement) into a plain table shaped like log_segments
 *   raw+txn  the same plus the log_txns sidecar row (what push writes besides the
 *            allocator UPDATE), to split the procedure's cost
 *   pop+ack  per partition: pop_v1 budget 1000 then a positional ack_v1 of the
 *            last delivered offset, until the partition is drained or time is up
 * msg/s counts messages; commits/s counts calls (each call is one transaction).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "queen/error.h"
#include "queen/ids.h"
#include "queen/migrate.h"
#include "queen/segment.h"
#include "queen/store.h"
#include "store_int.h"

#define BENCH_DB "queen_bench"
#define POOL_SEGS 8 /* distinct pre-built segments per size */
#define PAYLOAD 256

struct seg {
    struct qn_buf blob;
    uint8_t *hashes;
    uint32_t count;
};

struct part {
    char name[16];
    uint8_t pid[16];
    int64_t last; /* last offset known to us (exact: one call per partition) */
    uint64_t popped;
    bool drained;
};

enum mode { M_PUSH, M_RAW, M_RAW_TXN, M_POP };

struct run {
    struct event_base *base;
    qn_store *st;
    enum mode mode;
    int nparts, bundle;
    uint32_t size;
    const struct seg *segs; /* POOL_SEGS of this size */
    struct part *parts;
    char queue[64];
    int raw_stmt;
    int64_t end_ms;
    int inflight;
    uint64_t msgs, calls, errors, empty;
    int last_err;
    char last_msg[256];
    uint64_t rot;
};

struct group {
    struct run *run;
    int first; /* first partition of the bundle */
};

struct popper {
    struct run *run;
    int part;
    char worker[32];
    int64_t ack_off;
};

/* ---------------------------------------------------------------- payloads */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A 256-byte JSON-like document: fixed keys, varying numbers and words. */
static void payload(char out[PAYLOAD + 1], uint64_t n)
{
    static const char *const events[] = {"page_view", "add_to_cart", "checkout",
                                         "login",     "search",      "purchase"};
    static const char *const refs[] = {"google", "newsletter", "direct", "partner", "ads"};
    int len = snprintf(out, PAYLOAD + 1,
                       "{\"id\":%" PRIu64 ",\"user\":\"user-%u\",\"event\":\"%s\","
                       "\"ts\":%" PRIu64 ",\"props\":{\"path\":\"/products/%u\",\"ref\":\"%s\","
                       "\"amount\":%u.%02u,\"session\":\"%08x%08x\"},\"pad\":\"",
                       n, (unsigned)(next_rand() % 100000), events[next_rand() % 6],
                       (uint64_t)1700000000000 + n * 7, (unsigned)(next_rand() % 10000),
                       refs[next_rand() % 5], (unsigned)(next_rand() % 500),
                       (unsigned)(next_rand() % 100), (unsigned)next_rand(), (unsigned)next_rand());
    while (len < PAYLOAD - 2)
        out[len++] = "abcdefghijklmnopqrstuvwxyz0123456789"[next_rand() % 36];
    out[len++] = '"';
    out[len++] = '}';
    out[len] = '\0';
}

static int make_seg(qn_zctx *z, uint32_t count, uint64_t first, struct seg *s)
{
    struct qn_frame *f = calloc(count, sizeof *f);
    char(*txn)[40] = calloc(count, sizeof *txn);
    char(*pl)[PAYLOAD + 1] = calloc(count, sizeof *pl);
    struct qn_uuid7_gen g;
    int rc = QN_ENOMEM;
    s->hashes = malloc((size_t)count * 16);
    if (!f || !txn || !pl || !s->hashes)
        goto out;
    qn_uuid7_init_seed(&g, first + 1);
    for (uint32_t i = 0; i < count; i++) {
        uint8_t id[16];
        qn_uuid7_next(&g, 1700000000000ull + first + i, id);
        qn_uuid_format(id, txn[i]);
        memcpy(f[i].message_id, id, 16);
        payload(pl[i], first + i);
        f[i].txn = (const uint8_t *)txn[i];
        f[i].txn_len = 36;
        f[i].payload = (const uint8_t *)pl[i];
        f[i].payload_len = PAYLOAD;
    }
    rc = qn_segment_pack(z, f, count, 3, &s->blob, s->hashes);
    s->count = count;
out:
    free(f);
    free(txn);
    free(pl);
    return rc;
}

/* ---------------------------------------------------------------- setup (blocking) */

static PGconn *connect_db(const char *url, const char *db)
{
    const char *kw[] = {"dbname", "dbname", NULL};
    const char *val[] = {url, db, NULL};
    PGconn *c = db ? PQconnectdbParams(kw, val, 1) : PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "bench_storage: cannot connect: %s", PQerrorMessage(c));
        exit(1);
    }
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static void exec_or_die(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "bench_storage: %s\n%s", sql, PQresultErrorMessage(r));
        exit(1);
    }
    PQclear(r);
}

static char *db_conninfo(const char *url)
{
    PGconn *c = connect_db(url, BENCH_DB);
    /* rebuild a keyword conninfo from the live connection */
    char *out = malloc(1024);
    snprintf(out, 1024, "host=%s port=%s user=%s dbname=%s", PQhost(c), PQport(c), PQuser(c),
             BENCH_DB);
    PQfinish(c);
    return out;
}

static void fresh_database(const char *url)
{
    PGconn *c = connect_db(url, NULL);
    exec_or_die(c, "DROP DATABASE IF EXISTS " BENCH_DB " WITH (FORCE)");
    exec_or_die(c, "CREATE DATABASE " BENCH_DB);
    PQfinish(c);
    char *ci = db_conninfo(url);
    char err[1024] = "";
    if (qn_migrate(ci, 60000, NULL, err, sizeof err) != QN_OK) {
        fprintf(stderr, "bench_storage: schema: %s\n", err);
        exit(1);
    }
    c = connect_db(url, BENCH_DB);
    /* shaped like queen.log_segments / queen.log_txns, no procedure around them */
    exec_or_die(c, "CREATE TABLE bench_raw (partition_id UUID NOT NULL, base_offset BIGINT NOT "
                   "NULL, end_offset BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL, "
                   "blob BYTEA NOT NULL, PRIMARY KEY (partition_id, base_offset))");
    exec_or_die(c, "ALTER TABLE bench_raw ALTER COLUMN blob SET STORAGE EXTERNAL");
    exec_or_die(c, "CREATE TABLE bench_raw_txns (partition_id UUID NOT NULL, base_offset BIGINT "
                   "NOT NULL, end_offset BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL, "
                   "hashes BYTEA NOT NULL, PRIMARY KEY (partition_id, base_offset))");
    PQfinish(c);
    free(ci);
}

static void checkpoint(const char *url)
{
    PGconn *c = connect_db(url, BENCH_DB);
    exec_or_die(c, "CHECKPOINT");
    PQfinish(c);
}

/* ---------------------------------------------------------------- push */

static void push_next(struct group *g);

static void push_done(void *ud, const struct qn_store_status *st, const struct qn_push_result *r)
{
    struct group *g = ud;
    struct run *R = g->run;
    R->inflight--;
    R->calls++;
    if (st->code != QN_OK) {
        R->errors++;
        R->last_err = st->code;
        snprintf(R->last_msg, sizeof R->last_msg, "%s", st->message);
    } else {
        for (size_t i = 0; i < r->n; i++) {
            struct part *p = &R->parts[g->first + (int)i];
            if (r->segs[i].status != QN_PUSH_QUEUED) {
                R->errors++;
                continue;
            }
            memcpy(p->pid, r->segs[i].pid, 16);
            p->last = r->segs[i].base + R->size - 1;
            R->msgs += R->size;
        }
    }
    if (qn_store_now_ms() < R->end_ms)
        push_next(g);
}

static void push_next(struct group *g)
{
    struct run *R = g->run;
    struct qn_push_segment segs[16];
    int n = R->bundle;
    for (int i = 0; i < n; i++) {
        const struct seg *s = &R->segs[R->rot++ % POOL_SEGS];
        struct part *p = &R->parts[g->first + i];
        segs[i] = (struct qn_push_segment){.queue = R->queue,
                                           .partition = p->name,
                                           .count = s->count,
                                           .hashes = s->hashes,
                                           .verified = p->last,
                                           .blob = s->blob.data,
                                           .blob_len = s->blob.len};
    }
    int rc = qn_store_push(R->st, segs, (size_t)n, false, NULL, push_done, g, NULL);
    if (rc != QN_OK) {
        R->errors++;
        R->last_err = rc;
        return;
    }
    R->inflight++;
}

/* ---------------------------------------------------------------- raw */

static void raw_next(struct group *g);

static void raw_done(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct group *g = ud;
    struct run *R = g->run;
    (void)res;
    R->inflight--;
    R->calls++;
    if (st->code != QN_OK) {
        R->errors++;
        R->last_err = st->code;
        snprintf(R->last_msg, sizeof R->last_msg, "%s", st->message);
    } else {
        R->msgs += (uint64_t)R->size * (uint64_t)R->bundle;
        for (int i = 0; i < R->bundle; i++)
            R->parts[g->first + i].last += R->size;
    }
    if (qn_store_now_ms() < R->end_ms)
        raw_next(g);
}

static void raw_next(struct group *g)
{
    struct run *R = g->run;
    int n = R->bundle;
    struct qn__arena a;
    struct qn__params p;
    const uint8_t *pids[16], *blobs[16], *hashes[16];
    int32_t pidl[16];
    size_t bl[16], hl[16];
    int64_t bases[16], ends[16];
    qn__arena_init(&a, (size_t)1 << 30);
    qn__params_init(&p, &a, R->mode == M_RAW_TXN ? 5 : 4);
    for (int i = 0; i < n; i++) {
        const struct seg *s = &R->segs[R->rot++ % POOL_SEGS];
        struct part *pt = &R->parts[g->first + i];
        pids[i] = pt->pid;
        pidl[i] = 16;
        bases[i] = pt->last + 1;
        ends[i] = pt->last + R->size;
        blobs[i] = s->blob.data;
        bl[i] = s->blob.len;
        hashes[i] = s->hashes;
        hl[i] = (size_t)s->count * 16;
    }
    qn__p_array(&p, 0, QN_OID_UUID, pids, pidl, (size_t)n);
    qn__p_arr_i64(&p, 1, bases, (size_t)n);
    qn__p_arr_i64(&p, 2, ends, (size_t)n);
    qn__p_arr_bytea(&p, 3, blobs, bl, (size_t)n);
    if (R->mode == M_RAW_TXN)
        qn__p_arr_bytea(&p, 4, hashes, hl, (size_t)n);
    int rc = qn__store_sql(R->st, R->raw_stmt, NULL, NULL, &p, 1, NULL, raw_done, g, NULL);
    qn__arena_free(&a);
    if (rc != QN_OK) {
        R->errors++;
        R->last_err = rc;
        return;
    }
    R->inflight++;
}

/* ---------------------------------------------------------------- pop + ack */

static void pop_next(struct popper *w);

static void ack_done(void *ud, const struct qn_store_status *st, const struct qn_ack_result *r)
{
    struct popper *w = ud;
    struct run *R = w->run;
    R->inflight--;
    R->calls++;
    if (st->code != QN_OK || r->items[0].outcome != QN_ACK_APPLIED) {
        R->errors++;
        R->last_err = st->code;
        snprintf(R->last_msg, sizeof R->last_msg, "ack: %s outcome %d", st->message,
                 r ? r->items[0].outcome : -1);
        return;
    }
    if (qn_store_now_ms() < R->end_ms)
        pop_next(w);
}

static void pop_done(void *ud, const struct qn_store_status *st, const struct qn_pop_result *r)
{
    struct popper *w = ud;
    struct run *R = w->run;
    struct part *p = &R->parts[w->part];
    R->inflight--;
    R->calls++;
    if (st->code != QN_OK) {
        R->errors++;
        R->last_err = st->code;
        snprintf(R->last_msg, sizeof R->last_msg, "pop: %s", st->message);
        return;
    }
    if (r->n == 0) {
        /* empty is not drained while messages remain: a concurrent first contact
         * of the group may hold the consumer row (pops SKIP LOCKED) */
        if ((int64_t)p->popped < p->last + 1 && qn_store_now_ms() < R->end_ms) {
            R->empty++;
            pop_next(w);
        } else {
            p->drained = true;
        }
        return;
    }
    int64_t last = -1;
    uint64_t got = 0;
    for (size_t i = 0; i < r->n; i++) {
        got += (uint64_t)r->segs[i].take;
        last = r->segs[i].base + r->segs[i].start_idx + r->segs[i].take - 1;
    }
    memcpy(p->pid, r->segs[0].pid, 16);
    R->msgs += got;
    p->popped += got;
    struct qn_ack_item it = {NULL, last, QN_ACK_COMPLETED};
    struct qn_ack_args a = {{0}, "", w->worker, &it, 1};
    memcpy(a.pid, p->pid, 16);
    if (qn_store_ack(R->st, &a, NULL, ack_done, w, NULL) != QN_OK) {
        R->errors++;
        return;
    }
    R->inflight++;
}

static void pop_next(struct popper *w)
{
    struct run *R = w->run;
    struct qn_pop_args a;
    memset(&a, 0, sizeof a);
    a.queue = R->queue;
    a.partition = R->parts[w->part].name;
    a.worker = w->worker;
    a.budget = 1000;
    a.max_partitions = 1;
    if (qn_store_pop(R->st, &a, NULL, pop_done, w, NULL) != QN_OK) {
        R->errors++;
        return;
    }
    R->inflight++;
}

/* ---------------------------------------------------------------- driver */

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static void drive(struct run *R)
{
    struct event *t = event_new(R->base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 20000};
    event_add(t, &tv);
    while (R->inflight > 0)
        event_base_loop(R->base, EVLOOP_ONCE);
    event_free(t);
}

static double run_mode(struct run *R, int seconds)
{
    int ngroups = R->nparts / R->bundle;
    struct group *g = calloc((size_t)ngroups, sizeof *g);
    struct popper *w = calloc((size_t)R->nparts, sizeof *w);
    R->msgs = R->calls = R->errors = R->empty = 0;
    R->last_msg[0] = '\0';
    int64_t t0 = qn_store_now_ms();
    R->end_ms = t0 + seconds * 1000;
    if (R->mode == M_POP) {
        for (int i = 0; i < R->nparts; i++) {
            w[i].run = R;
            w[i].part = i;
            snprintf(w[i].worker, sizeof w[i].worker, "bench-%d", i);
            pop_next(&w[i]);
        }
    } else {
        for (int i = 0; i < ngroups; i++) {
            g[i].run = R;
            g[i].first = i * R->bundle;
            if (R->mode == M_PUSH)
                push_next(&g[i]);
            else
                raw_next(&g[i]);
        }
    }
    drive(R);
    double secs = (double)(qn_store_now_ms() - t0) / 1000.0;
    free(g);
    free(w);
    return secs;
}

static const char *mode_name(enum mode m)
{
    switch (m) {
    case M_PUSH:
        return "push";
    case M_RAW:
        return "raw";
    case M_RAW_TXN:
        return "raw+txn";
    case M_POP:
        return "pop+ack";
    }
    return "?";
}

static double report(struct run *R, double secs)
{
    double mps = (double)R->msgs / secs;
    char extra[64] = "";
    if (R->mode == M_POP && R->empty > 0)
        snprintf(extra, sizeof extra, ", %" PRIu64 " empty pops retried", R->empty);
    printf("%-8s P=%-3d B=%-2d seg=%-4u %10.0f msg/s %8.0f commits/s  (%" PRIu64 " calls, "
           "%.1f s%s%s%s)\n",
           mode_name(R->mode), R->nparts, R->mode == M_POP ? 1 : R->bundle, R->size, mps,
           (double)R->calls / secs, R->calls, secs, extra, R->errors ? ", ERRORS: " : "",
           R->errors ? R->last_msg : "");
    fflush(stdout);
    return mps;
}

static void on_state(void *ud, bool up)
{
    (void)ud;
    if (!up)
        fprintf(stderr, "bench_storage: store down\n");
}

int main(int argc, char **argv)
{
    int seconds = 6, pool = 8, depth = 16, warmup = 10;
    const char *only = NULL, *sizes_arg = "1,100,1000", *shapes_arg = "1x1,16x1,16x16,256x16";
    static const struct option opts[] = {
        {"seconds", required_argument, 0, 's'}, {"pool", required_argument, 0, 'p'},
        {"depth", required_argument, 0, 'd'},   {"only", required_argument, 0, 'o'},
        {"sizes", required_argument, 0, 'z'},   {"warmup", required_argument, 0, 'w'},
        {"shapes", required_argument, 0, 'h'},  {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            seconds = (int)strtol(optarg, NULL, 10);
            break;
        case 'p':
            pool = (int)strtol(optarg, NULL, 10);
            break;
        case 'd':
            depth = (int)strtol(optarg, NULL, 10);
            break;
        case 'o':
            only = optarg;
            break;
        case 'z':
            sizes_arg = optarg;
            break;
        case 'w':
            warmup = (int)strtol(optarg, NULL, 10);
            break;
        case 'h':
            shapes_arg = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--seconds S] [--pool N] [--depth N] [--only "
                    "push|raw|pop] [--sizes 1,100,1000] [--shapes PxB,...] [--warmup S] "
                    "[URL]\n",
                    argv[0]);
            return 2;
        }
    }
    const char *url = optind < argc ? argv[optind] : getenv("QUEEN_DATABASE_URL");
    if (url == NULL || seconds < 1 || pool < 1 || depth < 1) {
        fprintf(stderr, "bench_storage: give a database URL (argument or QUEEN_DATABASE_URL)\n");
        return 2;
    }
    uint32_t sizes[8];
    int nsizes = 0;
    for (char *s = (char *)sizes_arg; *s && nsizes < 8;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 100000)
            return 2;
        sizes[nsizes++] = (uint32_t)v;
        s = *end ? end + 1 : end;
    }

    fresh_database(url);
    char *ci = db_conninfo(url);
    struct event_base *base = event_base_new();
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = ci;
    cfg.pool_size = pool;
    cfg.pipeline_depth = depth;
    qn_store *st = NULL;
    if (qn_store_new(base, &cfg, &st) != QN_OK)
        return 1;
    qn_store_on_state(st, on_state, NULL);
    {
        struct event *t = event_new(base, -1, EV_PERSIST, tick, NULL);
        struct timeval tv = {0, 10000};
        event_add(t, &tv);
        int64_t end = qn_store_now_ms() + 10000;
        while (!qn_store_is_up(st) && qn_store_now_ms() < end)
            event_base_loop(base, EVLOOP_ONCE);
        event_free(t);
    }
    if (!qn_store_is_up(st)) {
        fprintf(stderr, "bench_storage: store did not come up\n");
        return 1;
    }
    static const uint32_t raw_types[4] = {QN_OID_UUID_ARR, QN_OID_INT8_ARR, QN_OID_INT8_ARR,
                                          QN_OID_BYTEA_ARR};
    static const uint32_t rawt_types[5] = {QN_OID_UUID_ARR, QN_OID_INT8_ARR, QN_OID_INT8_ARR,
                                           QN_OID_BYTEA_ARR, QN_OID_BYTEA_ARR};
    int raw_stmt = qn__store_register(
        st, "bench_raw",
        "INSERT INTO bench_raw (partition_id, base_offset, end_offset, created_at, blob) "
        "SELECT u.p, u.b, u.e, clock_timestamp(), u.x FROM unnest($1, $2, $3, $4) AS u(p, b, e, x)",
        4, raw_types);
    int rawt_stmt = qn__store_register(
        st, "bench_raw_txn",
        "WITH u AS (SELECT * FROM unnest($1, $2, $3, $4, $5) AS u(p, b, e, x, h)), "
        "t AS (INSERT INTO bench_raw_txns (partition_id, base_offset, end_offset, created_at, "
        "hashes) SELECT u.p, u.b, u.e, clock_timestamp(), u.h FROM u) "
        "INSERT INTO bench_raw (partition_id, base_offset, end_offset, created_at, blob) "
        "SELECT u.p, u.b, u.e, clock_timestamp(), u.x FROM u",
        5, rawt_types);

    qn_zctx *z = NULL;
    qn_zctx_new(&z);
    printf("bench_storage: pool %d, depth %d, %d s per run, 256-byte JSON payloads, zstd 3\n", pool,
           depth, seconds);

    struct {
        int parts, bundle;
    } shapes[8];
    int nshapes = 0;
    for (char *s = (char *)shapes_arg; *s && nshapes < 8;) {
        char *end;
        long p = strtol(s, &end, 10), b;
        if (end == s || *end != 'x')
            return 2;
        s = end + 1;
        b = strtol(s, &end, 10);
        if (end == s || p < 1 || p > 4096 || b < 1 || b > 16 || p % b != 0)
            return 2;
        shapes[nshapes].parts = (int)p;
        shapes[nshapes].bundle = (int)b;
        nshapes++;
        s = *end ? end + 1 : end;
    }
    uint64_t first = 0;
    for (int zi = 0; zi < nsizes; zi++) {
        uint32_t size = sizes[zi];
        struct seg segs[POOL_SEGS];
        size_t bytes = 0;
        for (int i = 0; i < POOL_SEGS; i++) {
            if (make_seg(z, size, first, &segs[i]) != QN_OK)
                return 1;
            first += size;
            bytes += segs[i].blob.len;
        }
        printf("-- segments of %u messages: %.0f bytes compressed on average (%.1f B/msg)\n", size,
               (double)bytes / POOL_SEGS, (double)bytes / POOL_SEGS / size);
        if (zi == 0 && warmup > 0) {
            /* a fresh cluster creates (zero-fills) WAL files as it goes; later runs
             * recycle them. Generate WAL first so no measured run pays for that. */
            struct run W;
            memset(&W, 0, sizeof W);
            W.base = base;
            W.st = st;
            W.nparts = 256;
            W.bundle = 16;
            W.size = size;
            W.segs = segs;
            W.mode = M_RAW;
            W.raw_stmt = raw_stmt;
            W.parts = calloc(256, sizeof *W.parts);
            for (int i = 0; i < 256; i++) {
                W.parts[i].last = -1;
                for (int k = 0; k < 16; k++)
                    W.parts[i].pid[k] = (uint8_t)next_rand();
            }
            double secs = run_mode(&W, warmup);
            printf("   (warm-up: %.0f msg/s for %.1f s, not counted)\n", (double)W.msgs / secs,
                   secs);
            free(W.parts);
        }
        for (int si = 0; si < nshapes; si++) {
            struct run R;
            memset(&R, 0, sizeof R);
            R.base = base;
            R.st = st;
            R.nparts = shapes[si].parts;
            R.bundle = shapes[si].bundle;
            R.size = size;
            R.segs = segs;
            R.parts = calloc((size_t)R.nparts, sizeof *R.parts);
            snprintf(R.queue, sizeof R.queue, "bench.s%u.p%d.b%d", size, R.nparts, R.bundle);
            for (int i = 0; i < R.nparts; i++) {
                snprintf(R.parts[i].name, sizeof R.parts[i].name, "p%d", i);
                R.parts[i].last = -1;
            }
            double push = 0, raw = 0, rawt = 0;
            if (only == NULL || strcmp(only, "push") == 0 || strcmp(only, "pop") == 0) {
                checkpoint(url);
                R.mode = M_PUSH;
                push = report(&R, run_mode(&R, seconds));
            }
            /* raw rows go to fresh partition ids: the same B-tree growth pattern */
            for (int i = 0; i < R.nparts; i++)
                for (int k = 0; k < 16; k++)
                    R.parts[i].pid[k] = (uint8_t)next_rand();
            int64_t *saved = calloc((size_t)R.nparts, sizeof *saved);
            for (int i = 0; i < R.nparts; i++) {
                saved[i] = R.parts[i].last;
                R.parts[i].last = -1;
            }
            if (only == NULL || strcmp(only, "raw") == 0) {
                checkpoint(url);
                R.mode = M_RAW;
                R.raw_stmt = raw_stmt;
                raw = report(&R, run_mode(&R, seconds));
                for (int i = 0; i < R.nparts; i++)
                    for (int k = 0; k < 16; k++)
                        R.parts[i].pid[k] = (uint8_t)next_rand();
                checkpoint(url);
                R.mode = M_RAW_TXN;
                R.raw_stmt = rawt_stmt;
                rawt = report(&R, run_mode(&R, seconds));
            }
            if (push > 0 && raw > 0)
                printf("   ratio procedures/raw %.2f   (raw+txn/raw %.2f, push/raw+txn %.2f)\n",
                       push / raw, rawt / raw, push / rawt);
            if ((only == NULL || strcmp(only, "pop") == 0) && push > 0 &&
                !(R.nparts == 16 && R.bundle == 16)) {
                for (int i = 0; i < R.nparts; i++)
                    R.parts[i].last = saved[i];
                checkpoint(url);
                R.mode = M_POP;
                report(&R, run_mode(&R, seconds));
            }
            free(saved);
            free(R.parts);
        }
        for (int i = 0; i < POOL_SEGS; i++) {
            qn_buf_free(&segs[i].blob);
            free(segs[i].hashes);
        }
    }
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    printf("store: %" PRIu64 " calls, %" PRIu64 " statements, %" PRIu64 " syncs, %" PRIu64
           " retries, peak %u in flight on one connection\n",
           s.calls, s.statements, s.round_trips, s.retries, s.in_flight_peak);
    qn_store_free(st);
    qn_zctx_free(z);
    event_base_free(base);
    free(ci);
    return 0;
}
