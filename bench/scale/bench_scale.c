/*
 * bench/scale/bench_scale.c - Queen at a million partitions.
 *
 *   bench_scale --addr 127.0.0.1:6632 --pg "dbname=queen ..." --broker-pid PID
 *               [--layout one|many] [--partitions 1000000] [--queues 10000]
 *               [--per-queue 100] [--batch 5000] [--hot 16] [--rounds 200]
 *               [--prefix NAME] [--baseline HOST:PORT]
 *
 * Phases, in order, each printing key=value lines:
 *   1. hot_empty: push 1 message to one of --hot partitions of a fresh queue
 *      and pop it by partition name, then ack, --rounds times (latency p50/p99
 *      of Push and Pop) - the empty-database baseline.
 *   2. build: --layout one: --partitions partitions of one queue, one message
 *      each, --batch items per Push; --layout many: --queues queues of
 *      --per-queue partitions. Rate in partitions per second.
 *   3. hot_full: phase 1 again on the hot partitions of the big queue (one),
 *      or of the first queue (many).
 *   3b. settle, hot_settled (with --pg): VACUUM (ANALYZE) of the log tables
 *      and a CHECKPOINT (time), then phase 3 again.
 *   With --baseline (a second broker on its own empty database), every round
 *   of phases 3 and 3b is followed by one on an empty queue there, printed as
 *   hot_full_base / hot_settled_base: the two sides measured side by side.
 *   4. first_contact: one any-partition Pop of a new group (latency) and the
 *      cursor rows it registered (with --pg).
 *   5. any_1pct: the other groups deleted, a group that consumed everything
 *      (SeekConsumerGroup to the end), then one message pushed to 1 % of the
 *      partitions: --rounds
 *      any-partition Pops + Acks (Pop latency p50/p99/max) (layout one).
 *   6. maint (with --pg): the time of the maintenance procedures one cycle
 *      runs (worklists, partition cleanup step) at this size.
 *   6b. admin (with --pg): stats_v1, one stats walk step (stats_cached_v1),
 *      group_lags_v1 and group_lags_cached_v1 at this size.
 *   7. sizes (with --pg): table and index bytes per partition; broker RSS per
 *      partition seen (with --broker-pid).
 *   8. delete_queue (layout one): DeleteQueue of the big queue (time; the
 *      queue row must be gone).
 * The broker's own maintenance loop runs meanwhile on its timer; run on a
 * quiet machine (figures beside other work are noise). QN_SCALE_SLOW_MS=N
 * prints each hot call slower than N ms (stderr, with its wall-clock time);
 * QN_SCALE_PGSS=1 prints each hot phase's top statements (pg_stat_statements).
 */
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "queen/client.h"
#include "queen/error.h"
#include "queen/v1/admin.pb-c.h"
#include "queen/v1/queue.pb-c.h"

#define QSVC "/queen.v1.QueueService/"
#define ASVC "/queen.v1.AdminService/"
#define MAX_ROUNDS 100000

struct opts {
    const char *addr, *pg, *prefix, *baseline;
    bool many;
    long partitions, queues, per_queue;
    int batch, hot, rounds;
    long broker_pid;
};

static qn_client *C;
static PGconn *PG;

static double now_ms(void)
{
    return (double)qn_client_now_ns() / 1e6;
}

static void die(const char *what, const struct qn_client_status *st)
{
    fprintf(stderr, "bench_scale: %s: %s\n", what, st ? st->message : "");
    exit(1);
}

/* One unary call that must succeed; *resp to free. */
static ProtobufCMessage *call(const char *method, const ProtobufCMessage *req,
                              const ProtobufCMessageDescriptor *rd)
{
    struct qn_client_status st;
    struct qn_client_call_opts co = {.timeout_ms = 600000};
    ProtobufCMessage *resp = NULL;
    if (qn_client_unary(C, method, req, rd, &co, &resp, &st) != QN_OK || st.code != 0)
        die(method, &st);
    return resp;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_lat(const char *phase, const char *what, double *v, int n)
{
    if (n <= 0)
        return;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    printf("phase=%s op=%s n=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n", phase, what, n, v[n / 2],
           v[(int)((n - 1) * 0.99)], v[n - 1]);
}

static long rss_kb(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static double pg_ms(const char *sql, long *rows)
{
    double t0 = now_ms();
    PGresult *r = PQexec(PG, sql);
    double t = now_ms() - t0;
    if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "bench_scale: %s: %s", sql, PQerrorMessage(PG));
        exit(1);
    }
    if (rows != NULL)
        *rows = PQntuples(r) == 1 && PQnfields(r) == 1 ? atol(PQgetvalue(r, 0, 0)) : PQntuples(r);
    PQclear(r);
    return t;
}

/* Pushes one message to each of n partitions "<pfx><i>" (i from first) of
 * queue, batch items per call. */
static void push_spread(const char *queue, const char *pfx, long first, long n, int batch)
{
    Queen__V1__PushItem *items = calloc((size_t)batch, sizeof *items);
    Queen__V1__PushItem **ptr = calloc((size_t)batch, sizeof *ptr);
    char(*names)[32] = calloc((size_t)batch, 32);
    if (items == NULL || ptr == NULL || names == NULL)
        die("out of memory", NULL);
    static uint8_t payload[] = "{\"scale\":1}";
    for (long done = 0; done < n;) {
        int k = (int)(n - done < batch ? n - done : batch);
        for (int i = 0; i < k; i++) {
            queen__v1__push_item__init(&items[i]);
            snprintf(names[i], 32, "%s%ld", pfx, first + done + i);
            items[i].queue = (char *)queue;
            items[i].partition = names[i];
            items[i].payload.data = payload;
            items[i].payload.len = sizeof payload - 1;
            ptr[i] = &items[i];
        }
        Queen__V1__PushRequest req = QUEEN__V1__PUSH_REQUEST__INIT;
        req.n_items = (size_t)k;
        req.items = ptr;
        ProtobufCMessage *resp =
            call(QSVC "Push", &req.base, &queen__v1__push_response__descriptor);
        Queen__V1__PushResponse *r = (Queen__V1__PushResponse *)resp;
        for (size_t i = 0; i < r->n_results; i++)
            if (r->results[i]->status != QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED)
                die("push: an item was not queued", NULL);
        protobuf_c_message_free_unpacked(resp, NULL);
        done += k;
    }
    free(items);
    free(ptr);
    free(names);
}

/* Acks every message of a pop response (completed, under its lease). */
static void ack_all(const Queen__V1__PopResponse *p, const char *group)
{
    if (p->n_messages == 0)
        return;
    Queen__V1__AckItem *it = calloc(p->n_messages, sizeof *it);
    Queen__V1__AckItem **ip = calloc(p->n_messages, sizeof *ip);
    if (it == NULL || ip == NULL)
        die("out of memory", NULL);
    for (size_t i = 0; i < p->n_messages; i++) {
        queen__v1__ack_item__init(&it[i]);
        it[i].partition_id = p->messages[i]->partition_id;
        it[i].lease_id = p->messages[i]->lease_id;
        it[i].status = QUEEN__V1__ACK_STATUS__ACK_STATUS_COMPLETED;
        it[i].target_case = QUEEN__V1__ACK_ITEM__TARGET_OFFSET;
        it[i].offset = p->messages[i]->offset;
        ip[i] = &it[i];
    }
    Queen__V1__AckRequest req = QUEEN__V1__ACK_REQUEST__INIT;
    req.consumer_group = (char *)group;
    req.n_items = p->n_messages;
    req.items = ip;
    protobuf_c_message_free_unpacked(
        call(QSVC "Ack", &req.base, &queen__v1__ack_response__descriptor), NULL);
    free(it);
    free(ip);
}

static Queen__V1__PopResponse *pop(const char *queue, const char *part, const char *group,
                                   double *ms)
{
    Queen__V1__PopRequest req = QUEEN__V1__POP_REQUEST__INIT;
    req.queue = (char *)queue;
    req.partition = (char *)(part ? part : "");
    req.consumer_group = (char *)group;
    req.batch = 1;
    double t0 = now_ms();
    ProtobufCMessage *r = call(QSVC "Pop", &req.base, &queen__v1__pop_response__descriptor);
    *ms = now_ms() - t0;
    return (Queen__V1__PopResponse *)r;
}

/* QN_SCALE_SLOW_MS=N: every hot call slower than N ms is printed to stderr with
 * its wall-clock time, to line it up with what else ran then (pg_stat_activity
 * samples, the server log). */
static void report_slow(const char *phase, const char *op, int round, double ms)
{
    static double slow = -1;
    if (slow < 0) {
        const char *e = getenv("QN_SCALE_SLOW_MS");
        slow = e && *e ? atof(e) : 0;
    }
    if (slow <= 0 || ms < slow)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(stderr, "slow phase=%s op=%s round=%d ms=%.2f at=%lld.%03ld\n", phase, op, round, ms,
            (long long)ts.tv_sec, ts.tv_nsec / 1000000);
}

/* QN_SCALE_PGSS=1 (with --pg, on a server with pg_stat_statements loaded,
 * track = all): the statements of each hot phase, from a reset before it, by
 * total execution time: where the server's time per call goes at this size. */
static bool pgss(void)
{
    const char *e = getenv("QN_SCALE_PGSS");
    return PG != NULL && e != NULL && strcmp(e, "1") == 0;
}

static void pgss_print(const char *phase)
{
    PGresult *r = PQexec(PG, "SELECT calls, mean_exec_time, stddev_exec_time, max_exec_time, "
                             "shared_blks_hit::float8 / greatest(calls, 1), "
                             "shared_blks_read::float8 / greatest(calls, 1), "
                             "regexp_replace(left(query, 60), '\\s+', ' ', 'g') "
                             "FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' "
                             "ORDER BY total_exec_time DESC LIMIT 8");
    for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++)
        printf("phase=%s pgss calls=%s mean_ms=%.3f stddev_ms=%.3f max_ms=%.2f hit=%.1f read=%.2f "
               "q=\"%s\"\n",
               phase, PQgetvalue(r, i, 0), atof(PQgetvalue(r, i, 1)), atof(PQgetvalue(r, i, 2)),
               atof(PQgetvalue(r, i, 3)), atof(PQgetvalue(r, i, 4)), atof(PQgetvalue(r, i, 5)),
               PQgetvalue(r, i, 6));
    PQclear(r);
}

/* One hot round on C: push to hot partition i % hot, pop it by name, ack. */
static void hot_round(const char *phase, const char *queue, int i, const struct opts *o,
                      double *push_ms, double *pop_ms)
{
    char part[32];
    snprintf(part, sizeof part, "hot%d", i % o->hot);
    double t0 = now_ms();
    push_spread(queue, "hot", i % o->hot, 1, 1);
    *push_ms = now_ms() - t0;
    report_slow(phase, "push", i, *push_ms);
    Queen__V1__PopResponse *p = pop(queue, part, "hot", pop_ms);
    report_slow(phase, "pop", i, *pop_ms);
    ack_all(p, "hot");
    protobuf_c_message_free_unpacked(&p->base, NULL);
}

/* Phase 1 / 3: o->rounds hot rounds on queue; latencies. With a baseline
 * broker (--baseline: its own empty database), each round is followed by one
 * on base_queue there, printed as "<phase>_base": both sides then see the same
 * machine (other tenants, kernel threads) at the same moments, which separate
 * runs on a shared 2-core machine do not. */
static void hot(const char *phase, const char *queue, const struct opts *o, qn_client *base,
                const char *base_queue)
{
    if (pgss())
        pg_ms("SELECT pg_stat_statements_reset()", NULL);
    size_t n = (size_t)o->rounds;
    double *v = calloc(4 * n, sizeof *v);
    if (v == NULL)
        die("out of memory", NULL);
    double *pl = v, *ol = v + n, *bpl = v + 2 * n, *bol = v + 3 * n;
    char bphase[64];
    snprintf(bphase, sizeof bphase, "%s_base", phase);
    qn_client *own = C;
    for (int i = 0; i < o->rounds; i++) {
        hot_round(phase, queue, i, o, &pl[i], &ol[i]);
        if (base != NULL) {
            C = base;
            hot_round(bphase, base_queue, i, o, &bpl[i], &bol[i]);
            C = own;
        }
    }
    print_lat(phase, "push", pl, o->rounds);
    print_lat(phase, "pop", ol, o->rounds);
    if (base != NULL) {
        print_lat(bphase, "push", bpl, o->rounds);
        print_lat(bphase, "pop", bol, o->rounds);
    }
    if (pgss())
        pgss_print(phase);
    free(v);
}

int main(int argc, char **argv)
{
    struct opts o = {.addr = "127.0.0.1:6632",
                     .prefix = "scale",
                     .partitions = 1000000,
                     .queues = 10000,
                     .per_queue = 100,
                     .batch = 5000,
                     .hot = 16,
                     .rounds = 200};
    static const struct option lo[] = {{"addr", required_argument, NULL, 'a'},
                                       {"pg", required_argument, NULL, 'g'},
                                       {"prefix", required_argument, NULL, 'x'},
                                       {"layout", required_argument, NULL, 'l'},
                                       {"partitions", required_argument, NULL, 'n'},
                                       {"queues", required_argument, NULL, 'q'},
                                       {"per-queue", required_argument, NULL, 'r'},
                                       {"batch", required_argument, NULL, 'b'},
                                       {"hot", required_argument, NULL, 'h'},
                                       {"rounds", required_argument, NULL, 'R'},
                                       {"broker-pid", required_argument, NULL, 'B'},
                                       {"baseline", required_argument, NULL, 'E'},
                                       {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        bool num = optarg && end != optarg && *end == '\0';
        switch (ch) {
        case 'a':
            o.addr = optarg;
            break;
        case 'g':
            o.pg = optarg;
            break;
        case 'x':
            o.prefix = optarg;
            break;
        case 'E':
            o.baseline = optarg;
            break;
        case 'l':
            if (strcmp(optarg, "one") != 0 && strcmp(optarg, "many") != 0) {
                fprintf(stderr, "bench_scale: --layout one|many\n");
                return 2;
            }
            o.many = strcmp(optarg, "many") == 0;
            break;
        case 'n':
        case 'q':
        case 'r':
        case 'b':
        case 'h':
        case 'R':
        case 'B':
            if (!num || v < 1 || v > 100000000) {
                fprintf(stderr, "bench_scale: numeric options want 1..100000000\n");
                return 2;
            }
            if (ch == 'n')
                o.partitions = v;
            else if (ch == 'q')
                o.queues = v;
            else if (ch == 'r')
                o.per_queue = v;
            else if (ch == 'b')
                o.batch = (int)(v > 100000 ? 100000 : v);
            else if (ch == 'h')
                o.hot = (int)(v > 1000 ? 1000 : v);
            else if (ch == 'R')
                o.rounds = (int)(v > MAX_ROUNDS ? MAX_ROUNDS : v);
            else
                o.broker_pid = v;
            break;
        default:
            fprintf(stderr, "usage: bench_scale --addr A [--pg CONNINFO] [--broker-pid PID] "
                            "[--layout one|many] [--partitions N] [--queues Q] [--per-queue P] "
                            "[--batch B] [--hot H] [--rounds R] [--prefix NAME] [--baseline A]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* each phase as it ends */
    struct qn_client_config cfg = {.target = o.addr};
    struct qn_client_status st;
    if (qn_client_dial(&cfg, &C, &st) != QN_OK)
        die("dial", &st);
    qn_client *B = NULL; /* --baseline: a broker on an empty database */
    if (o.baseline != NULL) {
        struct qn_client_config bc = {.target = o.baseline};
        if (qn_client_dial(&bc, &B, &st) != QN_OK)
            die("dial --baseline", &st);
    }
    if (o.pg != NULL) {
        PG = PQconnectdb(o.pg);
        if (PQstatus(PG) != CONNECTION_OK) {
            fprintf(stderr, "bench_scale: --pg: %s", PQerrorMessage(PG));
            return 1;
        }
    }
    char base[128], big[160];
    snprintf(base, sizeof base, "%s-%ld", o.prefix, (long)(qn_client_now_ns() / 1000000000u));
    long total = o.many ? o.queues * o.per_queue : o.partitions;
    long rss0 = o.broker_pid ? rss_kb(o.broker_pid) : -1;
    printf("layout=%s partitions=%ld queues=%ld batch=%d hot=%d rounds=%d\n",
           o.many ? "many" : "one", total, o.many ? o.queues : 1, o.batch, o.hot, o.rounds);

    /* 1. hot subset on an empty queue */
    char empty[160];
    snprintf(empty, sizeof empty, "%s.empty", base);
    hot("hot_empty", empty, &o, NULL, NULL);

    /* 2. build */
    snprintf(big, sizeof big, "%s.big", base);
    double t0 = now_ms();
    if (!o.many) {
        push_spread(big, "p", 0, o.partitions, o.batch);
    } else {
        for (long q = 0; q < o.queues; q++) {
            char name[160];
            snprintf(name, sizeof name, "%s.q%ld", base, q);
            push_spread(name, "p", 0, o.per_queue, o.batch);
        }
        snprintf(big, sizeof big, "%s.q0", base);
    }
    double build_s = (now_ms() - t0) / 1000;
    printf("phase=build partitions=%ld seconds=%.1f partitions_per_s=%.0f\n", total, build_s,
           total / build_s);

    /* 3. hot subset again, inside the big queue; with --pg, once more after
     * the build's dead tuples and dirty pages are gone (3b): right after the
     * build, autovacuum and the checkpoint it set off still run beside the
     * hot calls, which is the build's cost, not the size's */
    hot("hot_full", big, &o, B, empty);
    if (PG != NULL) {
        double s0 = now_ms();
        static const char *const settle[] = {
            "VACUUM (ANALYZE) queen.log_partitions", "VACUUM (ANALYZE) queen.log_segments",
            "VACUUM (ANALYZE) queen.log_txns",       "VACUUM (ANALYZE) qn.partition_pending",
            "VACUUM (ANALYZE) queen.log_consumers",  "CHECKPOINT"};
        for (size_t i = 0; i < sizeof settle / sizeof settle[0]; i++) {
            PGresult *r = PQexec(PG, settle[i]);
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                fprintf(stderr, "bench_scale: %s: %s", settle[i], PQerrorMessage(PG));
            PQclear(r);
        }
        printf("phase=settle seconds=%.1f\n", (now_ms() - s0) / 1000);
        hot("hot_settled", big, &o, B, empty);
    }

    /* 4. first contact of a new group */
    double ms;
    Queen__V1__PopResponse *p = pop(big, NULL, "first", &ms);
    ack_all(p, "first");
    protobuf_c_message_free_unpacked(&p->base, NULL);
    printf("phase=first_contact pop_ms=%.2f", ms);
    if (PG != NULL) {
        char sql[512];
        long rows = 0;
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id "
                 "= c.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '%s' "
                 "AND c.consumer_group = 'first'",
                 big);
        pg_ms(sql, &rows);
        printf(" cursor_rows=%ld", rows);
    }
    printf("\n");

    /* 5. any-partition pops when 1 % of the partitions hold data */
    if (!o.many) {
        /* only this group reads the queue now: the others (hot, first) go */
        static const char *gone[] = {"hot", "first"};
        for (size_t i = 0; i < 2; i++) {
            Queen__V1__DeleteConsumerGroupRequest dg =
                QUEEN__V1__DELETE_CONSUMER_GROUP_REQUEST__INIT;
            dg.consumer_group = (char *)gone[i];
            dg.queue = big;
            dg.delete_metadata = true;
            protobuf_c_message_free_unpacked(
                call(ASVC "DeleteConsumerGroup", &dg.base,
                     &queen__v1__delete_consumer_group_response__descriptor),
                NULL);
        }
        Queen__V1__SeekConsumerGroupRequest sk = QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__INIT;
        sk.consumer_group = "pct";
        sk.queue = big;
        sk.target_case = QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__TARGET_TO_END;
        sk.to_end = true;
        t0 = now_ms();
        protobuf_c_message_free_unpacked(call(ASVC "SeekConsumerGroup", &sk.base,
                                              &queen__v1__seek_consumer_group_response__descriptor),
                                         NULL);
        printf("phase=seek_to_end ms=%.0f\n", now_ms() - t0);
        /* register the group before the new data, so its subscription is "all" */
        p = pop(big, NULL, "pct", &ms);
        protobuf_c_message_free_unpacked(&p->base, NULL);
        long n = o.partitions / 100;
        for (long i = 0; i < n; i++)
            push_spread(big, "p", i * 100 + 37, 1, 1);
        double *lat = calloc((size_t)o.rounds, sizeof *lat);
        int got = 0, empty_pops = 0;
        for (int i = 0; i < o.rounds && lat != NULL; i++) {
            p = pop(big, NULL, "pct", &lat[i]);
            got += p->n_messages > 0;
            empty_pops += p->n_messages == 0;
            ack_all(p, "pct");
            protobuf_c_message_free_unpacked(&p->base, NULL);
        }
        print_lat("any_1pct", "pop", lat, lat ? o.rounds : 0);
        printf("phase=any_1pct with_data=%ld pops_with_a_message=%d empty_pops=%d\n", n, got,
               empty_pops);
        free(lat);
    }

    /* 6. maintenance procedures at this size */
    if (PG != NULL) {
        long r1 = 0, r2 = 0, r3 = 0;
        double w1 = pg_ms("SELECT count(*) FROM qn.maint_worklist_v1(now(), 1::INT2, 5000)", &r1);
        double w2 = pg_ms("SELECT count(*) FROM qn.maint_worklist_v1(now(), 2::INT2, 5000)", &r2);
        double cl = pg_ms("SELECT count(*) FROM qn.partition_cleanup_step_v1(now() - interval "
                          "'7 days', 1000)",
                          &r3);
        printf("phase=maint worklist_retention_ms=%.1f worklist_sidecar_ms=%.1f "
               "cleanup_step_ms=%.1f\n",
               w1, w2, cl);
    }

    /* 6b. the admin reads at this size: the whole per-queue aggregate
     * (stats_v1, what the metrics refresh ran), one step of the stats walk the
     * refresh runs now (stats_cached_v1, 100,000 partitions), and the groups'
     * lag per queue, whole (group_lags_v1) and from the walk's last pass */
    if (PG != NULL) {
        long r1 = 0, r2 = 0, r3 = 0, r4 = 0;
        double whole = pg_ms("SELECT count(*) FROM qn.stats_v1(NULL)", &r1);
        double sc = pg_ms("SELECT count(*) FROM qn.stats_cached_v1("
                          "'00000000-0000-0000-0000-000000000001', 100000)",
                          &r2);
        double gl = pg_ms("SELECT count(*) FROM qn.group_lags_v1()", &r3);
        double gc = pg_ms("SELECT count(*) FROM qn.group_lags_cached_v1()", &r4);
        printf("phase=admin stats_ms=%.1f stats_step_ms=%.1f group_lags_ms=%.1f "
               "group_lags_cached_ms=%.1f\n",
               whole, sc, gl, gc);
    }

    /* 7. sizes */
    if (PG != NULL) {
        static const char *rels[] = {"queen.log_partitions", "queen.log_consumers",
                                     "queen.log_segments", "queen.log_txns",
                                     "qn.partition_pending"};
        for (size_t i = 0; i < sizeof rels / sizeof *rels; i++) {
            char sql[256];
            long tb = 0, ib = 0;
            snprintf(sql, sizeof sql, "SELECT pg_table_size('%s')", rels[i]);
            pg_ms(sql, &tb);
            snprintf(sql, sizeof sql, "SELECT pg_indexes_size('%s')", rels[i]);
            pg_ms(sql, &ib);
            printf("phase=sizes table=%s table_bytes_per_partition=%.1f "
                   "index_bytes_per_partition=%.1f\n",
                   rels[i], (double)tb / (double)total, (double)ib / (double)total);
        }
    }
    if (o.broker_pid) {
        long rss1 = rss_kb(o.broker_pid);
        printf("phase=rss before_kb=%ld after_kb=%ld bytes_per_partition=%.1f\n", rss0, rss1,
               rss0 >= 0 && rss1 >= 0 ? 1024.0 * (double)(rss1 - rss0) / (double)total : NAN);
    }
    /* 8. DeleteQueue of the big queue (layout one): the call's time, and
     * whether the queue is gone */
    if (!o.many) {
        Queen__V1__DeleteQueueRequest dq = QUEEN__V1__DELETE_QUEUE_REQUEST__INIT;
        dq.queue = big;
        double d0 = now_ms();
        protobuf_c_message_free_unpacked(
            call(ASVC "DeleteQueue", &dq.base, &queen__v1__delete_queue_response__descriptor),
            NULL);
        double dms = now_ms() - d0;
        long left = -1;
        if (PG != NULL) {
            char sql[256];
            snprintf(sql, sizeof sql, "SELECT count(*) FROM queen.queues WHERE name = '%s'", big);
            pg_ms(sql, &left);
        }
        printf("phase=delete_queue ms=%.0f queue_rows_left=%ld\n", dms, left);
    }
    if (PG != NULL)
        PQfinish(PG);
    qn_client_free(C);
    qn_client_free(B);
    return 0;
}
