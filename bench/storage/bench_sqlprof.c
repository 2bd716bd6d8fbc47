/*
 * bench_sqlprof.c - where the server's time goes in each hot procedure, call by
 * call: calls made serially through the store (one connection, one call in
 * flight, prepared statements, binary parameters, exactly as the broker makes
 * them), then read back from pg_stat_statements (top-level and nested
 * statements, planning and execution) and pg_stat_user_functions.
 *
 * Usage: bench_sqlprof [--calls N] [--warmup N] [--only NAMES] [--track top]
 *                      [--async-commit] [URL]
 * URL (or QUEEN_DATABASE_URL) names a cluster started with the profiling
 * settings (QN_PG_PROFILE=1 scripts/pg.sh start DIR); the program works in a
 * fresh database `queen_sqlprof` (dropped and re-created).
 *
 * Scenarios (each on queues of its own; the first call of each, which creates
 * the queue and partitions, and --warmup more are not counted):
 *   push1      one 1-message segment per call (p_verified = the last offset)
 *   push100    one 100-message segment per call
 *   bundle16   16 partitions x 100-message segments per call
 *   bundle16x1 16 partitions x 1-message segments per call
 *   bundle16loop  bundle16 as one call of a scratch PL/pgSQL function looping
 *              over push_one_v1 (the "outer call" shape, for comparison with
 *              the store's pipelined push_one_v1 calls)
 *   pop        pop_v1 of one named partition, budget 100 (its one segment)
 *   renew      renew_lease_v1 of that pop's lease (one per worker)
 *   ack        ack_v1 of the batch's last offset (positional)
 *              (one partition per measured call: every pop first, then every
 *              renewal, then every ack, so that each is measured alone)
 *
 * Per scenario it prints, per call: the top-level statement's execution and
 * planning time, each nested statement's (statements the procedures run), and
 * "between statements": top-level execution minus the time of the leaf
 * statements (nested statements that do not themselves call a procedure of
 * ours running statements): the PL/pgSQL interpreter, expressions evaluated
 * outside statements, function-call setup, returning rows.
 * Figures include the profiling overhead of track = all and track_planning;
 * --track top sets pg_stat_statements.track = top on the measured session (only
 * the top-level statements are timed: server time without that overhead).
 * "wall" is the client's time per call (median), round trip and commit
 * included; --async-commit sets synchronous_commit = off on the measured
 * session so that the commit's WAL flush (and the machine's I/O noise) leaves it.
 */
#include <getopt.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "queen/error.h"
#include "queen/ids.h"
#include "queen/migrate.h"
#include "queen/segment.h"
#include "queen/store.h"
#include "store_int.h"

#define PROF_DB "queen_sqlprof"
#define PAYLOAD 256
#define MAXP 16

struct seg {
    struct qn_buf blob;
    uint8_t *hashes;
    uint32_t count;
};

static bool track_top, async_commit;

struct ctx {
    double *wall; /* per measured call, µs */
    int nwall;
    struct event_base *base;
    qn_store *st;
    PGconn *side;
    bool done;
    int err;
    char msg[256];
    /* last results */
    int64_t base_off[MAXP];
    uint8_t pid[MAXP][16];
    int64_t pop_last;
    int pop_n;
};

/* ---------------------------------------------------------------- helpers */

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "bench_sqlprof: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static PGconn *connect_db(const char *url, const char *db)
{
    const char *kw[] = {"dbname", "dbname", NULL};
    const char *val[] = {url, db, NULL};
    PGconn *c = db ? PQconnectdbParams(kw, val, 1) : PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK)
        die("cannot connect", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static void exec_or_die(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "bench_sqlprof: %s\n%s", sql, PQresultErrorMessage(r));
        exit(1);
    }
    PQclear(r);
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Runs the loop until the call in flight has answered. */
static void wait_done(struct ctx *c)
{
    while (!c->done)
        event_base_loop(c->base, EVLOOP_ONCE);
    c->done = false;
    if (c->err != QN_OK)
        die("call failed", c->msg);
}

static void note(struct ctx *c, const struct qn_store_status *st)
{
    c->done = true;
    c->err = st->code;
    snprintf(c->msg, sizeof c->msg, "%s (%s)", st->message, st->sqlstate);
}

static void raw_done(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    (void)res;
    note(ud, st);
}

/* Makes the store's backend flush its pending function statistics now. */
static void flush_stats(struct ctx *c)
{
    if (qn__store_sql(c->st, -1, "SELECT pg_stat_force_next_flush()", NULL, NULL, 1, NULL, raw_done,
                      c, NULL) != QN_OK)
        die("flush", NULL);
    wait_done(c);
}

static void reset_stats(struct ctx *c)
{
    flush_stats(c);
    exec_or_die(c->side, "SELECT pg_stat_statements_reset()");
    exec_or_die(c->side, "SELECT pg_stat_reset()");
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the recorded wall times (and forgets them). */
static double wall_median(struct ctx *c)
{
    if (c->nwall == 0)
        return 0;
    qsort(c->wall, (size_t)c->nwall, sizeof *c->wall, cmp_double);
    double m = c->wall[c->nwall / 2];
    c->nwall = 0;
    return m;
}

/* Runs raw SQL on the measured session (its settings persist there). */
static void session_sql(struct ctx *c, const char *sql)
{
    if (qn__store_sql(c->st, -1, sql, NULL, NULL, 1, NULL, raw_done, c, NULL) != QN_OK)
        die("session", sql);
    wait_done(c);
}

/* ---------------------------------------------------------------- payloads */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
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
        int len = snprintf(pl[i], PAYLOAD + 1, "{\"id\":%" PRIu64 ",\"v\":\"", first + i);
        while (len < PAYLOAD - 2)
            pl[i][len++] = "abcdefghijklmnopqrstuvwxyz0123456789"[next_rand() % 36];
        pl[i][len++] = '"';
        pl[i][len++] = '}';
        pl[i][len] = '\0';
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

/* ---------------------------------------------------------------- calls */

static void push_done(void *ud, const struct qn_store_status *st, const struct qn_push_result *r)
{
    struct ctx *c = ud;
    if (st->code == QN_OK) {
        for (size_t i = 0; i < r->n && i < MAXP; i++) {
            if (r->segs[i].status != QN_PUSH_QUEUED) {
                c->done = true;
                c->err = QN_EINTERNAL;
                snprintf(c->msg, sizeof c->msg, "segment %zu not queued", i);
                return;
            }
            c->base_off[i] = r->segs[i].base;
            memcpy(c->pid[i], r->segs[i].pid, 16);
        }
    }
    note(c, st);
}

struct pushset {
    const char *queue;
    int nparts;
    const struct seg *seg;
    int64_t last[MAXP];
    bool loop;             /* through prof_push_loop (needs pid) */
    uint8_t pid[MAXP][16]; /* ascending after the first push, with last[] to match */
};

static int cmp_pid(const void *a, const void *b)
{
    return memcmp(a, b, 16);
}

static void loop_done(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct ctx *c = ud;
    note(c, st);
    if (st->code == QN_OK)
        for (int i = 0; i < PQntuples(res) && i < MAXP; i++) {
            /* r_base, binary int8 */
            const uint8_t *v = (const uint8_t *)PQgetvalue(res, i, 0);
            uint64_t b = 0;
            for (int k = 0; k < 8; k++)
                b = b << 8 | v[k];
            c->base_off[i] = (int64_t)b;
        }
}

/* One bundle as one call of prof_push_loop (pids ascending). */
static void push_loop_once(struct ctx *c, struct pushset *ps)
{
    static const uint32_t types[5] = {QN_OID_UUID_ARR, QN_OID_INT4_ARR, QN_OID_BYTEA_ARR,
                                      QN_OID_INT8_ARR, QN_OID_BYTEA_ARR};
    struct qn__arena a;
    struct qn__params p;
    const uint8_t *pids[MAXP], *hs[MAXP], *bs[MAXP];
    int32_t pl[MAXP], counts[MAXP];
    size_t hl[MAXP], bl[MAXP];
    qn__arena_init(&a, (size_t)1 << 28);
    qn__params_init(&p, &a, 5);
    for (int i = 0; i < ps->nparts; i++) {
        pids[i] = ps->pid[i];
        pl[i] = 16;
        counts[i] = (int32_t)ps->seg->count;
        hs[i] = ps->seg->hashes;
        hl[i] = (size_t)ps->seg->count * 16;
        bs[i] = ps->seg->blob.data;
        bl[i] = ps->seg->blob.len;
    }
    size_t n = (size_t)ps->nparts;
    qn__p_array(&p, 0, QN_OID_UUID, pids, pl, n);
    qn__p_arr_i32(&p, 1, counts, n);
    qn__p_arr_bytea(&p, 2, hs, hl, n);
    qn__p_arr_i64(&p, 3, ps->last, n);
    qn__p_arr_bytea(&p, 4, bs, bl, n);
    if (qn__store_sql(c->st, -1, "SELECT r_base FROM prof_push_loop($1, $2, $3, $4, $5)", types, &p,
                      1, NULL, loop_done, c, NULL) != QN_OK)
        die("push loop", NULL);
    qn__arena_free(&a);
    wait_done(c);
    for (int i = 0; i < ps->nparts; i++)
        ps->last[i] = c->base_off[i] + ps->seg->count - 1;
}

static void push_once(struct ctx *c, struct pushset *ps)
{
    if (ps->loop) {
        push_loop_once(c, ps);
        return;
    }
    struct qn_push_segment segs[MAXP];
    char names[MAXP][16]; /* "p" and any int */
    for (int i = 0; i < ps->nparts; i++) {
        snprintf(names[i], sizeof names[i], "p%d", i);
        segs[i] = (struct qn_push_segment){.queue = ps->queue,
                                           .partition = names[i],
                                           .count = ps->seg->count,
                                           .hashes = ps->seg->hashes,
                                           .verified = ps->last[i],
                                           .blob = ps->seg->blob.data,
                                           .blob_len = ps->seg->blob.len};
    }
    if (qn_store_push(c->st, segs, (size_t)ps->nparts, false, NULL, push_done, c, NULL) != QN_OK)
        die("push", NULL);
    wait_done(c);
    for (int i = 0; i < ps->nparts; i++)
        ps->last[i] = c->base_off[i] + ps->seg->count - 1;
}

static void pop_done(void *ud, const struct qn_store_status *st, const struct qn_pop_result *r)
{
    struct ctx *c = ud;
    c->pop_n = 0;
    if (st->code == QN_OK && r->n > 0) {
        const struct qn_pop_segment *s = &r->segs[r->n - 1];
        c->pop_last = s->base + s->start_idx + s->take - 1;
        memcpy(c->pid[0], s->pid, 16);
        c->pop_n = (int)r->n;
    }
    note(c, st);
}

static void renew_done(void *ud, const struct qn_store_status *st, int32_t renewed, int64_t exp)
{
    struct ctx *c = ud;
    (void)exp;
    note(c, st);
    if (st->code == QN_OK && renewed != 1) {
        c->err = QN_EINTERNAL;
        snprintf(c->msg, sizeof c->msg, "renewed %d leases, not 1", renewed);
    }
}

static void ack_done(void *ud, const struct qn_store_status *st, const struct qn_ack_result *r)
{
    struct ctx *c = ud;
    note(c, st);
    if (st->code == QN_OK && r->items[0].outcome != QN_ACK_APPLIED) {
        c->err = QN_EINTERNAL;
        snprintf(c->msg, sizeof c->msg, "ack outcome %d", r->items[0].outcome);
    }
}

static void pop_one(struct ctx *c, const char *queue, const char *part, const char *worker)
{
    struct qn_pop_args a;
    memset(&a, 0, sizeof a);
    a.queue = queue;
    a.partition = part;
    a.worker = worker;
    a.budget = 100;
    a.max_partitions = 1;
    if (qn_store_pop(c->st, &a, NULL, pop_done, c, NULL) != QN_OK)
        die("pop", NULL);
    wait_done(c);
    if (c->pop_n != 1)
        die("pop", "expected one segment");
}

static void renew_one(struct ctx *c, const char *worker)
{
    if (qn_store_renew_lease(c->st, worker, 60, NULL, renew_done, c, NULL) != QN_OK)
        die("renew", NULL);
    wait_done(c);
}

static void ack_one(struct ctx *c, const uint8_t pid[16], const char *worker, int64_t last)
{
    struct qn_ack_item it = {NULL, last, QN_ACK_COMPLETED};
    struct qn_ack_args k = {{0}, "", worker, &it, 1};
    memcpy(k.pid, pid, 16);
    if (qn_store_ack(c->st, &k, NULL, ack_done, c, NULL) != QN_OK)
        die("ack", NULL);
    wait_done(c);
}

/* ---------------------------------------------------------------- report */

/* Nested statements that call a procedure of ours which runs statements
 * itself: their time is counted again in those statements. */
static const char *wrapper_re =
    "qn\\.(push_v1|push_one_v1|push_pids_v1|pop_v1|pop_pid_v1|pop_partition|pop_claimed|"
    "register_group|first_base_since|seed_cursor|ack_v1|renew_lease_v1|note_empty_scan)[ (]";

static double num(const PGresult *r, int row, int col)
{
    return strtod(PQgetvalue(r, row, col), NULL);
}

static void report(struct ctx *c, const char *name, int calls, const char *top_like)
{
    char sql[1024];
    regex_t re;
    if (regcomp(&re, wrapper_re, REG_EXTENDED | REG_NOSUB) != 0)
        die("regcomp", NULL);
    snprintf(sql, sizeof sql,
             "SELECT toplevel, calls, plans, total_exec_time, total_plan_time, "
             "shared_blks_hit + shared_blks_read, regexp_replace(query, '\\s+', ' ', 'g') "
             "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
             "WHERE datname = current_database()) AND calls > 0 "
             "AND query NOT LIKE '%%pg_stat%%' "
             "AND (NOT toplevel OR query LIKE '%%%s%%') "
             "ORDER BY toplevel DESC, total_exec_time DESC",
             top_like);
    PGresult *r = PQexec(c->side, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("pg_stat_statements", PQresultErrorMessage(r));
    double top_exec = 0, top_plan = 0, top_plans = 0, leaf = 0;
    printf("== %s: %d calls, serially; per call (µs):\n", name, calls);
    printf("   %8s %8s %8s %9s %7s  %s\n", "calls", "plans", "plan", "exec", "blks", "statement");
    for (int i = 0; i < PQntuples(r); i++) {
        bool top = PQgetvalue(r, i, 0)[0] == 't';
        double n = num(r, i, 1), plans = num(r, i, 2), ex = num(r, i, 3) * 1000.0 / calls,
               pl = num(r, i, 4) * 1000.0 / calls, blks = num(r, i, 5) / calls;
        const char *q = PQgetvalue(r, i, 6);
        bool wrapper = !top && regexec(&re, q, 0, NULL, 0) == 0;
        if (top) {
            top_exec += ex;
            top_plan += pl;
            top_plans += plans;
        } else if (!wrapper) {
            leaf += ex + pl;
        }
        printf("   %8.2f %8.2f %8.1f %9.1f %7.1f  %s%.110s\n", n / calls, plans / calls, pl, ex,
               blks,
               top       ? "[top] "
               : wrapper ? "[wrap] "
                         : "",
               q);
    }
    PQclear(r);
    regfree(&re);
    r = PQexec(c->side, "SELECT schemaname || '.' || funcname, calls, total_time, self_time "
                        "FROM pg_stat_user_functions WHERE calls > 0 ORDER BY total_time DESC");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("pg_stat_user_functions", PQresultErrorMessage(r));
    for (int i = 0; i < PQntuples(r); i++)
        printf("   function %-28s %6.2f calls, total %7.1f, self %7.1f\n", PQgetvalue(r, i, 0),
               num(r, i, 1) / calls, num(r, i, 2) * 1000.0 / calls, num(r, i, 3) * 1000.0 / calls);
    PQclear(r);
    double wall = wall_median(c);
    if (track_top)
        printf("   SUMMARY %-12s server %.1f µs/call = plan %.1f (%.2f plans/call) + exec %.1f; "
               "wall %.1f\n",
               name, top_exec + top_plan, top_plan, top_plans / calls, top_exec, wall);
    else
        printf("   SUMMARY %-12s server %.1f µs/call = plan %.1f (%.2f plans/call) + exec %.1f; "
               "leaf statements %.1f, between statements %.1f; wall %.1f\n",
               name, top_exec + top_plan, top_plan, top_plans / calls, top_exec, leaf,
               top_exec - leaf, wall);
    fflush(stdout);
}

/* ---------------------------------------------------------------- main */

static bool wanted(const char *only, const char *name)
{
    return only == NULL || strstr(only, name) != NULL;
}

static void timed_push(struct ctx *c, struct pushset *ps)
{
    double t0 = now_us();
    push_once(c, ps);
    c->wall[c->nwall++] = now_us() - t0;
}

static void run_push(struct ctx *c, const char *name, const char *queue, int nparts,
                     const struct seg *seg, int calls, int warmup, bool loop)
{
    struct pushset ps;
    memset(&ps, 0, sizeof ps);
    ps.queue = queue;
    ps.nparts = nparts;
    ps.seg = seg;
    for (int i = 0; i < MAXP; i++)
        ps.last[i] = -1;
    push_once(c, &ps); /* first contact: creates the queue and its partitions */
    if (loop) {
        /* partitions p0.. were created with ids in no order: name them by id
         * (every partition has the same last offset, so last[] still holds) */
        for (int i = 0; i < nparts; i++)
            memcpy(ps.pid[i], c->pid[i], 16);
        qsort(ps.pid, (size_t)nparts, 16, cmp_pid);
        ps.loop = true;
    }
    for (int i = 0; i < warmup; i++)
        push_once(c, &ps);
    reset_stats(c);
    for (int i = 0; i < calls; i++)
        timed_push(c, &ps);
    flush_stats(c);
    report(c, name, calls, loop ? "prof_push_loop" : "push");
}

int main(int argc, char **argv)
{
    int calls = 2000, warmup = 200;
    const char *only = NULL;
    static const struct option opts[] = {
        {"calls", required_argument, 0, 'c'},  {"warmup", required_argument, 0, 'w'},
        {"only", required_argument, 0, 'o'},   {"track", required_argument, 0, 't'},
        {"async-commit", no_argument, 0, 'a'}, {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            calls = (int)strtol(optarg, NULL, 10);
            break;
        case 'w':
            warmup = (int)strtol(optarg, NULL, 10);
            break;
        case 'o':
            only = optarg;
            break;
        case 't':
            track_top = strcmp(optarg, "top") == 0;
            break;
        case 'a':
            async_commit = true;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--calls N] [--warmup N] [--only NAMES] [--track top] "
                    "[--async-commit] [URL]\n",
                    argv[0]);
            return 2;
        }
    }
    const char *url = optind < argc ? argv[optind] : getenv("QUEEN_DATABASE_URL");
    if (url == NULL || calls < 1 || warmup < 0)
        die("give a database URL (argument or QUEEN_DATABASE_URL)", NULL);

    PGconn *admin = connect_db(url, NULL);
    exec_or_die(admin, "DROP DATABASE IF EXISTS " PROF_DB " WITH (FORCE)");
    exec_or_die(admin, "CREATE DATABASE " PROF_DB);
    PQfinish(admin);
    struct ctx c;
    memset(&c, 0, sizeof c);
    c.side = connect_db(url, PROF_DB);
    PGresult *pr = PQexec(c.side, "SHOW track_functions");
    if (PQresultStatus(pr) != PGRES_TUPLES_OK || strcmp(PQgetvalue(pr, 0, 0), "all") != 0)
        die("the cluster must run with track_functions = all and pg_stat_statements "
            "(QN_PG_PROFILE=1 scripts/pg.sh start DIR)",
            NULL);
    PQclear(pr);
    exec_or_die(c.side, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    char ci[1024];
    snprintf(ci, sizeof ci, "host=%s port=%s user=%s dbname=%s", PQhost(c.side), PQport(c.side),
             PQuser(c.side), PROF_DB);
    char err[1024] = "";
    if (qn_migrate(ci, 60000, NULL, err, sizeof err) != QN_OK)
        die("schema", err);
    /* the "outer call" shape of a bundle, for comparison (bundle16loop) */
    exec_or_die(c.side,
                "CREATE FUNCTION prof_push_loop(p_pids UUID[], p_counts INT4[], p_hashes BYTEA[], "
                "p_verified INT8[], p_blobs BYTEA[]) RETURNS TABLE (r_base INT8) "
                "LANGUAGE plpgsql AS $$ DECLARE x RECORD; BEGIN "
                "FOR i IN 1 .. cardinality(p_pids) LOOP "
                "SELECT * INTO x FROM qn.push_one_v1(p_pids[i], p_counts[i], p_hashes[i], "
                "p_verified[i], p_blobs[i]); "
                "IF x.r_status <> 0 THEN RAISE EXCEPTION 'not queued'; END IF; "
                "r_base := x.r_base; RETURN NEXT; END LOOP; END $$");
    c.wall = calloc((size_t)calls + 16, sizeof *c.wall);
    if (c.wall == NULL)
        die("out of memory", NULL);

    c.base = event_base_new();
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = ci;
    cfg.pool_size = 1;
    cfg.pipeline_depth = 1;
    cfg.write_reserve = 0;
    if (qn_store_new(c.base, &cfg, &c.st) != QN_OK)
        die("store", NULL);
    struct event *t = event_new(c.base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(t, &tv);
    int64_t end = qn_store_now_ms() + 10000;
    while (!qn_store_is_up(c.st) && qn_store_now_ms() < end)
        event_base_loop(c.base, EVLOOP_ONCE);
    if (!qn_store_is_up(c.st))
        die("store did not come up", NULL);
    if (track_top)
        session_sql(&c, "SET pg_stat_statements.track = 'top'");
    if (async_commit)
        session_sql(&c, "SET synchronous_commit = off");

    qn_zctx *z = NULL;
    qn_zctx_new(&z);
    struct seg s1, s100;
    if (make_seg(z, 1, 0, &s1) != QN_OK || make_seg(z, 100, 1, &s100) != QN_OK)
        die("segments", NULL);
    printf("bench_sqlprof: %d calls per scenario after %d warm-up calls; segments of 1 and 100 "
           "messages: %zu and %zu bytes\n",
           calls, warmup, s1.blob.len, s100.blob.len);

    if (wanted(only, "push1"))
        run_push(&c, "push1", "prof.push1", 1, &s1, calls, warmup, false);
    if (wanted(only, "push100"))
        run_push(&c, "push100", "prof.push100", 1, &s100, calls, warmup, false);
    if (wanted(only, "bundle16"))
        run_push(&c, "bundle16", "prof.bundle16", 16, &s100, calls, warmup, false);
    if (wanted(only, "bundle16x1"))
        run_push(&c, "bundle16x1", "prof.bundle16x1", 16, &s1, calls, warmup, false);
    if (only != NULL && strstr(only, "bundle16loop") != NULL)
        run_push(&c, "bundle16loop", "prof.bundle16loop", 16, &s100, calls, warmup, true);
    if (wanted(only, "pop") || wanted(only, "ack") || wanted(only, "renew")) {
        /* One partition per measured call, each holding one 100-message segment,
         * so that pops, renewals and acks can each be measured alone: pop every
         * partition (each lease kept, worker i), then renew every lease, then
         * ack every batch. Partition 0 takes the group's first contact. */
        int n = 1 + warmup + calls;
        struct target {
            char part[16], worker[40];
            uint8_t pid[16];
            int64_t last;
        } *tg = calloc((size_t)n, sizeof *tg);
        if (tg == NULL)
            die("out of memory", NULL);
        for (int i = 0; i < n; i += MAXP) {
            int k = n - i < MAXP ? n - i : MAXP;
            struct qn_push_segment segs[MAXP];
            for (int j = 0; j < k; j++) {
                snprintf(tg[i + j].part, sizeof tg[i + j].part, "p%d", i + j);
                snprintf(tg[i + j].worker, sizeof tg[i + j].worker, "0190a8f0-0000-7000-8000-%012d",
                         i + j);
                segs[j] = (struct qn_push_segment){.queue = "prof.pop",
                                                   .partition = tg[i + j].part,
                                                   .count = s100.count,
                                                   .hashes = s100.hashes,
                                                   .verified = INT64_MAX,
                                                   .blob = s100.blob.data,
                                                   .blob_len = s100.blob.len};
            }
            if (qn_store_push(c.st, segs, (size_t)k, false, NULL, push_done, &c, NULL) != QN_OK)
                die("push", NULL);
            wait_done(&c);
        }
        for (int i = 0; i < n; i++) {
            if (i == 1 + warmup)
                reset_stats(&c);
            double t0 = now_us();
            pop_one(&c, "prof.pop", tg[i].part, tg[i].worker);
            if (i > warmup)
                c.wall[c.nwall++] = now_us() - t0;
            memcpy(tg[i].pid, c.pid[0], 16);
            tg[i].last = c.pop_last;
        }
        flush_stats(&c);
        report(&c, "pop", calls, "qn.pop");
        for (int i = 0; i < n; i++) {
            if (i == 1 + warmup)
                reset_stats(&c);
            double t0 = now_us();
            renew_one(&c, tg[i].worker);
            if (i > warmup)
                c.wall[c.nwall++] = now_us() - t0;
        }
        flush_stats(&c);
        report(&c, "renew", calls, "renew_lease");
        for (int i = 0; i < n; i++) {
            if (i == 1 + warmup)
                reset_stats(&c);
            double t0 = now_us();
            ack_one(&c, tg[i].pid, tg[i].worker, tg[i].last);
            if (i > warmup)
                c.wall[c.nwall++] = now_us() - t0;
        }
        flush_stats(&c);
        report(&c, "ack", calls, "qn.ack");
        free(tg);
    }

    event_free(t);
    qn_store_free(c.st);
    PQfinish(c.side);
    qn_zctx_free(z);
    event_base_free(c.base);
    qn_buf_free(&s1.blob);
    qn_buf_free(&s100.blob);
    free(s1.hashes);
    free(s100.hashes);
    free(c.wall);
    return 0;
}
