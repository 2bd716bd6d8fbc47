/*
 * e2e_hist.h - private to bench/e2e: a log-linear latency histogram.
 *
 * Values are unsigned microseconds. Values below 32 are exact; above, each
 * power of two is split in 32 buckets, so a reported percentile is within about
 * 3 % of the true value. Fixed size, no allocation: a histogram is a plain value.
 */
#ifndef QN_BENCH_E2E_HIST_H
#define QN_BENCH_E2E_HIST_H

#include <stdint.h>

#define E2E_HIST_SUB_BITS 5
#define E2E_HIST_BUCKETS ((64 - E2E_HIST_SUB_BITS + 1) << E2E_HIST_SUB_BITS)

struct e2e_hist {
    uint64_t count;               /* number of recorded values */
    uint64_t max;                 /* largest recorded value */
    uint64_t sum;                 /* sum of recorded values (saturating) */
    uint64_t b[E2E_HIST_BUCKETS]; /* counts per bucket; sum == count */
};

/* Zeroes h. */
void e2e_hist_reset(struct e2e_hist *h);

/* Records one value (n times). */
void e2e_hist_add(struct e2e_hist *h, uint64_t v, uint64_t n);

/* Adds every count of src into dst. */
void e2e_hist_merge(struct e2e_hist *dst, const struct e2e_hist *src);

/*
 * The value at quantile q (0 < q <= 1): the midpoint of the bucket holding the
 * ceil(q * count)-th smallest value, never above max. 0 for an empty histogram.
 */
uint64_t e2e_hist_quantile(const struct e2e_hist *h, double q);

#endif
