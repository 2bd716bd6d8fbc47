/*
 * test_cl_status.c - client/src/cl_status.c: how each way a call can end is
 * classified and described, and the stage names.
 */
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "client_test.h"
#include "queen/client.h"
#include "queen/error.h"

static struct qn_client_status classify(struct qn_client_call_result r)
{
    struct qn_client_status st;
    if (r.grpc_message == NULL)
        r.grpc_message = "";
    qn_client_result_status(&r, &st);
    return st;
}

START_TEST(each_end_is_classified)
{
    struct qn_client_status st;
    st = classify((struct qn_client_call_result){
        .end = QN_CLIENT_END_STATUS, .grpc_status = 5, .grpc_message = "no such queue"});
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_NONE);
    ck_assert_int_eq(st.code, 5);
    ck_assert_str_eq(st.message, "no such queue");

    st = classify((struct qn_client_call_result){
        .end = QN_CLIENT_END_NO_STATUS, .grpc_status = -1, .http_status = 404});
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_HTTP2);
    ck_assert_int_eq(st.code, -1);
    ck_assert_ptr_nonnull(strstr(st.message, "HTTP 404"));

    st = classify((struct qn_client_call_result){.end = QN_CLIENT_END_NO_STATUS,
                                                 .grpc_status = -1,
                                                 .http_status = 200,
                                                 .h2_error = NGHTTP2_REFUSED_STREAM});
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_HTTP2);
    ck_assert_ptr_nonnull(strstr(st.message, "reset"));

    st = classify((struct qn_client_call_result){
        .end = QN_CLIENT_END_BAD_FRAME, .grpc_status = -1, .frame_error = QN_ELIMIT});
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_RESPONSE);
    ck_assert_ptr_nonnull(strstr(st.message, "larger"));

    st = classify((struct qn_client_call_result){
        .end = QN_CLIENT_END_BAD_FRAME, .grpc_status = -1, .frame_error = QN_EPROTO});
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_RESPONSE);
    ck_assert_ptr_nonnull(strstr(st.message, "framing"));

    st =
        classify((struct qn_client_call_result){.end = QN_CLIENT_END_CONN_LOST, .grpc_status = -1});
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_HTTP2);
    ck_assert_ptr_nonnull(strstr(st.message, "lost"));

    st = classify((struct qn_client_call_result){.end = QN_CLIENT_END_DEADLINE, .grpc_status = -1});
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_DEADLINE);
    ck_assert_ptr_nonnull(strstr(st.message, "deadline"));
}
END_TEST

START_TEST(stage_names_and_clear)
{
    ck_assert_str_eq(qn_client_fail_name(QN_CLIENT_FAIL_NONE), "");
    ck_assert_str_eq(qn_client_fail_name(QN_CLIENT_FAIL_CONNECT), "connect");
    ck_assert_str_eq(qn_client_fail_name(QN_CLIENT_FAIL_TLS), "tls");
    ck_assert_str_eq(qn_client_fail_name(QN_CLIENT_FAIL_DEADLINE), "deadline");
    ck_assert_str_eq(qn_client_fail_name((enum qn_client_fail)99), "unknown");
    struct qn_client_status st = {.fail = QN_CLIENT_FAIL_TLS, .code = 3, .message = "x"};
    qn_client_status_clear(&st);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_NONE);
    ck_assert_int_eq(st.code, -1);
    ck_assert_str_eq(st.message, "");
}
END_TEST

Suite *qn_test_cl_status_suite(void)
{
    Suite *s = suite_create("cl_status");
    TCase *t = tcase_create("status");
    tcase_add_test(t, each_end_is_classified);
    tcase_add_test(t, stage_names_and_clear);
    suite_add_tcase(s, t);
    return s;
}
