/*
 * log.c - see log.h. Writes whole lines with one fwrite so lines from different
 * threads never interleave mid-line.
 *
 * Two formats (QUEEN_LOG_FORMAT):
 *   text  "2026-11-30T04:47:23.123Z INFO listening h2c_port=6632 tls_port=-1"
 *   json  {"time":"2026-11-30T04:47:23.123Z","level":"info","message":"listening",
 *          "h2c_port":6632,"tls_port":-1}
 * A JSON line is written with jansson: control characters are escaped, bytes
 * that are not UTF-8 become U+FFFD, so every line parses. The message's
 * trailing key=value parts (values bare, or in double quotes) become fields:
 * integers and decimals as JSON numbers, the rest as strings; a field named
 * time, level or message gets a trailing "_". When the tail of a message is
 * not a clean run of key=value parts the whole text stays the message and the
 * line has no fields (nothing is ever dropped).
 *
 * The threshold and the format are process-wide settings (set once at start,
 * before any thread logs), the one place in broker/ with state at file scope.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <jansson.h>

#include "log.h"

#define LINE_MAX_BYTES 2048
#define MAX_FIELDS 32

static enum qn_log_level threshold = QN_LOG_INFO;
static enum qn_log_format format = QN_LOG_TEXT;

void qn_log_set_level(enum qn_log_level level)
{
    threshold = level;
}

void qn_log_set_level_name(const char *name)
{
    if (strcmp(name, "debug") == 0)
        threshold = QN_LOG_DEBUG;
    else if (strcmp(name, "warn") == 0)
        threshold = QN_LOG_WARN;
    else if (strcmp(name, "error") == 0)
        threshold = QN_LOG_ERROR;
    else
        threshold = QN_LOG_INFO;
}

void qn_log_set_format(enum qn_log_format f)
{
    format = f;
}

void qn_log_set_format_name(const char *name)
{
    format = strcmp(name, "json") == 0 ? QN_LOG_JSON : QN_LOG_TEXT;
}

int qn_log_enabled(enum qn_log_level level)
{
    return level >= threshold;
}

/* ---------------------------------------------------------------- fields */

struct kv {
    const char *key, *val;
    size_t klen, vlen;
    bool quoted;
};

static bool key_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || c == '_' || (!first && ((c >= '0' && c <= '9') || c == '.'));
}

/* A key=value part starts at s (a key, then '='). */
static bool is_pair_start(const char *s)
{
    if (!key_char(s[0], true))
        return false;
    size_t i = 1;
    while (key_char(s[i], false))
        i++;
    return s[i] == '=';
}

/* Parses the run of key=value parts that makes up the rest of s. Returns the
 * count, or -1 when the rest is not such a run. */
static int parse_pairs(const char *s, struct kv *kv, int cap)
{
    int n = 0;
    while (*s != '\0') {
        if (n == cap || !is_pair_start(s))
            return -1;
        struct kv *p = &kv[n++];
        p->key = s;
        while (*s != '=')
            s++;
        p->klen = (size_t)(s - p->key);
        s++;
        if (*s == '"') {
            /* quoted: up to the next quote followed by a space or the end */
            const char *q = s + 1;
            while (*q != '\0' && !(q[0] == '"' && (q[1] == ' ' || q[1] == '\0')))
                q++;
            if (*q != '"')
                return -1;
            p->val = s + 1;
            p->vlen = (size_t)(q - s - 1);
            p->quoted = true;
            s = q + 1;
        } else {
            p->val = s;
            while (*s != ' ' && *s != '\0')
                s++;
            p->vlen = (size_t)(s - p->val);
            p->quoted = false;
        }
        if (*s == ' ')
            s++;
        else if (*s != '\0')
            return -1;
    }
    return n;
}

/* Copies len bytes of s as UTF-8, each invalid byte replaced by U+FFFD. out
 * holds at least 3 * len + 1 bytes; NUL-terminated. */
static void utf8_clean(const char *s, size_t len, char *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0, i = 0;
    while (i < len) {
        unsigned char c = p[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && i + n <= len;
        for (size_t k = 1; ok && k < n; k++)
            ok = (p[i + k] & 0xC0) == 0x80;
        if (ok && n == 2)
            ok = c >= 0xC2;
        if (ok && n == 3) {
            unsigned cp = (c & 0x0Fu) << 12 | (p[i + 1] & 0x3Fu) << 6 | (p[i + 2] & 0x3Fu);
            ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
        }
        if (ok && n == 4) {
            unsigned cp = (c & 0x07u) << 18 | (p[i + 1] & 0x3Fu) << 12 | (p[i + 2] & 0x3Fu) << 6 |
                          (p[i + 3] & 0x3Fu);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (!ok) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, p + i, n);
        o += n;
        i += n;
    }
    out[o] = '\0';
}

static json_t *clean_string(const char *s, size_t len)
{
    char buf[3 * LINE_MAX_BYTES + 1];
    if (len > LINE_MAX_BYTES)
        len = LINE_MAX_BYTES;
    utf8_clean(s, len, buf);
    return json_string(buf);
}

/* An integer or decimal as a JSON number, else NULL. */
static json_t *number_of(const char *s, size_t len)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return NULL;
    size_t i = s[0] == '-' ? 1 : 0, digits = 0, dots = 0;
    for (; i < len; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            digits++;
        else if (s[i] == '.' && digits > 0 && dots == 0)
            dots++;
        else
            return NULL;
    }
    if (digits == 0 || s[len - 1] == '.' || digits > 18)
        return NULL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return dots ? json_real(strtod(buf, NULL)) : json_integer(strtoll(buf, NULL, 10));
}

/* The JSON line for a formatted message, or NULL (out of memory). */
static char *json_line(const char *stamp, enum qn_log_level level, const char *msg)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    json_object_set_new(o, "time", json_string(stamp));
    json_object_set_new(o, "level", json_string(names[level]));
    /* the fields start at the first key=value part that begins a word */
    const char *start = NULL;
    for (const char *p = msg; *p != '\0'; p++)
        if ((p == msg || p[-1] == ' ') && is_pair_start(p)) {
            start = p;
            break;
        }
    struct kv kv[MAX_FIELDS];
    int n = start ? parse_pairs(start, kv, MAX_FIELDS) : -1;
    size_t mlen = n >= 0 ? (size_t)(start - msg) : strlen(msg);
    while (mlen > 0 && msg[mlen - 1] == ' ')
        mlen--;
    json_object_set_new(o, "message", clean_string(msg, mlen));
    for (int i = 0; i < n; i++) {
        char key[80];
        size_t klen = kv[i].klen < 64 ? kv[i].klen : 64;
        memcpy(key, kv[i].key, klen);
        key[klen] = '\0';
        if (strcmp(key, "time") == 0 || strcmp(key, "level") == 0 || strcmp(key, "message") == 0)
            memcpy(key + klen, "_", 2);
        json_t *v = kv[i].quoted ? NULL : number_of(kv[i].val, kv[i].vlen);
        if (v == NULL)
            v = clean_string(kv[i].val, kv[i].vlen);
        json_object_set_new(o, key, v);
    }
    char *line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return line;
}

void qn_log(enum qn_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (level < threshold)
        return;
    char line[LINE_MAX_BYTES];
    char stamp[64];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000));
    int n = 0;
    if (format == QN_LOG_TEXT)
        n = snprintf(line, sizeof line, "%s %s ", stamp, names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    if (format == QN_LOG_JSON) {
        line[len] = '\0';
        char *j = json_line(stamp, level, line);
        if (j != NULL) {
            size_t jl = strlen(j);
            j[jl] = '\n'; /* over the NUL: written by length */
            fwrite(j, 1, jl + 1, stderr);
            free(j);
            return;
        }
        /* out of memory: the text line below still says what happened */
        char tmp[LINE_MAX_BYTES];
        int k = snprintf(tmp, sizeof tmp, "%s %s %s", stamp, names[level], line);
        len = k < 0 ? 0 : (size_t)k < sizeof tmp - 2 ? (size_t)k : sizeof tmp - 2;
        memcpy(line, tmp, len);
    }
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}
