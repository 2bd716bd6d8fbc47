/*
 * mtls.h - principals from verified TLS client certificates, and the policy
 * file that gives them a tenant and grants.
 *
 * The policy file (JSON, read with jansson):
 *
 *   {
 *     "identity": "san:dns",
 *     "principals": [
 *       {"match": "billing.svc.example.com",
 *        "tenant": "6f1c2a4e-0d7b-4c39-9a51-3e8f2b7d1c05",
 *        "grants": ["consume:orders.*", "produce:invoices"]},
 *       {"match": "*.workers.example.com", "grants": ["consume:jobs.*"]}
 *     ]
 *   }
 *
 *   identity    which part of the certificate names the principal: "cn" (the
 *               subject's commonName; a subject with several CNs names no one),
 *               "san:dns", "san:uri" or "san:email" (subjectAltName entries of
 *               that type). Default "cn".
 *   principals  1..4096 entries, tried in file order:
 *     match     the identity, exactly, or with one '*' anywhere standing for
 *               zero or more bytes ("*.workers.example.com", "svc-*-eu");
 *     tenant    a canonical UUID; absent means the default tenant
 *               (00000000-0000-0000-0000-000000000001): the file is the
 *               operator's own configuration;
 *     grants    "<scope>:<pattern>" strings as in auth.h; an unknown scope is
 *               an error here (unlike in tokens).
 *   Any other member, anywhere, is an error (a typo must not silently widen or
 *   narrow access).
 * With a SAN identity, the certificate's SANs of that type are taken in
 * certificate order, and for each the entries in file order: the first match
 * names the principal (sub = that SAN). An identity containing a NUL byte or a
 * control character, or longer than 255 bytes, names no one.
 */
#ifndef QN_MTLS_H
#define QN_MTLS_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/x509.h>

#include "auth.h"

#define QN_POLICY_ENTRIES_MAX 4096u
#define QN_POLICY_FILE_MAX 4194304u /* bytes of a policy file */

typedef struct qn_policy qn_policy;

/*
 * Parses a policy document json[0..len). On success *out is a new immutable
 * policy (free with qn_policy_free; shareable between threads). Errors:
 * QN_EAUTH_CONFIG with a message naming the entry and what is wrong;
 * QN_EINVAL; QN_ENOMEM.
 */
int qn_policy_parse(const uint8_t *json, size_t len, qn_policy **out, char *msg, size_t cap);

/* Reads the file at path (at most QN_POLICY_FILE_MAX bytes; blocking: at start
 * or reload only) and parses it. Adds QN_EIO. */
int qn_policy_load(const char *path, qn_policy **out, char *msg, size_t cap);

void qn_policy_free(qn_policy *pol);

/* Overrides the policy's "identity" ("cn", "san:dns", "san:uri" or
 * "san:email"; the operator's QUEEN_MTLS_IDENTITY). Call before the policy is
 * shared. Returns QN_OK, or QN_EINVAL for another word or NULL arguments. */
int qn_policy_set_identity(qn_policy *pol, const char *identity);

/* Entries in the policy. */
size_t qn_policy_count(const qn_policy *pol);

/*
 * The principal of a client certificate the TLS layer has already verified
 * (borrowed, not modified). On success *out is a new QN_PRINCIPAL_MTLS
 * principal (caller frees). Errors: QN_EAUTH_CERT with a message (no identity
 * of the configured type, or none the policy names; the message names the
 * identity type, never the certificate's contents); QN_EINVAL; QN_ENOMEM.
 */
int qn_mtls_principal(const qn_policy *pol, X509 *cert, qn_principal **out, char *msg, size_t cap);

#endif
