/*
 * test_errmap.c - errmap.c: the SQLSTATE table and prefix stripping.
 */
#include "queen/error.h"
#include "storage_test.h"
#include "store_int.h"

static int map(const char *state, const char *msg, bool bad, const char **human)
{
    const char *h;
    int rc = qn__errmap(state, msg, bad, &h);
    if (human)
        *human = h;
    return rc;
}

START_TEST(classes)
{
    ck_assert_int_eq(map("08006", "x", false, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("08P01", "x", false, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("57P01", "terminating connection", false, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("57P02", "x", false, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("57P03", "x", false, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("53300", "x", false, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("25006", "x", false, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("22012", "division by zero", true, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map(NULL, "server closed the connection", true, NULL), QN_EUNAVAILABLE);
    ck_assert_int_eq(map("40P01", "deadlock detected", false, NULL), QN_ECONFLICT);
    ck_assert_int_eq(map("40001", "could not serialize", false, NULL), QN_ECONFLICT);
    ck_assert_int_eq(map("57014", "canceling statement", false, NULL), QN_ETIMEOUT);
    ck_assert_int_eq(map("23505", "QDUP duplicate transaction id in segment 0", false, NULL),
                     QN_EDUPLICATE);
    ck_assert_int_eq(map("23505", "duplicate key value violates", false, NULL), QN_EDB);
    ck_assert_int_eq(map("P0002", "no rows", false, NULL), QN_ENOTFOUND);
    ck_assert_int_eq(map("22023", "QNOTFOUND queue x", false, NULL), QN_ENOTFOUND);
    ck_assert_int_eq(map("P0001", "QPUSH bad segment 3", false, NULL), QN_EDB);
    ck_assert_int_eq(map("22023", "QCONF invalid lease_time", false, NULL), QN_EDB);
    ck_assert_int_eq(map(NULL, "insufficient data left in message", false, NULL), QN_EPROTOCOL_DB);
    ck_assert_int_eq(map("123", "short state", false, NULL), QN_EPROTOCOL_DB);
    ck_assert_int_eq(map("", "", false, NULL), QN_EPROTOCOL_DB);
}
END_TEST

START_TEST(prefix_stripped)
{
    const char *h;
    map("P0001", "QPUSH bad segment 3", false, &h);
    ck_assert_str_eq(h, "bad segment 3");
    map("23505", "QDUP duplicate transaction id in segment 0", false, &h);
    ck_assert_str_eq(h, "duplicate transaction id in segment 0");
    map("P0002", "QNOTFOUND queue q", false, &h);
    ck_assert_str_eq(h, "queue q");
    /* not a prefix word: kept */
    map("P0001", "Queue is full", false, &h);
    ck_assert_str_eq(h, "Queue is full");
    map("P0001", "Q bad", false, &h);
    ck_assert_str_eq(h, "Q bad");
    map("P0001", "QPUSH", false, &h);
    ck_assert_str_eq(h, "QPUSH");
    map("P0001", NULL, false, &h);
    ck_assert_str_eq(h, "");
    /* QDUPX is not QDUP */
    ck_assert_int_eq(map("23505", "QDUPX dup", false, NULL), QN_EDB);
}
END_TEST

Suite *qn_test_errmap_suite(void)
{
    Suite *s = suite_create("errmap");
    TCase *t = tcase_create("errmap");
    tcase_add_test(t, classes);
    tcase_add_test(t, prefix_stripped);
    suite_add_tcase(s, t);
    return s;
}
