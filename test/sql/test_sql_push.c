/*
 * test_sql_push.c - 003_log_push.sql: the allocator, the storage model's
 * invariants under concurrent pushers, every edge of the dedup seed that SQL
 * owns, p_verified narrowing, segment_at_v1.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_test.h"

static void fixture(void)
{
    qt_suite_db("push");
}

/* The whole partition satisfies invariants 1-3: ranges contiguous from log_start
 * to last_offset, created_at monotone in base order, one sidecar row per segment. */
static void check_invariants(PGconn *c, const char *pid)
{
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM (SELECT base_offset, end_offset, "
                          "lag(end_offset) OVER w AS prev_end, created_at, lag(created_at) "
                          "OVER w AS prev_at FROM queen.log_segments WHERE partition_id = '%s' "
                          "WINDOW w AS (ORDER BY base_offset)) x WHERE end_offset < base_offset "
                          "OR (prev_end IS NOT NULL AND base_offset <> prev_end + 1) OR "
                          "(prev_at IS NOT NULL AND created_at < prev_at)",
                          pid),
                     0);
    ck_assert(qt_b(c,
                   "SELECT coalesce((SELECT min(base_offset) FROM queen.log_segments WHERE "
                   "partition_id = p.id), p.last_offset + 1) = p.log_start AND "
                   "coalesce((SELECT max(end_offset) FROM queen.log_segments WHERE "
                   "partition_id = p.id), p.last_offset) = p.last_offset FROM "
                   "queen.log_partitions p WHERE p.id = '%s'",
                   pid));
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM queen.log_segments s FULL JOIN (SELECT * FROM "
                          "queen.log_txns WHERE partition_id = '%s') t ON t.partition_id = "
                          "s.partition_id AND t.base_offset = s.base_offset WHERE "
                          "(s.partition_id = '%s' OR t.partition_id IS NOT NULL) AND "
                          "(s.base_offset IS NULL OR t.base_offset IS NULL OR s.end_offset <> "
                          "t.end_offset OR s.created_at <> t.created_at OR "
                          "octet_length(t.hashes) <> 16 * (t.end_offset - t.base_offset + 1))",
                          pid, pid),
                     0);
}

START_TEST(test_provision_and_bundle)
{
    PGconn *c = qt_connect();
    struct qt_seg s[16];
    for (int i = 0; i < 16; i++) {
        char part[16];
        snprintf(part, sizeof part, "p%02d", 15 - i); /* not in id or name order */
        qt_seg_make(&s[i], "bundle.orders.eu", part, part, 0, 3 + i, 0);
    }
    PGresult *r = qt_push(c, s, 16, false);
    ck_assert_int_eq(PQntuples(r), 16);
    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(qt_gi(r, i, "r_ord"), i);
        ck_assert_int_eq(qt_gi(r, i, "r_status"), 0);
        ck_assert_int_eq(qt_gi(r, i, "r_base"), 0);
        ck_assert_int_eq(qt_gi(r, i, "r_window"), 3600);
        ck_assert(!qt_gnull(r, i, "r_created_at"));
        ck_assert(qt_gnull(r, i, "r_dup_idx"));
    }
    PQclear(r);
    ck_assert_str_eq(qt_s(c, "SELECT namespace || '/' || task FROM queen.queues WHERE name = "
                             "'bundle.orders.eu'"),
                     "bundle/orders");
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_partitions p JOIN queen.queues q ON "
                             "q.id = p.queue_id WHERE q.name = 'bundle.orders.eu'"),
                     16);
    /* second bundle continues each range */
    /* the same bundle again: every frame a duplicate, one row per frame, each
     * carrying its original offset, in (ord, idx) order */
    r = qt_push(c, s, 16, false);
    ck_assert_int_eq(PQntuples(r), 16 * 3 + 120);
    for (int i = 0, row = 0; i < 16; i++) {
        for (int k = 0; k < 3 + i; k++, row++) {
            ck_assert_int_eq(qt_gi(r, row, "r_ord"), i);
            ck_assert_int_eq(qt_gi(r, row, "r_status"), 1);
            ck_assert_int_eq(qt_gi(r, row, "r_dup_idx"), k);
            ck_assert_int_eq(qt_gi(r, row, "r_dup_off"), k);
        }
    }
    PQclear(r);
    for (int i = 0; i < 16; i++) {
        qt_seg_free(&s[i]);
        char part[16], prefix[32];
        snprintf(part, sizeof part, "p%02d", 15 - i);
        snprintf(prefix, sizeof prefix, "%s-b", part);
        qt_seg_make(&s[i], "bundle.orders.eu", part, prefix, 0, 2, 0);
    }
    r = qt_push(c, s, 16, false);
    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(qt_gi(r, i, "r_status"), 0);
        ck_assert_int_eq(qt_gi(r, i, "r_base"), 3 + i);
    }
    PQclear(r);
    for (int i = 0; i < 16; i++) {
        char pid[37];
        qt_pid(c, "bundle.orders.eu", s[i].part, pid);
        check_invariants(c, pid);
        qt_seg_free(&s[i]);
    }
    /* default partition name */
    qt_push1(c, "bundle.default", NULL, "d", 0, 1);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_partitions p JOIN queen.queues q ON "
                             "q.id = p.queue_id WHERE q.name = 'bundle.default' AND p.name = "
                             "'Default'"),
                     1);
    /* empty call */
    r = qt_q(c, "SELECT * FROM qn.push_v1('{}', '{}', '{}', '{}', '{}', '{}')");
    ck_assert_int_eq(PQntuples(r), 0);
    PQclear(r);
    PQfinish(c);
}
END_TEST

struct pusher {
    int id;
    int rounds;
    int failures;
    char err[256];
};

static void *pusher_main(void *p)
{
    struct pusher *a = p;
    PGconn *c = PQconnectdb(qt_conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        a->failures++;
        snprintf(a->err, sizeof a->err, "%s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    unsigned seed = (unsigned)a->id * 7919u;
    for (int i = 0; i < a->rounds; i++) {
        struct qt_seg s[2];
        char prefix[32];
        snprintf(prefix, sizeof prefix, "w%d-%d-", a->id, i);
        int n = 1 + (int)(rand_r(&seed) % 20);
        qt_seg_make(&s[0], "conc", "hot", prefix, 0, n, 0);
        /* every other round a bundle with a second partition, listed in both
         * orders across pushers: the ascending-id pre-lock prevents deadlocks */
        int nseg = 1;
        if (i % 2 == 1) {
            qt_seg_make(&s[1], "conc", "other", prefix, 100, 2, 0);
            if (a->id % 2 == 0) {
                struct qt_seg t = s[0];
                s[0] = s[1];
                s[1] = t;
            }
            nseg = 2;
        }
        PGresult *r = qt_push_raw(c, s, nseg, false);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            a->failures++;
            snprintf(a->err, sizeof a->err, "%s", PQresultErrorMessage(r));
        }
        PQclear(r);
        for (int k = 0; k < nseg; k++)
            qt_seg_free(&s[k]);
    }
    PQfinish(c);
    return NULL;
}

START_TEST(test_concurrent_pushers_disjoint_monotone)
{
    PGconn *c = qt_connect();
    qt_push1(c, "conc", "hot", "seed", 0, 1); /* provision first */
    qt_push1(c, "conc", "other", "seed", 0, 1);
    enum { NT = 6, ROUNDS = 40 };
    struct pusher a[NT];
    pthread_t t[NT];
    for (int i = 0; i < NT; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].id = i;
        a[i].rounds = ROUNDS;
        ck_assert_int_eq(pthread_create(&t[i], NULL, pusher_main, &a[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(a[i].failures == 0, "pusher %d: %s", i, a[i].err);
    }
    char hot[37], other[37];
    qt_pid(c, "conc", "hot", hot);
    qt_pid(c, "conc", "other", other);
    ck_assert_int_eq(
        qt_i(c, "SELECT count(*) FROM queen.log_segments WHERE partition_id = '%s'", hot),
        1 + NT * ROUNDS);
    ck_assert_int_eq(
        qt_i(c, "SELECT count(*) FROM queen.log_segments WHERE partition_id = '%s'", other),
        1 + NT * ROUNDS / 2);
    check_invariants(c, hot);
    check_invariants(c, other);
    /* no frame lost: last_offset + 1 = every frame pushed */
    ck_assert_int_eq(
        qt_i(c, "SELECT last_offset + 1 FROM queen.log_partitions WHERE id = '%s'", hot),
        qt_i(c,
             "SELECT sum(end_offset - base_offset + 1) FROM queen.log_segments "
             "WHERE partition_id = '%s'",
             hot));
    PQfinish(c);
}
END_TEST

static int64_t count_rows(PGconn *c, const char *table, const char *pid)
{
    return qt_i(c, "SELECT count(*) FROM queen.%s WHERE partition_id = '%s'", table, pid);
}

START_TEST(test_dup_later_call_writes_nothing)
{
    PGconn *c = qt_connect();
    qt_push1(c, "dup.a", "", "d", 0, 5); /* d0..d4 at 0..4 */
    char pid[37];
    qt_pid(c, "dup.a", "", pid);
    struct qt_seg s;
    /* frames d5 d6 d7, then overwrite frame 1 and 2 hashes with d2, d0 */
    qt_seg_make(&s, "dup.a", "", "d", 5, 3, 0);
    qt_hash("d2", s.hashes + 16);
    qt_hash("d0", s.hashes + 32);
    PGresult *r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_idx"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 2);
    ck_assert_int_eq(qt_gi(r, 1, "r_dup_idx"), 2);
    ck_assert_int_eq(qt_gi(r, 1, "r_dup_off"), 0);
    ck_assert(qt_gnull(r, 0, "r_base"));
    ck_assert(qt_gnull(r, 0, "r_created_at"));
    ck_assert_str_eq(qt_gs(r, 0, "r_pid"), pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_window"), 3600);
    PQclear(r);
    qt_seg_free(&s);
    ck_assert_int_eq(qt_i(c, "SELECT last_offset FROM queen.log_partitions WHERE id = '%s'", pid),
                     4);
    ck_assert_int_eq(count_rows(c, "log_segments", pid), 1);
    ck_assert_int_eq(count_rows(c, "log_txns", pid), 1);
    /* clean frames are accepted right after */
    ck_assert_int_eq(qt_push1(c, "dup.a", "", "d", 5, 2), 5);
    PQfinish(c);
}
END_TEST

/* Retention deleted the original segment: still a duplicate, with its offset,
 * which no longer resolves to a segment (the broker answers the zero id). */
START_TEST(test_dup_original_deleted_by_retention)
{
    PGconn *c = qt_connect();
    qt_push1(c, "dup.ret", "", "e", 0, 3);
    qt_push1(c, "dup.ret", "", "e", 3, 1);
    char pid[37];
    qt_pid(c, "dup.ret", "", pid);
    PQclear(qt_q(c,
                 "UPDATE queen.log_segments SET created_at = now() - interval '1 hour' "
                 "WHERE partition_id = '%s' AND base_offset = 0",
                 pid));
    PGresult *r = qt_q(c,
                       "SELECT * FROM qn.retention_step_v1('%s', now() - interval '10 "
                       "seconds', NULL, 100)",
                       pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 1);
    PQclear(r);
    ck_assert_int_eq(count_rows(c, "log_segments", pid), 1);
    struct qt_seg s;
    qt_seg_make(&s, "dup.ret", "", "e", 1, 1, 0);
    r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 1);
    PQclear(r);
    qt_seg_free(&s);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.segment_at_v1('%s', ARRAY[1]::int8[])", pid),
                     0);
    PQfinish(c);
}
END_TEST

START_TEST(test_dup_window_and_sidecar_purge)
{
    PGconn *c = qt_connect();
    /* outside the window, not yet purged: the created_at bound accepts it */
    qt_push1(c, "dup.win", "", "f", 0, 1);
    char pid[37];
    qt_pid(c, "dup.win", "", pid);
    PQclear(qt_q(c,
                 "UPDATE queen.log_txns SET created_at = now() - interval '2 hours' WHERE "
                 "partition_id = '%s'",
                 pid));
    ck_assert_int_eq(qt_push1(c, "dup.win", "", "f", 0, 1), 1);

    /* purged by the sidecar purge: accepted as new */
    qt_push1(c, "dup.purge", "", "g", 0, 2);
    qt_pid(c, "dup.purge", "", pid);
    PQclear(qt_q(c,
                 "UPDATE queen.log_txns SET created_at = now() - interval '2 hours' WHERE "
                 "partition_id = '%s'",
                 pid));
    PQclear(qt_q(c,
                 "UPDATE queen.log_segments SET created_at = now() - interval '2 hours' "
                 "WHERE partition_id = '%s'",
                 pid));
    PQclear(qt_q(c,
                 "UPDATE queen.log_partitions SET oldest_txn_at = now() - interval '2 "
                 "hours' WHERE id = '%s'",
                 pid));
    /* the work list offers it at the seed's cutoff GREATEST(3600, 0, 900) */
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM qn.maint_worklist_v1(now(), 2::int2, 1000) "
                          "WHERE r_pid = '%s' AND r_cutoff = now() - interval '3600 s'",
                          pid),
                     1);
    PGresult *r = qt_q(c,
                       "SELECT * FROM qn.txns_purge_step_v1('%s', now() - interval '3600 "
                       "seconds', 100)",
                       pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_new_txns_start"), 2);
    PQclear(r);
    /* the window bound alone would also accept it; make sure it is the purge by
     * giving the queue a huge window */
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('dup.purge', "
                    "'{\"dedup_window_seconds\": 999999}', false)"));
    ck_assert_int_eq(qt_push1(c, "dup.purge", "", "g", 1, 1), 2);
    PQfinish(c);
}
END_TEST

START_TEST(test_dup_per_partition_and_window_zero)
{
    PGconn *c = qt_connect();
    qt_push1(c, "dup.part", "p1", "h", 0, 1);
    ck_assert_int_eq(qt_push1(c, "dup.part", "p2", "h", 0, 1), 0); /* other partition */

    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('dup.zero', "
                    "'{\"dedup_window_seconds\": 0}', false)"));
    ck_assert_int_eq(qt_push1(c, "dup.zero", "", "i", 0, 1), 0);
    ck_assert_int_eq(qt_push1(c, "dup.zero", "", "i", 0, 1), 1); /* no probe */
    char pid[37];
    qt_pid(c, "dup.zero", "", pid);
    ck_assert_int_eq(count_rows(c, "log_txns", pid), 2); /* still written */
    PQfinish(c);
}
END_TEST

/* Our configure merges: omitting the window keeps it; replace resets it. */
START_TEST(test_configure_keeps_window_replace_resets)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('dup.cfg', "
                    "'{\"dedup_window_seconds\": 0}', false)"));
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('dup.cfg', '{\"lease_time\": 30}', "
                    "false)"));
    ck_assert_int_eq(qt_i(c, "SELECT dedup_window_seconds FROM queen.queues WHERE name = "
                             "'dup.cfg'"),
                     0);
    qt_push1(c, "dup.cfg", "", "j", 0, 1);
    ck_assert_int_eq(qt_push1(c, "dup.cfg", "", "j", 0, 1), 1);
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('dup.cfg', '{}', true)"));
    ck_assert_int_eq(qt_i(c, "SELECT dedup_window_seconds FROM queen.queues WHERE name = "
                             "'dup.cfg'"),
                     3600);
    qt_push1(c, "dup.cfg", "", "k", 0, 1);
    struct qt_seg s;
    qt_seg_make(&s, "dup.cfg", "", "k", 0, 1, 0);
    PGresult *r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 2);
    PQclear(r);
    qt_seg_free(&s);
    PQfinish(c);
}
END_TEST

/* A whole large segment pushed again (a broker retry after a timeout): every
 * frame is reported with its original offset, whatever the probe's plan. */
START_TEST(test_whole_segment_duplicate)
{
    PGconn *c = qt_connect();
    qt_push1(c, "dup.big", "", "other", 0, 300);
    struct qt_seg s;
    qt_seg_make(&s, "dup.big", "", "big", 0, 1000, 0);
    PGresult *r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 300);
    PQclear(r);
    qt_push1(c, "dup.big", "", "after", 0, 50);
    r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(PQntuples(r), 1000);
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(qt_gi(r, i, "r_dup_idx"), i);
        ck_assert_int_eq(qt_gi(r, i, "r_dup_off"), 300 + i);
    }
    PQclear(r);
    /* the same with a vouched watermark inside the segment: only frames above
     * the watermark are looked for */
    s.verified = 300 + 899;
    r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(PQntuples(r), 100);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_idx"), 900);
    PQclear(r);
    qt_seg_free(&s);
    PQfinish(c);
}
END_TEST

START_TEST(test_strict_duplicate_raises_and_writes_nothing)
{
    PGconn *c = qt_connect();
    qt_push1(c, "dup.strict", "a", "s", 0, 1);
    qt_push1(c, "dup.strict", "b", "s", 0, 1);
    struct qt_seg s[2];
    qt_seg_make(&s[0], "dup.strict", "a", "s", 1, 2, 0); /* new */
    qt_seg_make(&s[1], "dup.strict", "b", "s", 0, 1, 0); /* duplicate */
    PGresult *r = qt_push_raw(c, s, 2, true);
    ck_assert_int_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
    ck_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "23505");
    ck_assert_ptr_nonnull(strstr(PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY), "QDUP"));
    PQclear(r);
    char pa[37];
    qt_pid(c, "dup.strict", "a", pa);
    ck_assert_int_eq(qt_i(c, "SELECT last_offset FROM queen.log_partitions WHERE id = '%s'", pa),
                     0);
    ck_assert_int_eq(count_rows(c, "log_segments", pa), 1);
    ck_assert_int_eq(count_rows(c, "log_txns", pa), 1);
    /* the same bundle without strict: a's segment commits, b's is a duplicate */
    r = qt_push(c, s, 2, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 1, "r_status"), 1);
    PQclear(r);
    qt_seg_free(&s[0]);
    qt_seg_free(&s[1]);
    PQfinish(c);
}
END_TEST

/* Several segments for one partition in one call apply in input order. */
START_TEST(test_same_partition_twice_in_one_call)
{
    PGconn *c = qt_connect();
    struct qt_seg s[4];
    qt_seg_make(&s[0], "dup.same", "", "m", 0, 2, 0); /* m0 m1 */
    qt_seg_make(&s[1], "dup.same", "", "m", 1, 2, 0); /* m1 m2: m1 duplicates offset 1 */
    qt_seg_make(&s[2], "dup.same", "", "m", 0, 1, 0); /* m0: duplicates offset 0 */
    qt_seg_make(&s[3], "dup.same", "", "m", 3, 1, 0); /* m3: new */
    PGresult *r = qt_push(c, s, 4, false);
    ck_assert_int_eq(PQntuples(r), 4);
    ck_assert_int_eq(qt_gi(r, 0, "r_ord"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 0);
    ck_assert_int_eq(qt_gi(r, 1, "r_ord"), 1);
    ck_assert_int_eq(qt_gi(r, 1, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 1, "r_dup_idx"), 0);
    ck_assert_int_eq(qt_gi(r, 1, "r_dup_off"), 1);
    ck_assert_int_eq(qt_gi(r, 2, "r_dup_off"), 0);
    ck_assert_int_eq(qt_gi(r, 3, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 3, "r_base"), 2);
    PQclear(r);
    char pid[37];
    qt_pid(c, "dup.same", "", pid);
    check_invariants(c, pid);
    for (int i = 0; i < 4; i++)
        qt_seg_free(&s[i]);
    PQfinish(c);
}
END_TEST

static PGresult *push_one_verified(PGconn *c, const char *queue, const char *txn, int64_t verified)
{
    struct qt_seg s;
    qt_seg_make(&s, queue, "", "unused", 0, 1, 0);
    qt_hash(txn, s.hashes);
    s.verified = verified;
    PGresult *r = qt_push(c, &s, 1, false);
    qt_seg_free(&s);
    return r;
}

/* The probe honours p_verified: a hash at or below the vouched watermark is not
 * looked for (this is what lets the broker cache shrink the probe), above it is. */
START_TEST(test_verified_narrows_probe)
{
    PGconn *c = qt_connect();
    qt_push1(c, "ver", "", "v", 0, 1); /* v0 at 0 */
    qt_push1(c, "ver", "", "v", 1, 9); /* v1..v9 at 1..9 */
    PGresult *r = push_one_verified(c, "ver", "v0", 9);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0); /* not found: below the watermark */
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 10);
    PQclear(r);
    r = push_one_verified(c, "ver", "v5", 4); /* above the watermark: found */
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 5);
    PQclear(r);
    r = push_one_verified(c, "ver", "v0", -1); /* full window: MIN = the original */
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 0);
    PQclear(r);
    r = push_one_verified(c, "ver", "v9", 9); /* nothing above 9 to probe */
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* push_v1 of one frame of transaction id txn to queue (partition Default) with
 * the watermark verified, vouched under window (NULL: no windows array) for
 * partition pid (NULL: no pids array). */
static PGresult *push_guarded(PGconn *c, const char *queue, const char *txn, int64_t verified,
                              const char *window, const char *pid)
{
    uint8_t h[16];
    char hex[33];
    qt_hash(txn, h);
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    char win[64], pids[80];
    snprintf(win, sizeof win, window ? "ARRAY[%s]::int4[]" : "NULL::int4[]", window);
    snprintf(pids, sizeof pids, pid ? "ARRAY['%s']::uuid[]" : "NULL::uuid[]", pid);
    return qt_q(c,
                "SELECT * FROM qn.push_v1(ARRAY['%s'], ARRAY[''], ARRAY[1], "
                "ARRAY[decode('%s', 'hex')], ARRAY[%lld]::int8[], ARRAY['\\x01'::bytea], false, "
                "'00000000-0000-0000-0000-000000000001', %s, %s)",
                queue, hex, (long long)verified, win, pids);
}

/* The cache-window guard: a watermark the broker vouched under a smaller dedup
 * window than the queue's current one (a /configure widened it, and that
 * broker's cache may miss the older hashes) is ignored and the whole window is
 * probed. Without the guard the duplicate below would be stored again. */
START_TEST(test_watermark_of_a_smaller_window_is_ignored)
{
    PGconn *c = qt_connect();
    qt_push1(c, "guard.win", "", "gw", 0, 10); /* gw0..gw9 at 0..9, window 3600 */
    /* vouched under 60 s: ignored, the probe finds gw3 */
    PGresult *r = push_guarded(c, "guard.win", "gw3", 9, "60", NULL);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 3);
    PQclear(r);
    /* vouched under the queue's own window: honoured (nothing above 9 to probe),
     * which is what makes the case above a test of the guard */
    r = push_guarded(c, "guard.win", "gw4", 9, "3600", NULL);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 10);
    PQclear(r);
    /* a larger window than the queue's is fine too */
    r = push_guarded(c, "guard.win", "gw5", 10, "7200", NULL);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* The partition guard: a watermark vouched for another partition (the queue was
 * deleted and created again, its offsets starting over) is ignored. */
START_TEST(test_watermark_of_a_recreated_partition_is_ignored)
{
    PGconn *c = qt_connect();
    qt_push1(c, "guard.pid", "", "old", 0, 10); /* offsets 0..9 */
    char old_pid[37], new_pid[37];
    qt_pid(c, "guard.pid", "", old_pid);
    ck_assert(qt_b(c, "SELECT qn.delete_queue_v1('guard.pid', "
                      "'00000000-0000-0000-0000-000000000001')"));
    qt_push1(c, "guard.pid", "", "new", 0, 5); /* again from 0: new0..new4 at 0..4 */
    qt_pid(c, "guard.pid", "", new_pid);
    ck_assert_str_ne(old_pid, new_pid);
    /* the old partition's watermark 9 would hide new2 at offset 2 */
    PGresult *r = push_guarded(c, "guard.pid", "new2", 9, "3600", old_pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 2);
    PQclear(r);
    /* the same watermark vouched for this partition is honoured */
    r = push_guarded(c, "guard.pid", "new3", 9, "3600", new_pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* push_v1 of one frame of txn with p_resolve set (a push in doubt resolved). */
static PGresult *push_resolving(PGconn *c, const char *queue, const char *txn, int64_t verified,
                                bool resolve)
{
    uint8_t h[16];
    char hex[33];
    qt_hash(txn, h);
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    return qt_q(c,
                "SELECT * FROM qn.push_v1(ARRAY['%s'], ARRAY[''], ARRAY[1], "
                "ARRAY[decode('%s', 'hex')], ARRAY[%lld]::int8[], ARRAY['\\x01'::bytea], false, "
                "'00000000-0000-0000-0000-000000000001', NULL, NULL, %s)",
                queue, hex, (long long)verified, resolve ? "true" : "false");
}

/* Resolving a push in doubt: what already committed answers duplicate even where
 * the broker's watermark would skip it, and even on a queue with dedup off, so
 * re-submitting never stores a message twice; what did not commit is stored. */
START_TEST(test_resolve_finds_what_committed)
{
    PGconn *c = qt_connect();
    /* dedup on: a watermark above the original is ignored when resolving */
    qt_push1(c, "resolve.on", "", "ro", 0, 4); /* ro0..ro3 at 0..3 */
    PGresult *r = push_resolving(c, "resolve.on", "ro2", 3, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0); /* the watermark hides it... */
    PQclear(r);
    r = push_resolving(c, "resolve.on", "ro1", 3, true);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1); /* ...not when resolving */
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 1);
    PQclear(r);
    /* dedup off (window 0): a plain re-push stores it twice, resolving does not */
    qt_push1(c, "resolve.off", "", "rf", 0, 2);
    PQclear(qt_q(c, "UPDATE queen.queues SET dedup_window_seconds = 0 WHERE name = "
                    "'resolve.off'"));
    r = push_resolving(c, "resolve.off", "rf1", -1, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_window"), 0);
    PQclear(r);
    r = push_resolving(c, "resolve.off", "rf0", -1, true);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 0);
    PQclear(r);
    /* ...but not past the sidecar's 900 s floor */
    PQclear(qt_q(c, "UPDATE queen.log_txns t SET created_at = t.created_at - interval '901 s' "
                    "FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id "
                    "WHERE t.partition_id = p.id AND q.name = 'resolve.off'"));
    r = push_resolving(c, "resolve.off", "rf0", -1, true);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    PQclear(r);
    /* a push that never committed is stored */
    r = push_resolving(c, "resolve.on", "ro9", -1, true);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 5);
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* push_one_v1 of one frame of transaction id txn: pid (text or NULL), the
 * verified watermark, the cache window (NULL: none), queue name (NULL: none). */
static PGresult *push_one_sql(PGconn *c, const char *pid, const char *txn, int64_t verified,
                              const char *window, const char *queue, bool strict)
{
    uint8_t h[16];
    char hex[33];
    qt_hash(txn, h);
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    char pidv[48], qv[160], sql[512];
    snprintf(pidv, sizeof pidv, pid ? "'%s'::uuid" : "NULL::uuid", pid);
    snprintf(qv, sizeof qv, queue ? "'%s'" : "NULL", queue);
    snprintf(sql, sizeof sql,
             "SELECT * FROM qn.push_one_v1(%s, 1, decode('%s', 'hex'), %lld, '\\x01'::bytea, "
             "%s, %s, false, %s, 'p')",
             pidv, hex, (long long)verified, strict ? "true" : "false", window ? window : "NULL",
             qv);
    return PQexec(c, sql);
}

/* push_one_v1, the partition-keyed entry point: by id; an unknown id is found
 * by name when the names are given (and its watermark not trusted), refused
 * otherwise; duplicates as arrays; strict raises. */
START_TEST(test_push_one_by_id)
{
    PGconn *c = qt_connect();
    PGresult *r = push_one_sql(c, NULL, "one-0", -1, NULL, "one.q", false);
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_window"), 3600);
    char pid[37];
    snprintf(pid, sizeof pid, "%s", qt_gs(r, 0, "r_pid"));
    PQclear(r);
    qt_pid(c, "one.q", "p", pid);
    /* by id, vouched: queued without a probe */
    r = push_one_sql(c, pid, "one-1", 0, NULL, NULL, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 1);
    PQclear(r);
    /* a duplicate: arrays of frame index and original offset, nothing written */
    r = push_one_sql(c, pid, "one-1", -1, NULL, NULL, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_dup_idx"), "{0}");
    ck_assert_str_eq(qt_gs(r, 0, "r_dup_off"), "{1}");
    ck_assert(qt_gnull(r, 0, "r_base"));
    ck_assert(qt_gnull(r, 0, "r_created_at"));
    PQclear(r);
    /* a watermark vouched under a narrower window than the queue's: probed */
    r = push_one_sql(c, pid, "one-1", 5, "60", NULL, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    PQclear(r);
    r = push_one_sql(c, pid, "one-1", 5, "3600", NULL, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0); /* trusted: vouched above 1 */
    PQclear(r);
    /* strict */
    r = push_one_sql(c, pid, "one-1", -1, NULL, NULL, true);
    ck_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "23505");
    PQclear(r);
    /* an id that does not exist: refused without names ... */
    r = push_one_sql(c, "00000000-0000-0000-0000-0000000000aa", "one-2", -1, NULL, NULL, false);
    ck_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "P0002");
    PQclear(r);
    /* ... found by name with them, the watermark ignored (one-1 is found) */
    r = push_one_sql(c, "00000000-0000-0000-0000-0000000000aa", "one-1", 100, NULL, "one.q", false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_pid"), pid);
    PQclear(r);
    ck_assert_int_eq(qt_i(c, "SELECT last_offset FROM queen.log_partitions WHERE id = '%s'", pid),
                     2);
    check_invariants(c, pid);
    /* bad segment */
    char msg[256];
    qt_fail(c, msg, sizeof msg,
            "SELECT * FROM qn.push_one_v1('%s', 2, '\\x00112233445566778899aabbccddeeff', -1, "
            "'\\x01')",
            pid);
    ck_assert_str_eq(msg, "QPUSH bad segment");
    PQfinish(c);
}
END_TEST

/* push_one_v1 by the id of another tenant's partition (issue 10): never
 * written. Without names it is an unknown partition; with names it is found by
 * name in the caller's tenant (a partition of its own), the watermark ignored;
 * the other tenant's partition is unchanged either way. */
#define ONE                                                                                        \
    "SELECT * FROM qn.push_one_v1(%s, 1, decode(md5('%s'), 'hex'), %s, '\\x01'::bytea, false, "    \
    "NULL, false, %s, 'p', '%s'::uuid)"
START_TEST(test_push_one_other_tenant)
{
    PGconn *c = qt_connect();
    static const char *ta = "00000000-0000-0000-0000-0000000000a1";
    static const char *tb = "00000000-0000-0000-0000-0000000000b2";
    PGresult *r = qt_q(c, ONE, "NULL::uuid", "ten-a-0", "-1", "'ten.q'", ta);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    char pa[37];
    snprintf(pa, sizeof pa, "%s", qt_gs(r, 0, "r_pid"));
    PQclear(r);
    char pidv[64];
    snprintf(pidv, sizeof pidv, "'%s'::uuid", pa);
    /* tenant b by a's id, without names: unknown, nothing written */
    char msg[256];
    qt_fail(c, msg, sizeof msg, ONE, pidv, "ten-b-0", "0", "NULL", tb);
    ck_assert_msg(strncmp(msg, "QPUSH unknown partition", 23) == 0, "%s", msg);
    /* with names: b's own partition of the same name, never a's */
    r = qt_q(c, ONE, pidv, "ten-b-1", "1000", "'ten.q'", tb);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 0);
    ck_assert_str_ne(qt_gs(r, 0, "r_pid"), pa);
    char pb[37];
    snprintf(pb, sizeof pb, "%s", qt_gs(r, 0, "r_pid"));
    PQclear(r);
    ck_assert(
        qt_b(c,
             "SELECT q.tenant_id = '%s'::uuid FROM queen.log_partitions p JOIN queen.queues q "
             "ON q.id = p.queue_id WHERE p.id = '%s'",
             tb, pb));
    /* a's partition holds a's one message only */
    ck_assert_int_eq(qt_i(c, "SELECT last_offset FROM queen.log_partitions WHERE id = '%s'", pa),
                     0);
    ck_assert_int_eq(
        qt_i(c, "SELECT count(*) FROM queen.log_segments WHERE partition_id = '%s'", pa), 1);
    /* and a, by its own id, still writes there */
    r = qt_q(c, ONE, pidv, "ten-a-1", "0", "NULL", ta);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_pid"), pa);
    PQclear(r);
    /* push_v1 by names in tenant b resolves b's partition and writes it by id
     * in b's tenant (its push_one_v1 call carries p_tenant) */
    r = qt_q(c,
             "SELECT * FROM qn.push_v1(ARRAY['ten.q'], ARRAY['p'], ARRAY[1], "
             "ARRAY[decode(md5('ten-b-2'), 'hex')], ARRAY[-1]::int8[], ARRAY['\\x01'::bytea], "
             "false, '%s'::uuid)",
             tb);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_pid"), pb);
    PQclear(r);
    check_invariants(c, pa);
    check_invariants(c, pb);
    PQfinish(c);
}
END_TEST
#undef ONE

static char *captured;
static void capture(void *arg, const PGresult *res)
{
    (void)arg;
    const char *m = PQresultErrorMessage(res);
    size_t have = captured ? strlen(captured) : 0;
    captured = realloc(captured, have + strlen(m) + 1);
    memcpy(captured + have, m, strlen(m) + 1);
}

/* The probe and the ack resolution are bounded through the primary key (a
 * base_offset range on log_txns_pkey), so their cost follows the unverified /
 * ackable span, not the window (measured.md weak points 1 and 3). */
START_TEST(test_probe_uses_primary_key_range)
{
    PGconn *c = qt_connect();
    for (int i = 0; i < 20; i++)
        qt_push1(c, "plan", "", "pl", i * 5, 5);
    PQsetNoticeReceiver(c, capture, NULL);
    PQclear(qt_q(c, "LOAD 'auto_explain'"));
    PQclear(qt_q(c, "SET auto_explain.log_min_duration = 0"));
    PQclear(qt_q(c, "SET auto_explain.log_nested_statements = on"));
    PQclear(qt_q(c, "SET client_min_messages = log"));
    PGresult *r = push_one_verified(c, "plan", "pl42", 90);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    PQclear(r);
    ck_assert_ptr_nonnull(captured);
    char *probe = strstr(captured, "qn.log_unnest_hashes(t.hashes)");
    ck_assert_msg(probe != NULL, "no probe plan in: %s", captured);
    /* an index scan of the key range, or a bitmap scan of it (small tables) */
    ck_assert_msg((strstr(probe, "Index Scan using log_txns_pkey on log_txns t") != NULL ||
                   strstr(probe, "Bitmap Index Scan on log_txns_pkey") != NULL) &&
                      strstr(probe, "(base_offset >= COALESCE(") != NULL,
                  "probe not bounded through the primary key: %.3000s", probe);
    ck_assert_msg(strstr(probe, "Seq Scan on log_txns") == NULL, "seq scan: %.3000s", probe);
    free(captured);
    captured = NULL;
    PQfinish(c);
}
END_TEST

START_TEST(test_validation)
{
    PGconn *c = qt_connect();
    char msg[256];
    const char *st = qt_fail(c, msg, sizeof msg,
                             "SELECT * FROM qn.push_v1(ARRAY['x'], ARRAY['a','b'], ARRAY[1], "
                             "ARRAY['\\x00112233445566778899aabbccddeeff'::bytea], "
                             "ARRAY[-1]::int8[], ARRAY['\\x00'::bytea])");
    ck_assert_str_eq(st, "P0001");
    ck_assert_str_eq(msg, "QPUSH misaligned arrays");
    st = qt_fail(c, msg, sizeof msg,
                 "SELECT * FROM qn.push_v1(ARRAY['x'], ARRAY['a'], ARRAY[2], "
                 "ARRAY['\\x00112233445566778899aabbccddeeff'::bytea], ARRAY[-1]::int8[], "
                 "ARRAY['\\x00'::bytea])");
    ck_assert_str_eq(msg, "QPUSH bad segment 0");
    st = qt_fail(c, msg, sizeof msg,
                 "SELECT * FROM qn.push_v1(ARRAY['x'], ARRAY['a'], ARRAY[0], "
                 "ARRAY[''::bytea], ARRAY[-1]::int8[], ARRAY['\\x00'::bytea])");
    ck_assert_str_eq(msg, "QPUSH bad segment 0");
    st = qt_fail(c, msg, sizeof msg,
                 "SELECT * FROM qn.push_v1(ARRAY['x'], ARRAY['a'], ARRAY[1], "
                 "ARRAY['\\x00112233445566778899aabbccddeeff'::bytea], ARRAY[-1]::int8[], "
                 "ARRAY[NULL::bytea])");
    ck_assert_str_eq(msg, "QPUSH bad segment 0");
    st = qt_fail(c, msg, sizeof msg,
                 "SELECT * FROM qn.push_v1(ARRAY[''], ARRAY['a'], ARRAY[1], "
                 "ARRAY['\\x00112233445566778899aabbccddeeff'::bytea], ARRAY[-1]::int8[], "
                 "ARRAY['\\x00'::bytea])");
    ck_assert_str_eq(msg, "QPUSH bad queue name in segment 0");
    (void)st;
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.queues WHERE name = 'x'"), 0);
    PQfinish(c);
}
END_TEST

/* last_write_at moves only when more than a second old; oldest_* only when NULL. */
START_TEST(test_quantized_and_coalesced_columns)
{
    PGconn *c = qt_connect();
    qt_push1(c, "quant", "", "q", 0, 1);
    char pid[37];
    qt_pid(c, "quant", "", pid);
    PQclear(qt_q(c,
                 "UPDATE queen.log_partitions SET last_write_at = now() - interval '0.2 s', "
                 "oldest_live_at = '2001-01-01', oldest_txn_at = '2002-02-02' WHERE id = '%s'",
                 pid));
    char *lw = qt_s(c, "SELECT last_write_at FROM queen.log_partitions WHERE id = '%s'", pid);
    qt_push1(c, "quant", "", "q", 1, 1);
    ck_assert(qt_b(c,
                   "SELECT last_write_at = '%s' AND oldest_live_at = '2001-01-01' AND "
                   "oldest_txn_at = '2002-02-02' FROM queen.log_partitions WHERE id = '%s'",
                   lw, pid));
    PQclear(qt_q(c,
                 "UPDATE queen.log_partitions SET last_write_at = now() - interval '5 s', "
                 "oldest_live_at = NULL, oldest_txn_at = NULL WHERE id = '%s'",
                 pid));
    qt_push1(c, "quant", "", "q", 2, 1);
    ck_assert(qt_b(c,
                   "SELECT p.last_write_at = s.created_at AND p.oldest_live_at = s.created_at "
                   "AND p.oldest_txn_at = s.created_at FROM queen.log_partitions p JOIN "
                   "queen.log_segments s ON s.partition_id = p.id AND s.base_offset = 2 "
                   "WHERE p.id = '%s'",
                   pid));
    PQfinish(c);
}
END_TEST

/* Invariant 1: a rolled-back push rolls its allocator bump back (no hole). */
START_TEST(test_rolled_back_push_leaves_no_hole)
{
    PGconn *c = qt_connect();
    qt_push1(c, "rollback", "", "r", 0, 3);
    PQclear(qt_q(c, "BEGIN"));
    ck_assert_int_eq(qt_push1(c, "rollback", "", "r", 3, 5), 3);
    PQclear(qt_q(c, "ROLLBACK"));
    ck_assert_int_eq(qt_push1(c, "rollback", "", "r", 3, 2), 3);
    char pid[37];
    qt_pid(c, "rollback", "", pid);
    check_invariants(c, pid);
    PQfinish(c);
}
END_TEST

START_TEST(test_segment_at)
{
    PGconn *c = qt_connect();
    qt_push1(c, "segat", "", "a", 0, 3); /* 0..2 */
    qt_push1(c, "segat", "", "a", 3, 1); /* 3 */
    qt_push1(c, "segat", "", "a", 4, 4); /* 4..7 */
    char pid[37];
    qt_pid(c, "segat", "", pid);
    PGresult *r = qt_q(c,
                       "SELECT * FROM qn.segment_at_v1('%s', ARRAY[5, 0, 2, 3, 100, "
                       "-1]::int8[])",
                       pid);
    ck_assert_int_eq(PQntuples(r), 3);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_end"), 2);
    ck_assert_int_eq(qt_gi(r, 1, "r_base"), 3);
    ck_assert_int_eq(qt_gi(r, 2, "r_base"), 4);
    ck_assert_int_eq(qt_gi(r, 2, "r_end"), 7);
    ck_assert(!qt_gnull(r, 2, "r_blob"));
    PQclear(r);
    PQfinish(c);
}
END_TEST

Suite *qt_suite_push(void)
{
    Suite *s = suite_create("push");
    TCase *tc = qt_tcase("push", fixture, 180);
    tcase_add_test(tc, test_provision_and_bundle);
    tcase_add_test(tc, test_concurrent_pushers_disjoint_monotone);
    tcase_add_test(tc, test_dup_later_call_writes_nothing);
    tcase_add_test(tc, test_dup_original_deleted_by_retention);
    tcase_add_test(tc, test_dup_window_and_sidecar_purge);
    tcase_add_test(tc, test_dup_per_partition_and_window_zero);
    tcase_add_test(tc, test_configure_keeps_window_replace_resets);
    tcase_add_test(tc, test_whole_segment_duplicate);
    tcase_add_test(tc, test_strict_duplicate_raises_and_writes_nothing);
    tcase_add_test(tc, test_same_partition_twice_in_one_call);
    tcase_add_test(tc, test_verified_narrows_probe);
    tcase_add_test(tc, test_watermark_of_a_smaller_window_is_ignored);
    tcase_add_test(tc, test_watermark_of_a_recreated_partition_is_ignored);
    tcase_add_test(tc, test_resolve_finds_what_committed);
    tcase_add_test(tc, test_probe_uses_primary_key_range);
    tcase_add_test(tc, test_validation);
    tcase_add_test(tc, test_quantized_and_coalesced_columns);
    tcase_add_test(tc, test_rolled_back_push_leaves_no_hole);
    tcase_add_test(tc, test_segment_at);
    tcase_add_test(tc, test_push_one_by_id);
    tcase_add_test(tc, test_push_one_other_tenant);
    suite_add_tcase(s, tc);
    return s;
}
