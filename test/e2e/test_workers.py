"""Several event loops in one broker (QUEEN_WORKERS, docs/broker.md "Workers").

  * connections are spread over the loops in turn: with N client connections
    every one of N loops serves one;
  * ordering per partition holds with clients on several loops, Push and
    PushSegments pipelined and mixed; every message is stored once;
  * a commit on one loop wakes a Pop parked on another;
  * GetStats sums every loop's counters, and /metrics every loop's
    connections and streams;
  * SIGTERM with calls in flight on every loop: each answers, the broker exits 0
    within QUEEN_SHUTDOWN_TIMEOUT_MS;
  * QUEEN_WORKERS=1 runs the single loop without threads or handoffs;
  * a bad QUEEN_WORKERS is refused at start with a clear message.
"""

import collections
import os
import signal
import subprocess
import threading
import re
import time
import unittest
import urllib.request

import grpc

from harness import Broker
from qsupport import Client, ConsumeStream, Q, accepted_stream, uniq, wait_until
from test_segments import frame, segment, stored_records

LOOPS = 4


def own_channel(broker):
    """A channel with a TCP connection of its own (no shared subchannel)."""
    return broker.channel(options=[("grpc.use_local_subchannel_pool", 1)])


def parked(broker):
    """queen_pops_parked of /metrics: every loop's parked pops (app_stats.h)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % broker.http_port, timeout=10) as r:
        m = re.search(r"^queen_pops_parked (\S+)$", r.read().decode(), re.M)
    return float(m.group(1)) if m else -1


def served_by(broker, n):
    """The loops that logged serving a connection, of 0..n-1."""
    text = broker.log_text()
    return {k for k in range(n) if "connection on worker=%d" % k in text}


class Hints(unittest.TestCase):
    """Two loops and a re-check of 60 s: a commit reaches the consumers of every
    group at once, wherever their loops are (the committing loop tells its own,
    the other loop the groups it did not tell)."""

    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_workers_hints",
                       env={"QUEEN_WORKERS": "2", "QUEEN_WAKE_RECHECK_MS": "60000"}).start()

    @classmethod
    def tearDownClass(cls):
        cls.b.stop()

    def streams(self, q, groups):
        cs = [Client(own_channel(self.b)) for _ in groups]
        for c in cs:
            c.health()  # connect now, in this order: one per loop
        ss = [ConsumeStream(c, Q.ConsumeSubscribe(queue=q, consumer_group=g, batch=10, credits=100,
                                                  auto_ack=True))
              for c, g in zip(cs, groups)]
        for s in ss:
            s.roundtrip()
        return cs, ss

    def received(self, s, n):
        got = []
        while len(got) < n:
            try:
                r = s.recv(20)  # well before a re-check
            except AssertionError as e:
                raise AssertionError("%s; received %r" % (e, got))
            self.assertEqual(r.WhichOneof("kind"), "batch", r)
            got += [m.payload for m in r.batch.messages]
        return got

    def test_each_group_hears_a_commit_on_either_loop(self):
        q = uniq("hint")
        cs, ss = self.streams(q, ["g1", "g2"])
        try:
            self.assertEqual(served_by(self.b, 2), {0, 1})
            want = [b"m%d" % i for i in range(8)]
            cs[0].push_items([Q.PushItem(queue=q, partition="p%d" % i, payload=m)
                              for i, m in enumerate(want)])
            for c, s, g in zip(cs, ss, ["g1", "g2"]):
                try:
                    self.assertEqual(sorted(self.received(s, len(want))), want)
                except AssertionError as e:
                    state = [(p.partition, p.committed, p.leased) for p in c.get_queue(q, group=g).partitions]
                    raise AssertionError("%s: %s; partitions %r" % (g, e, state))
        finally:
            for s in ss:
                s.cancel()
            for c in cs:
                c.close()

    def test_one_group_on_both_loops_gets_each_commit_once(self):
        q = uniq("hint")
        cs, ss = self.streams(q, ["g", "g"])
        try:
            want = [b"m%d" % i for i in range(8)]
            for i, m in enumerate(want):  # one commit at a time, owners of both loops
                cs[i % 2].push(q, [m], partition="p%d" % i)
            got = []
            deadline = time.monotonic() + 20  # well before a re-check
            while len(got) < len(want):
                self.assertLess(time.monotonic(), deadline, "only %r arrived" % got)
                for s in ss:
                    if not s._in.empty():
                        r = s.recv(1)
                        self.assertEqual(r.WhichOneof("kind"), "batch", r)
                        got += [m.payload for m in r.batch.messages]
                time.sleep(0.01)
            self.assertEqual(sorted(got), want)
            for s in ss:
                s.recv_none(0.5)
        finally:
            for s in ss:
                s.cancel()
            for c in cs:
                c.close()


class Workers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_workers",
                       env={"QUEEN_WORKERS": str(LOOPS), "QUEEN_SHUTDOWN_TIMEOUT_MS": "5000"}).start()

    @classmethod
    def tearDownClass(cls):
        if cls.b.alive():
            cls.b.stop()

    def clients(self, n):
        cs = [Client(own_channel(self.b)) for _ in range(n)]
        for c in cs:
            c.health()  # connect now, in this order
        return cs

    def test_1_connections_spread_over_every_loop(self):
        self.assertEqual(self.b.workers(), LOOPS)
        cs = self.clients(LOOPS)
        try:
            self.assertTrue(wait_until(lambda: served_by(self.b, LOOPS) == set(range(LOOPS))),
                            "loops that served a connection: %s" % sorted(served_by(self.b, LOOPS)))
        finally:
            for c in cs:
                c.close()

    def test_2_order_per_partition_with_clients_on_several_loops(self):
        """Each connection (one per loop) pipelines Push and PushSegments calls to
        one partition of its tenant's queue: the partition holds every
        connection's messages once, each connection's in its sending order, a
        segment's frames together."""
        q, rounds = uniq("wk"), 6
        answers = collections.defaultdict(list)
        lock = threading.Lock()
        cs = self.clients(LOOPS)
        errors = []

        def worker(k):
            c = cs[k]
            try:
                for r in range(rounds):
                    calls = []
                    for j in range(4):
                        tag = "c%d-%03d" % (k, r * 4 + j)
                        if j % 2 == 0:
                            req = Q.PushRequest(items=[Q.PushItem(queue=q, partition="p",
                                                                  payload=tag.encode(),
                                                                  transaction_id=tag)])
                            calls.append(("push", [tag], c.q.Push.future(req, timeout=60)))
                        else:
                            txns = [tag + "a", tag + "b"]
                            blob = segment([frame(t.encode(), t.encode()) for t in txns])
                            req = Q.PushSegmentsRequest(segments=[
                                Q.RawSegment(queue=q, partition="p", segment=blob)])
                            calls.append(("seg", txns, c.q.PushSegments.future(req, timeout=60)))
                    for kind, txns, fut in calls:
                        x = fut.result().results[0]
                        with lock:
                            for t in txns:
                                answers[t].append(x.status)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(LOOPS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        try:
            self.assertEqual(errors, [])
            self.assertEqual(served_by(self.b, LOOPS), set(range(LOOPS)))
            recs = stored_records(cs[0], q, "p")
        finally:
            for c in cs:
                c.close()
        counts = collections.Counter(m.transaction_id for m in recs)
        self.assertEqual([t for t, n in counts.items() if n != 1], [], "stored more than once")
        self.assertEqual(len(recs), LOOPS * rounds * 6)
        self.assertTrue(all(v == [Q.PUSH_STATUS_QUEUED] for v in answers.values()))
        at = {m.transaction_id: m.offset for m in recs}
        for k in range(LOOPS):
            mine = [m.transaction_id for m in recs if m.transaction_id.startswith("c%d-" % k)]
            self.assertEqual(mine, sorted(mine), "connection %d: order broken" % k)
            for i, t in enumerate(mine):
                if t.endswith("a"):
                    self.assertEqual(at[mine[i + 1]], at[t] + 1)

    def test_3_commit_on_one_loop_wakes_a_pop_parked_on_another(self):
        q = uniq("wake")
        a, b = self.clients(2)  # two loops
        try:
            a.push(q, [b"first"], partition="p")  # the queue exists
            got = {}

            def park():
                t0 = time.monotonic()
                r = b.pop(q, consumer_group="g", wait_ms=20000, batch=10, timeout=30)
                got["r"], got["took"] = r, time.monotonic() - t0

            # drain what is there (acked: the partition's lease is free again), then park
            self.assertEqual([m.payload for m in b.pop(q, consumer_group="g", batch=10,
                                                        auto_ack=True).messages],
                             [b"first"])
            base = parked(self.b)
            th = threading.Thread(target=park)
            th.start()
            # parked on b's loop (the gauge sums every loop's): then commit on a's
            self.assertTrue(wait_until(lambda: parked(self.b) >= base + 1), "the pop never parked")
            a.push(q, [b"second"], partition="p")
            th.join(30)
            self.assertFalse(th.is_alive())
            self.assertEqual([m.payload for m in got["r"].messages], [b"second"])
            self.assertLess(got["took"], 15, "the parked pop waited for its deadline")
            self.assertIn("connection on worker=", self.b.log_text())
        finally:
            a.close()
            b.close()

    def test_4_stats_sum_every_loop(self):
        q = uniq("sum")
        cs = self.clients(LOOPS)
        try:
            before = cs[0].stats().pushed
            for k, c in enumerate(cs):
                c.push(q, [b"x%d" % k], partition="p%d" % k)
            # each loop publishes its counters within QN_APP_STATS_PUBLISH_MS
            for c in cs:
                self.assertTrue(wait_until(lambda: c.stats().pushed >= before + LOOPS),
                                "GetStats on one loop misses the others' pushes")
        finally:
            for c in cs:
                c.close()

    def test_5_metrics_count_every_loops_connections_and_streams(self):
        """/metrics is served by worker 0; its connection, stream and byte series
        add what the other loops last published (docs/metrics.md)."""
        def series(name):
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.b.http_port,
                                        timeout=10) as r:
                m = re.search(r"^%s (\S+)$" % re.escape(name), r.read().decode(), re.M)
            return float(m.group(1)) if m else -1

        conns = 'queen_connections_open{listener="grpc"}'
        streams = "queen_rpc_streams_open"
        base = series(streams)
        cs = self.clients(LOOPS)  # one per loop
        ss = []
        try:
            self.assertTrue(wait_until(lambda: series(conns) >= LOOPS),
                            "queen_connections_open counts %s of %d connections"
                            % (series(conns), LOOPS))
            q = uniq("streams")
            ss = [ConsumeStream(c, subscribe=Q.ConsumeSubscribe(queue=q, consumer_group="g"))
                  for c in cs]
            self.assertTrue(wait_until(lambda: series(streams) == base + LOOPS),
                            "queen_rpc_streams_open is %s with %d streams open on %d loops"
                            % (series(streams), LOOPS, LOOPS))
        finally:
            for st in ss:
                st.cancel()
            for c in cs:
                c.close()
        self.assertTrue(wait_until(lambda: series(streams) == base),
                        "queen_rpc_streams_open stays at %s after the streams ended"
                        % series(streams))


class ProcessLimits(unittest.TestCase):
    """QUEEN_MAX_STREAMS and QUEEN_MAX_PARKED_POPS are the process's, whatever
    loop a connection lands on (two loops, limits of 2)."""

    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_workers_limits",
                       env={"QUEEN_WORKERS": "2", "QUEEN_MAX_STREAMS": "2",
                            "QUEEN_MAX_PARKED_POPS": "2", "QUEEN_WAKE_RECHECK_MS": "60000"}).start()

    @classmethod
    def tearDownClass(cls):
        rc = cls.b.stop()
        assert rc == 0, cls.b.log_text()

    def two_loops(self):
        cs = [Client(own_channel(self.b)) for _ in range(2)]
        for c in cs:
            c.health()
        self.assertTrue(wait_until(lambda: served_by(self.b, 2) == {0, 1}), "one loop served both")
        return cs

    def test_streams(self):
        a, b = self.two_loops()
        q = uniq("slim")

        def stream(c):
            return ConsumeStream(c, subscribe=Q.ConsumeSubscribe(queue=q, consumer_group="g"))
        s1, s2 = stream(a), stream(b)
        try:
            s1.roundtrip()
            s2.roundtrip()  # one on each loop: the process is at its limit
            for c in (a, b):
                s3 = stream(c)
                self.assertEqual(s3.wait_end(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertIn("QUEEN_MAX_STREAMS", s3.error.details())
            s1.cancel()  # a place freed on one loop is taken on the other
            wait_until(lambda: accepted_stream(b, Q.ConsumeSubscribe(queue=q, consumer_group="g")),
                       10, what="a stream place").cancel()
        finally:
            s1.cancel()
            s2.cancel()
            a.close()
            b.close()

    def test_parked_pops(self):
        a, b = self.two_loops()
        q = uniq("plim")
        a.push(q, [b"x"], partition="p0")  # the queue exists
        a.pop(q, partition="p0", auto_ack=True)
        base = parked(self.b)
        done = {}

        def park(c, k):
            done[k] = c.pop(q, partition="p%d" % k, wait_ms=20000, timeout=30)
        ths = [threading.Thread(target=park, args=(c, k)) for k, c in enumerate((a, b))]
        try:
            for t in ths:
                t.start()
            self.assertTrue(wait_until(lambda: parked(self.b) >= base + 2), "the pops never parked")
            for c in (a, b):
                with self.assertRaises(grpc.RpcError) as e:
                    c.pop(q, partition="p9", wait_ms=20000, timeout=30)
                self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertIn("QUEEN_MAX_PARKED_POPS", e.exception.details())
            b.push_items([Q.PushItem(queue=q, partition="p%d" % k, payload=b"y") for k in range(2)])
            for t in ths:
                t.join(30)
            self.assertEqual([len(done[k].messages) for k in range(2)], [1, 1])
        finally:
            for t in ths:
                t.join(30)
            a.close()
            b.close()


class Shutdown(unittest.TestCase):
    def test_sigterm_with_calls_in_flight_on_every_loop(self):
        b = Broker("product", db="e2e_workers_stop",
                   env={"QUEEN_WORKERS": "2", "QUEEN_SHUTDOWN_TIMEOUT_MS": "3000"}).start()
        cs = [Client(own_channel(b)) for _ in range(2)]
        try:
            q = uniq("stop")
            cs[0].push(q, [b"m"], partition="p")
            cs[0].pop(q, consumer_group="g", batch=10)
            futs = [c.q.Pop.future(Q.PopRequest(queue=q, consumer_group="g%d" % k, wait_ms=60000,
                                                batch=10), timeout=60)
                    for k, c in enumerate(cs)]
            self.assertTrue(wait_until(lambda: served_by(b, 2) == {0, 1}))
            # in flight on both loops: parked, or already answered ("m" for a fresh group)
            self.assertTrue(wait_until(lambda: parked(b) >= 2 or any(f.done() for f in futs)))
            t0 = time.monotonic()
            rc = b.stop(signal.SIGTERM, timeout=20)
            took = time.monotonic() - t0
            self.assertEqual(rc, 0, b.log_text()[-3000:])
            self.assertLess(took, 10)
            for f in futs:
                try:
                    f.result(timeout=5)
                except grpc.RpcError as e:
                    self.assertIn(e.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED))
            self.assertIn("shutdown complete", b.log_text())
        finally:
            for c in cs:
                c.close()
            if b.alive():
                b.kill()


class OneLoop(unittest.TestCase):
    def test_workers_1_is_the_single_loop(self):
        b = Broker("product", db="e2e_workers_one", env={"QUEEN_WORKERS": "1"}).start()
        try:
            cs = [Client(own_channel(b)) for _ in range(2)]
            for c in cs:
                c.push(uniq("one"), [b"x"])
                c.close()
            self.assertEqual(b.workers(), 1)
            self.assertNotIn("connection on worker=", b.log_text())
        finally:
            self.assertEqual(b.stop(), 0)

    def test_bad_value_is_refused_at_start(self):
        env = dict((k, v) for k, v in os.environ.items() if not k.startswith("QUEEN_"))
        env.update({"QUEEN_WORKERS": "-1", "QUEEN_DATABASE_URL": "postgresql:///none"})
        p = subprocess.run([os.environ["QN_BROKER"]], env=env, capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"QUEEN_WORKERS", p.stderr)


if __name__ == "__main__":
    unittest.main()
