/*
 * fuzz_store_seed.c - writes the seed corpus for fuzz_store into a directory:
 * for every statement a result of the shape its decoder expects (column types
 * as stmts.c selects them) with plausible values, one and two rows, plus a NULL
 * in every column and a text-format variant. Usage: fuzz_store_seed DIR.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_store.h"
#include "store_int.h"

/* Column kinds of the seeds: indexes into fz_types. */
enum { B = 0, BY = 1, I8 = 3, I2 = 4, I4 = 5, T = 6, TS = 9, U = 10 };

struct shape {
    int stmt;
    int ncols;
    int cols[FZ_MAX_COLS];
};

#define Q25                                                                                        \
    U, T, T, T, TS, I4, I4, I4, I4, I4, I4, B, B, I4, I4, I4, I4, B, B, I4, I4, I4, I4, I8, I8

static const struct shape shapes[] = {
    {QN_STMT_PUSH, 8, {I4, U, I4, I2, I8, TS, I4, I8}},
    {QN_STMT_SEGMENT_AT, 4, {I8, I8, TS, BY}},
    {QN_STMT_POP, 9, {T, T, U, I8, I4, I4, TS, BY, TS}},
    {QN_STMT_POP_DISCOVER, 9, {T, T, U, I8, I4, I4, TS, BY, TS}},
    {QN_STMT_HAS_PENDING, 1, {B}},
    {QN_STMT_POP_GATE, 2, {I8, I4}},
    {QN_STMT_ACK, 7, {I4, I2, I8, I4, I8, I8, BY}},
    {QN_STMT_DLQ_HEAD, 2, {B, U}},
    {QN_STMT_RENEW, 2, {I4, TS}},
    {QN_STMT_RELEASE, 1, {I4}},
    {QN_STMT_FETCH, 10, {I4, I2, U, I8, I8, I8, I4, I4, TS, BY}},
    {QN_STMT_CONFIGURE_QUEUE, 26, {B, Q25}},
    {QN_STMT_GET_QUEUE, 25, {Q25}},
    {QN_STMT_LIST_QUEUES, 25, {Q25}},
    {QN_STMT_QUEUE_PARTITIONS, 8, {T, U, I8, I8, I8, I8, B, TS}},
    {QN_STMT_DELETE_QUEUE, 1, {B}},
    {QN_STMT_LIST_GROUPS, 15, {T, T, T, TS, T, U, I8, I8, I8, I8, B, T, I8, I4, I4}},
    {QN_STMT_SEEK_GROUP, 1, {I4}},
    {QN_STMT_DELETE_GROUP, 1, {I4}},
    {QN_STMT_LIST_DLQ, 12, {U, T, T, U, T, I8, U, T, BY, T, I4, TS}},
    {QN_STMT_GET_DLQ, 12, {U, T, T, U, T, I8, U, T, BY, T, I4, TS}},
    {QN_STMT_DELETE_DLQ, 1, {I4}},
    {QN_STMT_STATS, 8, {T, I4, I8, I8, I8, I8, I4, I8}},
    {QN_STMT_PARTITION_META, 4, {U, I4, I8, I8}},
    {QN_STMT_TXNS_SINCE, 4, {I8, I8, TS, BY}},
    {QN_STMT_TXNS_WINDOW, 4, {I8, I8, TS, BY}},
    {QN_STMT_MAINT_WORKLIST, 4, {U, TS, TS, TS}},
    {QN_STMT_RETENTION_STEP, 4, {I4, I8, I8, B}},
    {QN_STMT_TXNS_PURGE_STEP, 4, {I4, I8, I8, B}},
    {QN_STMT_EVICT_MAX_WAIT_STEP, 4, {I4, I8, I8, B}},
    {QN_STMT_PARTITION_DEAD, 1, {B}},
    {QN_STMT_PARTITION_CLEANUP_STEP, 4, {I4, I8, I8, B}},
    {QN_STMT_METRICS_PURGE, 1, {I4}},
    {QN_STMT_TRY_LOCK, 1, {B}},
    {QN_STMT_UNLOCK, 1, {B}},
    {QN_STMT_DB_NOW, 1, {I8}},
    {QN_STMT_QUEUES_OF, 1, {I8}},
};

struct out {
    uint8_t b[8192];
    size_t n;
};

static void put(struct out *o, const void *p, size_t n)
{
    if (o->n + n <= sizeof o->b) {
        memcpy(o->b + o->n, p, n);
        o->n += n;
    }
}

static void byte(struct out *o, uint8_t v)
{
    put(o, &v, 1);
}

static void be(struct out *o, int64_t v, int width)
{
    byte(o, (uint8_t)width);
    for (int i = width - 1; i >= 0; i--)
        byte(o, (uint8_t)((uint64_t)v >> (8 * i)));
}

/* One cell of kind k for row r, column c of statement stmt; NULL when null. */
static void cell(struct out *o, int stmt, int k, int r, int c, int nrows, bool null)
{
    if (null) {
        byte(o, 0xFF);
        return;
    }
    int64_t v = 0;
    /* the values a decoder checks: positions, statuses, ranges */
    if (stmt == QN_STMT_ACK && c == 0)
        v = r == nrows - 1 ? -1 : r; /* items, then the summary */
    else if (stmt == QN_STMT_ACK && c == 1)
        v = 1;
    else if (stmt == QN_STMT_PUSH && c == 0)
        v = r;
    else if (stmt == QN_STMT_FETCH && c == 0)
        v = 0;
    else if ((stmt == QN_STMT_POP || stmt == QN_STMT_POP_DISCOVER) && c == 5)
        v = 1;
    else if (k == I8 || k == I4)
        v = r;
    switch (k) {
    case B:
        be(o, v & 1, 1);
        break;
    case I2:
        be(o, v, 2);
        break;
    case I4:
        be(o, v, 4);
        break;
    case I8:
    case TS:
        be(o, v, 8);
        break;
    case U: {
        byte(o, 16);
        for (int i = 0; i < 16; i++)
            byte(o, (uint8_t)(i + r));
        break;
    }
    case T:
        byte(o, 3);
        put(o, "abc", 3);
        break;
    default: { /* bytea: 16 bytes, the hashes of one offset */
        byte(o, 16);
        for (int i = 0; i < 16; i++)
            byte(o, (uint8_t)(0x28 + i));
        break;
    }
    }
}

static int write_seed(const char *dir, const char *name, int n, const struct out *o)
{
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/%s-%03d", dir, name, n);
    if (k < 0 || (size_t)k >= sizeof path)
        return -1;
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t w = fwrite(o->b, 1, o->n, f);
    return fclose(f) == 0 && w == o->n ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
        perror(argv[1]);
        return 1;
    }
    int seq = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const struct shape *s = &shapes[i];
        for (int nrows = 1; nrows <= 2; nrows++) {
            for (int variant = 0; variant < 3; variant++) {
                struct out o = {.n = 0};
                byte(&o, (uint8_t)s->stmt);
                byte(&o, (uint8_t)(s->stmt == QN_STMT_ACK ? nrows - 1 : nrows));
                byte(&o, (uint8_t)s->ncols);
                for (int c = 0; c < s->ncols; c++)
                    byte(&o, (uint8_t)(s->cols[c] | (variant == 2 ? 0x80 : 0)));
                byte(&o, (uint8_t)nrows);
                for (int r = 0; r < nrows; r++)
                    for (int c = 0; c < s->ncols; c++)
                        cell(&o, s->stmt, s->cols[c], r, c, nrows,
                             variant == 1 && c == r % s->ncols);
                if (write_seed(argv[1], qn__stmts[s->stmt].name, seq++, &o) != 0) {
                    perror("writing a seed");
                    return 1;
                }
            }
        }
    }
    return 0;
}
