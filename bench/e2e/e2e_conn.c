/*
 * e2e_conn.c - HTTP/2 client connection for the load generator (see e2e_conn.h).
 *
 * Does: non-blocking TCP connect, optional TLS (ALPN h2), an nghttp2 client
 * session fed with nghttp2_session_mem_recv/mem_send, gRPC request framing,
 * response reassembly, grpc-status from trailers or trailers-only headers,
 * reconnect with backoff.
 * Does not: resolve names (the caller passes an address), retry calls, or
 * negotiate compression.
 *
 * Connection lifecycle (asserted in conn_set_state):
 *   DOWN --(backoff elapsed)--> CONNECTING --(socket connected)--> HANDSHAKE
 *   (TLS only) --> READY;  any state --(error)--> DOWN.
 * Call lifecycle: OPEN (on the live list, stream may be open) --(stream closed,
 * connection lost or a framing error)--> DONE (on the done list) --(on_close
 * returned)--> freed.
 *
 * Invariants:
 *   1. on_close of a call runs exactly once, outside every nghttp2 callback.
 *   2. the session exists exactly in state READY (and HANDSHAKE has none).
 *   3. every length taken from the network (gRPC prefix, header values) is
 *      checked against a limit before it is used; the write buffer has a hard
 *      maximum.
 */
#include "e2e_conn.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>

#include "e2e_grpc.h"
#include "queen/error.h"

#define RBUF_SIZE (64u * 1024u)
#define WBUF_FILL (128u * 1024u)      /* stop serialising above this */
#define WBUF_MAX (8u * 1024u * 1024u) /* hard maximum of the write buffer */
#define CALL_OUT_MAX (256u * 1024u * 1024u)
#define GRPC_MESSAGE_MAX 256u
#define CONNECT_TIMEOUT_NS (5ull * 1000000000ull)
#define BACKOFF_MIN_NS (100ull * 1000000ull)
#define BACKOFF_MAX_NS (2000ull * 1000000ull)

enum conn_state {
    CONN_DOWN,
    CONN_CONNECTING,
    CONN_HANDSHAKE,
    CONN_READY,
};

enum call_state {
    CALL_OPEN,
    CALL_DONE,
};

struct e2e_call {
    e2e_conn *conn;
    enum call_state state;
    struct e2e_call *prev, *next; /* on conn->live (OPEN) or conn->done (DONE) */
    int32_t stream_id;
    const struct e2e_call_cbs *cbs;
    void *ud;
    uint64_t started_ns;
    /* request body: bytes [out_off, out_len) wait for the data provider */
    uint8_t *out;
    size_t out_len;
    size_t out_off;
    size_t out_cap;
    bool send_closed; /* END_STREAM goes after the queued bytes */
    bool deferred;    /* the data provider returned NGHTTP2_ERR_DEFERRED */
    /* response */
    struct e2e_grpc_reader rd;
    uint8_t *msg; /* last message when cbs->on_message == NULL */
    size_t msg_len;
    bool bad_frame;
    bool have_status;
    int grpc_status;
    int http_status;
    uint32_t h2_error;
    char grpc_message[GRPC_MESSAGE_MAX];
};

struct e2e_conn {
    struct e2e_conn_opts o;
    enum conn_state state;
    int fd;
    SSL *ssl;
    nghttp2_session *h2;
    bool tearing_down; /* session being deleted: ignore its callbacks */
    uint64_t deadline_ns;   /* CONNECTING: connect timeout; DOWN: reconnect time */
    uint64_t backoff_ns;
    uint64_t failures;
    char last_error[160];
    unsigned active; /* calls on the live list */
    e2e_call *live;
    e2e_call *done_head, *done_tail;
    bool in_done;    /* process_done is running (no recursion) */
    /* bytes serialised by nghttp2 not yet written: [woff, wlen) of wbuf */
    uint8_t *wbuf;
    size_t wlen, woff, wcap;
    bool want_pollout;
};

uint64_t e2e_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void conn_set_state(e2e_conn *c, enum conn_state to)
{
    switch (to) {
    case CONN_DOWN:
        break;
    case CONN_CONNECTING:
        assert(c->state == CONN_DOWN);
        break;
    case CONN_HANDSHAKE:
        assert(c->state == CONN_CONNECTING && c->o.ssl_ctx != NULL);
        break;
    case CONN_READY:
        assert(c->state == CONN_CONNECTING || c->state == CONN_HANDSHAKE);
        break;
    }
    c->state = to;
}

/* ---------------------------------------------------------------- calls */

static void list_remove(e2e_call **head, e2e_call *k)
{
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        *head = k->next;
    if (k->next != NULL)
        k->next->prev = k->prev;
    k->prev = k->next = NULL;
}

/* OPEN -> DONE: off the live list, onto the tail of the done list. */
static void call_finish(e2e_call *k)
{
    e2e_conn *c = k->conn;
    if (k->state != CALL_OPEN)
        return;
    list_remove(&c->live, k);
    assert(c->active > 0);
    c->active--;
    k->state = CALL_DONE;
    k->prev = c->done_tail;
    k->next = NULL;
    if (c->done_tail != NULL)
        c->done_tail->next = k;
    else
        c->done_head = k;
    c->done_tail = k;
}

static void call_free(e2e_call *k)
{
    e2e_grpc_reader_release(&k->rd);
    free(k->out);
    free(k->msg);
    free(k);
}

static void report(e2e_call *k, enum e2e_call_end end)
{
    struct e2e_call_result r = {
        .end = end,
        .grpc_status = end == E2E_END_STATUS ? k->grpc_status : -1,
        .grpc_message = k->grpc_message,
        .http_status = k->http_status,
        .h2_error = k->h2_error,
        .msg = k->msg,
        .msg_len = k->msg_len,
        .messages = k->rd.messages,
    };
    k->cbs->on_close(k, &r, k->ud);
}

static enum e2e_call_end end_of(const e2e_call *k, bool conn_lost)
{
    if (k->bad_frame)
        return E2E_END_BAD_FRAME;
    if (k->have_status && e2e_grpc_reader_idle(&k->rd))
        return E2E_END_STATUS;
    if (conn_lost)
        return E2E_END_CONN_LOST;
    return E2E_END_NO_STATUS;
}

/* Runs on_close for every finished call, oldest first. Calls finished by an
 * on_close (none today) are handled in the same pass. */
static void process_done(e2e_conn *c, bool conn_lost)
{
    if (c->in_done)
        return;
    c->in_done = true;
    while (c->done_head != NULL) {
        e2e_call *k = c->done_head;
        c->done_head = k->next;
        if (c->done_head == NULL)
            c->done_tail = NULL;
        else
            c->done_head->prev = NULL;
        k->next = k->prev = NULL;
        report(k, end_of(k, conn_lost));
        call_free(k);
    }
    c->in_done = false;
}

/* ---------------------------------------------------------------- errors */

static void conn_down(e2e_conn *c, uint64_t now_ns, const char *fmt, const char *detail)
{
    c->failures++;
    snprintf(c->last_error, sizeof c->last_error, fmt, detail != NULL ? detail : "");
    if (c->h2 != NULL) {
        c->tearing_down = true;
        nghttp2_session_del(c->h2);
        c->h2 = NULL;
        c->tearing_down = false;
    }
    if (c->ssl != NULL) {
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    c->wlen = c->woff = 0;
    c->want_pollout = false;
    while (c->live != NULL)
        call_finish(c->live);
    conn_set_state(c, CONN_DOWN);
    c->deadline_ns = now_ns + c->backoff_ns;
    c->backoff_ns = c->backoff_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : c->backoff_ns * 2;
    process_done(c, true);
}

static const char *ssl_detail(void)
{
    unsigned long e = ERR_get_error();
    static char buf[120];
    if (e == 0)
        return "no detail";
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return buf;
}

/* ---------------------------------------------------------------- nghttp2 callbacks */

static e2e_call *stream_call(nghttp2_session *s, int32_t stream_id)
{
    return nghttp2_session_get_stream_user_data(s, stream_id);
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
    (void)flags;
    e2e_conn *c = ud;
    if (c->tearing_down || f->hd.type != NGHTTP2_HEADERS)
        return 0;
    e2e_call *k = stream_call(s, f->hd.stream_id);
    if (k == NULL || k->state != CALL_OPEN)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        int st = 0;
        if (valuelen == 3 && e2e_grpc_parse_status(value, valuelen, &st))
            k->http_status = st;
    } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        int st = 0;
        if (e2e_grpc_parse_status(value, valuelen, &st)) {
            k->grpc_status = st;
            k->have_status = true;
        }
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        size_t n = valuelen < GRPC_MESSAGE_MAX - 1 ? valuelen : GRPC_MESSAGE_MAX - 1;
        memcpy(k->grpc_message, value, n);
        k->grpc_message[n] = '\0';
    }
    return 0;
}

static int on_msg(const uint8_t *msg, size_t len, void *ud)
{
    e2e_call *k = ud;
    if (k->cbs->on_message != NULL) {
        k->cbs->on_message(k, msg, len, k->ud);
        return 0;
    }
    uint8_t *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return QN_ENOMEM;
    memcpy(copy, msg, len);
    free(k->msg);
    k->msg = copy;
    k->msg_len = len;
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *ud)
{
    (void)flags;
    e2e_conn *c = ud;
    if (c->tearing_down)
        return 0;
    e2e_call *k = stream_call(s, stream_id);
    if (k == NULL || k->state != CALL_OPEN || k->bad_frame)
        return 0;
    int rc = e2e_grpc_feed(&k->rd, data, len, on_msg, k);
    if (rc < 0) {
        k->bad_frame = true;
        snprintf(c->last_error, sizeof c->last_error, "stream %d: bad response framing: %s",
                 (int)stream_id, qn_strerror(rc));
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code,
                           void *ud)
{
    e2e_conn *c = ud;
    if (c->tearing_down)
        return 0;
    e2e_call *k = stream_call(s, stream_id);
    if (k == NULL)
        return 0;
    k->h2_error = error_code;
    call_finish(k);
    return 0;
}

static ssize_t on_read_body(nghttp2_session *s, int32_t stream_id, uint8_t *buf,
                            size_t length, uint32_t *data_flags, nghttp2_data_source *src,
                            void *ud)
{
    (void)s;
    (void)stream_id;
    (void)ud;
    e2e_call *k = src->ptr;
    size_t avail = k->out_len - k->out_off;
    if (avail == 0) {
        if (k->send_closed) {
            *data_flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        k->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = avail < length ? avail : length;
    memcpy(buf, k->out + k->out_off, n);
    k->out_off += n;
    if (k->out_off == k->out_len) {
        k->out_off = k->out_len = 0;
        if (k->send_closed)
            *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return (ssize_t)n;
}

/* ---------------------------------------------------------------- session */

static int session_start(e2e_conn *c)
{
    nghttp2_session_callbacks *cb = NULL;
    int rc = nghttp2_session_callbacks_new(&cb);
    if (rc != 0)
        return QN_ENOMEM;
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    rc = nghttp2_session_client_new(&c->h2, cb, c);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) {
        c->h2 = NULL;
        return QN_ENOMEM;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, c->o.window},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 1u << 16},
    };
    rc = nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    if (rc == 0) {
        int32_t conn_window = c->o.window > (1u << 28) ? (int32_t)(1u << 30)
                                                       : (int32_t)(c->o.window * 4u);
        rc = nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, conn_window);
    }
    if (rc != 0) {
        snprintf(c->last_error, sizeof c->last_error, "http/2 settings: %s",
                 nghttp2_strerror(rc));
        return QN_EINTERNAL;
    }
    return QN_OK;
}

static void become_ready(e2e_conn *c, uint64_t now_ns)
{
    if (session_start(c) != QN_OK) {
        conn_down(c, now_ns, "cannot start http/2 session%s", "");
        return;
    }
    conn_set_state(c, CONN_READY);
    c->backoff_ns = BACKOFF_MIN_NS;
}

/* ---------------------------------------------------------------- socket I/O */

enum { IO_AGAIN = -1, IO_ERROR = -2 };

static ssize_t io_read(e2e_conn *c, uint8_t *buf, size_t n)
{
    if (c->ssl != NULL) {
        int r = SSL_read(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
        if (r > 0)
            return r;
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return IO_AGAIN;
        if (e == SSL_ERROR_ZERO_RETURN)
            return 0;
        return IO_ERROR;
    }
    for (;;) {
        ssize_t r = read(c->fd, buf, n);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return IO_AGAIN;
        return IO_ERROR;
    }
}

static ssize_t io_write(e2e_conn *c, const uint8_t *buf, size_t n)
{
    if (c->ssl != NULL) {
        int w = SSL_write(c->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
        if (w > 0)
            return w;
        int e = SSL_get_error(c->ssl, w);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return IO_AGAIN;
        return IO_ERROR;
    }
    for (;;) {
        ssize_t w = send(c->fd, buf, n, MSG_NOSIGNAL);
        if (w >= 0)
            return w;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return IO_AGAIN;
        return IO_ERROR;
    }
}

static void start_connect(e2e_conn *c, uint64_t now_ns)
{
    conn_set_state(c, CONN_CONNECTING);
    c->deadline_ns = now_ns + CONNECT_TIMEOUT_NS;
    c->fd = socket(c->o.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        conn_down(c, now_ns, "socket: %s", strerror(errno));
        return;
    }
    int one = 1;
    (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (const struct sockaddr *)&c->o.addr, c->o.addrlen) != 0 &&
        errno != EINPROGRESS) {
        conn_down(c, now_ns, "connect: %s", strerror(errno));
        return;
    }
}

static void tls_handshake(e2e_conn *c, uint64_t now_ns)
{
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        const unsigned char *alpn = NULL;
        unsigned alpnlen = 0;
        SSL_get0_alpn_selected(c->ssl, &alpn, &alpnlen);
        if (alpnlen != 2 || memcmp(alpn, "h2", 2) != 0) {
            conn_down(c, now_ns, "tls: the server did not select h2 by ALPN%s", "");
            return;
        }
        become_ready(c, now_ns);
        return;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
        c->want_pollout = false;
        return;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        c->want_pollout = true;
        return;
    }
    conn_down(c, now_ns, "tls handshake: %s", ssl_detail());
}

static void connected(e2e_conn *c, uint64_t now_ns)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        conn_down(c, now_ns, "connect: %s", strerror(err));
        return;
    }
    if (c->o.ssl_ctx == NULL) {
        become_ready(c, now_ns);
        return;
    }
    c->ssl = SSL_new(c->o.ssl_ctx);
    if (c->ssl == NULL || SSL_set_fd(c->ssl, c->fd) != 1) {
        conn_down(c, now_ns, "tls: %s", ssl_detail());
        return;
    }
    SSL_set_connect_state(c->ssl);
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (c->o.sni != NULL)
        (void)SSL_set_tlsext_host_name(c->ssl, c->o.sni);
    conn_set_state(c, CONN_HANDSHAKE);
    tls_handshake(c, now_ns);
}

/* Appends to the write buffer; false past WBUF_MAX or on ENOMEM. */
static bool wbuf_append(e2e_conn *c, const uint8_t *p, size_t n)
{
    if (c->woff > 0 && c->woff == c->wlen)
        c->woff = c->wlen = 0;
    if (n > c->wcap - c->wlen) {
        if (c->woff > 0) {
            memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
            c->wlen -= c->woff;
            c->woff = 0;
        }
        if (n > c->wcap - c->wlen) {
            size_t need = c->wlen + n;
            if (need > WBUF_MAX)
                return false;
            size_t cap = c->wcap ? c->wcap : WBUF_FILL * 2;
            while (cap < need)
                cap *= 2;
            if (cap > WBUF_MAX)
                cap = WBUF_MAX;
            uint8_t *nb = realloc(c->wbuf, cap);
            if (nb == NULL)
                return false;
            c->wbuf = nb;
            c->wcap = cap;
        }
    }
    memcpy(c->wbuf + c->wlen, p, n);
    c->wlen += n;
    return true;
}

void e2e_conn_flush(e2e_conn *c)
{
    if (c->state != CONN_READY)
        return;
    for (;;) {
        while (c->wlen - c->woff < WBUF_FILL) {
            const uint8_t *p = NULL;
            ssize_t n = nghttp2_session_mem_send(c->h2, &p);
            if (n < 0) {
                conn_down(c, e2e_now_ns(), "http/2 send: %s", nghttp2_strerror((int)n));
                return;
            }
            if (n == 0)
                break;
            if (!wbuf_append(c, p, (size_t)n)) {
                conn_down(c, e2e_now_ns(), "write buffer over its limit%s", "");
                return;
            }
        }
        /* Streams closed while serialising (e.g. a reset we sent). */
        process_done(c, false);
        if (c->state != CONN_READY)
            return;
        if (c->wlen == c->woff) {
            c->want_pollout = false;
            break;
        }
        ssize_t w = io_write(c, c->wbuf + c->woff, c->wlen - c->woff);
        if (w == IO_AGAIN) {
            c->want_pollout = true;
            return;
        }
        if (w < 0) {
            conn_down(c, e2e_now_ns(), "write: %s",
                      c->ssl != NULL ? ssl_detail() : strerror(errno));
            return;
        }
        c->woff += (size_t)w;
    }
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) &&
        c->wlen == c->woff)
        conn_down(c, e2e_now_ns(), "the server closed the session (GOAWAY)%s", "");
}

static void do_read(e2e_conn *c, uint64_t now_ns)
{
    uint8_t buf[RBUF_SIZE];
    for (int i = 0; i < 16 && c->state == CONN_READY; i++) {
        ssize_t r = io_read(c, buf, sizeof buf);
        if (r == IO_AGAIN)
            break;
        if (r == 0) {
            conn_down(c, now_ns, "the server closed the connection%s", "");
            return;
        }
        if (r < 0) {
            conn_down(c, now_ns, "read: %s", c->ssl != NULL ? ssl_detail() : strerror(errno));
            return;
        }
        ssize_t used = nghttp2_session_mem_recv(c->h2, buf, (size_t)r);
        if (used < 0) {
            conn_down(c, now_ns, "http/2 protocol error: %s", nghttp2_strerror((int)used));
            return;
        }
        process_done(c, false);
        if ((size_t)r < sizeof buf)
            break;
    }
}

void e2e_conn_io(e2e_conn *c, short revents, uint64_t now_ns)
{
    switch (c->state) {
    case CONN_DOWN:
        if (now_ns >= c->deadline_ns)
            start_connect(c, now_ns);
        return;
    case CONN_CONNECTING:
        if (revents & (POLLOUT | POLLERR | POLLHUP))
            connected(c, now_ns);
        else if (now_ns >= c->deadline_ns)
            conn_down(c, now_ns, "connect: timed out%s", "");
        break;
    case CONN_HANDSHAKE:
        if (revents != 0)
            tls_handshake(c, now_ns);
        else if (now_ns >= c->deadline_ns)
            conn_down(c, now_ns, "tls handshake: timed out%s", "");
        break;
    case CONN_READY:
        if (revents & (POLLIN | POLLERR | POLLHUP))
            do_read(c, now_ns);
        break;
    }
    e2e_conn_flush(c);
}

uint64_t e2e_conn_deadline(const e2e_conn *c)
{
    return c->state == CONN_READY ? 0 : c->deadline_ns;
}

int e2e_conn_fd(const e2e_conn *c)
{
    return c->fd;
}

short e2e_conn_events(const e2e_conn *c)
{
    switch (c->state) {
    case CONN_DOWN:
        return 0;
    case CONN_CONNECTING:
        return POLLOUT;
    case CONN_HANDSHAKE:
        return c->want_pollout ? POLLOUT : POLLIN;
    case CONN_READY:
        return (short)(POLLIN | (c->want_pollout ? POLLOUT : 0));
    }
    return 0;
}

bool e2e_conn_ready(const e2e_conn *c)
{
    return c->state == CONN_READY;
}

unsigned e2e_conn_active(const e2e_conn *c)
{
    return c->active;
}

unsigned e2e_conn_room(const e2e_conn *c)
{
    if (c->state != CONN_READY)
        return 0;
    uint32_t max = nghttp2_session_get_remote_settings(c->h2,
                                                       NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    return max > c->active ? max - c->active : 0;
}

uint64_t e2e_conn_failures(const e2e_conn *c)
{
    return c->failures;
}

const char *e2e_conn_last_error(const e2e_conn *c)
{
    return c->last_error;
}

int e2e_conn_new(const struct e2e_conn_opts *opts, e2e_conn **out)
{
    e2e_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return QN_ENOMEM;
    c->o = *opts;
    c->fd = -1;
    c->state = CONN_DOWN;
    c->backoff_ns = BACKOFF_MIN_NS;
    start_connect(c, e2e_now_ns());
    *out = c;
    return QN_OK;
}

void e2e_conn_free(e2e_conn *c)
{
    if (c == NULL)
        return;
    if (c->state != CONN_DOWN || c->live != NULL)
        conn_down(c, e2e_now_ns(), "closed by the bench%s", "");
    process_done(c, true);
    free(c->wbuf);
    free(c);
}

/* ---------------------------------------------------------------- call API */

int e2e_call_start(e2e_conn *c, const char *path, const struct e2e_call_cbs *cbs, void *ud,
                   e2e_call **out)
{
    if (c->state != CONN_READY)
        return QN_ECLOSED;
    if (e2e_conn_room(c) == 0)
        return QN_ELIMIT;
    e2e_call *k = calloc(1, sizeof *k);
    if (k == NULL)
        return QN_ENOMEM;
    k->conn = c;
    k->cbs = cbs;
    k->ud = ud;
    k->grpc_status = -1;
    k->started_ns = e2e_now_ns();
    e2e_grpc_reader_init(&k->rd, c->o.max_msg);

    const char *scheme = c->o.ssl_ctx != NULL ? "https" : "http";
#define NV(n, v)                                                                          \
    {                                                                                     \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                         \
            NGHTTP2_NV_FLAG_NO_COPY_NAME                                                  \
    }
    nghttp2_nv nva[] = {
        NV(":method", "POST"),
        NV(":scheme", scheme),
        NV(":path", path),
        NV(":authority", c->o.authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("user-agent", "queen-bench-e2e/0.1"),
    };
#undef NV
    nghttp2_data_provider dp = {.source = {.ptr = k}, .read_callback = on_read_body};
    int32_t id = nghttp2_submit_request(c->h2, NULL, nva, sizeof nva / sizeof nva[0], &dp, k);
    if (id < 0) {
        snprintf(c->last_error, sizeof c->last_error, "submit request: %s",
                 nghttp2_strerror(id));
        call_free(k);
        return QN_EINTERNAL;
    }
    k->stream_id = id;
    k->state = CALL_OPEN;
    k->next = c->live;
    if (c->live != NULL)
        c->live->prev = k;
    c->live = k;
    c->active++;
    *out = k;
    return QN_OK;
}

/* Makes room for n more bytes in the call's send buffer. */
static int out_reserve(e2e_call *k, size_t n)
{
    if (k->state != CALL_OPEN || k->send_closed)
        return QN_EINVAL;
    if (k->out_off > 0 && k->out_off == k->out_len)
        k->out_off = k->out_len = 0;
    if (n <= k->out_cap - k->out_len)
        return QN_OK;
    if (k->out_off > 0) {
        memmove(k->out, k->out + k->out_off, k->out_len - k->out_off);
        k->out_len -= k->out_off;
        k->out_off = 0;
        if (n <= k->out_cap - k->out_len)
            return QN_OK;
    }
    if (n > CALL_OUT_MAX - k->out_len)
        return QN_ELIMIT;
    size_t need = k->out_len + n;
    size_t cap = k->out_cap ? k->out_cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > CALL_OUT_MAX)
        cap = CALL_OUT_MAX;
    uint8_t *nb = realloc(k->out, cap);
    if (nb == NULL)
        return QN_ENOMEM;
    k->out = nb;
    k->out_cap = cap;
    return QN_OK;
}

static void out_queued(e2e_call *k)
{
    if (k->deferred && k->conn->h2 != NULL) {
        k->deferred = false;
        (void)nghttp2_session_resume_data(k->conn->h2, k->stream_id);
    }
}

int e2e_call_send(e2e_call *k, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (len > UINT32_MAX)
        return QN_ELIMIT;
    int rc = out_reserve(k, E2E_GRPC_PREFIX + len);
    if (rc != QN_OK)
        return rc;
    e2e_grpc_prefix(k->out + k->out_len, (uint32_t)len);
    size_t packed = protobuf_c_message_pack(msg, k->out + k->out_len + E2E_GRPC_PREFIX);
    if (packed != len)
        return QN_EINTERNAL;
    k->out_len += E2E_GRPC_PREFIX + len;
    out_queued(k);
    return QN_OK;
}

int e2e_call_send_raw(e2e_call *k, const uint8_t *data, size_t len)
{
    int rc = out_reserve(k, len);
    if (rc != QN_OK)
        return rc;
    memcpy(k->out + k->out_len, data, len);
    k->out_len += len;
    out_queued(k);
    return QN_OK;
}

void e2e_call_close_send(e2e_call *k)
{
    if (k->state != CALL_OPEN || k->send_closed)
        return;
    k->send_closed = true;
    out_queued(k);
}

void e2e_call_cancel(e2e_call *k)
{
    if (k->state != CALL_OPEN || k->conn->h2 == NULL)
        return;
    (void)nghttp2_submit_rst_stream(k->conn->h2, NGHTTP2_FLAG_NONE, k->stream_id,
                                    NGHTTP2_CANCEL);
}

uint64_t e2e_call_started_ns(const e2e_call *k)
{
    return k->started_ns;
}
