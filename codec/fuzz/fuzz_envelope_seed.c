/*
 * fuzz_envelope_seed.c - writes the seed corpus for fuzz_envelope into a
 * directory: valid binary envelopes under both keys of the fuzz ring (with and
 * without additional data, several payload sizes), one under an unknown key id,
 * Queen MQ JSON envelopes, and key ring texts. Usage: fuzz_envelope_seed DIR.
 * Each file starts with the selector byte fuzz_envelope.c reads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "queen/envelope.h"
#include "queen/error.h"

static int put(const char *dir, int n, uint8_t sel, const void *data, size_t len)
{
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/seed-%03d", dir, n);
    if (k < 0 || (size_t)k >= sizeof path)
        return -1;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(&sel, 1, 1, f) == 1 && (len == 0 || fwrite(data, 1, len, f) == len);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

#define K1 "k1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
#define K2 "k2 f0e1d2c3b4a5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff\n"
#define K9 "zz 9999999999999999999999999999999999999999999999999999999999999999\n"

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
    const char *rings[] = {K1, K1 K2, K9};
    static uint8_t pt[300], env[400];
    for (size_t i = 0; i < sizeof pt; i++)
        pt[i] = (uint8_t)('a' + i % 26);
    int n = 0, bad = 0;
    for (size_t r = 0; r < 3; r++) {
        qn_keyring *kr = NULL;
        if (qn_keyring_parse((const uint8_t *)rings[r], strlen(rings[r]), &kr, NULL) != QN_OK)
            return 1;
        static const size_t sizes[] = {0, 1, 16, 300};
        for (size_t s = 0; s < 4; s++) {
            for (int a = 0; a < 2; a++) {
                size_t w;
                if (qn_envelope_encrypt(kr, a ? (const uint8_t *)"fuzz" : NULL, a ? 4 : 0, pt,
                                        sizes[s], env, sizeof env, &w) != QN_OK)
                    return 1;
                bad |= put(dir, n++, 0, env, w);
            }
        }
        qn_keyring_free(kr);
        bad |= put(dir, n++, 2, rings[r], strlen(rings[r]));
    }
    static const char *json[] = {
        "{\"encrypted\":\"nToVSWfxM5NACPS0JUDithXANX+yxjcJ+WAE+w==\",\"iv\":\"oKGio6Slpqeoqaqr\","
        "\"authTag\":\"ZHfDlqAtbh1GiWupWhos0A==\"}",
        "{\"iv\": \"sLGys7S1tre4ubq7vL2+vw==\", \"authTag\": \"BnqD7X1oiGuhS2Iz0ptmjQ==\", "
        "\"encrypted\": \"yi/tFshpJJwNztgX5d/Ccs9xxLPOfwtTOf8aYA==\"}",
        "{\"encrypted\": \"\", \"iv\": \"oKGio6Slpqeoqaqr\", \"authTag\": "
        "\"XGmWJa9Lk6D4IgoqYRnF0A==\"}",
    };
    for (size_t j = 0; j < 3; j++)
        bad |= put(dir, n++, 1, json[j], strlen(json[j]));
    static const char commented[] = "# c\r\n\n  a\t0001020304050607080910111213141516171819202122"
                                    "232425262728293031\r\n" K2;
    bad |= put(dir, n++, 2, commented, sizeof commented - 1);
    if (bad) {
        fprintf(stderr, "%s: cannot write the corpus\n", dir);
        return 1;
    }
    return 0;
}
