/*
 * test_conn_budget.c - suite "conn_budget": broker/src/engine/conn_budget.c,
 * database calls in flight per client connection.
 *
 * Asserted: a connection gets at most `limit` slots, other connections are not
 * affected, a given-back slot can be taken again, force takes past the limit,
 * a call without a connection (NULL key) is never refused, and a connection's
 * entry disappears with its last slot (a later connection reusing the key starts
 * from zero); the room callback runs exactly when a connection drops below the
 * limit (not for gives above it or further below), and has_room agrees.
 */
#include <stdbool.h>
#include <stddef.h>

#include "engine/conn_budget.h"
#include "engine_test.h"
#include "queen/error.h"

START_TEST(limit_per_connection)
{
    struct qn_conn_budget *b;
    ck_assert_int_eq(qn_conn_budget_new(3, &b), QN_OK);
    int k1, k2;
    struct qn_conn_slot *s[8];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(qn_conn_budget_take(b, &k1, false, &s[i]), QN_OK);
    struct qn_conn_slot *x = NULL;
    ck_assert_int_eq(qn_conn_budget_take(b, &k1, false, &x), QN_EBUSY);
    ck_assert_ptr_null(x);
    ck_assert_uint_eq(qn_conn_budget_held(b, &k1), 3);
    /* another connection is not held back */
    ck_assert_int_eq(qn_conn_budget_take(b, &k2, false, &s[3]), QN_OK);
    ck_assert_uint_eq(qn_conn_budget_held(b, &k2), 1);
    /* a call admitted before may go past the limit */
    ck_assert_int_eq(qn_conn_budget_take(b, &k1, true, &s[4]), QN_OK);
    ck_assert_uint_eq(qn_conn_budget_held(b, &k1), 4);
    qn_conn_budget_give(s[4]);
    qn_conn_budget_give(s[0]);
    ck_assert_int_eq(qn_conn_budget_take(b, &k1, false, &s[0]), QN_OK);
    ck_assert_int_eq(qn_conn_budget_take(b, &k1, false, &x), QN_EBUSY);
    /* no connection: never refused, never counted */
    for (int i = 0; i < 5; i++) {
        struct qn_conn_slot *n = NULL;
        ck_assert_int_eq(qn_conn_budget_take(b, NULL, false, &n), QN_OK);
        qn_conn_budget_give(n);
    }
    for (int i = 0; i < 3; i++)
        qn_conn_budget_give(s[i]);
    ck_assert_uint_eq(qn_conn_budget_held(b, &k1), 0);
    /* the entry is gone: the key starts from zero */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(qn_conn_budget_take(b, &k1, false, &s[i]), QN_OK);
    for (int i = 0; i < 3; i++)
        qn_conn_budget_give(s[i]);
    qn_conn_budget_give(s[3]);
    qn_conn_budget_give(NULL);
    qn_conn_budget_free(b);
}
END_TEST

static int rooms;

static void on_room(void *ud)
{
    (void)ud;
    rooms++;
}

START_TEST(room_when_a_connection_drops_below_the_limit)
{
    struct qn_conn_budget *b;
    ck_assert_int_eq(qn_conn_budget_new(2, &b), QN_OK);
    qn_conn_budget_on_room(b, on_room, NULL);
    rooms = 0;
    int k1, k2;
    struct qn_conn_slot *s[4], *o;
    ck_assert(qn_conn_budget_has_room(b, &k1));
    ck_assert_int_eq(qn_conn_budget_take(b, &k1, false, &s[0]), QN_OK);
    ck_assert_int_eq(qn_conn_budget_take(b, &k1, false, &s[1]), QN_OK);
    ck_assert_int_eq(qn_conn_budget_take(b, &k1, true, &s[2]), QN_OK); /* 3 of 2 */
    ck_assert(!qn_conn_budget_has_room(b, &k1));
    ck_assert_int_eq(qn_conn_budget_take(b, &k2, false, &o), QN_OK);
    qn_conn_budget_give(o); /* another connection, below its limit all along */
    ck_assert_int_eq(rooms, 0);
    qn_conn_budget_give(s[2]); /* 2 of 2: still full */
    ck_assert_int_eq(rooms, 0);
    ck_assert(!qn_conn_budget_has_room(b, &k1));
    qn_conn_budget_give(s[1]); /* 1 of 2: room */
    ck_assert_int_eq(rooms, 1);
    ck_assert(qn_conn_budget_has_room(b, &k1));
    qn_conn_budget_give(s[0]); /* further below: no news */
    ck_assert_int_eq(rooms, 1);
    qn_conn_budget_free(b);
}
END_TEST

START_TEST(free_with_slots_held)
{
    struct qn_conn_budget *b;
    ck_assert_int_eq(qn_conn_budget_new(1, &b), QN_OK);
    int k;
    struct qn_conn_slot *s;
    qn_dd_alloc_start();
    ck_assert_int_eq(qn_conn_budget_take(b, &k, false, &s), QN_OK);
    qn_conn_budget_free(b); /* frees the entry too */
    ck_assert_uint_eq(qn_dd_alloc_stop().live, 0);
}
END_TEST

Suite *qn_test_conn_budget_suite(void)
{
    Suite *s = suite_create("conn_budget");
    TCase *tc = tcase_create("conn_budget");
    tcase_add_test(tc, limit_per_connection);
    tcase_add_test(tc, free_with_slots_held);
    tcase_add_test(tc, room_when_a_connection_drops_below_the_limit);
    suite_add_tcase(s, tc);
    return s;
}
