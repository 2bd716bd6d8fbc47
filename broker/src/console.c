/*
 * console.c - the web console's files on the HTTP side port (see console.h).
 *
 * Does: look a path up in the files embedded from console/dist at build time
 * (cmake/embed.cmake, broker/CMakeLists.txt), answer them with their content
 * type, an entity tag (FNV-1a 64 of the bytes) and caching headers: the page
 * (index.html) is revalidated on every load ("no-cache"), the assets, whose
 * names carry a content hash (Vite), are cached for a year ("immutable"); an
 * If-None-Match that names the current tag gets 304 without the body.
 * Does not: fall back to the page for unknown paths (the console's routes are
 * URL fragments, so only "/" needs it), read the file system, compress.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "console.h"
#include "queen/error.h"

struct qn_embedded_file {
    const char *name;
    const uint8_t *data;
    size_t len;
};
extern const struct qn_embedded_file qn_console_files[];
extern const size_t qn_console_files_count;

struct qn_console {
    size_t n;
    char (*etags)[24]; /* "\"<16 hex>\"" per file */
    const struct qn_embedded_file *index;
};

static const struct {
    const char *ext;
    const char *type;
} types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".webp", "image/webp"},
    {".woff2", "font/woff2"},
    {".woff", "font/woff"},
    {".txt", "text/plain; charset=utf-8"},
};

static const char *type_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot != NULL && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int qn_console_new(struct qn_console **out)
{
    struct qn_console *c = calloc(1, sizeof *c);
    if (c == NULL)
        return QN_ENOMEM;
    c->n = qn_console_files_count;
    c->etags = calloc(c->n ? c->n : 1, sizeof *c->etags);
    if (c->etags == NULL) {
        free(c);
        return QN_ENOMEM;
    }
    for (size_t i = 0; i < c->n; i++) {
        const struct qn_embedded_file *f = &qn_console_files[i];
        snprintf(c->etags[i], sizeof c->etags[i], "\"%016llx\"",
                 (unsigned long long)fnv1a(f->data, f->len));
        if (strcmp(f->name, "index.html") == 0)
            c->index = f;
    }
    *out = c;
    return QN_OK;
}

void qn_console_free(struct qn_console *c)
{
    if (c == NULL)
        return;
    free(c->etags);
    free(c);
}

/* If-None-Match lists tag (or is "*"). */
static bool matches(const char *inm, const char *tag)
{
    if (inm == NULL)
        return false;
    if (strcmp(inm, "*") == 0)
        return true;
    size_t tl = strlen(tag);
    for (const char *p = strstr(inm, tag); p != NULL; p = strstr(p + 1, tag)) {
        char after = p[tl];
        if (after == '\0' || after == ',' || after == ' ')
            return true;
    }
    return false;
}

void qn_console_serve(void *ud, const struct qn_http_request *req, struct qn_http_response *resp)
{
    const struct qn_console *c = ud;
    const struct qn_embedded_file *f = NULL;
    size_t idx = 0;
    const char *path = req->path;
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) {
        f = c->index;
    } else if (strncmp(path, "/assets/", 8) == 0 && strstr(path, "..") == NULL) {
        for (size_t i = 0; i < c->n; i++)
            if (strcmp(qn_console_files[i].name, path + 1) == 0)
                f = &qn_console_files[i];
    }
    if (f == NULL) {
        resp->status = 404;
        snprintf(resp->content_type, sizeof resp->content_type, "text/plain; charset=utf-8");
        evbuffer_add_printf(resp->body, "not found\n");
        return;
    }
    idx = (size_t)(f - qn_console_files);
    const char *tag = c->etags[idx];
    qn_http_add_header(resp, "etag", tag);
    qn_http_add_header(resp, "cache-control",
                       f == c->index ? "no-cache" : "public, max-age=31536000, immutable");
    qn_http_add_header(resp, "x-content-type-options", "nosniff");
    if (matches(req->header(req, "if-none-match"), tag)) {
        resp->status = 304;
        return;
    }
    snprintf(resp->content_type, sizeof resp->content_type, "%s", type_of(f->name));
    evbuffer_add_reference(resp->body, f->data, f->len, NULL, NULL);
}
