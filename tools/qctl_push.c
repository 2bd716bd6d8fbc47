/*
 * qctl_push.c - `queenctl push`: messages from a file or stdin, one per line
 * (the line without its newline is the payload) or JSON lines (--json), sent in
 * batches with several Push calls in flight on one connection.
 *
 * JSON lines: an object with "payload" (a string is sent as its UTF-8 bytes;
 * any other JSON value as its compact text) or "payload_b64" (base64 bytes), and
 * optionally "partition", "queue", "transaction_id", "trace_id" (a UUID). Any
 * other key is an error, except the field named by --txid field:NAME.
 *
 * Transaction ids (--txid): none (default; the broker mints one, so nothing is a
 * duplicate), line (PREFIX:LINE, PREFIX the file name or "stdin", or
 * --txid-prefix: pushing the same file twice is answered DUPLICATE), hash
 * ("xxh3:" and the payload's xxh3_128: equal payloads are duplicates), or
 * field:NAME (JSON lines: that field's string or integer). An explicit
 * "transaction_id" key wins over --txid.
 *
 * Order: a batch's request is wholly written before the next batch starts, so
 * the broker receives batches in input order over the one connection and keeps
 * the input order per partition, while answers are awaited for up to
 * --inflight batches at once.
 *
 * Call lifecycle (struct pcall): FREE --start--> SENDING (request being
 * written) --END_STREAM out--> AWAITING --on_close--> FREE. At most one call is
 * SENDING at a time.
 *
 * One file (about 850 lines): input, items, batching and the call pipeline
 * are one job's stages.
 *
 * Invariants:
 *   1. a line longer than --max-line fails the run (exit 2) before it is sent.
 *   2. a batch holds at most --batch items and about --batch-bytes bytes (a
 *      single larger message goes alone).
 *   3. every item sent is counted exactly once: queued, duplicate, failed, or
 *      unconfirmed (its call failed).
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qctl.h"
#include "queen/error.h"
#include "queen/ids.h"
#include "queen/v1/queue.pb-c.h"

#define PATH_PUSH "/queen.v1.QueueService/Push"
#define MAX_INFLIGHT 64u
#define ERRORS_SHOWN 10u  /* per-item failures printed before the rest are only counted */
#define ITEM_OVERHEAD 24u /* protobuf tags and lengths per item, roughly */

enum txid_mode { TXID_NONE, TXID_LINE, TXID_HASH, TXID_FIELD };

enum {
    OPT_JSON = 0x500,
    OPT_TXID,
    OPT_TXID_PREFIX,
    OPT_BATCH,
    OPT_BATCH_BYTES,
    OPT_INFLIGHT,
    OPT_MAX_LINE,
    OPT_PROGRESS,
    OPT_NO_PROGRESS,
    OPT_RESULTS,
};

struct push_args {
    const char *file; /* NULL or "-": stdin */
    const char *queue;
    const char *partition;
    bool json;
    enum txid_mode txid;
    const char *txid_field;
    const char *txid_prefix;
    uint32_t batch;
    uint32_t batch_bytes;
    uint32_t inflight;
    uint32_t max_line;
    int progress;
    bool results;
};

enum pcall_state { PC_FREE, PC_SENDING, PC_AWAITING };

struct push;

struct pcall {
    struct push *p;
    enum pcall_state state;
    qn_client_call *call; /* valid in SENDING and AWAITING */
    uint64_t *lines;      /* input line of each item */
    size_t n;
};

struct push {
    struct qctl *q;
    const struct push_args *a;
    struct pcall calls[MAX_INFLIGHT];
    unsigned awaiting;     /* calls in SENDING or AWAITING */
    struct pcall *sending; /* the call whose request is being written, or NULL */
    uint64_t sent, queued, duplicate, failed, unconfirmed;
    unsigned errors_shown;
    bool call_failed; /* a call ended without OK: stop reading */
    int exit;         /* QCTL_FAIL once something failed */
};

static void pcall_set(struct pcall *c, enum pcall_state to)
{
    switch (to) {
    case PC_FREE:
        assert(c->state != PC_FREE);
        break;
    case PC_SENDING:
        assert(c->state == PC_FREE);
        break;
    case PC_AWAITING:
        assert(c->state == PC_SENDING);
        break;
    }
    c->state = to;
}

/* ---------------------------------------------------------------- parsing */

static error_t push_parse(int key, char *arg, struct argp_state *state)
{
    struct push_args *a = qctl_cmd(state);
    switch (key) {
    case 'q':
        a->queue = arg;
        return 0;
    case 'p':
        a->partition = arg;
        return 0;
    case OPT_JSON:
        a->json = true;
        return 0;
    case OPT_TXID:
        if (strcmp(arg, "none") == 0)
            a->txid = TXID_NONE;
        else if (strcmp(arg, "line") == 0)
            a->txid = TXID_LINE;
        else if (strcmp(arg, "hash") == 0)
            a->txid = TXID_HASH;
        else if (strncmp(arg, "field:", 6) == 0 && arg[6] != '\0') {
            a->txid = TXID_FIELD;
            a->txid_field = arg + 6;
        } else
            argp_failure(state, QCTL_USAGE, 0,
                         "--txid: expected none, line, hash or field:NAME, got \"%s\"", arg);
        return 0;
    case OPT_TXID_PREFIX:
        a->txid_prefix = arg;
        return 0;
    case OPT_BATCH:
        a->batch = qctl_arg_u32(state, "--batch", arg, 1, 100000);
        return 0;
    case OPT_BATCH_BYTES:
        a->batch_bytes = qctl_arg_u32(state, "--batch-bytes", arg, 1024, 256u << 20);
        return 0;
    case OPT_INFLIGHT:
        a->inflight = qctl_arg_u32(state, "--inflight", arg, 1, MAX_INFLIGHT);
        return 0;
    case OPT_MAX_LINE:
        a->max_line = qctl_arg_u32(state, "--max-line", arg, 1, 256u << 20);
        return 0;
    case OPT_PROGRESS:
        a->progress = 1;
        return 0;
    case OPT_NO_PROGRESS:
        a->progress = -1;
        return 0;
    case OPT_RESULTS:
        a->results = true;
        return 0;
    case ARGP_KEY_ARG:
        if (a->file != NULL)
            argp_error(state, "one input file only");
        a->file = arg;
        return 0;
    case ARGP_KEY_END:
        if (a->queue == NULL)
            argp_error(state, "--queue is required");
        if (a->txid == TXID_FIELD && !a->json)
            argp_error(state, "--txid field:NAME needs --json");
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

static const struct argp_option push_options[] = {
    {"queue", 'q', "QUEUE", 0, "the queue (required; created by the first push)", 0},
    {"partition", 'p', "PARTITION", 0, "the partition (default \"Default\")", 0},
    {"json", OPT_JSON, 0, 0,
     "lines are JSON objects: payload or payload_b64, and optional partition, queue, "
     "transaction_id, trace_id",
     0},
    {"txid", OPT_TXID, "MODE", 0,
     "transaction ids: none (default), line (PREFIX:LINE), hash (of the payload), field:NAME "
     "(a JSON field)",
     0},
    {"txid-prefix", OPT_TXID_PREFIX, "PREFIX", 0,
     "prefix of --txid line ids (default: the file name, or stdin)", 0},
    {"batch", OPT_BATCH, "N", 0, "messages per Push call (default 1000)", 0},
    {"batch-bytes", OPT_BATCH_BYTES, "BYTES", 0, "payload bytes per Push call (default 1 MiB)", 0},
    {"inflight", OPT_INFLIGHT, "N", 0, "Push calls awaiting their answer at once (default 4)", 0},
    {"max-line", OPT_MAX_LINE, "BYTES", 0, "longest input line accepted (default 4 MiB)", 0},
    {"progress", OPT_PROGRESS, 0, 0, "show the progress line even when stderr is not a terminal",
     0},
    {"no-progress", OPT_NO_PROGRESS, 0, 0, "never show the progress line", 0},
    {"results", OPT_RESULTS, 0, 0,
     "print every item's result (line, status, partition, offset, message id)", 0},
    {0},
};

/* ---------------------------------------------------------------- input */

struct input {
    FILE *f;
    const char *name; /* for messages */
    uint64_t lineno;
    char *buf;
    size_t cap;
    size_t len;        /* of the current line */
    off_t size;        /* regular file: its size, for the progress line; else -1 */
    uint64_t consumed; /* bytes read */
};

/* Reads the next line without its '\n'. Returns 1, 0 at the end, or an exit
 * status (message printed). */
static int next_line(struct input *in, size_t max)
{
    in->len = 0;
    bool any = false;
    for (;;) {
        if (in->cap - in->len < 2) {
            size_t ncap = in->cap ? in->cap * 2 : 4096;
            if (ncap > max + 2)
                ncap = max + 2;
            if (ncap <= in->cap)
                return qctl_fail(QCTL_USAGE, "%s: line %" PRIu64 ": longer than %zu bytes",
                                 in->name, in->lineno + 1, max);
            char *nb = realloc(in->buf, ncap);
            if (nb == NULL)
                return qctl_fail(QCTL_FAIL, "out of memory");
            in->buf = nb;
            in->cap = ncap;
        }
        if (fgets(in->buf + in->len, (int)(in->cap - in->len), in->f) == NULL) {
            if (ferror(in->f))
                return qctl_fail(QCTL_FAIL, "cannot read %s: %s", in->name, strerror(errno));
            if (!any)
                return 0;
            break;
        }
        any = true;
        size_t got = strlen(in->buf + in->len);
        /* fgets stops at a NUL byte too: a NUL inside a line is not supported. */
        in->len += got;
        in->consumed += got;
        if (in->len > 0 && in->buf[in->len - 1] == '\n') {
            in->len--;
            break;
        }
        if (in->len > max)
            return qctl_fail(QCTL_USAGE, "%s: line %" PRIu64 ": longer than %zu bytes", in->name,
                             in->lineno + 1, max);
    }
    if (in->len > max)
        return qctl_fail(QCTL_USAGE, "%s: line %" PRIu64 ": longer than %zu bytes", in->name,
                         in->lineno + 1, max);
    in->buf[in->len] = '\0';
    in->lineno++;
    return 1;
}

/* ---------------------------------------------------------------- items */

struct batch {
    Queen__V1__PushItem *items;
    Queen__V1__PushItem **ptrs;
    uint64_t *lines;
    size_t n, cap;
    size_t bytes;
};

static char *xstrndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static void item_release(Queen__V1__PushItem *it)
{
    free(it->payload.data);
    if (it->transaction_id != protobuf_c_empty_string)
        free(it->transaction_id);
    if (it->trace_id != protobuf_c_empty_string)
        free(it->trace_id);
    if (it->partition != protobuf_c_empty_string)
        free(it->partition);
    if (it->queue != protobuf_c_empty_string)
        free(it->queue);
}

static void batch_clear(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        item_release(&b->items[i]);
    b->n = 0;
    b->bytes = 0;
}

static void batch_free(struct batch *b)
{
    batch_clear(b);
    free(b->items);
    free(b->ptrs);
    free(b->lines);
}

/* The payload, partition, queue, trace and transaction id of one JSON line. */
static int json_item(const struct push_args *a, const struct input *in, Queen__V1__PushItem *it)
{
    json_error_t jerr;
    json_t *o = json_loadb(in->buf, in->len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    int rc = QCTL_USAGE;
    const char *where = in->name;
    uint64_t ln = in->lineno;
    if (o == NULL) {
        qctl_fail(rc, "%s: line %" PRIu64 ": invalid json at column %d: %s", where, ln, jerr.column,
                  jerr.text);
        return rc;
    }
    if (!json_is_object(o)) {
        qctl_fail(rc, "%s: line %" PRIu64 ": not a json object", where, ln);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        static const char *const known[] = {"payload", "payload_b64",    "partition",
                                            "queue",   "transaction_id", "trace_id"};
        bool ok = a->txid == TXID_FIELD && strcmp(key, a->txid_field) == 0;
        for (size_t i = 0; !ok && i < sizeof known / sizeof known[0]; i++)
            ok = strcmp(key, known[i]) == 0;
        if (!ok) {
            qctl_fail(rc, "%s: line %" PRIu64 ": unknown key \"%s\"", where, ln, key);
            goto out;
        }
    }
    json_t *pl = json_object_get(o, "payload");
    json_t *pb = json_object_get(o, "payload_b64");
    if ((pl == NULL) == (pb == NULL)) {
        qctl_fail(rc, "%s: line %" PRIu64 ": give exactly one of payload and payload_b64", where,
                  ln);
        goto out;
    }
    if (pb != NULL) {
        size_t bad = 0, blen = json_is_string(pb) ? json_string_length(pb) : 0;
        long got = -1;
        if (json_is_string(pb)) {
            it->payload.data = malloc(blen / 4 * 3 + 3);
            if (it->payload.data == NULL) {
                rc = qctl_fail(QCTL_FAIL, "out of memory");
                goto out;
            }
            got = qctl_b64_decode(json_string_value(pb), blen, it->payload.data, &bad);
        }
        if (got < 0) {
            qctl_fail(rc, "%s: line %" PRIu64 ": payload_b64: not base64", where, ln);
            goto out;
        }
        it->payload.len = (size_t)got;
    } else if (json_is_string(pl)) {
        it->payload.len = json_string_length(pl);
        it->payload.data = (uint8_t *)xstrndup(json_string_value(pl), it->payload.len);
    } else {
        char *text = json_dumps(pl, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        it->payload.len = text != NULL ? strlen(text) : 0;
        it->payload.data = (uint8_t *)text;
    }
    if (it->payload.data == NULL) {
        rc = qctl_fail(QCTL_FAIL, "out of memory");
        goto out;
    }
    static const struct {
        const char *key;
        size_t off;
    } strs[] = {
        {"partition", offsetof(Queen__V1__PushItem, partition)},
        {"queue", offsetof(Queen__V1__PushItem, queue)},
        {"transaction_id", offsetof(Queen__V1__PushItem, transaction_id)},
        {"trace_id", offsetof(Queen__V1__PushItem, trace_id)},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        json_t *s = json_object_get(o, strs[i].key);
        if (s == NULL || json_is_null(s))
            continue;
        if (!json_is_string(s)) {
            qctl_fail(rc, "%s: line %" PRIu64 ": %s: not a string", where, ln, strs[i].key);
            goto out;
        }
        char *d = xstrndup(json_string_value(s), json_string_length(s));
        if (d == NULL) {
            rc = qctl_fail(QCTL_FAIL, "out of memory");
            goto out;
        }
        *(char **)((char *)it + strs[i].off) = d;
    }
    if (a->txid == TXID_FIELD && it->transaction_id == protobuf_c_empty_string) {
        json_t *f = json_object_get(o, a->txid_field);
        char num[32];
        const char *txt = NULL;
        size_t tlen = 0;
        if (json_is_string(f)) {
            txt = json_string_value(f);
            tlen = json_string_length(f);
        } else if (json_is_integer(f)) {
            tlen =
                (size_t)snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(f));
            txt = num;
        } else {
            qctl_fail(rc, "%s: line %" PRIu64 ": field \"%s\" for the transaction id is %s", where,
                      ln, a->txid_field, f == NULL ? "missing" : "neither a string nor an integer");
            goto out;
        }
        it->transaction_id = xstrndup(txt, tlen);
        if (it->transaction_id == NULL) {
            it->transaction_id = (char *)protobuf_c_empty_string;
            rc = qctl_fail(QCTL_FAIL, "out of memory");
            goto out;
        }
    }
    rc = QCTL_OK;
out:
    json_decref(o);
    return rc;
}

/* Fills item it from the current line. Returns QCTL_OK or an exit status. */
static int make_item(const struct push_args *a, const struct input *in, const char *prefix,
                     Queen__V1__PushItem *it)
{
    Queen__V1__PushItem init = QUEEN__V1__PUSH_ITEM__INIT;
    *it = init;
    int rc = QCTL_OK;
    if (a->json) {
        rc = json_item(a, in, it);
    } else {
        it->payload.len = in->len;
        it->payload.data = (uint8_t *)xstrndup(in->buf, in->len);
        if (it->payload.data == NULL)
            rc = qctl_fail(QCTL_FAIL, "out of memory");
    }
    if (rc == QCTL_OK && it->payload.len == 0)
        rc = qctl_fail(QCTL_USAGE, "%s: line %" PRIu64 ": empty payload (a message needs 1 byte)",
                       in->name, in->lineno);
    if (rc == QCTL_OK && it->transaction_id == protobuf_c_empty_string && a->txid != TXID_NONE &&
        a->txid != TXID_FIELD) {
        char txid[300];
        if (a->txid == TXID_LINE) {
            snprintf(txid, sizeof txid, "%s:%" PRIu64, prefix, in->lineno);
        } else {
            uint8_t h[QN_HASH_LEN];
            char hex[33];
            qn_txn_hash(it->payload.data, it->payload.len, h);
            qn_hash_hex(h, hex);
            snprintf(txid, sizeof txid, "xxh3:%s", hex);
        }
        it->transaction_id = strdup(txid);
        if (it->transaction_id == NULL) {
            it->transaction_id = (char *)protobuf_c_empty_string;
            rc = qctl_fail(QCTL_FAIL, "out of memory");
        }
    }
    if (rc == QCTL_OK && it->queue == protobuf_c_empty_string)
        it->queue = strdup(a->queue);
    if (rc == QCTL_OK && it->partition == protobuf_c_empty_string && a->partition != NULL)
        it->partition = strdup(a->partition);
    if (rc == QCTL_OK && (it->queue == NULL || it->partition == NULL)) {
        if (it->queue == NULL)
            it->queue = (char *)protobuf_c_empty_string;
        if (it->partition == NULL)
            it->partition = (char *)protobuf_c_empty_string;
        rc = qctl_fail(QCTL_FAIL, "out of memory");
    }
    if (rc != QCTL_OK)
        item_release(it);
    return rc;
}

/* ---------------------------------------------------------------- calls */

static const char *push_status_name(int s)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&queen__v1__push_status__descriptor, s);
    if (v == NULL)
        return "?";
    return strncmp(v->name, "PUSH_STATUS_", 12) == 0 ? v->name + 12 : v->name;
}

static void print_result(const struct push *p, uint64_t line, const Queen__V1__PushResult *r)
{
    if (qctl_json(p->q)) {
        json_t *o = qctl_pb_json(&r->base);
        if (o != NULL)
            json_object_set_new(o, "line", json_integer((json_int_t)line));
        qctl_emit(o);
        return;
    }
    printf("line %" PRIu64 "\t%s\t%s\t%" PRId64 "\t%s%s%s\n", line, push_status_name(r->status),
           r->partition, r->offset, r->message_id, r->error[0] ? "\t" : "", r->error);
}

static void push_closed(qn_client_call *call, const struct qn_client_call_result *res, void *ud)
{
    (void)call;
    struct pcall *c = ud;
    struct push *p = c->p;
    if (p->sending == c)
        p->sending = NULL;
    p->awaiting--;
    struct qn_client_status st;
    qn_client_result_status(res, &st);
    Queen__V1__PushResponse *r = NULL;
    if (st.fail == QN_CLIENT_FAIL_NONE && st.code == 0) {
        r = res->msg != NULL ? queen__v1__push_response__unpack(NULL, res->msg_len, res->msg)
                             : NULL;
        if (r == NULL || r->n_results != c->n) {
            snprintf(st.message, sizeof st.message, "the Push answer %s (%zu items sent)",
                     r == NULL ? "did not decode" : "has the wrong number of results", c->n);
            st.fail = QN_CLIENT_FAIL_RESPONSE;
        }
    }
    if (st.fail != QN_CLIENT_FAIL_NONE || st.code != 0) {
        p->unconfirmed += c->n;
        if (!p->call_failed)
            qctl_status_fail(&st);
        p->call_failed = true;
        p->exit = QCTL_FAIL;
    } else {
        for (size_t i = 0; i < r->n_results; i++) {
            const Queen__V1__PushResult *it = r->results[i];
            uint64_t line = it->index < c->n ? c->lines[it->index] : 0;
            switch (it->status) {
            case QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED:
                p->queued++;
                break;
            case QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE:
                p->duplicate++;
                break;
            default:
                p->failed++;
                p->exit = QCTL_FAIL;
                if (p->errors_shown++ < ERRORS_SHOWN)
                    qctl_fail(QCTL_FAIL, "line %" PRIu64 ": %s: %s", line,
                              push_status_name(it->status), it->error);
            }
            if (p->a->results)
                print_result(p, line, it);
        }
    }
    if (r != NULL)
        queen__v1__push_response__free_unpacked(r, NULL);
    free(c->lines);
    c->lines = NULL;
    c->n = 0;
    c->call = NULL;
    pcall_set(c, PC_FREE);
}

static const struct qn_client_call_cbs push_cbs = {.on_close = push_closed};

/* Starts a Push of the batch on a free call slot. Returns QCTL_OK or a status. */
static int start_batch(struct push *p, struct batch *b)
{
    struct pcall *c = NULL;
    for (unsigned i = 0; i < MAX_INFLIGHT && c == NULL; i++)
        if (p->calls[i].state == PC_FREE)
            c = &p->calls[i];
    assert(c != NULL);
    c->p = p;
    c->lines = malloc(b->n * sizeof *c->lines);
    if (c->lines == NULL)
        return qctl_fail(QCTL_FAIL, "out of memory");
    memcpy(c->lines, b->lines, b->n * sizeof *c->lines);
    c->n = b->n;
    Queen__V1__PushRequest req = QUEEN__V1__PUSH_REQUEST__INIT;
    for (size_t i = 0; i < b->n; i++)
        b->ptrs[i] = &b->items[i];
    req.items = b->ptrs;
    req.n_items = b->n;
    struct qn_client_call_opts o = qctl_call_opts(p->q, 0);
    int rc = qn_client_call_start(p->q->c, PATH_PUSH, &o, &push_cbs, c, &c->call);
    if (rc == QN_OK) {
        rc = qn_client_call_send(c->call, &req.base);
        if (rc == QN_OK) {
            qn_client_call_close_send(c->call);
        } else {
            qn_client_call_cancel(c->call);
        }
    } else {
        free(c->lines);
        c->lines = NULL;
        struct qn_client_status st = *qn_client_last_status(p->q->c);
        if (st.fail == QN_CLIENT_FAIL_NONE)
            snprintf(st.message, sizeof st.message, "cannot start a Push call: %s",
                     qn_strerror(rc));
        p->unconfirmed += b->n;
        batch_clear(b);
        return qctl_status_fail(&st);
    }
    pcall_set(c, PC_SENDING);
    p->sending = c;
    p->awaiting++;
    p->sent += b->n;
    batch_clear(b);
    /* A request over the send limit was cancelled; its on_close counts it. */
    if (rc != QN_OK && rc != QN_ELIMIT)
        return qctl_fail(QCTL_FAIL, "cannot queue a Push request: %s", qn_strerror(rc));
    return QCTL_OK;
}

static int batch_add(struct batch *b, const Queen__V1__PushItem *it, uint64_t line)
{
    if (b->n == b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 256;
        Queen__V1__PushItem *ni = realloc(b->items, ncap * sizeof *ni);
        if (ni == NULL)
            return QCTL_FAIL;
        b->items = ni;
        Queen__V1__PushItem **np = realloc(b->ptrs, ncap * sizeof *np);
        if (np == NULL)
            return QCTL_FAIL;
        b->ptrs = np;
        uint64_t *nl = realloc(b->lines, ncap * sizeof *nl);
        if (nl == NULL)
            return QCTL_FAIL;
        b->lines = nl;
        b->cap = ncap;
    }
    b->items[b->n] = *it;
    b->lines[b->n] = line;
    b->n++;
    b->bytes += it->payload.len + strlen(it->transaction_id) + strlen(it->queue) +
                strlen(it->partition) + strlen(it->trace_id) + ITEM_OVERHEAD;
    return QCTL_OK;
}

/* ---------------------------------------------------------------- run */

/* SENDING -> AWAITING once the request's END_STREAM went out. */
static void written_out(struct push *p)
{
    if (p->sending != NULL && qn_client_call_sent(p->sending->call)) {
        pcall_set(p->sending, PC_AWAITING);
        p->sending = NULL;
    }
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int summary(struct push *p, double secs)
{
    if (qctl_json(p->q)) {
        json_t *o = json_pack("{sIsIsIsIsIsf}", "messages", (json_int_t)p->sent, "queued",
                              (json_int_t)p->queued, "duplicate", (json_int_t)p->duplicate,
                              "failed", (json_int_t)p->failed, "unconfirmed",
                              (json_int_t)p->unconfirmed, "seconds", secs);
        return qctl_emit(o);
    }
    printf("pushed %" PRIu64 " messages to %s in %.2f s (%.0f msg/s): %" PRIu64 " queued, %" PRIu64
           " duplicate, %" PRIu64 " failed",
           p->sent, p->a->queue, secs, secs > 0 ? (double)(p->queued + p->duplicate) / secs : 0.0,
           p->queued, p->duplicate, p->failed);
    if (p->unconfirmed > 0)
        printf(", %" PRIu64 " unconfirmed (their call failed)", p->unconfirmed);
    putchar('\n');
    return fflush(stdout) == 0 ? QCTL_OK : QCTL_FAIL;
}

static int cmd_push(struct qctl *q, int argc, char **argv)
{
    struct push_args a = {
        .batch = 1000,
        .batch_bytes = 1u << 20,
        .inflight = 4,
        .max_line = 4u << 20,
    };
    qctl_argp(q, push_options, push_parse, "[FILE]",
              "Pushes messages read from FILE (or standard input): one per line, the line "
              "without its newline as the payload, or JSON lines with --json. Prints a summary "
              "with the QUEUED, DUPLICATE and FAILED counts, and a progress line on stderr "
              "(on a terminal, or with --progress). Input order is kept per partition.",
              &a, argc, argv);
    struct input in = {.f = stdin, .name = "stdin", .size = -1};
    const char *prefix = a.txid_prefix;
    if (a.file != NULL && strcmp(a.file, "-") != 0) {
        in.f = fopen(a.file, "r");
        if (in.f == NULL)
            return qctl_fail(QCTL_USAGE, "cannot open %s: %s", a.file, strerror(errno));
        in.name = a.file;
        struct stat sb;
        if (fstat(fileno(in.f), &sb) == 0 && S_ISREG(sb.st_mode))
            in.size = sb.st_size;
    }
    if (prefix == NULL)
        prefix = in.name;
    int rc = qctl_connect(q);
    if (rc != QCTL_OK) {
        if (in.f != stdin)
            fclose(in.f);
        return rc;
    }
    /* The first ^C stops reading and waits for the answers; a second one kills. */
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESETHAND}, old_int;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);

    struct push p = {.q = q, .a = &a};
    struct batch b = {0};
    struct qctl_progress pr;
    qctl_progress_init(&pr, a.progress);
    bool eof = false;
    rc = QCTL_OK;
    while (rc == QCTL_OK) {
        /* Start batches while the previous request is written out and room is left. */
        while (!eof && !p.call_failed && !interrupted && p.sending == NULL &&
               p.awaiting < a.inflight && qn_client_room(q->c) > 0) {
            while (b.n < a.batch && b.bytes < a.batch_bytes) {
                int got = next_line(&in, a.max_line);
                if (got == 0) {
                    eof = true;
                    break;
                }
                if (got != 1) {
                    rc = got;
                    break;
                }
                Queen__V1__PushItem it;
                rc = make_item(&a, &in, prefix, &it);
                if (rc != QCTL_OK)
                    break;
                if (batch_add(&b, &it, in.lineno) != QCTL_OK) {
                    item_release(&it);
                    rc = qctl_fail(QCTL_FAIL, "out of memory");
                    break;
                }
            }
            if (rc != QCTL_OK || b.n == 0)
                break;
            rc = start_batch(&p, &b);
            if (rc != QCTL_OK)
                break;
        }
        if (rc != QCTL_OK)
            break;
        written_out(&p);
        if (p.awaiting == 0 && (eof || p.call_failed || interrupted))
            break;
        char extra[48] = "";
        if (in.size > 0)
            snprintf(extra, sizeof extra, " (%.0f%% of %s read)",
                     100.0 * (double)in.consumed / (double)in.size, in.name);
        qctl_progress(&pr, "push", p.queued + p.duplicate + p.failed, "messages", extra, false);
        /* A dead connection ended every open call inside qn_client_run. */
        if (qn_client_run(q->c, 200) == QN_ECLOSED)
            break;
    }
    /* Wait for answers to what was sent, even after a failure. */
    while (p.awaiting > 0 && qn_client_run(q->c, 200) != QN_ECLOSED)
        written_out(&p);
    sigaction(SIGINT, &old_int, NULL);
    qctl_progress(&pr, "push", p.queued + p.duplicate + p.failed, "messages", "", true);
    batch_free(&b);
    free(in.buf);
    if (in.f != stdin)
        fclose(in.f);
    int src = summary(&p, qctl_now_s() - pr.start);
    if (interrupted && rc == QCTL_OK)
        rc = qctl_fail(QCTL_FAIL, "interrupted: stopped reading at line %" PRIu64, in.lineno);
    if (rc == QCTL_OK)
        rc = p.exit;
    if (rc == QCTL_OK)
        rc = src;
    return rc;
}

const struct qctl_command qctl_push_commands[] = {
    {NULL, "push", "push lines or JSON lines from a file or stdin", cmd_push},
    {NULL, NULL, NULL, NULL},
};
