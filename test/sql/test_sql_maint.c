/*
 * test_sql_maint.c - 006_log_maintenance.sql (and delete_queue_v1): both
 * retention rules on whole segments only, the stalled-group pin, max-wait
 * eviction of leased data, the sidecar purge cutoff, the work list, partition
 * cleanup, dead letters outliving retention, no orphans after a queue delete.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_test.h"

static void fixture(void)
{
    qt_suite_db("maint");
}

/* Segments of pid stamped hours_ago[i] hours in the past, in base order. */
static void stamp(PGconn *c, const char *pid, const char *hours_list)
{
    PQclear(qt_q(c,
                 "WITH h AS (SELECT ord, x FROM unnest('{%s}'::float8[]) WITH ORDINALITY AS "
                 "u(x, ord)), s AS (SELECT base_offset, row_number() OVER (ORDER BY "
                 "base_offset) AS ord FROM queen.log_segments WHERE partition_id = '%s') "
                 "UPDATE queen.log_segments g SET created_at = now() - h.x * interval '1 "
                 "hour' FROM s JOIN h ON h.ord = s.ord WHERE g.partition_id = '%s' AND "
                 "g.base_offset = s.base_offset",
                 hours_list, pid, pid));
    PQclear(qt_q(c,
                 "UPDATE queen.log_txns t SET created_at = s.created_at FROM "
                 "queen.log_segments s WHERE s.partition_id = t.partition_id AND "
                 "s.base_offset = t.base_offset AND t.partition_id = '%s'",
                 pid));
    PQclear(qt_q(c,
                 "UPDATE queen.log_partitions SET oldest_live_at = (SELECT min(created_at) "
                 "FROM queen.log_segments WHERE partition_id = '%s'), oldest_txn_at = (SELECT "
                 "min(created_at) FROM queen.log_txns WHERE partition_id = '%s') WHERE id = "
                 "'%s'",
                 pid, pid, pid));
}

static void set_cursor(PGconn *c, const char *pid, const char *group, int64_t committed)
{
    PQclear(qt_q(c,
                 "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) "
                 "VALUES ('%s', '%s', %lld) ON CONFLICT (partition_id, consumer_group) DO "
                 "UPDATE SET committed = EXCLUDED.committed",
                 pid, group, (long long)committed));
}

static PGresult *step(PGconn *c, const char *pid, const char *all, const char *completed, int max)
{
    return qt_q(c, "SELECT * FROM qn.retention_step_v1('%s', %s, %s, %d)", pid, all, completed,
                max);
}

static void expect_step(PGconn *c, const char *pid, const char *all, const char *completed, int max,
                        int deleted, int64_t log_start, bool done)
{
    PGresult *r = step(c, pid, all, completed, max);
    ck_assert_msg(qt_gi(r, 0, "r_deleted") == deleted, "deleted %lld, want %d",
                  (long long)qt_gi(r, 0, "r_deleted"), deleted);
    ck_assert_int_eq(qt_gi(r, 0, "r_new_log_start"), log_start);
    ck_assert_int_eq(strcmp(qt_gs(r, 0, "r_done"), "t") == 0, done);
    PQclear(r);
}

static void check_watermarks(PGconn *c, const char *pid)
{
    /* invariant 3 and the work-list fact */
    ck_assert(qt_b(c,
                   "SELECT p.log_start = coalesce((SELECT min(base_offset) FROM "
                   "queen.log_segments WHERE partition_id = p.id), p.last_offset + 1) AND "
                   "p.oldest_live_at IS NOT DISTINCT FROM (SELECT created_at FROM "
                   "queen.log_segments WHERE partition_id = p.id ORDER BY base_offset LIMIT 1) "
                   "FROM queen.log_partitions p WHERE p.id = '%s'",
                   pid));
}

START_TEST(test_retention_rule1_whole_segments)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ret.r1', '{\"retention_enabled\": "
                    "true, \"retention_seconds\": 600}', false)"));
    for (int i = 0; i < 4; i++)
        qt_push1(c, "ret.r1", "", "r", i * 3, 3);
    char pid[37];
    qt_pid(c, "ret.r1", "", pid);
    stamp(c, pid, "3,2,1,0");
    ck_assert(qt_b(c,
                   "SELECT r_all_cutoff = now() - interval '600 s' AND r_completed_cutoff IS "
                   "NULL FROM qn.maint_worklist_v1(now(), 1::int2, 5000) WHERE r_pid = '%s'",
                   pid));
    /* batches of at most max_rows */
    expect_step(c, pid, "now() - interval '600 s'", "NULL", 2, 2, 6, false);
    check_watermarks(c, pid);
    expect_step(c, pid, "now() - interval '600 s'", "NULL", 2, 1, 9, true);
    check_watermarks(c, pid);
    expect_step(c, pid, "now() - interval '600 s'", "NULL", 2, 0, 9, true);
    ck_assert(qt_b(c,
                   "SELECT sum(messages_deleted) = 9 AND bool_and(retention_type = "
                   "'retention') FROM queen.retention_history WHERE partition_id = '%s'",
                   pid));
    /* a cutoff inside a segment's life keeps the whole segment */
    expect_step(c, pid, "now() - interval '1 hour'", "NULL", 10, 0, 9, true);
    /* everything: log_start = last_offset + 1, oldest_live_at NULL */
    expect_step(c, pid, "now() + interval '1 s'", "NULL", 10, 1, 12, true);
    check_watermarks(c, pid);
    ck_assert(qt_null(c, "SELECT oldest_live_at FROM queen.log_partitions WHERE id = '%s'", pid));
    /* the sidecar is not retention's business */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_txns WHERE partition_id = '%s'", pid),
                     4);
    /* a push after it: offsets continue, the work list fact returns */
    ck_assert_int_eq(qt_push1(c, "ret.r1", "", "r", 100, 1), 12);
    check_watermarks(c, pid);
    PQfinish(c);
}
END_TEST

START_TEST(test_retention_completed_rule)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ret.r2', '{\"retention_enabled\": "
                    "true, \"completed_retention_seconds\": 600}', false)"));
    for (int i = 0; i < 3; i++)
        qt_push1(c, "ret.r2", "", "c", i * 5, 5); /* [0..4] [5..9] [10..14] */
    char pid[37];
    qt_pid(c, "ret.r2", "", pid);
    stamp(c, pid, "3,2,1");
    const char *cut = "now() - interval '600 s'";
    /* no consumer rows: nothing consumed, nothing deleted */
    expect_step(c, pid, "NULL", cut, 100, 0, 0, true);
    /* one group mid-segment 1, one stalled at 2: the stalled one pins */
    set_cursor(c, pid, "g1", 7);
    set_cursor(c, pid, "g2", 2);
    expect_step(c, pid, "NULL", cut, 100, 0, 0, true);
    /* the slowest cursor at 7: only the fully consumed first segment goes */
    set_cursor(c, pid, "g2", 14);
    expect_step(c, pid, "NULL", cut, 100, 1, 5, true);
    check_watermarks(c, pid);
    ck_assert_str_eq(qt_s(c,
                          "SELECT retention_type FROM queen.retention_history WHERE "
                          "partition_id = '%s'",
                          pid),
                     "completed_retention");
    set_cursor(c, pid, "g1", 14);
    expect_step(c, pid, "NULL", cut, 100, 2, 15, true);
    check_watermarks(c, pid);
    PQfinish(c);
}
END_TEST

START_TEST(test_retention_either_rule)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ret.both', '{\"retention_enabled\": "
                    "true, \"retention_seconds\": 9000, \"completed_retention_seconds\": 600}', "
                    "false)"));
    for (int i = 0; i < 3; i++)
        qt_push1(c, "ret.both", "", "b", i * 2, 2); /* [0..1] [2..3] [4..5] */
    char pid[37];
    qt_pid(c, "ret.both", "", pid);
    stamp(c, pid, "3,2,1");
    set_cursor(c, pid, "g", 3);
    PGresult *r = qt_q(c,
                       "SELECT * FROM qn.maint_worklist_v1(now(), 1::int2, 5000) WHERE "
                       "r_pid = '%s'",
                       pid);
    ck_assert_int_eq(PQntuples(r), 1);
    PQclear(r);
    /* rule 1 takes [0..1] (older than 2.5 h); rule 2 also [2..3] (consumed) */
    expect_step(c, pid, "now() - interval '9000 s'", "now() - interval '600 s'", 100, 2, 4, true);
    check_watermarks(c, pid);
    /* retention off: not on the work list */
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ret.both', '{\"retention_enabled\": "
                    "false}', false)"));
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM qn.maint_worklist_v1(now(), 1::int2, 5000) "
                          "WHERE r_pid = '%s'",
                          pid),
                     0);
    PQfinish(c);
}
END_TEST

START_TEST(test_max_wait_deletes_leased_data)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('ret.mw', "
                    "'{\"max_wait_time_seconds\": 60}', false)"));
    qt_push1(c, "ret.mw", "", "m", 0, 3);
    char pid[37];
    qt_pid(c, "ret.mw", "", pid);
    struct qt_pop p = {
        .queue = "ret.mw", .group = "g", .budget = 10, .worker = "w-mw", .max_partitions = 1};
    PGresult *r = qt_pop(c, &p);
    ck_assert_int_eq(qt_taken(r), 3);
    PQclear(r);
    stamp(c, pid, "1");
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM qn.maint_worklist_v1(now(), 1::int2, 5000) "
                          "WHERE r_pid = '%s'",
                          pid),
                     0); /* retention is off */
    ck_assert(qt_b(c,
                   "SELECT r_cutoff = now() - interval '60 s' FROM "
                   "qn.maint_worklist_v1(now(), 3::int2, 5000) WHERE r_pid = '%s'",
                   pid));
    r = qt_q(c, "SELECT * FROM qn.evict_max_wait_step_v1('%s', now() - interval '60 s', 100)", pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_frames"), 3);
    PQclear(r);
    check_watermarks(c, pid);
    ck_assert_str_eq(qt_s(c,
                          "SELECT retention_type FROM queen.retention_history WHERE "
                          "partition_id = '%s'",
                          pid),
                     "max_wait_time_eviction");
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_dlq WHERE partition_id = '%s'", pid),
                     0);
    /* the lease holder can still ack its (now gone) batch; the next pop resumes */
    struct qt_ack_item it = {.off = 2, .status = 1};
    r = qt_ack(c, pid, "g", "w-mw", &it, 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_outcome"), 1);
    PQclear(r);
    qt_push1(c, "ret.mw", "", "m", 3, 2);
    r = qt_pop(c, &p);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 3);
    ck_assert_int_eq(qt_taken(r), 2);
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* The sidecar outlives GREATEST(dedup window, completed retention, 900 s). */
START_TEST(test_sidecar_purge_cutoff)
{
    PGconn *c = qt_connect();
    const char *cfg[][2] = {{"side.a", "{\"dedup_window_seconds\": 60}"},
                            {"side.b", "{\"dedup_window_seconds\": 60, "
                                       "\"completed_retention_seconds\": 2000}"},
                            {"side.c", "{\"dedup_window_seconds\": 5000}"},
                            {"side.d", "{\"dedup_window_seconds\": 0}"}};
    int want[] = {900, 2000, 5000, 900};
    for (int i = 0; i < 4; i++) {
        PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('%s', '%s', false)", cfg[i][0],
                     cfg[i][1]));
        qt_push1(c, cfg[i][0], "", "s", 0, 1);
        char pid[37];
        qt_pid(c, cfg[i][0], "", pid);
        PQclear(qt_q(c,
                     "UPDATE queen.log_partitions SET oldest_txn_at = '1990-01-01' WHERE id = "
                     "'%s'",
                     pid));
        ck_assert_msg(qt_b(c,
                           "SELECT r_cutoff = timestamptz '2030-01-01' - interval '%d s' FROM "
                           "qn.maint_worklist_v1('2030-01-01', 2::int2, 100000) WHERE r_pid "
                           "= '%s'",
                           want[i], pid),
                      "queue %s", cfg[i][0]);
    }
    /* the step deletes exactly the rows older than its cutoff, in order */
    for (int i = 0; i < 3; i++)
        qt_push1(c, "side.e", "", "e", i + 10, 1);
    char pid[37];
    qt_pid(c, "side.e", "", pid);
    stamp(c, pid, "5,4,3");
    PGresult *r = qt_q(c,
                       "SELECT * FROM qn.txns_purge_step_v1('%s', now() - interval '3.5 "
                       "hours', 1)",
                       pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_new_txns_start"), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_done"), "f");
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.txns_purge_step_v1('%s', now() - interval '3.5 hours', 1)", pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_done"), "t");
    PQclear(r);
    ck_assert(qt_b(c,
                   "SELECT txns_start = 2 AND oldest_txn_at = (SELECT created_at FROM "
                   "queen.log_txns WHERE partition_id = p.id) FROM queen.log_partitions p "
                   "WHERE id = '%s'",
                   pid));
    /* segments untouched: retention is off */
    ck_assert_int_eq(
        qt_i(c, "SELECT count(*) FROM queen.log_segments WHERE partition_id = '%s'", pid), 3);
    PQfinish(c);
}
END_TEST

/* The sidecar work list walks the queues a window of 1,000 per call (it probed
 * every queue per call): over each period of the walk (the windows of a pass)
 * a due partition is listed exactly once. */
START_TEST(test_sidecar_worklist_walks_windows)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "INSERT INTO queen.queues (name) SELECT 'sweep.' || g FROM "
                    "generate_series(1, 2100) g"));
    qt_push1(c, "sweep.due", "", "s", 0, 1);
    char pid[37];
    qt_pid(c, "sweep.due", "", pid);
    PQclear(qt_q(c, "UPDATE queen.log_partitions SET oldest_txn_at = '1990-01-01' WHERE id = '%s'",
                 pid));
    int64_t nq = qt_i(c, "SELECT count(*) FROM queen.queues");
    ck_assert_int_ge(nq, 2101);
    int64_t period = nq / 1000 + 1; /* the windows of a pass, an empty one included */
    int listed = 0;
    for (int64_t i = 0; i < period; i++)
        listed += (int)qt_i(c,
                            "SELECT count(*) FROM qn.maint_worklist_v1('2030-01-01', 2::int2, "
                            "100000) WHERE r_pid = '%s'",
                            pid);
    ck_assert_int_eq(listed, 1);
    /* a second period lists it once more */
    listed = 0;
    for (int64_t i = 0; i < period; i++)
        listed += (int)qt_i(c,
                            "SELECT count(*) FROM qn.maint_worklist_v1('2030-01-01', 2::int2, "
                            "100000) WHERE r_pid = '%s'",
                            pid);
    ck_assert_int_eq(listed, 1);
    PQclear(qt_q(c, "DELETE FROM queen.queues WHERE name LIKE 'sweep.%%' AND name <> 'sweep.due'"));
    PQclear(qt_q(c, "DELETE FROM qn.sidecar_sweep")); /* later cases start a pass */
    PQfinish(c);
}
END_TEST

START_TEST(test_worklist_order_and_limit)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('wl.q', '{\"retention_enabled\": "
                    "true, \"retention_seconds\": 60}', false)"));
    char pids[3][37];
    for (int i = 0; i < 3; i++) {
        char part[8];
        snprintf(part, sizeof part, "p%d", i);
        qt_push1(c, "wl.q", part, "w", 0, 1);
        qt_pid(c, "wl.q", part, pids[i]);
        PQclear(qt_q(c,
                     "UPDATE queen.log_partitions SET oldest_live_at = timestamptz "
                     "'1980-01-01' + interval '%d day' WHERE id = '%s'",
                     3 - i, pids[i]));
    }
    PGresult *r = qt_q(c, "SELECT * FROM qn.maint_worklist_v1(now(), 1::int2, 2)");
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_str_eq(qt_gs(r, 0, "r_pid"), pids[2]);
    ck_assert_str_eq(qt_gs(r, 1, "r_pid"), pids[1]);
    PQclear(r);
    char msg[128];
    ck_assert_str_eq(
        qt_fail(c, msg, sizeof msg, "SELECT * FROM qn.maint_worklist_v1(now(), 9::int2, 2)"),
        "22023");
    PQfinish(c);
}
END_TEST

static bool dead(PGconn *c, const char *pid)
{
    return qt_b(c, "SELECT qn.partition_dead_v1('%s', now() - interval '30 days')", pid);
}

static void age_partition(PGconn *c, const char *pid)
{
    PQclear(qt_q(c,
                 "UPDATE queen.log_partitions SET created_at = now() - interval '40 days', "
                 "last_write_at = now() - interval '40 days' WHERE id = '%s'",
                 pid));
    PQclear(qt_q(c,
                 "UPDATE queen.log_consumers SET created_at = now() - interval '40 days', "
                 "lease_acquired_at = CASE WHEN lease_acquired_at IS NOT NULL THEN now() - "
                 "interval '40 days' END WHERE partition_id = '%s'",
                 pid));
}

/* Cleanup deletes a dead partition and its sidecar rows, nothing live; a dead
 * letter survives retention and pins its partition. */
START_TEST(test_cleanup_and_dead_letter_pin)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('cl.q', '{\"retention_enabled\": "
                    "true, \"retention_seconds\": 60}', false)"));
    char a[37], b[37], d[37], l[37];
    qt_push1(c, "cl.q", "dead", "x", 0, 2);
    qt_push1(c, "cl.q", "live", "x", 0, 2);
    qt_push1(c, "cl.q", "dlq", "x", 0, 2);
    qt_push1(c, "cl.q", "leased", "x", 0, 2);
    qt_pid(c, "cl.q", "dead", a);
    qt_pid(c, "cl.q", "live", b);
    qt_pid(c, "cl.q", "dlq", d);
    qt_pid(c, "cl.q", "leased", l);
    /* a dead letter in partition "dlq" */
    struct qt_pop p = {.queue = "cl.q",
                       .part = "dlq",
                       .group = "g",
                       .budget = 2,
                       .worker = "w-cl",
                       .max_partitions = 1};
    PQclear(qt_pop(c, &p));
    struct qt_ack_item f = {.txn = "x0", .status = 4};
    PQclear(qt_ack(c, d, "g", "w-cl", &f, 1));
    PGresult *r = qt_q(c,
                       "SELECT * FROM qn.dlq_head_v1('%s', 'g', 'w-cl', 0, NULL, 'x0', "
                       "'\\x01', 'bad')",
                       d);
    ck_assert_str_eq(qt_gs(r, 0, "r_ok"), "t");
    PQclear(r);
    /* a live lease in partition "leased" */
    p.part = "leased", p.worker = "w-cl2";
    PQclear(qt_pop(c, &p));

    /* retention empties every partition but "live" */
    const char *emptied[] = {a, d, l};
    for (int i = 0; i < 3; i++) {
        stamp(c, emptied[i], "2");
        expect_step(c, emptied[i], "now() - interval '60 s'", "NULL", 100, 1, 2, true);
    }
    /* the dead letter outlived the retention of its segment */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_dlq WHERE partition_id = '%s'", d), 1);
    ck_assert_int_eq(
        qt_i(c, "SELECT count(*) FROM queen.log_segments WHERE partition_id = '%s'", d), 0);
    const char *all[] = {a, b, d, l};
    for (int i = 0; i < 4; i++)
        age_partition(c, all[i]);
    ck_assert(dead(c, a));
    ck_assert(!dead(c, b)); /* has segments */
    ck_assert(!dead(c, d)); /* has a dead letter */
    ck_assert(!dead(c, l)); /* has a live lease */
    ck_assert(qt_null(c, "SELECT qn.partition_dead_v1(gen_random_uuid(), now())"));
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_txns WHERE partition_id = '%s'", a),
                     1);

    r = qt_q(c, "SELECT * FROM qn.partition_cleanup_step_v1(now() - interval '30 days', "
                "1000)");
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_done"), "t");
    PQclear(r);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_partitions WHERE id = '%s'", a), 0);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_txns WHERE partition_id = '%s'", a),
                     0);
    ck_assert_int_eq(
        qt_i(c, "SELECT count(*) FROM queen.log_consumers WHERE partition_id = '%s'", a), 0);
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM queen.retention_history WHERE partition_id = "
                          "'%s' AND retention_type = '__partition_deleted__'",
                          a),
                     1);
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM queen.log_partitions WHERE id IN ('%s', '%s', "
                          "'%s')",
                          b, d, l),
                     3);
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM queen.log_txns WHERE partition_id IN ('%s', "
                          "'%s', '%s')",
                          b, d, l),
                     3);
    /* the dead letter gone, its partition goes too */
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_dlq_v1(NULL, '%s', 'x0')", d), 1);
    ck_assert(dead(c, d));
    r = qt_q(c, "SELECT * FROM qn.partition_cleanup_step_v1(now() - interval '30 days', "
                "1000)");
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 1);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.partition_cleanup_step_v1(NULL, 1000)");
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 0);
    ck_assert_str_eq(qt_gs(r, 0, "r_done"), "t");
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* A cleanup step reads one bounded window of partitions (8,192 by id), not the
 * whole table: a dead partition last in id order behind 20,000 live ones is
 * not deleted by the first step (the old step read every partition and
 * deleted it at once), and is by the third, the window's place kept between
 * steps. */
START_TEST(test_cleanup_step_bounded_window)
{
    PGconn *c = qt_connect();
    qt_push1(c, "cl.wide", "p0", "x", 0, 1);
    PQclear(qt_q(c, "INSERT INTO queen.log_partitions (queue_id, name, last_offset) "
                    "SELECT q.id, 'x' || g, 0 FROM queen.queues q, generate_series(1, 20000) g "
                    "WHERE q.name = 'cl.wide'"));
    PQclear(qt_q(c, "INSERT INTO queen.log_partitions (id, queue_id, name, created_at, "
                    "last_write_at) SELECT 'ffffffff-ffff-ffff-ffff-ffffffffffff', q.id, 'dead', "
                    "now() - interval '60 days', now() - interval '60 days' FROM queen.queues q "
                    "WHERE q.name = 'cl.wide'"));
    PQclear(qt_q(c, "DELETE FROM qn.cleanup_sweep"));
    ck_assert_int_le(qt_i(c, "SELECT count(*) FROM queen.log_partitions"), 3 * 8192);
    PGresult *r = qt_q(c, "SELECT * FROM qn.partition_cleanup_step_v1(now() - interval '30 days', "
                          "1000)");
    ck_assert_int_eq(qt_gi(r, 0, "r_deleted"), 0);
    ck_assert_str_eq(qt_gs(r, 0, "r_done"), "t");
    PQclear(r);
    ck_assert(!qt_null(c, "SELECT pos FROM qn.cleanup_sweep"));
    int64_t deleted = 0;
    int steps = 1;
    while (deleted == 0 && steps < 4) {
        r = qt_q(c, "SELECT * FROM qn.partition_cleanup_step_v1(now() - interval '30 days', 1000)");
        deleted = qt_gi(r, 0, "r_deleted");
        PQclear(r);
        steps++;
    }
    ck_assert_int_eq(deleted, 1);
    ck_assert_int_eq(steps, 3);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_partitions WHERE id = "
                             "'ffffffff-ffff-ffff-ffff-ffffffffffff'"),
                     0);
    /* the walk wrapped around: the next step starts from the first id */
    ck_assert(qt_null(c, "SELECT pos FROM qn.cleanup_sweep"));
    PQfinish(c);
}
END_TEST

START_TEST(test_delete_queue_leaves_no_orphans)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('del.q', '{\"retention_enabled\": "
                    "true, \"retention_seconds\": 60}', false)"));
    qt_push1(c, "del.q", "p1", "d", 0, 3);
    qt_push1(c, "del.q", "p1", "d", 3, 3);
    qt_push1(c, "del.q", "p2", "d", 0, 3);
    qt_push1(c, "del.keep", "", "k", 0, 1);
    char p1[37], p2[37];
    qt_pid(c, "del.q", "p1", p1);
    qt_pid(c, "del.q", "p2", p2);
    char *qid = qt_s(c, "SELECT id FROM queen.queues WHERE name = 'del.q'");
    struct qt_pop p = {.queue = "del.q",
                       .part = "p2",
                       .group = "g",
                       .budget = 3,
                       .worker = "w-del",
                       .max_partitions = 1};
    PQclear(qt_pop(c, &p));
    struct qt_ack_item f = {.txn = "d0", .status = 4};
    PQclear(qt_ack(c, p2, "g", "w-del", &f, 1));
    PQclear(qt_q(c,
                 "SELECT * FROM qn.dlq_head_v1('%s', 'g', 'w-del', 0, NULL, 'd0', NULL, "
                 "NULL)",
                 p2));
    p.part = NULL, p.group = "empty";
    PQclear(qt_pop(c, &p));
    PQclear(qt_pop(c, &p));
    PQclear(qt_pop(c, &p)); /* both leased: leaves an empty-scan floor */
    stamp(c, p1, "2,0");
    expect_step(c, p1, "now() - interval '60 s'", "NULL", 10, 1, 3, true);
    ck_assert_int_gt(qt_i(c,
                          "SELECT count(*) FROM queen.consumer_watermarks WHERE queue_id = "
                          "'%s'",
                          qid),
                     0);

    ck_assert(qt_b(c, "SELECT qn.delete_queue_v1('del.q')"));
    const char *checks[] = {
        "SELECT count(*) FROM queen.queues WHERE id = '%s'",
        "SELECT count(*) FROM queen.log_partitions WHERE queue_id = '%s'",
        "SELECT count(*) FROM queen.consumer_watermarks WHERE queue_id = '%s'",
        "SELECT count(*) FROM queen.consumer_groups_metadata WHERE queue_id = '%s'",
    };
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(qt_i(c, checks[i], qid) == 0, "%s", checks[i]);
    const char *tables[] = {"log_segments", "log_txns", "log_consumers", "log_dlq",
                            "retention_history"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_msg(qt_i(c, "SELECT count(*) FROM queen.%s WHERE partition_id IN ('%s', '%s')",
                           tables[i], p1, p2) == 0,
                      "orphans in %s", tables[i]);
    ck_assert(!qt_b(c, "SELECT qn.delete_queue_v1('del.q')")); /* idempotent */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_segments s JOIN "
                             "queen.log_partitions p ON p.id = s.partition_id JOIN queen.queues q "
                             "ON q.id = p.queue_id WHERE q.name = 'del.keep'"),
                     1);
    PQfinish(c);
}
END_TEST

START_TEST(test_metrics_purge)
{
    PGconn *c = qt_connect();
    PQclear(qt_q(c, "INSERT INTO queen.retention_history (partition_id, messages_deleted, "
                    "retention_type, executed_at) SELECT gen_random_uuid(), 1, 'retention', "
                    "timestamptz '1970-01-02' + g * interval '1 hour' FROM generate_series(1, 5) "
                    "g"));
    ck_assert_int_eq(qt_i(c, "SELECT qn.metrics_purge_v1(timestamptz '1970-01-02' + interval "
                             "'3 hours 30 minutes')"),
                     3);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.retention_history WHERE executed_at < "
                             "'1971-01-01'"),
                     2);
    PQfinish(c);
}
END_TEST

/* Rows of every log table left for queue qid's partitions (and the queue
 * row, its cursors' and index entries). */
static int64_t queue_rows(PGconn *c, const char *qid)
{
    return qt_i(c,
                "SELECT (SELECT count(*) FROM queen.queues WHERE id = '%s') + "
                "(SELECT count(*) FROM qn.partition_pending WHERE queue_id = '%s') + "
                "(SELECT count(*) FROM queen.log_partitions WHERE queue_id = '%s') + "
                "(SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p ON "
                "p.id = s.partition_id WHERE p.queue_id = '%s') + "
                "(SELECT count(*) FROM queen.log_txns s JOIN queen.log_partitions p ON "
                "p.id = s.partition_id WHERE p.queue_id = '%s') + "
                "(SELECT count(*) FROM queen.log_consumers s JOIN queen.log_partitions p ON "
                "p.id = s.partition_id WHERE p.queue_id = '%s') + "
                "(SELECT count(*) FROM queen.log_dlq s JOIN queen.log_partitions p ON "
                "p.id = s.partition_id WHERE p.queue_id = '%s')",
                qid, qid, qid, qid, qid, qid, qid);
}

/* A queue of 2,000 partitions with a message each, a group's cursors and a
 * dead letter; returns its id (helper's string). */
static char *steps_queue(PGconn *c, const char *queue)
{
    qt_push1(c, queue, "p1", "d", 0, 3);
    qt_push1(c, queue, "p1", "d", 3, 3);
    char pid[37];
    qt_pid(c, queue, "p1", pid);
    char *qid = qt_s(c, "SELECT id FROM queen.queues WHERE name = '%s'", queue);
    PQclear(
        qt_q(c,
             "WITH p AS (INSERT INTO queen.log_partitions (queue_id, name, last_offset) "
             "SELECT '%s', 'x' || lpad(g::text, 6, '0'), 0 FROM generate_series(1, 2000) g "
             "RETURNING id) INSERT INTO queen.log_segments (partition_id, base_offset, created_at, "
             "end_offset, blob) SELECT id, 0, now(), 0, '\\x00' FROM p",
             qid));
    struct qt_pop p = {
        .queue = queue, .group = "g", .budget = 100, .worker = "w-del", .max_partitions = 50};
    PQclear(qt_pop(c, &p));
    PQclear(qt_q(c,
                 "INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\") "
                 "VALUES ('%s', 'g', 0)",
                 pid));
    return qid;
}

/* DeleteQueue's steps: the first hides the queue from every lookup (by name,
 * and by id for its tenant: a push by name makes a new queue), each later one
 * deletes at most its budget of rows and commits, and the queue is gone
 * after them with no orphan. Before, delete_queue_v1 deleted everything in one
 * transaction (a 60M-message queue ran into the statement timeout and stayed). */
START_TEST(test_delete_queue_in_steps)
{
    PGconn *c = qt_connect();
    char qid[37];
    snprintf(qid, sizeof qid, "%s", steps_queue(c, "dels.q"));
    char pid[37];
    qt_pid(c, "dels.q", "p1", pid);
    int64_t total = queue_rows(c, qid);
    ck_assert_int_gt(total, 4000);
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_queue_step_v1('dels.q', "
                             "'00000000-0000-0000-0000-000000000001', 1000)"),
                     1);
    ck_assert_int_eq(queue_rows(c, qid), total); /* hidden, nothing deleted yet */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.get_queue_v1('dels.q')"), 0);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.list_queues_v1(NULL, NULL, 1000, 0) "
                             "WHERE r_name = 'dels.q'"),
                     0);
    char msg[256];
    qt_fail(c, msg, sizeof msg, "SELECT * FROM qn.push_one_v1('%s', 1, '\\x%032d', -1, '\\x00')",
            pid, 0);
    ck_assert_msg(strstr(msg, "unknown partition") != NULL, "%s", msg);
    qt_push1(c, "dels.q", "p1", "n", 0, 1); /* a new queue of the same name */
    char *nqid = qt_s(c, "SELECT id FROM queen.queues WHERE name = 'dels.q'");
    ck_assert_str_ne(nqid, qid);
    char keep[37];
    snprintf(keep, sizeof keep, "%s", nqid);

    int steps = 0;
    int64_t before = total, v;
    do {
        v = qt_i(c, "SELECT qn.delete_queue_step_v1('dels.q', "
                    "'00000000-0000-0000-0000-000000000001', 1000, false)");
        int64_t now = queue_rows(c, qid);
        ck_assert_int_le(before - now, 1000);
        before = now;
        steps++;
        ck_assert_int_lt(steps, 100);
    } while (v == 1);
    ck_assert_int_eq(v, 0);
    ck_assert_int_ge(steps, (int)(total / 1000));
    ck_assert_int_eq(queue_rows(c, qid), 0);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.queue_deleting WHERE queue_id = '%s'", qid),
                     0);
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM queen.consumer_groups_metadata WHERE "
                          "queue_id = '%s'",
                          qid),
                     0);
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(*) FROM queen.retention_history WHERE partition_id = "
                          "'%s'",
                          pid),
                     0);
    /* the new queue of the same name is untouched; the next call deletes it */
    ck_assert_int_eq(queue_rows(c, keep), 1 + 1 + 1 + 1 + 1);
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_queue_step_v1('dels.none')"), -1);
    PQfinish(c);
}
END_TEST

/* A DeleteQueue interrupted after its first steps is finished by the
 * maintenance cycle (metrics_purge_v1, a bounded step per cycle). */
START_TEST(test_delete_queue_finished_by_maintenance)
{
    PGconn *c = qt_connect();
    char qid[37];
    snprintf(qid, sizeof qid, "%s", steps_queue(c, "delm.q"));
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_queue_step_v1('delm.q', "
                             "'00000000-0000-0000-0000-000000000001', 500)"),
                     1);
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_queue_step_v1('delm.q', "
                             "'00000000-0000-0000-0000-000000000001', 500, false)"),
                     1);
    ck_assert_int_gt(queue_rows(c, qid), 0);
    int cycles = 0;
    while (queue_rows(c, qid) > 0) {
        PQclear(qt_q(c, "SELECT qn.metrics_purge_v1(now() - interval '30 days')"));
        ck_assert_int_lt(++cycles, 10);
    }
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.queue_deleting"), 0);
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_queue_step_v1('delm.q')"), -1);
    PQfinish(c);
}
END_TEST

Suite *qt_suite_maint(void)
{
    Suite *s = suite_create("maint");
    TCase *tc = qt_tcase("maint", fixture, 120);
    tcase_add_test(tc, test_retention_rule1_whole_segments);
    tcase_add_test(tc, test_retention_completed_rule);
    tcase_add_test(tc, test_retention_either_rule);
    tcase_add_test(tc, test_max_wait_deletes_leased_data);
    tcase_add_test(tc, test_sidecar_purge_cutoff);
    tcase_add_test(tc, test_sidecar_worklist_walks_windows);
    tcase_add_test(tc, test_worklist_order_and_limit);
    tcase_add_test(tc, test_cleanup_and_dead_letter_pin);
    tcase_add_test(tc, test_cleanup_step_bounded_window);
    tcase_add_test(tc, test_delete_queue_leaves_no_orphans);
    tcase_add_test(tc, test_delete_queue_in_steps);
    tcase_add_test(tc, test_delete_queue_finished_by_maintenance);
    tcase_add_test(tc, test_metrics_purge);
    suite_add_tcase(s, tc);
    return s;
}
