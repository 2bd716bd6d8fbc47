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
Suite *qn_test_store_suite(void);
Suite *qn_test_push_suite(void);
Suite *qn_test_pop_suite(void);
Suite *qn_test_ack_suite(void);
Suite *qn_test_txn_suite(void);
Suite *qn_test_fetch_suite(void);
Suite *qn_test_admin_suite(void);

/* Runs the loop until *flag or timeout_ms passed; returns *flag. */
bool qt_run_until(struct event_base *b, const bool *flag, int timeout_ms);
/* Runs the loop until *n >= target or timeout_ms passed; returns *n >= target. */
bool qt_run_until_count(struct event_base *b, const int *n, int target, int timeout_ms);
/* Runs the loop for ms milliseconds. */
void qt_run_for(struct event_base *b, int ms);

/* A store on conninfo with pool/depth (others default), waited up (fails the
 * test after 10 s). */
qn_store *qt_store(struct event_base *b, const char *conninfo, int pool, int depth);
qn_store *qt_store_cfg(struct event_base *b, const struct qn_store_config *cfg);

/* The outcome of a call, copied out of its callback. */
struct qt_status {
    bool done;
    int calls;     /* times the callback ran */
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

/* Database for an integration test: fresh, with or without the schema. The
 * schema one is cloned from a template built once per run (fast). */
char *qt_db_plain(const char *name);
char *qt_db_schema(const char *name);

/* 16 bytes from a seed, for hashes and ids. */
void qt_bytes16(uint64_t seed, uint8_t out[16]);

#endif
