/*
 * rpc/validate.h - private to broker/: checks the services apply to requests
 * before anything is written. Every check writes a message for the client
 * naming the field (short, lower-case) and returns false / an error.
 */
#ifndef QN_BROKER_VALIDATE_H
#define QN_BROKER_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/store.h" /* QN_QUEUE_MODE */
#include "queen/v1/queue.pb-c.h"

struct qn_config;

/* The partition of a push that names none. */
#define QN_DEFAULT_PARTITION "Default"
#define QN_NAME_MAX 255

/* A name is 1..255 bytes of valid UTF-8 without control characters. */
bool qn_valid_name(const char *s);

/* True when p[0..n) is valid UTF-8 without a NUL byte (a proto3 string's
 * rules, for text that arrives inside bytes, e.g. a raw frame's transaction id). */
bool qn_text_ok(const uint8_t *p, size_t n);

/* NULL or "" -> dflt; else s. */
const char *qn_or_default(const char *s, const char *dflt);

/* Writes into buf (cap >= 160) why name `s` for `what` is invalid, or returns
 * false when it is valid. Empty is invalid unless allow_empty. */
bool qn_name_problem(const char *s, const char *what, bool allow_empty, char *buf, size_t cap);

/* Parses "xxxxxxxx-…" into out; false when malformed. */
bool qn_parse_uuid_str(const char *s, uint8_t out[16]);

/* Checks one PushItem (prefix names it in the message, e.g. "items[3]"); writes
 * a message and returns false when it is bad. Push and Transact use it. */
bool qn_push_item_ok(const struct qn_config *cfg, const Queen__V1__PushItem *it, const char *prefix,
                     char *buf, size_t cap);

/* Writes into buf why `s` is not a lease id for `what` (a lease id is the UUID a
 * Pop or Consume answered with), or returns false when it is one. Empty is
 * invalid unless allow_empty. */
bool qn_lease_problem(const char *s, const char *what, bool allow_empty, char *buf, size_t cap);

/* Validates one AckItem (i names it): writes a message into buf and returns
 * QN_EBADREQUEST when bad, QN_OK when good. */
int qn_ack_item_check(const Queen__V1__AckItem *it, size_t i, char *buf, size_t cap);

/* Validates a whole AckRequest (item count, group name, every item) as the Ack
 * RPC does, for Ack and Consume's in-band acks; false with a message naming
 * the field. */
bool qn_ack_request_ok(const struct qn_config *cfg, const Queen__V1__AckRequest *req, char *why,
                       size_t cap);

#endif
