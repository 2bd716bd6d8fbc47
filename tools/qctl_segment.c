/*
 * qctl_segment.c - queenctl's offline commands on the segment format
 * (codec/SPEC.md); they need no broker:
 *
 *   queenctl segment hash TXN
 *       prints xxh3_128(TXN) as 32 lower-case hex digits (what `xxhsum -H2`
 *       prints and what log_txns stores).
 *   queenctl segment encode [--level N] [--hashes FILE] < frames.jsonl > segment.zst
 *       one JSON object per line: message_id (uuid; minted UUIDv7 when absent
 *       or null), trace_id (uuid or null/absent), transaction_id (string;
 *       the message id's text when absent or null, as the broker does),
 *       producer_sub (string or null/absent), encrypted (bool, default false),
 *       payload_b64 (standard base64, required); "offset" is ignored, any other
 *       key is an error. Blank lines are skipped. --hashes writes the 16-byte-
 *       per-frame hash blob.
 *   queenctl segment decode [--base B] [--max-raw BYTES] < segment.zst
 *       one JSON object per frame: offset (B + index), message_id, trace_id
 *       (or null), transaction_id, producer_sub (or null), encrypted,
 *       payload_b64. The whole segment is validated before anything is printed.
 *
 * Exit status: 0 success; 2 bad input or usage, with one line on stderr saying
 * what is wrong and where (line, frame index, byte offset); 1 anything else
 * (I/O, memory).
 *
 * Invariants:
 *   1. Every buffer grown from input has a hard maximum (QCTL_INPUT_MAX, the
 *      codec's pack limit, --max-raw).
 *   2. Exactly one diagnostic line is printed per failed run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "qctl.h"
#include "queen/b64.h"
#include "queen/error.h"
#include "queen/frame.h"
#include "queen/ids.h"
#include "queen/segment.h"

enum { EXIT_BAD = QCTL_USAGE };

/* Largest stdin accepted by any command (a segment blob or a JSON lines file). */
#define QCTL_INPUT_MAX ((size_t)1 << 30)

#define fail qctl_fail

/* ---- small helpers ---------------------------------------------------- */

static bool parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = (int64_t)v;
    return true;
}

static bool parse_size(const char *s, size_t *out)
{
    char *end;
    if (*s == '-')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > SIZE_MAX)
        return false;
    *out = (size_t)v;
    return true;
}

/* Reads all of f into *buf (malloc'd), refusing more than max bytes. Returns
 * 0, or -1 on a read error, or -2 when the input is over max, or -3 (memory). */
static int read_all(FILE *f, size_t max, uint8_t **buf, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    if (!b)
        return -3;
    for (;;) {
        if (n == cap) {
            if (cap >= max + 1) {
                free(b);
                return -2;
            }
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            uint8_t *nb = realloc(b, ncap);
            if (!nb) {
                free(b);
                return -3;
            }
            b = nb;
            cap = ncap;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                free(b);
                return -1;
            }
            break;
        }
    }
    if (n > max) {
        free(b);
        return -2;
    }
    *buf = b;
    *len = n;
    return 0;
}

static int write_all(FILE *f, const void *data, size_t len)
{
    if (len && fwrite(data, 1, len, f) != len)
        return -1;
    return fflush(f) == 0 ? 0 : -1;
}

/* ---- segment hash ----------------------------------------------------- */

struct hash_args {
    const char *txn;
};

static error_t hash_parse(int key, char *arg, struct argp_state *state)
{
    struct hash_args *a = qctl_cmd(state);
    switch (key) {
    case ARGP_KEY_ARG:
        if (a->txn != NULL)
            argp_error(state, "one transaction id only");
        a->txn = arg;
        return 0;
    case ARGP_KEY_END:
        if (a->txn == NULL)
            argp_error(state, "the transaction id to hash is missing");
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

static int cmd_segment_hash(struct qctl *q, int argc, char **argv)
{
    struct hash_args a = {0};
    qctl_argp(q, NULL, hash_parse, "TXN",
              "Prints xxh3_128(TXN) as 32 lower-case hex digits: what `xxhsum -H2` prints and "
              "what the broker stores for a transaction id. Works offline.",
              &a, argc, argv);
    uint8_t h[QN_HASH_LEN];
    char hex[33];
    qn_txn_hash(a.txn, strlen(a.txn), h);
    qn_hash_hex(h, hex);
    if (printf("%s\n", hex) < 0 || fflush(stdout) != 0)
        return fail(EXIT_FAILURE, "cannot write to standard output");
    return 0;
}

/* ---- segment encode --------------------------------------------------- */

/* A frame under construction plus the one allocation its fields borrow from. */
struct owned_frame {
    struct qn_frame f;
    uint8_t *mem;
};

struct frame_list {
    struct owned_frame *v;
    size_t n, cap;
};

static void frame_list_free(struct frame_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].mem);
    free(l->v);
}

static bool known_key(const char *k)
{
    static const char *keys[] = {"message_id", "trace_id",    "transaction_id", "producer_sub",
                                 "encrypted",  "payload_b64", "offset"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(k, keys[i]) == 0)
            return true;
    return false;
}

static bool blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

/*
 * Turns one JSON line into *out. On bad input prints the diagnostic and returns
 * EXIT_BAD; EXIT_FAILURE when out of memory; 0 on success.
 */
static int parse_line(const char *line, size_t len, size_t lineno, size_t index,
                      struct qn_uuid7_gen *gen, struct owned_frame *out)
{
    int rc = EXIT_BAD;
    json_error_t jerr;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    uint8_t *mem = NULL;
    struct qn_frame f;
    memset(&f, 0, sizeof(f));
    if (!o) {
        fail(EXIT_BAD, "line %zu (frame %zu): invalid json at column %d: %s", lineno, index,
             jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(o)) {
        fail(EXIT_BAD, "line %zu (frame %zu): not a json object", lineno, index);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val)
    {
        if (!known_key(key)) {
            fail(EXIT_BAD, "line %zu (frame %zu): unknown key \"%s\"", lineno, index, key);
            goto out;
        }
    }

    json_t *mid = json_object_get(o, "message_id");
    if (mid && !json_is_null(mid)) {
        if (!json_is_string(mid) ||
            qn_uuid_parse(json_string_value(mid), json_string_length(mid), f.message_id) != QN_OK) {
            fail(EXIT_BAD, "line %zu (frame %zu): message_id: not a uuid", lineno, index);
            goto out;
        }
    } else {
        qn_uuid7_next(gen, qn_now_ms(), f.message_id);
    }

    json_t *tid = json_object_get(o, "trace_id");
    if (tid && !json_is_null(tid)) {
        if (!json_is_string(tid) ||
            qn_uuid_parse(json_string_value(tid), json_string_length(tid), f.trace_id) != QN_OK) {
            fail(EXIT_BAD, "line %zu (frame %zu): trace_id: not a uuid or null", lineno, index);
            goto out;
        }
        f.flags |= QN_FRAME_FLAG_TRACE;
    }

    char mid_text[QN_UUID_STR_LEN];
    const char *txn;
    size_t txn_len;
    json_t *tx = json_object_get(o, "transaction_id");
    if (tx && !json_is_null(tx)) {
        if (!json_is_string(tx)) {
            fail(EXIT_BAD, "line %zu (frame %zu): transaction_id: not a string", lineno, index);
            goto out;
        }
        txn = json_string_value(tx);
        txn_len = json_string_length(tx);
    } else {
        qn_uuid_format(f.message_id, mid_text);
        txn = mid_text;
        txn_len = QN_UUID_STR_LEN - 1;
    }
    if (txn_len > QN_FRAME_TXN_MAX) {
        fail(EXIT_BAD, "line %zu (frame %zu): transaction_id: longer than %u bytes", lineno, index,
             QN_FRAME_TXN_MAX);
        goto out;
    }

    const char *psub = NULL;
    size_t psub_len = 0;
    json_t *ps = json_object_get(o, "producer_sub");
    if (ps && !json_is_null(ps)) {
        if (!json_is_string(ps)) {
            fail(EXIT_BAD, "line %zu (frame %zu): producer_sub: not a string or null", lineno,
                 index);
            goto out;
        }
        psub = json_string_value(ps);
        psub_len = json_string_length(ps);
        if (psub_len > QN_FRAME_PSUB_MAX) {
            fail(EXIT_BAD, "line %zu (frame %zu): producer_sub: longer than %u bytes", lineno,
                 index, QN_FRAME_PSUB_MAX);
            goto out;
        }
        f.flags |= QN_FRAME_FLAG_PSUB;
    }

    json_t *enc = json_object_get(o, "encrypted");
    if (enc && !json_is_null(enc)) {
        if (!json_is_boolean(enc)) {
            fail(EXIT_BAD, "line %zu (frame %zu): encrypted: not true or false", lineno, index);
            goto out;
        }
        if (json_is_true(enc))
            f.flags |= QN_FRAME_FLAG_ENCRYPTED;
    }

    json_t *pl = json_object_get(o, "payload_b64");
    if (!pl || !json_is_string(pl)) {
        fail(EXIT_BAD, "line %zu (frame %zu): payload_b64: missing or not a string", lineno, index);
        goto out;
    }
    const char *b64 = json_string_value(pl);
    size_t b64_len = json_string_length(pl);

    /* One allocation per frame: txn | psub | payload. */
    size_t pay_max = b64_len / 4 * 3 + 3;
    mem = malloc(txn_len + psub_len + pay_max + 1);
    if (!mem) {
        rc = fail(EXIT_FAILURE, "out of memory");
        goto out;
    }
    memcpy(mem, txn, txn_len);
    if (psub_len)
        memcpy(mem + txn_len, psub, psub_len);
    size_t bad = 0;
    long pay_len = qctl_b64_decode(b64, b64_len, mem + txn_len + psub_len, &bad);
    if (pay_len < 0) {
        fail(EXIT_BAD, "line %zu (frame %zu): payload_b64: invalid base64 at character %zu", lineno,
             index, bad);
        goto out;
    }
    f.txn = mem;
    f.txn_len = txn_len;
    f.psub = (f.flags & QN_FRAME_FLAG_PSUB) ? mem + txn_len : NULL;
    f.psub_len = psub_len;
    f.payload = mem + txn_len + psub_len;
    f.payload_len = (size_t)pay_len;
    size_t size;
    int err = qn_frame_encoded_size(&f, &size);
    if (err != QN_OK) {
        fail(EXIT_BAD, "line %zu (frame %zu): %s", lineno, index, qn_strerror(err));
        goto out;
    }
    out->f = f;
    out->mem = mem;
    mem = NULL;
    rc = 0;
out:
    free(mem);
    json_decref(o);
    return rc;
}

struct encode_args {
    int level;
    const char *hashes_path;
};

enum { OPT_LEVEL = 0x200, OPT_HASHES, OPT_BASE, OPT_MAX_RAW };

static const struct argp_option encode_options[] = {
    {"level", OPT_LEVEL, "N", 0, "zstd level, 1 to 19 (default: the codec's)", 0},
    {"hashes", OPT_HASHES, "FILE", 0, "also write the 16-byte-per-frame hash blob to FILE", 0},
    {0},
};

static error_t encode_parse(int key, char *arg, struct argp_state *state)
{
    struct encode_args *a = qctl_cmd(state);
    int64_t v = 0; /* argp_failure() exits, which the compiler cannot see */
    switch (key) {
    case OPT_LEVEL:
        if (!parse_i64(arg, &v) || v < 1 || v > 19)
            argp_failure(state, EXIT_BAD, 0,
                         "--level: expected an integer from 1 to 19, got \"%s\"", arg);
        a->level = (int)v;
        return 0;
    case OPT_HASHES:
        a->hashes_path = arg;
        return 0;
    case ARGP_KEY_ARG:
        argp_error(state, "unexpected argument \"%s\" (frames are read from standard input)", arg);
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

static int cmd_segment_encode(struct qctl *q, int argc, char **argv)
{
    struct encode_args args = {0};
    qctl_argp(q, encode_options, encode_parse, "< frames.jsonl > segment.zst",
              "Packs JSON lines (message_id, trace_id, transaction_id, producer_sub, encrypted, "
              "payload_b64) into one zstd-compressed segment. Works offline.",
              &args, argc, argv);
    int level = args.level;
    const char *hashes_path = args.hashes_path;

    int rc = EXIT_FAILURE;
    struct frame_list list = {0};
    struct qn_frame *frames = NULL;
    uint8_t *hashes = NULL;
    qn_zctx *z = NULL;
    struct qn_buf blob = {0};
    FILE *hf = NULL;
    char *line = NULL;
    size_t line_cap = 0, lineno = 0, total = 0;
    struct qn_uuid7_gen gen;

    if (qn_uuid7_init(&gen) != QN_OK) {
        fail(EXIT_FAILURE, "no random source for message ids");
        goto out;
    }
    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            if (ferror(stdin)) {
                fail(EXIT_FAILURE, "cannot read standard input: %s", strerror(errno));
                goto out;
            }
            break;
        }
        lineno++;
        total += (size_t)got;
        if (total > QCTL_INPUT_MAX) {
            rc = fail(EXIT_BAD, "line %zu: input larger than %zu bytes", lineno, QCTL_INPUT_MAX);
            goto out;
        }
        if (blank(line, (size_t)got))
            continue;
        if (list.n == list.cap) {
            size_t ncap = list.cap ? list.cap * 2 : 64;
            struct owned_frame *nv = realloc(list.v, ncap * sizeof(*nv));
            if (!nv) {
                fail(EXIT_FAILURE, "out of memory");
                goto out;
            }
            list.v = nv;
            list.cap = ncap;
        }
        rc = parse_line(line, (size_t)got, lineno, list.n, &gen, &list.v[list.n]);
        if (rc != 0)
            goto out;
        rc = EXIT_FAILURE;
        list.n++;
    }
    if (list.n == 0) {
        rc = fail(EXIT_BAD, "no frames on standard input");
        goto out;
    }

    frames = malloc(list.n * sizeof(*frames));
    hashes = malloc(list.n * QN_HASH_LEN);
    if (!frames || !hashes) {
        fail(EXIT_FAILURE, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < list.n; i++)
        frames[i] = list.v[i].f;
    int err = qn_zctx_new(&z);
    if (err == QN_OK)
        err = qn_segment_pack(z, frames, list.n, level, &blob, hashes);
    if (err == QN_ELIMIT) {
        rc = fail(EXIT_BAD, "%zu frames are larger than a segment may be (%u bytes packed)", list.n,
                  (unsigned)QN_SEGMENT_RAW_MAX_DEFAULT);
        goto out;
    }
    if (err != QN_OK) {
        fail(EXIT_FAILURE, "cannot pack the segment: %s", qn_strerror(err));
        goto out;
    }
    if (hashes_path) {
        hf = fopen(hashes_path, "wb");
        if (!hf || write_all(hf, hashes, list.n * QN_HASH_LEN) != 0) {
            fail(EXIT_FAILURE, "cannot write %s: %s", hashes_path, strerror(errno));
            goto out;
        }
    }
    if (write_all(stdout, blob.data, blob.len) != 0) {
        fail(EXIT_FAILURE, "cannot write to standard output: %s", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (hf && fclose(hf) != 0 && rc == 0)
        rc = fail(EXIT_FAILURE, "cannot write %s: %s", hashes_path, strerror(errno));
    free(line);
    qn_buf_free(&blob);
    qn_zctx_free(z);
    free(hashes);
    free(frames);
    frame_list_free(&list);
    return rc;
}

/* ---- segment decode --------------------------------------------------- */

/* Builds the JSON object of one frame; NULL when a text field is not UTF-8
 * (*what names it) or memory ran out (*what is NULL). */
static json_t *frame_json(const struct qn_frame *f, int64_t offset, const char **what)
{
    char mid[QN_UUID_STR_LEN], tid[QN_UUID_STR_LEN];
    char *b64 = NULL;
    json_t *o = json_object();
    json_t *txn = NULL, *psub = NULL;
    *what = NULL;
    if (!o)
        goto fail;
    txn = json_stringn((const char *)f->txn, f->txn_len);
    if (!txn) {
        *what = "transaction_id";
        goto fail;
    }
    if (f->flags & QN_FRAME_FLAG_PSUB) {
        psub = json_stringn((const char *)f->psub, f->psub_len);
        if (!psub) {
            *what = "producer_sub";
            goto fail;
        }
    } else {
        psub = json_null();
    }
    b64 = malloc(qn_b64_encoded_len(f->payload_len, true) + 1);
    if (b64 != NULL)
        qn_b64_encode(QN_B64_STD, true, f->payload, f->payload_len, b64);
    if (!b64)
        goto fail;
    qn_uuid_format(f->message_id, mid);
    if (f->flags & QN_FRAME_FLAG_TRACE)
        qn_uuid_format(f->trace_id, tid);
    /* json_object_set_new() takes its value even when it fails. */
    if (json_object_set_new(o, "offset", json_integer(offset)) ||
        json_object_set_new(o, "message_id", json_string(mid)) ||
        json_object_set_new(o, "trace_id",
                            (f->flags & QN_FRAME_FLAG_TRACE) ? json_string(tid) : json_null()))
        goto fail;
    int e = json_object_set_new(o, "transaction_id", txn);
    txn = NULL;
    if (e)
        goto fail;
    e = json_object_set_new(o, "producer_sub", psub);
    psub = NULL;
    if (e ||
        json_object_set_new(o, "encrypted", json_boolean(f->flags & QN_FRAME_FLAG_ENCRYPTED)) ||
        json_object_set_new(o, "payload_b64", json_string(b64)))
        goto fail;
    free(b64);
    return o;
fail:
    free(b64);
    json_decref(txn);
    json_decref(psub);
    json_decref(o);
    return NULL;
}

struct decode_args {
    int64_t base;
    size_t max_raw;
};

static const struct argp_option decode_options[] = {
    {"base", OPT_BASE, "B", 0, "offset of the first frame (default 0)", 0},
    {"max-raw", OPT_MAX_RAW, "BYTES", 0, "largest decompressed segment accepted", 0},
    {0},
};

static error_t decode_parse(int key, char *arg, struct argp_state *state)
{
    struct decode_args *a = qctl_cmd(state);
    switch (key) {
    case OPT_BASE:
        if (!parse_i64(arg, &a->base))
            argp_failure(state, EXIT_BAD, 0, "--base: expected an integer, got \"%s\"", arg);
        return 0;
    case OPT_MAX_RAW:
        if (!parse_size(arg, &a->max_raw) || a->max_raw == 0)
            argp_failure(state, EXIT_BAD, 0,
                         "--max-raw: expected a positive byte count, got \"%s\"", arg);
        return 0;
    case ARGP_KEY_ARG:
        argp_error(state, "unexpected argument \"%s\" (the segment is read from standard input)",
                   arg);
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

static int cmd_segment_decode(struct qctl *q, int argc, char **argv)
{
    struct decode_args args = {.base = 0, .max_raw = QN_SEGMENT_RAW_MAX_DEFAULT};
    qctl_argp(q, decode_options, decode_parse, "< segment.zst",
              "Prints one JSON object per frame of a segment (offset, message_id, trace_id, "
              "transaction_id, producer_sub, encrypted, payload_b64), after validating all of it. "
              "Works offline.",
              &args, argc, argv);
    int64_t base = args.base;
    size_t max_raw = args.max_raw;

    int rc = EXIT_FAILURE;
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    qn_zctx *z = NULL;
    struct qn_buf raw = {0};
    json_t *o = NULL;

    /* A zstd frame is never much larger than its content. */
    size_t in_max = max_raw > QCTL_INPUT_MAX ? QCTL_INPUT_MAX : max_raw + max_raw / 64 + 4096;
    int r = read_all(stdin, in_max, &blob, &blob_len);
    if (r == -2) {
        rc = fail(EXIT_BAD, "input larger than %zu bytes: not a segment under --max-raw %zu",
                  in_max, max_raw);
        goto out;
    }
    if (r != 0) {
        fail(EXIT_FAILURE, "cannot read standard input%s", r == -3 ? ": out of memory" : "");
        goto out;
    }
    int err = qn_zctx_new(&z);
    if (err == QN_OK)
        err = qn_segment_decompress_owned(z, blob, blob_len, max_raw, &raw);
    if (err == QN_ESEGMENT_CORRUPT) {
        rc = fail(EXIT_BAD, "input (%zu bytes) is not a zstd-compressed segment: %s", blob_len,
                  qn_strerror(err));
        goto out;
    }
    if (err == QN_ESEGMENT_TOO_LARGE) {
        rc = fail(EXIT_BAD, "segment decompresses to more than %zu bytes (see --max-raw)", max_raw);
        goto out;
    }
    if (err != QN_OK) {
        fail(EXIT_FAILURE, "cannot decompress: %s", qn_strerror(err));
        goto out;
    }

    /* Pass 1: validate every frame (and its text fields) before printing. */
    struct qn_frame_error ferr = {0, 0};
    size_t count;
    err = qn_segment_count(raw.data, raw.len, &count, &ferr);
    if (err != QN_OK) {
        rc = fail(EXIT_BAD, "frame %zu at byte %zu: %s", ferr.index, ferr.byte_offset,
                  qn_strerror(err));
        goto out;
    }
    if (count == 0) {
        rc = fail(EXIT_BAD, "segment holds no frames");
        goto out;
    }
    if (base > 0 && (uint64_t)count - 1 > (uint64_t)(INT64_MAX - base)) {
        rc = fail(EXIT_BAD, "--base %" PRId64 " plus %zu frames overflows a 64-bit offset", base,
                  count);
        goto out;
    }
    for (int pass = 1; pass <= 2; pass++) {
        struct qn_frame_iter it;
        struct qn_frame f;
        qn_frame_iter_init(&it, raw.data, raw.len);
        for (;;) {
            size_t at = it.pos, index = it.index;
            int n = qn_frame_iter_next(&it, &f, &ferr);
            if (n == 0)
                break;
            if (n < 0) {
                fail(EXIT_FAILURE, "frame %zu at byte %zu: %s", ferr.index, ferr.byte_offset,
                     qn_strerror(n));
                goto out;
            }
            const char *what;
            o = frame_json(&f, base + (int64_t)index, &what);
            if (!o && what) {
                rc =
                    fail(EXIT_BAD, "frame %zu at byte %zu: %s is not valid utf-8", index, at, what);
                goto out;
            }
            if (!o) {
                fail(EXIT_FAILURE, "out of memory");
                goto out;
            }
            if (pass == 2 && (json_dumpf(o, stdout, JSON_COMPACT) != 0 || putchar('\n') == EOF)) {
                fail(EXIT_FAILURE, "cannot write to standard output");
                goto out;
            }
            json_decref(o);
            o = NULL;
        }
    }
    if (fflush(stdout) != 0) {
        fail(EXIT_FAILURE, "cannot write to standard output");
        goto out;
    }
    rc = 0;
out:
    json_decref(o);
    qn_buf_free(&raw);
    qn_zctx_free(z);
    free(blob);
    return rc;
}

/* ---- table ----------------------------------------------------------- */

const struct qctl_command qctl_segment_commands[] = {
    {"segment", "hash", "print the xxh3_128 hash of a transaction id", cmd_segment_hash},
    {"segment", "encode", "pack JSON lines into a zstd segment (stdin to stdout)",
     cmd_segment_encode},
    {"segment", "decode", "print the frames of a segment as JSON lines", cmd_segment_decode},
    {NULL, NULL, NULL, NULL},
};
