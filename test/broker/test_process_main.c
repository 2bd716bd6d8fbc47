/*
 * test_process_main.c - the suites of the broker's process level and obs/ for
 * the shared runner main (test/support/check_main.c): log (the JSON line
 * format), metrics (the registry and its text exposition). No database.
 */
#include "check_main.h"
#include "process_test.h"

static const struct qn_check_suite suites[] = {
    {"log", qn_test_log_suite, false},
    {"metrics", qn_test_metrics_suite, false},
    {"page_token", qn_test_page_token_suite, false},
};

const struct qn_check_runner qn_check_runner = {"test_process", suites, QN_CHECK_NSUITES(suites),
                                                NULL};
