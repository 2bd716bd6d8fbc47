/*
 * qctl_util.c - queenctl's shared parts (see qctl.h): failure messages, global
 * options and their environment variables, argp glue, the connection and unary
 * calls, option value parsers (numbers, booleans, durations, times).
 * Output lives in qctl_out.c.
 *
 * Does not: know any command (the command files do).
 * Invariants:
 *   1. every failure prints exactly one line on stderr, "queenctl: ..." (usage
 *      errors add argp's pointer to --help).
 *   2. a value parser either returns a value in its stated range or exits 2
 *      through argp_failure naming the option.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qctl.h"
#include "queen/error.h"

#define DEFAULT_ADDR "127.0.0.1:6632"
#define DEFAULT_TIMEOUT_MS 30000
#define TIMEOUT_MAX_MS (24ll * 3600 * 1000)

/* ---------------------------------------------------------------- messages */

int qctl_fail(int status, const char *fmt, ...)
{
    va_list ap;
    fputs("queenctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return status;
}

int qctl_usage(const struct qctl *q, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", q->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", q->name);
    return QCTL_USAGE;
}

int qctl_status_fail(const struct qn_client_status *st)
{
    if (st->fail == QN_CLIENT_FAIL_NONE) {
        const char *name = qn_client_code_name(st->code);
        char num[16];
        if (name == NULL) {
            snprintf(num, sizeof num, "status %d", st->code);
            name = num;
        }
        return qctl_fail(QCTL_FAIL, "%s%s%s", name, st->message[0] ? ": " : "", st->message);
    }
    return qctl_fail(st->fail == QN_CLIENT_FAIL_CONFIG ? QCTL_USAGE : QCTL_FAIL, "%s", st->message);
}

/* ---------------------------------------------------------------- global options */

enum {
    OPT_TLS = 0x100,
    OPT_CA,
    OPT_CERT,
    OPT_KEY,
    OPT_SERVER_NAME,
    OPT_TOKEN,
    OPT_TIMEOUT,
};

static const struct argp_option global_options[] = {
    {0, 0, 0, 0, "Connection and output (every command):", 100},
    {"addr", 'a', "HOST:PORT", 0, "broker address (QUEEN_ADDR; default " DEFAULT_ADDR ")", 0},
    {"tls", OPT_TLS, 0, 0, "use TLS (QUEEN_TLS=true)", 0},
    {"ca", OPT_CA, "FILE", 0, "CA bundle to verify the broker (QUEEN_TLS_CA); implies --tls", 0},
    {"cert", OPT_CERT, "FILE", 0, "client certificate for mTLS (QUEEN_TLS_CERT); implies --tls", 0},
    {"key", OPT_KEY, "FILE", 0, "key of the client certificate (QUEEN_TLS_KEY); implies --tls", 0},
    {"server-name", OPT_SERVER_NAME, "NAME", 0,
     "name to verify in the broker's certificate (QUEEN_TLS_SERVER_NAME; default: the host)", 0},
    {"token", OPT_TOKEN, "TOKEN", 0, "bearer token sent with every call (QUEEN_TOKEN)", 0},
    {"timeout", OPT_TIMEOUT, "DURATION", 0, "deadline of each call, e.g. 500ms, 10s (default 30s)",
     0},
    {"output", 'o', "FORMAT", 0, "table or json (default: table on a terminal, else json)", 0},
    {0},
};

static error_t global_parse(int key, char *arg, struct argp_state *state)
{
    struct qctl *q = state->input;
    struct qctl_global *g = &q->g;
    switch (key) {
    case 'a':
        g->addr = arg;
        return 0;
    case OPT_TLS:
        g->tls = true;
        return 0;
    case OPT_CA:
        g->ca = arg;
        g->ca_flag = true;
        return 0;
    case OPT_CERT:
        g->cert = arg;
        g->cert_flag = true;
        return 0;
    case OPT_KEY:
        g->key = arg;
        g->key_flag = true;
        return 0;
    case OPT_SERVER_NAME:
        g->server_name = arg;
        return 0;
    case OPT_TOKEN:
        g->token = arg;
        return 0;
    case OPT_TIMEOUT:
        g->timeout_ms = qctl_arg_duration(state, "--timeout", arg, TIMEOUT_MAX_MS);
        if (g->timeout_ms == 0)
            argp_failure(state, QCTL_USAGE, 0, "--timeout: must be more than 0");
        return 0;
    case 'o':
        if (strcmp(arg, "json") == 0)
            g->output = QCTL_OUT_JSON;
        else if (strcmp(arg, "table") == 0)
            g->output = QCTL_OUT_TABLE;
        else
            argp_failure(state, QCTL_USAGE, 0, "-o: expected table or json, got \"%s\"", arg);
        g->output_set = true;
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

const struct argp qctl_global_argp = {global_options, global_parse, 0, 0, 0, 0, 0};

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

int qctl_global_defaults(struct qctl_global *g)
{
    memset(g, 0, sizeof *g);
    g->addr = env("QUEEN_ADDR") != NULL ? env("QUEEN_ADDR") : DEFAULT_ADDR;
    const char *t = env("QUEEN_TLS");
    if (t != NULL && !qctl_parse_bool(t, &g->tls))
        return qctl_fail(QCTL_USAGE, "QUEEN_TLS: expected true or false, got \"%s\"", t);
    g->ca = env("QUEEN_TLS_CA");
    g->cert = env("QUEEN_TLS_CERT");
    g->key = env("QUEEN_TLS_KEY");
    g->server_name = env("QUEEN_TLS_SERVER_NAME");
    g->token = env("QUEEN_TOKEN");
    g->timeout_ms = DEFAULT_TIMEOUT_MS;
    g->output = isatty(STDOUT_FILENO) ? QCTL_OUT_TABLE : QCTL_OUT_JSON;
    return QCTL_OK;
}

static error_t cmd_parse(int key, char *arg, struct argp_state *state)
{
    struct qctl_parse *p = state->input;
    if (key == ARGP_KEY_INIT) {
        state->child_inputs[0] = p->q;
        return 0;
    }
    if (p->parser != NULL)
        return p->parser(key, arg, state);
    if (key == ARGP_KEY_ARG)
        argp_error(state, "unexpected argument \"%s\"", arg);
    return ARGP_ERR_UNKNOWN;
}

void *qctl_cmd(const struct argp_state *state)
{
    return ((struct qctl_parse *)state->input)->cmd;
}

void qctl_argp(struct qctl *q, const struct argp_option *options, argp_parser_t parser,
               const char *args_doc, const char *doc, void *cmd, int argc, char **argv)
{
    struct argp_child children[] = {{&qctl_global_argp, 0, 0, 0}, {0}};
    struct argp a = {options, cmd_parse, args_doc, doc, children, 0, 0};
    struct qctl_parse p = {q, cmd, parser};
    /* argp names the command in usage and messages after argv[0]. */
    argv[0] = (char *)q->name;
    argp_parse(&a, argc, argv, 0, NULL, &p);
}

/* ---------------------------------------------------------------- connection */

int qctl_connect(struct qctl *q)
{
    struct qctl_global *g = &q->g;
    bool tls = g->tls || g->ca_flag || g->cert_flag || g->key_flag;
    struct qn_client_config cfg = {
        .target = g->addr,
        .tls = tls,
        /* QUEEN_TLS_* files apply only with TLS on (they may be set for a broker). */
        .ca_file = tls ? g->ca : NULL,
        .cert_file = tls ? g->cert : NULL,
        .key_file = tls ? g->key : NULL,
        .server_name = g->server_name,
        .verify = QN_CLIENT_VERIFY_FULL,
        .token = g->token,
        .connect_timeout_ms = g->timeout_ms > 10000 ? 10000 : (int)g->timeout_ms,
    };
    struct qn_client_status st;
    if (qn_client_dial(&cfg, &q->c, &st) != QN_OK) {
        q->c = NULL;
        return qctl_status_fail(&st);
    }
    return QCTL_OK;
}

void qctl_close(struct qctl *q)
{
    qn_client_free(q->c);
    q->c = NULL;
}

struct qn_client_call_opts qctl_call_opts(const struct qctl *q, int64_t at_least_ms)
{
    struct qn_client_call_opts o = {
        .timeout_ms = q->g.timeout_ms > at_least_ms ? q->g.timeout_ms : at_least_ms,
    };
    return o;
}

int qctl_unary(struct qctl *q, const char *path, const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *desc, int64_t timeout_ms, ProtobufCMessage **resp)
{
    if (q->c == NULL) {
        int rc = qctl_connect(q);
        if (rc != QCTL_OK)
            return rc;
    }
    struct qn_client_call_opts o = qctl_call_opts(q, timeout_ms);
    struct qn_client_status st;
    int rc = qn_client_unary(q->c, path, req, desc, &o, resp, &st);
    if (rc != QN_OK || st.code != 0)
        return qctl_status_fail(&st);
    return QCTL_OK;
}

/* ---------------------------------------------------------------- values */

uint32_t qctl_arg_u32(const struct argp_state *st, const char *opt, const char *arg, uint32_t min,
                      uint32_t max)
{
    return (uint32_t)qctl_arg_i64(st, opt, arg, min, max);
}

int64_t qctl_arg_i64(const struct argp_state *st, const char *opt, const char *arg, int64_t min,
                     int64_t max)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v < min || v > max)
        argp_failure(st, QCTL_USAGE, 0,
                     "%s: expected an integer from %" PRId64 " to %" PRId64 ", got \"%s\"", opt,
                     min, max, arg);
    return v;
}

bool qctl_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

bool qctl_arg_bool(const struct argp_state *st, const char *opt, const char *arg)
{
    bool v = false;
    if (!qctl_parse_bool(arg, &v))
        argp_failure(st, QCTL_USAGE, 0, "%s: expected true or false, got \"%s\"", opt, arg);
    return v;
}

bool qctl_parse_duration(const char *s, int64_t *ms)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || !isfinite(v) || v < 0)
        return false;
    double mult;
    if (*end == '\0' || strcmp(end, "s") == 0)
        mult = 1000;
    else if (strcmp(end, "ms") == 0)
        mult = 1;
    else if (strcmp(end, "m") == 0)
        mult = 60000;
    else if (strcmp(end, "h") == 0)
        mult = 3600000;
    else
        return false;
    double r = ceil(v * mult);
    if (r > 1e15)
        return false;
    *ms = (int64_t)r;
    return true;
}

int64_t qctl_arg_duration(const struct argp_state *st, const char *opt, const char *arg,
                          int64_t max_ms)
{
    int64_t ms = 0;
    if (!qctl_parse_duration(arg, &ms) || ms > max_ms)
        argp_failure(st, QCTL_USAGE, 0,
                     "%s: expected a duration such as 250ms, 10s, 5m or 1h (at most %" PRId64
                     " s), got \"%s\"",
                     opt, max_ms / 1000, arg);
    return ms;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

bool qctl_parse_time(const char *s, int64_t now_us, int64_t *us)
{
    if (s[0] == '-') {
        int64_t ms;
        if (!qctl_parse_duration(s + 1, &ms))
            return false;
        *us = now_us - ms * 1000;
        return true;
    }
    if (s[0] == '@') {
        char *end;
        errno = 0;
        double v = strtod(s + 1, &end);
        if (errno != 0 || end == s + 1 || *end != '\0' || !isfinite(v) || v < 0 || v > 1e11)
            return false;
        *us = (int64_t)llround(v * 1e6);
        return true;
    }
    /* YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm) */
    int y, mo, d, h, mi, se;
    if (strlen(s) < 20 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) ||
        s[7] != '-' || !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
        !digits(s + 17, 2, &se))
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
        return false;
    const char *p = s + 19;
    int64_t frac_us = 0;
    if (*p == '.') {
        p++;
        int n = 0;
        int64_t scale = 100000;
        while (*p >= '0' && *p <= '9') {
            if (n < 6)
                frac_us += (*p - '0') * scale;
            scale /= 10;
            n++;
            p++;
        }
        if (n == 0)
            return false;
    }
    int64_t off_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 || om > 59)
            return false;
        off_s = (oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return false;
    }
    if (*p != '\0')
        return false;
    int64_t secs =
        days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + se - off_s;
    *us = secs * 1000000 + frac_us;
    return true;
}

int64_t qctl_arg_time(const struct argp_state *st, const char *opt, const char *arg)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    int64_t us = 0;
    if (!qctl_parse_time(arg, now, &us) || us < 0)
        argp_failure(st, QCTL_USAGE, 0,
                     "%s: expected a time such as 2024-05-01T12:00:00Z, @1714564800 or -10m, "
                     "got \"%s\"",
                     opt, arg);
    return us;
}

double qctl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
