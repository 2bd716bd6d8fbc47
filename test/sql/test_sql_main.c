/*
 * test_sql_main.c - the SQL integration runner: one suite per sql/ file area,
 * against a real PostgreSQL (the ctest `pg` fixture, or QUEEN_TEST_DATABASE_URL),
 * fork mode so a crash fails one test, not the runner.
 *
 * Usage: test_sql [--suite NAME]  (schema, push, pop, ack, maint, admin, queen).
 * ctest registers one entry per suite so they run in parallel, each in its own
 * database.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_test.h"

int main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--suite") == 0 && i + 1 < argc)
            only = argv[++i];
    }
    struct {
        const char *name;
        Suite *(*make)(void);
    } all[] = {
        {"schema", qt_suite_schema}, {"push", qt_suite_push},   {"pop", qt_suite_pop},
        {"ack", qt_suite_ack},       {"maint", qt_suite_maint}, {"admin", qt_suite_admin},
        {"queen", qt_suite_queen},
    };
    SRunner *sr = NULL;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (only != NULL && strcmp(only, all[i].name) != 0)
            continue;
        if (sr == NULL)
            sr = srunner_create(all[i].make());
        else
            srunner_add_suite(sr, all[i].make());
    }
    if (sr == NULL) {
        fprintf(stderr, "test_sql: no suite named %s\n", only);
        return 2;
    }
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
