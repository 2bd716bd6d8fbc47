/*
 * rpc/validate.c - request validation shared by the services (see validate.h).
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "queen/error.h"
#include "queen/frame.h"
#include "queen/ids.h"
#include "rpc/validate.h"

#define ACK_ERROR_MAX 4096

const char *qn_or_default(const char *s, const char *dflt)
{
    return s == NULL || *s == '\0' ? dflt : s;
}

/* Length of the valid UTF-8 sequence starting at p (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        min = 0x80;
        c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        min = 0x800;
        c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        min = 0x10000;
        c &= 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    return len;
}

bool qn_text_ok(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (p[i] == 0)
            return false;
        size_t k = utf8_seq(p + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

bool qn_name_problem(const char *s, const char *what, bool allow_empty, char *buf, size_t cap)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0) {
        if (allow_empty)
            return false;
        snprintf(buf, cap, "%s is required", what);
        return true;
    }
    if (n > QN_NAME_MAX) {
        snprintf(buf, cap, "%s is longer than %d bytes", what, QN_NAME_MAX);
        return true;
    }
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x20 || p[i] == 0x7F) {
            snprintf(buf, cap, "%s contains a control character at byte %zu", what, i);
            return true;
        }
        size_t k = utf8_seq(p + i, n - i);
        if (k == 0) {
            snprintf(buf, cap, "%s is not valid UTF-8 at byte %zu", what, i);
            return true;
        }
        i += k;
    }
    return false;
}

bool qn_valid_name(const char *s)
{
    char buf[160];
    return !qn_name_problem(s, "name", false, buf, sizeof buf);
}

bool qn_parse_uuid_str(const char *s, uint8_t out[16])
{
    return s != NULL && qn_uuid_parse(s, strlen(s), out) == QN_OK;
}

bool qn_push_item_ok(const struct qn_config *cfg, const Queen__V1__PushItem *it, const char *prefix,
                     char *msg, size_t cap)
{
    char what[64], why[200];
    /* Checked without formatting first: this runs for every pushed message, and
     * the messages are only needed when something is wrong. */
    if (qn_name_problem(it->queue, "queue", false, why, sizeof why)) {
        snprintf(what, sizeof what, "%s.queue", prefix);
        qn_name_problem(it->queue, what, false, msg, cap);
        return false;
    }
    if (qn_name_problem(it->partition, "partition", true, why, sizeof why)) {
        snprintf(what, sizeof what, "%s.partition", prefix);
        qn_name_problem(it->partition, what, true, msg, cap);
        return false;
    }
    if (it->payload.len == 0) {
        snprintf(msg, cap, "%s.payload is empty", prefix);
        return false;
    }
    if (it->payload.len > (size_t)cfg->max_payload_bytes) {
        snprintf(msg, cap, "%s.payload is %zu bytes (the limit is %lld)", prefix, it->payload.len,
                 (long long)cfg->max_payload_bytes);
        return false;
    }
    size_t tl = it->transaction_id ? strlen(it->transaction_id) : 0;
    if (tl > QN_FRAME_TXN_MAX) {
        snprintf(msg, cap, "%s.transaction_id is %zu bytes (the limit is %u)", prefix, tl,
                 QN_FRAME_TXN_MAX);
        return false;
    }
    uint8_t tid[16];
    if (it->trace_id && *it->trace_id && !qn_parse_uuid_str(it->trace_id, tid)) {
        snprintf(msg, cap, "%s.trace_id is not a UUID", prefix);
        return false;
    }
    return true;
}

bool qn_lease_problem(const char *s, const char *what, bool allow_empty, char *buf, size_t cap)
{
    uint8_t u[16];
    if (s == NULL || *s == '\0') {
        if (allow_empty)
            return false;
        snprintf(buf, cap, "%s is required", what);
        return true;
    }
    if (qn_uuid_parse(s, strlen(s), u) != QN_OK) {
        snprintf(buf, cap,
                 "%s is not a lease id: expected the UUID a Pop or Consume batch carries "
                 "(36 characters, xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                 what);
        return true;
    }
    return false;
}

int qn_ack_item_check(const Queen__V1__AckItem *it, size_t i, char *buf, size_t cap)
{
    uint8_t pid[16];
    if (!qn_parse_uuid_str(it->partition_id, pid)) {
        snprintf(buf, cap, "items[%zu].partition_id is not a UUID", i);
        return QN_EBADREQUEST;
    }
    switch (it->target_case) {
    case QUEEN__V1__ACK_ITEM__TARGET_TRANSACTION_ID:
        if (it->transaction_id == NULL || *it->transaction_id == '\0') {
            snprintf(buf, cap, "items[%zu].transaction_id is empty", i);
            return QN_EBADREQUEST;
        }
        if (strlen(it->transaction_id) > 65535) {
            snprintf(buf, cap, "items[%zu].transaction_id is longer than 65535 bytes", i);
            return QN_EBADREQUEST;
        }
        break;
    case QUEEN__V1__ACK_ITEM__TARGET_OFFSET:
        if (it->offset < 0) {
            snprintf(buf, cap, "items[%zu].offset is negative", i);
            return QN_EBADREQUEST;
        }
        break;
    default:
        snprintf(buf, cap, "items[%zu] names no message: set transaction_id or offset", i);
        return QN_EBADREQUEST;
    }
    if ((int)it->status < 0 || it->status > QUEEN__V1__ACK_STATUS__ACK_STATUS_DLQ) {
        snprintf(buf, cap, "items[%zu].status %d is unknown", i, (int)it->status);
        return QN_EBADREQUEST;
    }
    if (it->error && strlen(it->error) > ACK_ERROR_MAX) {
        snprintf(buf, cap, "items[%zu].error is longer than %d bytes", i, ACK_ERROR_MAX);
        return QN_EBADREQUEST;
    }
    char what[48];
    snprintf(what, sizeof what, "items[%zu].lease_id", i);
    if (qn_lease_problem(it->lease_id, what, true, buf, cap))
        return QN_EBADREQUEST;
    return QN_OK;
}

bool qn_ack_request_ok(const struct qn_config *cfg, const Queen__V1__AckRequest *req, char *why,
                       size_t cap)
{
    if (req->n_items == 0) {
        snprintf(why, cap, "items is empty: an ack needs at least one item");
        return false;
    }
    if (req->n_items > (size_t)cfg->max_push_items) {
        snprintf(why, cap, "too many items: %zu (the limit is %lld)", req->n_items,
                 (long long)cfg->max_push_items);
        return false;
    }
    if (qn_name_problem(req->consumer_group, "consumer_group", true, why, cap))
        return false;
    for (size_t i = 0; i < req->n_items; i++)
        if (qn_ack_item_check(req->items[i], i, why, cap) != QN_OK)
            return false;
    return true;
}
