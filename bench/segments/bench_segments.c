/*
 * bench/segments/bench_segments.c - push throughput of QueueService.Push
 * against PushSegments (segments packed and compressed by the client, stored by
 * the broker as sent), with the same messages.
 *
 *   bench_segments --addr 127.0.0.1:6632 --mode push|segments --seconds 20
 *                  --threads 4 --batch 100 --parts 16 --size 256 [--broker-pid PID]
 *
 * Each thread owns one connection and makes blocking calls back to back (a
 * closed loop); a call carries --batch messages spread over --parts partitions
 * of one queue. Push items carry no transaction id (the broker mints one);
 * segment frames carry their message id's text form as transaction id, which
 * is what the broker would mint, so both paths write the same rows. Prints one
 * line: messages per second stored (QUEUED), call latency p50/p99, and the CPU
 * used meanwhile by this process and, with --broker-pid, by the broker.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "queen/client.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/v1/queue.pb-c.h"

struct opts {
    const char *addr, *queue;
    bool segments;
    int seconds, threads, batch, parts, size;
    long broker_pid;
};

struct worker {
    const struct opts *o;
    int id;
    uint64_t stored, calls, failed;
    double *lat; /* ms per call */
    size_t nlat, caplat;
    pthread_t th;
};

static double now_s(void)
{
    return (double)qn_client_now_ns() / 1e9;
}

static double proc_cpu_s(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void fill_payload(uint8_t *p, int size, uint64_t seq)
{
    int n = snprintf((char *)p, (size_t)size, "{\"seq\":%" PRIu64 ",\"data\":\"", seq);
    for (int i = n; i < size - 2; i++)
        p[i] = (uint8_t)('a' + (seq + (uint64_t)i) % 26);
    if (size >= n + 2) {
        p[size - 2] = '"';
        p[size - 1] = '}';
    }
}

static void add_lat(struct worker *w, double ms)
{
    if (w->nlat == w->caplat) {
        size_t cap = w->caplat ? w->caplat * 2 : 4096;
        double *n = realloc(w->lat, cap * sizeof *n);
        if (n == NULL)
            return;
        w->lat = n;
        w->caplat = cap;
    }
    w->lat[w->nlat++] = ms;
}

static void *run(void *ud)
{
    struct worker *w = ud;
    const struct opts *o = w->o;
    struct qn_client_config cfg = {.target = o->addr};
    qn_client *c = NULL;
    struct qn_client_status st;
    if (qn_client_dial(&cfg, &c, &st) != QN_OK) {
        fprintf(stderr, "bench_segments: %s\n", st.message);
        exit(1);
    }
    qn_zctx *z = NULL;
    struct qn_uuid7_gen gen;
    if (qn_zctx_new(&z) != QN_OK || qn_uuid7_init(&gen) != QN_OK)
        exit(1);
    int B = o->batch, P = o->parts;
    uint8_t *payloads = malloc((size_t)B * (size_t)o->size);
    char(*parts)[16] = calloc((size_t)P, 16);
    char(*txns)[QN_UUID_STR_LEN] = calloc((size_t)B, QN_UUID_STR_LEN);
    struct qn_frame *frames = calloc((size_t)B, sizeof *frames);
    Queen__V1__PushItem *items = calloc((size_t)B, sizeof *items);
    Queen__V1__PushItem **iptr = calloc((size_t)B, sizeof *iptr);
    Queen__V1__RawSegment *segs = calloc((size_t)P, sizeof *segs);
    Queen__V1__RawSegment **sptr = calloc((size_t)P, sizeof *sptr);
    struct qn_buf *blobs = calloc((size_t)P, sizeof *blobs);
    if (!payloads || !parts || !txns || !frames || !items || !iptr || !segs || !sptr || !blobs)
        exit(1);
    for (int p = 0; p < P; p++)
        snprintf(parts[p], 16, "p%d", p);
    double end = now_s() + o->seconds;
    uint64_t seq = (uint64_t)w->id << 40;
    while (now_s() < end) {
        for (int i = 0; i < B; i++)
            fill_payload(payloads + (size_t)i * (size_t)o->size, o->size, seq++);
        ProtobufCMessage *req;
        Queen__V1__PushRequest pr = QUEEN__V1__PUSH_REQUEST__INIT;
        Queen__V1__PushSegmentsRequest sr = QUEEN__V1__PUSH_SEGMENTS_REQUEST__INIT;
        double t0 = now_s();
        size_t nsegs = 0;
        if (!o->segments) {
            for (int i = 0; i < B; i++) {
                queen__v1__push_item__init(&items[i]);
                items[i].queue = (char *)o->queue;
                items[i].partition = parts[i % P];
                items[i].payload.data = payloads + (size_t)i * (size_t)o->size;
                items[i].payload.len = (size_t)o->size;
                iptr[i] = &items[i];
            }
            pr.n_items = (size_t)B;
            pr.items = iptr;
            req = &pr.base;
        } else {
            /* frames of partition p are items p, p+P, p+2P...: one segment each */
            for (int p = 0; p < P && p < B; p++) {
                size_t k = 0;
                for (int i = p; i < B; i += P, k++) {
                    struct qn_frame *f = &frames[k];
                    memset(f, 0, sizeof *f);
                    qn_uuid7_next(&gen, qn_client_now_ns() / 1000000u, f->message_id);
                    qn_uuid_format(f->message_id, txns[i]);
                    f->txn = (const uint8_t *)txns[i];
                    f->txn_len = QN_UUID_STR_LEN - 1;
                    f->payload = payloads + (size_t)i * (size_t)o->size;
                    f->payload_len = (size_t)o->size;
                }
                if (qn_segment_pack(z, frames, k, 3, &blobs[nsegs], NULL) != QN_OK)
                    exit(1);
                queen__v1__raw_segment__init(&segs[nsegs]);
                segs[nsegs].queue = (char *)o->queue;
                segs[nsegs].partition = parts[p];
                segs[nsegs].segment.data = blobs[nsegs].data;
                segs[nsegs].segment.len = blobs[nsegs].len;
                sptr[nsegs] = &segs[nsegs];
                nsegs++;
            }
            sr.n_segments = nsegs;
            sr.segments = sptr;
            req = &sr.base;
        }
        ProtobufCMessage *resp = NULL;
        struct qn_client_call_opts co = {.timeout_ms = 30000};
        int rc = qn_client_unary(
            c, o->segments ? "/queen.v1.QueueService/PushSegments" : "/queen.v1.QueueService/Push",
            req,
            o->segments ? &queen__v1__push_segments_response__descriptor
                        : &queen__v1__push_response__descriptor,
            &co, &resp, &st);
        for (size_t s = 0; s < nsegs; s++)
            qn_buf_free(&blobs[s]);
        w->calls++;
        if (rc != QN_OK || st.code != 0) {
            w->failed++;
            fprintf(stderr, "bench_segments: call failed: %s\n", st.message);
            if (rc != QN_OK)
                break;
            continue;
        }
        add_lat(w, (now_s() - t0) * 1000);
        if (o->segments) {
            Queen__V1__PushSegmentsResponse *r = (Queen__V1__PushSegmentsResponse *)resp;
            for (size_t i = 0; i < r->n_results; i++)
                if (r->results[i]->status == QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED)
                    w->stored += r->results[i]->count;
                else
                    w->failed++;
        } else {
            Queen__V1__PushResponse *r = (Queen__V1__PushResponse *)resp;
            for (size_t i = 0; i < r->n_results; i++)
                if (r->results[i]->status == QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED)
                    w->stored++;
                else
                    w->failed++;
        }
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    qn_client_free(c);
    qn_zctx_free(z);
    free(payloads);
    free(parts);
    free(txns);
    free(frames);
    free(items);
    free(iptr);
    free(segs);
    free(sptr);
    free(blobs);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    struct opts o = {.addr = "127.0.0.1:6632",
                     .queue = "bench-segments",
                     .seconds = 20,
                     .threads = 4,
                     .batch = 100,
                     .parts = 16,
                     .size = 256};
    static const struct option lo[] = {
        {"addr", required_argument, NULL, 'a'},       {"queue", required_argument, NULL, 'q'},
        {"mode", required_argument, NULL, 'm'},       {"seconds", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 't'},    {"batch", required_argument, NULL, 'b'},
        {"parts", required_argument, NULL, 'p'},      {"size", required_argument, NULL, 'z'},
        {"broker-pid", required_argument, NULL, 'B'}, {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'a':
            o.addr = optarg;
            break;
        case 'q':
            o.queue = optarg;
            break;
        case 'm':
            if (strcmp(optarg, "push") != 0 && strcmp(optarg, "segments") != 0) {
                fprintf(stderr, "bench_segments: --mode push|segments\n");
                return 2;
            }
            o.segments = strcmp(optarg, "segments") == 0;
            break;
        case 's':
            o.seconds = atoi(optarg);
            break;
        case 't':
            o.threads = atoi(optarg);
            break;
        case 'b':
            o.batch = atoi(optarg);
            break;
        case 'p':
            o.parts = atoi(optarg);
            break;
        case 'z':
            o.size = atoi(optarg);
            break;
        case 'B':
            o.broker_pid = atol(optarg);
            break;
        default:
            fprintf(stderr,
                    "usage: bench_segments --addr A --mode push|segments [--seconds S] "
                    "[--threads T] [--batch B] [--parts P] [--size N] [--broker-pid PID]\n");
            return 2;
        }
    }
    if (o.seconds < 1 || o.threads < 1 || o.threads > 64 || o.batch < 1 || o.parts < 1 ||
        o.size < 16 || o.size > 1 << 20) {
        fprintf(stderr, "bench_segments: out-of-range option\n");
        return 2;
    }
    struct worker *w = calloc((size_t)o.threads, sizeof *w);
    if (w == NULL)
        return 1;
    double c0 = self_cpu_s(), b0 = o.broker_pid ? proc_cpu_s(o.broker_pid) : -1, t0 = now_s();
    for (int i = 0; i < o.threads; i++) {
        w[i].o = &o;
        w[i].id = i + 1;
        pthread_create(&w[i].th, NULL, run, &w[i]);
    }
    uint64_t stored = 0, calls = 0, failed = 0;
    size_t nlat = 0;
    for (int i = 0; i < o.threads; i++) {
        pthread_join(w[i].th, NULL);
        stored += w[i].stored;
        calls += w[i].calls;
        failed += w[i].failed;
        nlat += w[i].nlat;
    }
    double el = now_s() - t0, c1 = self_cpu_s(), b1 = o.broker_pid ? proc_cpu_s(o.broker_pid) : -1;
    double *all = malloc((nlat ? nlat : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < o.threads; i++) {
        if (all != NULL)
            memcpy(all + k, w[i].lat, w[i].nlat * sizeof *all);
        k += w[i].nlat;
        free(w[i].lat);
    }
    double p50 = 0, p99 = 0;
    if (all != NULL && nlat > 0) {
        qsort(all, nlat, sizeof *all, cmp_d);
        p50 = all[nlat / 2];
        p99 = all[(size_t)((double)nlat * 0.99)];
    }
    printf("mode=%s batch=%d parts=%d size=%d threads=%d msg/s=%.0f calls=%" PRIu64
           " failed=%" PRIu64 " p50_ms=%.2f p99_ms=%.2f client_cpu=%.0f%%",
           o.segments ? "segments" : "push", o.batch, o.parts, o.size, o.threads, stored / el,
           calls, failed, p50, p99, 100 * (c1 - c0) / el);
    if (b0 >= 0 && b1 >= 0)
        printf(" broker_cpu=%.0f%%", 100 * (b1 - b0) / el);
    printf("\n");
    free(all);
    free(w);
    return failed ? 1 : 0;
}
