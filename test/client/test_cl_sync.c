/*
 * test_cl_sync.c - client/src/cl_sync.c (and the connection under it) against
 * the loopback server of cl_testsrv.c: unary calls (response decoded, status
 * and decoded message, deadline, undecodable and missing responses, a non-gRPC
 * answer, a dropped connection), request metadata (authorization per
 * connection and per call, grpc-timeout), and streams (bidirectional echo in
 * order, end status, receive timeout, the unread-bytes bound, freeing an open
 * stream).
 */
#include <stdio.h>
#include <string.h>

#include "client_test.h"
#include "queen/client.h"
#include "queen/error.h"
#include "queen/v1/queue.pb-c.h"

static struct testsrv *srv;
static qn_client *cl;

static void dial(const char *token, size_t max_queued)
{
    char target[32];
    snprintf(target, sizeof target, "127.0.0.1:%u", testsrv_port(srv));
    struct qn_client_config cfg = {.target = target, .token = token, .max_queued = max_queued};
    struct qn_client_status st;
    ck_assert_int_eq(qn_client_dial(&cfg, &cl, &st), QN_OK);
    ck_assert(qn_client_ready(cl));
}

static void setup(void)
{
    srv = testsrv_start();
    cl = NULL;
}

static void teardown(void)
{
    qn_client_free(cl);
    testsrv_stop(srv);
}

/* A PushRequest of n items whose partitions are "p<i>". */
static Queen__V1__PushRequest *request(unsigned n)
{
    static Queen__V1__PushItem items[16];
    static Queen__V1__PushItem *ptrs[16];
    static char names[16][16];
    static Queen__V1__PushRequest req;
    ck_assert_uint_le(n, 16);
    for (unsigned i = 0; i < n; i++) {
        Queen__V1__PushItem init = QUEEN__V1__PUSH_ITEM__INIT;
        items[i] = init;
        snprintf(names[i], sizeof names[i], "p%u", i);
        items[i].queue = "q";
        items[i].partition = names[i];
        items[i].payload.data = (uint8_t *)"x";
        items[i].payload.len = 1;
        ptrs[i] = &items[i];
    }
    Queen__V1__PushRequest init = QUEEN__V1__PUSH_REQUEST__INIT;
    req = init;
    req.n_items = n;
    req.items = ptrs;
    return &req;
}

static int unary(const char *path, const struct qn_client_call_opts *o,
                 Queen__V1__PushRequest **resp, struct qn_client_status *st)
{
    return qn_client_unary(cl, path, &request(3)->base, &queen__v1__push_request__descriptor, o,
                           (ProtobufCMessage **)resp, st);
}

START_TEST(unary_echo_and_metadata)
{
    dial("tok-1", 0);
    Queen__V1__PushRequest *r = NULL;
    struct qn_client_status st;
    struct qn_client_call_opts o = {.timeout_ms = 5000};
    ck_assert_int_eq(unary("/t.T/Echo", &o, &r, &st), QN_OK);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_NONE);
    ck_assert_int_eq(st.code, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->n_items, 3);
    ck_assert_str_eq(r->items[2]->partition, "p2");
    queen__v1__push_request__free_unpacked(r, NULL);
    char v[256];
    ck_assert(testsrv_header(srv, "authorization", v, sizeof v));
    ck_assert_str_eq(v, "Bearer tok-1");
    ck_assert(testsrv_header(srv, "grpc-timeout", v, sizeof v));
    ck_assert_str_eq(v, "5000m");
    ck_assert(testsrv_header(srv, "content-type", v, sizeof v));
    ck_assert_str_eq(v, "application/grpc");
    ck_assert(testsrv_header(srv, "te", v, sizeof v));
    ck_assert_str_eq(v, "trailers");
    ck_assert(testsrv_header(srv, ":path", v, sizeof v));
    ck_assert_str_eq(v, "/t.T/Echo");

    /* A call's own token replaces the connection's; "" sends none. */
    struct qn_client_call_opts other = {.token = "tok-2"};
    ck_assert_int_eq(unary("/t.T/Echo", &other, &r, &st), QN_OK);
    queen__v1__push_request__free_unpacked(r, NULL);
    ck_assert(testsrv_header(srv, "authorization", v, sizeof v));
    ck_assert_str_eq(v, "Bearer tok-2");
    ck_assert(!testsrv_header(srv, "grpc-timeout", v, sizeof v));
    struct qn_client_call_opts none = {.token = ""};
    ck_assert_int_eq(unary("/t.T/Echo", &none, &r, &st), QN_OK);
    queen__v1__push_request__free_unpacked(r, NULL);
    ck_assert(!testsrv_header(srv, "authorization", v, sizeof v));
    struct qn_client_call_opts bad = {.token = "a b"};
    ck_assert_int_eq(unary("/t.T/Echo", &bad, &r, &st), QN_EINVAL);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_CONFIG);
}
END_TEST

START_TEST(unary_status_and_message)
{
    dial(NULL, 0);
    Queen__V1__PushRequest *r = NULL;
    struct qn_client_status st;
    ck_assert_int_eq(unary("/t.T/Status", NULL, &r, &st), QN_OK);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_NONE);
    ck_assert_int_eq(st.code, 5);
    ck_assert_str_eq(st.message, "no such queue?\xE2\x9C\x93");
}
END_TEST

START_TEST(unary_deadline)
{
    dial(NULL, 0);
    Queen__V1__PushRequest *r = NULL;
    struct qn_client_status st;
    struct qn_client_call_opts o = {.timeout_ms = 200};
    uint64_t t0 = qn_client_now_ns();
    ck_assert_int_eq(unary("/t.T/Silent", &o, &r, &st), QN_EDEADLINE);
    uint64_t ms = (qn_client_now_ns() - t0) / 1000000u;
    ck_assert_uint_ge(ms, 190);
    ck_assert_uint_lt(ms, 5000);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_DEADLINE);
    ck_assert_ptr_null(r);
    /* The connection is still usable. */
    ck_assert_int_eq(unary("/t.T/Echo", NULL, &r, &st), QN_OK);
    queen__v1__push_request__free_unpacked(r, NULL);
}
END_TEST

START_TEST(unary_bad_answers)
{
    dial(NULL, 0);
    Queen__V1__PushRequest *r = NULL;
    struct qn_client_status st;
    ck_assert_int_eq(unary("/t.T/Garbage", NULL, &r, &st), QN_EPROTO);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_RESPONSE);
    ck_assert_ptr_nonnull(strstr(st.message, "did not decode"));
    ck_assert_int_eq(unary("/t.T/Empty", NULL, &r, &st), QN_EPROTO);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_RESPONSE);
    ck_assert_ptr_nonnull(strstr(st.message, "0 response messages"));
    ck_assert_int_eq(unary("/t.T/NotGrpc", NULL, &r, &st), QN_ECLOSED);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_HTTP2);
    ck_assert_ptr_nonnull(strstr(st.message, "HTTP 404"));
    ck_assert_ptr_null(r);
}
END_TEST

START_TEST(unary_connection_dropped)
{
    dial(NULL, 0);
    Queen__V1__PushRequest *r = NULL;
    struct qn_client_status st;
    ck_assert_int_eq(unary("/t.T/Drop", NULL, &r, &st), QN_ECLOSED);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_HTTP2);
    ck_assert_msg(strstr(st.message, "connection lost during the call") != NULL &&
                      strstr(st.message, "closed the connection") != NULL,
                  "%s", st.message);
    /* A dialled connection stays down. */
    ck_assert(qn_client_dead(cl));
    ck_assert_int_eq(qn_client_run(cl, 10), QN_ECLOSED);
    ck_assert_int_eq(unary("/t.T/Echo", NULL, &r, &st), QN_ECLOSED);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_HTTP2);
}
END_TEST

START_TEST(stream_bidi_in_order)
{
    dial(NULL, 0);
    qn_client_stream *s = NULL;
    struct qn_client_status st;
    ck_assert_int_eq(qn_client_stream_open(cl, "/t.T/Echo", NULL, &s, &st), QN_OK);
    for (unsigned i = 1; i <= 5; i++) {
        ck_assert_int_eq(qn_client_stream_send(s, &request(i)->base), QN_OK);
        ProtobufCMessage *m = NULL;
        ck_assert_int_eq(
            qn_client_stream_recv(s, &queen__v1__push_request__descriptor, 5000, &m, &st), QN_OK);
        ck_assert_ptr_nonnull(m);
        ck_assert_uint_eq(((Queen__V1__PushRequest *)m)->n_items, i);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    ck_assert(!qn_client_stream_done(s));
    qn_client_stream_close_send(s);
    ck_assert_int_eq(qn_client_stream_send(s, &request(1)->base), QN_EINVAL);
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    ck_assert_int_eq(qn_client_stream_recv(s, &queen__v1__push_request__descriptor, 5000, &m, &st),
                     QN_OK);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_NONE);
    ck_assert_int_eq(st.code, 0);
    ck_assert(qn_client_stream_done(s));
    /* Ended: the same answer again. */
    ck_assert_int_eq(qn_client_stream_recv(s, &queen__v1__push_request__descriptor, 0, &m, &st),
                     QN_OK);
    ck_assert_ptr_null(m);
    qn_client_stream_free(s);
}
END_TEST

START_TEST(stream_timeout_and_free_while_open)
{
    dial(NULL, 0);
    qn_client_stream *s = NULL;
    struct qn_client_status st;
    ck_assert_int_eq(qn_client_stream_open(cl, "/t.T/Silent", NULL, &s, &st), QN_OK);
    ck_assert_int_eq(qn_client_stream_send(s, &request(1)->base), QN_OK);
    ProtobufCMessage *m = NULL;
    uint64_t t0 = qn_client_now_ns();
    ck_assert_int_eq(qn_client_stream_recv(s, &queen__v1__push_request__descriptor, 100, &m, &st),
                     QN_ETIMEOUT);
    ck_assert_uint_ge((qn_client_now_ns() - t0) / 1000000u, 95);
    ck_assert_ptr_null(m);
    qn_client_stream_free(s); /* cancels the open call */
    Queen__V1__PushRequest *r = NULL;
    ck_assert_int_eq(unary("/t.T/Echo", NULL, &r, &st), QN_OK);
    queen__v1__push_request__free_unpacked(r, NULL);
    ck_assert_uint_eq(qn_client_active(cl), 0);
}
END_TEST

START_TEST(stream_unread_bound)
{
    dial(NULL, 256u * 1024u); /* the server floods 40 x 32 KiB */
    qn_client_stream *s = NULL;
    struct qn_client_status st;
    ck_assert_int_eq(qn_client_stream_open(cl, "/t.T/Flood", NULL, &s, &st), QN_OK);
    qn_client_stream_close_send(s);
    /* Let the call end (the bound cancels it), reading nothing meanwhile. */
    for (int i = 0; i < 500 && qn_client_active(cl) > 0; i++)
        qn_client_run(cl, 10);
    ck_assert_uint_eq(qn_client_active(cl), 0);
    ck_assert(!qn_client_stream_done(s)); /* what arrived in time is still queued */
    unsigned got = 0;
    int rc;
    for (;;) {
        ProtobufCMessage *m = NULL;
        rc = qn_client_stream_recv(s, &queen__v1__push_request__descriptor, 5000, &m, &st);
        if (rc != QN_OK || m == NULL)
            break;
        protobuf_c_message_free_unpacked(m, NULL);
        got++;
    }
    ck_assert_int_eq(rc, QN_ELIMIT);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_LIMIT);
    ck_assert_uint_ge(got, 1);
    ck_assert_uint_le(got * (32u * 1024u), 256u * 1024u); /* message bytes, as queued */
    qn_client_stream_free(s);
}
END_TEST

Suite *qn_test_cl_sync_suite(void)
{
    Suite *s = suite_create("cl_sync");
    TCase *t = tcase_create("loopback");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 30);
    tcase_add_test(t, unary_echo_and_metadata);
    tcase_add_test(t, unary_status_and_message);
    tcase_add_test(t, unary_deadline);
    tcase_add_test(t, unary_bad_answers);
    tcase_add_test(t, unary_connection_dropped);
    tcase_add_test(t, stream_bidi_in_order);
    tcase_add_test(t, stream_timeout_and_free_while_open);
    tcase_add_test(t, stream_unread_bound);
    suite_add_tcase(s, t);
    return s;
}
