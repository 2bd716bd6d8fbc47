/*
 * cl_dial.c - the blocking way in: parse and resolve a target, make the TLS
 * context, connect and wait for the session; one poll round for blocking
 * programs (see queen/client.h).
 *
 * Does not: retry a failed dial (a dialled connection never reconnects: a
 * blocking program reports the failure instead), or resolve asynchronously.
 *
 * Invariants:
 *   1. qn_client_dial either returns a READY connection that owns its TLS
 *      context and strings, or frees everything it made.
 *   2. a target's host and port are checked before getaddrinfo sees them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_int.h"
#include "queen/error.h"

/* Splits target into host and port (default_port when absent). */
static int split_target(const char *target, const char *default_port, char *host, size_t hostcap,
                        char *port, size_t portcap, struct qn_client_status *st)
{
    const char *h = target, *p = NULL;
    size_t hlen;
    if (target == NULL || target[0] == '\0') {
        qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG, "empty address (want host:port)");
        return QN_EINVAL;
    }
    if (target[0] == '[') {
        const char *close = strchr(target, ']');
        if (close == NULL || (close[1] != '\0' && close[1] != ':')) {
            qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG, "address \"%s\": want [ipv6]:port",
                                  target);
            return QN_EINVAL;
        }
        h = target + 1;
        hlen = (size_t)(close - h);
        p = close[1] == ':' ? close + 2 : NULL;
    } else {
        const char *colon = strchr(target, ':');
        if (colon != NULL && strchr(colon + 1, ':') != NULL) {
            hlen = strlen(target); /* a bare IPv6 address */
        } else if (colon != NULL) {
            hlen = (size_t)(colon - target);
            p = colon + 1;
        } else {
            hlen = strlen(target);
        }
    }
    if (p == NULL)
        p = default_port;
    if (hlen == 0 || hlen >= hostcap) {
        qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG, "address \"%s\": %s host", target,
                              hlen == 0 ? "empty" : "too long a");
        return QN_EINVAL;
    }
    size_t plen = strlen(p);
    long v = 0;
    bool digits = plen > 0 && plen < portcap && plen <= 5;
    for (size_t i = 0; digits && i < plen; i++) {
        if (p[i] < '0' || p[i] > '9')
            digits = false;
        else
            v = v * 10 + (p[i] - '0');
    }
    if (!digits || v < 1 || v > 65535) {
        qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG,
                              "address \"%s\": the port must be a number from 1 to 65535", target);
        return QN_EINVAL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(port, p, plen + 1);
    return QN_OK;
}

int qn_client_resolve(const char *target, const char *default_port, struct qn_client_addr *out,
                      struct qn_client_status *st)
{
    qn_client_status_clear(st);
    struct qn_client_addr a;
    memset(&a, 0, sizeof a);
    char port[8];
    int rc = split_target(target, default_port != NULL ? default_port : "6632", a.host,
                          sizeof a.host, port, sizeof port, st);
    if (rc != QN_OK)
        return rc;
    unsigned char ip[16];
    bool v6 = inet_pton(AF_INET6, a.host, ip) == 1;
    a.ip_literal = v6 || inet_pton(AF_INET, a.host, ip) == 1;
    snprintf(a.authority, sizeof a.authority, v6 ? "[%s]:%s" : "%s:%s", a.host, port);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (a.ip_literal)
        hints.ai_flags = AI_NUMERICHOST;
    struct addrinfo *res = NULL;
    int g = getaddrinfo(a.host, port, &hints, &res);
    if (g != 0 || res == NULL) {
        qn__client_status_set(st, QN_CLIENT_FAIL_RESOLVE, "cannot resolve %s: %s", a.host,
                              g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        if (res != NULL)
            freeaddrinfo(res);
        return QN_ECLOSED;
    }
    memcpy(&a.addr, res->ai_addr, res->ai_addrlen);
    a.addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    *out = a;
    return QN_OK;
}

int qn_client_run(qn_client *c, int timeout_ms)
{
    if (qn_client_dead(c))
        return QN_ECLOSED;
    qn_client_flush(c);
    if (qn_client_dead(c))
        return QN_ECLOSED;
    int wait = timeout_ms;
    uint64_t d = qn_client_deadline(c);
    if (d != 0) {
        uint64_t now = qn_client_now_ns();
        uint64_t ms = d > now ? (d - now + 999999u) / 1000000u : 0;
        if (wait < 0 || ms < (uint64_t)wait)
            wait = ms > 3600000u ? 3600000 : (int)ms;
    }
    struct pollfd pf = {.fd = qn_client_fd(c), .events = qn_client_events(c)};
    int n = poll(&pf, pf.fd >= 0 ? 1 : 0, wait);
    if (n < 0 && errno == EINTR)
        return QN_ECANCELLED;
    qn_client_io(c, n > 0 ? pf.revents : 0, qn_client_now_ns());
    return qn_client_dead(c) ? QN_ECLOSED : QN_OK;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

int qn_client_dial(const struct qn_client_config *cfg, qn_client **out, struct qn_client_status *st)
{
    qn_client_status_clear(st);
    struct qn_client_addr a;
    qn_client_tls *tls = NULL;
    char *authority = NULL, *server_name = NULL;
    qn_client *c = NULL;
    int rc = qn_client_resolve(cfg->target, "6632", &a, st);
    if (rc != QN_OK)
        return rc;
    if (cfg->tls) {
        struct qn_client_tls_opts to = {
            .ca_file = cfg->ca_file,
            .cert_file = cfg->cert_file,
            .key_file = cfg->key_file,
            .verify = cfg->verify,
        };
        rc = qn_client_tls_new(&to, &tls, st);
        if (rc != QN_OK)
            return rc;
        const char *name =
            cfg->server_name != NULL && cfg->server_name[0] != '\0' ? cfg->server_name : a.host;
        server_name = dup_str(name);
    } else if (cfg->cert_file != NULL || cfg->ca_file != NULL || cfg->key_file != NULL) {
        qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG,
                              "a CA, certificate or key file needs TLS (it is off)");
        return QN_EINVAL;
    }
    authority = dup_str(a.authority);
    if (authority == NULL || (cfg->tls && server_name == NULL)) {
        rc = QN_ENOMEM;
        qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY, "out of memory");
        goto fail;
    }
    struct qn_client_opts o = {
        .addr = a.addr,
        .addrlen = a.addrlen,
        .authority = authority,
        .tls = tls,
        .server_name = server_name,
        .token = cfg->token,
        .max_msg = cfg->max_msg,
        .max_queued = cfg->max_queued,
        .reconnect = false,
    };
    rc = qn_client_new(&o, &c);
    if (rc != QN_OK) {
        if (rc == QN_EINVAL)
            qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG,
                                  "the token holds characters a header cannot carry "
                                  "(want printable ASCII without spaces)");
        else
            qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY, "out of memory");
        goto fail;
    }
    qn__client_adopt(c, tls, authority, server_name);
    tls = NULL;
    authority = server_name = NULL;
    int wait_ms =
        cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : QN_CLIENT_DEFAULT_CONNECT_MS;
    uint64_t until = qn_client_now_ns() + (uint64_t)wait_ms * 1000000u;
    while (!qn_client_ready(c) && !qn_client_dead(c)) {
        uint64_t now = qn_client_now_ns();
        if (now >= until)
            break;
        (void)qn_client_run(c, (int)((until - now + 999999u) / 1000000u));
    }
    if (qn_client_ready(c)) {
        *out = c;
        return QN_OK;
    }
    if (qn_client_dead(c)) {
        *st = *qn_client_last_status(c);
        rc = qn__client_fail_code(st->fail);
    } else {
        qn__client_status_set(st, QN_CLIENT_FAIL_CONNECT, "connect to %s: no session within %d ms",
                              a.authority, wait_ms);
        rc = QN_ECLOSED;
    }
fail:
    qn_client_free(c);
    qn_client_tls_free(tls);
    free(authority);
    free(server_name);
    return rc;
}
