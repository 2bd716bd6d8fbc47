/*
 * tcpproxy.h - private to test/: a TCP proxy that sits in front of PostgreSQL (or
 * anything) and, on command, forwards, silences or cuts one connection, and
 * reports what it forwarded. Tests use it to make a database connection hang
 * without an RST, or drop it at a chosen moment, and to wait on what really
 * crossed it instead of sleeping.
 *
 * It runs on its own thread (in the test's process), or as the program
 * qn_tcp_proxy driven through stdin for the Python end-to-end suites (see
 * tcpproxy.c for its line protocol).
 *
 * Directions: QT_UP is client -> server, QT_DOWN is server -> client. A silenced
 * direction keeps reading (so the sender sees its bytes acknowledged by TCP and
 * no RST ever comes) but holds the bytes instead of passing them on, up to
 * QT_PROXY_HOLD_MAX per direction; past that it stops reading. forward passes
 * what was held and resumes. cut closes both sides (the client and the server
 * each see an orderly close).
 */
#ifndef QN_TEST_TCPPROXY_H
#define QN_TEST_TCPPROXY_H

#include <stdbool.h>
#include <stdint.h>

#define QT_UP 1
#define QT_DOWN 2
#define QT_BOTH 3

#define QT_PROXY_MAX_CONNS 64
#define QT_PROXY_HOLD_MAX (4u << 20)

struct qt_proxy;

/* Listens on 127.0.0.1 (any free port) and forwards each accepted connection to
 * host:port. 0 or -1 (errno set). */
int qt_proxy_start(const char *host, int port, struct qt_proxy **out);
/* Closes every connection, stops the thread, frees. NULL is allowed. */
void qt_proxy_stop(struct qt_proxy *p);
/* The port it listens on. */
int qt_proxy_port(const struct qt_proxy *p);
/* Connections accepted so far (ids 0 .. n-1, in accept order). */
int qt_proxy_nconns(struct qt_proxy *p);
/* The id of the connection whose client uses local port client_port, or -1. */
int qt_proxy_find(struct qt_proxy *p, int client_port);

/* Commands: 0, or -1 for an unknown connection. */
int qt_proxy_silence(struct qt_proxy *p, int conn, int dirs);
int qt_proxy_forward(struct qt_proxy *p, int conn);
int qt_proxy_cut(struct qt_proxy *p, int conn);

struct qt_proxy_counts {
    uint64_t forwarded[2]; /* [0] up, [1] down: bytes passed on */
    uint64_t held[2];      /* bytes read while silenced and not passed on */
    bool open;             /* neither side closed it yet */
};
int qt_proxy_counts(struct qt_proxy *p, int conn, struct qt_proxy_counts *out);

/* Waits up to timeout_ms until conn has held at least min_bytes in direction
 * dir (QT_UP or QT_DOWN); true when it did. */
bool qt_proxy_wait_held(struct qt_proxy *p, int conn, int dir, uint64_t min_bytes, int timeout_ms);

#endif
