/*
 * test_inbox.c - suite "inbox": broker/src/engine/inbox.c, the bounded inbox
 * between event loops: a full inbox refuses (never grows), messages run on the
 * owning loop in posting order per producer, producers on other threads wake
 * the loop, and closing runs what is queued and refuses the rest.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "engine/inbox.h"
#include "engine_test.h"
#include "queen/error.h"

#define NPROD 2
#define PER_PROD 2000

struct sink {
    int seen[NPROD * PER_PROD + 8];
    _Atomic int n;
    int last[NPROD]; /* last sequence number seen per producer */
    bool disorder;
    struct event_base *base;
    int want;
};

struct item {
    struct sink *s;
    int prod;
    int seq;
};

static void record(void *arg)
{
    struct item *it = arg;
    struct sink *s = it->s;
    int n = atomic_load(&s->n);
    s->seen[n] = it->prod * PER_PROD + it->seq;
    if (it->seq != s->last[it->prod] + 1)
        s->disorder = true;
    s->last[it->prod] = it->seq;
    atomic_store(&s->n, n + 1);
    if (s->want > 0 && n + 1 == s->want)
        event_base_loopbreak(s->base);
    free(it);
}

static struct item *item_new(struct sink *s, int prod, int seq)
{
    struct item *it = malloc(sizeof *it);
    ck_assert_ptr_nonnull(it);
    *it = (struct item){s, prod, seq};
    return it;
}

START_TEST(bounded_and_ordered)
{
    struct event_base *base = event_base_new();
    struct qn_inbox *ib = NULL;
    struct sink s = {.last = {-1, -1}};
    s.base = base;
    ck_assert_int_eq(qn_inbox_new(base, 0, &ib), QN_EINVAL);
    ck_assert_int_eq(qn_inbox_new(base, 4, &ib), QN_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(qn_inbox_post(ib, record, item_new(&s, 0, i)), QN_OK);
    /* full: refused, the caller keeps its message */
    struct item *extra = item_new(&s, 0, 4);
    ck_assert_int_eq(qn_inbox_post(ib, record, extra), QN_EBUSY);
    ck_assert_uint_eq(qn_inbox_depth(ib), 4);
    ck_assert_uint_eq(qn_inbox_refused(ib), 1);
    ck_assert_int_eq(atomic_load(&s.n), 0); /* nothing runs outside the loop */
    event_base_loop(base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(atomic_load(&s.n), 4);
    ck_assert(!s.disorder);
    ck_assert_uint_eq(qn_inbox_depth(ib), 0);
    /* room again */
    ck_assert_int_eq(qn_inbox_post(ib, record, extra), QN_OK);
    event_base_loop(base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(atomic_load(&s.n), 5);
    qn_inbox_close(ib);
    qn_inbox_free(ib);
    event_base_free(base);
}
END_TEST

/* closing runs what is queued (each message frees its argument) and refuses
 * later posts; freeing a closed inbox is safe after its base is gone */
START_TEST(close_runs_queued_and_refuses)
{
    struct event_base *base = event_base_new();
    struct qn_inbox *ib = NULL;
    struct sink s = {.last = {-1, -1}};
    ck_assert_int_eq(qn_inbox_new(base, 8, &ib), QN_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(qn_inbox_post(ib, record, item_new(&s, 1, i)), QN_OK);
    qn_inbox_close(ib);
    ck_assert_int_eq(atomic_load(&s.n), 3);
    struct item *late = item_new(&s, 1, 3);
    ck_assert_int_eq(qn_inbox_post(ib, record, late), QN_EBUSY);
    free(late);
    event_base_free(base);
    qn_inbox_free(ib);
    qn_inbox_free(NULL);
}
END_TEST

struct producer {
    struct qn_inbox *ib;
    struct sink *s;
    int prod;
    int retries;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    for (int i = 0; i < PER_PROD; i++) {
        struct item *it = item_new(p->s, p->prod, i);
        /* a full inbox is back-pressure: this producer waits its turn */
        while (qn_inbox_post(p->ib, record, it) != QN_OK) {
            p->retries++;
            sched_yield();
        }
    }
    return NULL;
}

/* producers on other threads wake the owning loop; a small ring fills and
 * refuses, nothing is lost, each producer's order holds */
START_TEST(threads_post_and_wake)
{
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    struct event_base *base = event_base_new();
    struct qn_inbox *ib = NULL;
    static struct sink s;
    memset(&s, 0, sizeof s);
    s.last[0] = s.last[1] = -1;
    s.base = base;
    s.want = NPROD * PER_PROD;
    ck_assert_int_eq(qn_inbox_new(base, 16, &ib), QN_OK);
    /* a lost wake-up hangs the loop: the tcase timeout ends the test */
    pthread_t th[NPROD];
    struct producer p[NPROD];
    for (int i = 0; i < NPROD; i++) {
        p[i] = (struct producer){ib, &s, i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, produce, &p[i]), 0);
    }
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
    for (int i = 0; i < NPROD; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(atomic_load(&s.n), NPROD * PER_PROD);
    ck_assert(!s.disorder);
    ck_assert_int_eq(s.last[0], PER_PROD - 1);
    ck_assert_int_eq(s.last[1], PER_PROD - 1);
    ck_assert_uint_eq(qn_inbox_refused(ib), (uint64_t)(p[0].retries + p[1].retries));
    qn_inbox_close(ib);
    qn_inbox_free(ib);
    event_base_free(base);
}
END_TEST

Suite *qn_test_inbox_suite(void)
{
    Suite *s = suite_create("inbox");
    TCase *tc = tcase_create("inbox");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, bounded_and_ordered);
    tcase_add_test(tc, close_runs_queued_and_refuses);
    tcase_add_test(tc, threads_post_and_wake);
    suite_add_tcase(s, tc);
    return s;
}
