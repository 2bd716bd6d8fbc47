/*
 * test_maint_loop.c - broker/src/engine/maint_loop.c against the real
 * PostgreSQL: the maintenance loop of the retention seed, driven cycle by cycle
 * on the test's own event loop (qn_maint_run_once). Its own runner (the shared
 * main of test/support/check_main.c with the table below): it builds a schema
 * template database first.
 *
 * Time is controlled in SQL (rows stamped in the past), concurrency with held
 * locks from plain test connections; the tests wait on conditions (a cycle's
 * callback, a lock showing up in pg_locks), never on sleeps.
 *
 * Usage: test_maint_loop [--suite maint_loop]. Builds a schema template database
 * first; every test clones it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <event2/event.h>
#include <libpq-fe.h>

#include "check_main.h"
#include "engine/maint_loop.h"
#include "log.h"
#include "pgtest.h"
#include "queen/error.h"
#include "queen/migrate.h"
#include "queen/store.h"

#define TEMPLATE_DB "qn_maint_tmpl"

/* Appends p_n segments of p_frames frames (and their sidecar rows) to a
 * partition, stamped p_ts, keeping the partition's watermarks true as push
 * does. SQL never looks inside blobs, so the bytes are a placeholder. */
static const char *const HELPERS =
    "CREATE FUNCTION public.qt_add(p_pid UUID, p_n INT, p_frames INT, p_ts TIMESTAMPTZ) "
    "RETURNS VOID LANGUAGE plpgsql AS $$ "
    "DECLARE v_last INT8; "
    "BEGIN "
    "  SELECT last_offset INTO v_last FROM queen.log_partitions WHERE id = p_pid FOR UPDATE; "
    "  INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob) "
    "  SELECT p_pid, v_last + 1 + (g - 1) * p_frames, v_last + g * p_frames, p_ts, "
    "         '\\x00'::bytea FROM generate_series(1, p_n) g; "
    "  INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes) "
    "  SELECT p_pid, v_last + 1 + (g - 1) * p_frames, v_last + g * p_frames, p_ts, "
    "         decode(repeat('00', 16 * p_frames), 'hex') FROM generate_series(1, p_n) g; "
    "  UPDATE queen.log_partitions SET last_offset = v_last + p_n * p_frames, "
    "         oldest_live_at = coalesce(oldest_live_at, p_ts), "
    "         oldest_txn_at = coalesce(oldest_txn_at, p_ts) "
    "  WHERE id = p_pid; "
    "END $$";

/* ---------------------------------------------------------------- databases */

static char *with_dbname(const char *base, const char *db)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(base, &err);
    if (opts == NULL) {
        PQfreemem(err);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *out = calloc(1, cap);
    for (PQconninfoOption *o = opts; out && o->keyword; o++) {
        const char *v = strcmp(o->keyword, "dbname") == 0 ? db : o->val;
        if (v == NULL || !*v)
            continue;
        n += (size_t)snprintf(out + n, cap - n, "%s='%s' ", o->keyword, v);
    }
    if (out && strstr(out, "dbname=") == NULL)
        snprintf(out + n, cap - n, "dbname='%s' ", db);
    PQconninfoFree(opts);
    return out;
}

static bool admin(const char *base, const char *sql)
{
    PGconn *c = PQconnectdb(base);
    bool ok = PQstatus(c) == CONNECTION_OK;
    if (ok) {
        PQclear(PQexec(c, "SET client_min_messages = warning"));
        PGresult *r = PQexec(c, sql);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok)
            fprintf(stderr, "maint tests: %s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(c);
    return ok;
}

static int build_template(void)
{
    char *base = qn_test_pg_base_url();
    char *ci = NULL;
    int rc = -1;
    if (base == NULL)
        return -1;
    if (!admin(base, "DROP DATABASE IF EXISTS " TEMPLATE_DB " WITH (FORCE)") ||
        !admin(base, "CREATE DATABASE " TEMPLATE_DB))
        goto out;
    ci = with_dbname(base, TEMPLATE_DB);
    char err[1024] = "";
    if (ci == NULL || qn_migrate(ci, 60000, NULL, err, sizeof err) != QN_OK) {
        fprintf(stderr, "maint tests: schema template: %s\n", err);
        goto out;
    }
    if (!admin(ci, HELPERS))
        goto out;
    rc = 0;
out:
    free(ci);
    free(base);
    return rc;
}

/* A fresh database cloned from the template (malloc'd conninfo). */
static char *fresh_db(const char *name)
{
    char *base = qn_test_pg_base_url();
    ck_assert_msg(base != NULL, "no test database: set QUEEN_TEST_DATABASE_URL or run via ctest");
    char sql[512];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name);
    ck_assert(admin(base, sql));
    snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\" TEMPLATE " TEMPLATE_DB, name);
    ck_assert_msg(admin(base, sql), "no schema template to clone");
    char *ci = with_dbname(base, name);
    free(base);
    ck_assert_ptr_nonnull(ci);
    return ci;
}

/* ---------------------------------------------------------------- fixture */

static struct event_base *B;
static char *CI;
static PGconn *D; /* the test's own connection */

static void setup_db(const char *name)
{
    B = event_base_new();
    CI = fresh_db(name);
    D = qn_test_pg_connect(CI);
}

static void teardown(void)
{
    if (D)
        PQfinish(D);
    D = NULL;
    if (B)
        event_base_free(B);
    B = NULL;
    free(CI);
    CI = NULL;
}

static void sqlf(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sqlf(PGconn *c, const char *fmt, ...)
{
    char sql[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    ck_assert(n > 0 && (size_t)n < sizeof sql);
    PQclear(qn_test_pg_exec(c, sql));
}

/* One value as int64 (SQL NULL -> INT64_MIN). */
static int64_t valf(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int64_t valf(PGconn *c, const char *fmt, ...)
{
    char sql[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    ck_assert(n > 0 && (size_t)n < sizeof sql);
    char *v = qn_test_pg_value(c, sql);
    int64_t out = INT64_MIN;
    if (v != NULL) {
        char *end = NULL;
        out = strtoll(v, &end, 10);
        ck_assert_msg(end != v && *end == '\0', "not an integer: %s (%s)", v, sql);
        free(v);
    }
    return out;
}

/* One value as text into buf. */
static void textf(PGconn *c, char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void textf(PGconn *c, char *buf, size_t cap, const char *fmt, ...)
{
    char sql[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    ck_assert(n > 0 && (size_t)n < sizeof sql);
    char *v = qn_test_pg_value(c, sql);
    ck_assert_ptr_nonnull(v);
    snprintf(buf, cap, "%s", v);
    free(v);
}

typedef char uuid_text[40];

/* A queue with the given column settings ("retention_enabled = true, ..."). */
static void mk_queue(uuid_text out, const char *name, const char *settings)
{
    textf(D, out, sizeof(uuid_text), "INSERT INTO queen.queues (name) VALUES ('%s') RETURNING id",
          name);
    if (settings && *settings)
        sqlf(D, "UPDATE queen.queues SET %s WHERE id = '%s'", settings, out);
}

/* A partition created (and last written) age_s seconds ago. */
static void mk_part(uuid_text out, const uuid_text queue, const char *name, int64_t age_s)
{
    textf(D, out, sizeof(uuid_text),
          "INSERT INTO queen.log_partitions (queue_id, name, created_at, last_write_at) "
          "VALUES ('%s', '%s', now() - make_interval(secs => %lld), "
          "now() - make_interval(secs => %lld)) RETURNING id",
          queue, name, (long long)age_s, (long long)age_s);
}

/* n segments of `frames` frames stamped age_s seconds ago (call oldest first). */
static void add_segs(const uuid_text pid, int n, int frames, int64_t age_s)
{
    sqlf(D, "SELECT public.qt_add('%s', %d, %d, now() - make_interval(secs => %lld))", pid, n,
         frames, (long long)age_s);
}

static int64_t segs_of(const uuid_text pid)
{
    return valf(D, "SELECT count(*) FROM queen.log_segments WHERE partition_id = '%s'", pid);
}

static int64_t txns_of(const uuid_text pid)
{
    return valf(D, "SELECT count(*) FROM queen.log_txns WHERE partition_id = '%s'", pid);
}

/* Holders of the maintenance lock in this test's database: brokers of other
 * suites running at the same time hold the same key in their own databases. */
static int64_t advisory_holders(void)
{
    return valf(D,
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 "
                "AND objid = %d AND granted AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())",
                QN_MAINT_LOCK_KEY);
}

/* A session of this database waits for a lock (the loop, on a held row). */
#define WAITING_ON_LOCK                                                                            \
    "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "                    \
    "AND datname = current_database()"

/* ---------------------------------------------------------------- the loop */

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Runs the loop until *flag or timeout_ms. */
static bool run_until(const bool *flag, int timeout_ms)
{
    struct event *t = event_new(B, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(t, &tv);
    int64_t end = qn_store_now_ms() + timeout_ms;
    while (!*flag && qn_store_now_ms() < end)
        event_base_loop(B, EVLOOP_ONCE);
    event_free(t);
    return *flag;
}

/* Runs the loop until the query (one boolean value) is true, or timeout_ms. */
static bool run_until_sql(PGconn *c, int timeout_ms, const char *sql)
{
    struct event *t = event_new(B, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(t, &tv);
    int64_t end = qn_store_now_ms() + timeout_ms;
    bool ok = false;
    while (!ok && qn_store_now_ms() < end) {
        event_base_loop(B, EVLOOP_ONCE);
        char *v = qn_test_pg_value(c, sql);
        ok = v != NULL && strcmp(v, "t") == 0;
        free(v);
    }
    event_free(t);
    return ok;
}

static struct qn_maint_config test_cfg(void)
{
    struct qn_maint_config c;
    memset(&c, 0, sizeof c);
    c.interval_ms = 3600000; /* cycles run on demand unless a test starts the timer */
    c.batch_size = 1000;
    c.worklist_limit = 5000;
    c.max_fetches = 1000;
    c.cleanup_enabled = true;
    c.cleanup_days = 30;
    c.cleanup_period_ms = 0;
    c.metrics_days = 90;
    c.stmt_timeout_ms = 30000;
    return c;
}

/* Runs the loop until the loop's session is up (fails the test after 10 s). */
static void wait_up(qn_maint *m)
{
    bool up = qn_store_is_up(qn_maint_store(m));
    int64_t end = qn_store_now_ms() + 10000;
    while (!up && qn_store_now_ms() < end) {
        struct event *t = event_new(B, -1, 0, tick, NULL);
        struct timeval tv = {0, 5000};
        event_add(t, &tv);
        event_base_loop(B, EVLOOP_ONCE);
        event_free(t);
        up = qn_store_is_up(qn_maint_store(m));
    }
    ck_assert_msg(up, "maintenance session did not come up");
}

static qn_maint *mk_maint(const struct qn_maint_config *cfg)
{
    qn_maint *m = NULL;
    ck_assert_int_eq(qn_maint_new(B, cfg, CI, &m), QN_OK);
    wait_up(m); /* so statement counts and timings start clean */
    return m;
}

struct done {
    bool done;
    int calls;
    struct qn_maint_cycle r;
};

static void on_done(void *ud, const struct qn_maint_cycle *r)
{
    struct done *d = ud;
    d->done = true;
    d->calls++;
    d->r = *r;
}

static void start_cycle(qn_maint *m, struct done *d)
{
    memset(d, 0, sizeof *d);
    ck_assert_int_eq(qn_maint_run_once(m, on_done, d), QN_OK);
}

static struct qn_maint_cycle cycle(qn_maint *m)
{
    struct done d;
    start_cycle(m, &d);
    ck_assert_msg(run_until(&d.done, 60000), "cycle did not end");
    ck_assert_int_eq(d.calls, 1);
    return d.r;
}

static uint64_t statements(qn_maint *m)
{
    struct qn_store_stats s;
    qn_store_get_stats(qn_maint_store(m), &s);
    return s.statements;
}

static uint64_t steps_total(const struct qn_maint_cycle *r)
{
    uint64_t t = 0;
    for (int k = 0; k < QN_MAINT_NKINDS; k++)
        t += r->steps[k];
    return t;
}

/* A push of one frame through push_v1 from a plain connection (whose
 * lock_timeout the caller set); fails the test if it does not commit. */
static void push_one(PGconn *c, const char *queue, const char *partition)
{
    sqlf(c,
         "SELECT count(*) FROM qn.push_v1(ARRAY['%s'], ARRAY['%s'], ARRAY[1], "
         "ARRAY[decode(md5(random()::text || clock_timestamp()::text), 'hex')], "
         "ARRAY[-1]::INT8[], ARRAY['\\x00'::bytea])",
         queue, partition);
}

/* ---------------------------------------------------------------- tests */

/*
 * Two loops (two brokers): while a third session holds the lock both skip;
 * then one sweeps while the other, asked during that sweep, skips. The sweeping
 * one is held inside its cycle by a row lock on one of its partitions.
 */
START_TEST(two_loops_one_sweeps)
{
    setup_db("qn_bmaint_two");
    uuid_text q, a, b;
    mk_queue(q, "two", "retention_enabled = true, retention_seconds = 60");
    mk_part(a, q, "a", 7200);
    mk_part(b, q, "b", 7200);
    add_segs(b, 3, 1, 10800); /* older: swept first */
    add_segs(a, 5, 1, 7200);
    struct qn_maint_config cfg = test_cfg();
    qn_maint *m1 = mk_maint(&cfg), *m2 = mk_maint(&cfg);

    /* a third session holds the lock: both skip, concurrently */
    PGconn *holder = qn_test_pg_connect(CI);
    sqlf(holder, "SELECT pg_advisory_lock(%d)", QN_MAINT_LOCK_KEY);
    struct done d1, d2;
    start_cycle(m1, &d1);
    start_cycle(m2, &d2);
    ck_assert(run_until(&d1.done, 30000));
    ck_assert(run_until(&d2.done, 30000));
    ck_assert(d1.r.skipped && d2.r.skipped);
    ck_assert_int_eq(d1.r.code, QN_OK);
    ck_assert_int_eq(d2.r.code, QN_OK);
    ck_assert_int_eq(segs_of(a) + segs_of(b), 8);
    sqlf(holder, "SELECT pg_advisory_unlock(%d)", QN_MAINT_LOCK_KEY);

    /* m1 sweeps b, then blocks on a's row lock while holding the advisory lock */
    sqlf(holder, "BEGIN");
    sqlf(holder, "SELECT 1 FROM queen.log_partitions WHERE id = '%s' FOR UPDATE", a);
    start_cycle(m1, &d1);
    ck_assert_msg(run_until_sql(D, 30000, WAITING_ON_LOCK),
                  "the first loop never reached the locked partition");
    ck_assert_int_eq(advisory_holders(), 1);
    ck_assert(qn_maint_is_running(m1));
    ck_assert_int_eq(segs_of(b), 0); /* committed by its own step already */

    /* m2 runs a whole cycle meanwhile: skipped */
    start_cycle(m2, &d2);
    ck_assert(run_until(&d2.done, 30000));
    ck_assert(d2.r.skipped);
    ck_assert_uint_eq(steps_total(&d2.r), 0);
    ck_assert(qn_maint_is_running(m1));
    ck_assert(!d1.done);

    sqlf(holder, "COMMIT");
    ck_assert(run_until(&d1.done, 30000));
    ck_assert_int_eq(d1.r.code, QN_OK);
    ck_assert(!d1.r.skipped);
    ck_assert_uint_eq(d1.r.deleted[QN_MAINT_RETENTION], 8);
    ck_assert_int_eq(segs_of(a), 0);
    ck_assert_int_eq(advisory_holders(), 0); /* released, session still open */

    struct qn_maint_stats s1, s2;
    qn_maint_get_stats(m1, &s1);
    qn_maint_get_stats(m2, &s2);
    ck_assert_uint_eq(s1.cycles_run, 1);
    ck_assert_uint_eq(s1.cycles_skipped, 1);
    ck_assert_uint_eq(s2.cycles_run, 0);
    ck_assert_uint_eq(s2.cycles_skipped, 2);
    ck_assert_uint_eq(s2.worklist_fetches, 0);
    ck_assert_uint_eq(s1.cycles_failed + s2.cycles_failed, 0);

    PQfinish(holder);
    qn_maint_free(m1);
    qn_maint_free(m2);
    teardown();
}
END_TEST

/*
 * 10,000 partitions, 10 with deletable data: the cycle's work follows the 10
 * (work-list rows, step calls, statements), not the partition count.
 */
START_TEST(work_follows_deletable_partitions)
{
    setup_db("qn_bmaint_scale");
    uuid_text q;
    mk_queue(q, "big", "retention_enabled = true, retention_seconds = 3600");
    /* 9,990 partitions holding one recent segment each (nothing deletable) */
    sqlf(D,
         "INSERT INTO queen.log_partitions (queue_id, name, last_offset, oldest_live_at, "
         "oldest_txn_at) SELECT '%s', 'p' || g, 0, now() - interval '1 minute', "
         "now() - interval '1 minute' FROM generate_series(1, 9990) g",
         q);
    sqlf(D, "INSERT INTO queen.log_segments SELECT id, 0, 0, oldest_live_at, '\\x00'::bytea "
            "FROM queen.log_partitions");
    sqlf(D, "INSERT INTO queen.log_txns SELECT id, 0, 0, oldest_txn_at, "
            "decode(repeat('00', 16), 'hex') FROM queen.log_partitions");
    /* 10 with two segments past both windows, then one recent */
    for (int i = 0; i < 10; i++) {
        uuid_text p;
        char name[16];
        snprintf(name, sizeof name, "old%d", i);
        mk_part(p, q, name, 7200);
        add_segs(p, 2, 3, 7200);
        add_segs(p, 1, 3, 60);
    }
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM queen.log_partitions"), 10000);
    sqlf(D, "ANALYZE");

    struct qn_maint_config cfg = test_cfg();
    qn_maint *m = mk_maint(&cfg);
    uint64_t before = statements(m);
    struct qn_maint_cycle r = cycle(m);
    uint64_t stmts = statements(m) - before;
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_uint_eq(r.worklist_rows[0], 10);
    ck_assert_uint_eq(r.worklist_rows[1], 10);
    ck_assert_uint_eq(r.worklist_rows[2], 0);
    ck_assert_uint_eq(r.fetches, 3);
    ck_assert_uint_eq(r.steps[QN_MAINT_RETENTION], 10);
    ck_assert_uint_eq(r.steps[QN_MAINT_TXNS_PURGE], 10);
    ck_assert_uint_eq(r.steps[QN_MAINT_MAX_WAIT], 0);
    ck_assert_uint_eq(r.steps[QN_MAINT_CLEANUP], 1);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 20);
    ck_assert_uint_eq(r.frames, 60);
    ck_assert_uint_eq(r.deleted[QN_MAINT_TXNS_PURGE], 20);
    ck_assert_int_eq(r.queues, 1);
    /* lock, clock, 3 lists, 21 steps, metrics, queues, unlock */
    ck_assert_uint_eq(stmts, 2 + r.fetches + steps_total(&r) + 3);
    ck_assert_uint_le(stmts, 40);
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM queen.log_segments"), 10000);

    /* the next cycle has nothing to do and touches nothing */
    before = statements(m);
    r = cycle(m);
    ck_assert_uint_eq(r.worklist_rows[0] + r.worklist_rows[1] + r.worklist_rows[2], 0);
    ck_assert_uint_eq(steps_total(&r), 1); /* the cleanup probe */
    ck_assert_uint_eq(statements(m) - before, 2 + 3 + 1 + 1 + 1);
    ck_assert_int_eq(r.queues, 0);
    qn_maint_free(m);
    teardown();
}
END_TEST

/*
 * A large backlog drains in many short steps: no wrapping transaction (the
 * partition swept first is committed and free while the loop waits on the
 * next), pushes to other partitions and to the draining one succeed with short
 * lock timeouts, and the loop's session never holds more than one partition
 * row lock.
 */
START_TEST(backlog_drains_in_short_steps)
{
    setup_db("qn_bmaint_backlog");
    uuid_text q, a, b, c;
    mk_queue(q, "bq", "retention_enabled = true, retention_seconds = 60");
    mk_part(b, q, "b", 20000);
    mk_part(a, q, "a", 20000);
    mk_part(c, q, "c", 20000);
    add_segs(b, 5, 1, 10800); /* oldest: first in the work list */
    add_segs(a, 3000, 1, 7200);
    struct qn_maint_config cfg = test_cfg();
    cfg.batch_size = 10;
    qn_maint *m = mk_maint(&cfg);

    PGconn *holder = qn_test_pg_connect(CI), *pusher = qn_test_pg_connect(CI);
    sqlf(pusher, "SET lock_timeout = '100ms'");
    /* hold a's row so the loop stops exactly between partitions */
    sqlf(holder, "BEGIN");
    sqlf(holder, "SELECT 1 FROM queen.log_partitions WHERE id = '%s' FOR UPDATE", a);
    struct done d;
    start_cycle(m, &d);
    ck_assert(run_until_sql(D, 30000, WAITING_ON_LOCK));
    /* waiting for a, the loop's transaction holds nothing: no xid, so no row
     * lock and no uncommitted delete; b's step committed on its own */
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                             "'Lock' AND datname = current_database() AND backend_xid IS NULL"),
                     1);
    ck_assert_int_eq(segs_of(b), 0);
    push_one(pusher, "bq", "b");
    push_one(pusher, "bq", "c");
    sqlf(holder, "COMMIT");

    /* the drain: sample the row locks and push between the loop's turns */
    sqlf(pusher, "SET lock_timeout = '2s'"); /* a may wait for one 10-row step */
    int samples = 0, pushes_a = 0, pushes_c = 0, max_locked = 0, turns = 0;
    struct event *t = event_new(B, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(t, &tv);
    int64_t end = qn_store_now_ms() + 120000;
    while (!d.done && qn_store_now_ms() < end) {
        event_base_loop(B, EVLOOP_ONCE);
        turns++;
        sqlf(holder, "BEGIN");
        int64_t free_rows = valf(holder,
                                 "SELECT count(*) FROM (SELECT 1 FROM queen.log_partitions "
                                 "WHERE queue_id = '%s' FOR SHARE SKIP LOCKED) x",
                                 q);
        sqlf(holder, "ROLLBACK");
        int locked = (int)(3 - free_rows);
        if (locked > max_locked)
            max_locked = locked;
        samples++;
        if (!d.done && turns % 8 == 0) {
            push_one(pusher, "bq", "c");
            pushes_c++;
        }
        if (!d.done && turns % 16 == 0) {
            push_one(pusher, "bq", "a");
            pushes_a++;
        }
    }
    event_free(t);
    ck_assert_msg(d.done, "the drain did not finish");
    ck_assert_int_eq(d.r.code, QN_OK);
    ck_assert_int_le(max_locked, 1);
    ck_assert_int_ge(samples, 300);
    ck_assert_int_ge(pushes_c, 30);
    ck_assert_int_ge(pushes_a, 15);
    /* 3000 + 5 old segments in 10-row steps; the pushed ones are recent */
    ck_assert_uint_eq(d.r.deleted[QN_MAINT_RETENTION], 3005);
    ck_assert_uint_ge(d.r.steps[QN_MAINT_RETENTION], 301);
    ck_assert_int_eq(segs_of(a), pushes_a);
    ck_assert_int_eq(segs_of(c), pushes_c + 1);
    ck_assert_int_eq(valf(D, "SELECT log_start FROM queen.log_partitions WHERE id = '%s'", a),
                     3000);
    PQfinish(holder);
    PQfinish(pusher);
    qn_maint_free(m);
    teardown();
}
END_TEST

static qn_maint *mk_default(void)
{
    struct qn_maint_config cfg = test_cfg();
    return mk_maint(&cfg);
}

/* Rule 1 (retentionSeconds) deletes old segments whatever was consumed; a queue
 * without retentionEnabled, or enabled without a window, keeps everything. */
START_TEST(retention_rule_all)
{
    setup_db("qn_bmaint_rule1");
    uuid_text q1, q2, q3, p1, p2, p3;
    mk_queue(q1, "r1",
             "retention_enabled = true, retention_seconds = 3600, "
             "dedup_window_seconds = 86400");
    mk_queue(q2, "r2",
             "retention_enabled = false, retention_seconds = 3600, "
             "dedup_window_seconds = 86400");
    mk_queue(q3, "r3", "retention_enabled = true, dedup_window_seconds = 86400");
    mk_part(p1, q1, "p", 86000);
    mk_part(p2, q2, "p", 86000);
    mk_part(p3, q3, "p", 86000);
    add_segs(p1, 3, 2, 7200);
    add_segs(p1, 1, 2, 60);
    add_segs(p2, 3, 2, 7200);
    add_segs(p3, 3, 2, 7200);
    qn_maint *m = mk_default();
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_uint_eq(r.worklist_rows[0], 1);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 3);
    ck_assert_uint_eq(r.frames, 6);
    ck_assert_uint_eq(r.deleted[QN_MAINT_TXNS_PURGE], 0);
    ck_assert_int_eq(r.queues, 1);
    ck_assert_int_eq(segs_of(p1), 1);
    ck_assert_int_eq(segs_of(p2), 3);
    ck_assert_int_eq(segs_of(p3), 3);
    ck_assert_int_eq(valf(D, "SELECT log_start FROM queen.log_partitions WHERE id = '%s'", p1), 6);
    ck_assert_int_eq(valf(D,
                          "SELECT (oldest_live_at = (SELECT created_at FROM queen.log_segments "
                          "WHERE partition_id = p.id))::int FROM queen.log_partitions p "
                          "WHERE id = '%s'",
                          p1),
                     1);
    ck_assert_int_eq(valf(D,
                          "SELECT count(*) FROM queen.retention_history WHERE partition_id = "
                          "'%s' AND retention_type = 'retention' AND messages_deleted = 6",
                          p1),
                     1);
    /* nothing left: the next cycle steps nothing */
    r = cycle(m);
    ck_assert_uint_eq(r.steps[QN_MAINT_RETENTION], 0);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* Rule 2 (completedRetentionSeconds): whole segments below MIN(committed) + 1
 * only; no consumer rows, nothing; one slow group pins the rest; either rule
 * deletes when both are set. */
START_TEST(retention_rule_completed)
{
    setup_db("qn_bmaint_rule2");
    uuid_text q, q4, p1, p2, p3, p4;
    mk_queue(q, "c",
             "retention_enabled = true, completed_retention_seconds = 3600, "
             "dedup_window_seconds = 86400");
    mk_queue(q4, "both",
             "retention_enabled = true, retention_seconds = 10800, "
             "completed_retention_seconds = 3600, dedup_window_seconds = 86400");
    mk_part(p1, q, "p1", 86000);
    mk_part(p2, q, "p2", 86000);
    mk_part(p3, q, "p3", 86000);
    mk_part(p4, q4, "p4", 86000);
    add_segs(p1, 4, 3, 7200); /* [0-2] [3-5] [6-8] [9-11] */
    sqlf(D,
         "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) "
         "VALUES ('%s', 'fast', 10), ('%s', 'slow', 7)",
         p1, p1);
    add_segs(p2, 4, 3, 7200); /* never consumed: no consumer rows */
    add_segs(p3, 2, 3, 7200); /* consumed, but the last one is too young */
    add_segs(p3, 1, 3, 60);
    sqlf(D,
         "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) "
         "VALUES ('%s', 'g', 8)",
         p3);
    add_segs(p4, 2, 1, 18000); /* 0, 1: rule 1 */
    add_segs(p4, 3, 1, 7200);  /* 2, 3 consumed: rule 2; 4 not consumed */
    sqlf(D,
         "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed) "
         "VALUES ('%s', 'g', 3)",
         p4);
    qn_maint *m = mk_default();
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_int_eq(segs_of(p1), 2); /* [6-8] covers the slow cursor: it stays */
    ck_assert_int_eq(valf(D, "SELECT log_start FROM queen.log_partitions WHERE id = '%s'", p1), 6);
    ck_assert_int_eq(segs_of(p2), 4);
    ck_assert_int_eq(segs_of(p3), 1);
    ck_assert_int_eq(segs_of(p4), 1);
    ck_assert_int_eq(valf(D, "SELECT log_start FROM queen.log_partitions WHERE id = '%s'", p4), 4);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 2 + 2 + 4);
    ck_assert_int_eq(r.queues, 2);
    ck_assert_int_eq(valf(D,
                          "SELECT count(*) FROM queen.retention_history WHERE partition_id = "
                          "'%s' AND retention_type = 'completed_retention' "
                          "AND messages_deleted = 6",
                          p1),
                     1);
    /* the slow group catches up: the next cycle takes what it pinned */
    sqlf(D, "UPDATE queen.log_consumers SET committed = 11 WHERE partition_id = '%s'", p1);
    r = cycle(m);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 2);
    ck_assert_int_eq(segs_of(p1), 0);
    ck_assert_int_eq(valf(D, "SELECT log_start FROM queen.log_partitions WHERE id = '%s'", p1), 12);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* The sidecar purge runs on every queue (retention or not) at GREATEST(dedup
 * window, completed retention, 900 s), and never touches segments. */
START_TEST(sidecar_purge)
{
    setup_db("qn_bmaint_sidecar");
    uuid_text s1, s2, s3, p1, p2, p3;
    mk_queue(s1, "s1", "dedup_window_seconds = 0");
    mk_queue(s2, "s2", "dedup_window_seconds = 0, completed_retention_seconds = 7200");
    mk_queue(s3, "s3", ""); /* default window 3600 */
    mk_part(p1, s1, "p", 86000);
    mk_part(p2, s2, "p", 86000);
    mk_part(p3, s3, "p", 86000);
    add_segs(p1, 2, 1, 1200); /* past the 900 s floor */
    add_segs(p1, 1, 1, 600);  /* within it */
    add_segs(p2, 2, 1, 3600); /* within the completed window */
    add_segs(p3, 2, 1, 7200); /* past the dedup window */
    add_segs(p3, 1, 1, 1800);
    qn_maint *m = mk_default();
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_uint_eq(r.worklist_rows[1], 2);
    ck_assert_uint_eq(r.deleted[QN_MAINT_TXNS_PURGE], 4);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION] + r.deleted[QN_MAINT_MAX_WAIT], 0);
    ck_assert_int_eq(txns_of(p1), 1);
    ck_assert_int_eq(txns_of(p2), 2);
    ck_assert_int_eq(txns_of(p3), 1);
    ck_assert_int_eq(segs_of(p1) + segs_of(p2) + segs_of(p3), 3 + 2 + 3);
    ck_assert_int_eq(valf(D, "SELECT txns_start FROM queen.log_partitions WHERE id = '%s'", p1), 2);
    ck_assert_int_eq(valf(D,
                          "SELECT (oldest_txn_at = (SELECT created_at FROM queen.log_txns "
                          "WHERE partition_id = p.id))::int FROM queen.log_partitions p "
                          "WHERE id = '%s'",
                          p1),
                     1);
    ck_assert_int_eq(r.queues, 2);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* maxWaitTimeSeconds deletes old segments for every group, a leased batch
 * included, whatever retentionEnabled says, and dead-letters nothing. */
START_TEST(max_wait_eviction)
{
    setup_db("qn_bmaint_maxwait");
    uuid_text q, q0, p, p0;
    mk_queue(q, "mw", "max_wait_time_seconds = 600, dedup_window_seconds = 86400");
    mk_queue(q0, "keep", "dedup_window_seconds = 86400");
    mk_part(p, q, "p", 86000);
    mk_part(p0, q0, "p", 86000);
    add_segs(p, 3, 2, 3600);
    add_segs(p, 1, 2, 60);
    add_segs(p0, 3, 2, 3600);
    sqlf(D,
         "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed, batch_end, "
         "worker_id, lease_expires_at, lease_acquired_at) "
         "VALUES ('%s', 'g', -1, 3, 'w', now() + interval '1 hour', now())",
         p);
    qn_maint *m = mk_default();
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_uint_eq(r.worklist_rows[0], 0);
    ck_assert_uint_eq(r.worklist_rows[2], 1);
    ck_assert_uint_eq(r.deleted[QN_MAINT_MAX_WAIT], 3);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 0);
    ck_assert_uint_eq(r.frames, 6);
    ck_assert_int_eq(segs_of(p), 1);
    ck_assert_int_eq(segs_of(p0), 3);
    ck_assert_int_eq(valf(D, "SELECT log_start FROM queen.log_partitions WHERE id = '%s'", p), 6);
    /* the lease is left as it was; nothing filed anywhere */
    ck_assert_int_eq(
        valf(D, "SELECT batch_end FROM queen.log_consumers WHERE partition_id = '%s'", p), 3);
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM queen.log_dlq"), 0);
    ck_assert_int_eq(valf(D,
                          "SELECT count(*) FROM queen.retention_history WHERE partition_id = "
                          "'%s' AND retention_type = 'max_wait_time_eviction'",
                          p),
                     1);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* Partition cleanup: a partition empty and idle past PARTITION_CLEANUP_DAYS goes
 * with its sidecar rows; a dead letter or recent activity keeps one; the phase
 * runs at most once per period and not at all when disabled. */
START_TEST(partition_cleanup)
{
    setup_db("qn_bmaint_cleanup");
    uuid_text q, dead, dlq, young, dead2;
    /* a window longer than the partitions' age keeps the sidecar out of phase 2 */
    mk_queue(q, "cl", "dedup_window_seconds = 8640000");
    const int64_t days40 = 40LL * 86400;
    mk_part(dead, q, "dead", days40);
    mk_part(dlq, q, "dlq", days40);
    mk_part(young, q, "young", 10LL * 86400);
    sqlf(D,
         "INSERT INTO queen.log_txns VALUES ('%s', 0, 0, now() - interval '40 days', "
         "decode(repeat('00', 16), 'hex'))",
         dead);
    sqlf(D,
         "UPDATE queen.log_partitions SET oldest_txn_at = now() - interval '40 days', "
         "last_offset = 0, log_start = 1 WHERE id = '%s'",
         dead);
    sqlf(D,
         "INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\") "
         "VALUES ('%s', 'g', 0)",
         dlq);

    struct qn_maint_config cfg = test_cfg();
    cfg.cleanup_period_ms = 3600000;
    qn_maint *m = mk_maint(&cfg);
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert(r.cleanup_ran);
    ck_assert_uint_eq(r.deleted[QN_MAINT_CLEANUP], 1);
    ck_assert_int_eq(r.queues, 0);
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM queen.log_partitions WHERE id = '%s'", dead), 0);
    ck_assert_int_eq(txns_of(dead), 0);
    ck_assert_int_eq(
        valf(D, "SELECT count(*) FROM queen.log_partitions WHERE id IN ('%s', '%s')", dlq, young),
        2);
    ck_assert_int_eq(valf(D,
                          "SELECT count(*) FROM queen.retention_history WHERE partition_id = "
                          "'%s' AND retention_type = '__partition_deleted__'",
                          dead),
                     1);

    /* within the period: not again */
    mk_part(dead2, q, "dead2", days40);
    r = cycle(m);
    ck_assert(!r.cleanup_ran);
    ck_assert_uint_eq(r.steps[QN_MAINT_CLEANUP], 0);
    qn_maint_free(m);

    /* disabled: never */
    cfg = test_cfg();
    cfg.cleanup_enabled = false;
    m = mk_maint(&cfg);
    r = cycle(m);
    ck_assert(!r.cleanup_ran);
    ck_assert_uint_eq(r.steps[QN_MAINT_CLEANUP], 0);
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM queen.log_partitions WHERE id = '%s'", dead2),
                     1);
    qn_maint_free(m);

    m = mk_default();
    r = cycle(m);
    ck_assert_uint_eq(r.deleted[QN_MAINT_CLEANUP], 1);
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM queen.log_partitions"), 2);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* The INFO line appears only for a cycle that deleted something; an idle cycle
 * logs at DEBUG. */
START_TEST(info_line_only_when_deleting)
{
    setup_db("qn_bmaint_log");
    uuid_text q, p;
    mk_queue(q, "lg", "retention_enabled = true, retention_seconds = 3600");
    mk_part(p, q, "p", 86000);
    add_segs(p, 2, 1, 7200);
    qn_maint *m = mk_default();

    FILE *cap = tmpfile();
    ck_assert_ptr_nonnull(cap);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    fflush(stderr);
    ck_assert_int_ge(dup2(fileno(cap), 2), 0);
    qn_log_set_level(QN_LOG_INFO);
    struct qn_maint_cycle r1 = cycle(m);
    struct qn_maint_cycle r2 = cycle(m); /* idle */
    long info_end = ftell(cap);
    qn_log_set_level(QN_LOG_DEBUG);
    struct qn_maint_cycle r3 = cycle(m); /* idle, at debug */
    qn_log_set_level(QN_LOG_INFO);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);

    ck_assert_int_eq(r1.code, QN_OK);
    ck_assert_int_eq(r2.code, QN_OK);
    ck_assert_int_eq(r3.code, QN_OK);
    char buf[8192];
    rewind(cap);
    size_t n = fread(buf, 1, sizeof buf - 1, cap);
    buf[n] = '\0';
    fclose(cap);
    ck_assert_msg(info_end >= 0 && (size_t)info_end <= n, "captured %zu bytes", n);
    char first[8192];
    memcpy(first, buf, (size_t)info_end);
    first[info_end] = '\0';
    const char *want = " INFO retention swept queues=1 segments_deleted=2 txns_purged=2 "
                       "max_wait_evicted=0 partitions_deleted=0 metrics_purge=0 elapsed_ms=";
    const char *hit = strstr(first, want);
    ck_assert_msg(hit != NULL, "no INFO line in:\n%s", first);
    ck_assert_msg(strstr(hit + strlen(want), "retention swept") == NULL,
                  "idle cycle logged at info:\n%s", first);
    ck_assert_msg(strstr(buf + info_end, " DEBUG retention swept queues=0 segments_deleted=0 ") !=
                      NULL,
                  "no DEBUG line for the idle cycle:\n%s", buf + info_end);
    ck_assert_msg(strstr(buf + info_end, " INFO ") == NULL, "info line from an idle cycle");
    qn_maint_free(m);
    teardown();
}
END_TEST

/* The metrics purge ages out retention_history; its failure is logged and
 * swallowed: the cycle succeeds, its deletes stand, the lock is released. */
START_TEST(metrics_purge_and_its_failure)
{
    setup_db("qn_bmaint_metrics");
    sqlf(D, "INSERT INTO queen.retention_history (partition_id, messages_deleted, retention_type, "
            "executed_at) SELECT gen_random_uuid(), 1, 'retention', now() - make_interval(days "
            "=> d) FROM unnest(ARRAY[100, 95, 10]) d");
    qn_maint *m = mk_default();
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_int_eq(r.metrics_purged, 2);
    ck_assert_int_eq(valf(D, "SELECT count(*) FROM queen.retention_history"), 1);
    qn_maint_free(m);

    uuid_text q, p;
    mk_queue(q, "mq",
             "retention_enabled = true, retention_seconds = 3600, "
             "dedup_window_seconds = 86400");
    mk_part(p, q, "p", 86000);
    add_segs(p, 2, 1, 7200);
    sqlf(D, "DROP FUNCTION qn.metrics_purge_v1(TIMESTAMPTZ)");
    m = mk_default();
    r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_int_eq(r.metrics_purged, -1);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 2);
    struct qn_maint_stats s;
    qn_maint_get_stats(m, &s);
    ck_assert_uint_eq(s.metrics_failures, 1);
    ck_assert_uint_eq(s.cycles_failed, 0);
    ck_assert_int_eq(advisory_holders(), 0);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* A failing step ends the cycle with its error; what committed before stays,
 * and the lock is released although the session lives on. */
START_TEST(lock_released_after_error)
{
    setup_db("qn_bmaint_err");
    uuid_text q, p;
    mk_queue(q, "eq", "retention_enabled = true, retention_seconds = 3600");
    mk_part(p, q, "p", 86000);
    add_segs(p, 2, 1, 7200);
    sqlf(D, "DROP FUNCTION qn.txns_purge_step_v1(UUID, TIMESTAMPTZ, INT4)");
    qn_maint *m = mk_default();
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_ne(r.code, QN_OK);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 2); /* phase 1 committed */
    ck_assert_int_eq(segs_of(p), 0);
    ck_assert_int_eq(txns_of(p), 2);
    ck_assert_int_eq(advisory_holders(), 0);
    ck_assert(qn_store_is_up(qn_maint_store(m)));
    struct qn_maint_stats s;
    qn_maint_get_stats(m, &s);
    ck_assert_uint_eq(s.cycles_failed, 1);
    ck_assert_uint_eq(s.cycles_run, 1);
    /* and the next cycle takes the lock again */
    r = cycle(m);
    ck_assert(!r.skipped);
    ck_assert_int_ne(r.code, QN_OK);
    ck_assert_int_eq(advisory_holders(), 0);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* Work lists are paged while full and the pass made progress; a full list of
 * partitions that cannot be trimmed ends the phase instead of spinning. */
START_TEST(worklist_paging)
{
    setup_db("qn_bmaint_paging");
    uuid_text q, q2;
    mk_queue(q, "pg",
             "retention_enabled = true, retention_seconds = 3600, "
             "dedup_window_seconds = 86400");
    mk_queue(q2, "pinned",
             "retention_enabled = true, completed_retention_seconds = 3600, "
             "dedup_window_seconds = 86400");
    for (int i = 0; i < 5; i++) {
        uuid_text p;
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        mk_part(p, q, name, 86000);
        add_segs(p, 1, 1, 7200);
    }
    struct qn_maint_config cfg = test_cfg();
    cfg.worklist_limit = 2;
    qn_maint *m = mk_maint(&cfg);
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_uint_eq(r.worklist_rows[0], 5);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 5);
    ck_assert_uint_eq(r.fetches, 3 + 1 + 1);

    /* three partitions nobody consumed: listed, never trimmable */
    for (int i = 0; i < 3; i++) {
        uuid_text p;
        char name[8];
        snprintf(name, sizeof name, "x%d", i);
        mk_part(p, q2, name, 86000);
        add_segs(p, 1, 1, 7200);
    }
    r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert_uint_eq(r.worklist_rows[0], 2);
    ck_assert_uint_eq(r.steps[QN_MAINT_RETENTION], 2);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 0);
    ck_assert_uint_eq(r.fetches, 1 + 1 + 1);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* Shutdown during a cycle: the callback gets QN_ESHUTDOWN at once, the call in
 * flight is cancelled and the lock released before the session closes; nothing
 * starts afterwards. */
START_TEST(shutdown_mid_cycle)
{
    setup_db("qn_bmaint_shut");
    uuid_text q, p;
    mk_queue(q, "sq", "retention_enabled = true, retention_seconds = 3600");
    mk_part(p, q, "p", 86000);
    add_segs(p, 2, 1, 7200);
    qn_maint *m = mk_default();
    PGconn *holder = qn_test_pg_connect(CI);
    sqlf(holder, "BEGIN");
    sqlf(holder, "SELECT 1 FROM queen.log_partitions WHERE id = '%s' FOR UPDATE", p);
    struct done d;
    start_cycle(m, &d);
    ck_assert(run_until_sql(D, 30000, WAITING_ON_LOCK));
    ck_assert_int_eq(advisory_holders(), 1);
    qn_maint_shutdown(m);
    ck_assert(d.done);
    ck_assert_int_eq(d.calls, 1);
    ck_assert_int_eq(d.r.code, QN_ESHUTDOWN);
    ck_assert(!qn_maint_is_running(m));
    ck_assert(run_until_sql(D, 30000,
                            "SELECT count(*) = 0 FROM pg_locks WHERE locktype = 'advisory' "
                            "AND objid = 737001 AND database = (SELECT oid FROM pg_database "
                            "WHERE datname = current_database())"));
    ck_assert(qn_store_is_up(qn_maint_store(m)));
    ck_assert_int_eq(qn_maint_run_once(m, on_done, &d), QN_ESHUTDOWN);
    ck_assert_int_eq(qn_maint_start(m), QN_ESHUTDOWN);
    sqlf(holder, "COMMIT");
    ck_assert_int_eq(segs_of(p), 2);
    ck_assert_int_eq(d.calls, 1);
    PQfinish(holder);
    qn_maint_free(m);
    teardown();
}
END_TEST

/* The session dies mid-cycle: the cycle fails, the server released the lock
 * with the session, and once the store has reconnected the next cycle takes
 * the lock on the new session and finishes the work. */
START_TEST(lost_session_releases_the_lock)
{
    setup_db("qn_bmaint_lost");
    uuid_text q, p;
    mk_queue(q, "lq", "retention_enabled = true, retention_seconds = 3600");
    mk_part(p, q, "p", 86000);
    add_segs(p, 2, 1, 7200);
    qn_maint *m = mk_default();
    PGconn *holder = qn_test_pg_connect(CI);
    sqlf(holder, "BEGIN");
    sqlf(holder, "SELECT 1 FROM queen.log_partitions WHERE id = '%s' FOR UPDATE", p);
    struct done d;
    start_cycle(m, &d);
    ck_assert(run_until_sql(D, 30000, WAITING_ON_LOCK));
    ck_assert_int_eq(advisory_holders(), 1);
    sqlf(D, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = "
            "'Lock' AND datname = current_database()");
    ck_assert(run_until(&d.done, 30000));
    ck_assert_int_eq(d.r.code, QN_EUNAVAILABLE);
    ck_assert_int_eq(advisory_holders(), 0);
    sqlf(holder, "COMMIT");
    PQfinish(holder);

    /* the store reconnects on its own (backoff); then a cycle on the new session */
    wait_up(m);
    struct qn_maint_cycle r = cycle(m);
    ck_assert_int_eq(r.code, QN_OK);
    ck_assert(!r.skipped);
    ck_assert_uint_eq(r.deleted[QN_MAINT_RETENTION], 2);
    ck_assert_int_eq(advisory_holders(), 0);
    qn_maint_free(m);
    teardown();
}
END_TEST

static bool cycles_at_least(qn_maint *m, uint64_t n)
{
    struct qn_maint_stats s;
    qn_maint_get_stats(m, &s);
    return s.cycles_run >= n;
}

/* The timer: a cycle per interval, each after the previous one ended; a cycle
 * asked for while one runs is refused. */
START_TEST(periodic_cycles)
{
    setup_db("qn_bmaint_timer");
    uuid_text q, p;
    mk_queue(q, "tq", "retention_enabled = true, retention_seconds = 3600");
    mk_part(p, q, "p", 86000);
    add_segs(p, 2, 1, 7200);
    struct qn_maint_config cfg = test_cfg();
    cfg.interval_ms = 20;
    qn_maint *m = mk_maint(&cfg);
    ck_assert_int_eq(qn_maint_start(m), QN_OK);
    bool reached = false, saw_busy = false;
    struct event *t = event_new(B, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 2000};
    event_add(t, &tv);
    int64_t end = qn_store_now_ms() + 30000;
    while (!reached && qn_store_now_ms() < end) {
        event_base_loop(B, EVLOOP_ONCE);
        if (qn_maint_is_running(m) && !saw_busy) {
            struct done d;
            ck_assert_int_eq(qn_maint_run_once(m, on_done, &d), QN_EBUSY);
            saw_busy = true;
        }
        reached = cycles_at_least(m, 4);
    }
    event_free(t);
    ck_assert(reached);
    ck_assert(saw_busy);
    struct qn_maint_stats s;
    qn_maint_get_stats(m, &s);
    ck_assert_uint_eq(s.cycles_failed, 0);
    ck_assert_uint_eq(s.deleted[QN_MAINT_RETENTION], 2);
    ck_assert_int_eq(segs_of(p), 0);
    qn_maint_free(m);
    teardown();
}
END_TEST

START_TEST(config_checked)
{
    B = event_base_new();
    struct qn_maint_config cfg = test_cfg();
    qn_maint *m = NULL;
    cfg.batch_size = 0;
    ck_assert_int_eq(qn_maint_new(B, &cfg, "dbname=x", &m), QN_EINVAL);
    cfg = test_cfg();
    cfg.worklist_limit = 1000000;
    ck_assert_int_eq(qn_maint_new(B, &cfg, "dbname=x", &m), QN_EINVAL);
    cfg = test_cfg();
    ck_assert_int_eq(qn_maint_new(B, &cfg, NULL, &m), QN_EINVAL);
    ck_assert_ptr_null(m);
    qn_maint_free(NULL);
    event_base_free(B);
    B = NULL;
}
END_TEST

static Suite *maint_loop_suite(void)
{
    Suite *s = suite_create("maint_loop");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, config_checked);
    tcase_add_test(tc, two_loops_one_sweeps);
    tcase_add_test(tc, work_follows_deletable_partitions);
    tcase_add_test(tc, backlog_drains_in_short_steps);
    tcase_add_test(tc, retention_rule_all);
    tcase_add_test(tc, retention_rule_completed);
    tcase_add_test(tc, sidecar_purge);
    tcase_add_test(tc, max_wait_eviction);
    tcase_add_test(tc, partition_cleanup);
    tcase_add_test(tc, info_line_only_when_deleting);
    tcase_add_test(tc, metrics_purge_and_its_failure);
    tcase_add_test(tc, lock_released_after_error);
    tcase_add_test(tc, worklist_paging);
    tcase_add_test(tc, shutdown_mid_cycle);
    tcase_add_test(tc, lost_session_releases_the_lock);
    tcase_add_test(tc, periodic_cycles);
    suite_add_tcase(s, tc);
    return s;
}

static void prepare(const char *only)
{
    (void)only;
    if (build_template() != 0)
        fprintf(stderr, "maint tests: no schema template (no cluster, or the schema failed "
                        "to apply); the tests will say why\n");
}

static const struct qn_check_suite suites[] = {
    {"maint_loop", maint_loop_suite, false},
};

const struct qn_check_runner qn_check_runner = {"test_maint_loop", suites, QN_CHECK_NSUITES(suites),
                                                prepare};
