/*
 * svc_util.h - private to broker/: helpers shared by the services: request
 * validation, status mapping from storage outcomes, id formatting.
 */
#ifndef QN_BROKER_SVC_UTIL_H
#define QN_BROKER_SVC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/store.h"
#include "transport/call.h"

#define QN_QUEUE_MODE "__QUEUE_MODE__"
#define QN_DEFAULT_PARTITION "Default"
#define QN_NAME_MAX 255

/* A name is 1..255 bytes of valid UTF-8 without control characters. */
bool qn_valid_name(const char *s);

/* NULL or "" -> dflt; else s. */
const char *qn_or_default(const char *s, const char *dflt);

/* Writes into buf (cap >= 160) why name `s` for `what` is invalid, or returns
 * false when it is valid. Empty is invalid unless allow_empty. */
bool qn_name_problem(const char *s, const char *what, bool allow_empty, char *buf, size_t cap);

/* gRPC status for a storage outcome. */
enum qn_grpc_code qn_grpc_from_store(int code);

/* Finishes call with the status and message of a failed storage call. */
void qn_finish_store_error(qn_call *call, const struct qn_store_status *st);

/* Parses "xxxxxxxx-…" into out; false when malformed. */
bool qn_parse_uuid_str(const char *s, uint8_t out[16]);

/* Microseconds since the Unix epoch, now. */
int64_t qn_now_us(void);

#endif
