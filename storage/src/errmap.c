/*
 * errmap.c - translation of PostgreSQL errors into ours (see store_int.h).
 *
 * Table (first match wins):
 *   connection gone (conn_bad), class 08, 57P01/57P02/57P03 (shutdown, crash,
 *     cannot connect now), 53300 too many connections, 25006 read-only
 *     transaction (a standby after failover)              -> QN_EUNAVAILABLE
 *   40P01 deadlock, 40001 serialization failure            -> QN_ECONFLICT
 *   57014 query canceled (statement timeout or our cancel) -> QN_ETIMEOUT
 *   23505 with a "QDUP" message                            -> QN_EDUPLICATE
 *   P0002 or a "QNOTFOUND" message                         -> QN_ENOTFOUND
 *   no SQLSTATE at all (libpq could not parse the answer)  -> QN_EPROTOCOL_DB
 *   anything else                                          -> QN_EDB
 * The message for people is the server's primary message without a leading
 * "Q<LETTERS> " word (QPUSH, QACK, QTXN, QDUP, QCONF, QNOTFOUND, QSEEK, QPOP...).
 *
 * Does not: decide about retries (the engine does, from the code).
 */
#include <string.h>

#include "queen/error.h"
#include "store_int.h"

bool qn__errmap_is_unavailable(const char *s)
{
    if (s == NULL || strlen(s) != 5)
        return false;
    return strncmp(s, "08", 2) == 0 || strcmp(s, "57P01") == 0 || strcmp(s, "57P02") == 0 ||
           strcmp(s, "57P03") == 0 || strcmp(s, "53300") == 0 || strcmp(s, "25006") == 0;
}

/* Length of a leading "Q[A-Z]+ " word (including the space), else 0. */
static size_t prefix_len(const char *m)
{
    if (m == NULL || m[0] != 'Q')
        return 0;
    size_t i = 1;
    while (m[i] >= 'A' && m[i] <= 'Z')
        i++;
    if (i < 2 || m[i] != ' ')
        return 0;
    return i + 1;
}

static bool has_prefix(const char *m, const char *word)
{
    size_t n = strlen(word);
    return m != NULL && strncmp(m, word, n) == 0 && (m[n] == ' ' || m[n] == '\0');
}

int qn__errmap(const char *sqlstate, const char *msg, bool conn_bad, const char **human)
{
    const char *m = msg ? msg : "";
    *human = m + prefix_len(m);
    if (conn_bad || qn__errmap_is_unavailable(sqlstate))
        return QN_EUNAVAILABLE;
    if (sqlstate == NULL || strlen(sqlstate) != 5)
        return QN_EPROTOCOL_DB;
    if (strcmp(sqlstate, "40P01") == 0 || strcmp(sqlstate, "40001") == 0)
        return QN_ECONFLICT;
    if (strcmp(sqlstate, "57014") == 0)
        return QN_ETIMEOUT;
    if (strcmp(sqlstate, "23505") == 0 && has_prefix(m, "QDUP"))
        return QN_EDUPLICATE;
    if (strcmp(sqlstate, "P0002") == 0 || has_prefix(m, "QNOTFOUND"))
        return QN_ENOTFOUND;
    return QN_EDB;
}
