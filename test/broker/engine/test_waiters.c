/*
 * test_waiters.c - suite "waiters": broker/src/engine/waiters.c, the parked pops,
 * consume streams and fetches of one loop, without a loop or a database.
 *
 * Each test parks plain waiters whose wake() records the order it ran in, then
 * notifies and checks who woke: oldest first, up to per_group "any partition"
 * waiters per consumer group plus every waiter for exactly the committed
 * partition, discovery waiters too, the QUEEN_MAX_PARKED_POPS limit, and
 * waiters unparked, parked again or freed from inside a wake pass; and the
 * feed mode of local commits (one hinted waiter per group, ready ones first)
 * and its count of commits that reached no waiter (qn_waiters_unfed).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/waiters.h"
#include "engine_test.h"
#include "queen/error.h"
#include "queen/store.h"

static const uint8_t T1[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t T2[16] = {0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

#define MAXW 64

/* A waiter that records its wake-ups; act() runs inside its wake. */
struct tw {
    struct qn_waiter w;
    int id;
    int woken;
    void (*act)(struct tw *self);
};

static struct qn_waiters *ws;
static struct tw tws[MAXW];
static int order[MAXW * 4];
static int norder;

static void on_wake(struct qn_waiter *w)
{
    struct tw *t = w->ud;
    ck_assert_msg(!qn_waiter_parked(w), "woken while still parked");
    t->woken++;
    ck_assert_int_lt(norder, MAXW * 4);
    order[norder++] = t->id;
    if (t->act)
        t->act(t);
}

static void setup(size_t max_parked)
{
    ck_assert_int_eq(qn_waiters_new(max_parked, &ws), QN_OK);
    memset(tws, 0, sizeof tws);
    for (int i = 0; i < MAXW; i++) {
        tws[i].id = i;
        tws[i].w.wake = on_wake;
        tws[i].w.ud = &tws[i];
    }
    norder = 0;
}

static void teardown(void)
{
    qn_waiters_free(ws);
    ws = NULL;
}

static void park(int i, const char *queue, const char *group, const char *partition)
{
    tws[i].w.partition = partition;
    ck_assert_int_eq(qn_waiters_park(ws, &tws[i].w, T1, queue, group), QN_OK);
    ck_assert(qn_waiter_parked(&tws[i].w));
}

static void assert_order(const int *want, int n)
{
    ck_assert_int_eq(norder, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(order[i] == want[i], "wake %d: waiter %d, expected %d", i, order[i], want[i]);
}

/* ---------------------------------------------------------------- order and counts */

START_TEST(wakes_oldest_first_up_to_per_group)
{
    setup(100);
    for (int i = 0; i < 6; i++)
        park(i, "q", "g", NULL);
    qn_waiters_notify(ws, T1, "q", "p", 4);
    static const int want[] = {0, 1, 2, 3};
    assert_order(want, 4);
    ck_assert_uint_eq(qn_waiters_count(ws), 2);
    for (int i = 0; i < 4; i++)
        ck_assert(!qn_waiter_parked(&tws[i].w));
    ck_assert(qn_waiter_parked(&tws[4].w) && qn_waiter_parked(&tws[5].w));
    /* the next commit wakes the rest, still in order */
    qn_waiters_notify(ws, T1, "q", NULL, 4);
    static const int want2[] = {0, 1, 2, 3, 4, 5};
    assert_order(want2, 6);
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    teardown();
}
END_TEST

START_TEST(per_group_count_is_per_group)
{
    setup(100);
    /* three groups, three waiters each, interleaved arrival */
    const char *groups[] = {"a", "b", "c"};
    for (int i = 0; i < 9; i++)
        park(i, "q", groups[i % 3], NULL);
    qn_waiters_notify(ws, T1, "q", "p", 2);
    ck_assert_int_eq(norder, 6);
    int per[3] = {0, 0, 0};
    for (int k = 0; k < norder; k++)
        per[order[k] % 3]++;
    for (int g = 0; g < 3; g++)
        ck_assert_int_eq(per[g], 2);
    /* within a group, the oldest two */
    for (int g = 0; g < 3; g++) {
        ck_assert_int_eq(tws[g].woken, 1);
        ck_assert_int_eq(tws[g + 3].woken, 1);
        ck_assert_int_eq(tws[g + 6].woken, 0);
    }
    ck_assert_uint_eq(qn_waiters_count(ws), 3);
    teardown();
}
END_TEST

START_TEST(partition_waiters_all_wake_for_their_partition)
{
    setup(100);
    park(0, "q", "g", "p1");
    park(1, "q", "g", NULL);
    park(2, "q", "g", "p1");
    park(3, "q", "g", "p2");
    park(4, "q", "g", NULL);
    park(5, "q", "g", "p1");
    /* per_group 1: one "any" waiter, and every p1 waiter regardless of the count */
    qn_waiters_notify(ws, T1, "q", "p1", 1);
    static const int want[] = {0, 1, 2, 5};
    assert_order(want, 4);
    ck_assert_int_eq(tws[3].woken, 0);
    ck_assert_int_eq(tws[4].woken, 0);
    /* unknown partition (another broker's NOTIFY): partition waiters match too */
    qn_waiters_notify(ws, T1, "q", NULL, 10);
    ck_assert_int_eq(tws[3].woken, 1);
    ck_assert_int_eq(tws[4].woken, 1);
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    teardown();
}
END_TEST

START_TEST(other_queues_and_discovery)
{
    setup(100);
    park(0, "q", "g", NULL);
    park(1, "other", "g", NULL);
    park(2, NULL, "", NULL); /* discovery: woken by a commit to any queue */
    park(3, "", "", NULL);
    park(4, NULL, "", NULL);
    qn_waiters_notify(ws, T1, "q", "p", 2);
    static const int want[] = {0, 2, 3};
    assert_order(want, 3);
    ck_assert_int_eq(tws[1].woken, 0);
    ck_assert(qn_waiter_parked(&tws[4].w));
    /* a queue nobody waits on still wakes discovery waiters */
    qn_waiters_notify(ws, T1, "nobody", NULL, 2);
    ck_assert_int_eq(tws[4].woken, 1);
    ck_assert_int_eq(tws[1].woken, 0);
    ck_assert_uint_eq(qn_waiters_count(ws), 1);
    teardown();
}
END_TEST

/* ---------------------------------------------------------------- the limit */

/* Two tenants' queues of one name, and their discovery pops: a commit wakes
 * only its own tenant's waiters. */
START_TEST(tenants_wake_only_their_own)
{
    setup(100);
    park(0, "q", "g", NULL);
    tws[1].w.partition = NULL;
    ck_assert_int_eq(qn_waiters_park(ws, &tws[1].w, T2, "q", "g"), QN_OK);
    park(2, NULL, "", NULL); /* discovery, T1 */
    ck_assert_int_eq(qn_waiters_park(ws, &tws[3].w, T2, NULL, ""), QN_OK);
    qn_waiters_notify(ws, T2, "q", NULL, 4);
    static const int want[] = {1, 3};
    assert_order(want, 2);
    ck_assert(qn_waiter_parked(&tws[0].w) && qn_waiter_parked(&tws[2].w));
    /* another broker's NOTIFY names T1's queue: T1's waiters only */
    qn_waiters_notify(ws, T1, "other", NULL, 4);
    static const int want2[] = {1, 3, 2};
    assert_order(want2, 3);
    qn_waiters_notify(ws, T1, "q", NULL, 4);
    static const int want3[] = {1, 3, 2, 0};
    assert_order(want3, 4);
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    teardown();
}
END_TEST

START_TEST(parked_limit)
{
    setup(3);
    park(0, "q", "g", NULL);
    park(1, "q", "h", NULL);
    park(2, NULL, "", NULL);
    tws[3].w.partition = NULL;
    ck_assert_int_eq(qn_waiters_park(ws, &tws[3].w, T1, "q", "g"), QN_EBUSY);
    ck_assert(!qn_waiter_parked(&tws[3].w));
    ck_assert_int_eq(qn_waiters_park(ws, &tws[3].w, T1, "new", "g"), QN_EBUSY);
    ck_assert_uint_eq(qn_waiters_count(ws), 3);
    /* parking a parked waiter again is a no-op, even at the limit */
    ck_assert_int_eq(qn_waiters_park(ws, &tws[0].w, T1, "q", "g"), QN_OK);
    ck_assert_uint_eq(qn_waiters_count(ws), 3);
    /* room again once one leaves */
    qn_waiters_unpark(ws, &tws[1].w);
    ck_assert_uint_eq(qn_waiters_count(ws), 2);
    ck_assert_int_eq(qn_waiters_park(ws, &tws[3].w, T1, "q", "g"), QN_OK);
    ck_assert_uint_eq(qn_waiters_count(ws), 3);
    /* a woken waiter no longer counts */
    qn_waiters_notify(ws, T1, "q", NULL, 10);
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    ck_assert_int_eq(qn_waiters_park(ws, &tws[1].w, T1, "q", "g"), QN_OK);
    teardown();
}
END_TEST

/* Two loops' waiters sharing one count: QUEEN_MAX_PARKED_POPS is the process's.
 * A park refused by the other loop's count leaves the shared count as it was;
 * a waiter leaving (unparked or woken) in either gives its place back. */
START_TEST(parked_limit_shared_by_loops)
{
    setup(3);
    struct qn_waiters *other;
    ck_assert_int_eq(qn_waiters_new(3, &other), QN_OK);
    _Atomic size_t count = 0;
    qn_waiters_share_count(ws, &count);
    qn_waiters_share_count(other, &count);
    park(0, "q", "g", NULL);
    park(1, "q", "h", NULL);
    ck_assert_int_eq(qn_waiters_park(other, &tws[2].w, T1, "q", "g"), QN_OK);
    ck_assert_uint_eq(atomic_load(&count), 3);
    /* each loop holds fewer than 3, the process holds 3: both refuse */
    ck_assert_int_eq(qn_waiters_park(ws, &tws[3].w, T1, "q", "g"), QN_EBUSY);
    ck_assert_int_eq(qn_waiters_park(other, &tws[4].w, T1, "r", "g"), QN_EBUSY);
    ck_assert(!qn_waiter_parked(&tws[3].w));
    ck_assert_uint_eq(atomic_load(&count), 3);
    /* leaving one loop makes room in the other */
    qn_waiters_unpark(ws, &tws[1].w);
    ck_assert_uint_eq(atomic_load(&count), 2);
    ck_assert_int_eq(qn_waiters_park(other, &tws[4].w, T1, "r", "g"), QN_OK);
    ck_assert_uint_eq(qn_waiters_count(other), 2);
    /* woken ones give their places back too */
    qn_waiters_notify(other, T1, "q", NULL, 10);
    qn_waiters_notify(other, T1, "r", NULL, 10);
    ck_assert_uint_eq(atomic_load(&count), 1);
    ck_assert_int_eq(qn_waiters_park(ws, &tws[3].w, T1, "q", "g"), QN_OK);
    ck_assert_uint_eq(atomic_load(&count), 2);
    qn_waiters_free(other);
    teardown();
}
END_TEST

/* ---------------------------------------------------------------- changes during a pass */

static struct tw *victim;

static void unpark_victim(struct tw *self)
{
    (void)self;
    qn_waiters_unpark(ws, &victim->w);
}

START_TEST(unparked_during_pass_is_not_called)
{
    setup(100);
    for (int i = 0; i < 4; i++)
        park(i, "q", "g", NULL);
    /* waiter 0's wake unparks waiter 2, chosen by the same pass and not yet
     * called: it must not be called (its owner may have freed it) */
    victim = &tws[2];
    tws[0].act = unpark_victim;
    qn_waiters_notify(ws, T1, "q", NULL, 4);
    static const int want[] = {0, 1, 3};
    assert_order(want, 3);
    ck_assert_int_eq(tws[2].woken, 0);
    ck_assert(!qn_waiter_parked(&tws[2].w));
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    teardown();
}
END_TEST

/* An owner with two waiters that frees both from its first wake (as a fetch
 * over two entries of one queue does when its read fails at once). */
struct owner {
    struct qn_waiter w[2];
    int calls;
};

static struct owner *the_owner;

static void owner_wake(struct qn_waiter *w)
{
    struct owner *o = w->ud;
    o->calls++;
    qn_waiters_unpark(ws, &o->w[0]);
    qn_waiters_unpark(ws, &o->w[1]);
    free(o);
    the_owner = NULL;
}

START_TEST(owner_freed_during_pass)
{
    setup(100);
    park(0, "q", "g", NULL);
    struct owner *o = calloc(1, sizeof *o);
    ck_assert_ptr_nonnull(o);
    the_owner = o;
    for (int k = 0; k < 2; k++) {
        o->w[k].wake = owner_wake;
        o->w[k].ud = o;
        ck_assert_int_eq(qn_waiters_park(ws, &o->w[k], T1, "q", "g"), QN_OK);
    }
    park(1, "q", "g", NULL);
    /* one pass chooses all four; the owner's second waiter is gone when its
     * turn comes (under ASan a call would be a use after free) */
    qn_waiters_notify(ws, T1, "q", NULL, 10);
    ck_assert_ptr_null(the_owner);
    static const int want[] = {0, 1};
    assert_order(want, 2);
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    teardown();
}
END_TEST

static void park_again(struct tw *self)
{
    ck_assert_int_eq(qn_waiters_park(ws, &self->w, T1, "q", "g"), QN_OK);
}

START_TEST(reparked_in_wake_waits_for_the_next_commit)
{
    setup(100);
    park(0, "q", "g", NULL);
    park(1, "q", "g", NULL);
    tws[0].act = park_again;
    qn_waiters_notify(ws, T1, "q", NULL, 10);
    static const int want[] = {0, 1};
    assert_order(want, 2); /* not woken twice by the pass that woke it */
    ck_assert(qn_waiter_parked(&tws[0].w));
    ck_assert_uint_eq(qn_waiters_count(ws), 1);
    qn_waiters_notify(ws, T1, "q", NULL, 10);
    ck_assert_int_eq(tws[0].woken, 2);
    ck_assert_int_eq(tws[1].woken, 1);
    teardown();
}
END_TEST

static void notify_inside(struct tw *self)
{
    (void)self;
    /* a commit noticed inside a wake: adds to the running pass */
    qn_waiters_notify(ws, T1, "r", NULL, 10);
    ck_assert_int_eq(tws[5].woken, 0); /* not yet: the outer pass calls it */
}

START_TEST(notify_inside_a_wake_joins_the_pass)
{
    setup(100);
    park(0, "q", "g", NULL);
    park(1, "q", "g", NULL);
    park(5, "r", "g", NULL);
    tws[0].act = notify_inside;
    qn_waiters_notify(ws, T1, "q", NULL, 10);
    static const int want[] = {0, 1, 5};
    assert_order(want, 3);
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    teardown();
}
END_TEST

static void park_once_more(struct tw *self)
{
    if (self->woken == 1)
        ck_assert_int_eq(qn_waiters_park(ws, &self->w, T1, "q", "g"), QN_OK);
}

START_TEST(wake_all_wakes_everyone_once_even_if_they_park_again)
{
    setup(100);
    for (int i = 0; i < 10; i++)
        park(i, i % 2 ? "q" : "r", i % 3 ? "g" : "h", i == 7 ? "p" : NULL);
    park(10, NULL, "", NULL);
    tws[3].act = park_once_more; /* woken again by a later pass */
    qn_waiters_wake_all(ws);
    for (int i = 0; i <= 10; i++)
        ck_assert_int_eq(tws[i].woken, i == 3 ? 2 : 1);
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    teardown();
}
END_TEST

START_TEST(free_with_parked_waiters)
{
    setup(100);
    park(0, "q", "g", NULL);
    park(1, NULL, "", NULL);
    qn_waiters_free(ws);
    ws = NULL;
    /* the waiters are simply dropped: their owners see them unparked */
    ck_assert(!qn_waiter_parked(&tws[0].w));
    ck_assert(!qn_waiter_parked(&tws[1].w));
}
END_TEST

/* ---------------------------------------------------------------- feed (local commits) */

static bool busy[MAXW];

static bool is_ready(const struct qn_waiter *w)
{
    const struct tw *t = w->ud;
    return !busy[t->id];
}

/* 16 consumers of one group parked on one queue; one commit to a partition wakes
 * exactly one of them, the oldest, hinted with that partition. */
START_TEST(feed_wakes_one_per_group_with_the_partition)
{
    setup(100);
    for (int i = 0; i < 16; i++)
        park(i, "q", "g", NULL);
    park(16, "q", "other", NULL);
    qn_waiters_feed(ws, T1, "q", NULL, "p7", 4);
    static const int want[] = {16, 0};
    ck_assert_int_eq(norder, 2);
    /* one per group: the group "other" (parked last, its bucket first) and "g" */
    ck_assert(order[0] == want[0] || order[0] == want[1]);
    ck_assert(order[1] == want[0] || order[1] == want[1]);
    ck_assert(order[0] != order[1]);
    ck_assert(tws[0].w.hinted);
    ck_assert_str_eq(tws[0].w.hint, "p7");
    ck_assert(tws[16].w.hinted);
    for (int i = 1; i < 16; i++) {
        ck_assert_int_eq(tws[i].woken, 0);
        ck_assert(!tws[i].w.hinted);
    }
    ck_assert_uint_eq(qn_waiters_count(ws), 15);
    /* 15 more commits (one per partition) wake the other 15, each once */
    char part[8];
    for (int k = 0; k < 15; k++) {
        snprintf(part, sizeof part, "p%d", k + 100);
        qn_waiters_feed(ws, T1, "q", NULL, part, 4);
    }
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(tws[i].woken, 1);
    ck_assert_str_eq(tws[15].w.hint, "p114");
    ck_assert_uint_eq(qn_waiters_count(ws), 0);
    /* nobody left: a commit wakes nobody */
    qn_waiters_feed(ws, T1, "q", NULL, "p1", 4);
    ck_assert_int_eq(norder, 17);
    teardown();
}
END_TEST

/* A waiter whose owner has a call in flight would only remember the wake-up:
 * the commit goes to the oldest ready one; when none is ready, to the oldest. */
START_TEST(feed_prefers_ready_waiters)
{
    setup(100);
    memset(busy, 0, sizeof busy);
    for (int i = 0; i < 4; i++) {
        tws[i].w.ready = is_ready;
        park(i, "q", "g", NULL);
    }
    busy[0] = busy[1] = true;
    qn_waiters_feed(ws, T1, "q", NULL, "a", 0);
    static const int want[] = {2};
    assert_order(want, 1);
    busy[3] = true;
    /* 0, 1 and 3 busy: the oldest of them */
    busy[2] = true;
    qn_waiters_feed(ws, T1, "q", NULL, "b", 0);
    static const int want2[] = {2, 0};
    assert_order(want2, 2);
    ck_assert_str_eq(tws[0].w.hint, "b");
    teardown();
}
END_TEST

/* Partition waiters of the committed partition all wake (they do not compete
 * with the "any" waiters); other partitions' do not; discovery waiters of the
 * tenant wake up to the given count, unhinted; another tenant's never. */
START_TEST(feed_partition_and_discovery_waiters)
{
    setup(100);
    park(0, "q", "g", "p1");
    park(1, "q", "g", "p2");
    park(2, "q", "g", "p1");
    park(3, "q", "g", NULL);
    park(4, "q", "g", NULL);
    park(5, NULL, "", NULL);
    park(6, NULL, "", NULL);
    park(7, NULL, "", NULL);
    tws[8].w.partition = NULL;
    ck_assert_int_eq(qn_waiters_park(ws, &tws[8].w, T2, "q", "g"), QN_OK);
    qn_waiters_feed(ws, T1, "q", NULL, "p1", 2);
    ck_assert_int_eq(tws[0].woken, 1);
    ck_assert_int_eq(tws[2].woken, 1);
    ck_assert_int_eq(tws[1].woken, 0);
    ck_assert_int_eq(tws[3].woken, 1);
    ck_assert_int_eq(tws[4].woken, 0);
    ck_assert_int_eq(tws[5].woken + tws[6].woken + tws[7].woken, 2);
    ck_assert(!tws[5].w.hinted && !tws[6].w.hinted);
    ck_assert(!tws[0].w.hinted); /* a partition waiter needs no hint */
    ck_assert_int_eq(tws[8].woken, 0);
    ck_assert_int_eq(norder, 5);
    teardown();
}
END_TEST

/* A partition name longer than a hint holds still wakes one waiter, unhinted
 * (it then pops as it would have without the hint). */
START_TEST(feed_long_partition_wakes_unhinted)
{
    setup(100);
    park(0, "q", "g", NULL);
    park(1, "q", "g", NULL);
    char longp[QN_WAITER_HINT_MAX + 2];
    memset(longp, 'x', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    qn_waiters_feed(ws, T1, "q", NULL, longp, 4);
    static const int want[] = {0};
    assert_order(want, 1);
    ck_assert(!tws[0].w.hinted);
    /* partition unknown (NULL): as qn_waiters_notify with the count given */
    qn_waiters_feed(ws, T1, "q", NULL, NULL, 4);
    static const int want2[] = {0, 1};
    assert_order(want2, 2);
    teardown();
}
END_TEST

static bool skip_all(void *ud, const char *group)
{
    (void)ud;
    (void)group;
    return true;
}

/* qn_waiters_unfed moves exactly when a feed left a group of the queue without
 * a hinted waiter on this loop: a hinted pop that comes back empty scans only
 * then (svc_pop.c, svc_consume.c). */
START_TEST(feed_counts_commits_nobody_was_told)
{
    setup(100);
    uint64_t u = qn_waiters_unfed(ws, T1, "q");
    park(0, "q", "g", NULL);
    park(1, "q", "g", NULL);
    qn_waiters_feed(ws, T1, "q", NULL, "p1", 0);
    qn_waiters_feed(ws, T1, "q", NULL, "p2", 0);
    ck_assert(tws[0].w.hinted && tws[1].w.hinted);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), u); /* both told */
    /* nobody of the queue parked here: that commit reached no consumer */
    qn_waiters_feed(ws, T1, "q", NULL, "p3", 0);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), ++u);
    /* two groups, one waiter each: both told */
    tws[0].w.hinted = tws[1].w.hinted = false;
    park(0, "q", "g", NULL);
    park(1, "q", "h", NULL);
    qn_waiters_feed(ws, T1, "q", NULL, "p4", 0);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), u);
    /* group h alone, with one parked waiter of g: h's commit is told to nobody */
    tws[0].w.hinted = tws[1].w.hinted = false;
    park(0, "q", "g", NULL);
    qn_waiters_feed(ws, T1, "q", "h", "p5", 0);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), ++u);
    ck_assert_int_eq(tws[0].woken, 2);
    /* a group whose lease is held here is skipped on purpose: not a loss */
    qn_waiters_feed_except(ws, T1, "q", "p6", 0, skip_all, NULL, NULL, NULL);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), u);
    ck_assert_int_eq(tws[0].woken, 2);
    /* a parked waiter still holding a hint it has not taken gets a new one:
     * the old partition was told to nobody */
    tws[0].w.hinted = true;
    snprintf(tws[0].w.hint, sizeof tws[0].w.hint, "p5");
    qn_waiters_feed(ws, T1, "q", NULL, "p7", 0);
    ck_assert_str_eq(tws[0].w.hint, "p7");
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), ++u);
    /* partition waiters are not "any partition" consumers: a group with only
     * a waiter for another partition leaves the commit unfed */
    park(2, "q", "g", "p9");
    qn_waiters_feed(ws, T1, "q", NULL, "p8", 0);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), ++u);
    ck_assert_int_eq(tws[2].woken, 0);
    teardown();
}
END_TEST

/* The wire spells the default group "" or "__QUEUE_MODE__": one group here. A
 * release fed under one spelling reaches a consumer parked under the other, and
 * is not counted unfed (that made every such consumer's next empty hinted pop
 * scan every partition). */
START_TEST(default_group_has_two_spellings)
{
    setup(100);
    uint64_t u = qn_waiters_unfed(ws, T1, "q");
    park(0, "q", "__QUEUE_MODE__", NULL);
    qn_waiters_feed(ws, T1, "q", "", "p1", 0);
    ck_assert_int_eq(tws[0].woken, 1);
    ck_assert_str_eq(tws[0].w.hint, "p1");
    park(1, "q", "", NULL);
    qn_waiters_feed(ws, T1, "q", "__QUEUE_MODE__", "p2", 0);
    ck_assert_int_eq(tws[1].woken, 1);
    ck_assert_str_eq(tws[1].w.hint, "p2");
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), u);
    /* one bucket: both parked, one feed wakes one of them */
    tws[0].w.hinted = tws[1].w.hinted = false;
    park(0, "q", "", NULL);
    park(1, "q", "__QUEUE_MODE__", NULL);
    qn_waiters_feed(ws, T1, "q", NULL, "p3", 0);
    ck_assert_int_eq(tws[0].woken + tws[1].woken, 3);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), u);
    teardown();
}
END_TEST

/* A group's empty scan lets its new consumers wait without one while nothing
 * moved the queue's unfed count, for max_age at most; a scan that found data,
 * a commit told nobody, a NOTIFY (no partition) or age ends it. Per group and
 * tenant; the default group's two spellings are one. */
START_TEST(empty_scan_is_remembered_until_news_reaches_nobody)
{
    setup(100);
    uint64_t u = qn_waiters_unfed(ws, T1, "q"), got = 0;
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "g", 1000, 100, &got)); /* never scanned */
    qn_waiters_scanned(ws, T1, "q", "g", u, true, 1000);
    ck_assert(qn_waiters_known_empty(ws, T1, "q", "g", 1050, 100, &got));
    ck_assert_uint_eq(got, u);
    ck_assert(qn_waiters_known_empty(ws, T1, "q", "g", 1100, 100, &got));
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "g", 1101, 100, &got));  /* too old */
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "h", 1050, 100, &got));  /* another group */
    ck_assert(!qn_waiters_known_empty(ws, T2, "q", "g", 1050, 100, &got));  /* another tenant */
    ck_assert(!qn_waiters_known_empty(ws, T1, "q2", "g", 1050, 100, &got)); /* another queue */
    /* a commit handed to a parked consumer of the queue keeps it */
    park(0, "q", "g", NULL);
    qn_waiters_feed(ws, T1, "q", NULL, "p1", 0);
    ck_assert(tws[0].w.hinted);
    ck_assert(qn_waiters_known_empty(ws, T1, "q", "g", 1050, 100, &got));
    /* a commit told nobody ends it */
    qn_waiters_feed(ws, T1, "q", NULL, "p2", 0);
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "g", 1050, 100, &got));
    /* a scan issued before that commit cannot vouch for it */
    qn_waiters_scanned(ws, T1, "q", "g", u, true, 1060);
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "g", 1060, 100, &got));
    u = qn_waiters_unfed(ws, T1, "q");
    qn_waiters_scanned(ws, T1, "q", "g", u, true, 1070);
    ck_assert(qn_waiters_known_empty(ws, T1, "q", "g", 1070, 100, &got));
    /* a scan that found data forgets it */
    qn_waiters_scanned(ws, T1, "q", "g", u, false, 1080);
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "g", 1080, 100, &got));
    /* news from another broker names no partition: nobody here was told */
    qn_waiters_scanned(ws, T1, "q", "g", u, true, 1090);
    qn_waiters_notify(ws, T1, "q", NULL, 1);
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "g", 1090, 100, &got));
    u = qn_waiters_unfed(ws, T1, "q");
    qn_waiters_scanned(ws, T1, "q", "g", u, true, 1100);
    qn_waiters_notify(ws, NULL, NULL, NULL, 1); /* of any queue */
    ck_assert(!qn_waiters_known_empty(ws, T1, "q", "g", 1100, 100, &got));
    /* the default group: "" and QN_QUEUE_MODE are one */
    u = qn_waiters_unfed(ws, T1, "q");
    qn_waiters_scanned(ws, T1, "q", "__QUEUE_MODE__", u, true, 2000);
    ck_assert(qn_waiters_known_empty(ws, T1, "q", "", 2000, 100, &got));
    ck_assert(qn_waiters_known_empty(ws, T1, "q", NULL, 2000, 100, &got));
    /* discovery (no queue) is never vouched for */
    qn_waiters_scanned(ws, T1, "", "g", u, true, 2000);
    ck_assert(!qn_waiters_known_empty(ws, T1, "", "g", 2000, 100, &got));
    teardown();
}
END_TEST

/* take_spare with a minute's max age at the waiters' own clock. */
static bool take(const uint8_t *tenant, const char *queue, const char *group, char *out)
{
    return qn_waiters_take_spare(ws, tenant, queue, group, qn_store_now_ms(), 60000, out);
}

/* What a feed told nobody is kept, per (tenant, queue) and group (any group
 * when nobody waited on the queue), and taken oldest first, once; what was
 * told, skipped as held or told on another loop is not; a displaced hint is;
 * a repeat refreshes; 8 per queue; drop and age forget; names over 63 bytes
 * are not kept. */
START_TEST(spare_hints_keep_what_nobody_was_told)
{
    setup(100);
    char out[QN_WAITER_HINT_MAX + 1];
    ck_assert(!take(T1, "q", "g", out));
    /* nobody waits on q: kept for any group, taken once */
    qn_waiters_feed(ws, T1, "q", NULL, "p1", 0);
    ck_assert(take(T1, "q", "h", out));
    ck_assert_str_eq(out, "p1");
    ck_assert(!take(T1, "q", "g", out));
    /* told to a parked consumer: nothing kept */
    park(0, "q", "g", NULL);
    qn_waiters_feed(ws, T1, "q", NULL, "p2", 0);
    ck_assert_int_eq(tws[0].woken, 1);
    ck_assert(!take(T1, "q", "g", out));
    /* skipped (the group's lease is held here) or told on another loop: not kept */
    tws[0].w.hinted = false;
    park(0, "q", "g", NULL);
    qn_waiters_feed_except(ws, T1, "q", "p2", 0, skip_all, NULL, NULL, NULL);
    struct qn_told told = {.complete = true};
    memcpy(told.names, "g", 2);
    told.len = 2;
    qn_waiters_feed_except(ws, T1, "q", "p2", 0, NULL, NULL, &told, NULL);
    ck_assert_int_eq(tws[0].woken, 1);
    ck_assert(!take(T1, "q", "g", out));
    /* g is told, h (only a waiter for another partition) is not: kept for h */
    park(1, "q", "h", "p9");
    qn_waiters_feed(ws, T1, "q", NULL, "p3", 0);
    ck_assert_int_eq(tws[0].woken, 2);
    ck_assert(!take(T1, "q", "g", out));
    ck_assert(take(T1, "q", "h", out));
    ck_assert_str_eq(out, "p3");
    /* a hint not taken yet is displaced by a newer one: the old one is kept */
    park(0, "q", "g", NULL);
    tws[0].w.hinted = true;
    snprintf(tws[0].w.hint, sizeof tws[0].w.hint, "p4");
    qn_waiters_feed(ws, T1, "q", "g", "p5", 0);
    ck_assert_str_eq(tws[0].w.hint, "p5");
    ck_assert(take(T1, "q", "g", out));
    ck_assert_str_eq(out, "p4");
    /* a release for a group with no consumer here: kept for that group only */
    qn_waiters_feed(ws, T1, "q", "k", "p6", 0);
    ck_assert(!take(T1, "q", "g", out));
    ck_assert(take(T1, "q", "k", out));
    ck_assert_str_eq(out, "p6");
    qn_waiters_unpark(ws, &tws[1].w);
    /* oldest first; a repeat refreshes instead of adding */
    qn_waiters_feed(ws, T1, "q", NULL, "p7", 0);
    qn_waiters_feed(ws, T1, "q", NULL, "p8", 0);
    qn_waiters_feed(ws, T1, "q", NULL, "p7", 0);
    ck_assert(take(T1, "q", "g", out));
    ck_assert_str_eq(out, "p8");
    ck_assert(take(T1, "q", "g", out));
    ck_assert_str_eq(out, "p7");
    ck_assert(!take(T1, "q", "g", out));
    /* per tenant and queue; the default group's spellings are one */
    qn_waiters_feed(ws, T1, "q", "", "p10", 0);
    ck_assert(!take(T2, "q", "", out));
    ck_assert(!take(T1, "q2", "", out));
    ck_assert(take(T1, "q", "__QUEUE_MODE__", out));
    ck_assert_str_eq(out, "p10");
    /* a pop of the group leased there: forgotten */
    qn_waiters_feed(ws, T1, "q", NULL, "p11", 0);
    qn_waiters_drop_spare(ws, T1, "q", "g", "p11");
    ck_assert(!take(T1, "q", "g", out));
    /* too old to trust: forgotten */
    qn_waiters_feed(ws, T1, "q", NULL, "p12", 0);
    ck_assert(!qn_waiters_take_spare(ws, T1, "q", "g", qn_store_now_ms() + 1000, 100, out));
    ck_assert(!take(T1, "q", "g", out));
    /* at most 8 per queue: the newest stay */
    for (int i = 0; i < 10; i++) {
        char part[8];
        snprintf(part, sizeof part, "x%d", i);
        qn_waiters_feed(ws, T1, "q", NULL, part, 0);
    }
    for (int i = 2; i < 10; i++) {
        char want[8];
        snprintf(want, sizeof want, "x%d", i);
        ck_assert(take(T1, "q", "g", out));
        ck_assert_str_eq(out, want);
    }
    ck_assert(!take(T1, "q", "g", out));
    /* a name over 63 bytes is not kept (its pop scans) */
    char longp[65];
    memset(longp, 'L', 64);
    longp[64] = '\0';
    qn_waiters_feed(ws, T1, "q", NULL, longp, 0);
    ck_assert(!take(T1, "q", "g", out));
    teardown();
}
END_TEST

static bool never_ready(const struct qn_waiter *w)
{
    (void)w;
    return false;
}

/* One loop's feed reports the groups it told; another loop, fed the same
 * commit with that set, wakes only that partition's own waiters of those
 * groups (not an "any partition" consumer: its pop would come back empty), and
 * feeds the other groups as usual. */
START_TEST(groups_told_on_another_loop)
{
    setup(100);
    struct qn_told told;
    park(0, "q", "g", NULL);
    qn_waiters_feed_except(ws, T1, "q", "p", 0, NULL, NULL, NULL, &told);
    ck_assert(told.complete);
    ck_assert_int_eq(told.len, 2);
    ck_assert_str_eq(told.names, "g"); /* h has no consumer here: not told */
    ck_assert_int_eq(tws[0].woken, 1);
    /* the other loop: any and partition waiters of g, an any waiter of h */
    uint64_t u = qn_waiters_unfed(ws, T1, "q");
    tws[0].w.hinted = false;
    park(0, "q", "g", NULL);
    park(1, "q", "g", "p");
    park(2, "q", "h", NULL);
    park(3, "q", "g", "other");
    qn_waiters_feed_except(ws, T1, "q", "p", 0, NULL, NULL, &told, NULL);
    ck_assert_int_eq(tws[0].woken, 1); /* told on the first loop */
    ck_assert_int_eq(tws[1].woken, 1); /* its partition's own waiter */
    ck_assert_int_eq(tws[2].woken, 1);
    ck_assert(tws[2].w.hinted);
    ck_assert_str_eq(tws[2].w.hint, "p");
    ck_assert_int_eq(tws[3].woken, 0);
    ck_assert_uint_eq(qn_waiters_unfed(ws, T1, "q"), u);
    /* a group whose picked consumer cannot pop at once is not told: the
     * other loops feed it too */
    tws[0].w.hinted = false;
    park(5, "q", "k", NULL);
    tws[5].w.ready = never_ready;
    qn_waiters_feed_except(ws, T1, "q", "p2", 0, NULL, NULL, NULL, &told);
    ck_assert_int_eq(tws[5].woken, 1); /* the only one of k: picked anyway */
    ck_assert_int_eq(tws[0].woken, 2);
    ck_assert(told.complete);
    ck_assert_str_eq(told.names, "g");
    ck_assert_int_eq(told.len, 2);
    park(0, "q", "g", NULL);
    tws[0].w.hinted = false;
    /* an incomplete set (too many names) counts as none told */
    struct qn_told full = {0};
    full.complete = false;
    qn_waiters_feed_except(ws, T1, "q", "p", 0, NULL, NULL, &full, NULL);
    ck_assert_int_eq(tws[0].woken, 3);
    teardown();
}
END_TEST

/* More group names than a told set holds: it says so (complete = false). */
START_TEST(told_set_overflows_to_incomplete)
{
    setup(MAXW);
    char groups[MAXW][40];
    for (int i = 0; i < 20; i++) {
        snprintf(groups[i], sizeof groups[i], "group-with-a-long-name-%016d", i);
        park(i, "q", groups[i], NULL);
    }
    struct qn_told told;
    qn_waiters_feed_except(ws, T1, "q", "p", 0, NULL, NULL, NULL, &told);
    ck_assert(!told.complete);
    ck_assert_int_le(told.len, QN_TOLD_BYTES);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(tws[i].woken, 1);
    teardown();
}
END_TEST

Suite *qn_test_waiters_suite(void)
{
    Suite *s = suite_create("waiters");
    TCase *tc = tcase_create("waiters");
    tcase_add_test(tc, wakes_oldest_first_up_to_per_group);
    tcase_add_test(tc, per_group_count_is_per_group);
    tcase_add_test(tc, partition_waiters_all_wake_for_their_partition);
    tcase_add_test(tc, other_queues_and_discovery);
    tcase_add_test(tc, tenants_wake_only_their_own);
    tcase_add_test(tc, parked_limit);
    tcase_add_test(tc, parked_limit_shared_by_loops);
    tcase_add_test(tc, unparked_during_pass_is_not_called);
    tcase_add_test(tc, owner_freed_during_pass);
    tcase_add_test(tc, reparked_in_wake_waits_for_the_next_commit);
    tcase_add_test(tc, notify_inside_a_wake_joins_the_pass);
    tcase_add_test(tc, wake_all_wakes_everyone_once_even_if_they_park_again);
    tcase_add_test(tc, free_with_parked_waiters);
    tcase_add_test(tc, feed_wakes_one_per_group_with_the_partition);
    tcase_add_test(tc, feed_prefers_ready_waiters);
    tcase_add_test(tc, feed_partition_and_discovery_waiters);
    tcase_add_test(tc, feed_long_partition_wakes_unhinted);
    tcase_add_test(tc, feed_counts_commits_nobody_was_told);
    tcase_add_test(tc, default_group_has_two_spellings);
    tcase_add_test(tc, groups_told_on_another_loop);
    tcase_add_test(tc, told_set_overflows_to_incomplete);
    tcase_add_test(tc, empty_scan_is_remembered_until_news_reaches_nobody);
    tcase_add_test(tc, spare_hints_keep_what_nobody_was_told);
    suite_add_tcase(s, tc);
    return s;
}
