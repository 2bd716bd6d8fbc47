/*
 * engine/offload.h - private to broker/: a small pool of threads for CPU-heavy
 * work (large or high-level compression), so that an I/O loop keeps answering
 * while a big segment is packed.
 *
 * A loop submits a job through its port; a pool thread runs job->work with the
 * thread's own compression context; the port hands the finished job back to its
 * loop, where job->done runs. Jobs are the caller's memory (embed struct
 * qn_offload_job and use qn_container_of); the pool never allocates per job.
 *
 * Bounds: the pool holds at most `cap` jobs waiting or running; a submit beyond
 * that answers QN_EBUSY and the caller does the work on its own thread (never a
 * wait, never an unbounded queue).
 *
 * Threading: qn_offload_new/free on the process's main thread, before the
 * loops start and after they stopped. A port belongs to one loop: it is made,
 * used and freed there. The loop's event_base must have libevent's thread
 * support (evthread_use_pthreads before it was made), so that a pool thread
 * can wake it.
 */
#ifndef QN_BROKER_OFFLOAD_H
#define QN_BROKER_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "queen/segment.h"

struct event_base;
struct qn_offload;
struct qn_offload_port;

struct qn_offload_job {
    /* on a pool thread: z is that thread's context */
    void (*work)(struct qn_offload_job *job, qn_zctx *z);
    /* on the submitting loop, after work */
    void (*done)(struct qn_offload_job *job);
    struct qn_offload_port *port; /* set by submit */
    struct qn_offload_job *next;  /* the pool's or the port's list */
};

struct qn_offload_stats {
    uint64_t submitted; /* jobs taken by the pool */
    uint64_t refused;   /* submits answered QN_EBUSY (done inline by the caller) */
};

/* Starts `threads` (>= 1) threads holding at most `cap` (>= 1) jobs.
 * QN_OK, QN_EINVAL, QN_ENOMEM or QN_EINTERNAL (a thread could not start). */
int qn_offload_new(int threads, size_t cap, struct qn_offload **out);

/* Runs the jobs still queued, then stops and joins the threads. Every port must
 * be freed first. NULL allowed. */
void qn_offload_free(struct qn_offload *o);

/* A loop's port on o, waking base when a job is done. QN_OK or QN_ENOMEM. */
int qn_offload_port_new(struct qn_offload *o, struct event_base *base,
                        struct qn_offload_port **out);

/* Queues job (work and done set) for a pool thread. QN_OK: done will run on the
 * port's loop, once. QN_EBUSY: the pool is full; the job was not taken. */
int qn_offload_submit(struct qn_offload_port *p, struct qn_offload_job *job);

/* Jobs of this port not yet handed back (waiting, running or done but not yet
 * delivered). On the port's loop. For tests (test_offload.c): the broker reads
 * the pool's totals (qn_offload_stats) instead. */
size_t qn_offload_port_pending(const struct qn_offload_port *p);

/* Waits until every job of the port has finished its work, then frees the port
 * WITHOUT running the done of jobs not yet delivered: the caller, tearing down,
 * cleans up what those jobs were for. NULL allowed. */
void qn_offload_port_free(struct qn_offload_port *p);

/* Totals of the pool (any thread; a snapshot). */
void qn_offload_stats(struct qn_offload *o, struct qn_offload_stats *out);

#endif
