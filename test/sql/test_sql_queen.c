/*
 * test_sql_queen.c - coexistence with Queen MQ's schema: a database laid down
 * by queen_fixture.sql (Queen MQ's tables exactly, its procedures of the
 * signatures that met ours) holding data written in Queen MQ's shape. Checked:
 * qn_migrate succeeds there and changes no row of any table; Queen MQ's
 * procedures keep their result types and can be created again afterwards; a
 * second migration applies nothing; our procedures pop, ack, fetch and
 * deduplicate over Queen MQ's data; the dead-letter table's JSONB shape (JSON
 * stored as JSON, anything else refused, NULL retry_count read as 0); a group
 * Queen MQ marked conflating is refused; retention honours the sink hold; and
 * what an earlier version of ours left in schema queen is removed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgtest.h"
#include "queen/migrate.h"
#include "sql_test.h"

#define DB "queen_test_sql_queen"

static char *read_fixture(void)
{
    FILE *f = fopen(QN_QUEEN_FIXTURE, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", QN_QUEEN_FIXTURE);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_gt(n, 0);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static void apply_fixture(PGconn *c)
{
    char *sql = read_fixture();
    PQclear(qt_q(c, "SET client_min_messages = warning"));
    PQclear(qt_q(c, "%s", sql));
    free(sql);
}

/* A segment written as Queen MQ writes one: rows in log_segments and log_txns,
 * the allocator and the work-list columns moved by hand. */
static void queen_segment(PGconn *c, const char *pid, int64_t base, const char *prefix, int first,
                          int n, int age_s)
{
    struct qt_seg s;
    qt_seg_make(&s, "", "", prefix, first, n, 0);
    char b[24], e[24], age[24];
    snprintf(b, sizeof b, "%lld", (long long)base);
    snprintf(e, sizeof e, "%lld", (long long)(base + n - 1));
    snprintf(age, sizeof age, "%d", age_s);
    const char *vals[6] = {pid, b, e, age, (const char *)s.blob, (const char *)s.hashes};
    int lens[6] = {0, 0, 0, 0, (int)s.blob_len, n * 16};
    int fmts[6] = {0, 0, 0, 0, 1, 1};
    PGresult *r = PQexecParams(
        c,
        "WITH s AS (INSERT INTO queen.log_segments VALUES ($1::uuid, $2::int8, $3::int8, "
        "now() - make_interval(secs => $4::int), $5)), "
        "t AS (INSERT INTO queen.log_txns VALUES ($1::uuid, $2::int8, $3::int8, "
        "now() - make_interval(secs => $4::int), $6)) "
        "UPDATE queen.log_partitions SET last_offset = $3::int8, "
        "oldest_live_at = coalesce(oldest_live_at, now() - make_interval(secs => $4::int)), "
        "oldest_txn_at = coalesce(oldest_txn_at, now() - make_interval(secs => $4::int)) "
        "WHERE id = $1::uuid",
        6, NULL, vals, lens, fmts, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    qt_seg_free(&s);
}

/* A queue and partition as Queen MQ provisions them; returns the pid. */
static void queen_partition(PGconn *c, const char *queue, const char *part, char pid[37])
{
    char *v = qt_s(c,
                   "WITH q AS (INSERT INTO queen.queues (name, namespace, task) "
                   "VALUES ('%s', split_part('%s', '.', 1), NULLIF(split_part('%s', '.', 2), "
                   "'')) RETURNING id) INSERT INTO queen.log_partitions (queue_id, name) "
                   "SELECT id, '%s' FROM q RETURNING id",
                   queue, queue, queue, part);
    snprintf(pid, 37, "%s", v);
}

static void fixture(void)
{
    qt_conninfo = qn_test_pg_fresh_db(DB);
    PGconn *c = qn_test_pg_connect(qt_conninfo);
    apply_fixture(c);
    char pid[37];
    /* qm.orders/p0: offsets 0..4 in two segments, group g1 seeded by Queen MQ */
    queen_partition(c, "qm.orders", "p0", pid);
    queen_segment(c, pid, 0, "qa", 0, 3, 600);
    queen_segment(c, pid, 3, "qa", 3, 2, 300);
    PQclear(qt_q(c,
                 "INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id, "
                 "subscription_mode, subscription_timestamp) SELECT 'g1', queue_id, 'all', "
                 "'epoch' FROM queen.log_partitions WHERE id = '%s'",
                 pid));
    PQclear(qt_q(c,
                 "INSERT INTO queen.log_consumers (partition_id, consumer_group) VALUES "
                 "('%s', 'g1')",
                 pid));
    /* a group Queen MQ consumes by conflation */
    PQclear(qt_q(c,
                 "INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id, "
                 "subscription_mode, subscription_timestamp, conflation) SELECT 'last', "
                 "queue_id, 'all', 'epoch', true FROM queen.log_partitions WHERE id = '%s'",
                 pid));
    /* a dead letter Queen MQ filed: JSON payload, no retry count */
    PQclear(qt_q(c,
                 "INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\", "
                 "transaction_id, payload, error, retry_count) VALUES ('%s', 'g0', 0, 'qa0', "
                 "'{\"order\": 7}', 'failed by Queen MQ', NULL)",
                 pid));
    PQfinish(c);
}

static void migrate(struct qn_migrate_report *rep)
{
    char err[1024] = "";
    ck_assert_msg(qn_migrate(qt_conninfo, 60000, rep, err, sizeof err) == 0, "%s", err);
}

/* md5 of every row of every table of schema queen, per table. */
static char *rows_snapshot(PGconn *c)
{
    char *s = qt_s(c, "SELECT string_agg(c.relname || '=' || md5(query_to_xml(format("
                      "'SELECT * FROM queen.%%I t ORDER BY t::text', c.relname), true, false, "
                      "'')::text), ',' ORDER BY c.relname) FROM pg_class c "
                      "WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind = 'r'");
    ck_assert_ptr_nonnull(s);
    return strdup(s);
}

/* ---------------------------------------------------------------- migration */

START_TEST(test_migrate_leaves_queen_data_and_procedures)
{
    PGconn *c = qt_connect();
    char *before = rows_snapshot(c);
    ck_assert_int_ge(qt_i(c, "SELECT count(*) FROM queen.log_segments"), 2);
    struct qn_migrate_report rep = {0};
    migrate(&rep);
    char *after = rows_snapshot(c);
    ck_assert_str_eq(before, after); /* no row of any table changed */
    /* Queen MQ's procedures are still Queen MQ's */
    ck_assert_str_eq(qt_s(c, "SELECT pg_get_function_result('queen.delete_queue_v1(text,uuid)'"
                             "::regprocedure)"),
                     "jsonb");
    ck_assert_str_eq(qt_s(c, "SELECT pg_get_function_result('queen.configure_queue_v1(text,"
                             "jsonb,uuid)'::regprocedure)"),
                     "jsonb");
    /* ours are all in qn; nothing of ours in queen */
    ck_assert_int_gt(qt_i(c, "SELECT count(*) FROM pg_proc WHERE pronamespace = "
                             "'qn'::regnamespace"),
                     30);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM pg_proc p WHERE pronamespace = "
                             "'queen'::regnamespace AND proname IN ('push_v1', 'pop_v1', "
                             "'ack_v1', 'fetch_v1', 'ensure_index')"),
                     0);
    ck_assert(qt_null(c, "SELECT to_regclass('queen.schema_files')"));
    /* Queen MQ restarts and lays its SQL down again: it still applies */
    apply_fixture(c);
    char *again = rows_snapshot(c);
    ck_assert_str_eq(before, again);
    /* and our next start applies nothing */
    struct qn_migrate_report rep2 = {0};
    migrate(&rep2);
    ck_assert_int_eq(rep2.files_applied, 0);
    ck_assert_int_eq(rep2.files_total, rep.files_total);
    free(before);
    free(after);
    free(again);
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------- serving */

START_TEST(test_pop_ack_fetch_dedup_over_queen_data)
{
    struct qn_migrate_report rep;
    migrate(&rep);
    PGconn *c = qt_connect();
    char pid[37];
    qt_pid(c, "qm.orders", "p0", pid);
    /* pop: Queen MQ's cursor of g1, both segments */
    struct qt_pop p = {
        .queue = "qm.orders", .part = "p0", .group = "g1", .budget = 10, .worker = "w-queen"};
    PGresult *r = qt_pop(c, &p);
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_int_eq(qt_gi(r, 0, "r_base"), 0);
    ck_assert_int_eq(qt_taken(r), 5);
    PQclear(r);
    /* ack by transaction id, resolved through Queen MQ's sidecar */
    struct qt_ack_item items[5];
    const char *txns[5] = {"qa0", "qa1", "qa2", "qa3", "qa4"};
    for (int i = 0; i < 5; i++)
        items[i] = (struct qt_ack_item){txns[i], 0, 1};
    r = qt_ack(c, pid, "g1", "w-queen", items, 5);
    int sum = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, sum, "r_committed"), 4);
    for (int i = 0; i < PQntuples(r); i++)
        if (i != sum)
            ck_assert_int_eq(qt_gi(r, i, "r_outcome"), 1);
    PQclear(r);
    ck_assert_int_eq(qt_i(c,
                          "SELECT committed FROM queen.log_consumers WHERE partition_id = "
                          "'%s' AND consumer_group = 'g1'",
                          pid),
                     4);
    /* fetch by offset */
    r = qt_q(c, "SELECT * FROM qn.fetch_v1(ARRAY['qm.orders'], ARRAY['p0'], ARRAY[1]::int8[], "
                "ARRAY[0]::int8[], 0, 0, 0, 0)");
    ck_assert_int_eq(PQntuples(r), 3); /* header + 2 segments */
    ck_assert(qt_gnull(r, 0, "r_base"));
    ck_assert_int_eq(qt_gi(r, 0, "r_high"), 5);
    ck_assert_int_eq(qt_gi(r, 1, "r_start_idx"), 1);
    ck_assert_int_eq(qt_gi(r, 1, "r_take"), 2);
    ck_assert_int_eq(qt_gi(r, 2, "r_base"), 3);
    PQclear(r);
    /* dedup against what Queen MQ stored: qa1 is the original at offset 1 */
    struct qt_seg s;
    qt_seg_make(&s, "qm.orders", "p0", "qa", 1, 1, 0);
    r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_dup_off"), 1);
    PQclear(r);
    qt_seg_free(&s);
    /* a new message continues Queen MQ's allocator */
    ck_assert_int_eq(qt_push1(c, "qm.orders", "p0", "qb", 0, 1), 5);
    /* a group new to the queue reads Queen MQ's data from the start */
    struct qt_pop p2 = {
        .queue = "qm.orders", .part = "p0", .group = "fresh", .budget = 100, .worker = "w-fresh"};
    r = qt_pop(c, &p2);
    ck_assert_int_eq(qt_taken(r), 6);
    PQclear(r);
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------- dead letters */

START_TEST(test_dlq_on_a_jsonb_table)
{
    struct qn_migrate_report rep;
    migrate(&rep);
    PGconn *c = qt_connect();
    char pid[37];
    queen_partition(c, "qm.poison", "p", pid);
    PQclear(qt_q(c, "UPDATE queen.queues SET retry_limit = 0 WHERE name = 'qm.poison'"));
    queen_segment(c, pid, 0, "pz", 0, 2, 60);
    struct qt_pop p = {
        .queue = "qm.poison", .part = "p", .group = "g", .budget = 1, .worker = "w-p"};
    PQclear(qt_pop(c, &p));
    struct qt_ack_item fail = {"pz0", 0, 2};
    PGresult *r = qt_ack(c, pid, "g", "w-p", &fail, 1);
    int sum = qt_ack_summary(r);
    ck_assert_int_eq(qt_gi(r, sum, "r_flags") & 2, 2); /* hand-off */
    PQclear(r);
    /* JSON is stored as JSON */
    r = qt_q(c,
             "SELECT * FROM qn.dlq_head_v1('%s', 'g', 'w-p', 0, NULL, 'pz0', "
             "convert_to('{\"b\": 2, \"a\": 1}', 'UTF8'), 'boom')",
             pid);
    ck_assert_str_eq(qt_gs(r, 0, "r_ok"), "t");
    PQclear(r);
    ck_assert_str_eq(qt_s(c,
                          "SELECT jsonb_typeof(payload) || ' ' || payload::text FROM "
                          "queen.log_dlq WHERE partition_id = '%s'",
                          pid),
                     "object {\"a\": 1, \"b\": 2}");
    /* read back as bytes, with Queen MQ's own row: NULL retry_count reads 0 */
    r = qt_q(c, "SELECT r_txn, convert_from(r_payload, 'UTF8') AS j, r_retry_count FROM "
                "qn.list_dlq_v1('', '', '', 0, 0) ORDER BY r_txn");
    ck_assert_int_eq(PQntuples(r), 2);
    ck_assert_str_eq(qt_gs(r, 0, "r_txn"), "pz0");
    ck_assert_str_eq(qt_gs(r, 0, "j"), "{\"a\": 1, \"b\": 2}");
    ck_assert_str_eq(qt_gs(r, 1, "r_txn"), "qa0");
    ck_assert_str_eq(qt_gs(r, 1, "j"), "{\"order\": 7}");
    ck_assert_int_eq(qt_gi(r, 1, "r_retry_count"), 0);
    PQclear(r);
    /* a payload that is not JSON is refused, and nothing moves */
    PQclear(qt_pop(c, &p));
    struct qt_ack_item fail2 = {"pz1", 0, 2};
    PQclear(qt_ack(c, pid, "g", "w-p", &fail2, 1));
    char msg[256];
    const char *state = qt_fail(c, msg, sizeof msg,
                                "SELECT * FROM qn.dlq_head_v1('%s', 'g', 'w-p', 1, NULL, "
                                "'pz1', '\\x00ff'::bytea, 'boom')",
                                pid);
    ck_assert_str_eq(state, "22P02");
    ck_assert_msg(strstr(msg, "not JSON") != NULL, "%s", msg);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_dlq WHERE partition_id = '%s'", pid),
                     1);
    ck_assert_int_eq(qt_i(c,
                          "SELECT batch_end FROM queen.log_consumers WHERE partition_id = "
                          "'%s' AND consumer_group = 'g'",
                          pid),
                     1); /* the lease is kept: redelivered, not lost */
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------- conflation */

START_TEST(test_conflating_group_is_refused)
{
    struct qn_migrate_report rep;
    migrate(&rep);
    PGconn *c = qt_connect();
    char msg[512];
    const char *state = qt_fail(c, msg, sizeof msg,
                                "SELECT * FROM qn.pop_v1('qm.orders', 'p0', 'last', 10, 0, 0, "
                                "0, 0, 'w', false, 1, 'all', NULL)");
    ck_assert_str_eq(state, "55000");
    ck_assert_msg(strstr(msg, "conflation") != NULL && strstr(msg, "last") != NULL, "%s", msg);
    state = qt_fail(c, msg, sizeof msg,
                    "SELECT * FROM qn.pop_discover_v1('qm', '', 'last', 10, 0, 0, 0, 0, 'w', "
                    "false, 1, 'all', NULL)");
    ck_assert_str_eq(state, "55000");
    /* nothing was leased for it */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_consumers WHERE consumer_group = "
                             "'last'"),
                     0);
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------- sink hold */

static int64_t log_start(PGconn *c, const char *pid)
{
    return qt_i(c, "SELECT log_start FROM queen.log_partitions WHERE id = '%s'", pid);
}

static void retention(PGconn *c, const char *pid)
{
    PQclear(qt_q(c,
                 "SELECT * FROM qn.retention_step_v1('%s', now() - interval '1 minute', "
                 "NULL, 1000)",
                 pid));
}

START_TEST(test_retention_honours_the_sink_hold)
{
    struct qn_migrate_report rep;
    migrate(&rep);
    PGconn *c = qt_connect();
    char held[37], free_[37];
    queen_partition(c, "qm.sink", "p", held);
    queen_partition(c, "qm.nosink", "p", free_);
    for (int i = 0; i < 3; i++) {
        queen_segment(c, held, 2 * i, "sk", 2 * i, 2, 3600);
        queen_segment(c, free_, 2 * i, "ns", 2 * i, 2, 3600);
    }
    PQclear(qt_q(c, "UPDATE queen.queues SET retention_enabled = true, retention_seconds = 60, "
                    "retention_sink_hold = 's3' WHERE name = 'qm.sink'"));
    PQclear(qt_q(c, "UPDATE queen.queues SET retention_enabled = true, retention_seconds = 60 "
                    "WHERE name = 'qm.nosink'"));
    /* without a hold everything older than the cutoff goes */
    retention(c, free_);
    ck_assert_int_eq(log_start(c, free_), 6);
    /* the sink has no cursor yet: it consumed nothing, nothing goes */
    retention(c, held);
    ck_assert_int_eq(log_start(c, held), 0);
    /* it consumed up to offset 2: only the first segment (0..1) is wholly consumed */
    PQclear(qt_q(c,
                 "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) "
                 "VALUES ('%s', 's3', 2)",
                 held));
    retention(c, held);
    ck_assert_int_eq(log_start(c, held), 2);
    /* past retention_sink_hold_max_seconds the hold lets go */
    PQclear(qt_q(c, "UPDATE queen.queues SET retention_sink_hold_max_seconds = 600 WHERE name = "
                    "'qm.sink'"));
    retention(c, held);
    ck_assert_int_eq(log_start(c, held), 6);
    PQfinish(c);
}
END_TEST

/* ---------------------------------------------------------------- legacy */

/* A database an earlier version of ours migrated: its procedures in schema
 * queen and its bookkeeping in queen.schema_files. */
START_TEST(test_earlier_version_is_cleaned_up)
{
    char *ci = qn_test_pg_fresh_db("queen_test_sql_legacy");
    PGconn *c = qn_test_pg_connect(ci);
    PQclear(qt_q(c, "CREATE SCHEMA queen; "
                    "CREATE TABLE queen.schema_files (name TEXT PRIMARY KEY, checksum TEXT NOT "
                    "NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now()); "
                    "INSERT INTO queen.schema_files (name, checksum) VALUES "
                    "('003_log_push.sql', 'x'); "
                    "CREATE FUNCTION queen.delete_queue_v1(p_queue TEXT, p_tenant UUID) RETURNS "
                    "BOOL LANGUAGE sql AS 'SELECT true'; "
                    "CREATE FUNCTION queen.seed_cursor(p_pid UUID, p_mode TEXT, p_ts "
                    "TIMESTAMPTZ, p_log_start INT8, p_last INT8) RETURNS INT8 LANGUAGE sql AS "
                    "'SELECT 0::INT8'; "
                    /* same name as one of ours, another result type: not ours */
                    "CREATE FUNCTION queen.stats_v1(p_queue TEXT, p_tenant UUID) RETURNS JSONB "
                    "LANGUAGE sql AS 'SELECT NULL::JSONB'"));
    char err[1024] = "";
    struct qn_migrate_report rep;
    ck_assert_msg(qn_migrate(ci, 60000, &rep, err, sizeof err) == 0, "%s", err);
    ck_assert(qt_null(c, "SELECT to_regprocedure('queen.delete_queue_v1(text,uuid)')"));
    ck_assert(qt_null(c, "SELECT to_regprocedure('queen.seed_cursor(uuid,text,timestamptz,int8,"
                         "int8)')"));
    ck_assert(!qt_null(c, "SELECT to_regprocedure('queen.stats_v1(text,uuid)')"));
    ck_assert(qt_null(c, "SELECT to_regclass('queen.schema_files')"));
    /* now Queen MQ's SQL applies on it */
    apply_fixture(c);
    ck_assert_str_eq(qt_s(c, "SELECT pg_get_function_result('queen.delete_queue_v1(text,uuid)'"
                             "::regprocedure)"),
                     "jsonb");
    /* the cleanup runs once: without our old bookkeeping it touches nothing */
    PQclear(qt_q(c, "CREATE FUNCTION queen.seed_cursor(p_pid UUID, p_mode TEXT, p_ts "
                    "TIMESTAMPTZ, p_log_start INT8, p_last INT8) RETURNS INT8 LANGUAGE sql AS "
                    "'SELECT 0::INT8'"));
    PQclear(qt_q(c, "DELETE FROM qn.schema_files"));
    ck_assert_msg(qn_migrate(ci, 60000, &rep, err, sizeof err) == 0, "%s", err);
    ck_assert(!qt_null(c, "SELECT to_regprocedure('queen.seed_cursor(uuid,text,timestamptz,int8,"
                          "int8)')"));
    PQfinish(c);
    free(ci);
}
END_TEST

Suite *qt_suite_queen(void)
{
    Suite *s = suite_create("queen");
    TCase *t = qt_tcase("queen", fixture, 120);
    tcase_add_test(t, test_migrate_leaves_queen_data_and_procedures);
    tcase_add_test(t, test_pop_ack_fetch_dedup_over_queen_data);
    tcase_add_test(t, test_dlq_on_a_jsonb_table);
    tcase_add_test(t, test_conflating_group_is_refused);
    tcase_add_test(t, test_retention_honours_the_sink_hold);
    tcase_add_test(t, test_earlier_version_is_cleaned_up);
    suite_add_tcase(s, t);
    return s;
}
