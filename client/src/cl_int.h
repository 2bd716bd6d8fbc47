/*
 * cl_int.h - PRIVATE to client/src: what the library's files share beyond the
 * public headers. Not installed, not included from outside client/src.
 */
#ifndef QN_CLIENT_INT_H
#define QN_CLIENT_INT_H

#include <stdarg.h>

#include <openssl/ssl.h>

#include "queen/client.h"

/* The error code a failure stage maps to (see enum qn_client_fail). */
int qn__client_fail_code(enum qn_client_fail f);

/* Sets st to a local failure: fail f, code -1, message from fmt. */
void qn__client_status_set(struct qn_client_status *st, enum qn_client_fail f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The OpenSSL context of t, and what it verifies. */
SSL_CTX *qn__client_tls_ctx(const qn_client_tls *t);
enum qn_client_verify qn__client_tls_verify(const qn_client_tls *t);

/* A BIO over the socket fd (not closed with the BIO) that writes with
 * MSG_NOSIGNAL, so TLS never raises SIGPIPE; NULL on ENOMEM. */
BIO *qn__client_tls_bio(const qn_client_tls *t, int fd);

/* Writes OpenSSL's oldest queued error (or "no detail") into buf and clears the
 * thread's error queue. */
void qn__client_ssl_detail(char *buf, size_t cap);

/* Hands c the TLS context and the strings qn_client_dial made for it; freed
 * with c. */
void qn__client_adopt(qn_client *c, qn_client_tls *tls, char *authority, char *server_name);

/* The connection's bound on unread bytes of a blocking stream. */
size_t qn__client_max_queued(const qn_client *c);

/* Cancels an open call and drops its callbacks: its on_close will not run, and
 * its ud may be freed at once. No-op on a call that already ended. */
void qn__client_call_forget(qn_client_call *call);

#endif
