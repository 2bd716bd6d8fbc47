/*
 * engine/dedup.h - private to broker/: the broker's dedup cache (dedup seed).
 *
 * Its one output is the p_verified watermark sent with a push: "none of these
 * hashes occurs at or below this offset in the partition's window". -1 means the
 * cache cannot vouch (SQL then probes the whole window); a local hit also answers
 * -1, never a verdict. SQL decides every duplicate either way.
 *
 * A partition's entry becomes able to vouch after a full-window hydration from
 * log_txns (window + 5 s of clock-skew slack) and keeps vouching while every
 * commit it hears of extends its watermark contiguously. Another broker's commit
 * (a gap) or an overlap stops it until it is rebuilt. Metadata (partition id,
 * window, allocator watermark) is refreshed every 30 s; every push result also
 * carries the queue's window, and a change forces a full rehydration.
 *
 * Memory is bounded by QUEEN_DEDUP_CACHE_MB with whole-entry LRU eviction; under
 * pressure a rebuild is admitted only when it fits under 90% of the budget, and a
 * partition that does not fit is suppressed (answers -1) for a 30 s cooldown.
 * Entries used in the last 5 s are never evicted to admit another; when a load or
 * a commit leaves the cache over its budget and only such entries could make
 * room, the entry that grew is suppressed instead.
 */
#ifndef QN_BROKER_DEDUP_H
#define QN_BROKER_DEDUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/store.h"

struct event_base;
struct qn_dedup;

struct qn_dedup_config {
    size_t budget_bytes; /* QUEEN_DEDUP_CACHE_MB */
    int64_t meta_ttl_ms; /* 30000 */
    int64_t cooldown_ms; /* 30000 */
    int64_t recent_ms;   /* 5000: never evicted to admit another */
    int64_t skew_ms;     /* 5000: hydration slack and expiry margin */
    int64_t sweep_ms;    /* 5000: expiry of cold partitions */
    double fit;          /* 0.9 */
    size_t side_cap;     /* 100000 */
};

void qn_dedup_config_defaults(struct qn_dedup_config *c, size_t budget_bytes);

/* Makes the cache on base; borrows store until qn_dedup_free(). Returns QN_OK or
 * QN_ENOMEM. */
int qn_dedup_new(struct event_base *base, qn_store *store, const struct qn_dedup_config *cfg,
                 struct qn_dedup **out);
void qn_dedup_free(struct qn_dedup *d);

/* The fusion hooks (see fusion.h). Entries are per (tenant, queue, partition):
 * two tenants' queues of one name share nothing. */
int64_t qn_dedup_verified(void *ud, const uint8_t tenant[16], const char *queue,
                          const char *partition, const uint8_t *hashes, size_t n);
void qn_dedup_committed(void *ud, const uint8_t tenant[16], const char *queue,
                        const char *partition, const uint8_t pid[16], int32_t window, int64_t base,
                        int64_t created_at_us, const uint8_t *hashes, size_t n);
/* The window and partition id the entry vouches under (sent with p_verified so SQL
 * can refuse a watermark computed under a smaller window or for a partition that
 * was deleted and created again); false when the entry does not vouch. */
bool qn_dedup_vouched_for(void *ud, const uint8_t tenant[16], const char *queue,
                          const char *partition, int32_t *window, uint8_t pid[16]);

struct qn_dedup_stats {
    size_t entries;      /* partitions with an entry */
    size_t vouching;     /* entries able to vouch */
    size_t suppressed;   /* gauge: entries suppressed by the pressure gate */
    size_t bytes;        /* accounted bytes */
    size_t hashes;       /* resident hashes */
    uint64_t hydrations; /* full rehydrations started */
    uint64_t catchups;   /* gap catch-ups started */
    uint64_t evictions;
    uint64_t vouched;    /* verified() answers >= 0 */
    uint64_t declined;   /* verified() answers -1 */
    uint64_t local_hits; /* verified() found a hash locally */
};
void qn_dedup_stats(const struct qn_dedup *d, struct qn_dedup_stats *out);

/*
 * The pressure gate, as a pure function: may an entry currently holding
 * `own_bytes` be rebuilt to an estimated `estimate` bytes, with the cache holding
 * `total_bytes` of `cap`? True when total - own + estimate <= fit * cap.
 */
bool qn_dedup_fits(size_t total_bytes, size_t own_bytes, size_t estimate, size_t cap, double fit);

#endif
