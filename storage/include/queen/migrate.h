/*
 * queen/migrate.h - applies the SQL files of sql/ (embedded in the binary at
 * build time) to a database, in file-name order.
 *
 * Each file is idempotent and is applied at every broker start; a file whose
 * checksum matches the one recorded in qn.schema_files is skipped, so a second
 * run changes nothing. Concurrent runs serialize on advisory lock 737000 (taken by
 * polling, never by a blocking wait, so a CREATE INDEX CONCURRENTLY in one run
 * cannot deadlock against another run's lock wait).
 *
 * A file containing the line "-- queen:no-transaction" is applied statement by
 * statement in autocommit mode (for CREATE INDEX CONCURRENTLY); its statements are
 * separated by ";" at the end of a line and must not contain function bodies.
 * Every other file is applied in one transaction.
 *
 * Blocking: for boot time and tools only, never from an event loop.
 */
#ifndef QUEEN_MIGRATE_H
#define QUEEN_MIGRATE_H

#include <stddef.h>

struct qn_migrate_report {
    int files_total;   /* files embedded */
    int files_applied; /* files whose checksum changed and were (re)applied */
};

/*
 * Applies the embedded schema to the database at conninfo (a libpq connection
 * string or URL). On success fills *rep (may be NULL). On failure writes a
 * message for people into errbuf (may be NULL) and returns QN_EUNAVAILABLE
 * (cannot connect), QN_ETIMEOUT (advisory lock not obtained within lock_wait_ms)
 * or QN_EDB (a statement failed; the message names the file).
 */
int qn_migrate(const char *conninfo, int lock_wait_ms, struct qn_migrate_report *rep, char *errbuf,
               size_t errcap);

#endif
