/*
 * cl_wire.c - gRPC message framing, response status headers and grpc-timeout
 * for the client (see queen/client_wire.h).
 *
 * Does not do compression (the client never sends grpc-accept-encoding, so a
 * compressed message is a peer error) nor HTTP/2: it sees only header values
 * and DATA bytes.
 * Invariants:
 *   1. buf != NULL exactly while a body is being collected across chunks.
 *   2. got <= want <= max; nothing is allocated from an unchecked length.
 *   3. every string written into a caller's buffer is NUL-terminated and fits.
 */
#include "queen/client_wire.h"

#include <stdlib.h>
#include <string.h>

#include "queen/error.h"

void qn_client_grpc_prefix(uint8_t out[QN_CLIENT_GRPC_PREFIX], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

void qn_client_reader_init(struct qn_client_reader *r, size_t max)
{
    memset(r, 0, sizeof *r);
    r->max = max;
}

bool qn_client_reader_idle(const struct qn_client_reader *r)
{
    return r->hdr_len == 0 && r->buf == NULL;
}

void qn_client_reader_release(struct qn_client_reader *r)
{
    free(r->buf);
    r->buf = NULL;
    r->hdr_len = 0;
    r->want = r->got = 0;
}

int qn_client_reader_feed(struct qn_client_reader *r, const uint8_t *data, size_t len,
                          qn_client_msg_fn fn, void *ud)
{
    while (len > 0) {
        if (r->hdr_len < QN_CLIENT_GRPC_PREFIX) {
            size_t n = QN_CLIENT_GRPC_PREFIX - r->hdr_len;
            if (n > len)
                n = len;
            memcpy(r->hdr + r->hdr_len, data, n);
            r->hdr_len += n;
            data += n;
            len -= n;
            if (r->hdr_len < QN_CLIENT_GRPC_PREFIX)
                return QN_OK;
            if (r->hdr[0] != 0)
                return QN_EPROTO;
            uint32_t want = (uint32_t)r->hdr[1] << 24 | (uint32_t)r->hdr[2] << 16 |
                            (uint32_t)r->hdr[3] << 8 | (uint32_t)r->hdr[4];
            if (want > r->max)
                return QN_ELIMIT;
            r->want = want;
            r->got = 0;
            if (len >= want) {
                /* Whole body in this chunk (or empty): deliver without copying. */
                r->hdr_len = 0;
                r->messages++;
                int rc = fn(data, want, ud);
                if (rc < 0)
                    return rc;
                data += want;
                len -= want;
                continue;
            }
            r->buf = malloc(want);
            if (r->buf == NULL)
                return QN_ENOMEM;
        }
        size_t n = r->want - r->got;
        if (n > len)
            n = len;
        if (n > 0) {
            memcpy(r->buf + r->got, data, n);
            r->got += n;
            data += n;
            len -= n;
        }
        if (r->got == r->want) {
            uint8_t *body = r->buf;
            size_t blen = r->want;
            r->buf = NULL;
            r->hdr_len = 0;
            r->messages++;
            int rc = fn(body, blen, ud);
            free(body);
            if (rc < 0)
                return rc;
        }
    }
    return QN_OK;
}

bool qn_client_parse_status(const uint8_t *v, size_t len, int *code)
{
    if (len == 0 || len > 3)
        return false;
    int c = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        c = c * 10 + (v[i] - '0');
    }
    *code = c;
    return true;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Length of the UTF-8 sequence a lead byte starts (1 for anything else, so a
 * malformed byte is treated as a character of its own). */
static size_t utf8_len(uint8_t lead)
{
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    if (lead >= 0xE0)
        return lead <= 0xEF ? 3 : 1;
    if (lead >= 0xC2)
        return 2;
    return 1;
}

size_t qn_client_pct_decode(const uint8_t *in, size_t len, char *out, size_t cap)
{
    if (cap == 0)
        return 0;
    size_t o = 0;
    size_t seq_start = 0; /* where the UTF-8 sequence being written began */
    size_t seq_left = 0;  /* continuation bytes it still expects */
    bool cut = false;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = in[i];
        if (b == '%' && i + 2 < len && hexval(in[i + 1]) >= 0 && hexval(in[i + 2]) >= 0) {
            b = (uint8_t)(hexval(in[i + 1]) << 4 | hexval(in[i + 2]));
            i += 2;
        }
        if (b < 0x20 || b == 0x7F)
            b = '?';
        if (o + 1 >= cap) {
            cut = true;
            break;
        }
        if (seq_left > 0 && (b & 0xC0) == 0x80) {
            seq_left--;
        } else {
            seq_start = o;
            seq_left = b >= 0x80 ? utf8_len(b) - 1 : 0;
        }
        out[o++] = (char)b;
    }
    /* Cut short inside a sequence: drop its partial bytes. */
    if (cut && seq_left > 0)
        o = seq_start;
    out[o] = '\0';
    return o;
}

static const char *const code_names[QN_CLIENT_GRPC_CODES] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *qn_client_code_name(int code)
{
    if (code < 0 || code >= QN_CLIENT_GRPC_CODES)
        return NULL;
    return code_names[code];
}

size_t qn_client_timeout_format(int64_t ms, char out[QN_CLIENT_TIMEOUT_LEN])
{
    static const struct {
        char unit;
        int64_t ms; /* milliseconds per unit */
    } units[] = {{'m', 1}, {'S', 1000}, {'M', 60000}, {'H', 3600000}};
    if (ms <= 0)
        ms = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        int64_t v = ms / units[i].ms + (ms % units[i].ms != 0);
        if (v <= 99999999 || i + 1 == sizeof units / sizeof units[0]) {
            if (v > 99999999)
                v = 99999999;
            /* At most 8 digits and a unit: fits QN_CLIENT_TIMEOUT_LEN. */
            char digits[9];
            size_t n = 0;
            do {
                digits[n++] = (char)('0' + v % 10);
                v /= 10;
            } while (v > 0);
            size_t o = 0;
            while (n > 0)
                out[o++] = digits[--n];
            out[o++] = units[i].unit;
            out[o] = '\0';
            return o;
        }
    }
    out[0] = '\0';
    return 0;
}

void qn_client_head_init(struct qn_client_head *h)
{
    memset(h, 0, sizeof *h);
}

static bool name_is(const uint8_t *name, size_t namelen, const char *want)
{
    size_t n = strlen(want);
    return namelen == n && memcmp(name, want, n) == 0;
}

void qn_client_head_add(struct qn_client_head *h, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen)
{
    int st = 0;
    if (name_is(name, namelen, ":status")) {
        /* Three digits, 100..999: "065" is not an HTTP status. */
        if (valuelen == 3 && qn_client_parse_status(value, valuelen, &st) && st >= 100)
            h->http_status = st;
    } else if (name_is(name, namelen, "grpc-status")) {
        if (qn_client_parse_status(value, valuelen, &st)) {
            h->grpc_status = st;
            h->have_status = true;
        } else {
            h->bad_status = true;
        }
    } else if (name_is(name, namelen, "grpc-message")) {
        qn_client_pct_decode(value, valuelen, h->grpc_message, sizeof h->grpc_message);
    }
}
