/*
 * test_hash.c - codec/src/hash.c: xxh3_128 serialized big-endian, exactly what
 * `xxhsum -H2` prints.
 *
 * Suite "hash" checks vectors that were produced with `xxhsum -H2` (xxHash
 * 0.8.1) when this test was written; the inputs cover every length class of
 * XXH3's implementation (0, 1-3, 4-8, 9-16, 17-128, 129-240, >240).
 * Suite "hash_live" (ctest codec_xxhsum_live, only when xxhsum is installed)
 * runs the xxhsum named by $QN_XXHSUM on the same and on random inputs now.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queen/ids.h"

#include "codec_test.h"

/* Input of length n: byte i is (i*31+7) mod 256. */
static uint8_t *pattern(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 31 + 7) & 0xff);
    return p;
}

static const struct {
    size_t len;
    const char *hex;
} vectors[] = {
    {0, "99aa06d3014798d86001c324468d497f"},    {1, "495b62073ef70ca44c5cca45d0f4811f"},
    {3, "46f66cb93538156515f7093b173d005c"},    {4, "7fefeeffb4d0eab3b987ca5d9241572a"},
    {8, "803c675a846cc6c256bb836ceb6d4baa"},    {9, "d46556872d230f224376673580310154"},
    {16, "650fe308c566747df853dd94614dfa07"},   {17, "18217300b5132d5a78c349fe81b2f26c"},
    {128, "b4f87b99d2db8a511e04fad9f0cacb4d"},  {129, "6881633650cd8924c51bc887976aef63"},
    {240, "de57aab31e77a2ff93e173833f75ab66"},  {241, "92b991a7192f3f080b3b630948ce4a00"},
    {1000, "f534f51e82a81d29989765d0ea7a5ecd"}, {65535, "a54918045e13bc35029a95236cd9efcd"},
};
#define NVECTORS (sizeof(vectors) / sizeof(vectors[0]))

static const struct {
    const char *text;
    const char *hex;
} text_vectors[] = {
    {"abc", "06b05ab6733a618578af5f94892f3950"},
    {"0190a0b2-7c3e-7d4f-8a1b-2c3d4e5f6a7b", "167dfbcd01bd31c3600c32317a430cb5"},
    {"order-42", "d303ab4ecd501a89fbc35a92d7ec0b0a"},
};

static void hex_of(const void *data, size_t len, char out[33])
{
    uint8_t h[QN_HASH_LEN];
    qn_txn_hash(data, len, h);
    qn_hash_hex(h, out);
}

START_TEST(xxhsum_vectors)
{
    for (size_t i = 0; i < NVECTORS; i++) {
        uint8_t *in = pattern(vectors[i].len);
        char hex[33];
        hex_of(in, vectors[i].len, hex);
        ck_assert_msg(strcmp(hex, vectors[i].hex) == 0, "length %zu: %s != %s", vectors[i].len, hex,
                      vectors[i].hex);
        free(in);
    }
    for (size_t i = 0; i < sizeof(text_vectors) / sizeof(text_vectors[0]); i++) {
        char hex[33];
        hex_of(text_vectors[i].text, strlen(text_vectors[i].text), hex);
        ck_assert_str_eq(hex, text_vectors[i].hex);
    }
}
END_TEST

START_TEST(empty_input_may_be_null)
{
    char a[33], b[33];
    hex_of(NULL, 0, a);
    hex_of("", 0, b);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(a, vectors[0].hex);
}
END_TEST

START_TEST(big_endian_high_half_first)
{
    /* The 16 bytes are the hex digits read left to right. */
    uint8_t h[QN_HASH_LEN];
    qn_txn_hash("abc", 3, h);
    ck_assert_uint_eq(h[0], 0x06);
    ck_assert_uint_eq(h[1], 0xb0);
    ck_assert_uint_eq(h[15], 0x50);
    char hex[33];
    qn_hash_hex(h, hex);
    ck_assert_uint_eq(strlen(hex), 32);
}
END_TEST

/* ---- live cross-check against the xxhsum binary ----------------------- */

/* Runs `$QN_XXHSUM -H2 file` on data and returns its 32 hex digits in out. */
static void xxhsum_of(const char *xxhsum, const uint8_t *data, size_t len, char out[33])
{
    char path[] = "/tmp/qn_xxhsum_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        ck_assert_int_gt(w, 0);
        done += (size_t)w;
    }
    close(fd);
    char cmd[512];
    int n = snprintf(cmd, sizeof(cmd), "'%s' -H2 '%s'", xxhsum, path);
    ck_assert(n > 0 && (size_t)n < sizeof(cmd));
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[256] = {0};
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), p));
    ck_assert_int_eq(pclose(p), 0);
    unlink(path);
    /* xxhsum prints "<32 hex digits>  <path>" */
    ck_assert_uint_ge(strlen(line), 32);
    memcpy(out, line, 32);
    out[32] = '\0';
}

START_TEST(xxhsum_live)
{
    const char *xxhsum = getenv("QN_XXHSUM");
    ck_assert_msg(xxhsum && *xxhsum, "QN_XXHSUM is not set");
    for (size_t i = 0; i < NVECTORS; i++) {
        uint8_t *in = pattern(vectors[i].len);
        char want[33], got[33];
        xxhsum_of(xxhsum, in, vectors[i].len, want);
        ck_assert_str_eq(want, vectors[i].hex); /* the embedded vectors are still true */
        hex_of(in, vectors[i].len, got);
        ck_assert_str_eq(got, want);
        free(in);
    }
    uint64_t x = 0x1234567;
    for (int round = 0; round < 40; round++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        size_t len = (size_t)(x >> 33) % 600;
        uint8_t *in = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            in[i] = (uint8_t)(x >> 56);
        }
        char want[33], got[33];
        xxhsum_of(xxhsum, in, len, want);
        hex_of(in, len, got);
        ck_assert_msg(strcmp(got, want) == 0, "random input of %zu bytes", len);
        free(in);
    }
}
END_TEST

Suite *qn_test_hash_suite(void)
{
    Suite *s = suite_create("hash");
    TCase *tc = tcase_create("xxh3_128");
    tcase_add_test(tc, xxhsum_vectors);
    tcase_add_test(tc, empty_input_may_be_null);
    tcase_add_test(tc, big_endian_high_half_first);
    suite_add_tcase(s, tc);
    return s;
}

Suite *qn_test_hash_live_suite(void)
{
    Suite *s = suite_create("hash_live");
    TCase *tc = tcase_create("xxhsum");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, xxhsum_live);
    suite_add_tcase(s, tc);
    return s;
}
