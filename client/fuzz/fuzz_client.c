/*
 * fuzz_client.c - libFuzzer target for what the client library parses from the
 * network: gRPC message framing of response DATA, and the response headers and
 * trailers (:status, grpc-status, grpc-message with its percent-decoding).
 *
 * Input layout (all of it is attacker-controlled, as on the wire):
 *   byte 0        number of headers H (0..255)
 *   byte 1        the reader's message limit, as 16 << (byte % 16) bytes
 *   H headers     [name length: 1 byte][value length: 1 byte][name][value]
 *   rest          response DATA, fed to the message reader in chunks whose
 *                 sizes come from the data itself (1 + byte % 64 per chunk)
 * Properties checked beyond "no crash, no sanitizer report" (a violation calls
 * __builtin_trap()):
 *   - no message delivered is larger than the limit; the count delivered equals
 *     the reader's own count;
 *   - a decoded grpc-message is NUL-terminated inside its buffer, holds no
 *     control character, and is never cut inside a UTF-8 sequence it started;
 *   - a grpc-status, once accepted, is 0..999; :status is 0 or 100..999;
 *   - qn_client_timeout_format writes at most 8 digits and a unit.
 *
 * Built only with clang and -DQN_FUZZ=ON (client/fuzz/CMakeLists.txt); run by
 * scripts/fuzz.sh with a seed corpus from fuzz_client_seed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queen/client_wire.h"
#include "queen/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
    size_t max;
    uint64_t n;
};

static int on_msg(const uint8_t *msg, size_t len, void *ud)
{
    struct seen *s = ud;
    if (len > s->max)
        __builtin_trap();
    if (len > 0) { /* both ends must be readable (ASan checks) */
        volatile uint8_t sink = msg[0] ^ msg[len - 1];
        (void)sink;
    }
    s->n++;
    return 0;
}

static void check_head(const struct qn_client_head *h)
{
    const char *m = h->grpc_message;
    size_t n = strnlen(m, sizeof h->grpc_message);
    if (n >= sizeof h->grpc_message)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)m[i] < 0x20 || (unsigned char)m[i] == 0x7F)
            __builtin_trap();
    if (h->have_status && (h->grpc_status < 0 || h->grpc_status > 999))
        __builtin_trap();
    if (h->http_status != 0 && (h->http_status < 100 || h->http_status > 999))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned nh = data[0];
    size_t max = (size_t)16 << (data[1] % 16);
    size_t pos = 2;
    struct qn_client_head h;
    qn_client_head_init(&h);
    for (unsigned i = 0; i < nh && pos + 2 <= size; i++) {
        size_t nl = data[pos], vl = data[pos + 1];
        pos += 2;
        if (pos + nl + vl > size)
            break;
        qn_client_head_add(&h, data + pos, nl, data + pos + nl, vl);
        pos += nl + vl;
        check_head(&h);
    }
    /* grpc-message decoding into small buffers too (the UTF-8 cut rule). */
    char small[7];
    size_t rest = size - pos;
    size_t w = qn_client_pct_decode(data + pos, rest < 64 ? rest : 64, small, sizeof small);
    if (w >= sizeof small || small[w] != '\0')
        __builtin_trap();

    struct qn_client_reader rd;
    struct seen s = {.max = max};
    qn_client_reader_init(&rd, max);
    const uint8_t *p = data + pos;
    size_t left = size - pos;
    while (left > 0) {
        size_t chunk = 1 + p[0] % 64;
        if (chunk > left)
            chunk = left;
        int rc = qn_client_reader_feed(&rd, p, chunk, on_msg, &s);
        if (rc != QN_OK) {
            if (rc != QN_ELIMIT && rc != QN_EPROTO && rc != QN_ENOMEM)
                __builtin_trap();
            break;
        }
        p += chunk;
        left -= chunk;
    }
    if (s.n != rd.messages)
        __builtin_trap();
    qn_client_reader_release(&rd);

    uint64_t u = 0;
    for (size_t i = 0; i < 8 && i < size; i++)
        u = u << 8 | data[size - 1 - i];
    int64_t ms = (int64_t)u;
    char t[QN_CLIENT_TIMEOUT_LEN];
    size_t tl = qn_client_timeout_format(ms, t);
    if (tl < 2 || tl > 9 || t[tl] != '\0' || strchr("mSMH", t[tl - 1]) == NULL)
        __builtin_trap();
    for (size_t i = 0; i + 1 < tl; i++)
        if (t[i] < '0' || t[i] > '9')
            __builtin_trap();
    return 0;
}
