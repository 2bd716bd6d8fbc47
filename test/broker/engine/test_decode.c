/*
 * test_decode.c - suite "decode": broker/src/engine/decode.c, a batch's
 * segments decompressed by an offload thread.
 *
 * A batch of min_bytes..max_bytes (declared decompressed size of its segments
 * with a span, every one declared) is copied and decompressed off the loop; the callback runs on
 * the loop, once, with a copy that outlives the caller's rows and has raw set
 * exactly where a segment decompressed (not for one without a span, not for a
 * corrupt one, which the builder reports on the loop). Below min_bytes, above
 * max_bytes, with a segment of no declared size or a corrupt header, with a
 * full pool or while the decoder is freed: QN_EBUSY and nothing started. A
 * cancelled decode never calls back; freeing the decoder calls back every
 * live one before it returns.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "engine/decode.h"
#include "engine/offload.h"
#include "engine_test.h"
#include "queen/error.h"
#include "queen/segment.h"

static struct event_base *base;
static struct event *keep;
static struct qn_offload *pool;
static qn_zctx *z;

static void start(int threads, size_t cap)
{
    base = qn_test_thread_loop(&keep);
    ck_assert_int_eq(qn_offload_new(threads, cap, &pool), QN_OK);
    ck_assert_int_eq(qn_zctx_new(&z), QN_OK);
}

static void end(void)
{
    qn_offload_free(pool);
    qn_zctx_free(z);
    event_free(keep);
    event_base_free(base);
}

/* A segment of n frames whose payloads are "<tag>-<i>" padded to plen bytes. */
static struct qn_buf segment(const char *tag, size_t n, size_t plen)
{
    struct qn_frame *fr = calloc(n, sizeof *fr);
    uint8_t *pay = malloc(n * plen);
    ck_assert(fr != NULL && pay != NULL);
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = pay + i * plen;
        memset(p, 'a' + (int)(i % 26), plen);
        int l = snprintf((char *)p, plen, "%s-%zu", tag, i);
        p[l] = '.';
        fr[i].payload = p;
        fr[i].payload_len = plen;
        fr[i].txn = (const uint8_t *)"t";
        fr[i].txn_len = 1;
    }
    struct qn_buf blob = {0};
    ck_assert_int_eq(qn_segment_pack(z, fr, n, 1, &blob, NULL), QN_OK);
    free(fr);
    free(pay);
    return blob;
}

/* A row as the store hands it. */
static struct qn_pop_segment row(const char *queue, const char *partition, int64_t base_offset,
                                 int32_t start_idx, int32_t take, const struct qn_buf *blob)
{
    struct qn_pop_segment g = {0};
    g.queue = queue;
    g.partition = partition;
    g.base = base_offset;
    g.start_idx = start_idx;
    g.take = take;
    g.blob = blob->data;
    g.blob_len = blob->len;
    return g;
}

/* A decoder taking 1 KiB..1 MiB, a ~100 KB segment *b and one row of it. */
static struct qn_decoder *small_decoder(struct qn_buf *b, struct qn_pop_segment *one)
{
    struct qn_decoder *d;
    ck_assert_int_eq(qn_decoder_new(pool, base, 1024, 1u << 20, 64u << 20, &d), QN_OK);
    *b = segment("s", 100, 1000);
    *one = row(NULL, NULL, 0, 0, 100, b);
    return d;
}

/* The pool's only thread held by a gate job until hold_release: decodes
 * started meanwhile wait in its queue. */
struct hold {
    struct qn_offload_port *port;
    struct qn_test_gate g;
};

static void hold_pool(struct hold *h)
{
    ck_assert_int_eq(qn_offload_port_new(pool, base, &h->port), QN_OK);
    qn_test_gate_init(&h->g);
    ck_assert_int_eq(qn_offload_submit(h->port, &h->g.job), QN_OK);
    qn_test_gate_wait_started(&h->g);
}

static void hold_release(struct hold *h)
{
    qn_test_gate_open(&h->g);
}

static void hold_free(struct hold *h)
{
    qn_offload_port_free(h->port);
    qn_test_gate_destroy(&h->g);
}

/* What a callback saw. */
struct seen {
    int calls;
    pthread_t thread;
    size_t n;
    struct qn_pop_segment segs[8];
    bool raw_equal[8]; /* raw equals a decompression of the copy's blob */
    char queue[8][32];
};

static void on_decoded(void *ud, const struct qn_pop_segment *segs, size_t n)
{
    struct seen *s = ud;
    s->calls++;
    s->thread = pthread_self();
    s->n = n;
    for (size_t i = 0; i < n && i < 8; i++) {
        s->segs[i] = segs[i];
        snprintf(s->queue[i], sizeof s->queue[i], "%s", segs[i].queue ? segs[i].queue : "(null)");
        const uint8_t *raw;
        size_t len;
        s->raw_equal[i] = segs[i].raw != NULL &&
                          qn_segment_decompress(z, segs[i].blob, segs[i].blob_len, 64u << 20, &raw,
                                                &len) == QN_OK &&
                          len == segs[i].raw_len && memcmp(raw, segs[i].raw, len) == 0;
    }
    event_base_loopbreak(base);
}

START_TEST(large_batch_decompressed_off_the_loop)
{
    start(1, 8);
    struct qn_decoder *d;
    ck_assert_int_eq(qn_decoder_new(pool, base, 64 * 1024, 1u << 20, 64u << 20, &d), QN_OK);
    struct qn_buf b0 = segment("s0", 100, 1000), b1 = segment("s1", 20, 100),
                  b2 = segment("s2", 50, 1000);
    /* rows as the store hands them: names and blobs in its memory */
    char q0[] = "queue-a", p0[] = "part-0";
    struct qn_buf c0 = {malloc(b0.len), b0.len}, c2 = {malloc(b2.len), b2.len};
    memcpy(c0.data, b0.data, b0.len);
    memcpy(c2.data, b2.data, b2.len);
    struct qn_pop_segment rows[3] = {
        row(q0, p0, 0, 10, 5, &c0),
        row(q0, p0, 100, 0, 0, &b1), /* no span: not decompressed */
        row(NULL, NULL, 120, 0, 50, &c2),
    };
    struct seen s = {0};
    struct qn_decode *x = NULL;
    ck_assert_int_eq(qn_decode_start(d, rows, 3, on_decoded, &s, &x), QN_OK);
    ck_assert_ptr_nonnull(x);
    /* the caller's memory goes away at once (the store frees its result) */
    memset(q0, 'z', sizeof q0 - 1);
    memset(c0.data, 0, c0.len);
    qn_buf_free(&c0);
    qn_buf_free(&c2);
    ck_assert_int_eq(s.calls, 0); /* never from inside start */
    ck_assert_int_eq(event_base_dispatch(base), 0);
    ck_assert_int_eq(s.calls, 1);
    ck_assert(pthread_equal(s.thread, pthread_self()));
    ck_assert_uint_eq(s.n, 3);
    ck_assert_str_eq(s.queue[0], "queue-a");
    ck_assert_str_eq(s.queue[2], "(null)");
    ck_assert_int_eq(s.segs[0].start_idx, 10);
    ck_assert_int_eq(s.segs[0].take, 5);
    ck_assert_int_eq(s.segs[2].base, 120);
    ck_assert(s.raw_equal[0]);
    ck_assert_ptr_null(s.segs[1].raw);
    ck_assert(s.raw_equal[2]);
    struct qn_decode_stats st;
    qn_decoder_stats(d, &st);
    ck_assert_uint_eq(st.batches, 1);
    ck_assert_uint_eq(st.segments, 2);
    ck_assert_uint_eq(st.bytes, s.segs[0].raw_len + s.segs[2].raw_len);
    qn_decoder_free(d);
    qn_buf_free(&b0);
    qn_buf_free(&b1);
    qn_buf_free(&b2);
    end();
}
END_TEST

START_TEST(small_batch_full_pool_and_corrupt_segments)
{
    start(1, 2);
    struct qn_decoder *d;
    struct qn_buf b = segment("s", 100, 1000); /* ~100 KB raw */
    uint64_t raw = 0;
    ck_assert_int_eq(qn_segment_raw_size(b.data, b.len, &raw), QN_OK);
    /* from one byte more than one segment, up to three segments */
    ck_assert_int_eq(qn_decoder_new(pool, base, (size_t)raw + 1, 3 * (size_t)raw, 64u << 20, &d),
                     QN_OK);
    struct qn_pop_segment one = row(NULL, NULL, 0, 0, 100, &b);
    struct seen s = {0};
    struct qn_decode *x = NULL;
    /* one byte short of the threshold: the caller decodes */
    ck_assert_int_eq(qn_decode_start(d, &one, 1, on_decoded, &s, &x), QN_EBUSY);
    ck_assert_ptr_null(x);
    /* hold the pool's thread: a decode waits in its second place */
    struct hold h;
    hold_pool(&h);
    /* four are too many (the batch holds them all at once) */
    struct qn_pop_segment four[4] = {one, one, one, one};
    ck_assert_int_eq(qn_decode_start(d, four, 4, on_decoded, &s, &x), QN_EBUSY);
    /* a segment without a declared size, or with a corrupt header, keeps the
     * batch on the loop (which reports the corruption) */
    uint8_t junk[64];
    memset(junk, 7, sizeof junk);
    struct qn_pop_segment bad[3] = {
        one, one, {.start_idx = 0, .take = 1, .blob = junk, .blob_len = 64}};
    ck_assert_int_eq(qn_decode_start(d, bad, 3, on_decoded, &s, &x), QN_EBUSY);
    /* magic, a header without content size (window byte follows), one raw
     * last block of 5 bytes */
    static const uint8_t unsized[] = {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x29,
                                      0x00, 0x00, 'h',  'e',  'l',  'l',  'o'};
    uint64_t none;
    ck_assert_int_eq(qn_segment_raw_size(unsized, sizeof unsized, &none), QN_ENOTFOUND);
    bad[2].blob = unsized;
    bad[2].blob_len = sizeof unsized;
    ck_assert_int_eq(qn_decode_start(d, bad, 3, on_decoded, &s, &x), QN_EBUSY);
    /* twice that is enough; a third segment whose header is whole but whose
     * data is cut short fails on the thread: left for the loop to report */
    struct qn_pop_segment rows[3] = {one, one, one};
    rows[2].blob_len = b.len - 3;
    ck_assert_int_eq(qn_decode_start(d, rows, 3, on_decoded, &s, &x), QN_OK);
    /* the pool's two places are taken: the next batch is refused */
    struct seen s2 = {0};
    struct qn_decode *x2 = NULL;
    ck_assert_int_eq(qn_decode_start(d, rows, 3, on_decoded, &s2, &x2), QN_EBUSY);
    hold_release(&h);
    while (s.calls == 0)
        event_base_loop(base, EVLOOP_ONCE); /* woken by the ports */
    ck_assert_int_eq(s.calls, 1);
    ck_assert(s.raw_equal[0] && s.raw_equal[1]);
    ck_assert_ptr_null(s.segs[2].raw); /* the builder decompresses it and reports why */
    ck_assert_int_eq(s2.calls, 0);
    qn_decoder_free(d);
    hold_free(&h);
    qn_buf_free(&b);
    end();
}
END_TEST

START_TEST(cancel_never_calls_back_and_free_finishes_the_rest)
{
    start(1, 8);
    struct qn_buf b;
    struct qn_pop_segment one;
    struct qn_decoder *d = small_decoder(&b, &one);
    /* hold the pool's thread so that both decodes are still out */
    struct hold h;
    hold_pool(&h);
    struct seen s1 = {0}, s2 = {0};
    struct qn_decode *x1, *x2;
    ck_assert_int_eq(qn_decode_start(d, &one, 1, on_decoded, &s1, &x1), QN_OK);
    ck_assert_int_eq(qn_decode_start(d, &one, 1, on_decoded, &s2, &x2), QN_OK);
    qn_decode_cancel(x1);
    hold_release(&h);
    /* freed without running the loop: the live decode calls back before the
     * free returns (its work done), the cancelled one never */
    qn_decoder_free(d);
    ck_assert_int_eq(s1.calls, 0);
    ck_assert_int_eq(s2.calls, 1);
    ck_assert(s2.raw_equal[0]);
    hold_free(&h);
    qn_buf_free(&b);
    end();
}
END_TEST

/* A callback that tries to start another decode while the decoder is freed. */
struct again {
    struct qn_decoder *d;
    const struct qn_pop_segment *rows;
    int calls, rc;
};

static void start_again(void *ud, const struct qn_pop_segment *segs, size_t n)
{
    (void)segs;
    (void)n;
    struct again *a = ud;
    struct qn_decode *x = NULL;
    a->calls++;
    a->rc = qn_decode_start(a->d, a->rows, 1, start_again, a, &x);
}

START_TEST(nothing_starts_while_the_decoder_is_freed)
{
    start(1, 8);
    struct qn_buf b;
    struct qn_pop_segment one;
    struct qn_decoder *d = small_decoder(&b, &one);
    struct again a = {d, &one, 0, 0};
    struct qn_decode *x;
    ck_assert_int_eq(qn_decode_start(d, &one, 1, start_again, &a, &x), QN_OK);
    qn_decoder_free(d);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(a.rc, QN_EBUSY);
    qn_buf_free(&b);
    end();
}
END_TEST

Suite *qn_test_decode_suite(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, large_batch_decompressed_off_the_loop);
    tcase_add_test(tc, small_batch_full_pool_and_corrupt_segments);
    tcase_add_test(tc, cancel_never_calls_back_and_free_finishes_the_rest);
    tcase_add_test(tc, nothing_starts_while_the_decoder_is_freed);
    suite_add_tcase(s, tc);
    return s;
}
