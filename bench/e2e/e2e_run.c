/*
 * e2e_run.c - the load generator's engine (see e2e_run.h).
 *
 * Does: connections, push request building (fresh payloads every message),
 * closed and open loop pushing, Pop+Ack and Consume-stream consumers, stats,
 * GetStats / DeleteQueue helpers, CPU sampling from /proc.
 * Does not: parse the command line or print tables (e2e_main.c), retry a push
 * (a failed push is counted, not repeated: the figure is what the broker did).
 *
 * Consumer lifecycle (asserted in cons_set):
 *   IDLE --pop started--> POPPING --messages--> NEED_ACK --ack started--> ACKING
 *   POPPING --empty--> IDLE; POPPING/ACKING --error--> WAIT --time--> IDLE
 *   ACKING --done--> IDLE;  NEED_ACK is also left when the ack gives up (WAIT)
 *   IDLE --stream opened--> STREAMING --stream ended--> WAIT or STOPPED
 *   IDLE --phase no longer consuming--> STOPPED
 *
 * Invariants:
 *   1. r->st always points at valid stats (a scratch block outside phases), so a
 *      call ending at any time (even in e2e_run_free) can count itself.
 *   2. pushes in flight == r->push_inflight == number of push calls not ended.
 *   3. a consumer has at most one unary call open (POPPING or ACKING) or one
 *      stream (STREAMING).
 */
#include "e2e_run.h"

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "e2e_arena.h"
#include "queen/client.h"
#include "queen/error.h"
#include "queen/v1/admin.pb-c.h"
#include "queen/v1/queue.pb-c.h"

#define PATH_PUSH "/queen.v1.QueueService/Push"
#define PATH_POP "/queen.v1.QueueService/Pop"
#define PATH_ACK "/queen.v1.QueueService/Ack"
#define PATH_CONSUME "/queen.v1.QueueService/Consume"
#define PATH_STATS "/queen.v1.AdminService/GetStats"
#define PATH_DELETE "/queen.v1.AdminService/DeleteQueue"
#define PATH_CONFIGURE "/queen.v1.AdminService/ConfigureQueue"

#define NS 1000000000ull
#define ARENA_MAX (512u * 1024u * 1024u)
#define PEND_SLOTS 64u /* stream acks awaiting their answer, per consumer */
#define TXN_LEN 40u
#define ACK_TRIES 3

enum cons_state {
    C_IDLE,
    C_POPPING,
    C_NEED_ACK,
    C_ACKING,
    C_WAIT,
    C_STREAMING,
    C_STOPPED,
};

struct pend_ack {
    uint64_t id;   /* request_id; 0 = free slot */
    uint64_t msgs; /* messages the ack covers */
};

struct consumer {
    e2e_run *r;
    unsigned idx;
    enum cons_state state;
    uint64_t wait_until_ns; /* C_WAIT */
    /* a framed AckRequest waiting to be (re)sent (unary API) */
    uint8_t *ack;
    size_t ack_len;
    size_t ack_cap;
    uint64_t ack_msgs;
    unsigned ack_items;
    unsigned ack_tries;
    /* Consume stream */
    qn_client_call *stream;
    bool stream_half_closed;
    uint64_t next_req_id;
    struct pend_ack pend[PEND_SLOTS];
    unsigned pend_n;
    uint64_t last_batch_ns;
};

struct push_ctx {
    e2e_run *r;
    unsigned n; /* items in the request */
};

struct e2e_run {
    const struct e2e_opts *o;
    qn_client_tls *tls;
    char authority[300];
    char sni[256];
    struct qn_client_opts co; /* how every connection is made */
    qn_client **conns;
    unsigned nconns;
    unsigned rr; /* round-robin cursor over conns */
    struct pollfd *pfd;
    bool starting;          /* e2e_run_new is waiting for the first connections */
    uint64_t last_print_ns; /* last connection failure printed */
    struct e2e_arena arena;
    /* what to push */
    char *queue;
    enum e2e_payload_kind kind;
    unsigned batch;
    unsigned partitions;
    char **pnames;
    struct e2e_payload_gen gen;
    Queen__V1__PushItem *items;
    Queen__V1__PushItem **itemp;
    uint8_t *scratch;  /* batch * size payload bytes */
    char *txn_scratch; /* batch * TXN_LEN */
    uint64_t push_seq; /* push requests built in this run */
    uint64_t msg_seq;  /* push items built in this run */
    uint64_t run_id;
    /* phase */
    struct e2e_stats scratch_stats;
    struct e2e_stats *st; /* invariant 1 */
    bool pushing;
    bool consuming;
    unsigned push_inflight;
    uint64_t push_started; /* requests started in this phase */
    uint64_t lat_from_us;  /* realtime: e2e latency of messages sent from then on */
    uint64_t rtt_from_ns;  /* monotonic: push round trips of calls started from then on */
    struct consumer *cons;
    unsigned ncons;
    struct e2e_hist win_e2e; /* e2e latencies since the last progress line */
    struct e2e_hist win_pop; /* Pop round trips since the last progress line */
    uint64_t win_pops;       /* pops answered since the last progress line */
    uint64_t win_empty;      /* of which empty */
};

static const struct qn_client_call_cbs push_cbs;
static const struct qn_client_call_cbs pop_cbs;
static const struct qn_client_call_cbs ack_cbs;
static const struct qn_client_call_cbs stream_cbs;

static uint64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000u;
}

static void note_error(e2e_run *r, const char *what, const char *detail)
{
    if (r->st->first_error[0] != '\0')
        return;
    /* "what: detail", truncated to the buffer: the start says what went wrong. */
    char *dst = r->st->first_error;
    size_t cap = sizeof r->st->first_error - 1, len = 0;
    const char *parts[3] = {what, ": ", detail};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(parts[i]);
        if (n > cap - len)
            n = cap - len;
        memcpy(dst + len, parts[i], n);
        len += n;
    }
    dst[len] = '\0';
}

/* ---------------------------------------------------------------- status counts */

static void count_end(e2e_run *r, struct e2e_status_count *sc,
                      const struct qn_client_call_result *res, const char *what)
{
    switch (res->end) {
    case QN_CLIENT_END_STATUS:
        if (res->grpc_status < QN_CLIENT_GRPC_CODES)
            sc->code[res->grpc_status]++;
        else
            sc->other_code++;
        if (res->grpc_status != 0) {
            char d[300];
            snprintf(d, sizeof d, "%s %s",
                     qn_client_code_name(res->grpc_status) != NULL
                         ? qn_client_code_name(res->grpc_status)
                         : "non-standard status",
                     res->grpc_message);
            note_error(r, what, d);
        }
        break;
    case QN_CLIENT_END_NO_STATUS: {
        sc->no_status++;
        char d[80];
        snprintf(d, sizeof d, "stream ended without grpc-status (http %d, h2 error %u)",
                 res->http_status, res->h2_error);
        note_error(r, what, d);
        break;
    }
    case QN_CLIENT_END_BAD_FRAME:
        sc->bad_frame++;
        note_error(r, what, "response broke gRPC framing or the size limit");
        break;
    case QN_CLIENT_END_CONN_LOST:
        sc->conn_lost++;
        note_error(r, what, "connection lost");
        break;
    case QN_CLIENT_END_DEADLINE: /* the bench sets no call deadlines */
        sc->no_status++;
        note_error(r, what, "deadline passed");
        break;
    }
}

uint64_t e2e_status_errors(const struct e2e_status_count *sc)
{
    uint64_t n = sc->other_code + sc->no_status + sc->bad_frame + sc->conn_lost + sc->bad_decode +
                 sc->item_failed;
    for (int i = 1; i < QN_CLIENT_GRPC_CODES; i++)
        n += sc->code[i];
    return n;
}

static void fmt_add(char *buf, size_t cap, size_t *len, bool *first, const char *name, uint64_t n)
{
    if (n == 0 || *len >= cap)
        return;
    int w = snprintf(buf + *len, cap - *len, "%s%s:%" PRIu64, *first ? "" : ",", name, n);
    if (w > 0)
        *len += (size_t)w < cap - *len ? (size_t)w : cap - *len - 1;
    *first = false;
}

void e2e_status_format(const struct e2e_status_count *sc, char *buf, size_t cap)
{
    if (cap < 3) {
        if (cap > 0)
            buf[0] = '\0';
        return;
    }
    size_t len = 1;
    bool first = true;
    buf[0] = '{';
    buf[1] = '\0';
    for (int i = 1; i < QN_CLIENT_GRPC_CODES; i++)
        fmt_add(buf, cap - 1, &len, &first, qn_client_code_name(i), sc->code[i]);
    fmt_add(buf, cap - 1, &len, &first, "other-status", sc->other_code);
    fmt_add(buf, cap - 1, &len, &first, "no-status", sc->no_status);
    fmt_add(buf, cap - 1, &len, &first, "bad-frame", sc->bad_frame);
    fmt_add(buf, cap - 1, &len, &first, "conn-lost", sc->conn_lost);
    fmt_add(buf, cap - 1, &len, &first, "bad-decode", sc->bad_decode);
    fmt_add(buf, cap - 1, &len, &first, "item-failed", sc->item_failed);
    buf[len] = '}';
    buf[len + 1] = '\0';
}

/* ---------------------------------------------------------------- connections */

/* Producers and consumers have connections of their own (as separate clients
 * would): conns[0, n) push, conns[n, 2n) pop and ack, so a push backlog filling
 * every stream slot cannot starve the consumers. */
enum role { ROLE_PUSH, ROLE_CONSUME, ROLE_ANY };

static qn_client *pick_conn(e2e_run *r, enum role role, unsigned prefer)
{
    unsigned half = r->nconns / 2;
    unsigned base = role == ROLE_CONSUME ? half : 0;
    unsigned n = role == ROLE_ANY ? r->nconns : half;
    for (unsigned i = 0; i < n; i++) {
        qn_client *c = r->conns[base + (prefer + i) % n];
        if (qn_client_ready(c) && qn_client_room(c) > 0)
            return c;
    }
    return NULL;
}

/* One poll round: waits at most until deadline_ns (monotonic), handles I/O
 * and connection timers, flushes. */
static void loop_once(e2e_run *r, uint64_t deadline_ns)
{
    for (unsigned i = 0; i < r->nconns; i++) {
        qn_client_flush(r->conns[i]);
        uint64_t d = qn_client_deadline(r->conns[i]);
        if (d != 0 && d < deadline_ns)
            deadline_ns = d;
        r->pfd[i].fd = qn_client_fd(r->conns[i]);
        r->pfd[i].events = qn_client_events(r->conns[i]);
        r->pfd[i].revents = 0;
    }
    uint64_t now = qn_client_now_ns();
    uint64_t wait = deadline_ns > now ? deadline_ns - now : 0;
    struct timespec ts = {.tv_sec = (time_t)(wait / NS), .tv_nsec = (long)(wait % NS)};
    int n = ppoll(r->pfd, r->nconns, &ts, NULL);
    if (n < 0 && errno != EINTR)
        n = 0;
    now = qn_client_now_ns();
    for (unsigned i = 0; i < r->nconns; i++) {
        uint64_t f0 = qn_client_failures(r->conns[i]);
        qn_client_io(r->conns[i], n > 0 ? r->pfd[i].revents : 0, now);
        uint64_t f1 = qn_client_failures(r->conns[i]);
        if (f1 > f0) {
            r->st->conn_failures += f1 - f0;
            note_error(r, "connection", qn_client_last_error(r->conns[i]));
            /* At most one line a second (a broker restart fails every
             * reconnect); none while the run is still making its connections. */
            if (!r->o->quiet && !r->starting && now - r->last_print_ns >= NS) {
                fprintf(stderr, "bench_e2e: connection %u: %s\n", i,
                        qn_client_last_error(r->conns[i]));
                r->last_print_ns = now;
            }
        }
    }
}

static bool address(const char *host, const char *port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        fprintf(stderr, "bench_e2e: cannot resolve %s:%s: %s\n", host, port, gai_strerror(rc));
        return false;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return true;
}

static bool is_ip_literal(const char *h)
{
    struct sockaddr_storage ss;
    return inet_pton(AF_INET, h, &ss) == 1 || inet_pton(AF_INET6, h, &ss) == 1;
}

int e2e_run_new(const struct e2e_opts *o, e2e_run **out)
{
    int rc = QN_ENOMEM;
    e2e_run *r = calloc(1, sizeof *r);
    if (r == NULL)
        return QN_ENOMEM;
    r->o = o;
    r->st = &r->scratch_stats;
    r->run_id = realtime_us() ^ ((uint64_t)getpid() << 40);
    e2e_arena_init(&r->arena, ARENA_MAX);
    snprintf(r->authority, sizeof r->authority, "%s:%s", o->host, o->port);

    struct qn_client_opts *co = &r->co;
    co->authority = r->authority;
    co->max_msg = o->max_msg;
    co->window = 16u * 1024u * 1024u;
    if (!address(o->host, o->port, &co->addr, &co->addrlen)) {
        rc = QN_EINVAL;
        goto fail;
    }
    co->reconnect = true;
    co->user_agent = "queen-bench-e2e/0.1";
    co->token = o->token;
    if (o->tls) {
        /* Without --ca the server is not verified; with it, the chain only. */
        struct qn_client_tls_opts to = {
            .ca_file = o->ca,
            .verify = o->ca != NULL ? QN_CLIENT_VERIFY_CHAIN : QN_CLIENT_VERIFY_NONE,
        };
        struct qn_client_status st;
        rc = qn_client_tls_new(&to, &r->tls, &st);
        if (rc != QN_OK) {
            fprintf(stderr, "bench_e2e: %s\n", st.message);
            goto fail;
        }
        co->tls = r->tls;
        if (!is_ip_literal(o->host)) {
            snprintf(r->sni, sizeof r->sni, "%s", o->host);
            co->server_name = r->sni;
        }
    }
    r->nconns = 2 * o->connections;
    r->conns = calloc(r->nconns, sizeof *r->conns);
    r->pfd = calloc(r->nconns, sizeof *r->pfd);
    if (r->conns == NULL || r->pfd == NULL)
        goto fail;
    for (unsigned i = 0; i < r->nconns; i++)
        if (qn_client_new(co, &r->conns[i]) != QN_OK)
            goto fail;
    uint64_t until = qn_client_now_ns() + 5 * NS;
    r->starting = true;
    while (qn_client_now_ns() < until) {
        unsigned ready = 0;
        for (unsigned i = 0; i < r->nconns; i++)
            ready += qn_client_ready(r->conns[i]);
        if (ready == r->nconns)
            break;
        loop_once(r, qn_client_now_ns() + NS / 20);
    }
    r->starting = false;
    if (pick_conn(r, ROLE_ANY, 0) == NULL) {
        fprintf(stderr, "bench_e2e: cannot connect to %s: %s\n", r->authority,
                r->nconns > 0 ? qn_client_last_error(r->conns[0]) : "no connections");
        rc = QN_EUNAVAILABLE;
        goto fail;
    }
    *out = r;
    return QN_OK;
fail:
    e2e_run_free(r);
    return rc;
}

static void target_release(e2e_run *r)
{
    if (r->pnames != NULL)
        for (unsigned i = 0; i < r->partitions; i++)
            free(r->pnames[i]);
    free(r->pnames);
    r->pnames = NULL;
    free(r->queue);
    r->queue = NULL;
    free(r->items);
    free(r->itemp);
    free(r->scratch);
    free(r->txn_scratch);
    r->items = NULL;
    r->itemp = NULL;
    r->scratch = NULL;
    r->txn_scratch = NULL;
}

void e2e_run_free(e2e_run *r)
{
    if (r == NULL)
        return;
    r->st = &r->scratch_stats;
    for (unsigned i = 0; r->conns != NULL && i < r->nconns; i++)
        qn_client_free(r->conns[i]);
    free(r->conns);
    free(r->pfd);
    if (r->cons != NULL)
        for (unsigned i = 0; i < r->ncons; i++)
            free(r->cons[i].ack);
    free(r->cons);
    target_release(r);
    e2e_arena_release(&r->arena);
    qn_client_tls_free(r->tls);
    free(r);
}

int e2e_run_target(e2e_run *r, const char *queue, enum e2e_payload_kind kind, unsigned batch,
                   unsigned partitions)
{
    target_release(r);
    r->kind = kind;
    r->batch = batch;
    r->partitions = partitions;
    r->queue = strdup(queue);
    r->pnames = calloc(partitions, sizeof *r->pnames);
    r->items = calloc(batch, sizeof *r->items);
    r->itemp = calloc(batch, sizeof *r->itemp);
    r->scratch = malloc((size_t)batch * r->o->size);
    r->txn_scratch = malloc((size_t)batch * TXN_LEN);
    if (r->queue == NULL || r->pnames == NULL || r->items == NULL || r->itemp == NULL ||
        r->scratch == NULL || r->txn_scratch == NULL)
        return QN_ENOMEM;
    for (unsigned i = 0; i < partitions; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%u", i);
        r->pnames[i] = strdup(name);
        if (r->pnames[i] == NULL)
            return QN_ENOMEM;
    }
    for (unsigned i = 0; i < batch; i++) {
        Queen__V1__PushItem init = QUEEN__V1__PUSH_ITEM__INIT;
        r->items[i] = init;
        r->itemp[i] = &r->items[i];
    }
    e2e_payload_init(&r->gen, kind, r->o->size, r->run_id);
    return QN_OK;
}

/* ---------------------------------------------------------------- push */

/* Fills r->items for the next request. */
static void build_push(e2e_run *r, bool txn, bool spread)
{
    uint64_t ts = realtime_us();
    size_t size = r->gen.size;
    unsigned part = (unsigned)(r->push_seq % r->partitions);
    for (unsigned i = 0; i < r->batch; i++) {
        Queen__V1__PushItem *it = &r->items[i];
        uint8_t *p = r->scratch + (size_t)i * size;
        e2e_payload_fill(&r->gen, p, ts);
        it->queue = r->queue;
        it->partition = r->pnames[spread ? (unsigned)((r->msg_seq + i) % r->partitions) : part];
        it->payload.data = p;
        it->payload.len = size;
        if (txn) {
            char *t = r->txn_scratch + (size_t)i * TXN_LEN;
            snprintf(t, TXN_LEN, "%016" PRIx64 "-%" PRIu64, r->run_id, r->msg_seq + i);
            it->transaction_id = t;
        } else {
            it->transaction_id = (char *)protobuf_c_empty_string;
        }
    }
    r->push_seq++;
    r->msg_seq += r->batch;
}

static bool push_start(e2e_run *r, uint64_t now)
{
    qn_client *c = pick_conn(r, ROLE_PUSH, r->rr++);
    if (c == NULL)
        return false;
    struct push_ctx *ctx = malloc(sizeof *ctx);
    if (ctx == NULL)
        return false;
    ctx->r = r;
    ctx->n = r->batch;
    qn_client_call *call = NULL;
    if (qn_client_call_start(c, PATH_PUSH, NULL, &push_cbs, ctx, &call) != QN_OK) {
        free(ctx);
        return false;
    }
    build_push(r, r->o->txn, r->o->spread);
    Queen__V1__PushRequest req = QUEEN__V1__PUSH_REQUEST__INIT;
    req.n_items = r->batch;
    req.items = r->itemp;
    if (qn_client_call_send(call, &req.base) != QN_OK)
        qn_client_call_cancel(call); /* ends with no-status; counted there */
    qn_client_call_close_send(call);
    if (r->st->push_first_ns == 0)
        r->st->push_first_ns = now;
    r->push_inflight++;
    r->push_started++;
    return true;
}

static void push_closed(qn_client_call *call, const struct qn_client_call_result *res, void *ud)
{
    struct push_ctx *ctx = ud;
    e2e_run *r = ctx->r;
    struct e2e_stats *st = r->st;
    uint64_t now = qn_client_now_ns();
    assert(r->push_inflight > 0);
    r->push_inflight--;
    st->push_calls++;
    st->push_last_ns = now;
    count_end(r, &st->push_st, res, "push");
    if (qn_client_call_started_ns(call) >= r->rtt_from_ns) /* past the warm-up */
        e2e_hist_add(&st->push_rtt, (now - qn_client_call_started_ns(call)) / 1000u, 1);
    if (res->end == QN_CLIENT_END_STATUS && res->grpc_status == 0) {
        Queen__V1__PushResponse *pr =
            res->msg != NULL
                ? queen__v1__push_response__unpack(&r->arena.pb, res->msg_len, res->msg)
                : NULL;
        if (pr == NULL) {
            st->push_st.bad_decode++;
            note_error(r, "push", "response did not decode");
        } else {
            for (size_t i = 0; i < pr->n_results; i++) {
                switch (pr->results[i]->status) {
                case QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED:
                    st->pushed++;
                    break;
                case QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE:
                    st->push_dup++;
                    break;
                default:
                    st->push_st.item_failed++;
                    note_error(r, "push item", pr->results[i]->error);
                    break;
                }
            }
            if (pr->n_results != ctx->n) {
                st->push_st.bad_decode++;
                note_error(r, "push", "result count differs from item count");
            }
        }
        e2e_arena_reset(&r->arena);
    }
    free(ctx);
}

static const struct qn_client_call_cbs push_cbs = {.on_close = push_closed};

/* ---------------------------------------------------------------- consumers */

static void cons_set(struct consumer *c, enum cons_state to)
{
    switch (to) {
    case C_POPPING:
    case C_STREAMING:
        assert(c->state == C_IDLE);
        break;
    case C_NEED_ACK:
        assert(c->state == C_POPPING || c->state == C_ACKING);
        break;
    case C_ACKING:
        assert(c->state == C_NEED_ACK);
        break;
    case C_STOPPED:
        assert(c->state == C_IDLE || c->state == C_STREAMING || c->state == C_WAIT);
        break;
    case C_IDLE:
    case C_WAIT:
        break;
    }
    c->state = to;
}

static void cons_wait(struct consumer *c, uint64_t ms)
{
    c->wait_until_ns = qn_client_now_ns() + ms * 1000000ull;
    cons_set(c, C_WAIT);
}

/* Records deliveries: counts and e2e latency from the embedded send time. */
static void delivered(e2e_run *r, Queen__V1__Message **msgs, size_t n)
{
    struct e2e_stats *st = r->st;
    uint64_t now_us = realtime_us();
    if (st->consume_first_ns == 0 && n > 0)
        st->consume_first_ns = qn_client_now_ns();
    st->delivered += n;
    for (size_t i = 0; i < n; i++) {
        uint64_t ts = 0;
        if (!e2e_payload_ts(r->kind, msgs[i]->payload.data, msgs[i]->payload.len, &ts) ||
            ts < r->lat_from_us) /* unknown, or sent during the warm-up */
            continue;
        uint64_t lat = now_us > ts ? now_us - ts : 0;
        e2e_hist_add(&st->e2e_lat, lat, 1);
        e2e_hist_add(&r->win_e2e, lat, 1);
    }
}

/* Fills an AckRequest for a delivered batch. items/itemp have room for n. */
static size_t build_ack(e2e_run *r, Queen__V1__Message **msgs, size_t n, const char *lease,
                        Queen__V1__AckItem *items, Queen__V1__AckItem **itemp)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        Queen__V1__Message *m = msgs[i];
        size_t j = k;
        if (r->o->ack_mode == E2E_ACK_LAST) {
            for (j = 0; j < k; j++)
                if (strcmp(items[j].partition_id, m->partition_id) == 0)
                    break;
            if (j < k) {
                if (m->offset > items[j].offset)
                    items[j].offset = m->offset;
                continue;
            }
        }
        Queen__V1__AckItem init = QUEEN__V1__ACK_ITEM__INIT;
        items[k] = init;
        items[k].partition_id = m->partition_id;
        items[k].target_case = QUEEN__V1__ACK_ITEM__TARGET_OFFSET;
        items[k].offset = m->offset;
        items[k].status = QUEEN__V1__ACK_STATUS__ACK_STATUS_COMPLETED;
        items[k].lease_id = (char *)(lease != NULL ? lease : protobuf_c_empty_string);
        itemp[k] = &items[k];
        k++;
    }
    return k;
}

/* Counts an AckResponse; returns the messages it acknowledged. */
static uint64_t ack_result(e2e_run *r, const Queen__V1__AckResponse *ar, unsigned items,
                           uint64_t msgs)
{
    size_t good = 0;
    for (size_t i = 0; i < ar->n_results; i++) {
        Queen__V1__AckOutcome oc = ar->results[i]->outcome;
        if (oc == QUEEN__V1__ACK_OUTCOME__ACK_OUTCOME_APPLIED ||
            oc == QUEEN__V1__ACK_OUTCOME__ACK_OUTCOME_NOOP) {
            good++;
        } else {
            r->st->ack_st.item_failed++;
            char d[200];
            snprintf(d, sizeof d, "outcome %d %s", (int)oc, ar->results[i]->error);
            note_error(r, "ack item", d);
        }
    }
    if (items == 0)
        return 0;
    if (good >= items)
        return msgs;
    return msgs * good / items;
}

static void pop_closed(qn_client_call *call, const struct qn_client_call_result *res, void *ud)
{
    struct consumer *c = ud;
    e2e_run *r = c->r;
    struct e2e_stats *st = r->st;
    uint64_t now = qn_client_now_ns();
    st->pop_calls++;
    count_end(r, &st->pop_st, res, "pop");
    uint64_t rtt_us = (now - qn_client_call_started_ns(call)) / 1000u;
    r->win_pops++;
    if (res->end != QN_CLIENT_END_STATUS || res->grpc_status != 0) {
        cons_wait(c, res->grpc_status == 14 || res->grpc_status == 8 ? 100 : 10);
        return;
    }
    Queen__V1__PopResponse *pr =
        res->msg != NULL ? queen__v1__pop_response__unpack(&r->arena.pb, res->msg_len, res->msg)
                         : NULL;
    if (pr == NULL) {
        st->pop_st.bad_decode++;
        note_error(r, "pop", "response did not decode");
        e2e_arena_reset(&r->arena);
        cons_wait(c, 10);
        return;
    }
    if (pr->n_messages == 0) {
        st->pop_empty++;
        r->win_empty++;
        e2e_arena_reset(&r->arena);
        cons_set(c, C_IDLE);
        return;
    }
    /* Only pops that delivered: an empty pop lasts wait_ms by design. */
    e2e_hist_add(&st->pop_rtt, rtt_us, 1);
    e2e_hist_add(&r->win_pop, rtt_us, 1);
    delivered(r, pr->messages, pr->n_messages);
    Queen__V1__AckItem *items = e2e_arena_alloc(&r->arena, pr->n_messages * sizeof *items);
    Queen__V1__AckItem **itemp = e2e_arena_alloc(&r->arena, pr->n_messages * sizeof *itemp);
    int rc = QN_ENOMEM;
    if (items != NULL && itemp != NULL) {
        Queen__V1__AckRequest ar = QUEEN__V1__ACK_REQUEST__INIT;
        ar.consumer_group = (char *)r->o->group;
        ar.items = itemp;
        ar.n_items = build_ack(r, pr->messages, pr->n_messages, pr->lease_id, items, itemp);
        size_t len = protobuf_c_message_get_packed_size(&ar.base);
        if (QN_CLIENT_GRPC_PREFIX + len > c->ack_cap) {
            uint8_t *nb = realloc(c->ack, QN_CLIENT_GRPC_PREFIX + len);
            if (nb != NULL) {
                c->ack = nb;
                c->ack_cap = QN_CLIENT_GRPC_PREFIX + len;
            }
        }
        if (QN_CLIENT_GRPC_PREFIX + len <= c->ack_cap && len <= UINT32_MAX) {
            qn_client_grpc_prefix(c->ack, (uint32_t)len);
            protobuf_c_message_pack(&ar.base, c->ack + QN_CLIENT_GRPC_PREFIX);
            c->ack_len = QN_CLIENT_GRPC_PREFIX + len;
            c->ack_msgs = pr->n_messages;
            c->ack_items = (unsigned)ar.n_items;
            c->ack_tries = 0;
            rc = QN_OK;
        }
    }
    e2e_arena_reset(&r->arena);
    if (rc != QN_OK) {
        note_error(r, "ack", "out of memory building the ack");
        cons_wait(c, 10);
        return;
    }
    cons_set(c, C_NEED_ACK);
}

static void ack_closed(qn_client_call *call, const struct qn_client_call_result *res, void *ud)
{
    struct consumer *c = ud;
    e2e_run *r = c->r;
    struct e2e_stats *st = r->st;
    count_end(r, &st->ack_st, res, "ack");
    if (res->end != QN_CLIENT_END_STATUS || res->grpc_status != 0) {
        /* Retry a few times: an unacked batch stays leased until it expires. */
        if (++c->ack_tries < ACK_TRIES) {
            cons_set(c, C_NEED_ACK);
            return;
        }
        cons_wait(c, 10);
        return;
    }
    Queen__V1__AckResponse *ar =
        res->msg != NULL ? queen__v1__ack_response__unpack(&r->arena.pb, res->msg_len, res->msg)
                         : NULL;
    if (ar == NULL) {
        st->ack_st.bad_decode++;
        note_error(r, "ack", "response did not decode");
    } else {
        st->acked += ack_result(r, ar, c->ack_items, c->ack_msgs);
        st->consume_last_ns = qn_client_now_ns();
        if (qn_client_call_started_ns(call) >= r->rtt_from_ns) /* past the warm-up */
            e2e_hist_add(&st->ack_rtt,
                         (st->consume_last_ns - qn_client_call_started_ns(call)) / 1000u, 1);
    }
    e2e_arena_reset(&r->arena);
    cons_set(c, C_IDLE);
}

static const struct qn_client_call_cbs pop_cbs = {.on_close = pop_closed};
static const struct qn_client_call_cbs ack_cbs = {.on_close = ack_closed};

static void pop_start(struct consumer *c)
{
    e2e_run *r = c->r;
    qn_client *conn = pick_conn(r, ROLE_CONSUME, c->idx);
    if (conn == NULL)
        return;
    qn_client_call *call = NULL;
    if (qn_client_call_start(conn, PATH_POP, NULL, &pop_cbs, c, &call) != QN_OK)
        return;
    Queen__V1__PopRequest req = QUEEN__V1__POP_REQUEST__INIT;
    req.queue = r->queue;
    req.consumer_group = (char *)r->o->group;
    req.batch = r->o->pop_batch;
    req.wait_ms = r->o->pop_wait_ms;
    req.max_partitions = r->o->pop_partitions;
    if (qn_client_call_send(call, &req.base) != QN_OK)
        qn_client_call_cancel(call);
    qn_client_call_close_send(call);
    cons_set(c, C_POPPING);
}

static void ack_start(struct consumer *c)
{
    e2e_run *r = c->r;
    qn_client *conn = pick_conn(r, ROLE_CONSUME, c->idx);
    if (conn == NULL)
        return;
    qn_client_call *call = NULL;
    if (qn_client_call_start(conn, PATH_ACK, NULL, &ack_cbs, c, &call) != QN_OK)
        return;
    if (qn_client_call_send_raw(call, c->ack, c->ack_len) != QN_OK)
        qn_client_call_cancel(call);
    qn_client_call_close_send(call);
    cons_set(c, C_ACKING);
}

/* Consume stream: a batch or an ack answer arrived. */
static void stream_message(qn_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
    struct consumer *c = ud;
    e2e_run *r = c->r;
    struct e2e_stats *st = r->st;
    Queen__V1__ConsumeResponse *cr = queen__v1__consume_response__unpack(&r->arena.pb, len, msg);
    if (cr == NULL) {
        st->pop_st.bad_decode++;
        note_error(r, "consume", "stream message did not decode");
        e2e_arena_reset(&r->arena);
        return;
    }
    uint64_t now = qn_client_now_ns();
    if (cr->kind_case == QUEEN__V1__CONSUME_RESPONSE__KIND_BATCH && cr->batch != NULL) {
        Queen__V1__PopResponse *pr = cr->batch;
        st->pop_calls++;
        if (c->last_batch_ns != 0)
            e2e_hist_add(&st->pop_rtt, (now - c->last_batch_ns) / 1000u, 1);
        c->last_batch_ns = now;
        delivered(r, pr->messages, pr->n_messages);
        if (pr->n_messages > 0 && pr->lease_id != NULL && pr->lease_id[0] != '\0') {
            Queen__V1__AckItem *items = e2e_arena_alloc(&r->arena, pr->n_messages * sizeof *items);
            Queen__V1__AckItem **itemp = e2e_arena_alloc(&r->arena, pr->n_messages * sizeof *itemp);
            struct pend_ack *slot = NULL;
            for (unsigned i = 0; i < PEND_SLOTS && slot == NULL; i++)
                if (c->pend[i].id == 0)
                    slot = &c->pend[i];
            if (items != NULL && itemp != NULL && slot != NULL) {
                Queen__V1__AckRequest ar = QUEEN__V1__ACK_REQUEST__INIT;
                ar.consumer_group = (char *)r->o->group;
                ar.items = itemp;
                ar.n_items = build_ack(r, pr->messages, pr->n_messages, pr->lease_id, items, itemp);
                Queen__V1__ConsumeRequest q = QUEEN__V1__CONSUME_REQUEST__INIT;
                q.request_id = ++c->next_req_id;
                q.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_ACK;
                q.ack = &ar;
                if (qn_client_call_send(call, &q.base) == QN_OK) {
                    slot->id = q.request_id;
                    slot->msgs = pr->n_messages;
                    c->pend_n++;
                }
            } else {
                note_error(r, "consume", "too many acks awaiting an answer");
            }
        }
        if (r->consuming && !c->stream_half_closed) {
            Queen__V1__ConsumeRequest q = QUEEN__V1__CONSUME_REQUEST__INIT;
            q.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_CREDITS;
            q.credits = 1;
            (void)qn_client_call_send(call, &q.base);
        }
    } else if (cr->kind_case == QUEEN__V1__CONSUME_RESPONSE__KIND_ACK && cr->ack != NULL) {
        for (unsigned i = 0; i < PEND_SLOTS; i++) {
            if (c->pend[i].id != 0 && c->pend[i].id == cr->request_id) {
                uint64_t n_items = cr->ack->n_results;
                st->acked += ack_result(r, cr->ack, (unsigned)n_items, c->pend[i].msgs);
                st->consume_last_ns = now;
                c->pend[i].id = 0;
                c->pend_n--;
                break;
            }
        }
    }
    e2e_arena_reset(&r->arena);
}

static void stream_closed(qn_client_call *call, const struct qn_client_call_result *res, void *ud)
{
    (void)call;
    struct consumer *c = ud;
    e2e_run *r = c->r;
    c->stream = NULL;
    memset(c->pend, 0, sizeof c->pend);
    c->pend_n = 0;
    /* A stream we half-closed ends normally with OK; anything else is counted. */
    count_end(r, &r->st->pop_st, res, "consume stream");
    if (r->consuming && !c->stream_half_closed)
        cons_wait(c, 100);
    else
        cons_set(c, C_STOPPED);
}

static const struct qn_client_call_cbs stream_cbs = {.on_message = stream_message,
                                                     .on_close = stream_closed};

static void stream_start(struct consumer *c)
{
    e2e_run *r = c->r;
    qn_client *conn = pick_conn(r, ROLE_CONSUME, c->idx);
    if (conn == NULL)
        return;
    qn_client_call *call = NULL;
    if (qn_client_call_start(conn, PATH_CONSUME, NULL, &stream_cbs, c, &call) != QN_OK)
        return;
    Queen__V1__ConsumeSubscribe sub = QUEEN__V1__CONSUME_SUBSCRIBE__INIT;
    sub.queue = r->queue;
    sub.consumer_group = (char *)r->o->group;
    sub.batch = r->o->pop_batch;
    sub.max_partitions = r->o->pop_partitions;
    sub.credits = r->o->credits;
    Queen__V1__ConsumeRequest q = QUEEN__V1__CONSUME_REQUEST__INIT;
    q.kind_case = QUEEN__V1__CONSUME_REQUEST__KIND_SUBSCRIBE;
    q.subscribe = &sub;
    if (qn_client_call_send(call, &q.base) != QN_OK)
        qn_client_call_cancel(call);
    c->stream = call;
    c->stream_half_closed = false;
    c->last_batch_ns = 0;
    cons_set(c, C_STREAMING);
}

static void pump_consumers(e2e_run *r, uint64_t now)
{
    for (unsigned i = 0; i < r->ncons; i++) {
        struct consumer *c = &r->cons[i];
        switch (c->state) {
        case C_WAIT:
            if (now < c->wait_until_ns)
                break;
            cons_set(c, C_IDLE);
            /* fall through */
        case C_IDLE:
            if (!r->consuming)
                cons_set(c, C_STOPPED);
            else if (r->o->consume_api == E2E_CONSUME_STREAM)
                stream_start(c);
            else
                pop_start(c);
            break;
        case C_NEED_ACK:
            /* Sent even when stopping: a batch left unacked stays leased. */
            ack_start(c);
            break;
        case C_STREAMING:
            if (!r->consuming && !c->stream_half_closed && c->pend_n == 0 && c->stream != NULL) {
                c->stream_half_closed = true;
                qn_client_call_close_send(c->stream);
            }
            break;
        case C_POPPING:
        case C_ACKING:
        case C_STOPPED:
            break;
        }
    }
}

static bool consumers_stopped(const e2e_run *r)
{
    for (unsigned i = 0; i < r->ncons; i++)
        if (r->cons[i].state != C_STOPPED)
            return false;
    return true;
}

static uint64_t consumers_deadline(const e2e_run *r, uint64_t d)
{
    for (unsigned i = 0; i < r->ncons; i++)
        if (r->cons[i].state == C_WAIT && r->cons[i].wait_until_ns < d)
            d = r->cons[i].wait_until_ns;
    return d;
}

/* ---------------------------------------------------------------- phases */

static void progress(e2e_run *r, const struct e2e_phase *ph, uint64_t t0, uint64_t now,
                     uint64_t *last_pushed, uint64_t *last_acked, uint64_t *last_ns)
{
    struct e2e_stats *st = r->st;
    double dt = (double)(now - *last_ns) / 1e9;
    double pr = dt > 0 ? (double)(st->pushed - *last_pushed) / dt : 0;
    double cr = dt > 0 ? (double)(st->acked - *last_acked) / dt : 0;
    int64_t backlog = (int64_t)st->pushed - (int64_t)st->acked;
    if (backlog > st->max_backlog)
        st->max_backlog = backlog;
    char pe[256], ce[256];
    e2e_status_format(&st->push_st, pe, sizeof pe);
    e2e_status_format(&st->pop_st, ce, sizeof ce);
    printf("%s t=%.0fs pushed=%" PRIu64 " consumed=%" PRIu64 " backlog=%" PRId64
           " push_msg/s=%.0f consume_msg/s=%.0f e2e_p50_ms=%.1f e2e_p99_ms=%.1f"
           " pops=%" PRIu64 " empty=%" PRIu64 " pop_p50_ms=%.1f pop_p99_ms=%.1f"
           " push_errors=%s pop_errors=%s\n",
           ph->label, (double)(now - t0) / 1e9, st->pushed, st->acked, backlog, pr, cr,
           (double)e2e_hist_quantile(&r->win_e2e, 0.50) / 1000.0,
           (double)e2e_hist_quantile(&r->win_e2e, 0.99) / 1000.0, r->win_pops, r->win_empty,
           (double)e2e_hist_quantile(&r->win_pop, 0.50) / 1000.0,
           (double)e2e_hist_quantile(&r->win_pop, 0.99) / 1000.0, pe, ce);
    fflush(stdout);
    e2e_hist_reset(&r->win_e2e);
    e2e_hist_reset(&r->win_pop);
    r->win_pops = r->win_empty = 0;
    *last_pushed = st->pushed;
    *last_acked = st->acked;
    *last_ns = now;
}

int e2e_run_phase(e2e_run *r, const struct e2e_phase *ph, struct e2e_stats *st)
{
    const struct e2e_opts *o = r->o;
    memset(st, 0, sizeof *st);
    r->st = st;
    r->push_started = 0;
    r->lat_from_us = realtime_us() + (uint64_t)(o->warmup_s * 1e6);
    r->rtt_from_ns = qn_client_now_ns() + (uint64_t)(o->warmup_s * 1e9);
    e2e_hist_reset(&r->win_e2e);
    e2e_hist_reset(&r->win_pop);
    r->win_pops = r->win_empty = 0;
    /* Consumers live for one phase (their calls all ended with the last one). */
    for (unsigned i = 0; r->cons != NULL && i < r->ncons; i++)
        free(r->cons[i].ack);
    free(r->cons);
    r->cons = NULL;
    r->ncons = 0;
    if (ph->consume && o->consumers > 0) {
        r->cons = calloc(o->consumers, sizeof *r->cons);
        if (r->cons == NULL) {
            r->st = &r->scratch_stats;
            return QN_ENOMEM;
        }
        r->ncons = o->consumers;
        for (unsigned i = 0; i < r->ncons; i++) {
            r->cons[i].r = r;
            r->cons[i].idx = i;
            r->cons[i].state = C_IDLE;
        }
    }
    uint64_t t0 = qn_client_now_ns();
    st->phase_start_ns = t0;
    uint64_t dur = (uint64_t)(ph->duration_s * 1e9);
    uint64_t push_end = t0 + dur;
    uint64_t drain = (uint64_t)(o->drain_s * 1e9);
    uint64_t report = ph->report_s > 0 ? (uint64_t)(ph->report_s * 1e9) : 0;
    uint64_t next_report = report ? t0 + report : UINT64_MAX;
    uint64_t last_pushed = 0, last_acked = 0, last_ns = t0;
    double req_rate = ph->rate > 0 ? ph->rate / (double)r->batch : 0; /* requests per second */
    unsigned inflight = ph->inflight > 0 ? ph->inflight : o->inflight;
    r->pushing = ph->push;
    r->consuming = ph->consume;
    /* Past this, stop waiting for stragglers: cancel whatever is still open. */
    uint64_t hard_end = push_end + drain + 30 * NS;
    bool cancelled = false;

    for (;;) {
        uint64_t now = qn_client_now_ns();
        uint64_t wake = now + NS / 10;
        if (r->pushing && now >= push_end) {
            r->pushing = false;
            st->backlog_at_push_end = (int64_t)st->pushed - (int64_t)st->acked;
        }
        if (r->pushing) {
            if (req_rate > 0) {
                uint64_t due = (uint64_t)((double)(now - t0) / 1e9 * req_rate) + 1;
                while (r->push_started < due && r->push_inflight < inflight)
                    if (!push_start(r, now))
                        break;
                /* At the in-flight cap a response wakes us; otherwise sleep until the
                 * next request is due (at least 200 us when no stream was free). */
                if (r->push_inflight < inflight) {
                    uint64_t next = t0 + (uint64_t)((double)r->push_started / req_rate * 1e9);
                    if (next < now + NS / 5000)
                        next = now + NS / 5000;
                    if (next < wake)
                        wake = next;
                }
            } else {
                while (r->push_inflight < inflight)
                    if (!push_start(r, now))
                        break;
            }
        }
        if (ph->consume && r->consuming) {
            bool stop;
            if (ph->push)
                stop = !r->pushing && r->push_inflight == 0 &&
                       (st->acked >= st->pushed || now >= push_end + drain);
            else
                stop =
                    now >= push_end || (ph->consume_target > 0 && st->acked >= ph->consume_target);
            if (stop)
                r->consuming = false;
        }
        pump_consumers(r, now);
        if (!r->pushing && r->push_inflight == 0 && consumers_stopped(r))
            break;
        if (now >= hard_end && !cancelled) {
            /* The broker stopped answering: cancel and count what is left. */
            cancelled = true;
            r->pushing = r->consuming = false;
            note_error(r, "phase", "calls still open 30 s after the end; cancelled");
            st->conn_failures++;
            /* Closing a connection ends its calls (counted as conn-lost); fresh
             * connections serve the next phase. */
            for (unsigned i = 0; i < r->nconns; i++) {
                qn_client_free(r->conns[i]);
                r->conns[i] = NULL;
                if (qn_client_new(&r->co, &r->conns[i]) != QN_OK) {
                    r->nconns = i;
                    break;
                }
            }
            for (unsigned i = 0; i < r->ncons; i++)
                r->cons[i].state = C_STOPPED;
            break;
        }
        if (now >= next_report) {
            progress(r, ph, t0, now, &last_pushed, &last_acked, &last_ns);
            next_report += report;
        }
        if (next_report < wake)
            wake = next_report;
        if (r->pushing && push_end < wake)
            wake = push_end;
        wake = consumers_deadline(r, wake);
        loop_once(r, wake);
    }
    st->phase_end_ns = qn_client_now_ns();
    r->st = &r->scratch_stats;
    return cancelled ? QN_EUNAVAILABLE : QN_OK;
}

/* ---------------------------------------------------------------- unary helpers */

struct sync_call {
    bool done;
    enum qn_client_end end;
    int status;
    char message[256];
    uint8_t *msg;
    size_t len;
};

static void sync_closed(qn_client_call *call, const struct qn_client_call_result *res, void *ud)
{
    (void)call;
    struct sync_call *s = ud;
    s->done = true;
    s->end = res->end;
    s->status = res->grpc_status;
    snprintf(s->message, sizeof s->message, "%s", res->grpc_message);
    if (res->msg != NULL) {
        s->msg = malloc(res->msg_len > 0 ? res->msg_len : 1);
        if (s->msg != NULL) {
            memcpy(s->msg, res->msg, res->msg_len);
            s->len = res->msg_len;
        }
    }
}

static const struct qn_client_call_cbs sync_cbs = {.on_close = sync_closed};

static int unary_sync(e2e_run *r, const char *path, const ProtobufCMessage *req,
                      struct sync_call *s, double timeout_s, char *err, size_t errcap)
{
    memset(s, 0, sizeof *s);
    uint64_t until = qn_client_now_ns() + (uint64_t)(timeout_s * 1e9);
    qn_client_call *call = NULL;
    while (call == NULL) {
        qn_client *c = pick_conn(r, ROLE_ANY, 0);
        if (c != NULL && qn_client_call_start(c, path, NULL, &sync_cbs, s, &call) == QN_OK)
            break;
        call = NULL;
        if (qn_client_now_ns() >= until) {
            snprintf(err, errcap, "no connection to the broker");
            return QN_EUNAVAILABLE;
        }
        loop_once(r, qn_client_now_ns() + NS / 20);
    }
    if (qn_client_call_send(call, req) != QN_OK)
        qn_client_call_cancel(call);
    qn_client_call_close_send(call);
    bool cancelled = false;
    while (!s->done) {
        if (!cancelled && qn_client_now_ns() >= until) {
            qn_client_call_cancel(call);
            cancelled = true;
        }
        loop_once(r, qn_client_now_ns() + NS / 10);
    }
    if (s->end != QN_CLIENT_END_STATUS) {
        snprintf(err, errcap, "%s", cancelled ? "timed out" : "call failed without a status");
        free(s->msg);
        s->msg = NULL;
        return QN_EUNAVAILABLE;
    }
    if (s->status != 0) {
        const char *name = qn_client_code_name(s->status);
        snprintf(err, errcap, "%s %s", name != NULL ? name : "error", s->message);
        free(s->msg);
        s->msg = NULL;
        return QN_EUNAVAILABLE;
    }
    return QN_OK;
}

int e2e_run_broker_stats(e2e_run *r, struct e2e_broker_stats *bs, char *err, size_t errcap)
{
    Queen__V1__GetStatsRequest req = QUEEN__V1__GET_STATS_REQUEST__INIT;
    struct sync_call s;
    int rc = unary_sync(r, PATH_STATS, &req.base, &s, 10, err, errcap);
    if (rc != QN_OK)
        return rc;
    Queen__V1__GetStatsResponse *resp =
        s.msg != NULL ? queen__v1__get_stats_response__unpack(NULL, s.len, s.msg) : NULL;
    free(s.msg);
    if (resp == NULL) {
        snprintf(err, errcap, "GetStats response did not decode");
        return QN_EPROTO;
    }
    bs->pushed = resp->pushed;
    bs->delivered = resp->delivered;
    bs->rpcs = resp->rpcs;
    bs->total_pending = resp->total_pending;
    queen__v1__get_stats_response__free_unpacked(resp, NULL);
    return QN_OK;
}

int e2e_run_configure_encrypted(e2e_run *r, const char *queue, char *err, size_t errcap)
{
    Queen__V1__QueueOptions opts = QUEEN__V1__QUEUE_OPTIONS__INIT;
    opts._encryption_enabled_case =
        QUEEN__V1__QUEUE_OPTIONS___ENCRYPTION_ENABLED_ENCRYPTION_ENABLED;
    opts.encryption_enabled = true;
    Queen__V1__ConfigureQueueRequest req = QUEEN__V1__CONFIGURE_QUEUE_REQUEST__INIT;
    req.queue = (char *)queue;
    req.options = &opts;
    struct sync_call s;
    int rc = unary_sync(r, PATH_CONFIGURE, &req.base, &s, 30, err, errcap);
    free(s.msg);
    return rc;
}

int e2e_run_delete_queue(e2e_run *r, const char *queue, char *err, size_t errcap)
{
    Queen__V1__DeleteQueueRequest req = QUEEN__V1__DELETE_QUEUE_REQUEST__INIT;
    req.queue = (char *)queue;
    struct sync_call s;
    int rc = unary_sync(r, PATH_DELETE, &req.base, &s, 120, err, errcap);
    free(s.msg);
    return rc;
}

/* ---------------------------------------------------------------- make-body */

int e2e_make_push_body(const char *queue, unsigned batch, unsigned partitions,
                       enum e2e_payload_kind kind, size_t size, uint8_t **out, size_t *len)
{
    int rc = QN_ENOMEM;
    Queen__V1__PushItem *items = calloc(batch, sizeof *items);
    Queen__V1__PushItem **itemp = calloc(batch, sizeof *itemp);
    uint8_t *payloads = malloc((size_t)batch * size);
    char(*pn)[16] = calloc(partitions, sizeof *pn);
    uint8_t *buf = NULL;
    if (items == NULL || itemp == NULL || payloads == NULL || pn == NULL)
        goto out;
    struct e2e_payload_gen g;
    e2e_payload_init(&g, kind, size, realtime_us());
    for (unsigned i = 0; i < partitions; i++)
        snprintf(pn[i], sizeof pn[i], "p%u", i);
    uint64_t ts = realtime_us();
    for (unsigned i = 0; i < batch; i++) {
        Queen__V1__PushItem init = QUEEN__V1__PUSH_ITEM__INIT;
        items[i] = init;
        items[i].queue = (char *)queue;
        items[i].partition = pn[i % partitions];
        e2e_payload_fill(&g, payloads + (size_t)i * g.size, ts);
        items[i].payload.data = payloads + (size_t)i * g.size;
        items[i].payload.len = g.size;
        itemp[i] = &items[i];
    }
    Queen__V1__PushRequest req = QUEEN__V1__PUSH_REQUEST__INIT;
    req.n_items = batch;
    req.items = itemp;
    size_t n = protobuf_c_message_get_packed_size(&req.base);
    if (n > UINT32_MAX) {
        rc = QN_ELIMIT;
        goto out;
    }
    buf = malloc(QN_CLIENT_GRPC_PREFIX + n);
    if (buf == NULL)
        goto out;
    qn_client_grpc_prefix(buf, (uint32_t)n);
    protobuf_c_message_pack(&req.base, buf + QN_CLIENT_GRPC_PREFIX);
    *out = buf;
    *len = QN_CLIENT_GRPC_PREFIX + n;
    buf = NULL;
    rc = QN_OK;
out:
    free(buf);
    free(items);
    free(itemp);
    free(payloads);
    free(pn);
    return rc;
}

/* ---------------------------------------------------------------- CPU */

/* utime + stime + cutime + cstime of /proc/<pid>/stat, in clock ticks: the
 * children's times keep the CPU of exited PostgreSQL backends in the sum (the
 * postmaster reaps them). False if unreadable. */
static bool proc_ticks(const char *pid, unsigned long long *ticks, long *ppid, char *comm,
                       size_t commcap)
{
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *l = strchr(buf, '(');
    char *rp = strrchr(buf, ')');
    if (l == NULL || rp == NULL || rp < l)
        return false;
    size_t cl = (size_t)(rp - l - 1);
    if (cl >= commcap)
        cl = commcap - 1;
    memcpy(comm, l + 1, cl);
    comm[cl] = '\0';
    /* Fields after ")": state is field 3, ppid 4; utime 14, stime 15, cutime 16,
     * cstime 17. */
    char *p = rp + 1;
    unsigned long long sum = 0;
    for (int field = 3; field <= 17; field++) {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            return false;
        char *end = NULL;
        if (field == 4) {
            errno = 0;
            long v = strtol(p, &end, 10);
            if (errno != 0 || end == p)
                return false;
            *ppid = v;
            p = end;
        } else if (field >= 14) {
            errno = 0;
            long long v = strtoll(p, &end, 10);
            if (errno != 0 || end == p || v < 0)
                return false;
            sum += (unsigned long long)v;
            p = end;
        } else {
            while (*p != ' ' && *p != '\0')
                p++;
        }
    }
    *ticks = sum;
    return true;
}

void e2e_cpu_sample(struct e2e_cpu *c, int broker_pid, int pg_pid)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    struct rusage ru;
    c->self = -1;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        c->self = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                  (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    c->broker = c->pg = c->machine = -1;
    long hz = sysconf(_SC_CLK_TCK);
    FILE *ps = fopen("/proc/stat", "re");
    if (ps != NULL) {
        unsigned long long v[8] = {0};
        if (hz > 0 && fscanf(ps, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                             &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
            /* user nice system idle iowait irq softirq steal: busy excludes idle, iowait */
            unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
            c->machine = (double)busy / (double)hz;
        }
        fclose(ps);
    }
    DIR *d = opendir("/proc");
    if (d == NULL || hz <= 0) {
        if (d != NULL)
            closedir(d);
        return;
    }
    unsigned long long b = 0, pg = 0;
    bool seen_b = false, seen_pg = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        unsigned long long t = 0;
        long ppid = 0;
        char comm[64];
        if (!proc_ticks(e->d_name, &t, &ppid, comm, sizeof comm))
            continue;
        long pid = strtol(e->d_name, NULL, 10);
        bool is_b = broker_pid > 0 ? pid == broker_pid : strcmp(comm, "queen-broker") == 0;
        bool is_pg = pg_pid > 0 ? (pid == pg_pid || ppid == pg_pid) : strcmp(comm, "postgres") == 0;
        if (is_b) {
            b += t;
            seen_b = true;
        } else if (is_pg) {
            pg += t;
            seen_pg = true;
        }
    }
    closedir(d);
    if (seen_b)
        c->broker = (double)b / (double)hz;
    if (seen_pg)
        c->pg = (double)pg / (double)hz;
}
