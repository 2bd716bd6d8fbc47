/*
 * examples/c/example.h - what the C example producer and consumer share: the
 * connection options (the same as the Python and Node examples'), dialing the
 * broker, waiting until it serves, and printing JSON strings.
 *
 * The examples use three libraries of this repository: qn_client (gRPC over
 * HTTP/2), qn_proto (the protobuf-c code generated from proto/) and qn_codec
 * (frames and segments, codec/SPEC.md), so that they can push and pop segments
 * in their stored, compressed form (PushSegments, PopRequest.raw_segments).
 */
#ifndef QN_EXAMPLE_H
#define QN_EXAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "queen/client.h"

/* Connection options, from flags or the QUEEN_ADDR, QUEEN_CA and QUEEN_TOKEN
 * environment variables. */
struct ex_conn_opts {
    const char *addr;        /* --addr, default localhost:6632 */
    const char *ca;          /* --ca: TLS with this CA bundle; NULL: h2c */
    const char *server_name; /* --server-name */
    const char *token;       /* --token: a bearer token for every call */
    long wait_ready;         /* --wait-ready SECONDS: poll health until SERVING */
    bool json;               /* --json: one JSON object per line */
};

/* Long options every example takes; their codes start at 1000. */
#define EX_CONN_LONGOPTS                                                                           \
    {"addr", required_argument, NULL, 1000}, {"ca", required_argument, NULL, 1001},                \
        {"server-name", required_argument, NULL, 1002}, {"token", required_argument, NULL, 1003},  \
        {"wait-ready", required_argument, NULL, 1004}, {"json", no_argument, NULL, 1005},          \
    {                                                                                              \
        "proto-dir", required_argument, NULL, 1006                                                 \
    }

void ex_conn_defaults(struct ex_conn_opts *o);
/* Handles one of the connection options; false when code is not one. Exits 2
 * for a bad value. */
bool ex_conn_option(struct ex_conn_opts *o, int code, const char *arg);

/* Exits with status 2 after printing "<prog>: <msg>". */
void ex_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a decimal integer in [min, max] for option `name`; exits 2 otherwise. */
long ex_parse_long(const char *prog, const char *name, const char *s, long min, long max);

/* Connects (TLS when o->ca is set), then waits for SERVING when asked. Exits 2
 * when the configuration is bad or the broker never served, 1 when it cannot be
 * reached. */
qn_client *ex_connect(const char *prog, const struct ex_conn_opts *o);

/* Writes s[0..n) as a JSON string (quotes included). */
void ex_json_str(FILE *f, const char *s, size_t n);

/* "QUEUED" for PUSH_STATUS_QUEUED, and so on. */
const char *ex_push_status_name(int status);

#endif
