/*
 * cl_tls.c - the client's TLS context: trust store, client certificate, ALPN
 * h2, and a socket BIO that never raises SIGPIPE (see queen/client.h).
 *
 * Does: read the CA, certificate and key files once, when the context is made,
 * and say which file failed and why.
 * Does not: the handshake or the per-connection name check (cl_conn.c), reload
 * files, or keep state outside the context (the BIO method lives in it).
 *
 * Invariants:
 *   1. ctx and meth are both set for the life of a qn_client_tls.
 *   2. a context verifies the peer unless verify is QN_CLIENT_VERIFY_NONE.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "cl_int.h"
#include "queen/error.h"

struct qn_client_tls {
    SSL_CTX *ctx;
    BIO_METHOD *meth; /* the MSG_NOSIGNAL socket BIO */
    enum qn_client_verify verify;
};

void qn__client_ssl_detail(char *buf, size_t cap)
{
    unsigned long e = ERR_get_error();
    if (e == 0) {
        snprintf(buf, cap, "no detail");
        return;
    }
    const char *reason = ERR_reason_error_string(e);
    if (reason != NULL)
        snprintf(buf, cap, "%s", reason);
    else
        ERR_error_string_n(e, buf, cap);
    ERR_clear_error();
}

/* ---------------------------------------------------------------- socket BIO */

static int bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int bio_write(BIO *b, const char *buf, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t w = send(bio_fd(b), buf, (size_t)len, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)w;
}

static int bio_read(BIO *b, char *buf, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t r = recv(bio_fd(b), buf, (size_t)len, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    return (int)r;
}

static int bio_puts(BIO *b, const char *s)
{
    return bio_write(b, s, (int)strlen(s));
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    /* Only flush means anything for an unbuffered socket. */
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 0);
    BIO_set_data(b, (void *)(intptr_t)-1);
    return 1;
}

BIO *qn__client_tls_bio(const qn_client_tls *t, int fd)
{
    BIO *b = BIO_new(t->meth);
    if (b == NULL)
        return NULL;
    BIO_set_data(b, (void *)(intptr_t)fd);
    BIO_set_init(b, 1);
    return b;
}

/* ---------------------------------------------------------------- context */

SSL_CTX *qn__client_tls_ctx(const qn_client_tls *t)
{
    return t->ctx;
}

enum qn_client_verify qn__client_tls_verify(const qn_client_tls *t)
{
    return t->verify;
}

void qn_client_tls_free(qn_client_tls *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    BIO_meth_free(t->meth);
    free(t);
}

static int file_failed(struct qn_client_status *st, const char *what, const char *path)
{
    char detail[200];
    qn__client_ssl_detail(detail, sizeof detail);
    qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG, "cannot use %s %s: %s", what, path, detail);
    return QN_EIO;
}

int qn_client_tls_new(const struct qn_client_tls_opts *o, qn_client_tls **out,
                      struct qn_client_status *st)
{
    qn_client_status_clear(st);
    bool has_cert = o->cert_file != NULL && o->cert_file[0] != '\0';
    bool has_key = o->key_file != NULL && o->key_file[0] != '\0';
    if (has_cert != has_key) {
        qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG,
                              "a client certificate needs its key and the other way round "
                              "(got only the %s)",
                              has_cert ? "certificate" : "key");
        return QN_EINVAL;
    }
    int rc = QN_ENOMEM;
    ERR_clear_error();
    qn_client_tls *t = calloc(1, sizeof *t);
    if (t == NULL)
        goto nomem;
    t->verify = o->verify;
    t->ctx = SSL_CTX_new(TLS_client_method());
    t->meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "queen socket");
    if (t->ctx == NULL || t->meth == NULL)
        goto nomem;
    if (BIO_meth_set_write(t->meth, bio_write) != 1 || BIO_meth_set_read(t->meth, bio_read) != 1 ||
        BIO_meth_set_puts(t->meth, bio_puts) != 1 || BIO_meth_set_ctrl(t->meth, bio_ctrl) != 1 ||
        BIO_meth_set_create(t->meth, bio_create) != 1)
        goto nomem;
    (void)SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    if (SSL_CTX_set_alpn_protos(t->ctx, (const unsigned char *)"\x02h2", 3) != 0)
        goto nomem;
    if (o->verify != QN_CLIENT_VERIFY_NONE) {
        if (o->ca_file != NULL && o->ca_file[0] != '\0') {
            if (SSL_CTX_load_verify_locations(t->ctx, o->ca_file, NULL) != 1) {
                rc = file_failed(st, "CA file", o->ca_file);
                goto fail;
            }
        } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
            rc = file_failed(st, "the system trust store at", X509_get_default_cert_file());
            goto fail;
        }
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    }
    if (has_cert) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, o->cert_file) != 1) {
            rc = file_failed(st, "certificate file", o->cert_file);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(t->ctx, o->key_file, SSL_FILETYPE_PEM) != 1 &&
            ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
            rc = file_failed(st, "key file", o->key_file);
            goto fail;
        }
        if (SSL_CTX_check_private_key(t->ctx) != 1) {
            ERR_clear_error();
            qn__client_status_set(st, QN_CLIENT_FAIL_CONFIG,
                                  "key file %s does not match certificate file %s", o->key_file,
                                  o->cert_file);
            rc = QN_EINVAL;
            goto fail;
        }
    }
    *out = t;
    return QN_OK;
nomem:
    ERR_clear_error();
    qn__client_status_set(st, QN_CLIENT_FAIL_MEMORY, "out of memory making the TLS context");
    rc = QN_ENOMEM;
fail:
    qn_client_tls_free(t);
    return rc;
}
