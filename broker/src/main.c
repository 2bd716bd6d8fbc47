/*
 * main.c - the queen-broker executable.
 *
 *   queen-broker                 serve gRPC (plain and/or TLS) until SIGTERM/SIGINT; the
 *                                schema is applied while it already listens, retried
 *                                until the database answers (modules.c)
 *   queen-broker migrate         apply the schema and exit (fails at once when the
 *                                database cannot be reached)
 *   queen-broker --print-config  print the effective configuration and exit
 *   queen-broker --config-table  print the configuration table as Markdown and exit
 *
 * Exit status: 0 success, 1 runtime failure, 2 bad configuration or usage.
 */
#include <stdio.h>
#include <string.h>

#include "broker.h"
#include "config.h"
#include "log.h"
#include "modules.h"
#include "queen/error.h"
#include "queen/migrate.h"

static int usage(FILE *out)
{
    fputs("usage: queen-broker [migrate | --print-config | --config-table | --help]\n"
          "configuration comes from the environment; see README.md\n",
          out);
    return out == stderr ? 2 : 0;
}

static int migrate(const struct qn_config *cfg)
{
    char err[1024] = "";
    struct qn_migrate_report rep = {0, 0};
    int rc = qn_migrate(cfg->database_url, 120000, &rep, err, sizeof err);
    if (rc != QN_OK) {
        QN_ERROR("migrate failed: %s", err);
        return 1;
    }
    QN_INFO("migrate done files=%d applied=%d", rep.files_total, rep.files_applied);
    return 0;
}

int main(int argc, char **argv)
{
    struct qn_config cfg;
    char err[512] = "";
    int status = 0;

    if (argc > 2 ||
        (argc == 2 && strcmp(argv[1], "migrate") != 0 && strcmp(argv[1], "--print-config") != 0 &&
         strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "--config-table") != 0))
        return usage(stderr);
    if (argc == 2 && strcmp(argv[1], "--help") == 0)
        return usage(stdout);
    if (argc == 2 && strcmp(argv[1], "--config-table") == 0) {
        qn_config_print_markdown(stdout);
        return 0;
    }

    if (qn_config_load(&cfg, err, sizeof err) != QN_OK) {
        fprintf(stderr, "queen-broker: %s\n", err);
        qn_config_free(&cfg);
        return 2;
    }
    qn_log_set_level_name(cfg.log_level);
    qn_log_set_format_name(cfg.log_format);

    if (argc == 2 && strcmp(argv[1], "--print-config") == 0) {
        qn_config_print(&cfg, stdout);
    } else if (cfg.database_url[0] == '\0') {
        fprintf(stderr, "queen-broker: QUEEN_DATABASE_URL is not set\n");
        status = 2;
    } else if (argc == 2) {
        status = migrate(&cfg);
    } else {
        status = qn_broker_serve(&cfg, qn_product_modules) == QN_OK ? 0 : 1;
    }
    qn_config_free(&cfg);
    return status;
}
