/*
 * test_net.c - suite "net": broker/src/transport/net.c against a fake protocol,
 * on a real loopback socket and the test's own event loop.
 *
 * The fake protocol (a struct qn_net_handler) echoes what it receives, or fails
 * as a test tells it to. What is asserted is the contract of net.h: a recv()
 * result in the connection-fatal range (qn_err_is_fatal: QN_EPROTO, QN_EFLOOD)
 * makes the connection write the goodbye the session queued and then close;
 * any other error closes it at once, goodbye unsent; QN_OK keeps it serving; a
 * closed connection's session is closed once and the owner hears it freed.
 * The hostile-client limits: the preface deadline (the fake greets on any input
 * but "SLOW..."), the idle timer restarted only by progress (any input but
 * "NOOP..."), the per-peer cap, and the output limits (a session's backlog is
 * set by the input "B=<bytes>").
 * Every wait is for the event itself (bytes, EOF, the close), bounded by
 * WAIT_MS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "config.h"
#include "queen/error.h"
#include "queen/store.h"
#include "transport/net.h"
#include "transport_test.h"

#define WAIT_MS 5000

/* ---------------------------------------------------------------- the fake protocol */

struct fake_session {
    qn_conn *conn;
    char out[512];
    size_t outlen, sent;
    bool bye;       /* a goodbye was queued: done once it is written */
    size_t backlog; /* what backlog() reports ("B=<bytes>") */
};

static struct {
    int opened, closed, freed;
    size_t received;
} F;

static void queue_out(struct fake_session *s, const char *text, size_t len)
{
    ck_assert_uint_le(s->outlen + len, sizeof s->out);
    memcpy(s->out + s->outlen, text, len);
    s->outlen += len;
}

static int f_open(void *proto, qn_conn *c, void **session)
{
    (void)proto;
    struct fake_session *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    s->conn = c;
    F.opened++;
    *session = s;
    return QN_OK;
}

/* "FATAL" -> goodbye + QN_EPROTO; "FLOOD" -> goodbye + QN_EFLOOD; "NOMEM" ->
 * goodbye + QN_ENOMEM (must not be written); anything else is echoed. */
static int f_recv(void *session, const uint8_t *data, size_t len)
{
    struct fake_session *s = session;
    F.received += len;
    int rc = QN_OK;
    if (len >= 5 && memcmp(data, "FATAL", 5) == 0)
        rc = QN_EPROTO;
    else if (len >= 5 && memcmp(data, "FLOOD", 5) == 0)
        rc = QN_EFLOOD;
    else if (len >= 5 && memcmp(data, "NOMEM", 5) == 0)
        rc = QN_ENOMEM;
    if (rc != QN_OK) {
        queue_out(s, "BYE", 3);
        s->bye = true;
        return rc;
    }
    if (!(len >= 4 && memcmp(data, "SLOW", 4) == 0))
        qn__net_conn_greeted(s->conn);
    if (!(len >= 4 && memcmp(data, "NOOP", 4) == 0))
        qn__net_conn_progress(s->conn);
    if (len > 2 && memcmp(data, "B=", 2) == 0) {
        char num[32] = "";
        memcpy(num, data + 2, len - 2 < sizeof num - 1 ? len - 2 : sizeof num - 1);
        s->backlog = (size_t)strtoull(num, NULL, 10);
    }
    if (len > 40)
        len = 40; /* the echo stays within out[] however long a test runs */
    queue_out(s, "OK:", 3);
    queue_out(s, (const char *)data, len);
    return QN_OK;
}

static ssize_t f_send(void *session, const uint8_t **data)
{
    struct fake_session *s = session;
    size_t n = s->outlen - s->sent;
    *data = (const uint8_t *)s->out + s->sent;
    s->sent = s->outlen;
    return (ssize_t)n;
}

static size_t f_backlog(void *session)
{
    return ((struct fake_session *)session)->backlog;
}

static bool f_done(void *session)
{
    struct fake_session *s = session;
    return s->bye && s->sent == s->outlen;
}

static size_t f_active(void *session)
{
    (void)session;
    return 0;
}

static int f_ping(void *session)
{
    (void)session;
    return QN_OK;
}

static void f_goaway(void *session, bool graceful)
{
    struct fake_session *s = session;
    (void)graceful;
    s->bye = true;
}

static void f_close(void *session)
{
    F.closed++;
    free(session);
}

static void f_freed(void *owner)
{
    (void)owner;
    F.freed++;
}

/* ---------------------------------------------------------------- fixture */

static struct event_base *base;
static struct qn_config cfg;
static qn_net *net;
static int port;

/* Variables a test sets before setup() (name, value; NULL-terminated). */
static const char *const *overrides;

static const char *cfg_get(const char *name, void *ud)
{
    (void)ud;
    for (size_t i = 0; overrides != NULL && overrides[i] != NULL; i += 2)
        if (strcmp(name, overrides[i]) == 0)
            return overrides[i + 1];
    if (strcmp(name, "QUEEN_PORT") == 0)
        return "0";
    if (strcmp(name, "QUEEN_BIND_ADDR") == 0)
        return "0.0.0.0"; /* 127.0.0.2 is another peer on loopback */
    return NULL;
}

static void setup(void)
{
    memset(&F, 0, sizeof F);
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    char err[256];
    ck_assert_int_eq(qn_config_load_from(&cfg, cfg_get, NULL, err, sizeof err), QN_OK);
    struct qn_net_handler h = {
        .proto = NULL,
        .open = f_open,
        .recv = f_recv,
        .send = f_send,
        .done = f_done,
        .active = f_active,
        .backlog = f_backlog,
        .ping = f_ping,
        .goaway = f_goaway,
        .close = f_close,
        .owner = NULL,
        .conn_freed = f_freed,
    };
    ck_assert_int_eq(qn__net_new(base, &cfg, &h, &net), QN_OK);
    ck_assert_int_eq(qn__net_listen(net), QN_OK);
    port = qn__net_port(net, false);
    ck_assert_int_gt(port, 0);
}

static void teardown(void)
{
    qn__net_free(net);
    net = NULL;
    qn_config_free(&cfg);
    event_base_free(base);
    overrides = NULL;
}

/* A loopback client whose reads run on the test's loop. */
struct client {
    int fd;
    char buf[512];
    size_t len;
    bool eof;
    struct event *ev;
};

static void client_read(evutil_socket_t fd, short what, void *ud)
{
    (void)what;
    struct client *c = ud;
    ssize_t n = recv(fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
    if (n > 0) {
        c->len += (size_t)n;
        c->buf[c->len] = '\0';
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        c->eof = true;
        event_del(c->ev);
    }
}

/* Connects from source (a loopback address) or from whatever the kernel picks. */
static void client_open_from(struct client *c, const char *source)
{
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(c->fd, 0);
    if (source != NULL) {
        struct sockaddr_in src = {.sin_family = AF_INET};
        ck_assert_int_eq(inet_pton(AF_INET, source, &src.sin_addr), 1);
        ck_assert_int_eq(bind(c->fd, (struct sockaddr *)&src, sizeof src), 0);
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(c->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    evutil_make_socket_nonblocking(c->fd);
    c->ev = event_new(base, c->fd, EV_READ | EV_PERSIST, client_read, c);
    ck_assert_ptr_nonnull(c->ev);
    event_add(c->ev, NULL);
}

static void client_open(struct client *c)
{
    client_open_from(c, NULL);
}

static void client_send(struct client *c, const char *text)
{
    size_t len = strlen(text);
    ck_assert_int_eq(send(c->fd, text, len, 0), (ssize_t)len);
}

static void client_close(struct client *c)
{
    if (c->ev)
        event_free(c->ev);
    if (c->fd >= 0)
        close(c->fd);
    c->ev = NULL;
    c->fd = -1;
}

/* Runs the loop until cond(ud) holds; false when WAIT_MS passed first. */
static bool run_until(bool (*cond)(void *ud), void *ud)
{
    int64_t end = qn_store_now_ms() + WAIT_MS;
    struct timeval tick = {0, 20000}; /* wakes the loop to re-check the deadline */
    while (!cond(ud)) {
        if (qn_store_now_ms() > end)
            return false;
        event_base_loopexit(base, &tick);
        event_base_dispatch(base);
    }
    return true;
}

static bool got_eof(void *ud)
{
    return ((struct client *)ud)->eof;
}

static bool got_both_replies(void *ud)
{
    return ((struct client *)ud)->len >= strlen("OK:oneOK:two");
}

static bool got_reply(void *ud)
{
    return ((struct client *)ud)->len > 0;
}

static bool freed_one(void *ud)
{
    (void)ud;
    return F.freed == 1;
}

/* ---------------------------------------------------------------- tests */

static void fatal_case(const char *what)
{
    setup();
    struct client c;
    client_open(&c);
    client_send(&c, what);
    ck_assert_msg(run_until(got_eof, &c), "the connection was not closed");
    /* the goodbye the session queued was written before the close */
    ck_assert_str_eq(c.buf, "BYE");
    ck_assert_msg(run_until(freed_one, NULL), "the connection was not freed");
    ck_assert_int_eq(F.opened, 1);
    ck_assert_int_eq(F.closed, 1);
    ck_assert_uint_eq(qn__net_conn_count(net), 0);
    client_close(&c);
    teardown();
}

START_TEST(fatal_proto_error_says_goodbye_then_closes)
{
    ck_assert(qn_err_is_fatal(QN_EPROTO));
    fatal_case("FATAL");
}
END_TEST

START_TEST(fatal_flood_says_goodbye_then_closes)
{
    ck_assert(qn_err_is_fatal(QN_EFLOOD));
    fatal_case("FLOOD");
}
END_TEST

START_TEST(other_error_closes_at_once)
{
    ck_assert(!qn_err_is_fatal(QN_ENOMEM));
    setup();
    struct client c;
    client_open(&c);
    client_send(&c, "NOMEM");
    ck_assert_msg(run_until(got_eof, &c), "the connection was not closed");
    ck_assert_uint_eq(c.len, 0); /* no goodbye: torn down at once */
    ck_assert_msg(run_until(freed_one, NULL), "the connection was not freed");
    ck_assert_int_eq(F.closed, 1);
    client_close(&c);
    teardown();
}
END_TEST

START_TEST(ok_keeps_serving)
{
    setup();
    struct client c;
    client_open(&c);
    client_send(&c, "one");
    ck_assert(run_until(got_reply, &c));
    /* still open: a second request gets a second answer */
    client_send(&c, "two");
    ck_assert(run_until(got_both_replies, &c));
    ck_assert_str_eq(c.buf, "OK:oneOK:two");
    ck_assert(!c.eof);
    ck_assert_int_eq(F.closed, 0);
    ck_assert_uint_eq(qn__net_conn_count(net), 1);
    /* the peer leaves: the session is closed once */
    client_close(&c);
    ck_assert_msg(run_until(freed_one, NULL), "the connection was not freed");
    ck_assert_int_eq(F.closed, 1);
    ck_assert_uint_eq(F.received, 6);
    teardown();
}
END_TEST

START_TEST(free_closes_open_sessions)
{
    setup();
    struct client c;
    client_open(&c);
    client_send(&c, "x");
    ck_assert(run_until(got_reply, &c));
    ck_assert_int_eq(F.opened, 1);
    qn__net_free(net); /* every session closed at once */
    net = NULL;
    ck_assert_int_eq(F.closed, 1);
    client_close(&c);
    qn_config_free(&cfg);
    event_base_free(base);
}
END_TEST

/* ---------------------------------------------------------------- hostile clients */

static bool freed_n(void *ud)
{
    return F.freed == *(int *)ud;
}

START_TEST(preface_deadline_closes_a_silent_connection)
{
    static const char *const env[] = {"QUEEN_PREFACE_TIMEOUT_MS", "300", NULL};
    overrides = env;
    setup();
    struct client slow, fine;
    client_open(&slow);
    client_open(&fine);
    int64_t t0 = qn_store_now_ms();
    client_send(&slow, "SLOW"); /* bytes, but never the opening */
    client_send(&fine, "hello");
    ck_assert(run_until(got_reply, &fine));
    ck_assert_msg(run_until(got_eof, &slow), "a connection without its preface was kept");
    ck_assert_int_ge(qn_store_now_ms() - t0, 300);
    /* the greeted one is past the deadline and still served */
    ck_assert(!fine.eof);
    fine.len = 0;
    client_send(&fine, "again");
    ck_assert(run_until(got_reply, &fine));
    client_close(&slow);
    client_close(&fine);
    teardown();
}
END_TEST

START_TEST(idle_is_restarted_by_progress_only)
{
    static const char *const env[] = {"QUEEN_IDLE_TIMEOUT_MS", "1000", NULL};
    overrides = env;
    setup();
    struct client c;
    client_open(&c);
    int64_t t0 = qn_store_now_ms(); /* before the last progress */
    client_send(&c, "hello");
    ck_assert(run_until(got_reply, &c));
    /* input that is not progress, every 100 ms: the connection is idle anyway */
    while (!c.eof && qn_store_now_ms() - t0 < WAIT_MS) {
        client_send(&c, "NOOP");
        int64_t until = qn_store_now_ms() + 100;
        while (!c.eof && qn_store_now_ms() < until) {
            struct timeval tick = {0, 20000};
            event_base_loopexit(base, &tick);
            event_base_dispatch(base);
        }
    }
    ck_assert_msg(c.eof, "bytes that are not progress kept an idle connection open");
    ck_assert_int_ge(qn_store_now_ms() - t0, 1000);
    client_close(&c);
    teardown();
}
END_TEST

START_TEST(per_peer_cap)
{
    static const char *const env[] = {"QUEEN_MAX_CONNECTIONS_PER_PEER", "2", NULL};
    overrides = env;
    setup();
    struct client a, b, third, other;
    client_open_from(&a, "127.0.0.1");
    client_open_from(&b, "127.0.0.1");
    client_send(&a, "a");
    client_send(&b, "b");
    ck_assert(run_until(got_reply, &a));
    ck_assert(run_until(got_reply, &b));
    client_open_from(&third, "127.0.0.1");
    ck_assert_msg(run_until(got_eof, &third), "a third connection from one address was served");
    ck_assert_uint_eq(third.len, 0);
    ck_assert_int_eq(F.opened, 2);
    client_open_from(&other, "127.0.0.2");
    client_send(&other, "o");
    ck_assert_msg(run_until(got_reply, &other), "another address was refused");
    /* a slot of the first address comes back once one of its connections is gone */
    client_close(&a);
    int one = 1;
    ck_assert(run_until(freed_n, &one));
    client_close(&third);
    client_open_from(&third, "127.0.0.1");
    client_send(&third, "t");
    ck_assert(run_until(got_reply, &third));
    client_close(&b);
    client_close(&third);
    client_close(&other);
    teardown();
}
END_TEST

static const char *const output_env[] = {"QUEEN_MAX_PAYLOAD_BYTES",
                                         "1",
                                         "QUEEN_MAX_SEND_BYTES",
                                         "262144",
                                         "QUEEN_MAX_CONN_SEND_BYTES",
                                         "262144",
                                         "QUEEN_CONN_SEND_HARD_BYTES",
                                         "1000000",
                                         "QUEEN_CONN_SEND_SOFT_BYTES",
                                         "100000",
                                         "QUEEN_CONN_SEND_SOFT_MS",
                                         "300",
                                         NULL};

START_TEST(output_hard_limit_closes_at_once)
{
    overrides = output_env;
    setup();
    struct client c;
    client_open(&c);
    client_send(&c, "B=900000"); /* under (with the reply it writes): served */
    ck_assert(run_until(got_reply, &c));
    client_send(&c, "B=1000000");
    ck_assert_msg(run_until(got_eof, &c), "a backlog at the hard limit was kept");
    int one = 1;
    ck_assert(run_until(freed_n, &one));
    client_close(&c);
    teardown();
}
END_TEST

START_TEST(output_soft_limit_closes_after_its_time)
{
    overrides = output_env;
    setup();
    struct client over, back;
    client_open(&over);
    client_open(&back);
    int64_t t0 = qn_store_now_ms();
    client_send(&over, "B=100000");
    client_send(&back, "B=150000");
    ck_assert(run_until(got_reply, &back));
    back.len = 0;
    client_send(&back, "B=99999"); /* falls below the soft limit in time */
    ck_assert(run_until(got_reply, &back));
    ck_assert_msg(run_until(got_eof, &over), "a backlog over the soft limit was kept");
    ck_assert_int_ge(qn_store_now_ms() - t0, 300);
    /* the one that fell below is still served */
    ck_assert(!back.eof);
    back.len = 0;
    client_send(&back, "still");
    ck_assert(run_until(got_reply, &back));
    client_close(&over);
    client_close(&back);
    teardown();
}
END_TEST

Suite *qn_test_net_suite(void)
{
    Suite *s = suite_create("net");
    TCase *tc = tcase_create("net");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, fatal_proto_error_says_goodbye_then_closes);
    tcase_add_test(tc, fatal_flood_says_goodbye_then_closes);
    tcase_add_test(tc, other_error_closes_at_once);
    tcase_add_test(tc, ok_keeps_serving);
    tcase_add_test(tc, free_closes_open_sessions);
    tcase_add_test(tc, preface_deadline_closes_a_silent_connection);
    tcase_add_test(tc, idle_is_restarted_by_progress_only);
    tcase_add_test(tc, per_peer_cap);
    tcase_add_test(tc, output_hard_limit_closes_at_once);
    tcase_add_test(tc, output_soft_limit_closes_after_its_time);
    suite_add_tcase(s, tc);
    return s;
}
