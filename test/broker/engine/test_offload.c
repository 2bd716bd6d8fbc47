/*
 * test_offload.c - suite "offload": broker/src/engine/offload.c, the pool of
 * threads for heavy work: work runs on a pool thread with its own compression
 * context and done on the submitting loop, each once; the pool refuses past
 * its bound instead of queueing more; freeing a port waits for the work of its
 * jobs and runs none of their done.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "engine/map.h"
#include "engine/offload.h"
#include "engine_test.h"
#include "queen/error.h"
#include "queen/segment.h"

/* A job that packs a segment of `nframes` frames of 4 KiB each. */
struct pjob {
    struct qn_offload_job job;
    size_t nframes;
    pthread_t work_thread, done_thread;
    qn_zctx *work_z;
    int work_rc;
    struct qn_buf blob;
    _Atomic int worked;
    int done_calls;
    int *ndone; /* shared count of done calls */
    struct event_base *base;
    int want;
};

static uint8_t payload[4096];

static void pack_work(struct qn_offload_job *job, qn_zctx *z)
{
    struct pjob *p = qn_container_of(job, struct pjob, job);
    p->work_thread = pthread_self();
    p->work_z = z;
    struct qn_frame *fr = calloc(p->nframes, sizeof *fr);
    for (size_t i = 0; fr != NULL && i < p->nframes; i++) {
        fr[i].payload = payload;
        fr[i].payload_len = sizeof payload;
        fr[i].txn = (const uint8_t *)"t";
        fr[i].txn_len = 1;
    }
    p->work_rc = fr == NULL ? QN_ENOMEM : qn_segment_pack(z, fr, p->nframes, 3, &p->blob, NULL);
    free(fr);
    atomic_store(&p->worked, 1);
}

static void pack_done(struct qn_offload_job *job)
{
    struct pjob *p = qn_container_of(job, struct pjob, job);
    p->done_thread = pthread_self();
    p->done_calls++;
    if (++*p->ndone == p->want)
        event_base_loopbreak(p->base);
}

static void never(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    ck_abort_msg("the loop waited 20 s for an offload thread");
}

/* Each case's loop, pool and port (pool_start, pool_end). */
static struct event_base *base;
static struct event *keep;
static struct qn_offload *o;
static struct qn_offload_port *port;

/* A loop with libevent's thread support (pool threads wake it) and one timer,
 * so that it blocks until a port wakes it instead of returning at once; a pool
 * of `threads` threads holding `cap` jobs, and the loop's port on it. */
struct event_base *qn_test_thread_loop(struct event **keep_out)
{
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    struct event_base *b = event_base_new();
    ck_assert_ptr_nonnull(b);
    *keep_out = evtimer_new(b, never, NULL);
    struct timeval tv = {20, 0};
    evtimer_add(*keep_out, &tv);
    return b;
}

static void pool_start(int threads, size_t cap)
{
    base = qn_test_thread_loop(&keep);
    ck_assert_int_eq(qn_offload_new(threads, cap, &o), QN_OK);
    ck_assert_int_eq(qn_offload_port_new(o, base, &port), QN_OK);
}

/* Frees what pool_start made; port NULL: the case freed it already. */
static void pool_end(void)
{
    qn_offload_port_free(port);
    qn_offload_free(o);
    event_free(keep);
    event_base_free(base);
}

START_TEST(work_on_a_pool_thread_done_on_the_loop)
{
    pool_start(2, 64);
    memset(payload, 'x', sizeof payload);
    enum { N = 40 };
    static struct pjob jobs[N];
    int ndone = 0;
    for (int i = 0; i < N; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].job.work = pack_work;
        jobs[i].job.done = pack_done;
        jobs[i].nframes = 64 + (size_t)i; /* 256 KiB and more raw */
        jobs[i].ndone = &ndone;
        jobs[i].base = base;
        jobs[i].want = N;
        ck_assert_int_eq(qn_offload_submit(port, &jobs[i].job), QN_OK);
    }
    ck_assert_uint_eq(qn_offload_port_pending(port), N);
    ck_assert_int_eq(event_base_dispatch(base), 0); /* until the last done breaks it */
    ck_assert_int_eq(ndone, N);
    ck_assert_uint_eq(qn_offload_port_pending(port), 0);
    qn_zctx *z;
    ck_assert_int_eq(qn_zctx_new(&z), QN_OK);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(jobs[i].done_calls, 1);
        ck_assert_int_eq(jobs[i].work_rc, QN_OK);
        ck_assert(!pthread_equal(jobs[i].work_thread, pthread_self()));
        ck_assert(pthread_equal(jobs[i].done_thread, pthread_self()));
        ck_assert_ptr_nonnull(jobs[i].work_z);
        /* the segment decompresses to its frames */
        const uint8_t *raw;
        size_t rawlen;
        ck_assert_int_eq(
            qn_segment_decompress(z, jobs[i].blob.data, jobs[i].blob.len, 64u << 20, &raw, &rawlen),
            QN_OK);
        struct qn_frame_iter it;
        struct qn_frame f;
        qn_frame_iter_init(&it, raw, rawlen);
        size_t k = 0;
        while (qn_frame_iter_next(&it, &f, NULL) == 1) {
            ck_assert_uint_eq(f.payload_len, sizeof payload);
            k++;
        }
        ck_assert_uint_eq(k, jobs[i].nframes);
        qn_buf_free(&jobs[i].blob);
    }
    qn_zctx_free(z);
    struct qn_offload_stats st;
    qn_offload_stats(o, &st);
    ck_assert_uint_eq(st.submitted, N);
    ck_assert_uint_eq(st.refused, 0);
    pool_end();
}
END_TEST

START_TEST(full_pool_refuses)
{
    pool_start(1, 2);
    struct qn_test_gate g, a, b;
    qn_test_gate_init(&g);
    qn_test_gate_init(&a);
    qn_test_gate_init(&b);
    a.open = b.open = true;
    ck_assert_int_eq(qn_offload_submit(port, &g.job), QN_OK);
    qn_test_gate_wait_started(&g);                            /* the one thread is held */
    ck_assert_int_eq(qn_offload_submit(port, &a.job), QN_OK); /* waits: 2 held */
    ck_assert_int_eq(qn_offload_submit(port, &b.job), QN_EBUSY);
    struct qn_offload_stats st;
    qn_offload_stats(o, &st);
    ck_assert_uint_eq(st.submitted, 2);
    ck_assert_uint_eq(st.refused, 1);
    qn_test_gate_open(&g);
    while (g.done_calls + a.done_calls < 2)
        event_base_loop(base, EVLOOP_ONCE); /* woken by the port */
    ck_assert_int_eq(b.done_calls, 0);
    /* room again */
    ck_assert_int_eq(qn_offload_submit(port, &b.job), QN_OK);
    while (b.done_calls < 1)
        event_base_loop(base, EVLOOP_ONCE);
    ck_assert_int_eq(g.done_calls + a.done_calls + b.done_calls, 3);
    pool_end();
    qn_test_gate_destroy(&g);
    qn_test_gate_destroy(&a);
    qn_test_gate_destroy(&b);
}
END_TEST

START_TEST(port_free_waits_for_work_and_runs_no_done)
{
    pool_start(1, 8);
    memset(payload, 'y', sizeof payload);
    struct qn_test_gate g;
    qn_test_gate_init(&g);
    g.open = true;
    static struct pjob big;
    memset(&big, 0, sizeof big);
    int ndone = 0;
    big.job.work = pack_work;
    big.job.done = pack_done;
    big.nframes = 2048; /* 8 MiB raw: milliseconds of work */
    big.ndone = &ndone;
    big.base = base;
    ck_assert_int_eq(qn_offload_submit(port, &g.job), QN_OK);
    ck_assert_int_eq(qn_offload_submit(port, &big.job), QN_OK);
    qn_offload_port_free(port); /* both queued or running: waits for their work */
    port = NULL;
    ck_assert_int_eq(atomic_load(&big.worked), 1);
    ck_assert_int_eq(big.work_rc, QN_OK);
    ck_assert_int_eq(big.done_calls, 0);
    ck_assert_int_eq(g.done_calls, 0);
    qn_buf_free(&big.blob);
    pool_end();
    qn_test_gate_destroy(&g);
}
END_TEST

/* A job whose work waits until the test lets it go (engine_test.h). */
static void gate_work(struct qn_offload_job *job, qn_zctx *z)
{
    (void)z;
    struct qn_test_gate *g = qn_container_of(job, struct qn_test_gate, job);
    pthread_mutex_lock(&g->mu);
    g->started = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_done(struct qn_offload_job *job)
{
    qn_container_of(job, struct qn_test_gate, job)->done_calls++;
}

void qn_test_gate_init(struct qn_test_gate *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->job.work = gate_work;
    g->job.done = gate_done;
}

void qn_test_gate_wait_started(struct qn_test_gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->started)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

void qn_test_gate_open(struct qn_test_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void qn_test_gate_destroy(struct qn_test_gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

Suite *qn_test_offload_suite(void)
{
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("offload");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, work_on_a_pool_thread_done_on_the_loop);
    tcase_add_test(tc, full_pool_refuses);
    tcase_add_test(tc, port_free_waits_for_work_and_runs_no_done);
    suite_add_tcase(s, tc);
    return s;
}
