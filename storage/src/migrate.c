/*
 * migrate.c - applies the embedded sql/ files (see queen/migrate.h).
 *
 * Does: connect, take advisory lock 737000 by polling, repair invalid indexes a
 * failed concurrent build left behind, apply every file whose checksum changed,
 * record checksums in qn.schema_files (schema qn is ours alone: nothing here
 * touches a name Queen MQ's own SQL uses), unlock.
 * Does not: run from the event loop (it blocks), or undo anything (files are
 * written to be re-applied, never rolled back).
 *
 * Invariants:
 *   1. A transactional file and its checksum row commit together: a file is
 *      either applied and recorded, or neither.
 *   2. The advisory lock is released on every exit path after it was taken
 *      (closing the session releases it too).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "queen/error.h"
#include "queen/ids.h"
#include "queen/migrate.h"

struct qn_embedded_file {
    const char *name;
    const uint8_t *data;
    size_t len;
};
extern const struct qn_embedded_file qn_sql_files[];
extern const size_t qn_sql_files_count;

#define MIGRATE_LOCK_KEY 737000

static void fail_msg(char *errbuf, size_t cap, const char *fmt, ...)
{
    if (errbuf == NULL || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, cap, fmt, ap);
    va_end(ap);
}

/* Runs sql; true when it succeeded. On failure copies the server's message. */
static bool run(PGconn *c, const char *sql, char *errbuf, size_t cap, const char *what)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok) {
        const char *m = PQresultErrorMessage(r);
        fail_msg(errbuf, cap, "%s: %s", what, m && *m ? m : PQerrorMessage(c));
    }
    PQclear(r);
    return ok;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool take_lock(PGconn *c, int wait_ms)
{
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT pg_try_advisory_lock(%d)", MIGRATE_LOCK_KEY);
    for (int waited = 0;; waited += 50) {
        PGresult *r = PQexec(c, sql);
        bool got = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
                   strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
        if (got)
            return true;
        if (waited >= wait_ms)
            return false;
        sleep_ms(50);
    }
}

/* The checksum recorded for a file, into out[33]; empty string when none. */
static bool recorded_sum(PGconn *c, const char *name, char out[33], char *errbuf, size_t cap)
{
    const char *params[1] = {name};
    PGresult *r = PQexecParams(c, "SELECT checksum FROM qn.schema_files WHERE name = $1", 1, NULL,
                               params, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    out[0] = '\0';
    if (ok && PQntuples(r) == 1)
        snprintf(out, 33, "%s", PQgetvalue(r, 0, 0));
    if (!ok)
        fail_msg(errbuf, cap, "reading schema_files: %s", PQresultErrorMessage(r));
    PQclear(r);
    return ok;
}

static bool record_sum(PGconn *c, const char *name, const char *sum, char *errbuf, size_t cap)
{
    const char *params[2] = {name, sum};
    PGresult *r = PQexecParams(c,
                               "INSERT INTO qn.schema_files (name, checksum) VALUES ($1, $2) "
                               "ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, "
                               "applied_at = now()",
                               2, NULL, params, NULL, NULL, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fail_msg(errbuf, cap, "recording %s: %s", name, PQresultErrorMessage(r));
    PQclear(r);
    return ok;
}

/* Statement-by-statement, autocommit: for CREATE INDEX CONCURRENTLY. */
static bool apply_no_txn(PGconn *c, const struct qn_embedded_file *f, char *errbuf, size_t cap)
{
    char *copy = malloc(f->len + 1);
    if (copy == NULL) {
        fail_msg(errbuf, cap, "out of memory");
        return false;
    }
    memcpy(copy, f->data, f->len);
    copy[f->len] = '\0';
    bool ok = true;
    char *stmt = copy;
    while (ok && *stmt) {
        char *end = strstr(stmt, ";\n");
        if (end != NULL)
            *end = '\0';
        /* skip statements made only of whitespace and comments */
        bool has_sql = false;
        for (const char *line = stmt; line && *line;) {
            const char *nl = strchr(line, '\n');
            size_t n = nl ? (size_t)(nl - line) : strlen(line);
            size_t i = 0;
            while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
                i++;
            if (i < n && !(n - i >= 2 && line[i] == '-' && line[i + 1] == '-'))
                has_sql = true;
            line = nl ? nl + 1 : NULL;
        }
        if (has_sql) {
            char what[160];
            snprintf(what, sizeof what, "applying %s", f->name);
            ok = run(c, stmt, errbuf, cap, what);
        }
        if (end == NULL)
            break;
        stmt = end + 2;
    }
    free(copy);
    return ok;
}

/* Drops indexes of the queen schema left INVALID by an interrupted concurrent
 * build, so the IF NOT EXISTS in the schema files builds them again. */
static bool repair_invalid_indexes(PGconn *c, char *errbuf, size_t cap)
{
    PGresult *r = PQexec(c, "SELECT format('%I.%I', n.nspname, i.relname) FROM pg_index x "
                            "JOIN pg_class i ON i.oid = x.indexrelid "
                            "JOIN pg_namespace n ON n.oid = i.relnamespace "
                            "WHERE n.nspname = 'queen' AND NOT x.indisvalid");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fail_msg(errbuf, cap, "checking indexes: %s", PQresultErrorMessage(r));
        PQclear(r);
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < PQntuples(r); i++) {
        char sql[600];
        snprintf(sql, sizeof sql, "DROP INDEX CONCURRENTLY IF EXISTS %s", PQgetvalue(r, i, 0));
        ok = run(c, sql, errbuf, cap, "dropping an invalid index");
    }
    PQclear(r);
    return ok;
}

int qn_migrate(const char *conninfo, int lock_wait_ms, struct qn_migrate_report *rep, char *errbuf,
               size_t errcap)
{
    struct qn_migrate_report out = {(int)qn_sql_files_count, 0};
    int rc = QN_EDB;
    bool locked = false;
    PGconn *c = PQconnectdb(conninfo);

    if (PQstatus(c) != CONNECTION_OK) {
        fail_msg(errbuf, errcap, "cannot connect to the database: %s", PQerrorMessage(c));
        rc = QN_EUNAVAILABLE;
        goto out;
    }
    if (!run(c, "SET client_min_messages = warning", errbuf, errcap, "session setup"))
        goto out;
    if (!take_lock(c, lock_wait_ms)) {
        fail_msg(errbuf, errcap, "another migration held the schema lock for %d ms", lock_wait_ms);
        rc = QN_ETIMEOUT;
        goto out;
    }
    locked = true;
    if (!run(c,
             "CREATE SCHEMA IF NOT EXISTS qn;"
             "CREATE TABLE IF NOT EXISTS qn.schema_files ("
             "  name TEXT PRIMARY KEY, checksum TEXT NOT NULL,"
             "  applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
             errbuf, errcap, "creating qn.schema_files"))
        goto out;
    if (!repair_invalid_indexes(c, errbuf, errcap))
        goto out;

    for (size_t i = 0; i < qn_sql_files_count; i++) {
        const struct qn_embedded_file *f = &qn_sql_files[i];
        uint8_t h[QN_HASH_LEN];
        char sum[33], have[33], what[160];

        qn_txn_hash(f->data, f->len, h);
        qn_hash_hex(h, sum);
        if (!recorded_sum(c, f->name, have, errbuf, errcap))
            goto out;
        if (strcmp(sum, have) == 0)
            continue;
        snprintf(what, sizeof what, "applying %s", f->name);
        if (strstr((const char *)f->data, "-- queen:no-transaction") != NULL) {
            if (!apply_no_txn(c, f, errbuf, errcap) || !record_sum(c, f->name, sum, errbuf, errcap))
                goto out;
        } else {
            if (!run(c, "BEGIN", errbuf, errcap, what))
                goto out;
            if (!run(c, (const char *)f->data, errbuf, errcap, what) ||
                !record_sum(c, f->name, sum, errbuf, errcap) ||
                !run(c, "COMMIT", errbuf, errcap, what)) {
                PQclear(PQexec(c, "ROLLBACK"));
                goto out;
            }
        }
        out.files_applied++;
    }
    rc = QN_OK;
    if (rep != NULL)
        *rep = out;
out:
    if (locked) {
        char sql[64];
        snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%d)", MIGRATE_LOCK_KEY);
        PQclear(PQexec(c, sql));
    }
    PQfinish(c);
    return rc;
}
