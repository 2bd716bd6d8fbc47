/*
 * transport/net.c - listeners, connections and TLS (see net.h for the
 * connection lifecycle and the handler a protocol gives).
 *
 * Why one file of some 1,000 lines: the connection lifecycle is one state
 * machine driven by socket, TLS, timer and protocol events alike; the listeners,
 * the per-peer counts and the SSL_CTX (about 300 lines) are the only parts that
 * stand apart, and they make nothing but connections in that machine's first
 * state.
 *
 * Does: accept on the h2c and TLS listeners (evconnlistener), cap the number of
 * connections overall and per peer address, run TLS through bufferevent_openssl
 * (TLS 1.2+, ALPN "h2" only, optional client certificates) within a handshake
 * deadline, hold the protocol's opening (the HTTP/2 preface) to a deadline, hand
 * received bytes to the protocol's session and write what it produces, close
 * idle connections (idle: no work in progress and no progress - complete frames
 * of work, as the protocol reports them - for QUEEN_IDLE_TIMEOUT_MS; bytes alone
 * and PINGs do not count), close connections whose unread output stays over
 * the output limits (as Redis's client output-buffer limits: a hard limit closes
 * at once, a soft limit after a time above it), ask for keepalive pings on
 * connections with work in progress (two unanswered -> close), say goodbye and
 * drain on shutdown, tear a connection down when its session reports a
 * connection-fatal error (qn_err_is_fatal) once the goodbye is written.
 * Does not: know HTTP/2, gRPC or calls (h2.c and call.c do); block; allocate
 * per byte.
 *
 * Buffering: bufferevents. Input is handed to the session as soon as it arrives
 * and the session keeps none of it (HTTP/2 bounds request bodies by the
 * flow-control windows the call layer grants). Output is pulled from the session
 * only while the bufferevent's output holds less than OUT_HIGH bytes; above it,
 * reading stops too (a peer that does not read cannot make us queue replies
 * without bound), and both resume when the output drains to OUT_LOW (write
 * watermark).
 *
 * Invariants:
 *   1. A connection is freed only in the reap pass, never inside a callback that
 *      runs for it; a DEAD connection is never read, written or submitted to.
 *   2. The bufferevent output of a connection holds at most OUT_HIGH plus one
 *      mem_send chunk.
 *   3. Live connections (not DEAD) never exceed QUEEN_MAX_CONNECTIONS, nor, from
 *      one peer address, QUEEN_MAX_CONNECTIONS_PER_PEER (when set); a peer entry
 *      exists exactly while it has a live connection.
 *   4. Only "h2" is ever negotiated on the TLS listener; a handshake without it is
 *      refused.
 *   5. Every live connection has a timer armed: handshake deadline, preface
 *      deadline, idle, or flush, by state; a connection never waits on its peer
 *      without one.
 */
#include <assert.h>
#include <pthread.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "config.h"
#include "log.h"
#include "queen/error.h"
#include "queen/store.h"
#include "transport/net.h"
#include "timer.h"

#define OUT_HIGH (256 * 1024)
#define OUT_LOW (64 * 1024)
#define FLUSH_TIMEOUT_MS 2000
#define MAX_PEER_BUCKETS 65536
#define ACCEPT_RETRY_MS 200
#define LISTEN_BACKLOG 1024

/*
 * HANDSHAKE -> OPEN -> DRAINING -> FLUSHING -> DEAD; OPEN -> FLUSHING; any -> DEAD.
 */
enum conn_state {
    CONN_HANDSHAKE, /* TLS handshake running; no session yet */
    CONN_OPEN,      /* session serving */
    CONN_DRAINING,  /* GOAWAY submitted; existing streams finish */
    CONN_FLUSHING,  /* session done; waiting for the output to be written */
    CONN_DEAD,      /* on the dead list, freed in the reap pass */
};

struct listener {
    qn_net *net;
    const struct qn_net_handler *h; /* the protocol it serves (the net's, today) */
    struct evconnlistener *lev;     /* NULL when not listening */
    struct event *retry_ev;         /* re-enables accepting after an accept error */
    bool tls;
    int port; /* bound port, -1 when none */
};

/* Live connections of one peer address (QUEEN_MAX_CONNECTIONS_PER_PEER). */
struct peer_key {
    uint8_t len; /* 4 (IPv4, also IPv4-mapped IPv6) or 16 */
    uint8_t addr[16];
};

struct peer {
    struct peer_key key;
    uint32_t n; /* live connections, >= 1 */
    struct peer *next;
};

struct qn_conn {
    qn_net *net;
    const struct qn_net_handler *h; /* its listener's protocol */
    enum conn_state state;
    bool tls;
    struct bufferevent *bev; /* owns the socket (and the SSL) */
    void *session;           /* the protocol's; NULL until opened (HANDSHAKE) */
    struct event *flush_ev;  /* deferred flush, activated by qn__net_conn_schedule_flush */
    struct event *timer_ev;  /* handshake / idle / flush timeout, by state */
    struct event *ping_ev;   /* keepalive period (persistent) */
    bool ping_outstanding;   /* a keepalive PING is waiting for its ACK */
    int pings_unanswered;    /* consecutive periods without an ACK */
    bool read_paused;        /* reading stopped because output is backed up */
    bool greeted;            /* the protocol's opening arrived (qn__net_conn_greeted) */
    bool idle_bye;           /* closing as idle: the goodbye has FLUSH_TIMEOUT_MS to go out */
    int64_t last_active_ms;  /* last progress (qn__net_conn_progress) */
    struct event *stall_ev;  /* output soft limit: armed while over_soft */
    bool over_soft;          /* unread output at or above QUEEN_CONN_SEND_SOFT_BYTES */
    struct peer *peer_entry; /* its peer's count; NULL without a per-peer cap */
    char peer[64];           /* "addr:port" for logs */
    qn_conn *prev, *next;    /* in net->live or net->dead */
};

struct qn_net {
    struct event_base *base;
    struct qn_net_handler h;
    SSL_CTX *ssl_ctx; /* NULL without TLS */
    char *bind_addr;
    bool h2c;
    int cfg_port, cfg_tls_port;
    size_t max_connections;
    int64_t idle_ms;
    int64_t keepalive_ms;
    int64_t handshake_ms; /* QUEEN_TLS_HANDSHAKE_TIMEOUT_MS */
    int64_t preface_ms;   /* QUEEN_PREFACE_TIMEOUT_MS */
    size_t send_hard;     /* QUEEN_CONN_SEND_HARD_BYTES */
    size_t send_soft;     /* QUEEN_CONN_SEND_SOFT_BYTES */
    int64_t send_soft_ms; /* QUEEN_CONN_SEND_SOFT_MS; 0 = no soft limit */
    size_t max_per_peer;  /* QUEEN_MAX_CONNECTIONS_PER_PEER; 0 = no cap */
    struct peer **peers;  /* buckets; NULL without a per-peer cap */
    size_t npeer_buckets; /* a power of two */
    struct listener plain, secure;
    qn_conn *live; /* not DEAD */
    size_t nlive;
    qn_conn *dead; /* DEAD, waiting for reap */
    size_t ndead;
    struct event *reap_ev;
    /* for rate-limited logs */
    uint64_t refused;       /* refused over QUEEN_MAX_CONNECTIONS */
    uint64_t refused_peer;  /* refused over QUEEN_MAX_CONNECTIONS_PER_PEER */
    uint64_t closed_slow;   /* closed by the handshake or preface deadline */
    uint64_t closed_output; /* closed by the output limits */
    struct qn_net_stats stats;
    _Atomic size_t *shared_live;       /* the process's live connections (every loop's net);
                                          NULL: nlive is the count QUEEN_MAX_CONNECTIONS caps */
    qn_net_handoff_fn handoff;         /* NULL: every accepted socket stays here */
    struct qn_net_peers *shared_peers; /* the process's per-peer counts; NULL: peers above */
    void *handoff_ud;
};

static int64_t now_ms(void)
{
    return qn_store_now_ms(); /* one clock for timers across transport and storage */
}

/* ---------------------------------------------------------------- lists */

static void list_push(qn_conn **head, qn_conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

static void list_unlink(qn_conn **head, qn_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* First ten, then every thousandth: a flood of bad peers cannot flood the log. */
static bool log_due(uint64_t *count)
{
    uint64_t k = (*count)++;
    return k < 10 || k % 1000 == 0;
}

/* ---------------------------------------------------------------- peers */

static bool peer_key_of(const struct sockaddr *sa, struct peer_key *k)
{
    memset(k, 0, sizeof *k);
    if (sa->sa_family == AF_INET) {
        k->len = 4;
        memcpy(k->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            k->len = 4;
            memcpy(k->addr, a->s6_addr + 12, 4);
        } else {
            k->len = 16;
            memcpy(k->addr, a->s6_addr, 16);
        }
        return true;
    }
    return false;
}

/* Several loops' nets share one per-peer count (qn__net_share_peers). */
struct qn_net_peers {
    pthread_mutex_t mu;
    struct peer **b; /* buckets */
    size_t nb;       /* a power of two */
};

/* The table n counts in (its own, or the shared one) and its lock (NULL: own). */
static struct peer **peer_table(qn_net *n, size_t *nb, pthread_mutex_t **mu)
{
    if (n->shared_peers != NULL) {
        *nb = n->shared_peers->nb;
        *mu = &n->shared_peers->mu;
        return n->shared_peers->b;
    }
    *nb = n->npeer_buckets;
    *mu = NULL;
    return n->peers;
}

static struct peer **peer_slot(struct peer **b, size_t nb, const struct peer_key *k)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    h = (h ^ k->len) * 16777619u;
    for (uint8_t i = 0; i < k->len; i++)
        h = (h ^ k->addr[i]) * 16777619u;
    struct peer **pp = &b[h & (nb - 1)];
    while (*pp != NULL && ((*pp)->key.len != k->len || memcmp((*pp)->key.addr, k->addr, k->len)))
        pp = &(*pp)->next;
    return pp;
}

/* Live connections from the peer of k (every loop's, when shared). */
static uint32_t peer_count(qn_net *n, const struct peer_key *k)
{
    size_t nb;
    pthread_mutex_t *mu;
    struct peer **b = peer_table(n, &nb, &mu);
    if (mu)
        pthread_mutex_lock(mu);
    struct peer *p = *peer_slot(b, nb, k);
    uint32_t count = p != NULL ? p->n : 0;
    if (mu)
        pthread_mutex_unlock(mu);
    return count;
}

/* Counts c as a connection of its peer. QN_OK or QN_ENOMEM. */
static int peer_acquire(qn_net *n, qn_conn *c, const struct peer_key *k)
{
    size_t nb;
    pthread_mutex_t *mu;
    struct peer **b = peer_table(n, &nb, &mu);
    int rc = QN_OK;
    if (mu)
        pthread_mutex_lock(mu);
    struct peer **pp = peer_slot(b, nb, k);
    if (*pp == NULL) {
        struct peer *p = calloc(1, sizeof *p);
        if (p == NULL) {
            rc = QN_ENOMEM;
            goto out;
        }
        p->key = *k;
        *pp = p;
    }
    (*pp)->n++;
    c->peer_entry = *pp;
out:
    if (mu)
        pthread_mutex_unlock(mu);
    return rc;
}

static void peer_release(qn_net *n, qn_conn *c)
{
    struct peer *p = c->peer_entry;
    if (p == NULL)
        return;
    c->peer_entry = NULL;
    size_t nb;
    pthread_mutex_t *mu;
    struct peer **b = peer_table(n, &nb, &mu);
    if (mu)
        pthread_mutex_lock(mu);
    assert(p->n > 0);
    if (--p->n == 0) {
        struct peer **pp = peer_slot(b, nb, &p->key);
        assert(*pp == p);
        *pp = p->next;
        free(p);
    }
    if (mu)
        pthread_mutex_unlock(mu);
}

int qn__net_peers_new(size_t max_connections, struct qn_net_peers **out)
{
    struct qn_net_peers *t = calloc(1, sizeof *t);
    if (t == NULL)
        return QN_ENOMEM;
    t->nb = 1;
    while (t->nb < max_connections && t->nb < MAX_PEER_BUCKETS)
        t->nb <<= 1;
    t->b = calloc(t->nb, sizeof *t->b);
    if (t->b == NULL || pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t->b);
        free(t);
        return QN_ENOMEM;
    }
    *out = t;
    return QN_OK;
}

void qn__net_peers_free(struct qn_net_peers *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t->b); /* empty: every connection released its entry */
    free(t);
}

void qn__net_share_peers(qn_net *n, struct qn_net_peers *t)
{
    if (n->max_per_peer > 0)
        n->shared_peers = t;
}

/* ---------------------------------------------------------------- closing */

/* Marks c DEAD and queues it for the reap pass (closing is a request). */
static void conn_kill(qn_conn *c, const char *why)
{
    if (c->state == CONN_DEAD)
        return;
    QN_DEBUG("connection closed peer=%s reason=\"%s\"", c->peer, why);
    c->state = CONN_DEAD;
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    event_del(c->timer_ev);
    event_del(c->ping_ev);
    event_del(c->flush_ev);
    event_del(c->stall_ev);
    qn_net *n = c->net;
    peer_release(n, c);
    list_unlink(&n->live, c);
    n->nlive--;
    if (n->shared_live != NULL)
        atomic_fetch_sub(n->shared_live, 1);
    list_push(&n->dead, c);
    n->ndead++;
    event_active(n->reap_ev, 0, 0);
}

/* The session has nothing more to do: write what is buffered, then kill. */
static void conn_begin_flush(qn_conn *c)
{
    if (c->state == CONN_DEAD || c->state == CONN_FLUSHING)
        return;
    c->state = CONN_FLUSHING;
    bufferevent_disable(c->bev, EV_READ);
    event_del(c->ping_ev);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        conn_kill(c, "done");
        return;
    }
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    qn_timer_after(c->timer_ev, FLUSH_TIMEOUT_MS);
}

static void conn_free(qn_conn *c)
{
    if (c->session != NULL)
        c->h->close(c->session);
    c->session = NULL;
    if (c->bev != NULL)
        bufferevent_free(c->bev);
    if (c->flush_ev)
        event_free(c->flush_ev);
    if (c->timer_ev)
        event_free(c->timer_ev);
    if (c->ping_ev)
        event_free(c->ping_ev);
    if (c->stall_ev)
        event_free(c->stall_ev);
    assert(c->peer_entry == NULL);
    free(c);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    qn_net *n = arg;
    size_t freed = 0;
    while (n->dead != NULL) {
        qn_conn *c = n->dead;
        list_unlink(&n->dead, c);
        n->ndead--;
        conn_free(c);
        freed++;
    }
    for (size_t i = 0; i < freed; i++)
        if (n->h.conn_freed)
            n->h.conn_freed(n->h.owner);
}

/* ---------------------------------------------------------------- I/O */

/* Output the peer has not taken: the socket buffer's and the session's. */
static size_t conn_backlog(qn_conn *c)
{
    size_t b = evbuffer_get_length(bufferevent_get_output(c->bev));
    if (c->session != NULL && c->h->backlog != NULL)
        b += c->h->backlog(c->session);
    return b;
}

/* The output limits: at the hard limit the connection closes now; at the soft
 * limit the stall timer runs, and closes it unless the backlog falls below the
 * limit first. Returns false when c was closed. */
static bool conn_check_output(qn_conn *c)
{
    qn_net *n = c->net;
    size_t b = conn_backlog(c);
    if (b >= n->send_hard) {
        if (log_due(&n->closed_output))
            QN_WARN("closing connection: %zu response bytes unread, over "
                    "QUEEN_CONN_SEND_HARD_BYTES (%zu) peer=%s",
                    b, n->send_hard, c->peer);
        conn_kill(c, "output over the hard limit");
        return false;
    }
    if (n->send_soft_ms > 0 && b >= n->send_soft) {
        if (!c->over_soft) {
            c->over_soft = true;
            qn_timer_after(c->stall_ev, n->send_soft_ms);
        }
    } else if (c->over_soft) {
        c->over_soft = false;
        event_del(c->stall_ev);
    }
    return true;
}

/* The backlog stayed at or above the soft limit for QUEEN_CONN_SEND_SOFT_MS
 * (had it fallen below, conn_check_output would have disarmed this). */
static void on_stall(evutil_socket_t fd, short what, void *arg)
{
    qn_conn *c = arg;
    if (c->state != CONN_OPEN && c->state != CONN_DRAINING)
        return;
    size_t b = conn_backlog(c);
    qn_net *n = c->net;
    if (b < n->send_soft) {
        c->over_soft = false;
        return;
    }
    if (log_due(&n->closed_output))
        QN_WARN("closing connection: %zu response bytes unread, at or over "
                "QUEEN_CONN_SEND_SOFT_BYTES (%zu) for %lld ms peer=%s",
                b, n->send_soft, (long long)n->send_soft_ms, c->peer);
    conn_kill(c, "output over the soft limit for too long");
}

/* Writes what the session has for the peer, within OUT_HIGH, and decides whether
 * the connection is finished. */
static void conn_flush(qn_conn *c)
{
    if (c->state == CONN_DEAD || c->session == NULL || c->state == CONN_FLUSHING)
        return;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t sent = 0;
    while (evbuffer_get_length(out) < OUT_HIGH) {
        const uint8_t *data = NULL;
        ssize_t n = c->h->send(c->session, &data);
        if (n < 0) {
            conn_kill(c, "send error");
            return;
        }
        if (n == 0)
            break;
        if (evbuffer_add(out, data, (size_t)n) != 0) {
            conn_kill(c, "out of memory");
            return;
        }
        sent += (size_t)n;
        if (c->state == CONN_DEAD)
            return; /* a callback inside send may not kill, but stay safe */
    }
    c->net->stats.bytes_out += sent;
    if (evbuffer_get_length(out) >= OUT_HIGH) {
        if (!c->read_paused) {
            bufferevent_disable(c->bev, EV_READ);
            c->read_paused = true;
        }
    } else if (c->read_paused) {
        bufferevent_enable(c->bev, EV_READ);
        c->read_paused = false;
    }
    if (!conn_check_output(c))
        return;
    if (c->h->done(c->session))
        conn_begin_flush(c);
}

static void on_flush_ev(evutil_socket_t fd, short what, void *arg)
{
    conn_flush(arg);
}

void qn__net_conn_schedule_flush(qn_conn *c)
{
    if (c == NULL || c->state == CONN_DEAD || c->state == CONN_FLUSHING)
        return;
    event_active(c->flush_ev, 0, 0); /* no-op when already active */
}

static void on_read(struct bufferevent *bev, void *arg)
{
    qn_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (c->state != CONN_OPEN && c->state != CONN_DRAINING) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    /* bytes alone are not progress (slowloris): the session reports frames */
    while (evbuffer_get_length(in) > 0) {
        size_t len = evbuffer_get_contiguous_space(in);
        const uint8_t *p = evbuffer_pullup(in, (ssize_t)len);
        int rc = c->h->recv(c->session, p, len);
        if (rc != QN_OK) {
            evbuffer_drain(in, evbuffer_get_length(in));
            if (qn_err_is_fatal(rc) && c->state != CONN_DEAD) {
                /* the session queued its goodbye saying why: send it, then close */
                QN_DEBUG("closing connection after a fatal error peer=%s reason=\"%s\"", c->peer,
                         qn_strerror(rc));
                c->state = CONN_DRAINING;
                conn_flush(c);
                conn_begin_flush(c);
            } else {
                conn_kill(c, qn_strerror(rc));
            }
            return;
        }
        evbuffer_drain(in, len);
        c->net->stats.bytes_in += len;
        if (c->state == CONN_DEAD)
            return;
    }
    conn_flush(c);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    qn_conn *c = arg;
    if (c->state == CONN_FLUSHING) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
            conn_kill(c, "done");
        return;
    }
    conn_flush(c);
}

/* ---------------------------------------------------------------- sessions */

void qn__net_ping_acked(qn_conn *c)
{
    c->ping_outstanding = false;
    c->pings_unanswered = 0;
}

void qn__net_conn_greeted(qn_conn *c)
{
    if (c->greeted || (c->state != CONN_OPEN && c->state != CONN_DRAINING))
        return;
    c->greeted = true;
    c->last_active_ms = now_ms();
    qn_timer_after(c->timer_ev, c->net->idle_ms); /* the preface deadline is over */
}

void qn__net_conn_progress(qn_conn *c)
{
    c->last_active_ms = now_ms();
}

static int conn_start_session(qn_conn *c)
{
    qn_net *n = c->net;
    assert(c->state == CONN_HANDSHAKE && c->session == NULL);
    void *session = NULL;
    int rc = c->h->open(c->h->proto, c, &session);
    if (rc != QN_OK)
        return rc;
    c->session = session;
    c->state = CONN_OPEN;
    c->last_active_ms = now_ms();
    qn_timer_after(c->timer_ev, n->preface_ms); /* until qn__net_conn_greeted */
    qn_timer_after(c->ping_ev, n->keepalive_ms);
    return QN_OK;
}

static bool alpn_is_h2(SSL *ssl)
{
    const unsigned char *p = NULL;
    unsigned int len = 0;
    SSL_get0_alpn_selected(ssl, &p, &len);
    return len == 2 && memcmp(p, "h2", 2) == 0;
}

static void log_tls_errors(qn_conn *c, const char *what)
{
    unsigned long e;
    char buf[256];
    bool any = false;
    while ((e = bufferevent_get_openssl_error(c->bev)) != 0) {
        ERR_error_string_n(e, buf, sizeof buf);
        QN_DEBUG("%s peer=%s detail=\"%s\"", what, c->peer, buf);
        any = true;
    }
    if (!any)
        QN_DEBUG("%s peer=%s", what, c->peer);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    qn_conn *c = arg;
    if (c->state == CONN_DEAD)
        return;
    if (what & BEV_EVENT_CONNECTED) {
        assert(c->state == CONN_HANDSHAKE);
        SSL *ssl = bufferevent_openssl_get_ssl(bev);
        if (ssl == NULL || !alpn_is_h2(ssl)) {
            conn_kill(c, "tls client did not negotiate h2 (alpn)");
            return;
        }
        event_del(c->timer_ev);
        int rc = conn_start_session(c);
        if (rc != QN_OK) {
            conn_kill(c, qn_strerror(rc));
            return;
        }
        conn_flush(c);
        return;
    }
    if (what & BEV_EVENT_ERROR) {
        if (c->tls)
            log_tls_errors(c, "connection error");
        conn_kill(c, c->state == CONN_HANDSHAKE ? "tls handshake failed" : "socket error");
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_TIMEOUT))
        conn_kill(c, "peer closed");
}

/* Handshake deadline, preface deadline, idle timeout and flush timeout, by
 * state. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    qn_conn *c = arg;
    qn_net *n = c->net;
    switch (c->state) {
    case CONN_HANDSHAKE:
        if (log_due(&n->closed_slow))
            QN_INFO("closing connection: no tls handshake within "
                    "QUEEN_TLS_HANDSHAKE_TIMEOUT_MS (%lld ms) peer=%s",
                    (long long)n->handshake_ms, c->peer);
        conn_kill(c, "tls handshake timed out");
        return;
    case CONN_FLUSHING:
        conn_kill(c, "output not written in time");
        return;
    case CONN_OPEN:
    case CONN_DRAINING: {
        if (!c->greeted) {
            if (log_due(&n->closed_slow))
                QN_INFO("closing connection: no http/2 preface within "
                        "QUEEN_PREFACE_TIMEOUT_MS (%lld ms) peer=%s",
                        (long long)n->preface_ms, c->peer);
            conn_kill(c, "no preface in time");
            return;
        }
        if (c->idle_bye) {
            /* a peer that reads nothing cannot hold the slot with our goodbye */
            conn_kill(c, "goodbye not written in time");
            return;
        }
        int64_t idle = n->idle_ms;
        if (c->h->active(c->session) > 0) {
            qn_timer_after(c->timer_ev, idle);
            return;
        }
        int64_t quiet = now_ms() - c->last_active_ms;
        if (quiet < idle) {
            qn_timer_after(c->timer_ev, idle - quiet);
            return;
        }
        QN_DEBUG("closing idle connection peer=%s", c->peer);
        c->h->goaway(c->session, false);
        c->state = CONN_DRAINING;
        c->idle_bye = true;
        qn_timer_after(c->timer_ev, FLUSH_TIMEOUT_MS);
        conn_flush(c);
        return;
    }
    case CONN_DEAD:
        return;
    }
}

static void on_ping(evutil_socket_t fd, short what, void *arg)
{
    qn_conn *c = arg;
    if (c->state != CONN_OPEN && c->state != CONN_DRAINING)
        return;
    if (c->h->active(c->session) == 0) {
        c->ping_outstanding = false;
        c->pings_unanswered = 0;
        return;
    }
    if (c->ping_outstanding && ++c->pings_unanswered >= 2) {
        QN_INFO("closing connection: keepalive pings unanswered peer=%s", c->peer);
        conn_kill(c, "keepalive timeout");
        return;
    }
    if (c->h->ping(c->session) == QN_OK) {
        c->ping_outstanding = true;
        conn_flush(c);
    }
}

/* ---------------------------------------------------------------- accepting */

static void peer_name(const struct sockaddr *sa, socklen_t len, char *out, size_t cap)
{
    char host[48] = "?", serv[8] = "?";
    if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, cap, "?");
        return;
    }
    snprintf(out, cap, "%s:%s", host, serv);
}

static void refuse_over_max(qn_net *n, evutil_socket_t fd)
{
    if (n->refused++ % 1000 == 0)
        QN_WARN("connection refused: QUEEN_MAX_CONNECTIONS (%zu) reached", n->max_connections);
    evutil_closesocket(fd);
}

/* A socket accepted here or handed over by another loop's net, past the
 * QUEEN_MAX_CONNECTIONS check: the per-peer cap, then a connection on this
 * net's loop. Takes fd. True once it is a live connection (counted). */
static bool conn_accept(struct listener *li, evutil_socket_t fd, struct sockaddr *sa, int salen)
{
    qn_net *n = li->net;
    struct peer_key key;
    bool capped = (n->peers != NULL || n->shared_peers != NULL) && peer_key_of(sa, &key);
    if (capped && peer_count(n, &key) >= n->max_per_peer) {
        if (log_due(&n->refused_peer)) {
            char who[64];
            peer_name(sa, (socklen_t)salen, who, sizeof who);
            QN_WARN("connection refused: QUEEN_MAX_CONNECTIONS_PER_PEER (%zu) reached peer=%s",
                    n->max_per_peer, who);
        }
        evutil_closesocket(fd);
        return false;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    qn_conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        evutil_closesocket(fd);
        return false;
    }
    c->net = n;
    c->h = li->h;
    c->tls = li->tls;
    peer_name(sa, (socklen_t)salen, c->peer, sizeof c->peer);
    if (li->tls) {
        SSL *ssl = SSL_new(n->ssl_ctx);
        if (ssl == NULL) {
            evutil_closesocket(fd);
            free(c);
            return false;
        }
        c->bev = bufferevent_openssl_socket_new(n->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                BEV_OPT_CLOSE_ON_FREE);
        if (c->bev != NULL)
            bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
        else
            SSL_free(ssl);
    } else {
        c->bev = bufferevent_socket_new(n->base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    c->flush_ev = event_new(n->base, -1, 0, on_flush_ev, c);
    c->timer_ev = evtimer_new(n->base, on_timer, c);
    c->ping_ev = event_new(n->base, -1, EV_PERSIST, on_ping, c);
    c->stall_ev = evtimer_new(n->base, on_stall, c);
    if (c->bev == NULL || c->flush_ev == NULL || c->timer_ev == NULL || c->ping_ev == NULL ||
        c->stall_ev == NULL || (capped && peer_acquire(n, c, &key) != QN_OK)) {
        if (c->bev == NULL)
            evutil_closesocket(fd);
        conn_free(c);
        return false;
    }
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, OUT_LOW, 0);
    list_push(&n->live, c);
    n->nlive++; /* the shared count was raised by the acceptor (on_accept) */
    n->stats.connections_accepted++;
    if (li->tls) {
        c->state = CONN_HANDSHAKE;
        qn_timer_after(c->timer_ev, n->handshake_ms);
    } else {
        c->state = CONN_HANDSHAKE; /* no handshake; becomes OPEN just below */
        int rc = conn_start_session(c);
        if (rc != QN_OK) {
            conn_kill(c, qn_strerror(rc));
            return true;
        }
    }
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    if (c->state == CONN_OPEN)
        conn_flush(c);
    return true;
}

/* A socket that holds a place in the shared count (or, without one, before the
 * cap check): becomes a connection, or gives the place back. */
static void accept_counted(struct listener *li, evutil_socket_t fd, struct sockaddr *sa, int salen)
{
    qn_net *n = li->net;
    if (n->shared_live == NULL && n->nlive >= n->max_connections) {
        refuse_over_max(n, fd);
        return;
    }
    if (!conn_accept(li, fd, sa, salen) && n->shared_live != NULL)
        atomic_fetch_sub(n->shared_live, 1);
}

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    (void)lev;
    struct listener *li = arg;
    qn_net *n = li->net;
    /* one place in the process's count, taken here by the only acceptor, so
     * sockets on their way to another loop count too */
    if (n->shared_live != NULL && atomic_fetch_add(n->shared_live, 1) >= n->max_connections) {
        atomic_fetch_sub(n->shared_live, 1);
        refuse_over_max(n, fd);
        return;
    }
    /* another loop's turn (broker.c spreads connections round-robin) */
    if (n->handoff != NULL && n->handoff(n->handoff_ud, fd, sa, salen, li->tls))
        return;
    accept_counted(li, fd, sa, salen);
}

void qn__net_set_handoff(qn_net *n, qn_net_handoff_fn fn, void *ud)
{
    n->handoff = fn;
    n->handoff_ud = ud;
}

void qn__net_share_live_count(qn_net *n, _Atomic size_t *count)
{
    n->shared_live = count;
}

void qn__net_adopt(qn_net *n, int fd, const struct sockaddr *sa, int salen, bool tls, bool refuse)
{
    struct listener *li = tls ? &n->secure : &n->plain;
    struct sockaddr_storage ss;
    if (refuse || (tls && n->ssl_ctx == NULL) || salen < 0 ||
        (size_t)salen > sizeof(struct sockaddr_storage) ||
        evutil_make_socket_nonblocking(fd) != 0) {
        evutil_closesocket(fd);
        if (n->shared_live != NULL)
            atomic_fetch_sub(n->shared_live, 1);
        return;
    }
    memcpy(&ss, sa, (size_t)salen);
    accept_counted(li, fd, (struct sockaddr *)&ss, salen);
}

static void on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
    struct listener *li = arg;
    if (li->lev != NULL)
        evconnlistener_enable(li->lev);
}

static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    struct listener *li = arg;
    int err = EVUTIL_SOCKET_ERROR();
    QN_WARN("accept failed: %s", evutil_socket_error_to_string(err));
    /* EMFILE and friends: back off instead of spinning on a readable listener. */
    evconnlistener_disable(lev);
    qn_timer_after(li->retry_ev, ACCEPT_RETRY_MS);
}

/* ---------------------------------------------------------------- TLS */

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    static const unsigned char h2[] = {2, 'h', '2'};
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, h2, sizeof h2, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL; /* no_application_protocol */
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static void log_ssl_error(const char *what, const char *file)
{
    char buf[256] = "";
    unsigned long e = ERR_get_error();
    if (e != 0)
        ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    QN_ERROR("%s %s: %s", what, file, buf[0] ? buf : "unknown error");
}

static int make_ssl_ctx(const struct qn_config *cfg, SSL_CTX **out)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return QN_ENOMEM;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    /* RFC 9113 9.2.2: TLS 1.2 with ephemeral key exchange and AEAD only. */
    if (SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1) {
        log_ssl_error("cannot set tls ciphers", "");
        goto fail;
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert) != 1) {
        log_ssl_error("cannot load QUEEN_TLS_CERT", cfg->tls_cert);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key, SSL_FILETYPE_PEM) != 1) {
        log_ssl_error("cannot load QUEEN_TLS_KEY", cfg->tls_key);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        log_ssl_error("QUEEN_TLS_KEY does not match QUEEN_TLS_CERT", cfg->tls_key);
        goto fail;
    }
    if (cfg->tls_client_ca[0] != '\0') {
        if (SSL_CTX_load_verify_locations(ctx, cfg->tls_client_ca, NULL) != 1) {
            log_ssl_error("cannot load QUEEN_TLS_CLIENT_CA", cfg->tls_client_ca);
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->tls_client_ca);
        if (names == NULL) {
            log_ssl_error("no certificate in QUEEN_TLS_CLIENT_CA", cfg->tls_client_ca);
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        static const unsigned char sid[] = "queen-broker";
        SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
    }
    *out = ctx;
    return QN_OK;
fail:
    SSL_CTX_free(ctx);
    return QN_EINVAL;
}

/* ---------------------------------------------------------------- the layer */

int qn__net_new(struct event_base *base, const struct qn_config *cfg,
                const struct qn_net_handler *h, qn_net **out)
{
    int rc = QN_ENOMEM;
    qn_net *n = calloc(1, sizeof *n);
    if (n == NULL)
        return QN_ENOMEM;
    n->base = base;
    n->h = *h;
    n->h2c = cfg->h2c;
    n->cfg_port = (int)cfg->port;
    n->cfg_tls_port = (int)cfg->tls_port;
    n->max_connections = (size_t)cfg->max_connections;
    n->idle_ms = cfg->idle_timeout_ms;
    n->keepalive_ms = cfg->keepalive_ms;
    n->handshake_ms = cfg->tls_handshake_timeout_ms;
    n->preface_ms = cfg->preface_timeout_ms;
    n->send_hard = (size_t)cfg->conn_send_hard_bytes;
    n->send_soft = (size_t)cfg->conn_send_soft_bytes;
    n->send_soft_ms = cfg->conn_send_soft_ms;
    n->max_per_peer = (size_t)cfg->max_conns_per_peer;
    n->plain = (struct listener){n, &n->h, NULL, NULL, false, -1};
    n->secure = (struct listener){n, &n->h, NULL, NULL, true, -1};
    n->bind_addr = strdup(cfg->bind_addr);
    n->reap_ev = event_new(base, -1, 0, on_reap, n);
    n->plain.retry_ev = evtimer_new(base, on_accept_retry, &n->plain);
    n->secure.retry_ev = evtimer_new(base, on_accept_retry, &n->secure);
    if (n->bind_addr == NULL || n->reap_ev == NULL || n->plain.retry_ev == NULL ||
        n->secure.retry_ev == NULL)
        goto fail;
    if (n->max_per_peer > 0) {
        n->npeer_buckets = 1;
        while (n->npeer_buckets < n->max_connections && n->npeer_buckets < MAX_PEER_BUCKETS)
            n->npeer_buckets <<= 1;
        n->peers = calloc(n->npeer_buckets, sizeof *n->peers);
        if (n->peers == NULL)
            goto fail;
    }
    if (cfg->tls_cert[0] != '\0') {
        rc = make_ssl_ctx(cfg, &n->ssl_ctx);
        if (rc != QN_OK)
            goto fail;
    }
    *out = n;
    return QN_OK;
fail:
    qn__net_free(n);
    return rc;
}

static int bind_one(qn_net *n, struct listener *li, int port)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int gai = getaddrinfo(n->bind_addr, ps, &hints, &res);
    if (gai != 0 || res == NULL) {
        QN_ERROR("cannot listen: QUEEN_BIND_ADDR \"%s\" is not a numeric address (%s)",
                 n->bind_addr, gai_strerror(gai));
        return QN_EIO;
    }
    li->lev = evconnlistener_new_bind(
        n->base, on_accept, li, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
        LISTEN_BACKLOG, res->ai_addr, (int)res->ai_addrlen);
    freeaddrinfo(res);
    if (li->lev == NULL) {
        QN_ERROR("cannot listen on %s port %d: %s", n->bind_addr, port, strerror(errno));
        return QN_EIO;
    }
    evconnlistener_set_error_cb(li->lev, on_accept_error);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evconnlistener_get_fd(li->lev), (struct sockaddr *)&ss, &sl) != 0) {
        QN_ERROR("cannot read the bound port: %s", strerror(errno));
        return QN_EIO;
    }
    li->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return QN_OK;
}

int qn__net_listen(qn_net *n)
{
    if (n->h2c) {
        int rc = bind_one(n, &n->plain, n->cfg_port);
        if (rc != QN_OK)
            return rc;
    }
    if (n->ssl_ctx != NULL) {
        int rc = bind_one(n, &n->secure, n->cfg_tls_port);
        if (rc != QN_OK)
            return rc;
    }
    if (n->plain.lev == NULL && n->secure.lev == NULL) {
        QN_ERROR("no listener: QUEEN_H2C is false and no TLS certificate is configured");
        return QN_EIO;
    }
    return QN_OK;
}

int qn__net_port(const qn_net *n, bool tls)
{
    return tls ? n->secure.port : n->plain.port;
}

void qn__net_stop_accepting(qn_net *n)
{
    struct listener *ls[2] = {&n->plain, &n->secure};
    for (int i = 0; i < 2; i++) {
        if (ls[i]->lev != NULL) {
            evconnlistener_free(ls[i]->lev);
            ls[i]->lev = NULL;
        }
        event_del(ls[i]->retry_ev);
    }
}

void qn__net_goaway_all(qn_net *n)
{
    qn_conn *next;
    for (qn_conn *c = n->live; c != NULL; c = next) {
        next = c->next;
        if (c->state == CONN_HANDSHAKE || (c->state == CONN_OPEN && !c->greeted)) {
            conn_kill(c, "shutdown");
        } else if (c->state == CONN_OPEN) {
            c->h->goaway(c->session, true);
            c->state = CONN_DRAINING;
            qn__net_conn_schedule_flush(c);
        }
    }
}

void qn__net_close_all(qn_net *n)
{
    while (n->live != NULL)
        conn_kill(n->live, "shutdown");
}

size_t qn__net_conn_count(const qn_net *n)
{
    return n->nlive + n->ndead;
}

void qn__net_flush_all(qn_net *n)
{
    qn_conn *next;
    for (qn_conn *c = n->live; c != NULL; c = next) {
        next = c->next;
        if (c->state != CONN_DEAD && c->session != NULL)
            conn_flush(c);
    }
}

void qn__net_stats(const qn_net *n, struct qn_net_stats *out)
{
    *out = n->stats;
}

void qn__net_free(qn_net *n)
{
    if (n == NULL)
        return;
    qn__net_stop_accepting(n);
    qn__net_close_all(n);
    while (n->dead != NULL) {
        qn_conn *c = n->dead;
        list_unlink(&n->dead, c);
        n->ndead--;
        conn_free(c);
    }
    if (n->plain.retry_ev)
        event_free(n->plain.retry_ev);
    if (n->secure.retry_ev)
        event_free(n->secure.retry_ev);
    if (n->reap_ev)
        event_free(n->reap_ev);
    SSL_CTX_free(n->ssl_ctx);
    free(n->peers); /* empty: every connection released its entry (invariant 3) */
    free(n->bind_addr);
    free(n);
}

/* ---------------------------------------------------------------- accessors */

const char *qn__net_conn_peer(const qn_conn *c)
{
    return c->peer;
}

struct x509_st *qn__net_conn_peer_cert(const qn_conn *c)
{
    if (!c->tls || c->bev == NULL)
        return NULL;
    SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
    if (ssl == NULL || SSL_get_verify_result(ssl) != X509_V_OK)
        return NULL;
    /* without QUEEN_TLS_CLIENT_CA no certificate is asked for, so none is here */
    return SSL_get0_peer_certificate(ssl);
}

bool qn__net_conn_is_dead(const qn_conn *c)
{
    return c->state == CONN_DEAD;
}
