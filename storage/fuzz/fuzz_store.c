/*
 * fuzz_store.c - libFuzzer target for the storage result decoders: every
 * statement's decoder (the table in storage/src/stmts.c) is fed a result of
 * arbitrary shape and values, built in memory with PQmakeEmptyPGresult,
 * PQsetResultAttrs and PQsetvalue (input format: fuzz_store.h).
 *
 * Beyond "no crash, no sanitizer report" it checks the decoder contract:
 *   - QN_OK leaves a product (NULL only where the contract allows it: a missing
 *     partition's metadata, results that are ignored), any error leaves none,
 *     and the only errors are QN_EPROTOCOL_DB and QN_ENOMEM;
 *   - the product is walked whole (every row, text, blob and hash), so a
 *     pointer or a length that does not fit its result is caught;
 *   - counts agree with the call: one push result per segment sent, one ack
 *     outcome per item, one entry per fetch entry.
 * A violation calls __builtin_trap(), which libFuzzer reports.
 *
 * Built only with clang and -DQN_FUZZ=ON (storage/fuzz/CMakeLists.txt); run by
 * scripts/fuzz.sh with a seed corpus from fuzz_store_seed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_store.h"
#include "queen/error.h"
#include "store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static volatile uint32_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = h * 31u + b[i];
    sink ^= h;
}

static void touch_text(const char *s)
{
    CHECK(s != NULL);
    touch(s, strlen(s) + 1);
}

static void touch_segs(const struct qn_pop_segment *g, size_t n, bool named)
{
    for (size_t i = 0; i < n; i++) {
        if (named) {
            touch_text(g[i].queue);
            touch_text(g[i].partition);
        }
        CHECK(g[i].start_idx >= 0 && g[i].take >= 1);
        touch(g[i].blob, g[i].blob_len);
    }
}

/* Reads everything the product of statement stmt holds. */
static void walk(int stmt, const void *out, size_t expect)
{
    switch (stmt) {
    case QN_STMT_PUSH: {
        const struct qn_push_result *r = out;
        CHECK(r->n == expect);
        for (size_t i = 0; i < r->n; i++) {
            const struct qn_push_seg_result *s = &r->segs[i];
            CHECK(s->status == QN_PUSH_QUEUED || s->status == QN_PUSH_DUPLICATE);
            CHECK(s->status == QN_PUSH_DUPLICATE ? s->ndups >= 1 : s->ndups == 0);
            for (size_t k = 0; k < s->ndups; k++)
                CHECK(k == 0 || s->dups[k].idx > s->dups[k - 1].idx);
            touch(s->dups, sizeof *s->dups * s->ndups);
        }
        break;
    }
    case QN_STMT_SEGMENT_AT:
    case QN_STMT_TXNS_SINCE:
    case QN_STMT_TXNS_WINDOW: {
        const struct qn_segments_result *r = out;
        for (size_t i = 0; i < r->n; i++) {
            CHECK(r->rows[i].end >= r->rows[i].base);
            touch(r->rows[i].blob, r->rows[i].blob_len);
            if (stmt != QN_STMT_SEGMENT_AT)
                CHECK(r->rows[i].blob_len ==
                      (size_t)((uint64_t)r->rows[i].end - (uint64_t)r->rows[i].base + 1) * 16u);
        }
        break;
    }
    case QN_STMT_POP:
    case QN_STMT_POP_DISCOVER: {
        const struct qn_pop_result *r = out;
        touch_segs(r->segs, r->n, true);
        break;
    }
    case QN_STMT_ACK: {
        const struct qn_ack_result *r = out;
        CHECK(r->n == expect);
        for (size_t i = 0; i < r->n; i++)
            CHECK(r->items[i].outcome >= QN_ACK_APPLIED && r->items[i].outcome <= QN_ACK_DEFERRED);
        touch(r->dlq_blob, r->dlq_blob_len);
        CHECK((r->flags & QN_ACKF_DLQ_HANDOFF) || r->dlq_blob == NULL);
        break;
    }
    case QN_STMT_FETCH: {
        const struct qn_fetch_result *r = out;
        CHECK(r->n == expect);
        for (size_t i = 0; i < r->n; i++) {
            CHECK(r->entries[i].error >= 0 && r->entries[i].error <= 2);
            touch_segs(r->entries[i].segs, r->entries[i].nsegs, false);
        }
        break;
    }
    case QN_STMT_CONFIGURE_QUEUE:
    case QN_STMT_GET_QUEUE:
    case QN_STMT_LIST_QUEUES: {
        const struct qn_queues_result *r = out;
        CHECK(stmt != QN_STMT_CONFIGURE_QUEUE || r->n <= 1);
        for (size_t i = 0; i < r->n; i++) {
            touch_text(r->queues[i].name);
            touch_text(r->queues[i].options.namespace_);
            touch_text(r->queues[i].options.task);
        }
        break;
    }
    case QN_STMT_QUEUE_PARTITIONS: {
        const struct qn_partitions_result *r = out;
        for (size_t i = 0; i < r->n; i++)
            touch_text(r->parts[i].partition);
        break;
    }
    case QN_STMT_LIST_GROUPS: {
        const struct qn_groups_result *r = out;
        for (size_t i = 0; i < r->n; i++) {
            touch_text(r->rows[i].group);
            touch_text(r->rows[i].queue);
            touch_text(r->rows[i].sub_mode);
            touch_text(r->rows[i].partition);
            touch_text(r->rows[i].worker);
        }
        break;
    }
    case QN_STMT_LIST_DLQ:
    case QN_STMT_GET_DLQ: {
        const struct qn_dlq_result *r = out;
        for (size_t i = 0; i < r->n; i++) {
            const struct qn_dlq_row *d = &r->rows[i];
            touch_text(d->queue);
            touch_text(d->partition);
            touch_text(d->group);
            touch_text(d->txn);
            touch_text(d->error);
            touch(d->payload, d->payload_len);
        }
        break;
    }
    case QN_STMT_STATS: {
        const struct qn_stats_result *r = out;
        for (size_t i = 0; i < r->n; i++)
            touch_text(r->rows[i].queue);
        break;
    }
    case QN_STMT_MAINT_WORKLIST: {
        const struct qn_maint_list *r = out;
        touch(r->items, sizeof *r->items * r->n);
        break;
    }
    case QN_STMT_RETENTION_STEP:
    case QN_STMT_TXNS_PURGE_STEP:
    case QN_STMT_EVICT_MAX_WAIT_STEP:
    case QN_STMT_PARTITION_CLEANUP_STEP:
        CHECK(((const struct qn_maint_step *)out)->deleted >= 0);
        break;
    case QN_STMT_PARTITION_META:
        touch(out, sizeof(struct qn_partition_meta));
        break;
    default:
        touch(out, 1); /* a scalar or a small fixed structure */
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t pos = 0;
    int stmt = data[pos++] % QN_STMT_COUNT;
    size_t expect = data[pos++] % 64;
    int ncols = data[pos++] % (FZ_MAX_COLS + 1);
    if (pos + (size_t)ncols + 1 > size)
        return 0;
    PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    if (res == NULL)
        return 0;
    PGresAttDesc at[FZ_MAX_COLS];
    memset(at, 0, sizeof at);
    for (int c = 0; c < ncols; c++) {
        uint8_t b = data[pos++];
        at[c].name = (char *)"c";
        at[c].typid = fz_types[(b & 0x7f) % FZ_NTYPES];
        at[c].format = (b & 0x80) ? 0 : 1;
        at[c].typlen = -1;
        at[c].atttypmod = -1;
    }
    if (ncols > 0 && !PQsetResultAttrs(res, ncols, at)) {
        PQclear(res);
        return 0;
    }
    int nrows = data[pos++] % (FZ_MAX_ROWS + 1);
    for (int r = 0; r < nrows && ncols > 0; r++) {
        for (int c = 0; c < ncols; c++) {
            size_t len = 0;
            bool null = false;
            if (pos < size) {
                uint8_t l = data[pos++];
                if (l == 0xFF) {
                    null = true;
                } else if (l == 0xFE) {
                    len = pos + 2 <= size ? ((size_t)data[pos] << 8 | data[pos + 1]) : 0;
                    pos = pos + 2 <= size ? pos + 2 : size;
                    if (len > FZ_MAX_CELL)
                        len = FZ_MAX_CELL;
                } else {
                    len = l;
                }
            }
            if (len > size - pos)
                len = size - pos;
            if (!PQsetvalue(res, r, c, null ? NULL : (char *)data + pos, null ? -1 : (int)len)) {
                PQclear(res);
                return 0;
            }
            pos += len;
        }
    }

    const struct qn__stmt *d = &qn__stmts[stmt];
    qn_store_req *rq = NULL;
    if (d->decode == NULL || qn__req_new_detached(1, &rq) != QN_OK) {
        PQclear(res);
        return 0;
    }
    struct qn__step *s = qn__req_add(rq, stmt, d->decode);
    CHECK(s != NULL);
    s->expect = expect;
    int rc = d->decode(rq, 0, res);
    const void *out = qn__req_out(rq, 0);
    CHECK(rc == QN_OK || rc == QN_EPROTOCOL_DB || rc == QN_ENOMEM);
    if (rc != QN_OK) {
        CHECK(out == NULL);
    } else if (out != NULL) {
        walk(stmt, out, expect);
    } else {
        CHECK(stmt == QN_STMT_PARTITION_META || d->decode == qn__decode_void);
    }
    qn__req_discard(rq);
    PQclear(res);
    return 0;
}
