/*
 * engine/hring.h - private to broker/: one partition's in-window transaction-id hashes,
 * as the dedup seed specifies: a time-ordered ring of immutable sorted blocks
 * (QN_HRING_BLOCK hashes, 64 KiB each) sealed from one arrival-order buffer.
 *
 * Membership is "present in some surviving block or in the hot buffer". In front
 * of the blocks sit bloom filters, one per generation of consecutive blocks
 * (a new generation is sized to the resident hash count, one block up to
 * QN_HRING_GEN_MAX hashes);
 * a bloom miss proves absence, a hit is confirmed by binary search. Blooms are
 * paged in 64 KiB pages, so no allocation is ever larger than one block.
 *
 * Expiry drops whole blocks from the front, and only when a block's newest hash
 * is older than the cutoff, so the resident set is always a superset of the
 * in-window hashes. The hot buffer is dropped the same way when its newest hash
 * is older than the cutoff: a partition written too slowly to ever seal a block
 * still forgets its hashes (the reference's cache did not).
 *
 * Not thread-safe; no I/O.
 */
#ifndef QN_BROKER_HRING_H
#define QN_BROKER_HRING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QN_HRING_BLOCK 4096u             /* hashes per sealed block (64 KiB) */
#define QN_HRING_GEN_MAX (1024u * 1024u) /* largest generation capacity */

struct qn_hring_block;
struct qn_hring_gen;

struct qn_hring {
    /* sealed blocks, oldest first: blocks[(head + i) % cap] for i < nblocks */
    struct qn_hring_block **blocks;
    size_t head, nblocks, cap;
    uint64_t next_seq; /* sequence number the next sealed block gets */
    /* hot buffer: arrival order */
    uint8_t *hot;
    size_t nhot, hot_cap;
    int64_t hot_max_offset;
    int64_t hot_max_created_ms;
    /* bloom generations, oldest first (singly linked, tail is current) */
    struct qn_hring_gen *gen_head, *gen_tail;
    size_t expect; /* qn_hring_expect() hint for the next new filter */
    size_t hashes; /* resident hashes (blocks + hot) */
    size_t bytes;  /* allocated bytes, all structures */
};

void qn_hring_init(struct qn_hring *r);
/* Frees everything; r is empty afterwards and may be reused. */
void qn_hring_clear(struct qn_hring *r);

/*
 * Appends the n hashes (16 bytes each) of one committed segment covering
 * offsets [base, base + n) created at created_ms. Seals the hot buffer into a
 * block each time it reaches QN_HRING_BLOCK. Returns QN_OK or QN_ENOMEM (the ring
 * is then left consistent but may miss some of these hashes: the caller must
 * stop vouching for the partition).
 */
int qn_hring_append(struct qn_hring *r, const uint8_t *hashes, size_t n, int64_t base,
                    int64_t created_ms);

/*
 * A hint before a bulk load into an empty ring: about n hashes follow. The
 * first bloom generation is then sized for them (one block to QN_HRING_GEN_MAX)
 * instead of growing by doubling, so a hydrated window of 1M hashes is one or
 * two generations (one bloom test each per lookup), not ten. No effect on a ring
 * that already has a generation; never allocates.
 */
void qn_hring_expect(struct qn_hring *r, size_t n);

bool qn_hring_contains(const struct qn_hring *r, const uint8_t h[16]);

/* Drops every block, and the hot buffer, whose newest hash was created before
 * cutoff_ms. Returns the highest offset dropped, or -1 when nothing was. */
int64_t qn_hring_expire(struct qn_hring *r, int64_t cutoff_ms);

#endif
