/*
 * test_auth_main.c - the check runner of broker/src/auth: one suite per source
 * file (grant, jwt, mtls), fork mode. Usage: test_auth [--suite NAME].
 */
#include <stdio.h>
#include <string.h>

#include "auth_test.h"

int main(int argc, char **argv)
{
    const char *only = NULL;
    if (argc == 3 && strcmp(argv[1], "--suite") == 0) {
        only = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--suite NAME]\n", argv[0]);
        return 2;
    }
    SRunner *sr = srunner_create(qn_test_grant_suite());
    srunner_add_suite(sr, qn_test_jwt_suite());
    srunner_add_suite(sr, qn_test_mtls_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run(sr, only, NULL, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    srunner_free(sr);
    if (run == 0) {
        fprintf(stderr, "no tests ran (unknown suite?)\n");
        return 1;
    }
    return failed ? 1 : 0;
}
