/*
 * test_pop_gate.c - suite "pop_gate": broker/src/engine/pop_gate.c, the cache
 * of queues' min_pop_wait_time: unknown until learned, stale after the TTL,
 * updated in place, emptied when full.
 */
#include <stdio.h>

#include "engine/pop_gate.h"
#include "engine_test.h"
#include "queen/error.h"

START_TEST(learn_and_expire)
{
    struct qn_pop_gates *g = NULL;
    ck_assert_int_eq(qn_pop_gates_new(&g), QN_OK);
    ck_assert_int_eq(qn_pop_gates_get(g, "q", 1000), -1);
    qn_pop_gates_put(g, "q", 250, 1000);
    qn_pop_gates_put(g, "none", 0, 1000);
    ck_assert_int_eq(qn_pop_gates_get(g, "q", 1000), 250);
    ck_assert_int_eq(qn_pop_gates_get(g, "none", 1000), 0);
    ck_assert_int_eq(qn_pop_gates_get(g, "q", 1000 + QN_POP_GATE_TTL_MS), 250);
    ck_assert_int_eq(qn_pop_gates_get(g, "q", 1000 + QN_POP_GATE_TTL_MS + 1), -1);
    /* learned again: fresh, with the new value, still one entry */
    qn_pop_gates_put(g, "q", 0, 50000);
    ck_assert_int_eq(qn_pop_gates_get(g, "q", 50000 + QN_POP_GATE_TTL_MS), 0);
    ck_assert_uint_eq(qn_pop_gates_count(g), 2);
    qn_pop_gates_free(g);
    qn_pop_gates_free(NULL);
}
END_TEST

START_TEST(bounded)
{
    struct qn_pop_gates *g = NULL;
    ck_assert_int_eq(qn_pop_gates_new(&g), QN_OK);
    char name[32];
    for (int i = 0; i < QN_POP_GATE_MAX; i++) {
        snprintf(name, sizeof name, "q%d", i);
        qn_pop_gates_put(g, name, i % 7, 1);
    }
    ck_assert_uint_eq(qn_pop_gates_count(g), QN_POP_GATE_MAX);
    ck_assert_int_eq(qn_pop_gates_get(g, "q12345", 1), 12345 % 7);
    /* one more: the cache starts over rather than grow */
    qn_pop_gates_put(g, "extra", 9, 1);
    ck_assert_uint_eq(qn_pop_gates_count(g), 1);
    ck_assert_int_eq(qn_pop_gates_get(g, "extra", 1), 9);
    ck_assert_int_eq(qn_pop_gates_get(g, "q0", 1), -1);
    qn_pop_gates_free(g);
}
END_TEST

Suite *qn_test_pop_gate_suite(void)
{
    Suite *s = suite_create("pop_gate");
    TCase *tc = tcase_create("pop_gate");
    tcase_add_test(tc, learn_and_expire);
    tcase_add_test(tc, bounded);
    suite_add_tcase(s, tc);
    return s;
}
