"""Helpers of the security suites (test_auth*.py): tokens minted with PyJWT
(Debian python3-jwt, independent of the broker's own JWT code), channels that
send a bearer token with every call, and a look at the database.

    from authsupport import Bearer, Minter, Db
    m = Minter(secret_path, aud="queen-e2e", iss="queen-e2e-iss")
    c = Client(Bearer.wrap(broker.channel(), m.token("alice", tenant, ["produce:*"])))
"""

import collections
import os
import subprocess
import time
import uuid

import grpc
import jwt

from harness import scratch

__all__ = ["Bearer", "Minter", "Db", "write_file", "new_secret"]


def write_file(name, data, mode=0o600):
    """Writes data (bytes or text) to scratch()/name, replacing it atomically; returns the path."""
    path = os.path.join(scratch(), name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return path


def new_secret():
    """A fresh HS256 secret (64 ASCII bytes: the broker wants at least 32)."""
    return os.urandom(32).hex().encode()


class Minter:
    """HS256 tokens under one secret, with the broker's claim names (tenant, scopes)."""

    def __init__(self, secret, aud=None, iss=None):
        self.secret = secret
        self.aud = aud
        self.iss = iss

    def token(self, sub, tenant=None, scopes=("produce:*", "consume:*", "admin:*"), ttl=3600,
              aud=None, iss=None, secret=None, extra=None, kid=None):
        now = int(time.time())
        claims = {"sub": sub, "iat": now, "exp": now + ttl, "scopes": list(scopes)}
        if tenant is not None:
            claims["tenant"] = str(tenant)
        a = self.aud if aud is None else aud
        i = self.iss if iss is None else iss
        if a:
            claims["aud"] = a
        if i:
            claims["iss"] = i
        claims.update(extra or {})
        headers = {"kid": kid} if kid else None
        return jwt.encode(claims, self.secret if secret is None else secret, algorithm="HS256",
                          headers=headers)


class _Details(collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials",
                                                   "wait_for_ready", "compression")),
               grpc.ClientCallDetails):
    pass


class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
             grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call of a channel."""

    def __init__(self, token):
        self.token = token

    @classmethod
    def wrap(cls, channel, token):
        return grpc.intercept_channel(channel, cls(token)) if token is not None else channel

    def _d(self, d):
        md = list(d.metadata or []) + [("authorization", "Bearer " + self.token)]
        return _Details(d.method, d.timeout, md, d.credentials, getattr(d, "wait_for_ready", None),
                        getattr(d, "compression", None))

    def intercept_unary_unary(self, cont, d, req):
        return cont(self._d(d), req)

    def intercept_unary_stream(self, cont, d, req):
        return cont(self._d(d), req)

    def intercept_stream_unary(self, cont, d, it):
        return cont(self._d(d), it)

    def intercept_stream_stream(self, cont, d, it):
        return cont(self._d(d), it)


# Every table the broker writes; a refused call must leave all of them as they were.
TABLES = ["queues", "log_partitions", "log_segments", "log_consumers", "log_dlq", "log_txns",
          "consumer_groups_metadata", "consumer_watermarks"]


class Db:
    """psql on one database of the test cluster."""

    def __init__(self, url):
        self.url = url

    def query(self, sql):
        """Rows of sql as lists of text fields ('|'-separated by psql -A)."""
        p = subprocess.run(["psql", self.url, "-v", "ON_ERROR_STOP=1", "-XAtq", "-F", "\x1f", "-c", sql],
                           check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out = p.stdout.decode("utf-8", "replace")
        return [line.split("\x1f") for line in out.splitlines()]

    def scalar(self, sql):
        rows = self.query(sql)
        return rows[0][0] if rows else None

    def fingerprint(self):
        """One digest per table of everything in it (rows as text, sorted)."""
        parts = ["(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM queen.%s t)"
                 % t for t in TABLES]
        row = self.query("SELECT " + ", ".join(parts))[0]
        return dict(zip(TABLES, row))

    def tenant_of(self, queue):
        """Tenant ids of every queue named `queue`."""
        return sorted(r[0] for r in self.query(
            "SELECT tenant_id FROM queen.queues WHERE name = '%s'" % queue.replace("'", "''")))

    def _where(self, queue):
        return "q.name = '%s'" % queue.replace("'", "''")

    def segments(self, queue):
        """The stored segments of every queue named `queue`: the blob as stored
        (one zstd frame) and its content (the raw frames), as bytes pairs."""
        import zstandard

        rows = self.query(
            "SELECT encode(s.blob, 'hex') FROM queen.log_segments s "
            "JOIN queen.log_partitions p ON p.id = s.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE " + self._where(queue))
        out = []
        for r in rows:
            blob = bytes.fromhex(r[0])
            out.append((blob, zstandard.ZstdDecompressor().decompress(blob)))
        return out

    def dead_letter_payloads(self, queue):
        """The payload bytes of the dead letters of every queue named `queue`, as stored."""
        rows = self.query(
            "SELECT encode(d.payload, 'hex') FROM queen.log_dlq d "
            "JOIN queen.log_partitions p ON p.id = d.partition_id "
            "JOIN queen.queues q ON q.id = p.queue_id WHERE " + self._where(queue))
        return [bytes.fromhex(r[0]) for r in rows]


def uuid4():
    return str(uuid.uuid4())
