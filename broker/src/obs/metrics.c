/*
 * obs/metrics.c - the metrics registry and the Prometheus text exposition
 * (implements metrics.h).
 *
 * Does: keep families and series in registration order, count, set and
 * observe, write the text format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/): a HELP and a
 * TYPE line per family, then one line per sample; label values escaped (\\,
 * \", \n), HELP text escaped (\\, \n); histograms as cumulative _bucket lines
 * with le labels ending in +Inf, then _sum and _count.
 * Does not: keep timestamps, exemplars or the OpenMetrics format; decide what
 * is counted (the callers do); lock on its own (one loop thread owns a
 * registry; another thread that updates series of it brackets its lookups and
 * updates with qn_metrics_lock/unlock, which render holds too).
 *
 * Invariants:
 *   1. A family's series count never exceeds the registry's max_series; a
 *      refused series is counted, never silently lost from the output.
 *   2. A histogram series' bucket counts sum to its count (each observation
 *      lands in exactly one bucket, the last one being +Inf), so the cumulative
 *      +Inf bucket always equals _count.
 *   3. Every name and label name written was checked at registration; every
 *      label value is escaped on output, so the text always parses.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "obs/metrics.h"
#include "queen/error.h"

struct qn_metric {
    struct qn_metric_family *fam;
    const char *values[QN_METRIC_MAX_LABELS]; /* in the same allocation */
    uint64_t count;                           /* counter total; histogram observations */
    double value;                             /* gauge value; histogram sum */
    uint64_t *buckets; /* histogram: nbounds + 1 non-cumulative counts (last: +Inf) */
};

struct qn_metric_family {
    qn_metrics *reg;
    char *name;
    char *help;
    enum qn_metric_type type;
    char *labels[QN_METRIC_MAX_LABELS];
    size_t nlabels;
    double bounds[QN_METRIC_MAX_BUCKETS];
    size_t nbounds;
    struct qn_metric **series; /* creation order */
    size_t nseries, cap;       /* nseries <= reg->max_series */
};

struct collector {
    void (*cb)(void *ud);
    void *ud;
};

struct qn_metrics {
    size_t max_series;
    struct qn_metric_family **fams; /* registration order */
    size_t nfams, fcap;
    struct collector *cols;
    size_t ncols, ccap;
    uint64_t refused;     /* series refused past max_series, all families */
    pthread_mutex_t lock; /* qn_metrics_lock: other threads' updates against render */
};

/* ---------------------------------------------------------------- names */

static bool name_char(char c, bool first, bool colon)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':'))
        return true;
    return !first && c >= '0' && c <= '9';
}

static bool valid_name(const char *s, bool colon)
{
    if (s == NULL || s[0] == '\0')
        return false;
    for (size_t i = 0; s[i] != '\0'; i++)
        if (!name_char(s[i], i == 0, colon))
            return false;
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---------------------------------------------------------------- registry */

int qn_metrics_new(size_t max_series, qn_metrics **out)
{
    if (max_series == 0)
        return QN_EINVAL;
    qn_metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        return QN_ENOMEM;
    m->max_series = max_series;
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return QN_OK;
}

void qn_metrics_lock(qn_metrics *m)
{
    pthread_mutex_lock(&m->lock);
}

void qn_metrics_unlock(qn_metrics *m)
{
    pthread_mutex_unlock(&m->lock);
}

static void family_free(struct qn_metric_family *f)
{
    qn_metric_family_clear(f);
    free(f->series);
    free(f->name);
    free(f->help);
    for (size_t i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f);
}

void qn_metrics_free(qn_metrics *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nfams; i++)
        family_free(m->fams[i]);
    free(m->fams);
    free(m->cols);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static bool same_shape(const struct qn_metric_family *f, enum qn_metric_type type,
                       const char *const *labels, size_t nlabels, const double *bounds,
                       size_t nbounds)
{
    if (f->type != type || f->nlabels != nlabels || f->nbounds != nbounds)
        return false;
    for (size_t i = 0; i < nlabels; i++)
        if (strcmp(f->labels[i], labels[i]) != 0)
            return false;
    for (size_t i = 0; i < nbounds; i++)
        if (f->bounds[i] != bounds[i])
            return false;
    return true;
}

int qn_metrics_family(qn_metrics *m, const char *name, const char *help, enum qn_metric_type type,
                      const char *const *labels, size_t nlabels, const double *bounds,
                      size_t nbounds, struct qn_metric_family **out)
{
    if (!valid_name(name, true) || help == NULL || nlabels > QN_METRIC_MAX_LABELS ||
        (nlabels > 0 && labels == NULL))
        return QN_EINVAL;
    if (type == QN_METRIC_COUNTER && !ends_with(name, "_total"))
        return QN_EINVAL;
    if (type == QN_METRIC_HISTOGRAM) {
        if (nbounds == 0 || nbounds > QN_METRIC_MAX_BUCKETS || bounds == NULL)
            return QN_EINVAL;
        for (size_t i = 0; i < nbounds; i++) {
            /* finite (NaN fails both comparisons, infinities the range) and increasing */
            if (!(bounds[i] > -1e308 && bounds[i] < 1e308) || (i > 0 && bounds[i] <= bounds[i - 1]))
                return QN_EINVAL;
        }
    } else if (nbounds != 0) {
        return QN_EINVAL;
    }
    for (size_t i = 0; i < nlabels; i++) {
        if (!valid_name(labels[i], false) || strncmp(labels[i], "__", 2) == 0 ||
            (type == QN_METRIC_HISTOGRAM && strcmp(labels[i], "le") == 0))
            return QN_EINVAL;
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[i], labels[j]) == 0)
                return QN_EINVAL;
    }
    for (size_t i = 0; i < m->nfams; i++) {
        if (strcmp(m->fams[i]->name, name) == 0) {
            if (!same_shape(m->fams[i], type, labels, nlabels, bounds, nbounds))
                return QN_EINVAL;
            *out = m->fams[i];
            return QN_OK;
        }
    }
    if (m->nfams == m->fcap) {
        size_t ncap = m->fcap ? m->fcap * 2 : 32;
        struct qn_metric_family **nf = realloc(m->fams, ncap * sizeof *nf);
        if (nf == NULL)
            return QN_ENOMEM;
        m->fams = nf;
        m->fcap = ncap;
    }
    struct qn_metric_family *f = calloc(1, sizeof *f);
    if (f == NULL)
        return QN_ENOMEM;
    f->reg = m;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help);
    bool ok = f->name != NULL && f->help != NULL;
    for (size_t i = 0; ok && i < nlabels; i++) {
        f->labels[i] = strdup(labels[i]);
        ok = f->labels[i] != NULL;
        f->nlabels = i + 1;
    }
    if (!ok) {
        family_free(f);
        return QN_ENOMEM;
    }
    if (nbounds > 0)
        memcpy(f->bounds, bounds, nbounds * sizeof *bounds);
    f->nbounds = nbounds;
    m->fams[m->nfams++] = f;
    *out = f;
    return QN_OK;
}

static bool series_matches(const struct qn_metric *s, const char *const *values, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->values[i], values[i]) != 0)
            return false;
    return true;
}

struct qn_metric *qn_metric_series(struct qn_metric_family *f, const char *const *values)
{
    if (f == NULL)
        return NULL;
    size_t n = f->nlabels;
    if (n > 0 && values == NULL)
        return NULL;
    for (size_t i = 0; i < f->nseries; i++)
        if (series_matches(f->series[i], values, n))
            return f->series[i];
    if (f->nseries >= f->reg->max_series) {
        f->reg->refused++;
        return NULL;
    }
    if (f->nseries == f->cap) {
        size_t ncap = f->cap ? f->cap * 2 : 4;
        if (ncap > f->reg->max_series)
            ncap = f->reg->max_series;
        struct qn_metric **ns = realloc(f->series, ncap * sizeof *ns);
        if (ns == NULL)
            return NULL;
        f->series = ns;
        f->cap = ncap;
    }
    /* one allocation: the series, its buckets, its label values */
    size_t nb = f->type == QN_METRIC_HISTOGRAM ? f->nbounds + 1 : 0;
    size_t size = sizeof(struct qn_metric) + nb * sizeof(uint64_t);
    for (size_t i = 0; i < n; i++)
        size += strlen(values[i]) + 1;
    struct qn_metric *s = calloc(1, size);
    if (s == NULL)
        return NULL;
    s->fam = f;
    char *p = (char *)(s + 1);
    if (nb > 0) {
        s->buckets = (uint64_t *)(void *)p;
        p += nb * sizeof(uint64_t);
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(values[i]);
        memcpy(p, values[i], len + 1);
        s->values[i] = p;
        p += len + 1;
    }
    f->series[f->nseries++] = s;
    return s;
}

void qn_metric_family_clear(struct qn_metric_family *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->nseries; i++)
        free(f->series[i]);
    f->nseries = 0;
}

/* ---------------------------------------------------------------- instruments */

void qn_metric_inc(struct qn_metric *s, uint64_t n)
{
    if (s != NULL)
        s->count += n;
}

void qn_metric_set_total(struct qn_metric *s, uint64_t total)
{
    if (s != NULL)
        s->count = total;
}

void qn_metric_set(struct qn_metric *s, double v)
{
    if (s != NULL)
        s->value = v;
}

void qn_metric_observe(struct qn_metric *s, double v)
{
    if (s == NULL || s->buckets == NULL || v != v)
        return;
    const struct qn_metric_family *f = s->fam;
    size_t i = 0;
    while (i < f->nbounds && v > f->bounds[i])
        i++;
    s->buckets[i]++; /* i == nbounds: the +Inf bucket */
    s->count++;
    s->value += v;
}

/* ---------------------------------------------------------------- collectors */

int qn_metrics_on_collect(qn_metrics *m, void (*cb)(void *ud), void *ud)
{
    if (m->ncols == m->ccap) {
        size_t ncap = m->ccap ? m->ccap * 2 : 8;
        struct collector *nc = realloc(m->cols, ncap * sizeof *nc);
        if (nc == NULL)
            return QN_ENOMEM;
        m->cols = nc;
        m->ccap = ncap;
    }
    m->cols[m->ncols++] = (struct collector){cb, ud};
    return QN_OK;
}

void qn_metrics_off_collect(qn_metrics *m, void (*cb)(void *ud), void *ud)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->ncols; i++) {
        if (m->cols[i].cb == cb && m->cols[i].ud == ud) {
            memmove(&m->cols[i], &m->cols[i + 1], (m->ncols - i - 1) * sizeof *m->cols);
            m->ncols--;
            return;
        }
    }
}

/* ---------------------------------------------------------------- exposition */

size_t qn_metric_format_value(double v, char *out, size_t cap)
{
    int n;
    if (v != v)
        n = snprintf(out, cap, "NaN");
    else if (v > 1.7976931348623157e308)
        n = snprintf(out, cap, "+Inf");
    else if (v < -1.7976931348623157e308)
        n = snprintf(out, cap, "-Inf");
    else if (v > -9.0e15 && v < 9.0e15 && (double)(int64_t)v == v)
        n = snprintf(out, cap, "%lld", (long long)(int64_t)v);
    else {
        n = snprintf(out, cap, "%.15g", v);
        if (n > 0 && (size_t)n < cap && strtod(out, NULL) != v)
            n = snprintf(out, cap, "%.17g", v);
    }
    if (n < 0)
        n = 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

/* Appends s with the text format's escapes: \\ and \n always, \" in label
 * values only. */
static int add_escaped(struct evbuffer *out, const char *s, bool quote)
{
    const char *run = s;
    for (const char *p = s;; p++) {
        const char *esc = NULL;
        if (*p == '\\')
            esc = "\\\\";
        else if (*p == '\n')
            esc = "\\n";
        else if (quote && *p == '"')
            esc = "\\\"";
        if (esc == NULL && *p != '\0')
            continue;
        if (p > run && evbuffer_add(out, run, (size_t)(p - run)) != 0)
            return QN_ENOMEM;
        if (*p == '\0')
            return QN_OK;
        if (evbuffer_add(out, esc, 2) != 0)
            return QN_ENOMEM;
        run = p + 1;
    }
}

/* name{l1="v1",...[,le="x"]} (no braces when there is nothing to put in them) */
static int add_sample_name(struct evbuffer *out, const struct qn_metric *s, const char *suffix,
                           const char *le)
{
    const struct qn_metric_family *f = s->fam;
    if (evbuffer_add_printf(out, "%s%s", f->name, suffix) < 0)
        return QN_ENOMEM;
    if (f->nlabels == 0 && le == NULL)
        return QN_OK;
    if (evbuffer_add(out, "{", 1) != 0)
        return QN_ENOMEM;
    for (size_t i = 0; i < f->nlabels; i++) {
        if (evbuffer_add_printf(out, "%s%s=\"", i ? "," : "", f->labels[i]) < 0 ||
            add_escaped(out, s->values[i], true) != QN_OK || evbuffer_add(out, "\"", 1) != 0)
            return QN_ENOMEM;
    }
    if (le != NULL && evbuffer_add_printf(out, "%sle=\"%s\"", f->nlabels ? "," : "", le) < 0)
        return QN_ENOMEM;
    return evbuffer_add(out, "}", 1) == 0 ? QN_OK : QN_ENOMEM;
}

static int add_series(struct evbuffer *out, const struct qn_metric *s)
{
    const struct qn_metric_family *f = s->fam;
    char num[64];
    switch (f->type) {
    case QN_METRIC_COUNTER:
        if (add_sample_name(out, s, "", NULL) != QN_OK ||
            evbuffer_add_printf(out, " %llu\n", (unsigned long long)s->count) < 0)
            return QN_ENOMEM;
        return QN_OK;
    case QN_METRIC_GAUGE:
        qn_metric_format_value(s->value, num, sizeof num);
        if (add_sample_name(out, s, "", NULL) != QN_OK ||
            evbuffer_add_printf(out, " %s\n", num) < 0)
            return QN_ENOMEM;
        return QN_OK;
    case QN_METRIC_HISTOGRAM: {
        uint64_t cum = 0;
        for (size_t i = 0; i <= f->nbounds; i++) {
            cum += s->buckets[i];
            if (i < f->nbounds)
                qn_metric_format_value(f->bounds[i], num, sizeof num);
            else
                snprintf(num, sizeof num, "+Inf");
            if (add_sample_name(out, s, "_bucket", num) != QN_OK ||
                evbuffer_add_printf(out, " %llu\n", (unsigned long long)cum) < 0)
                return QN_ENOMEM;
        }
        qn_metric_format_value(s->value, num, sizeof num);
        if (add_sample_name(out, s, "_sum", NULL) != QN_OK ||
            evbuffer_add_printf(out, " %s\n", num) < 0 ||
            add_sample_name(out, s, "_count", NULL) != QN_OK ||
            evbuffer_add_printf(out, " %llu\n", (unsigned long long)s->count) < 0)
            return QN_ENOMEM;
        return QN_OK;
    }
    }
    return QN_EINTERNAL;
}

static int add_family(struct evbuffer *out, const struct qn_metric_family *f)
{
    static const char *types[] = {"counter", "gauge", "histogram"};
    if (evbuffer_add_printf(out, "# HELP %s ", f->name) < 0 ||
        add_escaped(out, f->help, false) != QN_OK ||
        evbuffer_add_printf(out, "\n# TYPE %s %s\n", f->name, types[f->type]) < 0)
        return QN_ENOMEM;
    for (size_t i = 0; i < f->nseries; i++) {
        int rc = add_series(out, f->series[i]);
        if (rc != QN_OK)
            return rc;
    }
    return QN_OK;
}

static int render_locked(qn_metrics *m, struct evbuffer *out)
{
    /* a collector may not add or remove collectors: iterate over a stable count */
    for (size_t i = 0; i < m->ncols; i++)
        m->cols[i].cb(m->cols[i].ud);
    for (size_t i = 0; i < m->nfams; i++) {
        int rc = add_family(out, m->fams[i]);
        if (rc != QN_OK)
            return rc;
    }
    if (evbuffer_add_printf(out,
                            "# HELP queen_metrics_series_refused_total series not made because "
                            "their family held its maximum\n"
                            "# TYPE queen_metrics_series_refused_total counter\n"
                            "queen_metrics_series_refused_total %llu\n",
                            (unsigned long long)m->refused) < 0)
        return QN_ENOMEM;
    return QN_OK;
}

int qn_metrics_render(qn_metrics *m, struct evbuffer *out)
{
    qn_metrics_lock(m);
    int rc = render_locked(m, out);
    qn_metrics_unlock(m);
    return rc;
}
