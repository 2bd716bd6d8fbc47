/*
 * test_cfusion.c - suite "cfusion": broker/src/engine/cfusion.c, consume
 * fusion's partition directory, on real waiters (no loop, no database).
 *
 * Pops teach it (tenant, partition id) -> names; a released lease then wakes
 * exactly one parked consumer of the acking group, hinted with the partition,
 * and nobody in another group, queue or tenant; an unknown id wakes nobody;
 * the directory stays within its bound.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cfusion.h"
#include "engine/waiters.h"
#include "engine_test.h"
#include "queen/error.h"

static const uint8_t T1[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t T2[16] = {0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

#define NW 8

struct cw {
    struct qn_waiter w;
    int woken;
};

static struct qn_waiters *ws;
static struct qn_cfusion *cf;
static struct cw cws[NW];

static void on_wake(struct qn_waiter *w)
{
    ((struct cw *)w->ud)->woken++;
}

static void pid_of(int i, uint8_t pid[16])
{
    memset(pid, 0, 16);
    pid[0] = 0x11;
    pid[15] = (uint8_t)i;
    pid[14] = (uint8_t)(i >> 8);
    pid[13] = (uint8_t)(i >> 16);
}

static void setup(size_t max)
{
    ck_assert_int_eq(qn_waiters_new(100, &ws), QN_OK);
    ck_assert_int_eq(qn_cfusion_new(ws, max, &cf), QN_OK);
    memset(cws, 0, sizeof cws);
    for (int i = 0; i < NW; i++) {
        cws[i].w.wake = on_wake;
        cws[i].w.ud = &cws[i];
    }
}

static void teardown(void)
{
    qn_cfusion_free(cf);
    qn_waiters_free(ws);
    cf = NULL;
    ws = NULL;
}

static void park(int i, const uint8_t *tenant, const char *queue, const char *group)
{
    ck_assert_int_eq(qn_waiters_park(ws, &cws[i].w, tenant, queue, group), QN_OK);
}

static int total_woken(void)
{
    int n = 0;
    for (int i = 0; i < NW; i++)
        n += cws[i].woken;
    return n;
}

START_TEST(release_wakes_one_of_the_group_hinted)
{
    setup(0);
    uint8_t pid[16];
    pid_of(7, pid);
    qn_cfusion_learn(cf, T1, pid, "orders", "p-7");
    ck_assert_uint_eq(qn_cfusion_count(cf), 1);
    qn_cfusion_learn(cf, T1, pid, "orders", "p-7"); /* known: no second entry */
    ck_assert_uint_eq(qn_cfusion_count(cf), 1);
    park(0, T1, "orders", "g");
    park(1, T1, "orders", "g");
    park(2, T1, "orders", "other");
    park(3, T1, "invoices", "g");
    park(4, T2, "orders", "g"); /* another tenant's queue of the same name */
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_int_eq(cws[0].woken, 1);
    ck_assert(cws[0].w.hinted);
    ck_assert_str_eq(cws[0].w.hint, "p-7");
    ck_assert_int_eq(total_woken(), 1);
    /* the next release wakes the next one */
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_int_eq(cws[1].woken, 1);
    ck_assert_int_eq(total_woken(), 2);
    /* no consumer of that group left: nobody else wakes */
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_int_eq(total_woken(), 2);
    teardown();
}
END_TEST

START_TEST(unknown_partition_or_tenant_wakes_nobody)
{
    setup(0);
    uint8_t pid[16], other[16];
    pid_of(1, pid);
    pid_of(2, other);
    qn_cfusion_learn(cf, T1, pid, "q", "a");
    park(0, T1, "q", "g");
    park(1, T2, "q", "g");
    ck_assert(!qn_cfusion_released(cf, T1, other, "g"));
    ck_assert(!qn_cfusion_released(cf, T2, pid, "g")); /* learned under T1 only */
    ck_assert_int_eq(total_woken(), 0);
    /* bad names are not learned */
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    qn_cfusion_learn(cf, T1, other, longname, "a");
    qn_cfusion_learn(cf, T1, other, "", "a");
    qn_cfusion_learn(cf, T1, other, "q", NULL);
    ck_assert_uint_eq(qn_cfusion_count(cf), 1);
    teardown();
}
END_TEST

START_TEST(queue_mode_group_matches_both_spellings)
{
    setup(0);
    uint8_t pid[16];
    pid_of(3, pid);
    qn_cfusion_learn(cf, T1, pid, "q", "a");
    park(0, T1, "q", "");
    park(1, T1, "q", "__QUEUE_MODE__");
    park(2, T1, "q", "g");
    ck_assert(qn_cfusion_released(cf, T1, pid, "__QUEUE_MODE__"));
    ck_assert_int_eq(cws[0].woken, 1);
    ck_assert_int_eq(cws[1].woken, 1);
    ck_assert_int_eq(cws[2].woken, 0);
    teardown();
}
END_TEST

START_TEST(bounded_and_relearns)
{
    setup(4);
    uint8_t pid[16];
    for (int i = 0; i < 4; i++) {
        pid_of(i, pid);
        qn_cfusion_learn(cf, T1, pid, "q", "x");
    }
    ck_assert_uint_eq(qn_cfusion_count(cf), 4);
    pid_of(4, pid);
    qn_cfusion_learn(cf, T1, pid, "q", "y"); /* full: starts over */
    ck_assert_uint_eq(qn_cfusion_count(cf), 1);
    pid_of(0, pid);
    park(0, T1, "q", "g");
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g")); /* forgotten */
    qn_cfusion_learn(cf, T1, pid, "q", "renamed");     /* relearned */
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_str_eq(cws[0].w.hint, "renamed");
    teardown();
}
END_TEST

Suite *qn_test_cfusion_suite(void)
{
    Suite *s = suite_create("cfusion");
    TCase *tc = tcase_create("cfusion");
    tcase_add_test(tc, release_wakes_one_of_the_group_hinted);
    tcase_add_test(tc, unknown_partition_or_tenant_wakes_nobody);
    tcase_add_test(tc, queue_mode_group_matches_both_spellings);
    tcase_add_test(tc, bounded_and_relearns);
    suite_add_tcase(s, tc);
    return s;
}
