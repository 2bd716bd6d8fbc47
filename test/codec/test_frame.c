/*
 * test_frame.c - codec/src/frame.c: the byte layout of one frame, round trips
 * for every flag combination and the field-length limits, each malformed input
 * with its error code and byte offset, and encode-side refusals.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "queen/frame.h"

#include "codec_test.h"

static uint8_t txn_bytes[65536];
static uint8_t psub_bytes[65536];
static uint8_t pay_bytes[4096];

static void fill_inputs(void)
{
    for (size_t i = 0; i < sizeof(txn_bytes); i++) {
        txn_bytes[i] = (uint8_t)('a' + i % 26);
        psub_bytes[i] = (uint8_t)('A' + i % 26);
    }
    for (size_t i = 0; i < sizeof(pay_bytes); i++)
        pay_bytes[i] = (uint8_t)(i * 7 + 1);
}

static struct qn_frame make(uint8_t flags, size_t txn_len, size_t psub_len, size_t pay_len)
{
    struct qn_frame f;
    memset(&f, 0, sizeof(f));
    f.flags = flags;
    for (int i = 0; i < 16; i++) {
        f.message_id[i] = (uint8_t)(0x10 + i);
        f.trace_id[i] = (flags & QN_FRAME_FLAG_TRACE) ? (uint8_t)(0xa0 + i) : 0;
    }
    f.txn = txn_len ? txn_bytes : NULL;
    f.txn_len = txn_len;
    f.psub = (flags & QN_FRAME_FLAG_PSUB) ? psub_bytes : NULL;
    f.psub_len = (flags & QN_FRAME_FLAG_PSUB) ? psub_len : 0;
    f.payload = pay_len ? pay_bytes : NULL;
    f.payload_len = pay_len;
    return f;
}

static void assert_same(const struct qn_frame *a, const struct qn_frame *b)
{
    ck_assert_uint_eq(a->flags, b->flags);
    ck_assert_mem_eq(a->message_id, b->message_id, 16);
    if (a->flags & QN_FRAME_FLAG_TRACE)
        ck_assert_mem_eq(a->trace_id, b->trace_id, 16);
    ck_assert_uint_eq(a->txn_len, b->txn_len);
    if (a->txn_len)
        ck_assert_mem_eq(a->txn, b->txn, a->txn_len);
    if (a->flags & QN_FRAME_FLAG_PSUB) {
        ck_assert_uint_eq(a->psub_len, b->psub_len);
        if (a->psub_len)
            ck_assert_mem_eq(a->psub, b->psub, a->psub_len);
    }
    ck_assert_uint_eq(a->payload_len, b->payload_len);
    if (a->payload_len)
        ck_assert_mem_eq(a->payload, b->payload, a->payload_len);
}

/* The exact bytes of one frame with every optional field, written by hand from
 * the seed's layout. */
START_TEST(layout_is_byte_exact)
{
    struct qn_frame f;
    memset(&f, 0, sizeof(f));
    f.flags = QN_FRAME_FLAG_TRACE | QN_FRAME_FLAG_PSUB | QN_FRAME_FLAG_ENCRYPTED;
    for (int i = 0; i < 16; i++) {
        f.message_id[i] = (uint8_t)i;
        f.trace_id[i] = (uint8_t)(0xf0 | i);
    }
    f.txn = (const uint8_t *)"tx";
    f.txn_len = 2;
    f.psub = (const uint8_t *)"bob";
    f.psub_len = 3;
    f.payload = (const uint8_t *)"{}";
    f.payload_len = 2;

    uint8_t want[4 + 1 + 16 + 16 + 2 + 2 + 2 + 3 + 2];
    size_t p = 0;
    uint32_t body = sizeof(want) - 4; /* 44 */
    want[p++] = (uint8_t)body;
    want[p++] = 0;
    want[p++] = 0;
    want[p++] = 0;
    want[p++] = 0x07;
    for (int i = 0; i < 16; i++)
        want[p++] = (uint8_t)i;
    for (int i = 0; i < 16; i++)
        want[p++] = (uint8_t)(0xf0 | i);
    want[p++] = 2;
    want[p++] = 0;
    want[p++] = 't';
    want[p++] = 'x';
    want[p++] = 3;
    want[p++] = 0;
    want[p++] = 'b';
    want[p++] = 'o';
    want[p++] = 'b';
    want[p++] = '{';
    want[p++] = '}';
    ck_assert_uint_eq(p, sizeof(want));
    ck_assert_uint_eq(body, 44);

    size_t size = 0, written = 0;
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_OK);
    ck_assert_uint_eq(size, sizeof(want));
    uint8_t out[64];
    ck_assert_int_eq(qn_frame_encode(&f, out, sizeof(out), &written), QN_OK);
    ck_assert_uint_eq(written, sizeof(want));
    ck_assert_mem_eq(out, want, sizeof(want));
}
END_TEST

START_TEST(minimal_frame_is_23_bytes)
{
    struct qn_frame f = make(0, 0, 0, 0);
    size_t size = 0;
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_OK);
    ck_assert_uint_eq(size, QN_FRAME_LEN_PREFIX + QN_FRAME_MIN_BODY);
    uint8_t out[23];
    size_t w = 0;
    ck_assert_int_eq(qn_frame_encode(&f, out, sizeof(out), &w), QN_OK);
    ck_assert_uint_eq(out[0], 19);
    struct qn_frame d;
    size_t used = 0;
    ck_assert_int_eq(qn_frame_decode(out, sizeof(out), &d, &used, NULL), QN_OK);
    ck_assert_uint_eq(used, 23);
    ck_assert_uint_eq(d.txn_len, 0);
    ck_assert_uint_eq(d.payload_len, 0);
    ck_assert_ptr_null(d.psub);
}
END_TEST

/* Every flag combination x txn length {0, 1, 65535} x psub length {0, 65535} x
 * payload {0, 1, 4096}; each frame encoded into an exact-size heap buffer so
 * ASan sees any read past it. */
START_TEST(round_trip_all_combinations)
{
    static const size_t txns[] = {0, 1, 65535};
    static const size_t psubs[] = {0, 65535};
    static const size_t pays[] = {0, 1, 4096};
    fill_inputs();
    for (unsigned flags = 0; flags <= QN_FRAME_FLAGS_KNOWN; flags++)
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 2; b++)
                for (size_t c = 0; c < 3; c++) {
                    struct qn_frame f = make((uint8_t)flags, txns[a], psubs[b], pays[c]);
                    size_t size = 0, written = 0, used = 0;
                    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_OK);
                    uint8_t *buf = malloc(size);
                    ck_assert_ptr_nonnull(buf);
                    ck_assert_int_eq(qn_frame_encode(&f, buf, size, &written), QN_OK);
                    ck_assert_uint_eq(written, size);
                    struct qn_frame d;
                    ck_assert_int_eq(qn_frame_decode(buf, size, &d, &used, NULL), QN_OK);
                    ck_assert_uint_eq(used, size);
                    assert_same(&f, &d);
                    /* borrowed, not copied */
                    ck_assert(d.payload >= buf && d.payload + d.payload_len == buf + size);
                    if (!(flags & QN_FRAME_FLAG_TRACE)) {
                        static const uint8_t zero[16];
                        ck_assert_mem_eq(d.trace_id, zero, 16);
                    }
                    free(buf);
                }
}
END_TEST

START_TEST(decode_leaves_trailing_bytes)
{
    struct qn_frame f = make(QN_FRAME_FLAG_PSUB, 3, 2, 5);
    fill_inputs();
    uint8_t buf[128];
    size_t w = 0, used = 0;
    ck_assert_int_eq(qn_frame_encode(&f, buf, sizeof(buf), &w), QN_OK);
    memset(buf + w, 0xee, sizeof(buf) - w);
    struct qn_frame d;
    ck_assert_int_eq(qn_frame_decode(buf, sizeof(buf), &d, &used, NULL), QN_OK);
    ck_assert_uint_eq(used, w);
    ck_assert_uint_eq(d.payload_len, 5);
}
END_TEST

/* Every strict prefix of a valid frame is an error (never a crash), and the
 * error says which field is missing. */
START_TEST(every_prefix_is_rejected)
{
    fill_inputs();
    for (unsigned flags = 0; flags <= QN_FRAME_FLAGS_KNOWN; flags++) {
        struct qn_frame f = make((uint8_t)flags, 5, 4, 3);
        size_t size = 0, w = 0;
        ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_OK);
        uint8_t *full = malloc(size);
        ck_assert_int_eq(qn_frame_encode(&f, full, size, &w), QN_OK);
        for (size_t n = 0; n < size; n++) {
            uint8_t *cut = malloc(n ? n : 1);
            memcpy(cut, full, n);
            struct qn_frame d;
            size_t used = 12345, at = 777;
            int rc = qn_frame_decode(cut, n, &d, &used, &at);
            ck_assert_int_eq(rc, n < 4 ? QN_EFRAME_TRUNCATED : QN_EFRAME_BODY_OVERRUN);
            ck_assert_uint_eq(at, 0);
            ck_assert_uint_eq(used, 12345); /* untouched on failure */
            free(cut);
        }
        free(full);
    }
}
END_TEST

/* Writes a frame header with the given body length and body bytes. */
static size_t raw_frame(uint8_t *out, uint32_t body_len, const uint8_t *body, size_t body_bytes)
{
    out[0] = (uint8_t)body_len;
    out[1] = (uint8_t)(body_len >> 8);
    out[2] = (uint8_t)(body_len >> 16);
    out[3] = (uint8_t)(body_len >> 24);
    memcpy(out + 4, body, body_bytes);
    return 4 + body_bytes;
}

static void expect_err(const uint8_t *buf, size_t len, int code, size_t offset)
{
    /* copy to an exact-size heap buffer so ASan catches overreads */
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, buf, len);
    struct qn_frame d;
    size_t used = 0, at = 999999;
    int rc = qn_frame_decode(copy, len, &d, &used, &at);
    ck_assert_int_eq(rc, code);
    ck_assert_uint_eq(at, offset);
    /* err_at may be NULL */
    ck_assert_int_eq(qn_frame_decode(copy, len, &d, &used, NULL), code);
    free(copy);
}

START_TEST(malformed_each_error_and_offset)
{
    uint8_t body[128], buf[256];
    memset(body, 0, sizeof(body));
    memset(buf, 0, sizeof(buf));
    size_t n;

    /* fewer than 4 bytes: truncated at the length prefix */
    expect_err(buf, 0, QN_EFRAME_TRUNCATED, 0);
    buf[0] = 1;
    expect_err(buf, 3, QN_EFRAME_TRUNCATED, 0);

    /* body_len past the buffer */
    n = raw_frame(buf, 30, body, 29);
    expect_err(buf, n, QN_EFRAME_BODY_OVERRUN, 0);
    n = raw_frame(buf, 0xffffffffu, body, 10);
    expect_err(buf, n, QN_EFRAME_BODY_OVERRUN, 0);

    /* empty body: the flags byte is missing */
    n = raw_frame(buf, 0, body, 0);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 4);

    /* unknown flag bits, checked before anything after the flags byte */
    for (unsigned bit = 3; bit < 8; bit++) {
        body[0] = (uint8_t)(1u << bit);
        n = raw_frame(buf, 1, body, 1);
        expect_err(buf, n, QN_EFRAME_FLAGS, 4);
        n = raw_frame(buf, 40, body, 40);
        expect_err(buf, n, QN_EFRAME_FLAGS, 4);
    }
    body[0] = 0xff;
    n = raw_frame(buf, 19, body, 19);
    expect_err(buf, n, QN_EFRAME_FLAGS, 4);

    /* message id cut: body of 10 bytes */
    body[0] = 0;
    n = raw_frame(buf, 10, body, 10);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 5);

    /* trace id announced but cut */
    body[0] = QN_FRAME_FLAG_TRACE;
    n = raw_frame(buf, 17 + 5, body, 17 + 5);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 21);

    /* txn_len field missing (17 bytes: flags + id) */
    body[0] = 0;
    n = raw_frame(buf, 17, body, 17);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 21);
    n = raw_frame(buf, 18, body, 18);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 21);
    body[0] = QN_FRAME_FLAG_TRACE;
    n = raw_frame(buf, 33, body, 33);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 37);

    /* txn_len past the body */
    body[0] = 0;
    body[17] = 5; /* txn_len = 5, 4 bytes follow */
    body[18] = 0;
    n = raw_frame(buf, 19 + 4, body, 19 + 4);
    expect_err(buf, n, QN_EFRAME_INNER_OVERRUN, 21);
    body[17] = 0xff; /* txn_len = 65535 */
    body[18] = 0xff;
    n = raw_frame(buf, 19 + 4, body, 19 + 4);
    expect_err(buf, n, QN_EFRAME_INNER_OVERRUN, 21);
    /* the same with a trace id in front */
    memset(body, 0, sizeof(body));
    body[0] = QN_FRAME_FLAG_TRACE;
    body[33] = 3;
    n = raw_frame(buf, 35 + 2, body, 35 + 2);
    expect_err(buf, n, QN_EFRAME_INNER_OVERRUN, 37);

    /* producer sub announced; its length field missing or cut */
    memset(body, 0, sizeof(body));
    body[0] = QN_FRAME_FLAG_PSUB;
    body[17] = 2; /* txn "ab" */
    body[19] = 'a';
    body[20] = 'b';
    n = raw_frame(buf, 21, body, 21);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 25);
    n = raw_frame(buf, 22, body, 22);
    expect_err(buf, n, QN_EFRAME_TRUNCATED, 25);
    /* psub_len past the body */
    body[21] = 9;
    body[22] = 0;
    n = raw_frame(buf, 23 + 8, body, 23 + 8);
    expect_err(buf, n, QN_EFRAME_INNER_OVERRUN, 25);
    /* exactly fitting: no payload */
    n = raw_frame(buf, 23 + 9, body, 23 + 9);
    struct qn_frame d;
    size_t used;
    ck_assert_int_eq(qn_frame_decode(buf, n, &d, &used, NULL), QN_OK);
    ck_assert_uint_eq(d.psub_len, 9);
    ck_assert_uint_eq(d.payload_len, 0);
}
END_TEST

START_TEST(encode_refusals)
{
    fill_inputs();
    size_t size = 7, w = 7;
    uint8_t out[256];

    struct qn_frame f = make(0x08, 0, 0, 0);
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_EFRAME_FLAGS);
    ck_assert_int_eq(qn_frame_encode(&f, out, sizeof(out), &w), QN_EFRAME_FLAGS);
    ck_assert_uint_eq(size, 7);
    ck_assert_uint_eq(w, 7);

    f = make(0, 65536, 0, 0);
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_EFRAME_FIELD_TOO_LONG);
    f = make(QN_FRAME_FLAG_PSUB, 0, 65536, 0);
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_EFRAME_FIELD_TOO_LONG);
    /* psub fields are ignored without the flag */
    f = make(0, 0, 0, 0);
    f.psub_len = 70000;
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_OK);
    ck_assert_uint_eq(size, 23);

    /* a body over 2^32-1 bytes (the payload is never read) */
    f = make(0, 0, 0, 1);
    f.payload_len = (size_t)0xffffffffu - 19 + 1;
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_EFRAME_FIELD_TOO_LONG);
    f.payload_len = (size_t)0xffffffffu - 19;
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_OK);
    ck_assert_uint_eq(size, (size_t)0xffffffffu + 4);

    /* NULL pointers with a length */
    f = make(0, 0, 0, 0);
    f.txn_len = 3;
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_EINVAL);
    f = make(0, 0, 0, 0);
    f.payload_len = 3;
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_EINVAL);

    /* output too small: nothing written */
    f = make(QN_FRAME_FLAG_TRACE, 4, 0, 10);
    ck_assert_int_eq(qn_frame_encoded_size(&f, &size), QN_OK);
    memset(out, 0x5a, sizeof(out));
    w = 7;
    ck_assert_int_eq(qn_frame_encode(&f, out, size - 1, &w), QN_ERANGE);
    ck_assert_uint_eq(w, 7);
    ck_assert_uint_eq(out[0], 0x5a);
    ck_assert_int_eq(qn_frame_encode(&f, out, size, &w), QN_OK);

    /* argument checks */
    ck_assert_int_eq(qn_frame_encoded_size(NULL, &size), QN_EINVAL);
    ck_assert_int_eq(qn_frame_encode(&f, NULL, 10, &w), QN_EINVAL);
    struct qn_frame d;
    ck_assert_int_eq(qn_frame_decode(NULL, 5, &d, &w, NULL), QN_EINVAL);
    ck_assert_int_eq(qn_frame_decode(NULL, 0, &d, &w, NULL), QN_EFRAME_TRUNCATED);
}
END_TEST

Suite *qn_test_frame_suite(void)
{
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, layout_is_byte_exact);
    tcase_add_test(tc, minimal_frame_is_23_bytes);
    tcase_add_test(tc, round_trip_all_combinations);
    tcase_add_test(tc, decode_leaves_trailing_bytes);
    suite_add_tcase(s, tc);
    tc = tcase_create("malformed");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_prefix_is_rejected);
    tcase_add_test(tc, malformed_each_error_and_offset);
    tcase_add_test(tc, encode_refusals);
    suite_add_tcase(s, tc);
    return s;
}
