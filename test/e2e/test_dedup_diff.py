"""Deduplication, differentially: the broker's dedup cache must never change a
verdict. One seeded sequence of pushes, window changes, clock moves, retention
and sidecar purges is run against fresh databases with

    on        the cache as shipped (QUEEN_DEDUP_CACHE default)
    off       QUEEN_DEDUP_CACHE=0 (every push probes the whole window)
    starved   QUEEN_DEDUP_CACHE_MB=1 over 24 partitions of ~6000 hashes: entries
              are evicted and suppressed while the sequence runs
    two       two brokers with the cache on, requests alternating between them
              (every commit of one is a gap for the other)
    w1 w2 w4  one broker with QUEEN_WORKERS=1, 2 and 4 event loops, requests
              alternating over as many client connections (one per loop: each
              loop's cache shard sees the others' commits as gaps)

and every verdict (status, original offset, original message id) must be the
same in all four runs, and the same as an independent model of the semantics
in the dedup seed computes (so "identical" cannot mean "identically wrong").
The on run must also show, in the broker's debug log, that the cache vouched.

Time is moved in SQL, never by sleeping: "age" stamps created_at of a queue's
(or one partition's) log_txns and log_segments rows into the past. Ages are
multiples of 600 s and windows are 300 s away from any multiple of 600, so the
real seconds a run takes (well under 300) cannot move a row across a window
boundary. Retention deletes whole old segments in SQL (the duplicate keeps its
original offset and reports the zero message id); the sidecar purge deletes old
log_txns rows and raises txns_start (the id is then accepted as new). The
maintenance loop is held off (RETENTION_INTERVAL = one day) so that only the
sequence changes the database.

On a mismatch the failure names the seed; rerun one with
QN_DEDUP_DIFF_SEEDS=<seed>[,<seed>...].
"""

import os
import random
import re
import time
import unittest
import urllib.parse

import grpc

from harness import Broker, stubs
from qsupport import psql

stubs()
from queen.v1 import admin_pb2 as A  # noqa: E402
from queen.v1 import admin_pb2_grpc as AG  # noqa: E402
from queen.v1 import common_pb2 as C  # noqa: E402
from queen.v1 import queue_pb2 as Q  # noqa: E402
from queen.v1 import queue_pb2_grpc as QG  # noqa: E402

SEEDS = [int(s) for s in os.environ.get("QN_DEDUP_DIFF_SEEDS", "20261130").split(",") if s]
QUEUE = "dd.diff"
PARTS = ["p%02d" % i for i in range(24)]
WINDOWS = [900, 2100, 3300, 4500]      # each 300 s from any multiple of 600
AGE_STEP = 600
ZERO_ID = "00000000-0000-0000-0000-000000000000"
QUIET = {"RETENTION_INTERVAL": "86400000"}  # no maintenance cycle during a run

QUEUED = Q.PUSH_STATUS_QUEUED
DUPLICATE = Q.PUSH_STATUS_DUPLICATE


# ------------------------------------------------------------------ database

def base_url():
    """The test cluster's URL (what harness.database_url starts from)."""
    url = os.environ.get("QUEEN_TEST_DATABASE_URL", "")
    if not url:
        path = os.environ.get("QN_TEST_PG_URL_FILE", "")
        if path and os.path.exists(path):
            with open(path) as f:
                url = f.readline().strip()
    if not url:
        raise unittest.SkipTest("no test database (run through ctest or set QUEEN_TEST_DATABASE_URL)")
    return url


def db_url(name):
    u = urllib.parse.urlparse(base_url())
    return urllib.parse.urlunparse(u._replace(path="/" + name))


def lit(s):
    return "'" + s.replace("'", "''") + "'"


def pid_sql(partition):
    return ("(SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = %s AND p.name = %s)" % (lit(QUEUE), lit(partition)))


def parts_sql(partition):
    if partition is None:
        return ("(SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id "
                "WHERE q.name = %s)" % lit(QUEUE))
    return "(%s)" % pid_sql(partition)


def sql_age(url, seconds, partition):
    ids = parts_sql(partition)
    psql(url, "BEGIN;"
              "UPDATE queen.log_txns SET created_at = created_at - make_interval(secs => %d) "
              "WHERE partition_id IN %s;"
              "UPDATE queen.log_segments SET created_at = created_at - make_interval(secs => %d) "
              "WHERE partition_id IN %s;"
              "COMMIT;" % (seconds, ids, seconds, ids))


def sql_retain(url, partition, keep):
    """Retention: delete every segment of the partition but the newest `keep`."""
    pid = pid_sql(partition)
    psql(url, "BEGIN;"
              "DELETE FROM queen.log_segments s WHERE s.partition_id = {pid} AND s.base_offset < "
              "  coalesce((SELECT min(x.base_offset) FROM (SELECT base_offset FROM queen.log_segments "
              "            WHERE partition_id = {pid} ORDER BY base_offset DESC LIMIT {keep}) x), 0);"
              "UPDATE queen.log_partitions p SET log_start = coalesce("
              "  (SELECT min(base_offset) FROM queen.log_segments WHERE partition_id = p.id), "
              "  p.last_offset + 1) WHERE p.id = {pid};"
              "COMMIT;".format(pid=pid, keep=keep))


def sql_purge(url, partition, keep):
    """Sidecar purge: delete every log_txns row of the partition but the newest
    `keep`, and raise txns_start to the first one left."""
    pid = pid_sql(partition)
    psql(url, "BEGIN;"
              "DELETE FROM queen.log_txns t WHERE t.partition_id = {pid} AND t.base_offset < "
              "  coalesce((SELECT min(x.base_offset) FROM (SELECT base_offset FROM queen.log_txns "
              "            WHERE partition_id = {pid} ORDER BY base_offset DESC LIMIT {keep}) x), 0);"
              "UPDATE queen.log_partitions p SET txns_start = coalesce("
              "  (SELECT min(base_offset) FROM queen.log_txns WHERE partition_id = p.id), "
              "  p.last_offset + 1) WHERE p.id = {pid};"
              "COMMIT;".format(pid=pid, keep=keep))


# ------------------------------------------------------------------ the model

class Model:
    """What the dedup seed says the verdicts are. Per partition: the stored
    messages by transaction id (offset, label of the item that stored it,
    segment number, the partition's clock when stored), which segments
    retention deleted and which sidecar rows were purged. A message's virtual
    age is how far the partition's rows were stamped back since it was stored.
    Labels stand for message ids: the index of the item that was queued, or
    "zero" when the original's segment is gone."""

    def __init__(self):
        self.window = 3600
        self.by_txn = {p: {} for p in PARTS}      # txn -> [row], ascending offset
        self.clock = {p: 0 for p in PARTS}        # seconds stamped back so far
        self.next_off = {p: 0 for p in PARTS}
        self.segs = {p: [] for p in PARTS}        # segment numbers, oldest first
        self.seg_gone = {p: set() for p in PARTS}
        self.txn_gone = {p: set() for p in PARTS}
        self.nseg = 0

    def probe(self, p, txn):
        """push_v1's probe: the lowest offset of an in-window sidecar hit."""
        for r in self.by_txn[p].get(txn, ()):
            if r["seg"] not in self.txn_gone[p] and self.clock[p] - r["clock"] <= self.window:
                return r
        return None

    def push(self, items, first_index):
        """items: (partition, txn). Returns [(status, offset, label)]."""
        out = [None] * len(items)
        groups = {}
        for i, (p, _) in enumerate(items):
            groups.setdefault(p, []).append(i)
        for p, idxs in groups.items():
            leaders = {}
            seg = None
            for i in idxs:
                txn = items[i][1]
                if txn and txn in leaders:            # layer 1: follows the first
                    _, off, label = out[leaders[txn]]
                    out[i] = (DUPLICATE, off, label)
                    continue
                hit = self.probe(p, txn) if txn and self.window > 0 else None
                if hit is not None:
                    label = "zero" if hit["seg"] in self.seg_gone[p] else hit["label"]
                    out[i] = (DUPLICATE, hit["off"], label)
                else:
                    if seg is None:
                        seg = self.nseg
                        self.nseg += 1
                        self.segs[p].append(seg)
                    off = self.next_off[p]
                    self.next_off[p] += 1
                    label = first_index + i
                    if txn:
                        self.by_txn[p].setdefault(txn, []).append(
                            {"off": off, "label": label, "seg": seg, "clock": self.clock[p]})
                    out[i] = (QUEUED, off, label)
                if txn:
                    leaders[txn] = i
        return out

    def age(self, seconds, partition):
        for p in ([partition] if partition else PARTS):
            self.clock[p] += seconds

    def retain(self, partition, keep):
        segs = self.segs[partition]
        self.seg_gone[partition].update(segs[:max(0, len(segs) - keep)])

    def purge(self, partition, keep):
        segs = self.segs[partition]
        self.txn_gone[partition].update(segs[:max(0, len(segs) - keep)])


# ------------------------------------------------------------------ the sequence

def generate(seed):
    """A list of operations, and the expected result of each push. The random
    choices only depend on the seed (never on a broker)."""
    rnd = random.Random(seed)
    model = Model()
    history = {p: [] for p in PARTS}   # every txn pushed per partition, in order
    ops, expected = [], []
    counter = [0]
    nitems = 0

    def fresh(p):
        counter[0] += 1
        return "t-%d-%s-%d" % (seed, p, counter[0])

    def pick_txn(p, request):
        x = rnd.random()
        h = history[p]
        if x < 0.06:
            return ""                                   # minted: never a duplicate
        if x < 0.16 and request:
            same = [t for (q, t) in request if q == p and t]
            if same:
                return rnd.choice(same)                 # twice in one request
        if x < 0.36 and h:
            return rnd.choice(h[-60:])                  # recent, probably in window
        if x < 0.50 and h:
            return rnd.choice(h)                        # anything this partition saw
        if x < 0.56:
            q = rnd.choice(PARTS)
            if history[q]:
                return rnd.choice(history[q])           # another partition's id
        return fresh(p)

    def push(items):
        nonlocal nitems
        ops.append(("push", items))
        expected.append(model.push(items, nitems))
        nitems += len(items)
        for p, t in items:
            if t:
                history[p].append(t)

    # the window is explicit so every boundary stays 300 s from the clock steps
    w = 3300
    ops.append(("window", w))
    model.window = w
    for step in range(70):
        x = rnd.random()
        if step % 5 == 2:
            # bulk: mostly fresh ids over every partition, to grow the windows
            items = []
            for _ in range(rnd.randint(7000, 9500)):
                p = rnd.choice(PARTS)
                items.append((p, fresh(p) if rnd.random() < 0.97 else pick_txn(p, items)))
            push(items)
        elif x < 0.55:
            items = []
            one = rnd.random() < 0.4
            p0 = rnd.choice(PARTS)
            for _ in range(rnd.randint(1, 60)):
                p = p0 if one else rnd.choice(PARTS[:rnd.choice([3, 8, 24])])
                items.append((p, pick_txn(p, items)))
            push(items)
        elif x < 0.70:
            secs = AGE_STEP * rnd.randint(1, 3)
            p = rnd.choice(PARTS) if rnd.random() < 0.4 else None
            ops.append(("age", secs, p))
            model.age(secs, p)
        elif x < 0.82:
            w = rnd.choice(WINDOWS + [0])
            ops.append(("window", w))
            model.window = w
        elif x < 0.91:
            p = rnd.choice(PARTS)
            keep = rnd.randint(1, 6)
            ops.append(("retain", p, keep))
            model.retain(p, keep)
        else:
            p = rnd.choice(PARTS)
            keep = rnd.randint(2, 8)
            ops.append(("purge", p, keep))
            model.purge(p, keep)
    # finish under the widest window: first enough fresh ids that every
    # partition holds more than a hot buffer's worth of hashes in the window (so
    # 24 partitions cannot all fit in 1 MB), then re-pushes of old and recent
    # ids in every partition: the cache has had all sequence long to go wrong
    ops.append(("window", 4500))
    model.window = 4500
    for _ in range(7):
        items = []
        for _ in range(9000):
            p = rnd.choice(PARTS)
            items.append((p, fresh(p)))
        push(items)
    for p in PARTS:
        old = rnd.sample(history[p], min(100, len(history[p])))
        push([(p, t) for t in old + history[p][-60:]] + [(p, fresh(p)) for _ in range(20)])
    return ops, expected


# ------------------------------------------------------------------ running

def push_rpc(stub, items):
    req = Q.PushRequest(items=[Q.PushItem(queue=QUEUE, partition=p, payload=b'{"n":%d}' % i,
                                          transaction_id=t)
                               for i, (p, t) in enumerate(items)])
    return stub.Push(req, timeout=120).results


def configure(stub, window):
    stub.ConfigureQueue(A.ConfigureQueueRequest(
        queue=QUEUE, options=C.QueueOptions(dedup_window_seconds=window)), timeout=30)


def run(ops, brokers, url, conns=1):
    """Runs the sequence; requests alternate between the brokers, and between
    `conns` connections to each (a broker spreads its connections over its event
    loops in turn). Returns, per push, [(status, offset, label)] with message ids
    turned into labels."""
    # a channel of its own subchannel pool: its own TCP connection
    chans = [b.channel(options=[("grpc.use_local_subchannel_pool", 1)])
             for _ in range(conns) for b in brokers]
    qs = [QG.QueueServiceStub(c) for c in chans]
    ads = [AG.AdminServiceStub(c) for c in chans]
    labels = {ZERO_ID: "zero"}
    results = []
    nitems = 0
    turn = 0
    try:
        for op in ops:
            kind = op[0]
            if kind == "push":
                items = op[1]
                res = push_rpc(qs[turn % len(qs)], items)
                turn += 1
                got = []
                for i, r in enumerate(res):
                    if r.status == QUEUED:
                        labels[r.message_id] = nitems + i
                    got.append((r.status, r.offset,
                                labels.get(r.message_id, "?" + r.message_id) if r.status in (QUEUED, DUPLICATE)
                                else r.error))
                results.append(got)
                nitems += len(items)
            elif kind == "window":
                configure(ads[turn % len(ads)], op[1])
            elif kind == "age":
                sql_age(url, op[1], op[2])
            elif kind == "retain":
                sql_retain(url, op[1], op[2])
            elif kind == "purge":
                sql_purge(url, op[1], op[2])
    finally:
        for c in chans:
            c.close()
    return results


def first_difference(ops, a, b):
    """Where two result lists differ: (push number, item, op items, a, b), or None."""
    pushes = [op for op in ops if op[0] == "push"]
    for k, (ra, rb) in enumerate(zip(a, b)):
        for i, (x, y) in enumerate(zip(ra, rb)):
            if x != y:
                return k, i, pushes[k][1][i], x, y
        if len(ra) != len(rb):
            return k, min(len(ra), len(rb)), None, len(ra), len(rb)
    if len(a) != len(b):
        return len(a), 0, None, len(a), len(b)
    return None


def stats_lines(broker):
    return re.findall(r"dedup stats (.*)", broker.log_text())


def counters(line):
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def wait_stats(broker, pred, timeout=15):
    """Waits (the sweep logs every 5 s) for a stats line satisfying pred."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in stats_lines(broker):
            if pred(counters(line)):
                return counters(line)
        time.sleep(0.2)
    return None


# ------------------------------------------------------------------ the suite

class Differential(unittest.TestCase):
    """Test names are numbered: the last compares the runs before it."""

    runs = {}
    cases = {}

    @classmethod
    def setUpClass(cls):
        base_url()
        for seed in SEEDS:
            cls.cases[seed] = generate(seed)

    def check_model(self, name, seed, results):
        ops, expected = self.cases[seed]
        d = first_difference(ops, expected, results)
        if d is not None:
            k, i, item, want, got = d
            self.fail("seed %d, run %s, push #%d item %d %s: model %s, broker %s"
                      % (seed, name, k, i, item, want, got))

    def one(self, name, check, env=None, brokers=1, conns=1):
        """Runs every seed against fresh databases with `brokers` brokers of
        this configuration, checks the model, then check(brokers)."""
        for seed in SEEDS:
            ops, _ = self.cases[seed]
            db = "dd_diff_%s" % name
            extra = dict(QUIET, **(env or {}))
            bs = []
            try:
                bs.append(Broker("product", db=db, env=extra).start())
                for k in range(1, brokers):
                    # same database: override the URL (the harness re-creates the
                    # database named by db=, so that one gets a scratch name)
                    bs.append(Broker("product", db="%s_scratch%d" % (db, k),
                                     env=dict(extra, QUEEN_DATABASE_URL=db_url(db))).start())
                t0 = time.monotonic()
                results = run(ops, bs, db_url(db), conns)
                took = time.monotonic() - t0
                self.runs.setdefault(seed, {})[name] = results
                try:
                    self.check_model(name, seed, results)
                except AssertionError as e:
                    notes = "\n".join(line for b in bs for line in b.log_text().splitlines()
                                      if " WARN " in line or " ERROR " in line)
                    raise AssertionError("%s\nbroker warnings and errors:\n%s" % (e, notes[-6000:]))
                self.assertLess(took, 250, "a run must stay well inside the 300 s margin")
                check(bs)
            finally:
                for b in bs:
                    if b.alive():
                        rc = b.stop()
                        self.assertEqual(rc, 0, b.log_text()[-4000:])

    def test_1_cache_on(self):
        def check(bs):
            b = bs[0]
            c = wait_stats(b, lambda s: s.get("vouched", 0) > 0)
            self.assertIsNotNone(c, "the cache never vouched:\n" + "\n".join(stats_lines(b)))
            self.assertGreater(c["hydrations"], 0)
        self.one("on", check)

    def test_2_cache_off(self):
        def check(bs):
            self.assertEqual(stats_lines(bs[0]), [])
        self.one("off", check, env={"QUEEN_DEDUP_CACHE": "0"})

    def test_3_cache_starved(self):
        def check(bs):
            b = bs[0]
            c = wait_stats(b, lambda s: s.get("evictions", 0) > 0 or s.get("suppressed", 0) > 0)
            warned = "dedup cache full" in b.log_text()
            self.assertTrue(c is not None or warned,
                            "1 MB never evicted nor suppressed:\n" + "\n".join(stats_lines(b)))
        self.one("starved", check, env={"QUEEN_DEDUP_CACHE_MB": "1"})

    def test_4_two_brokers(self):
        def check(bs):
            for b in bs:
                c = wait_stats(b, lambda s: s.get("catchups", 0) > 0)
                self.assertIsNotNone(c, "no gap was ever caught up:\n" + "\n".join(stats_lines(b)))
        self.one("two", check, brokers=2)

    def workers(self, n):
        def check(bs):
            b = bs[0]
            self.assertEqual(b.workers(), n)
            for k in range(n if n > 1 else 0):
                self.assertIn("connection on worker=%d" % k, b.log_text(),
                              "no client connection was served by loop %d" % k)
            c = wait_stats(b, lambda s: s.get("vouched", 0) > 0)
            self.assertIsNotNone(c, "no loop's cache ever vouched:\n" + "\n".join(stats_lines(b)))
        self.one("w%d" % n, check, env={"QUEEN_WORKERS": str(n)}, conns=n)

    def test_4a_workers_1(self):
        self.workers(1)

    def test_4b_workers_2(self):
        self.workers(2)

    def test_4c_workers_4(self):
        self.workers(4)

    def test_5_identical(self):
        for seed in SEEDS:
            got = self.runs.get(seed, {})
            if len(got) < 2:
                self.skipTest("needs the runs of tests 1 to 4")
            names = sorted(got)
            ops, _ = self.cases[seed]
            for n in names[1:]:
                d = first_difference(ops, got[names[0]], got[n])
                self.assertIsNone(d, "seed %d: %s and %s differ at %s" % (seed, names[0], n, d))


class RecreatedQueue(unittest.TestCase):
    """A queue deleted through one broker and re-created by a push through it,
    while the other broker's cache still vouches for the old partition: its
    watermark (a high offset of the old partition) must not let push_v1 skip the
    probe of the new one, whose offsets start over at 0."""

    def test_stale_watermark_after_delete_and_recreate(self):
        db = "dd_recreate"
        a = Broker("product", db=db, env=QUIET).start()
        b = Broker("product", db=db + "_scratch", env=dict(QUIET, QUEEN_DATABASE_URL=db_url(db))).start()
        try:
            with a.channel() as ca, b.channel() as cb:
                qa, qb = QG.QueueServiceStub(ca), QG.QueueServiceStub(cb)
                n = 0
                # a's cache hydrates and vouches for p (watermark ~ 2999)
                deadline = time.monotonic() + 20
                while True:
                    push_rpc(qa, [("p", "old-%d" % (n + i)) for i in range(500)])
                    n += 500
                    if n >= 3000 and wait_stats(a, lambda s: s.get("vouched", 0) > 0, timeout=0.1):
                        break
                    self.assertLess(time.monotonic(), deadline, "a's cache never vouched")
                AG.AdminServiceStub(cb).DeleteQueue(A.DeleteQueueRequest(queue=QUEUE), timeout=30)
                first = push_rpc(qb, [("p", "again")])[0]
                self.assertEqual((first.status, first.offset), (QUEUED, 0))
                second = push_rpc(qa, [("p", "again")])[0]
                self.assertEqual((second.status, second.offset), (DUPLICATE, 0),
                                 "broker a accepted a duplicate in the re-created partition")
        finally:
            for x in (a, b):
                x.stop()


if __name__ == "__main__":
    unittest.main()
