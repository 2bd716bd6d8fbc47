/*
 * test_storage_main.c - the storage suites (one per storage/src file) for the
 * shared runner main (test/support/check_main.c: usage, fork mode, exit
 * status).
 *
 * The unit suites (arena, params, results, errmap, store_call) need nothing;
 * the others need the PostgreSQL cluster of the `pg` fixture (or
 * QUEEN_TEST_DATABASE_URL). With a cluster, the runner first builds a template
 * database holding the schema, which each schema test clones.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "pgtest.h"
#include "storage_test.h"

int qt_build_template(void);

static bool unit_only(const char *only)
{
    static const char *const units[] = {"arena", "params", "results", "errmap", "store_call"};
    if (only == NULL)
        return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(only, units[i]) == 0)
            return true;
    return false;
}

static void prepare(const char *only)
{
    if (!unit_only(only) && qt_build_template() != 0)
        fprintf(stderr, "storage tests: no schema template (no cluster, or the schema "
                        "failed to apply); schema suites will say why\n");
}

static const struct qn_check_suite suites[] = {
    {"arena", qn_test_arena_suite, false},
    {"params", qn_test_params_suite, false},
    {"results", qn_test_results_suite, false},
    {"errmap", qn_test_errmap_suite, false},
    {"store_call", qn_test_store_call_suite, false},
    {"store_engine", qn_test_store_engine_suite, false},
    {"store_pool", qn_test_store_pool_suite, false},
    {"push", qn_test_push_suite, false},
    {"pop", qn_test_pop_suite, false},
    {"ack", qn_test_ack_suite, false},
    {"txn", qn_test_txn_suite, false},
    {"fetch", qn_test_fetch_suite, false},
    {"admin", qn_test_admin_suite, false},
    {"maint", qn_test_maint_suite, false},
};

const struct qn_check_runner qn_check_runner = {"test_storage", suites, QN_CHECK_NSUITES(suites),
                                                prepare};
