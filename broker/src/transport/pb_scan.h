/*
 * pb_scan.h - the request pre-scan: every string field of a protobuf request,
 * checked on the wire before protobuf-c unpacks it.
 *
 * protobuf-c hands string fields over as NUL-terminated C strings, so a wire
 * string "a\0evil" reaches a handler as "a" (issue 8, item 3), and it does not
 * check that strings are UTF-8 (proto3 requires it; test_pb_scan.c shows that
 * protobuf-c 1.4 accepts invalid UTF-8). qn_pb_scan() walks the raw request
 * bytes, driven by the message descriptors (nested messages, repeated and
 * packed fields, oneofs and unknown fields included), and reports the first
 * string field that holds a NUL byte or invalid UTF-8, naming it the way a
 * client wrote it: items[3].transaction_id.
 *
 * Pure function: no allocation, no global state, safe from any thread.
 */
#ifndef QN_PB_SCAN_H
#define QN_PB_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* Deepest message nesting walked; deeper is refused (queen.v1 needs 4). */
#define QN_PB_SCAN_MAX_DEPTH 32

/*
 * Scans buf[0..len) as a serialized message of type desc. Borrows everything.
 * Returns:
 *   QN_OK          every string field, at every depth, is NUL-free UTF-8 and the
 *                  wire structure is sound (tags, varints and lengths all within
 *                  the buffer);
 *   QN_EBADREQUEST the first problem, described in msg[0..cap) (NUL-terminated,
 *                  truncated to fit), e.g.
 *                    "items[3].transaction_id contains a NUL byte at byte 1"
 *                    "queue is not valid UTF-8 at byte 4"
 *                    "request is not valid protobuf: truncated length at byte 17"
 *                    "request is not valid protobuf: nests messages deeper than 32"
 *                  The message never quotes the field's contents. Byte numbers
 *                  in string errors count from the start of the string; in
 *                  protobuf errors from the start of buf.
 *   QN_EINVAL      desc is NULL, or buf is NULL with len > 0.
 * msg may be NULL when cap is 0. What is not checked here is left to
 * protobuf_c_message_unpack(): a field whose wire type does not match its
 * declared type is skipped by its wire type, enum ranges are not checked, and
 * required fields (none in proto3) are not enforced.
 */
int qn_pb_scan(const uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *desc, char *msg,
               size_t cap);

#endif
