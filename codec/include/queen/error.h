/*
 * queen/error.h - the one error enum shared by every Queen module.
 *
 * Every public function returns QN_OK (0) or one of these negative codes and
 * writes results through out-parameters only on success. Codes are append-only:
 * never renumber or reuse one (clients and logs depend on them).
 *
 * Ranges:
 *   -1   .. -99    generic
 *   -100 .. -199   codec (frames, segments, ids)
 *   -200 .. -299   storage (PostgreSQL)
 *   -300 .. -399   RPC layer (gRPC semantics of a single call)
 *   -400 .. -499   authentication and authorization (a call's credential)
 *   -900 .. -999   fatal for a connection: the caller tears the connection down
 *                  (qn_err_is_fatal() is true for exactly this range)
 */
#ifndef QUEEN_ERROR_H
#define QUEEN_ERROR_H

#include <stdbool.h>

enum qn_err {
    QN_OK = 0,

    /* generic */
    QN_ENOMEM = -1,    /* an allocation failed */
    QN_EINVAL = -2,    /* an argument is outside its documented domain */
    QN_ERANGE = -3,    /* a value or offset lies outside the valid range */
    QN_ELIMIT = -4,    /* a configured limit would be exceeded */
    QN_ENOTFOUND = -5, /* the named object does not exist */
    QN_EIO = -6,       /* reading or writing a file or socket failed */
    QN_EINTERNAL = -7, /* an invariant of ours does not hold (a bug) */

    /* codec */
    QN_EFRAME_TRUNCATED = -100,     /* fewer bytes than a frame header or minimal body */
    QN_EFRAME_BODY_OVERRUN = -101,  /* body_len points past the end of the buffer */
    QN_EFRAME_FLAGS = -102,         /* unknown flag bits are set */
    QN_EFRAME_INNER_OVERRUN = -103, /* an inner length points past the end of the body */
    QN_EFRAME_FIELD_TOO_LONG =
        -104,                     /* encode: txn/producer-sub over 65535 bytes, body over 4 GiB */
    QN_ESEGMENT_CORRUPT = -105,   /* zstd could not decompress the blob */
    QN_ESEGMENT_TOO_LARGE = -106, /* decompressed size over the caller's cap */
    QN_ESEGMENT_COUNT = -107,     /* the segment holds a different number of frames than expected */
    QN_EUUID_PARSE = -108,        /* text is not a canonical UUID */
    QN_EENVELOPE_MALFORMED = -109,   /* an encrypted payload is truncated or not an envelope */
    QN_EENVELOPE_UNKNOWN_KEY = -110, /* the envelope's key id is not in the key ring */
    QN_EENVELOPE_AUTH = -111,        /* the envelope does not authenticate (tampered, wrong key) */
    QN_EKEYRING_PARSE = -112,        /* the key ring text is malformed */
    QN_ECRYPTO = -113,               /* the crypto library or its random generator failed */

    /* storage */
    QN_EUNAVAILABLE = -200, /* database unreachable or shutting down; retryable */
    QN_EDB = -201,          /* a procedure raised an error; detail in the result */
    QN_ETIMEOUT = -202,     /* statement timeout or caller deadline passed */
    QN_ECANCELLED = -203,   /* the caller cancelled the request */
    QN_ECONFLICT = -204,    /* deadlock / serialization failure persisted after retries */
    QN_EDUPLICATE = -205,   /* a strict push met a duplicate (transactions) */
    QN_EPROTOCOL_DB = -206, /* the database answered something we cannot parse */
    QN_EINDOUBT = -207,     /* a write was sent and its outcome is unknown: it may have
                               committed (connection lost or deadline passed before
                               its result arrived) */

    /* RPC */
    QN_EBADREQUEST = -300, /* the request is malformed */
    QN_EBUSY = -301,       /* too many parked pops or open streams */
    QN_EDEADLINE = -302,   /* the call's deadline passed */
    QN_ESHUTDOWN = -303,   /* the broker is shutting down */

    /* authentication (every QN_EAUTH_* but DENIED and CONFIG means UNAUTHENTICATED) */
    QN_EAUTH_MISSING = -400,       /* no credential was presented */
    QN_EAUTH_MALFORMED = -401,     /* the token is not a well-formed JWS compact JWT */
    QN_EAUTH_ALG = -402,           /* the token's algorithm is not allowed for its key */
    QN_EAUTH_SIGNATURE = -403,     /* the signature does not verify */
    QN_EAUTH_UNKNOWN_KID = -404,   /* the token's key id is not in the key set */
    QN_EAUTH_EXPIRED = -405,       /* exp is in the past (beyond the clock skew) */
    QN_EAUTH_NOT_YET_VALID = -406, /* nbf or iat is in the future (beyond the clock skew) */
    QN_EAUTH_ISSUER = -407,        /* iss is not the configured issuer */
    QN_EAUTH_AUDIENCE = -408,      /* aud does not name the configured audience */
    QN_EAUTH_CLAIM = -409,  /* a required claim is missing or invalid (sub, tenant, scopes) */
    QN_EAUTH_CERT = -410,   /* the client certificate yields no principal the policy knows */
    QN_EAUTH_DENIED = -411, /* authenticated, but the grants do not cover the call */
    QN_EAUTH_CONFIG = -412, /* a key, key set or policy file is invalid */

    /* fatal for a connection */
    QN_EPROTO = -900,  /* the peer violated HTTP/2 or TLS */
    QN_ECLOSED = -901, /* the peer closed the connection */
    QN_EFLOOD = -902,  /* the peer sends more than it may (flood, window abuse) */
};

/* A short lower-case description of err; never NULL (unknown codes map to a
 * generic text). The string is static. */
const char *qn_strerror(int err);

/* True for codes in the connection-fatal range -900 .. -999. */
static inline bool qn_err_is_fatal(int err)
{
    return err <= -900 && err >= -999;
}

#endif
