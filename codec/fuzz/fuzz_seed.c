/*
 * fuzz_seed.c - writes the seed corpus for fuzz_codec into a directory: raw
 * frame sequences covering every flag combination, empty and long fields, and
 * the same sequences as compressed segments (qn_segment_pack), plus a few
 * classic malformed cases. Usage: fuzz_codec_seed DIR (DIR is created).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "queen/error.h"
#include "queen/frame.h"
#include "queen/segment.h"

static int write_file(const char *dir, const char *name, int n, const uint8_t *data, size_t len)
{
    char path[4096];
    int k = snprintf(path, sizeof(path), "%s/%s-%03d", dir, name, n);
    if (k < 0 || (size_t)k >= sizeof(path))
        return -1;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    return (fclose(f) == 0 && w == len) ? 0 : -1;
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
    qn_zctx *z = NULL;
    if (qn_zctx_new(&z) != QN_OK)
        return 1;
    static uint8_t raw[1 << 16];
    static const char payload[] = "{\"orderId\":42,\"amount\":12.50,\"currency\":\"EUR\"}";
    int seeds = 0;
    for (int n = 1; n <= 24; n++) {
        struct qn_frame fr[24];
        size_t pos = 0;
        for (int i = 0; i < n; i++) {
            struct qn_frame *f = &fr[i];
            memset(f, 0, sizeof(*f));
            f->flags = (uint8_t)((i + n) % 8);
            for (int k = 0; k < 16; k++) {
                f->message_id[k] = (uint8_t)(n * 16 + k);
                f->trace_id[k] = (uint8_t)(0xa0 + k);
            }
            f->txn = (const uint8_t *)"order-42-transaction";
            f->txn_len = (size_t)(i * 3 % 21);
            f->psub = (const uint8_t *)"user-7";
            f->psub_len = (size_t)(i % 7);
            f->payload = (const uint8_t *)payload;
            f->payload_len = (size_t)((i * 5 + n) % (int)(sizeof(payload) - 1));
            size_t w;
            if (qn_frame_encode(f, raw + pos, sizeof(raw) - pos, &w) != QN_OK)
                return 1;
            pos += w;
        }
        if (write_file(dir, "raw", n, raw, pos) != 0)
            return 1;
        struct qn_buf blob = {0};
        if (qn_segment_pack(z, fr, (size_t)n, n % 3 ? 3 : 1, &blob, NULL) != QN_OK ||
            write_file(dir, "zst", n, blob.data, blob.len) != 0)
            return 1;
        qn_buf_free(&blob);
        /* malformed: cut, bad flag, inner overrun */
        if (write_file(dir, "cut", n, raw, pos - 1) != 0)
            return 1;
        raw[4] |= 0x80;
        if (write_file(dir, "flag", n, raw, pos) != 0)
            return 1;
        seeds += 4;
    }
    qn_zctx_free(z);
    printf("%d seeds in %s\n", seeds, dir);
    return 0;
}
