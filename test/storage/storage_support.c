/*
 * storage_support.c - helpers of the storage suites (storage_test.h): driving
 * the loop, making stores, per-test databases cloned from a schema template.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "pgtest.h"
#include "queen/error.h"
#include "queen/migrate.h"
#include "storage_test.h"
#include "store_int.h"

#define TEMPLATE_DB "qn_storage_tmpl"

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

bool qt_run_until_count(struct event_base *b, const int *n, int target, int timeout_ms)
{
    struct event *t = event_new(b, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(t, &tv);
    int64_t end = qn_store_now_ms() + timeout_ms;
    while (*n < target && qn_store_now_ms() < end)
        event_base_loop(b, EVLOOP_ONCE);
    event_free(t);
    return *n >= target;
}

bool qt_run_until(struct event_base *b, const bool *flag, int timeout_ms)
{
    struct event *t = event_new(b, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(t, &tv);
    int64_t end = qn_store_now_ms() + timeout_ms;
    while (!*flag && qn_store_now_ms() < end)
        event_base_loop(b, EVLOOP_ONCE);
    event_free(t);
    return *flag;
}

void qt_run_for(struct event_base *b, int ms)
{
    bool never = false;
    qt_run_until(b, &never, ms);
}

qn_store *qt_store_cfg(struct event_base *b, const struct qn_store_config *cfg)
{
    qn_store *st = NULL;
    ck_assert_int_eq(qn_store_new(b, cfg, &st), QN_OK);
    int64_t end = qn_store_now_ms() + 10000;
    while (!qn_store_is_up(st) && qn_store_now_ms() < end)
        qt_run_for(b, 10);
    ck_assert_msg(qn_store_is_up(st), "store did not come up");
    return st;
}

qn_store *qt_store(struct event_base *b, const char *conninfo, int pool, int depth)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = conninfo;
    cfg.pool_size = pool;
    cfg.pipeline_depth = depth;
    return qt_store_cfg(b, &cfg);
}

void qt_copy_status(struct qt_status *o, const struct qn_store_status *st)
{
    o->done = true;
    o->calls++;
    o->code = st->code;
    snprintf(o->sqlstate, sizeof o->sqlstate, "%s", st->sqlstate ? st->sqlstate : "(null)");
    snprintf(o->message, sizeof o->message, "%s", st->message ? st->message : "(null)");
}

static void exec_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct qt_status *o = ud;
    qt_copy_status(o, st);
    o->ntuples = res ? PQntuples(res) : -1;
    o->value[0] = '\0';
    o->value_null = true;
    if (res && PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0)) {
        snprintf(o->value, sizeof o->value, "%s", PQgetvalue(res, 0, 0));
        o->value_null = false;
    }
}

int qt_exec(struct event_base *b, qn_store *st, const char *sql, struct qt_status *out)
{
    struct qt_status local;
    struct qt_status *o = out ? out : &local;
    memset(o, 0, sizeof *o);
    int rc = qn__store_sql(st, -1, sql, NULL, NULL, 0, NULL, exec_cb, o, NULL);
    if (rc != QN_OK)
        return rc;
    ck_assert_msg(qt_run_until(b, &o->done, 30000), "no answer to %s", sql);
    return o->code;
}

void qt_bytes16(uint64_t seed, uint8_t out[16])
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < 16; i++) {
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        out[i] = (uint8_t)(x >> 56);
    }
}

/* ---------------------------------------------------------------- databases */

/* base with dbname replaced, keyword form (malloc'd); NULL on a bad base. */
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

static bool run_admin(const char *base, const char *sql)
{
    PGconn *c = PQconnectdb(base);
    bool ok = PQstatus(c) == CONNECTION_OK;
    if (ok) {
        PQclear(PQexec(c, "SET client_min_messages = warning"));
        PGresult *r = PQexec(c, sql);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok)
            fprintf(stderr, "storage tests: %s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(c);
    return ok;
}

int qt_build_template(void);
int qt_build_template(void)
{
    char *base = qn_test_pg_base_url();
    if (base == NULL)
        return -1;
    char *ci = NULL;
    int rc = -1;
    if (!run_admin(base, "DROP DATABASE IF EXISTS " TEMPLATE_DB " WITH (FORCE)") ||
        !run_admin(base, "CREATE DATABASE " TEMPLATE_DB))
        goto out;
    ci = with_dbname(base, TEMPLATE_DB);
    char err[1024] = "";
    if (ci == NULL || qn_migrate(ci, 60000, NULL, err, sizeof err) != QN_OK) {
        fprintf(stderr, "storage tests: schema template: %s\n", err);
        run_admin(base, "DROP DATABASE IF EXISTS " TEMPLATE_DB " WITH (FORCE)");
        goto out;
    }
    rc = 0;
out:
    free(ci);
    free(base);
    return rc;
}

char *qt_db_plain(const char *name)
{
    return qn_test_pg_fresh_db(name);
}

char *qt_db_schema(const char *name)
{
    char *base = qn_test_pg_base_url();
    ck_assert_msg(base != NULL, "no test database: set QUEEN_TEST_DATABASE_URL or run via ctest");
    char sql[512];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name);
    ck_assert(run_admin(base, sql));
    snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\" TEMPLATE " TEMPLATE_DB, name);
    if (!run_admin(base, sql)) {
        free(base);
        return qn_test_pg_fresh_schema(name);
    }
    char *ci = with_dbname(base, name);
    free(base);
    ck_assert_ptr_nonnull(ci);
    return ci;
}
