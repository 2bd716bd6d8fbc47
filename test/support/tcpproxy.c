/*
 * tcpproxy.c - the test TCP proxy (see tcpproxy.h).
 *
 * Does: accept on 127.0.0.1, connect each client to the target, move bytes both
 * ways on one thread with poll(), hold the bytes of a silenced direction, count
 * everything, close both sides on cut. Built twice: into qn_testsupport (the
 * thread API), and with QT_PROXY_MAIN as the program qn_tcp_proxy, which prints
 * "port N" and then answers one line per command read from stdin:
 *     silence <conn> up|down|both   -> "ok" | "error ..."
 *     forward <conn>                -> "ok"
 *     cut <conn>                    -> "ok"
 *     find <client port>            -> "conn N" (-1 when none)
 *     count <conn>                  -> "up <fwd> <held> down <fwd> <held> open|closed"
 *     conns                         -> "conns N"
 *     quit                          -> exits
 * Does not: parse the protocol it carries, or ever send an RST.
 *
 * Invariants:
 *   1. Every field of a connection is touched under the proxy's mutex; the
 *      thread drops it only inside poll().
 *   2. A held buffer never exceeds QT_PROXY_HOLD_MAX: a silenced direction stops
 *      reading when it is full.
 *   3. A closed connection's fds are -1 and it is never polled again.
 */
#include "tcpproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536

struct pconn {
    int fd[2];        /* [0] client, [1] server */
    int client_port;  /* the client's local port */
    bool silenced[2]; /* [0] up, [1] down */
    uint8_t *hold[2];
    size_t hold_len[2];
    uint64_t fwd[2], held[2];
    bool open;
};

struct qt_proxy {
    pthread_mutex_t mu;
    pthread_t thread;
    int lfd;
    int wake[2];
    int port;
    struct sockaddr_storage target;
    socklen_t target_len;
    bool stop;
    struct pconn c[QT_PROXY_MAX_CONNS];
    int n;
};

static void nudge(struct qt_proxy *p)
{
    char b = 1;
    (void)!write(p->wake[1], &b, 1);
}

static void close_conn(struct pconn *c)
{
    for (int s = 0; s < 2; s++) {
        if (c->fd[s] >= 0)
            close(c->fd[s]);
        c->fd[s] = -1;
        free(c->hold[s]);
        c->hold[s] = NULL;
        c->hold_len[s] = 0;
    }
    c->open = false;
}

/* Writes all of b to fd (blocking socket); false when the peer is gone. */
static bool send_all(int fd, const uint8_t *b, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

/* Direction d of c: from fd[d] to fd[1 - d]. One read. */
static void pump(struct pconn *c, int d)
{
    uint8_t buf[CHUNK];
    ssize_t r = recv(c->fd[d], buf, sizeof buf, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r <= 0) {
        close_conn(c);
        return;
    }
    if (c->silenced[d]) {
        uint8_t *nb = realloc(c->hold[d], c->hold_len[d] + (size_t)r);
        if (nb == NULL) {
            close_conn(c);
            return;
        }
        memcpy(nb + c->hold_len[d], buf, (size_t)r);
        c->hold[d] = nb;
        c->hold_len[d] += (size_t)r;
        c->held[d] += (uint64_t)r;
        return;
    }
    if (!send_all(c->fd[1 - d], buf, (size_t)r)) {
        close_conn(c);
        return;
    }
    c->fwd[d] += (uint64_t)r;
}

static void accept_one(struct qt_proxy *p)
{
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    int cfd = accept(p->lfd, (struct sockaddr *)&peer, &plen);
    if (cfd < 0)
        return;
    if (p->n >= QT_PROXY_MAX_CONNS) {
        close(cfd);
        return;
    }
    int sfd = socket(p->target.ss_family, SOCK_STREAM, 0);
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&p->target, p->target_len) != 0) {
        if (sfd >= 0)
            close(sfd);
        close(cfd);
        return;
    }
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct pconn *c = &p->c[p->n++];
    memset(c, 0, sizeof *c);
    c->fd[0] = cfd;
    c->fd[1] = sfd;
    c->client_port = ntohs(peer.sin_port);
    c->open = true;
}

static void *run(void *arg)
{
    struct qt_proxy *p = arg;
    struct pollfd fds[2 + 2 * QT_PROXY_MAX_CONNS];
    int who[2 + 2 * QT_PROXY_MAX_CONNS];
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        int nf = 0;
        fds[nf] = (struct pollfd){p->lfd, POLLIN, 0};
        who[nf++] = -1;
        fds[nf] = (struct pollfd){p->wake[0], POLLIN, 0};
        who[nf++] = -2;
        for (int i = 0; i < p->n; i++) {
            struct pconn *c = &p->c[i];
            for (int d = 0; d < 2 && c->open; d++) {
                if (c->silenced[d] && c->hold_len[d] >= QT_PROXY_HOLD_MAX)
                    continue; /* invariant 2 */
                fds[nf] = (struct pollfd){c->fd[d], POLLIN, 0};
                who[nf++] = i * 2 + d;
            }
        }
        pthread_mutex_unlock(&p->mu);
        int rc = poll(fds, (nfds_t)nf, 1000);
        pthread_mutex_lock(&p->mu);
        if (rc <= 0)
            continue;
        for (int k = 0; k < nf && !p->stop; k++) {
            if (fds[k].revents == 0)
                continue;
            if (who[k] == -1) {
                accept_one(p);
            } else if (who[k] == -2) {
                char b[64];
                (void)!read(p->wake[0], b, sizeof b);
            } else {
                struct pconn *c = &p->c[who[k] / 2];
                int d = who[k] % 2;
                if (c->open && c->fd[d] == fds[k].fd)
                    pump(c, d);
            }
        }
    }
    for (int i = 0; i < p->n; i++)
        if (p->c[i].open)
            close_conn(&p->c[i]);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int qt_proxy_start(const char *host, int port, struct qt_proxy **out)
{
    struct qt_proxy *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -1;
    p->lfd = -1;
    p->wake[0] = p->wake[1] = -1;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, ps, &hints, &ai) != 0 || ai == NULL)
        goto fail;
    memcpy(&p->target, ai->ai_addr, ai->ai_addrlen);
    p->target_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->lfd, 64) != 0 || getsockname(p->lfd, (struct sockaddr *)&a, &alen) != 0)
        goto fail;
    p->port = ntohs(a.sin_port);
    if (pipe(p->wake) != 0)
        goto fail;
    fcntl(p->wake[0], F_SETFL, O_NONBLOCK);
    pthread_mutex_init(&p->mu, NULL);
    if (pthread_create(&p->thread, NULL, run, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        goto fail;
    }
    *out = p;
    return 0;
fail:
    if (p->lfd >= 0)
        close(p->lfd);
    if (p->wake[0] >= 0) {
        close(p->wake[0]);
        close(p->wake[1]);
    }
    free(p);
    return -1;
}

void qt_proxy_stop(struct qt_proxy *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_mutex_unlock(&p->mu);
    nudge(p);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    free(p);
}

int qt_proxy_port(const struct qt_proxy *p)
{
    return p->port;
}

int qt_proxy_nconns(struct qt_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->n;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int qt_proxy_find(struct qt_proxy *p, int client_port)
{
    int id = -1;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n && id < 0; i++)
        if (p->c[i].client_port == client_port)
            id = i;
    pthread_mutex_unlock(&p->mu);
    return id;
}

/* Runs f on connection conn under the lock; -1 for an unknown id. */
static int with_conn(struct qt_proxy *p, int conn, void (*f)(struct pconn *, int), int arg)
{
    pthread_mutex_lock(&p->mu);
    int rc = -1;
    if (conn >= 0 && conn < p->n) {
        f(&p->c[conn], arg);
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    nudge(p);
    return rc;
}

static void do_silence(struct pconn *c, int dirs)
{
    if (dirs & QT_UP)
        c->silenced[0] = true;
    if (dirs & QT_DOWN)
        c->silenced[1] = true;
}

static void do_forward(struct pconn *c, int unused)
{
    (void)unused;
    for (int d = 0; d < 2 && c->open; d++) {
        c->silenced[d] = false;
        if (c->hold_len[d] > 0) {
            if (!send_all(c->fd[1 - d], c->hold[d], c->hold_len[d])) {
                close_conn(c);
                return;
            }
            c->fwd[d] += c->hold_len[d];
            c->held[d] -= c->hold_len[d];
            free(c->hold[d]);
            c->hold[d] = NULL;
            c->hold_len[d] = 0;
        }
    }
}

static void do_cut(struct pconn *c, int unused)
{
    (void)unused;
    if (c->open)
        close_conn(c);
}

int qt_proxy_silence(struct qt_proxy *p, int conn, int dirs)
{
    return with_conn(p, conn, do_silence, dirs);
}

int qt_proxy_forward(struct qt_proxy *p, int conn)
{
    return with_conn(p, conn, do_forward, 0);
}

int qt_proxy_cut(struct qt_proxy *p, int conn)
{
    return with_conn(p, conn, do_cut, 0);
}

int qt_proxy_counts(struct qt_proxy *p, int conn, struct qt_proxy_counts *out)
{
    pthread_mutex_lock(&p->mu);
    int rc = -1;
    if (conn >= 0 && conn < p->n) {
        const struct pconn *c = &p->c[conn];
        for (int d = 0; d < 2; d++) {
            out->forwarded[d] = c->fwd[d];
            out->held[d] = c->held[d];
        }
        out->open = c->open;
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

bool qt_proxy_wait_held(struct qt_proxy *p, int conn, int dir, uint64_t min_bytes, int timeout_ms)
{
    struct timespec step = {0, 2000000};
    for (int waited = 0; waited <= timeout_ms; waited += 2) {
        struct qt_proxy_counts k;
        if (qt_proxy_counts(p, conn, &k) == 0 && k.held[dir == QT_UP ? 0 : 1] >= min_bytes)
            return true;
        nanosleep(&step, NULL);
    }
    return false;
}

#ifdef QT_PROXY_MAIN
/* qn_tcp_proxy <host> <port>: the line protocol of the file comment. */
int main(int argc, char **argv)
{
    struct qt_proxy *p;
    if (argc != 3) {
        fprintf(stderr, "usage: qn_tcp_proxy HOST PORT\n");
        return 2;
    }
    char *end;
    long port = strtol(argv[2], &end, 10);
    if (*end != '\0' || port < 1 || port > 65535) {
        fprintf(stderr, "qn_tcp_proxy: bad port %s\n", argv[2]);
        return 2;
    }
    if (qt_proxy_start(argv[1], (int)port, &p) != 0) {
        fprintf(stderr, "qn_tcp_proxy: cannot start: %s\n", strerror(errno));
        return 1;
    }
    printf("port %d\n", qt_proxy_port(p));
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof line, stdin) != NULL) {
        char cmd[32] = "", arg2[32] = "";
        long a = -1;
        int n = sscanf(line, "%31s %ld %31s", cmd, &a, arg2);
        int rc = -1;
        if (n >= 1 && strcmp(cmd, "quit") == 0)
            break;
        if (n >= 1 && strcmp(cmd, "conns") == 0) {
            printf("conns %d\n", qt_proxy_nconns(p));
        } else if (n >= 2 && strcmp(cmd, "find") == 0) {
            printf("conn %d\n", qt_proxy_find(p, (int)a));
        } else if (n >= 2 && strcmp(cmd, "count") == 0) {
            struct qt_proxy_counts k;
            if (qt_proxy_counts(p, (int)a, &k) == 0)
                printf("up %llu %llu down %llu %llu %s\n", (unsigned long long)k.forwarded[0],
                       (unsigned long long)k.held[0], (unsigned long long)k.forwarded[1],
                       (unsigned long long)k.held[1], k.open ? "open" : "closed");
            else
                printf("error unknown connection\n");
        } else {
            if (n == 3 && strcmp(cmd, "silence") == 0)
                rc = qt_proxy_silence(p, (int)a,
                                      strcmp(arg2, "up") == 0     ? QT_UP
                                      : strcmp(arg2, "down") == 0 ? QT_DOWN
                                                                  : QT_BOTH);
            else if (n >= 2 && strcmp(cmd, "forward") == 0)
                rc = qt_proxy_forward(p, (int)a);
            else if (n >= 2 && strcmp(cmd, "cut") == 0)
                rc = qt_proxy_cut(p, (int)a);
            printf(rc == 0 ? "ok\n" : "error bad command or connection\n");
        }
        fflush(stdout);
    }
    qt_proxy_stop(p);
    return 0;
}
#endif
