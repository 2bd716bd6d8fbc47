/*
 * queen_test_broker.c - queen-test-broker: the broker's serving process (health,
 * reflection, the transport) plus the test-only queen.test.v1.TestService, for
 * the end-to-end transport tests. Needs no database. Never installed.
 *
 * Methods (testsvc.proto):
 *   Echo     unary; payload "status:<code>:<text>" finishes with that status
 *   Hang     unary; answers after delay_ms, or never (deadline / shutdown tests)
 *   Stream   server-streaming; repeat messages of size bytes (0 = endless),
 *            producing only while less than STREAM_HIGH bytes are pending
 *   Collect  client-streaming; answers the total payload bytes at half-close
 *   Bidi     echoes each message with a sequence number
 *   Stats    what the handlers saw (cancel reasons, pending peaks, open calls)
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "broker.h"
#include "config.h"
#include "log.h"
#include "loops.h"
#include "queen/error.h"
#include "transport/call.h"
#include "transport/server.h"
#include "testsvc.pb-c.h"

#define STREAM_HIGH (64 * 1024)

typedef Queen__Test__V1__EchoRequest echo_req;
typedef Queen__Test__V1__EchoReply echo_reply;

/* What the handlers saw, for the whole process: every loop's module instance
 * (QUEEN_WORKERS) counts into worker 0's. */
struct test_counters {
    _Atomic int64_t cancels[4]; /* closed, deadline, shutdown, badrequest */
    _Atomic int64_t max_pending;
    _Atomic int64_t drains;
    _Atomic int64_t messages;
    _Atomic int64_t open_calls;
};

struct test_state {
    struct event_base *base;
    qn_rpc_server *server;
    struct qn_method methods[6];
    struct test_counters own;    /* worker 0's: the process's */
    struct test_counters *count; /* &own of worker 0's instance */
};

/* Per-call state of Hang, Stream, Collect and Bidi. */
struct tcall {
    struct test_state *ts;
    qn_call *call;
    struct event *timer;
    int32_t repeat, size, seq;
    int64_t total;
};

static struct test_state *state_of(qn_call *call)
{
    return qn_call_method(call)->data;
}

static struct tcall *tcall_new(qn_call *call)
{
    struct tcall *t = calloc(1, sizeof *t);
    if (t == NULL)
        abort(); /* test binary */
    t->ts = state_of(call);
    t->call = call;
    t->ts->count->open_calls++;
    qn_call_set_data(call, t);
    return t;
}

static void tcall_free(struct tcall *t)
{
    if (t == NULL)
        return;
    if (t->timer)
        event_free(t->timer);
    t->ts->count->open_calls--;
    qn_call_set_data(t->call, NULL);
    free(t);
}

static void tcall_finish(struct tcall *t, enum qn_grpc_code code, const char *msg)
{
    qn_call *call = t->call;
    tcall_free(t);
    qn_call_finish(call, code, msg);
}

static void on_cancel(qn_call *call, int reason)
{
    struct test_state *ts = state_of(call);
    switch (reason) {
    case QN_ECLOSED:
        ts->count->cancels[0]++;
        break;
    case QN_EDEADLINE:
        ts->count->cancels[1]++;
        break;
    case QN_ESHUTDOWN:
        ts->count->cancels[2]++;
        break;
    case QN_EBADREQUEST:
        ts->count->cancels[3]++;
        break;
    default:
        break;
    }
    tcall_free(qn_call_data(call));
}

static int reply(qn_call *call, const uint8_t *data, size_t len, int32_t seq, int64_t total)
{
    echo_reply r = QUEEN__TEST__V1__ECHO_REPLY__INIT;
    r.payload.data = (uint8_t *)data;
    r.payload.len = len;
    r.seq = seq;
    r.total = total;
    return qn_call_send(call, &r.base);
}

/* ---------------------------------------------------------------- Echo */

static void echo(qn_call *call, ProtobufCMessage *msg)
{
    echo_req *req = (echo_req *)msg;
    state_of(call)->count->messages++;
    if (req->payload.len > 7 && memcmp(req->payload.data, "status:", 7) == 0) {
        char text[512];
        size_t n = req->payload.len - 7 < sizeof text - 1 ? req->payload.len - 7 : sizeof text - 1;
        memcpy(text, req->payload.data + 7, n);
        text[n] = '\0';
        char *colon = strchr(text, ':');
        long code = strtol(text, NULL, 10);
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, (enum qn_grpc_code)code, colon ? colon + 1 : "");
        return;
    }
    int rc = reply(call, req->payload.data, req->payload.len, 0, (int64_t)req->payload.len);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc == QN_ELIMIT)
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "reply too large");
    else
        qn_call_finish(call, rc == QN_OK ? QN_GRPC_OK : QN_GRPC_INTERNAL, NULL);
}

/* ---------------------------------------------------------------- Hang */

static void hang_timer(evutil_socket_t fd, short what, void *arg)
{
    struct tcall *t = arg;
    reply(t->call, (const uint8_t *)"late", 4, 0, 0);
    tcall_finish(t, QN_GRPC_OK, NULL);
}

static void hang(qn_call *call, ProtobufCMessage *msg)
{
    echo_req *req = (echo_req *)msg;
    struct tcall *t = tcall_new(call);
    t->ts->count->messages++;
    if (req->delay_ms > 0) {
        t->timer = evtimer_new(t->ts->base, hang_timer, t);
        struct timeval tv = {req->delay_ms / 1000, (req->delay_ms % 1000) * 1000};
        evtimer_add(t->timer, &tv);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
}

/* ---------------------------------------------------------------- Stream */

static void stream_produce(qn_call *call);

static void stream_drained(qn_call *call)
{
    struct tcall *t = qn_call_data(call);
    if (t != NULL)
        t->ts->count->drains++;
    stream_produce(call);
}

static void stream_produce(qn_call *call)
{
    struct tcall *t = qn_call_data(call);
    if (t == NULL)
        return;
    uint8_t *buf = calloc(1, (size_t)t->size + 1);
    if (buf == NULL)
        abort();
    memset(buf, 's', (size_t)t->size);
    while (t->repeat == 0 || t->seq < t->repeat) {
        size_t pending = qn_call_pending_bytes(call);
        int64_t peak = atomic_load(&t->ts->count->max_pending);
        while ((int64_t)pending > peak &&
               !atomic_compare_exchange_weak(&t->ts->count->max_pending, &peak, (int64_t)pending))
            ;
        if (pending >= STREAM_HIGH) {
            free(buf);
            if (qn_call_on_drain(call, stream_drained) != QN_OK)
                abort(); /* test binary: out of memory */
            return;
        }
        int rc = reply(call, buf, (size_t)t->size, t->seq++, 0);
        if (rc != QN_OK) {
            free(buf);
            tcall_finish(t, QN_GRPC_INTERNAL, qn_strerror(rc));
            return;
        }
    }
    free(buf);
    tcall_finish(t, QN_GRPC_OK, NULL);
}

static void stream(qn_call *call, ProtobufCMessage *msg)
{
    echo_req *req = (echo_req *)msg;
    struct tcall *t = tcall_new(call);
    t->ts->count->messages++;
    t->repeat = req->repeat < 0 ? 0 : req->repeat;
    t->size = req->size < 0 ? 0 : req->size > (1 << 20) ? (1 << 20) : req->size;
    protobuf_c_message_free_unpacked(msg, NULL);
    stream_produce(call);
}

/* ---------------------------------------------------------------- Collect, Bidi */

static void collect(qn_call *call, ProtobufCMessage *msg)
{
    struct tcall *t = qn_call_data(call);
    if (t == NULL)
        t = tcall_new(call);
    t->ts->count->messages++;
    t->total += (int64_t)((echo_req *)msg)->payload.len;
    protobuf_c_message_free_unpacked(msg, NULL);
}

static void collect_done(qn_call *call)
{
    struct tcall *t = qn_call_data(call);
    if (t == NULL)
        t = tcall_new(call);
    int rc = reply(call, NULL, 0, 0, t->total);
    tcall_finish(t, rc == QN_OK ? QN_GRPC_OK : QN_GRPC_INTERNAL, NULL);
}

static void bidi(qn_call *call, ProtobufCMessage *msg)
{
    struct tcall *t = qn_call_data(call);
    if (t == NULL)
        t = tcall_new(call);
    t->ts->count->messages++;
    echo_req *req = (echo_req *)msg;
    int rc = reply(call, req->payload.data, req->payload.len, t->seq++, 0);
    protobuf_c_message_free_unpacked(msg, NULL);
    if (rc != QN_OK)
        tcall_finish(t, QN_GRPC_RESOURCE_EXHAUSTED, qn_strerror(rc));
}

static void bidi_done(qn_call *call)
{
    struct tcall *t = qn_call_data(call);
    if (t == NULL) {
        qn_call_finish(call, QN_GRPC_OK, NULL);
        return;
    }
    tcall_finish(t, QN_GRPC_OK, NULL);
}

/* ---------------------------------------------------------------- Stats */

static void stats(qn_call *call, ProtobufCMessage *msg)
{
    struct test_state *ts = state_of(call);
    protobuf_c_message_free_unpacked(msg, NULL);
    struct qn_rpc_stats rs;
    qn_rpc_server_stats(ts->server, &rs);
    Queen__Test__V1__StatsReply r = QUEEN__TEST__V1__STATS_REPLY__INIT;
    r.cancel_closed = ts->count->cancels[0];
    r.cancel_deadline = ts->count->cancels[1];
    r.cancel_shutdown = ts->count->cancels[2];
    r.cancel_badrequest = ts->count->cancels[3];
    r.max_pending = ts->count->max_pending;
    r.drains = ts->count->drains;
    r.messages = ts->count->messages;
    r.calls_open = rs.calls_open;
    r.connections_open = rs.connections_open;
    r.open_test_calls = ts->count->open_calls;
    qn_call_send(call, &r.base);
    qn_call_finish(call, QN_GRPC_OK, NULL);
}

/* ---------------------------------------------------------------- the module */

static int test_start(struct qn_broker_ctx *ctx, void **state)
{
    struct test_state *ts = calloc(1, sizeof *ts);
    if (ts == NULL)
        return QN_ENOMEM;
    ts->base = ctx->base;
    ts->server = ctx->server;
    /* worker 0 starts first and publishes its instance (loops.h) */
    struct test_state *first = ctx->worker == 0 ? ts : qn_loops_module_state(ctx->loops, 0);
    ts->count = first != NULL ? &first->own : &ts->own;
    const ProtobufCMessageDescriptor *req = &queen__test__v1__echo_request__descriptor;
    ts->methods[0] = (struct qn_method){
        .path = "/queen.test.v1.TestService/Echo", .request = req, .on_message = echo, .data = ts};
    ts->methods[1] = (struct qn_method){.path = "/queen.test.v1.TestService/Hang",
                                        .request = req,
                                        .on_message = hang,
                                        .on_cancel = on_cancel,
                                        .data = ts};
    ts->methods[2] = (struct qn_method){.path = "/queen.test.v1.TestService/Stream",
                                        .request = req,
                                        .server_streaming = true,
                                        .on_message = stream,
                                        .on_cancel = on_cancel,
                                        .data = ts};
    ts->methods[3] = (struct qn_method){.path = "/queen.test.v1.TestService/Collect",
                                        .request = req,
                                        .client_streaming = true,
                                        .on_message = collect,
                                        .on_half_close = collect_done,
                                        .on_cancel = on_cancel,
                                        .data = ts};
    ts->methods[4] = (struct qn_method){.path = "/queen.test.v1.TestService/Bidi",
                                        .request = req,
                                        .client_streaming = true,
                                        .server_streaming = true,
                                        .on_message = bidi,
                                        .on_half_close = bidi_done,
                                        .on_cancel = on_cancel,
                                        .data = ts};
    ts->methods[5] = (struct qn_method){.path = "/queen.test.v1.TestService/Stats",
                                        .request = &queen__test__v1__stats_request__descriptor,
                                        .on_message = stats,
                                        .data = ts};
    int rc = qn_rpc_register(ctx->server, ts->methods, 6);
    if (rc != QN_OK) {
        free(ts);
        return rc;
    }
    if (ctx->worker == 0)
        qn_loops_set_module_state(ctx->loops, 0, ts);
    *state = ts;
    return QN_OK;
}

static void test_stop(void *state)
{
    free(state);
}

int main(int argc, char **argv)
{
    struct qn_config cfg;
    char err[512] = "";
    if (qn_config_load(&cfg, err, sizeof err) != QN_OK) {
        fprintf(stderr, "queen-test-broker: %s\n", err);
        qn_config_free(&cfg);
        return 2;
    }
    qn_log_set_level_name(cfg.log_level);
    qn_log_set_format_name(cfg.log_format);
    static const struct qn_broker_module mods[] = {
        {"test", test_start, NULL, test_stop},
        {NULL, NULL, NULL, NULL},
    };
    int rc = qn_broker_serve(&cfg, mods);
    qn_config_free(&cfg);
    return rc == QN_OK ? 0 : 1;
}
