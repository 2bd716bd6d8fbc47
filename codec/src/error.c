/*
 * error.c - qn_strerror(): the text of every code in queen/error.h.
 *
 * Texts follow the project's message style: short, lower-case, no function names.
 */
#include "queen/error.h"

const char *qn_strerror(int err)
{
    switch (err) {
    case QN_OK:
        return "success";
    case QN_ENOMEM:
        return "out of memory";
    case QN_EINVAL:
        return "invalid argument";
    case QN_ERANGE:
        return "value out of range";
    case QN_ELIMIT:
        return "limit exceeded";
    case QN_ENOTFOUND:
        return "not found";
    case QN_EIO:
        return "input/output error";
    case QN_EINTERNAL:
        return "internal error";
    case QN_EFRAME_TRUNCATED:
        return "frame truncated";
    case QN_EFRAME_BODY_OVERRUN:
        return "frame body length past end of buffer";
    case QN_EFRAME_FLAGS:
        return "frame has unknown flag bits";
    case QN_EFRAME_INNER_OVERRUN:
        return "frame field length past end of body";
    case QN_EFRAME_FIELD_TOO_LONG:
        return "frame field too long";
    case QN_ESEGMENT_CORRUPT:
        return "segment cannot be decompressed";
    case QN_ESEGMENT_TOO_LARGE:
        return "segment larger than the decompression cap";
    case QN_ESEGMENT_COUNT:
        return "segment frame count mismatch";
    case QN_EUUID_PARSE:
        return "malformed uuid";
    case QN_EENVELOPE_MALFORMED:
        return "malformed encrypted payload";
    case QN_EENVELOPE_UNKNOWN_KEY:
        return "encryption key not in the key ring";
    case QN_EENVELOPE_AUTH:
        return "encrypted payload fails authentication";
    case QN_EKEYRING_PARSE:
        return "malformed key ring";
    case QN_ECRYPTO:
        return "crypto library failure";
    case QN_EUNAVAILABLE:
        return "database unavailable";
    case QN_EDB:
        return "database error";
    case QN_ETIMEOUT:
        return "timed out";
    case QN_ECANCELLED:
        return "cancelled";
    case QN_ECONFLICT:
        return "conflict persisted after retries";
    case QN_EDUPLICATE:
        return "duplicate transaction id";
    case QN_EPROTOCOL_DB:
        return "unexpected database answer";
    case QN_EINDOUBT:
        return "outcome unknown";
    case QN_EBADREQUEST:
        return "bad request";
    case QN_EBUSY:
        return "too busy";
    case QN_EDEADLINE:
        return "deadline exceeded";
    case QN_ESHUTDOWN:
        return "shutting down";
    case QN_EAUTH_MISSING:
        return "no credential";
    case QN_EAUTH_MALFORMED:
        return "malformed token";
    case QN_EAUTH_ALG:
        return "token algorithm not allowed";
    case QN_EAUTH_SIGNATURE:
        return "bad token signature";
    case QN_EAUTH_UNKNOWN_KID:
        return "token key id not in the key set";
    case QN_EAUTH_EXPIRED:
        return "token expired";
    case QN_EAUTH_NOT_YET_VALID:
        return "token not yet valid";
    case QN_EAUTH_ISSUER:
        return "wrong token issuer";
    case QN_EAUTH_AUDIENCE:
        return "wrong token audience";
    case QN_EAUTH_CLAIM:
        return "token claim missing or invalid";
    case QN_EAUTH_CERT:
        return "client certificate not recognised";
    case QN_EAUTH_DENIED:
        return "permission denied";
    case QN_EAUTH_CONFIG:
        return "invalid authentication configuration";
    case QN_EPROTO:
        return "protocol violation";
    case QN_ECLOSED:
        return "connection closed";
    case QN_EFLOOD:
        return "peer flooding";
    }
    return "unknown error";
}
