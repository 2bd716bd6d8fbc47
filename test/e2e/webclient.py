"""A raw HTTP/1.1 client and gRPC-Web framing, for the side port's suites.

Written on sockets on purpose: the tests must see exactly what the broker sends
(chunk framing, header lines, connection closes) and send what a library would
refuse to (malformed heads, pipelined requests, half requests).

    c = Http(port)
    r = c.request("GET", "/metrics")                 # Response(status, headers, body)
    w = grpc_web(port, "/queen.v1.AdminService/GetStats", req.SerializeToString())
    w.status, w.messages, w.trailers                 # HTTP status, [bytes], {"grpc-status": "0", ...}
"""

import base64
import collections
import socket
import time
import urllib.parse

Response = collections.namedtuple("Response", "status reason headers body version")
WebResult = collections.namedtuple("WebResult", "status headers messages trailers raw")


class Closed(Exception):
    """The server closed the connection before a whole response arrived."""


class Http:
    """One HTTP/1.1 connection. Responses are read whole (Content-Length, chunked,
    or up to the close)."""

    def __init__(self, port, host="127.0.0.1", timeout=10, source=None, rcvbuf=None):
        if rcvbuf is None:
            self.sock = socket.create_connection((host, port), timeout=timeout,
                                                 source_address=(source, 0) if source else None)
        else:  # a small receive buffer, set before connecting so the window stays small
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(timeout)
            if source:
                self.sock.bind((source, 0))
            self.sock.connect((host, port))
        self.buf = b""
        self.closed = False

    # -- sending

    def send(self, data):
        self.sock.sendall(data)

    def request(self, method, path, headers=None, body=b"", version="HTTP/1.1", read=True):
        hs = [("host", "localhost")]
        if body or method == "POST":
            hs.append(("content-length", str(len(body))))
        hs += list((headers or {}).items()) if isinstance(headers, dict) else list(headers or [])
        head = "%s %s %s\r\n" % (method, path, version) + "".join("%s: %s\r\n" % kv for kv in hs) + "\r\n"
        self.send(head.encode("latin-1") + body)
        if read:
            return self.response(head_only=method == "HEAD")
        return None

    # -- reading

    def _fill(self):
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise
        except OSError:
            data = b""
        if not data:
            self.closed = True
            raise Closed()
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def head(self):
        """Reads a response head (skipping 1xx); returns (version, status, reason, headers)."""
        while True:
            line = self._line().decode("latin-1")
            version, status, reason = (line.split(" ", 2) + [""])[:3]
            headers = {}
            while True:
                h = self._line()
                if not h:
                    break
                k, v = h.decode("latin-1").split(":", 1)
                k = k.strip().lower()
                headers[k] = headers[k] + ", " + v.strip() if k in headers else v.strip()
            if not status.startswith("1"):
                return version, int(status), reason, headers

    def chunks(self):
        """Yields the chunks of a chunked body as they arrive (then reads the trailer section)."""
        while True:
            size = int(self._line().split(b";")[0], 16)
            if size == 0:
                while self._line():
                    pass
                return
            data = self._exact(size)
            if self._exact(2) != b"\r\n":
                raise AssertionError("chunk not followed by CRLF")
            yield data

    def response(self, head_only=False):
        version, status, reason, headers = self.head()
        if head_only or status in (204, 304):
            body = b""
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b"".join(self.chunks())
        elif "content-length" in headers:
            body = self._exact(int(headers["content-length"]))
        else:
            body = self.buf
            self.buf = b""
            try:
                while True:
                    self._fill()
                    body += self.buf
                    self.buf = b""
            except Closed:
                pass
        return Response(status, reason, headers, body, version)

    def wait_closed(self, timeout=10):
        """True when the server closes the connection within timeout (pending bytes are read and dropped)."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return True
            if not data:
                return True
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def get(port, path, headers=None):
    """One request on a connection of its own."""
    c = Http(port)
    try:
        return c.request("GET", path, headers)
    finally:
        c.close()


# ------------------------------------------------------------------ gRPC-Web

def frame(body, flags=0):
    return bytes([flags]) + len(body).to_bytes(4, "big") + body


def parse_frames(data):
    """(messages, trailers) of a gRPC-Web response body; trailers is a dict or None."""
    msgs, trailers, off = [], None, 0
    while off < len(data):
        if len(data) - off < 5:
            raise AssertionError("truncated frame prefix in %r" % data[off:])
        flags, n = data[off], int.from_bytes(data[off + 1:off + 5], "big")
        body = data[off + 5:off + 5 + n]
        if len(body) != n:
            raise AssertionError("truncated frame body")
        off += 5 + n
        if flags & 0x80:
            if trailers is not None:
                raise AssertionError("two trailer frames")
            trailers = {}
            for line in body.decode("latin-1").split("\r\n"):
                if line:
                    k, v = line.split(":", 1)
                    trailers[k.strip().lower()] = v.strip()
        else:
            if trailers is not None:
                raise AssertionError("a message after the trailer frame")
            msgs.append(body)
    return msgs, trailers


def grpc_web(port, path, message=b"", text=False, headers=None, timeout=10, raw_body=None,
             content_type=None, conn=None):
    """One gRPC-Web call; returns a WebResult (trailers None when the body had none)."""
    body = frame(message) if raw_body is None else raw_body
    ctype = content_type or ("application/grpc-web-text+proto" if text else "application/grpc-web+proto")
    if text and raw_body is None:
        body = base64.b64encode(body)
    hs = [("content-type", ctype), ("x-grpc-web", "1")] + list((headers or {}).items())
    c = conn or Http(port, timeout=timeout)
    try:
        r = c.request("POST", path, hs, body)
    finally:
        if conn is None:
            c.close()
    data = r.body
    if text and r.status == 200:
        data = base64.b64decode(data)
    msgs, trailers = ([], None) if r.status != 200 else parse_frames(data)
    return WebResult(r.status, r.headers, msgs, trailers, r.body)


def status_of(res):
    return int(res.trailers["grpc-status"]) if res.trailers else None


def message_of(res):
    return urllib.parse.unquote(res.trailers.get("grpc-message", "")) if res.trailers else None
