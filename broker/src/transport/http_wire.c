/*
 * transport/http_wire.c - the HTTP/1.1 request head parser and the gRPC-Web
 * framing helpers (see http_wire.h).
 *
 * Does: one pass over the head, line by line, refusing anything RFC 9112 lets
 * a server refuse where being lenient could let two parsers disagree on where
 * a request ends (bare LF, obs-fold, space before the colon, Transfer-Encoding
 * with or without Content-Length, conflicting Content-Lengths); the gRPC-Web
 * trailer frame.
 * Does not: allocate, decode percent-escapes in the target (routes match it as
 * sent), read a body.
 *
 * Invariants:
 *   1. Nothing is read at or past buf + len, and nothing past max bytes of it.
 *   2. A head is reported complete only when every line of it was checked.
 */
#include <string.h>
#include <strings.h>

#include "queen/error.h"
#include "transport/http_wire.h"

/* ---------------------------------------------------------------- request head */

static bool is_tchar(uint8_t c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar, SP, HTAB, obs-text */
static bool is_value_char(uint8_t c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static bool eq_token(const char *p, size_t len, const char *lit)
{
    return strlen(lit) == len && strncasecmp(p, lit, len) == 0;
}

/* A comma-separated list value contains token lit (case-insensitive). */
static bool list_has(const char *v, size_t len, const char *lit)
{
    size_t i = 0;
    while (i < len) {
        while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < len && v[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
            end--;
        if (end > start && eq_token(v + start, end - start, lit))
            return true;
    }
    return false;
}

static int fail(int *status, int code)
{
    *status = code;
    return QN_EBADREQUEST;
}

static int parse_request_line(const char *p, size_t len, size_t max, struct qn_http_head *h,
                              int *status)
{
    size_t i = 0;
    while (i < len && is_tchar((uint8_t)p[i]))
        i++;
    if (i == 0 || i >= len || p[i] != ' ')
        return fail(status, 400);
    h->method = p;
    h->method_len = i;
    size_t t = ++i;
    while (i < len && (uint8_t)p[i] > 0x20 && (uint8_t)p[i] < 0x7f)
        i++;
    if (i == t || i >= len || p[i] != ' ')
        return fail(status, 400);
    if (i - t > max / 2)
        return fail(status, 414);
    h->target = p + t;
    h->target_len = i - t;
    const char *v = p + i + 1;
    size_t vlen = len - i - 1;
    if (vlen != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9')
        return fail(status, 400);
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1'))
        return fail(status, 505);
    h->minor = v[7] - '0';
    return QN_OK;
}

static int parse_field(const char *p, size_t len, struct qn_http_head *h, int *status)
{
    if (p[0] == ' ' || p[0] == '\t')
        return fail(status, 400); /* obs-fold */
    size_t i = 0;
    while (i < len && is_tchar((uint8_t)p[i]))
        i++;
    if (i == 0 || i >= len || p[i] != ':')
        return fail(status, 400); /* no name, or whitespace before the colon */
    size_t name_len = i++;
    while (i < len && (p[i] == ' ' || p[i] == '\t'))
        i++;
    size_t vs = i;
    for (; i < len; i++)
        if (!is_value_char((uint8_t)p[i]))
            return fail(status, 400);
    size_t ve = len;
    while (ve > vs && (p[ve - 1] == ' ' || p[ve - 1] == '\t'))
        ve--;
    if (h->nfields == QN_HTTP_MAX_FIELDS)
        return fail(status, 431);
    h->fields[h->nfields++] = (struct qn_http_field){p, name_len, p + vs, ve - vs};
    return QN_OK;
}

static int derive(struct qn_http_head *h, int *status)
{
    bool te = false, close = false, keep = false;
    h->content_length = -1;
    h->expect_continue = false;
    for (size_t i = 0; i < h->nfields; i++) {
        const struct qn_http_field *f = &h->fields[i];
        if (eq_token(f->name, f->name_len, "content-length")) {
            if (f->value_len == 0 || f->value_len > 18)
                return fail(status, 400);
            int64_t n = 0;
            for (size_t k = 0; k < f->value_len; k++) {
                if (f->value[k] < '0' || f->value[k] > '9')
                    return fail(status, 400);
                n = n * 10 + (f->value[k] - '0');
            }
            if (h->content_length >= 0 && h->content_length != n)
                return fail(status, 400);
            h->content_length = n;
        } else if (eq_token(f->name, f->name_len, "transfer-encoding")) {
            te = true;
        } else if (eq_token(f->name, f->name_len, "connection")) {
            close = close || list_has(f->value, f->value_len, "close");
            keep = keep || list_has(f->value, f->value_len, "keep-alive");
        } else if (eq_token(f->name, f->name_len, "expect")) {
            h->expect_continue = eq_token(f->value, f->value_len, "100-continue");
        }
    }
    if (te)
        return fail(status, h->content_length >= 0 ? 400 : 411);
    h->keep_alive = !close && (h->minor == 1 || keep);
    return QN_OK;
}

int qn_http_parse_head(const uint8_t *buf, size_t len, size_t max, struct qn_http_head *head,
                       bool *complete, int *status)
{
    const char *b = (const char *)buf;
    size_t lim = len < max ? len : max;
    size_t pos = 0;
    bool seen_request_line = false;
    *complete = false;
    head->nfields = 0;
    while (pos < lim) {
        const char *nl = memchr(b + pos, '\n', lim - pos);
        if (nl == NULL)
            break;
        size_t end = (size_t)(nl - b); /* index of the LF */
        if (end == pos || b[end - 1] != '\r')
            return fail(status, 400); /* a bare LF */
        size_t line_len = end - 1 - pos;
        if (memchr(b + pos, '\r', line_len) != NULL)
            return fail(status, 400); /* a CR inside a line */
        if (line_len == 0) {
            if (!seen_request_line) {
                /* RFC 9112 2.2: empty lines before the request line are ignored,
                 * a few of them */
                if (pos >= 4)
                    return fail(status, 400);
                pos = end + 1;
                continue;
            }
            head->head_len = end + 1;
            *complete = true;
            return derive(head, status);
        }
        int rc = seen_request_line ? parse_field(b + pos, line_len, head, status)
                                   : parse_request_line(b + pos, line_len, max, head, status);
        if (rc != QN_OK)
            return rc;
        seen_request_line = true;
        pos = end + 1;
    }
    if (len >= max)
        return fail(status, !seen_request_line && lim > max / 2 ? 414 : 431);
    return QN_OK;
}

const char *qn_http_field(const struct qn_http_head *head, const char *name, size_t *len)
{
    for (size_t i = 0; i < head->nfields; i++) {
        const struct qn_http_field *f = &head->fields[i];
        if (eq_token(f->name, f->name_len, name)) {
            *len = f->value_len;
            return f->value;
        }
    }
    *len = 0;
    return NULL;
}

const char *qn_http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

/* ---------------------------------------------------------------- gRPC-Web */

enum qn_grpcweb_mode qn_grpcweb_mode_of(const char *v, size_t len)
{
    if (v == NULL)
        return QN_GRPCWEB_NONE;
    size_t n = 0;
    while (n < len && v[n] != ';' && v[n] != ' ' && v[n] != '\t')
        n++;
    static const char web[] = "application/grpc-web";
    static const char text[] = "application/grpc-web-text";
    const char *sub = NULL;
    size_t sublen = 0;
    enum qn_grpcweb_mode mode;
    if (n >= sizeof text - 1 && strncasecmp(v, text, sizeof text - 1) == 0) {
        mode = QN_GRPCWEB_TEXT;
        sub = v + sizeof text - 1;
        sublen = n - (sizeof text - 1);
    } else if (n >= sizeof web - 1 && strncasecmp(v, web, sizeof web - 1) == 0) {
        mode = QN_GRPCWEB_BINARY;
        sub = v + sizeof web - 1;
        sublen = n - (sizeof web - 1);
    } else {
        return QN_GRPCWEB_NONE;
    }
    if (sublen == 0 || eq_token(sub, sublen, "+proto"))
        return mode;
    if (sub[0] != '+')
        return QN_GRPCWEB_NONE; /* application/grpc-webfoo */
    return QN_GRPCWEB_OTHER;
}

size_t qn_grpcweb_trailer_frame(const char *code, const char *message, uint8_t *out, size_t cap)
{
    size_t clen = strlen(code), mlen = message ? strlen(message) : 0;
    size_t body = sizeof "grpc-status:\r\n" - 1 + clen;
    if (message != NULL)
        body += sizeof "grpc-message:\r\n" - 1 + mlen;
    if (cap < 5 || body > cap - 5 || body > UINT32_MAX)
        return 0;
    out[0] = 0x80;
    out[1] = (uint8_t)(body >> 24);
    out[2] = (uint8_t)(body >> 16);
    out[3] = (uint8_t)(body >> 8);
    out[4] = (uint8_t)body;
    uint8_t *p = out + 5;
    memcpy(p, "grpc-status:", 12);
    p += 12;
    memcpy(p, code, clen);
    p += clen;
    memcpy(p, "\r\n", 2);
    p += 2;
    if (message != NULL) {
        memcpy(p, "grpc-message:", 13);
        p += 13;
        memcpy(p, message, mlen);
        p += mlen;
        memcpy(p, "\r\n", 2);
        p += 2;
    }
    return (size_t)(p - out);
}
