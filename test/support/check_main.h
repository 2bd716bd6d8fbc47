/*
 * check_main.h - PRIVATE to test/: the one `check` runner main every module's
 * test program links (check_main.c). A module's runner file defines
 * qn_check_runner: its name, its suites as a table, and what must happen once
 * before they run.
 *
 * Usage of every runner: PROGRAM [--suite NAME]. Without --suite every suite
 * runs except those marked on_request; with it, only the suite of that name.
 * Suites run in fork mode (a crash fails one test, not the runner); the
 * CK_VERBOSITY environment variable sets the output (CK_VERBOSITY=verbose lists
 * every test). Exit status: 0 every test passed, 1 a test failed or none ran,
 * 2 usage error or no suite of that name.
 */
#ifndef QN_CHECK_MAIN_H
#define QN_CHECK_MAIN_H

#include <stdbool.h>
#include <stddef.h>

#include <check.h>

struct qn_check_suite {
    const char *name;     /* what --suite names */
    Suite *(*make)(void); /* builds the suite */
    bool on_request;      /* runs only when named (e.g. it needs an optional tool) */
};

struct qn_check_runner {
    const char *name; /* for messages: "test_storage" */
    const struct qn_check_suite *suites;
    size_t nsuites;
    /* Runs once, after the suites were chosen and before they run; only is the
     * --suite name or NULL. May be NULL. */
    void (*prepare)(const char *only);
};

/* Defined by each module's runner file. */
extern const struct qn_check_runner qn_check_runner;

#define QN_CHECK_NSUITES(table) (sizeof(table) / sizeof((table)[0]))

#endif
