/*
 * test_cl_dial.c - client/src/cl_dial.c: parsing and resolving targets
 * (numeric hosts only: no name service is needed), dialling a port where
 * nobody listens, and options refused before anything is sent.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_test.h"
#include "queen/client.h"
#include "queen/error.h"

START_TEST(targets_parse)
{
    struct qn_client_addr a;
    struct qn_client_status st;
    ck_assert_int_eq(qn_client_resolve("127.0.0.1:80", NULL, &a, &st), QN_OK);
    ck_assert_str_eq(a.host, "127.0.0.1");
    ck_assert_str_eq(a.authority, "127.0.0.1:80");
    ck_assert(a.ip_literal);
    ck_assert_int_eq(a.addr.ss_family, AF_INET);
    ck_assert_int_eq(ntohs(((struct sockaddr_in *)&a.addr)->sin_port), 80);

    ck_assert_int_eq(qn_client_resolve("127.0.0.1", NULL, &a, &st), QN_OK);
    ck_assert_str_eq(a.authority, "127.0.0.1:6632");
    ck_assert_int_eq(qn_client_resolve("127.0.0.1", "9", &a, &st), QN_OK);
    ck_assert_str_eq(a.authority, "127.0.0.1:9");

    ck_assert_int_eq(qn_client_resolve("[::1]:6643", NULL, &a, &st), QN_OK);
    ck_assert_str_eq(a.host, "::1");
    ck_assert_str_eq(a.authority, "[::1]:6643");
    ck_assert_int_eq(a.addr.ss_family, AF_INET6);
    ck_assert_int_eq(qn_client_resolve("::1", NULL, &a, &st), QN_OK);
    ck_assert_str_eq(a.authority, "[::1]:6632");
}
END_TEST

START_TEST(bad_targets_are_config_errors)
{
    static const char *bad[] = {"",     ":80",  "h:",     "h:0",     "h:65536",
                                "h:8o", "[::1", "[::1]x", "h:123456"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct qn_client_addr a;
        struct qn_client_status st;
        ck_assert_msg(qn_client_resolve(bad[i], NULL, &a, &st) == QN_EINVAL, "%s", bad[i]);
        ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_CONFIG);
        ck_assert(st.message[0] != '\0');
    }
}
END_TEST

START_TEST(dial_refused)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    close(fd); /* nobody listens there now */
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%u", ntohs(sa.sin_port));
    struct qn_client_config cfg = {.target = target};
    qn_client *c = NULL;
    struct qn_client_status st;
    ck_assert_int_eq(qn_client_dial(&cfg, &c, &st), QN_ECLOSED);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_CONNECT);
    ck_assert_int_eq(st.code, -1);
    ck_assert_msg(strstr(st.message, target) != NULL && strstr(st.message, "refused") != NULL, "%s",
                  st.message);
}
END_TEST

START_TEST(dial_refuses_bad_options)
{
    qn_client *c = NULL;
    struct qn_client_status st;
    struct qn_client_config cfg = {.target = "127.0.0.1:1", .ca_file = "/x.pem"};
    ck_assert_int_eq(qn_client_dial(&cfg, &c, &st), QN_EINVAL);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_CONFIG);
    ck_assert_ptr_nonnull(strstr(st.message, "needs TLS"));
    struct qn_client_config tok = {.target = "127.0.0.1:1", .token = "two words"};
    ck_assert_int_eq(qn_client_dial(&tok, &c, &st), QN_EINVAL);
    ck_assert_int_eq(st.fail, QN_CLIENT_FAIL_CONFIG);
    ck_assert_ptr_nonnull(strstr(st.message, "token"));
}
END_TEST

Suite *qn_test_cl_dial_suite(void)
{
    Suite *s = suite_create("cl_dial");
    TCase *t = tcase_create("dial");
    tcase_add_test(t, targets_parse);
    tcase_add_test(t, bad_targets_are_config_errors);
    tcase_add_test(t, dial_refused);
    tcase_add_test(t, dial_refuses_bad_options);
    suite_add_tcase(s, t);
    return s;
}
