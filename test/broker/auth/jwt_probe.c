/*
 * jwt_probe.c - test-only: verifies one token with one key file through
 * qn_jwt_verify, for token_crosscheck.py (tokens minted by PyJWT).
 * Usage: jwt_probe (--secret|--pem|--jwks) FILE TOKEN. Prints "ok <sub>" and exits 0, or
 * prints the error text and the message and exits 1; 2 on usage errors.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "queen/error.h"

#include "jwt.h"

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    enum qn_jwt_source_kind kind = strcmp(argv[1], "--secret") == 0 ? QN_JWT_SRC_SECRET
                                   : strcmp(argv[1], "--pem") == 0  ? QN_JWT_SRC_PEM
                                   : strcmp(argv[1], "--jwks") == 0 ? QN_JWT_SRC_JWKS
                                                                    : 0;
    if (!kind)
        return 2;
    struct qn_jwt_file f = {kind, NULL, argv[2]};
    qn_jwt_keys *k = NULL;
    char msg[256] = "";
    int rc = qn_jwt_keys_load(&f, 1, &k, msg, sizeof msg);
    if (rc != QN_OK) {
        printf("keys: %s: %s\n", qn_strerror(rc), msg);
        return 1;
    }
    struct qn_jwt_policy pol = {.clock_skew_s = 5, .require_exp = true, .audience = "queen"};
    qn_principal *p = NULL;
    rc = qn_jwt_verify(k, &pol, argv[3], strlen(argv[3]), (int64_t)time(NULL), &p, msg, sizeof msg);
    qn_jwt_keys_release(k);
    if (rc != QN_OK) {
        printf("%s: %s\n", qn_strerror(rc), msg);
        return 1;
    }
    printf("ok %s %zu\n", qn_principal_sub(p), qn_principal_grant_count(p));
    qn_principal_free(p);
    return 0;
}
