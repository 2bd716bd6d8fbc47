/*
 * fuzz_client_seed.c - writes the seed corpus of fuzz_client into a directory:
 * trailers-only errors with percent-encoded messages, normal responses with one
 * or several framed messages, a lying length, a compressed flag, UTF-8 at the
 * edge of the message buffer. Usage: fuzz_client_seed DIR (created).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "queen/client_wire.h"

static int n_written;

static int put(const char *dir, const uint8_t *d, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%03d", dir, n_written++);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t w = len ? fwrite(d, 1, len, f) : 0;
    return fclose(f) == 0 && w == len ? 0 : -1;
}

/* Appends a header to buf at *n. */
static void hdr(uint8_t *buf, size_t *n, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value);
    buf[(*n)++] = (uint8_t)nl;
    buf[(*n)++] = (uint8_t)vl;
    memcpy(buf + *n, name, nl);
    *n += nl;
    memcpy(buf + *n, value, vl);
    *n += vl;
}

static void msg(uint8_t *buf, size_t *n, const char *body)
{
    size_t len = strlen(body);
    qn_client_grpc_prefix(buf + *n, (uint32_t)len);
    *n += QN_CLIENT_GRPC_PREFIX;
    memcpy(buf + *n, body, len);
    *n += len;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    uint8_t b[4096];
    size_t n;
    int rc = 0;

    n = 0; /* trailers-only error */
    b[n++] = 4;
    b[n++] = 8;
    hdr(b, &n, ":status", "200");
    hdr(b, &n, "content-type", "application/grpc");
    hdr(b, &n, "grpc-status", "5");
    hdr(b, &n, "grpc-message", "queue %22x%22 does not exist%0A%E2%9C%93 100%");
    rc |= put(dir, b, n);

    n = 0; /* headers, two messages, trailers */
    b[n++] = 3;
    b[n++] = 10;
    hdr(b, &n, ":status", "200");
    hdr(b, &n, "grpc-status", "0");
    hdr(b, &n, "grpc-message", "");
    msg(b, &n, "\x0a\x05hello");
    msg(b, &n, "");
    msg(b, &n, "\x08\x96\x01");
    rc |= put(dir, b, n);

    n = 0; /* a length over the limit, and a compressed flag */
    b[n++] = 1;
    b[n++] = 0;
    hdr(b, &n, "grpc-status", "13");
    const uint8_t lie[] = {0, 0x40, 0, 0, 0, 'x', 1, 0, 0, 0, 1, 'y'};
    memcpy(b + n, lie, sizeof lie);
    n += sizeof lie;
    rc |= put(dir, b, n);

    n = 0; /* bad status values, multi-byte UTF-8 in a long message */
    b[n++] = 3;
    b[n++] = 4;
    hdr(b, &n, "grpc-status", "1000");
    hdr(b, &n, ":status", "20x");
    char longmsg[250];
    size_t k = 0;
    while (k + 6 < sizeof longmsg - 1) {
        memcpy(longmsg + k, "%E2%82", 6);
        k += 6;
        longmsg[k++] = 'A';
    }
    longmsg[k] = '\0';
    hdr(b, &n, "grpc-message", longmsg);
    rc |= put(dir, b, n);
    if (rc != 0) {
        perror("write seed");
        return 1;
    }
    return 0;
}
