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
    and nothing is stored by a refused call.

The broker runs with QUEEN_MAX_PUSH_ITEMS=50, QUEEN_SEGMENT_RAW_MAX=262144 and
QUEEN_MAX_PAYLOAD_BYTES=16384.
"""

import struct
import unittest
import uuid

import grpc
import zstandard

from harness import Broker
from qsupport import C, Client, ConsumeStream, Q, rpc_error, uniq

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


if __name__ == "__main__":
    unittest.main()
