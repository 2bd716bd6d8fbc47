/*
 * test_transport_main.c - the suites of the transport's pure and loop-local
 * parts (test/broker/transport/) for the shared runner main
 * (test/support/check_main.c): grpc_wire, reflection (the descriptor index),
 * net (connections against a fake protocol, on a real socket), http_wire (the
 * side port's request head and gRPC-Web framing). None needs a
 * database.
 */
#include "check_main.h"
#include "transport_test.h"

static const struct qn_check_suite suites[] = {
    {"grpc_wire", qn_test_grpc_wire_suite, false},
    {"reflection", qn_test_reflection_suite, false},
    {"net", qn_test_net_suite, false},
    {"http_wire", qn_test_http_wire_suite, false},
};

const struct qn_check_runner qn_check_runner = {"test_transport", suites, QN_CHECK_NSUITES(suites),
                                                NULL};
