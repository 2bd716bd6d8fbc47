/*
 * test_storage_main.c - the storage check runner: one suite per storage/src
 * file, fork mode, so a crash fails one test and not the runner.
 *
 * Usage: test_storage [--suite NAME]. The unit suites (arena, params, results,
 * errmap) need nothing; the others need the PostgreSQL cluster of the `pg`
 * fixture (or QUEEN_TEST_DATABASE_URL). With a cluster, the runner first builds
 * a template database holding the schema, which each schema test clones.
 */
#include <stdio.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--suite") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--suite NAME]\n", argv[0]);
            return 2;
        }
    }
    if (!unit_only(only) && qt_build_template() != 0)
        fprintf(stderr, "storage tests: no schema template (no cluster, or the schema "
                        "failed to apply); schema suites will say why\n");
    SRunner *sr = srunner_create(qn_test_arena_suite());
    srunner_add_suite(sr, qn_test_params_suite());
    srunner_add_suite(sr, qn_test_results_suite());
    srunner_add_suite(sr, qn_test_errmap_suite());
    srunner_add_suite(sr, qn_test_store_call_suite());
    srunner_add_suite(sr, qn_test_store_engine_suite());
    srunner_add_suite(sr, qn_test_store_pool_suite());
    srunner_add_suite(sr, qn_test_push_suite());
    srunner_add_suite(sr, qn_test_pop_suite());
    srunner_add_suite(sr, qn_test_ack_suite());
    srunner_add_suite(sr, qn_test_txn_suite());
    srunner_add_suite(sr, qn_test_fetch_suite());
    srunner_add_suite(sr, qn_test_admin_suite());
    srunner_add_suite(sr, qn_test_maint_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run(sr, only, NULL, CK_ENV); /* CK_VERBOSITY=verbose lists tests */
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    srunner_free(sr);
    if (run == 0) {
        fprintf(stderr, "no tests ran (unknown suite?)\n");
        return 1;
    }
    return failed ? 1 : 0;
}
