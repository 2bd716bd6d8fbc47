"""The test TCP proxy (qn_tcp_proxy, built from test/support/tcpproxy.c) driven
from Python: a proxy in front of PostgreSQL that forwards, silences (holds the
bytes, never sends an RST) or cuts each connection on command, and reports what
it forwarded and held, so a test waits on what really crossed it.

    p = TcpProxy("127.0.0.1", pg_port)     # listens on 127.0.0.1:p.port
    url = p.url(pg_url)                     # the same libpq URL through the proxy
    p.silence_all("down")                   # results are held: the server already ran them
    p.wait_held("down", timeout=10)         # a result is being held
    p.cut_all()                             # both sides see an orderly close

Connection ids are accept order (0, 1, ...); the program accepts at most 64
connections in its life (QT_PROXY_MAX_CONNS), so a test makes one proxy per
broker and keeps the pool small.

Environment: QN_TCP_PROXY, the program (test/e2e/CMakeLists.txt sets it).
"""

import os
import subprocess
import threading
import time
import urllib.parse


class TcpProxy:
    def __init__(self, host, port):
        exe = os.environ["QN_TCP_PROXY"]
        self.proc = subprocess.Popen([exe, host, str(port)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lock = threading.Lock()
        first = self._readline(10)
        if not first.startswith("port "):
            self.close()
            raise RuntimeError("qn_tcp_proxy did not report its port: %r" % first)
        self.port = int(first.split()[1])

    def _readline(self, timeout):
        box = {}

        def read():
            box["line"] = self.proc.stdout.readline()

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise AssertionError("qn_tcp_proxy did not answer within %.0fs" % timeout)
        line = box["line"]
        if line == "":
            raise AssertionError("qn_tcp_proxy exited (status %r)" % self.proc.poll())
        return line.strip()

    def cmd(self, line, timeout=10):
        """Sends one command line; returns the answer line."""
        with self.lock:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            return self._readline(timeout)

    def _ok(self, line):
        r = self.cmd(line)
        if r != "ok":
            raise AssertionError("qn_tcp_proxy: %s -> %s" % (line, r))

    # -- connections

    def url(self, pg_url):
        """pg_url (a postgresql:// URL) with its host and port replaced by the proxy's."""
        u = urllib.parse.urlparse(pg_url)
        user = u.netloc.rsplit("@", 1)[0] + "@" if "@" in u.netloc else ""
        return urllib.parse.urlunparse(u._replace(netloc="%s127.0.0.1:%d" % (user, self.port)))

    def nconns(self):
        return int(self.cmd("conns").split()[1])

    def count(self, conn):
        """{'up': (forwarded, held), 'down': (forwarded, held), 'open': bool}"""
        f = self.cmd("count %d" % conn).split()
        if f[0] != "up":
            raise AssertionError("qn_tcp_proxy: count %d -> %s" % (conn, " ".join(f)))
        return {"up": (int(f[1]), int(f[2])), "down": (int(f[4]), int(f[5])), "open": f[6] == "open"}

    def open_conns(self):
        return [i for i in range(self.nconns()) if self.count(i)["open"]]

    def silence(self, conn, dirs):
        self._ok("silence %d %s" % (conn, dirs))

    def forward(self, conn):
        self._ok("forward %d" % conn)

    def cut(self, conn):
        self._ok("cut %d" % conn)

    def silence_all(self, dirs):
        """Silences every open connection in dirs ("up", "down" or "both"); returns them."""
        conns = self.open_conns()
        for i in conns:
            self.silence(i, dirs)
        return conns

    def forward_all(self, conns=None):
        for i in self.open_conns() if conns is None else conns:
            if self.count(i)["open"]:
                self.forward(i)

    def cut_all(self):
        conns = self.open_conns()
        for i in conns:
            self.cut(i)
        return conns

    def held(self, direction):
        """{conn: bytes held in direction} of the open connections holding some."""
        out = {}
        for i in self.open_conns():
            h = self.count(i)[direction][1]
            if h > 0:
                out[i] = h
        return out

    def wait_held(self, direction, min_bytes=1, timeout=10.0, conns=None):
        """Waits until an open connection (of conns, when given) holds at least
        min_bytes in direction; returns its id."""
        deadline = time.monotonic() + timeout
        while True:
            for i in (self.open_conns() if conns is None else conns):
                k = self.count(i)
                if k["open"] and k[direction][1] >= min_bytes:
                    return i
            if time.monotonic() > deadline:
                raise AssertionError("no connection held %d byte(s) %s within %.1fs"
                                     % (min_bytes, direction, timeout))
            time.sleep(0.01)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
