/*
 * config.c - the configuration table and its parser (see config.h).
 *
 * Does: parse integers with strtoll and full-string checks, booleans from
 * true/false/1/0/yes/no/on/off (case-insensitive), bounds checks, defaults.
 * Does not: read files, or accept a value it cannot parse (boot fails instead
 * of silently using a default).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"
#include "queen/error.h"

#define OFF(f) offsetof(struct qn_config, f)
#define KIB 1024LL
#define MIB (1024LL * 1024LL)

const struct qn_config_var qn_config_vars[] = {
    {"QUEEN_DATABASE_URL", QN_CFG_STRING, "", 0, 0, OFF(database_url),
     "libpq connection string or URL of the PostgreSQL database"},
    {"QUEEN_DB_POOL_SIZE", QN_CFG_INT, "4", 1, 256, OFF(db_pool_size),
     "database connections of the broker's pool"},
    {"QUEEN_STMT_TIMEOUT_MS", QN_CFG_INT, "30000", 100, 3600000, OFF(stmt_timeout_ms),
     "statement timeout of every database call"},
    {"QUEEN_BIND_ADDR", QN_CFG_STRING, "0.0.0.0", 0, 0, OFF(bind_addr),
     "address the listeners bind to"},
    {"QUEEN_PORT", QN_CFG_INT, "6632", 0, 65535, OFF(port),
     "plain HTTP/2 (h2c) gRPC port; 0 binds any free port (see QUEEN_PORT_FILE)"},
    {"QUEEN_H2C", QN_CFG_BOOL, "true", 0, 0, OFF(h2c),
     "serve plain HTTP/2 (h2c) on QUEEN_PORT; false leaves only the TLS listener"},
    {"QUEEN_TLS_PORT", QN_CFG_INT, "6643", 0, 65535, OFF(tls_port),
     "TLS gRPC port, used when QUEEN_TLS_CERT and QUEEN_TLS_KEY are set; 0 binds any free port"},
    {"QUEEN_PORT_FILE", QN_CFG_STRING, "", 0, 0, OFF(port_file),
     "when set, the broker writes \"port=N\", \"tls_port=N\" and \"http_port=N\" lines here once "
     "listening"},
    {"QUEEN_TLS_CERT", QN_CFG_STRING, "", 0, 0, OFF(tls_cert),
     "PEM certificate chain file for the TLS listener"},
    {"QUEEN_TLS_KEY", QN_CFG_STRING, "", 0, 0, OFF(tls_key),
     "PEM private key file for the TLS listener"},
    {"QUEEN_TLS_CLIENT_CA", QN_CFG_STRING, "", 0, 0, OFF(tls_client_ca),
     "PEM CA file; when set, TLS clients must present a certificate it signed"},
    {"QUEEN_MAX_CONNECTIONS", QN_CFG_INT, "1024", 1, 1000000, OFF(max_connections),
     "open client connections; more are refused"},
    {"QUEEN_MAX_CONCURRENT_STREAMS", QN_CFG_INT, "256", 1, 100000, OFF(max_concurrent_streams),
     "HTTP/2 streams (calls) a connection may have open at once"},
    {"QUEEN_IDLE_TIMEOUT_MS", QN_CFG_INT, "300000", 1000, 86400000, OFF(idle_timeout_ms),
     "a connection with no open call and no traffic for this long is closed"},
    {"QUEEN_KEEPALIVE_MS", QN_CFG_INT, "30000", 100, 3600000, OFF(keepalive_ms),
     "PING interval on connections with open streams; two unanswered PINGs close it"},
    {"QUEEN_SHUTDOWN_TIMEOUT_MS", QN_CFG_INT, "10000", 0, 600000, OFF(shutdown_timeout_ms),
     "on SIGTERM/SIGINT, longest wait for in-flight calls before exit"},
    {"QUEEN_MAX_RECV_BYTES", QN_CFG_INT, "4194304", 1024, 256 * MIB, OFF(max_recv_bytes),
     "largest gRPC request message accepted (RESOURCE_EXHAUSTED past it)"},
    {"QUEEN_MAX_CONN_RECV_BYTES", QN_CFG_INT, "67108864", 1024, 4096 * MIB,
     OFF(max_conn_recv_bytes),
     "bytes of unfinished request messages one connection may hold (at least "
     "QUEEN_MAX_RECV_BYTES)"},
    {"QUEEN_MAX_SEND_BYTES", QN_CFG_INT, "4128768", 64 * KIB, 256 * MIB, OFF(max_send_bytes),
     "largest response message produced (pop/consume/fetch batches are cut to fit)"},
    {"QUEEN_MAX_PAYLOAD_BYTES", QN_CFG_INT, "1048576", 1, 64 * MIB, OFF(max_payload_bytes),
     "largest payload of one message"},
    {"QUEEN_MAX_PUSH_ITEMS", QN_CFG_INT, "10000", 1, 1000000, OFF(max_push_items),
     "most items in one Push, Ack or Transact request"},
    {"QUEEN_MAX_POP_BATCH", QN_CFG_INT, "10000", 1, 1000000, OFF(max_pop_batch),
     "most messages one Pop or Consume batch may ask for"},
    {"QUEEN_MAX_POP_WAIT_MS", QN_CFG_INT, "60000", 0, 3600000, OFF(max_pop_wait_ms),
     "longest wait_ms a Pop may ask for"},
    {"QUEEN_MAX_PARKED_POPS", QN_CFG_INT, "10000", 0, 10000000, OFF(max_parked_pops),
     "pops waiting for data at once (RESOURCE_EXHAUSTED past it)"},
    {"QUEEN_MAX_STREAMS", QN_CFG_INT, "10000", 0, 10000000, OFF(max_streams),
     "open Consume and Watch streams at once (RESOURCE_EXHAUSTED past it)"},
    {"QUEEN_SEGMENT_RAW_MAX", QN_CFG_INT, "67108864", 64 * KIB, 1024 * MIB, OFF(segment_raw_max),
     "largest decompressed segment the broker will read (a larger one is corrupt)"},
    /* ---- hostile clients (netrobust): what a connection may hold, and for how long */
    {"QUEEN_MAX_CONN_SEND_BYTES", QN_CFG_INT, "33554432", 64 * KIB, 64LL * 1024 * MIB,
     OFF(max_conn_send_bytes),
     "response bytes one connection may hold unread; past it reads stop for it and new calls get "
     "RESOURCE_EXHAUSTED (at least QUEEN_MAX_SEND_BYTES)"},
    {"QUEEN_MAX_SEND_BUFFER_BYTES", QN_CFG_INT, "268435456", 64 * KIB, 1024LL * 1024 * MIB,
     OFF(max_send_buffer_bytes),
     "response bytes all connections together may hold unread (at least "
     "QUEEN_MAX_CONN_SEND_BYTES)"},
    {"QUEEN_CONN_SEND_HARD_BYTES", QN_CFG_INT, "67108864", 64 * KIB, 64LL * 1024 * MIB,
     OFF(conn_send_hard_bytes),
     "a connection holding this many unread response bytes is closed at once (at least "
     "QUEEN_MAX_CONN_SEND_BYTES)"},
    {"QUEEN_CONN_SEND_SOFT_BYTES", QN_CFG_INT, "16777216", 64 * KIB, 64LL * 1024 * MIB,
     OFF(conn_send_soft_bytes),
     "a connection holding this many unread response bytes for QUEEN_CONN_SEND_SOFT_MS is closed"},
    {"QUEEN_CONN_SEND_SOFT_MS", QN_CFG_INT, "30000", 0, 86400000, OFF(conn_send_soft_ms),
     "how long a connection may stay at or above QUEEN_CONN_SEND_SOFT_BYTES; 0 never closes it"},
    {"QUEEN_MAX_RECV_BUFFER_BYTES", QN_CFG_INT, "268435456", 1024, 1024LL * 1024 * MIB,
     OFF(max_recv_buffer_bytes),
     "bytes of unfinished request messages all connections together may hold (at least "
     "QUEEN_MAX_RECV_BYTES)"},
    {"QUEEN_PREFACE_TIMEOUT_MS", QN_CFG_INT, "10000", 100, 600000, OFF(preface_timeout_ms),
     "a connection must complete the HTTP/2 preface (and its SETTINGS) this soon after it is "
     "accepted (after the TLS handshake on the TLS port)"},
    {"QUEEN_TLS_HANDSHAKE_TIMEOUT_MS", QN_CFG_INT, "10000", 100, 600000,
     OFF(tls_handshake_timeout_ms), "a TLS connection must complete its handshake this soon"},
    {"QUEEN_MAX_CONNECTIONS_PER_PEER", QN_CFG_INT, "256", 0, 1000000, OFF(max_conns_per_peer),
     "open connections from one client IP address; more are refused (0: no cap)"},
    {"QUEEN_V2_ZSTD_LEVEL", QN_CFG_INT, "3", 1, 19, OFF(zstd_level),
     "zstd compression level of segments"},
    {"QUEEN_V2_BUNDLE_MAX", QN_CFG_INT, "16", 1, 256, OFF(bundle_max),
     "most partitions one push commit carries"},
    {"QUEEN_PUSH_LANE_MS", QN_CFG_INT, "25", 0, 60000, OFF(push_lane_ms),
     "a loop sends one push commit at a time (what arrives meanwhile leaves together in the "
     "next), plus one more for each in flight this long and when a full one waits, up to 4; "
     "0: up to 4 at once"},
    {"QUEEN_DEDUP_CACHE", QN_CFG_BOOL, "true", 0, 0, OFF(dedup_cache),
     "broker cache that narrows the SQL dedup probe (never decides a verdict)"},
    {"QUEEN_DEDUP_CACHE_MB", QN_CFG_INT, "512", 1, 1048576, OFF(dedup_cache_mb),
     "memory budget of the dedup cache"},
    {"QUEEN_WAKE_RECHECK_MS", QN_CFG_INT, "1000", 50, 60000, OFF(wake_recheck_ms),
     "a parked pop re-checks the database at least this often (cross-broker fallback)"},
    {"QUEEN_POP_SCAN_REUSE_MS", QN_CFG_INT, "100", 0, 60000, OFF(pop_scan_reuse_ms),
     "a new Pop waits for news without scanning every partition when its group's last scan "
     "came back empty this recently and every commit since reached a consumer, or leases in a "
     "partition whose commit or release this recent reached no consumer; 0: always scan"},
    /* consume fusion: bundled leases and acks (engine/cfusion.h) */
    {"QUEEN_LEASE_BUNDLE", QN_CFG_BOOL, "true", 0, 0, OFF(lease_bundle),
     "pops by partition id woken in one loop turn lease through one pop_bundle_v1 call"},
    {"QUEEN_ACK_BUNDLE", QN_CFG_BOOL, "true", 0, 0, OFF(ack_bundle),
     "acks of every call and stream go out as one ack_bundle_v1 call at a time (single flight)"},
    {"RETENTION_INTERVAL", QN_CFG_INT, "5000", 100, 86400000, OFF(retention_interval_ms),
     "milliseconds between maintenance cycles"},
    {"RETENTION_BATCH_SIZE", QN_CFG_INT, "1000", 1, 1000000, OFF(retention_batch_size),
     "rows one maintenance step deletes at most"},
    {"QUEEN_PARTITION_CLEANUP_ENABLED", QN_CFG_BOOL, "true", 0, 0, OFF(partition_cleanup_enabled),
     "delete partitions empty and idle for PARTITION_CLEANUP_DAYS"},
    {"PARTITION_CLEANUP_DAYS", QN_CFG_INT, "30", 1, 36500, OFF(partition_cleanup_days),
     "idle days before an empty partition is deleted"},
    {"METRICS_RETENTION_DAYS", QN_CFG_INT, "90", 1, 36500, OFF(metrics_retention_days),
     "days of retention history kept"},
    {"QUEEN_LOG_LEVEL", QN_CFG_STRING, "info", 0, 0, OFF(log_level), "debug, info, warn or error"},
    /* database faults (hung connections, write lanes, starting without the
     * database, database calls per client connection); defaults and bounds are
     * the storage module's (queen/store.h) */
    {"QUEEN_DB_WRITE_RESERVE", QN_CFG_INT, "-1", -1, 255, OFF(db_write_reserve),
     "pool connections only writes use (below QUEEN_DB_POOL_SIZE); -1 = a quarter of the pool "
     "(1 for a pool of 2 or 3)"},
    {"QUEEN_DB_CALL_TIMEOUT_MS", QN_CFG_INT, "0", 0, 3600000, OFF(db_call_timeout_ms),
     "a database connection silent this long with a call in flight is declared hung and closed; "
     "0 = QUEEN_STMT_TIMEOUT_MS + 5000"},
    {"QUEEN_DB_CANCEL_GRACE_MS", QN_CFG_INT, "2000", 1, 3600000, OFF(db_cancel_grace_ms),
     "a database connection that does not answer a cancel within this is declared hung"},
    {"QUEEN_DB_KEEPALIVE_IDLE_S", QN_CFG_INT, "10", 0, 86400, OFF(db_keepalive_idle_s),
     "TCP keepalive idle time of database connections; 0 turns keepalives off"},
    {"QUEEN_DB_KEEPALIVE_INTERVAL_S", QN_CFG_INT, "5", 1, 3600, OFF(db_keepalive_interval_s),
     "seconds between unanswered TCP keepalive probes"},
    {"QUEEN_DB_KEEPALIVE_COUNT", QN_CFG_INT, "3", 1, 1000, OFF(db_keepalive_count),
     "unanswered keepalive probes before the kernel drops a database connection"},
    {"QUEEN_DB_TCP_USER_TIMEOUT_MS", QN_CFG_INT, "20000", 0, 3600000, OFF(db_tcp_user_timeout_ms),
     "unacknowledged data older than this drops a database connection; 0 = the system's"},
    {"QUEEN_DB_START_RETRY_MAX_MS", QN_CFG_INT, "5000", 100, 600000, OFF(db_start_retry_max_ms),
     "longest wait between attempts to reach the database and apply the schema at start"},
    {"QUEEN_MAX_CONN_DB_CALLS", QN_CFG_INT, "64", 1, 100000, OFF(max_conn_db_calls),
     "calls of one client connection running on the database at once; its further calls wait "
     "in the broker, in arrival order, until one ends"},
    /* ---- HTTP side port (metrics, health, web console, gRPC-Web), metrics, log format */
    {"QUEEN_HTTP_PORT", QN_CFG_INT, "6680", -1, 65535, OFF(http_port),
     "HTTP/1.1 side port: /metrics, /healthz, /readyz, the web console and gRPC-Web; 0 binds any "
     "free port, -1 turns it off"},
    {"QUEEN_HTTP_BIND_ADDR", QN_CFG_STRING, "", 0, 0, OFF(http_bind_addr),
     "address the HTTP side port binds to; empty: QUEEN_BIND_ADDR"},
    {"QUEEN_HTTP_MAX_CONNECTIONS", QN_CFG_INT, "256", 1, 100000, OFF(http_max_connections),
     "open connections on the HTTP side port; more are refused"},
    {"QUEEN_HTTP_IDLE_TIMEOUT_MS", QN_CFG_INT, "60000", 1000, 86400000, OFF(http_idle_timeout_ms),
     "an HTTP connection with no request in progress for this long after its last complete "
     "request is closed (the first request must come within QUEEN_PREFACE_TIMEOUT_MS; the "
     "per-peer cap and the output limits apply as on the gRPC port)"},
    {"QUEEN_HTTP_REQUEST_TIMEOUT_MS", QN_CFG_INT, "30000", 100, 3600000,
     OFF(http_request_timeout_ms),
     "an HTTP request's head and body must arrive within this long (408 past it)"},
    {"QUEEN_HTTP_MAX_HEADER_BYTES", QN_CFG_INT, "16384", 1024, 1048576, OFF(http_max_header_bytes),
     "largest HTTP request head, request line and header fields (431 past it; gRPC-Web bodies are "
     "bounded by QUEEN_MAX_RECV_BYTES, 413 past it)"},
    {"QUEEN_HTTP_CONSOLE", QN_CFG_BOOL, "true", 0, 0, OFF(http_console),
     "serve the web console at / on the HTTP side port"},
    {"QUEEN_METRICS_MAX_QUEUES", QN_CFG_INT, "100", 0, 10000, OFF(metrics_max_queues),
     "queues with per-queue metrics (the deepest; see docs/metrics.md); 0 turns them off"},
    {"QUEEN_METRICS_MAX_GROUPS", QN_CFG_INT, "500", 0, 100000, OFF(metrics_max_groups),
     "(queue, consumer group) lag series, the largest lags of those queues"},
    {"QUEEN_METRICS_REFRESH_MS", QN_CFG_INT, "15000", 1000, 3600000, OFF(metrics_refresh_ms),
     "period of the per-queue metrics refresh (two database reads, never one per scrape; the "
     "stats walk behind it pauses twenty times as long as each step took)"},
    {"QUEEN_LOG_FORMAT", QN_CFG_STRING, "text", 0, 0, OFF(log_format),
     "text (one line per event, key=value fields) or json (one JSON object per line)"},
    /* ---- security: authentication, authorization, tenants, encryption at rest
     * (w2c-auth; README "Security") */
    {"QUEEN_AUTH", QN_CFG_STRING, "none", 0, 0, OFF(auth),
     "none, jwt, mtls or jwt,mtls: how calls are authenticated (jwt,mtls accepts either)"},
    {"QUEEN_AUTH_OPEN_HEALTH", QN_CFG_BOOL, "true", 0, 0, OFF(auth_open_health),
     "grpc.health.v1.Health answers without credentials"},
    {"QUEEN_AUTH_OPEN_REFLECTION", QN_CFG_BOOL, "true", 0, 0, OFF(auth_open_reflection),
     "server reflection answers without credentials"},
    {"QUEEN_AUTH_DEFAULT_TENANT", QN_CFG_BOOL, "true", 0, 0, OFF(auth_default_tenant),
     "a token without the tenant claim acts in the default tenant; false refuses it"},
    {"QUEEN_JWT_SECRET_FILES", QN_CFG_STRING, "", 0, 0, OFF(jwt_secret_files),
     "HS256 secret files, comma-separated, each [kid=]path (at least 32 bytes each)"},
    {"QUEEN_JWT_PUBLIC_KEY_FILES", QN_CFG_STRING, "", 0, 0, OFF(jwt_public_key_files),
     "PEM public keys (RSA >= 2048 bits: RS256; EC P-256: ES256), comma-separated, each "
     "[kid=]path"},
    {"QUEEN_JWT_JWKS_FILE", QN_CFG_STRING, "", 0, 0, OFF(jwt_jwks_file),
     "JWKS file; a token's kid picks its key"},
    {"QUEEN_JWT_ISSUER", QN_CFG_STRING, "", 0, 0, OFF(jwt_issuer),
     "when set, a token's iss must equal it"},
    {"QUEEN_JWT_AUDIENCE", QN_CFG_STRING, "", 0, 0, OFF(jwt_audience),
     "when set, a token's aud must contain it"},
    {"QUEEN_JWT_CLOCK_SKEW_S", QN_CFG_INT, "30", 0, 600, OFF(jwt_clock_skew_s),
     "seconds of clock skew allowed on exp, nbf and iat"},
    {"QUEEN_JWT_REQUIRE_EXP", QN_CFG_BOOL, "true", 0, 0, OFF(jwt_require_exp),
     "refuse tokens without an exp claim"},
    {"QUEEN_JWT_TENANT_CLAIM", QN_CFG_STRING, "tenant", 0, 0, OFF(jwt_tenant_claim),
     "claim holding the tenant (a UUID)"},
    {"QUEEN_JWT_SCOPES_CLAIM", QN_CFG_STRING, "scopes", 0, 0, OFF(jwt_scopes_claim),
     "claim holding the grants (array, or space-separated string, of scope:pattern)"},
    {"QUEEN_MTLS_POLICY_FILE", QN_CFG_STRING, "", 0, 0, OFF(mtls_policy_file),
     "JSON policy giving client-certificate principals their tenant and grants"},
    {"QUEEN_MTLS_IDENTITY", QN_CFG_STRING, "", 0, 0, OFF(mtls_identity),
     "cn, san:dns, san:uri or san:email: the certificate part naming the principal (empty: "
     "the policy file's)"},
    {"QUEEN_ENCRYPTION_KEYRING", QN_CFG_STRING, "", 0, 0, OFF(encryption_keyring),
     "key ring file for queues with encryption_enabled (last key encrypts, all decrypt)"},
    /* ---- workers: event loops (threads) and the inboxes between them */
    {"QUEEN_WORKERS", QN_CFG_INT, "0", 0, QN_MAX_WORKERS, OFF(workers),
     "event loops (threads), each with its own connections and its share of QUEEN_DB_POOL_SIZE "
     "and QUEEN_DEDUP_CACHE_MB; 0 = the number of online cores; 1 = one loop, no threads"},
    {"QUEEN_WORKER_INBOX", QN_CFG_INT, "8192", 16, 1048576, OFF(worker_inbox),
     "messages one loop's inbox holds (work from other loops); a full inbox is back-pressure"},
    {"QUEEN_OFFLOAD_THREADS", QN_CFG_INT, "1", 0, 64, OFF(offload_threads),
     "threads that pack large segments and decompress large read batches "
     "(QUEEN_OFFLOAD_MIN_BYTES) off the event loops, so that a big push or read does not stall "
     "the other calls of its loop; 0 = all on the loops"},
    {"QUEEN_OFFLOAD_MIN_BYTES", QN_CFG_INT, "262144", 1024, 1024LL * MIB, OFF(offload_min_bytes),
     "raw bytes from which a segment is packed (an eighth of it at QUEEN_V2_ZSTD_LEVEL 10 and "
     "above), or a Pop, Consume or Fetch batch decompressed, by an offload thread"},
    {NULL, QN_CFG_INT, NULL, 0, 0, 0, NULL},
};

static const char *env_get(const char *name, void *ud)
{
    (void)ud;
    return getenv(name);
}

static int parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"true", "1", "yes", "on"};
    static const char *no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return QN_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return QN_OK;
        }
    }
    return QN_EINVAL;
}

static int parse_int(const char *s, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return QN_EINVAL;
    *out = v;
    return QN_OK;
}

/* The security block's combinations (w2c-auth). */
static int check_security(struct qn_config *cfg, char *err, size_t errcap)
{
    static const char *const modes[] = {"none", "jwt", "mtls", "jwt,mtls", "mtls,jwt"};
    bool ok = false;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        ok |= strcmp(cfg->auth, modes[i]) == 0;
    if (!ok) {
        snprintf(err, errcap, "QUEEN_AUTH: expected none, jwt, mtls or jwt,mtls, got \"%s\"",
                 cfg->auth);
        return QN_EINVAL;
    }
    cfg->auth_jwt = strstr(cfg->auth, "jwt") != NULL;
    cfg->auth_mtls = strstr(cfg->auth, "mtls") != NULL;
    if (cfg->auth_jwt && !cfg->jwt_secret_files[0] && !cfg->jwt_public_key_files[0] &&
        !cfg->jwt_jwks_file[0]) {
        snprintf(err, errcap,
                 "QUEEN_AUTH=%s needs a key: QUEEN_JWT_SECRET_FILES, QUEEN_JWT_PUBLIC_KEY_FILES "
                 "or QUEEN_JWT_JWKS_FILE",
                 cfg->auth);
        return QN_EINVAL;
    }
    if (cfg->auth_mtls && (!cfg->tls_cert[0] || !cfg->tls_client_ca[0])) {
        snprintf(err, errcap,
                 "QUEEN_AUTH=%s needs the TLS listener with client certificates: "
                 "QUEEN_TLS_CERT, QUEEN_TLS_KEY and QUEEN_TLS_CLIENT_CA",
                 cfg->auth);
        return QN_EINVAL;
    }
    if (cfg->auth_mtls && !cfg->mtls_policy_file[0]) {
        snprintf(err, errcap, "QUEEN_AUTH=%s needs QUEEN_MTLS_POLICY_FILE", cfg->auth);
        return QN_EINVAL;
    }
    static const char *const ids[] = {"", "cn", "san:dns", "san:uri", "san:email"};
    ok = false;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        ok |= strcmp(cfg->mtls_identity, ids[i]) == 0;
    if (!ok) {
        snprintf(err, errcap,
                 "QUEEN_MTLS_IDENTITY: expected cn, san:dns, san:uri or san:email, got \"%s\"",
                 cfg->mtls_identity);
        return QN_EINVAL;
    }
    if (!cfg->jwt_tenant_claim[0] || !cfg->jwt_scopes_claim[0] ||
        strcmp(cfg->jwt_tenant_claim, cfg->jwt_scopes_claim) == 0) {
        snprintf(err, errcap,
                 "QUEEN_JWT_TENANT_CLAIM and QUEEN_JWT_SCOPES_CLAIM must be two different names");
        return QN_EINVAL;
    }
    return QN_OK;
}

int qn_config_load_from(struct qn_config *cfg, const char *(*get)(const char *name, void *ud),
                        void *ud, char *err, size_t errcap)
{
    memset(cfg, 0, sizeof *cfg);
    for (const struct qn_config_var *v = qn_config_vars; v->name; v++) {
        const char *s = get(v->name, ud);
        if (s == NULL || *s == '\0')
            s = v->def;
        char *field = (char *)cfg + v->offset;
        switch (v->type) {
        case QN_CFG_STRING: {
            char *copy = strdup(s);
            if (copy == NULL) {
                snprintf(err, errcap, "out of memory");
                return QN_ENOMEM;
            }
            memcpy(field, &copy, sizeof copy);
            break;
        }
        case QN_CFG_BOOL: {
            bool b;
            if (parse_bool(s, &b) != QN_OK) {
                snprintf(err, errcap, "%s: expected true or false, got \"%s\"", v->name, s);
                return QN_EINVAL;
            }
            memcpy(field, &b, sizeof b);
            break;
        }
        case QN_CFG_INT: {
            int64_t n;
            if (parse_int(s, &n) != QN_OK) {
                snprintf(err, errcap, "%s: expected an integer, got \"%s\"", v->name, s);
                return QN_EINVAL;
            }
            if (n < v->min || n > v->max) {
                snprintf(err, errcap, "%s: %lld is outside %lld..%lld", v->name, (long long)n,
                         (long long)v->min, (long long)v->max);
                return QN_EINVAL;
            }
            memcpy(field, &n, sizeof n);
            break;
        }
        }
    }
    if (strcmp(cfg->log_level, "debug") != 0 && strcmp(cfg->log_level, "info") != 0 &&
        strcmp(cfg->log_level, "warn") != 0 && strcmp(cfg->log_level, "error") != 0) {
        snprintf(err, errcap, "QUEEN_LOG_LEVEL: expected debug, info, warn or error, got \"%s\"",
                 cfg->log_level);
        return QN_EINVAL;
    }
    if (strcmp(cfg->log_format, "text") != 0 && strcmp(cfg->log_format, "json") != 0) {
        snprintf(err, errcap, "QUEEN_LOG_FORMAT: expected text or json, got \"%s\"",
                 cfg->log_format);
        return QN_EINVAL;
    }
    /* One message must always fit what the broker can read back and send: its
     * payload plus a transaction id and producer sub of up to 64 KiB each and the
     * envelope. */
    const int64_t frame_slack = 2 * 65535 + 4096;
    if (cfg->max_send_bytes < cfg->max_payload_bytes + frame_slack) {
        snprintf(err, errcap,
                 "QUEEN_MAX_SEND_BYTES (%lld) must exceed QUEEN_MAX_PAYLOAD_BYTES (%lld) by at "
                 "least %lld, or a message could never be delivered",
                 (long long)cfg->max_send_bytes, (long long)cfg->max_payload_bytes,
                 (long long)frame_slack);
        return QN_EINVAL;
    }
    if (cfg->segment_raw_max < cfg->max_payload_bytes + frame_slack) {
        snprintf(err, errcap,
                 "QUEEN_SEGMENT_RAW_MAX (%lld) must exceed QUEEN_MAX_PAYLOAD_BYTES (%lld) by at "
                 "least %lld, or a stored message could never be read",
                 (long long)cfg->segment_raw_max, (long long)cfg->max_payload_bytes,
                 (long long)frame_slack);
        return QN_EINVAL;
    }
    if (cfg->max_conn_recv_bytes < cfg->max_recv_bytes) {
        snprintf(err, errcap,
                 "QUEEN_MAX_CONN_RECV_BYTES (%lld) must be at least QUEEN_MAX_RECV_BYTES (%lld)",
                 (long long)cfg->max_conn_recv_bytes, (long long)cfg->max_recv_bytes);
        return QN_EINVAL;
    }
    /* hostile clients (netrobust) */
    if (cfg->max_conn_send_bytes < cfg->max_send_bytes) {
        snprintf(err, errcap,
                 "QUEEN_MAX_CONN_SEND_BYTES (%lld) must be at least QUEEN_MAX_SEND_BYTES (%lld)",
                 (long long)cfg->max_conn_send_bytes, (long long)cfg->max_send_bytes);
        return QN_EINVAL;
    }
    if (cfg->max_send_buffer_bytes < cfg->max_conn_send_bytes) {
        snprintf(err, errcap,
                 "QUEEN_MAX_SEND_BUFFER_BYTES (%lld) must be at least QUEEN_MAX_CONN_SEND_BYTES "
                 "(%lld)",
                 (long long)cfg->max_send_buffer_bytes, (long long)cfg->max_conn_send_bytes);
        return QN_EINVAL;
    }
    if (cfg->conn_send_hard_bytes < cfg->max_conn_send_bytes) {
        snprintf(err, errcap,
                 "QUEEN_CONN_SEND_HARD_BYTES (%lld) must be at least QUEEN_MAX_CONN_SEND_BYTES "
                 "(%lld)",
                 (long long)cfg->conn_send_hard_bytes, (long long)cfg->max_conn_send_bytes);
        return QN_EINVAL;
    }
    if (cfg->max_recv_buffer_bytes < cfg->max_recv_bytes) {
        snprintf(err, errcap,
                 "QUEEN_MAX_RECV_BUFFER_BYTES (%lld) must be at least QUEEN_MAX_RECV_BYTES (%lld)",
                 (long long)cfg->max_recv_buffer_bytes, (long long)cfg->max_recv_bytes);
        return QN_EINVAL;
    }
    /* database faults (dbrobust) */
    if (cfg->db_write_reserve >= cfg->db_pool_size) {
        snprintf(err, errcap,
                 "QUEEN_DB_WRITE_RESERVE (%lld) must be below QUEEN_DB_POOL_SIZE (%lld): reads "
                 "need a connection too",
                 (long long)cfg->db_write_reserve, (long long)cfg->db_pool_size);
        return QN_EINVAL;
    }
    if ((cfg->tls_cert[0] != '\0') != (cfg->tls_key[0] != '\0')) {
        snprintf(err, errcap, "QUEEN_TLS_CERT and QUEEN_TLS_KEY must be set together");
        return QN_EINVAL;
    }
    if (cfg->workers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->workers = n < 1 ? 1 : n > QN_MAX_WORKERS ? QN_MAX_WORKERS : n;
    }
    return check_security(cfg, err, errcap);
}

int qn_config_load(struct qn_config *cfg, char *err, size_t errcap)
{
    return qn_config_load_from(cfg, env_get, NULL, err, errcap);
}

void qn_config_free(struct qn_config *cfg)
{
    if (cfg == NULL)
        return;
    for (const struct qn_config_var *v = qn_config_vars; v->name; v++) {
        if (v->type == QN_CFG_STRING) {
            char **p = (char **)((char *)cfg + v->offset);
            free(*p);
            *p = NULL;
        }
    }
}

/* Masks "password=..." and "user:password@" in a conninfo for printing. */
static void print_masked_url(FILE *out, const char *url)
{
    const char *at = strchr(url, '@');
    const char *scheme = strstr(url, "://");
    if (scheme != NULL && at != NULL && at > scheme) {
        const char *colon = memchr(scheme + 3, ':', (size_t)(at - scheme - 3));
        if (colon != NULL) {
            fprintf(out, "%.*s:***%s", (int)(colon - url), url, at);
            return;
        }
    }
    const char *pw = strstr(url, "password=");
    if (pw != NULL) {
        const char *end = pw + 9;
        while (*end && *end != ' ')
            end++;
        fprintf(out, "%.*spassword=***%s", (int)(pw - url), url, end);
        return;
    }
    fputs(url, out);
}

void qn_config_print(const struct qn_config *cfg, FILE *out)
{
    for (const struct qn_config_var *v = qn_config_vars; v->name; v++) {
        const char *field = (const char *)cfg + v->offset;
        fprintf(out, "%s=", v->name);
        switch (v->type) {
        case QN_CFG_STRING: {
            const char *s;
            memcpy(&s, field, sizeof s);
            if (strcmp(v->name, "QUEEN_DATABASE_URL") == 0)
                print_masked_url(out, s ? s : "");
            else
                fputs(s ? s : "", out);
            break;
        }
        case QN_CFG_BOOL: {
            bool b;
            memcpy(&b, field, sizeof b);
            fputs(b ? "true" : "false", out);
            break;
        }
        case QN_CFG_INT: {
            int64_t n;
            memcpy(&n, field, sizeof n);
            fprintf(out, "%lld", (long long)n);
            break;
        }
        }
        fputc('\n', out);
    }
}

void qn_config_print_markdown(FILE *out)
{
    fputs("| Variable | Type | Default | Bounds | Meaning |\n", out);
    fputs("|---|---|---|---|---|\n", out);
    for (const struct qn_config_var *v = qn_config_vars; v->name; v++) {
        const char *type = v->type == QN_CFG_INT    ? "int"
                           : v->type == QN_CFG_BOOL ? "bool"
                                                    : "string";
        char bounds[64] = "";
        if (v->type == QN_CFG_INT)
            snprintf(bounds, sizeof bounds, "%lld..%lld", (long long)v->min, (long long)v->max);
        fprintf(out, "| `%s` | %s | %s%s%s | %s | %s |\n", v->name, type, v->def[0] ? "`" : "",
                v->def[0] ? v->def : "(empty)", v->def[0] ? "`" : "", bounds, v->help);
    }
}
