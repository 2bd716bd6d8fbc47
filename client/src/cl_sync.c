/*
 * cl_sync.c - blocking calls on a qn_client: one unary call and waits for it;
 * streaming calls with a bounded queue of unread messages (see queen/client.h).
 *
 * Both are loops of qn_client_run() around the callback API of cl_conn.c, so a
 * blocking program may also have other calls of its own in flight on the same
 * connection.
 *
 * Stream lifecycle: OPEN (call != NULL) --(on_close)--> ENDED (call == NULL,
 * end status kept) --(every queued message taken)--> done.
 *
 * Invariants:
 *   1. a stream's queued bytes never exceed the connection's max_queued: the
 *      message that would pass it cancels the call instead (fail LIMIT).
 *   2. a stream freed while its call is open forgets the call first, so no
 *      callback ever sees a freed stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_int.h"
#include "queen/error.h"

/* Says what an open call could not start because of. */
static int start_failed(qn_client *c, int rc, struct qn_client_status *st)
{
    switch (rc) {
    case QN_ECLOSED:
        if (qn_client_last_status(c)->fail != QN_CLIENT_FAIL_NONE)
            *st = *qn_client_last_status(c);
        else
            qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "not connected");
        return qn__client_fail_code(st->fail);
    case QN_ELIMIT:
        qn__client_status_set(st, QN_CLIENT_FAIL_LIMIT,
                              "the server allows no more concurrent calls on this connection");
        return rc;
    case QN_EINVAL:
        qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG,
                              "the token holds characters a header cannot carry");
        return rc;
    case QN_ENOMEM:
        qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY, "out of memory");
        return rc;
    default:
        qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "%s", qn_client_last_error(c));
        return rc;
    }
}

/* The status of a finished call, with the connection's reason when it was lost. */
static void finished(qn_client *c, const struct qn_client_call_result *r,
                     struct qn_client_status *st)
{
    qn_client_result_status(r, st);
    if (r->end == QN_CLIENT_END_CONN_LOST && qn_client_last_error(c)[0] != '\0')
        qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "connection lost during the call: %s",
                              qn_client_last_error(c));
}

static int send_failed(int rc, struct qn_client_status *st)
{
    if (rc == QN_ELIMIT)
        qn__client_status_set(st, QN_CLIENT_FAIL_LIMIT,
                              "the request is larger than the call's send limit");
    else if (rc == QN_ENOMEM)
        qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY, "out of memory");
    else
        qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "the call already ended");
    return rc;
}

/* ---------------------------------------------------------------- unary */

struct unary {
    qn_client *c;
    bool done;
    struct qn_client_status st;
    uint64_t messages;
    uint8_t *msg; /* a copy of the response message, when the status is OK */
    size_t len;
    bool nomem;
};

static void unary_closed(qn_client_call *call, const struct qn_client_call_result *r, void *ud)
{
    (void)call;
    struct unary *u = ud;
    u->done = true;
    u->messages = r->messages;
    finished(u->c, r, &u->st);
    if (u->st.fail == QN_CLIENT_FAIL_NONE && u->st.code == 0 && r->msg != NULL) {
        u->msg = malloc(r->msg_len > 0 ? r->msg_len : 1);
        if (u->msg == NULL) {
            u->nomem = true;
            return;
        }
        memcpy(u->msg, r->msg, r->msg_len);
        u->len = r->msg_len;
    }
}

static const struct qn_client_call_cbs unary_cbs = {.on_close = unary_closed};

int qn_client_unary(qn_client *c, const char *path, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp_desc,
                    const struct qn_client_call_opts *o, ProtobufCMessage **resp,
                    struct qn_client_status *st)
{
    qn_client_status_clear(st);
    struct unary u = {.c = c};
    qn_client_status_clear(&u.st);
    qn_client_call *call = NULL;
    int rc = qn_client_call_start(c, path, o, &unary_cbs, &u, &call);
    if (rc != QN_OK)
        return start_failed(c, rc, st);
    rc = qn_client_call_send(call, req);
    if (rc != QN_OK) {
        qn__client_call_forget(call);
        qn_client_flush(c);
        return send_failed(rc, st);
    }
    qn_client_call_close_send(call);
    while (!u.done) {
        if (qn_client_run(c, -1) == QN_ECLOSED && !u.done) {
            /* Unreachable: a dying connection ends its calls first. */
            qn__client_status_set(st, QN_CLIENT_FAIL_HTTP2, "%s", qn_client_last_error(c));
            return QN_ECLOSED;
        }
    }
    *st = u.st;
    if (u.nomem) {
        qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY, "out of memory");
        return QN_ENOMEM;
    }
    if (st->fail != QN_CLIENT_FAIL_NONE) {
        free(u.msg);
        return qn__client_fail_code(st->fail);
    }
    if (st->code != 0)
        return QN_OK;
    if (u.msg == NULL || u.messages != 1) {
        free(u.msg);
        qn__client_status_set(st, QN_CLIENT_FAIL_RESPONSE,
                              "the server answered OK with %llu response messages (want 1)",
                              (unsigned long long)u.messages);
        return QN_EPROTO;
    }
    ProtobufCMessage *m = protobuf_c_message_unpack(resp_desc, NULL, u.len, u.msg);
    free(u.msg);
    if (m == NULL) {
        qn__client_status_set(st, QN_CLIENT_FAIL_RESPONSE, "the response did not decode as %s",
                              resp_desc->name);
        return QN_EPROTO;
    }
    *resp = m;
    return QN_OK;
}

/* ---------------------------------------------------------------- streams */

struct queued {
    struct queued *next;
    size_t len;
    uint8_t data[];
};

struct qn_client_stream {
    qn_client *c;
    qn_client_call *call; /* NULL once the call ended */
    struct queued *head, *tail;
    size_t queued; /* bytes on the queue */
    bool over;     /* the queue limit was hit; the call was cancelled */
    bool nomem;
    struct qn_client_status end; /* valid once call == NULL */
};

static void stream_message(qn_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
    qn_client_stream *s = ud;
    if (s->over || s->nomem)
        return;
    size_t max = qn__client_max_queued(s->c);
    if (len > max || s->queued > max - len) {
        s->over = true;
        qn_client_call_cancel(call);
        return;
    }
    struct queued *q = malloc(sizeof *q + len);
    if (q == NULL) {
        s->nomem = true;
        qn_client_call_cancel(call);
        return;
    }
    q->next = NULL;
    q->len = len;
    memcpy(q->data, msg, len);
    if (s->tail != NULL)
        s->tail->next = q;
    else
        s->head = q;
    s->tail = q;
    s->queued += len;
}

static void stream_closed(qn_client_call *call, const struct qn_client_call_result *r, void *ud)
{
    (void)call;
    qn_client_stream *s = ud;
    s->call = NULL;
    if (s->over)
        qn__client_status_set(&s->end, QN_CLIENT_FAIL_LIMIT,
                              "more than %zu bytes of responses arrived unread",
                              qn__client_max_queued(s->c));
    else if (s->nomem)
        qn__client_status_set(&s->end, QN_CLIENT_FAIL_MEMORY, "out of memory queueing a response");
    else
        finished(s->c, r, &s->end);
}

static const struct qn_client_call_cbs stream_cbs = {
    .on_message = stream_message,
    .on_close = stream_closed,
};

int qn_client_stream_open(qn_client *c, const char *path, const struct qn_client_call_opts *o,
                          qn_client_stream **out, struct qn_client_status *st)
{
    qn_client_status_clear(st);
    qn_client_stream *s = calloc(1, sizeof *s);
    if (s == NULL) {
        qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY, "out of memory");
        return QN_ENOMEM;
    }
    s->c = c;
    qn_client_status_clear(&s->end);
    int rc = qn_client_call_start(c, path, o, &stream_cbs, s, &s->call);
    if (rc != QN_OK) {
        free(s);
        return start_failed(c, rc, st);
    }
    *out = s;
    return QN_OK;
}

int qn_client_stream_send(qn_client_stream *s, const ProtobufCMessage *msg)
{
    if (s->call == NULL)
        return QN_EINVAL;
    int rc = qn_client_call_send(s->call, msg);
    if (rc == QN_OK)
        qn_client_flush(s->c);
    return rc;
}

void qn_client_stream_close_send(qn_client_stream *s)
{
    if (s->call == NULL)
        return;
    qn_client_call_close_send(s->call);
    qn_client_flush(s->c);
}

bool qn_client_stream_done(const qn_client_stream *s)
{
    return s->call == NULL && s->head == NULL;
}

int qn_client_stream_recv(qn_client_stream *s, const ProtobufCMessageDescriptor *desc,
                          int timeout_ms, ProtobufCMessage **msg, struct qn_client_status *st)
{
    qn_client_status_clear(st);
    uint64_t until = timeout_ms >= 0 ? qn_client_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
    for (;;) {
        if (s->head != NULL) {
            struct queued *q = s->head;
            s->head = q->next;
            if (s->head == NULL)
                s->tail = NULL;
            s->queued -= q->len;
            ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, q->len, q->data);
            free(q);
            if (m == NULL) {
                qn__client_status_set(st, QN_CLIENT_FAIL_RESPONSE,
                                      "a stream message did not decode as %s", desc->name);
                return QN_EPROTO;
            }
            *msg = m;
            return QN_OK;
        }
        if (s->call == NULL) {
            *st = s->end;
            *msg = NULL;
            return qn__client_fail_code(st->fail);
        }
        int wait = -1;
        if (timeout_ms >= 0) {
            uint64_t now = qn_client_now_ns();
            if (now >= until)
                return QN_ETIMEOUT;
            wait = (int)((until - now + 999999u) / 1000000u);
        }
        if (qn_client_run(s->c, wait) == QN_ECANCELLED)
            return QN_ETIMEOUT;
    }
}

void qn_client_stream_free(qn_client_stream *s)
{
    if (s == NULL)
        return;
    if (s->call != NULL) {
        qn__client_call_forget(s->call);
        qn_client_flush(s->c);
    }
    while (s->head != NULL) {
        struct queued *q = s->head;
        s->head = q->next;
        free(q);
    }
    free(s);
}
