/*
 * test_sql_main.c - the SQL integration suites (one per sql/ file area, and the
 * Queen MQ-shaped database) for the shared runner main
 * (test/support/check_main.c: usage, fork mode, exit status). They run against
 * a real PostgreSQL (the ctest `pg` fixture, or QUEEN_TEST_DATABASE_URL); ctest
 * registers one entry per suite so they run in parallel, each in its own
 * database.
 */
#include "check_main.h"
#include "sql_test.h"

static const struct qn_check_suite suites[] = {
    {"schema", qt_suite_schema, false}, {"push", qt_suite_push, false},
    {"pop", qt_suite_pop, false},       {"ack", qt_suite_ack, false},
    {"maint", qt_suite_maint, false},   {"admin", qt_suite_admin, false},
    {"queen", qt_suite_queen, false},
};

const struct qn_check_runner qn_check_runner = {"test_sql", suites, QN_CHECK_NSUITES(suites), NULL};
