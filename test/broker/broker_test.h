/*
 * broker_test.h - PRIVATE to test/broker: the suite constructors the runner
 * test_broker registers (one per broker/src file under test).
 */
#ifndef QN_BROKER_TEST_H
#define QN_BROKER_TEST_H

#include <check.h>

Suite *qn_test_grpc_wire_suite(void);
Suite *qn_test_reflection_suite(void);

#endif
