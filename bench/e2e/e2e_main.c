/*
 * e2e_main.c - bench_e2e: command line, modes and result lines.
 *
 *   bench_e2e push|consume|e2e|soak|matrix|make-body|stats [options]
 *
 * Does: option parsing and validation, one function per mode, result lines
 * (one per measured cell, fixed key=value format so they can be grepped and
 * pasted), GetStats before/after, queue cleanup.
 * Does not: talk to the network itself (e2e_run.c) or build payloads
 * (e2e_payload.c).
 * Invariants:
 *   1. a queue is deleted at the end only when this run made up its name.
 *   2. every result line carries its cell (mode, batch, parts, payload).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "queen/client.h"
#include "e2e_run.h"
#include "queen/error.h"

#define MAX_LIST 8

struct cli {
    struct e2e_opts o;
    const char *mode;
    const char *out; /* make-body */
    unsigned batches[MAX_LIST];
    unsigned nbatches;
    unsigned parts[MAX_LIST];
    unsigned nparts;
    enum e2e_payload_kind kinds[2];
    unsigned nkinds;
    bool ph_push, ph_consume, ph_e2e; /* matrix phases */
    double rate_set;                  /* --rate given */
    bool rate_given;
    bool duration_given;
    bool inflight_given;
    double e2e_load;       /* matrix e2e phase: fraction of the measured rate */
    uint64_t total_pushed; /* over all cells, to compare with GetStats */
    uint64_t total_consumed;
    char addr[300];
};

static void usage(FILE *f)
{
    fputs(
        "usage: bench_e2e MODE [options]\n"
        "modes:\n"
        "  push       push for --duration (closed loop with --inflight requests, or --rate msg/s)\n"
        "  consume    pop+ack (or --consume-api stream); without --queue, fills a fresh queue "
        "first\n"
        "  e2e        push and consume at once; latency = push send -> consumer receipt\n"
        "  soak       push at --rate (default 200000) for --duration (default 300 s) with "
        "consumers,\n"
        "             printing pushed/consumed/backlog every --report seconds\n"
        "  matrix     every cell of --batches x --parts-list x --payloads, phases --phases\n"
        "  make-body  write a gRPC-framed PushRequest (no transaction ids) to --out, for h2load\n"
        "  stats      print AdminService.GetStats counters\n"
        "  delete     delete --queue (AdminService.DeleteQueue)\n"
        "options (defaults in brackets):\n"
        "  --addr HOST:PORT [127.0.0.1:6632]   --tls   --ca FILE (verify; without it TLS is "
        "unverified)\n"
        "  --queue NAME [fresh per run/cell]   --group NAME [\"\" = queue mode]\n"
        "  --partitions N [16]  --batch N [100]  --payload json|random [json]  --size BYTES [256]\n"
        "  --connections N [2] (producers; consumers get as many more)\n"
        "  --inflight N [64; cap 256 with --rate]  --duration S [10]\n"
        "  --warmup S [0]: latencies of what was sent in a phase's first S seconds are not "
        "counted\n"
        "  --rate MSG/S [0 = closed loop]\n"
        "  --consumers N [16]  --pop-batch N [1000]  --pop-wait-ms MS [1000]  --pop-partitions N "
        "[1]\n"
        "  --ack each|last [each]  --consume-api pop|stream [pop]  --credits N [2]\n"
        "  --txn (unique transaction ids)  --spread (one request's items over all partitions)\n"
        "  --encrypted (queues configured with encryption_enabled; the broker needs\n"
        "             QUEEN_ENCRYPTION_KEYRING)  --token TOKEN (bearer token, QUEEN_AUTH=jwt)\n"
        "  --batches 1,100,1000  --parts-list 1,16,256  --payloads json,random\n"
        "  --phases push,consume,e2e [all]  --report S [10]  --drain S [30]  --keep  --quiet\n"
        "  --e2e-load F [0.5]: matrix e2e phase pushes at F x min(push, pop+ack msg/s) measured\n"
        "             in the same cell (0 or no push/consume phase: closed loop, or --rate)\n"
        "  --out FILE (make-body)\n"
        "  --broker-pid PID  --pg-pid POSTMASTER_PID: whose CPU the result lines report\n"
        "             (default: every process named queen-broker / postgres)\n",
        f);
}

static bool parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
    if (s == NULL || *s == '\0')
        return false;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < (long)lo || v > (long)hi)
        return false;
    *out = (unsigned)v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out)
{
    if (s == NULL || *s == '\0')
        return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Splits *cur at the next comma: returns the token and advances *cur past it;
 * NULL when nothing is left. */
static char *next_token(char **cur)
{
    char *t = *cur;
    if (t == NULL || *t == '\0')
        return NULL;
    char *comma = strchr(t, ',');
    if (comma != NULL) {
        *comma = '\0';
        *cur = comma + 1;
    } else {
        *cur = t + strlen(t);
    }
    return t;
}

static bool parse_list(const char *s, unsigned lo, unsigned hi, unsigned *out, unsigned *n)
{
    char buf[256];
    if (strlen(s) >= sizeof buf)
        return false;
    memcpy(buf, s, strlen(s) + 1);
    *n = 0;
    char *cur = buf;
    for (char *t = next_token(&cur); t != NULL; t = next_token(&cur)) {
        if (*n >= MAX_LIST || !parse_uint(t, lo, hi, &out[*n]))
            return false;
        (*n)++;
    }
    return *n > 0;
}

static bool parse_addr(struct cli *c, const char *s)
{
    if (strlen(s) >= sizeof c->addr)
        return false;
    memcpy(c->addr, s, strlen(s) + 1);
    char *colon = strrchr(c->addr, ':');
    if (colon == NULL || colon == c->addr || colon[1] == '\0')
        return false;
    *colon = '\0';
    char *host = c->addr;
    if (host[0] == '[' && colon[-1] == ']') { /* [::1]:6632 */
        host++;
        colon[-1] = '\0';
    }
    unsigned port;
    if (!parse_uint(colon + 1, 1, 65535, &port))
        return false;
    c->o.host = host;
    c->o.port = colon + 1;
    return true;
}

enum {
    OPT_ADDR = 256,
    OPT_TLS,
    OPT_CA,
    OPT_QUEUE,
    OPT_GROUP,
    OPT_PARTITIONS,
    OPT_BATCH,
    OPT_PAYLOAD,
    OPT_SIZE,
    OPT_CONNECTIONS,
    OPT_INFLIGHT,
    OPT_DURATION,
    OPT_WARMUP,
    OPT_RATE,
    OPT_CONSUMERS,
    OPT_POP_BATCH,
    OPT_POP_WAIT,
    OPT_POP_PARTS,
    OPT_ACK,
    OPT_API,
    OPT_CREDITS,
    OPT_TXN,
    OPT_ENCRYPTED,
    OPT_TOKEN,
    OPT_SPREAD,
    OPT_BATCHES,
    OPT_PARTS_LIST,
    OPT_PAYLOADS,
    OPT_PHASES,
    OPT_REPORT,
    OPT_DRAIN,
    OPT_KEEP,
    OPT_QUIET,
    OPT_OUT,
    OPT_E2E_LOAD,
    OPT_BROKER_PID,
    OPT_PG_PID,
    OPT_HELP,
};

static const struct option long_opts[] = {
    {"addr", required_argument, NULL, OPT_ADDR},
    {"tls", no_argument, NULL, OPT_TLS},
    {"ca", required_argument, NULL, OPT_CA},
    {"queue", required_argument, NULL, OPT_QUEUE},
    {"group", required_argument, NULL, OPT_GROUP},
    {"partitions", required_argument, NULL, OPT_PARTITIONS},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"payload", required_argument, NULL, OPT_PAYLOAD},
    {"size", required_argument, NULL, OPT_SIZE},
    {"connections", required_argument, NULL, OPT_CONNECTIONS},
    {"inflight", required_argument, NULL, OPT_INFLIGHT},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"rate", required_argument, NULL, OPT_RATE},
    {"consumers", required_argument, NULL, OPT_CONSUMERS},
    {"pop-batch", required_argument, NULL, OPT_POP_BATCH},
    {"pop-wait-ms", required_argument, NULL, OPT_POP_WAIT},
    {"pop-partitions", required_argument, NULL, OPT_POP_PARTS},
    {"ack", required_argument, NULL, OPT_ACK},
    {"consume-api", required_argument, NULL, OPT_API},
    {"credits", required_argument, NULL, OPT_CREDITS},
    {"txn", no_argument, NULL, OPT_TXN},
    {"encrypted", no_argument, NULL, OPT_ENCRYPTED},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"spread", no_argument, NULL, OPT_SPREAD},
    {"batches", required_argument, NULL, OPT_BATCHES},
    {"parts-list", required_argument, NULL, OPT_PARTS_LIST},
    {"payloads", required_argument, NULL, OPT_PAYLOADS},
    {"phases", required_argument, NULL, OPT_PHASES},
    {"report", required_argument, NULL, OPT_REPORT},
    {"drain", required_argument, NULL, OPT_DRAIN},
    {"keep", no_argument, NULL, OPT_KEEP},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"out", required_argument, NULL, OPT_OUT},
    {"e2e-load", required_argument, NULL, OPT_E2E_LOAD},
    {"broker-pid", required_argument, NULL, OPT_BROKER_PID},
    {"pg-pid", required_argument, NULL, OPT_PG_PID},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int bad(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "bench_e2e: --%s %s: expected %s\n", opt, val != NULL ? val : "", want);
    return 2;
}

/* Returns 0, or an exit status. */
static int parse(struct cli *c, int argc, char **argv)
{
    struct e2e_opts *o = &c->o;
    o->host = "127.0.0.1";
    o->port = "6632";
    o->group = "";
    o->partitions = 16;
    o->batch = 100;
    o->payload = E2E_PAYLOAD_JSON;
    o->size = 256;
    o->connections = 2;
    o->inflight = 64;
    o->duration_s = 10;
    o->consumers = 16;
    o->pop_batch = 1000;
    o->pop_wait_ms = 1000;
    o->pop_partitions = 1;
    o->ack_mode = E2E_ACK_EACH;
    o->consume_api = E2E_CONSUME_POP;
    o->credits = 2;
    o->report_s = 10;
    o->drain_s = 30;
    o->max_msg = 64u * 1024u * 1024u;
    c->batches[0] = 1, c->batches[1] = 100, c->batches[2] = 1000, c->nbatches = 3;
    c->parts[0] = 1, c->parts[1] = 16, c->parts[2] = 256, c->nparts = 3;
    c->kinds[0] = E2E_PAYLOAD_JSON, c->kinds[1] = E2E_PAYLOAD_RANDOM, c->nkinds = 2;
    c->ph_push = c->ph_consume = c->ph_e2e = true;
    c->e2e_load = 0.5;

    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        exit(0);
    }
    if (argc < 2 || argv[1][0] == '-') {
        usage(stderr);
        return 2;
    }
    c->mode = argv[1];
    optind = 2;
    int ch;
    unsigned u;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        const char *name = NULL;
        for (const struct option *lo = long_opts; lo->name != NULL; lo++)
            if (lo->val == ch)
                name = lo->name;
        switch (ch) {
        case OPT_ADDR:
            if (!parse_addr(c, optarg))
                return bad(name, optarg, "HOST:PORT");
            break;
        case OPT_TLS:
            o->tls = true;
            break;
        case OPT_CA:
            o->ca = optarg;
            break;
        case OPT_QUEUE:
            if (strlen(optarg) == 0 || strlen(optarg) > 255)
                return bad(name, optarg, "a name of 1 to 255 bytes");
            o->queue = optarg;
            break;
        case OPT_GROUP:
            o->group = optarg;
            break;
        case OPT_PARTITIONS:
            if (!parse_uint(optarg, 1, 100000, &o->partitions))
                return bad(name, optarg, "1..100000");
            c->parts[0] = o->partitions, c->nparts = 1;
            break;
        case OPT_BATCH:
            if (!parse_uint(optarg, 1, 100000, &o->batch))
                return bad(name, optarg, "1..100000");
            c->batches[0] = o->batch, c->nbatches = 1;
            break;
        case OPT_PAYLOAD:
            if (!e2e_payload_kind_parse(optarg, &o->payload))
                return bad(name, optarg, "json or random");
            c->kinds[0] = o->payload, c->nkinds = 1;
            break;
        case OPT_SIZE:
            if (!parse_uint(optarg, E2E_PAYLOAD_MIN, 16u * 1024u * 1024u, &u))
                return bad(name, optarg, "24..16777216 bytes");
            o->size = u;
            break;
        case OPT_CONNECTIONS:
            if (!parse_uint(optarg, 1, 1024, &o->connections))
                return bad(name, optarg, "1..1024");
            break;
        case OPT_INFLIGHT:
            if (!parse_uint(optarg, 1, 100000, &o->inflight))
                return bad(name, optarg, "1..100000");
            c->inflight_given = true;
            break;
        case OPT_DURATION:
            if (!parse_double(optarg, 0.1, 7 * 86400, &o->duration_s))
                return bad(name, optarg, "seconds, 0.1 .. 604800");
            c->duration_given = true;
            break;
        case OPT_WARMUP:
            if (!parse_double(optarg, 0, 3600, &o->warmup_s))
                return bad(name, optarg, "seconds, 0 .. 3600");
            break;
        case OPT_RATE:
            if (!parse_double(optarg, 0, 1e9, &o->rate))
                return bad(name, optarg, "messages per second, 0 .. 1e9");
            c->rate_given = true;
            break;
        case OPT_CONSUMERS:
            if (!parse_uint(optarg, 0, 10000, &o->consumers))
                return bad(name, optarg, "0..10000");
            break;
        case OPT_POP_BATCH:
            if (!parse_uint(optarg, 1, 1000000, &o->pop_batch))
                return bad(name, optarg, "1..1000000");
            break;
        case OPT_POP_WAIT:
            if (!parse_uint(optarg, 0, 60000, &o->pop_wait_ms))
                return bad(name, optarg, "0..60000");
            break;
        case OPT_POP_PARTS:
            if (!parse_uint(optarg, 1, 100000, &o->pop_partitions))
                return bad(name, optarg, "1..100000");
            break;
        case OPT_ACK:
            if (strcmp(optarg, "each") == 0)
                o->ack_mode = E2E_ACK_EACH;
            else if (strcmp(optarg, "last") == 0)
                o->ack_mode = E2E_ACK_LAST;
            else
                return bad(name, optarg, "each or last");
            break;
        case OPT_API:
            if (strcmp(optarg, "pop") == 0)
                o->consume_api = E2E_CONSUME_POP;
            else if (strcmp(optarg, "stream") == 0)
                o->consume_api = E2E_CONSUME_STREAM;
            else
                return bad(name, optarg, "pop or stream");
            break;
        case OPT_CREDITS:
            if (!parse_uint(optarg, 1, 1000, &o->credits))
                return bad(name, optarg, "1..1000");
            break;
        case OPT_TXN:
            o->txn = true;
            break;
        case OPT_ENCRYPTED:
            o->encrypted = true;
            break;
        case OPT_TOKEN:
            o->token = optarg;
            break;
        case OPT_SPREAD:
            o->spread = true;
            break;
        case OPT_BATCHES:
            if (!parse_list(optarg, 1, 100000, c->batches, &c->nbatches))
                return bad(name, optarg, "a comma-separated list of 1..100000 (at most 8)");
            break;
        case OPT_PARTS_LIST:
            if (!parse_list(optarg, 1, 100000, c->parts, &c->nparts))
                return bad(name, optarg, "a comma-separated list of 1..100000 (at most 8)");
            break;
        case OPT_PAYLOADS: {
            char buf[64];
            if (strlen(optarg) >= sizeof buf)
                return bad(name, optarg, "json,random");
            memcpy(buf, optarg, strlen(optarg) + 1);
            c->nkinds = 0;
            char *cur = buf;
            for (char *t = next_token(&cur); t != NULL; t = next_token(&cur))
                if (c->nkinds >= 2 || !e2e_payload_kind_parse(t, &c->kinds[c->nkinds++]))
                    return bad(name, optarg, "json, random or json,random");
            if (c->nkinds == 0)
                return bad(name, optarg, "json, random or json,random");
            break;
        }
        case OPT_PHASES: {
            char buf[64];
            if (strlen(optarg) >= sizeof buf)
                return bad(name, optarg, "push,consume,e2e");
            memcpy(buf, optarg, strlen(optarg) + 1);
            c->ph_push = c->ph_consume = c->ph_e2e = false;
            char *cur = buf;
            for (char *t = next_token(&cur); t != NULL; t = next_token(&cur)) {
                if (strcmp(t, "push") == 0)
                    c->ph_push = true;
                else if (strcmp(t, "consume") == 0)
                    c->ph_consume = true;
                else if (strcmp(t, "e2e") == 0)
                    c->ph_e2e = true;
                else
                    return bad(name, optarg, "a list of push, consume, e2e");
            }
            break;
        }
        case OPT_REPORT:
            if (!parse_double(optarg, 0.1, 86400, &o->report_s))
                return bad(name, optarg, "seconds, 0.1 .. 86400");
            break;
        case OPT_DRAIN:
            if (!parse_double(optarg, 0, 86400, &o->drain_s))
                return bad(name, optarg, "seconds, 0 .. 86400");
            break;
        case OPT_KEEP:
            o->keep = true;
            break;
        case OPT_QUIET:
            o->quiet = true;
            break;
        case OPT_OUT:
            c->out = optarg;
            break;
        case OPT_BROKER_PID:
        case OPT_PG_PID:
            if (!parse_uint(optarg, 1, INT_MAX, &u))
                return bad(name, optarg, "a process id");
            *(ch == OPT_BROKER_PID ? &o->broker_pid : &o->pg_pid) = (int)u;
            break;
        case OPT_E2E_LOAD:
            if (!parse_double(optarg, 0, 1, &c->e2e_load))
                return bad(name, optarg, "a fraction 0 .. 1 (0 = closed loop)");
            break;
        case OPT_HELP:
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench_e2e: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (o->ca != NULL && !o->tls) {
        fprintf(stderr, "bench_e2e: --ca needs --tls\n");
        return 2;
    }
    if (strcmp(c->mode, "soak") == 0) {
        if (!c->rate_given)
            o->rate = 200000;
        if (!c->duration_given)
            o->duration_s = 300;
    }
    /* Open loop: --inflight is only a safety cap, so make it roomy. */
    if (o->rate > 0 && !c->inflight_given)
        o->inflight = 256;
    return 0;
}

/* ---------------------------------------------------------------- results */

static double ms(uint64_t us)
{
    return (double)us / 1000.0;
}

static double per_s(uint64_t n, uint64_t from_ns, uint64_t to_ns)
{
    if (to_ns <= from_ns)
        return 0;
    return (double)n / ((double)(to_ns - from_ns) / 1e9);
}

static void merge_status(struct e2e_status_count *d, const struct e2e_status_count *a,
                         const struct e2e_status_count *b)
{
    for (int i = 0; i < QN_CLIENT_GRPC_CODES; i++)
        d->code[i] = a->code[i] + b->code[i];
    d->other_code = a->other_code + b->other_code;
    d->no_status = a->no_status + b->no_status;
    d->bad_frame = a->bad_frame + b->bad_frame;
    d->conn_lost = a->conn_lost + b->conn_lost;
    d->bad_decode = a->bad_decode + b->bad_decode;
    d->item_failed = a->item_failed + b->item_failed;
}

static void cpu_line(const struct e2e_cpu *a, const struct e2e_cpu *b, char *buf, size_t cap)
{
    double wall = b->wall - a->wall;
    if (wall <= 0) {
        snprintf(buf, cap, "cpu=?");
        return;
    }
    char bs[32] = "n/a", bb[32] = "n/a", bp[32] = "n/a", bm[32] = "n/a";
    /* A negative delta means the process restarted between the samples. */
    if (a->self >= 0 && b->self >= a->self)
        snprintf(bs, sizeof bs, "%.0f%%", 100 * (b->self - a->self) / wall);
    if (a->broker >= 0 && b->broker >= a->broker)
        snprintf(bb, sizeof bb, "%.0f%%", 100 * (b->broker - a->broker) / wall);
    if (a->pg >= 0 && b->pg >= a->pg)
        snprintf(bp, sizeof bp, "%.0f%%", 100 * (b->pg - a->pg) / wall);
    char bo[32] = "n/a";
    if (a->machine >= 0 && b->machine >= 0) {
        double m = b->machine - a->machine;
        snprintf(bm, sizeof bm, "%.0f%%", 100 * m / wall);
        /* What neither the bench, the broker nor PostgreSQL used: other load. */
        if (a->self >= 0 && a->broker >= 0 && a->pg >= 0 && b->broker >= a->broker &&
            b->pg >= a->pg) {
            double other = m - (b->self - a->self) - (b->broker - a->broker) - (b->pg - a->pg);
            snprintf(bo, sizeof bo, "%.0f%%", other > 0 ? 100 * other / wall : 0.0);
        }
    }
    snprintf(buf, cap, "cpu(bench/broker/pg/other/machine)=%s/%s/%s/%s/%s", bs, bb, bp, bo, bm);
}

struct cell {
    enum e2e_payload_kind kind;
    unsigned batch;
    unsigned parts;
    /* filled */
    bool has_push, has_consume, has_e2e;
    double push_rate, push_p50, push_p99;
    double cons_rate, pop_p50, pop_p99;
    double e2e_rate; /* target push rate of the e2e phase; 0 = closed loop */
    double e2e_push_rate, e2e_cons_rate, e2e_p50, e2e_p99;
    uint64_t errors;
};

static void print_push(const struct cell *cl, const struct e2e_stats *st, const char *cpu)
{
    char errs[512];
    e2e_status_format(&st->push_st, errs, sizeof errs);
    printf("push batch=%u parts=%u payload=%s msg/s=%.0f p50_ms=%.2f p99_ms=%.2f ok=%" PRIu64
           " msgs=%" PRIu64 " errors=%s conn_failures=%" PRIu64 " %s\n",
           cl->batch, cl->parts, e2e_payload_kind_name(cl->kind),
           per_s(st->pushed, st->push_first_ns, st->push_last_ns),
           ms(e2e_hist_quantile(&st->push_rtt, 0.50)), ms(e2e_hist_quantile(&st->push_rtt, 0.99)),
           st->push_st.code[0], st->pushed, errs, st->conn_failures, cpu);
    if (st->first_error[0] != '\0')
        printf("  first error: %s\n", st->first_error);
    fflush(stdout);
}

static void print_consume(const struct cell *cl, const struct e2e_stats *st, const char *cpu,
                          const struct e2e_opts *o)
{
    struct e2e_status_count all;
    merge_status(&all, &st->pop_st, &st->ack_st);
    char errs[512];
    e2e_status_format(&all, errs, sizeof errs);
    uint64_t end = st->consume_last_ns != 0 ? st->consume_last_ns : st->phase_end_ns;
    printf("consume batch=%u parts=%u payload=%s api=%s pop_batch=%u ack=%s msg/s=%.0f"
           " p50_ms=%.2f p99_ms=%.2f ok=%" PRIu64 " msgs=%" PRIu64 " pops=%" PRIu64
           " empty_pops=%" PRIu64 " errors=%s conn_failures=%" PRIu64 " %s\n",
           cl->batch, cl->parts, e2e_payload_kind_name(cl->kind),
           o->consume_api == E2E_CONSUME_POP ? "pop" : "stream", o->pop_batch,
           o->ack_mode == E2E_ACK_EACH ? "each" : "last", per_s(st->acked, st->phase_start_ns, end),
           ms(e2e_hist_quantile(&st->pop_rtt, 0.50)), ms(e2e_hist_quantile(&st->pop_rtt, 0.99)),
           all.code[0], st->acked, st->pop_calls, st->pop_empty, errs, st->conn_failures, cpu);
    if (st->first_error[0] != '\0')
        printf("  first error: %s\n", st->first_error);
    fflush(stdout);
}

static void print_e2e(const char *label, const struct cell *cl, const struct e2e_stats *st,
                      const char *cpu)
{
    struct e2e_status_count all, pa;
    merge_status(&pa, &st->pop_st, &st->ack_st);
    merge_status(&all, &st->push_st, &pa);
    char errs[512];
    e2e_status_format(&all, errs, sizeof errs);
    uint64_t end = st->consume_last_ns != 0 ? st->consume_last_ns : st->phase_end_ns;
    printf("%s batch=%u parts=%u payload=%s rate=%.0f push_msg/s=%.0f msg/s=%.0f p50_ms=%.2f"
           " p99_ms=%.2f ok=%" PRIu64 " pushed=%" PRIu64 " consumed=%" PRIu64
           " backlog_at_push_end=%" PRId64 " push_p50_ms=%.2f push_p99_ms=%.2f pops=%" PRIu64
           " empty_pops=%" PRIu64
           " ack_p50_ms=%.2f ack_p99_ms=%.2f errors=%s conn_failures=%" PRIu64 " %s\n",
           label, cl->batch, cl->parts, e2e_payload_kind_name(cl->kind), cl->e2e_rate,
           per_s(st->pushed, st->push_first_ns, st->push_last_ns),
           per_s(st->acked, st->phase_start_ns, end), ms(e2e_hist_quantile(&st->e2e_lat, 0.50)),
           ms(e2e_hist_quantile(&st->e2e_lat, 0.99)), all.code[0], st->pushed, st->acked,
           st->backlog_at_push_end, ms(e2e_hist_quantile(&st->push_rtt, 0.50)),
           ms(e2e_hist_quantile(&st->push_rtt, 0.99)), st->pop_calls, st->pop_empty,
           ms(e2e_hist_quantile(&st->ack_rtt, 0.50)), ms(e2e_hist_quantile(&st->ack_rtt, 0.99)),
           errs, st->conn_failures, cpu);
    if (st->first_error[0] != '\0')
        printf("  first error: %s\n", st->first_error);
    fflush(stdout);
}

/* ---------------------------------------------------------------- modes */

static void fresh_name(char *buf, size_t cap, const char *tag)
{
    static unsigned n;
    snprintf(buf, cap, "bench_%lld_%d_%s_%u", (long long)time(NULL), (int)getpid(), tag, n++);
}

static void broker_stats(e2e_run *r, struct e2e_broker_stats *bs, bool *ok)
{
    char err[256];
    *ok = e2e_run_broker_stats(r, bs, err, sizeof err) == QN_OK;
    if (!*ok)
        fprintf(stderr, "bench_e2e: GetStats unavailable: %s\n", err);
}

static void broker_delta(const struct e2e_broker_stats *a, bool oka,
                         const struct e2e_broker_stats *b, bool okb, uint64_t pushed,
                         uint64_t consumed)
{
    if (!oka || !okb)
        return;
    if (b->pushed < a->pushed || b->rpcs < a->rpcs) {
        printf("broker GetStats: counters went backwards (the broker restarted); no delta\n");
        return;
    }
    printf("broker GetStats: pushed +%" PRId64 " delivered +%" PRId64 " rpcs +%" PRId64
           " (bench counted pushed %" PRIu64 ", consumed %" PRIu64 ")\n",
           b->pushed - a->pushed, b->delivered - a->delivered, b->rpcs - a->rpcs, pushed, consumed);
}

static void drop_queue(e2e_run *r, const struct e2e_opts *o, const char *queue, bool fresh)
{
    if (!fresh || o->keep)
        return;
    char err[256];
    if (e2e_run_delete_queue(r, queue, err, sizeof err) != QN_OK)
        fprintf(stderr, "bench_e2e: could not delete queue %s: %s\n", queue, err);
}

/* --encrypted: the queue stores its payloads encrypted from the first push. */
static int encrypt_queue(e2e_run *r, const char *queue)
{
    char err[256];
    int rc = e2e_run_configure_encrypted(r, queue, err, sizeof err);
    if (rc != QN_OK)
        fprintf(stderr, "bench_e2e: could not configure queue %s encrypted: %s\n", queue, err);
    return rc;
}

/* Runs the phases of one cell on a queue; fills cl. */
static int run_cell(e2e_run *r, struct cli *c, struct cell *cl, bool do_push, bool do_consume,
                    bool do_e2e)
{
    struct e2e_opts *o = &c->o;
    char qname[300];
    bool fresh = o->queue == NULL;
    char tag[64];
    snprintf(tag, sizeof tag, "b%u_p%u_%s", cl->batch, cl->parts, e2e_payload_kind_name(cl->kind));
    if (fresh)
        fresh_name(qname, sizeof qname, tag);
    else
        snprintf(qname, sizeof qname, "%s", o->queue);
    int rc = e2e_run_target(r, qname, cl->kind, cl->batch, cl->parts);
    if (rc != QN_OK)
        return rc;
    if (o->encrypted && (rc = encrypt_queue(r, qname)) != QN_OK)
        return rc;
    struct e2e_stats *st = malloc(sizeof *st);
    if (st == NULL)
        return QN_ENOMEM;
    struct e2e_cpu a, b;
    char cpu[128];
    uint64_t pushed = 0;
    if (do_push) {
        struct e2e_phase ph = {
            .label = "push", .push = true, .duration_s = o->duration_s, .rate = o->rate};
        e2e_cpu_sample(&a, o->broker_pid, o->pg_pid);
        (void)e2e_run_phase(r, &ph, st);
        e2e_cpu_sample(&b, o->broker_pid, o->pg_pid);
        cpu_line(&a, &b, cpu, sizeof cpu);
        print_push(cl, st, cpu);
        cl->has_push = true;
        cl->push_rate = per_s(st->pushed, st->push_first_ns, st->push_last_ns);
        cl->push_p50 = ms(e2e_hist_quantile(&st->push_rtt, 0.5));
        cl->push_p99 = ms(e2e_hist_quantile(&st->push_rtt, 0.99));
        cl->errors += e2e_status_errors(&st->push_st);
        pushed = st->pushed;
        c->total_pushed += st->pushed;
    }
    if (do_consume) {
        struct e2e_phase ph = {.label = "consume",
                               .consume = true,
                               .duration_s = do_push ? o->duration_s * 3 : o->duration_s,
                               .consume_target = pushed};
        e2e_cpu_sample(&a, o->broker_pid, o->pg_pid);
        (void)e2e_run_phase(r, &ph, st);
        e2e_cpu_sample(&b, o->broker_pid, o->pg_pid);
        cpu_line(&a, &b, cpu, sizeof cpu);
        print_consume(cl, st, cpu, o);
        cl->has_consume = true;
        uint64_t end = st->consume_last_ns != 0 ? st->consume_last_ns : st->phase_end_ns;
        cl->cons_rate = per_s(st->acked, st->phase_start_ns, end);
        cl->pop_p50 = ms(e2e_hist_quantile(&st->pop_rtt, 0.5));
        cl->pop_p99 = ms(e2e_hist_quantile(&st->pop_rtt, 0.99));
        cl->errors += e2e_status_errors(&st->pop_st) + e2e_status_errors(&st->ack_st);
        c->total_consumed += st->acked;
    }
    if (do_e2e) {
        /* A queue of its own: a backlog left by the phases above would show up as
         * latency here. */
        if (fresh && (do_push || do_consume)) {
            drop_queue(r, o, qname, fresh);
            snprintf(tag, sizeof tag, "b%u_p%u_%s_e2e", cl->batch, cl->parts,
                     e2e_payload_kind_name(cl->kind));
            fresh_name(qname, sizeof qname, tag);
            rc = e2e_run_target(r, qname, cl->kind, cl->batch, cl->parts);
            if (rc == QN_OK && o->encrypted)
                rc = encrypt_queue(r, qname);
            if (rc != QN_OK) {
                free(st);
                return rc;
            }
        }
        /* Latency means little at saturation (it is the backlog's age): unless
         * --rate says otherwise, push at a fraction of what this cell sustained. */
        cl->e2e_rate = o->rate;
        if (cl->e2e_rate == 0 && c->e2e_load > 0 && cl->has_push) {
            double cap = cl->push_rate;
            if (cl->has_consume && cl->cons_rate < cap)
                cap = cl->cons_rate;
            cl->e2e_rate = floor(cap * c->e2e_load);
        }
        struct e2e_phase ph = {.label = "e2e",
                               .push = true,
                               .consume = true,
                               .duration_s = o->duration_s,
                               .rate = cl->e2e_rate,
                               .inflight = cl->e2e_rate > 0 && !c->inflight_given ? 256 : 0};
        e2e_cpu_sample(&a, o->broker_pid, o->pg_pid);
        (void)e2e_run_phase(r, &ph, st);
        e2e_cpu_sample(&b, o->broker_pid, o->pg_pid);
        cpu_line(&a, &b, cpu, sizeof cpu);
        print_e2e("e2e", cl, st, cpu);
        cl->has_e2e = true;
        uint64_t end = st->consume_last_ns != 0 ? st->consume_last_ns : st->phase_end_ns;
        cl->e2e_push_rate = per_s(st->pushed, st->push_first_ns, st->push_last_ns);
        cl->e2e_cons_rate = per_s(st->acked, st->phase_start_ns, end);
        cl->e2e_p50 = ms(e2e_hist_quantile(&st->e2e_lat, 0.5));
        cl->e2e_p99 = ms(e2e_hist_quantile(&st->e2e_lat, 0.99));
        cl->errors += e2e_status_errors(&st->push_st) + e2e_status_errors(&st->pop_st) +
                      e2e_status_errors(&st->ack_st);
        c->total_pushed += st->pushed;
        c->total_consumed += st->acked;
    }
    free(st);
    drop_queue(r, o, qname, fresh);
    return QN_OK;
}

static void print_header(const struct cli *c)
{
    const struct e2e_opts *o = &c->o;
    char host[256] = "?";
    (void)gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    char date[64] = "?";
    if (gmtime_r(&now, &tm) != NULL)
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("# bench_e2e %s addr=%s:%s%s host=%s cpus=%ld date=%s size=%zu connections=%u"
           " inflight=%u duration=%.0fs warmup=%gs rate=%.0f consumers=%u pop_batch=%u ack=%s "
           "api=%s%s%s%s\n",
           c->mode, o->host, o->port, o->tls ? " tls" : "", host, sysconf(_SC_NPROCESSORS_ONLN),
           date, o->size, o->connections, o->inflight, o->duration_s, o->warmup_s, o->rate,
           o->consumers, o->pop_batch, o->ack_mode == E2E_ACK_EACH ? "each" : "last",
           o->consume_api == E2E_CONSUME_POP ? "pop" : "stream", o->txn ? " txn" : "",
           o->spread ? " spread" : "", o->encrypted ? " encrypted" : "");
    fflush(stdout);
}

static int mode_cells(struct cli *c, bool matrix)
{
    struct e2e_opts *o = &c->o;
    e2e_run *r = NULL;
    if (e2e_run_new(o, &r) != QN_OK)
        return 1;
    print_header(c);
    struct e2e_broker_stats bs0 = {0}, bs1 = {0};
    bool ok0, ok1;
    broker_stats(r, &bs0, &ok0);
    bool do_push = false, do_consume = false, do_e2e = false;
    if (matrix) {
        do_push = c->ph_push;
        do_consume = c->ph_consume;
        do_e2e = c->ph_e2e;
    } else if (strcmp(c->mode, "push") == 0) {
        do_push = true;
    } else if (strcmp(c->mode, "consume") == 0) {
        do_consume = true;
        do_push = o->queue == NULL; /* fill a fresh queue first */
    } else {
        do_e2e = true;
    }
    struct cell cells[2 * MAX_LIST * MAX_LIST];
    if (!matrix)
        c->e2e_load = 0; /* e2e mode: closed loop unless --rate */
    unsigned n = 0;
    unsigned nk = matrix ? c->nkinds : 1, nb = matrix ? c->nbatches : 1,
             np = matrix ? c->nparts : 1;
    for (unsigned k = 0; k < nk; k++)
        for (unsigned b = 0; b < nb; b++)
            for (unsigned p = 0; p < np; p++) {
                struct cell *cl = &cells[n++];
                memset(cl, 0, sizeof *cl);
                cl->kind = matrix ? c->kinds[k] : o->payload;
                cl->batch = matrix ? c->batches[b] : o->batch;
                cl->parts = matrix ? c->parts[p] : o->partitions;
                if (run_cell(r, c, cl, do_push, do_consume, do_e2e) != QN_OK) {
                    fprintf(stderr, "bench_e2e: out of memory\n");
                    e2e_run_free(r);
                    return 1;
                }
            }
    broker_stats(r, &bs1, &ok1);
    broker_delta(&bs0, ok0, &bs1, ok1, c->total_pushed, c->total_consumed);
    if (matrix) {
        printf("\n| payload | batch | parts | push msg/s | push p50/p99 ms | pop+ack msg/s |"
               " pop p50/p99 ms | e2e push msg/s | e2e msg/s | e2e p50/p99 ms | errors |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (unsigned i = 0; i < n; i++) {
            const struct cell *cl = &cells[i];
            printf("| %s | %u | %u | ", e2e_payload_kind_name(cl->kind), cl->batch, cl->parts);
            if (cl->has_push)
                printf("%.0f | %.1f / %.1f | ", cl->push_rate, cl->push_p50, cl->push_p99);
            else
                printf("- | - | ");
            if (cl->has_consume)
                printf("%.0f | %.1f / %.1f | ", cl->cons_rate, cl->pop_p50, cl->pop_p99);
            else
                printf("- | - | ");
            if (cl->has_e2e)
                printf("%.0f | %.0f | %.1f / %.1f | ", cl->e2e_push_rate, cl->e2e_cons_rate,
                       cl->e2e_p50, cl->e2e_p99);
            else
                printf("- | - | - | ");
            printf("%" PRIu64 " |\n", cl->errors);
        }
    }
    e2e_run_free(r);
    return 0;
}

static int mode_soak(struct cli *c)
{
    struct e2e_opts *o = &c->o;
    e2e_run *r = NULL;
    if (e2e_run_new(o, &r) != QN_OK)
        return 1;
    print_header(c);
    char qname[300];
    bool fresh = o->queue == NULL;
    if (fresh)
        fresh_name(qname, sizeof qname, "soak");
    else
        snprintf(qname, sizeof qname, "%s", o->queue);
    struct e2e_stats *st = malloc(sizeof *st);
    if (st == NULL || e2e_run_target(r, qname, o->payload, o->batch, o->partitions) != QN_OK) {
        free(st);
        e2e_run_free(r);
        fprintf(stderr, "bench_e2e: out of memory\n");
        return 1;
    }
    if (o->encrypted && encrypt_queue(r, qname) != QN_OK) {
        free(st);
        e2e_run_free(r);
        return 1;
    }
    struct e2e_broker_stats bs0 = {0}, bs1 = {0};
    bool ok0, ok1;
    broker_stats(r, &bs0, &ok0);
    struct e2e_phase ph = {.label = "soak",
                           .push = true,
                           .consume = true,
                           .duration_s = o->duration_s,
                           .rate = o->rate,
                           .report_s = o->report_s};
    struct e2e_cpu a, b;
    char cpu[128];
    e2e_cpu_sample(&a, o->broker_pid, o->pg_pid);
    (void)e2e_run_phase(r, &ph, st);
    e2e_cpu_sample(&b, o->broker_pid, o->pg_pid);
    cpu_line(&a, &b, cpu, sizeof cpu);
    struct cell cl = {
        .kind = o->payload, .batch = o->batch, .parts = o->partitions, .e2e_rate = o->rate};
    print_e2e("soak-total", &cl, st, cpu);
    double pushed_rate = per_s(st->pushed, st->push_first_ns, st->push_last_ns);
    /* Kept up: pushed at >= 98 % of the target and the backlog when pushing
     * stopped was under two seconds of pushing. */
    bool kept = pushed_rate >= 0.98 * o->rate && (double)st->backlog_at_push_end <= 2.0 * o->rate;
    printf("soak rate=%.0f duration=%.0fs pushed=%" PRIu64 " consumed=%" PRIu64
           " max_backlog=%" PRId64 " backlog_at_push_end=%" PRId64 " verdict=%s\n",
           o->rate, o->duration_s, st->pushed, st->acked, st->max_backlog, st->backlog_at_push_end,
           kept ? "kept-up" : "fell-behind");
    broker_stats(r, &bs1, &ok1);
    broker_delta(&bs0, ok0, &bs1, ok1, st->pushed, st->acked);
    free(st);
    drop_queue(r, o, qname, fresh);
    e2e_run_free(r);
    return kept ? 0 : 3;
}

static int mode_make_body(struct cli *c)
{
    const struct e2e_opts *o = &c->o;
    if (c->out == NULL) {
        fprintf(stderr, "bench_e2e: make-body needs --out FILE\n");
        return 2;
    }
    const char *queue = o->queue != NULL ? o->queue : "bench_h2load";
    uint8_t *body = NULL;
    size_t len = 0;
    if (e2e_make_push_body(queue, o->batch, o->partitions, o->payload, o->size, &body, &len) !=
        QN_OK) {
        fprintf(stderr, "bench_e2e: cannot build the body (out of memory or too large)\n");
        return 1;
    }
    FILE *f = fopen(c->out, "wb");
    if (f == NULL || fwrite(body, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "bench_e2e: cannot write %s: %s\n", c->out, strerror(errno));
        free(body);
        return 1;
    }
    free(body);
    fprintf(stderr,
            "wrote %s: %zu bytes, PushRequest of %u %s items of %zu bytes to queue %s,"
            " partitions p0..p%u, no transaction ids\n"
            "example: h2load -n 20000 -c 4 -m 32 -H 'te: trailers'"
            " -H 'content-type: application/grpc' -d %s"
            " http://%s:%s/queen.v1.QueueService/Push\n",
            c->out, len, o->batch, e2e_payload_kind_name(o->payload), o->size, queue,
            o->partitions - 1, c->out, o->host, o->port);
    return 0;
}

static int mode_delete(struct cli *c)
{
    if (c->o.queue == NULL) {
        fprintf(stderr, "bench_e2e: delete needs --queue NAME\n");
        return 2;
    }
    e2e_run *r = NULL;
    if (e2e_run_new(&c->o, &r) != QN_OK)
        return 1;
    char err[256];
    int rc = e2e_run_delete_queue(r, c->o.queue, err, sizeof err);
    if (rc != QN_OK)
        fprintf(stderr, "bench_e2e: DeleteQueue %s: %s\n", c->o.queue, err);
    e2e_run_free(r);
    return rc == QN_OK ? 0 : 1;
}

static int mode_stats(struct cli *c)
{
    e2e_run *r = NULL;
    if (e2e_run_new(&c->o, &r) != QN_OK)
        return 1;
    struct e2e_broker_stats bs;
    char err[256];
    int rc = e2e_run_broker_stats(r, &bs, err, sizeof err);
    if (rc == QN_OK)
        printf("pushed=%" PRId64 " delivered=%" PRId64 " rpcs=%" PRId64 " total_pending=%" PRId64
               "\n",
               bs.pushed, bs.delivered, bs.rpcs, bs.total_pending);
    else
        fprintf(stderr, "bench_e2e: GetStats: %s\n", err);
    e2e_run_free(r);
    return rc == QN_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct cli c;
    memset(&c, 0, sizeof c);
    int rc = parse(&c, argc, argv);
    if (rc != 0)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(c.mode, "push") == 0 || strcmp(c.mode, "consume") == 0 || strcmp(c.mode, "e2e") == 0)
        return mode_cells(&c, false);
    if (strcmp(c.mode, "matrix") == 0)
        return mode_cells(&c, true);
    if (strcmp(c.mode, "soak") == 0)
        return mode_soak(&c);
    if (strcmp(c.mode, "make-body") == 0)
        return mode_make_body(&c);
    if (strcmp(c.mode, "stats") == 0)
        return mode_stats(&c);
    if (strcmp(c.mode, "delete") == 0)
        return mode_delete(&c);
    fprintf(stderr, "bench_e2e: unknown mode \"%s\"\n", c.mode);
    usage(stderr);
    return 2;
}
