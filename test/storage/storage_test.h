/*
 * storage_test.h - PRIVATE to test/storage: the suites the runner registers (one
 * per storage/src file) and helpers shared by the integration suites.
 */
#ifndef QN_STORAGE_TEST_H
#define QN_STORAGE_TEST_H

#include <stdbool.h>
#include <stdint.h>

#include <check.h>
#include <libpq-fe.h>

#include "queen/store.h"

struct event_base;

Suite *qn_test_arena_suite(void);
Suite *qn_test_params_suite(void);
Suite *qn_test_results_suite(void);
Suite *qn_test_errmap_suite(void);
Suite *qn_test_store_engine_suite(void);
Suite *qn_test_store_pool_suite(void);
Suite *qn_test_store_call_suite(void);
Suite *qn_test_push_suite(void);
Suite *qn_test_pop_suite(void);
Suite *qn_test_ack_suite(void);
Suite *qn_test_txn_suite(void);
Suite *qn_test_fetch_suite(void);
Suite *qn_test_admin_suite(void);
Suite *qn_test_maint_suite(void);

/* Runs the loop until *flag or timeout_ms passed; returns *flag. */
bool qt_run_until(struct event_base *b, const bool *flag, int timeout_ms);
/* Runs the loop until *n >= target or timeout_ms passed; returns *n >= target. */
bool qt_run_until_count(struct event_base *b, const int *n, int target, int timeout_ms);
/* Runs the loop for ms milliseconds. */
void qt_run_for(struct event_base *b, int ms);

/* A store on conninfo with pool/depth (others default), waited until every
 * connection is up (fails the test after 10 s). */
qn_store *qt_store(struct event_base *b, const char *conninfo, int pool, int depth);
qn_store *qt_store_cfg(struct event_base *b, const struct qn_store_config *cfg);

/* The outcome of a call, copied out of its callback. */
struct qt_status {
    bool done;
    int calls; /* times the callback ran */
    int code;
    char sqlstate[8];
    char message[512];
    int ntuples;     /* qt_exec: rows of the result, -1 on failure */
    bool value_null; /* qt_exec: row 0 column 0 */
    char value[256];
};
void qt_copy_status(struct qt_status *o, const struct qn_store_status *st);

/* Runs sql through the store (no params, text results), waits up to 30 s and
 * returns the code; out (may be NULL) gets the status and row 0 column 0. */
int qt_exec(struct event_base *b, qn_store *st, const char *sql, struct qt_status *out);

/* conninfo with host and port replaced by 127.0.0.1 and port (malloc'd); *host
 * and *dbport (may be NULL) get the original host and port. */
char *qt_conninfo_via(const char *conninfo, int port, char host[128], int *dbport);

/* Database for an integration test: fresh, with or without the schema. The
 * schema one is cloned from a template built once per run (fast). */
char *qt_db_plain(const char *name);
char *qt_db_schema(const char *name);

/* 16 bytes from a seed, for hashes and ids. */
void qt_bytes16(uint64_t seed, uint8_t out[16]);

/* A real segment (codec-packed, zstd) of count frames whose transaction ids are
 * "<prefix>-<first + i>", with its hash blob. Free with qt_seg_free. */
struct qt_seg {
    uint8_t *blob;
    size_t blob_len;
    uint8_t *hashes; /* count * 16 */
    uint32_t count;
};
void qt_seg_make(struct qt_seg *s, uint32_t count, const char *prefix, uint64_t first);
void qt_seg_free(struct qt_seg *s);
/* A push segment over s (verified -1). */
struct qn_push_segment qt_push_seg(const struct qt_seg *s, const char *queue,
                                   const char *partition);

/* Synchronous wrappers for procedure tests: run the call, wait up to 10 s. The
 * result pointers they return point to copies kept until the next call of the
 * same wrapper (tests compare fields). */
struct qt_push_out {
    struct qt_status s;
    size_t n;
    struct qn_push_seg_result segs[16];
    struct qn_push_dup dups[16][16];
};
int qt_push(struct event_base *b, qn_store *st, const struct qn_push_segment *segs, size_t n,
            bool strict, struct qt_push_out *out);
int qt_push1(struct event_base *b, qn_store *st, const char *queue, const char *partition,
             const struct qt_seg *seg, struct qt_push_out *out);

struct qt_pop_out {
    struct qt_status s;
    size_t n;
    struct qn_pop_segment segs[32];
    char queue[32][64], partition[32][64];
    uint8_t blobdata[1 << 16];
    size_t blobused;
};
int qt_pop(struct event_base *b, qn_store *st, const struct qn_pop_args *a, struct qt_pop_out *out);
/* Defaults for a pop of queue/partition by worker (lease), budget messages. */
struct qn_pop_args qt_pop_args(const char *queue, const char *partition, const char *group,
                               const char *worker, int32_t budget);

struct qt_ack_out {
    struct qt_status s;
    struct qn_ack_result r;
    struct qn_ack_item_result items[64];
};
int qt_ack(struct event_base *b, qn_store *st, const struct qn_ack_args *a, struct qt_ack_out *out);

/* A second plain connection to the same database, for checks behind the store. */
char *qt_value(const char *conninfo, const char *sql);

#endif
