"""The HTTP side port of the product broker against a real PostgreSQL: /metrics read
with the Prometheus project's own parser (Debian's python3-prometheus-client), its
counters moving as calls push, pop, ack, fail and park, histograms consistent, the
per-queue series, their bound and the stats walk behind another session's lock;
/readyz with the database up, down and back; JSON log lines; gRPC-Web calls of the
queen.v1 services."""

import concurrent.futures
import json
import os
import re
import time
import unittest

from prometheus_client.parser import text_string_to_metric_families

from harness import SOURCE, Broker
from qsupport import (A, C, Client, PrivatePg, Q, fixture_db_url, psql, psql_holding, rpc_error, uniq,
                      wait_until)
from webclient import Http, get, grpc_web, message_of, status_of

broker = None
pool = None
QUEUE_SVC = ("queen.v1.QueueService",)


def setUpModule():
    global broker, pool
    broker = Broker("product", db="e2e_sideport_metrics", env={
        "QUEEN_METRICS_REFRESH_MS": "1000", "QUEEN_LOG_FORMAT": "json"}).start()
    pool = concurrent.futures.ThreadPoolExecutor(2)


def tearDownModule():
    pool.shutdown()
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


# ------------------------------------------------------------------ scraping

class Scrape:
    """One /metrics response: the parser's families, samples by (name, labels), TYPE lines."""

    def __init__(self, port):
        r = get(port, "/metrics")
        assert r.status == 200, r
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8", r.headers
        self.text = r.body.decode("utf-8")
        self.families = list(text_string_to_metric_families(self.text))  # raises if it does not parse
        self.samples = {}
        for fam in self.families:
            for s in fam.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value
        self.types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", self.text, re.M))

    def get(self, name, **labels):
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def series(self, name):
        """{labels-dict-as-frozenset: value} of one sample name."""
        return {k[1]: v for k, v in self.samples.items() if k[0] == name}


def scrape(b=None):
    return Scrape((b or broker).http_port)


def settled(before, **least):
    """The first scrape in which every named counter moved by at least the
    given amount since `before`. With several event loops the other loops'
    counters reach /metrics through snapshots at most 100 ms old
    (docs/broker.md, "Loops"): wait for them, then assert exact values."""
    def moved():
        s = scrape()
        return all(s.get(k) - before.get(k) >= v for k, v in least.items()) and s
    return wait_until(moved, timeout=10, what="the counters to reach /metrics: %s" % least)


def rpc(s, method, code, service="queen.v1.QueueService"):
    return s.get("queen_rpc_requests_total", service=service, method=method, code=code)


def documented():
    """(name, type, labels) of every metric docs/metrics.md lists."""
    out = []
    with open(os.path.join(SOURCE, "docs", "metrics.md")) as f:
        for line in f:
            m = re.match(r"^\| `(queen_[a-z0-9_]+)` \| ([CGH]) \| ([^|]*)\|", line)
            if m:
                labels = tuple(re.findall(r"`([a-z_]+)`", m.group(3)))
                out.append((m.group(1), {"C": "counter", "G": "gauge", "H": "histogram"}[m.group(2)], labels))
    return out


def check_histograms(test, s):
    """Every histogram series: buckets cumulative in le order, +Inf == _count, _sum >= 0."""
    checked = 0
    for fam in s.families:
        if fam.type != "histogram":
            continue
        by_series = {}
        for smp in fam.samples:
            key = frozenset((k, v) for k, v in smp.labels.items() if k != "le")
            by_series.setdefault(key, {"b": [], "sum": None, "count": None})
            if smp.name.endswith("_bucket"):
                by_series[key]["b"].append((float(smp.labels["le"]), smp.value))
            elif smp.name.endswith("_sum"):
                by_series[key]["sum"] = smp.value
            elif smp.name.endswith("_count"):
                by_series[key]["count"] = smp.value
        for key, h in by_series.items():
            b = sorted(h["b"])
            test.assertEqual(b[-1][0], float("inf"), (fam.name, key))
            for (_, lo), (_, hi) in zip(b, b[1:]):
                test.assertLessEqual(lo, hi, (fam.name, key, b))
            test.assertEqual(b[-1][1], h["count"], (fam.name, key))
            test.assertGreaterEqual(h["sum"], 0, (fam.name, key))
            checked += 1
    return checked


class Metrics(unittest.TestCase):
    def setUp(self):
        self.c = Client(broker.channel())

    def tearDown(self):
        self.c.close()

    def test_parses_and_every_documented_family_is_exposed(self):
        s = scrape()
        docs = documented()
        self.assertGreater(len(docs), 40)
        for name, typ, _ in docs:
            self.assertEqual(s.types.get(name), typ, name)

    def test_counters_move_with_push_pop_ack_and_failures(self):
        q = uniq("mq")
        before = scrape()
        payloads = [bytes([65 + i]) * 100 for i in range(10)]
        self.c.push(q, payloads)
        p = self.c.pop(q, consumer_group="g", batch=4)
        self.assertEqual(len(p.messages), 4)
        self.c.ack([Q.AckItem(partition_id=p.messages[-1].partition_id, offset=p.messages[-1].offset,
                              lease_id=p.lease_id)], group="g")
        rpc_error(self.c.get_queue, "no-such-queue-" + q)
        rpc_error(self.c.push, "", [b"x"])
        after = settled(before, queen_push_messages_total=10, queen_pop_messages_total=4,
                        queen_push_segment_messages_sum=10)

        def d(name, **labels):
            return after.get(name, **labels) - before.get(name, **labels)

        self.assertEqual(d("queen_push_messages_total"), 10)
        self.assertEqual(d("queen_push_bytes_total"), 1000)
        self.assertEqual(d("queen_pop_messages_total"), 4)
        self.assertEqual(d("queen_pop_bytes_total"), 400)
        self.assertEqual(rpc(after, "Push", "OK") - rpc(before, "Push", "OK"), 1)
        self.assertEqual(rpc(after, "Pop", "OK") - rpc(before, "Pop", "OK"), 1)
        self.assertEqual(rpc(after, "Ack", "OK") - rpc(before, "Ack", "OK"), 1)
        self.assertEqual(rpc(after, "Push", "INVALID_ARGUMENT") - rpc(before, "Push", "INVALID_ARGUMENT"), 1)
        self.assertEqual(rpc(after, "GetQueue", "NOT_FOUND", "queen.v1.AdminService")
                         - rpc(before, "GetQueue", "NOT_FOUND", "queen.v1.AdminService"), 1)
        commits = d("queen_push_commits_total")
        segs = d("queen_push_segments_total")
        self.assertGreaterEqual(commits, 1)
        self.assertGreaterEqual(segs, commits)
        self.assertEqual(d("queen_push_segment_messages_count"), segs)
        self.assertEqual(d("queen_push_segment_messages_sum"), 10)
        self.assertEqual(d("queen_push_segment_bytes_count"), segs)
        self.assertGreater(d("queen_push_segment_bytes_sum"), 0)
        dur = lambda s: s.get("queen_rpc_duration_seconds_count", service="queen.v1.QueueService",  # noqa: E731
                              method="Push")
        self.assertEqual(dur(after) - dur(before), 2)  # the OK push and the refused one
        self.assertGreater(d("queen_db_calls_total"), 0)
        self.assertGreaterEqual(after.get("queen_db_connections_up"), 1)
        self.assertGreater(check_histograms(self, after), 3)

    def test_large_segments_are_packed_off_the_loop(self):
        # a segment of QUEEN_OFFLOAD_MIN_BYTES (256 KiB) or more is compressed by
        # an offload thread: counted, and stored exactly as sent
        q = uniq("moff")
        payloads = [os.urandom(500) + (b"%06d" % i) * 84 for i in range(300)]  # ~300 KB
        before = scrape()
        self.c.push(q, payloads)
        self.c.push(q, [b"small"])
        got = []
        while len(got) < 301:
            p = self.c.pop(q, consumer_group="g", batch=1000, auto_ack=True)
            self.assertGreater(len(p.messages), 0)
            got += [m.payload for m in p.messages]
        self.assertEqual(got, payloads + [b"small"])
        after = settled(before, queen_push_messages_total=301)
        self.assertEqual(after.get("queen_push_segments_offloaded_total")
                         - before.get("queen_push_segments_offloaded_total"), 1)
        # one segment for a pool of 8 places: none refused
        self.assertIn(("queen_offload_refused_total", frozenset()), after.samples)
        self.assertEqual(after.get("queen_offload_refused_total")
                         - before.get("queen_offload_refused_total"), 0)

    def test_large_batches_are_decompressed_off_the_loop(self):
        # a Pop, a Consume batch and a Fetch whose segments decompress to
        # QUEEN_OFFLOAD_MIN_BYTES (256 KiB) or more are decompressed by an offload
        # thread: counted, and delivered exactly as pushed; a raw-segment pop and a
        # small batch are not
        from qsupport import ConsumeStream
        q = uniq("mdec")
        payloads = [os.urandom(500) + (b"%06d" % i) * 84 for i in range(300)]  # ~300 KB
        self.c.push(q, payloads)
        self.c.push(q, [b"small"])
        before = scrape()
        # a raw-segment pop of the large segment: never decompressed here
        r = self.c.pop(q, consumer_group="raw", batch=1000, auto_ack=True, raw_segments=True)
        self.assertGreater(len(r.segments), 0)
        everything = payloads + [b"small"]
        got, large = [], 0  # large: batches holding part of the large segment
        while len(got) < 301:
            p = self.c.pop(q, consumer_group="g", batch=1000, auto_ack=True)
            self.assertGreater(len(p.messages), 0)
            large += p.messages[0].offset < 300
            got += [m.payload for m in p.messages]
        self.assertEqual(got, everything)
        f = self.c.fetch(q, offset=0, max_bytes=4 * 1024 * 1024)
        self.assertEqual([m.payload for m in f.records], everything[:len(f.records)])
        self.assertGreaterEqual(len(f.records), 300)
        s = ConsumeStream(self.c, subscribe=Q.ConsumeSubscribe(
            queue=q, consumer_group="s", credits=1, batch=1000, auto_ack=True))
        try:
            b = [m.payload for m in s.recv().batch.messages]
            self.assertEqual(b, everything[:len(b)])
            self.assertGreater(len(b), 0)
        finally:
            s.close()
        want = large + 2
        after = settled(before, queen_read_batches_offloaded_total=want)
        self.assertEqual(after.get("queen_read_batches_offloaded_total")
                         - before.get("queen_read_batches_offloaded_total"), want)
        # each of them decompressed the large segment once (and maybe "small")
        raw = sum(len(x) for x in payloads)
        moved = (after.get("queen_read_bytes_offloaded_total")
                 - before.get("queen_read_bytes_offloaded_total"))
        self.assertGreaterEqual(moved, want * raw)
        self.assertLess(moved, (want + 1) * raw)
        self.assertEqual(after.get("queen_offload_refused_total")
                         - before.get("queen_offload_refused_total"), 0)

    def test_large_reads_cut_short_around_the_decompression(self):
        # Deadlines (grpc-timeout, raw HTTP/2 so that the broker itself cuts
        # the call) swept from 0.2 to 12 ms across the database call and the
        # off-loop decompression of a 2 MB batch. A Pop either delivers the
        # batch whole or answers DEADLINE_EXCEEDED; a cut one's lease is given
        # back once its result (decompressed or not) is in, so the group's
        # next Pop gets the whole batch long before the lease (60 s) would
        # expire. A Fetch cut meanwhile leaves nothing behind, and the broker
        # keeps answering.
        from harness import grpc_frame, grpc_message, grpc_status
        q = uniq("mcut")
        payloads = [os.urandom(100) + (b"%06d" % i) * 320 for i in range(1000)]  # ~2 MB raw
        for k in range(0, 1000, 250):
            self.c.push(q, payloads[k:k + 250])
        before = scrape()
        cut, whole, h = [], 0, broker.raw()
        try:
            for i in range(60):
                g = "cut%d" % i
                body = grpc_frame(Q.PopRequest(queue=q, consumer_group=g, batch=1000).SerializeToString())
                sid = h.request("/queen.v1.QueueService/Pop", body,
                                headers=[("grpc-timeout", "%du" % (200 + 200 * i))])
                res = h.wait(sid, timeout=10)
                code = grpc_status(res)
                self.assertIn(code, (0, 4), grpc_message(res))
                if code == 4:
                    cut.append(g)
                    continue
                r = Q.PopResponse.FromString(res.data[5:])
                self.assertEqual([m.payload for m in r.messages], payloads)
                whole += 1
            fetched = 0
            for i in range(30):
                body = grpc_frame(Q.FetchRequest(entries=[Q.FetchEntry(
                    queue=q, max_bytes=4 << 20)]).SerializeToString())
                sid = h.request("/queen.v1.QueueService/Fetch", body,
                                headers=[("grpc-timeout", "%du" % (200 + 400 * i))])
                res = h.wait(sid, timeout=10)
                self.assertIn(grpc_status(res), (0, 4))
                if grpc_status(res) == 0:
                    recs = Q.FetchResponse.FromString(res.data[5:]).results[0].records
                    self.assertEqual([m.payload for m in recs], payloads)
                    fetched += 1
        finally:
            h.close()
        # the sweep reached past the whole call: both outcomes happened
        self.assertGreater(len(cut), 0)
        self.assertGreater(whole + fetched, 0)
        for g in cut:
            r = wait_until(lambda: (lambda p: len(p.messages) > 0 and p)(
                self.c.pop(q, consumer_group=g, batch=1000)), 10,
                what="group %s to get the batch its cut-short pop leased" % g)
            self.assertEqual([m.payload for m in r.messages], payloads, g)
        # every delivered batch was decompressed by the offload threads, or by
        # the loop when their queue was full: the cut pops' work goes on after
        # their answer, so several decodes overlap here
        delivered = whole + fetched + len(cut)

        def both(s):
            return (s.get("queen_read_batches_offloaded_total")
                    + s.get("queen_offload_refused_total"))
        after = wait_until(lambda: (lambda s: both(s) - both(before) >= delivered and s)(scrape()),
                           timeout=10, what="the decodes to reach /metrics")
        self.assertGreaterEqual(both(after) - both(before), delivered)
        self.assertEqual(len(self.c.pop(q, consumer_group="after", batch=1000).messages), 1000)

    def test_push_segments_and_raw_pops_count(self):
        # PushSegments bypasses fusion: its messages and payload bytes count all
        # the same; a raw-segment pop counts its messages, not bytes it never decodes
        from test_segments import frame as seg_frame, segment, uuid7
        q = uniq("mseg")
        seg = segment([seg_frame(b"p" * 50, b"seg-%d" % i, uuid7()) for i in range(3)])
        before = scrape()
        r = self.c.q.PushSegments(Q.PushSegmentsRequest(segments=[Q.RawSegment(queue=q, segment=seg)]),
                                  timeout=15)
        self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
        p = self.c.pop(q, consumer_group="g", batch=10, raw_segments=True)
        self.assertEqual(sum(s.count for s in p.segments), 3)
        after = settled(before, queen_push_messages_total=3, queen_pop_messages_total=3)

        def d(name):
            return after.get(name) - before.get(name)

        self.assertEqual(d("queen_push_messages_total"), 3)
        self.assertEqual(d("queen_push_bytes_total"), 150)
        self.assertEqual(d("queen_pop_messages_total"), 3)
        self.assertEqual(d("queen_pop_bytes_total"), 0)

    def test_dedup_cache_counts(self):
        q = uniq("dq")
        before = scrape()
        self.c.push(q, [b"a", b"b"], txns=["t-a", "t-b"])
        self.c.push(q, [b"a", b"c"], txns=["t-a", "t-c"])
        after = settled(before, queen_push_messages_total=3, queen_push_duplicates_total=1)
        looked = lambda s: (s.get("queen_dedup_cache_hits_total")  # noqa: E731
                            + s.get("queen_dedup_cache_misses_total"))
        if looked(after) - looked(before) < 2:  # the dedup counters ride the 100 ms snapshot
            after = wait_until(lambda: (lambda s: looked(s) - looked(before) >= 2 and s)(scrape()),
                               timeout=10, what="the dedup lookups to reach /metrics")
        looked = (after.get("queen_dedup_cache_hits_total") + after.get("queen_dedup_cache_misses_total")
                  - before.get("queen_dedup_cache_hits_total") - before.get("queen_dedup_cache_misses_total"))
        self.assertGreaterEqual(looked, 2)  # one lookup per segment with client transaction ids
        self.assertEqual(after.get("queen_push_duplicates_total") - before.get("queen_push_duplicates_total"), 1)
        self.assertEqual(after.get("queen_push_messages_total") - before.get("queen_push_messages_total"), 3)

    def test_parked_pops_gauge(self):
        q = uniq("pq")
        base = scrape().get("queen_pops_parked")
        fut = pool.submit(self.c.pop, q, consumer_group="w", wait_ms=20000, timeout=30)
        wait_until(lambda: scrape().get("queen_pops_parked") == base + 1, what="the pop to park")
        self.c.push(q, [b"wake"])
        self.assertEqual(fut.result(15).messages[0].payload, b"wake")
        wait_until(lambda: scrape().get("queen_pops_parked") == base, what="the pop to leave")

    def test_per_queue_depth_and_lag(self):
        q = uniq("lq")
        self.c.push(q, [b"m%d" % i for i in range(10)])
        p = self.c.pop(q, consumer_group="g1", batch=4)
        self.c.ack([Q.AckItem(partition_id=p.messages[-1].partition_id, offset=p.messages[-1].offset,
                              lease_id=p.lease_id)], group="g1")
        t0 = time.time()

        def refreshed():
            s = scrape()
            return (s.get("queen_queue_stats_refresh_timestamp_seconds") > t0
                    and s.get("queen_queue_depth_messages", queue=q) == 6) and s

        s = wait_until(refreshed, timeout=20, what="a refresh with the new figures")
        self.assertEqual(s.get("queen_queue_messages", queue=q), 10)
        self.assertEqual(s.get("queen_consumer_group_lag_messages", queue=q, group="g1"), 6)
        self.assertEqual(s.get("queen_queue_dead_letters", queue=q), 0)
        self.assertEqual(s.get("queen_queue_stats_omitted_queues"), 0)
        self.assertGreaterEqual(s.get("queen_queue_stats_queues"), 1)

    def test_a_walk_of_several_steps_publishes_whole_figures(self):
        # the stats walk takes 1,000 partitions a step, each step followed by a
        # pause of twenty times its duration; 2,500 partitions take three steps,
        # and a pass publishes its figures once all three are in
        q = uniq("walk")
        items = [Q.PushItem(queue=q, partition="p%d" % i, payload=b"w") for i in range(2500)]
        for k in range(0, 2500, 500):
            r = self.c.q.Push(Q.PushRequest(items=items[k:k + 500]), timeout=30)
            self.assertEqual({x.status for x in r.results}, {Q.PUSH_STATUS_QUEUED})
        s = wait_until(lambda: (lambda s: s.get("queen_queue_messages", queue=q) == 2500 and s)(scrape()),
                       timeout=20, what="the queue's figures after a pass of three steps")
        self.assertEqual(s.get("queen_queue_depth_messages", queue=q), 2500)

    def test_queue_deleted_loses_its_series(self):
        q = uniq("gone")
        self.c.push(q, [b"x"])
        wait_until(lambda: scrape().get("queen_queue_messages", queue=q) == 1, timeout=20, what="the queue's series")
        self.c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=15)
        wait_until(lambda: (frozenset({("queue", q)}) not in scrape().series("queen_queue_messages")),
                   timeout=20, what="the series to go")


class Bound(unittest.TestCase):
    def test_deepest_queues_and_largest_lags_only(self):
        env = {"QUEEN_METRICS_REFRESH_MS": "1000", "QUEEN_METRICS_MAX_QUEUES": "2",
               "QUEEN_METRICS_MAX_GROUPS": "1"}
        with Broker("product", db="e2e_sideport_bound", env=env) as b:
            c = Client(b.channel())
            c.push("qa", [b"a"] * 3)
            c.push("qb", [b"b"] * 5)
            for group, n in (("g1", 1), ("g2", 2)):
                p = c.pop("qb", consumer_group=group, batch=n)
                c.ack([Q.AckItem(partition_id=p.messages[-1].partition_id, offset=p.messages[-1].offset,
                                 lease_id=p.lease_id)], group=group)
            # qc last: a refresh that counts three queues publishes a pass of the
            # stats walk that read the partitions after every write above (on a
            # loaded machine a pass can lag a refresh by more than a period)
            c.push("qc", [b"c"] * 1)
            s = wait_until(lambda: (lambda s: s.get("queen_queue_stats_queues") == 3 and s)(scrape(b)),
                           timeout=20, what="a refresh of a pass that met all three queues")
            depth = {dict(k)["queue"]: v for k, v in s.series("queen_queue_depth_messages").items()}
            self.assertEqual(depth, {"qb": 4, "qa": 3})  # qb: its slowest group read 1 of 5
            lag = {(dict(k)["queue"], dict(k)["group"]): v
                   for k, v in s.series("queen_consumer_group_lag_messages").items()}
            self.assertEqual(lag, {("qb", "g1"): 4})
            self.assertEqual(s.get("queen_queue_stats_queues"), 3)
            self.assertEqual(s.get("queen_queue_stats_omitted_queues"), 1)
            self.assertEqual(s.get("queen_queue_stats_omitted_groups"), 1)
            c.close()


class WalkLock(unittest.TestCase):
    def test_a_walk_held_by_another_session_resumes_when_it_lets_go(self):
        # stats_step_v1 answers -1 while another session holds the walk's
        # advisory lock (another broker's step, here a psql transaction): the
        # broker keeps its last figures, keeps refreshing, and takes the walk
        # up again once the lock is free
        with Broker("product", db="e2e_sideport_walklock", env={"QUEEN_METRICS_REFRESH_MS": "1000"}) as b:
            c = Client(b.channel())
            c.push("before", [b"x"] * 2)
            wait_until(lambda: scrape(b).get("queen_queue_messages", queue="before") == 2, timeout=20,
                       what="the first queue's figures")
            with psql_holding(fixture_db_url("e2e_sideport_walklock"), "SELECT pg_advisory_xact_lock(737003)"):
                c.push("during", [b"y"] * 3)
                # two refreshes that began after the push: still the old pass
                t0 = time.time()
                s = wait_until(lambda: (lambda s: s.get("queen_queue_stats_refresh_timestamp_seconds") > t0 + 1.2
                                        and s)(scrape(b)), timeout=20, what="two refreshes under the lock")
                self.assertEqual(s.get("queen_queue_messages", queue="before"), 2)
                self.assertNotIn(frozenset({("queue", "during")}), s.series("queen_queue_messages"))
            s = wait_until(lambda: (lambda s: s.get("queen_queue_messages", queue="during") == 3 and s)(scrape(b)),
                           timeout=20, what="the walk to resume once the lock is free")
            self.assertEqual(s.get("queen_queue_messages", queue="before"), 2)
            c.close()

    def test_a_stuck_walk_step_takes_no_connection_from_the_calls(self):
        # One loop whose pool has a single connection for reads (2, one kept
        # for writes). A step of the walk stuck on a lock waits on the walk's
        # own session: a Pop and its Ack still answer at once. (When the walk
        # shared the pool, the Pop queued behind the stuck step until the
        # step's deadline, one refresh period: longer than the Pop's.)
        db = "e2e_sideport_walkstuck"
        with Broker("product", db=db, env={"QUEEN_METRICS_REFRESH_MS": "15000", "QUEEN_WORKERS": "1",
                                           "QUEEN_DB_POOL_SIZE": "2", "QUEEN_DB_WRITE_RESERVE": "1"}) as b:
            c = Client(b.channel())
            c.push("stuck", [b"m1", b"m2"])
            url = fixture_db_url(db)
            with psql_holding(url, "LOCK TABLE qn.stats_sweep IN ACCESS EXCLUSIVE MODE"):
                wait_until(lambda: psql(url, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                             " AND query LIKE '%stats_step%'") == "1",
                           timeout=20, what="a step of the walk to wait on the lock")
                p = c.pop("stuck", batch=10, timeout=5)
                self.assertEqual([m.payload for m in p.messages], [b"m1", b"m2"])
                self.assertEqual(c.ack_offset(p.messages[-1]).outcome, Q.ACK_OUTCOME_APPLIED)
                c.push("later", [b"z"] * 3, timeout=5)
            # the stuck step went on once the lock was gone: a pass meets the queue made under it
            wait_until(lambda: scrape(b).get("queen_queue_messages", queue="later") == 3, timeout=45,
                       what="the walk to go on after the lock")
            c.close()


class Readiness(unittest.TestCase):
    def test_readyz_follows_the_database(self):
        pg = PrivatePg("pg-sideport")
        try:
            with Broker("product", db="e2e_sideport_unused", env={
                    "QUEEN_DATABASE_URL": pg.url, "QUEEN_STMT_TIMEOUT_MS": "5000",
                    "QUEEN_METRICS_REFRESH_MS": "1000"}) as b:
                h = lambda path: get(b.http_port, path)  # noqa: E731
                self.assertEqual(h("/readyz").status, 200)
                self.assertEqual(scrape(b).get("queen_ready"), 1)
                pg.stop()
                wait_until(lambda: h("/readyz").status == 503, timeout=30, what="/readyz to say 503")
                r = h("/readyz")
                self.assertEqual(r.body, b"not ready: the database is not available\n")
                self.assertEqual(h("/healthz").status, 200)  # the process itself is fine
                s = scrape(b)
                self.assertEqual(s.get("queen_ready"), 0)
                # the other loops' pools reach the sum through snapshots (<= 100 ms old)
                wait_until(lambda: scrape(b).get("queen_db_connections_up") == 0, timeout=10,
                           what="every loop's pool to count no connection up")
                fails = s.get("queen_queue_stats_refresh_failures_total")
                wait_until(lambda: scrape(b).get("queen_queue_stats_refresh_failures_total") > fails,
                           timeout=20, what="a failed refresh to be counted")
                pg.start_again()
                wait_until(lambda: h("/readyz").status == 200, timeout=60, what="/readyz to recover")
                self.assertEqual(scrape(b).get("queen_ready"), 1)
        finally:
            pg.remove()


class GrpcWeb(unittest.TestCase):
    def test_queen_services_over_grpc_web(self):
        q = uniq("wq")
        push = Q.PushRequest(items=[Q.PushItem(queue=q, payload=b"from the web", transaction_id="w1")])
        r = grpc_web(broker.http_port, "/queen.v1.QueueService/Push", push.SerializeToString())
        self.assertEqual(status_of(r), 0)
        res = Q.PushResponse.FromString(r.messages[0]).results[0]
        self.assertEqual((res.status, res.offset), (Q.PUSH_STATUS_QUEUED, 0))
        c = Client(broker.channel())
        self.assertEqual(c.pop(q).messages[0].payload, b"from the web")
        c.close()
        r = grpc_web(broker.http_port, "/queen.v1.AdminService/GetStats",
                     A.GetStatsRequest(queue=q).SerializeToString())
        stats = A.GetStatsResponse.FromString(r.messages[0])
        self.assertEqual(stats.queues[0].messages, 1)
        # validation errors arrive as statuses in the trailer frame
        r = grpc_web(broker.http_port, "/queen.v1.AdminService/GetQueue",
                     A.GetQueueRequest(queue="no-such-" + q).SerializeToString())
        self.assertEqual(status_of(r), 5)
        # the same request pre-scan as the gRPC port: a NUL in a string is refused
        # naming the field, and nothing is stored under the truncated name (q
        # keeps its one message)
        bad = Q.PushRequest(items=[Q.PushItem(queue=q + "\x00evil", payload=b"x")])
        r = grpc_web(broker.http_port, "/queen.v1.QueueService/Push", bad.SerializeToString())
        self.assertEqual((status_of(r), message_of(r)),
                         (3, "items[0].queue contains a NUL byte at byte %d" % len(q)))
        r = grpc_web(broker.http_port, "/queen.v1.AdminService/GetStats",
                     A.GetStatsRequest(queue=q).SerializeToString())
        self.assertEqual(A.GetStatsResponse.FromString(r.messages[0]).queues[0].messages, 1)
        r = grpc_web(broker.http_port, "/queen.v1.QueueService/Consume", b"")
        self.assertEqual(status_of(r), 12)
        self.assertIn("client-streaming", message_of(r))


class Logs(unittest.TestCase):
    def test_every_line_is_json_with_fields(self):
        c = Client(broker.channel())
        c.push(uniq("log"), [b"x"] * 20)
        c.close()

        def rates_line():
            for line in broker.log_text().splitlines():
                rec = json.loads(line)
                if rec["message"] == "rates":
                    return rec
            return None

        rec = wait_until(rates_line, timeout=30, interval=0.5, what="a rates line")
        for k in ("pushed_per_s", "delivered_per_s", "commits_per_s", "segments_per_s", "duplicates"):
            self.assertIsInstance(rec[k], int, k)
        self.assertIsInstance(rec["frames_per_segment"], (int, float))
        seen = set()
        for line in broker.log_text().splitlines():
            rec = json.loads(line)
            self.assertEqual(set(rec) >= {"time", "level", "message"}, True, line)
            seen.add(rec["message"])
        self.assertIn("database connected", seen)
        self.assertIn("listening", seen)


if __name__ == "__main__":
    unittest.main()
