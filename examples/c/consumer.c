/*
 * examples/c/consumer.c - one Consume stream with credits and in-band acks,
 * receiving the stored segments themselves.
 *
 *   queen-example-consumer --addr localhost:6632 --queue demo --group readers --count 100
 *
 * It subscribes as consumer group GROUP with CREDITS batches in flight and
 * raw_segments set: every batch carries the leased frames as the compressed
 * segments the broker stored (PopResponse.segments), which this program
 * decompresses and walks with the codec (frames [first_index, first_index +
 * count) of each). It prints every message, acknowledges on the same stream
 * what it processed (one ack per partition: acking offset N completes the batch
 * up to N) and grants one more credit. It stops after COUNT messages (0:
 * never), on SIGINT or SIGTERM, or, with --idle-timeout, when nothing arrived
 * for that long. Before it half-closes the stream it waits for the answers to
 * its acks; messages it received but did not process are released by the
 * broker when the stream ends and go to the group's next consumer.
 *
 * Exit status: 0 after a clean stop with every ack applied; 1 when an ack was
 * not applied, the stream failed or the idle timeout passed; 2 for bad
 * arguments or a broker that never became ready.
 */
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "example.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/v1/common.pb-c.h"
#include "queen/v1/queue.pb-c.h"

#define PROG "queen-example-consumer"
#define ACK_WAIT_MS 15000     /* longest wait for outstanding acks when stopping */
#define RAW_MAX (64u << 20)   /* largest decompressed segment accepted */
#define MAX_PENDING_ACKS 4096 /* acks without an answer yet */

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    stop_flag = 1;
    signal(sig, SIG_DFL); /* a second signal ends the process at once */
}

struct opts {
    struct ex_conn_opts conn;
    const char *queue, *group;
    long count, batch, credits, idle_timeout;
};

static void usage(void)
{
    printf("usage: " PROG " [--addr HOST:PORT] [--ca FILE] [--server-name NAME] [--token T]\n"
           "       [--wait-ready SECONDS] [--json] [--queue Q] [--group G] [--count N]\n"
           "       [--batch B] [--credits C] [--idle-timeout SECONDS]\n"
           "Consumes Q as group G over one Consume stream, receiving stored segments.\n");
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {EX_CONN_LONGOPTS,
                                             {"queue", required_argument, NULL, 'q'},
                                             {"group", required_argument, NULL, 'g'},
                                             {"count", required_argument, NULL, 'n'},
                                             {"batch", required_argument, NULL, 'b'},
                                             {"credits", required_argument, NULL, 'c'},
                                             {"idle-timeout", required_argument, NULL, 'i'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    ex_conn_defaults(&o->conn);
    o->queue = "demo";
    o->group = "example";
    o->count = 0;
    o->batch = 100;
    o->credits = 4;
    o->idle_timeout = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ex_conn_option(&o->conn, c, optarg))
            continue;
        switch (c) {
        case 'q':
            o->queue = optarg;
            break;
        case 'g':
            o->group = optarg;
            break;
        case 'n':
            o->count = ex_parse_long(PROG, "count", optarg, 0, 1000000000);
            break;
        case 'b':
            o->batch = ex_parse_long(PROG, "batch", optarg, 1, 10000);
            break;
        case 'c':
            o->credits = ex_parse_long(PROG, "credits", optarg, 1, 1000);
            break;
        case 'i':
            o->idle_timeout = ex_parse_long(PROG, "idle-timeout", optarg, 0, 86400);
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

struct consumer {
    struct opts o;
    qn_client_stream *s;
    qn_zctx *z;
    long processed;
    int failures;
    uint64_t next_id;
    uint64_t pending[MAX_PENDING_ACKS]; /* request ids of unanswered acks */
    size_t npending;
};

static int64_t now_ms(void)
{
    return (int64_t)(qn_client_now_ns() / 1000000u);
}

static bool done(const struct consumer *c)
{
    return c->o.count != 0 && c->processed >= c->o.count;
}

static void print_msg(const struct consumer *c, const Queen__V1__SegmentSlice *sl, int64_t offset,
                      const struct qn_frame *f)
{
    char id[QN_UUID_STR_LEN];
    qn_uuid_format(f->message_id, id);
    if (!c->o.conn.json) {
        printf("%s/%s offset=%lld id=%s txn=%.*s payload=%.*s\n", sl->queue, sl->partition,
               (long long)offset, id, (int)f->txn_len, (const char *)f->txn, (int)f->payload_len,
               (const char *)f->payload);
        return;
    }
    printf("{\"queue\": ");
    ex_json_str(stdout, sl->queue, strlen(sl->queue));
    printf(", \"partition\": ");
    ex_json_str(stdout, sl->partition, strlen(sl->partition));
    printf(", \"partition_id\": \"%s\", \"offset\": %lld, \"message_id\": \"%s\", "
           "\"transaction_id\": ",
           sl->partition_id, (long long)offset, id);
    ex_json_str(stdout, (const char *)f->txn, f->txn_len);
    printf(", \"payload\": ");
    ex_json_str(stdout, (const char *)f->payload, f->payload_len);
    printf("}\n");
}

/* Processes one batch: prints its frames (up to --count), then acks the last
 * processed offset of each partition and grants another credit. */
static void on_batch(struct consumer *c, const Queen__V1__PopResponse *b)
{
    size_t n = b->n_segments;
    Queen__V1__AckItem *items = calloc(n ? n : 1, sizeof *items);
    Queen__V1__AckItem **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (items == NULL || ptrs == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(1);
    }
    size_t nack = 0;
    for (size_t i = 0; i < n && !done(c); i++) {
        const Queen__V1__SegmentSlice *sl = b->segments[i];
        const uint8_t *raw;
        size_t rawlen;
        struct qn_frame_iter it;
        struct qn_frame_error fe = {0};
        int rc =
            qn_segment_decompress(c->z, sl->segment.data, sl->segment.len, RAW_MAX, &raw, &rawlen);
        if (rc == QN_OK)
            rc = qn_frame_iter_span(&it, raw, rawlen, sl->first_index, sl->count, &fe);
        if (rc != QN_OK) {
            fprintf(stderr, PROG ": a segment of %s at %lld does not decode: %s\n",
                    sl->partition_id, (long long)sl->base_offset, qn_strerror(rc));
            c->failures++;
            continue;
        }
        int64_t off = sl->base_offset + sl->first_index, last = -1;
        struct qn_frame f;
        while (!done(c) && (rc = qn_frame_iter_next(&it, &f, &fe)) == 1) {
            print_msg(c, sl, off, &f);
            c->processed++;
            last = off++;
        }
        if (rc < 0) {
            fprintf(stderr, PROG ": frame at offset %lld does not decode: %s\n", (long long)off,
                    qn_strerror(rc));
            c->failures++;
        }
        if (last < 0)
            continue;
        /* one ack per partition: a later slice of the same partition replaces it */
        size_t k = 0;
        while (k < nack && strcmp(items[k].partition_id, sl->partition_id) != 0)
            k++;
        if (k == nack) {
            queen__v1__ack_item__init(&items[k]);
            items[k].partition_id = sl->partition_id;
            items[k].target_case = QUEEN__V1__ACK_ITEM__TARGET_OFFSET;
            items[k].status = QUEEN__V1__ACK_STATUS__ACK_STATUS_COMPLETED;
            items[k].lease_id = b->lease_id;
            ptrs[k] = &items[k];
            nack++;
        }
        items[k].offset = last;
    }
    fflush(stdout);
    if (nack > 0) {
        if (c->npending == MAX_PENDING_ACKS) {
            fprintf(stderr, PROG ": too many unanswered acks\n");
            exit(1);
        }
        Queen__V1__AckRequest ack = QUEEN__V1__ACK_REQUEST__INIT;
        ack.consumer_group = (char *)c->o.group;
        ack.n_items = nack;
        ack.items = ptrs;
        Queen__V1__ConsumeRequest r = QUEEN__V1__CONSUME_REQUEST__INIT;
        r.request_id = c->next_id;
        r.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_ACK;
        r.ack = &ack;
        if (qn_client_stream_send(c->s, &r.base) != QN_OK) {
            fprintf(stderr, PROG ": sending an ack failed\n");
            c->failures++;
        } else {
            c->pending[c->npending++] = c->next_id;
        }
        c->next_id++;
    }
    free(items);
    free(ptrs);
    if (!done(c) && !stop_flag) {
        Queen__V1__ConsumeRequest r = QUEEN__V1__CONSUME_REQUEST__INIT;
        r.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_CREDITS;
        r.credits = 1;
        qn_client_stream_send(c->s, &r.base);
    }
}

static void on_ack(struct consumer *c, uint64_t id, const Queen__V1__AckResponse *a)
{
    size_t k = 0;
    while (k < c->npending && c->pending[k] != id)
        k++;
    if (k == c->npending) {
        fprintf(stderr, PROG ": an ack answer for unknown request %llu\n", (unsigned long long)id);
        c->failures++;
        return;
    }
    c->pending[k] = c->pending[--c->npending];
    for (size_t i = 0; i < a->n_results; i++) {
        const Queen__V1__AckResult *r = a->results[i];
        if (r->outcome != QUEEN__V1__ACK_OUTCOME__ACK_OUTCOME_APPLIED &&
            r->outcome != QUEEN__V1__ACK_OUTCOME__ACK_OUTCOME_NOOP) {
            fprintf(stderr, PROG ": ack of offset %lld: outcome %d %s\n", (long long)r->offset,
                    (int)r->outcome, r->error);
            c->failures++;
        }
    }
}

int main(int argc, char **argv)
{
    struct consumer *c = calloc(1, sizeof *c);
    if (c == NULL)
        return 1;
    parse(argc, argv, &c->o);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    qn_client *conn = ex_connect(PROG, &c->o.conn);
    if (qn_zctx_new(&c->z) != QN_OK) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    struct qn_client_status st;
    if (qn_client_stream_open(conn, "/queen.v1.QueueService/Consume", NULL, &c->s, &st) != QN_OK) {
        fprintf(stderr, PROG ": opening the stream failed: %s\n", st.message);
        return 1;
    }
    Queen__V1__ConsumeSubscribe sub = QUEEN__V1__CONSUME_SUBSCRIBE__INIT;
    sub.queue = (char *)c->o.queue;
    sub.consumer_group = (char *)c->o.group;
    sub.batch = (uint32_t)c->o.batch;
    sub.credits = (uint32_t)c->o.credits;
    sub.raw_segments = true;
    Queen__V1__ConsumeRequest first = QUEEN__V1__CONSUME_REQUEST__INIT;
    first.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_SUBSCRIBE;
    first.subscribe = &sub;
    c->next_id = 1;
    qn_client_stream_send(c->s, &first.base);

    bool ended = false;
    int64_t last_message = now_ms(), stopping_since = -1;
    for (;;) {
        if (stopping_since < 0 && (stop_flag || done(c)))
            stopping_since = now_ms();
        if (stopping_since >= 0 && c->npending == 0)
            break;
        if (stopping_since >= 0 && now_ms() - stopping_since > ACK_WAIT_MS) {
            fprintf(stderr, PROG ": %zu ack(s) unanswered after %d s\n", c->npending,
                    ACK_WAIT_MS / 1000);
            c->failures++;
            break;
        }
        ProtobufCMessage *m = NULL;
        int rc =
            qn_client_stream_recv(c->s, &queen__v1__consume_response__descriptor, 200, &m, &st);
        if (rc == QN_ETIMEOUT) {
            if (stopping_since < 0 && c->o.idle_timeout &&
                now_ms() - last_message > c->o.idle_timeout * 1000) {
                fprintf(stderr, PROG ": no message for %ld s (received %ld of %ld)\n",
                        c->o.idle_timeout, c->processed, c->o.count);
                c->failures++;
                stop_flag = 1;
            }
            continue;
        }
        if (rc != QN_OK || m == NULL) {
            fprintf(stderr, PROG ": the stream ended early: %s\n",
                    rc != QN_OK || st.code != 0 ? st.message : "by the broker");
            c->failures++;
            ended = true;
            break;
        }
        Queen__V1__ConsumeResponse *r = (Queen__V1__ConsumeResponse *)m;
        if (r->kind_case == QUEEN__V1__CONSUME_RESPONSE__KIND_BATCH) {
            last_message = now_ms();
            if (stopping_since < 0)
                on_batch(c, r->batch); /* else: released when the stream ends */
        } else if (r->kind_case == QUEEN__V1__CONSUME_RESPONSE__KIND_ACK) {
            on_ack(c, r->request_id, r->ack);
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (!ended) {
        /* the broker answers OK and releases what is still leased */
        qn_client_stream_close_send(c->s);
        int64_t until = now_ms() + ACK_WAIT_MS;
        for (;;) {
            ProtobufCMessage *m = NULL;
            int rc =
                qn_client_stream_recv(c->s, &queen__v1__consume_response__descriptor, 200, &m, &st);
            if (rc == QN_ETIMEOUT) {
                if (now_ms() < until)
                    continue;
                fprintf(stderr, PROG ": the stream did not end within %d s of closing it\n",
                        ACK_WAIT_MS / 1000);
                c->failures++;
                break;
            }
            if (rc != QN_OK) {
                fprintf(stderr, PROG ": the stream failed: %s\n", st.message);
                c->failures++;
                break;
            }
            if (m == NULL) {
                if (st.code != 0) {
                    fprintf(stderr, PROG ": the stream failed: %s\n", st.message);
                    c->failures++;
                }
                break;
            }
            protobuf_c_message_free_unpacked(m, NULL); /* batches after the stop: not processed */
        }
    }
    fprintf(stderr, "consumed %ld from %s as %s\n", c->processed, c->o.queue, c->o.group);
    int failures = c->failures;
    qn_client_stream_free(c->s);
    qn_client_free(conn);
    qn_zctx_free(c->z);
    free(c);
    return failures ? 1 : 0;
}
