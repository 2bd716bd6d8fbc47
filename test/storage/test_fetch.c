/*
 * test_fetch.c - fetch.c against fetch_v1: headers per entry in request order,
 * segment rows with slicing bounds, unknown partitions and out-of-range offsets.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "queen/error.h"
#include "storage_test.h"
#include "store_int.h"

static struct event_base *B;
static char *CI;
static qn_store *S;

static void setup(void)
{
    B = event_base_new();
    CI = qt_db_schema("qn_storage_fetch");
    S = qt_store(B, CI, 2, 8);
}

static void teardown(void)
{
    qn_store_free(S);
    event_base_free(B);
    free(CI);
}

struct fetch_out {
    struct qt_status s;
    size_t n;
    struct qn_fetch_entry_result e[4];
    struct qn_pop_segment segs[4][8];
};

static void fetch_cb(void *ud, const struct qn_store_status *st, const struct qn_fetch_result *r)
{
    struct fetch_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    o->n = r->n;
    for (size_t i = 0; i < r->n && i < 4; i++) {
        o->e[i] = r->entries[i];
        for (size_t k = 0; k < r->entries[i].nsegs && k < 8; k++) {
            o->segs[i][k] = r->entries[i].segs[k];
            o->segs[i][k].blob = NULL; /* borrowed */
        }
    }
}

START_TEST(fetch_by_offset)
{
    struct qt_seg a, b;
    qt_seg_make(&a, 4, "f", 0);
    qt_seg_make(&b, 4, "f", 10);
    struct qt_push_out po;
    ck_assert_int_eq(qt_push1(B, S, "log", "p0", &a, &po), QN_OK);
    uint8_t pid[16];
    memcpy(pid, po.segs[0].pid, 16);
    ck_assert_int_eq(qt_push1(B, S, "log", "p0", &b, &po), QN_OK);
    struct qn_fetch_entry es[4] = {
        {"log", "p0", 2, 0}, {"log", "missing", 0, 0}, {"log", "p0", 99, 0}, {"log", "p0", 8, 0}};
    struct qn_fetch_args args = {es, 4, 0, 0, 0, 0};
    struct fetch_out o;
    memset(&o, 0, sizeof o);
    ck_assert_int_eq(qn_store_fetch(S, &args, NULL, fetch_cb, &o, NULL), QN_OK);
    ck_assert(qt_run_until(B, &o.s.done, 10000));
    ck_assert_msg(o.s.code == QN_OK, "%s", o.s.message);
    ck_assert_uint_eq(o.n, 4);
    ck_assert_int_eq(o.e[0].error, 0);
    ck_assert_mem_eq(o.e[0].pid, pid, 16);
    ck_assert_int_eq(o.e[0].high, 8);
    ck_assert_int_eq(o.e[0].log_start, 0);
    ck_assert_uint_eq(o.e[0].nsegs, 2);
    ck_assert_int_eq(o.segs[0][0].base, 0);
    ck_assert_int_eq(o.segs[0][0].start_idx, 2);
    ck_assert_int_eq(o.segs[0][0].take, 2);
    ck_assert_int_eq(o.segs[0][1].base, 4);
    ck_assert_int_eq(o.segs[0][1].start_idx, 0);
    ck_assert_int_eq(o.segs[0][1].take, 4);
    ck_assert_mem_eq(o.segs[0][1].pid, pid, 16);
    ck_assert_int_eq(o.e[1].error, 1);
    ck_assert_uint_eq(o.e[1].nsegs, 0);
    ck_assert_int_eq(o.e[2].error, 2);
    ck_assert_int_eq(o.e[3].error, 0); /* = last_offset + 1: valid and empty */
    ck_assert_uint_eq(o.e[3].nsegs, 0);
    /* record limit per entry */
    args.n = 1;
    args.max_records = 3;
    memset(&o, 0, sizeof o);
    ck_assert_int_eq(qn_store_fetch(S, &args, NULL, fetch_cb, &o, NULL), QN_OK);
    ck_assert(qt_run_until(B, &o.s.done, 10000));
    ck_assert_int_eq(o.s.code, QN_OK);
    int total = 0;
    for (size_t k = 0; k < o.e[0].nsegs; k++)
        total += o.segs[0][k].take;
    ck_assert_int_eq(total, 3);
    args.n = 0;
    ck_assert_int_eq(qn_store_fetch(S, &args, NULL, fetch_cb, &o, NULL), QN_EINVAL);
    qt_seg_free(&a);
    qt_seg_free(&b);
}
END_TEST

Suite *qn_test_fetch_suite(void)
{
    Suite *s = suite_create("fetch");
    TCase *t = tcase_create("fetch");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, fetch_by_offset);
    suite_add_tcase(s, t);
    return s;
}
