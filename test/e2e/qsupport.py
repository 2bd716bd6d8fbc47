"""Shared helpers of the queue and admin end-to-end suites (test_queue_*.py,
test_admin.py): stubs, fresh names, a small client, waiting with deadlines,
Consume streams driven from the test thread, and a private PostgreSQL cluster.

    from qsupport import Q, A, Client, uniq, wait_until
    c = Client(broker.channel())
    c.push(q, [b"a", b"b"])
"""

import contextlib
import itertools
import os
import queue as queuelib
import re
import subprocess
import threading
import time
import urllib.parse
import uuid

import grpc

from harness import SOURCE, scratch, stubs

stubs()
from queen.v1 import admin_pb2 as A  # noqa: E402
from queen.v1 import admin_pb2_grpc as AG  # noqa: E402
from queen.v1 import common_pb2 as C  # noqa: E402
from queen.v1 import queue_pb2 as Q  # noqa: E402
from queen.v1 import queue_pb2_grpc as QG  # noqa: E402
from grpc.health.v1 import health_pb2 as H  # noqa: E402
from grpc.health.v1 import health_pb2_grpc as HG  # noqa: E402

__all__ = ["A", "C", "Q", "H", "Client", "ConsumeStream", "PrivatePg", "accepted_stream",
           "fixture_db_url", "rpc_error", "uniq", "wait_until", "is_uuid7", "UUID_RE"]

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

_seq = itertools.count()
_run = uuid.uuid4().hex[:6]


def uniq(prefix="q"):
    """A queue / group name no other test (nor an earlier run) uses."""
    return "%s-%s-%d" % (prefix, _run, next(_seq))


def is_uuid7(s):
    """Canonical lower-case text of a version-7, RFC 4122 variant UUID."""
    return bool(UUID_RE.match(s)) and s[14] == "7" and s[19] in "89ab"


def wait_until(cond, timeout=10.0, interval=0.05, what="condition"):
    """Polls cond() until it returns something truthy; returns it. Fails the
    test (AssertionError) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def fixture_db_url(name):
    """URL of database `name` on the test cluster, without (re)creating it: a
    second broker on the database a first Broker(db=name) made."""
    base = os.environ.get("QUEEN_TEST_DATABASE_URL", "")
    if not base:
        with open(os.environ["QN_TEST_PG_URL_FILE"]) as f:
            base = f.readline().strip()
    u = urllib.parse.urlparse(base)
    return urllib.parse.urlunparse(u._replace(path="/" + name))


def psql(url, sql):
    """Runs one statement through psql and returns its unaligned output, stripped
    (AssertionError with psql's stderr when it fails)."""
    r = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAtX", "-c", sql],
                       capture_output=True, text=True,
                       env=dict(os.environ, PGOPTIONS="-c client_min_messages=warning"))
    if r.returncode != 0:
        raise AssertionError("psql failed: %s\n%s" % (sql, r.stderr))
    return r.stdout.strip()


@contextlib.contextmanager
def psql_holding(url, sql):
    """A psql session inside a transaction that ran sql (to hold a lock) for the
    block; the transaction rolls back when the block ends."""
    with subprocess.Popen(["psql", url, "-XAtq", "-v", "ON_ERROR_STOP=1"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as p:
        try:
            p.stdin.write("BEGIN;\n%s;\nSELECT 'held';\n" % sql)
            p.stdin.flush()
            if not any(line.strip() == "held" for line in p.stdout):
                raise AssertionError("psql ended before it held: %s" % sql)
            yield p
            p.stdin.write("ROLLBACK;\n")
            p.stdin.close()
            if p.wait(timeout=10) != 0:
                raise AssertionError("psql failed to roll back: %s" % sql)
        finally:
            if p.poll() is None:
                p.kill()


def rpc_error(fn, *args, **kw):
    """Calls fn and returns the grpc.RpcError it raised (AssertionError if none)."""
    try:
        r = fn(*args, **kw)
    except grpc.RpcError as e:
        return e
    raise AssertionError("expected an RPC error, got %r" % (r,))


class Client:
    """QueueService + AdminService + Health stubs on one channel, with shorthands."""

    def __init__(self, ch, timeout=15):
        self.ch = ch
        self.q = QG.QueueServiceStub(ch)
        self.a = AG.AdminServiceStub(ch)
        self.h = HG.HealthStub(ch)
        self.timeout = timeout

    def close(self):
        self.ch.close()

    # -- queue service

    def push(self, queue, payloads, partition="", txns=None, timeout=None):
        """Pushes payloads to one partition; returns the PushResponse."""
        items = []
        for i, p in enumerate(payloads):
            it = Q.PushItem(queue=queue, partition=partition, payload=p)
            if txns is not None and txns[i] is not None:
                it.transaction_id = txns[i]
            items.append(it)
        return self.q.Push(Q.PushRequest(items=items), timeout=timeout or self.timeout)

    def push_items(self, items, timeout=None):
        return self.q.Push(Q.PushRequest(items=items), timeout=timeout or self.timeout)

    def pop(self, queue="", timeout=None, **kw):
        return self.q.Pop(Q.PopRequest(queue=queue, **kw), timeout=timeout or self.timeout)

    def pop_until(self, queue, timeout=10.0, **kw):
        """Pops (wait_ms 0) until a non-empty batch arrives; returns it."""
        box = {}

        def once():
            r = self.pop(queue, **kw)
            if r.messages:
                box["r"] = r
                return True
            return False

        wait_until(once, timeout, interval=0.05, what="a batch from " + (queue or "discovery"))
        return box["r"]

    def ack(self, items, group="", timeout=None):
        return self.q.Ack(Q.AckRequest(consumer_group=group, items=items),
                          timeout=timeout or self.timeout)

    def ack_offset(self, msg, status=C.ACK_STATUS_COMPLETED, lease=None, group=None, error=""):
        """Acks one delivered message by offset (under its lease unless lease="")."""
        item = Q.AckItem(partition_id=msg.partition_id, offset=msg.offset, status=status,
                         error=error, lease_id=msg.lease_id if lease is None else lease)
        return self.ack([item], group=msg.consumer_group if group is None else group).results[0]

    def renew(self, lease, seconds=0):
        return self.q.RenewLease(Q.RenewLeaseRequest(lease_id=lease, seconds=seconds),
                                 timeout=self.timeout)

    def fetch(self, queue, offset=0, partition="", max_bytes=0, max_wait_ms=0, timeout=None):
        r = self.q.Fetch(Q.FetchRequest(entries=[Q.FetchEntry(queue=queue, partition=partition,
                                                              offset=offset, max_bytes=max_bytes)],
                                        max_wait_ms=max_wait_ms), timeout=timeout or self.timeout)
        return r.results[0]

    def transact(self, ops, required_leases=(), timeout=None):
        return self.q.Transact(Q.TransactRequest(ops=ops, required_leases=list(required_leases)),
                               timeout=timeout or self.timeout)

    # -- admin service

    def configure(self, queue, replace=False, **opts):
        return self.a.ConfigureQueue(A.ConfigureQueueRequest(queue=queue, replace=replace,
                                                             options=C.QueueOptions(**opts)),
                                     timeout=self.timeout)

    def get_queue(self, queue, group=""):
        return self.a.GetQueue(A.GetQueueRequest(queue=queue, consumer_group=group),
                               timeout=self.timeout)

    def partition(self, queue, partition="Default", group=""):
        """PartitionInfo of one partition (as seen by group)."""
        for p in self.get_queue(queue, group).partitions:
            if p.partition == partition:
                return p
        raise AssertionError("no partition %s in %s" % (partition, queue))

    def groups(self, queue="", group=""):
        return list(self.a.ListConsumerGroups(A.ListConsumerGroupsRequest(queue=queue, consumer_group=group),
                                         timeout=self.timeout).groups)

    def dead_letters(self, queue, group="", partition=""):
        return list(self.a.ListDeadLetters(A.ListDeadLettersRequest(queue=queue, consumer_group=group,
                                                               partition=partition),
                                      timeout=self.timeout).dead_letters)

    def stats(self, queue=""):
        return self.a.GetStats(A.GetStatsRequest(queue=queue), timeout=self.timeout)

    def message_count(self, queue):
        """Messages retained in queue (0 when it does not exist)."""
        try:
            return self.get_queue(queue).queue.messages
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return 0
            raise

    def exists(self, queue):
        try:
            self.get_queue(queue)
            return True
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise

    def health(self):
        return self.h.Check(H.HealthCheckRequest(service=""), timeout=5).status

    # -- synchronisation with the server

    def rpcs(self):
        """The broker's RPC counter (GetStats.rpcs; the GetStats call counts itself)."""
        return self.stats("__none__").rpcs

    def wait_received(self, before, n=1, timeout=10.0):
        """Waits until the broker has started n RPCs other than our GetStats polls
        since the rpcs() value `before` (taken right before those calls were made).
        A Pop, Fetch or Consume counted here has been parked on the loop that
        answers GetStats, so a push after this returns wakes it."""
        polls = [0]

        def seen():
            polls[0] += 1
            return self.rpcs() - before - polls[0] >= n

        wait_until(seen, timeout, interval=0.02, what="the broker to receive %d call(s)" % n)


class ConsumeStream:
    """One Consume call driven from the test thread: send() requests, recv()
    responses with a timeout; close() half-closes, cancel() cancels."""

    _END = object()

    def __init__(self, client, subscribe=None, first=None, timeout=60):
        self._out = queuelib.Queue()
        self._in = queuelib.Queue()
        self.error = None
        self.done = threading.Event()
        self.call = client.q.Consume(self._requests(), timeout=timeout)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if first is not None:
            self.send(first)
        elif subscribe is not None:
            self.send(Q.ConsumeRequest(subscribe=subscribe))

    def _requests(self):
        while True:
            r = self._out.get()
            if r is self._END:
                return
            yield r

    def _read(self):
        try:
            for r in self.call:
                self._in.put(r)
        except grpc.RpcError as e:
            self.error = e
        finally:
            self.done.set()
            self._in.put(self._END)

    def send(self, req):
        self._out.put(req)

    def credits(self, n):
        self.send(Q.ConsumeRequest(credits=n))

    def recv(self, timeout=10.0):
        """The next response; AssertionError when none arrives in time or the
        stream ended (self.error then holds its status)."""
        try:
            r = self._in.get(timeout=timeout)
        except queuelib.Empty:
            raise AssertionError("no Consume response within %.1fs" % timeout)
        if r is self._END:
            self._in.put(self._END)
            raise AssertionError("the Consume stream ended: %r" % (self.error,))
        return r

    def recv_none(self, within):
        """Asserts that nothing arrives for `within` seconds (and the stream stays open)."""
        try:
            r = self._in.get(timeout=within)
        except queuelib.Empty:
            return
        if r is self._END:
            self._in.put(self._END)
            raise AssertionError("the Consume stream ended: %r" % (self.error,))
        raise AssertionError("unexpected Consume response: %s" % r)

    def roundtrip(self, request_id=999999, timeout=10.0):
        """A renew round trip: proves the server processed everything sent before.
        Returns the responses that arrived before the renew answer."""
        self.send(Q.ConsumeRequest(request_id=request_id, renew=Q.RenewLeaseRequest(seconds=1)))
        before = []
        deadline = time.monotonic() + timeout
        while True:
            r = self.recv(max(0.01, deadline - time.monotonic()))
            if r.request_id == request_id and r.WhichOneof("kind") == "renew":
                return before
            before.append(r)

    def close(self):
        self._out.put(self._END)

    def cancel(self):
        self.call.cancel()
        self._out.put(self._END)

    def wait_end(self, timeout=10.0):
        """Waits for the stream to end; returns its status code (OK when it ended cleanly)."""
        if not self.done.wait(timeout):
            raise AssertionError("the Consume stream did not end within %.1fs" % timeout)
        return self.error.code() if self.error is not None else grpc.StatusCode.OK


def accepted_stream(client, subscribe, timeout=5.0):
    """A Consume stream subscribed with `subscribe`, once the broker has taken
    it (a renew round trip within timeout); None when the broker refused it with
    RESOURCE_EXHAUSTED (a limit such as QUEEN_MAX_STREAMS); AssertionError when
    it ended otherwise. For wait_until while a place under a limit frees."""
    s = ConsumeStream(client, subscribe=subscribe)
    try:
        s.roundtrip(timeout=timeout)
        return s
    except AssertionError:
        code = s.wait_end()
        if code != grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise AssertionError("the Consume stream ended with %s, not RESOURCE_EXHAUSTED" % code)
        return None


class PrivatePg:
    """A PostgreSQL cluster of one suite (scripts/pg.sh), which the suite may stop
    and start again on the same port."""

    def __init__(self, name="pg"):
        self.dir = os.path.join(scratch(), name)
        self.script = os.path.join(SOURCE, "scripts", "pg.sh")
        env = dict(os.environ, QN_PG_FSYNC="off")
        out = subprocess.run([self.script, "start", self.dir], check=True, capture_output=True,
                             text=True, env=env).stdout
        self.url = out.strip().splitlines()[-1]
        home_file = os.path.join(self.dir, "home")
        self.home = self.dir
        if os.path.exists(home_file):
            with open(home_file) as f:
                self.home = f.read().strip()
        self.data = os.path.join(self.home, "data")

    def _pg_ctl(self, *args):
        bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        if not os.path.exists(os.path.join(bindir, "pg_ctl")):
            bindir = "/usr/lib/postgresql/15/bin"
        cmd = [os.path.join(bindir, "pg_ctl"), "-D", self.data] + list(args)
        if os.getuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        """Fast shutdown: connections are terminated."""
        self._pg_ctl("-m", "fast", "-w", "stop")

    def kill(self):
        """Immediate shutdown (a crash as far as clients see it): the server
        processes quit without finishing anything; recovery runs at the next start."""
        self._pg_ctl("-m", "immediate", "-w", "stop")

    def port(self):
        return urllib.parse.urlparse(self.url).port

    def start_again(self):
        """Starts the stopped cluster with its previous options (same port)."""
        self._pg_ctl("-l", os.path.join(self.home, "server.log"), "-w", "-t", "60", "restart")

    def remove(self):
        subprocess.run([self.script, "stop", self.dir, "--remove"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
