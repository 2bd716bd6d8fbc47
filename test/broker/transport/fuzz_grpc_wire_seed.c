/*
 * fuzz_grpc_wire_seed.c - writes the seed corpus for fuzz_grpc_wire into a
 * directory: for each part of the target (its first byte picks the part) a few
 * inputs at the edges the checks care about. Usage: fuzz_grpc_wire_seed DIR.
 *   reader:   two messages fed whole and in small chunks, the empty message, a
 *             compressed flag, a length over the cap, a flags byte of 2, a
 *             message cut in its prefix and in its body;
 *   timeout:  every unit, 1u and 1n (round up to 1 ms), 0m, the 8-digit
 *             maximum in hours (saturates), 9 digits, a bad unit, a sign;
 *   message:  ASCII with '%', UTF-8 of 2, 3 and 4 bytes with capacities that
 *             cut inside them, control bytes, a lone '%' and "%zz" to decode;
 *   headers:  a valid request, each header wrong or absent in turn.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int n_written;

static int put(const char *dir, uint8_t part, const void *data, size_t len)
{
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/seed-%03d", dir, n_written++);
    if (k < 0 || (size_t)k >= sizeof path)
        return -1;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(&part, 1, 1, f) == 1 && (len == 0 || fwrite(data, 1, len, f) == len);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int put_str(const char *dir, uint8_t part, const char *s)
{
    return put(dir, part, s, strlen(s));
}

/* Reader input: cap selector, chunking byte, then the stream. */
static int put_stream(const char *dir, uint8_t capsel, uint8_t chunking, const uint8_t *s, size_t n)
{
    uint8_t buf[256];
    if (n + 2 > sizeof buf)
        return -1;
    buf[0] = capsel;
    buf[1] = chunking;
    memcpy(buf + 2, s, n);
    return put(dir, 0, buf, n + 2);
}

/* Percent-encoding input: capacity byte, then the message. */
static int put_msg(const char *dir, uint8_t cap, const char *s)
{
    uint8_t buf[256];
    size_t n = strlen(s);
    if (n + 1 > sizeof buf)
        return -1;
    buf[0] = cap;
    memcpy(buf + 1, s, n);
    return put(dir, 2, buf, n + 1);
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
    int bad = 0;
    /* reader (cap selectors: 3 = 16 bytes, 5 = 1000, 0 = 0) */
    static const uint8_t two[] = {0, 0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0, 1, 'z'};
    static const uint8_t empty[] = {0, 0, 0, 0, 0};
    static const uint8_t comp[] = {1, 0, 0, 0, 2, 0x1f, 0x8b};
    static const uint8_t over[] = {0, 0, 0, 0, 17, 'x'};
    static const uint8_t flags2[] = {2, 0, 0, 0, 1, 'x'};
    static const uint8_t cut_prefix[] = {0, 0, 0};
    static const uint8_t cut_body[] = {0, 0, 0, 0, 10, 'h', 'e', 'l'};
    static const uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff};
    bad |= put_stream(dir, 3, 0, two, sizeof two);
    bad |= put_stream(dir, 3, 7, two, sizeof two);
    bad |= put_stream(dir, 0, 0, empty, sizeof empty);
    bad |= put_stream(dir, 3, 0, comp, sizeof comp);
    bad |= put_stream(dir, 3, 0, over, sizeof over);
    bad |= put_stream(dir, 5, 0, flags2, sizeof flags2);
    bad |= put_stream(dir, 5, 1, cut_prefix, sizeof cut_prefix);
    bad |= put_stream(dir, 5, 3, cut_body, sizeof cut_body);
    bad |= put_stream(dir, 7, 0, huge, sizeof huge);
    /* grpc-timeout */
    static const char *const timeouts[] = {
        "1H",       "2M", "30S",       "100m",       "1u",  "999u", "1000u", "1n",
        "1000001n", "0m", "99999999H", "123456789S", "12x", "-1S",  "S",     ""};
    for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++)
        bad |= put_str(dir, 1, timeouts[i]);
    /* grpc-message: capacity byte 255 means "room for everything" */
    bad |= put_msg(dir, 255, "queue \"a\" not found: 50% done");
    bad |= put_msg(dir, 255, "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80\t\r\n");
    bad |= put_msg(dir, 8, "ab\xf0\x9f\x98\x80"); /* the 4-byte character does not fit */
    bad |= put_msg(dir, 6, "a\xe2\x9c\x93 b");    /* nor does the 3-byte one */
    bad |= put_msg(dir, 4, "\xc3\xa9\xc3\xa9");   /* one 2-byte character fits */
    bad |= put_msg(dir, 255, "100%");             /* lone '%' */
    bad |= put_msg(dir, 20, "%zz%4%41%e2%9C%93"); /* decoding raw input */
    bad |= put_msg(dir, 255, "\xff\xfe\x80 bad utf-8");
    /* headers: :method \n content-type \n te \n grpc-encoding \n grpc-timeout ("\x01" = absent) */
    static const char *const headers[] = {
        "POST\napplication/grpc\ntrailers\nidentity\n1S",
        "POST\napplication/grpc+proto\ntrailers, deflate\n\x01\n\x01",
        "POST\nApplication/GRPC;charset=utf-8\ngzip;q=1, trailers\n\n10m",
        "GET\napplication/grpc\ntrailers\nidentity\n1S",
        "POST\ntext/plain\ntrailers\nidentity\n1S",
        "POST\napplication/grpc\n\x01\nidentity\n1S",
        "POST\napplication/grpc\ntrailers\ngzip\n1S",
        "POST\napplication/grpc\ntrailers\nidentity\n1s",
        "POST\napplication/grpcx\ntrailersx\nidentity\n1S",
    };
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++)
        bad |= put_str(dir, 3, headers[i]);
    if (bad) {
        fprintf(stderr, "%s: cannot write the seeds into %s\n", argv[0], dir);
        return 1;
    }
    return 0;
}
