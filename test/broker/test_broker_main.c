/*
 * test_broker_main.c - the broker's check runner: one suite per broker/src file
 * with unit-testable parts, fork mode so a crash fails one test.
 *
 * Usage: test_broker [--suite NAME]   (grpc_wire, reflection)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_test.h"

int main(int argc, char **argv)
{
    const char *only = NULL;
    if (argc == 3 && strcmp(argv[1], "--suite") == 0) {
        only = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "usage: test_broker [--suite NAME]\n");
        return 2;
    }
    struct {
        const char *name;
        Suite *(*make)(void);
    } suites[] = {
        {"grpc_wire", qn_test_grpc_wire_suite},
        {"reflection", qn_test_reflection_suite},
    };
    SRunner *sr = NULL;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        if (only && strcmp(only, suites[i].name) != 0)
            continue;
        if (sr == NULL)
            sr = srunner_create(suites[i].make());
        else
            srunner_add_suite(sr, suites[i].make());
    }
    if (sr == NULL) {
        fprintf(stderr, "test_broker: no suite named %s\n", only);
        return 2;
    }
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
