/*
 * cl_testsrv.c - a small gRPC server over h2c for the client's tests (see
 * client_test.h): nghttp2 server session, one connection at a time, in a thread
 * of its own so the blocking client API can run its own loop in the test.
 *
 * Not a model of anything: a test fixture. Bounded by what the tests send.
 * Invariants: the session and its streams are touched only by the server
 * thread; the recorded request headers only under the mutex.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "client_test.h"

#define FLOOD_MESSAGES 40
#define FLOOD_SIZE (32u * 1024u)
#define HEADERS_MAX 4096

enum route { R_NONE, R_ECHO, R_STATUS, R_SILENT, R_FLOOD, R_GARBAGE, R_EMPTY, R_NOTGRPC, R_DROP };

struct sstream {
    int32_t id;
    enum route route;
    uint8_t *out; /* response bytes not yet taken by the data provider */
    size_t out_len, out_cap;
    bool req_ended;
    bool responded; /* response HEADERS submitted */
    bool deferred;
    bool trailers_sent;
    struct sstream *next;
};

struct testsrv {
    int lfd;
    int fd;
    uint16_t port;
    nghttp2_session *h2;
    struct sstream *streams;
    bool drop;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;
    char headers[HEADERS_MAX]; /* "name: value\n" lines of the newest request */
    size_t headers_len;
};

static void out_add(struct sstream *st, const void *p, size_t n)
{
    if (st->out_len + n > st->out_cap) {
        size_t cap = st->out_cap ? st->out_cap : 1024;
        while (cap < st->out_len + n)
            cap *= 2;
        st->out = realloc(st->out, cap);
        st->out_cap = cap;
    }
    memcpy(st->out + st->out_len, p, n);
    st->out_len += n;
}

static void out_msg(struct sstream *st, const void *body, uint32_t len)
{
    uint8_t pre[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                      (uint8_t)len};
    out_add(st, pre, 5);
    out_add(st, body, len);
}

#define MKNV(n, v)                                                                                 \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE                 \
    }

static ssize_t s_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                      nghttp2_data_source *src, void *ud)
{
    (void)ud;
    struct sstream *st = src->ptr;
    size_t n = st->out_len < length ? st->out_len : length;
    if (n == 0 && !st->req_ended) {
        st->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > 0) {
        memcpy(buf, st->out, n);
        memmove(st->out, st->out + n, st->out_len - n);
        st->out_len -= n;
    }
    if (st->out_len == 0 && st->req_ended) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv tr[] = {MKNV("grpc-status", "0")};
        nghttp2_submit_trailer(s, id, tr, 1);
        st->trailers_sent = true;
    }
    return (ssize_t)n;
}

static void respond_headers(nghttp2_session *s, struct sstream *st)
{
    if (st->responded)
        return;
    st->responded = true;
    nghttp2_nv ok[] = {MKNV(":status", "200"), MKNV("content-type", "application/grpc")};
    nghttp2_data_provider dp = {.source = {.ptr = st}, .read_callback = s_read};
    nghttp2_submit_response(s, st->id, ok, 2, &dp);
}

static void wake(nghttp2_session *s, struct sstream *st)
{
    if (st->deferred) {
        st->deferred = false;
        nghttp2_session_resume_data(s, st->id);
    }
}

static int s_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    struct testsrv *sv = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct sstream *st = calloc(1, sizeof *st);
    st->id = f->hd.stream_id;
    st->next = sv->streams;
    sv->streams = st;
    nghttp2_session_set_stream_user_data(s, f->hd.stream_id, st);
    pthread_mutex_lock(&sv->mu);
    sv->headers_len = 0;
    sv->headers[0] = '\0';
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

static int s_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                    const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    struct testsrv *sv = ud;
    struct sstream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st == NULL)
        return 0;
    pthread_mutex_lock(&sv->mu);
    if (sv->headers_len + namelen + valuelen + 4 < HEADERS_MAX) {
        int n = snprintf(sv->headers + sv->headers_len, HEADERS_MAX - sv->headers_len,
                         "%.*s: %.*s\n", (int)namelen, name, (int)valuelen, value);
        sv->headers_len += (size_t)n;
    }
    pthread_mutex_unlock(&sv->mu);
    if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
        static const struct {
            const char *path;
            enum route r;
        } routes[] = {
            {"/t.T/Echo", R_ECHO},       {"/t.T/Status", R_STATUS},   {"/t.T/Silent", R_SILENT},
            {"/t.T/Flood", R_FLOOD},     {"/t.T/Garbage", R_GARBAGE}, {"/t.T/Empty", R_EMPTY},
            {"/t.T/NotGrpc", R_NOTGRPC}, {"/t.T/Drop", R_DROP},
        };
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
            if (strlen(routes[i].path) == valuelen && memcmp(routes[i].path, value, valuelen) == 0)
                st->route = routes[i].r;
    }
    return 0;
}

static int s_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                  void *ud)
{
    (void)flags;
    (void)ud;
    struct sstream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st == NULL || st->route != R_ECHO)
        return 0;
    out_add(st, data, len);
    respond_headers(s, st);
    wake(s, st);
    return 0;
}

static void request_ended(nghttp2_session *s, struct testsrv *sv, struct sstream *st)
{
    st->req_ended = true;
    switch (st->route) {
    case R_ECHO:
        respond_headers(s, st);
        wake(s, st);
        break;
    case R_STATUS: {
        nghttp2_nv nv[] = {MKNV(":status", "200"), MKNV("content-type", "application/grpc"),
                           MKNV("grpc-status", "5"),
                           MKNV("grpc-message", "no%20such%20queue%0A%E2%9C%93")};
        nghttp2_submit_response(s, st->id, nv, 4, NULL);
        break;
    }
    case R_FLOOD: {
        /* Each message is valid protobuf: one unknown bytes field 15 filling it. */
        uint8_t *body = calloc(1, FLOOD_SIZE);
        uint32_t inner = FLOOD_SIZE - 4;
        body[0] = 15 << 3 | 2;
        body[1] = (uint8_t)(inner | 0x80);
        body[2] = (uint8_t)((inner >> 7) | 0x80);
        body[3] = (uint8_t)(inner >> 14);
        for (int i = 0; i < FLOOD_MESSAGES; i++)
            out_msg(st, body, FLOOD_SIZE);
        free(body);
        respond_headers(s, st);
        break;
    }
    case R_GARBAGE:
        out_msg(st, "\xff\xff\xff", 3);
        respond_headers(s, st);
        break;
    case R_EMPTY:
        respond_headers(s, st);
        break;
    case R_NOTGRPC: {
        nghttp2_nv nv[] = {MKNV(":status", "404")};
        nghttp2_submit_response(s, st->id, nv, 1, NULL);
        break;
    }
    case R_DROP:
        sv->drop = true;
        break;
    case R_SILENT:
    case R_NONE:
        break;
    }
}

static int s_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    struct testsrv *sv = ud;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct sstream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
        if (st != NULL)
            request_ended(s, sv, st);
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

static void conn_close(struct testsrv *sv)
{
    if (sv->h2 != NULL)
        nghttp2_session_del(sv->h2);
    sv->h2 = NULL;
    while (sv->streams != NULL) {
        struct sstream *n = sv->streams->next;
        free(sv->streams->out);
        free(sv->streams);
        sv->streams = n;
    }
    if (sv->fd >= 0)
        close(sv->fd);
    sv->fd = -1;
    sv->drop = false;
}

static void conn_accept(struct testsrv *sv)
{
    int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK);
    if (fd < 0)
        return;
    conn_close(sv);
    sv->fd = fd;
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, s_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, s_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, s_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, s_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, s_close);
    nghttp2_session_server_new(&sv->h2, cb, sv);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100}};
    nghttp2_submit_settings(sv->h2, NGHTTP2_FLAG_NONE, iv, 1);
}

static void conn_io(struct testsrv *sv)
{
    uint8_t buf[16384];
    for (;;) {
        ssize_t n = read(sv->fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            conn_close(sv);
            return;
        }
        if (n < 0)
            break;
        if (nghttp2_session_mem_recv(sv->h2, buf, (size_t)n) < 0) {
            conn_close(sv);
            return;
        }
    }
    if (sv->drop) {
        conn_close(sv);
        return;
    }
    for (;;) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(sv->h2, &p);
        if (n <= 0)
            break;
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = send(sv->fd, p + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                struct pollfd pf = {.fd = sv->fd, .events = POLLOUT};
                if (poll(&pf, 1, 100) == 0 && atomic_load(&sv->stop))
                    return;
                continue;
            }
            if (w < 0) {
                conn_close(sv);
                return;
            }
            off += (size_t)w;
        }
    }
}

static void *srv_main(void *arg)
{
    struct testsrv *sv = arg;
    while (!atomic_load(&sv->stop)) {
        struct pollfd pf[2] = {{.fd = sv->lfd, .events = POLLIN}, {.fd = sv->fd, .events = POLLIN}};
        int n = poll(pf, sv->fd >= 0 ? 2 : 1, 10);
        if (n > 0 && (pf[0].revents & POLLIN))
            conn_accept(sv);
        if (sv->fd >= 0)
            conn_io(sv);
    }
    conn_close(sv);
    return NULL;
}

struct testsrv *testsrv_start(void)
{
    struct testsrv *sv = calloc(1, sizeof *sv);
    ck_assert_ptr_nonnull(sv);
    sv->fd = -1;
    pthread_mutex_init(&sv->mu, NULL);
    sv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(sv->lfd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(sv->lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(sv->lfd, 8), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(sv->lfd, (struct sockaddr *)&a, &len), 0);
    sv->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&sv->thread, NULL, srv_main, sv), 0);
    return sv;
}

uint16_t testsrv_port(const struct testsrv *s)
{
    return s->port;
}

void testsrv_stop(struct testsrv *s)
{
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->lfd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

bool testsrv_header(struct testsrv *s, const char *name, char *out, size_t cap)
{
    bool found = false;
    pthread_mutex_lock(&s->mu);
    size_t nl = strlen(name);
    for (const char *line = s->headers; *line && !found;) {
        const char *end = strchr(line, '\n');
        if (end == NULL)
            break;
        if ((size_t)(end - line) > nl + 2 && memcmp(line, name, nl) == 0 && line[nl] == ':') {
            snprintf(out, cap, "%.*s", (int)(end - line - nl - 2), line + nl + 2);
            found = true;
        }
        line = end + 1;
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}
