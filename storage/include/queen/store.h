/*
 * queen/store.h - the storage module: PostgreSQL through libpq, asynchronous,
 * pipelined, on the caller's libevent loop. One C function per stored procedure
 * of sql/API.md (all in schema qn; the comments below name them without it).
 *
 * Why one header of some 800 lines: it is the storage module's whole public
 * contract, one function per procedure with its outcome rules; most of its
 * lines are those comments.
 *
 * Model:
 *   - A qn_store owns a pool of non-blocking connections registered with one
 *     event_base. Nothing here blocks; nothing here is thread-safe: call it only
 *     from the loop thread that owns the event_base.
 *   - Every call copies its inputs (the caller may free them as soon as the call
 *     returns) and delivers its outcome exactly once through its callback, on the
 *     loop, never from inside the call itself. Result structures passed to a
 *     callback are borrowed: valid only until the callback returns.
 *   - A call may be cancelled with qn_store_cancel() until its callback has run;
 *     after cancel the callback is never invoked. A statement already running is
 *     cancelled in the server (PQcancel) when it is the connection's current one;
 *     otherwise its result is discarded when it arrives.
 *   - Lanes: every call has a class. Writes (push, ack, transactions, renew,
 *     release, dead-letter filing, and the small reads on the push path:
 *     segment_at, partition_meta, notify) use the write lane; everything else
 *     (pop, fetch, pending checks, admin, maintenance, the dedup cache's
 *     hydration) the read lane. Reads never use the write_reserve connections
 *     reserved for writes, and a write goes first to a connection with no read
 *     in flight, so a write is sent at once even while reads fill the pool.
 *   - A deadline (monotonic ms, qn_store_now_ms() clock; 0 = none) ends the call
 *     when it passes: see the outcomes below. A sent call's statement is then
 *     cancelled in the server.
 *   - A hung connection cannot block anyone: TCP keepalives and tcp_user_timeout
 *     are set on every connection, and a connection that returns nothing for
 *     call_timeout_ms while a call is in flight, or does not answer within
 *     cancel_grace_ms after a server cancel was sent for its current call, is
 *     declared hung: cancelled, closed (its calls resolved as "connection lost"),
 *     logged as a warning naming the connection and the statement, reconnected.
 *   - Outcomes, exact about what was written. A call "may write" when it changes
 *     the database: push, pop (it takes a lease or moves an auto-ack cursor), ack,
 *     dlq_head, renew/release lease, transactions, configure/delete queue,
 *     seek/delete consumer group, delete dead letter, the maintenance steps and
 *     the metrics purge. Every other call only reads (segment_at, has_pending,
 *     pop_gate, fetch, get/list queues, partitions, groups and dead letters,
 *     stats, partition_meta, txns_*, the work list, partition_dead, the advisory
 *     lock calls - their session state dies with the session -, db_now,
 *     count_queues_of, notify_push - a notification has no durable effect).
 *       QN_EUNAVAILABLE  nothing was written: the call was never sent (queued
 *                        while every connection was down, or its connection
 *                        failed before any of it was handed to libpq), or the
 *                        server itself ended it (shutdown, termination), or it
 *                        only reads. The pool reconnects with backoff.
 *       QN_ETIMEOUT      nothing was written: the deadline passed before the
 *                        call was sent, or the server cancelled its statement
 *                        (statement_timeout), or it only reads and its deadline
 *                        passed after it was sent.
 *       QN_EINDOUBT      a call that may write was sent and its result never
 *                        came: its connection was lost (or declared hung), or its
 *                        deadline passed. It may have committed. Resolve it
 *                        after the pool is up (qn_store_is_up, qn_store_on_state):
 *                        re-submit a push with qn_store_push_resolve (rows
 *                        already stored answer duplicate), release the lease of a pop
 *                        (qn_store_release_lease with its worker), re-send an ack
 *                        (a repeated ack is noop).
 *     Other translations: deadlock / serialization failure -> the call is retried
 *     up to conflict_retries times, each after a growing jittered pause (10-20,
 *     20-40, 40-80 ms ...: retried at once, the loser could retake its first lock
 *     before the woken winner and deadlock again), then QN_ECONFLICT; duplicate in a strict push
 *     -> QN_EDUPLICATE; a procedure's own raised error -> QN_EDB with its SQLSTATE
 *     and message (22023 invalid argument; 55000 a consumer group this broker
 *     cannot serve, e.g. one Queen MQ marked conflating: a failed precondition;
 *     22P02 a non-JSON payload for a JSONB dead-letter table); a result we cannot
 *     parse -> QN_EPROTOCOL_DB. No libpq code or type crosses this header.
 *   - Every call returns QN_OK, and then its callback runs exactly once (unless
 *     cancelled), or an error, and then nothing runs: QN_EINVAL (bad argument),
 *     QN_ENOMEM, QN_EBUSY (max_waiting calls already queued), QN_EUNAVAILABLE
 *     (every connection is down and waiting to reconnect), QN_ESHUTDOWN.
 *   - A callback reporting an error gets a NULL result (the transaction callback
 *     excepted: it always gets a result with failed_step).
 *   - Conflict, stray-cancel and prepare retries only repeat calls whose
 *     statement failed in the server, so they never write twice.
 *   - Each call is one implicit transaction (one pipeline sync); a transaction
 *     (qn_store_txn_*) is several statements in one sync, all or nothing.
 */
#ifndef QUEEN_STORE_H
#define QUEEN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct qn_store qn_store;
/* A pending call. Valid from the call's return until its callback returns or
 * qn_store_cancel() is called on it. */
typedef struct qn_store_req qn_store_req;

/* ---------------------------------------------------------------- lifecycle */

/* Levels of the messages a store logs (numerically the broker's log levels). */
enum qn_store_log_level {
    QN_STORE_LOG_DEBUG = 0,
    QN_STORE_LOG_INFO = 1,
    QN_STORE_LOG_WARN = 2,
    QN_STORE_LOG_ERROR = 3
};

struct qn_store_config {
    const char *conninfo; /* libpq connection string or URL (copied) */
    int pool_size;        /* connections, 1..256 */
    int pipeline_depth;   /* calls in flight per connection, 1..1024 */
    int stmt_timeout_ms;  /* statement_timeout of every session, > 0 */
    int max_waiting;      /* calls queued for a connection before QN_EBUSY */
    int conflict_retries; /* deadlock/serialization retries, >= 0 */
    int reconnect_min_ms; /* first reconnect delay; doubles up to max */
    int reconnect_max_ms;
    int write_reserve;         /* connections only the write lane uses, 0..pool_size-1;
                                  -1 = pool/4 for pools of 4 or more, 1 for 2 or 3,
                                  0 for 1 */
    int call_timeout_ms;       /* a connection with calls in flight that returns
                                  nothing for this long is hung; 0 = stmt_timeout_ms
                                  + 5000 (a statement answers or is cancelled by the
                                  server within statement_timeout) */
    int cancel_grace_ms;       /* after a server cancel for a connection's current
                                  call, how long it may stay silent before it is hung;
                                  1..3600000 */
    int keepalives_idle_s;     /* TCP keepalive idle time; 0 = keepalives off; <= 86400 */
    int keepalives_interval_s; /* between unanswered probes, 1..3600 */
    int keepalives_count;      /* unanswered probes before the kernel drops it, 1..1000 */
    int tcp_user_timeout_ms;   /* unacknowledged data older than this drops the
                                  connection; 0 = the system's; <= 3600000 */
    /* Where the store logs (hung connections); NULL = silent. msg is borrowed for
     * the call. Runs on the loop thread. */
    void (*log)(void *ud, int level, const char *msg);
    void *log_ud;
    int pid_cache; /* partition ids remembered (tenant, queue, partition -> id) so
                      that pushes address partitions by id: entries, 0 = off,
                      <= 16777216; about 80 bytes plus the names each */
    /* The stores that act as one broker (qn_store_family_new); NULL = this
     * store alone. Borrowed: it outlives the store. */
    struct qn_store_family *family;
};

/*
 * A family: the stores of one process that act as one broker (a broker runs one
 * per event loop). A NOTIFY that a pool connection of any of them sent reaches
 * none of their listeners (qn_store_listen_push): the broker woke its waiters
 * on every loop at the commit already. Thread-safe: its stores may run on
 * different threads. Freed after its last store.
 */
struct qn_store_family;
int qn_store_family_new(struct qn_store_family **out);
void qn_store_family_free(struct qn_store_family *f);

/* Fills cfg with defaults: pool 8, depth 16, timeout 30000, waiting 100000,
 * retries 3, reconnect 100..5000 ms, write_reserve -1 (derived), call_timeout 0
 * (derived: 35000), cancel grace 2000 ms, keepalives 10 s idle / 5 s interval /
 * 3 probes, tcp_user_timeout 20000 ms, no log, pid_cache 65536. conninfo stays
 * NULL. An explicit keepalives or tcp_user_timeout in conninfo wins over these. */
void qn_store_config_defaults(struct qn_store_config *cfg);

/*
 * Makes a store and starts connecting (asynchronously). Returns QN_OK and *out, or
 * QN_EINVAL (bad config) / QN_ENOMEM. Calls made before any connection is ready
 * wait (bounded by max_waiting and their deadline); when every connection is down
 * they fail with QN_EUNAVAILABLE.
 */
int qn_store_new(struct event_base *base, const struct qn_store_config *cfg, qn_store **out);

/* Closes every connection. Pending calls get QN_ESHUTDOWN through their callbacks
 * (before this returns). NULL is allowed. */
void qn_store_free(qn_store *st);

/* At least one connection is established and ready. */
bool qn_store_is_up(const qn_store *st);

/* cb(ud, up) runs on every change of qn_store_is_up(). One observer; NULL clears.
 * A single connection lost or hung while others stay ready does not change it:
 * calls in doubt can be resolved at once then. */
void qn_store_on_state(qn_store *st, void (*cb)(void *ud, bool up), void *ud);

/* Monotonic milliseconds (the deadline clock). */
int64_t qn_store_now_ms(void);

/* Cancels a pending call (see the model above). NULL is allowed. */
void qn_store_cancel(qn_store_req *req);

/* Counters since qn_store_new(), for benches and tests. */
struct qn_store_stats {
    uint64_t calls;       /* calls completed (any outcome) */
    uint64_t statements;  /* statements sent */
    uint64_t round_trips; /* pipeline syncs sent */
    uint64_t retries;     /* conflict retries */
    uint64_t reconnects;
    uint32_t connections_up;
    uint32_t waiting;        /* calls queued for a connection */
    uint32_t in_flight;      /* calls sent and awaiting their results */
    uint32_t in_flight_peak; /* most calls ever in flight on one connection */
    uint64_t in_doubt;       /* calls delivered QN_EINDOUBT */
    uint64_t hung;           /* connections declared hung and closed */
};
void qn_store_get_stats(const qn_store *st, struct qn_store_stats *out);

/* Outcome of a call: code QN_OK or an error. Strings borrowed until the callback
 * returns; never NULL (empty when unknown). */
struct qn_store_status {
    int code;
    const char *sqlstate;
    const char *message; /* for people: the procedure's message without its prefix */
};

/* Queue names a caller may reach (its grants, broker/src/auth/auth.h): a name
 * passes when it equals one of exact[] or starts with one of prefix[]. Calls
 * that list or discover queues take it from their options (list_queues,
 * list_dlq, pop by namespace/task) and never return or claim a queue outside
 * it; other calls ignore it. Borrowed for the call (copied into its
 * parameters). */
struct qn_name_filter {
    const char *const *exact;
    size_t n_exact;
    const char *const *prefix;
    size_t n_prefix;
};

/* Common per-call options. */
struct qn_call_opts {
    int64_t deadline_ms;                /* 0 = none */
    const uint8_t *tenant;              /* 16 bytes; NULL = the default tenant */
    const struct qn_name_filter *names; /* NULL = every queue name (no filter) */
};

/* ---------------------------------------------------------------- push */

#define QN_PUSH_QUEUED 0
#define QN_PUSH_DUPLICATE 1

struct qn_push_segment {
    const char *queue;
    const char *partition;    /* NULL or "" = "Default" */
    uint32_t count;           /* frames in blob, >= 1 */
    const uint8_t *hashes;    /* count * 16 bytes, distinct */
    int64_t verified;         /* dedup-cache watermark; -1 = cannot vouch */
    int32_t cache_window;     /* window (s) `verified` was vouched under; 0 = unknown
                                 (the watermark is then taken as given) */
    const uint8_t *cache_pid; /* partition id `verified` was vouched for (16 bytes);
                                 NULL = not checked */
    const uint8_t *blob;      /* compressed segment */
    size_t blob_len;
};

struct qn_push_dup {
    uint32_t idx;   /* frame index in the segment */
    int64_t offset; /* offset of the original message */
};

struct qn_push_seg_result {
    int status;            /* QN_PUSH_QUEUED or QN_PUSH_DUPLICATE */
    uint8_t pid[16];       /* partition id */
    int32_t window;        /* queue's dedup window, seconds */
    int64_t base;          /* queued: first offset */
    int64_t created_at_us; /* queued: commit stamp */
    size_t ndups;          /* duplicate: entries in dups, ascending idx */
    const struct qn_push_dup *dups;
};

struct qn_push_result {
    size_t n;                              /* == number of segments pushed */
    const struct qn_push_seg_result *segs; /* input order */
};

typedef void (*qn_push_cb)(void *ud, const struct qn_store_status *st,
                           const struct qn_push_result *res);

/* One transaction (one commit for every partition of the bundle): push_v1 by
 * names, or, when the store knows the id of every partition of the bundle
 * (pid_cache, learnt from earlier results), one push_one_v1 per segment in
 * ascending partition id, pipelined in one round trip. Results, errors and
 * semantics are the same either way.
 * strict: a duplicate fails the whole call with QN_EDUPLICATE. A write: a push
 * in doubt (QN_EINDOUBT) is resolved with qn_store_push_resolve. */
int qn_store_push(qn_store *st, const struct qn_push_segment *segs, size_t n, bool strict,
                  const struct qn_call_opts *opts, qn_push_cb cb, void *ud, qn_store_req **req);

/*
 * Resolves a push whose outcome was in doubt: the same segments (same hashes,
 * same blobs) pushed again, non-strict, with the whole sidecar probed whatever
 * `verified` says, and, for a queue whose dedup window is 0, over the last 900 s
 * (the sidecar is never purged younger). Per segment: QN_PUSH_QUEUED means the
 * original never committed and this call stored it; QN_PUSH_DUPLICATE with every
 * frame listed means the original committed, at the dup offsets (its frames are
 * these bytes: same message ids). Call it once the pool is up again (at once when
 * qn_store_is_up(), else from the qn_store_on_state observer), within 900 s of the
 * original. Itself a write: in doubt again, call it again.
 */
int qn_store_push_resolve(qn_store *st, const struct qn_push_segment *segs, size_t n,
                          const struct qn_call_opts *opts, qn_push_cb cb, void *ud,
                          qn_store_req **req);

/* segment_at_v1 */
struct qn_segment_row {
    int64_t base;
    int64_t end;
    int64_t created_at_us;
    const uint8_t *blob;
    size_t blob_len;
};
struct qn_segments_result {
    size_t n;
    const struct qn_segment_row *rows; /* ascending base */
};
typedef void (*qn_segments_cb)(void *ud, const struct qn_store_status *st,
                               const struct qn_segments_result *res);
int qn_store_segment_at(qn_store *st, const uint8_t pid[16], const int64_t *offsets, size_t n,
                        const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                        qn_store_req **req);

/* ---------------------------------------------------------------- pop */

/* The consumer group of queue mode: what a pop or ack that names no group (NULL
 * or "") is stored under. One spelling for the broker and the procedures. */
#define QN_QUEUE_MODE "__QUEUE_MODE__"

enum qn_sub_mode { QN_SUB_ALL = 0, QN_SUB_NEW = 1, QN_SUB_TIMESTAMP = 2 };

struct qn_pop_args {
    const char *queue;     /* NULL/"" = discover by namespace/task */
    const char *partition; /* NULL/"" = any partition */
    const char *namespace_;
    const char *task;
    const char *group;     /* NULL/"" = "__QUEUE_MODE__" */
    int32_t budget;        /* messages, >= 1 */
    int64_t max_bytes;     /* <= 0: unlimited */
    int32_t msg_overhead;  /* bytes added per message to the budget */
    int32_t max_msg_bytes; /* largest frame a message can have */
    int32_t lease_seconds; /* <= 0: queue's lease_time */
    const char *worker;    /* lease id (UUID text) */
    bool auto_ack;
    int32_t max_partitions; /* <= 0: 1 */
    enum qn_sub_mode sub_mode;
    int64_t sub_from_us; /* QN_SUB_TIMESTAMP */
};

struct qn_pop_segment {
    const char *queue;
    const char *partition;
    uint8_t pid[16];
    int64_t base;
    int32_t start_idx;
    int32_t take;
    int64_t created_at_us;
    const uint8_t *blob;
    size_t blob_len;
    int64_t lease_expires_at_us; /* 0 for auto-ack */
    /* NULL from the store. The broker sets it to the decompressed blob when it
     * decompressed the segment ahead of building the batch (engine/decode.h). */
    const uint8_t *raw;
    size_t raw_len;
};

struct qn_pop_result {
    size_t n;
    const struct qn_pop_segment *segs; /* claim order, then ascending base */
};

typedef void (*qn_pop_cb)(void *ud, const struct qn_store_status *st,
                          const struct qn_pop_result *res);
/* pop_v1 / pop_discover_v1. A write (it takes a lease, or moves an auto-ack
 * cursor): a pop in doubt is resolved by releasing its worker's leases
 * (qn_store_release_lease), so its batch is redelivered at once. A consumer
 * group Queen MQ marked conflating fails with QN_EDB, SQLSTATE 55000 (a failed
 * precondition: this broker does not conflate). */
int qn_store_pop(qn_store *st, const struct qn_pop_args *a, const struct qn_call_opts *opts,
                 qn_pop_cb cb, void *ud, qn_store_req **req);

/*
 * Bundled leases (pop_bundle_v1): several pops, each naming one partition whose
 * id the store's id cache knows, in one call and one transaction. The broker
 * assembles the bundle (engine/cfusion.c); the database runs each member as
 * pop_one_v1, one partition at a time in (partition id, group) order.
 *
 * qn_store_pop_pid: whether a pop would go by id (queue and partition named,
 * the id cached for the call's tenant, not auto-ack); fills pid. tenant NULL =
 * the default tenant.
 */
#define QN_POP_BUNDLE_MAX 64
bool qn_store_pop_pid(qn_store *st, const struct qn_pop_args *a, const uint8_t *tenant,
                      uint8_t pid[16]);

struct qn_pop_member {
    const struct qn_pop_args *a; /* as for qn_store_pop; auto_ack false */
    uint8_t pid[16];             /* from qn_store_pop_pid */
};

/* res: n results, one per member in the order given (each NULL-free, maybe
 * empty), NULL on failure. The whole bundle succeeds or fails as one: a member
 * the database refuses fails the call (QN_EDB, nothing leased: try the members
 * alone), and QN_EINDOUBT is every member's (each resolves as a pop in doubt
 * does: release its worker's leases). */
typedef void (*qn_pop_bundle_cb)(void *ud, const struct qn_store_status *st,
                                 const struct qn_pop_result *res, size_t n);
/* 1 <= n <= QN_POP_BUNDLE_MAX, every member with a queue, a partition, a
 * worker and budget >= 1, not auto-ack; QN_EINVAL otherwise. */
int qn_store_pop_bundle(qn_store *st, const struct qn_pop_member *m, size_t n,
                        const struct qn_call_opts *opts, qn_pop_bundle_cb cb, void *ud,
                        qn_store_req **req);

typedef void (*qn_bool_cb)(void *ud, const struct qn_store_status *st, bool value);
/* has_pending_v1 */
int qn_store_has_pending(qn_store *st, const char *queue, const char *partition, const char *group,
                         const struct qn_call_opts *opts, qn_bool_cb cb, void *ud,
                         qn_store_req **req);

/* pop_gate_v1: the queue's min_pop_wait_time (ms) and the group's unconsumed
 * messages in lease-free partitions (a hint; 0, 0 for a missing queue). */
typedef void (*qn_pop_gate_cb)(void *ud, const struct qn_store_status *st, int64_t pending,
                               int32_t min_wait_ms);
int qn_store_pop_gate(qn_store *st, const char *queue, const char *partition, const char *group,
                      const struct qn_call_opts *opts, qn_pop_gate_cb cb, void *ud,
                      qn_store_req **req);

/* ---------------------------------------------------------------- ack */

#define QN_ACK_COMPLETED 1
#define QN_ACK_FAILED 2
#define QN_ACK_RETRY 3
#define QN_ACK_DLQ 4

#define QN_ACK_APPLIED 1
#define QN_ACK_NOOP 2
#define QN_ACK_STALE 3
#define QN_ACK_UNRESOLVED 4
#define QN_ACK_LEASE_INVALID 5
#define QN_ACK_REJECTED 6
#define QN_ACK_DEFERRED 7

#define QN_ACKF_RELEASED 1
#define QN_ACKF_DLQ_HANDOFF 2
#define QN_ACKF_DROPPED 4
#define QN_ACKF_CHARGED 8
/* with RELEASED: the partition held messages past the new cursor as the ack
 * read it (a commit after that is not in it) */
#define QN_ACKF_MORE 16

struct qn_ack_item {
    const uint8_t *hash; /* 16 bytes, or NULL to ack by offset */
    int64_t offset;      /* used when hash == NULL */
    int status;          /* QN_ACK_COMPLETED .. QN_ACK_DLQ */
};

struct qn_ack_args {
    uint8_t pid[16];
    const char *group;  /* NULL/"" = "__QUEUE_MODE__" */
    const char *worker; /* NULL/"" = no lease check */
    const struct qn_ack_item *items;
    size_t n;
};

struct qn_ack_item_result {
    int outcome;    /* QN_ACK_APPLIED .. QN_ACK_DEFERRED */
    int64_t offset; /* resolved offset, -1 when unknown */
};

struct qn_ack_result {
    size_t n;
    const struct qn_ack_item_result *items; /* input order */
    int64_t committed;                      /* cursor after the call (-1 when no row) */
    uint32_t flags;                         /* QN_ACKF_* */
    int64_t dlq_offset;                     /* QN_ACKF_DLQ_HANDOFF: the poison offset */
    int64_t dlq_base;                       /* its segment's base, -1 when the segment is gone */
    const uint8_t *dlq_blob;                /* its segment, NULL when gone */
    size_t dlq_blob_len;
};

typedef void (*qn_ack_cb)(void *ud, const struct qn_store_status *st,
                          const struct qn_ack_result *res);
int qn_store_ack(qn_store *st, const struct qn_ack_args *a, const struct qn_call_opts *opts,
                 qn_ack_cb cb, void *ud, qn_store_req **req);

/*
 * Bundled acks (ack_bundle_v1): several ack_v1 calls, each its own (pid, group,
 * worker) and items, in one call and one transaction; the database runs them
 * one by one in ascending (partition id, group). res: n results in the order
 * given, each as qn_store_ack's; NULL on failure. The bundle commits or fails
 * as one: QN_EDB (a member refused, nothing applied: send the members alone),
 * QN_EINDOUBT for every member (each resolves as an ack in doubt does).
 * 1 <= n <= QN_ACK_BUNDLE_MAX, each member with >= 1 item; QN_EINVAL otherwise.
 */
#define QN_ACK_BUNDLE_MAX 64
typedef void (*qn_ack_bundle_cb)(void *ud, const struct qn_store_status *st,
                                 const struct qn_ack_result *res, size_t n);
int qn_store_ack_bundle(qn_store *st, const struct qn_ack_args *a, size_t n,
                        const struct qn_call_opts *opts, qn_ack_bundle_cb cb, void *ud,
                        qn_store_req **req);

struct qn_dlq_head_args {
    uint8_t pid[16];
    const char *group;
    const char *worker;
    int64_t offset;
    uint8_t message_id[16];
    const char *txn;
    size_t txn_len;
    const uint8_t *payload;
    size_t payload_len;
    const char *error;
};
/* qn.dlq_head_v1: ok = the dead letter was filed (false: the lease was no longer
 * held, or the frame is not in the leased batch: nothing written); dlq_id = the
 * new row's id (16 bytes, borrowed until the callback returns), NULL when not
 * filed. On a dead-letter table Queen MQ laid down (payload JSONB) a payload
 * that is not UTF-8 JSON fails with QN_EDB, SQLSTATE 22P02, and nothing is
 * written (the lease stays: the frame is redelivered). */
typedef void (*qn_dlq_head_cb)(void *ud, const struct qn_store_status *st, bool ok,
                               const uint8_t *dlq_id);
int qn_store_dlq_head(qn_store *st, const struct qn_dlq_head_args *a,
                      const struct qn_call_opts *opts, qn_dlq_head_cb cb, void *ud,
                      qn_store_req **req);

typedef void (*qn_renew_cb)(void *ud, const struct qn_store_status *st, int32_t renewed,
                            int64_t expires_at_us);
int qn_store_renew_lease(qn_store *st, const char *worker, int32_t seconds,
                         const struct qn_call_opts *opts, qn_renew_cb cb, void *ud,
                         qn_store_req **req);

typedef void (*qn_int_cb)(void *ud, const struct qn_store_status *st, int64_t value);
/* release_lease_v1: releases every live lease of worker (the lease id a pop
 * was given); value = leases released. The cursor does not move, so the batch
 * is redelivered at once. Idempotent: it resolves a pop in doubt too. */
int qn_store_release_lease(qn_store *st, const char *worker, const struct qn_call_opts *opts,
                           qn_int_cb cb, void *ud, qn_store_req **req);

/* ---------------------------------------------------------------- transactions */

/*
 * Several procedures in one database transaction (one pipeline, one commit).
 * Steps run in the order added; every push is strict and every ack is strict, so
 * any duplicate, unapplied ack or missing lease fails the whole transaction and
 * nothing is written.
 */
typedef struct qn_store_txn qn_store_txn;

/* Room for 256 steps. */
int qn_store_txn_new(qn_store *st, qn_store_txn **out);
/* Room for max_steps steps (1..QN_STORE_TXN_STEPS_MAX); adding more is QN_ELIMIT. */
#define QN_STORE_TXN_STEPS_MAX 4096
int qn_store_txn_new_steps(qn_store *st, int max_steps, qn_store_txn **out);
int qn_store_txn_push(qn_store_txn *t, const struct qn_push_segment *segs, size_t n);
int qn_store_txn_ack(qn_store_txn *t, const struct qn_ack_args *a);
int qn_store_txn_check_leases(qn_store_txn *t, const char *const *workers, size_t n);
int qn_store_txn_delete_dlq(qn_store_txn *t, const uint8_t dlq_id[16]);
/* Frees a transaction that was never committed. NULL is allowed. */
void qn_store_txn_abandon(qn_store_txn *t);

struct qn_txn_step_result {
    int kind; /* 1 push, 2 ack, 3 check leases, 4 delete dlq */
    const struct qn_push_result *push;
    const struct qn_ack_result *ack;
    int64_t value; /* delete dlq: rows deleted */
};
struct qn_txn_result {
    size_t n;
    const struct qn_txn_step_result *steps; /* order added */
    int failed_step;                        /* on failure: the step that raised, else -1 */
};
typedef void (*qn_txn_cb)(void *ud, const struct qn_store_status *st,
                          const struct qn_txn_result *res);
/* Sends the transaction; takes ownership of t (freed by the store in all cases). */
int qn_store_txn_commit(qn_store_txn *t, const struct qn_call_opts *opts, qn_txn_cb cb, void *ud,
                        qn_store_req **req);

/* ---------------------------------------------------------------- fetch */

struct qn_fetch_entry {
    const char *queue;
    const char *partition;
    int64_t offset;
    int64_t max_bytes;
};
struct qn_fetch_args {
    const struct qn_fetch_entry *entries;
    size_t n;
    int64_t budget;      /* bytes across the call */
    int32_t max_records; /* per entry */
    int32_t msg_overhead;
    int32_t max_msg_bytes;
};
struct qn_fetch_entry_result {
    int error; /* 0 none, 1 unknown partition, 2 offset out of range */
    uint8_t pid[16];
    int64_t high; /* last offset + 1 */
    int64_t log_start;
    size_t nsegs;
    const struct qn_pop_segment *segs; /* queue/partition/lease fields unset */
};
struct qn_fetch_result {
    size_t n;
    const struct qn_fetch_entry_result *entries; /* request order */
};
typedef void (*qn_fetch_cb)(void *ud, const struct qn_store_status *st,
                            const struct qn_fetch_result *res);
int qn_store_fetch(qn_store *st, const struct qn_fetch_args *a, const struct qn_call_opts *opts,
                   qn_fetch_cb cb, void *ud, qn_store_req **req);

/* ---------------------------------------------------------------- admin */

/* Queue options; has_* tell which are set (requests) - results set them all. */
struct qn_queue_options {
    int32_t lease_time, retry_limit, retry_delay, max_size, ttl;
    bool dead_letter_queue, dlq_after_max_retries;
    int32_t delayed_processing, window_buffer, retention_seconds, completed_retention_seconds;
    bool retention_enabled, encryption_enabled;
    int32_t max_wait_time_seconds, min_pop_wait_time, dedup_window_seconds, priority;
    const char *namespace_, *task;
    /* bit i set = option i set, in the order of the fields above (QN_OPT_*) */
    uint32_t set;
};
enum {
    QN_OPT_LEASE_TIME,
    QN_OPT_RETRY_LIMIT,
    QN_OPT_RETRY_DELAY,
    QN_OPT_MAX_SIZE,
    QN_OPT_TTL,
    QN_OPT_DEAD_LETTER_QUEUE,
    QN_OPT_DLQ_AFTER_MAX_RETRIES,
    QN_OPT_DELAYED_PROCESSING,
    QN_OPT_WINDOW_BUFFER,
    QN_OPT_RETENTION_SECONDS,
    QN_OPT_COMPLETED_RETENTION_SECONDS,
    QN_OPT_RETENTION_ENABLED,
    QN_OPT_ENCRYPTION_ENABLED,
    QN_OPT_MAX_WAIT_TIME_SECONDS,
    QN_OPT_MIN_POP_WAIT_TIME,
    QN_OPT_DEDUP_WINDOW_SECONDS,
    QN_OPT_PRIORITY,
    QN_OPT_NAMESPACE,
    QN_OPT_TASK,
    QN_OPT_COUNT
};

struct qn_queue_info {
    uint8_t id[16];
    const char *name;
    int64_t created_at_us;
    struct qn_queue_options options; /* every option set */
    int32_t partitions;
    int64_t segments;
    int64_t messages;
};

struct qn_queues_result {
    size_t n;
    const struct qn_queue_info *queues;
    bool created; /* configure: the queue did not exist before */
};
typedef void (*qn_queues_cb)(void *ud, const struct qn_store_status *st,
                             const struct qn_queues_result *res);

int qn_store_configure_queue(qn_store *st, const char *queue, const struct qn_queue_options *o,
                             bool replace, const struct qn_call_opts *opts, qn_queues_cb cb,
                             void *ud, qn_store_req **req);
int qn_store_get_queue(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                       qn_queues_cb cb, void *ud, qn_store_req **req);
/* queue_encrypted_v1: the queue's encryption flag alone (false for a missing
 * queue); unlike get_queue_v1 it counts nothing, whatever the queue's size. */
int qn_store_queue_encrypted(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                             qn_bool_cb cb, void *ud, qn_store_req **req);
int qn_store_list_queues(qn_store *st, const char *namespace_, const char *task, int32_t limit,
                         int32_t offset, const struct qn_call_opts *opts, qn_queues_cb cb, void *ud,
                         qn_store_req **req);

struct qn_partition_info {
    const char *partition;
    uint8_t pid[16];
    int64_t last_offset, log_start, committed, depth;
    bool leased;
    int64_t last_write_at_us;
};
struct qn_partitions_result {
    size_t n;
    const struct qn_partition_info *parts;
};
typedef void (*qn_partitions_cb)(void *ud, const struct qn_store_status *st,
                                 const struct qn_partitions_result *res);
int qn_store_queue_partitions(qn_store *st, const char *queue, const char *group,
                              const struct qn_call_opts *opts, qn_partitions_cb cb, void *ud,
                              qn_store_req **req);

/* delete_queue_v1: value = existed */
int qn_store_delete_queue(qn_store *st, const char *queue, const struct qn_call_opts *opts,
                          qn_bool_cb cb, void *ud, qn_store_req **req);

/* delete_queue_step_v1: one committed step of deleting queue in steps (at most
 * max_rows rows). value: -1 no such queue (live or being deleted), 0 deleted,
 * 1 call again. A call's first step (first = true) only hides the live queue
 * of the name from every lookup; the next ones (first = false) delete the
 * hidden one's rows and never touch a queue made under the name meanwhile. */
int qn_store_delete_queue_step(qn_store *st, const char *queue, int32_t max_rows, bool first,
                               const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                               qn_store_req **req);

struct qn_group_row {
    const char *group, *queue, *sub_mode, *partition;
    int64_t sub_from_us;
    uint8_t pid[16];
    int64_t committed, last_offset, lag, time_lag_seconds;
    bool leased;
    const char *worker;
    int64_t total_consumed;
    int32_t retry_count, attempt_count;
    /* list_consumer_groups_page only (0 otherwise): the whole (group, queue)'s
     * lag summed over all its cursors, and the largest time lag among them */
    int64_t total_lag, max_time_lag_seconds;
};
struct qn_groups_result {
    size_t n;
    const struct qn_group_row *rows;
};
typedef void (*qn_groups_cb)(void *ud, const struct qn_store_status *st,
                             const struct qn_groups_result *res);
int qn_store_list_consumer_groups(qn_store *st, const char *queue, const char *group,
                                  const struct qn_call_opts *opts, qn_groups_cb cb, void *ud,
                                  qn_store_req **req);

/* group_lags_cached_v1: one row per (group, queue) of the tenant, ordered so,
 * lag summed over the group's cursors on the queue (group, queue and lag set;
 * the partition fields empty), as of the last whole pass of the stats walk
 * (qn_store_stats_cached). For metrics: O(groups x queues) rows, not one per
 * cursor, and no read of every cursor per call. */
int qn_store_group_lags(qn_store *st, const struct qn_call_opts *opts, qn_groups_cb cb, void *ud,
                        qn_store_req **req);

/* seek_consumer_group_step_v1: one committed step of a seek, at most limit
 * partitions by name after `after` (NULL: from the first). next: the last
 * name of the step (pass it as `after` to the next step), "" when the seek
 * is complete (partition names are never empty). Errors as qn_store_seek_consumer_group. */
struct qn_seek_step {
    int32_t updated;  /* cursors written by this step */
    const char *next; /* "" (SQL NULL): done */
};
typedef void (*qn_seek_step_cb)(void *ud, const struct qn_store_status *st,
                                const struct qn_seek_step *res);
int qn_store_seek_consumer_group_step(qn_store *st, const char *group, const char *queue,
                                      const char *partition, bool to_end, int64_t ts_us,
                                      const char *after, int32_t limit,
                                      const struct qn_call_opts *opts, qn_seek_step_cb cb, void *ud,
                                      qn_store_req **req);

/* seek_consumer_group_v1: value = partitions updated; missing queue/partition ->
 * QN_ENOTFOUND */
int qn_store_seek_consumer_group(qn_store *st, const char *group, const char *queue,
                                 const char *partition, bool to_end, int64_t ts_us,
                                 const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                                 qn_store_req **req);
int qn_store_delete_consumer_group(qn_store *st, const char *group, const char *queue,
                                   bool delete_metadata, const struct qn_call_opts *opts,
                                   qn_int_cb cb, void *ud, qn_store_req **req);

struct qn_dlq_row {
    uint8_t id[16];
    const char *queue, *partition, *group;
    uint8_t pid[16];
    int64_t offset;
    uint8_t message_id[16];
    const char *txn;
    const uint8_t *payload;
    size_t payload_len;
    const char *error;
    int32_t retry_count;
    int64_t failed_at_us;
};
struct qn_dlq_result {
    size_t n;
    const struct qn_dlq_row *rows;
};
typedef void (*qn_dlq_cb)(void *ud, const struct qn_store_status *st,
                          const struct qn_dlq_result *res);
int qn_store_list_dlq(qn_store *st, const char *queue, const char *group, const char *partition,
                      int32_t limit, int32_t offset, const struct qn_call_opts *opts, qn_dlq_cb cb,
                      void *ud, qn_store_req **req);
/* ---- keyset pages of the admin listings (sql/API.md, "Paged listings").
 * Each returns at most limit rows (<= 0: 100; capped at 1001) strictly after
 * the key given (NULL / QN_STORE_NO_TS: from the first row), in the listing's
 * order; opts->names filters the queues where the procedure takes it. Keys and
 * filters are borrowed for the call (copied into its parameters). Errors: as
 * every call (QN_EINVAL without cb). */
int qn_store_list_queues_page(qn_store *st, const char *namespace_, const char *task,
                              const char *after, int32_t limit, const struct qn_call_opts *opts,
                              qn_queues_cb cb, void *ud, qn_store_req **req);
int qn_store_queue_partitions_page(qn_store *st, const char *queue, const char *group,
                                   const char *after, int32_t limit,
                                   const struct qn_call_opts *opts, qn_partitions_cb cb, void *ud,
                                   qn_store_req **req);
/* queue_depth_v1: value = the summed depth of every partition of the queue for
 * the group ("" = queue mode); 0 for a missing queue. */
int qn_store_queue_depth(qn_store *st, const char *queue, const char *group,
                         const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                         qn_store_req **req);
/* after_group, after_queue and after_partition are all given or all NULL. */
int qn_store_list_consumer_groups_page(qn_store *st, const char *queue, const char *group,
                                       const char *after_group, const char *after_queue,
                                       const char *after_partition, int32_t limit,
                                       const struct qn_call_opts *opts, qn_groups_cb cb, void *ud,
                                       qn_store_req **req);
/* after_id is read only when after_failed_at_us != QN_STORE_NO_TS. */
int qn_store_list_dlq_page(qn_store *st, const char *queue, const char *group,
                           const char *partition, int64_t after_failed_at_us,
                           const uint8_t *after_id, int32_t limit, const struct qn_call_opts *opts,
                           qn_dlq_cb cb, void *ud, qn_store_req **req);
int qn_store_get_dlq(qn_store *st, const uint8_t id[16], const struct qn_call_opts *opts,
                     qn_dlq_cb cb, void *ud, qn_store_req **req);
/* delete_dlq_v1: by id when id != NULL, else by (pid, txn). value = rows deleted */
int qn_store_delete_dlq(qn_store *st, const uint8_t *id, const uint8_t *pid, const char *txn,
                        const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                        qn_store_req **req);

struct qn_stats_row {
    const char *queue;
    int32_t partitions;
    int64_t messages, segments, pending, dead_letters;
    int32_t groups;
    int64_t bytes;
};
struct qn_stats_result {
    size_t n;
    const struct qn_stats_row *rows;
};
typedef void (*qn_stats_cb)(void *ud, const struct qn_store_status *st,
                            const struct qn_stats_result *res);
int qn_store_stats(qn_store *st, const char *queue, const struct qn_call_opts *opts, qn_stats_cb cb,
                   void *ud, qn_store_req **req);
/* stats_cached_v1: every queue of the tenant as of the last whole pass of the
 * stats walk, after one step of it over at most step_parts partitions (0:
 * none). segments and bytes are 0. Bounded by step_parts whatever the
 * partition count (the metrics refresh; stats_v1 reads every partition). */
/* stats_step_v1 alone: one step of the stats walk over at most step_parts
 * (>= 1) partitions; the value is the partitions it read (-1: another caller
 * held the walk). Lets the walk go in small steps between refreshes. */
int qn_store_stats_step(qn_store *st, int32_t step_parts, const struct qn_call_opts *opts,
                        qn_int_cb cb, void *ud, qn_store_req **req);
int qn_store_stats_cached(qn_store *st, int32_t step_parts, const struct qn_call_opts *opts,
                          qn_stats_cb cb, void *ud, qn_store_req **req);

/* ---------------------------------------------------------------- dedup cache support */

/* partition_meta_v1: what the broker's dedup cache memoises per partition. */
struct qn_partition_meta {
    uint8_t pid[16];
    int32_t window; /* the queue's dedup window, seconds */
    int64_t last_offset;
    int64_t txns_start; /* sidecar purge watermark */
};
/* meta is NULL when the queue or partition does not exist. */
typedef void (*qn_partition_meta_cb)(void *ud, const struct qn_store_status *st,
                                     const struct qn_partition_meta *meta);
int qn_store_partition_meta(qn_store *st, const char *queue, const char *partition,
                            const struct qn_call_opts *opts, qn_partition_meta_cb cb, void *ud,
                            qn_store_req **req);

/* txns_window_v1: the sidecar rows created within `seconds` of now, ascending;
 * each row's blob holds its hashes (16 bytes per offset of [base, end]). */
int qn_store_txns_window(qn_store *st, const uint8_t pid[16], int32_t seconds,
                         const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                         qn_store_req **req);

/* txns_since_v1: the sidecar rows after offset `after` (end > after), ascending. */
int qn_store_txns_since(qn_store *st, const uint8_t pid[16], int64_t after,
                        const struct qn_call_opts *opts, qn_segments_cb cb, void *ud,
                        qn_store_req **req);

/* ---------------------------------------------------------------- maintenance */

/* A timestamp argument or result that is SQL NULL ("rule off"). */
#define QN_STORE_NO_TS INT64_MIN

struct qn_maint_item {
    uint8_t pid[16];
    int64_t all_cutoff_us;       /* phase 1: rule 1 cutoff, or QN_STORE_NO_TS */
    int64_t completed_cutoff_us; /* phase 1: rule 2 cutoff, or QN_STORE_NO_TS */
    int64_t cutoff_us;           /* phases 2 and 3, or QN_STORE_NO_TS */
};
struct qn_maint_list {
    size_t n;
    const struct qn_maint_item *items; /* oldest first */
};
typedef void (*qn_maint_list_cb)(void *ud, const struct qn_store_status *st,
                                 const struct qn_maint_list *res);
/* maint_worklist_v1: phase 1 retention, 2 sidecar purge, 3 max-wait eviction. */
int qn_store_maint_worklist(qn_store *st, int64_t now_us, int phase, int32_t limit,
                            const struct qn_call_opts *opts, qn_maint_list_cb cb, void *ud,
                            qn_store_req **req);

struct qn_maint_step {
    int32_t deleted;   /* rows deleted */
    int64_t frames;    /* messages in the deleted segments (0 for sidecar purges) */
    int64_t new_start; /* new log_start / txns_start, -1 when unchanged/unknown */
    bool done;         /* nothing more to delete under these cutoffs */
};
typedef void (*qn_maint_step_cb)(void *ud, const struct qn_store_status *st,
                                 const struct qn_maint_step *res);
/* retention_step_v1 (either cutoff may be QN_STORE_NO_TS). A queue whose
 * retention_sink_hold names a consumer group keeps what that group has not
 * consumed, up to retention_sink_hold_max_seconds old. */
int qn_store_retention_step(qn_store *st, const uint8_t pid[16], int64_t all_cutoff_us,
                            int64_t completed_cutoff_us, int32_t max_rows,
                            const struct qn_call_opts *opts, qn_maint_step_cb cb, void *ud,
                            qn_store_req **req);
/* txns_purge_step_v1 */
int qn_store_txns_purge_step(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                             int32_t max_rows, const struct qn_call_opts *opts, qn_maint_step_cb cb,
                             void *ud, qn_store_req **req);
/* evict_max_wait_step_v1 */
int qn_store_evict_max_wait_step(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                                 int32_t max_rows, const struct qn_call_opts *opts,
                                 qn_maint_step_cb cb, void *ud, qn_store_req **req);
/* partition_dead_v1: value false also when the partition is missing */
int qn_store_partition_dead(qn_store *st, const uint8_t pid[16], int64_t cutoff_us,
                            const struct qn_call_opts *opts, qn_bool_cb cb, void *ud,
                            qn_store_req **req);
/* partition_cleanup_step_v1 (frames and new_start unused) */
int qn_store_partition_cleanup_step(qn_store *st, int64_t cutoff_us, int32_t max_rows,
                                    const struct qn_call_opts *opts, qn_maint_step_cb cb, void *ud,
                                    qn_store_req **req);
/* metrics_purge_v1: value = rows deleted */
int qn_store_metrics_purge(qn_store *st, int64_t cutoff_us, const struct qn_call_opts *opts,
                           qn_int_cb cb, void *ud, qn_store_req **req);

/*
 * Session-level advisory locks and the database clock, for the maintenance loop.
 * A session lock belongs to the connection that took it: call these on a store
 * made with pool_size 1 (a dedicated connection) so every call of the loop runs
 * on the session that holds the lock. The lock is released when the connection
 * is lost.
 */
int qn_store_try_advisory_lock(qn_store *st, int64_t key, const struct qn_call_opts *opts,
                               qn_bool_cb cb, void *ud, qn_store_req **req);
int qn_store_advisory_unlock(qn_store *st, int64_t key, const struct qn_call_opts *opts,
                             qn_bool_cb cb, void *ud, qn_store_req **req);
/* now() of the database, Unix microseconds. */
int qn_store_db_now(qn_store *st, const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                    qn_store_req **req);
/* How many distinct queues the partitions pids[0..n) (16 bytes each) belong to;
 * partitions that no longer exist are not counted. One primary-key probe per pid;
 * the retention loop's "queues=" figure. n == 0 is allowed (value 0). */
int qn_store_count_queues_of(qn_store *st, const uint8_t (*pids)[16], size_t n,
                             const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                             qn_store_req **req);

/* ---------------------------------------------------------------- authorization lookups */

/* A partition id and its queue's name ("" when the partition is in another
 * tenant's queue: lease_queues only). */
struct qn_pid_queue {
    uint8_t pid[16];
    const char *queue;
};
struct qn_pid_queues_result {
    size_t n;
    const struct qn_pid_queue *rows;
};
typedef void (*qn_pid_queues_cb)(void *ud, const struct qn_store_status *st,
                                 const struct qn_pid_queues_result *res);
/* partition_queues_v1: the queue of each of pids[0..n) (16 bytes each) that
 * belongs to the options' tenant; others (another tenant's, or missing) have no
 * row. Reads only. */
int qn_store_partition_queues(qn_store *st, const uint8_t (*pids)[16], size_t n,
                              const struct qn_call_opts *opts, qn_pid_queues_cb cb, void *ud,
                              qn_store_req **req);
/* lease_queues_v1: every live lease of worker, with its queue's name when the
 * partition is in the options' tenant, else "". Reads only. */
int qn_store_lease_queues(qn_store *st, const char *worker, const struct qn_call_opts *opts,
                          qn_pid_queues_cb cb, void *ud, qn_store_req **req);

/* ---------------------------------------------------------------- cross-broker wake-ups */

/* notify_push_v1 (fire and forget; cb may be NULL). */
int qn_store_notify_push(qn_store *st, const char *const *queues, size_t n,
                         const struct qn_call_opts *opts, qn_int_cb cb, void *ud,
                         qn_store_req **req);

/* LISTENs on channel queen_push over a dedicated connection (reconnecting as the
 * pool does); cb(ud, "tenant/queue") for each notification, except those sent
 * over this store's own pool connections (this broker's own NOTIFY). One
 * listener; NULL stops listening. */
int qn_store_listen_push(qn_store *st, void (*cb)(void *ud, const char *payload), void *ud);

#endif
