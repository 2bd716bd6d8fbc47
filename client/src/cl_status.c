/*
 * cl_status.c - struct qn_client_status: failure stages, their error codes, and
 * the description of a finished call for people (see queen/client.h).
 *
 * Invariant: every status written here has a NUL-terminated message that fits
 * QN_CLIENT_MSG_MAX, and code == -1 unless fail == QN_CLIENT_FAIL_NONE.
 */
#include <stdio.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "cl_int.h"
#include "queen/error.h"

static const struct {
    enum qn_client_fail fail;
    const char *name;
    int code;
} stages[] = {
    {QN_CLIENT_FAIL_NONE, "", QN_OK},
    {QN_CLIENT_FAIL_CONFIG, "config", QN_EINVAL},
    {QN_CLIENT_FAIL_RESOLVE, "resolve", QN_ECLOSED},
    {QN_CLIENT_FAIL_CONNECT, "connect", QN_ECLOSED},
    {QN_CLIENT_FAIL_TLS, "tls", QN_EPROTO},
    {QN_CLIENT_FAIL_HTTP2, "http2", QN_ECLOSED},
    {QN_CLIENT_FAIL_RESPONSE, "response", QN_EPROTO},
    {QN_CLIENT_FAIL_DEADLINE, "deadline", QN_EDEADLINE},
    {QN_CLIENT_FAIL_LIMIT, "limit", QN_ELIMIT},
    {QN_CLIENT_FAIL_MEMORY, "memory", QN_ENOMEM},
};

const char *qn_client_fail_name(enum qn_client_fail f)
{
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
        if (stages[i].fail == f)
            return stages[i].name;
    return "unknown";
}

int qn__client_fail_code(enum qn_client_fail f)
{
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
        if (stages[i].fail == f)
            return stages[i].code;
    return QN_EINTERNAL;
}

void qn_client_status_clear(struct qn_client_status *st)
{
    st->fail = QN_CLIENT_FAIL_NONE;
    st->code = -1;
    st->message[0] = '\0';
}

void qn__client_status_set(struct qn_client_status *st, enum qn_client_fail f, const char *fmt, ...)
{
    st->fail = f;
    st->code = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof st->message, fmt, ap);
    va_end(ap);
}

void qn_client_result_status(const struct qn_client_call_result *r, struct qn_client_status *st)
{
    switch (r->end) {
    case QN_CLIENT_END_STATUS:
        st->fail = QN_CLIENT_FAIL_NONE;
        st->code = r->grpc_status;
        snprintf(st->message, sizeof st->message, "%s", r->grpc_message);
        return;
    case QN_CLIENT_END_NO_STATUS:
        if (r->http_status != 0 && r->http_status != 200)
            qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2,
                                  "the server answered HTTP %d without a gRPC status "
                                  "(not a gRPC endpoint?)",
                                  r->http_status);
        else if (r->h2_error != 0)
            qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "the call was reset (%s)",
                                  nghttp2_http2_strerror(r->h2_error));
        else
            qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "the call ended without a gRPC status");
        return;
    case QN_CLIENT_END_BAD_FRAME:
        if (r->frame_error == QN_ELIMIT)
            qn__client_status_set(st, QN_CLIENT_FAIL_RESPONSE,
                                  "a response message was larger than the largest accepted");
        else if (r->frame_error == QN_ENOMEM)
            qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY,
                                  "out of memory reading a response message");
        else
            qn__client_status_set(st, QN_CLIENT_FAIL_RESPONSE,
                                  "a response message broke the gRPC framing "
                                  "(compressed or bad flag byte)");
        return;
    case QN_CLIENT_END_CONN_LOST:
        qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "the connection was lost during the call");
        return;
    case QN_CLIENT_END_DEADLINE:
        qn__client_status_set(st, QN_CLIENT_FAIL_DEADLINE,
                              "deadline exceeded: no answer within the call's timeout");
        return;
    }
    qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "the call ended in an unknown way");
}
