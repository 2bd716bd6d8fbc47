/*
 * boot_schema.h - private to broker/: the schema at start, applied off the loop.
 *
 * qn_migrate() is blocking libpq (queen/migrate.h), so the serving process runs
 * it on a short-lived thread and is told on its loop when it is done. A failed
 * attempt (the database down, a lock held by another broker's migration, a
 * statement failing) is retried with backoff until one succeeds, so a broker
 * started before its database listens at once and serves as soon as the
 * database answers.
 */
#ifndef QN_BROKER_BOOT_SCHEMA_H
#define QN_BROKER_BOOT_SCHEMA_H

#include <stdint.h>

struct event_base;

typedef struct qn_boot_schema qn_boot_schema;

/*
 * Starts the first attempt now. Attempts follow each other after 100 ms,
 * doubling up to max_delay_ms. done(ud) runs once, on base's loop, after the
 * first attempt that succeeded; nothing runs after that. url is copied. A
 * failure is logged at the first attempt and then at most every 30 s (WARN;
 * ERROR when a statement failed). Returns QN_OK with *out, or QN_ENOMEM.
 */
int qn_boot_schema_start(struct event_base *base, const char *url, int64_t max_delay_ms,
                         void (*done)(void *ud), void *ud, qn_boot_schema **out);

/* Attempts since the start (each finished one counts). */
unsigned qn_boot_schema_attempts(const qn_boot_schema *b);

/* Stops: no further attempt, done never runs. An attempt still running
 * finishes on its own thread and its result is dropped (the thread frees what
 * it shares with this object). NULL is allowed. */
void qn_boot_schema_free(qn_boot_schema *b);

#endif
