/*
 * test_cl_tls.c - client/src/cl_tls.c: making TLS contexts, and the errors for
 * files that cannot be used (each names the file). Handshakes, verification
 * and client certificates against a real broker are in test/e2e
 * (test_queenctl.py, Connections).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_test.h"
#include "queen/client.h"
#include "queen/error.h"

START_TEST(contexts)
{
    qn_client_tls *t = NULL;
    struct qn_client_status st;
    struct qn_client_tls_opts none = {.verify = QN_CLIENT_VERIFY_NONE};
    ck_assert_int_eq(qn_client_tls_new(&none, &t, &st), QN_OK);
    qn_client_tls_free(t);
    struct qn_client_tls_opts system = {.verify = QN_CLIENT_VERIFY_FULL};
    ck_assert_int_eq(qn_client_tls_new(&system, &t, &st), QN_OK);
    qn_client_tls_free(t);
    qn_client_tls_free(NULL);
}
END_TEST

START_TEST(unusable_files)
{
    qn_client_tls *t = NULL;
    struct qn_client_status st;
    struct qn_client_tls_opts missing = {.ca_file = "/nonexistent/ca.pem"};
    ck_assert_int_eq(qn_client_tls_new(&missing, &t, &st), QN_EIO);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_CONFIG);
    ck_assert_ptr_nonnull(strstr(st.message, "/nonexistent/ca.pem"));

    char path[] = "/tmp/qn-cl-tls-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "not a certificate\n", 18), 18);
    close(fd);
    struct qn_client_tls_opts garbage = {.ca_file = path};
    ck_assert_int_eq(qn_client_tls_new(&garbage, &t, &st), QN_EIO);
    ck_assert_ptr_nonnull(strstr(st.message, path));
    struct qn_client_tls_opts cert = {.cert_file = path, .key_file = path};
    ck_assert_int_eq(qn_client_tls_new(&cert, &t, &st), QN_EIO);
    ck_assert_ptr_nonnull(strstr(st.message, "certificate file"));
    unlink(path);

    struct qn_client_tls_opts half = {.cert_file = "/c.pem"};
    ck_assert_int_eq(qn_client_tls_new(&half, &t, &st), QN_EINVAL);
    ck_assert_ptr_nonnull(strstr(st.message, "only the certificate"));
    struct qn_client_tls_opts other = {.key_file = "/k.pem"};
    ck_assert_int_eq(qn_client_tls_new(&other, &t, &st), QN_EINVAL);
    ck_assert_ptr_nonnull(strstr(st.message, "only the key"));
}
END_TEST

Suite *qn_test_cl_tls_suite(void)
{
    Suite *s = suite_create("cl_tls");
    TCase *t = tcase_create("tls");
    tcase_add_test(t, contexts);
    tcase_add_test(t, unusable_files);
    suite_add_tcase(s, t);
    return s;
}
