/*
 * jwt_int.h - PRIVATE to broker/src/auth: what jwt.c shares with jwt_mint.c.
 */
#ifndef QN_JWT_INT_H
#define QN_JWT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjose/cjose.h>

/* The algorithms a key may be bound to (jwt.c keeps their names). */
enum alg { ALG_HS256 = 0, ALG_RS256 = 1, ALG_ES256 = 2 };

/*
 * A PEM key -> cjose JWK: a public RSA (>= 2048 bits) or EC P-256 key, or with
 * priv an EC P-256 private key (for minting). On success *out is a new JWK
 * (caller releases) bound to *alg. Returns QN_OK, QN_EAUTH_CONFIG with a reason
 * naming `name` in msg, or QN_ENOMEM.
 */
int qn__jwt_pem_jwk(const uint8_t *pem, size_t len, bool priv, cjose_jwk_t **out, enum alg *alg,
                    const char *name, char *msg, size_t cap);

#endif
