/*
 * test_cbundle.c - suite "cbundle": consume fusion's bundled leases
 * (broker/src/engine/cfusion.c, qn_cfusion_pop), against fake store calls (the
 * runner wraps qn_store_pop, qn_store_pop_bundle and qn_store_pop_pid).
 *
 * Pops by id wait for the turn's flush and go out as one bundle per tenant in
 * arrival order (a bundle of one as the pop it is, more than
 * QN_POP_BUNDLE_MAX in several); other pops go at once. Each member gets its
 * own result exactly once; a cancelled member gets nothing and is not sent
 * when it was still queued; a refused bundle (QN_EDB) sends every live
 * member again alone; in doubt or refused at submit, every member gets that
 * status. Acks: one bundle in flight per loop; what comes meanwhile is the
 * next bundle; the same per-member rules (doubt, refusal, cancel, submit).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "engine/cfusion.h"
#include "engine/decode.h"
#include "engine/offload.h"
#include "engine/waiters.h"
#include "engine_test.h"
#include "queen/error.h"
#include "queen/segment.h"
#include "queen/store.h"

int __wrap_qn_store_pop(qn_store *st, const struct qn_pop_args *a, const struct qn_call_opts *opts,
                        qn_pop_cb cb, void *ud, qn_store_req **req);
int __wrap_qn_store_pop_bundle(qn_store *st, const struct qn_pop_member *m, size_t n,
                               const struct qn_call_opts *opts, qn_pop_bundle_cb cb, void *ud,
                               qn_store_req **req);
bool __wrap_qn_store_pop_pid(qn_store *st, const struct qn_pop_args *a, const uint8_t *tenant,
                             uint8_t pid[16]);
int __wrap_qn_store_ack(qn_store *st, const struct qn_ack_args *a, const struct qn_call_opts *opts,
                        qn_ack_cb cb, void *ud, qn_store_req **req);
int __wrap_qn_store_ack_bundle(qn_store *st, const struct qn_ack_args *a, size_t n,
                               const struct qn_call_opts *opts, qn_ack_bundle_cb cb, void *ud,
                               qn_store_req **req);

#define MAXC 16
#define NP 140

/* what the fakes were asked */
struct alone_call {
    char partition[64], worker[64];
    bool tenant;
    uint8_t t[16];
    qn_pop_cb cb;
    void *ud;
};
struct bundle_call {
    size_t n;
    char partition[QN_POP_BUNDLE_MAX][64], worker[QN_POP_BUNDLE_MAX][64];
    uint8_t pid0[16];
    bool tenant;
    uint8_t t[16];
    qn_pop_bundle_cb cb;
    void *ud;
};

static struct alone_call alone[MAXC];
static size_t nalone;
static struct bundle_call bundles[MAXC];
static size_t nbundles;
static int submit_rc; /* what the fakes' submits return */

static qn_store *const FAKE_STORE = (qn_store *)&submit_rc;

int __wrap_qn_store_pop(qn_store *st, const struct qn_pop_args *a, const struct qn_call_opts *opts,
                        qn_pop_cb cb, void *ud, qn_store_req **req)
{
    ck_assert_ptr_eq(st, FAKE_STORE);
    if (submit_rc != QN_OK)
        return submit_rc;
    ck_assert_uint_lt(nalone, MAXC);
    struct alone_call *c = &alone[nalone++];
    snprintf(c->partition, sizeof c->partition, "%s", a->partition ? a->partition : "");
    snprintf(c->worker, sizeof c->worker, "%s", a->worker ? a->worker : "");
    c->tenant = opts != NULL && opts->tenant != NULL;
    if (c->tenant)
        memcpy(c->t, opts->tenant, 16);
    c->cb = cb;
    c->ud = ud;
    if (req)
        *req = NULL; /* never cancelled here: the dedup suite owns the cancel fake */
    return QN_OK;
}

int __wrap_qn_store_pop_bundle(qn_store *st, const struct qn_pop_member *m, size_t n,
                               const struct qn_call_opts *opts, qn_pop_bundle_cb cb, void *ud,
                               qn_store_req **req)
{
    (void)req;
    ck_assert_ptr_eq(st, FAKE_STORE);
    if (submit_rc != QN_OK)
        return submit_rc;
    ck_assert_uint_ge(n, 2);
    ck_assert_uint_le(n, QN_POP_BUNDLE_MAX);
    ck_assert_uint_lt(nbundles, MAXC);
    struct bundle_call *c = &bundles[nbundles++];
    c->n = n;
    for (size_t k = 0; k < n; k++) {
        snprintf(c->partition[k], sizeof c->partition[k], "%s", m[k].a->partition);
        snprintf(c->worker[k], sizeof c->worker[k], "%s", m[k].a->worker);
        ck_assert(!m[k].a->auto_ack);
        ck_assert_uint_eq(m[k].pid[0], (uint8_t)m[k].a->partition[1]); /* its own id */
    }
    memcpy(c->pid0, m[0].pid, 16);
    c->tenant = opts != NULL && opts->tenant != NULL;
    if (c->tenant)
        memcpy(c->t, opts->tenant, 16);
    c->cb = cb;
    c->ud = ud;
    return QN_OK;
}

/* partitions named "k..." are known by id: pid[0] = the name's second byte */
bool __wrap_qn_store_pop_pid(qn_store *st, const struct qn_pop_args *a, const uint8_t *tenant,
                             uint8_t pid[16])
{
    (void)st;
    (void)tenant;
    if (a->auto_ack || a->partition == NULL || a->partition[0] != 'k')
        return false;
    memset(pid, 0, 16);
    pid[0] = (uint8_t)a->partition[1];
    return true;
}

/* the consumers */
struct consumer {
    int calls;
    int code;
    size_t rows;
    int64_t base0;
    bool raw; /* the first segment came decompressed (engine/decode.h) */
    char worker[40];
    char partition[40];
    struct qn_pop_args a;
    struct qn_cfusion_pop *h;
};

static struct qn_waiters *ws;
static struct qn_cfusion *cf;
static struct consumer cs[NP];
static qn_cfusion_pop_cb pop_cb; /* the next pop()'s callback instead of on_pop, once */

static void on_pop(void *ud, const struct qn_store_status *st, const struct qn_pop_result *res)
{
    struct consumer *c = ud;
    c->calls++;
    c->h = NULL;
    c->code = st->code;
    c->rows = res ? res->n : 0;
    c->base0 = res && res->n ? res->segs[0].base : -1;
    c->raw = res && res->n && res->segs[0].raw != NULL;
}

static void setup(void)
{
    ck_assert_int_eq(qn_waiters_new(100, &ws), QN_OK);
    ck_assert_int_eq(qn_cfusion_new(ws, 0, &cf), QN_OK);
    memset(cs, 0, sizeof cs);
    nalone = nbundles = 0;
    submit_rc = QN_OK;
    pop_cb = NULL;
}

static void teardown(void)
{
    qn_cfusion_free(cf);
    qn_waiters_free(ws);
    cf = NULL;
    ws = NULL;
}

static const uint8_t T1[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t T2[16] = {0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

/* consumer i pops partition (its worker "w-i"); tenant NULL: the default */
static void pop_flags(int i, const char *partition, const uint8_t *tenant, unsigned flags);
static void pop(int i, const char *partition, const uint8_t *tenant)
{
    pop_flags(i, partition, tenant, 0);
}

static void pop_flags(int i, const char *partition, const uint8_t *tenant, unsigned flags)
{
    struct consumer *c = &cs[i];
    snprintf(c->worker, sizeof c->worker, "w-%d", i);
    snprintf(c->partition, sizeof c->partition, "%s", partition ? partition : "");
    memset(&c->a, 0, sizeof c->a);
    c->a.queue = "q";
    c->a.partition = partition ? c->partition : NULL;
    c->a.group = "g";
    c->a.worker = c->worker;
    c->a.budget = 10;
    struct qn_call_opts o = {0, tenant, NULL};
    qn_cfusion_pop_cb cb = pop_cb ? pop_cb : on_pop;
    pop_cb = NULL;
    ck_assert_int_eq(qn_cfusion_pop(cf, FAKE_STORE, &c->a, &o, flags, cb, c, &c->h), QN_OK);
    /* the caller's strings may change at once: the pop keeps its own */
    if (partition)
        memset(c->partition, 'z', 3);
    memset(c->worker, 'z', 3);
}

static void answer_bundle(size_t b, const struct qn_store_status *st)
{
    struct bundle_call *c = &bundles[b];
    static struct qn_pop_segment segs[QN_POP_BUNDLE_MAX];
    struct qn_pop_result res[QN_POP_BUNDLE_MAX];
    for (size_t k = 0; k < c->n; k++) {
        /* member k gets k % 2 segments, base 100 + k */
        segs[k].base = 100 + (int64_t)k;
        res[k].n = k % 2;
        res[k].segs = &segs[k];
    }
    c->cb(c->ud, st, st->code == QN_OK ? res : NULL, c->n);
}

static const struct qn_store_status OK = {QN_OK, "", ""};

START_TEST(by_id_pops_wait_for_the_turn_and_go_as_one_bundle)
{
    pop(0, "ka", NULL);
    pop(1, "kb", NULL);
    pop(2, NULL, NULL);    /* any partition: at once */
    pop(3, "other", NULL); /* id unknown: at once */
    pop(4, "kc", NULL);
    ck_assert_uint_eq(nalone, 2);
    ck_assert_str_eq(alone[0].worker, "w-2");
    ck_assert_str_eq(alone[1].partition, "other");
    ck_assert_uint_eq(nbundles, 0);
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nbundles, 1);
    ck_assert_uint_eq(bundles[0].n, 3);
    /* arrival order, each member its own copies of partition and worker */
    ck_assert_str_eq(bundles[0].partition[0], "ka");
    ck_assert_str_eq(bundles[0].worker[0], "w-0");
    ck_assert_str_eq(bundles[0].partition[1], "kb");
    ck_assert_str_eq(bundles[0].worker[1], "w-1");
    ck_assert_str_eq(bundles[0].partition[2], "kc");
    ck_assert_str_eq(bundles[0].worker[2], "w-4");
    ck_assert(!bundles[0].tenant);
    answer_bundle(0, &OK);
    /* each member its own result, once */
    ck_assert_int_eq(cs[0].calls, 1);
    ck_assert_uint_eq(cs[0].rows, 0);
    ck_assert_int_eq(cs[1].calls, 1);
    ck_assert_uint_eq(cs[1].rows, 1);
    ck_assert_int_eq(cs[1].base0, 101);
    ck_assert_int_eq(cs[4].calls, 1);
    ck_assert_uint_eq(cs[4].rows, 0);
    ck_assert_int_eq(cs[2].calls, 0); /* alone ones answer through their own calls */
    static struct qn_pop_segment seg = {.base = 7};
    struct qn_pop_result r = {1, &seg};
    alone[0].cb(alone[0].ud, &OK, &r);
    ck_assert_int_eq(cs[2].calls, 1);
    ck_assert_int_eq(cs[2].base0, 7);
    struct qn_cfusion_pop_stats ps;
    qn_cfusion_pop_stats(cf, &ps);
    ck_assert_uint_eq(ps.bundles, 1);
    ck_assert_uint_eq(ps.bundled, 3);
    ck_assert_uint_eq(ps.alone, 2);
    /* a flush with nothing queued sends nothing */
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nbundles, 1);
}
END_TEST

START_TEST(one_bundle_per_tenant_and_a_bundle_of_one_goes_alone)
{
    pop(0, "ka", T1);
    pop(1, "kb", T2);
    pop(2, "kc", T1);
    pop(3, "kd", NULL);
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nbundles, 1);
    ck_assert_uint_eq(bundles[0].n, 2);
    ck_assert(bundles[0].tenant);
    ck_assert_mem_eq(bundles[0].t, T1, 16);
    ck_assert_str_eq(bundles[0].worker[0], "w-0");
    ck_assert_str_eq(bundles[0].worker[1], "w-2");
    ck_assert_uint_eq(nalone, 2); /* T2's and the default tenant's: one each */
    ck_assert_str_eq(alone[0].worker, "w-1");
    ck_assert(alone[0].tenant);
    ck_assert_mem_eq(alone[0].t, T2, 16);
    ck_assert_str_eq(alone[1].worker, "w-3");
    ck_assert(!alone[1].tenant);
    answer_bundle(0, &OK);
    ck_assert_int_eq(cs[0].calls, 1);
    ck_assert_int_eq(cs[2].calls, 1);
    ck_assert_int_eq(cs[1].calls, 0);
}
END_TEST

START_TEST(more_than_the_bound_goes_in_several_bundles)
{
    for (int i = 0; i < NP; i++) {
        char p[8];
        snprintf(p, sizeof p, "k%c", 'A' + (i % 50));
        pop(i, p, NULL);
    }
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nbundles, 3);
    ck_assert_uint_eq(bundles[0].n, QN_POP_BUNDLE_MAX);
    ck_assert_uint_eq(bundles[1].n, QN_POP_BUNDLE_MAX);
    ck_assert_uint_eq(bundles[2].n, NP - 2 * QN_POP_BUNDLE_MAX);
    ck_assert_str_eq(bundles[1].worker[0], "w-64");
    for (size_t b = 0; b < 3; b++)
        answer_bundle(b, &OK);
    for (int i = 0; i < NP; i++)
        ck_assert_int_eq(cs[i].calls, 1);
}
END_TEST

/* A consumer that goes away cancels its pop: still queued, it is never sent;
 * in a bundle in flight, the others get their results and it gets nothing. */
START_TEST(cancelled_members)
{
    pop(0, "ka", NULL);
    pop(1, "kb", NULL);
    pop(2, "kc", NULL);
    qn_cfusion_pop_cancel(cs[1].h);
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nbundles, 1);
    ck_assert_uint_eq(bundles[0].n, 2);
    ck_assert_str_eq(bundles[0].worker[1], "w-2");
    pop(3, "kd", NULL);
    qn_cfusion_pop_cancel(cs[3].h); /* the only queued one: nothing to send */
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nbundles, 1);
    ck_assert_uint_eq(nalone, 0);
    qn_cfusion_pop_cancel(cs[2].h); /* in flight */
    answer_bundle(0, &OK);
    ck_assert_int_eq(cs[0].calls, 1);
    ck_assert_int_eq(cs[1].calls, 0);
    ck_assert_int_eq(cs[2].calls, 0);
    ck_assert_int_eq(cs[3].calls, 0);
    /* queued ones left at free are freed with it (no callback) */
    pop(4, "ke", NULL);
}
END_TEST

/* Refused as a whole (a member the database refused rolled it back): every
 * live member goes again alone and gets its own verdict. In doubt: every
 * member gets QN_EINDOUBT (each releases its worker as a pop in doubt does). */
START_TEST(refused_bundle_retries_alone_doubt_reaches_everyone)
{
    pop(0, "ka", T1);
    pop(1, "kb", T1);
    pop(2, "kc", T1);
    qn_cfusion_pop_flush(cf);
    qn_cfusion_pop_cancel(cs[2].h);
    struct qn_store_status edb = {QN_EDB, "55000", "conflates"};
    answer_bundle(0, &edb);
    ck_assert_int_eq(cs[0].calls, 0);
    ck_assert_uint_eq(nalone, 2);
    ck_assert_str_eq(alone[0].worker, "w-0");
    ck_assert_str_eq(alone[0].partition, "ka");
    ck_assert_mem_eq(alone[0].t, T1, 16);
    ck_assert_str_eq(alone[1].worker, "w-1");
    struct qn_cfusion_pop_stats ps;
    qn_cfusion_pop_stats(cf, &ps);
    ck_assert_uint_eq(ps.retried, 2);
    alone[0].cb(alone[0].ud, &OK, &(struct qn_pop_result){0, NULL});
    alone[1].cb(alone[1].ud, &edb, NULL);
    ck_assert_int_eq(cs[0].calls, 1);
    ck_assert_int_eq(cs[0].code, QN_OK);
    ck_assert_int_eq(cs[1].calls, 1);
    ck_assert_int_eq(cs[1].code, QN_EDB);
    ck_assert_int_eq(cs[2].calls, 0);

    pop(3, "kd", NULL);
    pop(4, "ke", NULL);
    qn_cfusion_pop_flush(cf);
    struct qn_store_status doubt = {QN_EINDOUBT, "", "lost"};
    answer_bundle(1, &doubt);
    ck_assert_int_eq(cs[3].calls, 1);
    ck_assert_int_eq(cs[3].code, QN_EINDOUBT);
    ck_assert_int_eq(cs[4].calls, 1);
    ck_assert_int_eq(cs[4].code, QN_EINDOUBT);
    ck_assert_uint_eq(nalone, 2);
}
END_TEST

/* A bundle the store will not take: every member's callback runs from the
 * flush with that code (never from inside qn_cfusion_pop). */
START_TEST(refused_at_submit)
{
    pop(0, "ka", NULL);
    pop(1, "kb", NULL);
    pop(2, "kc", T2);
    submit_rc = QN_EUNAVAILABLE;
    ck_assert_int_eq(cs[0].calls, 0);
    qn_cfusion_pop_flush(cf);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(cs[i].calls, 1);
        ck_assert_int_eq(cs[i].code, QN_EUNAVAILABLE);
    }
    /* a pop not by id is refused at once, as qn_store_pop is */
    struct qn_pop_args a = {0};
    a.queue = "q";
    a.worker = "w";
    a.budget = 1;
    struct qn_cfusion_pop *h = NULL;
    ck_assert_int_eq(qn_cfusion_pop(cf, FAKE_STORE, &a, NULL, 0, on_pop, &cs[9], &h),
                     QN_EUNAVAILABLE);
    ck_assert_int_eq(cs[9].calls, 0);
}
END_TEST

/* Consumer 0's callback: its consumer goes away with consumer 2, whose pop is
 * still queued, and consumer 3 pops at once. */
static void on_pop_then_cancel(void *ud, const struct qn_store_status *st,
                               const struct qn_pop_result *res)
{
    on_pop(ud, st, res);
    qn_cfusion_pop_cancel(cs[2].h);
    cs[2].h = NULL;
    pop(3, "kd", NULL);
}

/* A callback that runs from the flush (the store refused the submit) may
 * cancel a pop that the same flush has not sent yet, and queue another: the
 * cancelled one is neither sent nor answered, the new one waits for the next
 * flush. (Before: the flush held this turn's pops on a list of its own, so the
 * cancel freed a pop that list still held.) */
START_TEST(a_callback_from_the_flush_cancels_a_pop_not_sent_yet)
{
    pop_cb = on_pop_then_cancel;
    pop(0, "ka", NULL);
    pop(1, "kb", NULL);
    pop(2, "kc", T2); /* another tenant: the flush's second bundle */
    submit_rc = QN_EUNAVAILABLE;
    qn_cfusion_pop_flush(cf);
    ck_assert_int_eq(cs[0].calls, 1);
    ck_assert_int_eq(cs[0].code, QN_EUNAVAILABLE);
    ck_assert_int_eq(cs[1].calls, 1);
    ck_assert_int_eq(cs[2].calls, 0);
    ck_assert_int_eq(cs[3].calls, 0);
    ck_assert_uint_eq(nbundles + nalone, 0);
    submit_rc = QN_OK;
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nbundles, 0);
    ck_assert_uint_eq(nalone, 1);
    ck_assert_str_eq(alone[0].worker, "w-3");
    ck_assert_str_eq(alone[0].partition, "kd");
    alone[0].cb(alone[0].ud, &OK, &(struct qn_pop_result){0, NULL});
    ck_assert_int_eq(cs[3].calls, 1);
    ck_assert_int_eq(cs[2].calls, 0);
}
END_TEST

/* ---------------------------------------------------------------- bundled acks */

struct ack_sent {
    size_t n; /* members (1: qn_store_ack) */
    char worker[QN_ACK_BUNDLE_MAX][32];
    size_t items[QN_ACK_BUNDLE_MAX];
    int64_t off0[QN_ACK_BUNDLE_MAX];
    uint8_t hash0[QN_ACK_BUNDLE_MAX];
    qn_ack_cb cb1;
    qn_ack_bundle_cb cbn;
    void *ud;
};
static struct ack_sent acks[MAXC];
static size_t nacks;

static void ack_record(const struct qn_ack_args *a, size_t n, struct ack_sent *c)
{
    c->n = n;
    for (size_t k = 0; k < n; k++) {
        snprintf(c->worker[k], sizeof c->worker[k], "%s", a[k].worker);
        c->items[k] = a[k].n;
        c->off0[k] = a[k].items[0].offset;
        c->hash0[k] = a[k].items[0].hash ? a[k].items[0].hash[0] : 0;
    }
}

int __wrap_qn_store_ack(qn_store *st, const struct qn_ack_args *a, const struct qn_call_opts *opts,
                        qn_ack_cb cb, void *ud, qn_store_req **req)
{
    (void)opts;
    ck_assert_ptr_eq(st, FAKE_STORE);
    if (submit_rc != QN_OK)
        return submit_rc;
    ck_assert_uint_lt(nacks, MAXC);
    struct ack_sent *c = &acks[nacks++];
    memset(c, 0, sizeof *c);
    ack_record(a, 1, c);
    c->cb1 = cb;
    c->ud = ud;
    if (req)
        *req = NULL;
    return QN_OK;
}

int __wrap_qn_store_ack_bundle(qn_store *st, const struct qn_ack_args *a, size_t n,
                               const struct qn_call_opts *opts, qn_ack_bundle_cb cb, void *ud,
                               qn_store_req **req)
{
    (void)opts;
    (void)req;
    ck_assert_ptr_eq(st, FAKE_STORE);
    if (submit_rc != QN_OK)
        return submit_rc;
    ck_assert_uint_ge(n, 2);
    ck_assert_uint_le(n, QN_ACK_BUNDLE_MAX);
    ck_assert_uint_lt(nacks, MAXC);
    struct ack_sent *c = &acks[nacks++];
    memset(c, 0, sizeof *c);
    ack_record(a, n, c);
    c->cbn = cb;
    c->ud = ud;
    return QN_OK;
}

struct acker {
    int calls, code;
    int64_t committed;
    size_t n;
    struct qn_cfusion_ack *h;
};
static struct acker ak[NP];

static void on_ack(void *ud, const struct qn_store_status *st, const struct qn_ack_result *res)
{
    struct acker *a = ud;
    a->calls++;
    a->h = NULL;
    a->code = st->code;
    a->committed = res ? res->committed : -2;
    a->n = res ? res->n : 0;
}

/* acker i acks items offsets 10*i .. (worker "w-i"); odd i by hash */
static void ack(int i, size_t items)
{
    struct qn_ack_item it[4];
    uint8_t h[4][16];
    char worker[16];
    snprintf(worker, sizeof worker, "w-%d", i);
    for (size_t k = 0; k < items; k++) {
        memset(&it[k], 0, sizeof it[k]);
        it[k].status = QN_ACK_COMPLETED;
        it[k].offset = 10 * i + (int64_t)k;
        memset(h[k], 0xa0 + i, 16);
        it[k].hash = i % 2 ? h[k] : NULL;
    }
    struct qn_ack_args a;
    memset(&a, 0, sizeof a);
    a.pid[0] = (uint8_t)i;
    a.group = "g";
    a.worker = worker;
    a.items = it;
    a.n = items;
    ck_assert_int_eq(qn_cfusion_ack(cf, FAKE_STORE, &a, NULL, on_ack, &ak[i], &ak[i].h), QN_OK);
    /* the caller's items, hashes and strings are gone once this returns */
    memset(it, 0xee, sizeof it);
    memset(h, 0xee, sizeof h);
    memset(worker, 'z', sizeof worker - 1);
}

static void answer_acks(size_t c, const struct qn_store_status *st)
{
    struct ack_sent *s = &acks[c];
    static struct qn_ack_item_result items[4];
    struct qn_ack_result res[QN_ACK_BUNDLE_MAX];
    for (size_t k = 0; k < s->n; k++) {
        memset(&res[k], 0, sizeof res[k]);
        res[k].n = s->items[k];
        res[k].items = items;
        res[k].committed = 1000 + (int64_t)k;
    }
    if (s->cb1)
        s->cb1(s->ud, st, st->code == QN_OK ? &res[0] : NULL);
    else
        s->cbn(s->ud, st, st->code == QN_OK ? res : NULL, s->n);
}

static void ack_setup(void)
{
    setup();
    memset(ak, 0, sizeof ak);
    memset(acks, 0, sizeof acks);
    nacks = 0;
}

/* One bundle in flight: what comes meanwhile waits, then goes as the next
 * bundle; each member its own result, after its bundle answered; copies of
 * the items (offsets and hashes) went out, not the caller's memory. */
START_TEST(acks_single_flight_one_bundle_per_flush)
{
    ack(0, 2);
    ack(1, 1);
    ack(2, 3);
    ck_assert_uint_eq(nacks, 0); /* never inside the call */
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nacks, 1);
    ck_assert_uint_eq(acks[0].n, 3);
    ck_assert_str_eq(acks[0].worker[0], "w-0");
    ck_assert_uint_eq(acks[0].items[0], 2);
    ck_assert_int_eq(acks[0].off0[0], 0);
    ck_assert_str_eq(acks[0].worker[1], "w-1");
    ck_assert_uint_eq(acks[0].hash0[1], 0xa1);
    ck_assert_str_eq(acks[0].worker[2], "w-2");
    ck_assert_int_eq(acks[0].off0[2], 20);
    /* in flight: the next ones wait */
    ack(3, 1);
    ack(4, 1);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nacks, 1);
    ck_assert_int_eq(ak[0].calls, 0);
    answer_acks(0, &OK);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ak[i].calls, 1);
        ck_assert_int_eq(ak[i].code, QN_OK);
        ck_assert_int_eq(ak[i].committed, 1000 + i);
    }
    ck_assert_uint_eq(ak[2].n, 3);
    ck_assert_int_eq(ak[3].calls, 0);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nacks, 2);
    ck_assert_uint_eq(acks[1].n, 2);
    ck_assert_str_eq(acks[1].worker[0], "w-3");
    /* a bundle of one goes as ack_v1, and holds the flight too */
    ack(5, 1);
    answer_acks(1, &OK);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nacks, 3);
    ck_assert_ptr_nonnull(acks[2].cb1);
    ack(6, 1);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nacks, 3);
    answer_acks(2, &OK);
    ck_assert_int_eq(ak[5].calls, 1);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nacks, 4);
    answer_acks(3, &OK);
    struct qn_cfusion_ack_stats st;
    qn_cfusion_ack_stats(cf, &st);
    ck_assert_uint_eq(st.bundles, 2);
    ck_assert_uint_eq(st.bundled, 5);
    ck_assert_uint_eq(st.alone, 2);
}
END_TEST

/* In doubt: every member gets QN_EINDOUBT (ack_apply.c re-sends or answers
 * unknown per group); refused as a whole: each live member alone, in
 * parallel, its own verdict; cancelled: a queued one is never sent, one in
 * flight gets no callback; refused at submit: every member gets the code. */
START_TEST(acks_doubt_refusal_cancel)
{
    ack(0, 1);
    ack(1, 1);
    ack(2, 1);
    qn_cfusion_pop_flush(cf); /* pops only: acks stay queued */
    ck_assert_uint_eq(nacks, 0);
    qn_cfusion_ack_cancel(ak[1].h);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(acks[0].n, 2);
    struct qn_store_status doubt = {QN_EINDOUBT, "", "lost"};
    answer_acks(0, &doubt);
    ck_assert_int_eq(ak[0].code, QN_EINDOUBT);
    ck_assert_int_eq(ak[2].code, QN_EINDOUBT);
    ck_assert_int_eq(ak[1].calls, 0);

    ack(3, 1);
    ack(4, 2);
    ack(5, 1);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(acks[1].n, 3);
    qn_cfusion_ack_cancel(ak[5].h); /* in flight */
    struct qn_store_status edb = {QN_EDB, "40P01", "deadlock"};
    answer_acks(1, &edb);
    ck_assert_uint_eq(nacks, 4); /* 3 and 4 alone again, at once */
    ck_assert_str_eq(acks[2].worker[0], "w-3");
    ck_assert_str_eq(acks[3].worker[0], "w-4");
    ck_assert_uint_eq(acks[3].items[0], 2);
    ck_assert_int_eq(acks[3].off0[0], 40);
    answer_acks(2, &OK);
    answer_acks(3, &OK);
    ck_assert_int_eq(ak[3].calls, 1);
    ck_assert_int_eq(ak[4].calls, 1);
    ck_assert_int_eq(ak[4].code, QN_OK);
    ck_assert_int_eq(ak[5].calls, 0);
    struct qn_cfusion_ack_stats st;
    qn_cfusion_ack_stats(cf, &st);
    ck_assert_uint_eq(st.retried, 2);

    submit_rc = QN_EUNAVAILABLE;
    ack(6, 1);
    ack(7, 1);
    qn_cfusion_ack_flush(cf);
    ck_assert_int_eq(ak[6].code, QN_EUNAVAILABLE);
    ck_assert_int_eq(ak[7].code, QN_EUNAVAILABLE);
    submit_rc = QN_OK;
    ack(8, 1); /* the flight is free again */
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nacks, 5);
    /* bad input: refused at once */
    struct qn_ack_args a;
    memset(&a, 0, sizeof a);
    struct qn_cfusion_ack *h = NULL;
    ck_assert_int_eq(qn_cfusion_ack(cf, FAKE_STORE, &a, NULL, on_ack, &ak[9], &h), QN_EINVAL);
    /* left in flight and queued at free: freed with it */
    ack(9, 1);
}
END_TEST

/* QUEEN_LEASE_BUNDLE / QUEEN_ACK_BUNDLE off: every pop and every ack goes out
 * at once by itself, as before bundling (no flight either). */
START_TEST(bundling_off)
{
    qn_cfusion_set_bundling(cf, false, false);
    pop(0, "ka", NULL);
    pop(1, "kb", NULL);
    ck_assert_uint_eq(nalone, 2);
    ack(0, 1);
    ack(1, 1);
    ck_assert_uint_eq(nacks, 2);
    ck_assert_ptr_nonnull(acks[1].cb1);
    qn_cfusion_pop_flush(cf);
    qn_cfusion_ack_flush(cf);
    ck_assert_uint_eq(nbundles, 0);
    ck_assert_uint_eq(nacks, 2);
    answer_acks(1, &OK);
    answer_acks(0, &OK);
    ck_assert_int_eq(ak[0].calls, 1);
    ck_assert_int_eq(ak[1].calls, 1);
    submit_rc = QN_EUNAVAILABLE;
    struct qn_ack_item it = {NULL, 1, QN_ACK_COMPLETED};
    struct qn_ack_args a;
    memset(&a, 0, sizeof a);
    a.items = &it;
    a.n = 1;
    struct qn_cfusion_ack *h = NULL;
    ck_assert_int_eq(qn_cfusion_ack(cf, FAKE_STORE, &a, NULL, on_ack, &ak[2], &h), QN_EUNAVAILABLE);
    ck_assert_int_eq(ak[2].calls, 0);
    qn_cfusion_set_bundling(cf, true, true);
    submit_rc = QN_OK;
    pop(2, "kc", NULL);
    ck_assert_uint_eq(nalone, 2); /* queued again */
    qn_cfusion_pop_flush(cf);
    ck_assert_uint_eq(nalone, 3); /* a bundle of one */
}
END_TEST

/* QN_CFUSION_DECODE with a decoder: a large batch is decompressed off the loop
 * and the pop stays in flight meanwhile (no callback yet; a cancel then means
 * no callback ever); a pop without the flag, or a small batch, is answered at
 * once as before, without raw. */
START_TEST(large_batches_decoded_before_the_callback)
{
    struct event *keep;
    struct event_base *base = qn_test_thread_loop(&keep);
    struct qn_offload *pool;
    struct qn_decoder *d;
    ck_assert_int_eq(qn_offload_new(1, 8, &pool), QN_OK);
    ck_assert_int_eq(qn_decoder_new(pool, base, 4096, 1u << 20, 64u << 20, &d), QN_OK);
    qn_cfusion_set_decoder(cf, d);
    /* a segment of 50 frames of 1 KB */
    static uint8_t pay[1024];
    memset(pay, 'p', sizeof pay);
    struct qn_frame fr[50];
    memset(fr, 0, sizeof fr);
    for (int i = 0; i < 50; i++) {
        fr[i].payload = pay;
        fr[i].payload_len = sizeof pay;
        fr[i].txn = (const uint8_t *)"t";
        fr[i].txn_len = 1;
    }
    qn_zctx *z;
    ck_assert_int_eq(qn_zctx_new(&z), QN_OK);
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(z, fr, 50, 1, &blob, NULL), QN_OK);
    struct qn_pop_segment seg = {.queue = "q",
                                 .partition = "p",
                                 .base = 40,
                                 .start_idx = 0,
                                 .take = 50,
                                 .blob = blob.data,
                                 .blob_len = blob.len};
    struct qn_pop_result r = {1, &seg};

    pop_flags(0, NULL, NULL, QN_CFUSION_DECODE);
    pop_flags(1, NULL, NULL, 0);
    pop_flags(2, NULL, NULL, QN_CFUSION_DECODE);
    pop_flags(3, "ka", NULL, QN_CFUSION_DECODE);
    pop_flags(4, "kb", NULL, QN_CFUSION_DECODE);
    ck_assert_uint_eq(nalone, 3);
    alone[0].cb(alone[0].ud, &OK, &r);
    ck_assert_int_eq(cs[0].calls, 0); /* with the decoder */
    alone[1].cb(alone[1].ud, &OK, &r);
    ck_assert_int_eq(cs[1].calls, 1); /* no flag: at once, as stored */
    ck_assert(!cs[1].raw);
    alone[2].cb(alone[2].ud, &OK, &r);
    ck_assert_int_eq(cs[2].calls, 0);
    qn_cfusion_pop_cancel(cs[2].h); /* its consumer went away while it decoded */
    /* a bundle's small batches (no blob: nothing to weigh) answer at once */
    qn_cfusion_pop_flush(cf);
    answer_bundle(0, &OK);
    ck_assert_int_eq(cs[3].calls, 1);
    ck_assert_int_eq(cs[4].calls, 1);
    ck_assert(!cs[4].raw);
    /* the store's rows may go once the callback returned */
    memset(&seg, 0, sizeof seg);
    while (cs[0].calls == 0)
        event_base_loop(base, EVLOOP_ONCE); /* woken by the decoder's port */
    ck_assert_int_eq(cs[0].calls, 1);
    ck_assert_int_eq(cs[0].code, QN_OK);
    ck_assert_uint_eq(cs[0].rows, 1);
    ck_assert_int_eq(cs[0].base0, 40);
    ck_assert(cs[0].raw);
    qn_decoder_free(d); /* the cancelled one is freed without a callback */
    ck_assert_int_eq(cs[2].calls, 0);
    struct qn_decode_stats st;
    qn_decoder_stats(NULL, &st);
    ck_assert_uint_eq(st.batches, 0);
    qn_cfusion_set_decoder(cf, NULL);
    qn_offload_free(pool);
    qn_buf_free(&blob);
    qn_zctx_free(z);
    event_free(keep);
    event_base_free(base);
}
END_TEST

Suite *qn_test_cbundle_suite(void)
{
    Suite *s = suite_create("cbundle");
    TCase *t = tcase_create("core");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, by_id_pops_wait_for_the_turn_and_go_as_one_bundle);
    tcase_add_test(t, one_bundle_per_tenant_and_a_bundle_of_one_goes_alone);
    tcase_add_test(t, more_than_the_bound_goes_in_several_bundles);
    tcase_add_test(t, cancelled_members);
    tcase_add_test(t, refused_bundle_retries_alone_doubt_reaches_everyone);
    tcase_add_test(t, refused_at_submit);
    tcase_add_test(t, a_callback_from_the_flush_cancels_a_pop_not_sent_yet);
    tcase_add_test(t, large_batches_decoded_before_the_callback);
    suite_add_tcase(s, t);
    TCase *a = tcase_create("acks");
    tcase_add_checked_fixture(a, ack_setup, teardown);
    tcase_add_test(a, acks_single_flight_one_bundle_per_flush);
    tcase_add_test(a, acks_doubt_refusal_cancel);
    tcase_add_test(a, bundling_off);
    suite_add_tcase(s, a);
    return s;
}
