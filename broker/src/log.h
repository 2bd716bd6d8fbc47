/*
 * log.h - private to broker/: one line per event on stderr, as text
 * "2026-11-30T04:47:23.123Z INFO message key=value ..." or, with
 * QUEEN_LOG_FORMAT=json, one JSON object per line (log.c describes both).
 */
#ifndef QN_BROKER_LOG_H
#define QN_BROKER_LOG_H

enum qn_log_level { QN_LOG_DEBUG = 0, QN_LOG_INFO = 1, QN_LOG_WARN = 2, QN_LOG_ERROR = 3 };
enum qn_log_format { QN_LOG_TEXT = 0, QN_LOG_JSON = 1 };

/* Sets the threshold from "debug", "info", "warn" or "error" (others: info). */
void qn_log_set_level_name(const char *name);
void qn_log_set_level(enum qn_log_level level);
int qn_log_enabled(enum qn_log_level level);
/* Sets the line format from "text" or "json" (others: text). Call before any
 * thread logs. */
void qn_log_set_format_name(const char *name);
void qn_log_set_format(enum qn_log_format format);

void qn_log(enum qn_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define QN_DEBUG(...) (qn_log_enabled(QN_LOG_DEBUG) ? qn_log(QN_LOG_DEBUG, __VA_ARGS__) : (void)0)
#define QN_INFO(...) qn_log(QN_LOG_INFO, __VA_ARGS__)
#define QN_WARN(...) qn_log(QN_LOG_WARN, __VA_ARGS__)
#define QN_ERROR(...) qn_log(QN_LOG_ERROR, __VA_ARGS__)

#endif
