/*
 * pgtest.c - see pgtest.h. Test-only code: failures end the test with a message.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgtest.h"
#include "queen/migrate.h"

char *qn_test_pg_base_url(void)
{
    const char *env = getenv("QUEEN_TEST_DATABASE_URL");
    if (env != NULL && *env)
        return strdup(env);
#ifdef QN_TEST_PG_URL_FILE
    FILE *f = fopen(QN_TEST_PG_URL_FILE, "r");
    if (f == NULL)
        return NULL;
    char buf[1024];
    char *line = fgets(buf, sizeof buf, f);
    fclose(f);
    if (line == NULL)
        return NULL;
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf[0] ? strdup(buf) : NULL;
#else
    return NULL;
#endif
}

/* Rebuilds base as keyword conninfo with dbname replaced. */
static char *with_dbname(const char *base, const char *db)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(base, &err);
    if (opts == NULL) {
        ck_abort_msg("bad test database url %s: %s", base, err ? err : "?");
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *out = calloc(1, cap);
    ck_assert_ptr_nonnull(out);
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        const char *v = strcmp(o->keyword, "dbname") == 0 ? db : o->val;
        if (v == NULL || !*v)
            continue;
        n += (size_t)snprintf(out + n, cap - n, "%s='%s' ", o->keyword, v);
        ck_assert_uint_lt(n, cap);
    }
    if (strstr(out, "dbname=") == NULL)
        n += (size_t)snprintf(out + n, cap - n, "dbname='%s' ", db);
    PQconninfoFree(opts);
    return out;
}

PGconn *qn_test_pg_connect(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "cannot connect to %s: %s", conninfo,
                  PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

PGresult *qn_test_pg_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    ck_assert_msg(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "sql failed: %s\n%s",
                  PQresultErrorMessage(r), sql);
    return r;
}

char *qn_test_pg_value(PGconn *c, const char *sql)
{
    PGresult *r = qn_test_pg_exec(c, sql);
    ck_assert_msg(PQntuples(r) == 1 && PQnfields(r) >= 1, "expected one row from: %s", sql);
    char *v = PQgetisnull(r, 0, 0) ? NULL : strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

char *qn_test_pg_fresh_db(const char *name)
{
    char *base = qn_test_pg_base_url();
    ck_assert_msg(base != NULL, "no test database: set QUEEN_TEST_DATABASE_URL or run via ctest");
    PGconn *c = qn_test_pg_connect(base);
    char sql[512];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name);
    PQclear(qn_test_pg_exec(c, sql));
    snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\"", name);
    PQclear(qn_test_pg_exec(c, sql));
    PQfinish(c);
    char *ci = with_dbname(base, name);
    free(base);
    return ci;
}

char *qn_test_pg_fresh_schema(const char *name)
{
    char *ci = qn_test_pg_fresh_db(name);
    char err[1024] = "";
    struct qn_migrate_report rep;
    int rc = qn_migrate(ci, 60000, &rep, err, sizeof err);
    ck_assert_msg(rc == 0, "migrate failed: %s", err);
    return ci;
}
