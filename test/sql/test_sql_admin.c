/*
 * test_sql_admin.c - 007_log_fetch.sql, 008_configure.sql, 009_admin.sql:
 * configure (merge, replace, validation), queue reads, partitions, consumer
 * groups (list, seek, delete), dead letters, stats, fetch, the dedup cache's
 * reads, the cross-broker notification.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_test.h"

static void fixture(void)
{
    qt_suite_db("admin");
}

static PGresult *configure(PGconn *c, const char *q, const char *opts, bool replace)
{
    return qt_q(c, "SELECT * FROM qn.configure_queue_v1('%s', '%s', %s)", q, opts,
                replace ? "true" : "false");
}

START_TEST(test_configure_merge_replace_validate)
{
    PGconn *c = qt_connect();
    PGresult *r = configure(c, "cfg.ns.t", "{\"lease_time\": 30, \"retry_limit\": 5}", false);
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_created"), "t");
    ck_assert_int_eq(qt_gi(r, 0, "r_lease_time"), 30);
    ck_assert_int_eq(qt_gi(r, 0, "r_retry_limit"), 5);
    ck_assert_int_eq(qt_gi(r, 0, "r_dedup_window_seconds"), 3600);
    /* configure does not derive namespace / task from the name (a push does) */
    ck_assert_str_eq(qt_gs(r, 0, "r_namespace"), "");
    ck_assert_str_eq(qt_gs(r, 0, "r_task"), "");
    ck_assert_int_eq(qt_gi(r, 0, "r_partitions"), 0);
    PQclear(r);
    /* merge: absent keys keep their values; null resets one to its default */
    r = configure(c, "cfg.ns.t", "{\"ttl\": 10, \"lease_time\": null, \"namespace\": \"N\"}",
                  false);
    ck_assert_str_eq(qt_gs(r, 0, "r_created"), "f");
    ck_assert_int_eq(qt_gi(r, 0, "r_ttl"), 10);
    ck_assert_int_eq(qt_gi(r, 0, "r_lease_time"), 60);
    ck_assert_int_eq(qt_gi(r, 0, "r_retry_limit"), 5);
    ck_assert_str_eq(qt_gs(r, 0, "r_namespace"), "N");
    PQclear(r);
    /* replace: everything not sent returns to its default */
    r = configure(c, "cfg.ns.t", "{\"priority\": -4, \"dead_letter_queue\": false}", true);
    ck_assert_int_eq(qt_gi(r, 0, "r_priority"), -4);
    ck_assert_int_eq(qt_gi(r, 0, "r_retry_limit"), 3);
    ck_assert_int_eq(qt_gi(r, 0, "r_ttl"), 3600);
    ck_assert_str_eq(qt_gs(r, 0, "r_dead_letter_queue"), "f");
    ck_assert_str_eq(qt_gs(r, 0, "r_namespace"), ""); /* reset to its default */
    PQclear(r);
    /* every option round-trips */
    r = configure(c, "cfg.all",
                  "{\"lease_time\": 1, \"retry_limit\": 1000000, \"retry_delay\": 7, "
                  "\"max_size\": 8, \"ttl\": 9, \"dead_letter_queue\": false, "
                  "\"dlq_after_max_retries\": false, \"delayed_processing\": 10, "
                  "\"window_buffer\": 11, \"retention_seconds\": 12, "
                  "\"completed_retention_seconds\": 13, \"retention_enabled\": true, "
                  "\"encryption_enabled\": true, \"max_wait_time_seconds\": 14, "
                  "\"min_pop_wait_time\": 60000, \"dedup_window_seconds\": 0, \"priority\": 15, "
                  "\"namespace\": \"a\", \"task\": \"b\"}",
                  false);
    const char *cols[] = {"r_lease_time",
                          "r_retry_limit",
                          "r_retry_delay",
                          "r_max_size",
                          "r_ttl",
                          "r_delayed_processing",
                          "r_window_buffer",
                          "r_retention_seconds",
                          "r_completed_retention_seconds",
                          "r_max_wait_time_seconds",
                          "r_min_pop_wait_time",
                          "r_dedup_window_seconds",
                          "r_priority"};
    int64_t want[] = {1, 1000000, 7, 8, 9, 10, 11, 12, 13, 14, 60000, 0, 15};
    for (int i = 0; i < 13; i++)
        ck_assert_msg(qt_gi(r, 0, cols[i]) == want[i], "%s", cols[i]);
    ck_assert_str_eq(qt_gs(r, 0, "r_retention_enabled"), "t");
    ck_assert_str_eq(qt_gs(r, 0, "r_encryption_enabled"), "t");
    ck_assert_str_eq(qt_gs(r, 0, "r_dlq_after_max_retries"), "f");
    ck_assert_str_eq(qt_gs(r, 0, "r_task"), "b");
    PQclear(r);

    const char *bad[][2] = {
        {"{\"bogus\": 1}", "QCONF invalid bogus: unknown option"},
        {"{\"lease_time\": 0}", "QCONF invalid lease_time: must be between 1 and 86400"},
        {"{\"lease_time\": 86401}", "QCONF invalid lease_time: must be between 1 and 86400"},
        {"{\"min_pop_wait_time\": 60001}",
         "QCONF invalid min_pop_wait_time: must be between 0 and 60000"},
        {"{\"retry_limit\": \"3\"}", "QCONF invalid retry_limit: not a number"},
        {"{\"ttl\": 1.5}", "QCONF invalid ttl: not an integer"},
        {"{\"ttl\": -1}", "QCONF invalid ttl: must be between 0 and 2147483647"},
        {"{\"dedup_window_seconds\": 3000000000}",
         "QCONF invalid dedup_window_seconds: must be between 0 and 2147483647"},
        {"{\"retention_enabled\": 1}", "QCONF invalid retention_enabled: not a boolean"},
        {"{\"task\": 5}", "QCONF invalid task: not a string"},
        {"[1]", "QCONF invalid options: not an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[256];
        const char *st =
            qt_fail(c, msg, sizeof msg,
                    "SELECT * FROM qn.configure_queue_v1('cfg.all', '%s', false)", bad[i][0]);
        ck_assert_str_eq(st, "22023");
        ck_assert_str_eq(msg, bad[i][1]);
    }
    char msg[256];
    ck_assert_str_eq(
        qt_fail(c, msg, sizeof msg, "SELECT * FROM qn.configure_queue_v1('', '{}', false)"),
        "22023");
    /* nothing changed by the failures */
    ck_assert_int_eq(qt_i(c, "SELECT lease_time FROM queen.queues WHERE name = 'cfg.all'"), 1);
    PQfinish(c);
}
END_TEST

START_TEST(test_get_list_queues_and_partitions)
{
    PGconn *c = qt_connect();
    qt_push1(c, "lq.b", "p1", "x", 0, 3);
    qt_push1(c, "lq.b", "p1", "x", 3, 2);
    qt_push1(c, "lq.b", "p2", "x", 0, 4);
    qt_push1(c, "lq.a", "", "x", 0, 1);
    PGresult *r = qt_q(c, "SELECT * FROM qn.get_queue_v1('lq.b')");
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_partitions"), 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_segments"), 3);
    ck_assert_int_eq(qt_gi(r, 0, "r_messages"), 9);
    ck_assert_int_eq(qt_gi(r, 0, "r_lease_time"), 60);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.get_queue_v1('lq.none')");
    ck_assert_int_eq(PQntuples(r), 0);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.get_queue_v1('lq.b', gen_random_uuid())"); /* other tenant */
    ck_assert_int_eq(PQntuples(r), 0);
    PQclear(r);
    /* the encryption flag alone: false until configured, then true; false for
     * a missing queue or another tenant's */
    ck_assert_str_eq(qt_s(c, "SELECT qn.queue_encrypted_v1('lq.b')"), "f");
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('lq.b', "
                    "'{\"encryption_enabled\": true}', false)"));
    ck_assert_str_eq(qt_s(c, "SELECT qn.queue_encrypted_v1('lq.b')"), "t");
    ck_assert_str_eq(qt_s(c, "SELECT qn.queue_encrypted_v1('lq.b', gen_random_uuid())"), "f");
    ck_assert_str_eq(qt_s(c, "SELECT qn.queue_encrypted_v1('lq.none')"), "f");
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('lq.b', "
                    "'{\"encryption_enabled\": false}', false)"));
    r = qt_q(c, "SELECT * FROM qn.list_queues_v1('lq', NULL, 0, 0)");
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_str_eq(qt_gs(r, 0, "r_name"), "lq.a");
    ck_assert_str_eq(qt_gs(r, 1, "r_name"), "lq.b");
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.list_queues_v1('lq', '', 1, 1)");
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_name"), "lq.b");
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.list_queues_v1('lq', 'b', 10, 0)");
    ck_assert_int_eq(PQntuples(r), 1);
    PQclear(r);

    char p1[37];
    qt_pid(c, "lq.b", "p1", p1);
    struct qt_pop p = {.queue = "lq.b",
                       .part = "p1",
                       .group = "g",
                       .budget = 2,
                       .worker = "w",
                       .max_partitions = 1};
    PQclear(qt_pop(c, &p));
    struct qt_ack_item it = {.off = 1, .status = 1};
    PQclear(qt_ack(c, p1, "g", "", &it, 1));
    r = qt_q(c, "SELECT * FROM qn.queue_partitions_v1('lq.b', 'g')");
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_str_eq(qt_gs(r, 0, "r_partition"), "p1");
    ck_assert_int_eq(qt_gi(r, 0, "r_last_offset"), 4);
    ck_assert_int_eq(qt_gi(r, 0, "r_committed"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_depth"), 3);
    ck_assert_str_eq(qt_gs(r, 0, "r_leased"), "f");
    ck_assert_int_eq(qt_gi(r, 1, "r_committed"), -1); /* no row for the group */
    ck_assert_int_eq(qt_gi(r, 1, "r_depth"), 4);
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_consumer_groups_seek_delete)
{
    PGconn *c = qt_connect();
    qt_push1(c, "cg.q", "p1", "x", 0, 3);
    qt_push1(c, "cg.q", "p1", "x", 3, 3);
    qt_push1(c, "cg.q", "p2", "x", 0, 2);
    char p1[37];
    qt_pid(c, "cg.q", "p1", p1);
    PQclear(qt_q(c,
                 "UPDATE queen.log_segments SET created_at = now() - CASE base_offset WHEN 0 "
                 "THEN interval '2 hours' ELSE interval '1 hour' END WHERE partition_id = '%s'",
                 p1));
    struct qt_pop p = {.queue = "cg.q",
                       .part = "p1",
                       .group = "gcg",
                       .budget = 2,
                       .worker = "wg",
                       .max_partitions = 1};
    PQclear(qt_pop(c, &p));
    PGresult *r = qt_q(c, "SELECT * FROM qn.list_consumer_groups_v1('cg.q', 'gcg')");
    ck_assert_int_eq(PQntuples(r), 2); /* bulk-seeded on both partitions */
    ck_assert_str_eq(qt_gs(r, 0, "r_group"), "gcg");
    ck_assert_str_eq(qt_gs(r, 0, "r_queue"), "cg.q");
    ck_assert_str_eq(qt_gs(r, 0, "r_sub_mode"), "all");
    ck_assert_str_eq(qt_gs(r, 0, "r_partition"), "p1");
    ck_assert_int_eq(qt_gi(r, 0, "r_committed"), -1);
    ck_assert_int_eq(qt_gi(r, 0, "r_lag"), 6);
    ck_assert_int_ge(qt_gi(r, 0, "r_time_lag_seconds"), 7199);
    ck_assert_str_eq(qt_gs(r, 0, "r_leased"), "t");
    ck_assert_str_eq(qt_gs(r, 0, "r_worker"), "wg");
    ck_assert_int_eq(qt_gi(r, 0, "r_attempt_count"), 1);
    PQclear(r);

    char msg[256];
    ck_assert_str_eq(qt_fail(c, msg, sizeof msg,
                             "SELECT qn.seek_consumer_group_v1('gcg', 'cg.q', NULL, false, NULL)"),
                     "22023");
    ck_assert_str_eq(qt_fail(c, msg, sizeof msg,
                             "SELECT qn.seek_consumer_group_v1('gcg', 'cg.none', NULL, true, "
                             "NULL)"),
                     "P0002");
    ck_assert_str_eq(qt_fail(c, msg, sizeof msg,
                             "SELECT qn.seek_consumer_group_v1('gcg', 'cg.q', 'p9', true, NULL)"),
                     "P0002");
    /* to a timestamp (segment granular), clearing the lease */
    ck_assert_int_eq(qt_i(c, "SELECT qn.seek_consumer_group_v1('gcg', 'cg.q', 'p1', false, now() "
                             "- interval '90 minutes')"),
                     1);
    ck_assert(qt_b(c,
                   "SELECT committed = 2 AND worker_id IS NULL AND batch_end IS NULL AND "
                   "attempt_count = 0 FROM queen.log_consumers WHERE partition_id = '%s' AND "
                   "consumer_group = 'gcg'",
                   p1));
    /* to the end, every partition; a group without rows gets them */
    ck_assert_int_eq(qt_i(c, "SELECT qn.seek_consumer_group_v1('h', 'cg.q', NULL, true, NULL)"), 2);
    r = qt_q(c, "SELECT * FROM qn.list_consumer_groups_v1('cg.q', 'h')");
    ck_assert_int_eq(qt_gi(r, 0, "r_lag"), 0);
    ck_assert_int_eq(qt_gi(r, 1, "r_lag"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_time_lag_seconds"), 0);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.list_consumer_groups_v1(NULL, NULL)");
    ck_assert_int_ge(PQntuples(r), 4);
    PQclear(r);
    /* the metrics' summary: one row per (group, queue), the cursors' lags summed */
    ck_assert(qt_b(c, "SELECT NOT EXISTS (SELECT r_group, r_queue, sum(r_lag)::INT8 FROM "
                      "qn.list_consumer_groups_v1(NULL, NULL) GROUP BY 1, 2 EXCEPT SELECT "
                      "r_group, r_queue, r_lag FROM qn.group_lags_v1())"));
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.group_lags_v1()"),
                     qt_i(c, "SELECT count(DISTINCT (r_group, r_queue)) FROM "
                             "qn.list_consumer_groups_v1(NULL, NULL)"));

    /* delete without metadata: the stored subscription seeds the next cursors */
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_consumer_group_v1('gcg', 'cg.q', false)"), 2);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.consumer_groups_metadata m JOIN "
                             "queen.queues q ON q.id = m.queue_id WHERE q.name = 'cg.q' AND "
                             "m.consumer_group = 'gcg'"),
                     1);
    p.budget = 100, p.part = NULL, p.max_partitions = 5;
    r = qt_pop(c, &p);
    ck_assert_int_eq(qt_taken(r), 8); /* re-consumes from scratch */
    PQclear(r);
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_consumer_group_v1('gcg', '', true)"), 2);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.consumer_groups_metadata WHERE "
                             "consumer_group = 'gcg'"),
                     0); /* every queue of the tenant */
    PQfinish(c);
}
END_TEST

START_TEST(test_dlq_admin_and_stats)
{
    PGconn *c = qt_connect();
    qt_push1(c, "dl.q", "p1", "x", 0, 4);
    char p1[37];
    qt_pid(c, "dl.q", "p1", p1);
    const char *groups[] = {"g1", "g2"};
    for (int i = 0; i < 2; i++) {
        struct qt_pop p = {.queue = "dl.q",
                           .group = groups[i],
                           .budget = 4,
                           .worker = groups[i],
                           .max_partitions = 1};
        PQclear(qt_pop(c, &p));
        struct qt_ack_item f = {.txn = "x0", .status = 4};
        PQclear(qt_ack(c, p1, groups[i], groups[i], &f, 1));
        PQclear(qt_q(c,
                     "SELECT * FROM qn.dlq_head_v1('%s', '%s', '%s', 0, "
                     "'0190a000-0000-7000-8000-00000000000%d', 'x0', '\\x0102', 'err%d')",
                     p1, groups[i], groups[i], i, i));
    }
    PGresult *r = qt_q(c, "SELECT * FROM qn.list_dlq_v1('dl.q', NULL, NULL, 0, 0)");
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_str_eq(qt_gs(r, 0, "r_group"), "g2"); /* newest first */
    ck_assert_str_eq(qt_gs(r, 0, "r_queue"), "dl.q");
    ck_assert_str_eq(qt_gs(r, 0, "r_partition"), "p1");
    ck_assert_int_eq(qt_gi(r, 0, "r_offset"), 0);
    ck_assert_str_eq(qt_gs(r, 0, "r_txn"), "x0");
    ck_assert_str_eq(qt_gs(r, 0, "r_payload"), "\\x0102");
    ck_assert_str_eq(qt_gs(r, 0, "r_error"), "err1");
    char *id = strdup(qt_gs(r, 0, "r_id"));
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.list_dlq_v1('dl.q', 'g1', 'p1', 10, 0)");
    ck_assert_int_eq(PQntuples(r), 1);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.list_dlq_v1('dl.q', NULL, NULL, 1, 1)");
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_group"), "g1");
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.get_dlq_v1('%s')", id);
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_str_eq(qt_gs(r, 0, "r_message_id"), "0190a000-0000-7000-8000-000000000001");
    PQclear(r);

    r = qt_q(c, "SELECT * FROM qn.stats_v1('dl.q')");
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_partitions"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_messages"), 4);
    ck_assert_int_eq(qt_gi(r, 0, "r_segments"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_pending"), 3); /* slowest group at 0 */
    ck_assert_int_eq(qt_gi(r, 0, "r_dead_letters"), 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_groups"), 2);
    ck_assert_int_gt(qt_gi(r, 0, "r_bytes"), 0);
    PQclear(r);

    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_dlq_v1('%s', NULL, NULL)", id), 1);
    r = qt_q(c, "SELECT * FROM qn.get_dlq_v1('%s')", id);
    ck_assert_int_eq(PQntuples(r), 0);
    PQclear(r);
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_dlq_v1(NULL, '%s', 'x0')", p1), 1);
    ck_assert_int_eq(qt_i(c, "SELECT qn.delete_dlq_v1(NULL, '%s', 'x0')", p1), 0);
    free(id);
    PQfinish(c);
}
END_TEST

static int64_t fetched(const PGresult *r)
{
    int64_t n = 0;
    for (int i = 0; i < PQntuples(r); i++)
        if (!qt_gnull(r, i, "r_take"))
            n += qt_gi(r, i, "r_take");
    return n;
}

static PGresult *fetch(PGconn *c, const char *entries, int64_t budget, int max_records)
{
    /* entries: VALUES list of (queue, partition, offset, max_bytes) */
    return qt_q(c,
                "SELECT f.* FROM (SELECT array_agg(q ORDER BY o) q, array_agg(p ORDER BY o) p, "
                "array_agg(off ORDER BY o) off, array_agg(mb ORDER BY o) mb FROM (SELECT "
                "row_number() OVER () o, * FROM (VALUES %s) v(q, p, off, mb)) x) a, "
                "qn.fetch_v1(a.q, a.p, a.off::int8[], a.mb::int8[], %lld, %d, 10, 200) f",
                entries, (long long)budget, max_records);
}

START_TEST(test_fetch)
{
    PGconn *c = qt_connect();
    for (int i = 0; i < 3; i++) {
        struct qt_seg s;
        qt_seg_make(&s, "ft.q", "", "f", i * 10, 10, 100); /* content 1000 */
        PQclear(qt_push(c, &s, 1, false));
        qt_seg_free(&s);
    }
    PGresult *r = fetch(c,
                        "('ft.q', '', 12, 0), ('ft.none', '', 0, 0), ('ft.q', 'Default', 31, 0),"
                        " ('ft.q', '', 30, 0), ('ft.q', '', -1, 0)",
                        0, 0);
    /* entry 0: header + 2 segments (12..29); the others a header each */
    ck_assert_int_eq(PQntuples(r), 7);
    ck_assert_int_eq(qt_gi(r, 0, "r_entry"), 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_error"), 0);
    ck_assert(qt_gnull(r, 0, "r_base"));
    ck_assert_int_eq(qt_gi(r, 0, "r_high"), 30);
    ck_assert_int_eq(qt_gi(r, 0, "r_log_start"), 0);
    ck_assert_int_eq(qt_gi(r, 1, "r_base"), 10);
    ck_assert_int_eq(qt_gi(r, 1, "r_start_idx"), 2);
    ck_assert_int_eq(qt_gi(r, 1, "r_take"), 8);
    ck_assert_int_eq(qt_gi(r, 2, "r_base"), 20);
    ck_assert_int_eq(qt_gi(r, 2, "r_take"), 10);
    ck_assert_int_eq(qt_gi(r, 3, "r_entry"), 1);
    ck_assert_int_eq(qt_gi(r, 3, "r_error"), 1);
    ck_assert_int_eq(qt_gi(r, 4, "r_entry"), 2);
    ck_assert_int_eq(qt_gi(r, 4, "r_error"), 2); /* past high */
    ck_assert_int_eq(qt_gi(r, 5, "r_entry"), 3); /* = high: valid, empty */
    ck_assert_int_eq(qt_gi(r, 5, "r_error"), 0);
    ck_assert_int_eq(qt_gi(r, 6, "r_entry"), 4); /* negative offset */
    ck_assert_int_eq(qt_gi(r, 6, "r_error"), 2);
    PQclear(r);
    /* records per entry */
    r = fetch(c, "('ft.q', '', 5, 0)", 0, 7);
    ck_assert_int_eq(fetched(r), 7);
    PQclear(r);
    /* per-entry bytes: 1000 + 10 x 10 per whole segment */
    r = fetch(c, "('ft.q', '', 0, 2300), ('ft.q', '', 0, 1100)", 0, 0);
    ck_assert_int_eq(PQntuples(r), 5); /* 2 headers, 2 + 1 segments */
    PQclear(r);
    /* a segment that does not fit whole: as many records as content + k x 10
     * allows, (2150 - 1100 - 1000) / 10 = 5 of the second; the entry ends there */
    r = fetch(c, "('ft.q', '', 0, 2150), ('ft.q', '', 20, 1080)", 0, 0);
    ck_assert_int_eq(PQntuples(r), 5); /* 2 headers, 2 + 1 segments */
    ck_assert_int_eq(qt_gi(r, 2, "r_take"), 5);
    ck_assert_int_eq(qt_gi(r, 4, "r_take"), 8); /* (1080 - 1000) / 10 */
    PQclear(r);
    /* call budget; the first segment of the call always goes (partially) */
    r = fetch(c, "('ft.q', '', 0, 0), ('ft.q', '', 0, 0)", 400, 0);
    ck_assert_int_eq(PQntuples(r), 3);
    ck_assert_int_eq(qt_gi(r, 1, "r_take"), 1); /* max(1, 400 / 210) */
    ck_assert(qt_gnull(r, 2, "r_base"));
    PQclear(r);
    /* gap tolerant after retention */
    char pid[37];
    qt_pid(c, "ft.q", "", pid);
    PQclear(qt_q(c,
                 "UPDATE queen.log_segments SET created_at = now() - interval '1 hour' WHERE "
                 "partition_id = '%s' AND base_offset = 0",
                 pid));
    PQclear(qt_q(c,
                 "SELECT * FROM qn.retention_step_v1('%s', now() - interval '1 minute', "
                 "NULL, 10)",
                 pid));
    r = fetch(c, "('ft.q', '', 5, 0), ('ft.q', '', 10, 0)", 0, 0);
    ck_assert_int_eq(qt_gi(r, 0, "r_error"), 2); /* below log_start */
    ck_assert_int_eq(qt_gi(r, 0, "r_log_start"), 10);
    ck_assert_int_eq(qt_gi(r, 2, "r_base"), 10);
    PQclear(r);
    /* read-only */
    ck_assert_str_eq(qt_s(c, "SELECT provolatile FROM pg_proc WHERE oid = "
                             "'qn.fetch_v1'::regproc"),
                     "s");
    PQfinish(c);
}
END_TEST

START_TEST(test_dedup_cache_reads)
{
    PGconn *c = qt_connect();
    qt_push1(c, "meta.q", "p", "m", 0, 2);
    qt_push1(c, "meta.q", "p", "m", 2, 3);
    char pid[37];
    qt_pid(c, "meta.q", "p", pid);
    PGresult *r = qt_q(c, "SELECT * FROM qn.partition_meta_v1('meta.q', 'p')");
    ck_assert_str_eq(qt_gs(r, 0, "r_pid"), pid);
    ck_assert_int_eq(qt_gi(r, 0, "r_window"), 3600);
    ck_assert_int_eq(qt_gi(r, 0, "r_last_offset"), 4);
    ck_assert_int_eq(qt_gi(r, 0, "r_txns_start"), 0);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.partition_meta_v1('meta.q', 'nope')");
    ck_assert_int_eq(PQntuples(r), 0);
    PQclear(r);
    PQclear(qt_q(c,
                 "UPDATE queen.log_txns SET created_at = now() - interval '2 hours' WHERE "
                 "partition_id = '%s' AND base_offset = 0",
                 pid));
    r = qt_q(c, "SELECT * FROM qn.txns_window_v1('%s', 3600)", pid);
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_end"), 4);
    ck_assert_int_eq((int)strlen(qt_gs(r, 0, "r_hashes")), 2 + 2 * 48);
    PQclear(r);
    r = qt_q(c, "SELECT * FROM qn.txns_window_v1('%s', 86400)", pid);
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 0);
    PQclear(r);
    PQfinish(c);
}
END_TEST

START_TEST(test_notify_push)
{
    PGconn *l = qt_connect(), *c = qt_connect();
    PQclear(qt_q(l, "LISTEN queen_push"));
    PQclear(qt_q(c, "SELECT qn.notify_push_v1(ARRAY['n.a', 'n.b', 'n.a', ''])"));
    PQclear(qt_q(l, "SELECT 1")); /* let notifications arrive */
    ck_assert_int_eq(PQconsumeInput(l), 1);
    int seen_a = 0, seen_b = 0, n = 0;
    PGnotify *m;
    while ((m = PQnotifies(l)) != NULL) {
        n++;
        seen_a += strcmp(m->extra, "00000000-0000-0000-0000-000000000001/n.a") == 0;
        seen_b += strcmp(m->extra, "00000000-0000-0000-0000-000000000001/n.b") == 0;
        PQfreemem(m);
    }
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(seen_a, 1);
    ck_assert_int_eq(seen_b, 1);
    PQfinish(l);
    PQfinish(c);
}
END_TEST

/* n partitions "x000001".. of queue, one offset each (no segment). */
static void wide_parts(PGconn *c, const char *queue, int n)
{
    qt_push1(c, queue, "p0", "w", 0, 1);
    PQclear(qt_q(c,
                 "INSERT INTO queen.log_partitions (queue_id, name, last_offset) "
                 "SELECT q.id, 'x' || lpad(g::text, 6, '0'), 0 FROM queen.queues q, "
                 "generate_series(1, %d) g WHERE q.name = '%s'",
                 n, queue));
}

/* Shared buffers one statement touched, nested statements included. */
static int64_t stmt_blocks(PGconn *c, const char *sql)
{
    PQclear(qt_q(c, "CREATE OR REPLACE FUNCTION pg_temp.blks(s TEXT) RETURNS INT8 "
                    "LANGUAGE plpgsql AS $f$ DECLARE j JSON; BEGIN "
                    "EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || s INTO j; "
                    "RETURN (j->0->'Plan'->>'Shared Hit Blocks')::INT8 "
                    "+ (j->0->'Plan'->>'Shared Read Blocks')::INT8; END $f$"));
    PGresult *r = qt_q(c, "SELECT pg_temp.blks($q$%s$q$)", sql);
    int64_t b = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return b;
}

/* Steps of 1,000 until a pass ends; returns the steps taken. */
static int stats_pass(PGconn *c)
{
    for (int i = 1; i <= 1000; i++)
        if (qt_i(c, "SELECT qn.stats_step_v1(1000)") < 1000)
            return i;
    ck_abort_msg("the stats walk never ended a pass");
    return 0;
}

/* The metrics' stats walk: after a whole pass its figures are stats_v1's and
 * group_lags_v1's (queues without partitions are absent); one refresh (a step of 1,000 partitions
 * and the snapshot's read) touches about as many buffers at 22,000 partitions as at 2,000 (the
 * whole aggregate it replaces read every partition, cursor and segment per
 * refresh: 9-15 s at 1,000,000). */
START_TEST(test_stats_walk)
{
    PGconn *c = qt_connect();
    wide_parts(c, "st.small", 2000);
    /* a group with lag and a dead letter on another queue */
    qt_push1(c, "st.g", "a", "t", 0, 5);
    qt_push1(c, "st.g", "b", "u", 0, 3);
    struct qt_pop p = {
        .queue = "st.g", .group = "g", .budget = 2, .worker = "w", .max_partitions = 1};
    PQclear(qt_pop(c, &p));
    char pid[37];
    qt_pid(c, "st.g", "a", pid);
    PQclear(qt_q(c,
                 "INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\") "
                 "VALUES ('%s', 'g', 0)",
                 pid));
    PQclear(qt_q(c, "DELETE FROM qn.stats_sweep"));
    ck_assert_int_ge(stats_pass(c), 3);
    ck_assert(qt_b(c, "SELECT count(*) > 0 FROM qn.stats_cached_v1()"));
    static const char cols[] =
        "r_queue, r_partitions, r_messages, r_pending, r_dead_letters, r_groups";
    ck_assert(qt_b(c,
                   "SELECT NOT EXISTS (SELECT %s FROM qn.stats_v1(NULL) WHERE r_partitions > 0 "
                   "EXCEPT SELECT %s FROM qn.stats_cached_v1()) AND NOT EXISTS (SELECT %s FROM "
                   "qn.stats_cached_v1() EXCEPT SELECT %s FROM qn.stats_v1(NULL))",
                   cols, cols, cols, cols));
    ck_assert(qt_b(c, "SELECT NOT EXISTS (SELECT r_group, r_queue, r_lag FROM qn.group_lags_v1() "
                      "EXCEPT SELECT r_group, r_queue, r_lag FROM qn.group_lags_cached_v1()) AND "
                      "NOT EXISTS (SELECT r_group, r_queue, r_lag FROM qn.group_lags_cached_v1() "
                      "EXCEPT SELECT r_group, r_queue, r_lag FROM qn.group_lags_v1())"));
    ck_assert_int_eq(qt_i(c, "SELECT r_dead_letters FROM qn.stats_cached_v1() WHERE r_queue = "
                             "'st.g'"),
                     1);
    ck_assert_int_gt(qt_i(c, "SELECT r_lag FROM qn.group_lags_cached_v1() WHERE r_queue = "
                             "'st.g' AND r_group = 'g'"),
                     0);
    /* a new pass's figures replace the snapshot only when it ends */
    qt_push1(c, "st.g", "a", "t", 5, 4);
    ck_assert_int_eq(qt_i(c, "SELECT qn.stats_step_v1(1000)"), 1000);
    ck_assert_int_eq(qt_i(c, "SELECT r_messages FROM qn.stats_cached_v1() WHERE r_queue = 'st.g'"),
                     8);
    stats_pass(c);
    ck_assert_int_eq(qt_i(c, "SELECT r_messages FROM qn.stats_cached_v1() WHERE r_queue = 'st.g'"),
                     12);

    static const char refresh[] =
        "SELECT count(*) FROM qn.stats_cached_v1('00000000-0000-0000-0000-000000000001', 1000)";
    PQclear(qt_q(c, "DELETE FROM qn.stats_sweep"));
    int64_t small = stmt_blocks(c, refresh);
    wide_parts(c, "st.large", 20000);
    PQclear(qt_q(c, "ANALYZE queen.log_partitions"));
    PQclear(qt_q(c, "DELETE FROM qn.stats_sweep"));
    int64_t large = stmt_blocks(c, refresh);
    int64_t mid = stmt_blocks(c, refresh);
    ck_assert_msg(small > 0 && large <= 2 * small && mid <= 2 * small,
                  "a refresh: %lld buffers at 2,000 partitions, %lld and %lld at 22,000",
                  (long long)small, (long long)large, (long long)mid);
    PQfinish(c);
}
END_TEST

/* A seek in steps: a step of 1,000 partitions touches about as many buffers
 * at 20,000 partitions as at 2,000 (the one-statement seek wrote every cursor
 * of the queue: 12.3 s at 200,000, minutes at 1,000,000); the steps, resumed
 * by name, write every cursor once and end with NULL. */
START_TEST(test_seek_in_steps)
{
    PGconn *c = qt_connect();
    wide_parts(c, "sk.small", 2000);
    wide_parts(c, "sk.large", 20000);
    PQclear(qt_q(c, "ANALYZE queen.log_partitions"));
    int64_t small = stmt_blocks(c, "SELECT * FROM qn.seek_consumer_group_step_v1('g', "
                                   "'sk.small', NULL, true, NULL, NULL, 1000)");
    int64_t large = stmt_blocks(c, "SELECT * FROM qn.seek_consumer_group_step_v1('g', "
                                   "'sk.large', NULL, true, NULL, NULL, 1000)");
    ck_assert_msg(small > 0 && large <= 2 * small,
                  "a seek step: %lld buffers at 2,000 partitions, %lld at 20,000", (long long)small,
                  (long long)large);
    int steps = 0;
    int64_t total = 0;
    char after[64] = "";
    for (;;) {
        PGresult *r = qt_q(c,
                           "SELECT * FROM qn.seek_consumer_group_step_v1('h', 'sk.large', NULL, "
                           "true, NULL, %s%s%s, 5000)",
                           after[0] ? "'" : "", after[0] ? after : "NULL", after[0] ? "'" : "");
        steps++;
        int64_t n = qt_gi(r, 0, "r_updated");
        ck_assert_int_le(n, 5000);
        total += n;
        bool done = qt_gnull(r, 0, "r_next");
        if (!done)
            snprintf(after, sizeof after, "%s", qt_gs(r, 0, "r_next"));
        PQclear(r);
        if (done)
            break;
        ck_assert_int_lt(steps, 10);
    }
    ck_assert_int_eq(steps, 5);
    ck_assert_int_eq(total, 20001);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_consumers k JOIN "
                             "queen.log_partitions p ON p.id = k.partition_id JOIN queen.queues q "
                             "ON q.id = p.queue_id WHERE q.name = 'sk.large' AND "
                             "k.consumer_group = 'h' AND k.committed = p.last_offset"),
                     20001);
    /* the one-call form runs the same steps */
    ck_assert_int_eq(qt_i(c, "SELECT qn.seek_consumer_group_v1('h', 'sk.large', NULL, true, NULL)"),
                     20001);
    PQfinish(c);
}
END_TEST

Suite *qt_suite_admin(void)
{
    Suite *s = suite_create("admin");
    TCase *tc = qt_tcase("admin", fixture, 120);
    tcase_add_test(tc, test_configure_merge_replace_validate);
    tcase_add_test(tc, test_get_list_queues_and_partitions);
    tcase_add_test(tc, test_consumer_groups_seek_delete);
    tcase_add_test(tc, test_dlq_admin_and_stats);
    tcase_add_test(tc, test_fetch);
    tcase_add_test(tc, test_dedup_cache_reads);
    tcase_add_test(tc, test_notify_push);
    tcase_add_test(tc, test_stats_walk);
    tcase_add_test(tc, test_seek_in_steps);
    suite_add_tcase(s, tc);
    return s;
}
