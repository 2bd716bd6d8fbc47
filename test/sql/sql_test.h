/*
 * sql_test.h - private to test/sql: helpers for the SQL integration suites.
 *
 * Every suite works in its own database (created once per suite by an unchecked
 * fixture, schema applied by qn_migrate), and every test uses its own queue
 * names, so the tests of a suite can share that database. Plain synchronous
 * libpq; bytea arrays travel as binary parameters. Time is controlled in SQL
 * (rows stamped in the past), never by sleeping. Failures end the test.
 */
#ifndef QN_TEST_SQL_TEST_H
#define QN_TEST_SQL_TEST_H

#include <check.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The suite database's conninfo (set by qt_suite_fixture). */
extern char *qt_conninfo;

/* Makes (drops and re-creates) database queen_test_sql_<suite> with the schema
 * applied and records it in qt_conninfo. For tcase_add_unchecked_fixture. */
void qt_suite_db(const char *suite);

/* A TCase with the suite database fixture and the given timeout. */
TCase *qt_tcase(const char *name, void (*fixture)(void), int timeout_s);

PGconn *qt_connect(void);

/* Runs SQL built from fmt; fails the test on error. Caller PQclear()s. */
PGresult *qt_q(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs SQL that must fail; returns the SQLSTATE (static buffer) and fails the
 * test if it succeeded. The message goes into msg (may be NULL). */
const char *qt_fail(PGconn *c, char *msg, size_t msgcap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* One value as int64 / bool / string (NULL for SQL NULL; owned by the helper and
 * valid until 64 more strings were returned: do not free). */
int64_t qt_i(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool qt_b(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *qt_s(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool qt_null(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Result access by column name. qt_gi fails on NULL. */
int64_t qt_gi(const PGresult *r, int row, const char *col);
bool qt_gnull(const PGresult *r, int row, const char *col);
const char *qt_gs(const PGresult *r, int row, const char *col);

/* ---- segments */

struct qt_seg {
    char queue[128];
    char part[128];
    int n;            /* frames */
    uint8_t *hashes;  /* n * 16 */
    int64_t verified; /* -1: cannot vouch */
    uint8_t *blob;    /* zstd frame of n * raw_per_msg bytes */
    size_t blob_len;
};

/* A segment whose frames carry transaction ids "<prefix><first>" ..
 * "<prefix><first+n-1>"; its blob is a real zstd frame of n * raw_per_msg bytes
 * (raw_per_msg 0 = 64). verified = -1. */
void qt_seg_make(struct qt_seg *s, const char *queue, const char *part, const char *prefix,
                 int first, int n, size_t raw_per_msg);
void qt_seg_free(struct qt_seg *s);
/* Replaces the blob by arbitrary non-zstd bytes (unknown content size). */
void qt_seg_opaque_blob(struct qt_seg *s, size_t len);

/* push_v1 of segs; returns the result, which may be an error (check status). */
PGresult *qt_push_raw(PGconn *c, const struct qt_seg *segs, int n, bool strict);
/* push_v1, must succeed. */
PGresult *qt_push(PGconn *c, const struct qt_seg *segs, int n, bool strict);
/* One segment of txn ids prefix<first..>; must be queued; returns its base. */
int64_t qt_push1(PGconn *c, const char *queue, const char *part, const char *prefix, int first,
                 int n);

/* The 16-byte hash of a transaction id. */
void qt_hash(const char *txn, uint8_t out[16]);

/* Partition id text (static buffer per call site: copy it) of queue/partition. */
void qt_pid(PGconn *c, const char *queue, const char *part, char out[37]);

/* ---- pop / ack */

struct qt_pop {
    const char *queue;
    const char *part;  /* NULL: any */
    const char *group; /* NULL: queue mode */
    int budget;
    int64_t max_bytes; /* 0: unlimited */
    int overhead;
    int max_msg;
    int lease_seconds; /* 0: queue's */
    const char *worker;
    bool auto_ack;
    int max_partitions;
    const char *sub_mode; /* NULL: 'all' */
    const char *sub_from; /* timestamptz text or NULL */
};
PGresult *qt_pop(PGconn *c, const struct qt_pop *p);
/* Sends the same pop without waiting: read it with PQgetResult (tests of waits). */
void qt_pop_send(PGconn *c, const struct qt_pop *p);
/* Messages delivered by a pop result (sum of r_take). */
int64_t qt_taken(const PGresult *r);

/* ack_v1 items: hash (txn id string, or NULL) or offset, status 1..4. */
struct qt_ack_item {
    const char *txn;
    int64_t off;
    int status;
};
PGresult *qt_ack_raw(PGconn *c, const char *pid, const char *group, const char *worker,
                     const struct qt_ack_item *items, int n, bool strict);
PGresult *qt_ack(PGconn *c, const char *pid, const char *group, const char *worker,
                 const struct qt_ack_item *items, int n);
/* Row of the summary (r_idx = -1). */
int qt_ack_summary(const PGresult *r);

/* ---- suites */
Suite *qt_suite_schema(void);
Suite *qt_suite_push(void);
Suite *qt_suite_pop(void);
Suite *qt_suite_ack(void);
Suite *qt_suite_maint(void);
Suite *qt_suite_admin(void);
Suite *qt_suite_queen(void);

#endif
