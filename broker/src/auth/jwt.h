/*
 * jwt.h - JWT bearer tokens: key sets, verification, and minting for
 * development. Signatures and JWK parsing are Cisco's libcjose (Debian
 * libcjose-dev); claims are read with jansson. Only HS256, RS256 and ES256 are
 * accepted, each bound to its kind of key (see qn_jwt_verify).
 *
 * Key sets. A key set is an immutable, reference-counted object built from
 * sources (the bytes of key files) or from the files themselves:
 *   HS256   a secret file: its bytes, minus one trailing "\n" or "\r\n", are
 *           the HMAC key; at least 32 bytes (RFC 7518 3.2);
 *   PEM     a public key ("-----BEGIN PUBLIC KEY-----"): RSA of 2048 bits or
 *           more verifies RS256; EC on P-256 verifies ES256;
 *   JWKS    {"keys": [JWK, ...]} (RFC 7517): "oct" keys verify HS256, "RSA"
 *           RS256, "EC" with crv P-256 ES256; a key whose "alg" names another
 *           algorithm, or whose "use" is not "sig", is skipped; its "kid"
 *           names it.
 * A secret or PEM source may be given a kid too. Reloading (SIGHUP) is: build a
 * new set; on success swap it in and release the old one; on failure keep the
 * old one and log the message (nothing is half-loaded). Holders that may
 * outlive a swap take a reference (qn_jwt_keys_retain); the count is atomic.
 */
#ifndef QN_JWT_H
#define QN_JWT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"

#define QN_JWT_TOKEN_MAX 8192u   /* bytes of a token accepted for verification */
#define QN_JWT_KEYS_MAX 64u      /* keys of one set */
#define QN_JWT_FILE_MAX 1048576u /* bytes of one key file */
#define QN_JWT_SKEW_MAX 600u     /* seconds of clock skew one may configure */
#define QN_JWT_HS_SECRET_MIN 32u /* bytes of an HS256 secret */

typedef struct qn_jwt_keys qn_jwt_keys;

enum qn_jwt_source_kind {
    QN_JWT_SRC_SECRET = 1, /* HS256 secret bytes */
    QN_JWT_SRC_PEM = 2,    /* PEM public key (RS256 or ES256) */
    QN_JWT_SRC_JWKS = 3,   /* a JWKS document */
};

struct qn_jwt_source {
    enum qn_jwt_source_kind kind;
    const char *kid;     /* optional kid for SECRET and PEM; ignored for JWKS */
    const uint8_t *data; /* the file's bytes, borrowed for the call */
    size_t len;
    const char *name; /* for messages (a file name); may be NULL */
};

/*
 * Builds a key set from n sources. On success writes *out (reference count 1).
 * Errors, writing nothing: QN_EAUTH_CONFIG with a message naming the source
 * (a secret shorter than 32 bytes, a PEM that is not a supported public key, a
 * JWKS that does not parse or has no usable key, two keys with one kid, more
 * than QN_JWT_KEYS_MAX keys, no key at all); QN_EINVAL (NULL out, src NULL with
 * n > 0); QN_ENOMEM. Borrows src.
 */
int qn_jwt_keys_build(const struct qn_jwt_source *src, size_t n, qn_jwt_keys **out, char *msg,
                      size_t cap);

/* A file for qn_jwt_keys_load: kind, optional kid, path. */
struct qn_jwt_file {
    enum qn_jwt_source_kind kind;
    const char *kid;
    const char *path;
};

/*
 * Reads each file (at most QN_JWT_FILE_MAX bytes; blocking I/O: call it at
 * start and on reload, never on a loop serving calls) and builds a set as
 * qn_jwt_keys_build. Adds QN_EIO (a file cannot be read, message names it).
 */
int qn_jwt_keys_load(const struct qn_jwt_file *files, size_t n, qn_jwt_keys **out, char *msg,
                     size_t cap);

/* Number of usable keys in the set. */
size_t qn_jwt_keys_count(const qn_jwt_keys *k);

/* Takes a reference; returns k. */
qn_jwt_keys *qn_jwt_keys_retain(qn_jwt_keys *k);

/* Drops a reference; the last one frees the set. NULL is fine. */
void qn_jwt_keys_release(qn_jwt_keys *k);

/* What a token must satisfy besides its signature. */
struct qn_jwt_policy {
    const char *issuer;        /* NULL: iss not checked; else iss must equal it */
    const char *audience;      /* NULL: aud not checked; else aud (string or array) must hold it */
    unsigned clock_skew_s;     /* 0..QN_JWT_SKEW_MAX, applied to exp, nbf and iat */
    bool require_exp;          /* refuse tokens without exp */
    const char *tenant_claim;  /* NULL means "tenant" */
    bool allow_default_tenant; /* a token without the tenant claim acts in QN_TENANT_DEFAULT */
    const char *scopes_claim;  /* NULL means "scopes" */
};

/*
 * Verifies token[0..len) (the compact JWS, without "Bearer ") at time now_s
 * (seconds since the epoch) and builds its principal.
 *
 * Order of checks and their errors:
 *   1. length over QN_JWT_TOKEN_MAX, not three base64url parts, a header that
 *      is not a JSON object, a "crit" header                  QN_EAUTH_MALFORMED
 *   2. alg not HS256/RS256/ES256 ("none" included)            QN_EAUTH_ALG
 *   3. key: the set's key with the token's kid, else (no kid) the only key of
 *      the token's alg; a kid the set lacks, or no kid while several keys
 *      could verify                                           QN_EAUTH_UNKNOWN_KID
 *      the key's kind does not match alg (HS256 with an RSA key: algorithm
 *      confusion; RS256 with a secret)                        QN_EAUTH_ALG
 *   4. the signature does not verify                          QN_EAUTH_SIGNATURE
 *   5. the payload is not a JSON object                       QN_EAUTH_MALFORMED
 *   6. exp: now >= exp + skew                                 QN_EAUTH_EXPIRED
 *      no exp and policy->require_exp                         QN_EAUTH_CLAIM
 *   7. nbf or iat later than now + skew                       QN_EAUTH_NOT_YET_VALID
 *   8. iss differs from policy->issuer                        QN_EAUTH_ISSUER
 *   9. aud lacks policy->audience                             QN_EAUTH_AUDIENCE
 *  10. sub missing or not 1..255 bytes of UTF-8 without control characters,
 *      tenant not a canonical UUID string, tenant absent without
 *      allow_default_tenant, scopes neither an array of strings nor a
 *      space-separated string, a known scope with a bad pattern, over
 *      QN_AUTH_GRANTS_MAX grants                              QN_EAUTH_CLAIM
 *  QN_EAUTH_CONFIG for a policy out of bounds, QN_EINVAL for NULL arguments,
 *  QN_ENOMEM.
 * Scopes: each entry "<scope>:<pattern>" (auth.h); entries whose scope word is
 * not produce, consume or admin are ignored (a token may carry other services'
 * scopes); a token without the claim gets no grants.
 * On success *out is a new principal (QN_PRINCIPAL_JWT; caller frees). msg
 * (may be NULL with cap 0) receives a sentence for the client and the log; it
 * never contains the token or any claim value.
 */
int qn_jwt_verify(const qn_jwt_keys *keys, const struct qn_jwt_policy *policy, const char *token,
                  size_t len, int64_t now_s, qn_principal **out, char *msg, size_t cap);

/* Claims of a token to mint (development and tests). */
struct qn_jwt_mint {
    const char *sub;           /* required */
    const char *tenant;        /* NULL: no tenant claim */
    const char *const *scopes; /* n_scopes grant strings, written as an array */
    size_t n_scopes;
    const char *iss;          /* NULL: omitted */
    const char *aud;          /* NULL: omitted */
    const char *kid;          /* NULL: no kid header */
    int64_t iat;              /* issued at, seconds since the epoch */
    int64_t exp;              /* 0: no exp claim */
    const char *tenant_claim; /* NULL means "tenant" */
    const char *scopes_claim; /* NULL means "scopes" */
};

/*
 * Mints a compact JWS. alg is "HS256" (key = secret bytes, >= 32) or "ES256"
 * (key = a PEM EC P-256 private key). On success *token is a malloc'd
 * NUL-terminated string the caller frees with free(). Errors: QN_EAUTH_CONFIG
 * (unsupported alg, bad key), QN_EINVAL (missing sub or arguments), QN_ENOMEM.
 */
int qn_jwt_mint(const char *alg, const uint8_t *key, size_t key_len, const struct qn_jwt_mint *c,
                char **token, char *msg, size_t cap);

#endif
