/*
 * e2e_selftest.c - checks of bench_e2e's building blocks, without a broker.
 *
 * Unit checks: gRPC message reassembly (every split point, limits, compressed
 * flag), the histogram, the payload generators, the arena. Loopback checks: an
 * in-process nghttp2 *server* on 127.0.0.1 answers the client connection of
 * the qn_client library (client/src/cl_conn.c) with normal responses, trailers-only errors, resets,
 * a lying length prefix, 1-byte DATA frames, and a dropped connection, all driven in one poll loop.
 * Not covered: TLS (needs a certificate; exercised by hand with
 * --tls against the broker).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "e2e_arena.h"
#include "queen/client.h"
#include "queen/client_wire.h"
#include "e2e_hist.h"
#include "e2e_payload.h"
#include "queen/error.h"
#include "queen/v1/queue.pb-c.h"

/* ---------------------------------------------------------------- gRPC reader */

struct got {
    unsigned n;
    size_t lens[8];
    uint8_t first[8];
};

static int collect(const uint8_t *msg, size_t len, void *ud)
{
    struct got *g = ud;
    if (g->n < 8) {
        g->lens[g->n] = len;
        g->first[g->n] = len > 0 ? msg[0] : 0;
    }
    g->n++;
    return 0;
}

START_TEST(grpc_reader_every_split)
{
    /* Three messages: 3 bytes, empty, 300 bytes. */
    uint8_t wire[5 + 3 + 5 + 5 + 300];
    size_t off = 0;
    qn_client_grpc_prefix(wire, 3);
    memcpy(wire + 5, "abc", 3);
    off = 8;
    qn_client_grpc_prefix(wire + off, 0);
    off += 5;
    qn_client_grpc_prefix(wire + off, 300);
    memset(wire + off + 5, 'z', 300);
    off += 305;
    ck_assert_uint_eq(off, sizeof wire);
    for (size_t cut1 = 0; cut1 <= sizeof wire; cut1++) {
        for (size_t cut2 = cut1; cut2 <= sizeof wire; cut2 += 7) {
            struct qn_client_reader rd;
            struct got g = {0};
            qn_client_reader_init(&rd, 1000);
            ck_assert_int_eq(qn_client_reader_feed(&rd, wire, cut1, collect, &g), QN_OK);
            ck_assert_int_eq(qn_client_reader_feed(&rd, wire + cut1, cut2 - cut1, collect, &g),
                             QN_OK);
            ck_assert_int_eq(
                qn_client_reader_feed(&rd, wire + cut2, sizeof wire - cut2, collect, &g), QN_OK);
            ck_assert_uint_eq(g.n, 3);
            ck_assert_uint_eq(g.lens[0], 3);
            ck_assert_uint_eq(g.first[0], 'a');
            ck_assert_uint_eq(g.lens[1], 0);
            ck_assert_uint_eq(g.lens[2], 300);
            ck_assert_uint_eq(g.first[2], 'z');
            ck_assert(qn_client_reader_idle(&rd));
            qn_client_reader_release(&rd);
        }
    }
}
END_TEST

START_TEST(grpc_reader_limits)
{
    struct qn_client_reader rd;
    struct got g = {0};
    uint8_t p[5];
    /* At the limit: accepted (and waits for the body). */
    qn_client_reader_init(&rd, 100);
    qn_client_grpc_prefix(p, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, p, 5, collect, &g), QN_OK);
    ck_assert(!qn_client_reader_idle(&rd));
    qn_client_reader_release(&rd);
    /* One past: rejected before anything is allocated. */
    qn_client_reader_init(&rd, 100);
    qn_client_grpc_prefix(p, 101);
    ck_assert_int_eq(qn_client_reader_feed(&rd, p, 5, collect, &g), QN_ELIMIT);
    qn_client_reader_release(&rd);
    /* A length of 4 GiB - 1 against a small limit. */
    const uint8_t huge[5] = {0, 0xff, 0xff, 0xff, 0xff};
    qn_client_reader_init(&rd, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, huge, 5, collect, &g), QN_ELIMIT);
    qn_client_reader_release(&rd);
    /* Compressed flag without negotiated encoding, and a flag that is not 0/1. */
    const uint8_t comp[5] = {1, 0, 0, 0, 1};
    const uint8_t junk[5] = {7, 0, 0, 0, 1};
    qn_client_reader_init(&rd, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, comp, 5, collect, &g), QN_EPROTO);
    qn_client_reader_release(&rd);
    qn_client_reader_init(&rd, 100);
    ck_assert_int_eq(qn_client_reader_feed(&rd, junk, 5, collect, &g), QN_EPROTO);
    qn_client_reader_release(&rd);
    ck_assert_uint_eq(g.n, 0);
}
END_TEST

START_TEST(grpc_status_parse)
{
    int c = -1;
    ck_assert(qn_client_parse_status((const uint8_t *)"0", 1, &c) && c == 0);
    ck_assert(qn_client_parse_status((const uint8_t *)"14", 2, &c) && c == 14);
    ck_assert(!qn_client_parse_status((const uint8_t *)"", 0, &c));
    ck_assert(!qn_client_parse_status((const uint8_t *)"1x", 2, &c));
    ck_assert(!qn_client_parse_status((const uint8_t *)"1234", 4, &c));
    ck_assert_str_eq(qn_client_code_name(14), "UNAVAILABLE");
    ck_assert_ptr_null(qn_client_code_name(17));
}
END_TEST

/* ---------------------------------------------------------------- hist, payload, arena */

START_TEST(hist_quantiles)
{
    struct e2e_hist h;
    e2e_hist_reset(&h);
    ck_assert_uint_eq(e2e_hist_quantile(&h, 0.5), 0);
    for (uint64_t v = 1; v <= 10000; v++)
        e2e_hist_add(&h, v, 1);
    uint64_t p50 = e2e_hist_quantile(&h, 0.5), p99 = e2e_hist_quantile(&h, 0.99);
    ck_assert_uint_ge(p50, 4850);
    ck_assert_uint_le(p50, 5150);
    ck_assert_uint_ge(p99, 9600);
    ck_assert_uint_le(p99, 10000);
    ck_assert_uint_eq(e2e_hist_quantile(&h, 1.0), 10000);
    e2e_hist_add(&h, UINT64_MAX, 1); /* the last bucket exists */
    ck_assert_uint_eq(h.count, 10001);
}
END_TEST

/* A minimal JSON syntax check: balanced braces/brackets outside strings, no
 * control characters, starts with { and ends with }. */
static bool json_ok(const uint8_t *p, size_t n)
{
    int depth = 0;
    bool str = false;
    if (n < 2 || p[0] != '{' || p[n - 1] != '}')
        return false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (c < 0x20)
            return false;
        if (str) {
            if (c == '\\')
                return false; /* the generator never escapes */
            if (c == '"')
                str = false;
            continue;
        }
        if (c == '"')
            str = true;
        else if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']')
            depth--;
        if (depth < 0)
            return false;
    }
    return depth == 0 && !str;
}

START_TEST(payload_json)
{
    static const size_t sizes[] = {24, 25, 33, 64, 100, 200, 256, 257, 1000, 4096};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        struct e2e_payload_gen g;
        e2e_payload_init(&g, E2E_PAYLOAD_JSON, sizes[s], 42);
        uint8_t *buf = malloc(sizes[s] + 16);
        for (int i = 0; i < 200; i++) {
            memset(buf, 0xAA, sizes[s] + 16);
            uint64_t ts = 1700000000000000ull + (uint64_t)i;
            e2e_payload_fill(&g, buf, ts);
            ck_assert_uint_eq(buf[sizes[s]], 0xAA); /* nothing past size */
            ck_assert_msg(json_ok(buf, sizes[s]), "size %zu: %.*s", sizes[s], (int)sizes[s], buf);
            uint64_t back = 0;
            ck_assert(e2e_payload_ts(E2E_PAYLOAD_JSON, buf, sizes[s], &back));
            ck_assert_uint_eq(back, ts);
        }
        free(buf);
    }
    /* Consecutive messages differ (fresh numbers and strings). */
    struct e2e_payload_gen g;
    e2e_payload_init(&g, E2E_PAYLOAD_JSON, 256, 1);
    uint8_t a[256], b[256];
    e2e_payload_fill(&g, a, 1700000000000000ull);
    e2e_payload_fill(&g, b, 1700000000000000ull);
    ck_assert(memcmp(a, b, 256) != 0);
    ck_assert(!e2e_payload_ts(E2E_PAYLOAD_JSON, (const uint8_t *)"{\"x\":1}", 7, &(uint64_t){0}));
}
END_TEST

START_TEST(payload_random)
{
    struct e2e_payload_gen g;
    e2e_payload_init(&g, E2E_PAYLOAD_RANDOM, 256, 7);
    uint8_t buf[300];
    memset(buf, 0xAA, sizeof buf);
    e2e_payload_fill(&g, buf, 1234567);
    ck_assert_uint_eq(buf[256], 0xAA);
    uint64_t ts = 0;
    ck_assert(e2e_payload_ts(E2E_PAYLOAD_RANDOM, buf, 256, &ts));
    ck_assert_uint_eq(ts, 1234567);
    /* Roughly uniform bytes: every value seen at least once over 64 KiB. */
    unsigned seen[256] = {0};
    for (int i = 0; i < 256; i++) {
        e2e_payload_fill(&g, buf, 0);
        for (int j = 8; j < 256; j++)
            seen[buf[j]]++;
    }
    for (int v = 0; v < 256; v++)
        ck_assert_uint_gt(seen[v], 0);
}
END_TEST

START_TEST(arena_limits)
{
    struct e2e_arena a;
    e2e_arena_init(&a, 1u << 20);
    void *p = e2e_arena_alloc(&a, 100);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % 16, 0);
    ck_assert_ptr_nonnull(e2e_arena_alloc(&a, 200000)); /* bigger than a chunk */
    ck_assert_ptr_null(e2e_arena_alloc(&a, 1u << 20));  /* past max */
    ck_assert_ptr_null(e2e_arena_alloc(&a, SIZE_MAX));  /* overflow */
    e2e_arena_reset(&a);
    ck_assert_uint_eq(a.used, 0);
    ck_assert_ptr_nonnull(e2e_arena_alloc(&a, 1000));
    e2e_arena_release(&a);
    e2e_arena_release(&a);
}
END_TEST

/* ---------------------------------------------------------------- loopback server */

enum srv_mode { S_ECHO, S_SPLIT, S_TRAILERS_ONLY, S_HUGE, S_RESET, S_DROP, S_STREAM };

struct srv_stream {
    int32_t id;
    enum srv_mode mode;
    uint8_t *req;
    size_t req_len;
    size_t sent;
    const uint8_t *body; /* what DATA carries */
    size_t body_len;
    uint8_t huge[16];
    struct srv_stream *next; /* on srv.streams until the connection closes */
};

struct srv {
    int lfd;
    int fd;
    nghttp2_session *h2;
    bool drop;                  /* close the connection after this I/O round */
    struct srv_stream *streams; /* every stream of the connection; freed with it */
    uint16_t port;
    unsigned accepted;
};

static int s_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    struct srv *sv = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct srv_stream *st = calloc(1, sizeof *st);
    st->id = f->hd.stream_id;
    st->next = sv->streams;
    sv->streams = st;
    nghttp2_session_set_stream_user_data(s, f->hd.stream_id, st);
    return 0;
}

static int s_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                    const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    struct srv_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st == NULL || namelen != 5 || memcmp(name, ":path", 5) != 0)
        return 0;
    static const struct {
        const char *path;
        enum srv_mode mode;
    } routes[] = {
        {"/t.T/Echo", S_ECHO},     {"/t.T/Split", S_SPLIT}, {"/t.T/TrailersOnly", S_TRAILERS_ONLY},
        {"/t.T/Huge", S_HUGE},     {"/t.T/Reset", S_RESET}, {"/t.T/Drop", S_DROP},
        {"/t.T/Stream", S_STREAM},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strlen(routes[i].path) == valuelen && memcmp(routes[i].path, value, valuelen) == 0)
            st->mode = routes[i].mode;
    return 0;
}

static int s_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                  void *ud)
{
    (void)flags;
    (void)ud;
    struct srv_stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st == NULL)
        return 0;
    st->req = realloc(st->req, st->req_len + len);
    memcpy(st->req + st->req_len, data, len);
    st->req_len += len;
    return 0;
}

static ssize_t s_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                      nghttp2_data_source *src, void *ud)
{
    (void)ud;
    struct srv_stream *st = src->ptr;
    size_t n = st->body_len - st->sent;
    if (st->mode == S_SPLIT && n > 1)
        n = 1;
    if (n > length)
        n = length;
    memcpy(buf, st->body + st->sent, n);
    st->sent += n;
    if (st->sent == st->body_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv tr[] = {
            {(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NONE},
        };
        nghttp2_submit_trailer(s, id, tr, 1);
    }
    return (ssize_t)n;
}

#define MKNV(n, v)                                                                                 \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE                 \
    }

static void s_respond(nghttp2_session *s, struct srv *sv, struct srv_stream *st)
{
    nghttp2_nv ok[] = {MKNV(":status", "200"), MKNV("content-type", "application/grpc")};
    nghttp2_data_provider dp = {.source = {.ptr = st}, .read_callback = s_read};
    switch (st->mode) {
    case S_ECHO:
    case S_SPLIT:
    case S_STREAM:
        st->body = st->req;
        st->body_len = st->req_len;
        nghttp2_submit_response(s, st->id, ok, 2, &dp);
        break;
    case S_HUGE:
        /* Announces 1 GiB, sends 3 bytes. */
        st->huge[0] = 0;
        st->huge[1] = 0x40;
        st->body = st->huge;
        st->body_len = 8;
        nghttp2_submit_response(s, st->id, ok, 2, &dp);
        break;
    case S_TRAILERS_ONLY: {
        nghttp2_nv nv[] = {MKNV(":status", "200"), MKNV("content-type", "application/grpc"),
                           MKNV("grpc-status", "5"), MKNV("grpc-message", "no such queue")};
        nghttp2_submit_response(s, st->id, nv, 4, NULL);
        break;
    }
    case S_RESET:
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        break;
    case S_DROP:
        sv->drop = true;
        break;
    }
}

static int s_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    struct srv *sv = ud;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct srv_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
        if (st != NULL)
            s_respond(s, sv, st);
    }
    return 0;
}

static int s_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    (void)code;
    (void)ud;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    return 0;
}

static void srv_close_conn(struct srv *sv)
{
    if (sv->h2 != NULL) {
        nghttp2_session_del(sv->h2);
        sv->h2 = NULL;
    }
    while (sv->streams != NULL) {
        struct srv_stream *n = sv->streams->next;
        free(sv->streams->req);
        free(sv->streams);
        sv->streams = n;
    }
    if (sv->fd >= 0)
        close(sv->fd);
    sv->fd = -1;
    sv->drop = false;
}

static void srv_start(struct srv *sv)
{
    memset(sv, 0, sizeof *sv);
    sv->fd = -1;
    sv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(sv->lfd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(sv->lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(sv->lfd, 8), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(sv->lfd, (struct sockaddr *)&a, &len), 0);
    sv->port = ntohs(a.sin_port);
}

static void srv_accept(struct srv *sv)
{
    int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK);
    if (fd < 0)
        return;
    if (sv->fd >= 0)
        srv_close_conn(sv);
    sv->fd = fd;
    sv->accepted++;
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, s_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, s_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, s_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, s_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, s_close);
    nghttp2_session_server_new(&sv->h2, cb, sv);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000}};
    nghttp2_submit_settings(sv->h2, NGHTTP2_FLAG_NONE, iv, 1);
}

static void srv_io(struct srv *sv)
{
    if (sv->fd < 0)
        return;
    uint8_t buf[16384];
    for (;;) {
        ssize_t n = read(sv->fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            srv_close_conn(sv);
            return;
        }
        if (n < 0)
            break;
        if (nghttp2_session_mem_recv(sv->h2, buf, (size_t)n) < 0) {
            srv_close_conn(sv);
            return;
        }
    }
    if (sv->drop) {
        srv_close_conn(sv);
        return;
    }
    for (;;) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(sv->h2, &p);
        if (n <= 0)
            break;
        /* Loopback with small volumes: a blocking-ish retry loop is fine here. */
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = write(sv->fd, p + off, (size_t)n - off);
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                struct pollfd pf = {.fd = sv->fd, .events = POLLOUT};
                poll(&pf, 1, 100);
                continue;
            }
            if (w < 0) {
                srv_close_conn(sv);
                return;
            }
            off += (size_t)w;
        }
    }
}

/* One loop round over the client connection and the server. */
static void spin(qn_client *c, struct srv *sv, int ms)
{
    qn_client_flush(c);
    struct pollfd pf[3] = {
        {.fd = qn_client_fd(c), .events = qn_client_events(c)},
        {.fd = sv->lfd, .events = POLLIN},
        {.fd = sv->fd, .events = POLLIN},
    };
    int n = poll(pf, 3, ms);
    if (n > 0 && (pf[1].revents & POLLIN))
        srv_accept(sv);
    srv_io(sv);
    qn_client_io(c, n > 0 ? pf[0].revents : 0, qn_client_now_ns());
}

struct outcome {
    bool done;
    struct qn_client_call_result r;
    char message[256];
    uint8_t msg[4096];
    size_t msg_len;
    unsigned streamed;
};

static void on_close(qn_client_call *call, const struct qn_client_call_result *r, void *ud)
{
    (void)call;
    struct outcome *o = ud;
    o->done = true;
    o->r = *r;
    snprintf(o->message, sizeof o->message, "%s", r->grpc_message);
    o->r.grpc_message = o->message;
    if (r->msg != NULL && r->msg_len <= sizeof o->msg) {
        memcpy(o->msg, r->msg, r->msg_len);
        o->msg_len = r->msg_len;
    }
    o->r.msg = NULL;
}

static void on_message(qn_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
    (void)call;
    (void)msg;
    (void)len;
    struct outcome *o = ud;
    o->streamed++;
}

static const struct qn_client_call_cbs unary_cbs = {.on_close = on_close};
static const struct qn_client_call_cbs streaming_cbs = {.on_message = on_message,
                                                        .on_close = on_close};

static qn_client *client(struct srv *sv)
{
    struct qn_client_opts o = {
        .authority = "127.0.0.1", .max_msg = 1u << 20, .window = 1u << 20, .reconnect = true};
    struct sockaddr_in *a = (struct sockaddr_in *)&o.addr;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons(sv->port);
    o.addrlen = sizeof *a;
    qn_client *c = NULL;
    ck_assert_int_eq(qn_client_new(&o, &c), QN_OK);
    for (int i = 0; i < 200 && !qn_client_ready(c); i++)
        spin(c, sv, 10);
    ck_assert(qn_client_ready(c));
    /* Until the server's SETTINGS arrive nghttp2 assumes 100 streams. */
    for (int i = 0; i < 200 && qn_client_room(c) <= 100; i++)
        spin(c, sv, 10);
    ck_assert_uint_eq(qn_client_room(c), 1000);
    return c;
}

static void wait_done(qn_client *c, struct srv *sv, struct outcome *o)
{
    for (int i = 0; i < 500 && !o->done; i++)
        spin(c, sv, 10);
    ck_assert_msg(o->done, "call did not end");
}

/* A PushRequest of n items, packed. */
static size_t push_msg(unsigned n, Queen__V1__PushRequest *req, Queen__V1__PushItem *items,
                       Queen__V1__PushItem **itemp, uint8_t *payload)
{
    for (unsigned i = 0; i < n; i++) {
        Queen__V1__PushItem init = QUEEN__V1__PUSH_ITEM__INIT;
        items[i] = init;
        items[i].queue = "q";
        items[i].partition = "p0";
        items[i].payload.data = payload;
        items[i].payload.len = 16;
        itemp[i] = &items[i];
    }
    Queen__V1__PushRequest init = QUEEN__V1__PUSH_REQUEST__INIT;
    *req = init;
    req->n_items = n;
    req->items = itemp;
    return protobuf_c_message_get_packed_size(&req->base);
}

static void start_unary(qn_client *c, const char *path, struct outcome *o, unsigned items)
{
    Queen__V1__PushRequest req;
    Queen__V1__PushItem it[64];
    Queen__V1__PushItem *itp[64];
    uint8_t payload[16] = "0123456789abcdef";
    push_msg(items, &req, it, itp, payload);
    qn_client_call *call = NULL;
    memset(o, 0, sizeof *o);
    ck_assert_int_eq(qn_client_call_start(c, path, NULL, &unary_cbs, o, &call), QN_OK);
    ck_assert_int_eq(qn_client_call_send(call, &req.base), QN_OK);
    qn_client_call_close_send(call);
}

START_TEST(loopback_echo)
{
    struct srv sv;
    srv_start(&sv);
    qn_client *c = client(&sv);
    struct outcome o;
    start_unary(c, "/t.T/Echo", &o, 3);
    wait_done(c, &sv, &o);
    ck_assert_int_eq(o.r.end, QN_CLIENT_END_STATUS);
    ck_assert_int_eq(o.r.grpc_status, 0);
    ck_assert_int_eq(o.r.http_status, 200);
    ck_assert_uint_eq(o.r.messages, 1);
    Queen__V1__PushRequest *back = queen__v1__push_request__unpack(NULL, o.msg_len, o.msg);
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(back->n_items, 3);
    ck_assert_str_eq(back->items[2]->partition, "p0");
    queen__v1__push_request__free_unpacked(back, NULL);
    qn_client_free(c);
    close(sv.lfd);
    srv_close_conn(&sv);
}
END_TEST

START_TEST(loopback_split_frames)
{
    struct srv sv;
    srv_start(&sv);
    qn_client *c = client(&sv);
    struct outcome o;
    start_unary(c, "/t.T/Split", &o, 40);
    wait_done(c, &sv, &o);
    ck_assert_int_eq(o.r.end, QN_CLIENT_END_STATUS);
    ck_assert_int_eq(o.r.grpc_status, 0);
    Queen__V1__PushRequest *back = queen__v1__push_request__unpack(NULL, o.msg_len, o.msg);
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(back->n_items, 40);
    queen__v1__push_request__free_unpacked(back, NULL);
    qn_client_free(c);
    close(sv.lfd);
    srv_close_conn(&sv);
}
END_TEST

START_TEST(loopback_errors)
{
    struct srv sv;
    srv_start(&sv);
    qn_client *c = client(&sv);
    struct outcome o;

    start_unary(c, "/t.T/TrailersOnly", &o, 1);
    wait_done(c, &sv, &o);
    ck_assert_int_eq(o.r.end, QN_CLIENT_END_STATUS);
    ck_assert_int_eq(o.r.grpc_status, 5);
    ck_assert_str_eq(o.message, "no such queue");
    ck_assert_uint_eq(o.r.messages, 0);

    start_unary(c, "/t.T/Huge", &o, 1);
    wait_done(c, &sv, &o);
    ck_assert_int_eq(o.r.end, QN_CLIENT_END_BAD_FRAME);
    ck_assert_int_eq(o.r.grpc_status, -1);

    start_unary(c, "/t.T/Reset", &o, 1);
    wait_done(c, &sv, &o);
    ck_assert_int_eq(o.r.end, QN_CLIENT_END_NO_STATUS);
    ck_assert_uint_eq(o.r.h2_error, NGHTTP2_INTERNAL_ERROR);

    /* The connection survived all of that. */
    ck_assert(qn_client_ready(c));
    ck_assert_uint_eq(qn_client_failures(c), 0);
    start_unary(c, "/t.T/Echo", &o, 1);
    wait_done(c, &sv, &o);
    ck_assert_int_eq(o.r.grpc_status, 0);
    qn_client_free(c);
    close(sv.lfd);
    srv_close_conn(&sv);
}
END_TEST

START_TEST(loopback_many_concurrent)
{
    struct srv sv;
    srv_start(&sv);
    qn_client *c = client(&sv);
    enum { N = 300 };
    static struct outcome o[N];
    for (int i = 0; i < N; i++)
        start_unary(c, "/t.T/Echo", &o[i], 1 + (unsigned)(i % 50));
    ck_assert_uint_eq(qn_client_active(c), N);
    for (int round = 0; round < 1000; round++) {
        bool all = true;
        for (int i = 0; i < N; i++)
            all = all && o[i].done;
        if (all)
            break;
        spin(c, &sv, 10);
    }
    for (int i = 0; i < N; i++) {
        ck_assert(o[i].done);
        ck_assert_int_eq(o[i].r.end, QN_CLIENT_END_STATUS);
        ck_assert_int_eq(o[i].r.grpc_status, 0);
    }
    ck_assert_uint_eq(qn_client_active(c), 0);
    qn_client_free(c);
    close(sv.lfd);
    srv_close_conn(&sv);
}
END_TEST

START_TEST(loopback_streaming_messages)
{
    struct srv sv;
    srv_start(&sv);
    qn_client *c = client(&sv);
    struct outcome o;
    memset(&o, 0, sizeof o);
    qn_client_call *call = NULL;
    ck_assert_int_eq(qn_client_call_start(c, "/t.T/Stream", NULL, &streaming_cbs, &o, &call),
                     QN_OK);
    /* Messages queued over several loop rounds (the data provider defers). */
    for (int i = 0; i < 5; i++) {
        Queen__V1__PushRequest req;
        Queen__V1__PushItem it[4];
        Queen__V1__PushItem *itp[4];
        uint8_t payload[16] = "0123456789abcdef";
        push_msg(2, &req, it, itp, payload);
        ck_assert_int_eq(qn_client_call_send(call, &req.base), QN_OK);
        spin(c, &sv, 5);
    }
    qn_client_call_close_send(call);
    wait_done(c, &sv, &o);
    ck_assert_int_eq(o.r.end, QN_CLIENT_END_STATUS);
    ck_assert_uint_eq(o.streamed, 5);
    qn_client_free(c);
    close(sv.lfd);
    srv_close_conn(&sv);
}
END_TEST

START_TEST(loopback_drop_and_reconnect)
{
    struct srv sv;
    srv_start(&sv);
    qn_client *c = client(&sv);
    struct outcome a, b;
    start_unary(c, "/t.T/Echo", &a, 1);
    wait_done(c, &sv, &a);
    start_unary(c, "/t.T/Drop", &b, 1);
    wait_done(c, &sv, &b);
    ck_assert_int_eq(b.r.end, QN_CLIENT_END_CONN_LOST);
    ck_assert_uint_eq(qn_client_failures(c), 1);
    ck_assert(!qn_client_ready(c));
    /* Reconnects after its backoff (100 ms). */
    for (int i = 0; i < 300 && !qn_client_ready(c); i++)
        spin(c, &sv, 10);
    ck_assert(qn_client_ready(c));
    ck_assert_uint_eq(sv.accepted, 2);
    start_unary(c, "/t.T/Echo", &a, 2);
    wait_done(c, &sv, &a);
    ck_assert_int_eq(a.r.end, QN_CLIENT_END_STATUS);
    ck_assert_int_eq(a.r.grpc_status, 0);
    /* Starting a call on a closed-down connection fails cleanly. */
    close(sv.lfd);
    srv_close_conn(&sv);
    qn_client_free(c);
}
END_TEST

START_TEST(connect_refused_is_counted)
{
    struct srv sv;
    srv_start(&sv);
    uint16_t port = sv.port;
    close(sv.lfd); /* nobody listens there now */
    struct qn_client_opts o = {
        .authority = "127.0.0.1", .max_msg = 1024, .window = 65535, .reconnect = true};
    struct sockaddr_in *a = (struct sockaddr_in *)&o.addr;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons(port);
    o.addrlen = sizeof *a;
    qn_client *c = NULL;
    ck_assert_int_eq(qn_client_new(&o, &c), QN_OK);
    for (int i = 0; i < 50; i++) {
        struct pollfd pf = {.fd = qn_client_fd(c), .events = qn_client_events(c)};
        int n = poll(&pf, 1, 10);
        qn_client_io(c, n > 0 ? pf.revents : 0, qn_client_now_ns());
    }
    ck_assert(!qn_client_ready(c));
    ck_assert_uint_ge(qn_client_failures(c), 1);
    qn_client_call *call = NULL;
    struct outcome out;
    ck_assert_int_eq(qn_client_call_start(c, "/t.T/Echo", NULL, &unary_cbs, &out, &call),
                     QN_ECLOSED);
    qn_client_free(c);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bench_e2e");
    TCase *u = tcase_create("units");
    tcase_add_test(u, grpc_reader_every_split);
    tcase_add_test(u, grpc_reader_limits);
    tcase_add_test(u, grpc_status_parse);
    tcase_add_test(u, hist_quantiles);
    tcase_add_test(u, payload_json);
    tcase_add_test(u, payload_random);
    tcase_add_test(u, arena_limits);
    suite_add_tcase(s, u);
    TCase *l = tcase_create("loopback");
    tcase_set_timeout(l, 30);
    tcase_add_test(l, loopback_echo);
    tcase_add_test(l, loopback_split_frames);
    tcase_add_test(l, loopback_errors);
    tcase_add_test(l, loopback_many_concurrent);
    tcase_add_test(l, loopback_streaming_messages);
    tcase_add_test(l, loopback_drop_and_reconnect);
    tcase_add_test(l, connect_refused_is_counted);
    suite_add_tcase(s, l);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
