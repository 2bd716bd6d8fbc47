/*
 * check_main.c - the `check` runner main shared by every module's test program
 * (see check_main.h): parse --suite, build the runner from the module's table,
 * run it in fork mode, map the outcome to the exit status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"

int main(int argc, char **argv)
{
    const struct qn_check_runner *r = &qn_check_runner;
    const char *only = NULL;
    if (argc == 3 && strcmp(argv[1], "--suite") == 0) {
        only = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--suite NAME]\n", r->name);
        return 2;
    }
    SRunner *sr = NULL;
    for (size_t i = 0; i < r->nsuites; i++) {
        const struct qn_check_suite *s = &r->suites[i];
        if (only != NULL ? strcmp(only, s->name) != 0 : s->on_request)
            continue;
        if (sr == NULL)
            sr = srunner_create(s->make());
        else
            srunner_add_suite(sr, s->make());
    }
    if (sr == NULL) {
        fprintf(stderr, "%s: no suite named %s\n", r->name, only ? only : "(none)");
        return 2;
    }
    if (r->prepare != NULL)
        r->prepare(only);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY=verbose lists tests */
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    srunner_free(sr);
    if (run == 0) {
        fprintf(stderr, "%s: no tests ran\n", r->name);
        return 1;
    }
    return failed ? 1 : 0;
}
