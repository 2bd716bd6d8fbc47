"""The TLS listener end to end: grpcio with and without client certificates, ALPN
and protocol versions refused, h2c beside TLS. Runs queen-test-broker with a
test CA made at test time (openssl CLI)."""

import socket
import ssl
import time
import unittest
import warnings

import grpc

from harness import Broker, certs, grpc_frame, grpc_status, stubs

stubs()
import testsvc_pb2 as T  # noqa: E402
import testsvc_pb2_grpc as TG  # noqa: E402
from grpc.health.v1 import health_pb2 as H  # noqa: E402
from grpc.health.v1 import health_pb2_grpc as HG  # noqa: E402

SVC = "/queen.test.v1.TestService/"


def echo(ch, payload=b"tls", timeout=5):
    return TG.TestServiceStub(ch).Echo(T.EchoRequest(payload=payload), timeout=timeout)


def handshake(port, alpn=None, max_version=None, client=True):
    """A bare TLS handshake; returns the negotiated ALPN protocol, or raises."""
    c = certs()
    ctx = ssl.create_default_context(cafile=c.ca)
    if client:
        ctx.load_cert_chain(c.client, c.client_key)
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    if max_version is not None:
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = max_version
        ctx.set_ciphers("ALL:@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            proto = t.selected_alpn_protocol()
            # The server closes a connection it refused after the handshake.
            t.settimeout(3)
            try:
                t.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                data = t.recv(100)
            except (OSError, ssl.SSLError):
                data = b""
            return proto, data


class ServerOnly(unittest.TestCase):
    """TLS without client certificates (no QUEEN_TLS_CLIENT_CA)."""

    @classmethod
    def setUpClass(cls):
        cls.b = Broker("test", tls=True).start()

    @classmethod
    def tearDownClass(cls):
        assert cls.b.stop() == 0, cls.b.log_text()

    def test_grpc_over_tls(self):
        with self.b.secure_channel(client=None) as ch:
            self.assertEqual(echo(ch).payload, b"tls")
            self.assertEqual(HG.HealthStub(ch).Check(H.HealthCheckRequest(), timeout=5).status,
                             H.HealthCheckResponse.SERVING)

    def test_streaming_over_tls(self):
        with self.b.secure_channel(client=None) as ch:
            got = list(TG.TestServiceStub(ch).Stream(T.EchoRequest(repeat=300, size=5000), timeout=30))
            self.assertEqual(len(got), 300)

    def test_large_message_over_tls(self):
        with self.b.secure_channel(client=None) as ch:
            self.assertEqual(len(echo(ch, b"q" * (3 << 20), timeout=20).payload), 3 << 20)

    def test_h2c_beside_tls(self):
        self.assertNotEqual(self.b.port, self.b.tls_port)
        with self.b.channel() as ch:
            self.assertEqual(echo(ch).payload, b"tls")

    def test_alpn_h2_negotiated(self):
        proto, _ = handshake(self.b.tls_port, alpn=["http/1.1", "h2"])
        self.assertEqual(proto, "h2")

    def test_alpn_other_protocol_refused(self):
        with self.assertRaisesRegex(ssl.SSLError, "(?i)no.application.protocol"):
            handshake(self.b.tls_port, alpn=["http/1.1"])

    def test_no_alpn_refused(self):
        # The TLS handshake itself completes (the client offered no ALPN, so there is
        # nothing to refuse during it); the broker then closes the connection without
        # a single HTTP/2 byte. The same exchange with ALPN h2 gets SETTINGS back,
        # so an empty answer here is the refusal, not a dead listener.
        proto, data = handshake(self.b.tls_port, alpn=None)
        self.assertIsNone(proto)
        self.assertEqual(data, b"")  # closed without an HTTP/2 SETTINGS
        proto, data = handshake(self.b.tls_port, alpn=["h2"])
        self.assertEqual(proto, "h2")
        self.assertGreaterEqual(len(data), 9)
        self.assertEqual(data[3], 0x4)  # the server's first frame: SETTINGS

    def test_tls_1_1_refused(self):
        with self.assertRaisesRegex(ssl.SSLError, "(?i)protocol.version"):  # the server's alert
            handshake(self.b.tls_port, alpn=["h2"], max_version=ssl.TLSVersion.TLSv1_1)

    def test_tls_1_2_accepted(self):
        proto, _ = handshake(self.b.tls_port, alpn=["h2"], max_version=ssl.TLSVersion.TLSv1_2)
        self.assertEqual(proto, "h2")

    def test_raw_h2_over_tls(self):
        h = self.b.raw_tls(client=None)
        try:
            res = h.wait(h.request(SVC + "Echo", grpc_frame(T.EchoRequest(payload=b"r").SerializeToString())))
            self.assertEqual(grpc_status(res), 0)
            res = h.wait(h.request(SVC + "Echo", b"", content_type="text/plain"))
            self.assertEqual(res.headers[":status"], "415")
        finally:
            h.close()

    def test_plaintext_on_tls_port(self):
        s = socket.create_connection(("127.0.0.1", self.b.tls_port), timeout=5)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
        s.close()
        with self.b.secure_channel(client=None) as ch:
            self.assertEqual(echo(ch).payload, b"tls")


class ClientCertificates(unittest.TestCase):
    """QUEEN_TLS_CLIENT_CA set: only clients with a certificate from that CA."""

    @classmethod
    def setUpClass(cls):
        cls.b = Broker("test", tls=True, client_ca=True).start()

    @classmethod
    def tearDownClass(cls):
        assert cls.b.stop() == 0, cls.b.log_text()

    def test_with_client_cert(self):
        with self.b.secure_channel(client="good") as ch:
            self.assertEqual(echo(ch).payload, b"tls")

    def test_without_client_cert(self):
        with self.b.secure_channel(client=None) as ch:
            with self.assertRaises(grpc.RpcError) as cm:
                echo(ch)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_with_untrusted_client_cert(self):
        with self.b.secure_channel(client="rogue") as ch:
            with self.assertRaises(grpc.RpcError) as cm:
                echo(ch)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_broker_still_serves(self):
        for _ in range(3):
            with self.b.secure_channel(client=None) as ch:
                try:
                    echo(ch, timeout=2)
                except grpc.RpcError:
                    pass
        with self.b.secure_channel(client="good") as ch:
            self.assertEqual(echo(ch).payload, b"tls")


class TlsOnly(unittest.TestCase):
    def test_h2c_off(self):
        with Broker("test", tls=True, h2c=False) as b:
            self.assertEqual(b.port, -1)
            with b.secure_channel(client=None) as ch:
                self.assertEqual(echo(ch).payload, b"tls")

    def test_handshake_timeout_does_not_block_others(self):
        with Broker("test", tls=True) as b:
            # A client that connects and never starts the handshake.
            s = socket.create_connection(("127.0.0.1", b.tls_port), timeout=5)
            t0 = time.monotonic()
            with b.secure_channel(client=None) as ch:
                self.assertEqual(echo(ch).payload, b"tls")
            self.assertLess(time.monotonic() - t0, 5)
            s.close()


if __name__ == "__main__":
    unittest.main()
