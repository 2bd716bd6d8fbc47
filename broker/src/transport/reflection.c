/*
 * transport/reflection.c - gRPC server reflection over the embedded descriptor set (see
 * reflection.h).
 *
 * Does: read the FileDescriptorSet once at start with a small protobuf wire
 * reader (only the fields naming files, dependencies and symbols), keep a sorted
 * symbol table, answer ServerReflectionInfo requests one response per request.
 * The v1alpha service is the same handler: its messages are byte-identical to
 * v1's, so v1's generated descriptors decode and encode both.
 * Does not: depend on descriptor.proto's generated code; serve extensions (the
 * contract has none).
 *
 * Invariants:
 *   1. The index borrows the embedded bytes (static) and owns every string it
 *      made; a FileDescriptorProto served is the exact bytes of the set.
 *   2. Parsing is bounded: nesting depth MAX_DEPTH, varints 10 bytes, every length
 *      checked against what remains.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/reflection/v1/reflection.pb-c.h"
#include "log.h"
#include "queen/error.h"
#include "transport/reflection.h"
#include "transport/server.h"

/* The embedded set, made by cmake/embed_run.cmake. */
struct qn_embedded_file {
    const char *name;
    const uint8_t *data;
    size_t len;
};
extern const struct qn_embedded_file qn_descriptor_set[];
extern const size_t qn_descriptor_set_count;

#define MAX_DEPTH 32
#define MAX_NAME 1024 /* longest symbol or file name we index or look up */

/* ---------------------------------------------------------------- wire reader */

struct pb {
    const uint8_t *p;
    const uint8_t *end;
};

static bool pb_varint(struct pb *b, uint64_t *v)
{
    uint64_t out = 0;
    for (int shift = 0; shift < 70 && b->p < b->end; shift += 7) {
        uint8_t byte = *b->p++;
        out |= (uint64_t)(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0) {
            *v = out;
            return true;
        }
    }
    return false;
}

/* Next field. For length-delimited fields *sub is its payload. Returns 1 with a
 * field, 0 at the end, -1 on malformed input. */
static int pb_next(struct pb *b, uint32_t *field, struct pb *sub)
{
    if (b->p == b->end)
        return 0;
    uint64_t key, v;
    if (!pb_varint(b, &key) || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
        return -1;
    *field = (uint32_t)(key >> 3);
    sub->p = sub->end = NULL;
    switch (key & 7) {
    case 0:
        return pb_varint(b, &v) ? 1 : -1;
    case 1:
        if (b->end - b->p < 8)
            return -1;
        b->p += 8;
        return 1;
    case 2:
        if (!pb_varint(b, &v) || v > (uint64_t)(b->end - b->p))
            return -1;
        sub->p = b->p;
        sub->end = b->p + v;
        b->p += v;
        return 1;
    case 5:
        if (b->end - b->p < 4)
            return -1;
        b->p += 4;
        return 1;
    default:
        return -1; /* groups do not occur in descriptors */
    }
}

/* The string field `want` of message m (first occurrence), malloc'd, or NULL. */
static int pb_string(struct pb m, uint32_t want, char **out)
{
    uint32_t f;
    struct pb sub;
    int r;
    *out = NULL;
    while ((r = pb_next(&m, &f, &sub)) == 1) {
        if (f == want && sub.p != NULL) {
            size_t n = (size_t)(sub.end - sub.p);
            if (n > MAX_NAME)
                return QN_EINVAL;
            char *s = malloc(n + 1);
            if (s == NULL)
                return QN_ENOMEM;
            memcpy(s, sub.p, n);
            s[n] = '\0';
            *out = s;
            return QN_OK;
        }
    }
    return r < 0 ? QN_EINVAL : QN_OK;
}

/* ---------------------------------------------------------------- the index */

enum sym_kind { SYM_OTHER, SYM_MESSAGE };

struct symbol {
    char *name;
    size_t file;
    enum sym_kind kind;
};

struct file {
    char *name;
    const uint8_t *data;
    size_t len;
    char **deps;
    size_t ndeps;
};

struct qn_refl_index {
    struct file *files;
    size_t nfiles, capfiles;
    struct symbol *syms;
    size_t nsyms, capsyms;
    char **services;
    size_t nservices, capservices;
};

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return QN_OK;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *na = realloc(*arr, ncap * size);
    if (na == NULL)
        return QN_ENOMEM;
    *arr = na;
    *cap = ncap;
    return QN_OK;
}

/* Adds "scope.name" (or "name" at an empty scope) as a symbol; *full gets the
 * joined name (owned by the table). */
static int add_symbol(struct qn_refl_index *ix, const char *scope, const char *name, size_t file,
                      enum sym_kind kind, const char **full)
{
    size_t n = strlen(scope) + 1 + strlen(name) + 1;
    if (n > MAX_NAME)
        return QN_EINVAL;
    int rc = grow((void **)&ix->syms, &ix->capsyms, ix->nsyms, sizeof *ix->syms);
    if (rc != QN_OK)
        return rc;
    char *s = malloc(n);
    if (s == NULL)
        return QN_ENOMEM;
    if (scope[0])
        snprintf(s, n, "%s.%s", scope, name);
    else
        snprintf(s, n, "%s", name);
    ix->syms[ix->nsyms++] = (struct symbol){s, file, kind};
    if (full)
        *full = s;
    return QN_OK;
}

/* Adds the child field `field` of m whose own name is field 1, for every child. */
static int add_named_children(struct qn_refl_index *ix, struct pb m, uint32_t field,
                              const char *scope, size_t file)
{
    uint32_t f;
    struct pb sub;
    int r;
    while ((r = pb_next(&m, &f, &sub)) == 1) {
        if (f != field || sub.p == NULL)
            continue;
        char *name = NULL;
        int rc = pb_string(sub, 1, &name);
        if (rc == QN_OK && name != NULL)
            rc = add_symbol(ix, scope, name, file, SYM_OTHER, NULL);
        free(name);
        if (rc != QN_OK)
            return rc;
    }
    return r < 0 ? QN_EINVAL : QN_OK;
}

/* EnumDescriptorProto: the enum, and its values in the enum's enclosing scope. */
static int index_enum(struct qn_refl_index *ix, struct pb e, const char *scope, size_t file)
{
    char *name = NULL;
    int rc = pb_string(e, 1, &name);
    if (rc != QN_OK || name == NULL)
        return rc != QN_OK ? rc : QN_EINVAL;
    rc = add_symbol(ix, scope, name, file, SYM_OTHER, NULL);
    free(name);
    if (rc == QN_OK)
        rc = add_named_children(ix, e, 2, scope, file);
    return rc;
}

/* DescriptorProto: the message, its fields, oneofs, nested messages and enums. */
static int index_message(struct qn_refl_index *ix, struct pb m, const char *scope, size_t file,
                         int depth)
{
    if (depth > MAX_DEPTH)
        return QN_EINVAL;
    char *name = NULL;
    const char *full = NULL;
    int rc = pb_string(m, 1, &name);
    if (rc != QN_OK || name == NULL)
        return rc != QN_OK ? rc : QN_EINVAL;
    rc = add_symbol(ix, scope, name, file, SYM_MESSAGE, &full);
    free(name);
    if (rc != QN_OK)
        return rc;
    /* full stays valid: it is owned by the table and never moves. */
    rc = add_named_children(ix, m, 2, full, file); /* fields */
    if (rc == QN_OK)
        rc = add_named_children(ix, m, 8, full, file); /* oneofs */
    uint32_t f;
    struct pb sub;
    int r;
    while (rc == QN_OK && (r = pb_next(&m, &f, &sub)) == 1) {
        if (f == 3 && sub.p != NULL)
            rc = index_message(ix, sub, full, file, depth + 1);
        else if (f == 4 && sub.p != NULL)
            rc = index_enum(ix, sub, full, file);
    }
    return rc;
}

static int index_service(struct qn_refl_index *ix, struct pb svc, const char *scope, size_t file)
{
    char *name = NULL;
    const char *full = NULL;
    int rc = pb_string(svc, 1, &name);
    if (rc != QN_OK || name == NULL)
        return rc != QN_OK ? rc : QN_EINVAL;
    rc = add_symbol(ix, scope, name, file, SYM_OTHER, &full);
    free(name);
    if (rc != QN_OK)
        return rc;
    rc = add_named_children(ix, svc, 2, full, file); /* methods */
    if (rc != QN_OK)
        return rc;
    rc = grow((void **)&ix->services, &ix->capservices, ix->nservices, sizeof *ix->services);
    if (rc != QN_OK)
        return rc;
    char *copy = strdup(full);
    if (copy == NULL)
        return QN_ENOMEM;
    ix->services[ix->nservices++] = copy;
    return QN_OK;
}

static int index_file(struct qn_refl_index *ix, struct pb fd)
{
    int rc = grow((void **)&ix->files, &ix->capfiles, ix->nfiles, sizeof *ix->files);
    if (rc != QN_OK)
        return rc;
    size_t fi = ix->nfiles;
    struct file *file = &ix->files[fi];
    memset(file, 0, sizeof *file);
    file->data = fd.p;
    file->len = (size_t)(fd.end - fd.p);
    ix->nfiles++;
    rc = pb_string(fd, 1, &file->name);
    if (rc != QN_OK || file->name == NULL)
        return rc != QN_OK ? rc : QN_EINVAL;
    char *pkg = NULL;
    rc = pb_string(fd, 2, &pkg);
    if (rc != QN_OK)
        return rc;
    const char *scope = pkg ? pkg : "";
    uint32_t f;
    struct pb sub, it = fd;
    int r;
    size_t capdeps = 0;
    while (rc == QN_OK && (r = pb_next(&it, &f, &sub)) == 1) {
        if (sub.p == NULL)
            continue;
        switch (f) {
        case 3: { /* dependency */
            size_t n = (size_t)(sub.end - sub.p);
            rc = grow((void **)&file->deps, &capdeps, file->ndeps, sizeof *file->deps);
            if (rc != QN_OK || n > MAX_NAME) {
                rc = rc != QN_OK ? rc : QN_EINVAL;
                break;
            }
            char *d = malloc(n + 1);
            if (d == NULL) {
                rc = QN_ENOMEM;
                break;
            }
            memcpy(d, sub.p, n);
            d[n] = '\0';
            file->deps[file->ndeps++] = d;
            break;
        }
        case 4:
            rc = index_message(ix, sub, scope, fi, 0);
            break;
        case 5:
            rc = index_enum(ix, sub, scope, fi);
            break;
        case 6:
            rc = index_service(ix, sub, scope, fi);
            break;
        default:
            break;
        }
    }
    if (rc == QN_OK && r < 0)
        rc = QN_EINVAL;
    /* The package itself resolves to its first file (grpcurl asks for it). */
    if (rc == QN_OK && pkg != NULL && pkg[0] != '\0')
        rc = add_symbol(ix, "", pkg, fi, SYM_OTHER, NULL);
    free(pkg);
    return rc;
}

static int sym_cmp(const void *a, const void *b)
{
    const struct symbol *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c != 0)
        return c;
    return x->file < y->file ? -1 : x->file > y->file;
}

int qn_refl_index_build(const uint8_t *set, size_t len, struct qn_refl_index **out)
{
    struct qn_refl_index *ix = calloc(1, sizeof *ix);
    if (ix == NULL)
        return QN_ENOMEM;
    struct pb b = {set, set + len}, sub;
    uint32_t f;
    int r, rc = QN_OK;
    while (rc == QN_OK && (r = pb_next(&b, &f, &sub)) == 1)
        if (f == 1 && sub.p != NULL)
            rc = index_file(ix, sub);
    if (rc == QN_OK && r < 0)
        rc = QN_EINVAL;
    if (rc != QN_OK) {
        qn_refl_index_free(ix);
        return rc;
    }
    if (ix->nsyms > 0)
        qsort(ix->syms, ix->nsyms, sizeof *ix->syms, sym_cmp);
    *out = ix;
    return QN_OK;
}

void qn_refl_index_free(struct qn_refl_index *ix)
{
    if (ix == NULL)
        return;
    for (size_t i = 0; i < ix->nfiles; i++) {
        free(ix->files[i].name);
        for (size_t d = 0; d < ix->files[i].ndeps; d++)
            free(ix->files[i].deps[d]);
        free(ix->files[i].deps);
    }
    for (size_t i = 0; i < ix->nsyms; i++)
        free(ix->syms[i].name);
    for (size_t i = 0; i < ix->nservices; i++)
        free(ix->services[i]);
    free(ix->files);
    free(ix->syms);
    free(ix->services);
    free(ix);
}

size_t qn_refl_index_nfiles(const struct qn_refl_index *ix)
{
    return ix->nfiles;
}

const char *qn_refl_index_file_name(const struct qn_refl_index *ix, size_t file)
{
    return ix->files[file].name;
}

const uint8_t *qn_refl_index_file_data(const struct qn_refl_index *ix, size_t file, size_t *len)
{
    *len = ix->files[file].len;
    return ix->files[file].data;
}

int qn_refl_index_find_file(const struct qn_refl_index *ix, const char *name)
{
    for (size_t i = 0; i < ix->nfiles; i++)
        if (strcmp(ix->files[i].name, name) == 0)
            return (int)i;
    return -1;
}

static const struct symbol *find_sym(const struct qn_refl_index *ix, const char *symbol)
{
    size_t lo = 0, hi = ix->nsyms;
    while (lo < hi) { /* first entry >= symbol */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ix->syms[mid].name, symbol) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < ix->nsyms && strcmp(ix->syms[lo].name, symbol) == 0)
        return &ix->syms[lo];
    return NULL;
}

int qn_refl_index_find_symbol(const struct qn_refl_index *ix, const char *symbol)
{
    if (symbol[0] == '.')
        symbol++;
    const struct symbol *s = find_sym(ix, symbol);
    return s ? (int)s->file : -1;
}

int qn_refl_index_is_message(const struct qn_refl_index *ix, const char *symbol)
{
    if (symbol[0] == '.')
        symbol++;
    const struct symbol *s = find_sym(ix, symbol);
    return s != NULL && s->kind == SYM_MESSAGE;
}

size_t qn_refl_index_closure(const struct qn_refl_index *ix, size_t file, size_t *out, size_t cap)
{
    size_t n = 0;
    if (cap == 0)
        return 0;
    out[n++] = file;
    /* Breadth-first over out[] itself; a file already listed is skipped. */
    for (size_t i = 0; i < n; i++) {
        const struct file *f = &ix->files[out[i]];
        for (size_t d = 0; d < f->ndeps; d++) {
            int j = qn_refl_index_find_file(ix, f->deps[d]);
            if (j < 0)
                continue;
            bool seen = false;
            for (size_t k = 0; k < n && !seen; k++)
                seen = out[k] == (size_t)j;
            if (!seen && n < cap)
                out[n++] = (size_t)j;
        }
    }
    return n;
}

size_t qn_refl_index_nservices(const struct qn_refl_index *ix)
{
    return ix->nservices;
}

const char *qn_refl_index_service(const struct qn_refl_index *ix, size_t i)
{
    return ix->services[i];
}

/* ---------------------------------------------------------------- the service */

struct qn_reflection {
    qn_rpc_server *server;
    struct qn_refl_index *ix;
    struct qn_method methods[2]; /* v1 and v1alpha; data points back here */
};

typedef Grpc__Reflection__V1__ServerReflectionRequest refl_req;
typedef Grpc__Reflection__V1__ServerReflectionResponse refl_resp;

static void send_or_fail(qn_call *call, refl_resp *resp)
{
    int rc = qn_call_send(call, &resp->base);
    if (rc == QN_ELIMIT)
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "reflection responses are not being read");
    else if (rc != QN_OK)
        qn_call_finish(call, QN_GRPC_INTERNAL, "cannot send the reflection response");
}

static void send_error(qn_call *call, refl_resp *resp, enum qn_grpc_code code, const char *what,
                       const char *name)
{
    char msg[MAX_NAME + 64];
    snprintf(msg, sizeof msg, "%s not found: %.*s", what, MAX_NAME, name ? name : "");
    Grpc__Reflection__V1__ErrorResponse err = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    err.error_code = (int32_t)code;
    err.error_message = msg;
    resp->message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    resp->error_response = &err;
    send_or_fail(call, resp);
}

static void send_files(qn_call *call, const qn_reflection *r, refl_resp *resp, size_t file)
{
    size_t nf = qn_refl_index_nfiles(r->ix);
    size_t *list = calloc(nf, sizeof *list);
    ProtobufCBinaryData *bins = calloc(nf, sizeof *bins);
    if (list == NULL || bins == NULL) {
        free(list);
        free(bins);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    size_t n = qn_refl_index_closure(r->ix, file, list, nf);
    for (size_t i = 0; i < n; i++)
        bins[i].data = (uint8_t *)qn_refl_index_file_data(r->ix, list[i], &bins[i].len);
    Grpc__Reflection__V1__FileDescriptorResponse fdr =
        GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    fdr.n_file_descriptor_proto = n;
    fdr.file_descriptor_proto = bins;
    resp->message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
    resp->file_descriptor_response = &fdr;
    send_or_fail(call, resp);
    free(list);
    free(bins);
}

static void send_services(qn_call *call, const qn_reflection *r, refl_resp *resp)
{
    size_t ns = qn_refl_index_nservices(r->ix);
    Grpc__Reflection__V1__ServiceResponse *items = calloc(ns + 1, sizeof *items);
    Grpc__Reflection__V1__ServiceResponse **ptrs = calloc(ns + 1, sizeof *ptrs);
    if (items == NULL || ptrs == NULL) {
        free(items);
        free(ptrs);
        qn_call_finish(call, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < ns; i++) {
        const char *name = qn_refl_index_service(r->ix, i);
        if (!qn_rpc_has_service(r->server, name))
            continue;
        grpc__reflection__v1__service_response__init(&items[n]);
        items[n].name = (char *)name;
        ptrs[n] = &items[n];
        n++;
    }
    Grpc__Reflection__V1__ListServiceResponse lsr =
        GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    lsr.n_service = n;
    lsr.service = ptrs;
    resp->message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
    resp->list_services_response = &lsr;
    send_or_fail(call, resp);
    free(items);
    free(ptrs);
}

static void reflect(qn_call *call, ProtobufCMessage *msg)
{
    const qn_reflection *r = qn_call_method(call)->data;
    refl_req *req = (refl_req *)msg;
    refl_resp resp = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    resp.valid_host = req->host;
    resp.original_request = req;
    switch (req->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        send_services(call, r, &resp);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME: {
        int f = qn_refl_index_find_file(r->ix, req->file_by_filename);
        if (f < 0)
            send_error(call, &resp, QN_GRPC_NOT_FOUND, "file", req->file_by_filename);
        else
            send_files(call, r, &resp, (size_t)f);
        break;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL: {
        int f = qn_refl_index_find_symbol(r->ix, req->file_containing_symbol);
        if (f < 0)
            send_error(call, &resp, QN_GRPC_NOT_FOUND, "symbol", req->file_containing_symbol);
        else
            send_files(call, r, &resp, (size_t)f);
        break;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE: {
        const char *type = req->all_extension_numbers_of_type;
        if (!qn_refl_index_is_message(r->ix, type)) {
            send_error(call, &resp, QN_GRPC_NOT_FOUND, "type", type);
            break;
        }
        Grpc__Reflection__V1__ExtensionNumberResponse enr =
            GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT;
        enr.base_type_name = (char *)(type[0] == '.' ? type + 1 : type);
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
        resp.all_extension_numbers_response = &enr;
        send_or_fail(call, &resp);
        break;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
        send_error(call, &resp, QN_GRPC_NOT_FOUND, "extension",
                   req->file_containing_extension ? req->file_containing_extension->containing_type
                                                  : "");
        break;
    default:
        send_error(call, &resp, QN_GRPC_INVALID_ARGUMENT, "request", "(empty)");
        break;
    }
    protobuf_c_message_free_unpacked(msg, NULL);
}

static void reflect_half_close(qn_call *call)
{
    qn_call_finish(call, QN_GRPC_OK, NULL);
}

int qn_reflection_new(qn_rpc_server *s, qn_reflection **out)
{
    qn_reflection *r = calloc(1, sizeof *r);
    if (r == NULL)
        return QN_ENOMEM;
    r->server = s;
    if (qn_descriptor_set_count < 1) {
        free(r);
        return QN_EINTERNAL;
    }
    int rc = qn_refl_index_build(qn_descriptor_set[0].data, qn_descriptor_set[0].len, &r->ix);
    if (rc != QN_OK) {
        QN_ERROR("cannot index the embedded descriptor set: %s", qn_strerror(rc));
        free(r);
        return rc == QN_ENOMEM ? rc : QN_EINTERNAL;
    }
    static const char *paths[2] = {
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    };
    for (int i = 0; i < 2; i++)
        r->methods[i] = (struct qn_method){
            .path = paths[i],
            .request = &grpc__reflection__v1__server_reflection_request__descriptor,
            .client_streaming = true,
            .server_streaming = true,
            .on_message = reflect,
            .on_half_close = reflect_half_close,
            .data = r,
        };
    rc = qn_rpc_register(s, r->methods, 2);
    if (rc != QN_OK) {
        qn_reflection_free(r);
        return rc;
    }
    *out = r;
    return QN_OK;
}

void qn_reflection_free(qn_reflection *r)
{
    if (r == NULL)
        return;
    qn_refl_index_free(r->ix);
    free(r);
}
