/*
 * qctl_token.c - `queenctl token`: mints a JWT for development and tests
 * (qn_jwt_mint, broker/src/auth/jwt.h), for a broker started with
 * QUEEN_AUTH=jwt (README "Security").
 *
 *   queenctl token --sub NAME (--hs256-secret-file FILE | --es256-key-file FILE)
 *                  [--tenant UUID] [--scope GRANT]... [--ttl SECONDS] [--iss ISS]
 *                  [--aud AUD] [--kid KID] [--tenant-claim NAME] [--scopes-claim NAME]
 *
 * GRANT is "<produce|consume|admin>:<pattern>" (repeatable). --ttl defaults to
 * 3600; 0 mints a token without exp. The HS256 secret file is read as a broker
 * reads it (one trailing newline dropped; at least 32 bytes); the ES256 key
 * file is a PEM P-256 private key. The token is printed on stdout with a
 * newline. Works offline: nothing is sent to a broker.
 *
 * Exit status: 0; 2 bad usage or bad input (a message on stderr); 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "queen/error.h"
#include "queen/ids.h"

#include "auth.h"
#include "jwt.h"
#include "qctl.h"

#define MAX_SCOPES QN_AUTH_GRANTS_MAX
#define KEY_FILE_MAX (1u << 20)

enum {
    OPT_SUB = 0x2000,
    OPT_TENANT,
    OPT_SCOPE,
    OPT_TTL,
    OPT_ISS,
    OPT_AUD,
    OPT_KID,
    OPT_TENANT_CLAIM,
    OPT_SCOPES_CLAIM,
    OPT_HS256,
    OPT_ES256,
};

static const struct argp_option token_options[] = {
    {"sub", OPT_SUB, "NAME", 0, "the principal (sub claim; required)", 1},
    {"hs256-secret-file", OPT_HS256, "FILE", 0, "sign HS256 with this secret (>= 32 bytes)", 1},
    {"es256-key-file", OPT_ES256, "FILE", 0, "sign ES256 with this PEM P-256 private key", 1},
    {"tenant", OPT_TENANT, "UUID", 0, "tenant claim (absent: the broker's default tenant)", 1},
    {"scope", OPT_SCOPE, "GRANT", 0, "a grant <produce|consume|admin>:<pattern> (repeatable)", 1},
    {"ttl", OPT_TTL, "SECONDS", 0, "lifetime (default 3600; 0: no exp claim)", 1},
    {"iss", OPT_ISS, "ISS", 0, "iss claim", 1},
    {"aud", OPT_AUD, "AUD", 0, "aud claim", 1},
    {"kid", OPT_KID, "KID", 0, "kid header (picks the broker's key)", 1},
    {"tenant-claim", OPT_TENANT_CLAIM, "NAME", 0, "name of the tenant claim (default tenant)", 1},
    {"scopes-claim", OPT_SCOPES_CLAIM, "NAME", 0, "name of the scopes claim (default scopes)", 1},
    {0},
};

struct token_args {
    struct qn_jwt_mint c;
    const char *scopes[MAX_SCOPES];
    const char *hs_file, *es_file;
    long long ttl;
};

static error_t token_parse(int key, char *arg, struct argp_state *state)
{
    struct token_args *a = qctl_cmd(state);
    switch (key) {
    case OPT_SUB:
        a->c.sub = arg;
        return 0;
    case OPT_TENANT: {
        uint8_t u[16];
        if (qn_uuid_parse(arg, strlen(arg), u) != QN_OK)
            argp_error(state, "--tenant %s is not a UUID", arg);
        a->c.tenant = arg;
        return 0;
    }
    case OPT_SCOPE: {
        unsigned sc;
        const char *p;
        size_t pl;
        if (qn_grant_parse(arg, strlen(arg), &sc, &p, &pl) != QN_OK)
            argp_error(state,
                       "--scope %s is not <produce|consume|admin>:<pattern> ('*' only at the end)",
                       arg);
        if (a->c.n_scopes == MAX_SCOPES)
            argp_error(state, "more than %u scopes", MAX_SCOPES);
        a->scopes[a->c.n_scopes++] = arg;
        return 0;
    }
    case OPT_TTL: {
        char *end;
        a->ttl = strtoll(arg, &end, 10);
        if (*arg == '\0' || *end != '\0' || a->ttl < 0 || a->ttl > 10LL * 365 * 86400)
            argp_error(state, "--ttl must be 0..315360000 seconds");
        return 0;
    }
    case OPT_ISS:
        a->c.iss = arg;
        return 0;
    case OPT_AUD:
        a->c.aud = arg;
        return 0;
    case OPT_KID:
        a->c.kid = arg;
        return 0;
    case OPT_TENANT_CLAIM:
        a->c.tenant_claim = arg;
        return 0;
    case OPT_SCOPES_CLAIM:
        a->c.scopes_claim = arg;
        return 0;
    case OPT_HS256:
        a->hs_file = arg;
        return 0;
    case OPT_ES256:
        a->es_file = arg;
        return 0;
    case ARGP_KEY_END:
        if (a->c.sub == NULL)
            argp_error(state, "--sub is missing");
        if ((a->hs_file == NULL) == (a->es_file == NULL))
            argp_error(state, "give exactly one of --hs256-secret-file and --es256-key-file");
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

/* Reads a key file (at most KEY_FILE_MAX bytes); the secret as a broker reads
 * it: one trailing newline is not part of it. */
static int read_key(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return qctl_fail(QCTL_USAGE, "%s: cannot be opened", path);
    uint8_t *b = malloc(KEY_FILE_MAX + 1);
    size_t n = b ? fread(b, 1, KEY_FILE_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!b || bad || n > KEY_FILE_MAX) {
        free(b);
        return qctl_fail(!b ? QCTL_FAIL : QCTL_USAGE, "%s: %s", path,
                         !b    ? "out of memory"
                         : bad ? "cannot be read"
                               : "larger than 1 MiB");
    }
    if (n && b[n - 1] == '\n') {
        n--;
        if (n && b[n - 1] == '\r')
            n--;
    }
    *out = b;
    *len = n;
    return QCTL_OK;
}

static int cmd_token(struct qctl *q, int argc, char **argv)
{
    struct token_args a = {.ttl = 3600};
    qctl_argp(q, token_options, token_parse, "",
              "Mints a JWT for a broker started with QUEEN_AUTH=jwt (development and tests; "
              "production tokens come from your identity provider). Works offline.",
              &a, argc, argv);
    a.c.scopes = a.scopes;
    a.c.iat = (int64_t)time(NULL);
    a.c.exp = a.ttl ? a.c.iat + a.ttl : 0;
    uint8_t *key = NULL;
    size_t key_len = 0;
    int rc = read_key(a.hs_file ? a.hs_file : a.es_file, &key, &key_len);
    if (rc != QCTL_OK)
        return rc;
    char *token = NULL, msg[256] = "";
    rc = qn_jwt_mint(a.hs_file ? "HS256" : "ES256", key, key_len, &a.c, &token, msg, sizeof msg);
    free(key);
    if (rc != QN_OK)
        return qctl_fail(rc == QN_ENOMEM ? QCTL_FAIL : QCTL_USAGE, "%s",
                         msg[0] ? msg : qn_strerror(rc));
    int out = printf("%s\n", token);
    free(token);
    if (out < 0 || fflush(stdout) != 0)
        return qctl_fail(QCTL_FAIL, "cannot write to standard output");
    return QCTL_OK;
}

const struct qctl_command qctl_token_commands[] = {
    {NULL, "token", "mint a development JWT (for QUEEN_AUTH=jwt)", cmd_token},
    {NULL, NULL, NULL, NULL},
};
