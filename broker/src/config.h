/*
 * config.h - private to broker/: the broker's configuration, one table of
 * environment variables (name, type, default, bounds, description).
 *
 * The table in config.c is the single source: qn_config_load() parses and
 * validates the environment against it, `queen-broker --print-config` prints the
 * effective values, and a test checks README.md's variable table against it.
 */
#ifndef QN_BROKER_CONFIG_H
#define QN_BROKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Most event loops one broker runs (QUEEN_WORKERS). */
#define QN_MAX_WORKERS 256

struct qn_config {
    /* database */
    char *database_url;      /* QUEEN_DATABASE_URL, libpq conninfo */
    int64_t db_pool_size;    /* QUEEN_DB_POOL_SIZE */
    int64_t stmt_timeout_ms; /* QUEEN_STMT_TIMEOUT_MS */
    /* network */
    char *bind_addr;                /* QUEEN_BIND_ADDR */
    int64_t port;                   /* QUEEN_PORT (h2c; 0 = any free port) */
    bool h2c;                       /* QUEEN_H2C (serve the plain listener at all) */
    int64_t tls_port;               /* QUEEN_TLS_PORT (0 = any free port) */
    char *port_file;                /* QUEEN_PORT_FILE (write the bound ports here) */
    char *tls_cert;                 /* QUEEN_TLS_CERT (PEM file) */
    char *tls_key;                  /* QUEEN_TLS_KEY (PEM file) */
    char *tls_client_ca;            /* QUEEN_TLS_CLIENT_CA (PEM file; verify clients when set) */
    int64_t max_connections;        /* QUEEN_MAX_CONNECTIONS */
    int64_t max_concurrent_streams; /* QUEEN_MAX_CONCURRENT_STREAMS (per connection) */
    int64_t idle_timeout_ms;        /* QUEEN_IDLE_TIMEOUT_MS */
    int64_t keepalive_ms;           /* QUEEN_KEEPALIVE_MS */
    int64_t shutdown_timeout_ms;    /* QUEEN_SHUTDOWN_TIMEOUT_MS */
    /* limits */
    int64_t max_recv_bytes;      /* QUEEN_MAX_RECV_BYTES (one gRPC message in) */
    int64_t max_conn_recv_bytes; /* QUEEN_MAX_CONN_RECV_BYTES (partial messages per connection) */
    int64_t max_send_bytes;      /* QUEEN_MAX_SEND_BYTES (one gRPC message out) */
    int64_t max_payload_bytes;   /* QUEEN_MAX_PAYLOAD_BYTES */
    int64_t max_push_items;      /* QUEEN_MAX_PUSH_ITEMS */
    int64_t max_pop_batch;       /* QUEEN_MAX_POP_BATCH */
    int64_t max_pop_wait_ms;     /* QUEEN_MAX_POP_WAIT_MS */
    int64_t max_parked_pops;     /* QUEEN_MAX_PARKED_POPS */
    int64_t max_streams;         /* QUEEN_MAX_STREAMS (open Consume/Watch streams) */
    int64_t segment_raw_max;     /* QUEEN_SEGMENT_RAW_MAX (decompression cap) */
    /* hostile clients (netrobust): connection and memory limits, config.c's block */
    int64_t max_conn_send_bytes; /* QUEEN_MAX_CONN_SEND_BYTES (unread responses, per connection) */
    int64_t max_send_buffer_bytes; /* QUEEN_MAX_SEND_BUFFER_BYTES (unread responses, broker-wide) */
    int64_t conn_send_hard_bytes;  /* QUEEN_CONN_SEND_HARD_BYTES (close at once) */
    int64_t conn_send_soft_bytes;  /* QUEEN_CONN_SEND_SOFT_BYTES (close after soft_ms above) */
    int64_t conn_send_soft_ms;     /* QUEEN_CONN_SEND_SOFT_MS (0 = never) */
    int64_t max_recv_buffer_bytes; /* QUEEN_MAX_RECV_BUFFER_BYTES (unfinished requests, broker) */
    int64_t preface_timeout_ms;    /* QUEEN_PREFACE_TIMEOUT_MS */
    int64_t tls_handshake_timeout_ms; /* QUEEN_TLS_HANDSHAKE_TIMEOUT_MS */
    int64_t max_conns_per_peer;       /* QUEEN_MAX_CONNECTIONS_PER_PEER (0 = no cap) */
    /* push path */
    int64_t zstd_level;        /* QUEEN_V2_ZSTD_LEVEL */
    int64_t bundle_max;        /* QUEEN_V2_BUNDLE_MAX */
    int64_t push_lane_ms;      /* QUEEN_PUSH_LANE_MS */
    bool dedup_cache;          /* QUEEN_DEDUP_CACHE */
    int64_t dedup_cache_mb;    /* QUEEN_DEDUP_CACHE_MB */
    int64_t wake_recheck_ms;   /* QUEEN_WAKE_RECHECK_MS */
    int64_t pop_scan_reuse_ms; /* QUEEN_POP_SCAN_REUSE_MS */
    bool lease_bundle;         /* QUEEN_LEASE_BUNDLE (consume fusion) */
    bool ack_bundle;           /* QUEEN_ACK_BUNDLE (consume fusion) */
    /* maintenance */
    int64_t retention_interval_ms;  /* RETENTION_INTERVAL */
    int64_t retention_batch_size;   /* RETENTION_BATCH_SIZE */
    bool partition_cleanup_enabled; /* QUEEN_PARTITION_CLEANUP_ENABLED */
    int64_t partition_cleanup_days; /* PARTITION_CLEANUP_DAYS */
    int64_t metrics_retention_days; /* METRICS_RETENTION_DAYS */
    /* logging */
    char *log_level; /* QUEEN_LOG_LEVEL */
    /* database faults: hung connections, lanes, start without the database,
     * database calls per client connection */
    int64_t db_write_reserve;        /* QUEEN_DB_WRITE_RESERVE (-1 = derived) */
    int64_t db_call_timeout_ms;      /* QUEEN_DB_CALL_TIMEOUT_MS (0 = derived) */
    int64_t db_cancel_grace_ms;      /* QUEEN_DB_CANCEL_GRACE_MS */
    int64_t db_keepalive_idle_s;     /* QUEEN_DB_KEEPALIVE_IDLE_S (0 = off) */
    int64_t db_keepalive_interval_s; /* QUEEN_DB_KEEPALIVE_INTERVAL_S */
    int64_t db_keepalive_count;      /* QUEEN_DB_KEEPALIVE_COUNT */
    int64_t db_tcp_user_timeout_ms;  /* QUEEN_DB_TCP_USER_TIMEOUT_MS (0 = the system's) */
    int64_t db_start_retry_max_ms;   /* QUEEN_DB_START_RETRY_MAX_MS */
    int64_t max_conn_db_calls;       /* QUEEN_MAX_CONN_DB_CALLS */
    /* HTTP side port, metrics, log format (sideport) */
    int64_t http_port;               /* QUEEN_HTTP_PORT (0 = any free port, -1 = off) */
    char *http_bind_addr;            /* QUEEN_HTTP_BIND_ADDR ("" = QUEEN_BIND_ADDR) */
    int64_t http_max_connections;    /* QUEEN_HTTP_MAX_CONNECTIONS */
    int64_t http_idle_timeout_ms;    /* QUEEN_HTTP_IDLE_TIMEOUT_MS */
    int64_t http_request_timeout_ms; /* QUEEN_HTTP_REQUEST_TIMEOUT_MS (head and body) */
    int64_t http_max_header_bytes;   /* QUEEN_HTTP_MAX_HEADER_BYTES (request head) */
    bool http_console;               /* QUEEN_HTTP_CONSOLE (serve the web console at /) */
    int64_t metrics_max_queues;      /* QUEEN_METRICS_MAX_QUEUES (0 = no per-queue series) */
    int64_t metrics_max_groups;      /* QUEEN_METRICS_MAX_GROUPS ((queue, group) lag series) */
    int64_t metrics_refresh_ms;      /* QUEEN_METRICS_REFRESH_MS (per-queue stats period) */
    char *log_format;                /* QUEEN_LOG_FORMAT (text or json) */
    /* security (w2c-auth; README "Security") */
    char *auth;                 /* QUEEN_AUTH: none | jwt | mtls | jwt,mtls */
    bool auth_open_health;      /* QUEEN_AUTH_OPEN_HEALTH */
    bool auth_open_reflection;  /* QUEEN_AUTH_OPEN_REFLECTION */
    bool auth_default_tenant;   /* QUEEN_AUTH_DEFAULT_TENANT */
    char *jwt_secret_files;     /* QUEEN_JWT_SECRET_FILES ([kid=]path,...) */
    char *jwt_public_key_files; /* QUEEN_JWT_PUBLIC_KEY_FILES ([kid=]path,...) */
    char *jwt_jwks_file;        /* QUEEN_JWT_JWKS_FILE */
    char *jwt_issuer;           /* QUEEN_JWT_ISSUER ("" = not checked) */
    char *jwt_audience;         /* QUEEN_JWT_AUDIENCE ("" = not checked) */
    int64_t jwt_clock_skew_s;   /* QUEEN_JWT_CLOCK_SKEW_S */
    bool jwt_require_exp;       /* QUEEN_JWT_REQUIRE_EXP */
    char *jwt_tenant_claim;     /* QUEEN_JWT_TENANT_CLAIM */
    char *jwt_scopes_claim;     /* QUEEN_JWT_SCOPES_CLAIM */
    char *mtls_policy_file;     /* QUEEN_MTLS_POLICY_FILE */
    char *mtls_identity;        /* QUEEN_MTLS_IDENTITY ("" = the policy file's) */
    char *encryption_keyring;   /* QUEEN_ENCRYPTION_KEYRING */
    bool auth_jwt;              /* derived from QUEEN_AUTH: tokens accepted */
    bool auth_mtls;             /* derived from QUEEN_AUTH: client certificates accepted */
    /* workers */
    int64_t workers;           /* QUEEN_WORKERS (0 at load = online cores; >= 1 after) */
    int64_t worker_inbox;      /* QUEEN_WORKER_INBOX */
    int64_t offload_threads;   /* QUEEN_OFFLOAD_THREADS */
    int64_t offload_min_bytes; /* QUEEN_OFFLOAD_MIN_BYTES */
};

enum qn_config_type { QN_CFG_INT, QN_CFG_BOOL, QN_CFG_STRING };

struct qn_config_var {
    const char *name;
    enum qn_config_type type;
    const char *def;  /* default, as text */
    int64_t min, max; /* bounds for QN_CFG_INT */
    size_t offset;    /* into struct qn_config */
    const char *help; /* one line */
};

/* The table, terminated by an entry with name == NULL. */
extern const struct qn_config_var qn_config_vars[];

/*
 * Fills *cfg from getenv() (a variable unset or empty takes its default).
 * On a bad value returns QN_EINVAL and writes a message naming the variable into
 * err. *cfg must be released with qn_config_free() in both cases.
 */
int qn_config_load(struct qn_config *cfg, char *err, size_t errcap);

/* Same, reading variables through `get` (tests). */
int qn_config_load_from(struct qn_config *cfg, const char *(*get)(const char *name, void *ud),
                        void *ud, char *err, size_t errcap);

void qn_config_free(struct qn_config *cfg);

/* Prints "NAME=value" for every variable (effective values). Secrets in the
 * database URL's password are masked. */
void qn_config_print(const struct qn_config *cfg, FILE *out);

/* Prints the table as Markdown (README.md's configuration section is this output;
 * a test keeps the two equal). */
void qn_config_print_markdown(FILE *out);

#endif
