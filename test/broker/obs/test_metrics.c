/*
 * test_metrics.c - broker/src/obs/metrics.c: family validation, the text
 * exposition (escapes, values, histograms), the series bound, collectors.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "obs/metrics.h"
#include "process_test.h"
#include "queen/error.h"

/* The exposition as a NUL-terminated string (caller frees). */
static char *render(qn_metrics *m)
{
    struct evbuffer *b = evbuffer_new();
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(qn_metrics_render(m, b), QN_OK);
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    evbuffer_remove(b, s, n);
    s[n] = '\0';
    evbuffer_free(b);
    return s;
}

static const char *TAIL = "# HELP queen_metrics_series_refused_total series not made because "
                          "their family held its maximum\n"
                          "# TYPE queen_metrics_series_refused_total counter\n";

START_TEST(family_validation)
{
    qn_metrics *m = NULL;
    ck_assert_int_eq(qn_metrics_new(10, &m), QN_OK);
    struct qn_metric_family *f = NULL, *g = NULL;
    static const char *l1[] = {"queue"};
    static const char *dup[] = {"a", "a"};
    static const char *reserved[] = {"__name"};
    static const char *le[] = {"le"};
    static const char *bad[] = {"9x"};
    static const double b_ok[] = {1, 2};
    static const double b_desc[] = {2, 1};
    volatile double zero = 0;
    double b_nan[] = {1, zero / zero}; /* NaN without libm */
    ck_assert_int_eq(qn_metrics_family(m, "x_total", "h", QN_METRIC_COUNTER, NULL, 0, NULL, 0, &f),
                     QN_OK);
    ck_assert_int_eq(qn_metrics_family(m, "x", "h", QN_METRIC_COUNTER, NULL, 0, NULL, 0, &g),
                     QN_EINVAL); /* a counter without _total */
    ck_assert_int_eq(qn_metrics_family(m, "1x", "h", QN_METRIC_GAUGE, NULL, 0, NULL, 0, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "x-y", "h", QN_METRIC_GAUGE, NULL, 0, NULL, 0, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "g", "h", QN_METRIC_GAUGE, dup, 2, NULL, 0, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "g", "h", QN_METRIC_GAUGE, reserved, 1, NULL, 0, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "g", "h", QN_METRIC_GAUGE, bad, 1, NULL, 0, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "h", "h", QN_METRIC_HISTOGRAM, le, 1, b_ok, 2, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "h", "h", QN_METRIC_HISTOGRAM, NULL, 0, b_desc, 2, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "h", "h", QN_METRIC_HISTOGRAM, NULL, 0, b_nan, 2, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "h", "h", QN_METRIC_HISTOGRAM, NULL, 0, NULL, 0, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "g", "h", QN_METRIC_GAUGE, NULL, 0, b_ok, 2, &g),
                     QN_EINVAL); /* bounds on a gauge */
    /* the same shape answers the same family; another shape is refused */
    ck_assert_int_eq(
        qn_metrics_family(m, "x_total", "other help", QN_METRIC_COUNTER, NULL, 0, NULL, 0, &g),
        QN_OK);
    ck_assert_ptr_eq(f, g);
    ck_assert_int_eq(qn_metrics_family(m, "x_total", "h", QN_METRIC_COUNTER, l1, 1, NULL, 0, &g),
                     QN_EINVAL);
    ck_assert_int_eq(qn_metrics_family(m, "x_total", "h", QN_METRIC_GAUGE, NULL, 0, NULL, 0, &g),
                     QN_EINVAL);
    qn_metrics_free(m);
}
END_TEST

START_TEST(exposition_text)
{
    qn_metrics *m = NULL;
    ck_assert_int_eq(qn_metrics_new(10, &m), QN_OK);
    struct qn_metric_family *c = NULL, *g = NULL, *h = NULL;
    static const char *labels[] = {"queue", "code"};
    static const double bounds[] = {0.5, 1, 2.5};
    ck_assert_int_eq(qn_metrics_family(m, "t_requests_total", "calls \\ with\nlines",
                                       QN_METRIC_COUNTER, labels, 2, NULL, 0, &c),
                     QN_OK);
    ck_assert_int_eq(
        qn_metrics_family(m, "t_gauge", "a gauge", QN_METRIC_GAUGE, NULL, 0, NULL, 0, &g), QN_OK);
    ck_assert_int_eq(
        qn_metrics_family(m, "t_seconds", "h", QN_METRIC_HISTOGRAM, labels, 1, bounds, 3, &h),
        QN_OK);
    const char *v1[] = {"a\"b\\c\nd", "OK"};
    qn_metric_inc(qn_metric_series(c, v1), 3);
    qn_metric_inc(qn_metric_series(c, v1), 2); /* the same series */
    qn_metric_set(qn_metric_series(g, NULL), 0.25);
    const char *v2[] = {"q"};
    struct qn_metric *hs = qn_metric_series(h, v2);
    qn_metric_observe(hs, 0.5); /* on a bound: that bucket (le is inclusive) */
    qn_metric_observe(hs, 0.7);
    qn_metric_observe(hs, 100);
    qn_metric_observe(hs, 0.0 / 0.0); /* NaN: ignored */
    char *text = render(m);
    const char *want = "# HELP t_requests_total calls \\\\ with\\nlines\n"
                       "# TYPE t_requests_total counter\n"
                       "t_requests_total{queue=\"a\\\"b\\\\c\\nd\",code=\"OK\"} 5\n"
                       "# HELP t_gauge a gauge\n"
                       "# TYPE t_gauge gauge\n"
                       "t_gauge 0.25\n"
                       "# HELP t_seconds h\n"
                       "# TYPE t_seconds histogram\n"
                       "t_seconds_bucket{queue=\"q\",le=\"0.5\"} 1\n"
                       "t_seconds_bucket{queue=\"q\",le=\"1\"} 2\n"
                       "t_seconds_bucket{queue=\"q\",le=\"2.5\"} 2\n"
                       "t_seconds_bucket{queue=\"q\",le=\"+Inf\"} 3\n"
                       "t_seconds_sum{queue=\"q\"} 101.2\n"
                       "t_seconds_count{queue=\"q\"} 3\n";
    ck_assert_msg(strncmp(text, want, strlen(want)) == 0, "got:\n%s", text);
    ck_assert(strstr(text, TAIL) != NULL);
    ck_assert(strstr(text, "queen_metrics_series_refused_total 0\n") != NULL);
    free(text);
    qn_metrics_free(m);
}
END_TEST

START_TEST(empty_family_still_described)
{
    qn_metrics *m = NULL;
    ck_assert_int_eq(qn_metrics_new(10, &m), QN_OK);
    struct qn_metric_family *f = NULL;
    static const char *l[] = {"queue"};
    ck_assert_int_eq(qn_metrics_family(m, "t_depth", "d", QN_METRIC_GAUGE, l, 1, NULL, 0, &f),
                     QN_OK);
    char *text = render(m);
    const char *want = "# HELP t_depth d\n# TYPE t_depth gauge\n# HELP queen";
    ck_assert(strncmp(text, want, strlen(want)) == 0);
    free(text);
    /* clear drops series; the family stays */
    const char *v[] = {"x"};
    qn_metric_set(qn_metric_series(f, v), 3);
    text = render(m);
    ck_assert(strstr(text, "t_depth{queue=\"x\"} 3\n") != NULL);
    free(text);
    qn_metric_family_clear(f);
    text = render(m);
    ck_assert(strstr(text, "t_depth{") == NULL);
    free(text);
    qn_metrics_free(m);
}
END_TEST

START_TEST(series_bound)
{
    qn_metrics *m = NULL;
    ck_assert_int_eq(qn_metrics_new(2, &m), QN_OK);
    struct qn_metric_family *f = NULL;
    static const char *l[] = {"k"};
    ck_assert_int_eq(qn_metrics_family(m, "t_total", "t", QN_METRIC_COUNTER, l, 1, NULL, 0, &f),
                     QN_OK);
    const char *a[] = {"a"}, *b[] = {"b"}, *c[] = {"c"};
    ck_assert_ptr_nonnull(qn_metric_series(f, a));
    ck_assert_ptr_nonnull(qn_metric_series(f, b));
    ck_assert_ptr_null(qn_metric_series(f, c));
    ck_assert_ptr_nonnull(qn_metric_series(f, a)); /* existing ones still answer */
    qn_metric_inc(NULL, 1);                        /* NULL-tolerant instruments */
    qn_metric_set(NULL, 1);
    qn_metric_observe(NULL, 1);
    qn_metric_set_total(NULL, 1);
    char *text = render(m);
    ck_assert(strstr(text, "queen_metrics_series_refused_total 1\n") != NULL);
    ck_assert(strstr(text, "t_total{k=\"c\"}") == NULL);
    free(text);
    qn_metrics_free(m);
}
END_TEST

struct counter_src {
    uint64_t n;
    struct qn_metric *s;
    int runs;
};

static void collect(void *ud)
{
    struct counter_src *src = ud;
    src->runs++;
    qn_metric_set_total(src->s, src->n);
}

START_TEST(collectors_run_before_rendering)
{
    qn_metrics *m = NULL;
    ck_assert_int_eq(qn_metrics_new(10, &m), QN_OK);
    struct qn_metric_family *f = NULL;
    ck_assert_int_eq(qn_metrics_family(m, "t_total", "t", QN_METRIC_COUNTER, NULL, 0, NULL, 0, &f),
                     QN_OK);
    struct counter_src src = {42, qn_metric_series(f, NULL), 0};
    ck_assert_int_eq(qn_metrics_on_collect(m, collect, &src), QN_OK);
    char *text = render(m);
    ck_assert(strstr(text, "t_total 42\n") != NULL);
    ck_assert_int_eq(src.runs, 1);
    free(text);
    qn_metrics_off_collect(m, collect, &src);
    src.n = 43;
    text = render(m);
    ck_assert(strstr(text, "t_total 42\n") != NULL);
    ck_assert_int_eq(src.runs, 1);
    free(text);
    qn_metrics_free(m);
}
END_TEST

START_TEST(value_format)
{
    char b[64];
    qn_metric_format_value(0, b, sizeof b);
    ck_assert_str_eq(b, "0");
    qn_metric_format_value(-17, b, sizeof b);
    ck_assert_str_eq(b, "-17");
    qn_metric_format_value(0.1, b, sizeof b);
    ck_assert_str_eq(b, "0.1");
    qn_metric_format_value(1e20, b, sizeof b);
    ck_assert_str_eq(b, "1e+20");
    qn_metric_format_value(1.0 / 3.0, b, sizeof b);
    ck_assert_double_eq(strtod(b, NULL), 1.0 / 3.0); /* reads back exactly */
    qn_metric_format_value(0.0 / 0.0, b, sizeof b);
    ck_assert_str_eq(b, "NaN");
    qn_metric_format_value(1e308 * 10, b, sizeof b);
    ck_assert_str_eq(b, "+Inf");
    qn_metric_format_value(-1e308 * 10, b, sizeof b);
    ck_assert_str_eq(b, "-Inf");
    qn_metric_format_value(123456789, b, 4);
    ck_assert_str_eq(b, "123"); /* truncated, NUL-terminated */
}
END_TEST

Suite *qn_test_metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *t = tcase_create("registry");
    tcase_add_test(t, family_validation);
    tcase_add_test(t, exposition_text);
    tcase_add_test(t, empty_family_still_described);
    tcase_add_test(t, series_bound);
    tcase_add_test(t, collectors_run_before_rendering);
    tcase_add_test(t, value_format);
    suite_add_tcase(s, t);
    return s;
}
