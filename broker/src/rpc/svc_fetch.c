/*
 * rpc/svc_fetch.c - QueueService.Fetch: read by offset, no lease, no cursor.
 *
 * Does: validate; check the consume grant of every entry's queue; read every
 * entry through fetch_v1 in one call, in the caller's tenant; build records
 * with the shared batch builder (a large answer's segments decompressed by an
 * offload thread first, engine/decode.h); when every entry came back empty and the client
 * allows a wait, park on each named queue until a commit, the wait's end or the
 * re-check timer, then read again.
 * Does not: move any cursor or take any lease; read for a client over its
 * outbound budget (each fetch_v1 is sized to what qn_call_reserve granted;
 * none granted because the client does not read: RESOURCE_EXHAUSTED; because
 * other reads in flight reserved it: wait for them).
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "engine/decode.h"
#include "engine/waiters.h"
#include "log.h"
#include "queen/error.h"
#include "rpc/authz.h"
#include "rpc/resp_arena.h"
#include "rpc/status.h"
#include "rpc/svc.h"
#include "rpc/svc_batch.h"
#include "rpc/validate.h"
#include "timer.h"

#define FETCH_MAX_ENTRIES 1024
#define FETCH_MAX_WAIT_MS 30000
#define FETCH_DEFAULT_BYTES (1024 * 1024)
#define FETCH_MAX_BYTES (8 * 1024 * 1024)
#define FETCH_MAX_RECORDS 10000
#define BUDGET_RECHECK_MS 50 /* a read waiting for budget looks again this often */

struct fetch_rpc {
    struct qn_app *app;
    qn_call *call;
    Queen__V1__FetchRequest *req;
    struct qn_fetch_entry *entries;
    struct qn_waiter *waiters; /* one per entry while waiting */
    size_t nwait;
    int64_t wait_until_ms;
    qn_store_req *sreq;
    /* a large answer's segments being decompressed off the loop
     * (engine/decode.h), with the entries' heads of that answer */
    struct qn_decode *dec;
    struct qn_fetch_entry_result *heads;
    size_t nheads;
    bool rewake;
    struct event *timer;
    /* the connection's database slot while fetch_v1 is in flight; admitted:
     * the first was granted, a re-read after a wait always is */
    struct qn_conn_slot *slot;
    bool admitted;
};

static void fetch_free(struct fetch_rpc *f)
{
    if (f->sreq)
        qn_store_cancel(f->sreq);
    qn_decode_cancel(f->dec);
    free(f->heads);
    qn_conn_budget_give(f->slot);
    for (size_t i = 0; f->waiters && i < f->nwait; i++)
        qn_waiters_unpark(f->app->waiters, &f->waiters[i]);
    if (f->timer)
        event_free(f->timer);
    free(f->waiters);
    free(f->entries);
    if (f->req)
        protobuf_c_message_free_unpacked(&f->req->base, NULL);
    free(f);
}

static void fetch_issue(struct fetch_rpc *f);

static void fetch_wake(struct qn_waiter *w)
{
    struct fetch_rpc *f = w->ud;
    if (f->dec != NULL)
        return; /* answering */
    if (f->sreq != NULL) {
        f->rewake = true;
        return;
    }
    evtimer_del(f->timer);
    fetch_issue(f);
}

/* Budget freed after other calls' reads held it (qn_call_reserve QN_ELIMIT). */
static void fetch_budget(qn_call *call)
{
    struct fetch_rpc *f = qn_call_data(call);
    if (f != NULL && f->sreq == NULL && f->dec == NULL) {
        evtimer_del(f->timer);
        fetch_issue(f);
    }
}

static void fetch_timer_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct fetch_rpc *f = ud;
    if (f->sreq == NULL && f->dec == NULL)
        fetch_issue(f);
}

static void fetch_answer(struct fetch_rpc *f, const struct qn_fetch_result *r)
{
    qn_call *call = f->call;
    size_t n = f->req->n_entries;
    struct qn_arena arena;
    qn_arena_init(&arena);
    Queen__V1__FetchResult *res = qn_arena_alloc(&arena, n * sizeof *res);
    Queen__V1__FetchResult **ptrs = qn_arena_alloc(&arena, n * sizeof *ptrs);
    int rc = res && ptrs ? QN_OK : QN_ENOMEM;
    size_t delivered = 0;
    uint64_t delivered_bytes = 0;
    for (size_t i = 0; rc == QN_OK && i < n; i++) {
        const Queen__V1__FetchEntry *e = f->req->entries[i];
        Queen__V1__FetchResult *x = &res[i];
        queen__v1__fetch_result__init(x);
        x->queue = e->queue;
        x->partition = (char *)qn_or_default(e->partition, QN_DEFAULT_PARTITION);
        ptrs[i] = x;
        if (r == NULL || i >= r->n)
            continue;
        const struct qn_fetch_entry_result *er = &r->entries[i];
        x->high_watermark = er->high;
        x->log_start_offset = er->log_start;
        x->error = er->error == 1   ? QUEEN__V1__FETCH_ERROR__FETCH_ERROR_UNKNOWN_PARTITION
                   : er->error == 2 ? QUEEN__V1__FETCH_ERROR__FETCH_ERROR_OFFSET_OUT_OF_RANGE
                                    : QUEEN__V1__FETCH_ERROR__FETCH_ERROR_NONE;
        if (er->nsegs > 0) {
            Queen__V1__Message **msgs = NULL;
            size_t cnt = 0;
            rc = qn_build_messages(f->app, &arena, er->segs, er->nsegs, x->queue, x->partition, "",
                                   "", &msgs, &cnt);
            x->records = msgs;
            x->n_records = cnt;
            delivered += cnt;
            for (size_t k = 0; k < cnt; k++)
                delivered_bytes += msgs[k]->payload.len;
        }
    }
    qn_call_set_data(call, NULL);
    if (rc == QN_OK) {
        Queen__V1__FetchResponse resp = QUEEN__V1__FETCH_RESPONSE__INIT;
        resp.n_results = n;
        resp.results = ptrs;
        rc = qn_call_send(call, &resp.base);
    }
    if (rc == QN_OK) {
        f->app->delivered += delivered;
        f->app->delivered_bytes += delivered_bytes;
        qn_call_finish(call, QN_GRPC_OK, NULL);
    } else {
        qn_call_finish(call,
                       rc == QN_ENOMEM || rc == QN_ELIMIT ? QN_GRPC_RESOURCE_EXHAUSTED
                                                          : QN_GRPC_DATA_LOSS,
                       qn_strerror(rc));
    }
    qn_arena_free(&arena);
    fetch_free(f);
}

/* The decoder's copy of the answer's segments, in entry order. */
static void fetch_decoded(void *ud, const struct qn_pop_segment *segs, size_t n)
{
    struct fetch_rpc *f = ud;
    f->dec = NULL;
    size_t at = 0;
    for (size_t i = 0; i < f->nheads; i++) {
        f->heads[i].segs = f->heads[i].nsegs > 0 ? segs + at : NULL;
        at += f->heads[i].nsegs;
    }
    (void)n; /* == at: the copy of what fetch_decode flattened */
    struct qn_fetch_result r = {f->nheads, f->heads};
    fetch_answer(f, &r);
}

/* Hands a large answer's segments to the decoder (true: fetch_decoded answers
 * later); false: answer now. */
static bool fetch_decode(struct fetch_rpc *f, const struct qn_fetch_result *r)
{
    size_t total = 0;
    for (size_t i = 0; i < r->n; i++)
        total += r->entries[i].nsegs;
    if (f->app->decoder == NULL || total == 0)
        return false;
    struct qn_pop_segment *flat = malloc(total * sizeof *flat);
    struct qn_fetch_entry_result *heads = malloc(r->n * sizeof *heads);
    bool started = false;
    if (flat != NULL && heads != NULL) {
        size_t at = 0;
        for (size_t i = 0; i < r->n; i++) {
            heads[i] = r->entries[i];
            for (size_t k = 0; k < r->entries[i].nsegs; k++)
                flat[at++] = r->entries[i].segs[k];
        }
        started = qn_decode_start(f->app->decoder, flat, total, fetch_decoded, f, &f->dec) == QN_OK;
    }
    free(flat); /* copied by the decoder */
    if (!started) {
        f->dec = NULL;
        free(heads);
        return false;
    }
    f->heads = heads;
    f->nheads = r->n;
    return true;
}

static void fetch_done(void *ud, const struct qn_store_status *st, const struct qn_fetch_result *r)
{
    struct fetch_rpc *f = ud;
    f->sreq = NULL;
    if (st->code != QN_OK) {
        qn_call *call = f->call;
        qn_call_set_data(call, NULL);
        qn_finish_store_error(call, st);
        fetch_free(f);
        return;
    }
    bool empty = true;
    for (size_t i = 0; i < r->n && empty; i++)
        if (r->entries[i].nsegs > 0 || r->entries[i].error != 0)
            empty = false;
    int64_t now = qn_store_now_ms();
    /* at shutdown a waiting fetch answers with what it has instead of holding
     * the drain until its wait ends */
    if (!empty || now >= f->wait_until_ms || f->app->shutting_down) {
        if (!fetch_decode(f, r))
            fetch_answer(f, r);
        return;
    }
    qn_call_unreserve(f->call); /* a waiting fetch holds no budget */
    if (f->rewake) {
        f->rewake = false;
        fetch_issue(f);
        return;
    }
    qn_conn_budget_give(f->slot); /* parked: no database call in flight */
    f->slot = NULL;
    int64_t at = now + f->app->cfg->wake_recheck_ms;
    if (at > f->wait_until_ms)
        at = f->wait_until_ms;
    qn_timer_after(f->timer, (at - now));
}

static void fetch_issue(struct fetch_rpc *f)
{
    struct qn_app *app = f->app;
    for (size_t i = 0; i < f->nwait && !app->shutting_down; i++) {
        if (qn_waiter_parked(&f->waiters[i]))
            continue;
        if (qn_waiters_park(app->waiters, &f->waiters[i], qn_authz_tenant(f->call),
                            f->entries[i].queue, "") != QN_OK) {
            qn_call *call = f->call;
            qn_call_set_data(call, NULL);
            qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                           "too many reads are waiting on this broker (QUEEN_MAX_PARKED_POPS)");
            fetch_free(f);
            return;
        }
    }
    f->rewake = false;
    if (f->slot == NULL) {
        int src = qn_svc_take_slot(app, f->call, f->admitted, &f->slot);
        if (src != QN_OK) {
            f->slot = NULL;
            qn_call *call = f->call;
            qn_call_set_data(call, NULL);
            qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED,
                           src == QN_EBUSY ? QN_MSG_CONN_DB_BUSY : "out of memory");
            fetch_free(f);
            return;
        }
        f->admitted = true;
    }
    struct qn_fetch_args a;
    a.entries = f->entries;
    a.n = f->req->n_entries;
    a.max_records = FETCH_MAX_RECORDS;
    a.msg_overhead = 4 * 38 + 2 * 255 + 48;
    a.max_msg_bytes = (int32_t)(app->cfg->max_payload_bytes + 2 * 65535 + 64);
    /* Outbound budget: what the entries may return (the first segment of the
     * call is always delivered, so at least one message as large as allowed),
     * within the send limit; 1024 for the response's envelope, 64 per entry
     * for its result header. */
    int64_t frame = 1024 + 64 * (int64_t)a.n;
    int64_t one = a.max_msg_bytes + a.msg_overhead + frame, want = frame;
    for (size_t i = 0; i < a.n && want < app->cfg->max_send_bytes; i++)
        want += f->entries[i].max_bytes;
    if (want > app->cfg->max_send_bytes)
        want = app->cfg->max_send_bytes;
    if (one > want)
        want = one;
    size_t granted = 0;
    char why[300];
    int rc = qn_call_reserve(f->call, (size_t)one, (size_t)want, &granted, why, sizeof why);
    if (rc == QN_ELIMIT && qn_call_on_budget(f->call, (size_t)one, fetch_budget) == QN_OK) {
        /* other reads hold the budget: go on as they end, and look again soon
         * in case what they produced stays unread (then: RESOURCE_EXHAUSTED) */
        qn_conn_budget_give(f->slot); /* waiting: no database call in flight */
        f->slot = NULL;
        qn_timer_after(f->timer, BUDGET_RECHECK_MS);
        return;
    }
    if (rc != QN_OK) {
        qn_call *call = f->call;
        qn_call_set_data(call, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, rc == QN_EBUSY ? why : "the call ended");
        fetch_free(f);
        return;
    }
    a.budget = (int64_t)granted - frame;
    struct qn_call_opts opts = qn_authz_opts(f->call, qn_call_deadline_ms(f->call));
    rc = qn_store_fetch(app->store, &a, &opts, fetch_done, f, &f->sreq);
    if (rc != QN_OK) {
        f->sreq = NULL;
        qn_call *call = f->call;
        qn_call_set_data(call, NULL);
        qn_call_finish(call, qn_grpc_from_store(rc), qn_strerror(rc));
        fetch_free(f);
    }
}

void qn_svc_fetch(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_app *app = qn_svc_app(call);
    Queen__V1__FetchRequest *req = (Queen__V1__FetchRequest *)msg;
    char why[300] = "";
    app->rpcs++;
    if (req->n_entries == 0)
        snprintf(why, sizeof why, "entries is empty: a fetch needs at least one entry");
    else if (req->n_entries > FETCH_MAX_ENTRIES)
        snprintf(why, sizeof why, "too many entries: %zu (the limit is %d)", req->n_entries,
                 FETCH_MAX_ENTRIES);
    else if (req->max_wait_ms > FETCH_MAX_WAIT_MS)
        snprintf(why, sizeof why, "max_wait_ms %u is over the limit of %d", req->max_wait_ms,
                 FETCH_MAX_WAIT_MS);
    for (size_t i = 0; !why[0] && i < req->n_entries; i++) {
        const Queen__V1__FetchEntry *e = req->entries[i];
        char what[64], tmp[200];
        snprintf(what, sizeof what, "entries[%zu].queue", i);
        if (qn_name_problem(e->queue, what, false, tmp, sizeof tmp)) {
            snprintf(why, sizeof why, "%s", tmp);
            break;
        }
        snprintf(what, sizeof what, "entries[%zu].partition", i);
        if (qn_name_problem(e->partition, what, true, tmp, sizeof tmp)) {
            snprintf(why, sizeof why, "%s", tmp);
            break;
        }
        if (e->offset < 0)
            snprintf(why, sizeof why, "entries[%zu].offset is negative", i);
        else if (e->max_bytes > FETCH_MAX_BYTES)
            snprintf(why, sizeof why, "entries[%zu].max_bytes %u is over the limit of %d", i,
                     e->max_bytes, FETCH_MAX_BYTES);
    }
    if (why[0]) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    for (size_t i = 0; i < req->n_entries; i++) {
        if (i > 0 && strcmp(req->entries[i]->queue, req->entries[i - 1]->queue) == 0)
            continue;
        if (!qn_authz_check(call, QN_SCOPE_CONSUME, req->entries[i]->queue, why, sizeof why)) {
            protobuf_c_message_free_unpacked(msg, NULL);
            qn_call_finish(call, QN_GRPC_PERMISSION_DENIED, why);
            return;
        }
    }
    const char *refusal = qn_svc_refusal(app);
    if (refusal != NULL) {
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_UNAVAILABLE, refusal);
        return;
    }
    struct fetch_rpc *f = calloc(1, sizeof *f);
    if (f)
        f->entries = calloc(req->n_entries, sizeof *f->entries);
    if (f == NULL || f->entries == NULL ||
        (f->timer = evtimer_new(app->base, fetch_timer_cb, f)) == NULL) {
        if (f)
            free(f->entries);
        free(f);
        protobuf_c_message_free_unpacked(msg, NULL);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    f->app = app;
    f->call = call;
    f->req = req;
    for (size_t i = 0; i < req->n_entries; i++) {
        const Queen__V1__FetchEntry *e = req->entries[i];
        f->entries[i].queue = e->queue;
        f->entries[i].partition = qn_or_default(e->partition, QN_DEFAULT_PARTITION);
        f->entries[i].offset = e->offset;
        f->entries[i].max_bytes = e->max_bytes ? e->max_bytes : FETCH_DEFAULT_BYTES;
    }
    if (req->max_wait_ms > 0) {
        int64_t now = qn_store_now_ms();
        f->wait_until_ms = now + req->max_wait_ms;
        int64_t dl = qn_call_deadline_ms(call);
        if (dl > 0 && dl - 20 < f->wait_until_ms)
            f->wait_until_ms = dl - 20 > now ? dl - 20 : now;
        f->waiters = calloc(req->n_entries, sizeof *f->waiters);
        if (f->waiters == NULL) {
            fetch_free(f);
            qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        f->nwait = req->n_entries;
        for (size_t i = 0; i < f->nwait; i++) {
            f->waiters[i].partition = f->entries[i].partition;
            f->waiters[i].wake = fetch_wake;
            f->waiters[i].ud = f;
        }
    }
    qn_call_set_data(call, f);
    fetch_issue(f);
}

void qn_svc_fetch_cancel(qn_call *call, int reason)
{
    (void)reason;
    struct fetch_rpc *f = qn_call_data(call);
    if (f != NULL)
        fetch_free(f);
}
