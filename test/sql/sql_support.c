/*
 * sql_support.c - see sql_test.h. Test-only code: every failure ends the test.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "pgtest.h"
#include "queen/ids.h"
#include "sql_test.h"

char *qt_conninfo;

void qt_suite_db(const char *suite)
{
    char name[128];
    snprintf(name, sizeof name, "queen_test_sql_%s", suite);
    free(qt_conninfo);
    qt_conninfo = qn_test_pg_fresh_schema(name);
}

TCase *qt_tcase(const char *name, void (*fixture)(void), int timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, fixture, NULL);
    tcase_set_timeout(tc, timeout_s);
    return tc;
}

PGconn *qt_connect(void)
{
    ck_assert_msg(qt_conninfo != NULL, "suite database not set up");
    return qn_test_pg_connect(qt_conninfo);
}

static char *vfmt(const char *fmt, va_list ap)
{
    char *s = NULL;
    ck_assert_int_ge(vasprintf(&s, fmt, ap), 0);
    return s;
}

PGresult *qt_q(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = vfmt(fmt, ap);
    va_end(ap);
    PGresult *r = qn_test_pg_exec(c, sql);
    free(sql);
    return r;
}

const char *qt_fail(PGconn *c, char *msg, size_t msgcap, const char *fmt, ...)
{
    static char state[8];
    va_list ap;
    va_start(ap, fmt);
    char *sql = vfmt(fmt, ap);
    va_end(ap);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    ck_assert_msg(st == PGRES_FATAL_ERROR, "expected an error from: %s", sql);
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(state, sizeof state, "%s", s ? s : "");
    if (msg != NULL) {
        const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        snprintf(msg, msgcap, "%s", m ? m : "");
    }
    PQclear(r);
    free(sql);
    return state;
}

static PGresult *one(PGconn *c, const char *fmt, va_list ap)
{
    char *sql = vfmt(fmt, ap);
    PGresult *r = qn_test_pg_exec(c, sql);
    ck_assert_msg(PQntuples(r) == 1 && PQnfields(r) >= 1, "expected one row from: %s", sql);
    free(sql);
    return r;
}

int64_t qt_i(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = one(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(!PQgetisnull(r, 0, 0), "unexpected NULL");
    int64_t v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

bool qt_b(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = one(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(!PQgetisnull(r, 0, 0), "unexpected NULL");
    bool v = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    return v;
}

/* Strings handed out by qt_s: a ring, so callers may use them inline without
 * freeing (each stays valid until 64 more have been handed out). */
static char *ring[64];
static unsigned ring_next;

char *qt_s(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = one(c, fmt, ap);
    va_end(ap);
    char *v = PQgetisnull(r, 0, 0) ? NULL : strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    unsigned slot = ring_next++ % 64;
    free(ring[slot]);
    ring[slot] = v;
    return v;
}

bool qt_null(PGconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = one(c, fmt, ap);
    va_end(ap);
    bool v = PQgetisnull(r, 0, 0);
    PQclear(r);
    return v;
}

static int col(const PGresult *r, const char *name)
{
    int f = PQfnumber(r, name);
    ck_assert_msg(f >= 0, "no column %s", name);
    return f;
}

int64_t qt_gi(const PGresult *r, int row, const char *name)
{
    int f = col(r, name);
    ck_assert_msg(row < PQntuples(r), "row %d of %d", row, PQntuples(r));
    ck_assert_msg(!PQgetisnull(r, row, f), "NULL %s in row %d", name, row);
    return strtoll(PQgetvalue(r, row, f), NULL, 10);
}

bool qt_gnull(const PGresult *r, int row, const char *name)
{
    ck_assert_msg(row < PQntuples(r), "row %d of %d", row, PQntuples(r));
    return PQgetisnull(r, row, col(r, name));
}

const char *qt_gs(const PGresult *r, int row, const char *name)
{
    ck_assert_msg(row < PQntuples(r), "row %d of %d", row, PQntuples(r));
    return PQgetvalue(r, row, col(r, name));
}

void qt_hash(const char *txn, uint8_t out[16])
{
    qn_txn_hash(txn, strlen(txn), out);
}

void qt_seg_make(struct qt_seg *s, const char *queue, const char *part, const char *prefix,
                 int first, int n, size_t raw_per_msg)
{
    memset(s, 0, sizeof *s);
    snprintf(s->queue, sizeof s->queue, "%s", queue);
    snprintf(s->part, sizeof s->part, "%s", part ? part : "");
    s->n = n;
    s->verified = -1;
    s->hashes = malloc((size_t)n * 16);
    ck_assert_ptr_nonnull(s->hashes);
    for (int i = 0; i < n; i++) {
        char txn[160];
        snprintf(txn, sizeof txn, "%s%d", prefix, first + i);
        qt_hash(txn, s->hashes + (size_t)i * 16);
    }
    size_t raw = (size_t)n * (raw_per_msg ? raw_per_msg : 64);
    uint8_t *src = malloc(raw);
    ck_assert_ptr_nonnull(src);
    for (size_t i = 0; i < raw; i++)
        src[i] = (uint8_t)((i * 131u + (size_t)first * 7u) & 0xff);
    size_t cap = ZSTD_compressBound(raw);
    s->blob = malloc(cap);
    ck_assert_ptr_nonnull(s->blob);
    s->blob_len = ZSTD_compress(s->blob, cap, src, raw, 1);
    ck_assert(!ZSTD_isError(s->blob_len));
    free(src);
}

void qt_seg_opaque_blob(struct qt_seg *s, size_t len)
{
    free(s->blob);
    s->blob = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(s->blob);
    memset(s->blob, 0x5a, len);
    s->blob_len = len;
}

void qt_seg_free(struct qt_seg *s)
{
    free(s->hashes);
    free(s->blob);
    s->hashes = s->blob = NULL;
}

/* ---- binary arrays: ndim, hasnull, elemtype, dim, lbound, then (len, bytes)* */

struct buf {
    char *p;
    size_t len, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void put32(struct buf *b, int32_t v)
{
    uint32_t u = (uint32_t)v;
    uint8_t x[4] = {(uint8_t)(u >> 24), (uint8_t)(u >> 16), (uint8_t)(u >> 8), (uint8_t)u};
    put(b, x, 4);
}

static void put64(struct buf *b, int64_t v)
{
    put32(b, (int32_t)((uint64_t)v >> 32));
    put32(b, (int32_t)(uint32_t)v);
}

static void arr_head(struct buf *b, int n, int32_t elemtype, bool hasnull)
{
    put32(b, 1);
    put32(b, hasnull ? 1 : 0);
    put32(b, elemtype);
    put32(b, n);
    put32(b, 1);
}

#define OID_BYTEA 17
#define OID_INT8 20
#define OID_INT2 21
#define OID_INT4 23
#define OID_TEXT 25

static void arr_bytea(struct buf *b, int n, const uint8_t *const *v, const size_t *lens)
{
    arr_head(b, n, OID_BYTEA, true);
    for (int i = 0; i < n; i++) {
        if (v[i] == NULL) {
            put32(b, -1);
        } else {
            put32(b, (int32_t)lens[i]);
            put(b, v[i], lens[i]);
        }
    }
}

static void arr_text(struct buf *b, int n, const char *const *v)
{
    arr_head(b, n, OID_TEXT, true);
    for (int i = 0; i < n; i++) {
        if (v[i] == NULL) {
            put32(b, -1);
        } else {
            put32(b, (int32_t)strlen(v[i]));
            put(b, v[i], strlen(v[i]));
        }
    }
}

/* null[i] true -> NULL element */
static void arr_int(struct buf *b, int n, int32_t type, const int64_t *v, const bool *null)
{
    arr_head(b, n, type, true);
    for (int i = 0; i < n; i++) {
        if (null != NULL && null[i]) {
            put32(b, -1);
            continue;
        }
        if (type == OID_INT8) {
            put32(b, 8);
            put64(b, v[i]);
        } else if (type == OID_INT4) {
            put32(b, 4);
            put32(b, (int32_t)v[i]);
        } else {
            put32(b, 2);
            uint16_t u = (uint16_t)v[i];
            uint8_t x[2] = {(uint8_t)(u >> 8), (uint8_t)u};
            put(b, x, 2);
        }
    }
}

PGresult *qt_push_raw(PGconn *c, const struct qt_seg *segs, int n, bool strict)
{
    struct buf q = {0}, p = {0}, cnt = {0}, h = {0}, v = {0}, bl = {0};
    const char **qs = calloc((size_t)n + 1, sizeof *qs);
    const char **ps = calloc((size_t)n + 1, sizeof *ps);
    const uint8_t **hs = calloc((size_t)n + 1, sizeof *hs);
    const uint8_t **bs = calloc((size_t)n + 1, sizeof *bs);
    size_t *hl = calloc((size_t)n + 1, sizeof *hl);
    size_t *blen = calloc((size_t)n + 1, sizeof *blen);
    int64_t *ns = calloc((size_t)n + 1, sizeof *ns);
    int64_t *vs = calloc((size_t)n + 1, sizeof *vs);
    for (int i = 0; i < n; i++) {
        qs[i] = segs[i].queue;
        ps[i] = segs[i].part;
        hs[i] = segs[i].hashes;
        hl[i] = (size_t)segs[i].n * 16;
        bs[i] = segs[i].blob;
        blen[i] = segs[i].blob_len;
        ns[i] = segs[i].n;
        vs[i] = segs[i].verified;
    }
    arr_text(&q, n, qs);
    arr_text(&p, n, ps);
    arr_int(&cnt, n, OID_INT4, ns, NULL);
    arr_bytea(&h, n, hs, hl);
    arr_int(&v, n, OID_INT8, vs, NULL);
    arr_bytea(&bl, n, bs, blen);
    const char *vals[7] = {q.p, p.p, cnt.p, h.p, v.p, bl.p, strict ? "t" : "f"};
    int lens[7] = {(int)q.len, (int)p.len, (int)cnt.len, (int)h.len, (int)v.len, (int)bl.len, 0};
    int fmts[7] = {1, 1, 1, 1, 1, 1, 0};
    PGresult *r = PQexecParams(c,
                               "SELECT * FROM qn.push_v1($1::text[], $2::text[], $3::int4[], "
                               "$4::bytea[], $5::int8[], $6::bytea[], $7::bool)",
                               7, NULL, vals, lens, fmts, 0);
    free(q.p), free(p.p), free(cnt.p), free(h.p), free(v.p), free(bl.p);
    free(qs), free(ps), free(hs), free(bs), free(hl), free(blen), free(ns), free(vs);
    return r;
}

PGresult *qt_push(PGconn *c, const struct qt_seg *segs, int n, bool strict)
{
    PGresult *r = qt_push_raw(c, segs, n, strict);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "push failed: %s", PQresultErrorMessage(r));
    return r;
}

int64_t qt_push1(PGconn *c, const char *queue, const char *part, const char *prefix, int first,
                 int n)
{
    struct qt_seg s;
    qt_seg_make(&s, queue, part, prefix, first, n, 0);
    PGresult *r = qt_push(c, &s, 1, false);
    ck_assert_int_eq(PQntuples(r), 1);
    ck_assert_int_eq(qt_gi(r, 0, "r_status"), 0);
    int64_t base = qt_gi(r, 0, "r_base");
    PQclear(r);
    qt_seg_free(&s);
    return base;
}

void qt_pid(PGconn *c, const char *queue, const char *part, char out[37])
{
    char *v = qt_s(c,
                   "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = "
                   "p.queue_id WHERE q.name = '%s' AND p.name = '%s'",
                   queue, part && *part ? part : "Default");
    ck_assert_ptr_nonnull(v);
    snprintf(out, 37, "%s", v);
}

/* qt_pop's statement: sent now, its result read by the caller (async) or by
 * qt_pop. */
static int pop_send(PGconn *c, const struct qt_pop *p)
{
    char budget[16], maxb[24], ovh[16], maxm[16], lease[16], maxp[16];
    snprintf(budget, sizeof budget, "%d", p->budget);
    snprintf(maxb, sizeof maxb, "%lld", (long long)p->max_bytes);
    snprintf(ovh, sizeof ovh, "%d", p->overhead);
    snprintf(maxm, sizeof maxm, "%d", p->max_msg);
    snprintf(lease, sizeof lease, "%d", p->lease_seconds);
    snprintf(maxp, sizeof maxp, "%d", p->max_partitions);
    const char *vals[13] = {p->queue,
                            p->part,
                            p->group,
                            budget,
                            maxb,
                            ovh,
                            maxm,
                            lease,
                            p->worker ? p->worker : "",
                            p->auto_ack ? "t" : "f",
                            maxp,
                            p->sub_mode ? p->sub_mode : "all",
                            p->sub_from};
    return PQsendQueryParams(c,
                             "SELECT * FROM qn.pop_v1($1, $2, $3, $4::int4, $5::int8, "
                             "$6::int4, $7::int4, $8::int4, $9, $10::bool, $11::int4, $12, "
                             "$13::timestamptz)",
                             13, NULL, vals, NULL, NULL, 0);
}

void qt_pop_send(PGconn *c, const struct qt_pop *p)
{
    ck_assert_msg(pop_send(c, p), "cannot send the pop: %s", PQerrorMessage(c));
}

PGresult *qt_pop(PGconn *c, const struct qt_pop *p)
{
    qt_pop_send(c, p);
    PGresult *r = PQgetResult(c);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "pop failed: %s", PQresultErrorMessage(r));
    PGresult *end = PQgetResult(c);
    ck_assert_msg(end == NULL, "pop: more than one result");
    return r;
}

int64_t qt_taken(const PGresult *r)
{
    int64_t n = 0;
    for (int i = 0; i < PQntuples(r); i++)
        n += qt_gi(r, i, "r_take");
    return n;
}

PGresult *qt_ack_raw(PGconn *c, const char *pid, const char *group, const char *worker,
                     const struct qt_ack_item *items, int n, bool strict)
{
    struct buf h = {0}, o = {0}, s = {0};
    const uint8_t **hs = calloc((size_t)n + 1, sizeof *hs);
    uint8_t(*store)[16] = calloc((size_t)n + 1, 16);
    size_t *hl = calloc((size_t)n + 1, sizeof *hl);
    int64_t *offs = calloc((size_t)n + 1, sizeof *offs);
    bool *onull = calloc((size_t)n + 1, sizeof *onull);
    int64_t *sts = calloc((size_t)n + 1, sizeof *sts);
    for (int i = 0; i < n; i++) {
        if (items[i].txn != NULL) {
            qt_hash(items[i].txn, store[i]);
            hs[i] = store[i];
            hl[i] = 16;
            onull[i] = true;
        } else {
            offs[i] = items[i].off;
        }
        sts[i] = items[i].status;
    }
    arr_bytea(&h, n, hs, hl);
    arr_int(&o, n, OID_INT8, offs, onull);
    arr_int(&s, n, OID_INT2, sts, NULL);
    const char *vals[7] = {pid, group, worker, h.p, o.p, s.p, strict ? "t" : "f"};
    int lens[7] = {0, 0, 0, (int)h.len, (int)o.len, (int)s.len, 0};
    int fmts[7] = {0, 0, 0, 1, 1, 1, 0};
    PGresult *r = PQexecParams(c,
                               "SELECT * FROM qn.ack_v1($1::uuid, $2, $3, $4::bytea[], "
                               "$5::int8[], $6::int2[], $7::bool)",
                               7, NULL, vals, lens, fmts, 0);
    free(h.p), free(o.p), free(s.p), free(hs), free(store), free(hl), free(offs), free(onull),
        free(sts);
    return r;
}

PGresult *qt_ack(PGconn *c, const char *pid, const char *group, const char *worker,
                 const struct qt_ack_item *items, int n)
{
    PGresult *r = qt_ack_raw(c, pid, group, worker, items, n, false);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "ack failed: %s", PQresultErrorMessage(r));
    ck_assert_int_eq(PQntuples(r), n + 1);
    return r;
}

int qt_ack_summary(const PGresult *r)
{
    for (int i = 0; i < PQntuples(r); i++)
        if (qt_gi(r, i, "r_idx") == -1)
            return i;
    ck_abort_msg("no summary row");
    return -1;
}
