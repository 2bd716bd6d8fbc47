/*
 * pgtest.h - private to test/: access to the PostgreSQL cluster the test harness
 * started (ctest fixture `pg`, scripts/pg.sh).
 *
 * The cluster's URL comes from QUEEN_TEST_DATABASE_URL, else from the file the
 * fixture wrote (QN_TEST_PG_URL_FILE, a compile definition). Each suite works in
 * its own database so suites can run in parallel.
 */
#ifndef QN_TEST_PGTEST_H
#define QN_TEST_PGTEST_H

#include <libpq-fe.h>

/* The cluster's base URL (malloc'd), or NULL when no cluster is configured. */
char *qn_test_pg_base_url(void);

/*
 * Drops and creates database `name` and returns a libpq keyword conninfo for it
 * (malloc'd). Fails the running test when the cluster is unreachable.
 */
char *qn_test_pg_fresh_db(const char *name);

/* Same, and applies the embedded schema (qn_migrate) to it. */
char *qn_test_pg_fresh_schema(const char *name);

/* Connects (fails the test on error). */
PGconn *qn_test_pg_connect(const char *conninfo);

/* Runs sql and fails the test unless it succeeds; returns the result (caller
 * PQclear()s it). */
PGresult *qn_test_pg_exec(PGconn *c, const char *sql);

/* Runs a query returning one value and returns it as a malloc'd string (NULL for SQL
 * NULL); fails the test on error or when the result is not exactly one row. */
char *qn_test_pg_value(PGconn *c, const char *sql);

#endif
