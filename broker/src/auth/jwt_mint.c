/*
 * jwt_mint.c - qn_jwt_mint (jwt.h): development tokens, HS256 from a secret or
 * ES256 from a PEM P-256 private key, signed by libcjose.
 *
 * What it does: builds the header (alg, typ, optional kid) and the claims
 * (sub, tenant, scopes, iss, aud, iat, exp) and signs them.
 * What it deliberately does not: mint RS256 (verification accepts it; nothing
 * here needs to sign it), or check the grants it writes (`queenctl token`,
 * tools/qctl_token.c, does).
 *
 * Invariants:
 *   1. A private key's bytes are wiped once converted (qn__jwt_pem_jwk).
 *   2. The token string handed out is the caller's; everything else is freed.
 */
#include <stdlib.h>
#include <string.h>

#include <cjose/cjose.h>
#include <jansson.h>

#include "queen/error.h"

#include "auth_int.h"
#include "jwt.h"
#include "jwt_int.h"

int qn_jwt_mint(const char *alg, const uint8_t *key, size_t key_len, const struct qn_jwt_mint *c,
                char **token, char *msg, size_t cap)
{
    if (!alg || !key || !c || !c->sub || !token || (!c->scopes && c->n_scopes))
        return QN_EINVAL;
    int rc = QN_ENOMEM;
    cjose_err err;
    cjose_jwk_t *jwk = NULL;
    cjose_header_t *hdr = NULL;
    cjose_jws_t *jws = NULL;
    json_t *claims = NULL, *scopes = NULL;
    char *payload = NULL;
    if (strcmp(alg, "HS256") == 0) {
        if (key_len < QN_JWT_HS_SECRET_MIN) {
            qn__auth_msg(msg, cap, "an HS256 secret needs at least %u bytes", QN_JWT_HS_SECRET_MIN);
            return QN_EAUTH_CONFIG;
        }
        jwk = cjose_jwk_create_oct_spec(key, key_len, &err);
        if (!jwk)
            goto out;
    } else if (strcmp(alg, "ES256") == 0) {
        enum alg a;
        rc = qn__jwt_pem_jwk(key, key_len, true, &jwk, &a, "signing key", msg, cap);
        if (rc != QN_OK)
            goto out;
        rc = QN_ENOMEM;
    } else {
        qn__auth_msg(msg, cap, "minting supports HS256 and ES256");
        return QN_EAUTH_CONFIG;
    }
    hdr = cjose_header_new(&err);
    if (!hdr || !cjose_header_set(hdr, CJOSE_HDR_ALG, alg, &err) ||
        !cjose_header_set(hdr, "typ", "JWT", &err) ||
        (c->kid && !cjose_header_set(hdr, CJOSE_HDR_KID, c->kid, &err)))
        goto out;
    claims = json_object();
    scopes = json_array();
    if (!claims || !scopes)
        goto out;
    for (size_t i = 0; i < c->n_scopes; i++)
        if (json_array_append_new(scopes, json_string(c->scopes[i])) != 0)
            goto out;
    if (json_object_set_new(claims, "sub", json_string(c->sub)) != 0 ||
        (c->tenant && json_object_set_new(claims, c->tenant_claim ? c->tenant_claim : "tenant",
                                          json_string(c->tenant)) != 0) ||
        json_object_set(claims, c->scopes_claim ? c->scopes_claim : "scopes", scopes) != 0 ||
        (c->iss && json_object_set_new(claims, "iss", json_string(c->iss)) != 0) ||
        (c->aud && json_object_set_new(claims, "aud", json_string(c->aud)) != 0) ||
        json_object_set_new(claims, "iat", json_integer(c->iat)) != 0 ||
        (c->exp && json_object_set_new(claims, "exp", json_integer(c->exp)) != 0))
        goto out;
    payload = json_dumps(claims, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!payload)
        goto out;
    jws = cjose_jws_sign(jwk, hdr, (const uint8_t *)payload, strlen(payload), &err);
    const char *ser = NULL;
    if (!jws || !cjose_jws_export(jws, &ser, &err)) {
        qn__auth_msg(msg, cap, "signing failed");
        rc = QN_EAUTH_CONFIG;
        goto out;
    }
    *token = strdup(ser);
    rc = *token ? QN_OK : QN_ENOMEM;
out:
    free(payload);
    json_decref(scopes);
    json_decref(claims);
    cjose_jws_release(jws);
    cjose_header_release(hdr);
    cjose_jwk_release(jwk);
    return rc;
}
