/*
 * svc_util.c - see svc_util.h.
 */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "queen/error.h"
#include "queen/ids.h"
#include "rpc/svc_util.h"

const char *qn_or_default(const char *s, const char *dflt)
{
    return s == NULL || *s == '\0' ? dflt : s;
}

/* Length of the valid UTF-8 sequence starting at p (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        min = 0x80;
        c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        min = 0x800;
        c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        min = 0x10000;
        c &= 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    return len;
}

bool qn_name_problem(const char *s, const char *what, bool allow_empty, char *buf, size_t cap)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0) {
        if (allow_empty)
            return false;
        snprintf(buf, cap, "%s is required", what);
        return true;
    }
    if (n > QN_NAME_MAX) {
        snprintf(buf, cap, "%s is longer than %d bytes", what, QN_NAME_MAX);
        return true;
    }
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x20 || p[i] == 0x7F) {
            snprintf(buf, cap, "%s contains a control character at byte %zu", what, i);
            return true;
        }
        size_t k = utf8_seq(p + i, n - i);
        if (k == 0) {
            snprintf(buf, cap, "%s is not valid UTF-8 at byte %zu", what, i);
            return true;
        }
        i += k;
    }
    return false;
}

bool qn_valid_name(const char *s)
{
    char buf[160];
    return !qn_name_problem(s, "name", false, buf, sizeof buf);
}

enum qn_grpc_code qn_grpc_from_store(int code)
{
    switch (code) {
    case QN_OK: return QN_GRPC_OK;
    case QN_EUNAVAILABLE:
    case QN_ESHUTDOWN: return QN_GRPC_UNAVAILABLE;
    case QN_ETIMEOUT:
    case QN_EDEADLINE: return QN_GRPC_DEADLINE_EXCEEDED;
    case QN_ECONFLICT:
    case QN_EDUPLICATE: return QN_GRPC_ABORTED;
    case QN_ENOTFOUND: return QN_GRPC_NOT_FOUND;
    case QN_EINVAL:
    case QN_EBADREQUEST: return QN_GRPC_INVALID_ARGUMENT;
    case QN_EBUSY:
    case QN_ELIMIT: return QN_GRPC_RESOURCE_EXHAUSTED;
    case QN_ECANCELLED: return QN_GRPC_CANCELLED;
    default: return QN_GRPC_INTERNAL;
    }
}

void qn_finish_store_error(qn_call *call, const struct qn_store_status *st)
{
    enum qn_grpc_code code = qn_grpc_from_store(st->code);
    /* invalid_parameter_value raised by a procedure is the caller's mistake */
    if (st->code == QN_EDB && strcmp(st->sqlstate, "22023") == 0)
        code = QN_GRPC_INVALID_ARGUMENT;
    const char *msg = st->message && *st->message ? st->message : qn_strerror(st->code);
    qn_call_finish(call, code, msg);
}

bool qn_parse_uuid_str(const char *s, uint8_t out[16])
{
    return s != NULL && qn_uuid_parse(s, strlen(s), out) == QN_OK;
}

int64_t qn_now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}
