/*
 * test_envelope.c - codec/src/envelope.c: key ring parsing (every error with its
 * line), encryption round trips, rotation, every decryption error, tampering
 * with each byte, and Queen MQ's JSON envelope against vectors made with
 * Python's `cryptography` (AESGCM and Cipher(AES, GCM(iv16))), the recipe is in
 * the comment above the vectors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queen/envelope.h"
#include "queen/error.h"

#include "codec_test.h"

#define U(s) ((const uint8_t *)(s))

/* Test-only keys. */
#define K0 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define K1 "f0e1d2c3b4a5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff"
#define K2 "2222222222222222222222222222222222222222222222222222222222222222"

static qn_keyring *ring(const char *text)
{
    qn_keyring *kr = NULL;
    size_t line = 99;
    int rc = qn_keyring_parse((const uint8_t *)text, strlen(text), &kr, &line);
    ck_assert_msg(rc == QN_OK, "parse: %s (line %zu)", qn_strerror(rc), line);
    return kr;
}

static void parse_fails(const char *text, size_t want_line)
{
    qn_keyring *kr = (qn_keyring *)(uintptr_t)1;
    size_t line = 12345;
    int rc = qn_keyring_parse((const uint8_t *)text, strlen(text), &kr, &line);
    ck_assert_msg(rc == QN_EKEYRING_PARSE, "accepted: %s", text);
    ck_assert_uint_eq(line, want_line);
    ck_assert_ptr_eq(kr, (qn_keyring *)(uintptr_t)1); /* untouched */
}

START_TEST(keyring_grammar)
{
    qn_keyring *kr = ring("# rotation history\r\n"
                          "\n"
                          "  2025-01\t" K0 "\r\n"
                          "   # an indented comment\n"
                          "2026.q1_a-b  " K1 "  \t\n"
                          "\t\n");
    ck_assert_uint_eq(qn_keyring_count(kr), 2);
    ck_assert_str_eq(qn_keyring_active_id(kr), "2026.q1_a-b");
    ck_assert(qn_keyring_has(kr, (const uint8_t *)"2025-01", 7));
    ck_assert(!qn_keyring_has(kr, (const uint8_t *)"2025-0", 6));
    ck_assert(!qn_keyring_has(kr, (const uint8_t *)"2025-011", 8));
    qn_keyring_free(kr);

    /* no trailing newline; upper-case hex */
    kr = ring("only 000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F");
    ck_assert_uint_eq(qn_keyring_count(kr), 1);
    ck_assert_str_eq(qn_keyring_active_id(kr), "only");
    qn_keyring_free(kr);
    qn_keyring_free(NULL);
}
END_TEST

START_TEST(keyring_errors)
{
    parse_fails("", 0);
    parse_fails("# nothing but comments\n\n", 0);
    parse_fails("a " K0 "\nb\n", 2);      /* no key */
    parse_fails("a " K0 "\nb 0011\n", 2); /* short key */
    parse_fails("a " K0 "00\n", 1);       /* long key */
    parse_fails("a 0g0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n", 1);
    parse_fails("a " K0 " extra\n", 1);                           /* trailing word */
    parse_fails("a " K0 "\na " K1 "\n", 2);                       /* repeated id */
    parse_fails("b/c " K0 "\n", 1);                               /* bad id char */
    parse_fails("\xc3\xa9 " K0 "\n", 1);                          /* non-ASCII id */
    parse_fails("x23456789012345678901234567890123 " K0 "\n", 1); /* 33-byte id */
    parse_fails("a\v" K0 "\n", 1);                                /* \v is not blank */

    /* a 32-byte id is fine */
    qn_keyring *kr = ring("x2345678901234567890123456789012 " K0 "\n");
    qn_keyring_free(kr);

    /* 64 keys fine, 65 refused on line 65 */
    char *text = malloc(70 * 80);
    ck_assert_ptr_nonnull(text);
    size_t n = 0;
    for (int i = 0; i < 64; i++)
        n += (size_t)snprintf(text + n, 80, "k%d %s\n", i, K0);
    kr = ring(text);
    ck_assert_uint_eq(qn_keyring_count(kr), 64);
    ck_assert_str_eq(qn_keyring_active_id(kr), "k63");
    qn_keyring_free(kr);
    snprintf(text + n, 80, "k64 %s\n", K0);
    parse_fails(text, 65);
    free(text);

    /* over the text limit */
    size_t big = QN_KEYRING_TEXT_MAX + 1;
    char *huge = malloc(big);
    ck_assert_ptr_nonnull(huge);
    memset(huge, '\n', big);
    memcpy(huge, "a " K0 "\n", 67);
    qn_keyring *out = NULL;
    size_t line = 7;
    ck_assert_int_eq(qn_keyring_parse((uint8_t *)huge, big, &out, &line), QN_EKEYRING_PARSE);
    ck_assert_uint_eq(line, 0);
    ck_assert_int_eq(qn_keyring_parse((uint8_t *)huge, big - 1, &out, NULL), QN_OK);
    qn_keyring_free(out);
    free(huge);

    ck_assert_int_eq(qn_keyring_parse(NULL, 1, &out, NULL), QN_EINVAL);
    ck_assert_int_eq(qn_keyring_parse((const uint8_t *)"a", 1, NULL, NULL), QN_EINVAL);
}
END_TEST

/* Encrypts with kr, checks size and the header, returns a malloc'd envelope. */
static uint8_t *seal(const qn_keyring *kr, const void *aad, size_t aad_len, const void *pt,
                     size_t n, size_t *len)
{
    size_t want;
    ck_assert_int_eq(qn_envelope_size(kr, n, &want), QN_OK);
    const char *id = qn_keyring_active_id(kr);
    ck_assert_uint_eq(want, n + 2 + strlen(id) + 12 + 16);
    uint8_t *env = malloc(want);
    ck_assert_ptr_nonnull(env);
    ck_assert_int_eq(qn_envelope_encrypt(kr, aad, aad_len, pt, n, env, want, len), QN_OK);
    ck_assert_uint_eq(*len, want);
    ck_assert_uint_eq(env[0], 1);
    ck_assert_uint_eq(env[1], strlen(id));
    ck_assert(memcmp(env + 2, id, strlen(id)) == 0);
    return env;
}

static void opens_to(const qn_keyring *kr, const void *aad, size_t aad_len, const uint8_t *env,
                     size_t len, const void *pt, size_t n)
{
    uint8_t *out = malloc(n + 1);
    ck_assert_ptr_nonnull(out);
    size_t got = 12345, plen = 0;
    ck_assert_int_eq(qn_envelope_inspect(env, len, NULL, NULL, &plen), QN_OK);
    ck_assert_uint_eq(plen, n);
    int rc = qn_envelope_decrypt(kr, aad, aad_len, env, len, out, n, &got);
    ck_assert_msg(rc == QN_OK, "decrypt: %s", qn_strerror(rc));
    ck_assert_uint_eq(got, n);
    ck_assert(n == 0 || memcmp(out, pt, n) == 0);
    free(out);
}

START_TEST(round_trip_sizes)
{
    qn_keyring *kr = ring("k " K0 "\n");
    static const size_t sizes[] = {0, 1, 15, 16, 17, 255, 4096, 1u << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        uint8_t *pt = malloc(n + 1);
        ck_assert_ptr_nonnull(pt);
        for (size_t i = 0; i < n; i++)
            pt[i] = (uint8_t)('a' + i % 26);
        size_t len;
        uint8_t *env = seal(kr, NULL, 0, pt, n, &len);
        opens_to(kr, NULL, 0, env, len, pt, n);
        if (n >= 16) /* the ciphertext is not the plaintext */
            ck_assert(memcmp(env + 2 + 1 + 12, pt, n) != 0);
        free(env);
        env = seal(kr, "message-id-0001", 15, pt, n, &len);
        opens_to(kr, "message-id-0001", 15, env, len, pt, n);
        free(env);
        free(pt);
    }
    qn_keyring_free(kr);
}
END_TEST

START_TEST(fresh_iv_each_time)
{
    qn_keyring *kr = ring("k " K0 "\n");
    const char *pt = "the same payload twice";
    size_t a_len, b_len;
    uint8_t *a = seal(kr, NULL, 0, pt, strlen(pt), &a_len);
    uint8_t *b = seal(kr, NULL, 0, pt, strlen(pt), &b_len);
    ck_assert_uint_eq(a_len, b_len);
    ck_assert(memcmp(a + 3, b + 3, 12) != 0);           /* IVs differ */
    ck_assert(memcmp(a + 15, b + 15, a_len - 15) != 0); /* so do ciphertext and tag */
    free(a);
    free(b);
    qn_keyring_free(kr);
}
END_TEST

/* Made with Python: AESGCM(K0).encrypt(iv=a0..ab, b"hello queen",
 * aad = b"\x01\x02k1" + b"msg-0001"); envelope = header + iv + ct + tag. */
static const uint8_t python_envelope[] = {
    0x01, 0x02, 0x6b, 0x31, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa,
    0xab, 0x8e, 0x7d, 0x10, 0x41, 0x2a, 0xeb, 0x73, 0xca, 0x07, 0x00, 0xe9, 0x15, 0xe0, 0x16,
    0xbf, 0x2f, 0x48, 0xb0, 0xb7, 0x8d, 0x5b, 0x15, 0xac, 0x7e, 0x2b, 0x61, 0xc7};

START_TEST(independent_vector)
{
    qn_keyring *kr = ring("k1 " K0 "\n");
    opens_to(kr, "msg-0001", 8, python_envelope, sizeof python_envelope, "hello queen", 11);
    uint8_t out[32];
    size_t w;
    /* the caller's aad is authenticated */
    ck_assert_int_eq(qn_envelope_decrypt(kr, U("msg-0002"), 8, python_envelope,
                                         sizeof python_envelope, out, sizeof out, &w),
                     QN_EENVELOPE_AUTH);
    ck_assert_int_eq(qn_envelope_decrypt(kr, NULL, 0, python_envelope, sizeof python_envelope, out,
                                         sizeof out, &w),
                     QN_EENVELOPE_AUTH);
    qn_keyring_free(kr);
}
END_TEST

START_TEST(rotation)
{
    qn_keyring *r1 = ring("old " K0 "\n");
    qn_keyring *r2 = ring("old " K0 "\nnew " K1 "\n");
    qn_keyring *r3 = ring("new " K1 "\n");
    const char *p1 = "written before the rotation", *p2 = "written after it";
    size_t l1, l2;
    uint8_t *e1 = seal(r1, NULL, 0, p1, strlen(p1), &l1);
    uint8_t *e2 = seal(r2, NULL, 0, p2, strlen(p2), &l2);
    ck_assert(memcmp(e2 + 2, "new", 3) == 0); /* the last key encrypts */
    opens_to(r2, NULL, 0, e1, l1, p1, strlen(p1));
    opens_to(r2, NULL, 0, e2, l2, p2, strlen(p2));
    opens_to(r3, NULL, 0, e2, l2, p2, strlen(p2));

    /* the old key retired: a distinct error, and the id to name in a message */
    uint8_t out[64];
    memset(out, 0xAA, sizeof out);
    size_t w = 777;
    ck_assert_int_eq(qn_envelope_decrypt(r3, NULL, 0, e1, l1, out, sizeof out, &w),
                     QN_EENVELOPE_UNKNOWN_KEY);
    ck_assert_uint_eq(w, 777);
    for (size_t i = 0; i < sizeof out; i++)
        ck_assert_uint_eq(out[i], 0xAA);
    const uint8_t *id;
    size_t id_len;
    ck_assert_int_eq(qn_envelope_inspect(e1, l1, &id, &id_len, NULL), QN_OK);
    ck_assert_uint_eq(id_len, 3);
    ck_assert(memcmp(id, "old", 3) == 0);
    ck_assert(!qn_keyring_has(r3, id, id_len));

    /* the same id bound to another key: authentication fails */
    qn_keyring *wrong = ring("old " K2 "\n");
    ck_assert_int_eq(qn_envelope_decrypt(wrong, NULL, 0, e1, l1, out, sizeof out, &w),
                     QN_EENVELOPE_AUTH);
    for (size_t i = 0; i < sizeof out; i++)
        ck_assert(out[i] == 0xAA || out[i] == 0);
    qn_keyring_free(wrong);
    free(e1);
    free(e2);
    qn_keyring_free(r1);
    qn_keyring_free(r2);
    qn_keyring_free(r3);
}
END_TEST

START_TEST(malformed_and_limits)
{
    qn_keyring *kr = ring("k " K0 "\n");
    uint8_t out[256], env[256];
    size_t w = 5, len;
    ck_assert_int_eq(qn_envelope_encrypt(kr, NULL, 0, U("abc"), 3, env, sizeof env, &len), QN_OK);
    ck_assert_uint_eq(len, 3 + 31);

    /* every truncation is malformed (too short) or fails authentication */
    for (size_t n = 0; n < len; n++) {
        int rc = qn_envelope_decrypt(kr, NULL, 0, env, n, out, sizeof out, &w);
        ck_assert_msg(rc == (n < 31 ? QN_EENVELOPE_MALFORMED : QN_EENVELOPE_AUTH), "length %zu: %s",
                      n, qn_strerror(rc));
    }
    ck_assert_int_eq(qn_envelope_decrypt(kr, NULL, 0, NULL, 0, out, sizeof out, &w),
                     QN_EENVELOPE_MALFORMED);

    uint8_t bad[64];
    memcpy(bad, env, len);
    bad[0] = 2; /* unknown version */
    ck_assert_int_eq(qn_envelope_inspect(bad, len, NULL, NULL, NULL), QN_EENVELOPE_MALFORMED);
    memcpy(bad, env, len);
    bad[1] = 0; /* empty key id */
    ck_assert_int_eq(qn_envelope_inspect(bad, len, NULL, NULL, NULL), QN_EENVELOPE_MALFORMED);
    memset(bad, 'a', sizeof bad);
    bad[0] = 1;
    bad[1] = 33; /* key id over the limit */
    ck_assert_int_eq(qn_envelope_inspect(bad, sizeof bad, NULL, NULL, NULL),
                     QN_EENVELOPE_MALFORMED);
    bad[1] = 32;
    ck_assert_int_eq(qn_envelope_inspect(bad, sizeof bad, NULL, NULL, NULL), QN_OK);
    bad[5] = '/'; /* a byte outside the id alphabet */
    ck_assert_int_eq(qn_envelope_inspect(bad, sizeof bad, NULL, NULL, NULL),
                     QN_EENVELOPE_MALFORMED);

    /* output too small: nothing written */
    memset(out, 0xAA, sizeof out);
    ck_assert_int_eq(qn_envelope_decrypt(kr, NULL, 0, env, len, out, 2, &w), QN_ERANGE);
    ck_assert_uint_eq(out[0], 0xAA);
    ck_assert_int_eq(qn_envelope_encrypt(kr, NULL, 0, U("abc"), 3, out, len - 1, &w), QN_ERANGE);
    ck_assert_uint_eq(out[0], 0xAA);
    ck_assert_uint_eq(w, 5);

    /* limits */
    size_t sz;
    ck_assert_int_eq(qn_envelope_size(kr, QN_ENVELOPE_PAYLOAD_MAX, &sz), QN_OK);
    ck_assert_int_eq(qn_envelope_size(kr, QN_ENVELOPE_PAYLOAD_MAX + 1u, &sz), QN_ELIMIT);
    static uint8_t aad[QN_ENVELOPE_AAD_MAX + 1];
    ck_assert_int_eq(qn_envelope_encrypt(kr, aad, sizeof aad, U("abc"), 3, out, sizeof out, &w),
                     QN_ELIMIT);
    ck_assert_int_eq(qn_envelope_encrypt(kr, aad, sizeof aad - 1, U("abc"), 3, out, sizeof out, &w),
                     QN_OK);
    ck_assert_int_eq(qn_envelope_decrypt(kr, aad, sizeof aad - 1, out, w, bad, sizeof bad, &w),
                     QN_OK);
    ck_assert_int_eq(qn_envelope_decrypt(kr, aad, sizeof aad, env, len, out, sizeof out, &w),
                     QN_ELIMIT);

    /* arguments */
    ck_assert_int_eq(qn_envelope_encrypt(NULL, NULL, 0, U("a"), 1, out, sizeof out, &w), QN_EINVAL);
    ck_assert_int_eq(qn_envelope_encrypt(kr, NULL, 0, NULL, 1, out, sizeof out, &w), QN_EINVAL);
    ck_assert_int_eq(qn_envelope_encrypt(kr, NULL, 1, U("a"), 1, out, sizeof out, &w), QN_EINVAL);
    ck_assert_int_eq(qn_envelope_encrypt(kr, NULL, 0, U("a"), 1, out, sizeof out, NULL), QN_EINVAL);
    ck_assert_int_eq(qn_envelope_decrypt(kr, NULL, 0, env, len, NULL, 5, &w), QN_EINVAL);
    ck_assert_int_eq(qn_envelope_decrypt(NULL, NULL, 0, env, len, out, sizeof out, &w), QN_EINVAL);
    qn_keyring_free(kr);
}
END_TEST

/* Flipping any bit of any byte makes decryption fail, and the output buffer then
 * holds nothing but its sentinel or zeros (never ciphertext, never plaintext). */
START_TEST(tamper_every_byte)
{
    qn_keyring *kr = ring("key-a " K0 "\nkey-b " K1 "\n");
    const char *pt = "Tamper-evident payload, 48 bytes long.........";
    size_t n = strlen(pt), len;
    uint8_t *env = seal(kr, "aad", 3, pt, n, &len);
    uint8_t *copy = malloc(len);
    uint8_t out[128];
    ck_assert_ptr_nonnull(copy);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, env, len);
            copy[i] ^= (uint8_t)(1u << bit);
            memset(out, 0xAA, sizeof out);
            size_t w = 4242;
            int rc = qn_envelope_decrypt(kr, U("aad"), 3, copy, len, out, sizeof out, &w);
            ck_assert_msg(rc == QN_EENVELOPE_AUTH || rc == QN_EENVELOPE_MALFORMED ||
                              rc == QN_EENVELOPE_UNKNOWN_KEY,
                          "byte %zu bit %d: %s", i, bit, qn_strerror(rc));
            ck_assert_uint_eq(w, 4242);
            for (size_t j = 0; j < sizeof out; j++)
                ck_assert_msg(out[j] == 0xAA || out[j] == 0, "byte %zu bit %d left %02x at %zu", i,
                              bit, out[j], j);
        }
    }
    /* renaming the key id to the other key of the ring is caught too */
    memcpy(copy, env, len);
    ck_assert(memcmp(copy + 2, "key-b", 5) == 0);
    copy[6] = 'a';
    size_t w;
    ck_assert_int_eq(qn_envelope_decrypt(kr, U("aad"), 3, copy, len, out, sizeof out, &w),
                     QN_EENVELOPE_AUTH);
    free(copy);
    free(env);
    qn_keyring_free(kr);
}
END_TEST

/*
 * Queen MQ's JSON envelope. Vectors made with Python 3 `cryptography`:
 *   AESGCM(K0).encrypt(iv12 = a0..ab, pt, None)               -> V12
 *   Cipher(AES(K0), GCM(iv16 = b0..bf)) (full 16-byte IV)      -> V16_FULL
 *   AESGCM(K0).encrypt(iv16[:12], pt, None), iv field = iv16   -> V16_PREFIX
 *   AESGCM(K1).encrypt(iv12, b"second key", None)              -> VK1
 *   AESGCM(K0).encrypt(iv12, b"", None)                        -> VEMPTY
 * with pt = {"id":1,"msg":"hello queen"}; base64 standard, padded; key order and
 * whitespace as json.dumps() and PostgreSQL's jsonb write them.
 */
#define PT "{\"id\":1,\"msg\":\"hello queen\"}"
static const char *V12 = "{\"encrypted\":\"nToVSWfxM5NACPS0JUDithXANX+yxjcJ+WAE+w==\","
                         "\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"ZHfDlqAtbh1GiWupWhos0A==\"}";
static const char *V16_FULL =
    "{\"iv\": \"sLGys7S1tre4ubq7vL2+vw==\", \"authTag\": \"BnqD7X1oiGuhS2Iz0ptmjQ==\", "
    "\"encrypted\": \"yi/tFshpJJwNztgX5d/Ccs9xxLPOfwtTOf8aYA==\"}";
static const char *V16_PREFIX = "{\n \"authTag\": \"m0f3os99d5QQvSwRU+R4nw==\",\n"
                                " \"encrypted\": \"4nczz873inNlleTF72eqquFQJb01X/pQO6CgjA==\",\n"
                                " \"iv\": \"sLGys7S1tre4ubq7vL2+vw==\"\n}";
static const char *VK1 = "{\"encrypted\": \"jUpPkwFf3DYgDA==\", \"iv\": \"oKGio6Slpqeoqaqr\", "
                         "\"authTag\": \"4qLB/kJOlhvo5AWMgGUZSQ==\"}";
static const char *VEMPTY = "{\"encrypted\": \"\", \"iv\": \"oKGio6Slpqeoqaqr\", "
                            "\"authTag\": \"XGmWJa9Lk6D4IgoqYRnF0A==\"}";

static int qjson(const qn_keyring *kr, const char *text, char *out, size_t cap, size_t *w)
{
    return qn_envelope_decrypt_queen_json(kr, (const uint8_t *)text, strlen(text), (uint8_t *)out,
                                          cap, w);
}

START_TEST(queen_json_vectors)
{
    qn_keyring *kr = ring("queen " K0 "\n");
    char out[128];
    size_t w = 0;
    const char *ok[] = {V12, V16_FULL, V16_PREFIX};
    for (size_t i = 0; i < 3; i++) {
        memset(out, 0, sizeof out);
        int rc = qjson(kr, ok[i], out, sizeof out, &w);
        ck_assert_msg(rc == QN_OK, "vector %zu: %s", i, qn_strerror(rc));
        ck_assert_uint_eq(w, strlen(PT));
        ck_assert(memcmp(out, PT, w) == 0);
    }
    ck_assert_int_eq(qjson(kr, VEMPTY, out, 0, &w), QN_OK);
    ck_assert_uint_eq(w, 0);
    /* too small a buffer */
    ck_assert_int_eq(qjson(kr, V12, out, strlen(PT) - 1, &w), QN_ERANGE);
    /* VK1 is under a key this ring lacks */
    ck_assert_int_eq(qjson(kr, VK1, out, sizeof out, &w), QN_EENVELOPE_AUTH);
    qn_keyring_free(kr);

    /* every key of the ring is tried (K1 active, K0 older) */
    kr = ring("queen " K0 "\nnewer " K1 "\n");
    ck_assert_int_eq(qjson(kr, VK1, out, sizeof out, &w), QN_OK);
    ck_assert(w == 10 && memcmp(out, "second key", 10) == 0);
    ck_assert_int_eq(qjson(kr, V12, out, sizeof out, &w), QN_OK);
    ck_assert(w == strlen(PT) && memcmp(out, PT, w) == 0);
    qn_keyring_free(kr);
}
END_TEST

START_TEST(queen_json_malformed)
{
    qn_keyring *kr = ring("queen " K0 "\n");
    char out[128];
    size_t w = 31337;
    static const char *bad[] = {
        "",
        "[]",
        "{}",
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaqr\"}", /* missing */
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaqr\",\"iv\":\"oKGio6Slpqeoqaqr\"}", /* dup */
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A==\","
        "\"x\":1}", /* extra */
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A==\"}"
        "x",
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A=\"}",
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaq\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A==\"}",
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeo\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A==\"}",
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF\"}",
        "{\"encrypted\":\"a===\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A=="
        "\"}",
        "{\"encrypted\":\"ab=c\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A=="
        "\"}",
        "{\"encrypted\":\"ab-_\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A=="
        "\"}",
        "{\"encrypted\":\"ab==\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A=="
        "\"}",
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Sl\\/"
        "peoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A==\"}",
        "{\"encrypted\":\"\" \"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A==\"}",
        "{\"encrypted\":\"\",\"iv\":\"oKGio6Slpqeoqaqr\",\"authTag\":\"XGmWJa9Lk6D4IgoqYRnF0A==\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(qjson(kr, bad[i], out, sizeof out, &w) == QN_EENVELOPE_MALFORMED,
                      "accepted %zu: %s", i, bad[i]);
    ck_assert_uint_eq(w, 31337);

    /* tampering with any byte of a valid envelope never yields a payload */
    size_t n = strlen(V12);
    char *t = malloc(n + 1);
    ck_assert_ptr_nonnull(t);
    for (size_t i = 0; i < n; i++) {
        memcpy(t, V12, n + 1);
        t[i] = t[i] == 'A' ? 'B' : 'A';
        memset(out, 0xAA, sizeof out);
        int rc = qjson(kr, t, out, sizeof out, &w);
        ck_assert_msg(rc == QN_EENVELOPE_AUTH || rc == QN_EENVELOPE_MALFORMED, "byte %zu: %s", i,
                      qn_strerror(rc));
        for (size_t j = 0; j < sizeof out; j++)
            ck_assert((uint8_t)out[j] == 0xAA || out[j] == 0);
    }
    free(t);
    qn_keyring_free(kr);
}
END_TEST

Suite *qn_test_envelope_suite(void)
{
    Suite *s = suite_create("envelope");
    TCase *tc = tcase_create("keyring");
    tcase_add_test(tc, keyring_grammar);
    tcase_add_test(tc, keyring_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("envelope");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, round_trip_sizes);
    tcase_add_test(tc, fresh_iv_each_time);
    tcase_add_test(tc, independent_vector);
    tcase_add_test(tc, rotation);
    tcase_add_test(tc, malformed_and_limits);
    tcase_add_test(tc, tamper_every_byte);
    suite_add_tcase(s, tc);
    tc = tcase_create("queen_json");
    tcase_add_test(tc, queen_json_vectors);
    tcase_add_test(tc, queen_json_malformed);
    suite_add_tcase(s, tc);
    return s;
}
