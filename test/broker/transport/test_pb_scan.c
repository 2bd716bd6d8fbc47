/*
 * test_pb_scan.c - broker/src/transport/pb_scan.c: hand-built wire bytes against
 * the real queen.v1 descriptors. Nested, repeated, map-like (repeated entry
 * messages), oneof, unknown fields of every wire type, packed fields, and every
 * wire-format error (truncated, over-long varint, 4 GiB length prefix, groups,
 * field 0, nesting past the limit with a self-referencing descriptor). Also
 * shows the two protobuf-c behaviours the scan exists for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_main.h"
#include "queen/error.h"
#include "queen/v1/queue.pb-c.h"

#include "pb_scan.h"

/* ---- a tiny wire writer ---- */

struct wb {
    uint8_t b[4096];
    size_t n;
};

static void put_varint(struct wb *w, uint64_t v)
{
    do {
        ck_assert_uint_lt(w->n, sizeof w->b);
        uint8_t c = v & 0x7F;
        v >>= 7;
        w->b[w->n++] = c | (v ? 0x80 : 0);
    } while (v);
}

static void put_raw(struct wb *w, const void *p, size_t n)
{
    ck_assert_uint_le(w->n + n, sizeof w->b);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void put_tag(struct wb *w, uint32_t num, unsigned wt)
{
    put_varint(w, (uint64_t)num << 3 | wt);
}

static void put_bytes(struct wb *w, uint32_t num, const void *p, size_t n)
{
    put_tag(w, num, 2);
    put_varint(w, n);
    put_raw(w, p, n);
}

/* a string field from a literal, embedded NULs included */
#define PUT_STR(w, num, lit) put_bytes((w), (num), (lit), sizeof(lit) - 1)

static void put_msg(struct wb *w, uint32_t num, const struct wb *m)
{
    put_bytes(w, num, m->b, m->n);
}

static void put_uvarint_field(struct wb *w, uint32_t num, uint64_t v)
{
    put_tag(w, num, 0);
    put_varint(w, v);
}

static int scan(const struct wb *w, const ProtobufCMessageDescriptor *d, char *msg, size_t cap)
{
    return qn_pb_scan(w->b, w->n, d, msg, cap);
}

static void expect(const struct wb *w, const ProtobufCMessageDescriptor *d, const char *want)
{
    char msg[256];
    memset(msg, 'x', sizeof msg);
    int rc = scan(w, d, msg, sizeof msg);
    if (!want) {
        ck_assert_msg(rc == QN_OK, "refused: %s", msg);
        return;
    }
    ck_assert_int_eq(rc, QN_EBADREQUEST);
    ck_assert_str_eq(msg, want);
}

static void push_item(struct wb *out, const char *queue, const char *txn)
{
    struct wb it = {.n = 0};
    put_bytes(&it, 1, queue, strlen(queue));
    put_bytes(&it, 2, "p", 1);
    put_bytes(&it, 3, "pay\0load", 8); /* bytes: a NUL is fine */
    put_bytes(&it, 4, txn, strlen(txn));
    put_msg(out, 1, &it);
}

/* ---- why the scan exists ---- */

START_TEST(protobuf_c_truncates_and_accepts_bad_utf8)
{
    struct wb w = {.n = 0};
    PUT_STR(&w, 1, "a\0evil");
    Queen__V1__PopRequest *r = queen__v1__pop_request__unpack(NULL, w.n, w.b);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(strlen(r->queue), 1); /* "a\0evil" became "a" */
    queen__v1__pop_request__free_unpacked(r, NULL);

    w.n = 0;
    PUT_STR(&w, 1, "ab\xff");
    r = queen__v1__pop_request__unpack(NULL, w.n, w.b);
    ck_assert_ptr_nonnull(r); /* protobuf-c does not check UTF-8 */
    ck_assert_str_eq(r->queue, "ab\xff");
    queen__v1__pop_request__free_unpacked(r, NULL);
    expect(&w, &queen__v1__pop_request__descriptor, "queue is not valid UTF-8 at byte 2");
}
END_TEST

/* ---- accepted ---- */

START_TEST(sound_requests_pass)
{
    struct wb w = {.n = 0};
    push_item(&w, "orders", "t-1");
    push_item(&w, "caf\xc3\xa9.\xf0\x9f\x98\x80", "t-2"); /* 2- and 4-byte UTF-8 */
    push_item(&w, "", "");
    expect(&w, &queen__v1__push_request__descriptor, NULL);
    ck_assert_int_eq(qn_pb_scan(NULL, 0, &queen__v1__push_request__descriptor, NULL, 0), QN_OK);

    /* every scalar wire type, a max-length varint, and unknown fields of every kind */
    w.n = 0;
    PUT_STR(&w, 1, "q");
    put_uvarint_field(&w, 6, 100);
    put_tag(&w, 12, 0);
    put_raw(&w, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10); /* -1 as int64 */
    put_uvarint_field(&w, 99, 7);                                /* unknown varint */
    put_tag(&w, 100, 1);
    put_raw(&w, "12345678", 8); /* unknown fixed64 */
    put_tag(&w, 101, 5);
    put_raw(&w, "1234", 4);       /* unknown fixed32 */
    PUT_STR(&w, 102, "\0\xff\0"); /* unknown length-delimited: not a declared string */
    put_tag(&w, 536870911, 0);    /* the largest field number */
    put_varint(&w, 1);
    expect(&w, &queen__v1__pop_request__descriptor, NULL);

    /* a declared string sent with another wire type is left to protobuf-c */
    w.n = 0;
    put_uvarint_field(&w, 1, 0);
    expect(&w, &queen__v1__pop_request__descriptor, NULL);
}
END_TEST

/* ---- strings ---- */

START_TEST(nul_in_nested_repeated)
{
    struct wb w = {.n = 0};
    push_item(&w, "orders", "t-0");
    push_item(&w, "orders", "t-1");
    put_uvarint_field(&w, 77, 1); /* unknown fields between items do not shift the index */
    push_item(&w, "orders", "t-2");
    struct wb it = {.n = 0};
    PUT_STR(&it, 1, "orders");
    PUT_STR(&it, 4, "x\0two");
    put_msg(&w, 1, &it);
    expect(&w, &queen__v1__push_request__descriptor,
           "items[3].transaction_id contains a NUL byte at byte 1");

    w.n = 0;
    it.n = 0;
    PUT_STR(&it, 1, "a\0evil");
    put_msg(&w, 1, &it);
    expect(&w, &queen__v1__push_request__descriptor,
           "items[0].queue contains a NUL byte at byte 1");

    /* the first problem wins, in wire order */
    push_item(&w, "b\xc0\x80", "");
    expect(&w, &queen__v1__push_request__descriptor,
           "items[0].queue contains a NUL byte at byte 1");
}
END_TEST

START_TEST(invalid_utf8_forms)
{
    static const struct {
        const char *s;
        size_t n;
        size_t at;
    } bad[] = {
        {"\xc0\x80", 2, 0},         /* overlong NUL */
        {"ab\xc1\xbf", 4, 2},       /* overlong */
        {"\xe0\x80\x80", 3, 0},     /* overlong 3-byte */
        {"x\xed\xa0\x80", 4, 1},    /* surrogate */
        {"\xf4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0}, /* lead byte past F4 */
        {"abc\xe2\x82", 5, 3},      /* cut short */
        {"\x80", 1, 0},             /* stray continuation */
        {"\xe2\x28\xa1", 3, 0},     /* bad continuation */
        {"ok\xff", 3, 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct wb w = {.n = 0};
        put_bytes(&w, 5, bad[i].s, bad[i].n);
        char want[96];
        snprintf(want, sizeof want, "consumer_group is not valid UTF-8 at byte %zu", bad[i].at);
        expect(&w, &queen__v1__pop_request__descriptor, want);
    }
    struct wb w = {.n = 0};
    PUT_STR(&w, 5, "\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80"); /* U+10FFFF, U+D7FF, U+E000 */
    expect(&w, &queen__v1__pop_request__descriptor, NULL);
}
END_TEST

START_TEST(oneofs)
{
    /* ConsumeRequest.kind = subscribe */
    struct wb sub = {.n = 0}, w = {.n = 0};
    PUT_STR(&sub, 5, "grp\0x");
    put_uvarint_field(&w, 1, 9);
    put_msg(&w, 2, &sub);
    expect(&w, &queen__v1__consume_request__descriptor,
           "subscribe.consumer_group contains a NUL byte at byte 3");

    /* ConsumeRequest.kind = ack, AckItem.target = transaction_id */
    struct wb ack = {.n = 0}, item = {.n = 0};
    PUT_STR(&ack, 1, "g");
    PUT_STR(&item, 1, "0190a0b2-7c3e-7d4f-8a1b-2c3d4e5f6a7b");
    put_uvarint_field(&item, 3, 5); /* target = offset */
    put_msg(&ack, 2, &item);
    item.n = 0;
    PUT_STR(&item, 2, "tx\0");
    put_msg(&ack, 2, &item);
    w.n = 0;
    put_msg(&w, 4, &ack);
    expect(&w, &queen__v1__consume_request__descriptor,
           "ack.items[1].transaction_id contains a NUL byte at byte 2");

    /* TransactRequest.ops[1].push (oneof op) */
    struct wb op = {.n = 0};
    w.n = 0;
    struct wb pi = {.n = 0};
    PUT_STR(&pi, 1, "q");
    put_msg(&op, 1, &pi);
    put_msg(&w, 1, &op);
    op.n = 0;
    pi.n = 0;
    PUT_STR(&pi, 2, "\xed\xbf\xbf");
    put_msg(&op, 1, &pi);
    put_msg(&w, 1, &op);
    expect(&w, &queen__v1__transact_request__descriptor,
           "ops[1].push.partition is not valid UTF-8 at byte 0");
}
END_TEST

START_TEST(repeated_strings_and_map_like)
{
    /* repeated string */
    struct wb w = {.n = 0};
    PUT_STR(&w, 2, "lease-a");
    PUT_STR(&w, 2, "lease\0b");
    expect(&w, &queen__v1__transact_request__descriptor,
           "required_leases[1] contains a NUL byte at byte 5");

    /* FetchRequest.entries: repeated (queue, partition, ...) entries, the way
     * protobuf encodes a map (a repeated key/value entry message) */
    w.n = 0;
    for (int i = 0; i < 3; i++) {
        struct wb e = {.n = 0};
        PUT_STR(&e, 1, "q");
        if (i == 2)
            PUT_STR(&e, 2, "p\0");
        else
            PUT_STR(&e, 2, "p");
        put_uvarint_field(&e, 3, (uint64_t)i);
        put_msg(&w, 1, &e);
    }
    expect(&w, &queen__v1__fetch_request__descriptor,
           "entries[2].partition contains a NUL byte at byte 1");
}
END_TEST

START_TEST(packed_fields_are_skipped)
{
    /* A packed run of varints under an unknown field number and, with wire type
     * 2, under a declared scalar (batch): neither is a string. */
    struct wb w = {.n = 0};
    put_bytes(&w, 50, "\x01\x02\x00\x03", 4);
    put_bytes(&w, 6, "\x01\x00\x02", 3);
    PUT_STR(&w, 1, "q");
    expect(&w, &queen__v1__pop_request__descriptor, NULL);
}
END_TEST

/* ---- wire format ---- */

START_TEST(wire_errors)
{
    struct wb w = {.n = 0};
    put_raw(&w, "\x0a", 1); /* tag, then nothing */
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: truncated or over-long length at byte 1");

    w.n = 0;
    put_raw(&w, "\x80", 1); /* a tag cut short */
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: truncated or over-long field tag at byte 0");

    w.n = 0;
    put_raw(&w, "\x30\xff", 2); /* batch varint cut short */
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: truncated or over-long varint at byte 1");

    w.n = 0;
    put_tag(&w, 6, 0); /* 11-byte varint */
    put_raw(&w, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: truncated or over-long varint at byte 1");

    w.n = 0;
    put_tag(&w, 6, 0); /* 10 bytes, but over 64 bits */
    put_raw(&w, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: truncated or over-long varint at byte 1");

    w.n = 0;
    put_tag(&w, 1, 2); /* a 4 GiB length prefix */
    put_varint(&w, (uint64_t)1 << 32);
    put_raw(&w, "abc", 3);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: length past the end of the message at byte 1");

    w.n = 0;
    put_tag(&w, 1, 2); /* one byte too long */
    put_varint(&w, 4);
    put_raw(&w, "abc", 3);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: length past the end of the message at byte 1");

    w.n = 0;
    put_tag(&w, 99, 1);
    put_raw(&w, "1234567", 7);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: truncated fixed64 at byte 2");
    w.n = 0;
    put_tag(&w, 99, 5);
    put_raw(&w, "123", 3);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: truncated fixed32 at byte 2");

    w.n = 0;
    put_tag(&w, 3, 3); /* start group */
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: unsupported wire type (groups) at byte 0");
    w.n = 0;
    put_tag(&w, 3, 7);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: unsupported wire type (groups) at byte 0");

    w.n = 0;
    put_tag(&w, 0, 0); /* field number 0 */
    put_varint(&w, 1);
    expect(&w, &queen__v1__pop_request__descriptor,
           "request is not valid protobuf: invalid field number at byte 0");

    /* a nested message whose inner length runs past its own end, though not
     * past the buffer: reported with the path of the enclosing field */
    w.n = 0;
    push_item(&w, "q", "t");
    size_t inner_len_at = w.n + 3; /* tag, length, inner tag, then the inner length */
    put_tag(&w, 1, 2);
    put_varint(&w, 3);
    put_raw(&w, "\x0a\x05q", 3);
    PUT_STR(&w, 99, "padding");
    char want[160];
    snprintf(want, sizeof want,
             "request is not valid protobuf: length past the end of the message at byte %zu "
             "(in items[1])",
             inner_len_at);
    expect(&w, &queen__v1__push_request__descriptor, want);
}
END_TEST

/* A self-referencing message (Rec { Rec child = 1; string s = 2; }) to reach the
 * depth limit, which queen.v1's messages cannot. */
static const ProtobufCMessageDescriptor rec_desc;
static const ProtobufCFieldDescriptor rec_fields[2] = {
    {"child", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_MESSAGE, 0, 0, &rec_desc, NULL, 0, 0, NULL,
     NULL},
    {"s", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0, 0, NULL, NULL, 0, 0, NULL, NULL},
};
static const ProtobufCIntRange rec_ranges[2] = {{1, 0}, {0, 2}};
static const unsigned rec_by_name[2] = {0, 1};
static const ProtobufCMessageDescriptor rec_desc = {PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
                                                    "t.Rec",
                                                    "Rec",
                                                    "T__Rec",
                                                    "t",
                                                    sizeof(ProtobufCMessage) + 2 * sizeof(void *),
                                                    2,
                                                    rec_fields,
                                                    rec_by_name,
                                                    1,
                                                    rec_ranges,
                                                    NULL,
                                                    NULL,
                                                    NULL,
                                                    NULL};

static void nest(struct wb *w, int levels, const char *leaf, size_t leaf_len)
{
    struct wb a = {.n = 0};
    put_bytes(&a, 2, leaf, leaf_len);
    for (int i = 0; i < levels; i++) {
        struct wb b = {.n = 0};
        put_msg(&b, 1, &a);
        a = b;
    }
    *w = a;
}

START_TEST(depth_limit)
{
    struct wb w;
    nest(&w, QN_PB_SCAN_MAX_DEPTH, "ok", 2);
    expect(&w, &rec_desc, NULL);
    nest(&w, 3, "n\0", 2);
    expect(&w, &rec_desc, "child.child.child.s contains a NUL byte at byte 1");
    nest(&w, QN_PB_SCAN_MAX_DEPTH + 1, "ok", 2);
    char msg[512];
    ck_assert_int_eq(scan(&w, &rec_desc, msg, sizeof msg), QN_EBADREQUEST);
    ck_assert_msg(strstr(msg, "nests messages deeper than 32") != NULL, "%s", msg);
}
END_TEST

START_TEST(message_buffer_and_arguments)
{
    struct wb w = {.n = 0};
    PUT_STR(&w, 1, "a\0");
    char small[8];
    memset(small, 'x', sizeof small);
    ck_assert_int_eq(scan(&w, &queen__v1__pop_request__descriptor, small, sizeof small),
                     QN_EBADREQUEST);
    ck_assert_str_eq(small, "queue c"); /* truncated, still terminated */
    ck_assert_int_eq(scan(&w, &queen__v1__pop_request__descriptor, NULL, 0), QN_EBADREQUEST);
    ck_assert_int_eq(qn_pb_scan(w.b, w.n, NULL, NULL, 0), QN_EINVAL);
    ck_assert_int_eq(qn_pb_scan(NULL, 1, &queen__v1__pop_request__descriptor, NULL, 0), QN_EINVAL);
}
END_TEST

Suite *qn_test_pb_scan_suite(void);
Suite *qn_test_pb_scan_suite(void)
{
    Suite *s = suite_create("pb_scan");
    TCase *tc = tcase_create("pb_scan");
    tcase_add_test(tc, protobuf_c_truncates_and_accepts_bad_utf8);
    tcase_add_test(tc, sound_requests_pass);
    tcase_add_test(tc, nul_in_nested_repeated);
    tcase_add_test(tc, invalid_utf8_forms);
    tcase_add_test(tc, oneofs);
    tcase_add_test(tc, repeated_strings_and_map_like);
    tcase_add_test(tc, packed_fields_are_skipped);
    tcase_add_test(tc, wire_errors);
    tcase_add_test(tc, depth_limit);
    tcase_add_test(tc, message_buffer_and_arguments);
    suite_add_tcase(s, tc);
    return s;
}

static const struct qn_check_suite suites[] = {
    {"pb_scan", qn_test_pb_scan_suite, false},
};

/* Its own runner (the shared main of test/support/check_main.c) until pb_scan.c
 * is part of the broker library and the suite joins test_transport. */
const struct qn_check_runner qn_check_runner = {"test_pb_scan", suites, QN_CHECK_NSUITES(suites),
                                                NULL};
