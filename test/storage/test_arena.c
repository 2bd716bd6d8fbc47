/*
 * test_arena.c - arena.c: alignment, the hard cap, marks and rewinds.
 */
#include <stdint.h>
#include <string.h>

#include "storage_test.h"
#include "store_int.h"

START_TEST(aligned_and_distinct)
{
    struct qn__arena a;
    qn__arena_init(&a, 1 << 20);
    uint8_t *prev = NULL;
    for (int i = 0; i < 1000; i++) {
        uint8_t *p = qn__arena_alloc(&a, (size_t)(i % 37));
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % 16, 0);
        ck_assert_ptr_ne(p, prev);
        memset(p, 0xab, (size_t)(i % 37));
        prev = p;
    }
    ck_assert_uint_le(a.total, a.max);
    qn__arena_free(&a);
    ck_assert_ptr_null(a.head);
}
END_TEST

START_TEST(cap_is_hard)
{
    struct qn__arena a;
    qn__arena_init(&a, 10000);
    ck_assert_ptr_null(qn__arena_alloc(&a, 10001));
    ck_assert_ptr_nonnull(qn__arena_alloc(&a, 6000));
    ck_assert_ptr_null(qn__arena_alloc(&a, 6000));
    ck_assert_uint_le(a.total, 10000);
    /* small ones still fit in what is left */
    ck_assert_ptr_nonnull(qn__arena_alloc(&a, 100));
    ck_assert_ptr_null(qn__arena_alloc(&a, SIZE_MAX));
    ck_assert_ptr_null(qn__arena_strndup(&a, "x", SIZE_MAX));
    qn__arena_free(&a);
}
END_TEST

START_TEST(rewind_frees_later_chunks)
{
    struct qn__arena a;
    qn__arena_init(&a, 1 << 24);
    char *keep = qn__arena_strdup(&a, "inputs");
    struct qn__arena_mark m = qn__arena_mark(&a);
    size_t total = a.total;
    for (int i = 0; i < 100; i++)
        ck_assert_ptr_nonnull(qn__arena_alloc(&a, 5000));
    ck_assert_uint_gt(a.total, total);
    qn__arena_rewind(&a, m);
    ck_assert_uint_eq(a.total, total);
    ck_assert_str_eq(keep, "inputs");
    char *again = qn__arena_strdup(&a, "outputs");
    ck_assert_str_eq(again, "outputs");
    ck_assert_str_eq(keep, "inputs");
    uint8_t *z = qn__arena_zalloc(&a, 64);
    for (int i = 0; i < 64; i++)
        ck_assert_uint_eq(z[i], 0);
    uint8_t src[5] = {1, 2, 3, 4, 5};
    uint8_t *d = qn__arena_memdup(&a, src, 5);
    ck_assert_mem_eq(d, src, 5);
    qn__arena_free(&a);
    qn__arena_free(NULL);
}
END_TEST

START_TEST(rewind_to_empty)
{
    struct qn__arena a;
    qn__arena_init(&a, 1 << 20);
    struct qn__arena_mark m = qn__arena_mark(&a);
    ck_assert_ptr_nonnull(qn__arena_alloc(&a, 10));
    qn__arena_rewind(&a, m);
    ck_assert_ptr_null(a.head);
    ck_assert_uint_eq(a.total, 0);
}
END_TEST

Suite *qn_test_arena_suite(void)
{
    Suite *s = suite_create("arena");
    TCase *t = tcase_create("arena");
    tcase_add_test(t, aligned_and_distinct);
    tcase_add_test(t, cap_is_hard);
    tcase_add_test(t, rewind_frees_later_chunks);
    tcase_add_test(t, rewind_to_empty);
    suite_add_tcase(s, t);
    return s;
}
