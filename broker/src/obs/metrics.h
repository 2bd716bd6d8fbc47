/*
 * obs/metrics.h - private to broker/: the metrics registry and its Prometheus
 * text exposition (format 0.0.4).
 *
 * A registry holds families (name, help, type, label names, histogram bounds);
 * a family holds series, one per distinct tuple of label values. Code that
 * counts something keeps a pointer to its series (made once, at start or on
 * first use) and calls the instrument functions below on it: a counter add, a
 * gauge set, a histogram observation, each a few instructions and never an
 * allocation. Subsystems that already keep their own counters (the store, the
 * engines) are read at scrape time instead: a collector callback copies them
 * into series just before the text is written.
 *
 * The instrument functions accept NULL (a series that could not be made, or
 * code running without a registry, as the unit suites do) and then do nothing.
 *
 * Bounds: every family holds at most max_series series (set at creation);
 * asking for one more answers NULL, and the exposition counts those refusals
 * in queen_metrics_series_refused_total.
 *
 * Threading: a registry belongs to one loop thread, as everything it counts.
 * No state at file scope.
 */
#ifndef QN_BROKER_METRICS_H
#define QN_BROKER_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

typedef struct qn_metrics qn_metrics;
struct qn_metric_family;
struct qn_metric;

enum qn_metric_type { QN_METRIC_COUNTER, QN_METRIC_GAUGE, QN_METRIC_HISTOGRAM };

/* Most label names of one family, and most buckets of one histogram. */
#define QN_METRIC_MAX_LABELS 4
#define QN_METRIC_MAX_BUCKETS 32

/* The content type of the exposition. */
#define QN_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Makes an empty registry whose families hold at most max_series series each
 * (>= 1). Returns QN_OK or QN_ENOMEM. */
int qn_metrics_new(size_t max_series, qn_metrics **out);
/* Frees the registry, its families and series. NULL allowed. */
void qn_metrics_free(qn_metrics *m);

/*
 * A registry belongs to one loop thread, which may use every call below
 * without locking. Another thread that registers families in it or looks up
 * and updates series of it (the other event loops' RPC counts, which the
 * owner's render must see) holds this lock around that work; render holds it
 * while it runs. Not recursive.
 */
void qn_metrics_lock(qn_metrics *m);
void qn_metrics_unlock(qn_metrics *m);

/*
 * Registers a family, or returns the one already registered under name when it
 * has the same type and label names (so two users may share one).
 *   name     [a-zA-Z_:][a-zA-Z0-9_:]*; a counter's ends in "_total"
 *   help     one line (escaped on output); copied
 *   labels   nlabels names ([a-zA-Z_][a-zA-Z0-9_]*, not starting "__", not "le"
 *            for histograms), copied
 *   bounds   histogram only: nbounds finite, strictly increasing upper bounds
 *            (+Inf is implicit), copied; NULL/0 for the other types
 * Returns QN_OK with *out, QN_EINVAL (a malformed name, label or bounds; or the
 * name registered with another shape) or QN_ENOMEM.
 */
int qn_metrics_family(qn_metrics *m, const char *name, const char *help, enum qn_metric_type type,
                      const char *const *labels, size_t nlabels, const double *bounds,
                      size_t nbounds, struct qn_metric_family **out);

/*
 * The series of f with these label values (one per label name, any bytes but
 * NUL; copied), made on first use. NULL for a family without labels. Returns
 * NULL when out of memory or past the family's max_series (counted). The
 * pointer stays valid until qn_metric_family_clear(f) or qn_metrics_free().
 */
struct qn_metric *qn_metric_series(struct qn_metric_family *f, const char *const *values);

/* Drops every series of f (e.g. per-queue gauges before a refresh). Pointers
 * into f's series become invalid. NULL allowed. */
void qn_metric_family_clear(struct qn_metric_family *f);

/* ---------------------------------------------------------------- instruments */

/* Counter: adds n. */
void qn_metric_inc(struct qn_metric *s, uint64_t n);
/* Counter: sets the total (a collector mirroring a subsystem's own counter,
 * which never decreases). */
void qn_metric_set_total(struct qn_metric *s, uint64_t total);
/* Gauge: sets the value. */
void qn_metric_set(struct qn_metric *s, double v);
/* Histogram: one observation (NaN is ignored). */
void qn_metric_observe(struct qn_metric *s, double v);

/* ---------------------------------------------------------------- scraping */

/* cb(ud) runs before each exposition, in the order added (collectors set the
 * series of what they mirror). Returns QN_OK or QN_ENOMEM. */
int qn_metrics_on_collect(qn_metrics *m, void (*cb)(void *ud), void *ud);
/* Removes the collector added with the same cb and ud (a module that stops). */
void qn_metrics_off_collect(qn_metrics *m, void (*cb)(void *ud), void *ud);

/*
 * Runs the collectors, then appends the exposition of every family, in the
 * order registered (HELP and TYPE lines even for a family without series),
 * to out. Returns QN_OK or QN_ENOMEM.
 */
int qn_metrics_render(qn_metrics *m, struct evbuffer *out);

/* ---------------------------------------------------------------- text helpers */

/* Formats a sample value as the text format wants it ("NaN", "+Inf", "-Inf",
 * integers without a fraction, else the shortest of %.15g/%.17g that reads
 * back exactly). Writes at most cap-1 bytes and a NUL; returns the length. */
size_t qn_metric_format_value(double v, char *out, size_t cap);

#endif
