/*
 * security.c - the process's credentials and keys (see security.h): loading
 * them, reloading them on SIGHUP off the loop, the authentication gate of the
 * server, and audit lines.
 *
 * Does: parse the file lists of the configuration ("[kid=]path,..."), load the
 * JWT key set (auth/jwt.h), the mTLS policy (auth/mtls.h) and the key ring
 * (queen/envelope.h); verify each call's bearer token or client certificate and
 * attach the principal to the call; reload on a thread and swap on the loop.
 * Does not: decide what a principal may do (rpc/authz.c does, per RPC and
 * queue), fetch keys over the network, cache verdicts.
 *
 * Reload lifecycle (s->reload):
 *
 *   IDLE --SIGHUP--> RUNNING (thread reads the files)
 *   RUNNING --SIGHUP--> RUNNING, again = true
 *   RUNNING --thread posts its result (pipe)--> swap on the loop, join -->
 *           IDLE, or RUNNING again when again was set
 *
 * Invariants:
 *   1. The loop is the only reader and writer of keys, policy and ring; the
 *      thread builds new ones and hands them over through `done` under `mu`,
 *      then wakes the loop with one byte on the pipe.
 *   2. A part that failed to load keeps its previous value: a reload never
 *      leaves the broker with less than it had.
 *   3. No message sent to a client or written to the log contains a token.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/crypto.h>

#include "auth/jwt.h"
#include "auth/mtls.h"
#include "config.h"
#include "log.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "security.h"

#define MSG_CAP 512

/* What one load produced; a NULL part failed (msg says why) or is not configured. */
struct loaded {
    qn_jwt_keys *keys;
    qn_policy *policy;
    qn_keyring *ring;
    int keys_rc, policy_rc, ring_rc; /* QN_OK or the part's error */
    char keys_msg[MSG_CAP], policy_msg[MSG_CAP], ring_msg[MSG_CAP];
};

enum reload_state { RELOAD_IDLE, RELOAD_RUNNING };

struct qn_security {
    const struct qn_config *cfg;
    struct qn_jwt_policy jwt_policy; /* strings borrowed from cfg */
    qn_jwt_keys *keys;               /* NULL unless QUEEN_AUTH has jwt */
    qn_policy *policy;               /* NULL unless QUEEN_AUTH has mtls */
    qn_keyring *ring;                /* NULL without QUEEN_ENCRYPTION_KEYRING */
    uint64_t reloads;
    /* reload */
    enum reload_state reload;
    bool again;
    pthread_t thread;
    pthread_mutex_t mu;
    struct loaded *done; /* the thread's result, under mu, until the loop takes it */
    int pipe_r, pipe_w;
    struct event *wake;
};

/* ---------------------------------------------------------------- audit */

/* Copies s into out as a quoted log value: '"' and '\' escaped, control bytes
 * dropped, cut to fit. */
static void quoted(const char *s, char *out, size_t cap)
{
    size_t k = 0;
    if (cap < 3) {
        if (cap)
            out[0] = '\0';
        return;
    }
    out[k++] = '"';
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p && k + 3 < cap; p++) {
        if (*p < 0x20 || *p == 0x7f)
            continue;
        if (*p == '"' || *p == '\\')
            out[k++] = '\\';
        out[k++] = (char)*p;
    }
    out[k++] = '"';
    out[k] = '\0';
}

void qn_audit(const char *event, const qn_principal *p, const char *rpc_path, const char *queue,
              const char *reason)
{
    char sub[300], q[300], why[600], tenant[QN_UUID_STR_LEN] = "-";
    quoted(p ? qn_principal_sub(p) : "-", sub, sizeof sub);
    quoted(queue ? queue : "", q, sizeof q);
    quoted(reason ? reason : "", why, sizeof why);
    if (p)
        qn_uuid_format(qn_principal_tenant(p), tenant);
    const char *rpc = rpc_path ? strrchr(rpc_path, '/') : NULL;
    rpc = rpc ? rpc + 1 : (rpc_path ? rpc_path : "?");
    bool bad = strcmp(event, "denied") == 0 || strcmp(event, "unauthenticated") == 0;
    qn_log(bad ? QN_LOG_WARN : QN_LOG_INFO,
           "audit event=%s principal=%s tenant=%s rpc=%s queue=%s reason=%s", event, sub, tenant,
           rpc, q, why);
}

/* ---------------------------------------------------------------- loading */

/* Splits "[kid=]path,[kid=]path" into files of `kind` (strings point into buf,
 * a copy of list). Returns QN_OK or QN_EAUTH_CONFIG with a message. */
static int split_files(const char *list, char *buf, size_t bufcap, enum qn_jwt_source_kind kind,
                       struct qn_jwt_file *files, size_t cap, size_t *n, const char *var, char *msg,
                       size_t msgcap)
{
    size_t len = strlen(list);
    if (len + 1 > bufcap) {
        snprintf(msg, msgcap, "%s is too long", var);
        return QN_EAUTH_CONFIG;
    }
    memcpy(buf, list, len + 1);
    for (char *tok = buf, *next; tok != NULL; tok = next) {
        char *comma = strchr(tok, ',');
        next = comma ? comma + 1 : NULL;
        if (comma)
            *comma = '\0';
        while (*tok == ' ')
            tok++;
        if (*tok == '\0')
            continue;
        if (*n == cap) {
            snprintf(msg, msgcap, "%s names more than %zu files", var, cap);
            return QN_EAUTH_CONFIG;
        }
        char *eq = strchr(tok, '='), *slash = strchr(tok, '/');
        const char *kid = NULL, *path = tok;
        if (eq != NULL && (slash == NULL || eq < slash)) {
            *eq = '\0';
            kid = tok;
            path = eq + 1;
        }
        if (*path == '\0') {
            snprintf(msg, msgcap, "%s has an entry without a path", var);
            return QN_EAUTH_CONFIG;
        }
        files[(*n)++] = (struct qn_jwt_file){kind, kid, path};
    }
    return QN_OK;
}

static int load_keys(const struct qn_config *cfg, qn_jwt_keys **out, char *msg, size_t cap)
{
    char b1[4096], b2[4096];
    struct qn_jwt_file files[QN_JWT_KEYS_MAX];
    size_t n = 0;
    int rc = split_files(cfg->jwt_secret_files, b1, sizeof b1, QN_JWT_SRC_SECRET, files,
                         QN_JWT_KEYS_MAX, &n, "QUEEN_JWT_SECRET_FILES", msg, cap);
    if (rc == QN_OK)
        rc = split_files(cfg->jwt_public_key_files, b2, sizeof b2, QN_JWT_SRC_PEM, files,
                         QN_JWT_KEYS_MAX, &n, "QUEEN_JWT_PUBLIC_KEY_FILES", msg, cap);
    if (rc == QN_OK && cfg->jwt_jwks_file[0] != '\0') {
        if (n == QN_JWT_KEYS_MAX) {
            snprintf(msg, cap, "more than %u key files", QN_JWT_KEYS_MAX);
            return QN_EAUTH_CONFIG;
        }
        files[n++] = (struct qn_jwt_file){QN_JWT_SRC_JWKS, NULL, cfg->jwt_jwks_file};
    }
    if (rc != QN_OK)
        return rc;
    return qn_jwt_keys_load(files, n, out, msg, cap);
}

static int load_policy(const struct qn_config *cfg, qn_policy **out, char *msg, size_t cap)
{
    qn_policy *pol = NULL;
    int rc = qn_policy_load(cfg->mtls_policy_file, &pol, msg, cap);
    if (rc != QN_OK)
        return rc;
    if (cfg->mtls_identity[0] != '\0' && qn_policy_set_identity(pol, cfg->mtls_identity) != QN_OK) {
        qn_policy_free(pol);
        snprintf(msg, cap, "QUEEN_MTLS_IDENTITY \"%s\" is not cn, san:dns, san:uri or san:email",
                 cfg->mtls_identity);
        return QN_EAUTH_CONFIG;
    }
    *out = pol;
    return QN_OK;
}

static int load_ring(const char *path, qn_keyring **out, char *msg, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(msg, cap, "%s: cannot be opened (%s)", path, strerror(errno));
        return QN_EIO;
    }
    uint8_t *b = malloc(QN_KEYRING_TEXT_MAX + 1);
    if (b == NULL) {
        fclose(f);
        return QN_ENOMEM;
    }
    size_t n = fread(b, 1, QN_KEYRING_TEXT_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc;
    size_t line = 0;
    if (bad) {
        snprintf(msg, cap, "%s: cannot be read", path);
        rc = QN_EIO;
    } else if (n > QN_KEYRING_TEXT_MAX) {
        snprintf(msg, cap, "%s: larger than %u bytes", path, QN_KEYRING_TEXT_MAX);
        rc = QN_EKEYRING_PARSE;
    } else {
        rc = qn_keyring_parse(b, n, out, &line);
        if (rc == QN_EKEYRING_PARSE && line > 0)
            snprintf(msg, cap, "%s: line %zu is not \"<id> <64 hex digits>\" (or repeats an id)",
                     path, line);
        else if (rc == QN_EKEYRING_PARSE)
            snprintf(msg, cap, "%s: no key, or more than %u keys", path, QN_KEYRING_MAX_KEYS);
        else if (rc != QN_OK)
            snprintf(msg, cap, "%s: %s", path, qn_strerror(rc));
    }
    OPENSSL_cleanse(b, n);
    free(b);
    return rc;
}

/* Loads every configured part (blocking I/O). Never fails as a whole: each part
 * carries its own outcome. */
static void load_all(const struct qn_config *cfg, struct loaded *l)
{
    memset(l, 0, sizeof *l);
    if (cfg->auth_jwt)
        l->keys_rc = load_keys(cfg, &l->keys, l->keys_msg, sizeof l->keys_msg);
    if (cfg->auth_mtls)
        l->policy_rc = load_policy(cfg, &l->policy, l->policy_msg, sizeof l->policy_msg);
    if (cfg->encryption_keyring[0] != '\0')
        l->ring_rc = load_ring(cfg->encryption_keyring, &l->ring, l->ring_msg, sizeof l->ring_msg);
}

static void loaded_free(struct loaded *l)
{
    if (l == NULL)
        return;
    qn_jwt_keys_release(l->keys);
    qn_policy_free(l->policy);
    qn_keyring_free(l->ring);
    free(l);
}

/* Logs what is in force. */
static void log_state(const struct qn_security *s, const char *what)
{
    QN_INFO("security %s auth=%s jwt_keys=%zu policy_entries=%zu keyring_keys=%zu "
            "active_key=%s",
            what, s->cfg->auth, qn_jwt_keys_count(s->keys), qn_policy_count(s->policy),
            s->ring ? qn_keyring_count(s->ring) : (size_t)0,
            s->ring ? qn_keyring_active_id(s->ring) : "-");
}

/* ---------------------------------------------------------------- reload */

static void *reload_thread(void *arg)
{
    struct qn_security *s = arg;
    struct loaded *l = calloc(1, sizeof *l);
    if (l != NULL)
        load_all(s->cfg, l);
    pthread_mutex_lock(&s->mu);
    s->done = l; /* NULL: out of memory, nothing changes */
    pthread_mutex_unlock(&s->mu);
    char one = 1;
    ssize_t w;
    do
        w = write(s->pipe_w, &one, 1);
    while (w < 0 && errno == EINTR);
    return NULL;
}

static void reload_start(struct qn_security *s)
{
    s->again = false;
    s->reload = RELOAD_RUNNING;
    if (pthread_create(&s->thread, NULL, reload_thread, s) != 0) {
        s->reload = RELOAD_IDLE;
        QN_ERROR("security reload: cannot start a thread; nothing reloaded");
    }
}

/* The loop takes the thread's result: swap each part that loaded. */
static void on_reloaded(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct qn_security *s = arg;
    char drain[16];
    while (read(fd, drain, sizeof drain) > 0) {
    }
    if (s->reload != RELOAD_RUNNING)
        return;
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->mu);
    struct loaded *l = s->done;
    s->done = NULL;
    pthread_mutex_unlock(&s->mu);
    s->reload = RELOAD_IDLE;
    if (l == NULL) {
        QN_ERROR("security reload failed: out of memory; the previous keys stay in force");
    } else {
        if (s->cfg->auth_jwt) {
            if (l->keys_rc == QN_OK) {
                qn_jwt_keys_release(s->keys);
                s->keys = l->keys;
                l->keys = NULL;
            } else {
                QN_ERROR("security reload: JWT keys not reloaded, the previous set stays: %s",
                         l->keys_msg[0] ? l->keys_msg : qn_strerror(l->keys_rc));
            }
        }
        if (s->cfg->auth_mtls) {
            if (l->policy_rc == QN_OK) {
                qn_policy_free(s->policy);
                s->policy = l->policy;
                l->policy = NULL;
            } else {
                QN_ERROR("security reload: mTLS policy not reloaded, the previous one stays: %s",
                         l->policy_msg[0] ? l->policy_msg : qn_strerror(l->policy_rc));
            }
        }
        if (s->cfg->encryption_keyring[0] != '\0') {
            if (l->ring_rc == QN_OK) {
                qn_keyring_free(s->ring);
                s->ring = l->ring;
                l->ring = NULL;
            } else {
                QN_ERROR("security reload: key ring not reloaded, the previous one stays: %s",
                         l->ring_msg[0] ? l->ring_msg : qn_strerror(l->ring_rc));
            }
        }
        loaded_free(l);
    }
    s->reloads++;
    log_state(s, "reloaded");
    if (s->again)
        reload_start(s);
}

void qn_security_reload(struct qn_security *s)
{
    if (s == NULL)
        return;
    if (s->reload == RELOAD_RUNNING) {
        s->again = true;
        return;
    }
    QN_INFO("security reload: reading the key files again");
    reload_start(s);
}

uint64_t qn_security_reloads(const struct qn_security *s)
{
    return s->reloads;
}

/* ---------------------------------------------------------------- lifecycle */

static bool loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
           strcmp(addr, "localhost") == 0;
}

int qn_security_new(struct event_base *base, const struct qn_config *cfg, struct qn_security **out)
{
    struct qn_security *s = calloc(1, sizeof *s);
    if (s == NULL)
        return QN_ENOMEM;
    s->cfg = cfg;
    s->pipe_r = s->pipe_w = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->jwt_policy = (struct qn_jwt_policy){
        .issuer = cfg->jwt_issuer[0] ? cfg->jwt_issuer : NULL,
        .audience = cfg->jwt_audience[0] ? cfg->jwt_audience : NULL,
        .clock_skew_s = (unsigned)cfg->jwt_clock_skew_s,
        .require_exp = cfg->jwt_require_exp,
        .tenant_claim = cfg->jwt_tenant_claim,
        .allow_default_tenant = cfg->auth_default_tenant,
        .scopes_claim = cfg->jwt_scopes_claim,
    };
    struct loaded l;
    load_all(cfg, &l);
    int rc = QN_OK;
    if (cfg->auth_jwt && l.keys_rc != QN_OK) {
        QN_ERROR("cannot load the JWT keys: %s",
                 l.keys_msg[0] ? l.keys_msg : qn_strerror(l.keys_rc));
        rc = l.keys_rc;
    } else if (cfg->auth_mtls && l.policy_rc != QN_OK) {
        QN_ERROR("cannot load QUEEN_MTLS_POLICY_FILE: %s",
                 l.policy_msg[0] ? l.policy_msg : qn_strerror(l.policy_rc));
        rc = l.policy_rc;
    } else if (cfg->encryption_keyring[0] != '\0' && l.ring_rc != QN_OK) {
        QN_ERROR("cannot load QUEEN_ENCRYPTION_KEYRING: %s",
                 l.ring_msg[0] ? l.ring_msg : qn_strerror(l.ring_rc));
        rc = l.ring_rc;
    }
    s->keys = l.keys;
    s->policy = l.policy;
    s->ring = l.ring;
    int fds[2];
    if (rc == QN_OK && pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        QN_ERROR("cannot make the reload pipe: %s", strerror(errno));
        rc = QN_EIO;
    } else if (rc == QN_OK) {
        s->pipe_r = fds[0];
        s->pipe_w = fds[1];
        s->wake = event_new(base, s->pipe_r, EV_READ | EV_PERSIST, on_reloaded, s);
        if (s->wake == NULL || event_add(s->wake, NULL) != 0)
            rc = QN_ENOMEM;
    }
    if (rc != QN_OK) {
        qn_security_free(s);
        return rc;
    }
    if (!cfg->auth_jwt && !cfg->auth_mtls && !loopback(cfg->bind_addr))
        QN_WARN("QUEEN_AUTH=none on %s, which is not a loopback address: anyone who reaches the "
                "port can read, write and delete every queue (set QUEEN_AUTH, see README "
                "\"Security\")",
                cfg->bind_addr);
    log_state(s, "loaded");
    *out = s;
    return QN_OK;
}

void qn_security_free(struct qn_security *s)
{
    if (s == NULL)
        return;
    if (s->reload == RELOAD_RUNNING) {
        pthread_join(s->thread, NULL);
        loaded_free(s->done);
    }
    if (s->wake)
        event_free(s->wake);
    if (s->pipe_r >= 0)
        close(s->pipe_r);
    if (s->pipe_w >= 0)
        close(s->pipe_w);
    pthread_mutex_destroy(&s->mu);
    qn_jwt_keys_release(s->keys);
    qn_policy_free(s->policy);
    qn_keyring_free(s->ring);
    free(s);
}

bool qn_security_auth_on(const struct qn_security *s)
{
    return s != NULL && (s->cfg->auth_jwt || s->cfg->auth_mtls);
}

const qn_keyring *qn_security_keyring(const struct qn_security *s)
{
    return s ? s->ring : NULL;
}

/* ---------------------------------------------------------------- the gate */

static void principal_free(void *p)
{
    qn_principal_free(p);
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static enum qn_grpc_code refuse(qn_call *call, char *msg, size_t cap, const char *fmt,
                                const char *detail)
{
    snprintf(msg, cap, fmt, detail);
    const struct qn_method *m = qn_call_method(call);
    char why[MSG_CAP + 80];
    snprintf(why, sizeof why, "%s (peer %s)", msg, qn_call_peer(call));
    qn_audit("unauthenticated", NULL, m ? m->path : "?", "", why);
    return QN_GRPC_UNAUTHENTICATED;
}

enum qn_grpc_code qn_security_gate(void *ud, qn_call *call, char *msg, size_t cap)
{
    struct qn_security *s = ud;
    const struct qn_config *cfg = s->cfg;
    if (!cfg->auth_jwt && !cfg->auth_mtls)
        return QN_GRPC_OK;
    const char *path = qn_call_method(call)->path;
    if ((cfg->auth_open_health && has_prefix(path, "/grpc.health.v1.Health/")) ||
        (cfg->auth_open_reflection && has_prefix(path, "/grpc.reflection.")))
        return QN_GRPC_OK;
    char why[MSG_CAP] = "";
    qn_principal *p = NULL;
    const char *hdr = cfg->auth_jwt ? qn_call_header(call, "authorization") : NULL;
    if (hdr != NULL) {
        const char *token;
        size_t tlen;
        if (qn_auth_bearer(hdr, strlen(hdr), &token, &tlen) != QN_OK)
            return refuse(call, msg, cap, "%s",
                          "the authorization metadata is not \"Bearer <token>\"");
        int rc = qn_jwt_verify(s->keys, &s->jwt_policy, token, tlen, (int64_t)time(NULL), &p, why,
                               sizeof why);
        if (rc != QN_OK)
            return refuse(call, msg, cap, "invalid bearer token: %s",
                          why[0] ? why : qn_strerror(rc));
    } else if (cfg->auth_mtls && qn_call_peer_cert(call) != NULL) {
        int rc = qn_mtls_principal(s->policy, qn_call_peer_cert(call), &p, why, sizeof why);
        if (rc != QN_OK)
            return refuse(call, msg, cap, "client certificate refused: %s",
                          why[0] ? why : qn_strerror(rc));
    } else {
        return refuse(call, msg, cap, "%s",
                      cfg->auth_jwt && cfg->auth_mtls
                          ? "missing credentials: send the metadata \"authorization: Bearer "
                            "<token>\" or connect over TLS with a client certificate"
                      : cfg->auth_jwt ? "missing credentials: send the metadata \"authorization: "
                                        "Bearer <token>\""
                                      : "missing credentials: connect over TLS with a client "
                                        "certificate");
    }
    qn_call_set_auth(call, p, principal_free);
    return QN_GRPC_OK;
}
