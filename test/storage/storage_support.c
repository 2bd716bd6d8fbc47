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
    /* every connection, so that tests relying on several sessions get them */
    struct qn_store_stats s;
    int64_t end = qn_store_now_ms() + 10000;
    do {
        qt_run_for(b, 5);
        qn_store_get_stats(st, &s);
    } while (s.connections_up < (uint32_t)cfg->pool_size && qn_store_now_ms() < end);
    ck_assert_msg(s.connections_up == (uint32_t)cfg->pool_size, "store did not come up");
    return st;
}

qn_store *qt_store(struct event_base *b, const char *conninfo, int pool, int depth)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = conninfo;
    cfg.pool_size = pool;
    cfg.pipeline_depth = depth;
    cfg.write_reserve = 0; /* every connection serves both lanes (lane tests set it) */
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

char *qt_conninfo_via(const char *conninfo, int port, char host[128], int *dbport)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &err);
    ck_assert_msg(opts != NULL, "bad conninfo: %s", err ? err : "?");
    size_t cap = strlen(conninfo) + 256, n = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    out[0] = '\0';
    if (host != NULL)
        host[0] = '\0';
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val == NULL)
            continue;
        if (strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0) {
            if (host != NULL)
                snprintf(host, 128, "%s", o->val);
            continue;
        }
        if (strcmp(o->keyword, "port") == 0) {
            if (dbport != NULL)
                *dbport = atoi(o->val);
            continue;
        }
        n += (size_t)snprintf(out + n, cap - n, "%s='%s' ", o->keyword, o->val);
    }
    snprintf(out + n, cap - n, "host='127.0.0.1' port='%d'", port);
    PQconninfoFree(opts);
    return out;
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

/* ---------------------------------------------------------------- segments */

#include "queen/ids.h"
#include "queen/segment.h"

void qt_seg_make(struct qt_seg *s, uint32_t count, const char *prefix, uint64_t first)
{
    qn_zctx *z = NULL;
    ck_assert_int_eq(qn_zctx_new(&z), QN_OK);
    struct qn_frame *f = calloc(count, sizeof *f);
    char(*txn)[64] = calloc(count, sizeof *txn);
    char(*payload)[96] = calloc(count, sizeof *payload);
    ck_assert(f && txn && payload);
    for (uint32_t i = 0; i < count; i++) {
        snprintf(txn[i], sizeof txn[i], "%s-%llu", prefix, (unsigned long long)(first + i));
        int pl = snprintf(payload[i], sizeof payload[i], "{\"n\":%llu,\"kind\":\"test\"}",
                          (unsigned long long)(first + i));
        qt_bytes16(first + i, f[i].message_id);
        f[i].txn = (const uint8_t *)txn[i];
        f[i].txn_len = strlen(txn[i]);
        f[i].payload = (const uint8_t *)payload[i];
        f[i].payload_len = (size_t)pl;
    }
    struct qn_buf blob = {0};
    s->hashes = malloc((size_t)count * 16);
    ck_assert_int_eq(qn_segment_pack(z, f, count, 1, &blob, s->hashes), QN_OK);
    s->blob = blob.data;
    s->blob_len = blob.len;
    s->count = count;
    free(f);
    free(txn);
    free(payload);
    qn_zctx_free(z);
}

void qt_seg_free(struct qt_seg *s)
{
    struct qn_buf b = {s->blob, s->blob_len};
    qn_buf_free(&b);
    free(s->hashes);
    memset(s, 0, sizeof *s);
}

struct qn_push_segment qt_push_seg(const struct qt_seg *s, const char *queue, const char *partition)
{
    struct qn_push_segment p = {.queue = queue,
                                .partition = partition,
                                .count = s->count,
                                .hashes = s->hashes,
                                .verified = -1,
                                .blob = s->blob,
                                .blob_len = s->blob_len};
    return p;
}

/* ---------------------------------------------------------------- sync wrappers */

static void push_cb(void *ud, const struct qn_store_status *st, const struct qn_push_result *r)
{
    struct qt_push_out *o = ud;
    qt_copy_status(&o->s, st);
    o->n = 0;
    if (r == NULL)
        return;
    ck_assert_uint_le(r->n, 16);
    o->n = r->n;
    for (size_t i = 0; i < r->n; i++) {
        o->segs[i] = r->segs[i];
        ck_assert_uint_le(r->segs[i].ndups, 16);
        for (size_t k = 0; k < r->segs[i].ndups; k++)
            o->dups[i][k] = r->segs[i].dups[k];
        o->segs[i].dups = o->dups[i];
    }
}

int qt_push(struct event_base *b, qn_store *st, const struct qn_push_segment *segs, size_t n,
            bool strict, struct qt_push_out *out)
{
    memset(out, 0, sizeof *out);
    int rc = qn_store_push(st, segs, n, strict, NULL, push_cb, out, NULL);
    if (rc != QN_OK)
        return rc;
    ck_assert(qt_run_until(b, &out->s.done, 10000));
    return out->s.code;
}

int qt_push1(struct event_base *b, qn_store *st, const char *queue, const char *partition,
             const struct qt_seg *seg, struct qt_push_out *out)
{
    struct qn_push_segment p = qt_push_seg(seg, queue, partition);
    return qt_push(b, st, &p, 1, false, out);
}

static void pop_cb(void *ud, const struct qn_store_status *st, const struct qn_pop_result *r)
{
    struct qt_pop_out *o = ud;
    qt_copy_status(&o->s, st);
    o->n = 0;
    if (r == NULL)
        return;
    ck_assert_uint_le(r->n, 32);
    o->n = r->n;
    for (size_t i = 0; i < r->n; i++) {
        o->segs[i] = r->segs[i];
        snprintf(o->queue[i], sizeof o->queue[i], "%s", r->segs[i].queue);
        snprintf(o->partition[i], sizeof o->partition[i], "%s", r->segs[i].partition);
        o->segs[i].queue = o->queue[i];
        o->segs[i].partition = o->partition[i];
        /* blobs are borrowed: keep a copy for comparisons (NULL if too big) */
        o->segs[i].blob = NULL;
        if (r->segs[i].blob_len <= sizeof o->blobdata - o->blobused) {
            memcpy(o->blobdata + o->blobused, r->segs[i].blob, r->segs[i].blob_len);
            o->segs[i].blob = o->blobdata + o->blobused;
            o->blobused += r->segs[i].blob_len;
        }
    }
}

int qt_pop(struct event_base *b, qn_store *st, const struct qn_pop_args *a, struct qt_pop_out *out)
{
    memset(out, 0, sizeof *out);
    int rc = qn_store_pop(st, a, NULL, pop_cb, out, NULL);
    if (rc != QN_OK)
        return rc;
    ck_assert(qt_run_until(b, &out->s.done, 10000));
    return out->s.code;
}

struct qn_pop_args qt_pop_args(const char *queue, const char *partition, const char *group,
                               const char *worker, int32_t budget)
{
    struct qn_pop_args a;
    memset(&a, 0, sizeof a);
    a.queue = queue;
    a.partition = partition;
    a.group = group;
    a.worker = worker;
    a.budget = budget;
    a.max_partitions = 1;
    a.sub_mode = QN_SUB_ALL;
    return a;
}

static void ack_cb(void *ud, const struct qn_store_status *st, const struct qn_ack_result *r)
{
    struct qt_ack_out *o = ud;
    qt_copy_status(&o->s, st);
    if (r == NULL)
        return;
    ck_assert_uint_le(r->n, 64);
    o->r = *r;
    for (size_t i = 0; i < r->n; i++)
        o->items[i] = r->items[i];
    o->r.items = o->items;
    o->r.dlq_blob = NULL; /* borrowed; tests check dlq_blob_len */
}

int qt_ack(struct event_base *b, qn_store *st, const struct qn_ack_args *a, struct qt_ack_out *out)
{
    memset(out, 0, sizeof *out);
    int rc = qn_store_ack(st, a, NULL, ack_cb, out, NULL);
    if (rc != QN_OK)
        return rc;
    ck_assert(qt_run_until(b, &out->s.done, 10000));
    return out->s.code;
}

char *qt_value(const char *conninfo, const char *sql)
{
    PGconn *c = qn_test_pg_connect(conninfo);
    char *v = qn_test_pg_value(c, sql);
    PQfinish(c);
    return v;
}
