/*
 * qctl_consume.c - queenctl's consuming commands: pop (one leased batch), ack
 * (one message, by offset or transaction id), tail (a Consume stream that
 * prints messages as they arrive and acks what it printed).
 *
 * tail: subscribe with --credits batches in advance; for each batch print the
 * messages (up to --count), ack per partition the last printed offset on the
 * stream (unless --no-ack or --auto-ack), grant one more credit. On SIGINT or
 * once --count messages were printed: wait for the acks' answers (bounded by
 * --timeout), half-close, wait for the end of the stream, exit 0. Messages
 * delivered but not printed are not acked: the broker releases their lease when
 * the stream ends and redelivers them.
 *
 * Tail lifecycle (enum tail_state, asserted in tail_set):
 *   RUNNING --(--count reached, SIGINT, server ended)--> DRAINING (acks in
 *   flight) --(all answered or timeout)--> CLOSING (half-closed) --(stream
 *   ended or timeout)--> DONE.
 *
 * Invariants:
 *   1. an ack is sent only for messages that were printed.
 *   2. acks_pending counts ack requests sent on the stream and not answered.
 */
#include <assert.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "qctl.h"
#include "queen/error.h"
#include "queen/v1/queue.pb-c.h"

#define SVC "/queen.v1.QueueService/"
#define MAX_ACK_PARTS 1024u /* distinct partitions in one batch we ack separately */

enum {
    OPT_BATCH = 0x600,
    OPT_WAIT,
    OPT_AUTO_ACK,
    OPT_LEASE,
    OPT_MAX_PARTITIONS,
    OPT_FROM,
    OPT_NAMESPACE,
    OPT_TASK,
    OPT_CREDITS,
    OPT_COUNT,
    OPT_NO_ACK,
    OPT_PARTITION_ID,
    OPT_OFFSET,
    OPT_TXID,
    OPT_STATUS,
    OPT_ERROR,
};

struct consume_args {
    const char *queue;
    const char *partition;
    const char *group;
    const char *ns;
    const char *task;
    uint32_t batch;
    int64_t wait_ms;
    bool auto_ack;
    uint32_t lease;
    uint32_t max_partitions;
    int mode; /* Queen__V1__SubscriptionMode */
    int64_t from_us;
    uint32_t credits;
    uint64_t count;
    bool no_ack;
    /* ack */
    const char *partition_id;
    bool offset_set;
    int64_t offset;
    const char *txid;
    int status; /* Queen__V1__AckStatus */
    const char *error;
    const char *lease_id;
};

static error_t consume_parse(int key, char *arg, struct argp_state *state)
{
    struct consume_args *a = qctl_cmd(state);
    switch (key) {
    case 'q':
        a->queue = arg;
        return 0;
    case 'p':
        a->partition = arg;
        return 0;
    case 'g':
        a->group = arg;
        return 0;
    case OPT_NAMESPACE:
        a->ns = arg;
        return 0;
    case OPT_TASK:
        a->task = arg;
        return 0;
    case OPT_BATCH:
        a->batch = qctl_arg_u32(state, "--batch", arg, 1, 1000000);
        return 0;
    case OPT_WAIT:
        a->wait_ms = qctl_arg_duration(state, "--wait", arg, 3600 * 1000);
        return 0;
    case OPT_AUTO_ACK:
        a->auto_ack = true;
        return 0;
    case OPT_LEASE:
        a->lease = qctl_arg_u32(state, "--lease", arg, 1, 86400);
        return 0;
    case OPT_MAX_PARTITIONS:
        a->max_partitions = qctl_arg_u32(state, "--max-partitions", arg, 1, 100000);
        return 0;
    case OPT_FROM:
        if (strcmp(arg, "earliest") == 0) {
            a->mode = QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_ALL;
        } else if (strcmp(arg, "latest") == 0) {
            a->mode = QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_NEW;
        } else {
            a->mode = QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_FROM_TIMESTAMP;
            a->from_us = qctl_arg_time(state, "--from", arg);
        }
        return 0;
    case OPT_CREDITS:
        a->credits = qctl_arg_u32(state, "--credits", arg, 1, 1000);
        return 0;
    case OPT_COUNT:
        a->count = (uint64_t)qctl_arg_i64(state, "--count", arg, 1, INT64_MAX);
        return 0;
    case OPT_NO_ACK:
        a->no_ack = true;
        return 0;
    case OPT_PARTITION_ID:
        a->partition_id = arg;
        return 0;
    case OPT_OFFSET:
        a->offset_set = true;
        a->offset = qctl_arg_i64(state, "--offset", arg, 0, INT64_MAX);
        return 0;
    case OPT_TXID:
        a->txid = arg;
        return 0;
    case OPT_STATUS:
        if (strcmp(arg, "completed") == 0)
            a->status = QUEEN__V1__ACK_STATUS__ACK_STATUS_COMPLETED;
        else if (strcmp(arg, "failed") == 0)
            a->status = QUEEN__V1__ACK_STATUS__ACK_STATUS_FAILED;
        else if (strcmp(arg, "retry") == 0)
            a->status = QUEEN__V1__ACK_STATUS__ACK_STATUS_RETRY;
        else if (strcmp(arg, "dlq") == 0)
            a->status = QUEEN__V1__ACK_STATUS__ACK_STATUS_DLQ;
        else
            argp_failure(state, QCTL_USAGE, 0,
                         "--status: expected completed, failed, retry or dlq, got \"%s\"", arg);
        return 0;
    case OPT_ERROR:
        a->error = arg;
        return 0;
    case OPT_LEASE + 0x100:
        a->lease_id = arg;
        return 0;
    case ARGP_KEY_ARG:
        argp_error(state, "unexpected argument \"%s\"", arg);
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

static const char *str(const char *s)
{
    return s != NULL ? s : "";
}

#define O_SELECT                                                                                   \
    {"queue", 'q', "QUEUE", 0, "the queue (or --namespace / --task to discover queues)", 0},       \
        {"partition", 'p', "PARTITION", 0, "only this partition (default: any)", 0},               \
        {"group", 'g', "GROUP", 0, "consumer group (default: queue mode, __QUEUE_MODE__)", 0},     \
        {"namespace", OPT_NAMESPACE, "NS", 0, "discover queues of this namespace", 0},             \
        {"task", OPT_TASK, "TASK", 0, "discover queues of this task", 0},                          \
        {"max-partitions",                                                                         \
         OPT_MAX_PARTITIONS,                                                                       \
         "N",                                                                                      \
         0,                                                                                        \
         "partitions one batch may claim with any-partition (default 1)",                          \
         0},                                                                                       \
        {"from",                                                                                   \
         OPT_FROM,                                                                                 \
         "WHERE",                                                                                  \
         0,                                                                                        \
         "where a new group starts: earliest, latest, or a time (2024-05-01T12:00:00Z, "           \
         "@SECONDS, -10m); an existing cursor is not moved (see group seek)",                      \
         0},                                                                                       \
        {"lease", OPT_LEASE, "SECONDS", 0, "lease length (default: the queue's lease_time)", 0},   \
    {                                                                                              \
        "auto-ack", OPT_AUTO_ACK, 0, 0, "commit the cursor on delivery (at most once, no lease)",  \
            0                                                                                      \
    }

static int need_target(const struct qctl *q, const struct consume_args *a)
{
    if (a->queue == NULL && a->ns == NULL && a->task == NULL)
        return qctl_usage(q, "--queue (or --namespace / --task) is required");
    return QCTL_OK;
}

/* ---------------------------------------------------------------- printing messages */

static int print_message_line(const struct qctl *q, const Queen__V1__Message *m)
{
    if (qctl_json(q))
        return qctl_emit(qctl_pb_json(&m->base));
    printf("%s@%" PRId64 "  ", m->partition, m->offset);
    qctl_put_text(stdout, m->payload.data, m->payload.len, 0);
    putchar('\n');
    return ferror(stdout) ? qctl_fail(QCTL_FAIL, "cannot write to standard output") : QCTL_OK;
}

/* ---------------------------------------------------------------- pop */

static int pop_table(const Queen__V1__PopResponse *r)
{
    if (r->n_messages == 0) {
        printf("no messages\n");
        return fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
    }
    char until[32];
    qctl_time_text(r->lease_expires_at_us, until);
    if (r->lease_id[0])
        printf("lease %s until %s, %zu messages\n", r->lease_id, until, r->n_messages);
    else
        printf("%zu messages (auto-acked)\n", r->n_messages);
    struct qctl_table *t =
        qctl_table_new(5, "PARTITION", "PARTITION_ID", "OFFSET", "TRANSACTION_ID", "PAYLOAD");
    for (size_t i = 0; i < r->n_messages; i++) {
        const Queen__V1__Message *m = r->messages[i];
        char *payload = NULL;
        size_t plen = 0;
        FILE *f = open_memstream(&payload, &plen);
        if (f != NULL) {
            qctl_put_text(f, m->payload.data, m->payload.len, 60);
            fclose(f);
        }
        qctl_table_cell(t, "%s", m->partition);
        qctl_table_cell(t, "%s", m->partition_id);
        qctl_table_cell(t, "%" PRId64, m->offset);
        qctl_table_cell(t, "%s", m->transaction_id);
        qctl_table_cell(t, "%s", payload != NULL ? payload : "");
        free(payload);
    }
    return qctl_table_print(t);
}

static int cmd_pop(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        O_SELECT,
        {"batch", OPT_BATCH, "N", 0, "most messages (default 100)", 0},
        {"wait", OPT_WAIT, "DURATION", 0, "wait this long for data when there is none (default 0)",
         0},
        {0},
    };
    struct consume_args a = {0};
    qctl_argp(q, opts, consume_parse, NULL,
              "Leases the next batch of a partition to the group and prints it with its lease "
              "id; acknowledge with `queenctl ack` (or use --auto-ack).",
              &a, argc, argv);
    int rc = need_target(q, &a);
    if (rc != QCTL_OK)
        return rc;
    Queen__V1__PopRequest req = QUEEN__V1__POP_REQUEST__INIT;
    req.queue = (char *)str(a.queue);
    req.partition = (char *)str(a.partition);
    req.namespace_ = (char *)str(a.ns);
    req.task = (char *)str(a.task);
    req.consumer_group = (char *)str(a.group);
    req.batch = a.batch;
    req.max_partitions = a.max_partitions;
    req.wait_ms = (uint32_t)a.wait_ms;
    req.auto_ack = a.auto_ack;
    req.lease_seconds = a.lease;
    req.subscription_mode = a.mode;
    req.subscription_from_us = a.from_us;
    ProtobufCMessage *resp = NULL;
    rc = qctl_unary(q, SVC "Pop", &req.base, &queen__v1__pop_response__descriptor,
                    a.wait_ms + 10000, &resp);
    if (rc != QCTL_OK)
        return rc;
    rc = qctl_json(q) ? qctl_emit(qctl_pb_json(resp)) : pop_table((Queen__V1__PopResponse *)resp);
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

/* ---------------------------------------------------------------- ack */

static const char *outcome_name(int o)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&queen__v1__ack_outcome__descriptor, o);
    if (v == NULL)
        return "?";
    return strncmp(v->name, "ACK_OUTCOME_", 12) == 0 ? v->name + 12 : v->name;
}

static bool ack_applied(const Queen__V1__AckResult *r)
{
    return r->outcome == QUEEN__V1__ACK_OUTCOME__ACK_OUTCOME_APPLIED ||
           r->outcome == QUEEN__V1__ACK_OUTCOME__ACK_OUTCOME_NOOP;
}

static int cmd_ack(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        {"partition-id", OPT_PARTITION_ID, "UUID", 0, "the message's partition_id (required)", 0},
        {"offset", OPT_OFFSET, "N", 0, "the message's offset", 0},
        {"txid", OPT_TXID, "TXID", 0, "or its transaction id", 0},
        {"lease-id", OPT_LEASE + 0x100, "UUID", 0,
         "the lease it was delivered under (checked when given)", 0},
        {"group", 'g', "GROUP", 0, "consumer group (default: queue mode)", 0},
        {"status", OPT_STATUS, "STATUS", 0,
         "completed (default), failed (spends a retry), retry (no budget spent), dlq", 0},
        {"error", OPT_ERROR, "TEXT", 0, "reason stored with a failure or dead letter", 0},
        {0},
    };
    struct consume_args a = {.status = QUEEN__V1__ACK_STATUS__ACK_STATUS_COMPLETED};
    qctl_argp(q, opts, consume_parse, NULL,
              "Acknowledges one message by partition id and offset (or transaction id). "
              "Completing offset N completes the earlier offsets of its batch. Exits 1 when the "
              "ack was not applied (the outcome says why).",
              &a, argc, argv);
    if (a.partition_id == NULL)
        return qctl_usage(q, "--partition-id is required");
    if (a.offset_set == (a.txid != NULL))
        return qctl_usage(q, "give exactly one of --offset and --txid");
    Queen__V1__AckItem item = QUEEN__V1__ACK_ITEM__INIT;
    Queen__V1__AckItem *items[1] = {&item};
    item.partition_id = (char *)a.partition_id;
    if (a.offset_set) {
        item.target_case = QUEEN__V1__ACK_ITEM__TARGET_OFFSET;
        item.offset = a.offset;
    } else {
        item.target_case = QUEEN__V1__ACK_ITEM__TARGET_TRANSACTION_ID;
        item.transaction_id = (char *)a.txid;
    }
    item.status = a.status;
    item.error = (char *)str(a.error);
    item.lease_id = (char *)str(a.lease_id);
    Queen__V1__AckRequest req = QUEEN__V1__ACK_REQUEST__INIT;
    req.consumer_group = (char *)str(a.group);
    req.items = items;
    req.n_items = 1;
    ProtobufCMessage *resp = NULL;
    int rc = qctl_unary(q, SVC "Ack", &req.base, &queen__v1__ack_response__descriptor, 0, &resp);
    if (rc != QCTL_OK)
        return rc;
    const Queen__V1__AckResponse *r = (const Queen__V1__AckResponse *)resp;
    if (r->n_results != 1) {
        protobuf_c_message_free_unpacked(resp, NULL);
        return qctl_fail(QCTL_FAIL, "the broker answered %zu results for one ack", r->n_results);
    }
    const Queen__V1__AckResult *res = r->results[0];
    if (qctl_json(q)) {
        rc = qctl_emit(qctl_pb_json(&res->base));
    } else {
        printf("%s offset %" PRId64 "%s%s%s%s\n", outcome_name(res->outcome), res->offset,
               res->dlq ? ", dead-lettered" : "", res->dropped ? ", dropped" : "",
               res->error[0] ? ": " : "", res->error);
        rc = fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
    }
    if (rc == QCTL_OK && !ack_applied(res))
        rc = qctl_fail(QCTL_FAIL, "the ack was not applied: %s%s%s", outcome_name(res->outcome),
                       res->error[0] ? ": " : "", res->error);
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

/* ---------------------------------------------------------------- tail */

enum tail_state { TAIL_RUNNING, TAIL_DRAINING, TAIL_CLOSING, TAIL_DONE };

struct tail {
    struct qctl *q;
    const struct consume_args *a;
    qn_client_stream *s;
    enum tail_state state;
    uint64_t printed;
    uint64_t next_id; /* request ids of acks */
    unsigned acks_pending;
    uint64_t ack_failures;
    int exit;
};

static void tail_set(struct tail *t, enum tail_state to)
{
    switch (to) {
    case TAIL_RUNNING:
        assert(0);
        break;
    case TAIL_DRAINING:
        assert(t->state == TAIL_RUNNING);
        break;
    case TAIL_CLOSING:
        assert(t->state == TAIL_DRAINING);
        break;
    case TAIL_DONE:
        break;
    }
    t->state = to;
}

static volatile sig_atomic_t tail_interrupted;

static void tail_sigint(int sig)
{
    (void)sig;
    tail_interrupted = 1;
}

static int send_req(struct tail *t, Queen__V1__ConsumeRequest *r)
{
    int rc = qn_client_stream_send(t->s, &r->base);
    if (rc != QN_OK)
        return qctl_fail(QCTL_FAIL, "cannot send on the Consume stream: %s", qn_strerror(rc));
    return QCTL_OK;
}

/* Acks, per partition, the last printed offset of the first n messages of b. */
static int ack_printed(struct tail *t, const Queen__V1__PopResponse *b, size_t n)
{
    if (n == 0 || t->a->no_ack || t->a->auto_ack || b->lease_id[0] == '\0')
        return QCTL_OK;
    Queen__V1__AckItem items[MAX_ACK_PARTS];
    Queen__V1__AckItem *ptrs[MAX_ACK_PARTS];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const Queen__V1__Message *m = b->messages[i];
        size_t j = 0;
        while (j < k && strcmp(items[j].partition_id, m->partition_id) != 0)
            j++;
        if (j == k) {
            if (k == MAX_ACK_PARTS)
                return qctl_fail(QCTL_FAIL, "a batch spans more than %u partitions", MAX_ACK_PARTS);
            Queen__V1__AckItem init = QUEEN__V1__ACK_ITEM__INIT;
            items[k] = init;
            items[k].partition_id = m->partition_id;
            items[k].target_case = QUEEN__V1__ACK_ITEM__TARGET_OFFSET;
            items[k].status = QUEEN__V1__ACK_STATUS__ACK_STATUS_COMPLETED;
            items[k].lease_id = b->lease_id;
            items[k].offset = m->offset;
            ptrs[k] = &items[k];
            k++;
        }
        if (m->offset > items[j].offset)
            items[j].offset = m->offset;
    }
    Queen__V1__AckRequest ack = QUEEN__V1__ACK_REQUEST__INIT;
    ack.consumer_group = (char *)str(t->a->group);
    ack.items = ptrs;
    ack.n_items = k;
    Queen__V1__ConsumeRequest r = QUEEN__V1__CONSUME_REQUEST__INIT;
    r.request_id = ++t->next_id;
    r.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_ACK;
    r.ack = &ack;
    int rc = send_req(t, &r);
    if (rc == QCTL_OK)
        t->acks_pending++;
    return rc;
}

static void ack_answered(struct tail *t, const Queen__V1__AckResponse *r)
{
    if (t->acks_pending > 0)
        t->acks_pending--;
    for (size_t i = 0; r != NULL && i < r->n_results; i++) {
        const Queen__V1__AckResult *res = r->results[i];
        if (ack_applied(res))
            continue;
        t->ack_failures++;
        t->exit = QCTL_FAIL;
        qctl_fail(QCTL_FAIL, "ack of offset %" PRId64 " not applied: %s%s%s", res->offset,
                  outcome_name(res->outcome), res->error[0] ? ": " : "", res->error);
    }
}

/* Handles one response. */
static int on_response(struct tail *t, const Queen__V1__ConsumeResponse *r)
{
    if (r->kind_case == QUEEN__V1__CONSUME_RESPONSE__KIND_ACK) {
        ack_answered(t, r->ack);
        return QCTL_OK;
    }
    if (r->kind_case != QUEEN__V1__CONSUME_RESPONSE__KIND_BATCH || r->batch == NULL)
        return QCTL_OK;
    if (t->state != TAIL_RUNNING)
        return QCTL_OK; /* not printed, not acked: released when the stream ends */
    const Queen__V1__PopResponse *b = r->batch;
    size_t n = b->n_messages;
    if (t->a->count > 0 && n > t->a->count - t->printed)
        n = (size_t)(t->a->count - t->printed);
    for (size_t i = 0; i < n; i++) {
        int rc = print_message_line(t->q, b->messages[i]);
        if (rc != QCTL_OK)
            return rc;
    }
    if (!qctl_json(t->q) && fflush(stdout) != 0)
        return qctl_fail(QCTL_FAIL, "cannot write to standard output");
    t->printed += n;
    int rc = ack_printed(t, b, n);
    if (rc != QCTL_OK)
        return rc;
    if (t->a->count > 0 && t->printed >= t->a->count) {
        tail_set(t, TAIL_DRAINING);
        return QCTL_OK;
    }
    Queen__V1__ConsumeRequest more = QUEEN__V1__CONSUME_REQUEST__INIT;
    more.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_CREDITS;
    more.credits = 1;
    return send_req(t, &more);
}

/* One step: wait up to ms for a response and handle it. Returns QCTL_OK,
 * QN_ETIMEOUT (nothing came), 1000 when the stream ended, or an exit status. */
#define STREAM_ENDED 1000
static int step(struct tail *t, int ms)
{
    ProtobufCMessage *m = NULL;
    struct qn_client_status st;
    int rc = qn_client_stream_recv(t->s, &queen__v1__consume_response__descriptor, ms, &m, &st);
    if (rc == QN_ETIMEOUT)
        return QN_ETIMEOUT;
    if (rc != QN_OK)
        return qctl_status_fail(&st);
    if (m == NULL) {
        if (st.code != 0)
            return qctl_status_fail(&st);
        return STREAM_ENDED;
    }
    rc = on_response(t, (const Queen__V1__ConsumeResponse *)m);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

static int cmd_tail(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        O_SELECT,
        {"batch", OPT_BATCH, "N", 0, "most messages per batch (default 1000)", 0},
        {"credits", OPT_CREDITS, "N", 0, "batches the broker may send ahead (default 2)", 0},
        {"count", OPT_COUNT, "N", 0, "stop after printing N messages", 0},
        {"no-ack", OPT_NO_ACK, 0, 0,
         "do not ack: the messages are redelivered once the stream ends", 0},
        {0},
    };
    struct consume_args a = {.credits = 2, .batch = 1000};
    qctl_argp(q, opts, consume_parse, NULL,
              "Subscribes to a queue with a Consume stream and prints messages as they arrive "
              "(-o table: PARTITION@OFFSET payload; -o json: one message object per line), acking "
              "what it printed, until interrupted (Ctrl-C ends the stream cleanly) or --count "
              "messages were printed.",
              &a, argc, argv);
    int rc = need_target(q, &a);
    if (rc != QCTL_OK)
        return rc;
    if (a.no_ack && a.auto_ack)
        return qctl_usage(q, "--no-ack and --auto-ack exclude each other");
    rc = qctl_connect(q);
    if (rc != QCTL_OK)
        return rc;
    struct tail t = {.q = q, .a = &a};
    /* The stream lives as long as it must: no deadline of its own. */
    struct qn_client_call_opts o = {.timeout_ms = 0};
    struct qn_client_status st;
    if (qn_client_stream_open(q->c, SVC "Consume", &o, &t.s, &st) != QN_OK)
        return qctl_status_fail(&st);

    Queen__V1__ConsumeSubscribe sub = QUEEN__V1__CONSUME_SUBSCRIBE__INIT;
    sub.queue = (char *)str(a.queue);
    sub.partition = (char *)str(a.partition);
    sub.namespace_ = (char *)str(a.ns);
    sub.task = (char *)str(a.task);
    sub.consumer_group = (char *)str(a.group);
    sub.batch = a.batch;
    sub.max_partitions = a.max_partitions;
    sub.auto_ack = a.auto_ack;
    sub.lease_seconds = a.lease;
    sub.subscription_mode = a.mode;
    sub.subscription_from_us = a.from_us;
    sub.credits = a.credits;
    Queen__V1__ConsumeRequest first = QUEEN__V1__CONSUME_REQUEST__INIT;
    first.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_SUBSCRIBE;
    first.subscribe = &sub;

    /* The first ^C ends the stream cleanly; a second one kills. */
    struct sigaction sa = {.sa_handler = tail_sigint, .sa_flags = SA_RESETHAND}, old_int;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);

    rc = send_req(&t, &first);
    while (rc == QCTL_OK && t.state == TAIL_RUNNING) {
        if (tail_interrupted) {
            tail_set(&t, TAIL_DRAINING);
            break;
        }
        int r = step(&t, 250);
        if (r == STREAM_ENDED) {
            tail_set(&t, TAIL_DONE);
            break;
        }
        if (r != QN_ETIMEOUT)
            rc = r;
    }
    if (rc == QCTL_OK && t.state == TAIL_DRAINING) {
        /* Wait (bounded) for the answers to the acks in flight, then half-close. */
        double until = qctl_now_s() + (double)q->g.timeout_ms / 1000.0;
        while (rc == QCTL_OK && t.acks_pending > 0 && qctl_now_s() < until) {
            int r = step(&t, 100);
            if (r == STREAM_ENDED)
                break;
            if (r != QN_ETIMEOUT)
                rc = r;
        }
        if (rc == QCTL_OK && t.acks_pending > 0)
            rc = qctl_fail(QCTL_FAIL, "%u acks were not answered within --timeout", t.acks_pending);
        tail_set(&t, TAIL_CLOSING);
        qn_client_stream_close_send(t.s);
        until = qctl_now_s() + 5.0;
        while (rc == QCTL_OK && qctl_now_s() < until) {
            int r = step(&t, 100);
            if (r == STREAM_ENDED)
                break;
            if (r != QN_ETIMEOUT && r != QCTL_OK)
                rc = r;
        }
        tail_set(&t, TAIL_DONE);
    }
    sigaction(SIGINT, &old_int, NULL);
    qn_client_stream_free(t.s);
    if (rc == QCTL_OK)
        rc = t.exit;
    return rc;
}

const struct qctl_command qctl_consume_commands[] = {
    {NULL, "pop", "lease and print the next batch of a queue", cmd_pop},
    {NULL, "ack", "acknowledge a message (completed, failed, retry, dlq)", cmd_ack},
    {NULL, "tail", "print messages as they arrive, acking them", cmd_tail},
    {NULL, NULL, NULL, NULL},
};
