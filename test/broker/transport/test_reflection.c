/*
 * test_reflection.c - broker/src/transport/reflection.c's index over the embedded
 * FileDescriptorSet: files, symbols of every kind, dependency closure, malformed
 * input. (The RPCs themselves are tested end to end in test/e2e.)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport_test.h"
#include "queen/error.h"
#include "transport/reflection.h"

struct qn_embedded_file {
    const char *name;
    const uint8_t *data;
    size_t len;
};
extern const struct qn_embedded_file qn_descriptor_set[];

static struct qn_refl_index *ix;

static void setup(void)
{
    ck_assert_int_eq(qn_refl_index_build(qn_descriptor_set[0].data, qn_descriptor_set[0].len, &ix),
                     QN_OK);
}

static void teardown(void)
{
    qn_refl_index_free(ix);
    ix = NULL;
}

static const char *file_of(const char *symbol)
{
    int f = qn_refl_index_find_symbol(ix, symbol);
    return f < 0 ? NULL : qn_refl_index_file_name(ix, (size_t)f);
}

START_TEST(files_and_services)
{
    ck_assert_uint_ge(qn_refl_index_nfiles(ix), 6);
    ck_assert_int_ge(qn_refl_index_find_file(ix, "queen/v1/queue.proto"), 0);
    ck_assert_int_ge(qn_refl_index_find_file(ix, "grpc/health/v1/health.proto"), 0);
    ck_assert_int_eq(qn_refl_index_find_file(ix, "queen/v1/nope.proto"), -1);
    const char *want[] = {"queen.v1.QueueService", "queen.v1.AdminService", "grpc.health.v1.Health",
                          "grpc.reflection.v1.ServerReflection",
                          "grpc.reflection.v1alpha.ServerReflection"};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        bool found = false;
        for (size_t i = 0; i < qn_refl_index_nservices(ix); i++)
            found |= strcmp(qn_refl_index_service(ix, i), want[w]) == 0;
        ck_assert_msg(found, "service %s not indexed", want[w]);
    }
}
END_TEST

START_TEST(symbols_of_every_kind)
{
    ck_assert_str_eq(file_of("queen.v1.QueueService"), "queen/v1/queue.proto");
    ck_assert_str_eq(file_of("queen.v1.QueueService.Push"), "queen/v1/queue.proto");
    ck_assert_str_eq(file_of(".queen.v1.QueueService"), "queen/v1/queue.proto");
    ck_assert_str_eq(file_of("queen.v1.PushRequest"), "queen/v1/queue.proto");
    ck_assert_str_eq(file_of("queen.v1.SubscriptionMode"), "queen/v1/common.proto");
    ck_assert_str_eq(file_of("queen.v1.SUBSCRIPTION_MODE_ALL"), "queen/v1/common.proto");
    ck_assert_str_eq(file_of("queen.v1.AdminService.GetStats"), "queen/v1/admin.proto");
    /* nested enum and its values (scoped by the enclosing message) */
    ck_assert_str_eq(file_of("grpc.health.v1.HealthCheckResponse.ServingStatus"),
                     "grpc/health/v1/health.proto");
    ck_assert_str_eq(file_of("grpc.health.v1.HealthCheckResponse.SERVICE_UNKNOWN"),
                     "grpc/health/v1/health.proto");
    /* fields and oneofs */
    ck_assert_str_eq(file_of("grpc.health.v1.HealthCheckRequest.service"),
                     "grpc/health/v1/health.proto");
    ck_assert_str_eq(file_of("grpc.reflection.v1.ServerReflectionRequest.message_request"),
                     "grpc/reflection/v1/reflection.proto");
    ck_assert_str_eq(file_of("grpc.reflection.v1alpha.ServerReflection"),
                     "grpc/reflection/v1alpha/reflection.proto");
    ck_assert(qn_refl_index_is_message(ix, "queen.v1.PushRequest"));
    ck_assert(!qn_refl_index_is_message(ix, "queen.v1.QueueService"));
    ck_assert_ptr_null(file_of("queen.v1.Nope"));
    ck_assert_ptr_null(file_of("queen.v1.QueueService.Nope"));
    ck_assert_ptr_null(file_of(""));
    ck_assert_ptr_null(file_of("queen"));
}
END_TEST

START_TEST(closure)
{
    int f = qn_refl_index_find_file(ix, "queen/v1/admin.proto");
    ck_assert_int_ge(f, 0);
    size_t out[16];
    size_t n = qn_refl_index_closure(ix, (size_t)f, out, 16);
    /* admin imports common and queue; queue imports common: three files, once each. */
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(out[0], (size_t)f);
    bool common = false, queue = false;
    for (size_t i = 1; i < n; i++) {
        const char *name = qn_refl_index_file_name(ix, out[i]);
        common |= strcmp(name, "queen/v1/common.proto") == 0;
        queue |= strcmp(name, "queen/v1/queue.proto") == 0;
    }
    ck_assert(common && queue);
    ck_assert_uint_eq(qn_refl_index_closure(ix, (size_t)f, out, 1), 1);
    size_t len = 0;
    const uint8_t *data = qn_refl_index_file_data(ix, (size_t)f, &len);
    ck_assert_ptr_nonnull(data);
    ck_assert_uint_gt(len, 100);
}
END_TEST

/* Appends field `field` (length-delimited) holding payload to *buf. */
static void put_len(uint8_t **buf, size_t *n, uint32_t field, const uint8_t *payload, size_t plen)
{
    uint8_t *b = realloc(*buf, *n + plen + 16);
    ck_assert_ptr_nonnull(b);
    *buf = b;
    b[(*n)++] = (uint8_t)(field << 3 | 2);
    size_t v = plen;
    do {
        b[(*n)++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    memmove(b + *n, payload, plen);
    *n += plen;
}

/* FileDescriptorSet{file{name:"x" package:"p" message_type{name:"m" nested_type{...}}}}
 * with `depth` nested messages. */
static size_t deep_set(int depth, uint8_t **out)
{
    uint8_t *msg = NULL;
    size_t mn = 0;
    put_len(&msg, &mn, 1, (const uint8_t *)"m", 1);
    for (int d = 1; d < depth; d++) {
        uint8_t *outer = NULL;
        size_t on = 0;
        put_len(&outer, &on, 1, (const uint8_t *)"m", 1);
        put_len(&outer, &on, 3, msg, mn);
        free(msg);
        msg = outer;
        mn = on;
    }
    uint8_t *file = NULL;
    size_t fn = 0;
    put_len(&file, &fn, 1, (const uint8_t *)"x", 1);
    put_len(&file, &fn, 2, (const uint8_t *)"p", 1);
    put_len(&file, &fn, 4, msg, mn);
    free(msg);
    uint8_t *set = NULL;
    size_t sn = 0;
    put_len(&set, &sn, 1, file, fn);
    free(file);
    *out = set;
    return sn;
}

START_TEST(malformed_sets)
{
    struct qn_refl_index *bad = NULL;
    const uint8_t *set = qn_descriptor_set[0].data;
    size_t len = qn_descriptor_set[0].len;
    /* Every truncation either parses (cut between files) or is refused; none crash. */
    size_t ok = 0;
    for (size_t cut = 0; cut < len; cut += 7) {
        int rc = qn_refl_index_build(set, cut, &bad);
        ck_assert(rc == QN_OK || rc == QN_EINVAL);
        if (rc == QN_OK) {
            ok++;
            qn_refl_index_free(bad);
        }
    }
    ck_assert_uint_ge(ok, 1); /* at least the empty set */
    static const uint8_t garbage[][6] = {
        {0x0a, 0x7f, 0x00, 0x00, 0x00, 0x00}, /* length past the end */
        {0x0b, 0x00, 0x00, 0x00, 0x00, 0x00}, /* group wire type */
        {0x0a, 0x04, 0x22, 0x02, 0x0a, 0x00}, /* message with no name */
        {0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, /* endless varint */
    };
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++)
        ck_assert_int_eq(qn_refl_index_build(garbage[i], 6, &bad), QN_EINVAL);
    /* Deep nesting is refused past the bound, accepted below it. */
    for (int depth = 10; depth <= 100; depth += 90) {
        uint8_t *set_bytes = NULL;
        size_t set_len = deep_set(depth, &set_bytes);
        int rc = qn_refl_index_build(set_bytes, set_len, &bad);
        ck_assert_int_eq(rc, depth < 32 ? QN_OK : QN_EINVAL);
        if (rc == QN_OK) {
            ck_assert_str_eq(qn_refl_index_file_name(bad, 0), "x");
            ck_assert_int_eq(qn_refl_index_find_symbol(bad, "p.m.m.m"), 0);
            qn_refl_index_free(bad);
        }
        free(set_bytes);
    }
}
END_TEST

Suite *qn_test_reflection_suite(void)
{
    Suite *s = suite_create("reflection");
    TCase *t = tcase_create("index");
    /* malformed_sets parses every 7th truncation of the whole descriptor set:
     * quadratic in its size, which grows with the contract (seconds under ASan) */
    tcase_set_timeout(t, 60);
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, files_and_services);
    tcase_add_test(t, symbols_of_every_kind);
    tcase_add_test(t, closure);
    tcase_add_test(t, malformed_sets);
    suite_add_tcase(s, t);
    return s;
}
