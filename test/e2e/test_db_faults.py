"""Exact answers when the database fails under load (issue 8, items 1, 2 and 7).

Pushers on several threads push unique payloads, half with transaction ids,
half without, while the database connection fails under them:
  - through a TCP proxy (qn_tcp_proxy) that forwards a commit and then cuts the
    connection, or silences it (no RST: the broker's hang detector must notice);
  - PostgreSQL killed (pg_ctl stop -m immediate) and restarted;
  - the broker SIGKILLed and started again.
Then everything stored is read back (Fetch) and each answer is checked against
it: an item answered QUEUED is stored exactly once, an item answered
UNAVAILABLE (or FAILED) is not stored, nothing is stored twice, and the items
answered "outcome unknown" are counted and reported (none is expected: the
deadline leaves time to resolve). Any other answer fails the test: it would
tell the client nothing about what was written.

And a pop whose lease committed while its connection was cut: the group is not
blocked until the lease expires. And a broker started while PostgreSQL is down:
it listens, reports NOT_SERVING, answers UNAVAILABLE, and serves once PostgreSQL
is up, without a restart.
"""

import collections
import os
import re
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import grpc

from harness import Broker
from qsupport import A, H, Q, Client, PrivatePg, rpc_error, uniq, wait_until
from tcpproxy import TcpProxy

OK = grpc.StatusCode.OK
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
UNKNOWN = grpc.StatusCode.UNKNOWN
PARTITIONS = ["p0", "p1", "p2", "p3"]


class PushLoad:
    """Pushers on `threads` threads, one channel. Every payload is unique; even
    items carry their payload as transaction id, odd items none. outcomes maps
    payload -> (kind, detail): kind is queued, duplicate, failed, unknown,
    unavailable, refused or other (an RPC status that says nothing about what
    was written)."""

    def __init__(self, broker, queue, threads=6, items=4, deadline=30.0):
        self.client = Client(broker.channel())
        self.queue = queue
        self.threads = threads
        self.items = items
        self.deadline = deadline
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.outcomes = {}
        self.answered = 0  # pushes answered OK
        self.calls = 0
        self.latencies = []  # seconds, every push
        self.workers = []

    def _one(self, k, n):
        items = []
        for j in range(self.items):
            payload = "%d-%d-%d" % (k, n, j)
            items.append(Q.PushItem(queue=self.queue, partition=PARTITIONS[(n + j) % len(PARTITIONS)],
                                    payload=payload.encode(),
                                    transaction_id=payload if j % 2 == 0 else ""))
        t0 = time.monotonic()
        try:
            r = self.client.q.Push(Q.PushRequest(items=items), timeout=self.deadline)
            code, details = OK, ""
        except grpc.RpcError as e:
            r, code, details = None, e.code(), e.details()
        took = time.monotonic() - t0
        out = {}
        for j, it in enumerate(items):
            p = it.payload
            if code == OK:
                res = r.results[j]
                kind = {Q.PUSH_STATUS_QUEUED: "queued", Q.PUSH_STATUS_DUPLICATE: "duplicate",
                        Q.PUSH_STATUS_FAILED: "failed", Q.PUSH_STATUS_UNKNOWN: "unknown"}.get(res.status, "other")
                out[p] = (kind, "%s %d %s" % (res.partition, res.offset, res.error))
            elif code == UNAVAILABLE:
                out[p] = ("unavailable", details)
            elif code == UNKNOWN:
                out[p] = ("unknown", details)
            elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                out[p] = ("refused", details)
            else:
                out[p] = ("other", "%s: %s" % (code, details))
        with self.lock:
            self.outcomes.update(out)
            self.calls += 1
            self.latencies.append(took)
            if code == OK:
                self.answered += 1
        return code

    def _run(self, k):
        n = 0
        while not self.stop_ev.is_set():
            code = self._one(k, n)
            n += 1
            if code != OK:
                # the broker refused (database down): do not spin; a load
                # generator's backoff, not synchronisation
                self.stop_ev.wait(0.05)

    def start(self):
        for k in range(self.threads):
            t = threading.Thread(target=self._run, args=(k,), daemon=True)
            t.start()
            self.workers.append(t)
        return self

    def ok_count(self):
        with self.lock:
            return self.answered

    def wait_more(self, n, timeout=60.0, what="pushes to be answered"):
        """Waits until n more pushes than now were answered OK."""
        target = self.ok_count() + n
        wait_until(lambda: self.ok_count() >= target, timeout, interval=0.02, what=what)

    def stop(self):
        self.stop_ev.set()
        for t in self.workers:
            t.join(self.deadline + 30)
            if t.is_alive():
                raise AssertionError("a pusher did not finish")
        self.client.close()


def stored_payloads(client, queue):
    """payload -> how many times it is stored in queue (every partition, read
    with Fetch from the log start)."""
    counts = collections.Counter()
    for p in PARTITIONS:
        off = 0
        while True:
            r = client.fetch(queue, offset=off, partition=p, max_bytes=4 << 20, timeout=30)
            if r.error == Q.FETCH_ERROR_UNKNOWN_PARTITION:
                break
            if r.error != Q.FETCH_ERROR_NONE:
                raise AssertionError("fetch %s/%s at %d: error %d" % (queue, p, off, r.error))
            for m in r.records:
                counts[m.payload] += 1
            if not r.records or r.records[-1].offset + 1 >= r.high_watermark:
                break
            off = r.records[-1].offset + 1
    return counts


def verify(test, load, client, strict=True):
    """The assertions of the module comment; returns a summary dict. strict:
    every answer must be one that says what was written (False after a broker
    SIGKILL, where the client library itself reports the lost connection)."""
    counts = stored_payloads(client, load.queue)
    kinds = collections.Counter(k for k, _ in load.outcomes.values())
    twice = [p for p, n in counts.items() if n > 1]
    test.assertEqual(twice, [], "stored more than once")
    for p, (kind, detail) in load.outcomes.items():
        n = counts.get(p, 0)
        if kind == "queued":
            test.assertEqual(n, 1, "%r answered QUEUED (%s) but stored %d times" % (p, detail, n))
        elif kind in ("unavailable", "failed", "refused") and strict:
            test.assertEqual(n, 0, "%r answered %s (%s) but stored" % (p, kind, detail))
    unknown_stored = sum(1 for p, (k, _) in load.outcomes.items() if k == "unknown" and counts.get(p))
    summary = dict(kinds)
    summary["stored"] = sum(counts.values())
    summary["unknown_stored"] = unknown_stored
    summary["pushes"] = load.calls
    summary["max_push_s"] = round(max(load.latencies), 3) if load.latencies else 0
    sys.stderr.write("  outcome counts %s: %s\n" % (test.id().rsplit(".", 1)[-1], summary))
    if strict:
        others = [(p, d) for p, (k, d) in load.outcomes.items() if k in ("other", "duplicate")]
        test.assertEqual(others[:5], [], "answers that say nothing about what was written")
        test.assertEqual(kinds.get("unknown", 0), 0,
                         "items answered outcome unknown although the deadline allowed resolution")
    # every stored payload is one we pushed
    test.assertEqual([p for p in counts if p not in load.outcomes], [])
    return summary


class Proxied:
    """A broker per test whose database connections all go through
    qn_tcp_proxy, on a private cluster per class (PG_NAME; ENV adds to the
    broker's environment)."""

    PG_NAME = "pg-dbfaults"
    ENV = {}

    @classmethod
    def setUpClass(cls):
        cls.pg = PrivatePg(cls.PG_NAME)

    @classmethod
    def tearDownClass(cls):
        cls.pg.remove()

    def setUp(self):
        self.proxy = TcpProxy("127.0.0.1", self.pg.port())
        self.b = Broker("product", db="e2e_db_faults_unused", env=dict({
            "QUEEN_DATABASE_URL": self.proxy.url(self.pg.url),
            "QUEEN_DB_POOL_SIZE": "4",
            "QUEEN_DB_CALL_TIMEOUT_MS": "2000",
            "QUEEN_DB_CANCEL_GRACE_MS": "1000",
            "RETENTION_INTERVAL": "86400000",
        }, **self.ENV)).start()
        self.c = Client(self.b.channel(), timeout=30)

    def tearDown(self):
        self.c.close()
        try:
            rc = self.b.stop()
            self.assertEqual(rc, 0, self.b.log_text()[-4000:])
        finally:
            self.b.kill()
            self.proxy.close()

    def log_has(self, needle):
        return needle in self.b.log_text()


class ThroughProxy(Proxied, unittest.TestCase):
    """Commits forwarded, then the connection cut or silenced; results lost."""

    def test_commit_forwarded_then_connection_cut(self):
        load = PushLoad(self.b, uniq("cut")).start()
        try:
            load.wait_more(30)
            for _ in range(2):
                # every result from the server is held: the commits it answers
                # happened; then the connections close under the broker
                self.proxy.silence_all("down")
                self.proxy.wait_held("down", timeout=20)
                self.proxy.cut_all()
                load.wait_more(30, what="pushes answered after the cut")
        finally:
            load.stop()
        verify(self, load, self.c)
        # the scenario happened: pushes were in doubt, and resolved
        self.assertTrue(self.log_has("push in doubt"), "no push was in doubt: the scenario did not happen")
        self.assertTrue(self.log_has("push in doubt resolved"))

    def test_commit_forwarded_then_connection_silenced(self):
        load = PushLoad(self.b, uniq("hang")).start()
        try:
            load.wait_more(30)
            # up to three rounds, until a push was in flight when its connection
            # went silent (the held bytes of a round may all be other calls'
            # results: then no push is in doubt and the scenario is retried)
            for _ in range(3):
                hung = self.b.log_text().count(" hung: ")
                silenced = self.proxy.silence_all("down")
                self.proxy.wait_held("down", timeout=20, conns=silenced)
                t0 = time.monotonic()
                # the hang detector (QUEEN_DB_CALL_TIMEOUT_MS = 2000) closes what hangs
                wait_until(lambda: self.b.log_text().count(" hung: ") > hung, 20,
                           what="the broker to declare a connection hung")
                self.assertLess(time.monotonic() - t0, 15)
                # the network comes back for the connections it did not close
                self.proxy.forward_all([i for i in silenced if self.proxy.count(i)["open"]])
                load.wait_more(30, what="pushes answered after the hang")
                if self.log_has("push in doubt"):
                    break
        finally:
            load.stop()
        summary = verify(self, load, self.c)
        self.assertTrue(self.log_has("push in doubt"), "no push was in doubt: the scenario did not happen")
        # a partition's write in flight never outlives the hang detection by much
        self.assertLess(summary["max_push_s"], 15.0)
        self.assertEqual(self.c.health(), H.HealthCheckResponse.SERVING)

    def test_pop_whose_lease_committed_leaves_the_group_unblocked(self):
        q, g = uniq("pop"), "g"
        self.c.push(q, [b"m1", b"m2", b"m3"])
        self.assertEqual(self.c.pop(q, consumer_group="warm").messages[0].payload, b"m1")
        up_before = {i: self.proxy.count(i)["up"][0] for i in self.proxy.open_conns()}
        silenced = self.proxy.silence_all("down")
        fut = self.c.q.Pop.future(Q.PopRequest(queue=q, consumer_group=g, batch=10), timeout=30)

        def pop_result_held():
            # the connection that carried the pop up and holds its result
            for i in silenced:
                k = self.proxy.count(i)
                if k["open"] and k["up"][0] > up_before.get(i, 0) and k["down"][1] > 0:
                    return True
            return False

        wait_until(pop_result_held, 20, interval=0.01, what="the pop's result to be held")
        self.proxy.cut_all()
        try:
            r = fut.result()
            self.fail("the pop answered although its result was lost: %s" % r)
        except grpc.RpcError as e:
            self.assertEqual(e.code(), UNAVAILABLE, e.details())
            self.assertIn("released", e.details())
        # the lease it may have taken (lease_time 60 s) does not block the group
        t0 = time.monotonic()

        def pop_again():
            # while the pool reconnects a pop may answer UNAVAILABLE (nothing
            # leased, nothing written): the client retries, as documented
            try:
                return self.c.pop(q, consumer_group=g, batch=10).messages
            except grpc.RpcError as e:
                self.assertEqual(e.code(), UNAVAILABLE, e.details())
                self.assertIn("nothing was written", e.details())
                return None

        got = wait_until(pop_again, 15, interval=0.1, what="the group to get its messages again")
        self.assertEqual([m.payload for m in got], [b"m1", b"m2", b"m3"])
        self.assertLess(time.monotonic() - t0, 15)


    def test_bundled_leases_and_acks_under_cuts(self):
        """Consumers pop named partitions (leases by id, bundled) and ack what
        they get (acks bundled across calls) while the database connections are
        cut under them. No ack answered OK is lost (a message acked OK is never
        delivered again), and no batch stays leased to nobody: whatever was not
        acked is delivered again well within its 60 s lease."""
        q, g = uniq("bund"), "g"
        parts = ["b%d" % i for i in range(8)]
        payloads = set()
        for k, p in enumerate(parts):
            batch = [("%s-%d" % (p, i)).encode() for i in range(150)]
            self.c.push(q, batch, partition=p)
            payloads.update(batch)
        lock = threading.Lock()
        acked, unsure = set(), set()
        unexpected = []  # answers that say nothing about what was written
        pops = {"ok": 0, "empty": 0, "errors": collections.Counter()}
        stop = threading.Event()
        client = Client(self.b.channel(), timeout=30)

        def ack_all(msgs):
            items = [Q.AckItem(partition_id=m.partition_id, offset=m.offset, lease_id=m.lease_id)
                     for m in msgs]
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    r = client.ack(items, group=g, timeout=10)
                except grpc.RpcError as e:
                    # not sent, or outcome unknown: the client acks again
                    if e.code() not in (UNAVAILABLE, UNKNOWN):
                        with lock:
                            unexpected.append("ack: %s %s" % (e.code(), e.details()))
                    time.sleep(0.05)
                    continue
                with lock:
                    for m, res in zip(msgs, r.results):
                        # applied / noop: acknowledged; stale: committed before
                        # (a first attempt that answered "unknown" had committed)
                        if res.success or res.outcome == Q.ACK_OUTCOME_STALE:
                            acked.add(m.payload)
                        else:
                            unsure.add(m.payload)
                return
            with lock:
                unsure.update(m.payload for m in msgs)

        def consumer(seed):
            n = seed
            while not stop.is_set():
                n += 1
                try:
                    r = client.pop(q, partition=parts[n % len(parts)], consumer_group=g, batch=5,
                                   wait_ms=100, timeout=30)
                except grpc.RpcError as e:
                    with lock:
                        if e.code() != UNAVAILABLE:
                            unexpected.append("pop: %s %s" % (e.code(), e.details()))
                        pops["errors"][e.details()[:40]] += 1
                    time.sleep(0.02)
                    continue
                with lock:
                    pops["ok" if r.messages else "empty"] += 1
                if r.messages:
                    ack_all(list(r.messages))

        threads = [threading.Thread(target=consumer, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(acked) >= 60, 30, what="acks before the first cut")
            for round_ in range(2):
                before = len(acked)
                # the pool is connected again (after the first cut) and busy
                wait_until(lambda: self.proxy.open_conns(), 20, what="pool connections")
                silenced = self.proxy.silence_all("down")
                self.proxy.wait_held("down", timeout=20, conns=silenced)
                self.proxy.cut_all()
                wait_until(lambda: len(acked) >= before + 40 or len(acked) + len(unsure) >= len(payloads),
                           40, what="acks after cut %d" % round_)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        self.assertFalse(any(t.is_alive() for t in threads))
        self.assertEqual(unexpected, [])
        # the drain: a fresh consumer, any partition; well within the 60 s lease
        drained = set()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 25 and not payloads <= (acked | drained):
            try:
                r = client.pop(q, consumer_group=g, batch=100, wait_ms=500, timeout=30)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), UNAVAILABLE, e.details())
                continue
            drained.update(m.payload for m in r.messages)
            for m in r.messages:
                client.ack_offset(m)
        client.close()
        missing = payloads - acked - unsure - drained
        if missing:
            byp = collections.Counter(m.split(b"-")[0].decode() for m in missing)
            notes = [x for x in self.b.log_text().splitlines()
                     if any(k in x for k in ("doubt", "released", "hung", "lost", "WARN", "ERROR"))]
            print("missing per partition: %s\n%s" % (dict(byp), "\n".join(notes[-40:])),
                  file=sys.stderr)
        self.assertEqual(acked & drained, set(), "acked OK but delivered again: an OK ack did not commit")
        self.assertEqual(missing, set(),
                         "not acked and not delivered again within the lease: leased to nobody")
        self.assertGreater(pops["ok"], 0)
        rc = self.b.stop()
        self.assertEqual(rc, 0)
        log = self.b.log_text()
        lines = [x for x in log.splitlines() if "consume fusion:" in x]  # one per event loop
        print("bundled under cuts: pops %s; acked %d, unsure %d, drained %d; %s" %
              (dict(pops), len(acked), len(unsure), len(drained), "; ".join(lines) or "no bundle"),
              file=sys.stderr)
        # both kinds of bundle went out (the scenario happened)
        self.assertTrue(lines, "no bundle was sent")
        self.assertGreater(sum(int(re.search(r"(\d+) lease bundles", x).group(1)) for x in lines), 0)
        self.assertGreater(sum(int(re.search(r"(\d+) ack bundles", x).group(1)) for x in lines), 0)


class ConnectionBudget(Proxied, unittest.TestCase):
    """QUEEN_MAX_CONN_DB_CALLS = 1: a connection's calls past its database
    slots wait in the broker for a slot (they used to be refused
    RESOURCE_EXHAUSTED at once), in arrival order, and one that meets its
    deadline while waiting ends without having run."""

    PG_NAME = "pg-connbudget"
    # one slot; a silenced answer is not declared hung within the test; the
    # bytes waiting calls may hold per connection small enough to reach
    ENV = {"QUEEN_MAX_CONN_DB_CALLS": "1", "QUEEN_DB_CALL_TIMEOUT_MS": "30000",
           "QUEEN_MAX_RECV_BYTES": str(256 << 10), "QUEEN_MAX_CONN_RECV_BYTES": str(1 << 20)}

    def test_calls_past_the_slots_wait_their_turn(self):
        q = uniq("turns")
        n = 48
        futs = [self.c.q.Push.future(Q.PushRequest(items=[Q.PushItem(
                    queue=q, partition="p%d" % (i % 4), payload=b"m%d" % i,
                    transaction_id="turn-%d" % i)]), timeout=60) for i in range(n)]
        # admin calls wait in the same line
        futs.append(self.c.a.ListQueues.future(A.ListQueuesRequest(), timeout=60))
        for i, f in enumerate(futs[:n]):
            r = f.result()  # raises on RESOURCE_EXHAUSTED
            self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED, i)
        futs[n].result()
        self.assertEqual(self.c.message_count(q), n)

    def waiting(self):
        """queen_rpc_calls_waiting from /metrics."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.b.http_port, timeout=10) as r:
            m = re.search(r"^queen_rpc_calls_waiting (\S+)$", r.read().decode(), re.M)
        self.assertIsNotNone(m, "queen_rpc_calls_waiting is not exported")
        return float(m.group(1))

    def test_waiting_calls_that_end_before_their_turn_never_ran(self):
        q = uniq("held")
        self.c.push(q, [b"warm"], txns=["held-warm"])  # queue and partition exist
        silenced = self.proxy.silence_all("down")
        # the server runs it; its answer is held, so its slot stays taken
        first = self.c.q.Push.future(Q.PushRequest(items=[Q.PushItem(
            queue=q, payload=b"first", transaction_id="held-first")]), timeout=60)
        self.proxy.wait_held("down", timeout=20, conns=silenced)
        # one meets its deadline while it waits
        try:
            self.c.push(q, [b"second"], txns=["held-second"], timeout=0.5)
            self.fail("the second push answered while the first held the only slot")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.DEADLINE_EXCEEDED, e.details())
        # one is cancelled by its client while it waits
        third = self.c.q.Push.future(Q.PushRequest(items=[Q.PushItem(
            queue=q, payload=b"third", transaction_id="held-third")]), timeout=60)
        wait_until(lambda: self.waiting() == 1, 10, what="the third push to wait for a slot")
        third.cancel()
        wait_until(lambda: self.waiting() == 0, 10, what="the cancelled push to leave the line")
        self.assertFalse(first.done(), "the first push answered: its slot was free")
        self.proxy.forward_all([i for i in silenced if self.proxy.count(i)["open"]])
        self.assertEqual(first.result().results[0].status, Q.PUSH_STATUS_QUEUED)
        # a push that had reached the database would have committed there (only
        # the answers were held): neither waiting push ever started
        r = self.c.fetch(q, offset=0, max_bytes=1 << 20)
        self.assertEqual([m.payload for m in r.records], [b"warm", b"first"])


    def test_waiting_calls_are_bounded_by_the_connections_receive_budget(self):
        q = uniq("bound")
        self.c.push(q, [b"warm"], txns=["bound-warm"])
        silenced = self.proxy.silence_all("down")
        first = self.c.q.Push.future(Q.PushRequest(items=[Q.PushItem(
            queue=q, payload=b"first", transaction_id="bound-first")]), timeout=60)
        self.proxy.wait_held("down", timeout=20, conns=silenced)
        # 12 x 200 KB behind it: 1 MiB (QUEEN_MAX_CONN_RECV_BYTES) holds five
        big = [os.urandom(200 << 10) for _ in range(12)]
        futs = [self.c.q.Push.future(Q.PushRequest(items=[Q.PushItem(
                    queue=q, payload=p, transaction_id="bound-%d" % i)]), timeout=60)
                for i, p in enumerate(big)]
        refused = []
        wait_until(lambda: sum(f.done() for f in futs) >= len(futs) - 5, 20,
                   what="the pushes past the bound to be refused")
        self.assertFalse(first.done(), "the first push answered: its slot was free")
        self.proxy.forward_all([i for i in silenced if self.proxy.count(i)["open"]])
        self.assertEqual(first.result().results[0].status, Q.PUSH_STATUS_QUEUED)
        stored = [b"warm", b"first"]
        for i, f in enumerate(futs):
            try:
                self.assertEqual(f.result().results[0].status, Q.PUSH_STATUS_QUEUED)
                stored.append(big[i])
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
                refused.append(e.details())
        self.assertGreaterEqual(len(refused), 7, refused)
        self.assertLessEqual(len(stored), 2 + 5)
        # held requests count as the connection's unfinished input: whichever
        # part crossed the bound, the answer names it
        self.assertTrue(all("more than 1048576 bytes" in d for d in refused), refused)
        got, off = [], 0
        while True:
            r = self.c.fetch(q, offset=off, max_bytes=4 << 20)
            got += [m.payload for m in r.records]
            if not r.records or r.records[-1].offset + 1 >= r.high_watermark:
                break
            off = r.records[-1].offset + 1
        self.assertEqual(sorted(got), sorted(stored))  # the refused were never written


class PostgresKilled(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pg = PrivatePg("pg-dbkill")

    @classmethod
    def tearDownClass(cls):
        cls.pg.remove()

    def test_postgres_killed_and_restarted_under_push_load(self):
        b = Broker("product", db="e2e_db_faults_unused", env={
            "QUEEN_DATABASE_URL": self.pg.url, "RETENTION_INTERVAL": "86400000"}).start()
        c = Client(b.channel(), timeout=30)
        try:
            load = PushLoad(b, uniq("kill")).start()
            try:
                load.wait_more(30)
                for _ in range(2):
                    self.pg.kill()
                    wait_until(lambda: c.health() == H.HealthCheckResponse.NOT_SERVING, 20,
                               what="health NOT_SERVING")
                    self.pg.start_again()
                    wait_until(lambda: c.health() == H.HealthCheckResponse.SERVING, 60,
                               what="health SERVING again")
                    load.wait_more(30, what="pushes answered after the restart")
            finally:
                load.stop()
            verify(self, load, c)
        finally:
            c.close()
            rc = b.stop()
            b.kill()
        self.assertEqual(rc, 0)

    def test_broker_sigkilled_under_push_load(self):
        env = {"QUEEN_DATABASE_URL": self.pg.url, "RETENTION_INTERVAL": "86400000"}
        b = Broker("product", db="e2e_db_faults_unused", env=env).start()
        q = uniq("sigkill")
        load = PushLoad(b, q).start()
        try:
            load.wait_more(50)
        finally:
            b.kill()  # SIGKILL: nothing is answered after this
            load.stop()
        b2 = Broker("product", db="e2e_db_faults_unused", env=env).start()
        c = Client(b2.channel(), timeout=30)
        try:
            summary = verify(self, load, c, strict=False)
            self.assertGreater(summary.get("queued", 0), 0)
        finally:
            c.close()
            b2.stop()
            b2.kill()


class StartWithoutDatabase(unittest.TestCase):
    """Item 7: the broker starts with PostgreSQL down, listens, reports
    NOT_SERVING and answers UNAVAILABLE, retries, and serves once PostgreSQL
    is up, without a restart. `queen-broker migrate` alone fails fast."""

    @classmethod
    def setUpClass(cls):
        cls.pg = PrivatePg("pg-dbstart")
        cls.pg.stop()

    @classmethod
    def tearDownClass(cls):
        cls.pg.remove()

    def test_migrate_alone_fails_fast(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
        env["QUEEN_DATABASE_URL"] = self.pg.url
        t0 = time.monotonic()
        p = subprocess.run([os.environ["QN_BROKER"], "migrate"], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertIn("migrate failed", p.stdout + p.stderr)

    def test_serves_once_the_database_starts(self):
        b = Broker("product", db="e2e_db_faults_unused", env={
            "QUEEN_DATABASE_URL": self.pg.url, "QUEEN_DB_START_RETRY_MAX_MS": "300",
            "RETENTION_INTERVAL": "86400000", "QN_NO_WAIT_DB": "1"}).start()
        c = Client(b.channel(), timeout=10)
        try:
            t0 = time.monotonic()
            for name in ("", "queen.v1.QueueService", "queen.v1.AdminService"):
                st = c.h.Check(H.HealthCheckRequest(service=name), timeout=5).status
                self.assertEqual(st, H.HealthCheckResponse.NOT_SERVING, name)
            q = uniq("start")
            e = rpc_error(c.push, q, [b"early"])
            self.assertEqual(e.code(), UNAVAILABLE, e.details())
            e = rpc_error(c.pop, q)
            self.assertEqual(e.code(), UNAVAILABLE, e.details())
            # the first attempt failed and says so (later ones are logged at most every 30 s)
            wait_until(lambda: "(attempt 1; retrying" in b.log_text(), 30, what="the failed start attempt logged")
            self.pg.start_again()
            wait_until(lambda: c.health() == H.HealthCheckResponse.SERVING, 60, interval=0.05,
                       what="health SERVING once the database is up")
            elapsed = time.monotonic() - t0
            self.assertTrue(b.alive())
            r = c.push(q, [b"late"])
            self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
            self.assertEqual([m.payload for m in c.pop(q).messages], [b"late"])
            # retries every 300 ms at most, but logged at a sane rate
            attempts = b.log_text().count("(attempt ")
            self.assertLessEqual(attempts, elapsed / 30 + 2, "retries logged too often")
        finally:
            c.close()
            rc = b.stop()
            b.kill()
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    unittest.main()
