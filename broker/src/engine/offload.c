/*
 * engine/offload.c - the pool of threads for CPU-heavy work (see offload.h).
 *
 * Does: queue jobs FIFO under one mutex, run each on a pool thread with that
 * thread's own compression context, hand it back to its port's loop (a list
 * under the port's mutex and an event_active), run done there.
 * Does not: allocate per job, grow past `cap`, cancel a job once taken.
 *
 * Job lifecycle:
 *
 *     (caller's) --submit--> QUEUED (pool list) --a thread takes it--> RUNNING
 *     RUNNING --work returns--> DONE (port list, loop woken)
 *     DONE --the port's event--> (caller's again: done ran)
 *
 * Invariants:
 *   1. A job is on at most one list; the port's `running` counts its jobs QUEUED
 *      or RUNNING, under the port's mutex.
 *   2. A pool thread touches a port only under its mutex, and the last touch
 *      (the decrement of `running`, with the loop's wake-up) happens before it
 *      lets go of the mutex: port_free, which waits for running == 0 under that
 *      mutex, never frees a port a thread is still using.
 *   3. done runs on the port's loop only, once per job taken.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <event2/event.h>

#include "engine/offload.h"
#include "queen/error.h"

struct qn_offload {
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    struct qn_offload_job *head, *tail; /* QUEUED */
    size_t held;                        /* QUEUED + RUNNING */
    size_t cap;
    bool stop;
    struct qn_offload_stats stats;
    int nthreads;
    pthread_t *threads;
};

struct qn_offload_port {
    struct qn_offload *o;
    struct event *ev;
    pthread_mutex_t mu;
    pthread_cond_t idle_cv;             /* running fell to 0 */
    struct qn_offload_job *head, *tail; /* DONE, not yet delivered */
    size_t running;                     /* QUEUED + RUNNING (invariant 1) */
    size_t undelivered;                 /* the loop's count: submitted, done not yet run */
};

static void *pool_main(void *arg)
{
    struct qn_offload *o = arg;
    qn_zctx *z = NULL;
    (void)qn_zctx_new(&z); /* NULL on failure: the work falls back to its own */
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->head == NULL && !o->stop)
            pthread_cond_wait(&o->work_cv, &o->mu);
        struct qn_offload_job *job = o->head;
        if (job == NULL)
            break; /* stopping, nothing queued */
        o->head = job->next;
        if (o->head == NULL)
            o->tail = NULL;
        pthread_mutex_unlock(&o->mu);

        job->next = NULL;
        job->work(job, z);

        struct qn_offload_port *p = job->port;
        pthread_mutex_lock(&p->mu);
        if (p->tail)
            p->tail->next = job;
        else
            p->head = job;
        p->tail = job;
        event_active(p->ev, 0, 0);
        if (--p->running == 0)
            pthread_cond_broadcast(&p->idle_cv);
        pthread_mutex_unlock(&p->mu); /* the last touch of p (invariant 2) */

        pthread_mutex_lock(&o->mu);
        o->held--;
    }
    pthread_mutex_unlock(&o->mu);
    qn_zctx_free(z);
    return NULL;
}

int qn_offload_new(int threads, size_t cap, struct qn_offload **out)
{
    if (threads < 1 || cap < 1)
        return QN_EINVAL;
    struct qn_offload *o = calloc(1, sizeof *o);
    if (o == NULL)
        return QN_ENOMEM;
    o->threads = calloc((size_t)threads, sizeof *o->threads);
    if (o->threads == NULL) {
        free(o);
        return QN_ENOMEM;
    }
    o->cap = cap;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->work_cv, NULL);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&o->threads[i], NULL, pool_main, o) != 0) {
            qn_offload_free(o);
            return QN_EINTERNAL;
        }
        o->nthreads++;
    }
    *out = o;
    return QN_OK;
}

void qn_offload_free(struct qn_offload *o)
{
    if (o == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_broadcast(&o->work_cv);
    pthread_mutex_unlock(&o->mu);
    for (int i = 0; i < o->nthreads; i++)
        pthread_join(o->threads[i], NULL);
    pthread_cond_destroy(&o->work_cv);
    pthread_mutex_destroy(&o->mu);
    free(o->threads);
    free(o);
}

/* On the port's loop: runs done for every job handed back since the last call. */
static void port_deliver(evutil_socket_t fd, short what, void *arg)
{
    struct qn_offload_port *p = arg;
    (void)fd;
    (void)what;
    pthread_mutex_lock(&p->mu);
    struct qn_offload_job *job = p->head;
    p->head = p->tail = NULL;
    pthread_mutex_unlock(&p->mu);
    while (job != NULL) {
        struct qn_offload_job *next = job->next;
        job->next = NULL;
        p->undelivered--;
        job->done(job); /* may free job, or submit it again */
        job = next;
    }
}

int qn_offload_port_new(struct qn_offload *o, struct event_base *base, struct qn_offload_port **out)
{
    struct qn_offload_port *p = calloc(1, sizeof *p);
    if (p == NULL)
        return QN_ENOMEM;
    p->o = o;
    p->ev = event_new(base, -1, 0, port_deliver, p);
    if (p->ev == NULL) {
        free(p);
        return QN_ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->idle_cv, NULL);
    *out = p;
    return QN_OK;
}

int qn_offload_submit(struct qn_offload_port *p, struct qn_offload_job *job)
{
    struct qn_offload *o = p->o;
    job->port = p;
    job->next = NULL;
    pthread_mutex_lock(&o->mu);
    if (o->stop || o->held >= o->cap) {
        o->stats.refused++;
        pthread_mutex_unlock(&o->mu);
        return QN_EBUSY;
    }
    /* counted before any thread can take it (invariant 1) */
    pthread_mutex_lock(&p->mu);
    p->running++;
    pthread_mutex_unlock(&p->mu);
    o->held++;
    o->stats.submitted++;
    if (o->tail)
        o->tail->next = job;
    else
        o->head = job;
    o->tail = job;
    pthread_cond_signal(&o->work_cv);
    pthread_mutex_unlock(&o->mu);
    p->undelivered++;
    return QN_OK;
}

size_t qn_offload_port_pending(const struct qn_offload_port *p)
{
    return p->undelivered;
}

void qn_offload_port_free(struct qn_offload_port *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    while (p->running > 0)
        pthread_cond_wait(&p->idle_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    event_free(p->ev);
    pthread_cond_destroy(&p->idle_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void qn_offload_stats(struct qn_offload *o, struct qn_offload_stats *out)
{
    pthread_mutex_lock(&o->mu);
    *out = o->stats;
    pthread_mutex_unlock(&o->mu);
}
