/*
 * store_int.h - PRIVATE to storage/ (and its tests and benches): the engine's
 * internal interface. Nothing outside storage/, test/storage and bench/storage
 * may include it.
 *
 * Pieces:
 *   arena    one bump allocator per call: inputs (encoded parameters) first, then
 *            decoded results; rewound to the inputs on a retry; freed with the call.
 *   params   binary parameter encoding (scalars and one-dimensional arrays).
 *   results  bounds-checked decoding of binary result values.
 *   errmap   SQLSTATE + message -> our error code and a message for people.
 *   stmts    the table of statements: SQL text, parameter types, lane, whether
 *            it writes, and the decoder of its result.
 *   engine   requests made of steps (one statement each), sent in one pipeline
 *            sync, decoded when the sync arrives, delivered by a finish function
 *            (store_pool.c, store_engine.c, store_listen.c).
 *   calls    the storage-call helper (begin, parameters, submit) and the
 *            table-driven row decoder every procedure's decoder is built on
 *            (store_call.c).
 */
#ifndef QN_STORE_INT_H
#define QN_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "queen/store.h"

/* ---------------------------------------------------------------- type oids */

#define QN_OID_BOOL 16u
#define QN_OID_BYTEA 17u
#define QN_OID_NAME 19u
#define QN_OID_INT8 20u
#define QN_OID_INT2 21u
#define QN_OID_INT4 23u
#define QN_OID_TEXT 25u
#define QN_OID_BPCHAR 1042u
#define QN_OID_VARCHAR 1043u
#define QN_OID_TIMESTAMPTZ 1184u
#define QN_OID_UUID 2950u
#define QN_OID_VOID 2278u
#define QN_OID_JSONB 3802u
#define QN_OID_BOOL_ARR 1000u
#define QN_OID_BYTEA_ARR 1001u
#define QN_OID_INT2_ARR 1005u
#define QN_OID_INT4_ARR 1007u
#define QN_OID_TEXT_ARR 1009u
#define QN_OID_INT8_ARR 1016u
#define QN_OID_UUID_ARR 2951u

/* Microseconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define QN_PG_EPOCH_OFFSET_US INT64_C(946684800000000)

/* PostgreSQL's largest field (MaxAllocSize - 1): no parameter may exceed it. */
#define QN_PG_MAX_FIELD ((size_t)0x3fffffff)

/* ---------------------------------------------------------------- arena */

struct qn__arena_chunk;

/* A bump allocator with a hard cap on the bytes it may hold. */
struct qn__arena {
    struct qn__arena_chunk *head; /* newest chunk; allocations come from it */
    size_t total;                 /* bytes of every chunk (<= max) */
    size_t max;                   /* hard cap set at init */
};

/* Where an arena stood; rewinding frees everything allocated after it. */
struct qn__arena_mark {
    struct qn__arena_chunk *chunk;
    size_t used;
};

void qn__arena_init(struct qn__arena *a, size_t max);
/* n bytes aligned to 16; NULL when the cap would be passed or malloc fails.
 * n == 0 returns a valid unique pointer. */
void *qn__arena_alloc(struct qn__arena *a, size_t n);
void *qn__arena_zalloc(struct qn__arena *a, size_t n);
void *qn__arena_memdup(struct qn__arena *a, const void *p, size_t n);
/* NUL-terminated copy of s[0..n). */
char *qn__arena_strndup(struct qn__arena *a, const char *s, size_t n);
char *qn__arena_strdup(struct qn__arena *a, const char *s);
struct qn__arena_mark qn__arena_mark(const struct qn__arena *a);
void qn__arena_rewind(struct qn__arena *a, struct qn__arena_mark m);
/* Frees every chunk; the arena may be used again. NULL-tolerant. */
void qn__arena_free(struct qn__arena *a);

/* ---------------------------------------------------------------- params */

/*
 * The parameters of one statement, in libpq's three arrays. Every value is copied
 * into the arena. Setters never fail loudly: the first failure is kept in err
 * (QN_ENOMEM past the arena cap, QN_EINVAL for a value outside its domain) and
 * later setters do nothing; check err once after the last setter.
 */
struct qn__params {
    struct qn__arena *arena;
    int n;               /* parameters */
    const char **values; /* NULL = SQL NULL */
    int *lengths;
    int *formats; /* 1 binary, 0 text */
    int err;      /* QN_OK or the first failure */
};

int qn__params_init(struct qn__params *p, struct qn__arena *a, int n);
void qn__p_null(struct qn__params *p, int i);
void qn__p_bool(struct qn__params *p, int i, bool v);
void qn__p_i16(struct qn__params *p, int i, int16_t v);
void qn__p_i32(struct qn__params *p, int i, int32_t v);
void qn__p_i64(struct qn__params *p, int i, int64_t v);
void qn__p_uuid(struct qn__params *p, int i, const uint8_t u[16]); /* NULL -> SQL NULL */
/* Unix microseconds -> timestamptz (saturating at +-infinity). */
void qn__p_ts(struct qn__params *p, int i, int64_t unix_us);
void qn__p_bytea(struct qn__params *p, int i, const void *b, size_t len); /* b NULL -> NULL */
void qn__p_text(struct qn__params *p, int i, const char *s);              /* NULL -> NULL */
/* Text that must not be empty: NULL or "" -> dflt. */
void qn__p_text_or(struct qn__params *p, int i, const char *s, const char *dflt);
/* A text-format value (e.g. jsonb): s is sent as is with format 0. */
void qn__p_textfmt(struct qn__params *p, int i, const char *s);
void qn__p_arr_i16(struct qn__params *p, int i, const int16_t *v, size_t n);
void qn__p_arr_i32(struct qn__params *p, int i, const int32_t *v, size_t n);
void qn__p_arr_i64(struct qn__params *p, int i, const int64_t *v, size_t n);
/* NULL element -> NULL; dflt != NULL replaces NULL and "" elements. */
void qn__p_arr_text(struct qn__params *p, int i, const char *const *v, size_t n, const char *dflt);
/* The name filter of a call's options (store.h) as parameters i (exact names)
 * and i + 1 (prefixes): two text arrays, or two NULLs without a filter. */
void qn__p_names(struct qn__params *p, int i, const struct qn_name_filter *f);
/* Any array: elements already in binary form, lens[k] -1 for NULL. */
void qn__p_array(struct qn__params *p, int i, uint32_t elem_oid, const uint8_t *const *ptrs,
                 const int32_t *lens, size_t n);
/* ptrs[k] NULL -> NULL element. */
void qn__p_arr_bytea(struct qn__params *p, int i, const uint8_t *const *ptrs, const size_t *lens,
                     size_t n);

/*
 * The binary array format (array_send): int32 ndim, int32 has-null flag, uint32
 * element oid, then per dimension int32 size and int32 lower bound (1), then per
 * element int32 length (-1 for NULL) and its bytes. n == 0 is ndim 0 with no
 * dimension. Elements are given as (ptr, len) with len -1 for NULL.
 * Returns QN_OK, QN_EINVAL (n or a length too large), QN_ENOMEM.
 */
int qn__enc_array(struct qn__arena *a, uint32_t elem_oid, size_t n, const uint8_t *const *ptrs,
                  const int32_t *lens, uint8_t **out, size_t *out_len);

/* ---------------------------------------------------------------- results */

/* Scalars in binary format. Each checks the exact length: QN_EPROTOCOL_DB if not. */
int qn__dec_bool(const char *v, int len, bool *out);
int qn__dec_i16(const char *v, int len, int16_t *out);
int qn__dec_i32(const char *v, int len, int32_t *out);
int qn__dec_i64(const char *v, int len, int64_t *out);
int qn__dec_uuid(const char *v, int len, uint8_t out[16]);
/* timestamptz -> Unix microseconds (infinities and overflow saturate). */
int qn__dec_ts(const char *v, int len, int64_t *out);
/* Text: v[len] must be NUL (libpq guarantees it) and v[0..len) holds no NUL. */
int qn__dec_text(const char *v, int len, const char **out);

/* A validated one-dimensional binary array; elements walked with qn__arr_next. */
struct qn__arr {
    uint32_t elem_oid;
    int32_t n; /* elements */
    bool has_null;
    const uint8_t *pos; /* next element's length word */
    const uint8_t *end;
    int32_t next; /* index of the next element */
};
/*
 * Validates header and every element length of an array of elem_oid with at most
 * max_n elements (ndim 0 or 1, lower bound any, has-null flag 0/1 and truthful).
 * QN_EPROTOCOL_DB on anything malformed.
 */
int qn__dec_array(const char *v, int len, uint32_t elem_oid, int32_t max_n, struct qn__arr *a);
/* Next element: 1 with *p and *len (len -1, p NULL for NULL), 0 at the end. */
int qn__arr_next(struct qn__arr *a, const uint8_t **p, int32_t *len);

/*
 * Row access with a sticky error: getters return a neutral value once err is set.
 * The plain getters require a non-NULL value; the _or variants map NULL to dflt.
 */
struct qn__row {
    const PGresult *r;
    int row;
    struct qn__arena *arena; /* for texts that need copying (none today) */
    int err;                 /* QN_OK or QN_EPROTOCOL_DB */
    int bad_col;             /* first offending column, for the detail message */
};

/*
 * Checks a result's shape: ncols columns, binary format, types as listed (text
 * also accepts varchar/bpchar/name). QN_EPROTOCOL_DB otherwise.
 */
int qn__res_shape(const PGresult *r, int ncols, const uint32_t *oids);
bool qn__row_isnull(struct qn__row *w, int col);
bool qn__row_bool(struct qn__row *w, int col);
bool qn__row_bool_or(struct qn__row *w, int col, bool dflt);
int16_t qn__row_i16(struct qn__row *w, int col);
int32_t qn__row_i32(struct qn__row *w, int col);
int32_t qn__row_i32_or(struct qn__row *w, int col, int32_t dflt);
int64_t qn__row_i64(struct qn__row *w, int col);
int64_t qn__row_i64_or(struct qn__row *w, int col, int64_t dflt);
int64_t qn__row_ts(struct qn__row *w, int col);
int64_t qn__row_ts_or(struct qn__row *w, int col, int64_t dflt);
void qn__row_uuid(struct qn__row *w, int col, uint8_t out[16]);
/* NULL -> all zero bytes; *was_null (may be NULL) tells. */
void qn__row_uuid_or0(struct qn__row *w, int col, uint8_t out[16], bool *was_null);
/* Borrowed from the PGresult. NULL -> "" (never NULL). */
const char *qn__row_text_or(struct qn__row *w, int col);
const char *qn__row_text(struct qn__row *w, int col);
/* Borrowed from the PGresult; NULL -> NULL with *len 0. */
const uint8_t *qn__row_bytea_or(struct qn__row *w, int col, size_t *len);
const uint8_t *qn__row_bytea(struct qn__row *w, int col, size_t *len);

/* ---------------------------------------------------------------- errmap */

/*
 * Translates a failed statement. sqlstate may be NULL (a libpq-side error);
 * conn_bad tells that the connection is gone. Returns the code and points *human
 * into msg past a "Qxxx " prefix word (or at msg). Conflicts map to QN_ECONFLICT
 * and cancels to QN_ETIMEOUT; the engine decides about retries.
 */
int qn__errmap(const char *sqlstate, const char *msg, bool conn_bad, const char **human);
/* True for SQLSTATEs that mean the session or server is going away. */
bool qn__errmap_is_unavailable(const char *sqlstate);

/* ---------------------------------------------------------------- pidcache.c */

/* Longest key kept: tenant + queue (<= 255) + NUL + partition (<= 255). */
#define QN__PIDCACHE_KEY_MAX (16 + 255 + 1 + 255)

struct qn__pidcache_entry {
    uint8_t *key; /* NULL: empty way */
    size_t klen;
    uint64_t h;
    uint64_t tick; /* last use */
    uint8_t pid[16];
};

struct qn__pidcache {
    struct qn__pidcache_entry *e; /* sets * 4 ways; NULL: cache off */
    uint32_t sets;                /* power of two */
    uint64_t tick;
    uint64_t hits, misses;
};

/* cap 0: off (every lookup misses). QN_ENOMEM. */
int qn__pidcache_init(struct qn__pidcache *c, uint32_t cap);
void qn__pidcache_free(struct qn__pidcache *c);
/* partition NULL or "" = "Default". */
bool qn__pidcache_get(struct qn__pidcache *c, const uint8_t tenant[16], const char *queue,
                      const char *part, uint8_t pid[16]);
void qn__pidcache_put(struct qn__pidcache *c, const uint8_t tenant[16], const char *queue,
                      const char *part, const uint8_t pid[16]);
/* The store's cache; NULL for no store or when the cache is off. */
struct qn__pidcache *qn__store_pids(qn_store *st);

/* ---------------------------------------------------------------- statements */

enum qn__stmt_id {
    QN_STMT_PUSH,
    QN_STMT_PUSH_ONE,
    QN_STMT_SEGMENT_AT,
    QN_STMT_POP,
    QN_STMT_POP_DISCOVER,
    QN_STMT_POP_ONE,
    QN_STMT_POP_BUNDLE,
    QN_STMT_HAS_PENDING,
    QN_STMT_POP_GATE,
    QN_STMT_ACK,
    QN_STMT_ACK_BUNDLE,
    QN_STMT_DLQ_HEAD,
    QN_STMT_RENEW,
    QN_STMT_RELEASE,
    QN_STMT_CHECK_LEASES,
    QN_STMT_FETCH,
    QN_STMT_CONFIGURE_QUEUE,
    QN_STMT_GET_QUEUE,
    QN_STMT_QUEUE_ENCRYPTED,
    QN_STMT_LIST_QUEUES,
    QN_STMT_QUEUE_PARTITIONS,
    QN_STMT_DELETE_QUEUE,
    QN_STMT_LIST_GROUPS,
    QN_STMT_SEEK_GROUP,
    QN_STMT_DELETE_GROUP,
    QN_STMT_LIST_DLQ,
    QN_STMT_GET_DLQ,
    QN_STMT_DELETE_DLQ,
    QN_STMT_STATS,
    QN_STMT_NOTIFY_PUSH,
    QN_STMT_PARTITION_META,
    QN_STMT_TXNS_WINDOW,
    QN_STMT_TXNS_SINCE,
    QN_STMT_MAINT_WORKLIST,
    QN_STMT_RETENTION_STEP,
    QN_STMT_TXNS_PURGE_STEP,
    QN_STMT_EVICT_MAX_WAIT_STEP,
    QN_STMT_PARTITION_DEAD,
    QN_STMT_PARTITION_CLEANUP_STEP,
    QN_STMT_METRICS_PURGE,
    QN_STMT_TRY_LOCK,
    QN_STMT_UNLOCK,
    QN_STMT_DB_NOW,
    QN_STMT_QUEUES_OF,
    QN_STMT_PARTITION_QUEUES,
    QN_STMT_LEASE_QUEUES,
    /* the admin listings' keyset pages */
    QN_STMT_LIST_QUEUES_PAGE,
    QN_STMT_QUEUE_PARTITIONS_PAGE,
    QN_STMT_QUEUE_DEPTH,
    QN_STMT_LIST_GROUPS_PAGE,
    QN_STMT_LIST_DLQ_PAGE,
    QN_STMT_GROUP_LAGS,
    QN_STMT_STATS_CACHED,
    QN_STMT_STATS_STEP,
    QN_STMT_DELETE_QUEUE_STEP,
    QN_STMT_SEEK_GROUP_STEP,
    QN_STMT_COUNT
};
/* Statements registered at run time (tests, benches) take ids from here. */
#define QN_STMT_DYN_MAX 16
#define QN_STMT_MAX (QN_STMT_COUNT + QN_STMT_DYN_MAX)

#define QN_STMT_MAX_PARAMS 16

/* Lanes: a write is never queued behind another client's bulk read. Pool
 * connections below write_reserve serve the write lane only. */
#define QN__LANE_WRITE 0
#define QN__LANE_READ 1
#define QN__LANES 2
/* QUEUED requests wait per lane; a conflict's retry first waits out a backoff */
#define QN__WAIT_BACKOFF QN__LANES
#define QN__WAITQS (QN__LANES + 1)

/* Decodes step `step`'s result (kept alive until the callback returns) into the
 * request's arena. Returns QN_OK or QN_EPROTOCOL_DB / QN_ENOMEM. */
typedef int (*qn__decode_fn)(qn_store_req *r, int step, const PGresult *res);

struct qn__stmt {
    const char *name; /* prepared statement name, unique per connection */
    const char *sql;
    int nparams;
    uint32_t types[QN_STMT_MAX_PARAMS];
    uint8_t lane;         /* QN__LANE_WRITE or QN__LANE_READ */
    bool writes;          /* may change the database: a lost outcome is in doubt */
    qn__decode_fn decode; /* its result's decoder (NULL: ignored) */
};
extern const struct qn__stmt qn__stmts[QN_STMT_COUNT];

/* The default tenant 00000000-0000-0000-0000-000000000001. */
extern const uint8_t qn__default_tenant[16];

/* ---------------------------------------------------------------- engine */
/* Calls the user's callback with the outcome (st->code != QN_OK: failure). */
typedef void (*qn__finish_fn)(qn_store_req *r, const struct qn_store_status *st);
/* Any function pointer type, stored and cast back by the finish function. */
typedef void (*qn__anyfn)(void);

struct qn__step {
    int stmt;              /* statement id, or -1: run sql as unnamed statement */
    const char *sql;       /* stmt == -1 only (arena) */
    const uint32_t *types; /* stmt == -1 only */
    struct qn__params p;
    int result_format;    /* 1 binary (default), 0 text */
    qn__decode_fn decode; /* NULL: result ignored */
    void *out;            /* the decoder's product */
    size_t expect;        /* for the decoder: items sent (segments, acks, entries) */
    int kind;             /* free for the caller (txn step kinds) */
};

/*
 * Makes a request with room for nsteps steps (opts may be NULL: no deadline,
 * default tenant). The caller adds steps with qn__req_add, sets finish/cb/ud and
 * submits with qn__req_submit, or frees an unsubmitted one with qn__req_discard.
 */
int qn__req_new(qn_store *st, int nsteps, const struct qn_call_opts *opts, qn_store_req **out);
/* Appends a step running statement stmt, its params initialised to NULLs
 * (qn__stmts nparams). NULL when the request is full or stmt is unknown. */
struct qn__step *qn__req_add(qn_store_req *r, int stmt, qn__decode_fn decode);
/* Appends a step running sql (copied) as an unnamed statement with nparams
 * parameters of types (copied); NULL when the request is full or on ENOMEM. */
struct qn__step *qn__req_add_sql(qn_store_req *r, const char *sql, const uint32_t *types,
                                 int nparams);
/* Overrides the class derived from the steps' statements (raw SQL). */
void qn__req_set_class(qn_store_req *r, int lane, bool writes);
/* A request with no store, for decoding only (unit tests, fuzzing): it can be
 * given steps and fed results, never submitted. Free with qn__req_discard. */
int qn__req_new_detached(int nsteps, qn_store_req **out);
/* Removes the last step (a step whose params could not be built). */
void qn__req_pop_step(qn_store_req *r);
void qn__req_set_tenant(qn_store_req *r, const uint8_t *tenant);
void qn__req_set_deadline(qn_store_req *r, int64_t deadline_ms);
/* The request's arena (inputs, then outputs). */
struct qn__arena *qn__req_arena(qn_store_req *r);
struct qn__step *qn__req_steps(qn_store_req *r, int *n);
const uint8_t *qn__req_tenant(const qn_store_req *r);
void qn__req_set_finish(qn_store_req *r, qn__finish_fn fin, qn__anyfn cb, void *ud);
/* A pointer the building call keeps for its finish function (NULL until set). */
void qn__req_set_data(qn_store_req *r, void *data);
void *qn__req_data(const qn_store_req *r);
/* The store a request belongs to (NULL for a detached one). */
qn_store *qn__req_store(const qn_store_req *r);
qn__anyfn qn__req_cb(const qn_store_req *r);
void *qn__req_ud(const qn_store_req *r);
/* On failure the step that raised (index), else -1. */
int qn__req_failed_step(const qn_store_req *r);
/* Product of step i's decoder. */
void *qn__req_out(const qn_store_req *r, int i);
/*
 * Validates params (a step's p.err), queues r and arranges dispatch on the loop.
 * On QN_OK *req (may be NULL) = r and the callback will run once. On failure r is
 * freed and nothing runs: QN_EINVAL/QN_ENOMEM (params), QN_EBUSY (max_waiting),
 * QN_EUNAVAILABLE (every connection down), QN_ESHUTDOWN (store closing).
 */
int qn__req_submit(qn_store_req *r, qn_store_req **req);
void qn__req_discard(qn_store_req *r);

/* ---------------------------------------------------------------- calls */

/*
 * One procedure call, the same few lines for every qn_store_* function:
 *
 *     struct qn__step *s = qn__call_begin(st, QN_STMT_X, opts, &r, &rc);
 *     if (s == NULL)
 *         return rc;
 *     qn__p_text(&s->p, 0, queue);          (the parameters, in order)
 *     return qn__call_submit(r, finish_x, (qn__anyfn)cb, ud, req);
 *
 * qn__call_begin makes a one-step request (opts may be NULL) whose decoder is
 * the statement's table entry; NULL with *rc set on failure (nothing to free).
 * qn__call_submit sets the finish function and submits (see qn__req_submit:
 * on failure r is freed and nothing runs).
 */
struct qn__step *qn__call_begin(qn_store *st, int stmt, const struct qn_call_opts *opts,
                                qn_store_req **r, int *rc);
int qn__call_submit(qn_store_req *r, qn__finish_fn fin, qn__anyfn cb, void *ud, qn_store_req **req);

/* Defines finish function `name` handing step 0's product (NULL on failure) to a
 * callback of type cbtype, void (*)(void *, const struct qn_store_status *,
 * const T *). */
#define QN__FINISH_PTR(name, cbtype)                                                               \
    static void name(qn_store_req *r, const struct qn_store_status *st)                            \
    {                                                                                              \
        cbtype cb = (cbtype)qn__req_cb(r);                                                         \
        cb(qn__req_ud(r), st, st->code == QN_OK ? qn__req_out(r, 0) : NULL);                       \
    }

/* Common finish: callbacks of type qn_int_cb / qn_bool_cb with step 0's product
 * (an int64_t / bool in the arena). */
void qn__finish_int(qn_store_req *r, const struct qn_store_status *st);
void qn__finish_bool(qn_store_req *r, const struct qn_store_status *st);

/*
 * The table-driven row decoder. A rowspec lists a result's columns in order,
 * each with its kind (which fixes the expected type: bool, int2, int4, int8,
 * timestamptz, uuid, text - varchar, bpchar and name accepted -, bytea), where
 * its value goes in the row structure, and whether NULL is allowed (then the
 * field takes dflt for numbers, "" for text, NULL/0 for bytea, zeros for a
 * uuid). qn__decode_rows checks the shape (column count, binary format, types)
 * and the row count, allocates the rows in the request's arena, fills them, runs
 * row_ok on each, and makes the step's product:
 *   - list_size > 0: a zeroed list_size structure whose size_t at list_n_off is
 *     the row count and whose pointer at list_rows_off points at the rows;
 *   - otherwise (max_rows 1): the row itself; with no row, NULL when empty_null,
 *     else a row of the columns' defaults.
 * Anything else is QN_EPROTOCOL_DB (QN_ENOMEM past the arena cap).
 */
enum qn__col_kind {
    QN__C_BOOL,
    QN__C_I16,
    QN__C_I32,
    QN__C_I64,
    QN__C_TS,
    QN__C_UUID,
    QN__C_TEXT,
    QN__C_BYTEA
};

struct qn__col {
    uint8_t kind; /* enum qn__col_kind */
    bool nullable;
    uint16_t off;     /* offset of the field in the row structure */
    uint16_t len_off; /* bytea: offset of its size_t length */
    int64_t dflt;     /* numbers and bool: the value of a NULL */
};

#define QN__ROWSPEC_MAX_COLS 32

struct qn__rowspec {
    int ncols;
    const struct qn__col *cols;
    size_t row_size;
    int32_t min_rows;
    int32_t max_rows; /* < 0: any */
    size_t list_size; /* 0: single-row product */
    size_t list_n_off, list_rows_off;
    bool empty_null;                 /* single-row: no row -> NULL product */
    bool (*row_ok)(const void *row); /* NULL: every row is fine */
};

/* Size-checked field offset: the field must be exactly `size` bytes. */
#define QN__FOFF(T, f, size)                                                                       \
    (offsetof(T, f) + 0 * sizeof(char[sizeof(((T *)0)->f) == (size) ? 1 : -1]))
/* Columns: required (NOT NULL) and nullable with a default. */
#define QN__BOOL(T, f)                                                                             \
    {                                                                                              \
        QN__C_BOOL, false, QN__FOFF(T, f, sizeof(bool)), 0, 0                                      \
    }
#define QN__BOOL_OR(T, f, d)                                                                       \
    {                                                                                              \
        QN__C_BOOL, true, QN__FOFF(T, f, sizeof(bool)), 0, (d)                                     \
    }
#define QN__I16(T, f)                                                                              \
    {                                                                                              \
        QN__C_I16, false, QN__FOFF(T, f, 2), 0, 0                                                  \
    }
#define QN__I32(T, f)                                                                              \
    {                                                                                              \
        QN__C_I32, false, QN__FOFF(T, f, 4), 0, 0                                                  \
    }
#define QN__I32_OR(T, f, d)                                                                        \
    {                                                                                              \
        QN__C_I32, true, QN__FOFF(T, f, 4), 0, (d)                                                 \
    }
#define QN__I64(T, f)                                                                              \
    {                                                                                              \
        QN__C_I64, false, QN__FOFF(T, f, 8), 0, 0                                                  \
    }
#define QN__I64_OR(T, f, d)                                                                        \
    {                                                                                              \
        QN__C_I64, true, QN__FOFF(T, f, 8), 0, (d)                                                 \
    }
#define QN__TS(T, f)                                                                               \
    {                                                                                              \
        QN__C_TS, false, QN__FOFF(T, f, 8), 0, 0                                                   \
    }
#define QN__TS_OR(T, f, d)                                                                         \
    {                                                                                              \
        QN__C_TS, true, QN__FOFF(T, f, 8), 0, (d)                                                  \
    }
#define QN__UUID(T, f)                                                                             \
    {                                                                                              \
        QN__C_UUID, false, QN__FOFF(T, f, 16), 0, 0                                                \
    }
#define QN__UUID_OR0(T, f)                                                                         \
    {                                                                                              \
        QN__C_UUID, true, QN__FOFF(T, f, 16), 0, 0                                                 \
    }
#define QN__TEXT(T, f)                                                                             \
    {                                                                                              \
        QN__C_TEXT, false, QN__FOFF(T, f, sizeof(char *)), 0, 0                                    \
    }
#define QN__TEXT_OR(T, f)                                                                          \
    {                                                                                              \
        QN__C_TEXT, true, QN__FOFF(T, f, sizeof(char *)), 0, 0                                     \
    }
#define QN__BYTEA(T, f, lenf)                                                                      \
    {                                                                                              \
        QN__C_BYTEA, false, QN__FOFF(T, f, sizeof(void *)), QN__FOFF(T, lenf, sizeof(size_t)), 0   \
    }
#define QN__BYTEA_OR(T, f, lenf)                                                                   \
    {                                                                                              \
        QN__C_BYTEA, true, QN__FOFF(T, f, sizeof(void *)), QN__FOFF(T, lenf, sizeof(size_t)), 0    \
    }
#define QN__NCOLS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int qn__decode_rows(qn_store_req *r, int step, const PGresult *res, const struct qn__rowspec *spec);

/* ---------------------------------------------------------------- decoders */

/* The decoder of every statement (the table in stmts.c names them). */
int qn__decode_scalar_int(qn_store_req *r, int step, const PGresult *res); /* int2/4/8 */
int qn__decode_seek_step(qn_store_req *r, int step, const PGresult *res);
int qn__decode_scalar_bool(qn_store_req *r, int step, const PGresult *res);
int qn__decode_void(qn_store_req *r, int step, const PGresult *res);
int qn__decode_push(qn_store_req *r, int step, const PGresult *res);
int qn__decode_segments(qn_store_req *r, int step, const PGresult *res);
int qn__decode_ack_bundle(qn_store_req *r, int step, const PGresult *res);
int qn__decode_pop_bundle(qn_store_req *r, int step, const PGresult *res);
int qn__decode_pop(qn_store_req *r, int step, const PGresult *res);
int qn__decode_pop_gate(qn_store_req *r, int step, const PGresult *res);
int qn__decode_ack(qn_store_req *r, int step, const PGresult *res);
int qn__decode_dlq_head(qn_store_req *r, int step, const PGresult *res);
int qn__decode_renew(qn_store_req *r, int step, const PGresult *res);
int qn__decode_fetch(qn_store_req *r, int step, const PGresult *res);
int qn__decode_queues(qn_store_req *r, int step, const PGresult *res);
int qn__decode_configure(qn_store_req *r, int step, const PGresult *res);
int qn__decode_partitions(qn_store_req *r, int step, const PGresult *res);
int qn__decode_groups(qn_store_req *r, int step, const PGresult *res);
int qn__decode_groups_page(qn_store_req *r, int step, const PGresult *res);
int qn__decode_dlq(qn_store_req *r, int step, const PGresult *res);
int qn__decode_stats(qn_store_req *r, int step, const PGresult *res);
int qn__decode_pid_queues(qn_store_req *r, int step, const PGresult *res);
int qn__decode_partition_meta(qn_store_req *r, int step, const PGresult *res);
int qn__decode_txns(qn_store_req *r, int step, const PGresult *res);
int qn__decode_worklist(qn_store_req *r, int step, const PGresult *res);
int qn__decode_maint_step(qn_store_req *r, int step, const PGresult *res);

int qn__decode_push_one(qn_store_req *r, int step, const PGresult *res);

/* Internal: parameters shared by push/txn and ack/txn. */
int qn__params_push(struct qn__params *p, const struct qn_push_segment *segs, size_t n, bool strict,
                    bool resolve, const uint8_t *tenant);
int qn__params_ack(struct qn__params *p, const struct qn_ack_args *a, bool strict);

/* ---------------------------------------------------------------- tests, benches */

/* Registers a statement prepared on every connection under `name` (copied),
 * read lane, read-only (see qn__store_set_class). Returns its id
 * (>= QN_STMT_COUNT) or QN_ELIMIT / QN_EINVAL / QN_ENOMEM. */
int qn__store_register(qn_store *st, const char *name, const char *sql, int nparams,
                       const uint32_t *types);

/* A raw result handed to a qn__sql_cb: borrowed until the callback returns. */
typedef void (*qn__sql_cb)(void *ud, const struct qn_store_status *st, const PGresult *res);
/*
 * Runs one statement: stmt >= 0 a registered id, else `sql` unnamed with types.
 * params: an initialised qn__params on a scratch arena (values are copied).
 * Text or binary results per result_format.
 */
int qn__store_sql(qn_store *st, int stmt, const char *sql, const uint32_t *types,
                  const struct qn__params *params, int result_format,
                  const struct qn_call_opts *opts, qn__sql_cb cb, void *ud, qn_store_req **req);
/* Same, many statements in one sync (one implicit transaction). */
int qn__store_sql_many(qn_store *st, int nstmts, const int *stmt, const char *const *sql,
                       const uint32_t *const *types, const struct qn__params *params,
                       const struct qn_call_opts *opts, qn__sql_cb cb, void *ud,
                       qn_store_req **req);
/* The class of a registered statement (lane, may write). QN_EINVAL for an id
 * that was not registered at run time. */
int qn__store_set_class(qn_store *st, int stmt, int lane, bool writes);
/* qn__store_sql with raw SQL in the given class (stmt must be -1). */
int qn__store_sql_as(qn_store *st, int lane, bool writes, const char *sql, const uint32_t *types,
                     const struct qn__params *params, int result_format,
                     const struct qn_call_opts *opts, qn__sql_cb cb, void *ud, qn_store_req **req);
/* Sends a server cancel for whatever connection idx is running (tests). */
int qn__store_cancel_current(qn_store *st, int idx);
/* Backend pid of connection idx (0 when not connected). */
int qn__store_backend_pid(const qn_store *st, int idx);
/* Socket of connection idx (-1 when not connected): tests find it at a proxy. */
int qn__store_conn_socket(const qn_store *st, int idx);

#endif
