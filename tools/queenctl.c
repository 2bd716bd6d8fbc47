/*
 * queenctl - the command-line tool of the Queen broker: nouns and verbs
 * (`queenctl queue list`, `queenctl push`, `queenctl dlq replay --all`), each
 * with --help, parsed by glibc's argp.
 *
 * Commands are rows of one table assembled from the command files
 * (qctl_admin.c: queue, group, dlq, stats; qctl_push.c: push; qctl_consume.c:
 * pop, ack, tail; qctl_segment.c: segment, offline; qctl_token.c: token,
 * offline). A row is a group (or none,
 * for a top-level verb), a name, a one-line summary and a handler that parses
 * its own options with the global ones (qctl_argp) and runs.
 *
 * Here: the global options before the command, `--help` for the whole tool
 * and for each group (on stdout, exit 0), and dispatch. Exit codes: qctl.h.
 *
 * Invariants:
 *   1. every path out of main returns 0, 1 or 2 (argp's own exits use 0 and
 *      argp_err_exit_status, set to 2).
 *   2. help goes to stdout; usage errors to stderr with status 2.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qctl.h"

const char *argp_program_version = "queenctl 0.1.0";

static const struct qctl_command *const tables[] = {
    qctl_admin_commands,   qctl_push_commands,  qctl_consume_commands,
    qctl_segment_commands, qctl_token_commands,
};

#define FOR_EACH_COMMAND(c)                                                                        \
    for (size_t t_ = 0; t_ < sizeof tables / sizeof tables[0]; t_++)                               \
        for (const struct qctl_command *c = tables[t_]; c->name != NULL; c++)

static bool is_group(const char *name)
{
    FOR_EACH_COMMAND(c)
    if (c->group != NULL && strcmp(c->group, name) == 0)
        return true;
    return false;
}

static const struct qctl_command *find(const char *group, const char *name)
{
    FOR_EACH_COMMAND(c)
    {
        if (group == NULL && c->group == NULL && strcmp(c->name, name) == 0)
            return c;
        if (group != NULL && c->group != NULL && strcmp(c->group, group) == 0 &&
            strcmp(c->name, name) == 0)
            return c;
    }
    return NULL;
}

static const char tool_doc[] =
    "The command-line tool of the Queen broker: administer queues, push, pop, tail, "
    "dead letters, statistics.\v"
    "Environment: QUEEN_ADDR (default 127.0.0.1:6632), QUEEN_TLS (true/false), QUEEN_TLS_CA, "
    "QUEEN_TLS_CERT, QUEEN_TLS_KEY (used only with TLS on), QUEEN_TLS_SERVER_NAME, "
    "QUEEN_TOKEN. Flags win over the environment.\n\n"
    "Output: -o table (the default on a terminal) or -o json (the default otherwise): one "
    "compact JSON value per line, with the field names of proto/queen/v1.\n\n"
    "Exit status: 0 success; 1 failure (the broker answered a non-OK gRPC status or could "
    "not be reached, an item failed, an I/O error); 2 bad usage or bad input.\n\n"
    "Run 'queenctl COMMAND --help' or 'queenctl GROUP --help' for more.";

/* The list of commands, for the top-level help (malloc'd). */
static char *command_list(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    fputs("Commands:\n", f);
    FOR_EACH_COMMAND(c)
    {
        char name[64];
        snprintf(name, sizeof name, "%s%s%s", c->group ? c->group : "", c->group ? " " : "",
                 c->name);
        fprintf(f, "  %-18s %s\n", name, c->summary);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static char *tool_help_filter(int key, const char *text, void *input)
{
    (void)input;
    if (key != ARGP_KEY_HELP_POST_DOC)
        return (char *)text;
    char *list = command_list();
    if (list == NULL)
        return (char *)text;
    char *out = NULL;
    if (asprintf(&out, "%s\n%s", list, text) < 0)
        out = NULL;
    free(list);
    return out != NULL ? out : (char *)text;
}

struct top {
    struct qctl *q;
    int cmd; /* index in argv of the command word; 0 when none */
};

static error_t top_parse(int key, char *arg, struct argp_state *state)
{
    (void)arg;
    struct top *t = state->input;
    switch (key) {
    case ARGP_KEY_INIT:
        state->child_inputs[0] = t->q;
        return 0;
    case ARGP_KEY_ARG:
        /* The command word: stop here, the command parses the rest. */
        t->cmd = state->next - 1;
        state->next = state->argc;
        return 0;
    }
    return ARGP_ERR_UNKNOWN;
}

static void group_help(FILE *to, const char *group)
{
    fprintf(to, "Usage: queenctl %s COMMAND [OPTION...]\n\nCommands:\n", group);
    FOR_EACH_COMMAND(c)
    if (c->group != NULL && strcmp(c->group, group) == 0)
        fprintf(to, "  %-10s %s\n", c->name, c->summary);
    fprintf(to, "\nRun 'queenctl %s COMMAND --help' for a command's options.\n", group);
}

static bool help_word(const char *s)
{
    return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0 || strcmp(s, "-?") == 0 ||
           strcmp(s, "help") == 0;
}

int main(int argc, char **argv)
{
    argp_err_exit_status = QCTL_USAGE;
    /* A closed pipe on stdout ends the tool quietly, like other filters. */
    signal(SIGPIPE, SIG_DFL);

    struct qctl q = {.name = "queenctl"};
    if (qctl_global_defaults(&q.g) != QCTL_OK)
        return QCTL_USAGE;
    struct top t = {.q = &q};
    struct argp_child children[] = {{&qctl_global_argp, 0, 0, 0}, {0}};
    struct argp top = {NULL, top_parse, "COMMAND [ARG...]", tool_doc, children, tool_help_filter,
                       NULL};
    argv[0] = "queenctl";
    argp_parse(&top, argc, argv, ARGP_IN_ORDER, NULL, &t);
    if (t.cmd == 0) {
        argp_help(&top, stderr, ARGP_HELP_STD_USAGE, "queenctl");
        return qctl_fail(QCTL_USAGE, "a command is missing (see queenctl --help)");
    }
    int ac = argc - t.cmd;
    char **av = argv + t.cmd;
    const char *word = av[0];
    if (strcmp(word, "help") == 0) {
        if (ac >= 2 && is_group(av[1])) {
            group_help(stdout, av[1]);
            return QCTL_OK;
        }
        argp_help(&top, stdout, ARGP_HELP_STD_HELP, "queenctl");
        return QCTL_OK;
    }
    const struct qctl_command *c = NULL;
    char name[96];
    if (is_group(word)) {
        if (ac < 2 || help_word(av[1])) {
            group_help(ac < 2 ? stderr : stdout, word);
            return ac < 2 ? QCTL_USAGE : QCTL_OK;
        }
        c = find(word, av[1]);
        if (c == NULL)
            return qctl_fail(QCTL_USAGE, "unknown command \"%s %s\" (see queenctl %s --help)", word,
                             av[1], word);
        ac--;
        av++;
        snprintf(name, sizeof name, "queenctl %s %s", c->group, c->name);
    } else {
        c = find(NULL, word);
        if (c == NULL)
            return qctl_fail(QCTL_USAGE, "unknown command \"%s\" (see queenctl --help)", word);
        snprintf(name, sizeof name, "queenctl %s", c->name);
    }
    q.name = name;
    int rc = c->run(&q, ac, av);
    qctl_close(&q);
    return rc;
}
