"""The HTTP side port end to end against queen-test-broker (no database): gRPC-Web
calls of the same method table as the gRPC port (unary, server streaming, their
errors, deadlines, cancellation, backpressure), the console's files, the plain
routes, the HTTP/1.1 limits, JSON logs. Every request is written by hand
(webclient.py) so the bytes on the wire are what is asserted."""

import json
import os
import re
import signal
import socket
import time
import unittest

from harness import Broker, SOURCE, stubs
from webclient import Closed, Http, frame, get, grpc_web, message_of, parse_frames, status_of

stubs()
import testsvc_pb2 as T  # noqa: E402
import testsvc_pb2_grpc as TG  # noqa: E402
from grpc.health.v1 import health_pb2 as H  # noqa: E402

SVC = "/queen.test.v1.TestService/"
STREAM_HIGH = 64 * 1024  # queen_test_broker.c: Stream produces while less is pending
broker = None


def setUpModule():
    global broker
    broker = Broker("test", env={"QUEEN_LOG_FORMAT": "json"}).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def stats(b=None):
    with (b or broker).channel() as ch:
        return TG.TestServiceStub(ch).Stats(T.StatsRequest(), timeout=5)


def wait_until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def echo(payload, **kw):
    return grpc_web(broker.http_port, SVC + "Echo", T.EchoRequest(payload=payload).SerializeToString(), **kw)


class GrpcWebUnary(unittest.TestCase):
    def test_echo(self):
        r = echo(b"hello")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["content-type"], "application/grpc-web+proto")
        self.assertEqual(r.headers["transfer-encoding"], "chunked")
        self.assertEqual(len(r.messages), 1)
        self.assertEqual(T.EchoReply.FromString(r.messages[0]).payload, b"hello")
        self.assertEqual(r.trailers, {"grpc-status": "0"})

    def test_empty_request_message(self):
        r = echo(b"")
        self.assertEqual(status_of(r), 0)
        self.assertEqual(T.EchoReply.FromString(r.messages[0]), T.EchoReply())

    def test_status_and_percent_encoded_message(self):
        text = "bad\nnews: 100% caf\u00e9"
        r = echo(("status:5:" + text).encode())
        self.assertEqual(r.status, 200)
        self.assertEqual(r.messages, [])
        self.assertEqual(status_of(r), 5)
        self.assertEqual(message_of(r), text)
        self.assertNotIn("grpc-status", r.headers)  # only in the trailer frame, as the console expects

    def test_text_mode(self):
        r = echo(b"in text", text=True)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["content-type"], "application/grpc-web-text+proto")
        self.assertRegex(r.raw.decode("ascii"), r"^[A-Za-z0-9+/]+=*$")
        self.assertEqual(T.EchoReply.FromString(r.messages[0]).payload, b"in text")
        self.assertEqual(status_of(r), 0)
        r = echo(b"status:7:denied", text=True)
        self.assertEqual((status_of(r), message_of(r)), (7, "denied"))

    def test_text_mode_accepts_several_padded_runs(self):
        body = frame(T.EchoRequest(payload=b"ab").SerializeToString())
        raw = b"".join(__import__("base64").b64encode(body[i:i + 4]) for i in range(0, len(body), 4))
        r = grpc_web(broker.http_port, SVC + "Echo", raw_body=raw, text=True)
        self.assertEqual(T.EchoReply.FromString(r.messages[0]).payload, b"ab")

    def test_text_mode_bad_base64(self):
        r = grpc_web(broker.http_port, SVC + "Echo", raw_body=b"!!!!", text=True)
        self.assertEqual(status_of(r), 13)

    def test_large_message(self):
        payload = os.urandom(3 << 20)
        r = echo(payload, timeout=30)
        self.assertEqual(T.EchoReply.FromString(r.messages[0]).payload, payload)

    def test_unknown_method(self):
        r = grpc_web(broker.http_port, "/queen.test.v1.TestService/Nope", b"")
        self.assertEqual(r.status, 200)
        self.assertEqual(status_of(r), 12)
        self.assertIn("unknown method", message_of(r))

    def test_client_streaming_refused(self):
        for m in ("Collect", "Bidi"):
            r = grpc_web(broker.http_port, SVC + m, T.EchoRequest(payload=b"x").SerializeToString())
            self.assertEqual(status_of(r), 12, m)
            self.assertIn("client-streaming", message_of(r))
            self.assertIn("HTTP/2", message_of(r))

    def test_undecodable_message(self):
        r = grpc_web(broker.http_port, SVC + "Echo", raw_body=frame(b"\xff\xff\xff"))
        # the call layer's pre-scan (pb_scan) refuses it before the method sees it
        self.assertEqual(status_of(r), 3)
        self.assertTrue(message_of(r).startswith("request is not valid protobuf"), message_of(r))

    def test_two_messages_for_a_unary_method(self):
        body = frame(b"") + frame(b"")
        r = grpc_web(broker.http_port, SVC + "Echo", raw_body=body)
        self.assertEqual(status_of(r), 13)

    def test_truncated_message(self):
        body = frame(b"0123456789")[:8]
        r = grpc_web(broker.http_port, SVC + "Echo", raw_body=body)
        self.assertEqual(status_of(r), 13)
        self.assertIn("truncated", message_of(r))

    def test_no_message(self):
        r = grpc_web(broker.http_port, SVC + "Echo", raw_body=b"")
        self.assertEqual((status_of(r), message_of(r)), (13, "missing request message"))

    def test_malformed_timeout_and_encoding(self):
        r = echo(b"x", headers={"grpc-timeout": "soon"})
        self.assertEqual((status_of(r), message_of(r)), (13, "malformed grpc-timeout"))
        r = echo(b"x", headers={"grpc-encoding": "gzip"})
        self.assertEqual(status_of(r), 12)
        self.assertEqual(r.headers.get("grpc-accept-encoding"), "identity")

    def test_other_codec_and_method(self):
        r = grpc_web(broker.http_port, SVC + "Echo", b"", content_type="application/grpc-web+json")
        self.assertEqual(r.status, 415)
        c = Http(broker.http_port)
        resp = c.request("GET", SVC + "Echo", {"content-type": "application/grpc-web+proto"})
        self.assertEqual(resp.status, 405)
        c.close()

    def test_keep_alive_several_calls_one_connection(self):
        c = Http(broker.http_port)
        for i in range(5):
            r = grpc_web(0, SVC + "Echo", T.EchoRequest(payload=b"%d" % i).SerializeToString(), conn=c)
            self.assertEqual(T.EchoReply.FromString(r.messages[0]).payload, b"%d" % i)
        health = c.request("GET", "/healthz")
        self.assertEqual(health.status, 200)
        c.close()

    def test_pipelined_requests_answer_in_order(self):
        c = Http(broker.http_port)
        body = frame(T.EchoRequest(payload=b"first").SerializeToString())
        reqs = b""
        for p in (b"first", b"second"):
            body = frame(T.EchoRequest(payload=p).SerializeToString())
            reqs += (b"POST " + SVC.encode() + b"Echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/grpc-web+proto\r\n"
                     b"content-length: %d\r\n\r\n" % len(body)) + body
        reqs += b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
        c.send(reqs)
        for p in (b"first", b"second"):
            msgs, trailers = parse_frames(c.response().body)
            self.assertEqual(T.EchoReply.FromString(msgs[0]).payload, p)
            self.assertEqual(trailers["grpc-status"], "0")
        self.assertEqual(c.response().body, b"ok\n")
        c.close()

    def test_http10_body_ends_with_the_connection(self):
        c = Http(broker.http_port)
        body = frame(T.EchoRequest(payload=b"old").SerializeToString())
        r = c.request("POST", SVC + "Echo", {"content-type": "application/grpc-web+proto"}, body, version="HTTP/1.0")
        self.assertEqual(r.status, 200)
        self.assertNotIn("transfer-encoding", r.headers)
        self.assertEqual(r.headers.get("connection"), "close")
        msgs, trailers = parse_frames(r.body)
        self.assertEqual(T.EchoReply.FromString(msgs[0]).payload, b"old")
        self.assertEqual(trailers["grpc-status"], "0")
        self.assertTrue(c.closed)
        c.close()

    def test_expect_continue(self):
        c = Http(broker.http_port)
        body = frame(T.EchoRequest(payload=b"later").SerializeToString())
        c.send(("POST %sEcho HTTP/1.1\r\nhost: x\r\ncontent-type: application/grpc-web+proto\r\n"
                "expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % (SVC, len(body))).encode())
        self.assertEqual(c._line(), b"HTTP/1.1 100 Continue")
        self.assertEqual(c._line(), b"")
        c.send(body)
        msgs, _ = parse_frames(c.response().body)
        self.assertEqual(T.EchoReply.FromString(msgs[0]).payload, b"later")
        c.close()


class GrpcWebCallLayer(unittest.TestCase):
    """What the call layer gives every binding: deadlines, cancellation, shutdown."""

    def test_deadline(self):
        before = stats().cancel_deadline
        t0 = time.monotonic()
        r = grpc_web(broker.http_port, SVC + "Hang", T.EchoRequest().SerializeToString(),
                     headers={"grpc-timeout": "300m"})
        took = time.monotonic() - t0
        self.assertEqual((status_of(r), message_of(r)), (4, "deadline exceeded"))
        self.assertGreaterEqual(took, 0.29)
        self.assertTrue(wait_until(lambda: stats().cancel_deadline == before + 1))

    def test_client_going_away_cancels_the_call(self):
        # an earlier test's call may still be ending: start from none open, or
        # its end would cancel out this call's +1 below
        self.assertTrue(wait_until(lambda: stats().open_test_calls == 0))
        before = stats()
        c = Http(broker.http_port)
        body = frame(T.EchoRequest().SerializeToString())
        c.request("POST", SVC + "Hang", {"content-type": "application/grpc-web+proto"}, body, read=False)
        self.assertTrue(wait_until(lambda: stats().open_test_calls == before.open_test_calls + 1))
        c.close()
        self.assertTrue(wait_until(lambda: stats().cancel_closed == before.cancel_closed + 1))
        self.assertTrue(wait_until(lambda: stats().open_test_calls == before.open_test_calls))

    def test_client_going_away_mid_stream(self):
        before = stats()
        c = Http(broker.http_port)
        body = frame(T.EchoRequest(repeat=0, size=1000).SerializeToString())
        c.request("POST", SVC + "Stream", {"content-type": "application/grpc-web+proto"}, body, read=False)
        self.assertEqual(c.head()[1], 200)
        got = 0
        for chunk in c.chunks():
            got += len(chunk)
            if got > 100000:
                break
        c.close()
        self.assertTrue(wait_until(lambda: stats().cancel_closed == before.cancel_closed + 1))

    def test_server_streaming(self):
        r = grpc_web(broker.http_port, SVC + "Stream", T.EchoRequest(repeat=5, size=10).SerializeToString())
        self.assertEqual(status_of(r), 0)
        replies = [T.EchoReply.FromString(m) for m in r.messages]
        self.assertEqual([x.seq for x in replies], [0, 1, 2, 3, 4])
        self.assertTrue(all(x.payload == b"s" * 10 for x in replies))

    def test_server_streaming_arrives_as_produced(self):
        # health Watch: the first message comes before the stream ends
        c = Http(broker.http_port)
        body = frame(H.HealthCheckRequest().SerializeToString())
        c.request("POST", "/grpc.health.v1.Health/Watch", {"content-type": "application/grpc-web+proto"}, body,
                  read=False)
        self.assertEqual(c.head()[1], 200)
        data = b""
        for chunk in c.chunks():
            data += chunk
            if len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[1:5], "big"):
                break
        msgs, trailers = parse_frames(data)
        self.assertIsNone(trailers)
        self.assertEqual(H.HealthCheckResponse.FromString(msgs[0]).status, H.HealthCheckResponse.SERVING)
        c.close()

    def test_backpressure_production_stops_while_the_client_does_not_read(self):
        c = Http(broker.http_port)
        body = frame(T.EchoRequest(repeat=0, size=16384).SerializeToString())
        c.request("POST", SVC + "Stream", {"content-type": "application/grpc-web+proto"}, body, read=False)
        # the socket buffers fill, then the call's queue: the handler waits on drain
        self.assertTrue(wait_until(lambda: stats().max_pending >= STREAM_HIGH))
        time.sleep(0.3)  # let whatever was in motion settle before sampling
        d1 = stats().drains
        time.sleep(1.0)
        d2 = stats().drains
        self.assertEqual(d1, d2, "the broker kept producing for a client that does not read")
        self.assertLess(stats().max_pending, STREAM_HIGH + 16384 + 64)
        # reading resumes production (after what the socket buffers held)
        self.assertEqual(c.head()[1], 200)
        got, resumed = 0, False
        deadline = time.monotonic() + 60
        for chunk in c.chunks():
            got += len(chunk)
            if got % (1 << 20) < len(chunk):
                resumed = stats().drains > d2
            if resumed or got > 256 << 20 or time.monotonic() > deadline:
                break
        self.assertTrue(resumed, "production did not resume after %d bytes were read" % got)
        c.close()


class Routes(unittest.TestCase):
    def test_healthz_readyz(self):
        c = Http(broker.http_port)
        r = c.request("GET", "/healthz")
        self.assertEqual((r.status, r.body), (200, b"ok\n"))
        self.assertEqual(r.headers["cache-control"], "no-store")
        r = c.request("GET", "/readyz")
        self.assertEqual((r.status, r.body), (200, b"ready\n"))
        r = c.request("HEAD", "/readyz")
        self.assertEqual((r.status, r.body, r.headers["content-length"]), (200, b"", "6"))
        c.close()

    def test_unknown_path_and_methods(self):
        c = Http(broker.http_port)
        self.assertEqual(c.request("GET", "/nope").status, 404)
        self.assertEqual(c.request("GET", "/queues").status, 404)  # no SPA fallback: the console routes in #
        r = c.request("DELETE", "/metrics")
        self.assertEqual(r.status, 405)
        self.assertIn("GET", r.headers["allow"])
        c.close()

    def test_metrics_count_side_port_and_grpc_web(self):
        echo(b"status:9:nope")
        get(broker.http_port, "/nope")  # the console's prefix answers unknown paths
        bad = Http(broker.http_port)
        bad.send(b"GET / HTTP/9.9\r\n\r\n")
        self.assertEqual(bad.response().status, 505)
        text = get(broker.http_port, "/metrics").body.decode()
        self.assertRegex(text, r'queen_rpc_requests_total\{service="queen\.test\.v1\.TestService",'
                               r'method="Echo",code="FAILED_PRECONDITION"\} [1-9]')
        self.assertRegex(text, r'queen_http_requests_total\{handler="console",code="404"\} [1-9]')
        self.assertRegex(text, r'queen_http_requests_total\{handler="none",code="505"\} [1-9]')
        self.assertRegex(text, r'queen_http_requests_total\{handler="grpc_web",code="200"\} [1-9]')
        self.assertRegex(text, r'queen_connections_open\{listener="http"\} [1-9]')


class Console(unittest.TestCase):
    DIST = os.path.join(SOURCE, "console", "dist")

    def test_index_and_assets(self):
        c = Http(broker.http_port)
        r = c.request("GET", "/")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["content-type"], "text/html; charset=utf-8")
        self.assertEqual(r.headers["cache-control"], "no-cache")
        with open(os.path.join(self.DIST, "index.html"), "rb") as f:
            self.assertEqual(r.body, f.read())
        self.assertEqual(c.request("GET", "/index.html").body, r.body)
        assets = re.findall(r'(?:src|href)="\.?(/assets/[^"]+)"', r.body.decode())
        self.assertTrue(any(a.endswith(".js") for a in assets), assets)
        self.assertTrue(any(a.endswith(".css") for a in assets), assets)
        for a in assets:
            ar = c.request("GET", a)
            self.assertEqual(ar.status, 200, a)
            want = "text/javascript; charset=utf-8" if a.endswith(".js") else "text/css; charset=utf-8"
            self.assertEqual(ar.headers["content-type"], want)
            self.assertEqual(ar.headers["cache-control"], "public, max-age=31536000, immutable")
            self.assertEqual(ar.headers["x-content-type-options"], "nosniff")
            with open(os.path.join(self.DIST, a.lstrip("/")), "rb") as f:
                self.assertEqual(ar.body, f.read(), a)
            # revalidation: the same tag answers 304 without a body
            nm = c.request("GET", a, {"if-none-match": ar.headers["etag"]})
            self.assertEqual((nm.status, nm.body), (304, b""))
            self.assertNotIn("content-length", nm.headers)
            hd = c.request("HEAD", a)
            self.assertEqual((hd.status, hd.body, int(hd.headers["content-length"])), (200, b"", len(ar.body)))
        self.assertEqual(c.request("GET", "/assets/nope.js").status, 404)
        self.assertEqual(c.request("GET", "/assets/../index.html").status, 404)
        self.assertEqual(c.request("GET", "/", {"if-none-match": '"other"'}).status, 200)
        c.close()

    def test_console_can_be_turned_off(self):
        with Broker("test", env={"QUEEN_HTTP_CONSOLE": "false"}) as b:
            c = Http(b.http_port)
            self.assertEqual(c.request("GET", "/").status, 404)
            self.assertEqual(c.request("GET", "/metrics").status, 200)
            c.close()


class Limits(unittest.TestCase):
    def test_malformed_requests(self):
        cases = [
            (b"GET / HTTP/1.1\nhost: x\n\n", 400),                                  # bare LF
            (b"GET / HTTP/2.0\r\n\r\n", 505),
            (b"GET / HTTP/1.1\r\nhost : x\r\n\r\n", 400),                           # space before colon
            (b"GET / HTTP/1.1\r\nhost: x\r\n folded\r\n\r\n", 400),                  # obs-fold
            (b"POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", 411),
            (b"POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\nabc", 400),
            (b"POST /x HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd", 400),
            (b"POST /x HTTP/1.1\r\ncontent-length: -1\r\n\r\n", 400),
            (b"GET x HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nbad\x01: x\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nx: a\x00b\r\n\r\n", 400),
        ]
        for raw, want in cases:
            c = Http(broker.http_port)
            c.send(raw)
            r = c.response()
            self.assertEqual(r.status, want, raw)
            self.assertEqual(r.headers.get("connection"), "close", raw)
            self.assertTrue(c.wait_closed(5), raw)
            c.close()

    def test_head_too_large(self):
        c = Http(broker.http_port)
        c.send(b"GET / HTTP/1.1\r\nx-big: " + b"a" * 20000 + b"\r\n\r\n")
        self.assertEqual(c.response().status, 431)
        self.assertTrue(c.wait_closed(5))
        c.close()
        c = Http(broker.http_port)
        c.send(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")
        self.assertEqual(c.response().status, 414)
        c.close()

    def test_body_too_large(self):
        with Broker("test", env={"QUEEN_MAX_RECV_BYTES": "1024"}) as b:
            big = T.EchoRequest(payload=b"x" * 2000).SerializeToString()
            r = grpc_web(b.http_port, SVC + "Echo", big)
            self.assertEqual(r.status, 413)
            # a prefix declaring more than the limit inside a small body: the call layer's status
            r = grpc_web(b.http_port, SVC + "Echo", raw_body=bytes([0]) + (5000).to_bytes(4, "big") + b"abc")
            self.assertEqual(status_of(r), 8)
            ok = grpc_web(b.http_port, SVC + "Echo", T.EchoRequest(payload=b"x" * 900).SerializeToString())
            self.assertEqual(status_of(ok), 0)

    def test_request_timeout_and_idle_timeout(self):
        env = {"QUEEN_HTTP_REQUEST_TIMEOUT_MS": "500", "QUEEN_HTTP_IDLE_TIMEOUT_MS": "1500"}
        with Broker("test", env=env) as b:
            c = Http(b.http_port)
            c.send(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # never finished
            t0 = time.monotonic()
            r = c.response()
            self.assertEqual(r.status, 408)
            self.assertLess(time.monotonic() - t0, 5)
            self.assertTrue(c.wait_closed(5))
            c.close()
            # a body that stops half way: 408 too, and the call never ran
            c = Http(b.http_port)
            c.send(b"POST " + SVC.encode() + b"Echo HTTP/1.1\r\ncontent-type: application/grpc-web+proto\r\n"
                   b"content-length: 100\r\n\r\n\x00\x00")
            self.assertEqual(c.response().status, 408)
            c.close()
            # idle: a finished request, then silence
            c = Http(b.http_port)
            self.assertEqual(c.request("GET", "/healthz").status, 200)
            t0 = time.monotonic()
            self.assertTrue(c.wait_closed(10))
            self.assertGreater(time.monotonic() - t0, 1.0)
            c.close()

    def test_connection_cap(self):
        with Broker("test", env={"QUEEN_HTTP_MAX_CONNECTIONS": "3"}) as b:
            held = [Http(b.http_port) for _ in range(3)]
            for c in held:
                self.assertEqual(c.request("GET", "/healthz").status, 200)
            extra = Http(b.http_port)
            self.assertTrue(extra.wait_closed(5), "a fourth connection was served")
            extra.close()
            held.pop().close()
            self.assertTrue(wait_until(lambda: try_health(b.http_port)))
            for c in held:
                c.close()

    def test_first_request_deadline(self):
        # the net's opening deadline (QUEEN_PREFACE_TIMEOUT_MS) is, on the side
        # port, the time to the first complete request head
        env = {"QUEEN_PREFACE_TIMEOUT_MS": "600", "QUEEN_HTTP_IDLE_TIMEOUT_MS": "20000",
               "QUEEN_HTTP_REQUEST_TIMEOUT_MS": "20000"}
        with Broker("test", env=env) as b:
            silent = Http(b.http_port)
            ok = Http(b.http_port)
            self.assertEqual(ok.request("GET", "/healthz").status, 200)
            t0 = time.monotonic()
            self.assertTrue(silent.wait_closed(10), "a connection without a request kept its slot")
            self.assertGreater(time.monotonic() - t0, 0.3)
            time.sleep(0.5)  # past the deadline: a greeted connection is not affected
            self.assertEqual(ok.request("GET", "/healthz").status, 200)
            silent.close()
            ok.close()

    def test_idle_counts_requests_not_bytes(self):
        # a head trickled a byte at a time is not progress: the idle time, not
        # the (longer) request timeout, ends the connection, without an answer
        env = {"QUEEN_HTTP_IDLE_TIMEOUT_MS": "1000", "QUEEN_HTTP_REQUEST_TIMEOUT_MS": "30000"}
        with Broker("test", env=env) as b:
            c = Http(b.http_port)
            self.assertEqual(c.request("GET", "/healthz").status, 200)
            t0 = time.monotonic()
            head = b"GET /healthz HTTP/1.1\r\nx-slow: " + b"a" * 200
            closed = False
            for i in range(len(head)):
                try:
                    c.send(head[i:i + 1])
                except OSError:
                    closed = True
                    break
                time.sleep(0.05)
                if time.monotonic() - t0 > 8:
                    break
            self.assertTrue(closed or c.wait_closed(5), "a trickled head kept the connection")
            self.assertLess(time.monotonic() - t0, 8)
            self.assertNotIn(b"408", c.buf)
            c.close()

    def test_per_peer_cap(self):
        env = {"QUEEN_MAX_CONNECTIONS_PER_PEER": "2", "QUEEN_HTTP_MAX_CONNECTIONS": "64"}
        with Broker("test", env=env) as b:
            mine = [Http(b.http_port) for _ in range(2)]
            for c in mine:
                self.assertEqual(c.request("GET", "/healthz").status, 200)
            third = Http(b.http_port)
            self.assertTrue(third.wait_closed(5), "a third connection from one address was served")
            other = Http(b.http_port, source="127.0.0.2")  # another address is another peer
            self.assertEqual(other.request("GET", "/healthz").status, 200)
            mine.pop().close()
            self.assertTrue(wait_until(lambda: try_health(b.http_port)))
            for c in mine + [third, other]:
                c.close()
            self.assertIn("QUEEN_MAX_CONNECTIONS_PER_PEER", b.log_text())

    def test_output_soft_limit_counts_the_calls_queue(self):
        # an 8 MB reply to a client that does not read: the kernel's buffers take
        # a few MB, the rest waits in the call layer, which the output limits
        # count with the net's buffer (without it the backlog would stay under
        # the net's 256 KiB watermark and never reach the soft limit)
        soft_ms = 800
        env = {"QUEEN_CONN_SEND_SOFT_BYTES": str(2 << 20), "QUEEN_CONN_SEND_SOFT_MS": str(soft_ms),
               "QUEEN_MAX_RECV_BYTES": str(16 << 20), "QUEEN_MAX_SEND_BYTES": str(16 << 20)}
        with Broker("test", env=env) as b:
            c = Http(b.http_port, rcvbuf=16384)
            port = c.sock.getsockname()[1]
            body = frame(T.EchoRequest(payload=b"x" * 8000000).SerializeToString())
            t0 = time.monotonic()
            c.request("POST", SVC + "Echo", {"content-type": "application/grpc-web+proto"}, body, read=False)
            line = "peer=127.0.0.1:%d" % port
            self.assertTrue(wait_until(lambda: any("QUEEN_CONN_SEND_SOFT_BYTES" in l and line in l
                                                   for l in b.log_text().splitlines()), 10),
                            "a stalled gRPC-Web reply never hit the soft limit")
            self.assertGreaterEqual(time.monotonic() - t0, soft_ms / 1000 - 0.3)
            self.assertTrue(c.wait_closed(10))
            c.close()
            self.assertTrue(try_health(b.http_port))

    def test_pipelining_past_the_bound_disconnects(self):
        c = Http(broker.http_port)
        body = frame(T.EchoRequest().SerializeToString())
        c.request("POST", SVC + "Hang", {"content-type": "application/grpc-web+proto"}, body, read=False)
        time.sleep(0.2)
        try:
            c.send(b"GET /healthz HTTP/1.1\r\nx: " + b"a" * 40000 + b"\r\n\r\n")
        except OSError:
            pass
        self.assertTrue(c.wait_closed(5))
        c.close()


def try_health(port):
    try:
        c = Http(port, timeout=2)
        ok = c.request("GET", "/healthz").status == 200
        c.close()
        return ok
    except (OSError, Closed):
        return False


class Process(unittest.TestCase):
    def test_port_file_and_off(self):
        self.assertGreater(broker.http_port, 0)
        with Broker("test", env={"QUEEN_HTTP_PORT": "-1"}) as b:
            self.assertEqual(b.http_port, -1)

    def test_json_log_lines(self):
        lines = broker.log_text().splitlines()
        self.assertTrue(lines)
        listening = None
        for line in lines:
            rec = json.loads(line)  # every line is one JSON object
            self.assertRegex(rec["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(rec["level"], ("debug", "info", "warn", "error"))
            self.assertIsInstance(rec["message"], str)
            if rec["message"] == "listening":
                listening = rec
        self.assertIsNotNone(listening)
        self.assertEqual(listening["h2c_port"], broker.port)
        self.assertEqual(listening["http_port"], broker.http_port)

    def test_shutdown_ends_a_grpc_web_call_and_readyz(self):
        b = Broker("test", env={"QUEEN_SHUTDOWN_TIMEOUT_MS": "1500"}).start()
        try:
            c = Http(b.http_port)
            body = frame(T.EchoRequest().SerializeToString())
            c.request("POST", SVC + "Hang", {"content-type": "application/grpc-web+proto"}, body, read=False)
            probe = Http(b.http_port)
            self.assertEqual(probe.request("GET", "/readyz").status, 200)
            time.sleep(0.2)
            b.proc.send_signal(signal.SIGTERM)
            self.assertTrue(wait_until(lambda: probe_status(b.http_port, "/readyz") in (503, None), 5))
            r = c.response()
            msgs, trailers = parse_frames(r.body)
            self.assertEqual(trailers["grpc-status"], "14")
            self.assertEqual(b.proc.wait(10), 0)
            c.close()
            probe.close()
        finally:
            b.kill()


def probe_status(port, path):
    try:
        c = Http(port, timeout=2)
        s = c.request("GET", path).status
        c.close()
        return s
    except (OSError, Closed):
        return None


if __name__ == "__main__":
    unittest.main()
