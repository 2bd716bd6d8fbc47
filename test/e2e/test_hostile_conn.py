"""Hostile connections against the transport (issue 8, items 4 and 6), on
queen-test-broker (no database): slowloris on the HTTP/2 preface and the TLS
handshake, connections kept alive by bytes or PINGs alone, PING floods, the
per-peer connection cap, the output limits (a client that does not read is
refused new calls, then closed: at once past the hard limit, after a time past
the soft one) and the broker-wide inbound cap.

Each test runs a broker of its own with the limits it needs. Timing bounds are
stated against the configured deadline (never before it, and within it plus a
margin for a loaded machine); every wait is for the event itself.
"""

import select
import socket
import ssl
import time
import unittest

import grpc

from harness import Broker, certs, grpc_frame, grpc_message, grpc_status, rss_env, stubs

stubs()
import testsvc_pb2 as T  # noqa: E402
import testsvc_pb2_grpc as TG  # noqa: E402

SVC = "/queen.test.v1.TestService/"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
MARGIN = 3.0  # seconds a loaded machine may add to a timer


def ping_frame(i):
    return b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + i.to_bytes(8, "big")


def echo_ok(b, payload=b"hi"):
    with b.channel() as ch:
        return TG.TestServiceStub(ch).Echo(T.EchoRequest(payload=payload), timeout=10).payload == payload


def stats(b):
    with b.channel() as ch:
        return TG.TestServiceStub(ch).Stats(T.StatsRequest(), timeout=5)


def closed_by_peer(sock, timeout):
    """Waits up to timeout for the peer to close sock (EOF or reset); returns the
    time it took, or None. Whatever the peer sends before is read and dropped."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r, _, _ = select.select([sock], [], [], 0.1)
        if not r:
            continue
        try:
            if not sock.recv(65536):
                return time.monotonic() - t0
        except (ConnectionResetError, ssl.SSLError, OSError):
            return time.monotonic() - t0
    return None


class Slowloris(unittest.TestCase):
    def test_preface_trickled_byte_by_byte_loses_its_slot(self):
        # 16 slots, 16 clients each sending one byte of the preface every 0.5 s
        # (they would need 12 s to finish it): each is closed at the preface
        # deadline, and then a real client gets a slot.
        deadline = 2.0
        env = {"QUEEN_MAX_CONNECTIONS": "16", "QUEEN_PREFACE_TIMEOUT_MS": str(int(deadline * 1000)),
               "QUEEN_MAX_CONNECTIONS_PER_PEER": "0"}
        with Broker("test", env=env) as b:
            socks, opened, closed = [], [], {}
            for _ in range(16):
                socks.append(socket.create_connection(("127.0.0.1", b.port), timeout=5))
                opened.append(time.monotonic())
            # the slots are taken: one more connection is refused at once
            extra = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            self.assertIsNotNone(closed_by_peer(extra, 5))
            extra.close()
            sent = 0
            end = time.monotonic() + deadline + MARGIN + 5
            while len(closed) < len(socks) and time.monotonic() < end:
                for i, s in enumerate(socks):
                    if i in closed:
                        continue
                    try:
                        s.send(PREFACE[sent:sent + 1])
                    except OSError:
                        closed[i] = time.monotonic()
                        continue
                    r, _, _ = select.select([s], [], [], 0)
                    if r:
                        try:
                            data = s.recv(4096)
                        except OSError:
                            data = b""
                        if not data:
                            closed[i] = time.monotonic()
                sent += 1
                self.assertLess(sent, len(PREFACE), "a trickler finished the preface")
                time.sleep(0.5)  # the attacker's pace, not a wait for the broker
            self.assertEqual(len(closed), 16, "slowloris connections kept their slots")
            for i, t in closed.items():
                held = t - opened[i]
                self.assertGreaterEqual(held, deadline - 0.1)  # not before the deadline
                self.assertLess(held, deadline + MARGIN)
            for s in socks:
                s.close()
            self.assertTrue(echo_ok(b), "a real client found no slot")
            self.assertIn("QUEEN_PREFACE_TIMEOUT_MS", b.log_text())

    def test_tls_handshake_deadline(self):
        env = {"QUEEN_TLS_HANDSHAKE_TIMEOUT_MS": "1000", "QUEEN_PREFACE_TIMEOUT_MS": "1000"}
        with Broker("test", tls=True, env=env) as b:
            # nothing sent at all: closed at the handshake deadline
            s = socket.create_connection(("127.0.0.1", b.tls_port), timeout=5)
            took = closed_by_peer(s, 1.0 + MARGIN + 2)
            s.close()
            self.assertIsNotNone(took, "a silent TLS connection was never closed")
            self.assertGreaterEqual(took, 0.9)
            # handshake done, no HTTP/2 preface: the preface deadline follows
            c = certs()
            ctx = ssl.create_default_context(cafile=c.ca)
            ctx.load_cert_chain(c.client, c.client_key)
            ctx.set_alpn_protocols(["h2"])
            t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", b.tls_port), timeout=5),
                                server_hostname="localhost")
            took = closed_by_peer(t, 1.0 + MARGIN + 2)
            t.close()
            self.assertIsNotNone(took, "a TLS connection without a preface was never closed")
            self.assertGreaterEqual(took, 0.9)
            # a real client over TLS is served
            h = b.raw_tls()
            res = h.wait(h.request(SVC + "Echo", grpc_frame(T.EchoRequest(payload=b"t").SerializeToString())))
            self.assertEqual(grpc_status(res), 0)
            h.close()
            self.assertIn("QUEEN_TLS_HANDSHAKE_TIMEOUT_MS", b.log_text())


class Idle(unittest.TestCase):
    def test_ping_only_connection_is_idle(self):
        with Broker("test", env={"QUEEN_IDLE_TIMEOUT_MS": "1000"}) as b:
            h = b.raw()
            self.assertTrue(h.wait_for(lambda: h.remote_settings_seen, 5))
            t0 = time.monotonic()
            end = t0 + 1.0 + MARGIN + 2
            while h.goaway is None and not h.closed and time.monotonic() < end:
                h.ping()
                h.pump(0.2)
            took = time.monotonic() - t0
            self.assertIsNotNone(h.goaway, "PINGs kept an idle connection open")
            self.assertTrue(h.wait_closed(5))  # closed as idle: GOAWAY, then the close
            self.assertGreater(h.pings_acked, 0)  # the PINGs were answered meanwhile
            self.assertGreaterEqual(took, 0.9)
            self.assertLess(took, 1.0 + MARGIN)
            h.close()

    def test_an_unfinished_frame_is_not_progress(self):
        # after the preface, a frame trickled a byte at a time: no complete frame,
        # no progress, closed at the idle timeout
        with Broker("test", env={"QUEEN_IDLE_TIMEOUT_MS": "1000"}) as b:
            s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            s.sendall(PREFACE + SETTINGS)
            t0 = time.monotonic()
            frame = b"\x00\x40\x00\x01\x04\x00\x00\x00\x01" + b"\x00" * 0x4000  # HEADERS, 16 KiB
            i, gone = 0, None
            while gone is None and time.monotonic() - t0 < 1.0 + MARGIN + 2:
                try:
                    s.send(frame[i:i + 1])
                except OSError:
                    gone = time.monotonic() - t0
                    break
                i += 1
                r = closed_by_peer(s, 0.3)
                if r is not None:
                    gone = time.monotonic() - t0
            s.close()
            self.assertIsNotNone(gone, "a trickled frame kept the connection open")
            self.assertGreaterEqual(gone, 0.9)
            self.assertTrue(echo_ok(b))

    def test_ping_flood_without_reading_is_bounded(self):
        # PINGs as fast as the socket takes them, never reading the ACKs: the
        # broker stops reading once its output backs up (so ACKs queue at most
        # to its output bound and nghttp2's 1000-ACK flood limit), and closes the
        # connection at the idle timeout since PINGs are not progress.
        with Broker("test", env=rss_env({"QUEEN_IDLE_TIMEOUT_MS": "1000"})) as b:
            def rss():
                with open("/proc/%d/status" % b.proc.pid) as f:
                    return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmRSS"))
            before = rss()
            s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            s.sendall(PREFACE + SETTINGS)
            s.setblocking(False)
            burst = b"".join(ping_frame(i) for i in range(4096))
            sent, t0, gone = 0, time.monotonic(), None
            # idle timeout, then 2 s for the goodbye nobody reads
            while time.monotonic() - t0 < 1.0 + 2.0 + MARGIN:
                try:
                    sent += s.send(burst)
                except BlockingIOError:
                    select.select([], [s], [], 0.05)
                except OSError:
                    gone = time.monotonic() - t0
                    break
            if gone is None:
                s.setblocking(True)
                if closed_by_peer(s, 2) is not None:
                    gone = time.monotonic() - t0
            s.close()
            self.assertIsNotNone(gone, "the flooding connection was never closed")
            self.assertGreater(sent, 1 << 20)  # it did flood (over 60000 PINGs)
            # bound: the socket buffers, 256 KiB of output, 1000 ACKs; 16 MiB is far
            # above that and far below one ACK per PING sent kept in memory (only
            # 17 bytes each, so the count above is the real check)
            self.assertLess(rss() - before, 16 << 20)
            self.assertTrue(echo_ok(b))


class PerPeer(unittest.TestCase):
    def test_per_peer_cap(self):
        with Broker("test", env={"QUEEN_MAX_CONNECTIONS_PER_PEER": "3"}) as b:
            mine = [b.raw() for _ in range(3)]
            for h in mine:
                self.assertTrue(h.wait_for(lambda: h.remote_settings_seen, 5))
            fourth = b.raw()
            self.assertTrue(fourth.wait_closed(5), "the 4th connection of one address was served")
            self.assertFalse(fourth.remote_settings_seen)
            # another address is another peer
            other = b.raw(source="127.0.0.2")
            self.assertTrue(other.wait_for(lambda: other.remote_settings_seen, 5))
            res = other.wait(other.request(SVC + "Echo", grpc_frame(T.EchoRequest(payload=b"o").SerializeToString())))
            self.assertEqual(grpc_status(res), 0)
            # a slot of the first address comes back once one of its connections is gone
            mine[0].close()

            def again():
                h = b.raw()
                ok = h.wait_for(lambda: h.remote_settings_seen, 1)
                h.close()
                return ok
            deadline = time.monotonic() + 5
            while not again():
                self.assertLess(time.monotonic(), deadline, "the freed slot never came back")
            for h in mine[1:] + [fourth, other]:
                h.close()
            self.assertIn("QUEEN_MAX_CONNECTIONS_PER_PEER", b.log_text())


def echo_frame(n):
    return grpc_frame(T.EchoRequest(payload=b"e" * n).SerializeToString())


class Output(unittest.TestCase):
    """A client that asks and never reads (no WINDOW_UPDATE): its replies stay
    queued in the broker."""

    MB = 1000000

    def test_new_calls_refused_over_the_connection_budget_until_it_reads(self):
        env = {"QUEEN_MAX_CONN_SEND_BYTES": str(4 << 20), "QUEEN_CONN_SEND_SOFT_MS": "0"}
        with Broker("test", env=env) as b:
            h = b.raw(auto_window=False)
            sids = []
            for _ in range(5):  # 5 MB of replies queued: over the 4 MiB budget
                sids.append(h.request(SVC + "Echo", echo_frame(self.MB)))
                self.assertTrue(h.wait_for(lambda: h._st(sids[-1])["headers"] is not None, 10))
            res = h.wait(h.request(SVC + "Echo", echo_frame(10)), 10)
            self.assertEqual(grpc_status(res), grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
            self.assertIn("QUEEN_MAX_CONN_SEND_BYTES", grpc_message(res))
            self.assertIn("read them before starting new calls", grpc_message(res))
            # other connections are not affected
            self.assertTrue(echo_ok(b))
            # it reads: every reply completes and new calls go through again
            h.auto_window = True
            for s in sids:
                h.open_window(s, 2 * self.MB)
            for s in sids:
                self.assertEqual(grpc_status(h.wait(s, 20)), 0)
            res = h.wait(h.request(SVC + "Echo", echo_frame(10)), 10)
            self.assertEqual(grpc_status(res), 0)
            h.close()

    def test_hard_limit_closes_at_once(self):
        env = {"QUEEN_MAX_CONN_SEND_BYTES": str(4 << 20), "QUEEN_CONN_SEND_HARD_BYTES": str(6 << 20),
               "QUEEN_CONN_SEND_SOFT_MS": "0"}
        with Broker("test", env=env) as b:
            h = b.raw(auto_window=False)
            # eight calls started before any reply is queued (headers first), then
            # their bodies: 8 MB of replies at once, over the 6 MiB hard limit
            sids = [h.request(SVC + "Echo", b"", end=False) for _ in range(8)]
            for s in sids:
                h.send(s, echo_frame(self.MB), end=True)
            self.assertTrue(h.wait_closed(10), "a connection past the hard limit stayed open")
            h.close()
            self.assertIn("QUEEN_CONN_SEND_HARD_BYTES", b.log_text())
            self.assertTrue(echo_ok(b))

    def test_soft_limit_closes_after_its_time(self):
        soft_ms = 1000
        env = {"QUEEN_MAX_CONN_SEND_BYTES": str(8 << 20), "QUEEN_CONN_SEND_SOFT_BYTES": str(2 << 20),
               "QUEEN_CONN_SEND_SOFT_MS": str(soft_ms)}
        with Broker("test", env=env) as b:
            over = b.raw(auto_window=False)
            under = b.raw(auto_window=False)
            u = under.request(SVC + "Echo", echo_frame(self.MB))  # 1 MB: under the soft limit
            self.assertTrue(under.wait_for(lambda: under._st(u)["headers"] is not None, 10))
            sids = [over.request(SVC + "Echo", echo_frame(self.MB)) for _ in range(3)]  # 3 MB
            self.assertTrue(over.wait_for(lambda: all(over._st(s)["headers"] for s in sids), 10))
            t0 = time.monotonic()
            self.assertTrue(over.wait_closed(soft_ms / 1000 + MARGIN + 2))
            took = time.monotonic() - t0
            self.assertGreaterEqual(took, soft_ms / 1000 - 0.3)
            self.assertIn("QUEEN_CONN_SEND_SOFT_BYTES", b.log_text())
            # the connection under the soft limit is still open and gets its reply
            self.assertFalse(under.closed)
            under.auto_window = True
            under.open_window(u, 2 * self.MB)
            self.assertEqual(grpc_status(under.wait(u, 20)), 0)
            over.close()
            under.close()


class Inbound(unittest.TestCase):
    def test_unfinished_requests_over_all_connections_are_bounded(self):
        # partial messages on two connections: past QUEEN_MAX_RECV_BUFFER_BYTES
        # the next one is refused although its own connection holds little
        k = 1 << 10
        env = {"QUEEN_MAX_RECV_BYTES": str(64 * k), "QUEEN_MAX_CONN_RECV_BYTES": str(1024 * k),
               "QUEEN_MAX_RECV_BUFFER_BYTES": str(150 * k)}
        with Broker("test", env=env) as b:
            part = grpc_frame(b"x" * (64 * k), length=64 * k - 5)[: 60 * k]
            a, c = b.raw(), b.raw()
            try:
                held = [a.request(SVC + "Echo", part, end=False) for _ in range(2)]
                # a PING answered after them: the broker has taken those bytes
                a.ping()
                self.assertTrue(a.wait_for(lambda: a.pings_acked == 1, 5))
                res = c.wait(c.request(SVC + "Echo", part, end=False), 5)
                self.assertEqual(grpc_status(res), grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
                self.assertIn("QUEEN_MAX_RECV_BUFFER_BYTES", grpc_message(res))
                for sid in held:
                    st = a._st(sid)
                    self.assertIsNone(st["trailers"], "stream %d was refused" % sid)
                    self.assertIsNone(st["reset"], "stream %d was reset" % sid)
            finally:
                a.close()
                c.close()


if __name__ == "__main__":
    unittest.main()
