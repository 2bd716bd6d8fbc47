/*
 * test_auth_main.c - the suites of broker/src/auth (one per source file: grant,
 * jwt, mtls) for the shared runner main (test/support/check_main.c: usage, fork
 * mode, exit status).
 */
#include "auth_test.h"
#include "check_main.h"

static const struct qn_check_suite suites[] = {
    {"grant", qn_test_grant_suite, false},
    {"jwt", qn_test_jwt_suite, false},
    {"mtls", qn_test_mtls_suite, false},
};

const struct qn_check_runner qn_check_runner = {"test_auth", suites, QN_CHECK_NSUITES(suites),
                                                NULL};
