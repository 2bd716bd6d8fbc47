/*
 * transport/h2.h - private to transport/: HTTP/2 (one nghttp2 server session per
 * connection) and the binding of gRPC calls to its streams.
 *
 * The net layer drives each session through the handler qn__h2_handler()
 * fills; each request stream becomes a call of the call layer
 * (call_binding.h), which answers through h2.c's struct qn_call_ops.
 */
#ifndef QN_BROKER_H2_H
#define QN_BROKER_H2_H

#include <stdint.h>

#include "transport/net.h"

struct qn_calls;

/* Per-stream initial window we advertise, and the connection window. Request
 * bytes are granted back (nghttp2_session_consume) only after the call layer
 * handled them (call.c's flow control). */
#define QN_H2_STREAM_WINDOW (1 << 20)
#define QN_H2_CONN_WINDOW (8 << 20)

/* The HTTP/2 side of a server: what every session shares. */
struct qn_h2;

/* Sessions advertise max_streams concurrent streams and make their calls in
 * calls (borrowed until qn__h2_free). Returns QN_OK or QN_ENOMEM. */
int qn__h2_new(struct qn_calls *calls, uint32_t max_streams, struct qn_h2 **out);
/* After every session was closed (qn__net_free). NULL allowed. */
void qn__h2_free(struct qn_h2 *h);

/* Fills the protocol half of a net handler (proto and every callback up to
 * close); the owner half is left as it is. */
void qn__h2_handler(struct qn_h2 *h, struct qn_net_handler *out);

#endif
