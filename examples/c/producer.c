/*
 * examples/c/producer.c - pushes COUNT messages as segments it packs itself.
 *
 *   queen-example-producer --addr localhost:6632 --queue demo --count 100
 *   queen-example-producer --addr localhost:6643 --ca ca.pem --queue demo --json
 *
 * Message i goes to partition "p<i mod PARTITIONS>" with the payload
 * {"seq":i,"run":RUN,"from":"c"}; when i is a multiple of --txn-every it carries
 * the transaction id "<TXN_PREFIX>-<i>", else its own message id's text form (so
 * it is never a duplicate). Each batch of --batch messages becomes one segment
 * per partition, compressed here with the codec (qn_segment_pack) and sent with
 * QueueService.PushSegments: the broker checks the frames and stores these bytes
 * as they are, without recompressing them.
 *
 * A segment is stored whole or not at all. When the broker answers that some of
 * its frames were already stored (their transaction ids, from an earlier run
 * with the same --txn-prefix), the producer reports those as DUPLICATE with the
 * original's offset and message id, packs the other frames into a new segment
 * and pushes that again.
 *
 * Output: one line per message in message order (--json: one JSON object with
 * seq, status, queue, partition, partition_id, offset, message_id,
 * transaction_id, payload, error). Exit status: 0 when every message was QUEUED
 * or DUPLICATE, 1 when one FAILED or a call failed, 2 for bad arguments or a
 * broker that never became ready.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "example.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/v1/queue.pb-c.h"

#define PROG "queen-example-producer"
#define ATTEMPTS 3 /* pushes of one message before it is reported FAILED */

struct item {
    long seq;
    char partition[24];
    char txn[80];
    char payload[128];
    uint8_t id[QN_UUID_LEN];
    const char *status; /* NULL while pending */
    int64_t offset;
    char message_id[QN_UUID_STR_LEN];
    char partition_id[QN_UUID_STR_LEN];
    char error[256];
};

struct opts {
    struct ex_conn_opts conn;
    const char *queue;
    long count, partitions, batch, txn_every;
    const char *txn_prefix;
};

static void usage(void)
{
    printf("usage: " PROG " [--addr HOST:PORT] [--ca FILE] [--server-name NAME] [--token T]\n"
           "       [--wait-ready SECONDS] [--json] [--queue Q] [--count N] [--partitions P]\n"
           "       [--batch B] [--txn-every K] [--txn-prefix PREFIX]\n"
           "Pushes N messages to Q as segments packed here (QueueService.PushSegments).\n");
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {EX_CONN_LONGOPTS,
                                             {"queue", required_argument, NULL, 'q'},
                                             {"count", required_argument, NULL, 'n'},
                                             {"partitions", required_argument, NULL, 'p'},
                                             {"batch", required_argument, NULL, 'b'},
                                             {"txn-every", required_argument, NULL, 'k'},
                                             {"txn-prefix", required_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    ex_conn_defaults(&o->conn);
    o->queue = "demo";
    o->count = 10;
    o->partitions = 4;
    o->batch = 100;
    o->txn_every = 2;
    o->txn_prefix = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ex_conn_option(&o->conn, c, optarg))
            continue;
        switch (c) {
        case 'q':
            o->queue = optarg;
            break;
        case 'n':
            o->count = ex_parse_long(PROG, "count", optarg, 0, 100000000);
            break;
        case 'p':
            o->partitions = ex_parse_long(PROG, "partitions", optarg, 1, 100000);
            break;
        case 'b':
            o->batch = ex_parse_long(PROG, "batch", optarg, 1, 10000);
            break;
        case 'k':
            o->txn_every = ex_parse_long(PROG, "txn-every", optarg, 0, 1000000000);
            break;
        case 't':
            o->txn_prefix = optarg;
            break;
        case 'h':
            usage();
            exit(0);
        default:
            ex_usage_error(PROG, "unknown option (see --help)");
        }
    }
    if (optind < argc)
        ex_usage_error(PROG, "unexpected argument '%s'", argv[optind]);
}

/* One segment being built: the pending items of one partition, in order. */
struct seg {
    const char *partition;
    struct item **items;
    size_t n;
    struct qn_buf blob;
};

/* Packs the pending items of the batch into one segment per partition. */
static size_t build_segments(qn_zctx *z, struct item *items, size_t n, struct seg *segs,
                             struct item **slots, struct qn_frame *frames)
{
    size_t nsegs = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].status != NULL)
            continue;
        size_t s = 0;
        while (s < nsegs && strcmp(segs[s].partition, items[i].partition) != 0)
            s++;
        if (s == nsegs) {
            segs[nsegs].partition = items[i].partition;
            segs[nsegs].items = NULL;
            segs[nsegs].n = 0;
            nsegs++;
        }
    }
    /* lay the items of each segment out contiguously in slots */
    size_t at = 0;
    for (size_t s = 0; s < nsegs; s++) {
        segs[s].items = slots + at;
        for (size_t i = 0; i < n; i++)
            if (items[i].status == NULL && strcmp(items[i].partition, segs[s].partition) == 0)
                segs[s].items[segs[s].n++] = &items[i];
        for (size_t k = 0; k < segs[s].n; k++) {
            const struct item *it = segs[s].items[k];
            struct qn_frame *f = &frames[k];
            memset(f, 0, sizeof *f);
            memcpy(f->message_id, it->id, QN_UUID_LEN);
            f->txn = (const uint8_t *)it->txn;
            f->txn_len = strlen(it->txn);
            f->payload = (const uint8_t *)it->payload;
            f->payload_len = strlen(it->payload);
        }
        int rc = qn_segment_pack(z, frames, segs[s].n, 3, &segs[s].blob, NULL);
        if (rc != QN_OK) {
            fprintf(stderr, PROG ": packing a segment failed: %s\n", qn_strerror(rc));
            exit(1);
        }
        at += segs[s].n;
    }
    return nsegs;
}

/* Applies one answer to the items of the segments it is about. */
static void apply(const Queen__V1__PushSegmentsResponse *resp, struct seg *segs, size_t nsegs)
{
    for (size_t r = 0; r < resp->n_results; r++) {
        const Queen__V1__PushSegmentResult *res = resp->results[r];
        if (res->index >= nsegs)
            continue;
        struct seg *s = &segs[res->index];
        for (size_t d = 0; d < res->n_duplicates; d++) {
            const Queen__V1__DuplicateFrame *df = res->duplicates[d];
            if (df->index >= s->n)
                continue;
            struct item *it = s->items[df->index];
            it->status = "DUPLICATE";
            it->offset = df->offset;
            snprintf(it->message_id, sizeof it->message_id, "%s", df->message_id);
            snprintf(it->partition_id, sizeof it->partition_id, "%s", res->partition_id);
        }
        for (size_t k = 0; k < s->n; k++) {
            struct item *it = s->items[k];
            if (it->status != NULL)
                continue;
            if (res->status == QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED) {
                it->status = "QUEUED";
                it->offset = res->base_offset + (int64_t)k;
                qn_uuid_format(it->id, it->message_id);
                snprintf(it->partition_id, sizeof it->partition_id, "%s", res->partition_id);
            } else if (res->status == QUEEN__V1__PUSH_STATUS__PUSH_STATUS_FAILED &&
                       res->n_duplicates == 0) {
                it->status = "FAILED";
                it->offset = -1;
                snprintf(it->error, sizeof it->error, "%s", res->error);
            }
            /* FAILED with duplicates: the others stay pending and are re-packed */
        }
    }
}

static void print_item(const struct opts *o, const struct item *it)
{
    if (!o->conn.json) {
        printf("#%ld %s/%s %s offset=%lld id=%s txn=%s%s%s\n", it->seq, o->queue, it->partition,
               it->status, (long long)it->offset, it->message_id, it->txn,
               it->error[0] ? " error=" : "", it->error);
        return;
    }
    printf("{\"seq\": %ld, \"status\": \"%s\", \"queue\": ", it->seq, it->status);
    ex_json_str(stdout, o->queue, strlen(o->queue));
    printf(", \"partition\": ");
    ex_json_str(stdout, it->partition, strlen(it->partition));
    printf(", \"partition_id\": \"%s\", \"offset\": %lld, \"message_id\": \"%s\", "
           "\"transaction_id\": ",
           it->partition_id, (long long)it->offset, it->message_id);
    ex_json_str(stdout, it->txn, strlen(it->txn));
    printf(", \"payload\": ");
    ex_json_str(stdout, it->payload, strlen(it->payload));
    printf(", \"error\": ");
    ex_json_str(stdout, it->error, strlen(it->error));
    printf("}\n");
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    uint8_t rnd[4];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        memset(rnd, 0x5a, sizeof rnd);
    char run[9];
    snprintf(run, sizeof run, "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
    char prefix_buf[32];
    if (o.txn_prefix == NULL) {
        snprintf(prefix_buf, sizeof prefix_buf, "c-%s", run);
        o.txn_prefix = prefix_buf;
    }
    if (strlen(o.txn_prefix) > 60)
        ex_usage_error(PROG, "--txn-prefix is longer than 60 bytes");

    qn_client *c = ex_connect(PROG, &o.conn);
    qn_zctx *z = NULL;
    struct qn_uuid7_gen gen;
    if (qn_zctx_new(&z) != QN_OK || qn_uuid7_init(&gen) != QN_OK) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    size_t cap = (size_t)o.batch;
    struct item *items = calloc(cap, sizeof *items);
    struct item **slots = calloc(cap, sizeof *slots);
    struct qn_frame *frames = calloc(cap, sizeof *frames);
    struct seg *segs = calloc(cap, sizeof *segs);
    Queen__V1__RawSegment *raw = calloc(cap, sizeof *raw);
    Queen__V1__RawSegment **rawp = calloc(cap, sizeof *rawp);
    if (!items || !slots || !frames || !segs || !raw || !rawp) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    int failed = 0;
    for (long start = 0; start < o.count; start += o.batch) {
        size_t n = (size_t)(o.count - start < o.batch ? o.count - start : o.batch);
        memset(items, 0, n * sizeof *items);
        for (size_t i = 0; i < n; i++) {
            struct item *it = &items[i];
            long seq = start + (long)i;
            it->seq = seq;
            snprintf(it->partition, sizeof it->partition, "p%ld", seq % o.partitions);
            qn_uuid7_next(&gen, qn_client_now_ns() / 1000000u, it->id);
            if (o.txn_every && seq % o.txn_every == 0)
                snprintf(it->txn, sizeof it->txn, "%s-%ld", o.txn_prefix, seq);
            else
                qn_uuid_format(it->id, it->txn);
            snprintf(it->payload, sizeof it->payload, "{\"seq\":%ld,\"run\":\"%s\",\"from\":\"c\"}",
                     seq, run);
        }
        for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
            size_t nsegs = build_segments(z, items, n, segs, slots, frames);
            if (nsegs == 0)
                break;
            for (size_t s = 0; s < nsegs; s++) {
                queen__v1__raw_segment__init(&raw[s]);
                raw[s].queue = (char *)o.queue;
                raw[s].partition = (char *)segs[s].partition;
                raw[s].segment.data = segs[s].blob.data;
                raw[s].segment.len = segs[s].blob.len;
                rawp[s] = &raw[s];
            }
            Queen__V1__PushSegmentsRequest req = QUEEN__V1__PUSH_SEGMENTS_REQUEST__INIT;
            req.n_segments = nsegs;
            req.segments = rawp;
            ProtobufCMessage *resp = NULL;
            struct qn_client_status st;
            struct qn_client_call_opts co = {.timeout_ms = 30000};
            int rc =
                qn_client_unary(c, "/queen.v1.QueueService/PushSegments", &req.base,
                                &queen__v1__push_segments_response__descriptor, &co, &resp, &st);
            for (size_t s = 0; s < nsegs; s++)
                qn_buf_free(&segs[s].blob);
            if (rc != QN_OK || st.code != 0) {
                fprintf(stderr, PROG ": push of messages %ld..%ld failed: %s\n", start,
                        start + (long)n - 1, st.message);
                return 1;
            }
            apply((Queen__V1__PushSegmentsResponse *)resp, segs, nsegs);
            protobuf_c_message_free_unpacked(resp, NULL);
        }
        for (size_t i = 0; i < n; i++) {
            if (items[i].status == NULL) {
                items[i].status = "FAILED";
                items[i].offset = -1;
                snprintf(items[i].error, sizeof items[i].error, "still not stored after %d pushes",
                         ATTEMPTS);
            }
            if (strcmp(items[i].status, "FAILED") == 0)
                failed++;
            print_item(&o, &items[i]);
        }
        fflush(stdout);
    }
    qn_client_free(c);
    qn_zctx_free(z);
    free(items);
    free(slots);
    free(frames);
    free(segs);
    free(raw);
    free(rawp);
    return failed ? 1 : 0;
}
