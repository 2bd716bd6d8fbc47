/*
 * e2e_hist.c - log-linear histogram for latencies (see e2e_hist.h).
 *
 * Deliberately not HdrHistogram: no configurable range or precision, no
 * serialisation. Invariants:
 *   1. bucket_of() is monotonic in v, and bucket_low(bucket_of(v)) <= v.
 *   2. the sum of b[] equals count.
 */
#include "e2e_hist.h"

#include <string.h>

#define SUB (1u << E2E_HIST_SUB_BITS)

static unsigned bucket_of(uint64_t v)
{
    if (v < SUB)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - E2E_HIST_SUB_BITS;
    return ((shift + 1u) << E2E_HIST_SUB_BITS) + (unsigned)((v >> shift) & (SUB - 1u));
}

static uint64_t bucket_low(unsigned i)
{
    if (i < SUB)
        return i;
    unsigned shift = (i >> E2E_HIST_SUB_BITS) - 1u;
    uint64_t sub = i & (SUB - 1u);
    return (SUB + sub) << shift;
}

static uint64_t bucket_width(unsigned i)
{
    if (i < SUB)
        return 1;
    return (uint64_t)1 << ((i >> E2E_HIST_SUB_BITS) - 1u);
}

void e2e_hist_reset(struct e2e_hist *h)
{
    memset(h, 0, sizeof *h);
}

void e2e_hist_add(struct e2e_hist *h, uint64_t v, uint64_t n)
{
    if (n == 0)
        return;
    h->b[bucket_of(v)] += n;
    h->count += n;
    if (v > h->max)
        h->max = v;
    uint64_t add = v * n;
    if (v != 0 && add / v != n)
        add = UINT64_MAX;
    h->sum = (h->sum > UINT64_MAX - add) ? UINT64_MAX : h->sum + add;
}

void e2e_hist_merge(struct e2e_hist *dst, const struct e2e_hist *src)
{
    for (unsigned i = 0; i < E2E_HIST_BUCKETS; i++)
        dst->b[i] += src->b[i];
    dst->count += src->count;
    if (src->max > dst->max)
        dst->max = src->max;
    dst->sum = (dst->sum > UINT64_MAX - src->sum) ? UINT64_MAX : dst->sum + src->sum;
}

uint64_t e2e_hist_quantile(const struct e2e_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q <= 0)
        q = 0;
    if (q > 1)
        q = 1;
    uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999);
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < E2E_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t mid = bucket_low(i) + bucket_width(i) / 2;
            return mid > h->max ? h->max : mid;
        }
    }
    return h->max;
}
