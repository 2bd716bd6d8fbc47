/*
 * qctl_admin.c - queenctl's AdminService commands: queue list|get|configure|
 * delete, group list|seek|delete, dlq list|replay|delete, stats.
 *
 * Each command is: parse (argp), build the request, one unary call, print
 * the response as JSON (the response message, qctl_pb_json) or as a table.
 * Listings page (page_size / page_token): one page per call, continued with
 * --page-token (a table says so on stderr), or every page with --all (queue
 * list, queue get, group list, dlq list; dlq replay --all), which follows
 * next_page_token and prints the pages as one response.
 * Does not: retry, or ask for confirmation before deleting (like kubectl).
 *
 * One file for the AdminService (about 950 lines): its commands share one
 * argument struct, one parser and the printing helpers.
 *
 * Invariants:
 *   1. every paging loop is bounded (ALL_MAX rows).
 *   2. a response message is freed on every path that unpacked it.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "qctl.h"
#include "queen/v1/admin.pb-c.h"

#define SVC "/queen.v1.AdminService/"
#define DLQ_PAGE 1000u
#define ALL_MAX 10000000u /* rows a listing's --all (and dlq replay --all) gathers at most */

#define UNPACKED(T, m) ((T *)(m))

enum {
    OPT_QUEUE = 'q',
    OPT_GROUP = 'g',
    OPT_PARTITION = 'p',
    OPT_NAMESPACE = 0x300,
    OPT_TASK,
    OPT_LIMIT,
    OPT_OFFSET,
    OPT_REPLACE,
    OPT_TO_END,
    OPT_TO,
    OPT_METADATA,
    OPT_ALL,
    OPT_TO_QUEUE,
    OPT_TO_PARTITION,
    OPT_PARTITION_ID,
    OPT_TXID,
    OPT_PROGRESS,
    OPT_NO_PROGRESS,
    OPT_PAGE,
    OPT_PAGE_SIZE,
    OPT_PAGE_TOKEN,
    OPT_QOPT = 0x400, /* + index in qopts[] */
};

/* Arguments of every admin command (each uses some). */
struct admin_args {
    const char *name; /* the positional QUEUE / GROUP / ID */
    const char *queue;
    const char *group;
    const char *partition;
    const char *ns;
    const char *task;
    uint32_t limit;
    uint32_t offset;
    bool replace;
    bool to_end;
    bool to_set;
    int64_t to_us;
    bool metadata;
    bool all;
    const char *to_queue;
    const char *to_partition;
    const char *partition_id;
    const char *txid;
    int progress;                  /* 1 forced, -1 never, 0 on a terminal */
    uint32_t page;                 /* dead letters per ListDeadLetters call with --all */
    uint32_t page_size;            /* --page-size (0: the broker's default) */
    const char *page_token;        /* --page-token */
    const char *what;              /* the positional's name, for messages; NULL: none taken */
    bool optional;                 /* the positional may be absent */
    Queen__V1__QueueOptions *opts; /* queue configure */
};

static char *dup_arg(const struct argp_state *st, const char *s)
{
    char *d = strdup(s);
    if (d == NULL)
        argp_failure(st, QCTL_FAIL, 0, "out of memory");
    return d;
}

/* ---------------------------------------------------------------- queue options as flags */

struct qopt {
    const char *field; /* QueueOptions field */
    const char *arg;   /* argp arg name */
    const char *doc;
};

static const struct qopt qopts[] = {
    {"lease_time", "SECONDS", "lease of a popped batch, 1..86400 (default 60)"},
    {"retry_limit", "N", "FAILED acks a batch may spend before its head is dead-lettered (3)"},
    {"retry_delay", "MS", "stored for clients (1000)"},
    {"max_size", "N", "stored, not enforced (0)"},
    {"ttl", "SECONDS", "stored, not enforced (3600)"},
    {"dead_letter_queue", "BOOL", "dead-lettering on (true)"},
    {"dlq_after_max_retries", "BOOL", "dead-letter after the retry budget (true)"},
    {"delayed_processing", "SECONDS", "a segment stays invisible this long after it is written"},
    {"window_buffer", "SECONDS", "hold a partition while its newest segment is younger"},
    {"retention_seconds", "SECONDS", "with retention, delete segments older than this (0 off)"},
    {"completed_retention_seconds", "SECONDS",
     "with retention, delete consumed segments older than this (0 off)"},
    {"retention_enabled", "BOOL", "retention on (false)"},
    {"encryption_enabled", "BOOL", "stored flag (false)"},
    {"max_wait_time_seconds", "SECONDS", "evict segments older than this, consumed or not (0 off)"},
    {"min_pop_wait_time", "MS", "an under-full Pop may wait this long for more, 0..60000 (0)"},
    {"dedup_window_seconds", "SECONDS", "duplicate window of transaction ids; 0 disables (3600)"},
    {"priority", "N", "informational (0)"},
    {"namespace", "TEXT", "namespace for Pop/Consume discovery"},
    {"task", "TEXT", "task for Pop/Consume discovery"},
};
#define NQOPTS (sizeof qopts / sizeof qopts[0])

/* Sets one QueueOptions field from its flag's text (generic over the field's type). */
static void qopt_set(const struct argp_state *st, Queen__V1__QueueOptions *o, size_t i,
                     const char *arg)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(
        &queen__v1__queue_options__descriptor, qopts[i].field);
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", qopts[i].field);
    for (char *c = flag; *c; c++)
        if (*c == '_')
            *c = '-';
    char *base = (char *)o;
    switch (f->type) {
    case PROTOBUF_C_TYPE_UINT32:
        *(uint32_t *)(base + f->offset) = qctl_arg_u32(st, flag, arg, 0, UINT32_MAX);
        break;
    case PROTOBUF_C_TYPE_INT32:
        *(int32_t *)(base + f->offset) = (int32_t)qctl_arg_i64(st, flag, arg, INT32_MIN, INT32_MAX);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        *(protobuf_c_boolean *)(base + f->offset) = qctl_arg_bool(st, flag, arg);
        break;
    case PROTOBUF_C_TYPE_STRING:
        *(char **)(base + f->offset) = dup_arg(st, arg);
        break;
    default:
        argp_failure(st, QCTL_FAIL, 0, "%s: unsupported option type", flag);
    }
    /* Every option is a one-member oneof: mark it set. */
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)(base + f->quantifier_offset) = f->id;
}

/* ---------------------------------------------------------------- parsing */

static error_t admin_parse(int key, char *arg, struct argp_state *state)
{
    struct admin_args *a = qctl_cmd(state);
    if (key >= OPT_QOPT && key < OPT_QOPT + (int)NQOPTS) {
        qopt_set(state, a->opts, (size_t)(key - OPT_QOPT), arg);
        return 0;
    }
    switch (key) {
    case OPT_QUEUE:
        a->queue = arg;
        return 0;
    case OPT_GROUP:
        a->group = arg;
        return 0;
    case OPT_PARTITION:
        a->partition = arg;
        return 0;
    case OPT_NAMESPACE:
        a->ns = arg;
        return 0;
    case OPT_TASK:
        a->task = arg;
        return 0;
    case OPT_LIMIT:
        a->limit = qctl_arg_u32(state, "--limit", arg, 1, 1000);
        return 0;
    case OPT_OFFSET:
        a->offset = qctl_arg_u32(state, "--offset", arg, 0, UINT32_MAX);
        return 0;
    case OPT_REPLACE:
        a->replace = true;
        return 0;
    case OPT_TO_END:
        a->to_end = true;
        return 0;
    case OPT_TO:
        a->to_set = true;
        a->to_us = qctl_arg_time(state, "--to", arg);
        return 0;
    case OPT_METADATA:
        a->metadata = true;
        return 0;
    case OPT_ALL:
        a->all = true;
        return 0;
    case OPT_TO_QUEUE:
        a->to_queue = arg;
        return 0;
    case OPT_TO_PARTITION:
        a->to_partition = arg;
        return 0;
    case OPT_PARTITION_ID:
        a->partition_id = arg;
        return 0;
    case OPT_TXID:
        a->txid = arg;
        return 0;
    case OPT_PROGRESS:
        a->progress = 1;
        return 0;
    case OPT_NO_PROGRESS:
        a->progress = -1;
        return 0;
    case OPT_PAGE:
        a->page = qctl_arg_u32(state, "--page", arg, 1, DLQ_PAGE);
        return 0;
    case OPT_PAGE_SIZE:
        a->page_size = qctl_arg_u32(state, "--page-size", arg, 1, 1000);
        return 0;
    case OPT_PAGE_TOKEN:
        a->page_token = arg;
        return 0;
    case ARGP_KEY_ARG:
        if (a->what == NULL)
            argp_error(state, "unexpected argument \"%s\"", arg);
        if (a->name != NULL)
            argp_error(state, "one %s only (got \"%s\" and \"%s\")", a->what, a->name, arg);
        a->name = arg;
        return 0;
    case ARGP_KEY_END:
        if (a->what != NULL && !a->optional && a->name == NULL)
            argp_error(state, "the %s is missing", a->what);
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

#define O_QUEUE(doc)                                                                               \
    {                                                                                              \
        "queue", 'q', "QUEUE", 0, doc, 0                                                           \
    }
#define O_GROUP(doc)                                                                               \
    {                                                                                              \
        "group", 'g', "GROUP", 0, doc, 0                                                           \
    }
#define O_PARTITION(doc)                                                                           \
    {                                                                                              \
        "partition", 'p', "PARTITION", 0, doc, 0                                                   \
    }
#define O_PAGING(what)                                                                             \
    {"page-size", OPT_PAGE_SIZE, "N", 0, what " per page, 1..1000 (default 100)", 0},              \
        {"page-token",                                                                             \
         OPT_PAGE_TOKEN,                                                                           \
         "TOKEN",                                                                                  \
         0,                                                                                        \
         "continue after the page that printed this token",                                        \
         0},                                                                                       \
    {                                                                                              \
        "all", OPT_ALL, 0, 0, "every page (follows the page tokens)", 0                            \
    }
#define O_PROGRESS                                                                                 \
    {"progress", OPT_PROGRESS, 0, 0, "show the progress line even when stderr is not a terminal",  \
     0},                                                                                           \
    {                                                                                              \
        "no-progress", OPT_NO_PROGRESS, 0, 0, "never show the progress line", 0                    \
    }

static const char *str(const char *s)
{
    return s != NULL ? s : "";
}

static void print_options_rows(struct qctl_table *t, const Queen__V1__QueueOptions *o)
{
    json_t *j = o != NULL ? qctl_pb_json(&o->base) : NULL;
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v)
    {
        char *text = json_dumps(v, JSON_ENCODE_ANY);
        qctl_table_cell(t, "  %s", k);
        qctl_table_cell(t, "%s", text != NULL ? text : "?");
        free(text);
    }
    json_decref(j);
}

static void queue_info_rows(struct qctl_table *t, const Queen__V1__QueueInfo *qi)
{
    char when[32];
    qctl_time_text(qi->created_at_us, when);
    qctl_table_cell(t, "queue");
    qctl_table_cell(t, "%s", qi->queue);
    qctl_table_cell(t, "id");
    qctl_table_cell(t, "%s", qi->queue_id);
    qctl_table_cell(t, "created");
    qctl_table_cell(t, "%s", when);
    qctl_table_cell(t, "partitions");
    qctl_table_cell(t, "%u", qi->partitions);
    qctl_table_cell(t, "messages");
    qctl_table_cell(t, "%" PRId64, qi->messages);
    qctl_table_cell(t, "segments");
    qctl_table_cell(t, "%" PRId64, qi->segments);
    qctl_table_cell(t, "options:");
    qctl_table_cell(t, "%s", "");
    print_options_rows(t, qi->options);
}

/* Prints resp as JSON, or calls table(resp) for -o table; frees resp. */
static int print_resp(struct qctl *q, ProtobufCMessage *resp,
                      int (*table)(struct qctl *q, const ProtobufCMessage *resp))
{
    int rc = qctl_json(q) ? qctl_emit(qctl_pb_json(resp)) : table(q, resp);
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

/* The page token a listing's response names (its next_page_token), or "". */
static const char *next_token(const ProtobufCMessage *m)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "next_page_token");
    const char *t = f != NULL ? *(char *const *)((const char *)m + f->offset) : NULL;
    return t != NULL ? t : "";
}

/* A table's note that more rows follow, and how to ask for them. */
static void more_note(const ProtobufCMessage *m)
{
    const char *t = next_token(m);
    if (t[0] != '\0')
        fprintf(stderr, "more: --page-token %s (or --all)\n", t);
}

/*
 * Calls method with req (whose page_token field is *token) until the broker
 * answers next_page_token "", and gathers the repeated field `field` of every
 * page into the first page's response, returned in *out (the caller frees it).
 * At most ALL_MAX rows. Each page's token is copied before its page is freed.
 */
static int fetch_all(struct qctl *q, const char *method, ProtobufCMessage *req, char **token,
                     const ProtobufCMessageDescriptor *rd, const char *field,
                     ProtobufCMessage **out)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(rd, field);
    if (f == NULL || f->label != PROTOBUF_C_LABEL_REPEATED)
        return qctl_fail(QCTL_FAIL, "internal: %s has no list %s", rd->name, field);
    ProtobufCMessage *acc = NULL;
    size_t cap = 0;
    char *tok = NULL;
    int rc = QCTL_OK;
    for (;;) {
        *token = tok != NULL ? tok : (char *)"";
        ProtobufCMessage *m = NULL;
        rc = qctl_unary(q, method, req, rd, 0, &m);
        if (rc != QCTL_OK)
            break;
        free(tok);
        tok = NULL;
        const char *next = next_token(m);
        if (next[0] != '\0' && (tok = strdup(next)) == NULL) {
            protobuf_c_message_free_unpacked(m, NULL);
            rc = qctl_fail(QCTL_FAIL, "out of memory");
            break;
        }
        if (acc == NULL) {
            acc = m;
            cap = *(size_t *)((char *)acc + f->quantifier_offset);
        } else {
            size_t *an = (size_t *)((char *)acc + f->quantifier_offset);
            void ***arr = (void ***)((char *)acc + f->offset);
            size_t *mn = (size_t *)((char *)m + f->quantifier_offset);
            void **marr = *(void ***)((char *)m + f->offset);
            if (*an + *mn > ALL_MAX) {
                protobuf_c_message_free_unpacked(m, NULL);
                rc = qctl_fail(QCTL_FAIL, "more than %u rows: narrow the listing with its filters",
                               ALL_MAX);
                break;
            }
            if (*an + *mn > cap) {
                size_t ncap = cap ? cap * 2 : 1024;
                while (ncap < *an + *mn)
                    ncap *= 2;
                void **nd = realloc(*arr, ncap * sizeof *nd);
                if (nd == NULL) {
                    protobuf_c_message_free_unpacked(m, NULL);
                    rc = qctl_fail(QCTL_FAIL, "out of memory");
                    break;
                }
                *arr = nd;
                cap = ncap;
            }
            /* move the rows over: the page's list is emptied before it is freed */
            if (*mn > 0)
                memcpy(*arr + *an, marr, *mn * sizeof *marr);
            *an += *mn;
            *mn = 0;
            protobuf_c_message_free_unpacked(m, NULL);
        }
        if (tok == NULL)
            break;
    }
    free(tok);
    *token = (char *)"";
    if (rc != QCTL_OK) {
        if (acc != NULL)
            protobuf_c_message_free_unpacked(acc, NULL);
        return rc;
    }
    /* the gathered response is the whole listing: no next page */
    const ProtobufCFieldDescriptor *nf =
        protobuf_c_message_descriptor_get_field_by_name(rd, "next_page_token");
    char **np = (char **)((char *)acc + nf->offset);
    if (*np != NULL && (*np)[0] != '\0')
        (*np)[0] = '\0';
    *out = acc;
    return QCTL_OK;
}

/* One page (a->page_token, a->page_size) or, with --all, every page. */
static int list_call(struct qctl *q, const struct admin_args *a, const char *method,
                     ProtobufCMessage *req, char **token, uint32_t *page_size,
                     const ProtobufCMessageDescriptor *rd, const char *field,
                     ProtobufCMessage **out)
{
    *page_size = a->all && a->page_size == 0 ? 1000 : a->page_size;
    if (!a->all) {
        *token = (char *)str(a->page_token);
        return qctl_unary(q, method, req, rd, 0, out);
    }
    if (a->page_token != NULL)
        return qctl_usage(q, "--all starts at the first page: drop --page-token");
    return fetch_all(q, method, req, token, rd, field, out);
}

/* ---------------------------------------------------------------- queue list */

static int queue_list_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    const Queen__V1__ListQueuesResponse *r = UNPACKED(const Queen__V1__ListQueuesResponse, m);
    struct qctl_table *t =
        qctl_table_new(6, "QUEUE", "PARTITIONS", "MESSAGES", "SEGMENTS", "NAMESPACE", "CREATED");
    for (size_t i = 0; i < r->n_queues; i++) {
        const Queen__V1__QueueInfo *qi = r->queues[i];
        char when[32];
        qctl_time_text(qi->created_at_us, when);
        qctl_table_cell(t, "%s", qi->queue);
        qctl_table_cell(t, "%u", qi->partitions);
        qctl_table_cell(t, "%" PRId64, qi->messages);
        qctl_table_cell(t, "%" PRId64, qi->segments);
        qctl_table_cell(t, "%s",
                        qi->options != NULL && qi->options->namespace_[0] ? qi->options->namespace_
                                                                          : "-");
        qctl_table_cell(t, "%s", when);
    }
    more_note(m);
    return qctl_table_print(t);
}

static int cmd_queue_list(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        {"namespace", OPT_NAMESPACE, "NS", 0, "only queues of this namespace", 0},
        {"task", OPT_TASK, "TASK", 0, "only queues of this task", 0},
        {"limit", OPT_LIMIT, "N", 0, "at most N queues, 1..1000 (default 100; as --page-size)", 0},
        {"offset", OPT_OFFSET, "N", 0, "skip the first N queues (not with --page-token)", 0},
        O_PAGING("queues"),
        {0},
    };
    struct admin_args a = {0};
    qctl_argp(q, opts, admin_parse, NULL, "Lists queues with their size.", &a, argc, argv);
    Queen__V1__ListQueuesRequest req = QUEEN__V1__LIST_QUEUES_REQUEST__INIT;
    req.namespace_ = (char *)str(a.ns);
    req.task = (char *)str(a.task);
    req.limit = a.limit;
    req.offset = a.offset;
    ProtobufCMessage *resp = NULL;
    int rc = list_call(q, &a, SVC "ListQueues", &req.base, &req.page_token, &req.page_size,
                       &queen__v1__list_queues_response__descriptor, "queues", &resp);
    return rc != QCTL_OK ? rc : print_resp(q, resp, queue_list_table);
}

/* ---------------------------------------------------------------- queue get */

static int queue_get_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    const Queen__V1__GetQueueResponse *r = UNPACKED(const Queen__V1__GetQueueResponse, m);
    struct qctl_table *t = qctl_table_new(2, "FIELD", "VALUE");
    if (r->queue != NULL)
        queue_info_rows(t, r->queue);
    qctl_table_cell(t, "depth");
    qctl_table_cell(t, "%" PRId64, r->depth);
    int rc = qctl_table_print(t);
    if (rc != QCTL_OK || r->n_partitions == 0)
        return rc;
    putchar('\n');
    t = qctl_table_new(7, "PARTITION", "LAST_OFFSET", "LOG_START", "COMMITTED", "DEPTH", "LEASED",
                       "LAST_WRITE");
    for (size_t i = 0; i < r->n_partitions; i++) {
        const Queen__V1__PartitionInfo *p = r->partitions[i];
        char when[32];
        qctl_time_text(p->last_write_at_us, when);
        qctl_table_cell(t, "%s", p->partition);
        qctl_table_cell(t, "%" PRId64, p->last_offset);
        qctl_table_cell(t, "%" PRId64, p->log_start);
        qctl_table_cell(t, "%" PRId64, p->committed);
        qctl_table_cell(t, "%" PRId64, p->depth);
        qctl_table_cell(t, "%s", p->leased ? "yes" : "no");
        qctl_table_cell(t, "%s", when);
    }
    more_note(m);
    return qctl_table_print(t);
}

static int cmd_queue_get(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        O_GROUP("compute depth for this consumer group (default: queue mode)"),
        O_PAGING("partitions"),
        {0},
    };
    struct admin_args a = {.what = "queue name"};
    qctl_argp(q, opts, admin_parse, "QUEUE",
              "Shows a queue: its options, size, and per partition the group's cursor and depth.",
              &a, argc, argv);
    Queen__V1__GetQueueRequest req = QUEEN__V1__GET_QUEUE_REQUEST__INIT;
    req.queue = (char *)a.name;
    req.consumer_group = (char *)str(a.group);
    ProtobufCMessage *resp = NULL;
    int rc = list_call(q, &a, SVC "GetQueue", &req.base, &req.page_token, &req.page_size,
                       &queen__v1__get_queue_response__descriptor, "partitions", &resp);
    return rc != QCTL_OK ? rc : print_resp(q, resp, queue_get_table);
}

/* ---------------------------------------------------------------- queue configure */

static int queue_configure_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    const Queen__V1__ConfigureQueueResponse *r =
        UNPACKED(const Queen__V1__ConfigureQueueResponse, m);
    printf("%s queue %s\n", r->created ? "created" : "updated",
           r->queue != NULL ? r->queue->queue : "?");
    struct qctl_table *t = qctl_table_new(2, "FIELD", "VALUE");
    if (r->queue != NULL)
        queue_info_rows(t, r->queue);
    return qctl_table_print(t);
}

static int cmd_queue_configure(struct qctl *q, int argc, char **argv)
{
    struct argp_option opts[NQOPTS + 2];
    char names[NQOPTS][48];
    for (size_t i = 0; i < NQOPTS; i++) {
        snprintf(names[i], sizeof names[i], "%s", qopts[i].field);
        for (char *c = names[i]; *c; c++)
            if (*c == '_')
                *c = '-';
        opts[i] =
            (struct argp_option){names[i], OPT_QOPT + (int)i, qopts[i].arg, 0, qopts[i].doc, 0};
    }
    opts[NQOPTS] = (struct argp_option){"replace",
                                        OPT_REPLACE,
                                        0,
                                        0,
                                        "options not given return to their defaults (default: "
                                        "they keep their stored values)",
                                        0};
    opts[NQOPTS + 1] = (struct argp_option){0};
    Queen__V1__QueueOptions qo = QUEEN__V1__QUEUE_OPTIONS__INIT;
    struct admin_args a = {.what = "queue name", .opts = &qo};
    qctl_argp(q, opts, admin_parse, "QUEUE",
              "Creates a queue or changes its options. Options not given keep their stored value "
              "(or take their default with --replace, or for a new queue).",
              &a, argc, argv);
    Queen__V1__ConfigureQueueRequest req = QUEEN__V1__CONFIGURE_QUEUE_REQUEST__INIT;
    req.queue = (char *)a.name;
    req.options = &qo;
    req.replace = a.replace;
    ProtobufCMessage *resp = NULL;
    int rc = qctl_unary(q, SVC "ConfigureQueue", &req.base,
                        &queen__v1__configure_queue_response__descriptor, 0, &resp);
    if (qo.namespace_ != protobuf_c_empty_string)
        free(qo.namespace_);
    if (qo.task != protobuf_c_empty_string)
        free(qo.task);
    return rc != QCTL_OK ? rc : print_resp(q, resp, queue_configure_table);
}

/* ---------------------------------------------------------------- queue delete */

static int cmd_queue_delete(struct qctl *q, int argc, char **argv)
{
    struct admin_args a = {.what = "queue name"};
    qctl_argp(q, NULL, admin_parse, "QUEUE",
              "Deletes a queue with its partitions, messages, cursors and dead letters. Deleting "
              "a queue that does not exist succeeds (existed: false).",
              &a, argc, argv);
    Queen__V1__DeleteQueueRequest req = QUEEN__V1__DELETE_QUEUE_REQUEST__INIT;
    req.queue = (char *)a.name;
    ProtobufCMessage *resp = NULL;
    int rc = qctl_unary(q, SVC "DeleteQueue", &req.base,
                        &queen__v1__delete_queue_response__descriptor, 0, &resp);
    if (rc != QCTL_OK)
        return rc;
    if (qctl_json(q)) {
        rc = qctl_emit(qctl_pb_json(resp));
    } else {
        bool existed = ((const Queen__V1__DeleteQueueResponse *)resp)->existed;
        printf(existed ? "deleted queue %s\n" : "queue %s did not exist\n", a.name);
        rc = fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

/* ---------------------------------------------------------------- groups */

static int group_list_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    const Queen__V1__ListConsumerGroupsResponse *r =
        UNPACKED(const Queen__V1__ListConsumerGroupsResponse, m);
    struct qctl_table *t =
        qctl_table_new(6, "GROUP", "QUEUE", "PARTITIONS", "LAG", "MAX_TIME_LAG_S", "STATE");
    for (size_t i = 0; i < r->n_groups; i++) {
        const Queen__V1__ConsumerGroupInfo *g = r->groups[i];
        const ProtobufCEnumValue *st =
            protobuf_c_enum_descriptor_get_value(&queen__v1__group_state__descriptor, g->state);
        const char *state = st != NULL ? st->name : "?";
        if (strncmp(state, "GROUP_STATE_", 12) == 0)
            state += 12;
        qctl_table_cell(t, "%s", g->consumer_group);
        qctl_table_cell(t, "%s", g->queue);
        qctl_table_cell(t, "%zu", g->n_partitions);
        qctl_table_cell(t, "%" PRId64, g->total_lag);
        qctl_table_cell(t, "%" PRId64, g->max_time_lag_seconds);
        qctl_table_cell(t, "%s", state);
    }
    more_note(m);
    return qctl_table_print(t);
}

/* After --all: a group whose partitions spanned pages came as one entry per
 * page, in a row; each run becomes one entry (their totals are the same: the
 * whole group's). */
static int merge_groups(Queen__V1__ListConsumerGroupsResponse *r)
{
    size_t out = 0;
    for (size_t i = 0; i < r->n_groups; i++) {
        Queen__V1__ConsumerGroupInfo *g = r->groups[i];
        Queen__V1__ConsumerGroupInfo *prev = out > 0 ? r->groups[out - 1] : NULL;
        if (prev == NULL || strcmp(prev->consumer_group, g->consumer_group) != 0 ||
            strcmp(prev->queue, g->queue) != 0) {
            r->groups[out++] = g;
            continue;
        }
        Queen__V1__ConsumerGroupPartition **np =
            realloc(prev->partitions, (prev->n_partitions + g->n_partitions) * sizeof *np);
        if (np == NULL && prev->n_partitions + g->n_partitions > 0)
            return qctl_fail(QCTL_FAIL, "out of memory");
        if (g->n_partitions > 0)
            memcpy(np + prev->n_partitions, g->partitions, g->n_partitions * sizeof *np);
        prev->partitions = np;
        prev->n_partitions += g->n_partitions;
        g->n_partitions = 0;
        protobuf_c_message_free_unpacked(&g->base, NULL);
    }
    r->n_groups = out;
    return QCTL_OK;
}

static int cmd_group_list(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        O_QUEUE("only groups reading this queue"),
        O_GROUP("only this group"),
        O_PAGING("cursors (group, queue, partition)"),
        {0},
    };
    struct admin_args a = {0};
    qctl_argp(q, opts, admin_parse, NULL,
              "Lists consumer groups: per queue, their lag (messages not consumed) and state.", &a,
              argc, argv);
    Queen__V1__ListConsumerGroupsRequest req = QUEEN__V1__LIST_CONSUMER_GROUPS_REQUEST__INIT;
    req.queue = (char *)str(a.queue);
    req.consumer_group = (char *)str(a.group);
    ProtobufCMessage *resp = NULL;
    int rc = list_call(q, &a, SVC "ListConsumerGroups", &req.base, &req.page_token, &req.page_size,
                       &queen__v1__list_consumer_groups_response__descriptor, "groups", &resp);
    if (rc == QCTL_OK && a.all)
        rc = merge_groups((Queen__V1__ListConsumerGroupsResponse *)resp);
    if (rc != QCTL_OK) {
        if (resp != NULL)
            protobuf_c_message_free_unpacked(resp, NULL);
        return rc;
    }
    return print_resp(q, resp, group_list_table);
}

static int count_table(const char *fmt, uint32_t n)
{
    printf(fmt, n);
    putchar('\n');
    return fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
}

static int group_seek_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    return count_table("moved the cursors of %u partitions",
                       UNPACKED(const Queen__V1__SeekConsumerGroupResponse, m)->partitions_updated);
}

static int cmd_group_seek(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        O_QUEUE("the queue (required)"),
        O_PARTITION("only this partition (default: all of the queue)"),
        {"to-end", OPT_TO_END, 0, 0, "past the last message: only new messages are seen", 0},
        {"to", OPT_TO, "TIME", 0,
         "to the first segment written at or after TIME (2024-05-01T12:00:00Z, @SECONDS, -10m)", 0},
        {0},
    };
    struct admin_args a = {.what = "group name"};
    qctl_argp(q, opts, admin_parse, "GROUP",
              "Moves a consumer group's cursors on a queue to the end or to a time; releases its "
              "leases and resets retry counters.",
              &a, argc, argv);
    if (a.queue == NULL)
        return qctl_usage(q, "--queue is required");
    if (a.to_end == a.to_set)
        return qctl_usage(q, "give exactly one of --to-end and --to TIME");
    Queen__V1__SeekConsumerGroupRequest req = QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__INIT;
    req.consumer_group = (char *)a.name;
    req.queue = (char *)a.queue;
    req.partition = (char *)str(a.partition);
    if (a.to_end) {
        req.target_case = QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__TARGET_TO_END;
        req.to_end = true;
    } else {
        req.target_case = QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__TARGET_TO_TIMESTAMP_US;
        req.to_timestamp_us = a.to_us;
    }
    ProtobufCMessage *resp = NULL;
    int rc = qctl_unary(q, SVC "SeekConsumerGroup", &req.base,
                        &queen__v1__seek_consumer_group_response__descriptor, 0, &resp);
    return rc != QCTL_OK ? rc : print_resp(q, resp, group_seek_table);
}

static int group_delete_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    return count_table(
        "forgot the cursors of %u partitions",
        UNPACKED(const Queen__V1__DeleteConsumerGroupResponse, m)->partitions_deleted);
}

static int cmd_group_delete(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        O_QUEUE("only on this queue (default: every queue)"),
        {"metadata", OPT_METADATA, 0, 0, "also forget the subscription (mode and start time)", 0},
        {0},
    };
    struct admin_args a = {.what = "group name"};
    qctl_argp(q, opts, admin_parse, "GROUP",
              "Forgets a consumer group's cursors; the group then starts over as on first contact.",
              &a, argc, argv);
    Queen__V1__DeleteConsumerGroupRequest req = QUEEN__V1__DELETE_CONSUMER_GROUP_REQUEST__INIT;
    req.consumer_group = (char *)a.name;
    req.queue = (char *)str(a.queue);
    req.delete_metadata = a.metadata;
    ProtobufCMessage *resp = NULL;
    int rc = qctl_unary(q, SVC "DeleteConsumerGroup", &req.base,
                        &queen__v1__delete_consumer_group_response__descriptor, 0, &resp);
    return rc != QCTL_OK ? rc : print_resp(q, resp, group_delete_table);
}

/* ---------------------------------------------------------------- dead letters */

static void dlq_rows(struct qctl_table *t, const Queen__V1__DeadLetter *const *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char when[32];
        qctl_time_text(d[i]->failed_at_us, when);
        char *payload = NULL;
        size_t plen = 0;
        FILE *f = open_memstream(&payload, &plen);
        if (f != NULL) {
            qctl_put_text(f, d[i]->payload.data, d[i]->payload.len, 40);
            fclose(f);
        }
        qctl_table_cell(t, "%s", d[i]->id);
        qctl_table_cell(t, "%s", d[i]->partition);
        qctl_table_cell(t, "%" PRId64, d[i]->offset);
        qctl_table_cell(t, "%s", d[i]->consumer_group);
        qctl_table_cell(t, "%u", d[i]->retry_count);
        qctl_table_cell(t, "%s", when);
        qctl_table_cell(t, "%s", d[i]->error);
        qctl_table_cell(t, "%s", payload != NULL ? payload : "");
        free(payload);
    }
}

/* Pages ListDeadLetters by its page tokens into *all (a response holding
 * every page's dead letters), at most ALL_MAX. Keyset pages: dead letters
 * replayed or deleted meanwhile shift nothing. */
static int dlq_fetch_all(struct qctl *q, const struct admin_args *a,
                         Queen__V1__ListDeadLettersResponse **all)
{
    Queen__V1__ListDeadLettersRequest req = QUEEN__V1__LIST_DEAD_LETTERS_REQUEST__INIT;
    req.queue = (char *)a->queue;
    req.consumer_group = (char *)str(a->group);
    req.partition = (char *)str(a->partition);
    req.page_size = a->page_size ? a->page_size : a->page;
    ProtobufCMessage *m = NULL;
    int rc = fetch_all(q, SVC "ListDeadLetters", &req.base, &req.page_token,
                       &queen__v1__list_dead_letters_response__descriptor, "dead_letters", &m);
    if (rc == QCTL_OK)
        *all = (Queen__V1__ListDeadLettersResponse *)m;
    return rc;
}

static int dlq_list_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    const Queen__V1__ListDeadLettersResponse *r =
        UNPACKED(const Queen__V1__ListDeadLettersResponse, m);
    struct qctl_table *t = qctl_table_new(8, "ID", "PARTITION", "OFFSET", "GROUP", "RETRIES",
                                          "FAILED_AT", "ERROR", "PAYLOAD");
    dlq_rows(t, (const Queen__V1__DeadLetter *const *)r->dead_letters, r->n_dead_letters);
    more_note(m);
    return qctl_table_print(t);
}

static const struct argp_option dlq_filter_opts[] = {
    O_QUEUE("the queue (required)"),
    O_GROUP("only this consumer group's dead letters"),
    O_PARTITION("only this partition's"),
    {0},
};

static int cmd_dlq_list(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        {"limit", OPT_LIMIT, "N", 0, "at most N, 1..1000 (default 100; as --page-size)", 0},
        {"offset", OPT_OFFSET, "N", 0, "skip the N newest (not with --page-token)", 0},
        O_PAGING("dead letters"),
        {"page", OPT_PAGE, "N", 0, "with --all: dead letters per call, 1..1000 (default 1000)", 0},
        {0},
    };
    struct argp_option merged[12];
    size_t n = 0;
    for (size_t i = 0; dlq_filter_opts[i].name != NULL; i++)
        merged[n++] = dlq_filter_opts[i];
    for (size_t i = 0; opts[i].name != NULL; i++)
        merged[n++] = opts[i];
    merged[n] = (struct argp_option){0};
    struct admin_args a = {.page = DLQ_PAGE};
    qctl_argp(q, merged, admin_parse, NULL, "Lists dead letters of a queue, newest first.", &a,
              argc, argv);
    if (a.queue == NULL)
        return qctl_usage(q, "--queue is required");
    ProtobufCMessage *resp = NULL;
    int rc;
    if (a.all) {
        if (a.page_token != NULL)
            return qctl_usage(q, "--all starts at the first page: drop --page-token");
        Queen__V1__ListDeadLettersResponse *all = NULL;
        rc = dlq_fetch_all(q, &a, &all);
        resp = all != NULL ? &all->base : NULL;
    } else {
        Queen__V1__ListDeadLettersRequest req = QUEEN__V1__LIST_DEAD_LETTERS_REQUEST__INIT;
        req.queue = (char *)a.queue;
        req.consumer_group = (char *)str(a.group);
        req.partition = (char *)str(a.partition);
        req.limit = a.limit;
        req.offset = a.offset;
        req.page_size = a.page_size;
        req.page_token = (char *)str(a.page_token);
        rc = qctl_unary(q, SVC "ListDeadLetters", &req.base,
                        &queen__v1__list_dead_letters_response__descriptor, 0, &resp);
    }
    return rc != QCTL_OK ? rc : print_resp(q, resp, dlq_list_table);
}

/* One ReplayDeadLetter; *resp on success. */
static int replay_one(struct qctl *q, const char *id, const struct admin_args *a,
                      Queen__V1__ReplayDeadLetterResponse **resp)
{
    Queen__V1__ReplayDeadLetterRequest req = QUEEN__V1__REPLAY_DEAD_LETTER_REQUEST__INIT;
    req.id = (char *)id;
    req.queue = (char *)str(a->to_queue);
    req.partition = (char *)str(a->to_partition);
    return qctl_unary(q, SVC "ReplayDeadLetter", &req.base,
                      &queen__v1__replay_dead_letter_response__descriptor, 0,
                      (ProtobufCMessage **)resp);
}

static int replay_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    const Queen__V1__ReplayDeadLetterResponse *r =
        UNPACKED(const Queen__V1__ReplayDeadLetterResponse, m);
    const Queen__V1__PushResult *p = r->replayed_as;
    if (p == NULL)
        return qctl_fail(QCTL_FAIL, "the broker sent no replay result");
    if (p->status == QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE)
        printf("already replayed: message %s at %s offset %" PRId64 "\n", p->message_id,
               p->partition, p->offset);
    else
        printf("replayed as message %s: %s partition %s offset %" PRId64 "\n", p->message_id,
               p->queue, p->partition, p->offset);
    return fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
}

static int cmd_dlq_replay(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        {"all", OPT_ALL, 0, 0, "replay every dead letter of --queue (with --group/--partition)", 0},
        O_QUEUE("with --all: the queue whose dead letters are replayed"),
        O_GROUP("with --all: only this group's"),
        O_PARTITION("with --all: only this partition's"),
        {"to-queue", OPT_TO_QUEUE, "QUEUE", 0, "replay into this queue instead of the original", 0},
        {"to-partition", OPT_TO_PARTITION, "PARTITION", 0,
         "replay into this partition instead of the original", 0},
        {"page", OPT_PAGE, "N", 0, "with --all: dead letters per list call (default 1000)", 0},
        O_PROGRESS,
        {0},
    };
    struct admin_args a = {.what = "dead letter id", .optional = true, .page = DLQ_PAGE};
    qctl_argp(q, opts, admin_parse, "ID\n--all --queue QUEUE",
              "Pushes dead letters back as new messages (transaction id \"dlq:<id>\") at the "
              "tail of their partition, and removes them. With --all, every dead letter listed "
              "when the command starts, with a progress line.",
              &a, argc, argv);
    if ((a.name != NULL) == a.all)
        return qctl_usage(q, "give a dead letter ID or --all");
    if (a.all && a.queue == NULL)
        return qctl_usage(q, "--all needs --queue");
    if (!a.all) {
        Queen__V1__ReplayDeadLetterResponse *r = NULL;
        int rc = replay_one(q, a.name, &a, &r);
        return rc != QCTL_OK ? rc : print_resp(q, &r->base, replay_table);
    }
    Queen__V1__ListDeadLettersResponse *all = NULL;
    int rc = dlq_fetch_all(q, &a, &all);
    if (rc != QCTL_OK)
        return rc;
    struct qctl_progress pr;
    qctl_progress_init(&pr, a.progress);
    uint64_t replayed = 0, dup = 0;
    char extra[64];
    for (size_t i = 0; i < all->n_dead_letters && rc == QCTL_OK; i++) {
        Queen__V1__ReplayDeadLetterResponse *r = NULL;
        rc = replay_one(q, all->dead_letters[i]->id, &a, &r);
        if (rc != QCTL_OK)
            break;
        if (r->replayed_as != NULL &&
            r->replayed_as->status == QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE)
            dup++;
        else
            replayed++;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        snprintf(extra, sizeof extra, " (%zu of %zu)", i + 1, all->n_dead_letters);
        qctl_progress(&pr, "dlq replay", replayed + dup, "dead letters", extra, false);
    }
    snprintf(extra, sizeof extra, " (%" PRIu64 " of %zu)", replayed + dup, all->n_dead_letters);
    qctl_progress(&pr, "dlq replay", replayed + dup, "dead letters", extra, true);
    size_t total = all->n_dead_letters;
    protobuf_c_message_free_unpacked(&all->base, NULL);
    if (rc != QCTL_OK) {
        qctl_fail(rc, "stopped after replaying %" PRIu64 " of %zu dead letters", replayed + dup,
                  total);
        return rc;
    }
    if (qctl_json(q)) {
        json_t *o = json_pack("{sIsIsI}", "listed", (json_int_t)total, "replayed",
                              (json_int_t)replayed, "duplicate", (json_int_t)dup);
        return qctl_emit(o);
    }
    printf("replayed %" PRIu64 " of %zu dead letters (%" PRIu64 " had been replayed before)\n",
           replayed + dup, total, dup);
    return fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
}

static int dlq_delete_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    return count_table("deleted %u dead letters",
                       UNPACKED(const Queen__V1__DeleteDeadLetterResponse, m)->deleted);
}

static int cmd_dlq_delete(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        {"partition-id", OPT_PARTITION_ID, "UUID", 0,
         "with --txid: every group's dead letter of this message", 0},
        {"txid", OPT_TXID, "TXID", 0, "the message's transaction id (with --partition-id)", 0},
        {0},
    };
    struct admin_args a = {.what = "dead letter id", .optional = true};
    qctl_argp(q, opts, admin_parse, "ID\n--partition-id UUID --txid TXID",
              "Deletes a dead letter by id, or every group's dead letter of one message.", &a, argc,
              argv);
    bool by_addr = a.partition_id != NULL || a.txid != NULL;
    if ((a.name != NULL) == by_addr)
        return qctl_usage(q, "give a dead letter ID or --partition-id and --txid");
    if (by_addr && (a.partition_id == NULL || a.txid == NULL))
        return qctl_usage(q, "--partition-id and --txid go together");
    Queen__V1__DeleteDeadLetterRequest req = QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__INIT;
    Queen__V1__DeadLetterAddress addr = QUEEN__V1__DEAD_LETTER_ADDRESS__INIT;
    if (by_addr) {
        addr.partition_id = (char *)a.partition_id;
        addr.transaction_id = (char *)a.txid;
        req.target_case = QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ADDRESS;
        req.address = &addr;
    } else {
        req.target_case = QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ID;
        req.id = (char *)a.name;
    }
    ProtobufCMessage *resp = NULL;
    int rc = qctl_unary(q, SVC "DeleteDeadLetter", &req.base,
                        &queen__v1__delete_dead_letter_response__descriptor, 0, &resp);
    return rc != QCTL_OK ? rc : print_resp(q, resp, dlq_delete_table);
}

/* ---------------------------------------------------------------- stats */

static int stats_table(struct qctl *q, const ProtobufCMessage *m)
{
    (void)q;
    const Queen__V1__GetStatsResponse *r = UNPACKED(const Queen__V1__GetStatsResponse, m);
    struct qctl_table *t = qctl_table_new(8, "QUEUE", "PARTITIONS", "MESSAGES", "LAG", "DLQ",
                                          "GROUPS", "SEGMENTS", "BYTES");
    for (size_t i = 0; i < r->n_queues; i++) {
        const Queen__V1__QueueStats *s = r->queues[i];
        qctl_table_cell(t, "%s", s->queue);
        qctl_table_cell(t, "%u", s->partitions);
        qctl_table_cell(t, "%" PRId64, s->messages);
        qctl_table_cell(t, "%" PRId64, s->pending);
        qctl_table_cell(t, "%" PRId64, s->dead_letters);
        qctl_table_cell(t, "%u", s->consumer_groups);
        qctl_table_cell(t, "%" PRId64, s->segments);
        qctl_table_cell(t, "%" PRId64, s->bytes);
    }
    qctl_table_cell(t, "(total)");
    qctl_table_cell(t, "%s", "");
    qctl_table_cell(t, "%" PRId64, r->total_messages);
    qctl_table_cell(t, "%" PRId64, r->total_pending);
    qctl_table_cell(t, "%" PRId64, r->total_dead_letters);
    qctl_table_cell(t, "%s", "");
    qctl_table_cell(t, "%s", "");
    qctl_table_cell(t, "%s", "");
    int rc = qctl_table_print(t);
    if (rc != QCTL_OK)
        return rc;
    printf("\nbroker: up %" PRId64 " s, %" PRId64 " rpcs, %" PRId64 " pushed, %" PRId64
           " delivered, %" PRId64 " commits, %" PRId64 " segments written\n",
           r->uptime_seconds, r->rpcs, r->pushed, r->delivered, r->push_commits, r->push_segments);
    return fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
}

static int cmd_stats(struct qctl *q, int argc, char **argv)
{
    static const struct argp_option opts[] = {
        O_QUEUE("only this queue"),
        {0},
    };
    struct admin_args a = {0};
    qctl_argp(q, opts, admin_parse, NULL,
              "Shows per-queue counts (LAG: messages not yet consumed by the slowest consumer "
              "group, or all retained when no group has read the queue) and the broker's "
              "counters.",
              &a, argc, argv);
    Queen__V1__GetStatsRequest req = QUEEN__V1__GET_STATS_REQUEST__INIT;
    req.queue = (char *)str(a.queue);
    ProtobufCMessage *resp = NULL;
    int rc = qctl_unary(q, SVC "GetStats", &req.base, &queen__v1__get_stats_response__descriptor, 0,
                        &resp);
    return rc != QCTL_OK ? rc : print_resp(q, resp, stats_table);
}

const struct qctl_command qctl_admin_commands[] = {
    {"queue", "list", "list queues", cmd_queue_list},
    {"queue", "get", "show a queue, its options and partitions", cmd_queue_get},
    {"queue", "configure", "create a queue or change its options", cmd_queue_configure},
    {"queue", "delete", "delete a queue and everything in it", cmd_queue_delete},
    {"group", "list", "list consumer groups with their lag", cmd_group_list},
    {"group", "seek", "move a group's cursors to the end or to a time", cmd_group_seek},
    {"group", "delete", "forget a group's cursors", cmd_group_delete},
    {"dlq", "list", "list dead letters", cmd_dlq_list},
    {"dlq", "replay", "push dead letters back (one, or --all)", cmd_dlq_replay},
    {"dlq", "delete", "delete a dead letter", cmd_dlq_delete},
    {NULL, "stats", "per-queue counts and lag, broker counters", cmd_stats},
    {NULL, NULL, NULL, NULL},
};
