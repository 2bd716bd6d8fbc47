/*
 * store_engine.h - PRIVATE to the store_*.c files of storage/src: the
 * structures of a store, its connections and its requests, and the calls those
 * files make into each other. Nothing else includes it (the rest of storage/
 * goes through store_int.h).
 *
 * Who owns what:
 *   store_pool.c    the store itself and its connections: connect, set up,
 *                   watch for hangs, close, reconnect with backoff.
 *   store_engine.c  requests: queue (one queue per lane), pipeline onto a
 *                   connection, read results, deadlines, cancels, retries,
 *                   delivery, and what a lost connection means for each call.
 *   store_listen.c  the LISTEN connection and the notifications it reads.
 *   store_req.c     building a request (steps, class, accessors) and freeing it.
 *   store_call.c    the raw-SQL test hooks reach into the statement registry.
 *
 * Connection lifecycle (enum qn__conn_state; store_pool.c):
 *
 *     IDLE --reconnect timer / listen start--> CONNECTING
 *     CONNECTING --PQconnectPoll OK--> SETUP      (session settings sent)
 *     SETUP --setup sync OK--> READY
 *     CONNECTING | SETUP | READY --error, EOF, connect timeout, hung--> IDLE
 *                                           (+ reconnect timer with backoff)
 *     IDLE | READY of the listener --listen stopped--> IDLE (no timer)
 *
 * Request lifecycle (enum qn__req_state; store_engine.c):
 *
 *     BUILDING --submit--> QUEUED --dispatch--> SENT --sync--> DONE
 *     QUEUED --deadline--> DONE (QN_ETIMEOUT: never sent)
 *     QUEUED --qn_store_cancel--> freed, no callback
 *     QUEUED --every connection down--> DONE (QN_EUNAVAILABLE)
 *     SENT --conflict / stray cancel / prepare mix-up, retries left--> QUEUED
 *     SENT --deadline--> ABANDONED (QN_EINDOUBT for a write, QN_ETIMEOUT for a read)
 *     SENT --qn_store_cancel--> ABANDONED (no callback)
 *     ABANDONED --sync, or its connection closed--> DONE (freed, nothing delivered)
 *     SENT --connection lost--> DONE (server error seen: that error; not sent:
 *                                     QN_EUNAVAILABLE; sent write: QN_EINDOUBT;
 *                                     sent read: QN_EUNAVAILABLE)
 *     any --qn_store_free--> DONE (QN_ESHUTDOWN unless delivered already)
 * DONE requests are freed at once, or parked on st->dead during shutdown.
 */
#ifndef QN_STORE_ENGINE_H
#define QN_STORE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "store_int.h"

#define QN__POOL_MAX 256

enum qn__conn_state { QN__CONN_IDLE, QN__CONN_CONNECTING, QN__CONN_SETUP, QN__CONN_READY };

enum qn__req_state {
    QN__REQ_BUILDING,
    QN__REQ_QUEUED,
    QN__REQ_SENT,
    QN__REQ_ABANDONED,
    QN__REQ_DONE
};

/* What the server will answer for a sent request, in order. */
enum qn__item_kind { QN__ITEM_PREPARE, QN__ITEM_EXEC, QN__ITEM_SYNC };

struct qn__item {
    uint8_t kind; /* enum qn__item_kind */
    int16_t step; /* EXEC: step index */
    int16_t stmt; /* PREPARE: statement id */
};

TAILQ_HEAD(qn__reqq, qn_store_req);

struct qn__conn {
    qn_store *st;
    int idx; /* pool index, -1 for the listener */
    enum qn__conn_state state;
    bool reserved;                 /* write lane only (idx < write_reserve) */
    PGconn *pg;                    /* NULL exactly in IDLE */
    struct event *io;              /* CONNECTING: one-shot on the current socket */
    struct event *rev;             /* SETUP/READY: persistent read */
    struct event *wev;             /* SETUP/READY: persistent write, added while output waits */
    struct event *timer;           /* IDLE: reconnect; CONNECTING/SETUP: connect timeout */
    struct event *watch;           /* armed while calls are in flight: the hang detector */
    bool want_write;               /* wev is added */
    struct qn__reqq inflight;      /* sent, in send order: results belong to the head */
    int ninflight;                 /* <= pipeline_depth (the setup request excepted) */
    int nreads;                    /* read-lane calls in inflight */
    int64_t progress_ms;           /* last result read, or the send to an empty pipeline */
    int backoff_ms;                /* last reconnect delay, 0 after a success */
    bool started;                  /* a connection was attempted before */
    uint64_t cancel_seq;           /* cancels sent to this session */
    uint8_t prepared[QN_STMT_MAX]; /* statement prepared (or its Parse sent) */
    int be_pid; /* its backend while in the family (qn__own_backend_add), else 0 */
};

struct qn_store_req {
    qn_store *st;
    TAILQ_ENTRY(qn_store_req) link; /* st->waiting[waitq], conn->inflight or st->dead */
    enum qn__req_state state;
    uint8_t lane;          /* QN__LANE_WRITE or QN__LANE_READ */
    uint8_t waitq;         /* QUEUED: its lane, or QN__WAIT_BACKOFF */
    bool writes;           /* may change the database: a lost outcome is in doubt */
    bool sent;             /* a statement of it was handed to libpq (bytes may have left) */
    bool delivered;        /* its outcome went out (or was suppressed by cancel) */
    bool in_callback;      /* its callback is running */
    bool internal;         /* connection setup: no user callback, not counted */
    bool err_server;       /* err came from the server (the transaction failed) */
    uint8_t reprepared;    /* resends after a prepared-statement mix-up (26000, 42P05) */
    uint8_t stray_retried; /* resends after a cancel meant for another call (at most 3) */
    int conflict_retries;
    int64_t retry_at_ms;   /* in QN__WAIT_BACKOFF: when it joins its lane again */
    struct qn__conn *conn; /* SENT, ABANDONED */
    struct qn__arena arena;
    struct qn__arena_mark inputs_end;
    struct qn__step *steps;
    int nsteps, capsteps;
    struct qn__item *items; /* SENT: what the server will answer, in order */
    int nitems, cur;
    bool cur_got;   /* items[cur] produced at least one result */
    PGresult **res; /* per step, kept until the callback returns */
    int err;        /* first failure, QN_OK while none */
    int err_step;
    const char *err_state, *err_msg;
    uint64_t cancel_seq; /* conn->cancel_seq when sent */
    int64_t cancel_ms;   /* ABANDONED: when a server cancel was sent for it, 0 none */
    int64_t deadline_ms;
    struct event *timer; /* deadline */
    uint8_t tenant[16];
    qn__finish_fn finish;
    qn__anyfn cb;
    void *ud;
    void *call_data; /* the building call's own data (arena), for its finish */
};

struct qn__dyn_stmt {
    struct qn__stmt def;
    char *name, *sql;
};

struct qn_store {
    struct event_base *base;
    struct qn_store_config cfg; /* validated; derived values filled in */
    char *conninfo;
    struct qn__conn *conns; /* cfg.pool_size */
    struct qn__conn listener;
    void (*listen_cb)(void *ud, const char *payload);
    void *listen_ud;
    struct qn_store_family *family; /* cfg.family, or own_family */
    struct qn_store_family *own_family;
    struct qn__reqq waiting[QN__WAITQS]; /* QUEUED: per lane in dispatch order, and backoff */
    int nwaiting;                        /* every waiting queue */
    struct event *backoff_ev;            /* armed for the first retry_at_ms in backoff */
    uint64_t jitter;                     /* the backoff's pseudo-random state */
    struct qn__reqq dead;                /* delivered at shutdown, freed with the store */
    struct event *kick;                  /* runs dispatch on the next loop pass */
    bool up;
    void (*state_cb)(void *ud, bool up);
    void *state_ud;
    struct qn_store_stats stats;
    uint32_t in_flight;
    int busy; /* handler depth: see enter/leave */
    bool closing;
    struct qn__dyn_stmt dyn[QN_STMT_DYN_MAX];
    int ndyn;
    struct qn__pidcache pids; /* partition ids learnt from results (pidcache.c) */
};

/* ---------------------------------------------------------------- store_pool.c */

/* Handlers bracket their work with enter/leave; a store freed meanwhile is
 * destroyed by the outermost leave. */
void qn__store_enter(qn_store *st);
void qn__store_leave(qn_store *st);
const struct qn__stmt *qn__stmt_def(const qn_store *st, int id);
/* Arms ev to fire after ms (negative: now). */
void qn__set_timer(struct event *ev, int64_t ms);
/* At least one pool connection is not IDLE. */
bool qn__pool_any_alive(const qn_store *st);
/* Closes c, resolves its calls (store_engine.c) and schedules a reconnect. */
void qn__conn_fail(struct qn__conn *c, const char *why);
/* Re-arms c's hang detector from its head call (none in flight: disarmed). */
void qn__conn_watch(struct qn__conn *c);
/* Starts connecting c (IDLE only). */
void qn__conn_start(struct qn__conn *c);
/* Releases libpq and the events of c; requests in flight are left to the caller. */
void qn__conn_close(struct qn__conn *c);
/* Logs through cfg.log (no-op without one). */
void qn__store_log(const qn_store *st, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- store_engine.c */

/* Makes the store's dispatch event. */
int qn__eng_init(qn_store *st);
/* Puts r on c's pipeline (r is neither queued nor in flight). QN_ENOMEM leaves r
 * alone; QN_EUNAVAILABLE means c failed (r was resolved with it). */
int qn__eng_submit(struct qn__conn *c, qn_store_req *r);
void qn__eng_flush(struct qn__conn *c);
/* The socket event handler of a SETUP/READY connection. */
void qn__eng_on_io(evutil_socket_t fd, short what, void *arg);
/* Runs dispatch on the next loop pass. */
void qn__eng_kick(qn_store *st);
/* c was closed: resolves every call in its pipeline (see the lifecycle). */
void qn__eng_conn_lost(struct qn__conn *c, const char *msg);
/* Fails every queued call with QN_EUNAVAILABLE when no connection is alive. */
void qn__eng_fail_waiting_if_down(qn_store *st);
/* Asks the server to cancel what c runs now. */
int qn__eng_cancel_current(struct qn__conn *c);
/* Delivers QN_ESHUTDOWN to every pending call and parks them on st->dead. */
void qn__eng_shutdown(qn_store *st);
/* ---------------------------------------------------------------- store_req.c */

void qn__req_free(qn_store_req *r);
/* Drops the PGresults r holds (a retry, a failure delivered early). */
void qn__req_drop_results(qn_store_req *r);
/* The statement a sent call is at, for messages ("qn_push", "sql"). */
const char *qn__req_current_stmt(const qn_store_req *r);

/* ---------------------------------------------------------------- store_listen.c */

/* The listener's session setup statements (after SET statement_timeout). */
extern const char *const qn__listen_setup_sql;
/* Reads the notifications libpq buffered on the listener and hands them out. */
void qn__listen_pump(struct qn__conn *c);
/* The listener is wanted (a callback is set). */
bool qn__listen_wanted(const qn_store *st);
/* Registers a pool connection's backend with its store's family (or takes it
 * off): a NOTIFY one of them sent is the broker's own. Thread-safe. */
void qn__own_backend_add(struct qn__conn *c);
void qn__own_backend_remove(struct qn__conn *c);

#endif
