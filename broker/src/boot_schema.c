/*
 * boot_schema.c - the schema at start, applied on a thread and retried with
 * backoff (see boot_schema.h).
 *
 * Does: run each qn_migrate() attempt on a detached thread that writes one byte
 * into a pipe when it is done; read that byte on the loop, then either report
 * success (done) or arm the backoff timer for the next attempt; log failures at
 * a bounded rate.
 * Does not: block the loop (the thread does all libpq work; the loop only reads
 * a pipe), join threads, or decide anything about serving (the caller does).
 *
 * Attempt lifecycle (one attempt at a time):
 *
 *     (none) --start / backoff timer--> RUNNING (thread) --byte in the pipe-->
 *     (result read on the loop) --ok--> done(ud), finished
 *                               --failed--> timer armed, (none)
 *
 * Invariants:
 *   1. An attempt is shared by its thread and the loop through a reference
 *      count of two; the last holder to let go closes the pipe and frees it, so
 *      qn_boot_schema_free() never waits for a thread.
 *   2. The thread writes the result fields before the byte and touches nothing
 *      else of the owner; the loop reads them only after reading the byte.
 *   3. done runs at most once, from the loop, never inside qn_boot_schema_start.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "boot_schema.h"
#include "log.h"
#include "queen/error.h"
#include "queen/migrate.h"
#include "queen/store.h"
#include "timer.h"

#define FIRST_DELAY_MS 100
/* A lock held by another broker's migration is waited for this long per attempt. */
#define LOCK_WAIT_MS 120000
/* Failures are logged at the first attempt, then at most this often. */
#define LOG_EVERY_MS 30000

struct attempt {
    atomic_int refs; /* invariant 1 */
    int fd[2];       /* [0] read by the loop, [1] written by the thread */
    int rc;
    char err[1024];
    struct qn_migrate_report rep;
    char url[]; /* copied: the thread may outlive the owner */
};

struct qn_boot_schema {
    struct event_base *base;
    char *url;
    int64_t max_delay_ms;
    int64_t delay_ms;
    void (*done)(void *ud);
    void *ud;
    struct attempt *running; /* NULL between attempts */
    struct event *ready_ev;  /* read end of running's pipe */
    struct event *timer;     /* next attempt */
    unsigned attempts;
    int64_t last_log_ms;
    bool finished;
};

static void attempt_unref(struct attempt *a)
{
    if (atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    close(a->fd[0]);
    close(a->fd[1]);
    free(a);
}

static void *attempt_main(void *arg)
{
    struct attempt *a = arg;
    a->rc = qn_migrate(a->url, LOCK_WAIT_MS, &a->rep, a->err, sizeof a->err);
    char b = 1;
    ssize_t w;
    do
        w = write(a->fd[1], &b, 1);
    while (w < 0 && errno == EINTR);
    attempt_unref(a);
    return NULL;
}

static void start_attempt(struct qn_boot_schema *b);

static void log_failure(struct qn_boot_schema *b, const struct attempt *a)
{
    int64_t now = qn_store_now_ms();
    if (b->attempts > 1 && now - b->last_log_ms < LOG_EVERY_MS)
        return;
    b->last_log_ms = now;
    if (a->rc == QN_EDB)
        QN_ERROR("schema not applied (attempt %u; retrying, next in %lld ms): %s", b->attempts,
                 (long long)b->delay_ms, a->err);
    else
        QN_WARN("database not reachable to apply the schema (attempt %u; retrying, next in %lld "
                "ms): %s",
                b->attempts, (long long)b->delay_ms, a->err[0] ? a->err : qn_strerror(a->rc));
}

static void attempt_ready(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct qn_boot_schema *b = ud;
    struct attempt *a = b->running;
    char c;
    ssize_t r = read(a->fd[0], &c, 1);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    event_free(b->ready_ev);
    b->ready_ev = NULL;
    b->running = NULL;
    b->attempts++;
    if (r == 1 && a->rc == QN_OK) {
        QN_INFO("migrate done files=%d applied=%d attempts=%u", a->rep.files_total,
                a->rep.files_applied, b->attempts);
        attempt_unref(a);
        b->finished = true;
        b->done(b->ud);
        return;
    }
    if (r != 1) {
        a->rc = QN_EINTERNAL;
        snprintf(a->err, sizeof a->err, "the schema thread ended without a result");
    }
    log_failure(b, a);
    attempt_unref(a);
    qn_timer_after(b->timer, b->delay_ms);
    b->delay_ms *= 2;
    if (b->delay_ms > b->max_delay_ms)
        b->delay_ms = b->max_delay_ms;
}

static void retry_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    start_attempt(ud);
}

/* Runs one attempt on a thread; when that cannot start, tries again later. */
static void start_attempt(struct qn_boot_schema *b)
{
    size_t ul = strlen(b->url);
    struct attempt *a = calloc(1, sizeof *a + ul + 1);
    pthread_t th;
    pthread_attr_t attr;
    bool attr_ok = false;
    if (a == NULL)
        goto later;
    memcpy(a->url, b->url, ul + 1);
    a->fd[0] = a->fd[1] = -1;
    if (pipe(a->fd) != 0 || evutil_make_socket_nonblocking(a->fd[0]) != 0)
        goto later;
    b->ready_ev = event_new(b->base, a->fd[0], EV_READ | EV_PERSIST, attempt_ready, b);
    if (b->ready_ev == NULL || event_add(b->ready_ev, NULL) != 0)
        goto later;
    atomic_init(&a->refs, 2);
    attr_ok = pthread_attr_init(&attr) == 0;
    if (!attr_ok || pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) != 0 ||
        pthread_create(&th, &attr, attempt_main, a) != 0) {
        atomic_init(&a->refs, 1);
        goto later;
    }
    pthread_attr_destroy(&attr);
    b->running = a;
    return;
later:
    if (attr_ok)
        pthread_attr_destroy(&attr);
    QN_WARN("cannot start applying the schema (out of resources); retrying");
    if (b->ready_ev) {
        event_free(b->ready_ev);
        b->ready_ev = NULL;
    }
    if (a != NULL) {
        if (a->fd[0] >= 0)
            close(a->fd[0]);
        if (a->fd[1] >= 0)
            close(a->fd[1]);
        free(a);
    }
    struct timeval tv = {1, 0};
    evtimer_add(b->timer, &tv);
}

int qn_boot_schema_start(struct event_base *base, const char *url, int64_t max_delay_ms,
                         void (*done)(void *ud), void *ud, qn_boot_schema **out)
{
    struct qn_boot_schema *b = calloc(1, sizeof *b);
    if (b == NULL)
        return QN_ENOMEM;
    b->base = base;
    b->url = strdup(url);
    b->max_delay_ms = max_delay_ms < FIRST_DELAY_MS ? FIRST_DELAY_MS : max_delay_ms;
    b->delay_ms = FIRST_DELAY_MS;
    b->done = done;
    b->ud = ud;
    b->timer = evtimer_new(base, retry_cb, b);
    if (b->url == NULL || b->timer == NULL) {
        qn_boot_schema_free(b);
        return QN_ENOMEM;
    }
    /* the first attempt from the loop (invariant 3) */
    struct timeval zero = {0, 0};
    evtimer_add(b->timer, &zero);
    *out = b;
    return QN_OK;
}

unsigned qn_boot_schema_attempts(const qn_boot_schema *b)
{
    return b ? b->attempts : 0;
}

void qn_boot_schema_free(qn_boot_schema *b)
{
    if (b == NULL)
        return;
    if (b->ready_ev)
        event_free(b->ready_ev);
    if (b->running)
        attempt_unref(b->running);
    if (b->timer)
        event_free(b->timer);
    free(b->url);
    free(b);
}
