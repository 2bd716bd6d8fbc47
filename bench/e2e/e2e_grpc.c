/*
 * e2e_grpc.c - gRPC length-prefixed message reader and status helpers.
 *
 * Does not do compression (the bench never sends grpc-accept-encoding, so a
 * compressed message is a peer error) nor HTTP/2: it sees only DATA bytes.
 * Invariants:
 *   1. buf != NULL exactly while a body is being collected (hdr_len == 5).
 *   2. got <= want <= max; nothing is allocated from an unchecked length.
 */
#include "e2e_grpc.h"

#include <stdlib.h>
#include <string.h>

#include "queen/error.h"

void e2e_grpc_prefix(uint8_t out[E2E_GRPC_PREFIX], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

void e2e_grpc_reader_init(struct e2e_grpc_reader *r, size_t max)
{
    memset(r, 0, sizeof *r);
    r->max = max;
}

bool e2e_grpc_reader_idle(const struct e2e_grpc_reader *r)
{
    return r->hdr_len == 0 && r->buf == NULL;
}

void e2e_grpc_reader_release(struct e2e_grpc_reader *r)
{
    free(r->buf);
    r->buf = NULL;
    r->hdr_len = 0;
    r->want = r->got = 0;
}

int e2e_grpc_feed(struct e2e_grpc_reader *r, const uint8_t *data, size_t len,
                  e2e_grpc_msg_fn fn, void *ud)
{
    while (len > 0) {
        if (r->hdr_len < E2E_GRPC_PREFIX) {
            size_t n = E2E_GRPC_PREFIX - r->hdr_len;
            if (n > len)
                n = len;
            memcpy(r->hdr + r->hdr_len, data, n);
            r->hdr_len += n;
            data += n;
            len -= n;
            if (r->hdr_len < E2E_GRPC_PREFIX)
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
            } else {
                r->buf = malloc(want);
                if (r->buf == NULL)
                    return QN_ENOMEM;
            }
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

bool e2e_grpc_parse_status(const uint8_t *v, size_t len, int *code)
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

static const char *const code_names[E2E_GRPC_CODES] = {
    "OK",           "CANCELLED",          "UNKNOWN",          "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND",     "ALREADY_EXISTS",   "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",   "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",          "UNAVAILABLE",      "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *e2e_grpc_code_name(int code)
{
    if (code < 0 || code >= E2E_GRPC_CODES)
        return NULL;
    return code_names[code];
}
