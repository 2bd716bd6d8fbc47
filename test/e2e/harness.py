"""End-to-end harness: Python stubs generated at test time, a test CA, broker
processes on free ports, and a raw HTTP/2 client for what grpcio cannot send.

Environment (set by test/e2e/CMakeLists.txt through ctest):
  QN_SOURCE_DIR         the source tree (proto/, test/broker/testsvc.proto)
  QN_E2E_WORK           scratch directory in the build tree
  QN_BROKER             queen-broker (the product; needs a database)
  QN_TEST_BROKER        queen-test-broker (transport + TestService; no database)
  QN_TEST_PG_URL_FILE   where the `pg` fixture wrote the cluster URL
  QUEEN_TEST_DATABASE_URL  overrides the fixture's URL

A suite needs only:
    from harness import Broker, stubs
    stubs()                                   # once; makes the *_pb2 modules importable
    with Broker("test") as b:                 # or Broker("product", db="mysuite")
        ch = b.channel()                      # grpcio channel (h2c); b.secure_channel() for TLS
"""

import collections
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

SOURCE = os.environ.get("QN_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
WORK = os.environ.get("QN_E2E_WORK", tempfile.gettempdir())

PROTOS = [
    "queen/v1/common.proto",
    "queen/v1/queue.proto",
    "queen/v1/admin.proto",
    "grpc/health/v1/health.proto",
    "grpc/reflection/v1/reflection.proto",
    "grpc/reflection/v1alpha/reflection.proto",
]

_scratch = None


def scratch():
    """A directory of this process under QN_E2E_WORK, removed at exit."""
    global _scratch
    if _scratch is None:
        os.makedirs(WORK, exist_ok=True)
        _scratch = tempfile.mkdtemp(prefix="e2e-", dir=WORK)
        import atexit

        if os.environ.get("QN_E2E_KEEP") != "1":  # QN_E2E_KEEP=1: keep logs to read after a run
            atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


# ------------------------------------------------------------------ stubs

_stubs = None


def stubs():
    """Generates Python code for proto/ and testsvc.proto (protoc + grpc_python_plugin)
    and makes it importable: queen.v1.*_pb2, grpc.health.v1.*, grpc.reflection.v1*.*,
    testsvc_pb2. The grpc.* packages are grafted onto grpcio's package path."""
    global _stubs
    if _stubs is not None:
        return _stubs
    out = os.path.join(scratch(), "stubs")
    os.makedirs(out)
    subprocess.run(
        ["protoc", "-I" + os.path.join(SOURCE, "proto"), "-I" + os.path.join(SOURCE, "test", "broker"),
         "--python_out=" + out, "--grpc_python_out=" + out,
         "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin"] + PROTOS + ["testsvc.proto"],
        check=True)
    sys.path.insert(0, out)
    import grpc

    grpc.__path__.append(os.path.join(out, "grpc"))
    _stubs = out
    return out


# ------------------------------------------------------------------ certificates

class Certs:
    """A test CA, a server certificate for localhost/127.0.0.1, a client certificate
    from the same CA and one from an unrelated ("rogue") CA. Paths to PEM files."""

    def __init__(self, d):
        self.dir = d
        p = lambda n: os.path.join(d, n)  # noqa: E731
        self.ca, self.ca_key = p("ca.pem"), p("ca.key")
        self.server, self.server_key = p("server.pem"), p("server.key")
        self.client, self.client_key = p("client.pem"), p("client.key")
        self.rogue_ca, self.rogue_ca_key = p("rogue-ca.pem"), p("rogue-ca.key")
        self.rogue, self.rogue_key = p("rogue.pem"), p("rogue.key")

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), check=True, cwd=cwd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _make_ca(d, name, cn):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=" + cn,
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _make_leaf(d, name, cn, ca, ext):
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write(ext)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn, cwd=d)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
             "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext", cwd=d)


_certs = None


def certs():
    """Makes the certificates once per process (openssl CLI)."""
    global _certs
    if _certs is None:
        d = os.path.join(scratch(), "certs")
        os.makedirs(d)
        _make_ca(d, "ca", "queen-test-ca")
        _make_leaf(d, "server", "localhost", "ca",
                   "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        _make_leaf(d, "client", "queen-test-client", "ca", "extendedKeyUsage=clientAuth\n")
        _make_ca(d, "rogue-ca", "rogue-ca")
        _make_leaf(d, "rogue", "rogue-client", "rogue-ca", "extendedKeyUsage=clientAuth\n")
        _certs = Certs(d)
    return _certs


# ------------------------------------------------------------------ database

def database_url(name):
    """A fresh database `name` on the test cluster (the `pg` ctest fixture, or
    QUEEN_TEST_DATABASE_URL); returns its URL. Raises when no cluster is known."""
    base = os.environ.get("QUEEN_TEST_DATABASE_URL", "")
    if not base:
        path = os.environ.get("QN_TEST_PG_URL_FILE", "")
        if path and os.path.exists(path):
            with open(path) as f:
                base = f.readline().strip()
    if not base:
        raise RuntimeError("no test database: run through ctest (pg fixture) or set QUEEN_TEST_DATABASE_URL")
    for sql in ('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name, 'CREATE DATABASE "%s"' % name):
        subprocess.run(["psql", base, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql], check=True,
                       stdout=subprocess.DEVNULL,
                       env=dict(os.environ, PGOPTIONS="-c client_min_messages=warning"))
    u = urllib.parse.urlparse(base)
    return urllib.parse.urlunparse(u._replace(path="/" + name))


# ------------------------------------------------------------------ brokers

def rss_env(env):
    """env for a broker whose RSS a test bounds. Under AddressSanitizer freed
    memory waits in a quarantine (256 MB by default) and counts in RSS, so the
    bound would measure ASan; a 1 MB quarantine keeps it about the broker."""
    a = os.environ.get("ASAN_OPTIONS")
    return dict(env, ASAN_OPTIONS=a + ":quarantine_size_mb=1") if a is not None else env


class Broker:
    """One broker process on free ports.

    kind     "test" (queen-test-broker: TestService, no database) or "product"
             (queen-broker: runs migrate first, so db= is required)
    tls      serve TLS too (test certificates); client_ca=True requires client certs
    db       database name for the product binary (created fresh)
    env      extra QUEEN_* variables
    """

    def __init__(self, kind="test", tls=False, client_ca=False, db=None, env=None, h2c=True):
        self.kind = kind
        self.tls = tls
        self.client_ca = client_ca
        self.db = db
        self.extra = dict(env or {})
        self.h2c = h2c
        self.proc = None
        self.port = -1
        self.tls_port = -1
        self.http_port = -1
        self.dir = tempfile.mkdtemp(prefix="broker-", dir=scratch())
        self.log_path = os.path.join(self.dir, "broker.log")

    # -- lifecycle

    def start(self, timeout=60):
        binary = os.environ["QN_TEST_BROKER" if self.kind == "test" else "QN_BROKER"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
        # the suites run with the event loops of the caller (`QUEEN_WORKERS=1 ctest`)
        if os.environ.get("QUEEN_WORKERS"):
            env["QUEEN_WORKERS"] = os.environ["QUEEN_WORKERS"]
        port_file = os.path.join(self.dir, "ports")
        env.update({
            "QUEEN_PORT": "0",
            "QUEEN_HTTP_PORT": "0",
            "QUEEN_BIND_ADDR": "127.0.0.1",
            "QUEEN_PORT_FILE": port_file,
            "QUEEN_LOG_LEVEL": "debug",
            "QUEEN_H2C": "true" if self.h2c else "false",
        })
        if self.tls:
            c = certs()
            env.update({"QUEEN_TLS_PORT": "0", "QUEEN_TLS_CERT": c.server, "QUEEN_TLS_KEY": c.server_key})
            if self.client_ca:
                env["QUEEN_TLS_CLIENT_CA"] = c.ca
        if self.kind == "product":
            env["QUEEN_DATABASE_URL"] = database_url(self.db or "queen_e2e")
        env.update(self.extra)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([binary], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited with %d before listening:\n%s" % (self.proc.returncode, self.log_text()))
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not report its ports:\n" + self.log_text())
            time.sleep(0.02)
        with open(port_file) as f:
            kv = dict(line.strip().split("=", 1) for line in f if "=" in line)
        self.port = int(kv.get("port", "-1"))
        self.tls_port = int(kv.get("tls_port", "-1"))
        self.http_port = int(kv.get("http_port", "-1"))
        if self.kind == "product" and self.extra.get("QN_NO_WAIT_DB") is None:
            # The product listens before its database pool is up and reports
            # NOT_SERVING meanwhile; tests start from a serving broker.
            # every event loop has its own pool: wait for each (broker.c logs
            # "event loops workers=N" before it listens)
            while not self._all_loops_connected():
                if self.proc.poll() is not None:
                    raise RuntimeError("broker exited with %d:\n%s" % (self.proc.returncode, self.log_text()))
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError("broker never connected to its database:\n" + self.log_text())
                time.sleep(0.02)
        return self

    def workers(self):
        """The broker's event loops, from its "event loops workers=N" line (None before)."""
        with open(self.log_path, "rb") as f:
            m = re.search(rb'event loops"?,? ?"?workers"?[=:](\d+)', f.read())
        return int(m.group(1)) if m else None

    def _all_loops_connected(self):
        n = self.workers()
        if n is None:
            return False
        with open(self.log_path, "rb") as f:
            return f.read().count(b"database connected") >= n

    def _logged(self, needle):
        with open(self.log_path, "rb") as f:
            return needle in f.read()

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Sends sig and waits; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("broker did not exit within %ss:\n%s" % (timeout, self.log_text()))
        self.log.close()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None and not self.log.closed:
            self.log.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.alive():
            rc = self.stop()
            if exc[0] is None and rc != 0:
                raise AssertionError("broker exited with %s:\n%s" % (rc, self.log_text()))
        self.kill()
        return False

    # -- clients

    def target(self):
        return "127.0.0.1:%d" % self.port

    def channel(self, options=None):
        import grpc

        return grpc.insecure_channel(self.target(), options=options or [])

    def secure_channel(self, client="good", options=None):
        """TLS channel. client: "good" (CA-signed client cert), "rogue", or None."""
        import grpc

        c = certs()
        key = chain = None
        if client == "good":
            key, chain = c.read(c.client_key), c.read(c.client)
        elif client == "rogue":
            key, chain = c.read(c.rogue_key), c.read(c.rogue)
        creds = grpc.ssl_channel_credentials(root_certificates=c.read(c.ca), private_key=key,
                                             certificate_chain=chain)
        opts = [("grpc.ssl_target_name_override", "localhost")] + (options or [])
        return grpc.secure_channel("127.0.0.1:%d" % self.tls_port, creds, opts)

    def raw(self, **kw):
        return RawH2(self.port, **kw)

    def raw_tls(self, alpn=("h2",), client="good", **kw):
        c = certs()
        ctx = ssl.create_default_context(cafile=c.ca)
        if client == "good":
            ctx.load_cert_chain(c.client, c.client_key)
        if alpn:
            ctx.set_alpn_protocols(list(alpn))
        return RawH2(self.tls_port, tls=ctx, **kw)


# ------------------------------------------------------------------ raw HTTP/2

def grpc_frame(body, flags=0, length=None):
    """The 5-byte gRPC prefix plus body (length defaults to len(body))."""
    n = len(body) if length is None else length
    return bytes([flags]) + n.to_bytes(4, "big") + body


StreamResult = collections.namedtuple("StreamResult", "headers data trailers reset ended")


class RawH2:
    """A minimal HTTP/2 client over the h2 package, for malformed requests and
    flow-control checks. Windows are opened as data arrives unless
    auto_window=False; PINGs are acknowledged unless mute() was called."""

    def __init__(self, port, tls=None, auto_window=True, timeout=10, source=None):
        import h2.config
        import h2.connection

        # source: the local address to connect from (another loopback address
        # is another peer to the broker)
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                        source_address=(source, 0) if source else None)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.auto_window = auto_window
        self.muted = False
        self.closed = False
        self.goaway = None
        self.pings_acked = 0
        self.received = collections.defaultdict(int)  # stream -> DATA bytes
        self.streams = {}
        self.remote_settings_seen = False
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()

    def _st(self, sid):
        return self.streams.setdefault(sid, {"headers": None, "data": bytearray(), "trailers": None,
                                             "reset": None, "ended": False})

    def flush(self):
        data = self.conn.data_to_send()
        if data and not self.muted and not self.closed:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def mute(self):
        """Stop writing anything (no PING ACKs, no WINDOW_UPDATEs): an unresponsive peer."""
        self.muted = True

    def request(self, path, body=b"", end=True, content_type="application/grpc", te="trailers",
                method="POST", headers=None):
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", method), (":scheme", "http"), (":path", path), (":authority", "localhost")]
        if content_type is not None:
            hs.append(("content-type", content_type))
        if te is not None:
            hs.append(("te", te))
        hs += list(headers or [])
        self.conn.send_headers(sid, hs, end_stream=end and not body)
        self._st(sid)
        if body:
            self.send(sid, body, end=end)
        self.flush()
        return sid

    def send(self, sid, data, end=False):
        """Sends data within the flow-control windows, pumping for WINDOW_UPDATEs."""
        view = memoryview(data)
        deadline = time.monotonic() + 30
        while True:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if len(view) == 0 or room > 0:
                n = min(room, len(view))
                last = n == len(view)
                self.conn.send_data(sid, view[:n].tobytes(), end_stream=end and last)
                view = view[n:]
                self.flush()
                if last:
                    return
                continue
            if time.monotonic() > deadline or not self.pump(1.0):
                raise AssertionError("no window to send (server granted none)")

    def ping(self):
        self.conn.ping(b"qnping!!")
        self.flush()

    def pump(self, timeout):
        """Reads once (up to timeout) and handles the events; False when the connection is closed."""
        import h2.events

        if self.closed:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        except (OSError, ssl.SSLError):
            self.closed = True
            return False
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                self._st(ev.stream_id)["headers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                st = self._st(ev.stream_id)
                st["data"] += ev.data
                self.received[ev.stream_id] += ev.flow_controlled_length
                if self.auto_window and ev.flow_controlled_length:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.TrailersReceived):
                self._st(ev.stream_id)["trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded):
                self._st(ev.stream_id)["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                self._st(ev.stream_id)["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev
            elif isinstance(ev, h2.events.PingAckReceived):
                self.pings_acked += 1
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                self.remote_settings_seen = True
        self.flush()
        return True

    def open_window(self, sid, n):
        """Grants n more bytes on the stream and on the connection."""
        self.conn.increment_flow_control_window(n, sid)
        self.conn.increment_flow_control_window(n)
        self.flush()

    def wait(self, sid, timeout=10):
        """Waits until the stream ended or was reset; returns a StreamResult."""
        deadline = time.monotonic() + timeout
        st = self._st(sid)
        while not st["ended"] and st["reset"] is None and time.monotonic() < deadline:
            if not self.pump(0.2):
                break
        return StreamResult(st["headers"], bytes(st["data"]), st["trailers"], st["reset"], st["ended"])

    def wait_for(self, cond, timeout=10):
        deadline = time.monotonic() + timeout
        while not cond() and time.monotonic() < deadline:
            if not self.pump(0.1):
                break
        return cond()

    def wait_closed(self, timeout=10):
        """True when the server closed the connection within timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.pump(0.2):
                return True
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True


def grpc_status(res):
    """grpc-status of a StreamResult (trailers, or headers of a trailers-only answer)."""
    for h in (res.trailers, res.headers):
        if h and "grpc-status" in h:
            return int(h["grpc-status"])
    return None


def grpc_message(res):
    for h in (res.trailers, res.headers):
        if h and "grpc-status" in h:
            return urllib.parse.unquote(h.get("grpc-message", ""))
    return None
