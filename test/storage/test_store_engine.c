/*
 * test_store_engine.c - store_engine.c, the request engine (with store_listen.c
 * and the basics of store_pool.c), against the real PostgreSQL of the `pg`
 * fixture with plain SQL: round trips of every binary type, pipelining (one
 * connection really carries many calls), atomic multi-statement syncs, error
 * translation, connection loss and reconnect, deadlines and cancels (checked in
 * pg_stat_activity), which outcomes are in doubt, conflict retries, lanes (a
 * write passes slow reads), back-pressure, shutdown, and decoders fed malformed
 * but real results. Hung and silenced connections: test_store_pool.c.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "pgtest.h"
#include "queen/error.h"
#include "storage_test.h"
#include "store_engine.h"
#include "store_int.h"

static struct event_base *B;
static char *CI;

static void setup(void)
{
    B = event_base_new();
    ck_assert_ptr_nonnull(B);
    CI = qt_db_plain("qn_storage_engine");
}

static void teardown(void)
{
    event_base_free(B);
    free(CI);
}

/* ---------------------------------------------------------------- helpers */

struct cap {
    struct qt_status s;
    int order;     /* completion order */
    int64_t at_ms; /* completion time */
    bool ok;       /* the callback's own checks passed */
    int64_t v;     /* a value extracted by the callback */
    char text[256];
};

static int completions;

static void cap_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct cap *c = ud;
    qt_copy_status(&c->s, st);
    c->order = completions++;
    c->at_ms = qn_store_now_ms();
    c->ok = res != NULL;
    if (res && PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0))
        snprintf(c->text, sizeof c->text, "%s", PQgetvalue(res, 0, 0));
}

static int sql_async(qn_store *st, const char *sql, int64_t deadline, struct cap *c,
                     qn_store_req **req)
{
    struct qn_call_opts o = {deadline, NULL, NULL};
    memset(c, 0, sizeof *c);
    return qn__store_sql(st, -1, sql, NULL, NULL, 0, &o, cap_cb, c, req);
}

static PGconn *side(void)
{
    return qn_test_pg_connect(CI);
}

/* Waits (up to 3 s) until no backend runs a query containing pattern. */
static bool server_idle_of(PGconn *c, const char *pattern)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE "
             "'%%%s%%' AND pid <> pg_backend_pid()",
             pattern);
    for (int i = 0; i < 60; i++) {
        char *v = qn_test_pg_value(c, sql);
        bool idle = strcmp(v, "0") == 0;
        free(v);
        if (idle)
            return true;
        qt_run_for(B, 50);
    }
    return false;
}

static bool server_runs(PGconn *c, const char *pattern)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE "
             "'%%%s%%' AND pid <> pg_backend_pid()",
             pattern);
    char *v = qn_test_pg_value(c, sql);
    bool runs = strcmp(v, "0") != 0;
    free(v);
    return runs;
}

/* Runs the loop until the server runs a query containing pattern (up to 5 s):
 * the event a test means, instead of a sleep long enough on a quiet machine. */
static bool until_server_runs(PGconn *c, const char *pattern)
{
    for (int i = 0; i < 500; i++) {
        if (server_runs(c, pattern))
            return true;
        qt_run_for(B, 10);
    }
    return false;
}

/* ---------------------------------------------------------------- round trips */

struct bytea_check {
    const uint8_t *want;
    size_t n;
    struct cap c;
};

static void bytea_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct bytea_check *k = ud;
    qt_copy_status(&k->c.s, st);
    if (res == NULL)
        return;
    struct qn__row w = {res, 0, NULL, QN_OK, -1};
    size_t len;
    const uint8_t *b = qn__row_bytea(&w, 0, &len);
    int64_t server_len = qn__row_i32(&w, 1);
    k->c.ok = w.err == QN_OK && len == k->n && memcmp(b, k->want, len) == 0 &&
              server_len == (int64_t)k->n;
}

START_TEST(bytea_round_trip)
{
    qn_store *st = qt_store(B, CI, 2, 4);
    size_t n = 1u << 20;
    uint8_t *blob = malloc(n);
    for (size_t i = 0; i < n; i++)
        blob[i] = (uint8_t)(i * 7 + (i >> 9)); /* zeros included */
    struct qn__arena a;
    qn__arena_init(&a, 1 << 24);
    struct qn__params p;
    qn__params_init(&p, &a, 1);
    qn__p_bytea(&p, 0, blob, n);
    static const uint32_t types[1] = {QN_OID_BYTEA};
    struct bytea_check k;
    memset(&k, 0, sizeof k);
    k.want = blob;
    k.n = n;
    ck_assert_int_eq(
        qn__store_sql(st, -1, "SELECT $1, length($1)", types, &p, 1, NULL, bytea_cb, &k, NULL),
        QN_OK);
    qn__arena_free(&a);     /* the call copied its inputs */
    ck_assert(!k.c.s.done); /* never synchronous */
    ck_assert(qt_run_until(B, &k.c.s.done, 10000));
    ck_assert_int_eq(k.c.s.code, QN_OK);
    ck_assert(k.c.ok);
    free(blob);
    qn_store_free(st);
}
END_TEST

struct arr_check {
    struct cap c;
    bool server_equal[6];
    bool decoded_ok;
};

static void arrays_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct arr_check *k = ud;
    qt_copy_status(&k->c.s, st);
    if (res == NULL || PQntuples(res) != 1)
        return;
    struct qn__row w = {res, 0, NULL, QN_OK, -1};
    for (int i = 0; i < 6; i++)
        k->server_equal[i] = qn__row_bool(&w, i);
    /* decode the int8[] and text[] echoed back */
    struct qn__arr a;
    const uint8_t *p;
    int32_t len;
    int64_t x;
    bool ok = qn__dec_array(PQgetvalue(res, 0, 6), PQgetlength(res, 0, 6), QN_OID_INT8, 10, &a) ==
                  QN_OK &&
              a.n == 3;
    static const int64_t want[3] = {1, -2, INT64_MAX};
    for (int i = 0; ok && i < 3; i++)
        ok = qn__arr_next(&a, &p, &len) == 1 && qn__dec_i64((const char *)p, len, &x) == 0 &&
             x == want[i];
    ok = ok &&
         qn__dec_array(PQgetvalue(res, 0, 7), PQgetlength(res, 0, 7), QN_OID_TEXT, 10, &a) ==
             QN_OK &&
         a.n == 3 && a.has_null;
    ok = ok && qn__arr_next(&a, &p, &len) == 1 && len == 2 && memcmp(p, "ab", 2) == 0;
    ok = ok && qn__arr_next(&a, &p, &len) == 1 && len == -1;
    ok = ok && qn__arr_next(&a, &p, &len) == 1 && len == 0;
    k->decoded_ok = ok && w.err == QN_OK;
}

START_TEST(array_round_trips)
{
    qn_store *st = qt_store(B, CI, 1, 4);
    struct qn__arena a;
    qn__arena_init(&a, 1 << 20);
    struct qn__params p;
    qn__params_init(&p, &a, 6);
    const int64_t i8[3] = {1, -2, INT64_MAX};
    const int32_t i4[2] = {INT32_MIN, 7};
    const int16_t i2[2] = {-1, 300};
    const char *tx[3] = {"ab", NULL, ""};
    const uint8_t bin[3] = {0, 255, 1};
    const uint8_t *bp[3] = {bin, NULL, bin};
    const size_t bl[3] = {3, 0, 0};
    qn__p_arr_i64(&p, 0, i8, 3);
    qn__p_arr_i32(&p, 1, i4, 2);
    qn__p_arr_i16(&p, 2, i2, 2);
    qn__p_arr_text(&p, 3, tx, 3, NULL);
    qn__p_arr_bytea(&p, 4, bp, bl, 3);
    qn__p_arr_i64(&p, 5, NULL, 0);
    static const uint32_t types[6] = {QN_OID_INT8_ARR, QN_OID_INT4_ARR,  QN_OID_INT2_ARR,
                                      QN_OID_TEXT_ARR, QN_OID_BYTEA_ARR, QN_OID_INT8_ARR};
    struct arr_check k;
    memset(&k, 0, sizeof k);
    const char *sql = "SELECT $1 = ARRAY[1,-2,9223372036854775807]::int8[],"
                      " $2 = ARRAY[-2147483648,7]::int4[],"
                      " $3 = ARRAY[-1,300]::int2[],"
                      " $4 IS NOT DISTINCT FROM ARRAY['ab',NULL,'']::text[],"
                      " $5 IS NOT DISTINCT FROM ARRAY['\\x00ff01'::bytea,NULL,''::bytea],"
                      " $6 = '{}'::int8[] AND cardinality($6) = 0,"
                      " $1, $4";
    ck_assert_int_eq(qn__store_sql(st, -1, sql, types, &p, 1, NULL, arrays_cb, &k, NULL), QN_OK);
    qn__arena_free(&a);
    ck_assert(qt_run_until(B, &k.c.s.done, 10000));
    ck_assert_msg(k.c.s.code == QN_OK, "%s", k.c.s.message);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(k.server_equal[i], "array %d differs on the server", i);
    ck_assert(k.decoded_ok);
    qn_store_free(st);
}
END_TEST

struct scalar_check {
    struct cap c;
    bool eq[5];
    uint8_t uuid[16];
    int64_t ts;
    bool b;
    int16_t i2;
};

static void scalars_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct scalar_check *k = ud;
    qt_copy_status(&k->c.s, st);
    if (res == NULL)
        return;
    static const uint32_t t[9] = {QN_OID_BOOL,        QN_OID_BOOL, QN_OID_BOOL,
                                  QN_OID_BOOL,        QN_OID_BOOL, QN_OID_UUID,
                                  QN_OID_TIMESTAMPTZ, QN_OID_BOOL, QN_OID_INT2};
    if (qn__res_shape(res, 9, t) != QN_OK)
        return;
    struct qn__row w = {res, 0, NULL, QN_OK, -1};
    for (int i = 0; i < 5; i++)
        k->eq[i] = qn__row_bool(&w, i);
    qn__row_uuid(&w, 5, k->uuid);
    k->ts = qn__row_ts(&w, 6);
    k->b = qn__row_bool(&w, 7);
    k->i2 = qn__row_i16(&w, 8);
    k->c.ok = w.err == QN_OK;
}

START_TEST(scalar_round_trips)
{
    qn_store *st = qt_store(B, CI, 1, 4);
    struct qn__arena a;
    qn__arena_init(&a, 1 << 20);
    struct qn__params p;
    qn__params_init(&p, &a, 5);
    const uint8_t u[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                           0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    const int64_t ts = INT64_C(1614834367123456); /* 2021-03-04 05:06:07.123456 UTC */
    qn__p_uuid(&p, 0, u);
    qn__p_ts(&p, 1, ts);
    qn__p_bool(&p, 2, true);
    qn__p_i16(&p, 3, 300);
    qn__p_text(&p, 4, NULL);
    static const uint32_t types[5] = {QN_OID_UUID, QN_OID_TIMESTAMPTZ, QN_OID_BOOL, QN_OID_INT2,
                                      QN_OID_TEXT};
    struct scalar_check k;
    memset(&k, 0, sizeof k);
    const char *sql = "SELECT $1::text = '00112233-4455-6677-8899-aabbccddeeff',"
                      " $2 = '2021-03-04 05:06:07.123456+00'::timestamptz, $3, $4 = 300,"
                      " $5 IS NULL, $1, $2, $3, $4";
    ck_assert_int_eq(qn__store_sql(st, -1, sql, types, &p, 1, NULL, scalars_cb, &k, NULL), QN_OK);
    qn__arena_free(&a);
    ck_assert(qt_run_until(B, &k.c.s.done, 10000));
    ck_assert_msg(k.c.s.code == QN_OK, "%s", k.c.s.message);
    ck_assert(k.c.ok);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(k.eq[i], "value %d differs on the server", i);
    ck_assert_mem_eq(k.uuid, u, 16);
    ck_assert_int_eq(k.ts, ts);
    ck_assert(k.b);
    ck_assert_int_eq(k.i2, 300);
    qn_store_free(st);
}
END_TEST

/* ---------------------------------------------------------------- pipelining */

struct pid_cap {
    struct cap c;
    int32_t pid;
    int32_t echo;
};

static void pid_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct pid_cap *k = ud;
    qt_copy_status(&k->c.s, st);
    k->c.order = completions++;
    if (res == NULL)
        return;
    struct qn__row w = {res, 0, NULL, QN_OK, -1};
    k->pid = qn__row_i32(&w, 0);
    k->echo = qn__row_i32(&w, 1);
    k->c.ok = w.err == QN_OK;
}

static void submit_pid(qn_store *st, struct pid_cap *k, int i, const char *sql)
{
    struct qn__arena a;
    qn__arena_init(&a, 4096);
    struct qn__params p;
    qn__params_init(&p, &a, 1);
    qn__p_i32(&p, 0, i);
    static const uint32_t types[1] = {QN_OID_INT4};
    memset(k, 0, sizeof *k);
    ck_assert_int_eq(qn__store_sql(st, -1, sql, types, &p, 1, NULL, pid_cb, k, NULL), QN_OK);
    qn__arena_free(&a);
}

START_TEST(pipeline_shares_one_connection)
{
    qn_store *st = qt_store(B, CI, 1, 16);
    struct pid_cap k[16];
    completions = 0;
    for (int i = 0; i < 16; i++)
        submit_pid(st, &k[i], i, "SELECT pg_backend_pid(), $1 FROM pg_sleep(0.02)");
    int64_t t0 = qn_store_now_ms();
    ck_assert(qt_run_until_count(B, &completions, 16, 10000));
    int64_t took = qn_store_now_ms() - t0;
    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(k[i].c.s.code, QN_OK);
        ck_assert(k[i].c.ok);
        ck_assert_int_eq(k[i].echo, i);
        ck_assert_int_eq(k[i].c.order, i);    /* in order */
        ck_assert_int_eq(k[i].pid, k[0].pid); /* one backend */
    }
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.connections_up, 1);
    ck_assert_uint_eq(s.in_flight_peak, 16); /* all 16 were on the wire together */
    ck_assert_uint_eq(s.statements, 16);
    ck_assert_uint_eq(s.round_trips, 16); /* one sync per call */
    ck_assert_uint_eq(s.calls, 16);
    ck_assert_uint_eq(s.in_flight, 0);
    /* serial on the server (16 x 20 ms) but not 16 network waits apart */
    ck_assert_int_ge(took, 300);
    qn_store_free(st);
}
END_TEST

START_TEST(pool_spreads_and_depth_bounds)
{
    qn_store *st = qt_store(B, CI, 4, 2);
    struct pid_cap k[40];
    completions = 0;
    for (int i = 0; i < 40; i++)
        submit_pid(st, &k[i], i, "SELECT pg_backend_pid(), $1 FROM pg_sleep(0.01)");
    ck_assert(qt_run_until_count(B, &completions, 40, 10000));
    int32_t pids[4] = {0};
    int npids = 0;
    for (int i = 0; i < 40; i++) {
        ck_assert_int_eq(k[i].c.s.code, QN_OK);
        ck_assert_int_eq(k[i].echo, i);
        bool known = false;
        for (int j = 0; j < npids; j++)
            known = known || pids[j] == k[i].pid;
        if (!known) {
            ck_assert_int_lt(npids, 4);
            pids[npids++] = k[i].pid;
        }
    }
    ck_assert_int_eq(npids, 4);
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.connections_up, 4);
    ck_assert_uint_le(s.in_flight_peak, 2);
    ck_assert_uint_eq(s.waiting, 0);
    qn_store_free(st);
}
END_TEST

static void many(qn_store *st, int n, const char *const *sqls, struct cap *c)
{
    struct qn__params none[8];
    memset(none, 0, sizeof none);
    const uint32_t *types[8] = {NULL};
    memset(c, 0, sizeof *c);
    ck_assert_int_eq(qn__store_sql_many(st, n, NULL, sqls, types, none, NULL, cap_cb, c, NULL),
                     QN_OK);
}

START_TEST(one_sync_is_one_transaction)
{
    qn_store *st = qt_store(B, CI, 1, 8);
    struct qt_status x;
    ck_assert_int_eq(qt_exec(B, st, "CREATE TABLE t (id int PRIMARY KEY)", &x), QN_OK);
    struct cap bad, count1, good, count2;
    const char *fail[3] = {"INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)", "SELECT 1/0"};
    const char *ok[2] = {"INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)"};
    completions = 0;
    many(st, 3, fail, &bad);
    /* pipelined right behind the failed one: the session must be clean */
    sql_async(st, "SELECT count(*) FROM t", 0, &count1, NULL);
    many(st, 2, ok, &good);
    sql_async(st, "SELECT count(*) FROM t", 0, &count2, NULL);
    ck_assert(qt_run_until_count(B, &completions, 4, 10000));
    ck_assert_int_eq(bad.s.code, QN_EDB);
    ck_assert_str_eq(bad.s.sqlstate, "22012");
    ck_assert_str_eq(bad.s.message, "division by zero");
    ck_assert_int_eq(count1.s.code, QN_OK);
    ck_assert_str_eq(count1.text, "0"); /* the inserts before the error rolled back */
    ck_assert_int_eq(good.s.code, QN_OK);
    ck_assert_str_eq(count2.text, "2");
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.statements, 1 + 3 + 1 + 2 + 1);
    ck_assert_uint_eq(s.round_trips, 1 + 1 + 1 + 1 + 1);
    qn_store_free(st);
}
END_TEST

/* ---------------------------------------------------------------- error translation */

START_TEST(errors_translated)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 1;
    cfg.conflict_retries = 2;
    qn_store *st = qt_store_cfg(B, &cfg);
    struct qt_status x;
    ck_assert_int_eq(qt_exec(B, st,
                             "CREATE FUNCTION raise_it(c text, m text) RETURNS int "
                             "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION USING "
                             "ERRCODE = c, MESSAGE = m; END $$",
                             &x),
                     QN_OK);
    static const struct {
        const char *state, *msg;
        int code;
        const char *human;
    } cases[] = {
        {"23505", "QDUP duplicate transaction id in segment 0", QN_EDUPLICATE,
         "duplicate transaction id in segment 0"},
        {"P0002", "QNOTFOUND queue q", QN_ENOTFOUND, "queue q"},
        {"P0001", "QPUSH bad segment 1", QN_EDB, "bad segment 1"},
        {"22023", "QCONF invalid lease_time: negative", QN_EDB, "invalid lease_time: negative"},
        {"40001", "could not serialize access", QN_ECONFLICT, "could not serialize access"},
        {"40P01", "deadlock detected", QN_ECONFLICT, "deadlock detected"},
        {"57014", "canceling statement due to statement timeout", QN_ETIMEOUT,
         "canceling statement due to statement timeout"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT raise_it('%s', '%s')", cases[i].state, cases[i].msg);
        ck_assert_int_eq(qt_exec(B, st, sql, &x), cases[i].code);
        ck_assert_str_eq(x.sqlstate, cases[i].state);
        ck_assert_str_eq(x.message, cases[i].human);
    }
    /* the two conflicts were retried conflict_retries times each */
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.retries, 4);
    /* an unknown function: a plain database error with the server's message */
    ck_assert_int_eq(qt_exec(B, st, "SELECT no_such_function()", &x), QN_EDB);
    ck_assert_str_eq(x.sqlstate, "42883");
    ck_assert_int_eq(qt_exec(B, st, "SELECT 1", &x), QN_OK);
    ck_assert_str_eq(x.value, "1");
    qn_store_free(st);
}
END_TEST

/* ---------------------------------------------------------------- connection loss */

static int ups, downs;

static void on_state(void *ud, bool up)
{
    (void)ud;
    if (up)
        ups++;
    else
        downs++;
}

static void terminate(qn_store *st)
{
    int pid = qn__store_backend_pid(st, 0);
    ck_assert_int_gt(pid, 0);
    PGconn *c = side();
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", pid);
    char *v = qn_test_pg_value(c, sql);
    ck_assert_str_eq(v, "t");
    free(v);
    PQfinish(c);
}

START_TEST(terminated_backend_fails_calls_then_reconnects)
{
    qn_store *st = qt_store(B, CI, 1, 8);
    ups = downs = 0;
    qn_store_on_state(st, on_state, NULL);
    struct cap a, b, w;
    PGconn *c = side();
    completions = 0;
    sql_async(st, "SELECT pg_sleep(5) /* to terminate */", 0, &a, NULL);
    sql_async(st, "SELECT 2", 0, &b, NULL);
    ck_assert(until_server_runs(c, "pg_sleep(5) /* to terminate"));
    PQfinish(c);
    /* a write pipelined behind them: the server ended the session before it */
    memset(&w, 0, sizeof w);
    ck_assert_int_eq(qn__store_sql_as(st, QN__LANE_WRITE, true, "SELECT 'w'", NULL, NULL, 0, NULL,
                                      cap_cb, &w, NULL),
                     QN_OK);
    struct qn_store_stats s;
    do { /* sent */
        qt_run_for(B, 2);
        qn_store_get_stats(st, &s);
    } while (s.in_flight < 3);
    ck_assert(!a.s.done);
    terminate(st);
    ck_assert(qt_run_until_count(B, &completions, 3, 5000));
    ck_assert_int_eq(a.s.code, QN_EUNAVAILABLE);
    ck_assert_int_eq(b.s.code, QN_EUNAVAILABLE); /* pipelined behind it: never retried */
    /* the server reported the end of the session on a: w never ran, so it is not
     * in doubt although it was sent */
    ck_assert_msg(w.s.code == QN_EUNAVAILABLE, "%d %s", w.s.code, w.s.message);
    ck_assert_int_eq(downs, 1);
    /* reconnects after reconnect_min_ms */
    ck_assert(qt_run_until_count(B, &ups, 1, 5000));
    ck_assert(qn_store_is_up(st));
    struct qt_status x;
    ck_assert_int_eq(qt_exec(B, st, "SELECT 41 + 1", &x), QN_OK);
    ck_assert_str_eq(x.value, "42");
    qn_store_get_stats(st, &s);
    ck_assert_uint_ge(s.reconnects, 1);
    ck_assert_uint_eq(s.connections_up, 1);
    qn_store_free(st);
}
END_TEST

START_TEST(idle_backend_terminated)
{
    qn_store *st = qt_store(B, CI, 1, 8);
    ups = downs = 0;
    qn_store_on_state(st, on_state, NULL);
    terminate(st);
    ck_assert(qt_run_until_count(B, &downs, 1, 5000));
    ck_assert(qt_run_until_count(B, &ups, 1, 5000));
    struct qt_status x;
    ck_assert_int_eq(qt_exec(B, st, "SELECT 'back'", &x), QN_OK);
    ck_assert_str_eq(x.value, "back");
    qn_store_free(st);
}
END_TEST

START_TEST(unreachable_server)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = "host=127.0.0.1 port=1 dbname=nothing";
    cfg.pool_size = 2;
    cfg.reconnect_min_ms = 5000;
    cfg.reconnect_max_ms = 10000;
    qn_store *st = NULL;
    ck_assert_int_eq(qn_store_new(B, &cfg, &st), QN_OK);
    struct cap a;
    int rc = sql_async(st, "SELECT 1", 0, &a, NULL);
    if (rc == QN_OK) {
        /* queued while connecting: fails once every connection has failed */
        ck_assert(qt_run_until(B, &a.s.done, 5000));
        ck_assert_int_eq(a.s.code, QN_EUNAVAILABLE);
    } else {
        ck_assert_int_eq(rc, QN_EUNAVAILABLE);
    }
    qt_run_for(B, 50);
    ck_assert(!qn_store_is_up(st));
    ck_assert_int_eq(sql_async(st, "SELECT 1", 0, &a, NULL), QN_EUNAVAILABLE);
    ck_assert(!a.s.done);
    qn_store_free(st);
    /* a malformed conninfo is a configuration error */
    cfg.conninfo = "host='unterminated";
    ck_assert_int_eq(qn_store_new(B, &cfg, &st), QN_EINVAL);
    cfg.conninfo = CI;
    cfg.pool_size = 0;
    ck_assert_int_eq(qn_store_new(B, &cfg, &st), QN_EINVAL);
}
END_TEST

/* ---------------------------------------------------------------- deadlines, cancels */

START_TEST(deadline_cancels_running_statement)
{
    qn_store *st = qt_store(B, CI, 1, 8);
    PGconn *c = side();
    struct cap a, b;
    int64_t t0 = qn_store_now_ms();
    sql_async(st, "SELECT pg_sleep(10) /* deadline */", t0 + 300, &a, NULL);
    ck_assert(until_server_runs(c, "pg_sleep(10) /* deadline"));
    ck_assert(!a.s.done);
    ck_assert(qt_run_until(B, &a.s.done, 3000));
    ck_assert_int_eq(a.s.code, QN_ETIMEOUT);
    ck_assert_int_ge(a.at_ms - t0, 290);
    ck_assert_int_le(a.at_ms - t0, 1000);
    ck_assert_int_eq(a.s.calls, 1);
    /* the server stopped running it */
    ck_assert(server_idle_of(c, "pg_sleep(10) /* deadline"));
    /* the session is fine for the next call */
    sql_async(st, "SELECT 'next'", 0, &b, NULL);
    ck_assert(qt_run_until(B, &b.s.done, 3000));
    ck_assert_int_eq(b.s.code, QN_OK);
    ck_assert_str_eq(b.text, "next");
    ck_assert_int_eq(a.s.calls, 1); /* never called again */
    PQfinish(c);
    qn_store_free(st);
}
END_TEST

/* The deadline of a sent call that may write: when it passes, nobody knows
 * whether the call will commit, so the answer is QN_EINDOUBT, never
 * QN_ETIMEOUT ("nothing written"). (Here the server cancel that follows makes the
 * statement fail; test_store_pool.c has the case where it committed.) */
START_TEST(deadline_of_a_sent_write_is_in_doubt)
{
    qn_store *st = qt_store(B, CI, 1, 4);
    struct qt_status x;
    ck_assert_int_eq(qt_exec(B, st, "CREATE TABLE dl (v int)", &x), QN_OK);
    PGconn *c = side();
    struct cap w, q;
    memset(&w, 0, sizeof w);
    int64_t t0 = qn_store_now_ms();
    struct qn_call_opts o = {t0 + 300, NULL, NULL};
    ck_assert_int_eq(qn__store_sql_as(st, QN__LANE_WRITE, true,
                                      "WITH i AS (INSERT INTO dl VALUES (1) RETURNING v) "
                                      "SELECT pg_sleep(2) /* held */ FROM i",
                                      NULL, NULL, 0, &o, cap_cb, &w, NULL),
                     QN_OK);
    ck_assert(until_server_runs(c, "/* held */"));
    ck_assert(qt_run_until(B, &w.s.done, 3000));
    ck_assert_msg(w.s.code == QN_EINDOUBT, "%d %s", w.s.code, w.s.message);
    ck_assert_int_ge(w.at_ms - t0, 290);
    ck_assert_int_le(w.at_ms - t0, 1000);
    /* the same for a read is a plain timeout */
    memset(&q, 0, sizeof q);
    t0 = qn_store_now_ms();
    o.deadline_ms = t0 + 200;
    ck_assert_int_eq(qn__store_sql_as(st, QN__LANE_READ, false, "SELECT pg_sleep(2) /* read */",
                                      NULL, NULL, 0, &o, cap_cb, &q, NULL),
                     QN_OK);
    ck_assert(qt_run_until(B, &q.s.done, 3000));
    ck_assert_int_eq(q.s.code, QN_ETIMEOUT);
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.in_doubt, 1);
    ck_assert(server_idle_of(c, "/* held */"));
    ck_assert_int_eq(qt_exec(B, st, "SELECT count(*) FROM dl", &x), QN_OK);
    ck_assert_str_eq(x.value, "0"); /* cancelled after all: in doubt is "unknown" */
    PQfinish(c);
    qn_store_free(st);
}
END_TEST

START_TEST(deadline_of_queued_and_pipelined_calls)
{
    qn_store *st = qt_store(B, CI, 1, 2);
    struct cap a, b, c, d;
    int64_t t0 = qn_store_now_ms();
    completions = 0;
    sql_async(st, "SELECT 'a' FROM pg_sleep(0.6)", 0, &a, NULL);
    sql_async(st, "SELECT 'b'", t0 + 150, &b, NULL); /* pipelined behind a */
    sql_async(st, "SELECT 'c'", t0 + 150, &c, NULL); /* queued: depth 2 */
    sql_async(st, "SELECT 'd'", 0, &d, NULL);
    ck_assert(qt_run_until_count(B, &completions, 4, 5000));
    ck_assert_int_eq(b.s.code, QN_ETIMEOUT);
    ck_assert_int_eq(c.s.code, QN_ETIMEOUT);
    ck_assert_int_lt(b.at_ms - t0, 500);
    ck_assert_int_lt(c.at_ms - t0, 500);
    /* b was not the running statement: no cancel, a completes normally */
    ck_assert_int_eq(a.s.code, QN_OK);
    ck_assert_str_eq(a.text, "a");
    ck_assert_int_eq(d.s.code, QN_OK);
    ck_assert_str_eq(d.text, "d");
    qn_store_free(st);
}
END_TEST

START_TEST(cancel_means_no_callback)
{
    qn_store *st = qt_store(B, CI, 1, 1);
    PGconn *c = side();
    struct cap a, b, d;
    qn_store_req *ra = NULL, *rb = NULL;
    sql_async(st, "SELECT pg_sleep(10) /* cancel me */", 0, &a, &ra);
    sql_async(st, "SELECT 'b'", 0, &b, &rb); /* queued (depth 1) */
    qn_store_cancel(rb);
    ck_assert(until_server_runs(c, "cancel me"));
    qn_store_cancel(ra);
    ck_assert(server_idle_of(c, "cancel me"));
    sql_async(st, "SELECT 'after'", 0, &d, NULL);
    ck_assert(qt_run_until(B, &d.s.done, 3000));
    ck_assert_int_eq(d.s.code, QN_OK);
    ck_assert_str_eq(d.text, "after");
    qt_run_for(B, 100);
    ck_assert_int_eq(a.s.calls, 0);
    ck_assert_int_eq(b.s.calls, 0);
    qn_store_cancel(NULL);
    PQfinish(c);
    qn_store_free(st);
}
END_TEST

START_TEST(statement_timeout_is_timeout)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 1;
    cfg.stmt_timeout_ms = 300;
    qn_store *st = qt_store_cfg(B, &cfg);
    struct cap a;
    int64_t t0 = qn_store_now_ms();
    sql_async(st, "SELECT pg_sleep(3)", 0, &a, NULL);
    ck_assert(qt_run_until(B, &a.s.done, 3000));
    ck_assert_int_eq(a.s.code, QN_ETIMEOUT);
    ck_assert_str_eq(a.s.sqlstate, "57014");
    ck_assert_int_lt(a.at_ms - t0, 1500);
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.retries, 0); /* not a stray cancel: no retry */
    qn_store_free(st);
}
END_TEST

START_TEST(stray_cancel_is_retried)
{
    qn_store *st = qt_store(B, CI, 1, 4);
    struct cap a;
    PGconn *c = side();
    sql_async(st, "SELECT 'survived' FROM pg_sleep(0.4)", 0, &a, NULL);
    ck_assert(until_server_runs(c, "FROM pg_sleep(0.4)"));
    PQfinish(c);
    /* a cancel that was not aimed at this call lands on it */
    int64_t t_cancel = qn_store_now_ms();
    ck_assert_int_eq(qn__store_cancel_current(st, 0), QN_OK);
    ck_assert(qt_run_until(B, &a.s.done, 5000));
    ck_assert_msg(a.s.code == QN_OK, "%s", a.s.message);
    ck_assert_str_eq(a.text, "survived");
    ck_assert_int_ge(a.at_ms - t_cancel, 390); /* ran again, whole, after the cancel */
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    /* Once as a rule; on a loaded machine PostgreSQL has been seen to fail the
     * resent statement with the same "user request" cancel, which is retried too
     * (bounded at 3). */
    ck_assert_uint_ge(s.retries, 1);
    ck_assert_uint_le(s.retries, 3);
    qn_store_free(st);
}
END_TEST

/* A cancel requested while the session is idle can land on the next statement
 * sent, after the cancel counter moved: that call was not the target either and
 * must be retried, not failed. */
START_TEST(cancel_landing_on_a_later_call_is_retried)
{
    qn_store *st = qt_store(B, CI, 1, 4);
    struct cap warm;
    sql_async(st, "SELECT 1", 0, &warm, NULL);
    ck_assert(qt_run_until(B, &warm.s.done, 5000));
    for (int round = 0; round < 5; round++) {
        struct cap b;
        ck_assert_int_eq(qn__store_cancel_current(st, 0), QN_OK);
        sql_async(st, "SELECT 'survived' FROM pg_sleep(0.2)", 0, &b, NULL);
        ck_assert(qt_run_until(B, &b.s.done, 5000));
        ck_assert_msg(b.s.code == QN_OK, "round %d: %s", round, b.s.message);
        ck_assert_str_eq(b.text, "survived");
    }
    qn_store_free(st);
}
END_TEST

/* ---------------------------------------------------------------- conflicts */

static void deadlock_pair(qn_store *st, struct cap *x, struct cap *y)
{
    const char *one[3] = {"UPDATE d SET v = v + 1 WHERE id = 1", "SELECT pg_sleep(0.3)",
                          "UPDATE d SET v = v + 1 WHERE id = 2"};
    const char *two[3] = {"UPDATE d SET v = v + 1 WHERE id = 2", "SELECT pg_sleep(0.3)",
                          "UPDATE d SET v = v + 1 WHERE id = 1"};
    completions = 0;
    many(st, 3, one, x);
    many(st, 3, two, y);
    ck_assert(qt_run_until_count(B, &completions, 2, 15000));
}

START_TEST(deadlock_is_retried)
{
    qn_store *st = qt_store(B, CI, 2, 4);
    struct qt_status q;
    ck_assert_int_eq(qt_exec(B, st, "CREATE TABLE d (id int PRIMARY KEY, v int)", &q), QN_OK);
    ck_assert_int_eq(qt_exec(B, st, "INSERT INTO d VALUES (1, 0), (2, 0)", &q), QN_OK);
    ck_assert_int_eq(qt_exec(B, st,
                             "ALTER DATABASE qn_storage_engine SET deadlock_timeout = "
                             "'100ms'",
                             &q),
                     QN_OK);
    qn_store_free(st);
    st = qt_store(B, CI, 2, 4); /* new sessions pick the setting up */
    struct cap x, y;
    deadlock_pair(st, &x, &y);
    ck_assert_msg(x.s.code == QN_OK, "%s", x.s.message);
    ck_assert_msg(y.s.code == QN_OK, "%s", y.s.message);
    ck_assert_int_eq(qt_exec(B, st, "SELECT string_agg(v::text, ',' ORDER BY id) FROM d", &q),
                     QN_OK);
    ck_assert_str_eq(q.value, "2,2"); /* each transaction applied exactly once */
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_ge(s.retries, 1);
    qn_store_free(st);

    /* without retries the loser sees QN_ECONFLICT */
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 2;
    cfg.write_reserve = 0;
    cfg.conflict_retries = 0;
    st = qt_store_cfg(B, &cfg);
    deadlock_pair(st, &x, &y);
    ck_assert_int_eq((x.s.code == QN_ECONFLICT) + (y.s.code == QN_ECONFLICT), 1);
    ck_assert_int_eq((x.s.code == QN_OK) + (y.s.code == QN_OK), 1);
    ck_assert_str_eq(x.s.code == QN_ECONFLICT ? x.s.sqlstate : y.s.sqlstate, "40P01");
    qn_store_free(st);
}
END_TEST

/* A call that always conflicts (40001), counting its attempts in a sequence,
 * which a rollback does not undo. */
static qn_store *conflicting_store(int retries)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 1;
    cfg.conflict_retries = retries;
    qn_store *st = qt_store_cfg(B, &cfg);
    struct qt_status q;
    ck_assert_int_eq(qt_exec(B, st, "CREATE SEQUENCE IF NOT EXISTS tries", &q), QN_OK);
    ck_assert_int_eq(qt_exec(B, st,
                             "CREATE OR REPLACE FUNCTION always_conflict() RETURNS int "
                             "LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('tries'); "
                             "RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'conflict'; "
                             "END $$",
                             &q),
                     QN_OK);
    return st;
}

static int64_t tries_so_far(qn_store *st)
{
    struct qt_status q;
    ck_assert_int_eq(
        qt_exec(B, st, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM tries", &q),
        QN_OK);
    return strtoll(q.value, NULL, 10);
}

/* A call waiting out a conflict backoff still ends at its deadline, is never
 * sent again after it, and a cancel of it means no callback and no attempt. */
START_TEST(conflict_backoff_ends_at_deadline_or_cancel)
{
    qn_store *st = conflicting_store(30); /* ~7 s of backoff in all */
    int64_t before = tries_so_far(st);
    struct cap a;
    int64_t t0 = qn_store_now_ms();
    sql_async(st, "SELECT always_conflict()", t0 + 400, &a, NULL);
    ck_assert(qt_run_until(B, &a.s.done, 5000));
    ck_assert_int_eq(a.s.code, QN_ETIMEOUT);
    ck_assert_int_ge(a.at_ms - t0, 350); /* (the loop's clock is cached) */
    ck_assert_int_lt(a.at_ms - t0, 2000);
    int64_t at_deadline = tries_so_far(st);
    ck_assert_int_ge(at_deadline - before, 3); /* it was retried before the deadline */
    qt_run_for(B, 700); /* more than two of the longest backoffs (< 320 ms) */
    ck_assert_int_eq(tries_so_far(st), at_deadline);
    ck_assert_int_eq(a.s.calls, 1);

    /* cancelled while in backoff */
    struct cap b;
    qn_store_req *rb = NULL;
    sql_async(st, "SELECT always_conflict()", 0, &b, &rb);
    bool in_backoff = false;
    for (int i = 0; i < 1000 && !in_backoff; i++) {
        qt_run_for(B, 5);
        in_backoff = rb->state == QN__REQ_QUEUED && rb->waitq == QN__WAIT_BACKOFF &&
                     rb->conflict_retries >= 2;
    }
    ck_assert(in_backoff);
    int64_t at_cancel = tries_so_far(st);
    qn_store_cancel(rb);
    qt_run_for(B, 700);
    ck_assert_int_eq(tries_so_far(st), at_cancel);
    ck_assert_int_eq(b.s.calls, 0);
    struct qt_status q;
    ck_assert_int_eq(qt_exec(B, st, "SELECT 'after'", &q), QN_OK);
    ck_assert_str_eq(q.value, "after");
    qn_store_free(st);
}
END_TEST

/* ---------------------------------------------------------------- lanes */

struct lane_cap {
    struct cap c;
    int32_t pid;
};

static void lane_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct lane_cap *k = ud;
    cap_cb(&k->c, st, res);
    if (res != NULL && PQntuples(res) == 1 && PQnfields(res) >= 1)
        k->pid = (int32_t)strtol(PQgetvalue(res, 0, 0), NULL, 10);
}

/* Slow reads fill every connection they may use; a write still completes at
 * once, on a connection reserved for writes, which no read ever used. With no
 * reserved connection the same write waits behind the reads (the control: the
 * test catches a pool without lanes). */
static int64_t write_behind_reads(int reserve, int *read_on_reserved)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 4;
    cfg.pipeline_depth = 2;
    cfg.write_reserve = reserve;
    qn_store *st = qt_store_cfg(B, &cfg);
    int reserved_pid = reserve > 0 ? qn__store_backend_pid(st, 0) : 0;
    struct lane_cap rd[12], w;
    completions = 0;
    for (int i = 0; i < 12; i++) {
        memset(&rd[i], 0, sizeof rd[i]);
        ck_assert_int_eq(qn__store_sql_as(st, QN__LANE_READ, false,
                                          "SELECT pg_backend_pid() FROM pg_sleep(1.5)", NULL, NULL,
                                          0, NULL, lane_cb, &rd[i], NULL),
                         QN_OK);
    }
    PGconn *c = side();
    int busy = reserve > 0 ? 3 : 4;
    char *v = NULL;
    for (int i = 0; i < 500; i++) { /* the reads are running on every read connection */
        free(v);
        v = qn_test_pg_value(c, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                                "AND query LIKE '%FROM pg_sleep(1.5)%' AND pid <> "
                                "pg_backend_pid()");
        if (atoi(v) >= busy)
            break;
        qt_run_for(B, 10);
    }
    ck_assert_int_ge(atoi(v), busy);
    free(v);
    PQfinish(c);
    memset(&w, 0, sizeof w);
    int64_t t0 = qn_store_now_ms();
    ck_assert_int_eq(qn__store_sql_as(st, QN__LANE_WRITE, true, "SELECT pg_backend_pid()", NULL,
                                      NULL, 0, NULL, lane_cb, &w, NULL),
                     QN_OK);
    ck_assert(qt_run_until(B, &w.c.s.done, 10000));
    int64_t took = w.c.at_ms - t0;
    ck_assert_int_eq(w.c.s.code, QN_OK);
    ck_assert(qt_run_until_count(B, &completions, 13, 15000));
    *read_on_reserved = 0;
    for (int i = 0; i < 12; i++) {
        ck_assert_int_eq(rd[i].c.s.code, QN_OK);
        if (reserve > 0 && rd[i].pid == reserved_pid)
            (*read_on_reserved)++;
    }
    if (reserve > 0)
        ck_assert_int_eq(w.pid, reserved_pid);
    qn_store_free(st);
    return took;
}

START_TEST(a_write_passes_slow_reads)
{
    int on_reserved = -1;
    int64_t took = write_behind_reads(1, &on_reserved);
    ck_assert_msg(took < 500, "the write took %lld ms behind the reads", (long long)took);
    ck_assert_int_eq(on_reserved, 0);
    took = write_behind_reads(0, &on_reserved);
    ck_assert_msg(took >= 1000, "without a reserved connection the write took %lld ms",
                  (long long)took);
}
END_TEST

START_TEST(lane_configuration)
{
    struct qn_store_config cfg;
    qn_store *st = NULL;
    qn_store_config_defaults(&cfg);
    ck_assert_int_eq(cfg.write_reserve, -1);
    cfg.conninfo = CI;
    cfg.pool_size = 2;
    cfg.write_reserve = 2; /* reads would have no connection */
    ck_assert_int_eq(qn_store_new(B, &cfg, &st), QN_EINVAL);
    cfg.pool_size = 1;
    cfg.write_reserve = -1; /* derived: 0 for a pool of one, reads and writes share it */
    st = qt_store_cfg(B, &cfg);
    struct qt_status x;
    ck_assert_int_eq(qt_exec(B, st, "SELECT 1", &x), QN_OK);
    qn_store_free(st);
}
END_TEST

/* ---------------------------------------------------------------- limits, shutdown */

START_TEST(max_waiting_is_busy)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 1;
    cfg.pipeline_depth = 1;
    cfg.max_waiting = 2;
    qn_store *st = qt_store_cfg(B, &cfg);
    struct cap a, b, c;
    completions = 0;
    ck_assert_int_eq(sql_async(st, "SELECT 1", 0, &a, NULL), QN_OK);
    ck_assert_int_eq(sql_async(st, "SELECT 2", 0, &b, NULL), QN_OK);
    ck_assert_int_eq(sql_async(st, "SELECT 3", 0, &c, NULL), QN_EBUSY);
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.waiting, 2);
    ck_assert(qt_run_until_count(B, &completions, 2, 5000));
    ck_assert_int_eq(a.s.code, QN_OK);
    ck_assert_int_eq(b.s.code, QN_OK);
    ck_assert_int_eq(c.s.calls, 0);
    qn_store_free(st);
}
END_TEST

START_TEST(free_fails_pending_calls)
{
    qn_store *st = qt_store(B, CI, 1, 1);
    struct cap a, b;
    sql_async(st, "SELECT pg_sleep(2)", 0, &a, NULL);
    sql_async(st, "SELECT 2", 0, &b, NULL);
    qt_run_for(B, 100);
    qn_store_free(st);
    ck_assert_int_eq(a.s.calls, 1);
    ck_assert_int_eq(a.s.code, QN_ESHUTDOWN);
    ck_assert_int_eq(b.s.calls, 1);
    ck_assert_int_eq(b.s.code, QN_ESHUTDOWN);
    qn_store_free(NULL);
}
END_TEST

static qn_store *victim;
static struct cap later;

static void free_in_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    cap_cb(ud, st, res);
    struct cap tmp;
    /* new calls from a callback are fine; then free the store from inside */
    ck_assert_int_eq(sql_async(victim, "SELECT 3", 0, &later, NULL), QN_OK);
    qn_store_free(victim);
    ck_assert_int_eq(sql_async(victim, "SELECT 4", 0, &tmp, NULL) == QN_OK, 0);
}

START_TEST(free_inside_a_callback)
{
    victim = qt_store(B, CI, 1, 4);
    struct cap a, b;
    memset(&a, 0, sizeof a);
    ck_assert_int_eq(
        qn__store_sql(victim, -1, "SELECT 1", NULL, NULL, 0, NULL, free_in_cb, &a, NULL), QN_OK);
    sql_async(victim, "SELECT pg_sleep(0.2)", 0, &b, NULL);
    ck_assert(qt_run_until(B, &a.s.done, 5000));
    ck_assert_int_eq(a.s.code, QN_OK);
    ck_assert_int_eq(b.s.calls, 1);
    ck_assert_int_eq(b.s.code, QN_ESHUTDOWN);
    ck_assert_int_eq(later.s.calls, 1);
    ck_assert_int_eq(later.s.code, QN_ESHUTDOWN);
    qt_run_for(B, 50); /* nothing left registered on the loop */
}
END_TEST

/* ---------------------------------------------------------------- malformed results */

struct decode_case {
    const char *sql;
    int stmt; /* the statement whose decoder runs */
    qn__decode_fn fn;
    size_t expect;
    int want; /* QN_OK or QN_EPROTOCOL_DB */
    bool text_format;
};

static qn_store *dec_st;
static int dec_got;

static void decode_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    const struct decode_case *k = ud;
    ck_assert_msg(st->code == QN_OK, "%s: %s", k->sql, st->message);
    qn_store_req *r = NULL;
    ck_assert_int_eq(qn__req_new(dec_st, 1, NULL, &r), QN_OK);
    struct qn__step *s = qn__req_add(r, k->stmt, k->fn);
    s->expect = k->expect;
    dec_got = k->fn(r, 0, res);
    qn__req_discard(r);
}

START_TEST(malformed_results_are_protocol_errors)
{
    dec_st = qt_store(B, CI, 1, 4);
    static const char *const P = "SELECT %s::int4 AS r_ord, gen_random_uuid(), 60::int4, "
                                 "%s::int2, %s::int8, now(), %s::int4, %s::int8";
    char sql[40][512];
    struct decode_case cases[40];
    int n = 0;
#define PUSH(ord, status, base, idx, off, expect, want)                                            \
    do {                                                                                           \
        snprintf(sql[n], sizeof sql[n], P, ord, status, base, idx, off);                           \
        cases[n] =                                                                                 \
            (struct decode_case){sql[n], QN_STMT_PUSH, qn__decode_push, expect, want, false};      \
        n++;                                                                                       \
    } while (0)
    PUSH("0", "0", "10", "NULL", "NULL", 1, QN_OK);
    PUSH("1", "0", "10", "NULL", "NULL", 1, QN_EPROTOCOL_DB);   /* ord out of range */
    PUSH("-1", "0", "10", "NULL", "NULL", 1, QN_EPROTOCOL_DB);  /* negative ord */
    PUSH("0", "7", "10", "NULL", "NULL", 1, QN_EPROTOCOL_DB);   /* unknown status */
    PUSH("0", "0", "NULL", "NULL", "NULL", 1, QN_EPROTOCOL_DB); /* queued without base */
    PUSH("0", "0", "10", "NULL", "NULL", 2, QN_EPROTOCOL_DB);   /* a segment without rows */
    PUSH("0", "1", "NULL", "NULL", "5", 1, QN_EPROTOCOL_DB);    /* duplicate without idx */
    PUSH("NULL", "0", "10", "NULL", "NULL", 1, QN_EPROTOCOL_DB);
    PUSH("0", "1", "NULL", "-3", "5", 1, QN_EPROTOCOL_DB); /* negative frame index */
    PUSH("0", "1", "NULL", "2", "5", 1, QN_OK);
    /* two rows: queued twice; duplicates out of order */
    cases[n++] = (struct decode_case){
        "SELECT 0::int4, gen_random_uuid(), 1::int4, 0::int2, 1::int8, now(), NULL::int4, "
        "NULL::int8 FROM generate_series(1, 2)",
        QN_STMT_PUSH,
        qn__decode_push,
        1,
        QN_EPROTOCOL_DB,
        false};
    cases[n++] = (struct decode_case){
        "SELECT 0::int4, gen_random_uuid(), 1::int4, 1::int2, NULL::int8, NULL::timestamptz, "
        "(3 - g)::int4, 9::int8 FROM generate_series(1, 2) g",
        QN_STMT_PUSH,
        qn__decode_push,
        1,
        QN_EPROTOCOL_DB,
        false};
    /* wrong shapes */
    cases[n++] =
        (struct decode_case){"SELECT 1", QN_STMT_PUSH, qn__decode_push, 1, QN_EPROTOCOL_DB, false};
    cases[n++] = (struct decode_case){
        "SELECT 0::int8, gen_random_uuid(), 1::int4, 0::int2, 1::int8, now(), NULL::int4, "
        "NULL::int8",
        QN_STMT_PUSH,
        qn__decode_push,
        1,
        QN_EPROTOCOL_DB,
        false};
    cases[n++] = (struct decode_case){
        "SELECT 0::int4, gen_random_uuid(), 1::int4, 0::int2, 1::int8, now(), NULL::int4, "
        "NULL::int8",
        QN_STMT_PUSH,
        qn__decode_push,
        1,
        QN_EPROTOCOL_DB,
        true};
    /* ack: summary missing, item twice, outcome out of range, fine */
    cases[n++] = (struct decode_case){
        "SELECT 0::int4, 1::int2, 5::int8, NULL::int4, NULL::int8, NULL::int8, NULL::bytea",
        QN_STMT_ACK,
        qn__decode_ack,
        1,
        QN_EPROTOCOL_DB,
        false};
    cases[n++] = (struct decode_case){
        "SELECT i::int4, 1::int2, 5::int8, 0::int4, 5::int8, NULL::int8, NULL::bytea "
        "FROM (VALUES (0), (0), (-1)) v(i)",
        QN_STMT_ACK,
        qn__decode_ack,
        1,
        QN_EPROTOCOL_DB,
        false};
    cases[n++] = (struct decode_case){
        "SELECT i::int4, 9::int2, 5::int8, 0::int4, 5::int8, NULL::int8, NULL::bytea "
        "FROM (VALUES (0), (-1)) v(i)",
        QN_STMT_ACK,
        qn__decode_ack,
        1,
        QN_EPROTOCOL_DB,
        false};
    cases[n++] = (struct decode_case){
        "SELECT i::int4, 1::int2, 5::int8, 0::int4, 5::int8, NULL::int8, NULL::bytea "
        "FROM (VALUES (0), (-1)) v(i)",
        QN_STMT_ACK,
        qn__decode_ack,
        1,
        QN_OK,
        false};
    cases[n++] = (struct decode_case){
        "SELECT 5::int4, 1::int2, 5::int8, 0::int4, 5::int8, NULL::int8, NULL::bytea",
        QN_STMT_ACK,
        qn__decode_ack,
        1,
        QN_EPROTOCOL_DB,
        false};
    ck_assert_int_le(n, 40);
    for (int i = 0; i < n; i++) {
        struct cap dummy;
        (void)dummy;
        dec_got = 12345;
        ck_assert_int_eq(qn__store_sql(dec_st, -1, cases[i].sql, NULL, NULL,
                                       cases[i].text_format ? 0 : 1, NULL, decode_cb, &cases[i],
                                       NULL),
                         QN_OK);
        int64_t end = qn_store_now_ms() + 5000;
        while (dec_got == 12345 && qn_store_now_ms() < end)
            qt_run_for(B, 5);
        ck_assert_msg(dec_got == cases[i].want, "case %d (%s): got %d want %d", i, cases[i].sql,
                      dec_got, cases[i].want);
    }
    qn_store_free(dec_st);
}
END_TEST

/* ---------------------------------------------------------------- listen */

static char heard[256];
static int nheard;

static void on_push(void *ud, const char *payload)
{
    (void)ud;
    snprintf(heard, sizeof heard, "%s", payload);
    nheard++;
}

START_TEST(listen_push_hears_notifications)
{
    qn_store *st = qt_store(B, CI, 1, 4);
    nheard = 0;
    ck_assert_int_eq(qn_store_listen_push(st, on_push, NULL), QN_OK);
    PGconn *c = side();
    /* the listener connects asynchronously: notify until it hears */
    for (int i = 0; i < 40 && nheard == 0; i++) {
        PQclear(qn_test_pg_exec(c, "NOTIFY queen_push, 'tenant/q1'"));
        qt_run_for(B, 50);
    }
    ck_assert_int_ge(nheard, 1);
    ck_assert_str_eq(heard, "tenant/q1");
    /* stopping: nothing heard afterwards */
    ck_assert_int_eq(qn_store_listen_push(st, NULL, NULL), QN_OK);
    qt_run_for(B, 100);
    int before = nheard;
    PQclear(qn_test_pg_exec(c, "NOTIFY queen_push, 'tenant/q2'"));
    qt_run_for(B, 200);
    ck_assert_int_eq(nheard, before);
    PQfinish(c);
    qn_store_free(st);
}
END_TEST

/* Two stores of one family (a broker's two event loops): a NOTIFY that either
 * sent is the broker's own and reaches neither listener (the broker woke every
 * loop's waiters at the commit); another session's is heard. (A store of
 * another family is another broker: test_admin.c's notify_push_reaches_listeners.) */
START_TEST(listen_ignores_its_family_notifies)
{
    struct qn_store_family *fam = NULL;
    ck_assert_int_eq(qn_store_family_new(&fam), QN_OK);
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = CI;
    cfg.pool_size = 2;
    cfg.pipeline_depth = 4;
    cfg.write_reserve = 0;
    cfg.family = fam;
    qn_store *st = qt_store_cfg(B, &cfg);
    qn_store *other = qt_store_cfg(B, &cfg);
    nheard = 0;
    ck_assert_int_eq(qn_store_listen_push(st, on_push, NULL), QN_OK);
    PGconn *c = side();
    for (int i = 0; i < 40 && nheard == 0; i++) {
        PQclear(qn_test_pg_exec(c, "NOTIFY queen_push, 'tenant/warm'"));
        qt_run_for(B, 50);
    }
    ck_assert_int_ge(nheard, 1);
    qt_run_for(B, 200); /* a late warm-up notification lands before the count */
    int before = nheard;
    qn_store *senders[] = {other, st};
    for (int i = 0; i < 2; i++) {
        struct pid_cap k;
        completions = 0;
        submit_pid(
            senders[i], &k, i,
            "SELECT pg_backend_pid(), $1 FROM (SELECT pg_notify('queen_push', 'tenant/mine')) n");
        ck_assert(qt_run_until_count(B, &completions, 1, 5000));
        ck_assert_int_eq(k.c.s.code, QN_OK);
    }
    /* notifications arrive in commit order: the marker comes after both */
    PQclear(qn_test_pg_exec(c, "NOTIFY queen_push, 'tenant/marker'"));
    ck_assert(qt_run_until_count(B, &nheard, before + 1, 5000));
    qt_run_for(B, 100);
    ck_assert_int_eq(nheard, before + 1);
    ck_assert_str_eq(heard, "tenant/marker");
    PQfinish(c);
    qn_store_free(other);
    qn_store_free(st);
    qt_run_for(B, 50); /* the stores close on the loop */
    qn_store_family_free(fam);
}
END_TEST

Suite *qn_test_store_engine_suite(void)
{
    Suite *s = suite_create("store_engine");
    TCase *t = tcase_create("store_engine");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, bytea_round_trip);
    tcase_add_test(t, array_round_trips);
    tcase_add_test(t, scalar_round_trips);
    tcase_add_test(t, pipeline_shares_one_connection);
    tcase_add_test(t, pool_spreads_and_depth_bounds);
    tcase_add_test(t, one_sync_is_one_transaction);
    tcase_add_test(t, errors_translated);
    tcase_add_test(t, terminated_backend_fails_calls_then_reconnects);
    tcase_add_test(t, idle_backend_terminated);
    tcase_add_test(t, unreachable_server);
    tcase_add_test(t, deadline_cancels_running_statement);
    tcase_add_test(t, deadline_of_a_sent_write_is_in_doubt);
    tcase_add_test(t, deadline_of_queued_and_pipelined_calls);
    tcase_add_test(t, cancel_means_no_callback);
    tcase_add_test(t, statement_timeout_is_timeout);
    tcase_add_test(t, stray_cancel_is_retried);
    tcase_add_test(t, cancel_landing_on_a_later_call_is_retried);
    tcase_add_test(t, deadlock_is_retried);
    tcase_add_test(t, conflict_backoff_ends_at_deadline_or_cancel);
    tcase_add_test(t, a_write_passes_slow_reads);
    tcase_add_test(t, lane_configuration);
    tcase_add_test(t, max_waiting_is_busy);
    tcase_add_test(t, free_fails_pending_calls);
    tcase_add_test(t, free_inside_a_callback);
    tcase_add_test(t, malformed_results_are_protocol_errors);
    tcase_add_test(t, listen_push_hears_notifications);
    tcase_add_test(t, listen_ignores_its_family_notifies);
    suite_add_tcase(s, t);
    return s;
}
