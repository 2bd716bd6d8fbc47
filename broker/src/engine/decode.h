/*
 * engine/decode.h - private to broker/: a batch's segments decompressed by an
 * offload thread (engine/offload.h), so that a loop building a large Pop,
 * Consume or Fetch response keeps answering while the bytes are inflated.
 *
 * A reader hands over the segments a storage call returned (valid only during
 * that call's callback): they are copied (rows, names and compressed blobs, in
 * one allocation), a pool thread decompresses each segment with a span into
 * its own buffer and sets the copy's raw/raw_len, and the reader's callback
 * runs on its loop with the copy. The batch builder (rpc/svc_batch.c) reads
 * raw where it is set and decompresses itself where it is not: a segment the
 * thread could not decompress (corrupt, too large, no memory) is decompressed
 * again on the loop, which reports the error as it always did. So nothing here
 * changes an answer, only the thread that does the work.
 *
 * Only batches worth the hop go: at least `min_bytes` of declared decompressed
 * size in the segments with a span. Memory stays bounded: a batch holds every
 * segment decompressed at once (the loop reuses one buffer), so one declaring
 * more than `max_bytes` in all, or with a segment whose header declares no
 * size (other encoders; that would take QUEEN_SEGMENT_RAW_MAX) or is corrupt,
 * stays on the loop; the pool holds at most 8 batches a thread. A batch that
 * does not go, a full pool or a decoder being freed answers QN_EBUSY and the
 * caller builds the batch as before.
 *
 * One decoder per loop (its offload port); loop thread only, except the work.
 */
#ifndef QN_BROKER_DECODE_H
#define QN_BROKER_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "queen/store.h"

struct event_base;
struct qn_offload;
struct qn_decoder;
struct qn_decode;

/* segs[0..n) is the copy, raw set where decompressed; valid until the callback
 * returns (the decode is freed after it). */
typedef void (*qn_decode_cb)(void *ud, const struct qn_pop_segment *segs, size_t n);

struct qn_decode_stats {
    uint64_t batches;  /* batches decompressed off the loop */
    uint64_t segments; /* segments of those batches decompressed there */
    uint64_t bytes;    /* decompressed bytes of those segments */
};

/* A decoder on base using pool (borrowed; it must outlive the decoder):
 * batches of min_bytes (>= 1) to max_bytes (>= min_bytes) go; a segment is
 * never inflated past max_raw (QUEEN_SEGMENT_RAW_MAX). QN_OK, QN_EINVAL or
 * QN_ENOMEM. */
int qn_decoder_new(struct qn_offload *pool, struct event_base *base, size_t min_bytes,
                   size_t max_bytes, size_t max_raw, struct qn_decoder **out);

/* Waits for the work of every decode in flight, then runs the callback of each
 * one not cancelled (with what was decompressed): their owners finish as if the
 * decode had come back just before. Starts no new decode meanwhile. Call before
 * the store is freed, so that an owner can still release what its pop leased.
 * NULL allowed. */
void qn_decoder_free(struct qn_decoder *d);

/* Starts decompressing segs[0..n) off the loop. QN_OK: cb(ud, copy, n) runs
 * later on the loop, once (unless cancelled), and *out names the decode until
 * then. QN_EBUSY: below min_bytes, the pool is full, or the decoder is being
 * freed: nothing started, the caller decodes itself. QN_ENOMEM: nothing
 * started. */
int qn_decode_start(struct qn_decoder *d, const struct qn_pop_segment *segs, size_t n,
                    qn_decode_cb cb, void *ud, struct qn_decode **out);

/* The callback of x will not run; x is freed once its work ends. NULL allowed. */
void qn_decode_cancel(struct qn_decode *x);

/* Totals of this decoder (loop thread). */
void qn_decoder_stats(const struct qn_decoder *d, struct qn_decode_stats *out);

#endif
