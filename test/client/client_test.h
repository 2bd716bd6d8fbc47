/*
 * client_test.h - PRIVATE to test/client: the suite constructors the runner
 * registers (one per client/src file), and the loopback HTTP/2 server the
 * blocking-API suite talks to (cl_testsrv.c).
 */
#ifndef QN_TEST_CLIENT_TEST_H
#define QN_TEST_CLIENT_TEST_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

Suite *qn_test_cl_wire_suite(void);
Suite *qn_test_cl_status_suite(void);
Suite *qn_test_cl_dial_suite(void);
Suite *qn_test_cl_tls_suite(void);
Suite *qn_test_cl_sync_suite(void);

/*
 * An h2c gRPC server on 127.0.0.1 in a thread of its own, one connection at a
 * time. Routes by :path:
 *   /t.T/Echo     echoes the request's bytes as they arrive; grpc-status 0 after
 *                 the request ends (unary and bidirectional alike)
 *   /t.T/Status   trailers-only: grpc-status 5, a percent-encoded grpc-message
 *   /t.T/Silent   never answers
 *   /t.T/Flood    40 messages of 32 KiB, then grpc-status 0
 *   /t.T/Garbage  one message that is not protobuf, grpc-status 0
 *   /t.T/Empty    no message, grpc-status 0
 *   /t.T/NotGrpc  HTTP 404 without gRPC headers
 *   /t.T/Drop     closes the connection
 */
struct testsrv;

struct testsrv *testsrv_start(void);
uint16_t testsrv_port(const struct testsrv *s);
void testsrv_stop(struct testsrv *s);

/* The value of request header name in the newest request, copied into out;
 * false when that request had no such header. */
bool testsrv_header(struct testsrv *s, const char *name, char *out, size_t cap);

#endif
