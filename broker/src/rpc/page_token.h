/*
 * rpc/page_token.h - private to rpc/: the opaque page tokens of the admin
 * listings (GetQueue's partitions, ListQueues, ListConsumerGroups,
 * ListDeadLetters).
 *
 * A token is a keyset cursor: the sort key of the last row a page returned,
 * so the next page starts strictly after it (rows inserted meanwhile are
 * neither skipped nor repeated). It is bound to the listing (its kind), the
 * caller's tenant and the request's filters through a 64-bit binding; a token
 * presented with another binding is refused. The binding is not a secret: a
 * forged token can only name a position inside the caller's own listing (the
 * procedures still filter by tenant and grants), so it reaches nothing more.
 *
 * Wire form: base64url without padding of
 *   u8 version (1) | u8 kind | u64le binding | keys
 * keys: QN_PAGE_DLQ: i64le failed_at_us | u8[16] id; the others: u8 count
 * (1..3) then count x (u16le length | bytes, no NUL, at most QN_NAME_MAX).
 * Pure: no allocation, no I/O.
 */
#ifndef QN_BROKER_PAGE_TOKEN_H
#define QN_BROKER_PAGE_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "rpc/validate.h"

/* Longest encoded token, in characters (a longer one is refused unread). */
#define QN_PAGE_TOKEN_MAX 1100
/* Text keys a token carries at most. */
#define QN_PAGE_KEYS_MAX 3

/* Page sizes of every listing: default when the request sets none, and the
 * largest served (a larger request is clamped to it). */
#define QN_PAGE_DEFAULT 100
#define QN_PAGE_MAX 1000

enum qn_page_kind {
    QN_PAGE_QUEUES = 1,
    QN_PAGE_PARTITIONS = 2,
    QN_PAGE_GROUPS = 3,
    QN_PAGE_DLQ = 4,
};

struct qn_page_key {
    size_t n_text;                                /* text keys used (not QN_PAGE_DLQ) */
    char text[QN_PAGE_KEYS_MAX][QN_NAME_MAX + 1]; /* NUL-terminated */
    int64_t ts_us;                                /* QN_PAGE_DLQ: failed_at */
    uint8_t id[16];                               /* QN_PAGE_DLQ: dead letter id */
};

/* The binding of a listing: kind, tenant (16 bytes; NULL = the default
 * tenant) and the request's filters in order (NULL counts as ""). */
uint64_t qn_page_binding(enum qn_page_kind kind, const uint8_t *tenant, const char *const *filters,
                         size_t n_filters);

/* Page size for the request's page_size and legacy limit (0 = unset): the
 * first set, else QN_PAGE_DEFAULT; clamped to QN_PAGE_MAX. */
uint32_t qn_page_size(uint32_t page_size, uint32_t legacy_limit);

/* Sets text key i of k (i < QN_PAGE_KEYS_MAX) to s and n_text to at least
 * i + 1. QN_EINVAL: s longer than QN_NAME_MAX (k unchanged). */
int qn_page_key_set_text(struct qn_page_key *k, size_t i, const char *s);

/*
 * Encodes k as a token of kind and binding into out (cap bytes, NUL
 * terminated). QN_EINVAL: a key longer than QN_NAME_MAX, more than
 * QN_PAGE_KEYS_MAX keys, or out too small (then out is "").
 */
int qn_page_token_encode(enum qn_page_kind kind, uint64_t binding, const struct qn_page_key *k,
                         char *out, size_t cap);

/*
 * Decodes tok (NUL-terminated) into *k, written only on success.
 * QN_EINVAL with *why set (a static message for people): not base64url, too
 * long, wrong version, another listing's token, another tenant's or filters'
 * token, a bad key (length, NUL, count not n_text_expected).
 */
int qn_page_token_decode(const char *tok, enum qn_page_kind kind, uint64_t binding,
                         size_t n_text_expected, struct qn_page_key *k, const char **why);

#endif
