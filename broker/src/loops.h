/*
 * loops.h - private to broker/: the event loops (workers) of one broker
 * process, as a module sees them (QUEEN_WORKERS, broker.c).
 *
 * Each worker thread owns an event_base, a gRPC server and one instance of
 * every module (modules.c builds a whole struct qn_app per worker). Work that
 * belongs to another loop travels as a message to that loop's inbox
 * (engine/inbox.h): qn_loops_post. A module publishes its per-loop state with
 * qn_loops_set_module_state during its start, so that a message addressed to
 * loop k finds loop k's state (qn_loops_module_state) when it runs there.
 *
 * Threading: qn_loops_post and the getters from any worker thread. Every loop's
 * module state is published before any loop serves (broker.c starts the
 * workers one after the other, then listens), so readers need no lock. A
 * message posted to a loop that is tearing down is refused (QN_EBUSY).
 */
#ifndef QN_BROKER_LOOPS_H
#define QN_BROKER_LOOPS_H

#include "engine/inbox.h"

struct qn_loops;

/* Workers of the process (>= 1). */
unsigned qn_loops_count(const struct qn_loops *l);

/* Queues fn(arg) on worker k's loop. QN_OK (arg is the message's) or QN_EBUSY
 * (inbox full or closing: arg stays the caller's) or QN_EINVAL (no such worker). */
int qn_loops_post(struct qn_loops *l, unsigned k, qn_inbox_fn fn, void *arg);

/* The product module's state on worker k (modules.c: its struct qn_app), as
 * published at start; NULL before. */
void *qn_loops_module_state(const struct qn_loops *l, unsigned k);
void qn_loops_set_module_state(struct qn_loops *l, unsigned k, void *state);

#endif
