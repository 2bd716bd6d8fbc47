/*
 * qctl.h - PRIVATE to tools/: what queenctl's command files share: the
 * connection settings every command takes, the connection, output (JSON lines or
 * tables), the generic protobuf-to-JSON mapping, value parsers for options, and
 * the command table entries each file provides.
 *
 * Exit status of every command (documented in README.md, section CLI):
 *   QCTL_OK (0)    success
 *   QCTL_FAIL (1)  the broker answered a non-OK gRPC status, could not be
 *                  reached, an item of the request failed (push, ack), or an I/O
 *                  error
 *   QCTL_USAGE (2) bad usage or bad input: unknown command or option, a bad
 *                  option value or environment variable, a malformed input line,
 *                  a TLS file that cannot be used
 */
#ifndef QN_TOOLS_QCTL_H
#define QN_TOOLS_QCTL_H

#include <argp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "queen/client.h"

enum { QCTL_OK = 0, QCTL_FAIL = 1, QCTL_USAGE = 2 };

enum qctl_output {
    QCTL_OUT_TABLE,
    QCTL_OUT_JSON,
};

/* Connection and output settings: flags first, then QUEEN_* variables, then
 * defaults (qctl_global_defaults). Strings are borrowed from argv / environ. */
struct qctl_global {
    const char *addr;        /* --addr, QUEEN_ADDR */
    bool tls;                /* --tls, QUEEN_TLS; implied by --ca/--cert/--key */
    const char *ca;          /* --ca, QUEEN_TLS_CA (with TLS) */
    const char *cert;        /* --cert, QUEEN_TLS_CERT (with TLS) */
    const char *key;         /* --key, QUEEN_TLS_KEY (with TLS) */
    const char *server_name; /* --server-name, QUEEN_TLS_SERVER_NAME */
    const char *token;       /* --token, QUEEN_TOKEN */
    int64_t timeout_ms;      /* --timeout: deadline of each call; default 30 s */
    enum qctl_output output; /* -o; default table on a terminal, json otherwise */
    bool output_set;
    bool ca_flag, cert_flag, key_flag; /* given as flags (imply TLS) */
};

/* One run of one command. */
struct qctl {
    struct qctl_global g;
    const char *name; /* "queenctl queue list": the command, for messages and help */
    qn_client *c;     /* after qctl_connect */
};

/* Input of every command's argp parser (argp_state->input). */
struct qctl_parse {
    struct qctl *q;
    void *cmd;            /* the command's own argument struct */
    argp_parser_t parser; /* the command's parser; NULL: positional args refused */
};

/* A command: a row of queenctl's table. */
struct qctl_command {
    const char *group; /* "queue", ...; NULL for a top-level verb */
    const char *name;  /* "list", or the verb itself for top-level ones */
    const char *summary;
    int (*run)(struct qctl *q, int argc, char **argv); /* argv[0] is the command name */
};

/* The rows each file contributes (terminated by a row with name NULL). */
extern const struct qctl_command qctl_segment_commands[];
extern const struct qctl_command qctl_admin_commands[];
extern const struct qctl_command qctl_push_commands[];
extern const struct qctl_command qctl_consume_commands[];
extern const struct qctl_command qctl_token_commands[];

/* The global options as an argp child (input: struct qctl *). */
extern const struct argp qctl_global_argp;

/* Sets g to the environment's values or the defaults. Returns QCTL_OK or
 * QCTL_USAGE (a variable that does not parse; message printed). */
int qctl_global_defaults(struct qctl_global *g);

/*
 * Parses argv for one command: its options (may be NULL), positional args doc,
 * and doc text, plus the global options. Exits with QCTL_USAGE on bad usage and
 * 0 after --help (argp's behaviour).
 */
void qctl_argp(struct qctl *q, const struct argp_option *options, argp_parser_t parser,
               const char *args_doc, const char *doc, void *cmd, int argc, char **argv);

/* The command's argument struct inside an argp parser. */
void *qctl_cmd(const struct argp_state *state);

/* Prints "queenctl: <message>" on stderr; returns status. */
int qctl_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "queenctl CMD: <message>" and a pointer to --help on stderr; returns
 * QCTL_USAGE. For usage errors found after argument parsing. */
int qctl_usage(const struct qctl *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints a failed call's status; returns QCTL_USAGE for configuration errors
 * and QCTL_FAIL otherwise. */
int qctl_status_fail(const struct qn_client_status *st);

/* Dials the broker with q->g. Returns QCTL_OK or the status printed. */
int qctl_connect(struct qctl *q);

/* Call options with the global timeout (or timeout_ms when larger). */
struct qn_client_call_opts qctl_call_opts(const struct qctl *q, int64_t at_least_ms);

/* One unary call; prints any failure. Returns QCTL_OK with *resp, or the exit
 * status. */
int qctl_unary(struct qctl *q, const char *path, const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *desc, int64_t timeout_ms, ProtobufCMessage **resp);

/* Tears down the connection. */
void qctl_close(struct qctl *q);

/* ---- output */

bool qctl_json(const struct qctl *q);

/* Prints v as one compact JSON line on stdout and takes v. Returns QCTL_OK or
 * QCTL_FAIL (write error, printed). NULL v means out of memory. */
int qctl_emit(json_t *v);

/*
 * The JSON of a protobuf message: field names as in the .proto, enums by name,
 * 64-bit integers as numbers, nested messages as objects, repeated fields as
 * arrays, a oneof member only when set. A bytes field X becomes "X" (its text
 * when valid UTF-8, else null) and "X_b64" (standard base64). NULL on ENOMEM.
 */
json_t *qctl_pb_json(const ProtobufCMessage *m);

/*
 * Decodes base64 as users write it: the standard or the URL alphabet, padded
 * (a multiple of 4 characters) or not. out must hold len / 4 * 3 + 3 bytes.
 * Returns the decoded length, or -1 with *bad the index of the first wrong
 * character (len when the text ends wrong).
 */
long qctl_b64_decode(const char *s, size_t len, uint8_t *out, size_t *bad);

/* A JSON string of arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
json_t *qctl_json_text(const char *s, size_t len);

/* Prints text for a table cell / a line: control characters and invalid UTF-8
 * escaped as \xNN, at most max bytes (0: no limit) then "...". */
void qctl_put_text(FILE *f, const uint8_t *s, size_t len, size_t max);

/* "2024-05-01T12:00:00Z" (UTC, whole seconds) or "-" for 0. */
void qctl_time_text(int64_t us, char out[32]);

/* An aligned table: add the header row, then rows, then print. */
struct qctl_table;
struct qctl_table *qctl_table_new(unsigned ncols, ...);
/* Appends one printf-formatted cell; a row is complete after ncols cells. */
void qctl_table_cell(struct qctl_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints it (on stdout), frees it, returns QCTL_OK or QCTL_FAIL. NULL t (no
 * memory) fails. */
int qctl_table_print(struct qctl_table *t);

/* ---- option values (each calls argp_failure on a bad value: exit 2) */

uint32_t qctl_arg_u32(const struct argp_state *st, const char *opt, const char *arg, uint32_t min,
                      uint32_t max);
int64_t qctl_arg_i64(const struct argp_state *st, const char *opt, const char *arg, int64_t min,
                     int64_t max);
bool qctl_arg_bool(const struct argp_state *st, const char *opt, const char *arg);
/* "250ms", "10s", "5m", "1h" or plain seconds; in milliseconds. */
int64_t qctl_arg_duration(const struct argp_state *st, const char *opt, const char *arg,
                          int64_t max_ms);
/* RFC 3339 ("2024-05-01T12:00:00Z", "...+02:00", fractions allowed), "@SECONDS"
 * since the epoch, or "-DURATION" (that long ago); microseconds since the epoch. */
int64_t qctl_arg_time(const struct argp_state *st, const char *opt, const char *arg);

/* Pure parsers behind the above: true and *out on success. */
bool qctl_parse_duration(const char *s, int64_t *ms);
bool qctl_parse_time(const char *s, int64_t now_us, int64_t *us);
bool qctl_parse_bool(const char *s, bool *out);

/* Monotonic seconds, for rates and progress. */
double qctl_now_s(void);

/* ---- progress line on stderr */

struct qctl_progress {
    bool on;      /* shown at all */
    bool tty;     /* redraw one line with \r; else a line per second */
    double start; /* qctl_now_s() at the start */
    double last;  /* last time drawn */
    bool drawn;   /* something is on the line (tty) */
};

/* Progress shown when stderr is a terminal or forced (want > 0); never when
 * want < 0. */
void qctl_progress_init(struct qctl_progress *p, int want);
/* Draws "<what>: <done> <unit>, <rate> <unit>/s, <elapsed> s<extra>" when due
 * (or always when final; the final line ends with a newline). */
void qctl_progress(struct qctl_progress *p, const char *what, uint64_t done, const char *unit,
                   const char *extra, bool final);

#endif
