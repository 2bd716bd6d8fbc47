/*
 * queen-token - mints a JWT for development and tests (qn_jwt_mint in
 * broker/src/auth/jwt.h). It will become `queenctl token`.
 *
 *   queen-token --sub NAME (--hs256-secret-file FILE | --es256-key-file FILE)
 *               [--tenant UUID] [--scope GRANT]... [--ttl SECONDS] [--iss ISS]
 *               [--aud AUD] [--kid KID] [--tenant-claim NAME] [--scopes-claim NAME]
 *
 * GRANT is "<produce|consume|admin>:<pattern>" (repeatable). --ttl defaults to
 * 3600; 0 mints a token without exp. The HS256 secret file is used as a
 * broker reads it (one trailing newline dropped; at least 32 bytes); the ES256
 * key file is a PEM P-256 private key (`openssl genpkey -algorithm EC -pkeyopt
 * ec_paramgen_curve:P-256`). The token is printed on stdout with a newline.
 *
 * Exit status: 0 success; 2 usage or bad input, with one line on stderr; 1
 * anything else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "queen/error.h"
#include "queen/ids.h"

#include "auth.h"
#include "jwt.h"

#define MAX_SCOPES 256
#define KEY_FILE_MAX (1u << 20)

static int usage(void)
{
    fprintf(stderr, "usage: queen-token --sub NAME (--hs256-secret-file FILE | --es256-key-file "
                    "FILE) [--tenant UUID] [--scope GRANT]... [--ttl SECONDS] [--iss ISS] "
                    "[--aud AUD] [--kid KID] [--tenant-claim NAME] [--scopes-claim NAME]\n");
    return 2;
}

static int read_key(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "queen-token: %s: cannot be opened\n", path);
        return 2;
    }
    uint8_t *b = malloc(KEY_FILE_MAX + 1);
    size_t n = b ? fread(b, 1, KEY_FILE_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!b || bad || n > KEY_FILE_MAX) {
        fprintf(stderr, "queen-token: %s: %s\n", path,
                !b    ? "out of memory"
                : bad ? "cannot be read"
                      : "larger than 1 MiB");
        free(b);
        return !b ? 1 : 2;
    }
    /* the secret as a broker reads it: one trailing newline is not part of it */
    if (n && b[n - 1] == '\n') {
        n--;
        if (n && b[n - 1] == '\r')
            n--;
    }
    *out = b;
    *len = n;
    return 0;
}

int main(int argc, char **argv)
{
    struct qn_jwt_mint c = {0};
    const char *scopes[MAX_SCOPES];
    const char *hs_file = NULL, *es_file = NULL;
    long long ttl = 3600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return usage();
        const char *v = argv[++i];
        if (strcmp(a, "--sub") == 0) {
            c.sub = v;
        } else if (strcmp(a, "--tenant") == 0) {
            uint8_t u[16];
            if (qn_uuid_parse(v, strlen(v), u) != QN_OK) {
                fprintf(stderr, "queen-token: --tenant is not a UUID\n");
                return 2;
            }
            c.tenant = v;
        } else if (strcmp(a, "--scope") == 0) {
            unsigned sc;
            const char *p;
            size_t pl;
            if (qn_grant_parse(v, strlen(v), &sc, &p, &pl) != QN_OK) {
                fprintf(stderr,
                        "queen-token: --scope %s is not <produce|consume|admin>:<pattern> "
                        "('*' only at the end)\n",
                        v);
                return 2;
            }
            if (c.n_scopes == MAX_SCOPES) {
                fprintf(stderr, "queen-token: more than %d scopes\n", MAX_SCOPES);
                return 2;
            }
            scopes[c.n_scopes++] = v;
        } else if (strcmp(a, "--ttl") == 0) {
            char *end;
            ttl = strtoll(v, &end, 10);
            if (*v == '\0' || *end != '\0' || ttl < 0 || ttl > 10LL * 365 * 86400) {
                fprintf(stderr, "queen-token: --ttl must be 0..315360000 seconds\n");
                return 2;
            }
        } else if (strcmp(a, "--iss") == 0) {
            c.iss = v;
        } else if (strcmp(a, "--aud") == 0) {
            c.aud = v;
        } else if (strcmp(a, "--kid") == 0) {
            c.kid = v;
        } else if (strcmp(a, "--tenant-claim") == 0) {
            c.tenant_claim = v;
        } else if (strcmp(a, "--scopes-claim") == 0) {
            c.scopes_claim = v;
        } else if (strcmp(a, "--hs256-secret-file") == 0) {
            hs_file = v;
        } else if (strcmp(a, "--es256-key-file") == 0) {
            es_file = v;
        } else {
            return usage();
        }
    }
    if (!c.sub || !hs_file == !es_file)
        return usage();
    c.scopes = scopes;
    c.iat = (int64_t)time(NULL);
    c.exp = ttl ? c.iat + ttl : 0;
    uint8_t *key = NULL;
    size_t key_len = 0;
    int rc = read_key(hs_file ? hs_file : es_file, &key, &key_len);
    if (rc != 0)
        return rc;
    char *token = NULL, msg[256] = "";
    rc = qn_jwt_mint(hs_file ? "HS256" : "ES256", key, key_len, &c, &token, msg, sizeof msg);
    free(key);
    if (rc != QN_OK) {
        fprintf(stderr, "queen-token: %s\n", msg[0] ? msg : qn_strerror(rc));
        return rc == QN_ENOMEM ? 1 : 2;
    }
    printf("%s\n", token);
    free(token);
    return fflush(stdout) == 0 ? 0 : 1;
}
