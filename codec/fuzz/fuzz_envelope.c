/*
 * fuzz_envelope.c - libFuzzer target for the envelope decoders and the key ring
 * parser (codec/src/envelope.c).
 *
 * The first input byte picks what the rest is fed to:
 *   0: a binary envelope, decrypted under a fixed ring whose keys are "k1" and
 *      "k2" (test-only keys), with and without additional data;
 *   1: a Queen MQ JSON envelope, decrypted under the same ring;
 *   2: key ring text.
 * Properties beyond "no crash, no sanitizer report":
 *   - a decryption that fails leaves *written untouched and the output buffer
 *     holding only its 0xA5 sentinel or zeros (nothing unauthenticated);
 *   - a binary envelope that decrypts re-encrypts and decrypts back to the same
 *     payload, and qn_envelope_inspect agrees on its key id and size;
 *   - an unknown key id is reported only for ids the ring lacks;
 *   - a ring that parses has 1..QN_KEYRING_MAX_KEYS keys and its active id is
 *     one of them.
 * A property violation calls __builtin_trap(), which libFuzzer reports.
 * Built only with clang and -DQN_FUZZ=ON; run by scripts/fuzz.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queen/envelope.h"
#include "queen/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

#define OUT_CAP 8192u

static const char ring_text[] =
    "k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
    "k2 f0e1d2c3b4a5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff\n";

static qn_keyring *fixed_ring(void)
{
    static qn_keyring *kr;
    if (!kr)
        CHECK(qn_keyring_parse((const uint8_t *)ring_text, sizeof ring_text - 1, &kr, NULL) ==
              QN_OK);
    return kr;
}

static void clean_after_failure(const uint8_t *out, size_t cap)
{
    for (size_t i = 0; i < cap; i++)
        CHECK(out[i] == 0xA5 || out[i] == 0);
}

static void binary(const uint8_t *p, size_t n)
{
    static uint8_t out[OUT_CAP], again[OUT_CAP + 64], back[OUT_CAP];
    qn_keyring *kr = fixed_ring();
    const uint8_t *aads[2] = {NULL, (const uint8_t *)"fuzz"};
    size_t aad_lens[2] = {0, 4};
    for (int a = 0; a < 2; a++) {
        memset(out, 0xA5, sizeof out);
        size_t w = SIZE_MAX;
        int rc = qn_envelope_decrypt(kr, aads[a], aad_lens[a], p, n, out, sizeof out, &w);
        const uint8_t *id;
        size_t id_len, plen;
        int irc = qn_envelope_inspect(p, n, &id, &id_len, &plen);
        if (rc != QN_OK) {
            CHECK(w == SIZE_MAX);
            clean_after_failure(out, sizeof out);
            if (rc == QN_EENVELOPE_UNKNOWN_KEY)
                CHECK(irc == QN_OK && !qn_keyring_has(kr, id, id_len));
            if (rc == QN_EENVELOPE_MALFORMED)
                CHECK(irc == QN_EENVELOPE_MALFORMED);
            continue;
        }
        CHECK(irc == QN_OK && qn_keyring_has(kr, id, id_len) && plen == w);
        size_t e;
        CHECK(qn_envelope_encrypt(kr, aads[a], aad_lens[a], out, w, again, sizeof again, &e) ==
              QN_OK);
        size_t w2;
        CHECK(qn_envelope_decrypt(kr, aads[a], aad_lens[a], again, e, back, sizeof back, &w2) ==
              QN_OK);
        CHECK(w2 == w && memcmp(back, out, w) == 0);
    }
}

static void queen_json(const uint8_t *p, size_t n)
{
    static uint8_t out[OUT_CAP];
    memset(out, 0xA5, sizeof out);
    size_t w = SIZE_MAX;
    int rc = qn_envelope_decrypt_queen_json(fixed_ring(), p, n, out, sizeof out, &w);
    if (rc != QN_OK) {
        CHECK(w == SIZE_MAX);
        clean_after_failure(out, sizeof out);
    } else {
        CHECK(w <= sizeof out);
    }
}

static void ring(const uint8_t *p, size_t n)
{
    qn_keyring *kr = NULL;
    size_t line = SIZE_MAX;
    int rc = qn_keyring_parse(p, n, &kr, &line);
    if (rc != QN_OK) {
        CHECK(kr == NULL && rc == QN_EKEYRING_PARSE);
        return;
    }
    size_t count = qn_keyring_count(kr);
    CHECK(count >= 1 && count <= QN_KEYRING_MAX_KEYS);
    const char *id = qn_keyring_active_id(kr);
    CHECK(qn_keyring_has(kr, (const uint8_t *)id, strlen(id)));
    qn_keyring_free(kr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0:
        binary(data + 1, size - 1);
        break;
    case 1:
        queen_json(data + 1, size - 1);
        break;
    default:
        ring(data + 1, size - 1);
        break;
    }
    return 0;
}
