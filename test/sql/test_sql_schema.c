/*
 * test_sql_schema.c - 000_schema.sql, 001_log_schema.sql, 002_log_indexes.sql
 * and how qn_migrate applies them: idempotence, concurrent migrations, the
 * tuning the seeds require, the two pure helpers, and that the hot-path
 * procedures are PL/pgSQL without per-call SET clauses.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "pgtest.h"
#include "queen/migrate.h"
#include "sql_test.h"

static void fixture(void)
{
    qt_suite_db("schema");
}

/* oid:xmin of every pg_proc and pg_class row of schemas qn and queen */
static char *catalog_snapshot(PGconn *c)
{
    return qt_s(c, "SELECT (SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) "
                   "        FROM pg_proc WHERE pronamespace IN ('qn'::regnamespace, "
                   "                                            'queen'::regnamespace)) || '|' || "
                   "       (SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) "
                   "        FROM pg_class WHERE relnamespace IN ('qn'::regnamespace, "
                   "                                             'queen'::regnamespace))");
}

START_TEST(test_migrate_twice_changes_nothing)
{
    char *ci = qn_test_pg_fresh_db("queen_test_sql_mig_twice");
    char err[1024] = "";
    struct qn_migrate_report rep = {0};
    ck_assert_int_eq(qn_migrate(ci, 60000, &rep, err, sizeof err), 0);
    ck_assert_int_gt(rep.files_total, 5);
    ck_assert_int_eq(rep.files_applied, rep.files_total);
    PGconn *c = qn_test_pg_connect(ci);
    char *before = catalog_snapshot(c);
    ck_assert_ptr_nonnull(before);

    struct qn_migrate_report rep2 = {0};
    ck_assert_int_eq(qn_migrate(ci, 60000, &rep2, err, sizeof err), 0);
    ck_assert_int_eq(rep2.files_applied, 0);
    char *after = catalog_snapshot(c);
    ck_assert_str_eq(before, after);

    /* Every file is idempotent by itself: forget the checksums, apply all of
     * them again over live data, and nothing is lost or duplicated. */
    free(qn_test_pg_value(c, "SELECT count(*) FROM qn.push_v1(ARRAY['mq'], ARRAY['p'], "
                             "ARRAY[1], ARRAY['\\x00112233445566778899aabbccddeeff'::bytea], "
                             "ARRAY[-1]::int8[], ARRAY['\\x01'::bytea])"));
    PQclear(qn_test_pg_exec(c, "DELETE FROM qn.schema_files"));
    struct qn_migrate_report rep3 = {0};
    ck_assert_int_eq(qn_migrate(ci, 60000, &rep3, err, sizeof err), 0);
    ck_assert_int_eq(rep3.files_applied, rep3.files_total);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM queen.log_segments"), 1);
    ck_assert_int_eq(qt_i(c, "SELECT last_offset FROM queen.log_partitions"), 0);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM pg_index x JOIN pg_class i ON i.oid = "
                             "x.indexrelid WHERE i.relnamespace = 'queen'::regnamespace AND NOT "
                             "x.indisvalid"),
                     0);
    PQfinish(c);
    free(ci);
}
END_TEST

/* The embedded schema files (storage/sql_files.c, generated). */
struct qn_embedded_file {
    const char *name;
    const unsigned char *data;
    size_t len;
};
extern const struct qn_embedded_file qn_sql_files[];
extern const size_t qn_sql_files_count;

/* A changed file is re-applied whole on a live database: none may take a lock
 * that blocks pushes, pops or acks (SHARE or stronger on a table), which a bare
 * CREATE INDEX IF NOT EXISTS or ADD COLUMN IF NOT EXISTS would, until the end of
 * the file's transaction. */
START_TEST(test_reapply_takes_no_blocking_lock)
{
    PGconn *c = qt_connect();
    qt_push1(c, "reapply", "", "r", 0, 1);
    int checked = 0;
    for (size_t i = 0; i < qn_sql_files_count; i++) {
        const char *sql = (const char *)qn_sql_files[i].data;
        if (strstr(sql, "-- queen:no-transaction") != NULL)
            continue;
        PQclear(qt_q(c, "BEGIN"));
        PQclear(qt_q(c, "%s", sql));
        PGresult *r = qt_q(c, "SELECT string_agg(relation::regclass::text || ' ' || mode, ', ') "
                              "FROM pg_locks WHERE pid = pg_backend_pid() AND relation IS NOT "
                              "NULL AND mode IN ('ShareLock', 'ShareRowExclusiveLock', "
                              "'ExclusiveLock', 'AccessExclusiveLock')");
        ck_assert_msg(PQgetisnull(r, 0, 0), "%s takes %s", qn_sql_files[i].name,
                      PQgetvalue(r, 0, 0));
        PQclear(r);
        PQclear(qt_q(c, "ROLLBACK"));
        checked++;
    }
    ck_assert_int_ge(checked, 9);
    PQfinish(c);
}
END_TEST

struct mig_arg {
    const char *ci;
    int rc;
    struct qn_migrate_report rep;
    char err[512];
};

static void *mig_thread(void *p)
{
    struct mig_arg *a = p;
    a->rc = qn_migrate(a->ci, 120000, &a->rep, a->err, sizeof a->err);
    return NULL;
}

START_TEST(test_concurrent_migrations)
{
    char *ci = qn_test_pg_fresh_db("queen_test_sql_mig_conc");
    struct mig_arg a[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].ci = ci;
        ck_assert_int_eq(pthread_create(&t[i], NULL, mig_thread, &a[i]), 0);
    }
    int applied = 0;
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(a[i].rc == 0, "migration %d failed: %s", i, a[i].err);
        applied += a[i].rep.files_applied;
    }
    /* serialized on the advisory lock: exactly one run applied the files */
    ck_assert_int_eq(applied, a[0].rep.files_total);
    PGconn *c = qn_test_pg_connect(ci);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.schema_files"), a[0].rep.files_total);
    ck_assert(qt_b(c, "SELECT to_regproc('qn.push_v1') IS NOT NULL"));
    PQfinish(c);
    free(ci);
}
END_TEST

static bool has_opt(PGconn *c, const char *rel, const char *opt)
{
    return qt_b(c,
                "SELECT coalesce('%s' = ANY (reloptions), false) FROM pg_class WHERE oid = "
                "'%s'::regclass",
                opt, rel);
}

static bool has_toast_opt(PGconn *c, const char *rel, const char *opt)
{
    return qt_b(c,
                "SELECT coalesce('%s' = ANY (t.reloptions), false) FROM pg_class c JOIN "
                "pg_class t ON t.oid = c.reltoastrelid WHERE c.oid = '%s'::regclass",
                opt, rel);
}

START_TEST(test_tuning_and_shape)
{
    PGconn *c = qt_connect();
    const char *lp[] = {"fillfactor=70", "autovacuum_vacuum_scale_factor=0",
                        "autovacuum_vacuum_threshold=500", "autovacuum_vacuum_cost_delay=0",
                        "vacuum_truncate=off"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_msg(has_opt(c, "queen.log_partitions", lp[i]), "log_partitions %s", lp[i]);
    const char *lc[] = {"fillfactor=50", "autovacuum_vacuum_scale_factor=0",
                        "autovacuum_vacuum_threshold=500", "autovacuum_vacuum_cost_delay=0",
                        "vacuum_truncate=off"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_msg(has_opt(c, "queen.log_consumers", lc[i]), "log_consumers %s", lc[i]);
    const char *ls[] = {"autovacuum_vacuum_scale_factor=0.1",
                        "autovacuum_vacuum_insert_scale_factor=0.3",
                        "autovacuum_vacuum_cost_limit=4000", "autovacuum_vacuum_cost_delay=0"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_msg(has_opt(c, "queen.log_segments", ls[i]), "log_segments %s", ls[i]);
        ck_assert_msg(has_toast_opt(c, "queen.log_segments", ls[i]), "toast %s", ls[i]);
    }
    ck_assert_msg(has_opt(c, "queen.log_txns", "autovacuum_vacuum_insert_scale_factor=0.3"),
                  "log_txns");
    /* blob is not re-compressed */
    ck_assert_str_eq(qt_s(c, "SELECT attstorage FROM pg_attribute WHERE attrelid = "
                             "'queen.log_segments'::regclass AND attname = 'blob'"),
                     "e");
    /* log_segments: the primary key and nothing else */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM pg_index WHERE indrelid = "
                             "'queen.log_segments'::regclass"),
                     1);
    ck_assert_str_eq(qt_s(c, "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid "
                             "= 'queen.log_segments'::regclass"),
                     "CREATE UNIQUE INDEX log_segments_pkey ON queen.log_segments USING btree "
                     "(partition_id, base_offset)");
    /* no foreign keys on the sidecar and the dead letters */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND "
                             "conrelid IN ('queen.log_txns'::regclass, 'queen.log_dlq'::regclass)"),
                     0);
    /* the retention work-list indexes: partial, valid */
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM pg_index x JOIN pg_class i ON i.oid = "
                             "x.indexrelid WHERE i.relname IN ('idx_log_partitions_queue_oldest', "
                             "'idx_log_partitions_queue_oldest_txn') AND x.indisvalid AND "
                             "x.indpred IS NOT NULL"),
                     2);
    ck_assert(qt_b(c, "SELECT to_regclass('queen.idx_log_partitions_queue_write') IS NOT NULL"));
    ck_assert(qt_b(c, "SELECT to_regclass('queen.idx_log_dlq_partition_failed_at') IS NOT NULL"));
    ck_assert(qt_b(c, "SELECT to_regclass('queen.queues_tenant_name_uk') IS NOT NULL"));
    /* one lease default */
    ck_assert_str_eq(qt_s(c, "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef d JOIN "
                             "pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
                             "WHERE d.adrelid = 'queen.queues'::regclass AND a.attname = "
                             "'lease_time'"),
                     "60");
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM pg_attribute WHERE attrelid = "
                             "'queen.log_dlq'::regclass AND attname = 'payload' AND atttypid = "
                             "'bytea'::regtype"),
                     1);
    PQfinish(c);
}
END_TEST

/* The procedures the broker calls per message or per batch are PL/pgSQL (their
 * statements' plans are cached per session; a SQL-language function with
 * parameters is planned again at every call, and a distributed PostgreSQL cannot
 * push it down), and the cheapest of them carry no SET clause (it saves and
 * restores the setting at every call; they turn JIT off only around their
 * one-shot statements). */
START_TEST(test_hot_path_is_plpgsql)
{
    PGconn *c = qt_connect();
    static const char *hot =
        "'push_one_v1','push_v1','partition_provision','segment_at_v1','pop_v1','pop_one_v1',"
        "'pop_discover_v1','pop_partition','note_empty_scan','has_pending_v1','pop_gate_v1',"
        "'ack_v1','dlq_head_v1','renew_lease_v1','release_lease_v1','check_leases_v1',"
        "'partition_meta_v1','txns_since_v1','txns_window_v1','retention_step_v1',"
        "'txns_purge_step_v1','evict_max_wait_step_v1','partition_dead_v1'";
    ck_assert_int_eq(qt_i(c,
                          "SELECT count(DISTINCT proname) FROM pg_proc WHERE pronamespace = "
                          "'qn'::regnamespace AND proname IN (%s)",
                          hot),
                     23);
    ck_assert_str_eq(qt_s(c,
                          "SELECT coalesce(string_agg(p.proname, ','), '') FROM pg_proc p JOIN "
                          "pg_language l ON l.oid = p.prolang WHERE p.pronamespace = "
                          "'qn'::regnamespace AND p.proname IN (%s) AND l.lanname <> 'plpgsql'",
                          hot),
                     "");
    ck_assert_str_eq(qt_s(c,
                          "SELECT coalesce(string_agg(proname, ','), '') FROM pg_proc WHERE "
                          "pronamespace = 'qn'::regnamespace AND proname IN ('push_one_v1', "
                          "'push_v1', 'pop_partition', 'pop_one_v1', 'ack_v1', 'renew_lease_v1', "
                          "'release_lease_v1') AND proconfig IS NOT NULL"),
                     "");
    /* the hot push and the hot pop are keyed on one partition id */
    ck_assert_str_eq(qt_s(c, "SELECT format_type(proargtypes[0], NULL) FROM pg_proc WHERE "
                             "oid = 'qn.push_one_v1'::regproc"),
                     "uuid");
    ck_assert_str_eq(qt_s(c, "SELECT format_type(proargtypes[0], NULL) FROM pg_proc WHERE "
                             "oid = 'qn.pop_one_v1'::regproc"),
                     "uuid");
    PQfinish(c);
}
END_TEST

START_TEST(test_unnest_hashes)
{
    PGconn *c = qt_connect();
    /* 3 full hashes plus 2 trailing bytes: the partial one is ignored */
    PGresult *r = qt_q(c, "SELECT idx, encode(h, 'hex') AS h FROM qn.log_unnest_hashes("
                          "decode(repeat('aa', 16) || repeat('bb', 16) || repeat('cc', 16) || "
                          "'dddd', 'hex')) ORDER BY idx");
    ck_assert_int_eq(PQntuples(r), 3);
    ck_assert_int_eq(qt_gi(r, 0, "idx"), 0);
    ck_assert_int_eq(qt_gi(r, 2, "idx"), 2);
    ck_assert_str_eq(qt_gs(r, 1, "h"), "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    PQclear(r);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.log_unnest_hashes(NULL)"), 0);
    ck_assert_int_eq(qt_i(c, "SELECT count(*) FROM qn.log_unnest_hashes('\\x0102')"), 0);
    /* hash_index: only 16-aligned matches count */
    const char *set2 = "decode(repeat('00', 8) || repeat('11', 8) || repeat('22', 8) || "
                       "repeat('33', 8), 'hex')";
    const char *q = "decode(repeat('11', 8) || repeat('22', 8), 'hex')";
    ck_assert(qt_null(c, "SELECT qn.hash_index(%s, %s)", set2, q)); /* straddles only */
    ck_assert_int_eq(qt_i(c, "SELECT qn.hash_index(%s || %s, %s)", set2, q, q), 2);
    ck_assert_int_eq(qt_i(c,
                          "SELECT qn.hash_index(%s, decode(repeat('22', 8) || "
                          "repeat('33', 8), 'hex'))",
                          set2),
                     1);
    /* inlined: the plan has no function scan of it */
    r = qt_q(c, "EXPLAIN (VERBOSE) SELECT t.base_offset + h.idx FROM queen.log_txns t CROSS "
                "JOIN LATERAL qn.log_unnest_hashes(t.hashes) h");
    for (int i = 0; i < PQntuples(r); i++)
        ck_assert_msg(strstr(PQgetvalue(r, i, 0), "Function Scan on log_unnest_hashes") == NULL &&
                          strstr(PQgetvalue(r, i, 0), "qn.log_unnest_hashes") == NULL,
                      "not inlined: %s", PQgetvalue(r, i, 0));
    PQclear(r);
    PQfinish(c);
}
END_TEST

static int64_t content_size_of(PGconn *c, const uint8_t *b, size_t n, bool *isnull)
{
    char *hex = malloc(n * 2 + 1);
    for (size_t i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    char *sql = NULL;
    ck_assert_int_ge(asprintf(&sql, "SELECT qn.zstd_content_size('\\x%s'::bytea)", hex), 0);
    PGresult *r = qn_test_pg_exec(c, sql);
    *isnull = PQgetisnull(r, 0, 0);
    int64_t v = *isnull ? -1 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    free(sql);
    free(hex);
    return v;
}

START_TEST(test_zstd_content_size)
{
    PGconn *c = qt_connect();
    bool isnull;
    /* real frames from libzstd, one per field-size class (RFC 8878 3.1.1.1.4) */
    size_t sizes[] = {0, 1, 200, 255, 256, 257, 1000, 65535, 65791, 65792, 70000, 1u << 20};
    uint8_t *src = malloc(1u << 20);
    for (size_t i = 0; i < (1u << 20); i++)
        src[i] = (uint8_t)(i % 251);
    size_t cap = ZSTD_compressBound(1u << 20);
    uint8_t *dst = malloc(cap);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = ZSTD_compress(dst, cap, src, sizes[i], 3);
        ck_assert(!ZSTD_isError(n));
        ck_assert_uint_eq(ZSTD_getFrameContentSize(dst, n), sizes[i]);
        int64_t v = content_size_of(c, dst, n < 64 ? n : 64, &isnull);
        ck_assert_msg(!isnull && v == (int64_t)sizes[i], "size %zu: got %lld", sizes[i],
                      (long long)v);
    }
    /* streaming without a pledged size: the header records none */
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0)));
    ZSTD_outBuffer out = {dst, cap, 0};
    ZSTD_inBuffer in = {src, 5000, 0};
    ck_assert(!ZSTD_isError(ZSTD_compressStream2(cc, &out, &in, ZSTD_e_end)));
    ZSTD_freeCCtx(cc);
    ck_assert_uint_eq(ZSTD_getFrameContentSize(dst, out.pos), ZSTD_CONTENTSIZE_UNKNOWN);
    content_size_of(c, dst, out.pos, &isnull);
    ck_assert(isnull);

    /* hand-made headers: dictionary ids, window byte, each size field */
    uint8_t h1[] = {0x28, 0xb5, 0x2f, 0xfd, 0x83, 0x50, 1, 2, 3, 4, 0x40, 0xe2, 0x01, 0x00};
    ck_assert_int_eq(content_size_of(c, h1, sizeof h1, &isnull), 123456); /* fcs 4, did 4 */
    uint8_t h2[] = {0x28, 0xb5, 0x2f, 0xfd, 0x61, 9, 0x10, 0x00};
    ck_assert_int_eq(content_size_of(c, h2, sizeof h2, &isnull), 0x10 + 256); /* fcs 2 */
    uint8_t h3[] = {0x28, 0xb5, 0x2f, 0xfd, 0xc2, 0x50, 7, 7,
                    0x00, 0xf2, 0x05, 0x2a, 0x01, 0,    0, 0};
    ck_assert_int_eq(content_size_of(c, h3, sizeof h3, &isnull), 5000000000LL); /* fcs 8 */
    uint8_t h4[] = {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x50, 0, 0};
    content_size_of(c, h4, sizeof h4, &isnull); /* no size field */
    ck_assert(isnull);
    uint8_t h5[] = {0x28, 0xb5, 0x2f, 0xfd, 0x28, 0x10};
    content_size_of(c, h5, sizeof h5, &isnull); /* reserved bit */
    ck_assert(isnull);
    uint8_t h6[] = {0x28, 0xb5, 0x2f, 0xfc, 0x20, 0x10};
    content_size_of(c, h6, sizeof h6, &isnull); /* not a zstd frame */
    ck_assert(isnull);
    uint8_t h7[] = {0x28, 0xb5, 0x2f, 0xfd, 0x80, 0x50, 1, 2};
    content_size_of(c, h7, sizeof h7, &isnull); /* truncated */
    ck_assert(isnull);
    uint8_t h8[] = {0x28, 0xb5, 0x2f, 0xfd, 0xc0, 0x50, 0, 0, 0, 0, 0, 0, 0, 0x80};
    content_size_of(c, h8, sizeof h8, &isnull); /* beyond INT8 */
    ck_assert(isnull);
    ck_assert(qt_null(c, "SELECT qn.zstd_content_size(NULL)"));
    ck_assert(qt_null(c, "SELECT qn.zstd_content_size('')"));

    /* on a stored, out-of-line (TOAST, EXTERNAL) blob */
    struct qt_seg s;
    qt_seg_make(&s, "zsize", "", "z", 0, 50, 4000);
    PQclear(qt_push(c, &s, 1, false));
    ck_assert_int_eq(qt_i(c, "SELECT qn.zstd_content_size(s.blob) FROM queen.log_segments s "
                             "JOIN queen.log_partitions p ON p.id = s.partition_id JOIN "
                             "queen.queues q ON q.id = p.queue_id WHERE q.name = 'zsize'"),
                     200000);
    qt_seg_free(&s);
    free(src);
    free(dst);
    PQfinish(c);
}
END_TEST

/* One default per option: a replace-configured queue equals a push-created one
 * (but for namespace and task, which only a push derives from the name). */
START_TEST(test_one_truth_for_defaults)
{
    PGconn *c = qt_connect();
    qt_push1(c, "truth.a", "", "t", 0, 1);
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('truth.b', '{\"lease_time\": 7}', "
                    "false)"));
    PQclear(qt_q(c, "SELECT * FROM qn.configure_queue_v1('truth.b', '{}', true)"));
    const char *cols = "priority, lease_time, retry_limit, retry_delay, ttl, dead_letter_queue, "
                       "dlq_after_max_retries, delayed_processing, window_buffer, "
                       "retention_seconds, completed_retention_seconds, retention_enabled, "
                       "encryption_enabled, max_wait_time_seconds, max_queue_size, "
                       "min_pop_wait_time, dedup_window_seconds";
    ck_assert(qt_b(c,
                   "SELECT (SELECT row(%s) FROM queen.queues WHERE name = 'truth.a') = "
                   "(SELECT row(%s) FROM queen.queues WHERE name = 'truth.b')",
                   cols, cols));
    /* namespace and task: a push derives them from the dotted name; a replace
     * resets them to their documented default, '' */
    ck_assert_str_eq(qt_s(c, "SELECT namespace || '/' || task FROM queen.queues WHERE name = "
                             "'truth.a'"),
                     "truth/a");
    ck_assert_str_eq(qt_s(c, "SELECT namespace || '/' || task FROM queen.queues WHERE name = "
                             "'truth.b'"),
                     "/");
    ck_assert_int_eq(qt_i(c, "SELECT lease_time FROM queen.queues WHERE name = 'truth.a'"), 60);
    PQfinish(c);
}
END_TEST

Suite *qt_suite_schema(void)
{
    Suite *s = suite_create("schema");
    TCase *tc = qt_tcase("schema", fixture, 120);
    tcase_add_test(tc, test_migrate_twice_changes_nothing);
    tcase_add_test(tc, test_concurrent_migrations);
    tcase_add_test(tc, test_reapply_takes_no_blocking_lock);
    tcase_add_test(tc, test_tuning_and_shape);
    tcase_add_test(tc, test_hot_path_is_plpgsql);
    tcase_add_test(tc, test_unnest_hashes);
    tcase_add_test(tc, test_zstd_content_size);
    tcase_add_test(tc, test_one_truth_for_defaults);
    suite_add_tcase(s, tc);
    return s;
}
