/*
 * test_sql_ack.c - 005_log_ack.sql: the ack decision procedure (positional and by
 * hash), every outcome, the retry budget, the DLQ hand-off and dlq_head_v1, the
 * drop when dead-lettering is off, leases (renew, release, check).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_test.h"

static void fixture(void)
{
    qt_suite_db("ack");
}

static int64_t popn(PGconn *c, const char *queue, const char *group, int budget, const char *worker)
{
    struct qt_pop p = {
        .queue = queue, .group = group, .budget = budget, .worker = worker, .max_partitions = 1};
    PGresult *r = qt_pop(c, &p);
    int64_t n = qt_taken(r);
    PQclear(r);
    return n;
}

static PGresult *consumer(PGconn *c, const char *pid, const char *group)
{
    PGresult *r = qt_q(c,
                       "SELECT * FROM queen.log_consumers WHERE partition_id = '%s' AND "
                       "consumer_group = '%s'",
                       pid, group);
    ck_assert_int_eq(PQntuples(r), 1);
    return r;
}

START_TEST(test_positional_partial_then_full)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.pos", "", "p", 0, 10);
    char pid[37];
    qt_pid(c, "ack.pos", "", pid);
    ck_assert_int_eq(popn(c, "ack.pos", "g", 10, "w1"), 10);
    struct qt_ack_item it = {.off = 4, .status = 1};
    PGresult *r = qt_ack(c, pid, "g", "w1", &it, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_off"), 4);
    int s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 0); /* lease kept: rest of batch */
    ck_assert_int_eq(qt_gi(r, s, "r_committed"), 4);
    PQclear(r);
    r = consumer(c, pid, "g");
    ck_assert_str_eq(qt_gs(r, 0, "worker_id"), "w1");
    ck_assert_int_eq(qt_gi(r, 0, "batch_end"), 9);
    PQclear(r);
    it.off = 9;
    r = qt_ack(c, pid, "g", "w1", &it, 1);
    s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 1);
    ck_assert_int_eq(qt_gi(r, s, "r_committed"), 9);
    PQclear(r);
    r = consumer(c, pid, "g");
    ck_assert(qt_gnull(r, 0, "worker_id"));
    ck_assert(qt_gnull(r, 0, "batch_end"));
    ck_assert(qt_gnull(r, 0, "lease_expires_at"));
    ck_assert(qt_gnull(r, 0, "attempt_offset"));
    ck_assert_int_eq(qt_gi(r, 0, "attempt_count"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "total_consumed"), 10);
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* A release says whether the partition holds more past the new cursor (16):
 * the broker hints the partition to a parked consumer only then. */
START_TEST(test_release_says_whether_more_is_there)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.more", "", "p", 0, 10);
    char pid[37];
    qt_pid(c, "ack.more", "", pid);
    ck_assert_int_eq(popn(c, "ack.more", "g", 4, "w1"), 4);
    struct qt_ack_item it = {.off = 3, .status = 1};
    PGresult *r = qt_ack(c, pid, "g", "w1", &it, 1);
    int s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 1 | 16); /* 4..9 left */
    PQclear(r);
    ck_assert_int_eq(popn(c, "ack.more", "g", 100, "w2"), 6);
    it.off = 9;
    r = qt_ack(c, pid, "g", "w2", &it, 1);
    s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 1); /* drained */
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* Positional acks that all complete take ack_v1's set-based path; the same
 * items with one more that cannot apply (a retry past the span: rejected, no
 * effect) take the per-item loops. Both must give every item the same
 * outcome and offset, and the cursor and flags the same, round after round
 * over two identical partitions. */
START_TEST(test_fast_and_slow_paths_agree)
{
    PGconn *c = qt_connect();
    const char *qs[2] = {"ack.fast", "ack.slow"};
    char pids[2][37];
    for (int k = 0; k < 2; k++) {
        qt_push1(c, qs[k], "", "p", 0, 30);
        qt_pid(c, qs[k], "", pids[k]);
        ck_assert_int_eq(popn(c, qs[k], "g", 10, "w"), 10);
    }
    uint32_t seed = 12345;
    int released = 0;
    for (int round = 0; round < 40 && released < 2; round++) {
        struct qt_ack_item items[9];
        int n = 1 + (int)(seed % 7);
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            items[i] = (struct qt_ack_item){.off = (int64_t)((seed >> 16) % 18) - 2 + 10 * released,
                                            .status = (int)((seed >> 8) % 2)};
        }
        items[n] = (struct qt_ack_item){.off = 1000, .status = 3};
        PGresult *rf = qt_ack(c, pids[0], "g", "w", items, n);
        PGresult *rs = qt_ack(c, pids[1], "g", "w", items, n + 1);
        for (int i = 0; i < n; i++) {
            ck_assert_int_eq(qt_gi(rf, i, "r_outcome"), qt_gi(rs, i, "r_outcome"));
            ck_assert_int_eq(qt_gnull(rf, i, "r_off"), qt_gnull(rs, i, "r_off"));
            if (!qt_gnull(rf, i, "r_off"))
                ck_assert_int_eq(qt_gi(rf, i, "r_off"), qt_gi(rs, i, "r_off"));
        }
        ck_assert_int_eq(qt_gi(rs, n, "r_outcome"), 6);
        int sf = qt_ack_summary(rf), ss = qt_ack_summary(rs);
        ck_assert_int_eq(qt_gi(rf, sf, "r_committed"), qt_gi(rs, ss, "r_committed"));
        ck_assert_int_eq(qt_gi(rf, sf, "r_flags"), qt_gi(rs, ss, "r_flags"));
        if (qt_gi(rf, sf, "r_flags") & 1) {
            released++;
            for (int k = 0; k < 2; k++)
                ck_assert_int_eq(popn(c, qs[k], "g", 10, "w"), 10);
        }
        PQclear(rf);
        PQclear(rs);
    }
    ck_assert_int_eq(released, 2); /* both batches went through */
    PQfinish(c);
}
END_TEST

/* An item at exactly the committed offset is below the ackable span (committed,
 * batch_end]: a stale failure there must neither release the live lease nor
 * spend the retry budget, and a repeated completion there is a noop, not
 * "applied". (Treating it as inside the span, o >= committed, breaks all three.) */
START_TEST(test_item_at_the_committed_offset)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.edge", "", "e", 0, 10);
    char pid[37];
    qt_pid(c, "ack.edge", "", pid);
    ck_assert_int_eq(popn(c, "ack.edge", "g", 10, "w1"), 10);
    struct qt_ack_item upto = {.off = 4, .status = 1};
    PQclear(qt_ack(c, pid, "g", "w1", &upto, 1)); /* committed 4, lease kept */
    /* a failure at the committed offset, positional and by hash */
    struct qt_ack_item fail[2] = {{.off = 4, .status = 2}, {.txn = "e4", .status = 2}};
    for (int k = 0; k < 2; k++) {
        PGresult *r = qt_ack(c, pid, "g", "w1", &fail[k], 1);
        ck_assert_msg(qt_gi(r, 0, "r_outcome") == 3, "item %d: outcome %lld", k,
                      (long long)qt_gi(r, 0, "r_outcome")); /* stale */
        int s = qt_ack_summary(r);
        ck_assert_int_eq(qt_gi(r, s, "r_flags"), 0); /* not released, not charged */
        ck_assert_int_eq(qt_gi(r, s, "r_committed"), 4);
        PQclear(r);
        r = consumer(c, pid, "g");
        ck_assert_str_eq(qt_gs(r, 0, "worker_id"), "w1");
        ck_assert_int_eq(qt_gi(r, 0, "batch_end"), 9);
        ck_assert_int_eq(qt_gi(r, 0, "batch_retry_count"), 0);
        PQclear(r);
    }
    /* the completion repeated there: noop, positional and by hash */
    struct qt_ack_item again[2] = {{.off = 4, .status = 1}, {.txn = "e4", .status = 1}};
    for (int k = 0; k < 2; k++) {
        PGresult *r = qt_ack(c, pid, "g", "w1", &again[k], 1);
        ck_assert_msg(qt_gi(r, 0, "r_outcome") == 2, "item %d: outcome %lld", k,
                      (long long)qt_gi(r, 0, "r_outcome"));
        ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_committed"), 4);
        PQclear(r);
    }
    /* one above it is the span's first offset: applied */
    struct qt_ack_item next = {.off = 5, .status = 1};
    PGresult *r = qt_ack(c, pid, "g", "w1", &next, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 1);
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_committed"), 5);
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_outcomes)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.out", "", "t", 0, 5);
    qt_push1(c, "ack.out", "", "t", 5, 5);
    char pid[37];
    qt_pid(c, "ack.out", "", pid);
    ck_assert_int_eq(popn(c, "ack.out", "g", 6, "w"), 6); /* batch (-1, 5] */

    struct qt_ack_item a1 = {.txn = "t2", .status = 1};
    PGresult *r = qt_ack(c, pid, "g", "w", &a1, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_off"), 2);
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_committed"), 2);
    PQclear(r);

    struct qt_ack_item many[] = {
        {.txn = "t1", .status = 1},     /* below the cursor: noop */
        {.txn = "t0", .status = 2},     /* failure below the cursor: stale */
        {.txn = "nobody", .status = 1}, /* unknown: unresolved */
        {.off = 8, .status = 1},        /* beyond batch_end: rejected */
        {.txn = "t8", .status = 1},     /* known but outside the span: unresolved */
        {.off = 1, .status = 1},        /* positional below the cursor: noop */
        {.off = 0, .status = 3},        /* positional failure below: stale */
    };
    r = qt_ack(c, pid, "g", "w", many, 7);
    int64_t want[] = {2, 3, 4, 6, 4, 2, 3};
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(qt_gi(r, i, "r_idx"), i);
        ck_assert_msg(qt_gi(r, i, "r_outcome") == want[i], "item %d: %lld", i,
                      (long long)qt_gi(r, i, "r_outcome"));
    }
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_committed"), 2);
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_flags"), 0);
    PQclear(r);

    /* wrong worker: everything lease_invalid, nothing moves */
    struct qt_ack_item a3 = {.txn = "t3", .status = 1};
    r = qt_ack(c, pid, "g", "other", &a3, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 5);
    ck_assert_int_eq(qt_gi(r, 1, "r_committed"), 2);
    PQclear(r);
    /* no cursor row */
    r = qt_ack(c, pid, "nogroup", "", &a3, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 6);
    ck_assert_int_eq(qt_gi(r, 1, "r_committed"), -1);
    PQclear(r);

    /* completed above a failure is deferred; the failure is the head */
    struct qt_ack_item mix[] = {
        {.txn = "t5", .status = 1}, {.txn = "t4", .status = 1}, {.off = 3, .status = 2}};
    r = qt_ack(c, pid, "g", "w", mix, 3);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 7);
    ck_assert_int_eq(qt_gi(r, 1, "r_outcome"), 7);
    ck_assert_int_eq(qt_gi(r, 2, "r_outcome"), 1);
    int s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 1 | 8 | 16); /* released, charged, more */
    ck_assert_int_eq(qt_gi(r, s, "r_committed"), 2);
    PQclear(r);
    r = consumer(c, pid, "g");
    ck_assert_int_eq(qt_gi(r, 0, "batch_retry_count"), 1);
    ck_assert(qt_gnull(r, 0, "worker_id"));
    PQclear(r);

    /* strict: noop passes, anything else raises */
    ck_assert_int_eq(popn(c, "ack.out", "g", 3, "w"), 3); /* (2, 5] */
    struct qt_ack_item st[] = {{.txn = "t1", .status = 1}, {.txn = "t3", .status = 1}};
    r = qt_ack_raw(c, pid, "g", "w", st, 2, true);
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    struct qt_ack_item bad = {.txn = "nobody", .status = 1};
    r = qt_ack_raw(c, pid, "g", "w", &bad, 1, true);
    ck_assert_int_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
    ck_assert_str_eq(PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY), "QACK unresolved item 0");
    PQclear(r);
    ck_assert_int_eq(qt_i(c,
                          "SELECT committed FROM queen.log_consumers WHERE partition_id = '%s' "
                          "AND consumer_group = 'g'",
                          pid),
                     3);
    PQfinish(c);
}
END_TEST

/* Only an explicit failure spends the budget; exhausted, the head frame is
 * handed to the DLQ path with the lease kept, and dlq_head_v1 files it and moves
 * the cursor past exactly that frame. */
START_TEST(test_budget_and_dlq_handoff)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ack.dlq', '{\"retry_limit\": 2}', "
                    "false)"));
    qt_push1(c, "ack.dlq", "", "u", 0, 5);
    char pid[37];
    qt_pid(c, "ack.dlq", "", pid);

    ck_assert_int_eq(popn(c, "ack.dlq", "g", 5, "w"), 5);
    struct qt_ack_item f1[] = {{.txn = "u0", .status = 1}, {.txn = "u1", .status = 2}};
    PGresult *r = qt_ack(c, pid, "g", "w", f1, 2);
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_flags"), 1 | 8 | 16); /* u1 left to redeliver */
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_committed"), 0);
    PQclear(r);

    /* a lease expiry in between spends nothing */
    ck_assert_int_eq(popn(c, "ack.dlq", "g", 5, "w"), 4);
    PQclear(qt_q(c,
                 "UPDATE queen.log_consumers SET lease_expires_at = now() - interval '1 s' "
                 "WHERE partition_id = '%s'",
                 pid));
    ck_assert_int_eq(popn(c, "ack.dlq", "g", 5, "w"), 4);
    r = consumer(c, pid, "g");
    ck_assert_int_eq(qt_gi(r, 0, "batch_retry_count"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "attempt_count"), 2); /* batch at 1: delivered twice */
    PQclear(r);

    struct qt_ack_item f2 = {.txn = "u1", .status = 2};
    r = qt_ack(c, pid, "g", "w", &f2, 1);
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_flags"), 1 | 8 | 16);
    PQclear(r);
    ck_assert_int_eq(popn(c, "ack.dlq", "g", 5, "w"), 4);
    r = qt_ack(c, pid, "g", "w", &f2, 1);
    int s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 2); /* hand-off, lease kept */
    ck_assert_int_eq(qt_gi(r, s, "r_off"), 1);
    ck_assert_int_eq(qt_gi(r, s, "r_base"), 0);
    ck_assert(!qt_gnull(r, s, "r_blob"));
    ck_assert_int_eq(qt_gi(r, s, "r_committed"), 0);
    PQclear(r);
    r = consumer(c, pid, "g");
    ck_assert_str_eq(qt_gs(r, 0, "worker_id"), "w");
    PQclear(r);

    r = qt_q(c,
             "SELECT * FROM qn.dlq_head_v1('%s', 'g', 'w', 1, "
             "'0190a000-0000-7000-8000-000000000001', 'u1', '\\xdeadbeef', 'boom')",
             pid);
    ck_assert_str_eq(qt_gs(r, 0, "r_ok"), "t");
    ck_assert(!qt_gnull(r, 0, "r_id"));
    PQclear(r);
    r = consumer(c, pid, "g");
    ck_assert_int_eq(qt_gi(r, 0, "committed"), 1);
    ck_assert(qt_gnull(r, 0, "worker_id"));
    ck_assert(qt_gnull(r, 0, "batch_end"));
    ck_assert_int_eq(qt_gi(r, 0, "batch_retry_count"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "attempt_count"), 0);
    PQclear(r);
    ck_assert(qt_b(c,
                   "SELECT \"offset\" = 1 AND retry_count = 2 AND error = 'boom' AND payload = "
                   "'\\xdeadbeef' AND transaction_id = 'u1' AND consumer_group = 'g' FROM "
                   "queen.log_dlq WHERE partition_id = '%s'",
                   pid));
    /* a second call fails the lease check */
    r = qt_q(c, "SELECT * FROM qn.dlq_head_v1('%s', 'g', 'w', 1, NULL, 'u1', NULL, NULL)", pid);
    ck_assert_str_eq(qt_gs(r, 0, "r_ok"), "f");
    PQclear(r);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_dlq WHERE partition_id = '%s'", pid),
                     1);
    /* the rest of the batch comes back, starting right after the poison frame */
    struct qt_pop p = {
        .queue = "ack.dlq", .group = "g", .budget = 5, .worker = "w", .max_partitions = 1};
    r = qt_pop(c, &p);
    ck_assert_int_eq(qt_gi(r, 0, "r_start_idx"), 2);
    ck_assert_int_eq(qt_taken(r), 3);
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_forced_dlq_and_retry)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.force", "", "v", 0, 3);
    char pid[37];
    qt_pid(c, "ack.force", "", pid);
    ck_assert_int_eq(popn(c, "ack.force", "g", 3, "w"), 3);
    struct qt_ack_item d = {.txn = "v0", .status = 4};
    PGresult *r = qt_ack(c, pid, "g", "w", &d, 1);
    int s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 2); /* regardless of the budget */
    ck_assert_int_eq(qt_gi(r, s, "r_off"), 0);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.dlq_head_v1('%s', 'g', '', 0, NULL, 'v0', NULL, NULL)", pid);
    ck_assert_str_eq(qt_gs(r, 0, "r_ok"), "t");
    PQclear(r);
    ck_assert_str_eq(qt_s(c, "SELECT error FROM queen.log_dlq WHERE partition_id = '%s'", pid),
                     "Retries exhausted");
    /* retry: release without spending */
    ck_assert_int_eq(popn(c, "ack.force", "g", 3, "w"), 2);
    struct qt_ack_item rt[] = {{.txn = "v1", .status = 1}, {.txn = "v2", .status = 3}};
    r = qt_ack(c, pid, "g", "w", rt, 2);
    s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 1 | 16); /* v2 to retry */
    ck_assert_int_eq(qt_gi(r, s, "r_committed"), 1);
    PQclear(r);
    r = consumer(c, pid, "g");
    ck_assert_int_eq(qt_gi(r, 0, "batch_retry_count"), 0);
    PQclear(r);
    ck_assert_int_eq(popn(c, "ack.force", "g", 3, "w"), 1);
    PQfinish(c);
}
END_TEST

START_TEST(test_dlq_off_drops_poison_frame)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ack.drop', '{\"retry_limit\": 0, "
                    "\"dead_letter_queue\": false, \"dlq_after_max_retries\": false}', false)"));
    qt_push1(c, "ack.drop", "", "x", 0, 3);
    char pid[37];
    qt_pid(c, "ack.drop", "", pid);
    ck_assert_int_eq(popn(c, "ack.drop", "g", 3, "w"), 3);
    struct qt_ack_item f = {.txn = "x0", .status = 2};
    PGresult *r = qt_ack(c, pid, "g", "w", &f, 1);
    int s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 1 | 4 | 16);
    ck_assert_int_eq(qt_gi(r, s, "r_committed"), 0); /* past exactly one frame */
    PQclear(r);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_dlq WHERE partition_id = '%s'", pid),
                     0);
    r = consumer(c, pid, "g");
    ck_assert_int_eq(qt_gi(r, 0, "total_consumed"), 1);
    PQclear(r);
    ck_assert_int_eq(popn(c, "ack.drop", "g", 3, "w"), 2);
    PQfinish(c);
}
END_TEST

/* A terminal failure behind unacked messages is not filed yet: the lease is
 * released and the batch redelivers from its head (nothing skipped unacked). */
START_TEST(test_poison_behind_unacked_head)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ack.head', '{\"retry_limit\": 0}', "
                    "false)"));
    qt_push1(c, "ack.head", "", "y", 0, 5);
    char pid[37];
    qt_pid(c, "ack.head", "", pid);
    ck_assert_int_eq(popn(c, "ack.head", "g", 5, "w"), 5);
    struct qt_ack_item f = {.txn = "y3", .status = 2};
    PGresult *r = qt_ack(c, pid, "g", "w", &f, 1);
    int s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 1 | 16);
    ck_assert_int_eq(qt_gi(r, s, "r_committed"), -1);
    PQclear(r);
    ck_assert_int_eq(popn(c, "ack.head", "g", 5, "w"), 5);
    struct qt_ack_item g[] = {{.off = 2, .status = 1}, {.txn = "y3", .status = 2}};
    r = qt_ack(c, pid, "g", "w", g, 2);
    s = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, s, "r_flags"), 2);
    ck_assert_int_eq(qt_gi(r, s, "r_off"), 3);
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_lease_less_ack)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.free", "", "z", 0, 6);
    char pid[37];
    qt_pid(c, "ack.free", "", pid);
    ck_assert_int_eq(popn(c, "ack.free", "g", 2, "w"), 2);
    PQclear(qt_q(c, "SELECT qn.release_lease_v1('w')"));
    /* no leased batch: the span is unbounded, failures have no effect */
    struct qt_ack_item it[] = {{.txn = "z4", .status = 1}, {.off = 5, .status = 2}};
    PGresult *r = qt_ack(c, pid, "g", "", it, 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 1);
    ck_assert_int_eq(qt_gi(r, 1, "r_outcome"), 6);
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_committed"), 4);
    PQclear(r);
    struct qt_ack_item past = {.off = 6, .status = 1};
    r = qt_ack(c, pid, "g", "", &past, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 6); /* past last_offset */
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_renew_release_check)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.lease", "a", "l", 0, 2);
    qt_push1(c, "ack.lease", "b", "l", 0, 2);
    struct qt_pop p = {
        .queue = "ack.lease", .group = "g", .budget = 10, .worker = "w-r", .max_partitions = 2};
    PGresult *r = qt_pop(c, &p);
    ck_assert_int_eq(qt_taken(r), 4);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.renew_lease_v1('w-r', 600)");
    ck_assert_int_eq(qt_gi(r, 0, "r_renewed"), 2);
    PQclear(r);
    ck_assert(qt_b(c, "SELECT min(lease_expires_at) >= now() + interval '599 s' FROM "
                      "queen.log_consumers WHERE worker_id = 'w-r'"));
    /* never shortens */
    r = qt_q(c, "SELECT * FROM qn.renew_lease_v1('w-r', 1)");
    ck_assert_int_eq(qt_gi(r, 0, "r_renewed"), 2);
    PQclear(r);
    ck_assert(qt_b(c, "SELECT min(lease_expires_at) >= now() + interval '599 s' FROM "
                      "queen.log_consumers WHERE worker_id = 'w-r'"));
    /* never resurrects */
    PQclear(qt_q(c, "UPDATE queen.log_consumers c SET lease_expires_at = now() - interval '1 s' "
                    "FROM queen.log_partitions p WHERE p.id = c.partition_id AND p.name = 'a' "
                    "AND c.worker_id = 'w-r'"));
    r = qt_q(c, "SELECT * FROM qn.renew_lease_v1('w-r', 60)");
    ck_assert_int_eq(qt_gi(r, 0, "r_renewed"), 1);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.renew_lease_v1('w-none', 60)");
    ck_assert_int_eq(qt_gi(r, 0, "r_renewed"), 0);
    ck_assert(qt_gnull(r, 0, "r_expires_at"));
    PQclear(r);
    PQclear(qt_q(c, "SELECT qn.check_leases_v1(ARRAY['w-r'])"));
    char msg[256];
    ck_assert_str_eq(
        qt_fail(c, msg, sizeof msg, "SELECT qn.check_leases_v1(ARRAY['w-r', 'w-none'])"), "P0001");
    ck_assert_str_eq(msg, "QTXN lease not held w-none");
    ck_assert_int_eq(qt_i(c, "SELECT qn.release_lease_v1('w-r')"), 1);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_consumers WHERE worker_id = 'w-r'"),
                     1); /* the expired one keeps its stale holder */
    ck_assert_int_eq(qt_i(c, "SELECT max(committed) FROM queen.log_consumers c JOIN "
                             "queen.log_partitions p ON p.id = c.partition_id JOIN queen.queues q "
                             "ON q.id = p.queue_id WHERE q.name = 'ack.lease'"),
                     -1);
    PQfinish(c);
}
END_TEST

/* Ack by hash of a large batch: every item resolved to its own offset. */
START_TEST(test_large_hash_ack)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ack.big", "", "b", 0, 400);
    qt_push1(c, "ack.big", "", "b", 400, 400);
    char pid[37];
    qt_pid(c, "ack.big", "", pid);
    ck_assert_int_eq(popn(c, "ack.big", "g", 700, "w-big"), 700);
    enum { N = 600 };
    struct qt_ack_item it[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "b%d", 650 - i); /* 650 down to 51 */
        it[i] = (struct qt_ack_item){.txn = names[i], .status = 1};
    }
    PGresult *r = qt_ack(c, pid, "g", "w-big", it, N);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(qt_gi(r, i, "r_outcome"), 1);
        ck_assert_int_eq(qt_gi(r, i, "r_off"), 650 - i);
    }
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_committed"), 650);
    ck_assert_int_eq(qt_gi(r, qt_ack_summary(r), "r_flags"), 0);
    PQclear(r);
    PQfinish(c);
}
END_TEST

static char *captured;
static void capture(void *arg, const PGresult *res)
{
    (void)arg;
    const char *m = PQresultErrorMessage(res);
    size_t have = captured ? strlen(captured) : 0;
    captured = realloc(captured, have + strlen(m) + 1);
    memcpy(captured + have, m, strlen(m) + 1);
}

/* Ack by hash resolves through a primary-key range bounded to the ackable span. */
START_TEST(test_hash_resolution_bounded)
{
    PGconn *c = qt_connect();
    for (int i = 0; i < 30; i++)
        qt_push1(c, "ack.plan", "", "h", i * 4, 4);
    char pid[37];
    qt_pid(c, "ack.plan", "", pid);
    ck_assert_int_eq(popn(c, "ack.plan", "g", 100, "w"), 100);
    struct qt_ack_item it = {.off = 95, .status = 1};
    PQclear(qt_ack(c, pid, "g", "w", &it, 1));
    PQsetNoticeReceiver(c, capture, NULL);
    PQclear(qt_q(c, "LOAD 'auto_explain'"));
    PQclear(qt_q(c, "SET auto_explain.log_min_duration = 0"));
    PQclear(qt_q(c, "SET auto_explain.log_nested_statements = on"));
    PQclear(qt_q(c, "SET client_min_messages = log"));
    struct qt_ack_item h = {.txn = "h97", .status = 1};
    PGresult *r = qt_ack(c, pid, "g", "w", &h, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_off"), 97);
    PQclear(r);
    ck_assert_ptr_nonnull(captured);
    char *plan = strstr(captured, "qn.log_unnest_hashes(t.hashes)");
    ck_assert_msg(plan != NULL, "no resolution plan: %s", captured);
    ck_assert_msg(strstr(plan, "Index Scan using log_txns_pkey on log_txns t") != NULL &&
                      strstr(plan, "(base_offset >= COALESCE(") != NULL &&
                      strstr(plan, "(base_offset <= ") != NULL,
                  "ack resolution not bounded through the primary key: %s", plan);
    free(captured);
    captured = NULL;
    PQfinish(c);
}
END_TEST

Suite *qt_suite_ack(void)
{
    Suite *s = suite_create("ack");
    TCase *tc = qt_tcase("ack", fixture, 120);
    tcase_add_test(tc, test_positional_partial_then_full);
    tcase_add_test(tc, test_release_says_whether_more_is_there);
    tcase_add_test(tc, test_fast_and_slow_paths_agree);
    tcase_add_test(tc, test_item_at_the_committed_offset);
    tcase_add_test(tc, test_outcomes);
    tcase_add_test(tc, test_budget_and_dlq_handoff);
    tcase_add_test(tc, test_forced_dlq_and_retry);
    tcase_add_test(tc, test_dlq_off_drops_poison_frame);
    tcase_add_test(tc, test_poison_behind_unacked_head);
    tcase_add_test(tc, test_lease_less_ack);
    tcase_add_test(tc, test_renew_release_check);
    tcase_add_test(tc, test_large_hash_ack);
    tcase_add_test(tc, test_hash_resolution_bounded);
    suite_add_tcase(s, tc);
    return s;
}
