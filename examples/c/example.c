/*
 * examples/c/example.c - connection options, dialing and JSON output shared by
 * the C example producer and consumer (example.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "example.h"
#include "grpc/health/v1/health.pb-c.h"
#include "queen/error.h"
#include "queen/v1/queue.pb-c.h"

void ex_conn_defaults(struct ex_conn_opts *o)
{
    memset(o, 0, sizeof *o);
    const char *e = getenv("QUEEN_ADDR");
    o->addr = e && *e ? e : "localhost:6632";
    e = getenv("QUEEN_CA");
    o->ca = e && *e ? e : NULL;
    e = getenv("QUEEN_TOKEN");
    o->token = e && *e ? e : NULL;
}

void ex_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

long ex_parse_long(const char *prog, const char *name, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        ex_usage_error(prog, "--%s must be an integer from %ld to %ld, not '%s'", name, min, max,
                       s);
    return v;
}

bool ex_conn_option(struct ex_conn_opts *o, int code, const char *arg)
{
    switch (code) {
    case 1000:
        o->addr = arg;
        return true;
    case 1001:
        o->ca = arg;
        return true;
    case 1002:
        o->server_name = arg;
        return true;
    case 1003:
        o->token = arg;
        return true;
    case 1004:
        o->wait_ready = ex_parse_long("example", "wait-ready", arg, 0, 3600);
        return true;
    case 1005:
        o->json = true;
        return true;
    case 1006: /* accepted for parity with the Python example; C needs no stubs */
        return true;
    default:
        return false;
    }
}

static bool serving(qn_client *c, char *last, size_t cap)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = "";
    ProtobufCMessage *resp = NULL;
    struct qn_client_status st;
    struct qn_client_call_opts co = {.timeout_ms = 2000};
    int rc = qn_client_unary(c, "/grpc.health.v1.Health/Check", &req.base,
                             &grpc__health__v1__health_check_response__descriptor, &co, &resp, &st);
    if (rc != QN_OK || st.code != 0) {
        snprintf(last, cap, "%s", st.message[0] ? st.message : "no answer");
        return false;
    }
    Grpc__Health__V1__HealthCheckResponse *h = (Grpc__Health__V1__HealthCheckResponse *)resp;
    bool ok = h->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    snprintf(last, cap, "status %d", (int)h->status);
    protobuf_c_message_free_unpacked(resp, NULL);
    return ok;
}

static int64_t now_ms(void)
{
    return (int64_t)(qn_client_now_ns() / 1000000u);
}

qn_client *ex_connect(const char *prog, const struct ex_conn_opts *o)
{
    struct qn_client_config cfg = {0};
    cfg.target = o->addr;
    cfg.tls = o->ca != NULL;
    cfg.ca_file = o->ca;
    cfg.server_name = o->server_name;
    cfg.token = o->token;
    int64_t until = now_ms() + o->wait_ready * 1000;
    char last[QN_CLIENT_MSG_MAX] = "no answer";
    for (;;) {
        qn_client *c = NULL;
        struct qn_client_status st;
        int rc = qn_client_dial(&cfg, &c, &st);
        if (rc != QN_OK && st.fail == QN_CLIENT_FAIL_CONFIG)
            ex_usage_error(prog, "%s", st.message);
        if (rc == QN_OK && (o->wait_ready == 0 || serving(c, last, sizeof last)))
            return c;
        if (rc != QN_OK)
            snprintf(last, sizeof last, "%s", st.message);
        qn_client_free(c);
        if (o->wait_ready == 0) {
            fprintf(stderr, "%s: cannot reach %s: %s\n", prog, o->addr, last);
            exit(1);
        }
        if (now_ms() >= until) {
            fprintf(stderr, "%s: the broker did not report SERVING within %ld s (last: %s)\n", prog,
                    o->wait_ready, last);
            exit(2);
        }
        struct timespec ts = {0, 200 * 1000 * 1000}; /* a retry interval, not a wait on an event */
        nanosleep(&ts, NULL);
    }
}

void ex_json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

const char *ex_push_status_name(int status)
{
    switch (status) {
    case QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED:
        return "QUEUED";
    case QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE:
        return "DUPLICATE";
    case QUEEN__V1__PUSH_STATUS__PUSH_STATUS_FAILED:
        return "FAILED";
    default:
        return "UNKNOWN";
    }
}
