/*
 * test_cfusion.c - suite "cfusion": broker/src/engine/cfusion.c, consume
 * fusion's partition directory, on real waiters (no loop, no database).
 *
 * Pops teach it (tenant, partition id) -> names; a released lease then wakes
 * exactly one parked consumer of the acking group, hinted with the partition,
 * and nobody in another group, queue or tenant, and only when something is
 * likely left there; an unknown id wakes nobody; the directory stays within its
 * bound. A commit to a partition whose lease a consumer of this broker holds
 * wakes nobody of that group (other groups and tenants as before), and every
 * way the lease ends (ack, release of its worker, expiry) hints it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cfusion.h"
#include "engine/held.h"
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
    qn_cfusion_learn(cf, T1, pid, "orders", "p-7", "g", true, 1000);
    ck_assert_uint_eq(qn_cfusion_count(cf), 1);
    qn_cfusion_learn(cf, T1, pid, "orders", "p-7", "g", true, 1000); /* known: no second entry */
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
    qn_cfusion_learn(cf, T1, pid, "q", "a", "g", true, 1000);
    park(0, T1, "q", "g");
    park(1, T2, "q", "g");
    ck_assert(!qn_cfusion_released(cf, T1, other, "g"));
    ck_assert(!qn_cfusion_released(cf, T2, pid, "g")); /* learned under T1 only */
    ck_assert_int_eq(total_woken(), 0);
    /* bad names are not learned */
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    qn_cfusion_learn(cf, T1, other, longname, "a", "g", true, 1000);
    qn_cfusion_learn(cf, T1, other, "", "a", "g", true, 1000);
    qn_cfusion_learn(cf, T1, other, "q", NULL, "g", true, 1000);
    ck_assert_uint_eq(qn_cfusion_count(cf), 1);
    teardown();
}
END_TEST

START_TEST(queue_mode_group_matches_both_spellings)
{
    setup(0);
    uint8_t pid[16];
    pid_of(3, pid);
    qn_cfusion_learn(cf, T1, pid, "q", "a", "", true, 1000);
    park(0, T1, "q", "");
    park(1, T1, "q", "__QUEUE_MODE__");
    park(2, T1, "q", "g");
    ck_assert(qn_cfusion_released(cf, T1, pid, "__QUEUE_MODE__"));
    /* one group under two spellings (waiters.h): one consumer told, the oldest */
    ck_assert_int_eq(cws[0].woken, 1);
    ck_assert_int_eq(cws[1].woken, 0);
    ck_assert_int_eq(cws[2].woken, 0);
    teardown();
}
END_TEST

START_TEST(bounded_and_relearns)
{
    setup(4);
    uint8_t pid[16];
    const char *parts[] = {"x0", "x1", "x2", "x3"};
    for (int i = 0; i < 4; i++) {
        pid_of(i, pid);
        qn_cfusion_learn(cf, T1, pid, "q", parts[i], "g", true, 1000);
    }
    ck_assert_uint_eq(qn_cfusion_count(cf), 4);
    pid_of(4, pid);
    qn_cfusion_learn(cf, T1, pid, "q", "y", "g", true, 1000); /* full: starts over */
    ck_assert_uint_eq(qn_cfusion_count(cf), 1);
    pid_of(0, pid);
    park(0, T1, "q", "g");
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g"));              /* forgotten */
    qn_cfusion_learn(cf, T1, pid, "q", "renamed", "g", true, 1000); /* relearned */
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_str_eq(cws[0].w.hint, "renamed");
    /* a new partition id under names another id held (the queue was deleted and
     * made again): the old id is forgotten */
    uint8_t pid2[16];
    pid_of(77, pid2);
    qn_cfusion_learn(cf, T1, pid2, "q", "renamed", "g", true, 2000);
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_uint_eq(qn_cfusion_count(cf), 2);
    teardown();
}
END_TEST

/* An ack's release wakes exactly when the ack saw more in the partition
 * (QN_ACKF_MORE) or this broker committed there at or after the ack was sent
 * (the ack could not see that commit); otherwise nobody. */
START_TEST(ack_release_wakes_on_what_the_ack_saw_or_could_not_see)
{
    setup(0);
    uint8_t pid[16];
    pid_of(9, pid);
    park(0, T1, "q", "g");
    qn_cfusion_learn(cf, T1, pid, "q", "p9", "g", true, 1000); /* even a full batch */
    /* drained as the ack read it, no commit known: nobody */
    ck_assert(!qn_cfusion_ack_released(cf, T1, pid, "g", false, 1100));
    /* a commit answered before the ack was sent: the ack saw it (drained) */
    qn_cfusion_committed(cf, T1, "q", "p9", 1099);
    ck_assert(!qn_cfusion_ack_released(cf, T1, pid, "g", false, 1100));
    ck_assert_int_eq(total_woken(), 0);
    /* the ack saw more */
    ck_assert(qn_cfusion_ack_released(cf, T1, pid, "g", true, 1100));
    ck_assert_int_eq(cws[0].woken, 1);
    ck_assert_str_eq(cws[0].w.hint, "p9");
    /* a commit answered as the ack was sent, or after: maybe not seen by it */
    park(1, T1, "q", "g");
    qn_cfusion_committed(cf, T1, "q", "p9", 1100);
    ck_assert(qn_cfusion_ack_released(cf, T1, pid, "g", false, 1100));
    ck_assert_int_eq(cws[1].woken, 1);
    /* another partition's commit does not count; an unknown partition: nobody */
    park(2, T1, "q", "g");
    qn_cfusion_committed(cf, T1, "q", "p8", 5000);
    ck_assert(!qn_cfusion_ack_released(cf, T1, pid, "g", false, 2000));
    uint8_t other[16];
    pid_of(10, other);
    ck_assert(!qn_cfusion_ack_released(cf, T1, other, "g", true, 2000));
    ck_assert_int_eq(cws[2].woken, 0);
    teardown();
}
END_TEST

/* A release wakes only when something is likely left: the last lease of the
 * group was a full batch, or this broker committed there since (or within
 * QN_CFUSION_RACE_MS before) that lease came back. */
START_TEST(release_wakes_only_when_something_is_left)
{
    setup(0);
    uint8_t pid[16];
    pid_of(9, pid);
    park(0, T1, "q", "g");
    /* an under-full batch at t=1000 and no commit seen: drained, nobody wakes */
    qn_cfusion_learn(cf, T1, pid, "q", "p9", "g", false, 1000);
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_int_eq(total_woken(), 0);
    /* a commit long before the lease: the pop saw it */
    qn_cfusion_committed(cf, T1, "q", "p9", 1000 - QN_CFUSION_RACE_MS - 1);
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g"));
    /* a commit just before the lease came back: maybe missed by it */
    qn_cfusion_committed(cf, T1, "q", "p9", 1000 - QN_CFUSION_RACE_MS + 1);
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_int_eq(cws[0].woken, 1);
    ck_assert_str_eq(cws[0].w.hint, "p9");
    /* a new under-full lease, then a commit while it was held: wakes */
    park(1, T1, "q", "g");
    qn_cfusion_learn(cf, T1, pid, "q", "p9", "g", false, 5000);
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g"));
    qn_cfusion_committed(cf, T1, "q", "p9", 5100);
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_int_eq(cws[1].woken, 1);
    /* a commit to another partition or queue or tenant does not count */
    park(2, T1, "q", "g");
    qn_cfusion_learn(cf, T1, pid, "q", "p9", "g", false, 9000);
    qn_cfusion_committed(cf, T1, "q", "p8", 9100);
    qn_cfusion_committed(cf, T1, "r", "p9", 9100);
    qn_cfusion_committed(cf, T2, "q", "p9", 9100);
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g"));
    /* a full batch: more may be pending */
    qn_cfusion_learn(cf, T1, pid, "q", "p9", "g", true, 9200);
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_int_eq(cws[2].woken, 1);
    teardown();
}
END_TEST

/* Leases are remembered per group: one group's drained lease does not hide
 * another group's full one; a group never seen here always wakes. */
START_TEST(leases_are_per_group)
{
    setup(0);
    uint8_t pid[16];
    pid_of(5, pid);
    park(0, T1, "q", "a");
    park(1, T1, "q", "b");
    park(2, T1, "q", "c");
    qn_cfusion_learn(cf, T1, pid, "q", "p", "a", true, 100);
    qn_cfusion_learn(cf, T1, pid, "q", "p", "b", false, 200);
    ck_assert(!qn_cfusion_released(cf, T1, pid, "b"));
    ck_assert(qn_cfusion_released(cf, T1, pid, "a"));
    ck_assert(qn_cfusion_released(cf, T1, pid, "c")); /* never leased here: wake */
    ck_assert_int_eq(cws[0].woken, 1);
    ck_assert_int_eq(cws[1].woken, 0);
    ck_assert_int_eq(cws[2].woken, 1);
    /* more groups than remembered: the oldest slot is reused */
    const char *gs[] = {"g1", "g2", "g3", "g4"};
    for (int i = 0; i < 4; i++)
        qn_cfusion_learn(cf, T1, pid, "q", "p", gs[i], false, 300);
    park(3, T1, "q", "b");
    ck_assert(qn_cfusion_released(cf, T1, pid, "b")); /* forgotten: wakes */
    ck_assert(!qn_cfusion_released(cf, T1, pid, "g4"));
    teardown();
}
END_TEST

/* A held lease keeps a commit from waking its group (any-partition and
 * exactly-this-partition waiters alike); other groups and tenants wake; the
 * ack's release then hints the partition, since the commit came after. */
START_TEST(commit_to_held_partition_wakes_nobody_of_that_group)
{
    setup(0);
    uint8_t pid[16];
    pid_of(3, pid);
    qn_cfusion_learn(cf, T1, pid, "q", "p", "g", false, 1000);
    qn_cfusion_hold(cf, T1, pid, "g", "w1", 60000);
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 1);
    ck_assert(qn_cfusion_holds(cf, T1, "q", "p", "g", 1000));
    ck_assert(!qn_cfusion_holds(cf, T1, "q", "p", "h", 1000));
    ck_assert(!qn_cfusion_holds(cf, T2, "q", "p", "g", 1000));
    park(0, T1, "q", "g");
    cws[5].w.partition = "p";
    park(5, T1, "q", "g");
    park(1, T1, "q", "h");
    park(2, T2, "q", "g");
    qn_cfusion_commit_feed(cf, T1, "q", "p", 0, 1500, NULL, NULL);
    ck_assert_int_eq(cws[0].woken, 0);
    ck_assert_int_eq(cws[5].woken, 0);
    ck_assert_int_eq(cws[1].woken, 1);
    ck_assert(cws[1].w.hinted);
    ck_assert_int_eq(total_woken(), 1);
    /* another tenant's partition of the same names is not held here */
    qn_cfusion_commit_feed(cf, T2, "q", "p", 0, 1500, NULL, NULL);
    ck_assert_int_eq(cws[2].woken, 1);
    /* the ack releases: the commit after the lease is hinted to group g */
    ck_assert(qn_cfusion_released(cf, T1, pid, "g"));
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 0);
    ck_assert_int_eq(cws[0].woken + cws[5].woken, 2); /* one any, the specific one */
    ck_assert(cws[0].w.hinted);
    ck_assert_str_eq(cws[0].w.hint, "p");
    /* not held any more: the next commit wakes the group */
    park(0, T1, "q", "g");
    qn_cfusion_commit_feed(cf, T1, "q", "p", 0, 1600, NULL, NULL);
    ck_assert_int_eq(cws[0].woken, 2);
    teardown();
}
END_TEST

/* release_lease_v1 of a worker releases its holds of its tenant only; each
 * released partition that got a commit meanwhile is hinted, a drained one is not. */
START_TEST(worker_release_hints_its_partitions)
{
    setup(0);
    uint8_t p1[16], p2[16], p3[16], p4[16];
    pid_of(1, p1);
    pid_of(2, p2);
    pid_of(3, p3);
    pid_of(4, p4);
    qn_cfusion_learn(cf, T1, p1, "q", "a", "g", false, 1000);
    qn_cfusion_learn(cf, T1, p2, "q", "b", "g", false, 1000);
    qn_cfusion_learn(cf, T1, p3, "q", "c", "g", false, 1000);
    qn_cfusion_learn(cf, T1, p4, "q", "d", "g", false, 1000);
    qn_cfusion_hold(cf, T1, p1, "g", "w1", 60000);
    qn_cfusion_hold(cf, T1, p2, "g", "w1", 60000);
    qn_cfusion_hold(cf, T1, p3, "g", "w1", 60000); /* drained: no commit */
    qn_cfusion_hold(cf, T1, p4, "g", "w2", 60000);
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 4);
    for (int i = 0; i < 4; i++)
        park(i, T1, "q", "g");
    qn_cfusion_commit_feed(cf, T1, "q", "a", 0, 1100, NULL, NULL);
    qn_cfusion_commit_feed(cf, T1, "q", "b", 0, 1100, NULL, NULL);
    qn_cfusion_commit_feed(cf, T1, "q", "d", 0, 1100, NULL, NULL);
    ck_assert_int_eq(total_woken(), 0);
    qn_cfusion_worker_released(cf, T2, "w1"); /* another tenant's worker of that id */
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 4);
    qn_cfusion_worker_released(cf, T1, "w1");
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 1);
    ck_assert_int_eq(total_woken(), 2);
    ck_assert(cws[0].w.hinted && cws[1].w.hinted);
    ck_assert(strcmp(cws[0].w.hint, cws[1].w.hint) != 0);
    ck_assert(strcmp(cws[0].w.hint, "c") != 0 && strcmp(cws[1].w.hint, "c") != 0);
    ck_assert(qn_cfusion_holds(cf, T1, "q", "d", "g", 1200));
    teardown();
}
END_TEST

/* A lease nobody acks: past its expiry it no longer holds a commit back, and
 * qn_cfusion_expire releases it, hinting what was committed meanwhile. */
START_TEST(expiry_releases_and_hints)
{
    setup(0);
    uint8_t pid[16];
    pid_of(9, pid);
    qn_cfusion_learn(cf, T1, pid, "q", "p", "", false, 1000);
    qn_cfusion_hold(cf, T1, pid, "", "w1", 5000);
    park(0, T1, "q", "__QUEUE_MODE__"); /* the queue-mode group, spelled the other way */
    qn_cfusion_commit_feed(cf, T1, "q", "p", 0, 2000, NULL, NULL);
    ck_assert_int_eq(cws[0].woken, 0);
    ck_assert_uint_eq(qn_cfusion_expire(cf, 4999), 0);
    ck_assert_int_eq(cws[0].woken, 0);
    ck_assert_uint_eq(qn_cfusion_expire(cf, 5000), 1);
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 0);
    ck_assert_int_eq(cws[0].woken, 1);
    ck_assert_str_eq(cws[0].w.hint, "p");
    /* a renewal of the worker (its tenant only) extends its holds */
    qn_cfusion_hold(cf, T1, pid, "", "w1", 5500);
    qn_cfusion_renewed(cf, T2, "w1", 9000);
    qn_cfusion_renewed(cf, T1, "w9", 9000);
    ck_assert(!qn_cfusion_holds(cf, T1, "q", "p", "", 5600));
    qn_cfusion_renewed(cf, T1, "w1", 9000);
    ck_assert(qn_cfusion_holds(cf, T1, "q", "p", "__QUEUE_MODE__", 5600));
    ck_assert_uint_eq(qn_cfusion_expire(cf, 5600), 0);
    ck_assert_uint_eq(qn_cfusion_expire(cf, 9000), 1);
    ck_assert_int_eq(cws[0].woken, 1); /* nobody parked in that group: nothing more */
    /* a hold whose expiry passed without the timer: commits wake again */
    qn_cfusion_hold(cf, T1, pid, "", "w2", 6000);
    park(0, T1, "q", "");
    qn_cfusion_commit_feed(cf, T1, "q", "p", 0, 6000, NULL, NULL);
    ck_assert_int_eq(cws[0].woken, 2);
    teardown();
}
END_TEST

/* Holds go with their entries: emptying the full directory, a renamed
 * partition or a reused group slot forgets them (no dangling hold). */
START_TEST(holds_leave_with_their_entries)
{
    setup(2);
    uint8_t p1[16], p2[16], p3[16];
    pid_of(1, p1);
    pid_of(2, p2);
    pid_of(3, p3);
    qn_cfusion_learn(cf, T1, p1, "q", "a", "g", false, 1000);
    qn_cfusion_hold(cf, T1, p1, "g", "w", 60000);
    qn_cfusion_learn(cf, T1, p2, "q", "b", "g", false, 1000);
    qn_cfusion_hold(cf, T1, p2, "g", "w", 60000);
    qn_cfusion_hold(cf, T1, p3, "g", "w", 60000); /* unknown: not held */
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 2);
    qn_cfusion_learn(cf, T1, p3, "q", "c", "g", false, 1000); /* full: emptied */
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 0);
    qn_cfusion_hold(cf, T1, p3, "g", "w", 60000);
    const char *gs[] = {"g1", "g2", "g3", "g4"};
    for (int i = 0; i < 4; i++)
        qn_cfusion_learn(cf, T1, p3, "q", "c", gs[i], false, 1000);
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 0); /* g's slot went to g4 */
    qn_cfusion_hold(cf, T1, p3, "g4", "w", 60000);
    qn_cfusion_learn(cf, T1, p3, "q", "renamed", "g4", false, 1000);
    ck_assert_uint_eq(qn_cfusion_held_count(cf), 0);
    qn_cfusion_worker_released(cf, T1, "w"); /* nothing left to release */
    ck_assert_int_eq(total_woken(), 0);
    teardown();
}
END_TEST

/* Two loops (two consume fusions, each with its own waiters) share one set of
 * held leases: a commit fed on the loop that does not hold the lease wakes
 * nobody of the holder's group there either, though that loop never saw the
 * partition; other groups wake; the release takes the lease off the set. */
START_TEST(a_lease_held_on_another_loop_skips_the_group)
{
    setup(0);
    struct qn_held *shared = NULL;
    ck_assert_int_eq(qn_held_new(&shared), QN_OK);
    struct qn_waiters *ws2 = NULL;
    struct qn_cfusion *cf2 = NULL;
    ck_assert_int_eq(qn_waiters_new(100, &ws2), QN_OK);
    ck_assert_int_eq(qn_cfusion_new(ws2, 0, &cf2), QN_OK);
    qn_cfusion_share(cf, shared);
    qn_cfusion_share(cf2, shared);
    uint8_t pid[16];
    pid_of(7, pid);
    qn_cfusion_learn(cf, T1, pid, "q", "p", "", false, 1000);
    qn_cfusion_hold(cf, T1, pid, "", "w1", 60000);
    ck_assert_uint_eq(qn_held_count(shared), 1);
    /* loop 2's consumers: the queue-mode group (other spelling) and group h */
    ck_assert_int_eq(qn_waiters_park(ws2, &cws[0].w, T1, "q", "__QUEUE_MODE__"), QN_OK);
    ck_assert_int_eq(qn_waiters_park(ws2, &cws[1].w, T1, "q", "h"), QN_OK);
    ck_assert_int_eq(qn_waiters_park(ws2, &cws[2].w, T2, "q", "__QUEUE_MODE__"), QN_OK);
    uint64_t unfed = qn_waiters_unfed(ws2, T1, "q");
    qn_cfusion_commit_feed(cf2, T1, "q", "p", 0, 1500, NULL, NULL);
    ck_assert_int_eq(cws[0].woken, 0);
    ck_assert_int_eq(cws[1].woken, 1);
    ck_assert_uint_eq(qn_waiters_unfed(ws2, T1, "q"), unfed); /* skipped, not lost */
    /* the same names in another tenant, another partition: not held */
    qn_cfusion_commit_feed(cf2, T2, "q", "p", 0, 1500, NULL, NULL);
    ck_assert_int_eq(cws[2].woken, 1);
    qn_cfusion_commit_feed(cf2, T1, "q", "p2", 0, 1500, NULL, NULL);
    ck_assert_int_eq(cws[0].woken, 1);
    /* released on loop 1: off the set, and loop 2 wakes the group again */
    ck_assert_int_eq(qn_waiters_park(ws2, &cws[0].w, T1, "q", ""), QN_OK);
    qn_cfusion_released(cf, T1, pid, "");
    ck_assert_uint_eq(qn_held_count(shared), 0);
    qn_cfusion_commit_feed(cf2, T1, "q", "p", 0, 1600, NULL, NULL);
    ck_assert_int_eq(cws[0].woken, 2);
    ck_assert_str_eq(cws[0].w.hint, "p");
    /* a hold that ends with its entry (directory emptied) leaves the set too */
    qn_cfusion_hold(cf, T1, pid, "", "w2", 60000);
    ck_assert_uint_eq(qn_held_count(shared), 1);
    qn_cfusion_free(cf2);
    qn_waiters_free(ws2);
    teardown();
    ck_assert_uint_eq(qn_held_count(shared), 0);
    qn_held_free(shared);
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
    tcase_add_test(tc, release_wakes_only_when_something_is_left);
    tcase_add_test(tc, ack_release_wakes_on_what_the_ack_saw_or_could_not_see);
    tcase_add_test(tc, leases_are_per_group);
    tcase_add_test(tc, commit_to_held_partition_wakes_nobody_of_that_group);
    tcase_add_test(tc, worker_release_hints_its_partitions);
    tcase_add_test(tc, expiry_releases_and_hints);
    tcase_add_test(tc, holds_leave_with_their_entries);
    tcase_add_test(tc, a_lease_held_on_another_loop_skips_the_group);
    suite_add_tcase(s, tc);
    return s;
}
