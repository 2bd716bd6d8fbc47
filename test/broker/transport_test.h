/*
 * transport_test.h - PRIVATE to test/broker: the suites of the test_transport
 * runner, one per broker/src/transport file under test (test/broker/transport/).
 */
#ifndef QN_TRANSPORT_TEST_H
#define QN_TRANSPORT_TEST_H

#include <check.h>

Suite *qn_test_grpc_wire_suite(void);
Suite *qn_test_reflection_suite(void);
Suite *qn_test_net_suite(void);
Suite *qn_test_http_wire_suite(void);

#endif
