/*
 * log.c - see log.h. Writes whole lines with one fwrite so lines from different
 * threads never interleave mid-line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "log.h"

static enum qn_log_level threshold = QN_LOG_INFO;

void qn_log_set_level(enum qn_log_level level)
{
    threshold = level;
}

void qn_log_set_level_name(const char *name)
{
    if (strcmp(name, "debug") == 0)
        threshold = QN_LOG_DEBUG;
    else if (strcmp(name, "warn") == 0)
        threshold = QN_LOG_WARN;
    else if (strcmp(name, "error") == 0)
        threshold = QN_LOG_ERROR;
    else
        threshold = QN_LOG_INFO;
}

int qn_log_enabled(enum qn_log_level level)
{
    return level >= threshold;
}

void qn_log(enum qn_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (level < threshold)
        return;
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)(tv.tv_usec / 1000), names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}
