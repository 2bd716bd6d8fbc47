/*
 * cl_conn.c - one HTTP/2 client connection carrying many concurrent gRPC calls,
 * driven by the caller's poll loop (see queen/client.h).
 *
 * Does: non-blocking TCP connect, optional TLS (ALPN h2, server name check), an
 * nghttp2 client session fed with nghttp2_session_mem_recv/mem_send, request
 * headers (authorization, grpc-timeout), gRPC request framing, response
 * reassembly, grpc-status from trailers or trailers-only headers, per-call
 * deadlines, reconnect with backoff when asked.
 * Does not: resolve names (cl_dial.c does, before), retry calls, or negotiate
 * compression; block (the blocking API in cl_sync.c is a loop around this).
 * One file (about 1,100 lines) because the connection and its calls share the
 * nghttp2 session's callbacks and the done list that defers on_close.
 *
 * Connection lifecycle (asserted in conn_set_state):
 *   DOWN --(backoff elapsed)--> CONNECTING --(socket connected)--> HANDSHAKE
 *   (TLS only) --> READY;  any state --(error)--> DOWN (reconnect on) or
 *   DEAD (reconnect off; terminal).
 * Call lifecycle: OPEN (on the live list, stream may be open) --(stream closed,
 * connection lost, framing error, deadline)--> DONE (on the done list)
 * --(on_close returned)--> freed.
 *
 * Invariants:
 *   1. on_close of a call runs exactly once, outside every nghttp2 callback.
 *   2. the session exists exactly in state READY.
 *   3. every length taken from the network (gRPC prefix, header values) is
 *      checked against a limit before it is used; the write buffer and each
 *      call's send buffer have hard maxima.
 *   4. timed_calls counts the live calls with a deadline, so a connection
 *      whose calls have none never walks its live list for timers.
 */
#include <arpa/inet.h>
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
#include <openssl/x509v3.h>

#include "cl_int.h"
#include "queen/error.h"

#define RBUF_SIZE (64u * 1024u)
#define WBUF_FILL (128u * 1024u)      /* stop serialising above this */
#define WBUF_MAX (8u * 1024u * 1024u) /* hard maximum of the write buffer */
#define CONNECT_TIMEOUT_NS (5ull * 1000000000ull)
#define BACKOFF_MIN_NS (100ull * 1000000ull)
#define BACKOFF_MAX_NS (2000ull * 1000000ull)
#define TOKEN_MAX 8192u /* longest bearer token accepted */
#define TIMEOUT_MAX_MS (INT64_C(366) * 24 * 3600 * 1000)

enum conn_state {
    CONN_DOWN,
    CONN_CONNECTING,
    CONN_HANDSHAKE,
    CONN_READY,
    CONN_DEAD,
};

enum call_state {
    CALL_OPEN,
    CALL_DONE,
};

struct qn_client_call {
    qn_client *conn;
    enum call_state state;
    struct qn_client_call *prev, *next; /* on conn->live (OPEN) or conn->done (DONE) */
    int32_t stream_id;
    const struct qn_client_call_cbs *cbs; /* NULL once forgotten: nothing is reported */
    void *ud;
    uint64_t started_ns;
    uint64_t deadline_ns; /* 0: none */
    bool deadline_hit;    /* the deadline passed and the stream was reset */
    /* request body: bytes [out_off, out_len) wait for the data provider */
    uint8_t *out;
    size_t out_len;
    size_t out_off;
    size_t out_cap;
    bool send_closed; /* END_STREAM goes after the queued bytes */
    bool sent_all;    /* END_STREAM went out */
    bool deferred;    /* the data provider returned NGHTTP2_ERR_DEFERRED */
    /* response */
    struct qn_client_reader rd;
    struct qn_client_head head;
    uint8_t *msg; /* last message when cbs->on_message == NULL */
    size_t msg_len;
    bool bad_frame;
    int bad_frame_rc; /* the reader's error */
    uint32_t h2_error;
};

struct qn_client {
    struct qn_client_opts o;
    enum conn_state state;
    int fd;
    SSL *ssl;
    nghttp2_session *h2;
    bool tearing_down;    /* session being deleted: ignore its callbacks */
    uint64_t deadline_ns; /* CONNECTING/HANDSHAKE: connect timeout; DOWN: reconnect time */
    uint64_t backoff_ns;
    uint64_t failures;
    struct qn_client_status last; /* the last connection failure */
    char *auth;                   /* "Bearer <token>", or NULL */
    unsigned active;              /* calls on the live list */
    unsigned timed_calls;         /* live calls with a deadline */
    qn_client_call *live;
    qn_client_call *done_head, *done_tail;
    bool in_done; /* process_done is running (no recursion) */
    /* bytes serialised by nghttp2 not yet written: [woff, wlen) of wbuf */
    uint8_t *wbuf;
    size_t wlen, woff, wcap;
    bool want_pollout;
    /* made by qn_client_dial, freed with the connection */
    qn_client_tls *own_tls;
    char *own_authority;
    char *own_server_name;
};

uint64_t qn_client_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void conn_set_state(qn_client *c, enum conn_state to)
{
    switch (to) {
    case CONN_DOWN:
        assert(c->o.reconnect);
        break;
    case CONN_DEAD:
        assert(!c->o.reconnect);
        break;
    case CONN_CONNECTING:
        assert(c->state == CONN_DOWN);
        break;
    case CONN_HANDSHAKE:
        assert(c->state == CONN_CONNECTING && c->o.tls != NULL);
        break;
    case CONN_READY:
        assert(c->state == CONN_CONNECTING || c->state == CONN_HANDSHAKE);
        break;
    }
    c->state = to;
}

/* ---------------------------------------------------------------- calls */

static void list_remove(qn_client_call **head, qn_client_call *k)
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
static void call_finish(qn_client_call *k)
{
    qn_client *c = k->conn;
    if (k->state != CALL_OPEN)
        return;
    list_remove(&c->live, k);
    assert(c->active > 0);
    c->active--;
    if (k->deadline_ns != 0) {
        assert(c->timed_calls > 0);
        c->timed_calls--;
    }
    k->state = CALL_DONE;
    k->prev = c->done_tail;
    k->next = NULL;
    if (c->done_tail != NULL)
        c->done_tail->next = k;
    else
        c->done_head = k;
    c->done_tail = k;
}

static void call_free(qn_client_call *k)
{
    qn_client_reader_release(&k->rd);
    free(k->out);
    free(k->msg);
    free(k);
}

static enum qn_client_end end_of(const qn_client_call *k, bool conn_lost)
{
    if (k->bad_frame)
        return QN_CLIENT_END_BAD_FRAME;
    if (k->head.have_status && qn_client_reader_idle(&k->rd))
        return QN_CLIENT_END_STATUS;
    if (k->deadline_hit)
        return QN_CLIENT_END_DEADLINE;
    if (conn_lost)
        return QN_CLIENT_END_CONN_LOST;
    return QN_CLIENT_END_NO_STATUS;
}

static void report(qn_client_call *k, enum qn_client_end end)
{
    if (k->cbs == NULL)
        return;
    struct qn_client_call_result r = {
        .end = end,
        .grpc_status = end == QN_CLIENT_END_STATUS ? k->head.grpc_status : -1,
        .grpc_message = k->head.grpc_message,
        .http_status = k->head.http_status,
        .h2_error = k->h2_error,
        .msg = k->msg,
        .msg_len = k->msg_len,
        .messages = k->rd.messages,
        .frame_error = k->bad_frame ? k->bad_frame_rc : 0,
    };
    k->cbs->on_close(k, &r, k->ud);
}

/* Runs on_close for every finished call, oldest first. */
static void process_done(qn_client *c, bool conn_lost)
{
    if (c->in_done)
        return;
    c->in_done = true;
    while (c->done_head != NULL) {
        qn_client_call *k = c->done_head;
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

static void conn_down(qn_client *c, uint64_t now_ns, enum qn_client_fail fail, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void conn_down(qn_client *c, uint64_t now_ns, enum qn_client_fail fail, const char *fmt, ...)
{
    c->failures++;
    c->last.fail = fail;
    c->last.code = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last.message, sizeof c->last.message, fmt, ap);
    va_end(ap);
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
    if (c->o.reconnect) {
        conn_set_state(c, CONN_DOWN);
        c->deadline_ns = now_ns + c->backoff_ns;
        c->backoff_ns = c->backoff_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : c->backoff_ns * 2;
    } else {
        conn_set_state(c, CONN_DEAD);
        c->deadline_ns = 0;
    }
    process_done(c, true);
}

/* ---------------------------------------------------------------- nghttp2 callbacks */

static qn_client_call *stream_call(nghttp2_session *s, int32_t stream_id)
{
    return nghttp2_session_get_stream_user_data(s, stream_id);
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    qn_client *c = ud;
    if (c->tearing_down || f->hd.type != NGHTTP2_HEADERS)
        return 0;
    qn_client_call *k = stream_call(s, f->hd.stream_id);
    if (k == NULL || k->state != CALL_OPEN)
        return 0;
    qn_client_head_add(&k->head, name, namelen, value, valuelen);
    return 0;
}

static int on_msg(const uint8_t *msg, size_t len, void *ud)
{
    qn_client_call *k = ud;
    if (k->cbs == NULL)
        return 0;
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

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *ud)
{
    (void)flags;
    qn_client *c = ud;
    if (c->tearing_down)
        return 0;
    qn_client_call *k = stream_call(s, stream_id);
    if (k == NULL || k->state != CALL_OPEN || k->bad_frame)
        return 0;
    int rc = qn_client_reader_feed(&k->rd, data, len, on_msg, k);
    if (rc < 0) {
        k->bad_frame = true;
        k->bad_frame_rc = rc;
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    qn_client *c = ud;
    if (c->tearing_down || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    if (f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS)
        return 0;
    qn_client_call *k = stream_call(s, f->hd.stream_id);
    if (k != NULL)
        k->sent_all = true;
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *ud)
{
    qn_client *c = ud;
    if (c->tearing_down)
        return 0;
    qn_client_call *k = stream_call(s, stream_id);
    if (k == NULL)
        return 0;
    k->h2_error = error_code;
    call_finish(k);
    return 0;
}

static ssize_t on_read_body(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t length,
                            uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    (void)s;
    (void)stream_id;
    (void)ud;
    qn_client_call *k = src->ptr;
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

static int session_start(qn_client *c)
{
    nghttp2_session_callbacks *cb = NULL;
    int rc = nghttp2_session_callbacks_new(&cb);
    if (rc != 0)
        return QN_ENOMEM;
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
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
        int32_t conn_window =
            c->o.window > (1u << 28) ? (int32_t)(1u << 30) : (int32_t)(c->o.window * 4u);
        rc = nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, conn_window);
    }
    if (rc != 0)
        return QN_EINTERNAL;
    return QN_OK;
}

static void become_ready(qn_client *c, uint64_t now_ns)
{
    if (session_start(c) != QN_OK) {
        conn_down(c, now_ns, QN_CLIENT_FAIL_MEMORY, "cannot start an http/2 session");
        return;
    }
    conn_set_state(c, CONN_READY);
    c->backoff_ns = BACKOFF_MIN_NS;
}

/* ---------------------------------------------------------------- socket I/O */

enum { IO_AGAIN = -1, IO_ERROR = -2 };

static ssize_t io_read(qn_client *c, uint8_t *buf, size_t n)
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

static ssize_t io_write(qn_client *c, const uint8_t *buf, size_t n)
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

static void start_connect(qn_client *c, uint64_t now_ns)
{
    conn_set_state(c, CONN_CONNECTING);
    c->deadline_ns = now_ns + CONNECT_TIMEOUT_NS;
    c->fd = socket(c->o.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        conn_down(c, now_ns, QN_CLIENT_FAIL_CONNECT, "connect to %s: %s", c->o.authority,
                  strerror(errno));
        return;
    }
    int one = 1;
    (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (const struct sockaddr *)&c->o.addr, c->o.addrlen) != 0 &&
        errno != EINPROGRESS) {
        conn_down(c, now_ns, QN_CLIENT_FAIL_CONNECT, "connect to %s: %s", c->o.authority,
                  strerror(errno));
        return;
    }
}

static void tls_failed(qn_client *c, uint64_t now_ns)
{
    char detail[200];
    long v = c->ssl != NULL ? SSL_get_verify_result(c->ssl) : X509_V_OK;
    if (v != X509_V_OK) {
        ERR_clear_error();
        snprintf(detail, sizeof detail, "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
    } else {
        qn__client_ssl_detail(detail, sizeof detail);
    }
    conn_down(c, now_ns, QN_CLIENT_FAIL_TLS, "tls handshake with %s: %s", c->o.authority, detail);
}

static void tls_handshake(qn_client *c, uint64_t now_ns)
{
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        const unsigned char *alpn = NULL;
        unsigned alpnlen = 0;
        SSL_get0_alpn_selected(c->ssl, &alpn, &alpnlen);
        if (alpnlen != 2 || memcmp(alpn, "h2", 2) != 0) {
            conn_down(c, now_ns, QN_CLIENT_FAIL_TLS, "tls: %s did not select h2 by ALPN",
                      c->o.authority);
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
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        conn_down(c, now_ns, QN_CLIENT_FAIL_TLS,
                  "tls handshake with %s: the server closed the connection (is it serving "
                  "TLS on this port?)",
                  c->o.authority);
        return;
    }
    tls_failed(c, now_ns);
}

/* Names the server for SNI and arranges its verification. */
static bool tls_name(qn_client *c)
{
    const char *name = c->o.server_name;
    enum qn_client_verify v = qn__client_tls_verify(c->o.tls);
    if (name == NULL || name[0] == '\0')
        return true;
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
    if (!is_ip && SSL_set_tlsext_host_name(c->ssl, name) != 1)
        return false;
    if (v != QN_CLIENT_VERIFY_FULL)
        return true;
    if (is_ip)
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name) == 1;
    SSL_set_hostflags(c->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return SSL_set1_host(c->ssl, name) == 1;
}

static void connected(qn_client *c, uint64_t now_ns)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        conn_down(c, now_ns, QN_CLIENT_FAIL_CONNECT, "connect to %s: %s", c->o.authority,
                  strerror(err));
        return;
    }
    if (c->o.tls == NULL) {
        become_ready(c, now_ns);
        return;
    }
    ERR_clear_error();
    c->ssl = SSL_new(qn__client_tls_ctx(c->o.tls));
    BIO *bio = c->ssl != NULL ? qn__client_tls_bio(c->o.tls, c->fd) : NULL;
    if (bio == NULL) {
        char detail[200];
        qn__client_ssl_detail(detail, sizeof detail);
        conn_down(c, now_ns, QN_CLIENT_FAIL_TLS, "tls: %s", detail);
        return;
    }
    SSL_set_bio(c->ssl, bio, bio);
    SSL_set_connect_state(c->ssl);
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (!tls_name(c)) {
        conn_down(c, now_ns, QN_CLIENT_FAIL_CONFIG, "tls: cannot use \"%s\" as the server name",
                  c->o.server_name);
        return;
    }
    conn_set_state(c, CONN_HANDSHAKE);
    tls_handshake(c, now_ns);
}

/* Appends to the write buffer; false past WBUF_MAX or on ENOMEM. */
static bool wbuf_append(qn_client *c, const uint8_t *p, size_t n)
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

static void io_failed(qn_client *c, const char *what)
{
    char detail[200];
    if (c->ssl != NULL)
        qn__client_ssl_detail(detail, sizeof detail);
    else
        snprintf(detail, sizeof detail, "%s", strerror(errno));
    conn_down(c, qn_client_now_ns(), QN_CLIENT_FAIL_HTTP2, "%s %s: %s", what, c->o.authority,
              detail);
}

void qn_client_flush(qn_client *c)
{
    if (c->state != CONN_READY)
        return;
    for (;;) {
        while (c->wlen - c->woff < WBUF_FILL) {
            const uint8_t *p = NULL;
            ssize_t n = nghttp2_session_mem_send(c->h2, &p);
            if (n < 0) {
                conn_down(c, qn_client_now_ns(), QN_CLIENT_FAIL_HTTP2, "http/2 with %s: %s",
                          c->o.authority, nghttp2_strerror((int)n));
                return;
            }
            if (n == 0)
                break;
            if (!wbuf_append(c, p, (size_t)n)) {
                conn_down(c, qn_client_now_ns(), QN_CLIENT_FAIL_LIMIT,
                          "write buffer to %s over its limit of %u bytes", c->o.authority,
                          WBUF_MAX);
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
            io_failed(c, "write to");
            return;
        }
        c->woff += (size_t)w;
    }
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) &&
        c->wlen == c->woff)
        conn_down(c, qn_client_now_ns(), QN_CLIENT_FAIL_HTTP2,
                  "%s closed the http/2 session (GOAWAY)", c->o.authority);
}

static void do_read(qn_client *c, uint64_t now_ns)
{
    uint8_t buf[RBUF_SIZE];
    for (int i = 0; i < 16 && c->state == CONN_READY; i++) {
        ssize_t r = io_read(c, buf, sizeof buf);
        if (r == IO_AGAIN)
            break;
        if (r == 0) {
            conn_down(c, now_ns, QN_CLIENT_FAIL_HTTP2, "%s closed the connection", c->o.authority);
            return;
        }
        if (r < 0) {
            io_failed(c, "read from");
            return;
        }
        ssize_t used = nghttp2_session_mem_recv(c->h2, buf, (size_t)r);
        if (used < 0) {
            conn_down(c, now_ns, QN_CLIENT_FAIL_HTTP2, "http/2 protocol error from %s: %s",
                      c->o.authority, nghttp2_strerror((int)used));
            return;
        }
        process_done(c, false);
        if ((size_t)r < sizeof buf)
            break;
    }
}

/* Resets every live call whose deadline passed. */
static void expire_calls(qn_client *c, uint64_t now_ns)
{
    if (c->timed_calls == 0 || c->state != CONN_READY)
        return;
    for (qn_client_call *k = c->live; k != NULL; k = k->next) {
        if (k->deadline_ns != 0 && !k->deadline_hit && now_ns >= k->deadline_ns) {
            k->deadline_hit = true;
            (void)nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, k->stream_id, NGHTTP2_CANCEL);
        }
    }
}

void qn_client_io(qn_client *c, short revents, uint64_t now_ns)
{
    switch (c->state) {
    case CONN_DEAD:
        return;
    case CONN_DOWN:
        if (now_ns >= c->deadline_ns)
            start_connect(c, now_ns);
        return;
    case CONN_CONNECTING:
        if (revents & (POLLOUT | POLLERR | POLLHUP))
            connected(c, now_ns);
        else if (now_ns >= c->deadline_ns)
            conn_down(c, now_ns, QN_CLIENT_FAIL_CONNECT, "connect to %s: timed out",
                      c->o.authority);
        break;
    case CONN_HANDSHAKE:
        if (revents != 0)
            tls_handshake(c, now_ns);
        else if (now_ns >= c->deadline_ns)
            conn_down(c, now_ns, QN_CLIENT_FAIL_TLS, "tls handshake with %s: timed out",
                      c->o.authority);
        break;
    case CONN_READY:
        if (revents & (POLLIN | POLLERR | POLLHUP))
            do_read(c, now_ns);
        expire_calls(c, now_ns);
        break;
    }
    qn_client_flush(c);
}

uint64_t qn_client_deadline(const qn_client *c)
{
    if (c->state != CONN_READY)
        return c->deadline_ns;
    if (c->timed_calls == 0)
        return 0;
    uint64_t d = 0;
    for (const qn_client_call *k = c->live; k != NULL; k = k->next)
        if (k->deadline_ns != 0 && !k->deadline_hit && (d == 0 || k->deadline_ns < d))
            d = k->deadline_ns;
    return d;
}

int qn_client_fd(const qn_client *c)
{
    return c->fd;
}

short qn_client_events(const qn_client *c)
{
    switch (c->state) {
    case CONN_DOWN:
    case CONN_DEAD:
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

bool qn_client_ready(const qn_client *c)
{
    return c->state == CONN_READY;
}

bool qn_client_dead(const qn_client *c)
{
    return c->state == CONN_DEAD;
}

unsigned qn_client_active(const qn_client *c)
{
    return c->active;
}

unsigned qn_client_room(const qn_client *c)
{
    if (c->state != CONN_READY)
        return 0;
    uint32_t max =
        nghttp2_session_get_remote_settings(c->h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    return max > c->active ? max - c->active : 0;
}

uint64_t qn_client_failures(const qn_client *c)
{
    return c->failures;
}

const char *qn_client_last_error(const qn_client *c)
{
    return c->last.message;
}

const struct qn_client_status *qn_client_last_status(const qn_client *c)
{
    return &c->last;
}

size_t qn__client_max_queued(const qn_client *c)
{
    return c->o.max_queued;
}

void qn__client_adopt(qn_client *c, qn_client_tls *tls, char *authority, char *server_name)
{
    c->own_tls = tls;
    c->own_authority = authority;
    c->own_server_name = server_name;
}

/* True when every byte of t is printable ASCII other than space. */
static bool token_ok(const char *t)
{
    size_t n = strlen(t);
    if (n > TOKEN_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] > 0x7E)
            return false;
    return true;
}

/* "Bearer <t>" in a fresh allocation; NULL on ENOMEM. */
static char *bearer(const char *t)
{
    size_t n = strlen(t) + sizeof "Bearer ";
    char *v = malloc(n);
    if (v != NULL)
        snprintf(v, n, "Bearer %s", t);
    return v;
}

int qn_client_new(const struct qn_client_opts *opts, qn_client **out)
{
    if (opts->token != NULL && opts->token[0] != '\0' && !token_ok(opts->token))
        return QN_EINVAL;
    qn_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return QN_ENOMEM;
    c->o = *opts;
    c->o.token = NULL;
    if (c->o.max_msg == 0)
        c->o.max_msg = QN_CLIENT_DEFAULT_MAX_MSG;
    if (c->o.window == 0)
        c->o.window = QN_CLIENT_DEFAULT_WINDOW;
    if (c->o.max_send == 0)
        c->o.max_send = QN_CLIENT_DEFAULT_MAX_SEND;
    if (c->o.max_queued == 0)
        c->o.max_queued = QN_CLIENT_DEFAULT_MAX_QUEUED;
    if (c->o.user_agent == NULL)
        c->o.user_agent = "queen-client/0.1";
    if (opts->token != NULL && opts->token[0] != '\0') {
        c->auth = bearer(opts->token);
        if (c->auth == NULL) {
            free(c);
            return QN_ENOMEM;
        }
    }
    qn_client_status_clear(&c->last);
    c->fd = -1;
    c->state = CONN_DOWN;
    c->backoff_ns = BACKOFF_MIN_NS;
    start_connect(c, qn_client_now_ns());
    *out = c;
    return QN_OK;
}

void qn_client_free(qn_client *c)
{
    if (c == NULL)
        return;
    if ((c->state != CONN_DOWN && c->state != CONN_DEAD) || c->live != NULL) {
        /* Keeps the last real failure: this one is ours. */
        struct qn_client_status keep = c->last;
        c->o.reconnect = false;
        conn_down(c, qn_client_now_ns(), QN_CLIENT_FAIL_HTTP2, "closed by the client");
        c->last = keep;
    }
    process_done(c, true);
    free(c->wbuf);
    free(c->auth);
    qn_client_tls_free(c->own_tls);
    free(c->own_authority);
    free(c->own_server_name);
    free(c);
}

/* ---------------------------------------------------------------- call API */

int qn_client_call_start(qn_client *c, const char *path, const struct qn_client_call_opts *o,
                         const struct qn_client_call_cbs *cbs, void *ud, qn_client_call **out)
{
    if (c->state != CONN_READY)
        return QN_ECLOSED;
    if (qn_client_room(c) == 0)
        return QN_ELIMIT;
    const char *auth = c->auth;
    char *call_auth = NULL;
    if (o != NULL && o->token != NULL) {
        if (o->token[0] != '\0') {
            if (!token_ok(o->token))
                return QN_EINVAL;
            call_auth = bearer(o->token);
            if (call_auth == NULL)
                return QN_ENOMEM;
        }
        auth = call_auth;
    }
    qn_client_call *k = calloc(1, sizeof *k);
    if (k == NULL) {
        free(call_auth);
        return QN_ENOMEM;
    }
    k->conn = c;
    k->cbs = cbs;
    k->ud = ud;
    k->started_ns = qn_client_now_ns();
    qn_client_head_init(&k->head);
    qn_client_reader_init(&k->rd, c->o.max_msg);
    char timeout[QN_CLIENT_TIMEOUT_LEN];
    if (o != NULL && o->timeout_ms > 0) {
        qn_client_timeout_format(o->timeout_ms, timeout);
        /* Past a year the deadline is as good as none; the clamp keeps ns in range. */
        int64_t ms = o->timeout_ms < TIMEOUT_MAX_MS ? o->timeout_ms : TIMEOUT_MAX_MS;
        uint64_t ns = (uint64_t)ms * 1000000ull;
        k->deadline_ns = k->started_ns + ns;
    }

    const char *scheme = c->o.tls != NULL ? "https" : "http";
#define NV(n, v)                                                                                   \
    {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME}
    nghttp2_nv nva[9] = {
        NV(":method", "POST"),
        NV(":scheme", scheme),
        NV(":path", path),
        NV(":authority", c->o.authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("user-agent", c->o.user_agent),
    };
    size_t nnv = 7;
    if (k->deadline_ns != 0)
        nva[nnv++] = (nghttp2_nv)NV("grpc-timeout", timeout);
    if (auth != NULL)
        nva[nnv++] = (nghttp2_nv)NV("authorization", auth);
#undef NV
    nghttp2_data_provider dp = {.source = {.ptr = k}, .read_callback = on_read_body};
    /* nghttp2 copies the values: call_auth and timeout may go after this. */
    int32_t id = nghttp2_submit_request(c->h2, NULL, nva, nnv, &dp, k);
    free(call_auth);
    if (id < 0) {
        snprintf(c->last.message, sizeof c->last.message, "http/2 request to %s: %s",
                 c->o.authority, nghttp2_strerror(id));
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
    if (k->deadline_ns != 0)
        c->timed_calls++;
    *out = k;
    return QN_OK;
}

/* Makes room for n more bytes in the call's send buffer. */
static int out_reserve(qn_client_call *k, size_t n)
{
    if (k->state != CALL_OPEN || k->send_closed)
        return QN_EINVAL;
    size_t max = k->conn->o.max_send;
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
    if (n > max || k->out_len > max - n)
        return QN_ELIMIT;
    size_t need = k->out_len + n;
    size_t cap = k->out_cap ? k->out_cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > max)
        cap = max;
    uint8_t *nb = realloc(k->out, cap);
    if (nb == NULL)
        return QN_ENOMEM;
    k->out = nb;
    k->out_cap = cap;
    return QN_OK;
}

static void out_queued(qn_client_call *k)
{
    if (k->deferred && k->conn->h2 != NULL) {
        k->deferred = false;
        (void)nghttp2_session_resume_data(k->conn->h2, k->stream_id);
    }
}

int qn_client_call_send(qn_client_call *k, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (len > UINT32_MAX)
        return QN_ELIMIT;
    int rc = out_reserve(k, QN_CLIENT_GRPC_PREFIX + len);
    if (rc != QN_OK)
        return rc;
    qn_client_grpc_prefix(k->out + k->out_len, (uint32_t)len);
    size_t packed = protobuf_c_message_pack(msg, k->out + k->out_len + QN_CLIENT_GRPC_PREFIX);
    if (packed != len)
        return QN_EINTERNAL;
    k->out_len += QN_CLIENT_GRPC_PREFIX + len;
    out_queued(k);
    return QN_OK;
}

int qn_client_call_send_raw(qn_client_call *k, const uint8_t *data, size_t len)
{
    int rc = out_reserve(k, len);
    if (rc != QN_OK)
        return rc;
    memcpy(k->out + k->out_len, data, len);
    k->out_len += len;
    out_queued(k);
    return QN_OK;
}

void qn_client_call_close_send(qn_client_call *k)
{
    if (k->state != CALL_OPEN || k->send_closed)
        return;
    k->send_closed = true;
    out_queued(k);
}

bool qn_client_call_sent(const qn_client_call *k)
{
    return k->sent_all;
}

void qn_client_call_cancel(qn_client_call *k)
{
    if (k->state != CALL_OPEN || k->conn->h2 == NULL)
        return;
    (void)nghttp2_submit_rst_stream(k->conn->h2, NGHTTP2_FLAG_NONE, k->stream_id, NGHTTP2_CANCEL);
}

void qn__client_call_forget(qn_client_call *k)
{
    k->cbs = NULL;
    k->ud = NULL;
    qn_client_call_cancel(k);
}

uint64_t qn_client_call_started_ns(const qn_client_call *k)
{
    return k->started_ns;
}
