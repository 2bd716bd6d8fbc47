/*
 * transport/call.c - the call layer: what a gRPC call is, whatever carries it
 * (implements call.h and call_binding.h).
 *
 * Why one file of some 1,300 lines: the call lifecycle below is one state
 * machine whose transitions (call_end, call_abort, qn__call_closed) serve input,
 * output, the budgets, the deadline and the shutdown alike; split, its asserts
 * and the invariants would be spread over files that each see only part of it.
 * The call set (method table, counters, stream budget) is the last part and is
 * small.
 *
 * Does: store and look up request headers, route :path to a registered method,
 * reassemble length-prefixed request messages (cap checked on the prefix),
 * pre-scan them (pb_scan.h: a string with a NUL byte or invalid UTF-8 is
 * INVALID_ARGUMENT naming the field, never truncated by protobuf-c), decode them
 * with protobuf-c, hand them to the method, queue response messages, keep the
 * outbound budget (queued and reserved response bytes per connection and over
 * the broker; calls waiting for room),
 * keep the final status for the trailers, enforce grpc-timeout deadlines, end
 * calls on shutdown, count calls and statuses, keep the stream budget.
 * Unary and server-streaming methods get their one request message at the end
 * of the request (a second message is INTERNAL, none is INTERNAL);
 * client-streaming methods get each message as it completes and on_half_close()
 * at the end.
 * Does not: touch sockets, HTTP/2 or nghttp2 (the binding does: h2.c), check a
 * protocol's request headers (the binding does, then calls qn__call_start),
 * compress (only identity is accepted), know what a method does.
 *
 * Call lifecycle (the handler-visible part is call.h's OPEN / FINISHED / DEAD):
 *
 *   HEADERS --qn__call_start (routed)--> RECEIVING --first dispatch--> OPEN
 *   HEADERS|RECEIVING|OPEN --call_end() (handler finish, bad input, deadline,
 *                           shutdown, rejected headers)--> FINISHED
 *   any --qn__call_closed (stream or connection gone)--> CLOSED --reap pass--> freed
 *
 *   on_cancel() runs exactly when a call leaves OPEN by any way other than
 *   qn_call_finish(): call_end() by the transport, or the stream closing.
 *
 * Flow control:
 *   - inbound: the binding feeds each chunk with qn__call_data(), which hands
 *     every message it completes to its handler before returning; only then does
 *     the binding grant the chunk's window back, so the client can never have
 *     more in flight than the windows. Bytes of a message still incomplete are
 *     granted as they are stored in its buffer, which the declared length
 *     (checked against QUEEN_MAX_RECV_BYTES on the prefix) bounds; per connection
 *     the partial messages together are bounded by QUEEN_MAX_CONN_RECV_BYTES,
 *     over the broker by QUEEN_MAX_RECV_BUFFER_BYTES.
 *   - outbound: qn_call_send() appends to the call's queue (hard cap,
 *     max_pending) and tells the binding (respond / resume); the binding takes
 *     bytes as its peer's windows admit. Services watch qn_call_pending_bytes()
 *     and wait for qn_call_on_drain().
 *   - outbound budget (call.h): queued plus reserved bytes per connection
 *     (QUEEN_MAX_CONN_SEND_BYTES) and over the broker
 *     (QUEEN_MAX_SEND_BUFFER_BYTES). Producers reserve before they read
 *     (qn_call_reserve) and wait for room (qn_call_on_budget); a call starting
 *     on a connection at its budget is refused. Closing a connection that stays
 *     over its limits is net.c's (it asks the binding for the backlog).
 *
 * Invariants:
 *   1. A call is freed only in the reap pass, after the binding reported its
 *      stream gone; the binding never holds a pointer to a freed call.
 *   2. Every call ends with a status: trailers after the last message, or a
 *      status-only response (the binding's respond_status).
 *   3. A handler never sees a call after qn_call_finish() or after on_cancel()
 *      returned; on_cancel never follows qn_call_finish().
 *   4. Buffers are bounded: request headers (QN_CALL_MAX_HEADER_BYTES bytes,
 *      QN_CALL_MAX_HEADERS fields), one partial request message per call
 *      (QUEEN_MAX_RECV_BYTES), queued response bytes per call (max_pending).
 *   5. No op of the binding runs for a CLOSED call.
 *   6. cc->queued, cc->reserved, cc->inbound and the set's totals are the sums of
 *      their calls' out_accounted, reserved and accounted; a CLOSED call counts
 *      nowhere (its output is dropped, its reservation released).
 *   7. A call waits for budget (on the set's list) only while OPEN with a
 *      callback set.
 *   8. A call is held for admission only while RECEIVING with its request
 *      decoded (held) and its stream half-closed; its connection is on the
 *      set's admission list exactly while it holds such a call. A held call
 *      leaves the list before it is started, ended or closed.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "config.h"
#include "log.h"
#include "obs/metrics.h"
#include "queen/error.h"
#include "queen/store.h"
#include "transport/call_binding.h"
#include "transport/grpc_wire.h"
#include "transport/pb_scan.h"
#include "timer.h"

#define MAX_STATUS_MSG 1024 /* raw bytes of a grpc-message we send */
#define MIN_PENDING_CAP (16u << 20)
#define PENDING_FACTOR 4

enum call_state {
    CALL_HEADERS,   /* receiving request headers */
    CALL_RECEIVING, /* routed; messages arriving; the handler has not seen the call */
    CALL_OPEN,      /* the handler owns it */
    CALL_FINISHED,  /* status set; the binding sends what is queued, then the trailers */
    CALL_CLOSED,    /* stream gone; on the dead list */
};

struct hdr {
    uint32_t name;  /* offset of the NUL-terminated name in hbuf */
    uint32_t value; /* offset of the NUL-terminated value in hbuf */
};

/* A method's series in queen_rpc_requests_total and queen_rpc_duration_seconds,
 * made on first use. */
struct method_instr {
    struct qn_metric *by_code[17];
    struct qn_metric *duration;
};

struct qn_call {
    enum call_state state;
    struct qn_calls *set;
    struct method_instr *instr; /* the method's series; NULL until routed */
    int64_t started_us;         /* monotonic, when the call was made */
    struct qn_call_conn *cc;    /* NULL once CLOSED */
    const struct qn_call_ops *ops;
    void *link;                     /* the binding's */
    int32_t stream_id;              /* the binding's */
    const struct qn_method *method; /* NULL until routed */
    qn_call *prev, *next;           /* in cc->calls, or set->dead when CLOSED */
    qn_call *live_prev, *live_next; /* in set->live until CLOSED */
    /* request headers */
    char *hbuf; /* name\0value\0 pairs; <= QN_CALL_MAX_HEADER_BYTES */
    uint32_t hlen, hcap;
    struct hdr hdrs[QN_CALL_MAX_HEADERS];
    uint32_t nhdrs;
    bool hdr_overflow; /* more than the limits: rejected */
    /* inbound */
    struct qn_grpc_reader reader;
    uint32_t accounted;     /* reader (and held request) bytes in cc->inbound, set->inbound */
    ProtobufCMessage *held; /* unary / server-streaming: request awaiting the end */
    uint32_t held_len;      /* its wire bytes */
    /* held for admission (invariant 8): in cc->adm_head.., its held_len counted
     * in accounted (so in cc->inbound and the set's inbound) */
    bool adm_waiting;
    qn_call *adm_prev, *adm_next;
    bool remote_closed;
    /* outbound */
    struct evbuffer *out; /* encoded messages not yet taken by the binding */
    uint32_t nsent;       /* messages queued so far */
    bool headers_sent;    /* the binding's respond (or respond_status) ran */
    bool trailers_due;    /* finished: trailers follow the queued data */
    enum qn_grpc_code status;
    char status_code[12]; /* status as decimal text */
    char *status_msg;     /* percent-encoded grpc-message, NULL for none */
    size_t out_accounted; /* bytes of out counted in cc->queued and set->queued */
    size_t reserved;      /* counted in cc->reserved and set->reserved */
    /* waiting for budget (invariant 7) */
    bool budget_waiting;
    size_t budget_min;
    void (*on_budget)(qn_call *call);
    qn_call *bw_prev, *bw_next; /* in set->bw_head.. */
    void (*on_drain)(qn_call *call);
    struct event *drain_ev; /* made on first qn_call_on_drain() */
    int64_t deadline_ms;    /* 0 = none */
    struct event *deadline_ev;
    void *data;
    void *auth; /* the gate's principal (qn_call_set_auth), freed with the call */
    void (*auth_free)(void *auth);
};

struct method_table {
    const struct qn_method *m;
    size_t n;
    struct method_instr *instr; /* one per method */
};

struct qn_calls {
    struct event_base *base;
    qn_rpc_server *owner;
    size_t max_recv, max_send, max_pending;
    size_t max_conn_recv;           /* QUEEN_MAX_CONN_RECV_BYTES */
    size_t max_recv_buffer;         /* QUEEN_MAX_RECV_BUFFER_BYTES */
    size_t max_conn_send;           /* QUEEN_MAX_CONN_SEND_BYTES */
    size_t max_send_buffer;         /* QUEEN_MAX_SEND_BUFFER_BYTES */
    size_t inbound;                 /* every connection's cc->inbound */
    _Atomic size_t *shared_inbound; /* every loop's inbound (QUEEN_WORKERS); NULL: inbound */
    size_t queued;                  /* every connection's cc->queued */
    size_t reserved;                /* every connection's cc->reserved */
    qn_call *bw_head, *bw_tail;     /* calls waiting for budget, oldest first */
    size_t nbw;
    struct event *budget_ev; /* wakes budget waiters after room was freed */
    uint64_t max_stream_slots, stream_slots;
    _Atomic uint64_t *shared_streams; /* every loop's streams (QUEEN_WORKERS); NULL: stream_slots */
    struct method_table *tables;
    size_t ntables;
    qn_call *live; /* every call not CLOSED */
    qn_call *dead; /* CLOSED calls waiting for the reap pass */
    struct event *reap_ev;
    bool shutting_down;
    qn_call_gate_fn gate; /* authentication, NULL = every call runs */
    void *gate_ud;
    qn_call_admit_fn admit; /* admission (qn_method.admission), NULL = every call starts */
    void *admit_ud;
    struct qn_call_conn *adm_first, *adm_last; /* connections holding calls for admission */
    size_t nadm_conns;
    size_t nadm_calls;
    struct event *admit_ev; /* looks at held calls after a connection may have room */
    uint64_t calls_started;
    uint32_t calls_open;
    uint64_t status_count[17];
    /* metrics (NULL families without a registry) */
    qn_metrics *metrics;                 /* shared by every loop's set: locked around use */
    struct qn_metric_family *m_requests; /* queen_rpc_requests_total{service,method,code} */
    struct qn_metric_family *m_duration; /* queen_rpc_duration_seconds{service,method} */
    struct method_instr unrouted;        /* calls that never reached a method */
};

static void call_end(qn_call *c, int http_status, enum qn_grpc_code code, const char *msg,
                     bool accept_encoding);

/* ---------------------------------------------------------------- lists */

static void call_push(qn_call **head, qn_call *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

static void call_unlink(qn_call **head, qn_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void live_push(struct qn_calls *set, qn_call *c)
{
    c->live_prev = NULL;
    c->live_next = set->live;
    if (set->live)
        set->live->live_prev = c;
    set->live = c;
}

static void live_unlink(struct qn_calls *set, qn_call *c)
{
    if (c->live_prev)
        c->live_prev->live_next = c->live_next;
    else
        set->live = c->live_next;
    if (c->live_next)
        c->live_next->live_prev = c->live_prev;
    c->live_prev = c->live_next = NULL;
}

/* ---------------------------------------------------------------- metrics */

static const char *const code_names[17] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Splits "/pkg.Service/Method" into its labels ("unknown" when unrouted). */
static void method_labels(const struct qn_method *m, char *service, size_t scap, char *method,
                          size_t mcap)
{
    const char *p = m ? m->path : NULL;
    const char *slash = p ? strchr(p + 1, '/') : NULL;
    if (slash == NULL) {
        snprintf(service, scap, "unknown");
        snprintf(method, mcap, "unknown");
        return;
    }
    snprintf(service, scap, "%.*s", (int)(slash - p - 1), p + 1);
    snprintf(method, mcap, "%s", slash + 1);
}

/* The call ended with code: one count, and its duration when it was routed. */
static void call_record(qn_call *c, enum qn_grpc_code code)
{
    struct qn_calls *set = c->set;
    if (set->m_requests == NULL)
        return;
    qn_metrics_lock(set->metrics); /* other loops record into the same families */
    struct method_instr *in = c->instr ? c->instr : &set->unrouted;
    const struct qn_method *m = c->instr ? c->method : NULL;
    char service[256], method[256];
    if (in->by_code[code] == NULL || (m != NULL && in->duration == NULL)) {
        method_labels(m, service, sizeof service, method, sizeof method);
        if (in->by_code[code] == NULL) {
            const char *v[3] = {service, method, code_names[code]};
            in->by_code[code] = qn_metric_series(set->m_requests, v);
        }
        if (m != NULL && in->duration == NULL) {
            const char *v[2] = {service, method};
            in->duration = qn_metric_series(set->m_duration, v);
        }
    }
    qn_metric_inc(in->by_code[code], 1);
    if (m != NULL)
        qn_metric_observe(in->duration, (double)(now_us() - c->started_us) / 1e6);
    qn_metrics_unlock(set->metrics);
}

/* ---------------------------------------------------------------- lifetime */

/* Keeps cc->inbound and set->inbound equal to the bytes the readers hold, plus
 * the requests of calls held for admission. */
static void reader_account(qn_call *c)
{
    size_t now = c->cc != NULL ? c->reader.cap + (c->adm_waiting ? c->held_len : 0) : 0;
    if (c->cc != NULL)
        c->cc->inbound = c->cc->inbound - c->accounted + now;
    c->set->inbound = c->set->inbound - c->accounted + now;
    if (c->set->shared_inbound != NULL) {
        if (now >= c->accounted)
            atomic_fetch_add(c->set->shared_inbound, now - c->accounted);
        else
            atomic_fetch_sub(c->set->shared_inbound, c->accounted - now);
    }
    c->accounted = (uint32_t)now;
}

/* ---------------------------------------------------------------- the outbound budget */

static size_t room(size_t cap, size_t used)
{
    return used >= cap ? 0 : cap - used;
}

/* Bytes the call could reserve now (both budgets). */
static size_t budget_room(const qn_call *c)
{
    const struct qn_calls *set = c->set;
    size_t conn = room(set->max_conn_send, c->cc->queued + c->cc->reserved);
    size_t broker = room(set->max_send_buffer, set->queued + set->reserved);
    return conn < broker ? conn : broker;
}

static void budget_freed(struct qn_calls *set)
{
    if (set->bw_head != NULL)
        event_active(set->budget_ev, 0, 0); /* no-op when already active */
}

/* Keeps cc->queued and set->queued equal to the bytes the calls' out hold. */
static void out_account(qn_call *c)
{
    size_t now = c->cc != NULL ? evbuffer_get_length(c->out) : 0;
    if (now == c->out_accounted)
        return;
    if (c->cc != NULL)
        c->cc->queued = c->cc->queued - c->out_accounted + now;
    c->set->queued = c->set->queued - c->out_accounted + now;
    if (now < c->out_accounted)
        budget_freed(c->set);
    c->out_accounted = now;
}

static void bw_unlink(qn_call *c)
{
    struct qn_calls *set = c->set;
    if (!c->budget_waiting)
        return;
    if (c->bw_prev)
        c->bw_prev->bw_next = c->bw_next;
    else
        set->bw_head = c->bw_next;
    if (c->bw_next)
        c->bw_next->bw_prev = c->bw_prev;
    else
        set->bw_tail = c->bw_prev;
    c->bw_prev = c->bw_next = NULL;
    c->budget_waiting = false;
    set->nbw--;
}

static void bw_append(qn_call *c)
{
    struct qn_calls *set = c->set;
    assert(!c->budget_waiting);
    c->bw_next = NULL;
    c->bw_prev = set->bw_tail;
    if (set->bw_tail)
        set->bw_tail->bw_next = c;
    else
        set->bw_head = c;
    set->bw_tail = c;
    c->budget_waiting = true;
    set->nbw++;
}

static void release_reservation(qn_call *c)
{
    if (c->reserved == 0)
        return;
    assert(c->cc != NULL);
    c->cc->reserved -= c->reserved;
    c->set->reserved -= c->reserved;
    c->reserved = 0;
    budget_freed(c->set);
}

/* Room was freed: wake, in order, the waiters that can now reserve their min.
 * Each waiter of the list as it was is looked at once; one that still cannot
 * goes back to the end. */
static void on_budget_ev(evutil_socket_t fd, short what, void *arg)
{
    struct qn_calls *set = arg;
    for (size_t n = set->nbw; n > 0 && set->bw_head != NULL; n--) {
        qn_call *c = set->bw_head;
        bw_unlink(c);
        assert(c->state == CALL_OPEN && c->on_budget != NULL);
        if (budget_room(c) < c->budget_min) {
            bw_append(c);
            continue;
        }
        void (*cb)(qn_call *) = c->on_budget;
        c->on_budget = NULL;
        cb(c);
    }
}

/* ---------------------------------------------------------------- admission */

static void adm_conn_list(struct qn_calls *set, struct qn_call_conn *cc)
{
    assert(!cc->adm_listed);
    cc->adm_next = NULL;
    cc->adm_prev = set->adm_last;
    if (set->adm_last)
        set->adm_last->adm_next = cc;
    else
        set->adm_first = cc;
    set->adm_last = cc;
    cc->adm_listed = true;
    set->nadm_conns++;
}

static void adm_conn_unlist(struct qn_calls *set, struct qn_call_conn *cc)
{
    if (!cc->adm_listed)
        return;
    if (cc->adm_prev)
        cc->adm_prev->adm_next = cc->adm_next;
    else
        set->adm_first = cc->adm_next;
    if (cc->adm_next)
        cc->adm_next->adm_prev = cc->adm_prev;
    else
        set->adm_last = cc->adm_prev;
    cc->adm_prev = cc->adm_next = NULL;
    cc->adm_listed = false;
    set->nadm_conns--;
}

/* Holds c (RECEIVING, request decoded, half-closed) until its connection has
 * room. Its request's wire bytes count as the connection's unfinished input, so
 * held calls are bounded by QUEEN_MAX_CONN_RECV_BYTES and
 * QUEEN_MAX_RECV_BUFFER_BYTES as partly received ones are. */
static void adm_hold(qn_call *c)
{
    struct qn_calls *set = c->set;
    struct qn_call_conn *cc = c->cc;
    size_t all = set->shared_inbound != NULL ? atomic_load(set->shared_inbound) : set->inbound;
    if (cc->inbound + c->held_len > set->max_conn_recv ||
        all + c->held_len > set->max_recv_buffer) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "the connection's calls waiting to start hold more than %zu bytes of "
                 "requests: wait for answers before sending more",
                 cc->inbound + c->held_len > set->max_conn_recv ? set->max_conn_recv
                                                                : set->max_recv_buffer);
        call_end(c, 200, QN_GRPC_RESOURCE_EXHAUSTED, msg, false);
        return;
    }
    c->adm_waiting = true;
    reader_account(c);
    c->adm_next = NULL;
    c->adm_prev = cc->adm_tail;
    if (cc->adm_tail)
        cc->adm_tail->adm_next = c;
    else
        cc->adm_head = c;
    cc->adm_tail = c;
    set->nadm_calls++;
    if (!cc->adm_listed)
        adm_conn_list(set, cc);
}

static void adm_unhold(qn_call *c)
{
    if (!c->adm_waiting)
        return;
    struct qn_calls *set = c->set;
    struct qn_call_conn *cc = c->cc;
    assert(cc != NULL);
    if (c->adm_prev)
        c->adm_prev->adm_next = c->adm_next;
    else
        cc->adm_head = c->adm_next;
    if (c->adm_next)
        c->adm_next->adm_prev = c->adm_prev;
    else
        cc->adm_tail = c->adm_prev;
    c->adm_prev = c->adm_next = NULL;
    c->adm_waiting = false;
    set->nadm_calls--;
    reader_account(c);
    if (cc->adm_head == NULL)
        adm_conn_unlist(set, cc);
}

/* The handler takes the call: its one request message. */
static void call_open_unary(qn_call *c)
{
    ProtobufCMessage *pm = c->held;
    c->held = NULL;
    c->state = CALL_OPEN;
    c->method->on_message(c, pm);
}

/* Connections may have room: each connection of the list as it was starts at
 * most its oldest held call (round robin); one whose hook says no goes back to
 * the end. A pass that started something looks again on the next loop pass. */
static void on_admit_ev(evutil_socket_t fd, short what, void *arg)
{
    struct qn_calls *set = arg;
    (void)fd;
    (void)what;
    bool started = false;
    for (size_t n = set->nadm_conns; n > 0 && set->adm_first != NULL; n--) {
        struct qn_call_conn *cc = set->adm_first;
        adm_conn_unlist(set, cc);
        qn_call *c = cc->adm_head;
        assert(c != NULL && c->adm_waiting && c->state == CALL_RECEIVING);
        if (!set->admit(set->admit_ud, c)) {
            adm_conn_list(set, cc);
            continue;
        }
        adm_unhold(c);
        if (cc->adm_head != NULL)
            adm_conn_list(set, cc);
        started = true;
        call_open_unary(c); /* may end calls and connections: cc is not used after */
    }
    if (started && set->adm_first != NULL)
        event_active(set->admit_ev, 0, 0);
}

void qn__calls_set_admission(struct qn_calls *set, qn_call_admit_fn admit, void *ud)
{
    set->admit = admit;
    set->admit_ud = ud;
}

void qn__calls_admission_room(struct qn_calls *set)
{
    if (set->adm_first != NULL)
        event_active(set->admit_ev, 0, 0); /* no-op when already active */
}

static void call_free(qn_call *c)
{
    assert(!c->budget_waiting && c->reserved == 0 && c->out_accounted == 0);
    if (c->deadline_ev)
        event_free(c->deadline_ev);
    if (c->drain_ev)
        event_free(c->drain_ev);
    if (c->out)
        evbuffer_free(c->out);
    if (c->held)
        protobuf_c_message_free_unpacked(c->held, NULL);
    qn_grpc_reader_reset(&c->reader);
    if (c->auth_free != NULL)
        c->auth_free(c->auth);
    free(c->hbuf);
    free(c->status_msg);
    free(c);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct qn_calls *set = arg;
    while (set->dead != NULL) {
        qn_call *c = set->dead;
        call_unlink(&set->dead, c);
        call_free(c);
    }
}

/* Drops what the call holds of its request (headers stay: handlers may still
 * read them until the call is freed). */
static void call_drop_input(qn_call *c)
{
    adm_unhold(c);
    if (c->deadline_ev)
        event_del(c->deadline_ev);
    if (c->drain_ev)
        event_del(c->drain_ev);
    c->on_drain = NULL;
    bw_unlink(c);
    c->on_budget = NULL;
    release_reservation(c);
    if (c->held) {
        protobuf_c_message_free_unpacked(c->held, NULL);
        c->held = NULL;
    }
    qn_grpc_reader_reset(&c->reader);
    reader_account(c);
}

/* The call leaves HEADERS (any way): it becomes work of its connection. */
static void leave_headers(qn_call *c)
{
    if (c->state == CALL_HEADERS && c->cc != NULL)
        c->cc->nheaders--;
}

void qn__call_closed(qn_call *c)
{
    enum call_state prev = c->state;
    assert(prev != CALL_CLOSED);
    struct qn_calls *set = c->set;
    leave_headers(c);
    c->state = CALL_CLOSED;
    call_drop_input(c);
    /* nothing can take its output any more: drop it now (invariant 6) */
    evbuffer_drain(c->out, evbuffer_get_length(c->out));
    out_account(c);
    if (prev != CALL_FINISHED) {
        set->status_count[QN_GRPC_CANCELLED]++;
        call_record(c, QN_GRPC_CANCELLED);
    }
    if (c->cc != NULL) {
        call_unlink(&c->cc->calls, c);
        c->cc->ncalls--;
        c->cc = NULL;
    }
    live_unlink(set, c);
    set->calls_open--;
    call_push(&set->dead, c);
    event_active(set->reap_ev, 0, 0);
    if (prev == CALL_OPEN && c->method->on_cancel)
        c->method->on_cancel(c, QN_ECLOSED);
}

bool qn__call_is_closed(const qn_call *c)
{
    return c->state == CALL_CLOSED;
}

void qn__call_conn_close(struct qn_call_conn *cc)
{
    /* qn__call_closed() unlinks only its own call; handlers cannot close other
     * streams synchronously, so taking the head each time visits every call once. */
    while (cc->calls != NULL)
        qn__call_closed(cc->calls);
}

qn_call *qn__call_new(struct qn_calls *set, struct qn_call_conn *cc, const struct qn_call_ops *ops,
                      void *link, int32_t stream_id)
{
    qn_call *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->out = evbuffer_new();
    if (c->out == NULL) {
        free(c);
        return NULL;
    }
    c->state = CALL_HEADERS;
    c->set = set;
    c->cc = cc;
    c->ops = ops;
    c->link = link;
    c->stream_id = stream_id;
    c->started_us = now_us();
    qn_grpc_reader_init(&c->reader, set->max_recv);
    call_push(&cc->calls, c);
    cc->ncalls++;
    cc->nheaders++;
    live_push(set, c);
    set->calls_started++;
    set->calls_open++;
    return c;
}

void *qn__call_link(const qn_call *c)
{
    return c->link;
}

int32_t qn__call_stream_id(const qn_call *c)
{
    return c->stream_id;
}

/* ---------------------------------------------------------------- output */

/*
 * Ends the call: a status-only response when nothing was sent, else trailers
 * after the queued data. Moves to FINISHED. Never runs on_cancel (callers that
 * take the call from a handler do that).
 */
static void call_end(qn_call *c, int http_status, enum qn_grpc_code code, const char *msg,
                     bool accept_encoding)
{
    assert(c->state == CALL_HEADERS || c->state == CALL_RECEIVING || c->state == CALL_OPEN);
    struct qn_calls *set = c->set;
    leave_headers(c);
    c->state = CALL_FINISHED;
    call_drop_input(c);
    if ((unsigned)code > QN_GRPC_UNAUTHENTICATED)
        code = QN_GRPC_UNKNOWN;
    set->status_count[code]++;
    call_record(c, code);
    c->status = code;
    snprintf(c->status_code, sizeof c->status_code, "%d", (int)code);
    if (msg != NULL && msg[0] != '\0') {
        size_t len = strnlen(msg, MAX_STATUS_MSG);
        char enc[3 * MAX_STATUS_MSG + 1];
        qn_grpc_pct_encode(msg, len, enc, sizeof enc);
        c->status_msg = strdup(enc); /* NULL on OOM: the status still goes out */
    }
    if (code != QN_GRPC_OK)
        QN_DEBUG("call failed path=%s status=%d message=\"%s\"", c->method ? c->method->path : "?",
                 (int)code, msg ? msg : "");
    if (!c->ops->alive(c))
        return;
    if (c->headers_sent) {
        c->trailers_due = true;
        c->ops->resume(c);
    } else {
        c->headers_sent = true;
        c->ops->respond_status(c, http_status, accept_encoding);
    }
}

/* The transport takes the call away (bad input, deadline, shutdown): answer code,
 * and tell the handler if it had the call. */
static void call_abort(qn_call *c, enum qn_grpc_code code, const char *msg, int reason)
{
    bool owned = c->state == CALL_OPEN;
    /* Messages the peer's window has not admitted yet would only hold the status
     * back behind a slow reader: dropped, so the trailers (not flow-controlled) go
     * next. (On shutdown a send pass runs first, so what can go does.) */
    evbuffer_drain(c->out, evbuffer_get_length(c->out));
    out_account(c);
    call_end(c, 200, code, msg, false);
    if (owned && c->method->on_cancel)
        c->method->on_cancel(c, reason);
}

size_t qn__call_take_output(qn_call *c, uint8_t *buf, size_t cap)
{
    size_t avail = evbuffer_get_length(c->out);
    size_t n = avail < cap ? avail : cap;
    if (n == 0)
        return 0;
    int got = evbuffer_remove(c->out, buf, n);
    out_account(c);
    if (got < 0)
        return 0;
    if (evbuffer_get_length(c->out) == 0 && c->on_drain != NULL && c->drain_ev != NULL)
        event_active(c->drain_ev, 0, 0);
    return (size_t)got;
}

bool qn__call_trailers_due(const qn_call *c)
{
    return c->trailers_due && evbuffer_get_length(c->out) == 0;
}

void qn__call_status(const qn_call *c, const char **code, const char **message)
{
    *code = c->status_code;
    *message = c->status_msg;
}

/* ---------------------------------------------------------------- input */

static const char *find_header(const qn_call *c, const char *name)
{
    for (uint32_t i = 0; i < c->nhdrs; i++)
        if (strcmp(c->hbuf + c->hdrs[i].name, name) == 0)
            return c->hbuf + c->hdrs[i].value;
    return NULL;
}

void qn__call_add_header(qn_call *c, const uint8_t *name, size_t namelen, const uint8_t *value,
                         size_t valuelen)
{
    if (c->state != CALL_HEADERS || c->hdr_overflow)
        return;
    size_t need = namelen + valuelen + 2;
    if (c->nhdrs == QN_CALL_MAX_HEADERS || need > QN_CALL_MAX_HEADER_BYTES - c->hlen) {
        c->hdr_overflow = true;
        return;
    }
    if (c->hlen + need > c->hcap) {
        size_t ncap = c->hcap ? (size_t)c->hcap * 2 : 1024;
        while (ncap < c->hlen + need)
            ncap *= 2;
        if (ncap > QN_CALL_MAX_HEADER_BYTES)
            ncap = QN_CALL_MAX_HEADER_BYTES;
        char *nb = realloc(c->hbuf, ncap);
        if (nb == NULL) {
            c->hdr_overflow = true;
            return;
        }
        c->hbuf = nb;
        c->hcap = (uint32_t)ncap;
    }
    /* bindings pass no NUL inside names and values, so the C strings are exact */
    c->hdrs[c->nhdrs].name = c->hlen;
    memcpy(c->hbuf + c->hlen, name, namelen);
    c->hbuf[c->hlen + namelen] = '\0';
    c->hlen += (uint32_t)namelen + 1;
    c->hdrs[c->nhdrs].value = c->hlen;
    memcpy(c->hbuf + c->hlen, value, valuelen);
    c->hbuf[c->hlen + valuelen] = '\0';
    c->hlen += (uint32_t)valuelen + 1;
    c->nhdrs++;
}

bool qn__call_headers_overflowed(const qn_call *c)
{
    return c->hdr_overflow;
}

bool qn__call_in_headers(const qn_call *c)
{
    return c->state == CALL_HEADERS;
}

static const struct qn_method *route_instr(const struct qn_calls *set, const char *path,
                                           struct method_instr **instr)
{
    if (path == NULL)
        return NULL;
    for (size_t t = 0; t < set->ntables; t++)
        for (size_t i = 0; i < set->tables[t].n; i++)
            if (strcmp(set->tables[t].m[i].path, path) == 0) {
                if (instr != NULL)
                    *instr = &set->tables[t].instr[i];
                return &set->tables[t].m[i];
            }
    return NULL;
}

static const struct qn_method *route(const struct qn_calls *set, const char *path)
{
    return route_instr(set, path, NULL);
}

const struct qn_method *qn__calls_route(const struct qn_calls *set, const char *path)
{
    return route(set, path);
}

static bool is_streaming(const struct qn_method *m)
{
    return m->client_streaming || m->server_streaming;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    qn_call *c = arg;
    if (c->state != CALL_RECEIVING && c->state != CALL_OPEN)
        return;
    call_abort(c, QN_GRPC_DEADLINE_EXCEEDED, "deadline exceeded", QN_EDEADLINE);
}

void qn__call_reject(qn_call *c, int http_status, enum qn_grpc_code code, const char *msg,
                     bool accept_encoding)
{
    assert(c->state == CALL_HEADERS);
    call_end(c, http_status, code, msg, accept_encoding);
}

void qn__call_start(qn_call *c, int64_t timeout_ms)
{
    struct qn_calls *set = c->set;
    assert(c->state == CALL_HEADERS);
    const char *path = find_header(c, ":path");
    c->method = route_instr(set, path, &c->instr);
    if (c->method == NULL) {
        char msg[300];
        snprintf(msg, sizeof msg, "unknown method %.256s", path ? path : "");
        call_end(c, 200, QN_GRPC_UNIMPLEMENTED, msg, false);
        return;
    }
    if (set->shutting_down && is_streaming(c->method)) {
        call_end(c, 200, QN_GRPC_UNAVAILABLE, "the server is shutting down", false);
        return;
    }
    if (set->gate != NULL) {
        /* authentication comes before anything else of the call: no request
         * byte reaches a method the gate refused */
        char msg[MAX_STATUS_MSG] = "";
        enum qn_grpc_code code = set->gate(set->gate_ud, c, msg, sizeof msg);
        if (code != QN_GRPC_OK) {
            call_end(c, 200, code, msg, false);
            return;
        }
    }
    /* A client that does not read what it asked for gets no new work started
     * (call.h, the outbound budget); over the broker's budget only connections
     * holding unread bytes themselves are refused. */
    struct qn_call_conn *cc = c->cc;
    if (cc->queued + cc->reserved >= set->max_conn_send ||
        (set->queued + set->reserved >= set->max_send_buffer && cc->queued > 0)) {
        char msg[300];
        if (cc->queued + cc->reserved >= set->max_conn_send)
            snprintf(msg, sizeof msg,
                     "the connection holds %zu bytes of responses its client has not read "
                     "(QUEEN_MAX_CONN_SEND_BYTES is %zu): read them before starting new calls",
                     cc->queued + cc->reserved, set->max_conn_send);
        else
            snprintf(msg, sizeof msg,
                     "the broker holds %zu bytes of responses its clients have not read "
                     "(QUEEN_MAX_SEND_BUFFER_BYTES is %zu) and this connection %zu of them: "
                     "read them before starting new calls",
                     set->queued + set->reserved, set->max_send_buffer, cc->queued);
        call_end(c, 200, QN_GRPC_RESOURCE_EXHAUSTED, msg, false);
        return;
    }
    leave_headers(c);
    c->state = CALL_RECEIVING;
    qn_grpc_reader_init(&c->reader, set->max_recv);
    if (timeout_ms >= 0) {
        c->deadline_ms = qn_store_now_ms() + timeout_ms;
        if (c->deadline_ms == 0)
            c->deadline_ms = 1;
        c->deadline_ev = evtimer_new(set->base, on_deadline, c);
        if (c->deadline_ev == NULL) {
            call_end(c, 200, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory", false);
            return;
        }
        qn_timer_after(c->deadline_ev, timeout_ms);
    }
}

/* One complete request message. */
static void call_message(qn_call *c, struct qn_grpc_msg *m)
{
    static const uint8_t empty[1] = {0};
    if (m->compressed) {
        free(m->body);
        call_abort(c, QN_GRPC_INTERNAL, "compressed message without grpc-encoding", QN_EBADREQUEST);
        return;
    }
    const uint8_t *body = m->body ? m->body : empty;
    /* protobuf-c would hand a string with a NUL over truncated, and takes
     * invalid UTF-8: both are refused here, naming the field (pb_scan.h) */
    char why[256];
    if (qn_pb_scan(body, m->len, c->method->request, why, sizeof why) != QN_OK) {
        free(m->body);
        call_abort(c, QN_GRPC_INVALID_ARGUMENT, why, QN_EBADREQUEST);
        return;
    }
    ProtobufCMessage *pm = protobuf_c_message_unpack(c->method->request, NULL, m->len, body);
    free(m->body);
    if (pm == NULL) {
        call_abort(c, QN_GRPC_INVALID_ARGUMENT, "cannot decode request", QN_EBADREQUEST);
        return;
    }
    if (!c->method->client_streaming) {
        if (c->held != NULL) {
            protobuf_c_message_free_unpacked(pm, NULL);
            call_abort(c, QN_GRPC_INTERNAL, "more than one request message for a unary method",
                       QN_EBADREQUEST);
            return;
        }
        c->held = pm; /* handed over at the end of the request */
        c->held_len = m->len;
        return;
    }
    c->state = CALL_OPEN;
    c->method->on_message(c, pm);
}

void qn__call_data(qn_call *c, const uint8_t *data, size_t len)
{
    size_t off = 0;
    while ((c->state == CALL_RECEIVING || c->state == CALL_OPEN) && off < len) {
        size_t used = 0;
        bool ready = false;
        struct qn_grpc_msg m;
        int rc = qn_grpc_reader_feed(&c->reader, data + off, len - off, &used, &ready, &m);
        off += used;
        reader_account(c);
        if (rc == QN_OK && !ready && c->cc != NULL && c->cc->inbound > c->set->max_conn_recv) {
            /* many streams each holding part of a large message: refuse this one
             * rather than buffer without bound (the binding grants its window) */
            char msg[160];
            snprintf(msg, sizeof msg,
                     "the connection holds more than %zu bytes of unfinished requests",
                     c->set->max_conn_recv);
            call_abort(c, QN_GRPC_RESOURCE_EXHAUSTED, msg, QN_EBADREQUEST);
        } else if (rc == QN_OK && !ready &&
                   (c->set->shared_inbound != NULL ? atomic_load(c->set->shared_inbound)
                                                   : c->set->inbound) > c->set->max_recv_buffer) {
            /* the same over every connection together */
            char msg[200];
            snprintf(msg, sizeof msg,
                     "the broker holds more than %zu bytes of unfinished requests "
                     "(QUEEN_MAX_RECV_BUFFER_BYTES)",
                     c->set->max_recv_buffer);
            call_abort(c, QN_GRPC_RESOURCE_EXHAUSTED, msg, QN_EBADREQUEST);
        } else if (rc == QN_ELIMIT) {
            char msg[160];
            snprintf(msg, sizeof msg, "request message of %u bytes exceeds the limit of %zu bytes",
                     qn_grpc_reader_pending_len(&c->reader), c->set->max_recv);
            call_abort(c, QN_GRPC_RESOURCE_EXHAUSTED, msg, QN_EBADREQUEST);
        } else if (rc == QN_EBADREQUEST) {
            call_abort(c, QN_GRPC_INTERNAL, "invalid message prefix flags", QN_EBADREQUEST);
        } else if (rc != QN_OK) {
            call_abort(c, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory", QN_EBADREQUEST);
        } else if (ready) {
            call_message(c, &m);
        }
    }
}

void qn__call_remote_close(qn_call *c)
{
    c->remote_closed = true;
    if (c->state != CALL_RECEIVING && c->state != CALL_OPEN)
        return;
    if (!qn_grpc_reader_is_idle(&c->reader)) {
        call_abort(c, QN_GRPC_INTERNAL, "request message truncated by the end of the stream",
                   QN_EBADREQUEST);
        return;
    }
    if (!c->method->client_streaming) {
        if (c->held == NULL) {
            call_end(c, 200, QN_GRPC_INTERNAL, "missing request message", false);
            return;
        }
        if (c->method->admission && c->set->admit != NULL && c->cc != NULL &&
            (c->cc->adm_head != NULL || !c->set->admit(c->set->admit_ud, c))) {
            adm_hold(c); /* behind the connection's older held calls, or until room */
            return;
        }
        call_open_unary(c);
        return;
    }
    if (c->method->on_half_close != NULL) {
        c->state = CALL_OPEN;
        c->method->on_half_close(c);
    } else if (c->state == CALL_RECEIVING) {
        call_end(c, 200, QN_GRPC_OK, NULL, false); /* nothing was asked */
    }
}

/* ---------------------------------------------------------------- the call set */

static void on_reap_ev(evutil_socket_t fd, short what, void *arg)
{
    on_reap(fd, what, arg);
}

int qn__calls_new(struct event_base *base, const struct qn_config *cfg, qn_rpc_server *owner,
                  struct qn_calls **out)
{
    struct qn_calls *set = calloc(1, sizeof *set);
    if (set == NULL)
        return QN_ENOMEM;
    set->base = base;
    set->owner = owner;
    set->max_recv = (size_t)cfg->max_recv_bytes;
    set->max_conn_recv = (size_t)cfg->max_conn_recv_bytes;
    set->max_recv_buffer = (size_t)cfg->max_recv_buffer_bytes;
    set->max_conn_send = (size_t)cfg->max_conn_send_bytes;
    set->max_send_buffer = (size_t)cfg->max_send_buffer_bytes;
    set->max_send = (size_t)cfg->max_send_bytes;
    set->max_pending = PENDING_FACTOR * set->max_send;
    if (set->max_pending < MIN_PENDING_CAP)
        set->max_pending = MIN_PENDING_CAP;
    set->max_stream_slots = (uint64_t)cfg->max_streams;
    set->reap_ev = event_new(base, -1, 0, on_reap_ev, set);
    set->budget_ev = event_new(base, -1, 0, on_budget_ev, set);
    set->admit_ev = event_new(base, -1, 0, on_admit_ev, set);
    if (set->reap_ev == NULL || set->budget_ev == NULL || set->admit_ev == NULL) {
        if (set->reap_ev)
            event_free(set->reap_ev);
        if (set->budget_ev)
            event_free(set->budget_ev);
        if (set->admit_ev)
            event_free(set->admit_ev);
        free(set);
        return QN_ENOMEM;
    }
    *out = set;
    return QN_OK;
}

void qn__calls_free(struct qn_calls *set)
{
    if (set == NULL)
        return;
    assert(set->live == NULL);
    on_reap(-1, 0, set);
    assert(set->bw_head == NULL && set->queued == 0 && set->reserved == 0 && set->inbound == 0);
    assert(set->adm_first == NULL && set->nadm_calls == 0);
    event_free(set->reap_ev);
    event_free(set->budget_ev);
    event_free(set->admit_ev);
    for (size_t t = 0; t < set->ntables; t++)
        free(set->tables[t].instr);
    free(set->tables);
    free(set);
}

static bool path_ok(const char *p)
{
    /* "/pkg.Service/Method": a leading slash, one more slash, no empty parts. */
    if (p == NULL || p[0] != '/')
        return false;
    const char *slash = strchr(p + 1, '/');
    return slash != NULL && slash > p + 1 && slash[1] != '\0' && strchr(slash + 1, '/') == NULL;
}

int qn__calls_register(struct qn_calls *set, const struct qn_method *methods, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!path_ok(methods[i].path) || methods[i].request == NULL ||
            methods[i].on_message == NULL) {
            QN_ERROR("cannot register method %s: malformed entry",
                     methods[i].path ? methods[i].path : "(null)");
            return QN_EINVAL;
        }
        if (route(set, methods[i].path) != NULL) {
            QN_ERROR("cannot register method %s: already registered", methods[i].path);
            return QN_EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(methods[i].path, methods[j].path) == 0) {
                QN_ERROR("cannot register method %s: listed twice", methods[i].path);
                return QN_EINVAL;
            }
    }
    struct method_instr *instr = calloc(n ? n : 1, sizeof *instr);
    if (instr == NULL)
        return QN_ENOMEM;
    struct method_table *t = realloc(set->tables, (set->ntables + 1) * sizeof *t);
    if (t == NULL) {
        free(instr);
        return QN_ENOMEM;
    }
    set->tables = t;
    set->tables[set->ntables++] = (struct method_table){methods, n, instr};
    return QN_OK;
}

void qn__calls_set_gate(struct qn_calls *set, qn_call_gate_fn gate, void *ud)
{
    set->gate = gate;
    set->gate_ud = ud;
}

bool qn__calls_has_service(const struct qn_calls *set, const char *service)
{
    size_t len = strlen(service);
    for (size_t t = 0; t < set->ntables; t++)
        for (size_t i = 0; i < set->tables[t].n; i++) {
            const char *p = set->tables[t].m[i].path;
            if (strncmp(p + 1, service, len) == 0 && p[1 + len] == '/')
                return true;
        }
    return false;
}

void qn__calls_shutdown(struct qn_calls *set)
{
    set->shutting_down = true;
}

bool qn__calls_shutting_down(const struct qn_calls *set)
{
    return set->shutting_down;
}

void qn__calls_end(struct qn_calls *set, bool all)
{
    for (qn_call *c = set->live, *next; c != NULL; c = next) {
        next = c->live_next; /* ending never unlinks; handlers cannot close streams here */
        if (c->state != CALL_RECEIVING && c->state != CALL_OPEN && c->state != CALL_HEADERS)
            continue;
        if (!all && (c->method == NULL || !is_streaming(c->method)))
            continue;
        if (!c->ops->alive(c))
            continue; /* its connection is going: the reap pass closes it */
        if (c->state == CALL_HEADERS)
            call_end(c, 200, QN_GRPC_UNAVAILABLE, "the server is shutting down", false);
        else
            call_abort(c, QN_GRPC_UNAVAILABLE, "the server is shutting down", QN_ESHUTDOWN);
    }
}

void qn__calls_share_inbound(struct qn_calls *set, _Atomic size_t *count)
{
    set->shared_inbound = count;
}

void qn__calls_split_send_buffer(struct qn_calls *set, unsigned n)
{
    size_t share = n > 1 ? set->max_send_buffer / n : set->max_send_buffer;
    set->max_send_buffer = share > set->max_conn_send ? share : set->max_conn_send;
}

int qn__calls_set_metrics(struct qn_calls *set, qn_metrics *m)
{
    static const char *req_labels[] = {"service", "method", "code"};
    static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                    0.5,    1,     2.5,    5,     10,   30,    60,   300};
    qn_metrics_lock(m);
    int rc = qn_metrics_family(m, "queen_rpc_requests_total",
                               "calls finished, by method and gRPC status (CANCELLED: the client "
                               "went away first)",
                               QN_METRIC_COUNTER, req_labels, 3, NULL, 0, &set->m_requests);
    if (rc == QN_OK)
        rc = qn_metrics_family(m, "queen_rpc_duration_seconds",
                               "time from a call's request headers to its status",
                               QN_METRIC_HISTOGRAM, req_labels, 2, bounds,
                               sizeof bounds / sizeof bounds[0], &set->m_duration);
    qn_metrics_unlock(m);
    set->metrics = m;
    if (rc != QN_OK)
        set->m_requests = set->m_duration = NULL;
    return rc;
}

int qn__calls_stream_acquire(struct qn_calls *set)
{
    if (set->stream_slots >= set->max_stream_slots)
        return QN_EBUSY;
    /* the process's limit: a place taken first, given back when over */
    if (set->shared_streams != NULL &&
        atomic_fetch_add(set->shared_streams, 1) >= set->max_stream_slots) {
        atomic_fetch_sub(set->shared_streams, 1);
        return QN_EBUSY;
    }
    set->stream_slots++;
    return QN_OK;
}

void qn__calls_stream_release(struct qn_calls *set)
{
    if (set->stream_slots > 0) {
        set->stream_slots--;
        if (set->shared_streams != NULL)
            atomic_fetch_sub(set->shared_streams, 1);
    }
}

void qn__calls_share_streams(struct qn_calls *set, _Atomic uint64_t *count)
{
    set->shared_streams = count;
}

size_t qn__calls_max_send(const struct qn_calls *set)
{
    return set->max_send;
}

void qn__calls_stats(const struct qn_calls *set, struct qn_rpc_stats *out)
{
    out->calls_started = set->calls_started;
    out->calls_open = set->calls_open;
    out->calls_waiting = set->nadm_calls > UINT32_MAX ? UINT32_MAX : (uint32_t)set->nadm_calls;
    out->streams_open = set->stream_slots > UINT32_MAX ? UINT32_MAX : (uint32_t)set->stream_slots;
    memcpy(out->status_count, set->status_count, sizeof out->status_count);
}

/* ---------------------------------------------------------------- calls: API */

static void free_ref(const void *data, size_t len, void *extra)
{
    free((void *)data);
}

int qn_call_send(qn_call *c, const ProtobufCMessage *msg)
{
    if (c == NULL || c->state != CALL_OPEN)
        return QN_ECLOSED;
    if (!c->ops->alive(c))
        return QN_ECLOSED;
    if (!c->method->server_streaming && c->nsent > 0)
        return QN_EINVAL;
    size_t size = protobuf_c_message_get_packed_size(msg);
    struct qn_calls *set = c->set;
    if (size > set->max_send || size > UINT32_MAX - 5)
        return QN_ELIMIT;
    if (evbuffer_get_length(c->out) + size + 5 > set->max_pending)
        return QN_ELIMIT;
    uint8_t *buf = malloc(size + 5);
    if (buf == NULL)
        return QN_ENOMEM;
    qn_grpc_prefix_write(buf, (uint32_t)size);
    size_t packed = protobuf_c_message_pack(msg, buf + 5);
    if (packed != size || evbuffer_add_reference(c->out, buf, size + 5, free_ref, NULL) != 0) {
        free(buf);
        return packed != size ? QN_EINTERNAL : QN_ENOMEM;
    }
    out_account(c);
    c->nsent++;
    if (!c->headers_sent) {
        if (c->ops->respond(c) != QN_OK)
            return QN_ECLOSED; /* the queued bytes die with the call */
        c->headers_sent = true;
    } else {
        c->ops->resume(c);
    }
    return QN_OK;
}

void qn_call_finish(qn_call *c, enum qn_grpc_code code, const char *message)
{
    if (c == NULL || c->state != CALL_OPEN)
        return; /* already ended by the transport (inside on_cancel) */
    call_end(c, 200, code, message, false);
}

void qn_call_finishf(qn_call *c, enum qn_grpc_code code, const char *fmt, ...)
{
    char buf[MAX_STATUS_MSG + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    qn_call_finish(c, code, buf);
}

size_t qn_call_pending_bytes(const qn_call *c)
{
    return c->out ? evbuffer_get_length(c->out) : 0;
}

static void on_drain_ev(evutil_socket_t fd, short what, void *arg)
{
    qn_call *c = arg;
    if (c->state != CALL_OPEN || c->on_drain == NULL || evbuffer_get_length(c->out) > 0)
        return;
    void (*cb)(qn_call *) = c->on_drain;
    c->on_drain = NULL;
    cb(c);
}

int qn_call_on_drain(qn_call *c, void (*cb)(qn_call *call))
{
    c->on_drain = cb;
    if (cb == NULL || c->state != CALL_OPEN)
        return QN_OK;
    if (c->drain_ev == NULL) {
        c->drain_ev = event_new(c->set->base, -1, 0, on_drain_ev, c);
        if (c->drain_ev == NULL) {
            c->on_drain = NULL;
            return QN_ENOMEM; /* the caller ends the call: nothing would wake it */
        }
    }
    if (evbuffer_get_length(c->out) == 0)
        event_active(c->drain_ev, 0, 0);
    return QN_OK;
}

int qn_call_reserve(qn_call *c, size_t min, size_t want, size_t *granted, char *why, size_t cap)
{
    if (c == NULL || c->state != CALL_OPEN || c->cc == NULL || !c->ops->alive(c))
        return QN_ECLOSED;
    if (want < min)
        want = min;
    release_reservation(c);
    struct qn_calls *set = c->set;
    struct qn_call_conn *cc = c->cc;
    size_t conn = room(set->max_conn_send, cc->queued + cc->reserved);
    size_t broker = room(set->max_send_buffer, set->queued + set->reserved);
    size_t avail = conn < broker ? conn : broker;
    if (avail < min) {
        /* only other calls' reads in flight stand in the way: they end soon */
        if (room(set->max_conn_send, cc->queued) >= min &&
            room(set->max_send_buffer, set->queued) >= min)
            return QN_ELIMIT;
        if (cap > 0 && conn < min)
            snprintf(why, cap,
                     "the connection holds %zu bytes of responses its client has not read "
                     "(QUEEN_MAX_CONN_SEND_BYTES is %zu)",
                     cc->queued + cc->reserved, set->max_conn_send);
        else if (cap > 0)
            snprintf(why, cap,
                     "the broker holds %zu bytes of responses its clients have not read "
                     "(QUEEN_MAX_SEND_BUFFER_BYTES is %zu)",
                     set->queued + set->reserved, set->max_send_buffer);
        return QN_EBUSY;
    }
    size_t g = want < avail ? want : avail;
    c->reserved = g;
    cc->reserved += g;
    set->reserved += g;
    *granted = g;
    return QN_OK;
}

void qn_call_unreserve(qn_call *c)
{
    if (c != NULL && c->state != CALL_CLOSED)
        release_reservation(c);
}

int qn_call_on_budget(qn_call *c, size_t min, void (*cb)(qn_call *call))
{
    bw_unlink(c);
    c->on_budget = NULL;
    if (cb == NULL)
        return QN_OK;
    if (c->state != CALL_OPEN || c->cc == NULL)
        return QN_ECLOSED;
    c->budget_min = min;
    c->on_budget = cb;
    bw_append(c);
    if (budget_room(c) >= min)
        event_active(c->set->budget_ev, 0, 0); /* never inside the caller */
    return QN_OK;
}

size_t qn__call_conn_active(const struct qn_call_conn *cc)
{
    return cc->ncalls - cc->nheaders;
}

void qn_call_set_data(qn_call *c, void *data)
{
    c->data = data;
}

void *qn_call_data(const qn_call *c)
{
    return c->data;
}

int64_t qn_call_deadline_ms(const qn_call *c)
{
    return c->deadline_ms;
}

const void *qn_call_conn_key(const qn_call *c)
{
    return c->cc;
}

const char *qn_call_header(const qn_call *c, const char *name)
{
    return find_header(c, name);
}

qn_rpc_server *qn_call_server(const qn_call *c)
{
    return c->set->owner;
}

const struct qn_method *qn_call_method(const qn_call *c)
{
    return c->method;
}

void qn_call_set_auth(qn_call *c, void *auth, void (*free_fn)(void *auth))
{
    if (c->auth_free != NULL)
        c->auth_free(c->auth);
    c->auth = auth;
    c->auth_free = free_fn;
}

void *qn_call_auth(const qn_call *c)
{
    return c->auth;
}

struct x509_st *qn_call_peer_cert(const qn_call *c)
{
    return c->cc != NULL ? c->cc->peer_cert : NULL;
}

const char *qn_call_peer(const qn_call *c)
{
    return c->cc != NULL && c->cc->peer != NULL ? c->cc->peer : "";
}
