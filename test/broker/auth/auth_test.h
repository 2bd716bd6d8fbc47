/*
 * auth_test.h - PRIVATE to test/broker/auth: the suites the runner registers
 * and helpers shared between them.
 */
#ifndef QN_AUTH_TEST_H
#define QN_AUTH_TEST_H

#include <check.h>

#include "auth.h"

Suite *qn_test_grant_suite(void);
Suite *qn_test_jwt_suite(void);
Suite *qn_test_mtls_suite(void);

/* A principal holding these grants (strict parsing; fails the test otherwise). */
qn_principal *qn_test_principal(const char *const *grants, size_t n);

#endif
