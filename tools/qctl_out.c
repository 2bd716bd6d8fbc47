/*
 * qctl_out.c - queenctl's output (see qctl.h): JSON lines, the protobuf-to-JSON
 * mapping, printable text, times, aligned tables, the progress line on stderr.
 *
 * Does not: decide formats per command (the command files do).
 * Invariants:
 *   1. JSON output is one compact value per line on stdout, flushed per value.
 *   2. text printed for people never carries raw control characters or invalid
 *      UTF-8 (escaped as \xNN).
 *   3. a table holds at most TABLE_MAX_COLS columns; a row is printed only whole.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qctl.h"
#include "queen/b64.h"
#include "queen/error.h"

#define TABLE_MAX_COLS 12
/* ---------------------------------------------------------------- output */

bool qctl_json(const struct qctl *q)
{
    return q->g.output == QCTL_OUT_JSON;
}

int qctl_emit(json_t *v)
{
    if (v == NULL)
        return qctl_fail(QCTL_FAIL, "out of memory");
    int rc = json_dumpf(v, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(v);
    if (rc != 0 || putchar('\n') == EOF || fflush(stdout) != 0)
        return qctl_fail(QCTL_FAIL, "cannot write to standard output: %s", strerror(errno));
    return QCTL_OK;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 when invalid. */
static size_t utf8_seq(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t min, cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

static bool utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

json_t *qctl_json_text(const char *s, size_t len)
{
    const uint8_t *b = (const uint8_t *)s;
    if (utf8_valid(b, len))
        return json_stringn(s, len);
    /* Each invalid byte becomes U+FFFD (3 bytes). */
    char *fixed = malloc(len * 3 + 1);
    if (fixed == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(b + i, len - i);
        if (k == 0) {
            memcpy(fixed + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(fixed + o, b + i, k);
            o += k;
            i += k;
        }
    }
    json_t *v = json_stringn(fixed, o);
    free(fixed);
    return v;
}

long qctl_b64_decode(const char *s, size_t len, uint8_t *out, size_t *bad)
{
    size_t n = len;
    while (n > 0 && len - n < 2 && s[n - 1] == '=')
        n--;
    if (n != len && len % 4 != 0) {
        *bad = len;
        return -1;
    }
    enum qn_b64_alphabet alpha = memchr(s, '-', n) || memchr(s, '_', n) ? QN_B64_URL : QN_B64_STD;
    size_t cap = len / 4 * 3 + 3;
    long got = qn_b64_decode(alpha, QN_B64_NOPAD, s, n, out, cap);
    if (got >= 0)
        return got;
    /* find the first character the decoder refuses */
    struct qn_b64_dec d;
    size_t o = 0;
    qn_b64_dec_init(&d, alpha, QN_B64_NOPAD);
    for (*bad = 0; *bad < n; (*bad)++) {
        size_t k = 0;
        if (qn_b64_dec_feed(&d, (const uint8_t *)s + *bad, 1, out + o, cap - o, &k) != QN_OK)
            return -1;
        o += k;
    }
    *bad = n == 0 ? 0 : n - 1; /* the tail: a lone character or non-zero unused bits */
    return -1;
}

static char *b64(const uint8_t *src, size_t len)
{
    char *out = malloc(qn_b64_encoded_len(len, true) + 1);
    if (out != NULL)
        qn_b64_encode(QN_B64_STD, true, src, len, out);
    return out;
}

/* One value of field f at p (a pointer to the field's storage). */
static json_t *pb_value(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
        uint64_t v = *(const uint64_t *)p;
        return v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
    }
    case PROTOBUF_C_TYPE_FLOAT:
        return json_real(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_real(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        return ev != NULL ? json_string(ev->name) : json_integer(v);
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return s != NULL ? qctl_json_text(s, strlen(s)) : json_string("");
    }
    case PROTOBUF_C_TYPE_BYTES:
        return NULL; /* handled by the caller: two keys */
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(const ProtobufCMessage *const *)p;
        return m != NULL ? qctl_pb_json(m) : json_null();
    }
    }
    return json_null();
}

static size_t field_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

/* Sets "name" and "name_b64" for a bytes value. */
static int set_bytes(json_t *o, const char *name, const ProtobufCBinaryData *b)
{
    char key[128];
    const char *bytes = b->len > 0 ? (const char *)b->data : "";
    json_t *text = utf8_valid(b->data, b->len) ? json_stringn(bytes, b->len) : json_null();
    if (json_object_set_new(o, name, text) != 0)
        return -1;
    char *enc = b64(b->data, b->len);
    if (enc == NULL)
        return -1;
    snprintf(key, sizeof key, "%s_b64", name);
    int rc = json_object_set_new(o, key, json_string(enc));
    free(enc);
    return rc;
}

json_t *qctl_pb_json(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
            if (which != f->id)
                continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)p;
            json_t *a = json_array();
            if (a == NULL || json_object_set_new(o, f->name, a) != 0)
                goto fail;
            for (size_t k = 0; k < n; k++) {
                const void *e = arr + k * field_size(f);
                json_t *v;
                if (f->type == PROTOBUF_C_TYPE_BYTES) {
                    const ProtobufCBinaryData *b = e;
                    char *enc = b64(b->data, b->len);
                    v = enc != NULL ? json_string(enc) : NULL;
                    free(enc);
                } else {
                    v = pb_value(f, e);
                }
                if (v == NULL || json_array_append_new(a, v) != 0)
                    goto fail;
            }
            continue;
        }
        if (f->label == PROTOBUF_C_LABEL_OPTIONAL && !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            f->quantifier_offset != 0 &&
            !*(const protobuf_c_boolean *)(base + f->quantifier_offset))
            continue;
        if (f->type == PROTOBUF_C_TYPE_BYTES) {
            if (set_bytes(o, f->name, p) != 0)
                goto fail;
            continue;
        }
        json_t *v = pb_value(f, p);
        if (v == NULL || json_object_set_new(o, f->name, v) != 0)
            goto fail;
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

void qctl_put_text(FILE *f, const uint8_t *s, size_t len, size_t max)
{
    size_t shown = 0;
    for (size_t i = 0; i < len;) {
        if (max != 0 && shown >= max) {
            fputs("...", f);
            return;
        }
        size_t k = utf8_seq(s + i, len - i);
        if (k == 1 && (s[i] < 0x20 || s[i] == 0x7F || s[i] == '\\')) {
            if (s[i] == '\\')
                fputs("\\\\", f);
            else
                fprintf(f, "\\x%02x", s[i]);
            i++;
        } else if (k == 0) {
            fprintf(f, "\\x%02x", s[i]);
            i++;
        } else {
            fwrite(s + i, 1, k, f);
            i += k;
        }
        shown++;
    }
}

void qctl_time_text(int64_t us, char out[32])
{
    if (us <= 0) {
        snprintf(out, 32, "-");
        return;
    }
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, 32, "%" PRId64, us);
}

/* ---------------------------------------------------------------- tables */

struct qctl_table {
    unsigned ncols;
    size_t nrows, cap;
    char **cells; /* nrows * ncols strings */
    size_t width[TABLE_MAX_COLS];
    char *row[TABLE_MAX_COLS]; /* the row being filled by qctl_table_cell */
    unsigned nrow;             /* cells of it filled */
    bool nomem;
};

static void table_add(struct qctl_table *t, char **row)
{
    if (t->nrows == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        char **nc = realloc(t->cells, ncap * t->ncols * sizeof *nc);
        if (nc == NULL) {
            t->nomem = true;
            for (unsigned i = 0; i < t->ncols; i++)
                free(row[i]);
            return;
        }
        t->cells = nc;
        t->cap = ncap;
    }
    for (unsigned i = 0; i < t->ncols; i++) {
        t->cells[t->nrows * t->ncols + i] = row[i];
        if (row[i] == NULL) {
            t->nomem = true;
            continue;
        }
        size_t w = 0; /* display width: count UTF-8 lead bytes */
        for (const char *c = row[i]; *c; c++)
            w += ((unsigned char)*c & 0xC0) != 0x80;
        if (w > t->width[i])
            t->width[i] = w;
    }
    t->nrows++;
}

struct qctl_table *qctl_table_new(unsigned ncols, ...)
{
    if (ncols == 0 || ncols > TABLE_MAX_COLS)
        return NULL;
    struct qctl_table *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->ncols = ncols;
    char *row[TABLE_MAX_COLS];
    va_list ap;
    va_start(ap, ncols);
    for (unsigned i = 0; i < ncols; i++) {
        const char *h = va_arg(ap, const char *);
        row[i] = strdup(h);
    }
    va_end(ap);
    table_add(t, row);
    return t;
}

void qctl_table_cell(struct qctl_table *t, const char *fmt, ...)
{
    if (t == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&t->row[t->nrow], fmt, ap) < 0)
        t->row[t->nrow] = NULL;
    va_end(ap);
    if (++t->nrow == t->ncols) {
        table_add(t, t->row);
        t->nrow = 0;
    }
}

int qctl_table_print(struct qctl_table *t)
{
    if (t == NULL)
        return qctl_fail(QCTL_FAIL, "out of memory");
    int rc = QCTL_OK;
    if (t->nomem)
        rc = qctl_fail(QCTL_FAIL, "out of memory");
    for (size_t r = 0; rc == QCTL_OK && r < t->nrows; r++) {
        for (unsigned i = 0; i < t->ncols; i++) {
            const char *cell = t->cells[r * t->ncols + i];
            size_t w = 0;
            for (const char *c = cell; *c; c++)
                w += ((unsigned char)*c & 0xC0) != 0x80;
            fputs(cell, stdout);
            if (i + 1 < t->ncols)
                for (size_t k = w; k < t->width[i] + 2; k++)
                    putchar(' ');
        }
        putchar('\n');
    }
    if (t->nrow != 0 && rc == QCTL_OK)
        rc = qctl_fail(QCTL_FAIL, "internal error: a table row is incomplete");
    if (rc == QCTL_OK && fflush(stdout) != 0)
        rc = qctl_fail(QCTL_FAIL, "cannot write to standard output: %s", strerror(errno));
    for (size_t k = 0; k < t->nrows * t->ncols; k++)
        free(t->cells[k]);
    for (unsigned k = 0; k < t->nrow; k++)
        free(t->row[k]);
    free(t->cells);
    free(t);
    return rc;
}

/* ---------------------------------------------------------------- progress */

void qctl_progress_init(struct qctl_progress *p, int want)
{
    memset(p, 0, sizeof *p);
    p->tty = isatty(STDERR_FILENO);
    p->on = want > 0 || (want == 0 && p->tty);
    p->start = p->last = qctl_now_s();
}

static void group3(uint64_t v, char *out, size_t cap)
{
    char raw[32];
    int n = snprintf(raw, sizeof raw, "%" PRIu64, v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = raw[i];
    }
    out[o] = '\0';
}

void qctl_progress(struct qctl_progress *p, const char *what, uint64_t done, const char *unit,
                   const char *extra, bool final)
{
    if (!p->on)
        return;
    double now = qctl_now_s();
    double every = p->tty ? 0.2 : 1.0;
    if (!final && now - p->last < every)
        return;
    p->last = now;
    double el = now - p->start;
    char n[40], rate[40];
    group3(done, n, sizeof n);
    group3(el > 0 ? (uint64_t)(done / el) : 0, rate, sizeof rate);
    fprintf(stderr, "%s%s: %s %s, %s %s/s, %.1f s elapsed%s%s", p->tty ? "\r\033[K" : "", what, n,
            unit, rate, unit, el, extra != NULL ? extra : "", p->tty && !final ? "" : "\n");
    fflush(stderr);
    p->drawn = p->tty && !final;
}
