/*
 * process_test.h - PRIVATE to test/broker: the suites of the test_process
 * runner: the process level of broker/src (log.c) and obs/ (metrics.c).
 */
#ifndef QN_PROCESS_TEST_H
#define QN_PROCESS_TEST_H

#include <check.h>

Suite *qn_test_log_suite(void);
Suite *qn_test_metrics_suite(void);

#endif
