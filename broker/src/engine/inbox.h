/*
 * engine/inbox.h - private to broker/: a loop's inbox, the one way work crosses
 * from one event loop (worker thread) to another.
 *
 * A bounded multi-producer ring of (fn, arg) messages owned by one loop: any
 * thread posts, the owning loop runs each message's fn(arg) on its own thread,
 * in posting order per producer. The ring's capacity is fixed at creation: a
 * full inbox refuses the post (QN_EBUSY, back-pressure for the caller: answer
 * RESOURCE_EXHAUSTED or drop a hint), it never grows.
 *
 * Ownership: a posted arg belongs to the message until fn runs (fn frees it);
 * messages still queued when the inbox is freed are given to their drop
 * function (or to fn with the inbox closing, see qn_inbox_free).
 *
 * Threading: qn_inbox_post from any thread; everything else on the owning loop.
 * Needs libevent's thread support (evthread_use_pthreads) before the owning
 * event_base was made, so that event_active from another thread wakes it.
 */
#ifndef QN_BROKER_INBOX_H
#define QN_BROKER_INBOX_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct qn_inbox;

/* A message: fn(arg) runs on the owning loop. */
typedef void (*qn_inbox_fn)(void *arg);

/* Makes an inbox of `cap` slots (>= 1) on base. QN_OK, QN_EINVAL or QN_ENOMEM. */
int qn_inbox_new(struct event_base *base, size_t cap, struct qn_inbox **out);

/*
 * Queues fn(arg) for the owning loop. Any thread. Returns QN_OK (arg is the
 * message's), QN_EBUSY when the inbox is full or closed (arg stays the caller's).
 */
int qn_inbox_post(struct qn_inbox *ib, qn_inbox_fn fn, void *arg);

/* Messages queued now (any thread; a snapshot). */
size_t qn_inbox_depth(struct qn_inbox *ib);

/* Posts refused because the inbox was full (any thread). */
uint64_t qn_inbox_refused(struct qn_inbox *ib);

/* On the owning loop, before its event_base is freed: closes the inbox (later
 * posts answer QN_EBUSY) and runs every message still queued, so each frees its
 * arg. NULL allowed; idempotent. */
void qn_inbox_close(struct qn_inbox *ib);

/* Frees a closed inbox, once no thread can post to it any more. NULL allowed. */
void qn_inbox_free(struct qn_inbox *ib);

#endif
