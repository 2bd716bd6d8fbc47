/*
 * fuzz_pb_scan.c - libFuzzer target for the request pre-scan
 * (broker/src/transport/pb_scan.c), with a cross-check against protobuf-c.
 *
 * The first input byte picks one of the queen.v1 request messages; the rest is
 * its wire bytes. Beyond "no crash, no sanitizer report":
 *   - qn_pb_scan returns QN_OK or QN_EBADREQUEST, and on QN_EBADREQUEST a
 *     non-empty message;
 *   - when it accepts, protobuf_c_message_unpack() either fails or yields a
 *     message in which every string's strlen equals its wire length. The wire
 *     length is read from the allocator: protobuf-c allocates wire length + 1
 *     bytes for each string it unpacks, and this target's allocator records the
 *     size of every block it hands out.
 * A violation calls __builtin_trap(), which libFuzzer reports.
 * Built only with clang and -DQN_FUZZ=ON (test/broker/transport/pb_scan.cmake);
 * run by scripts/fuzz.sh (no seed writer: libFuzzer starts from an empty input).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "queen/error.h"
#include "queen/v1/admin.pb-c.h"
#include "queen/v1/queue.pb-c.h"

#include "pb_scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static const ProtobufCMessageDescriptor *const descs[] = {
    &queen__v1__push_request__descriptor,
    &queen__v1__pop_request__descriptor,
    &queen__v1__consume_request__descriptor,
    &queen__v1__ack_request__descriptor,
    &queen__v1__renew_lease_request__descriptor,
    &queen__v1__transact_request__descriptor,
    &queen__v1__fetch_request__descriptor,
    &queen__v1__push_segments_request__descriptor,
    &queen__v1__configure_queue_request__descriptor,
    &queen__v1__get_queue_request__descriptor,
    &queen__v1__list_queues_request__descriptor,
    &queen__v1__delete_queue_request__descriptor,
    &queen__v1__list_consumer_groups_request__descriptor,
    &queen__v1__seek_consumer_group_request__descriptor,
    &queen__v1__delete_consumer_group_request__descriptor,
    &queen__v1__list_dead_letters_request__descriptor,
    &queen__v1__delete_dead_letter_request__descriptor,
    &queen__v1__replay_dead_letter_request__descriptor,
    &queen__v1__get_stats_request__descriptor,
};
#define NDESCS (sizeof descs / sizeof descs[0])

/* ---- a recording allocator ---- */

#define MAX_BLOCKS 65536
static struct block {
    void *p;
    size_t n;
} blocks[MAX_BLOCKS];
static size_t nblocks;
static int overflowed;

static void *rec_alloc(void *ud, size_t n)
{
    (void)ud;
    void *p = malloc(n ? n : 1);
    if (p && nblocks < MAX_BLOCKS)
        blocks[nblocks++] = (struct block){p, n};
    else if (p)
        overflowed = 1;
    return p;
}

static void rec_free(void *ud, void *p)
{
    (void)ud;
    free(p);
}

static ProtobufCAllocator allocator = {rec_alloc, rec_free, NULL};

/* Size of the block that starts at p, or SIZE_MAX when p was not allocated
 * (a default value such as the shared empty string). */
static size_t block_size(const void *p)
{
    for (size_t i = nblocks; i-- > 0;)
        if (blocks[i].p == p)
            return blocks[i].n;
    return SIZE_MAX;
}

static void check_string(const char *s)
{
    if (!s)
        return;
    size_t n = block_size(s);
    if (n != SIZE_MAX)
        CHECK(strlen(s) + 1 == n);
}

static void check_message(const ProtobufCMessage *m, int depth)
{
    CHECK(depth <= QN_PB_SCAN_MAX_DEPTH);
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *member = (const char *)m + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)((const char *)m + f->quantifier_offset);
            if (which != f->id)
                continue;
        }
        size_t count = 1;
        const void *const *items = (const void *const *)member;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            count = *(const size_t *)((const char *)m + f->quantifier_offset);
            items = *(const void *const *const *)member;
        }
        for (size_t k = 0; k < count; k++) {
            if (f->type == PROTOBUF_C_TYPE_STRING)
                check_string(items[k]);
            else if (items[k])
                check_message(items[k], depth + 1);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const ProtobufCMessageDescriptor *d = descs[data[0] % NDESCS];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    char msg[256];
    msg[0] = '\0';
    int rc = qn_pb_scan(p, n, d, msg, sizeof msg);
    CHECK(rc == QN_OK || rc == QN_EBADREQUEST);
    if (rc != QN_OK) {
        CHECK(msg[0] != '\0' && strlen(msg) < sizeof msg);
        return 0;
    }
    nblocks = 0;
    overflowed = 0;
    ProtobufCMessage *m = protobuf_c_message_unpack(d, &allocator, n, p);
    if (m) {
        if (!overflowed)
            check_message(m, 0);
        protobuf_c_message_free_unpacked(m, &allocator);
    }
    return 0;
}
