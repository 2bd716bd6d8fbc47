/*
 * test_client_main.c - the client library's suites (one per source file of
 * client/src) for the shared runner main (test/support/check_main.c: usage,
 * fork mode, exit status).
 */
#include "check_main.h"
#include "client_test.h"

static const struct qn_check_suite suites[] = {
    {"cl_wire", qn_test_cl_wire_suite, false}, {"cl_status", qn_test_cl_status_suite, false},
    {"cl_dial", qn_test_cl_dial_suite, false}, {"cl_tls", qn_test_cl_tls_suite, false},
    {"cl_sync", qn_test_cl_sync_suite, false},
};

const struct qn_check_runner qn_check_runner = {"test_client", suites, QN_CHECK_NSUITES(suites),
                                                NULL};
