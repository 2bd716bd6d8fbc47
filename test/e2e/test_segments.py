"""Raw segments end to end: QueueService.PushSegments and raw_segments on Pop and
Consume, with segments built here independently of the codec (frames per
codec/SPEC.md §1, compressed with python3-zstandard).

What is asserted:
  * a pushed segment is stored as sent: a raw pop returns the very bytes, and a
    normal pop or fetch decodes the same message ids, transaction ids and
    payloads at base_offset + i;
  * a normal Push's messages come back in a raw pop as a segment that decodes to
    them, sliced by first_index / count; a raw Consume stream delivers and acks;
  * deduplication spans both paths: a retried segment answers DUPLICATE with the
    original offsets and ids; a segment with some stored transaction ids is not
    stored at all and names them; a normal Push of a raw segment's transaction
    id is a DUPLICATE of it;
  * every malformed segment is INVALID_ARGUMENT naming the segment and frame,
    and nothing is stored by a refused call;
  * segments ride fusion with Push items: Push and PushSegments calls
    pipelined on several connections to one partition are stored in each
    connection's order, and a transaction id pushed by both paths at once is
    stored once; the same segment pushed twice at once is stored once (the
    other answer is DUPLICATE naming it);
  * (SegmentsThroughProxy) with the database connections cut under a segment
    load, a segment answered QUEUED is stored exactly once at base_offset + i,
    one answered otherwise is not stored, and nothing is stored twice.

The broker runs with QUEEN_MAX_PUSH_ITEMS=50, QUEEN_SEGMENT_RAW_MAX=262144 and
QUEEN_MAX_PAYLOAD_BYTES=16384.
"""

import collections
import struct
import sys
import threading
import time
import unittest
import urllib.parse
import uuid

import grpc
import zstandard

from harness import Broker, database_url
from qsupport import C, Client, ConsumeStream, Q, rpc_error, uniq, wait_until
from tcpproxy import TcpProxy

MAX_ITEMS = 50
RAW_MAX = 262144
MAX_PAYLOAD = 16384

broker = None


def setUpModule():
    global broker
    broker = Broker("product", db="e2e_segments", env={
        "QUEEN_MAX_PUSH_ITEMS": str(MAX_ITEMS),
        "QUEEN_SEGMENT_RAW_MAX": str(RAW_MAX),
        "QUEEN_MAX_PAYLOAD_BYTES": str(MAX_PAYLOAD),
    }).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def uuid7():
    """A version-7-shaped UUID (time ordering does not matter here)."""
    b = bytearray(uuid.uuid4().bytes)
    b[6] = (b[6] & 0x0F) | 0x70
    return bytes(b)


def frame(payload, txn, mid=None, flags=0, psub=b"", trace=None):
    """One frame, byte for byte as codec/SPEC.md §1 lays it out."""
    mid = mid if mid is not None else uuid7()
    if trace is not None:
        flags |= 0x01
    body = bytes([flags]) + mid
    if trace is not None:
        body += trace
    body += struct.pack("<H", len(txn)) + txn
    if flags & 0x02:
        body += struct.pack("<H", len(psub)) + psub
    body += payload
    return struct.pack("<I", len(body)) + body


def segment(frames):
    return zstandard.ZstdCompressor(level=3, write_content_size=True).compress(b"".join(frames))


def parse_frames(raw):
    """Decodes a decompressed segment into (message id, txn, payload) tuples."""
    out, pos = [], 0
    while pos < len(raw):
        (blen,) = struct.unpack_from("<I", raw, pos)
        body = raw[pos + 4:pos + 4 + blen]
        flags, mid, at = body[0], body[1:17], 17
        if flags & 0x01:
            at += 16
        (tl,) = struct.unpack_from("<H", body, at)
        txn = body[at + 2:at + 2 + tl]
        at += 2 + tl
        if flags & 0x02:
            (pl,) = struct.unpack_from("<H", body, at)
            at += 2 + pl
        out.append((mid, txn, body[at:]))
        pos += 4 + blen
    return out


def unzstd(blob):
    return zstandard.ZstdDecompressor().decompress(blob)


def stored_records(client, queue, partition):
    """Every record of (queue, partition) in offset order, read with Fetch."""
    out, off = [], 0
    while True:
        r = client.fetch(queue, offset=off, partition=partition, max_bytes=4 << 20, timeout=30)
        if r.error == Q.FETCH_ERROR_UNKNOWN_PARTITION:
            return out
        if r.error != Q.FETCH_ERROR_NONE:
            raise AssertionError("fetch %s/%s at %d: error %d" % (queue, partition, off, r.error))
        out.extend(r.records)
        if not r.records or r.records[-1].offset + 1 >= r.high_watermark:
            return out
        off = r.records[-1].offset + 1


def run_threads(target, n):
    """Runs target(k) on n threads at once; re-raises the first failure."""
    errors = []

    def wrap(k):
        try:
            target(k)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(k,), daemon=True) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
        if t.is_alive():
            raise AssertionError("a pushing thread did not finish")
    if errors:
        raise errors[0]


class Segments(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def push_segments(self, segs):
        req = Q.PushSegmentsRequest(segments=[Q.RawSegment(queue=q, partition=p, segment=s)
                                              for q, p, s in segs])
        return self.c.q.PushSegments(req, timeout=15)

    def make(self, n, tag):
        mids = [uuid7() for _ in range(n)]
        txns = [("%s-%d" % (tag, i)).encode() for i in range(n)]
        pays = [("{\"i\":%d,\"tag\":\"%s\"}" % (i, tag)).encode() for i in range(n)]
        return mids, txns, pays, segment([frame(p, t, m) for m, t, p in zip(mids, txns, pays)])

    def hw(self, q, partition="Default"):
        """The partition's high watermark (0 when the queue or partition does not exist)."""
        if not self.c.exists(q):
            return 0
        res = self.c.fetch(q, partition=partition)
        if res.error == Q.FETCH_ERROR_UNKNOWN_PARTITION:
            return 0
        return res.high_watermark

    def test_stored_as_sent_and_popped_raw(self):
        q = uniq("seg")
        mids, txns, pays, blob = self.make(5, "a")
        r = self.push_segments([(q, "", blob)]).results
        self.assertEqual(len(r), 1)
        self.assertEqual(r[0].status, Q.PUSH_STATUS_QUEUED, r[0])
        self.assertEqual((r[0].base_offset, r[0].count, r[0].partition), (0, 5, "Default"))
        pid = r[0].partition_id

        p = self.c.pop(q, batch=10, raw_segments=True)
        self.assertEqual(len(p.messages), 0)
        self.assertEqual(len(p.segments), 1)
        s = p.segments[0]
        self.assertEqual(s.segment, blob, "the stored bytes are the pushed bytes")
        self.assertEqual((s.base_offset, s.first_index, s.count, s.partition_id), (0, 0, 5, pid))
        self.assertTrue(p.lease_id)

        # a normal reader decodes the same messages
        f = self.c.fetch(q).records
        self.assertEqual([m.offset for m in f], list(range(5)))
        self.assertEqual([m.message_id for m in f], [str(uuid.UUID(bytes=m)) for m in mids])
        self.assertEqual([m.transaction_id for m in f], [t.decode() for t in txns])
        self.assertEqual([m.payload for m in f], pays)

        a = self.c.ack([Q.AckItem(partition_id=pid, offset=4, status=C.ACK_STATUS_COMPLETED,
                                  lease_id=p.lease_id)])
        self.assertEqual(a.results[0].outcome, Q.ACK_OUTCOME_APPLIED, a)
        self.assertEqual(len(self.c.pop(q, raw_segments=True).segments), 0)

    def test_normal_push_popped_raw_is_sliced(self):
        q = uniq("seg")
        first = self.c.push(q, [b"x0", b"x1", b"x2"], txns=["t0", "t1", "t2"]).results
        pid = first[0].partition_id
        # take offsets 0..1 with a normal pop and ack them: the raw pop starts at 2
        p = self.c.pop(q, batch=2)
        self.assertEqual([m.offset for m in p.messages], [0, 1])
        self.c.ack([Q.AckItem(partition_id=pid, offset=1, status=C.ACK_STATUS_COMPLETED,
                              lease_id=p.lease_id)])
        self.c.push(q, [b"x3"], txns=["t3"])
        p = self.c.pop(q, batch=10, raw_segments=True)
        got = []
        for s in p.segments:
            frames = parse_frames(unzstd(s.segment))
            self.assertLessEqual(s.first_index + s.count, len(frames))
            for i in range(s.first_index, s.first_index + s.count):
                got.append((s.base_offset + i, frames[i][1], frames[i][2]))
        self.assertEqual(got, [(2, b"t2", b"x2"), (3, b"t3", b"x3")])

    def test_retry_is_duplicate_with_the_originals(self):
        q = uniq("seg")
        mids, _, _, blob = self.make(3, "r")
        a = self.push_segments([(q, "p", blob)]).results[0]
        self.assertEqual(a.status, Q.PUSH_STATUS_QUEUED)
        b = self.push_segments([(q, "p", blob)]).results[0]
        self.assertEqual(b.status, Q.PUSH_STATUS_DUPLICATE, b)
        self.assertEqual([(d.index, d.offset, d.message_id) for d in b.duplicates],
                         [(i, i, str(uuid.UUID(bytes=mids[i]))) for i in range(3)])
        self.assertEqual(self.hw(q, "p"), 3)

    def test_partial_duplicate_stores_nothing_and_names_them(self):
        q = uniq("seg")
        self.c.push(q, [b"old"], txns=["k1"])
        blob = segment([frame(b"n0", b"k0"), frame(b"n1", b"k1"), frame(b"n2", b"k2")])
        r = self.push_segments([(q, "", blob)]).results[0]
        self.assertEqual(r.status, Q.PUSH_STATUS_FAILED, r)
        self.assertIn("already stored", r.error)
        self.assertEqual([(d.index, d.offset) for d in r.duplicates], [(1, 0)])
        self.assertEqual(self.hw(q), 1, "nothing of the refused segment was stored")

    def test_normal_push_dedups_against_a_raw_segment(self):
        q = uniq("seg")
        mids, _, _, blob = self.make(2, "d")
        self.assertEqual(self.push_segments([(q, "", blob)]).results[0].status, Q.PUSH_STATUS_QUEUED)
        r = self.c.push(q, [b"again"], txns=["d-1"]).results[0]
        self.assertEqual(r.status, Q.PUSH_STATUS_DUPLICATE, r)
        self.assertEqual((r.offset, r.message_id), (1, str(uuid.UUID(bytes=mids[1]))))

    def test_several_segments_one_call(self):
        q = uniq("seg")
        segs = [(q, "a", self.make(2, "s1")[3]), (q, "b", self.make(3, "s2")[3]),
                (q, "a", self.make(1, "s3")[3])]
        r = self.push_segments(segs).results
        self.assertEqual([x.status for x in r], [Q.PUSH_STATUS_QUEUED] * 3)
        self.assertEqual([(x.index, x.partition, x.base_offset, x.count) for x in r],
                         [(0, "a", 0, 2), (1, "b", 0, 3), (2, "a", 2, 1)])

    def test_consume_stream_delivers_raw_segments(self):
        q, g = uniq("seg"), uniq("g")
        _, txns, _, blob = self.make(4, "c")
        self.push_segments([(q, "", blob)])
        st = ConsumeStream(self.c, Q.ConsumeSubscribe(queue=q, consumer_group=g, batch=10,
                                                       raw_segments=True))
        try:
            r = st.recv()
            self.assertEqual(r.WhichOneof("kind"), "batch")
            self.assertEqual(len(r.batch.messages), 0)
            s = r.batch.segments[0]
            self.assertEqual(s.segment, blob)
            st.send(Q.ConsumeRequest(request_id=7, ack=Q.AckRequest(consumer_group=g, items=[
                Q.AckItem(partition_id=s.partition_id, offset=3, status=C.ACK_STATUS_COMPLETED,
                          lease_id=r.batch.lease_id)])))
            a = st.recv()
            self.assertEqual((a.request_id, a.ack.results[0].outcome), (7, Q.ACK_OUTCOME_APPLIED))
        finally:
            st.close()
            st.wait_end()
        self.assertEqual(self.c.groups(q, g)[0].total_lag, 0)

    def test_push_and_segments_on_connections_keep_order_and_store_once(self):
        """Each connection pipelines Push and PushSegments calls to one partition
        (it does not wait between them): the partition holds each connection's
        messages in its sending order. Every round, every connection also
        pushes the round's shared transaction id, half by Push and half in a
        segment, all at once: it is stored once, answered QUEUED once."""
        q, conns, rounds = uniq("mix"), 4, 5
        answers = collections.defaultdict(list)  # txn -> [(status, offset)]
        lock = threading.Lock()

        def worker(k):
            c = Client(broker.channel())
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
                            req = Q.PushSegmentsRequest(segments=[Q.RawSegment(queue=q, partition="p",
                                                                               segment=blob)])
                            calls.append(("seg", txns, c.q.PushSegments.future(req, timeout=60)))
                    shared = "shared-%d" % r
                    if k % 2 == 0:
                        req = Q.PushRequest(items=[Q.PushItem(queue=q, partition="p",
                                                              payload=shared.encode(),
                                                              transaction_id=shared)])
                        calls.append(("push", [shared], c.q.Push.future(req, timeout=60)))
                    else:
                        blob = segment([frame(shared.encode(), shared.encode())])
                        req = Q.PushSegmentsRequest(segments=[Q.RawSegment(queue=q, partition="p",
                                                                           segment=blob)])
                        calls.append(("seg", [shared], c.q.PushSegments.future(req, timeout=60)))
                    for kind, txns, fut in calls:
                        res = fut.result()
                        with lock:
                            if kind == "push":
                                x = res.results[0]
                                answers[txns[0]].append((x.status, x.offset))
                            else:
                                x = res.results[0]
                                for i, t in enumerate(txns):
                                    off = x.base_offset + i if x.status == Q.PUSH_STATUS_QUEUED else -1
                                    answers[t].append((x.status, off))
            finally:
                c.close()

        run_threads(worker, conns)
        recs = stored_records(self.c, q, "p")
        counts = collections.Counter(m.transaction_id for m in recs)
        self.assertEqual([t for t, n in counts.items() if n != 1], [], "stored more than once")
        at = {m.transaction_id: m.offset for m in recs}
        for t, got in answers.items():
            queued = [off for st, off in got if st == Q.PUSH_STATUS_QUEUED]
            if t.startswith("shared-"):
                self.assertEqual(len(got), conns)
                self.assertEqual(len(queued), 1, "%s answered %r" % (t, got))
                self.assertEqual(sorted(st for st, _ in got),
                                 [Q.PUSH_STATUS_QUEUED] + [Q.PUSH_STATUS_DUPLICATE] * (conns - 1))
            else:
                self.assertEqual(got, [(Q.PUSH_STATUS_QUEUED, at.get(t))], t)
        self.assertEqual(len(at), conns * rounds * 6 + rounds)
        # each connection's messages, in offset order, are in its sending order
        for k in range(conns):
            mine = [m.transaction_id for m in recs if m.transaction_id.startswith("c%d-" % k)]
            self.assertEqual(mine, sorted(mine), "connection %d: order broken" % k)
            self.assertEqual(len(mine), rounds * 6)
            # a segment's frames stay together
            for i, t in enumerate(mine):
                if t.endswith("a"):
                    self.assertEqual(at[mine[i + 1]], at[t] + 1)

    def test_same_segment_twice_at_once_is_stored_once(self):
        q = uniq("seg2")
        other = Client(broker.channel())
        try:
            clients = [self.c, other]
            for n in range(6):
                mids, _, _, blob = self.make(3, "twice%d" % n)
                req = Q.PushSegmentsRequest(segments=[Q.RawSegment(queue=q, partition="p",
                                                                   segment=blob)])
                futs = [c.q.PushSegments.future(req, timeout=30) for c in clients]
                r = sorted((f.result().results[0] for f in futs), key=lambda x: x.status)
                self.assertEqual([x.status for x in r],
                                 [Q.PUSH_STATUS_QUEUED, Q.PUSH_STATUS_DUPLICATE], r)
                base = r[0].base_offset
                self.assertEqual([(d.index, d.offset, d.message_id) for d in r[1].duplicates],
                                 [(i, base + i, str(uuid.UUID(bytes=mids[i]))) for i in range(3)])
            self.assertEqual(self.hw(q, "p"), 18)
        finally:
            other.close()

    def refused(self, segs, needle, q=None):
        q = q or segs[0][0]
        e = rpc_error(self.push_segments, segs)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, e.details())
        self.assertIn(needle, e.details())
        self.assertEqual(self.hw(q), 0, "a refused call stored something")

    def test_bad_segments_are_refused_naming_the_frame(self):
        q = uniq("seg")
        ok = frame(b"fine", b"ok")
        self.refused([(q, "", b"not zstd at all")], "segments[0].segment does not decompress")
        self.refused([(q, "", segment([ok])), (q, "", segment([ok, frame(b"x", b"")]))],
                     "segments[1] frame 1 has an empty transaction id")
        self.refused([(q, "", segment([frame(b"x", b"a\x00b")]))], "not NUL-free UTF-8")
        self.refused([(q, "", segment([frame(b"x", b"\xff\xfe")]))], "not NUL-free UTF-8")
        self.refused([(q, "", segment([frame(b"x", b"t", mid=bytes(16))]))], "zero message id")
        self.refused([(q, "", segment([frame(b"", b"t")]))], "empty payload")
        self.refused([(q, "", segment([frame(bytes(MAX_PAYLOAD + 1), b"t")]))],
                     "payload is %d bytes (the limit is %d)" % (MAX_PAYLOAD + 1, MAX_PAYLOAD))
        self.refused([(q, "", segment([frame(b"x", b"t", flags=0x02, psub=b"mallory")]))],
                     "only the broker sets")
        self.refused([(q, "", segment([frame(b"x", b"t", flags=0x04)]))], "only the broker sets")
        self.refused([(q, "", segment([frame(b"x", b"t"), frame(b"y", b"t")]))],
                     "frames 0 and 1 have the same transaction id")
        self.refused([(q, "", segment([ok])[:-3])], "does not decompress")
        self.refused([(q, "", segment([ok]) + b"\x00")], "does not decompress")
        # a frame whose length prefix claims 4 GiB
        self.refused([(q, "", segment([b"\xff\xff\xff\xff\x00" + bytes(20)]))], "segments[0] frame 0")
        # over QUEEN_SEGMENT_RAW_MAX once decompressed (it compresses to almost nothing)
        self.refused([(q, "", segment([frame(bytes(RAW_MAX), b"big")]))], "does not decompress")
        self.refused([(q, "", segment([frame(b"x", b"t%d" % i) for i in range(MAX_ITEMS + 1)]))],
                     "QUEEN_MAX_PUSH_ITEMS")
        self.refused([("bad\x01name", "", segment([ok]))], "segments[0].queue", q=q)
        e = rpc_error(self.c.q.PushSegments, Q.PushSegmentsRequest(), timeout=15)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        e = rpc_error(self.c.q.PushSegments, Q.PushSegmentsRequest(
            segments=[Q.RawSegment(queue=q, segment=segment([ok]))] * 1025), timeout=15)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("1 to 1024", e.details())
        self.assertEqual(self.hw(q), 0)


class SegmentsThroughProxy(unittest.TestCase):
    """A broker whose database connections go through qn_tcp_proxy: they are
    cut while flushes holding segments are in flight."""

    def setUp(self):
        url = database_url("e2e_segments_proxy")
        self.proxy = TcpProxy("127.0.0.1", urllib.parse.urlparse(url).port)
        self.b = Broker("product", db="e2e_segments_unused", env={
            "QUEEN_DATABASE_URL": self.proxy.url(url),
            "QUEEN_DB_POOL_SIZE": "4",
            "QUEEN_DB_CALL_TIMEOUT_MS": "2000",
            "QUEEN_DB_CANCEL_GRACE_MS": "1000",
            "RETENTION_INTERVAL": "86400000",
        }).start()
        self.c = Client(self.b.channel(), timeout=30)

    def tearDown(self):
        self.c.close()
        try:
            rc = self.b.stop()
            self.assertEqual(rc, 0, self.b.log_text()[-4000:])
        finally:
            self.b.kill()
            self.proxy.close()

    def test_cut_during_flushes_of_segments_answers_queued_only_for_what_is_stored(self):
        q, parts = uniq("segcut"), ["p0", "p1", "p2"]
        stop = threading.Event()
        lock = threading.Lock()
        outcomes = {}  # segment tag -> (kind, partition, base, txns)
        answered = [0]

        def worker(k):
            c = Client(self.b.channel(), timeout=30)
            n = 0
            try:
                while not stop.is_set():
                    segs, tags = [], []
                    for j, p in enumerate(parts):
                        tag = "w%d-%d-%d" % (k, n, j)
                        txns = [tag + "/%d" % i for i in range(3)]
                        segs.append(Q.RawSegment(queue=q, partition=p, segment=segment(
                            [frame(t.encode(), t.encode()) for t in txns])))
                        tags.append((tag, p, txns))
                    n += 1
                    try:
                        r = c.q.PushSegments(Q.PushSegmentsRequest(segments=segs), timeout=30)
                        code = grpc.StatusCode.OK
                    except grpc.RpcError as e:
                        r, code = None, e.code()
                    out = {}
                    for i, (tag, p, txns) in enumerate(tags):
                        if r is not None:
                            x = r.results[i]
                            kind = {Q.PUSH_STATUS_QUEUED: "queued",
                                    Q.PUSH_STATUS_DUPLICATE: "duplicate",
                                    Q.PUSH_STATUS_FAILED: "failed",
                                    Q.PUSH_STATUS_UNKNOWN: "unknown"}.get(x.status, "other")
                            out[tag] = (kind, p, x.base_offset, txns)
                        elif code == grpc.StatusCode.UNAVAILABLE:
                            out[tag] = ("unavailable", p, -1, txns)
                        elif code == grpc.StatusCode.UNKNOWN:
                            out[tag] = ("unknown", p, -1, txns)
                        else:
                            out[tag] = ("other %s" % code, p, -1, txns)
                    with lock:
                        outcomes.update(out)
                        if r is not None:
                            answered[0] += 1
                    if r is None:
                        stop.wait(0.05)  # the database is down: a load generator's backoff
            finally:
                c.close()

        def ok_count():
            with lock:
                return answered[0]

        ts = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(4)]
        for t in ts:
            t.start()
        try:
            target = 20
            wait_until(lambda: ok_count() >= target, 60, interval=0.02, what="segment pushes")
            for _ in range(2):
                # every result from the server is held: the commits it answers
                # happened; then the connections close under the broker
                self.proxy.silence_all("down")
                self.proxy.wait_held("down", timeout=20)
                self.proxy.cut_all()
                target = ok_count() + 20
                wait_until(lambda: ok_count() >= target, 60, interval=0.02,
                           what="segment pushes answered after the cut")
        finally:
            stop.set()
            for t in ts:
                t.join(90)
                self.assertFalse(t.is_alive(), "a pusher did not finish")

        stored = {}
        for p in parts:
            for m in stored_records(self.c, q, p):
                self.assertNotIn(m.transaction_id, stored, "stored twice")
                stored[m.transaction_id] = (p, m.offset)
        kinds = collections.Counter(k for k, _, _, _ in outcomes.values())
        sys.stderr.write("  segment outcomes: %s, frames stored %d\n" % (dict(kinds), len(stored)))
        for tag, (kind, p, base, txns) in outcomes.items():
            if kind == "queued":
                self.assertEqual([stored.get(t) for t in txns], [(p, base + i) for i in range(3)],
                                 "%s answered QUEUED at %d" % (tag, base))
            elif kind in ("unavailable", "failed"):
                self.assertEqual([t for t in txns if t in stored], [], "%s answered %s" % (tag, kind))
            else:
                self.fail("%s answered %s: that says nothing about what was written" % (tag, kind))
            # a segment is stored whole or not at all
            self.assertIn(sum(t in stored for t in txns), (0, 3))
        txns_pushed = {t for _, _, _, txns in outcomes.values() for t in txns}
        self.assertEqual([t for t in stored if t not in txns_pushed], [])
        log = self.b.log_text()
        self.assertIn("push in doubt", log, "no flush was in doubt: the scenario did not happen")
        self.assertIn("push in doubt resolved", log)


if __name__ == "__main__":
    unittest.main()
