/*
 * test_client_main.c - the client library's check runner: one suite per
 * source file of client/src, run in fork mode so a crash fails one test.
 * Usage: test_client [--suite NAME].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_test.h"

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
    SRunner *sr = srunner_create(qn_test_cl_wire_suite());
    srunner_add_suite(sr, qn_test_cl_status_suite());
    srunner_add_suite(sr, qn_test_cl_dial_suite());
    srunner_add_suite(sr, qn_test_cl_tls_suite());
    srunner_add_suite(sr, qn_test_cl_sync_suite());
    srunner_set_fork_status(sr, CK_FORK);
    if (only != NULL)
        srunner_run(sr, only, NULL, CK_NORMAL);
    else
        srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
