/*
 * test_pop_gate.c - suite "pop_gate": broker/src/engine/pop_gate.c, the cache
 * of queues' min_pop_wait_time: unknown until learned, stale after the TTL,
 * updated in place, emptied when full.
 */
#include <stdio.h>

#include "engine/pop_gate.h"
#include "engine_test.h"
#include "queen/error.h"

static const uint8_t T1[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t T2[16] = {0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

START_TEST(learn_and_expire)
{
    struct qn_pop_gates *g = NULL;
    ck_assert_int_eq(qn_pop_gates_new(&g), QN_OK);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q", 1000), -1);
    qn_pop_gates_put(g, T1, "q", 250, 1000);
    qn_pop_gates_put(g, T1, "none", 0, 1000);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q", 1000), 250);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "none", 1000), 0);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q", 1000 + QN_POP_GATE_TTL_MS), 250);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q", 1000 + QN_POP_GATE_TTL_MS + 1), -1);
    /* learned again: fresh, with the new value, still one entry */
    qn_pop_gates_put(g, T1, "q", 0, 50000);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q", 50000 + QN_POP_GATE_TTL_MS), 0);
    ck_assert_uint_eq(qn_pop_gates_count(g), 2);
    qn_pop_gates_free(g);
    qn_pop_gates_free(NULL);
}
END_TEST

/* the option of one tenant's queue says nothing about another's of one name */
START_TEST(per_tenant)
{
    struct qn_pop_gates *g;
    ck_assert_int_eq(qn_pop_gates_new(&g), QN_OK);
    qn_pop_gates_put(g, T1, "q", 250, 1000);
    ck_assert_int_eq(qn_pop_gates_get(g, T2, "q", 1000), -1);
    qn_pop_gates_put(g, T2, "q", 0, 1000);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q", 1000), 250);
    ck_assert_int_eq(qn_pop_gates_get(g, T2, "q", 1000), 0);
    ck_assert_uint_eq(qn_pop_gates_count(g), 2);
    qn_pop_gates_free(g);
}
END_TEST

START_TEST(bounded)
{
    struct qn_pop_gates *g = NULL;
    ck_assert_int_eq(qn_pop_gates_new(&g), QN_OK);
    char name[32];
    for (int i = 0; i < QN_POP_GATE_MAX; i++) {
        snprintf(name, sizeof name, "q%d", i);
        qn_pop_gates_put(g, T1, name, i % 7, 1);
    }
    ck_assert_uint_eq(qn_pop_gates_count(g), QN_POP_GATE_MAX);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q12345", 1), 12345 % 7);
    /* one more: the cache starts over rather than grow */
    qn_pop_gates_put(g, T1, "extra", 9, 1);
    ck_assert_uint_eq(qn_pop_gates_count(g), 1);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "extra", 1), 9);
    ck_assert_int_eq(qn_pop_gates_get(g, T1, "q0", 1), -1);
    qn_pop_gates_free(g);
}
END_TEST

Suite *qn_test_pop_gate_suite(void)
{
    Suite *s = suite_create("pop_gate");
    TCase *tc = tcase_create("pop_gate");
    tcase_add_test(tc, learn_and_expire);
    tcase_add_test(tc, per_tenant);
    tcase_add_test(tc, bounded);
    suite_add_tcase(s, tc);
    return s;
}
