/*
 * process_test.h - PRIVATE to test/broker: the suites of the test_process
 * runner: the process level of broker/src (log.c), obs/ (metrics.c) and rpc/'s
 * pure page tokens (page_token.c).
 */
#ifndef QN_PROCESS_TEST_H
#define QN_PROCESS_TEST_H

#include <check.h>

Suite *qn_test_log_suite(void);
Suite *qn_test_metrics_suite(void);
Suite *qn_test_page_token_suite(void);

#endif
