"""QueueService.Consume end to end: subscribe with credits, batches only while
credits remain, in-band acks and renewals answered with their request_id, the
first-request rule, data pushed after subscribing delivered without polling,
leases released at once when the stream ends, and QUEEN_MAX_STREAMS.

The main broker runs with QUEEN_WAKE_RECHECK_MS=60000, so a batch that arrives
early after a push was sent because of the push's wake-up, not a re-check.
StreamLimit runs its own broker with QUEEN_MAX_STREAMS=2.
"""

import time
import unittest

import grpc

from harness import Broker
from qsupport import C, Client, ConsumeStream, Q, accepted_stream, uniq, wait_until

broker = None


def setUpModule():
    global broker
    broker = Broker("product", db="e2e_queue_consume", env={"QUEEN_WAKE_RECHECK_MS": "60000"}).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def now_us():
    return int(time.time() * 1e6)


def sub(queue, **kw):
    return Q.ConsumeSubscribe(queue=queue, **kw)


class ConsumeTest(unittest.TestCase):
    def setUp(self):
        self.c = Client(broker.channel())
        self.streams = []

    def tearDown(self):
        for s in self.streams:
            s.cancel()
        self.c.close()

    def stream(self, subscribe=None, first=None, client=None):
        s = ConsumeStream(client or self.c, subscribe=subscribe, first=first)
        self.streams.append(s)
        return s

    def batch(self, s, timeout=10):
        r = s.recv(timeout)
        self.assertEqual(r.WhichOneof("kind"), "batch", r)
        self.assertEqual(r.request_id, 0)
        self.assertGreater(len(r.batch.messages), 0)
        return r.batch

    def spread(self, q, parts, n=2):
        """n messages in each of the named partitions of q."""
        self.c.push_items([Q.PushItem(queue=q, partition=p, payload=b"%s-%d" % (p.encode(), i))
                           for p in parts for i in range(n)])


class Credits(ConsumeTest):
    def test_batches_only_while_credits_remain(self):
        q = uniq()
        self.spread(q, ["a", "b", "c"])
        s = self.stream(sub(q, batch=10, credits=2))
        b1, b2 = self.batch(s), self.batch(s)
        parts = {b1.messages[0].partition, b2.messages[0].partition}
        self.assertEqual(len(parts), 2)
        for b in (b1, b2):
            self.assertEqual(len(b.messages), 2)
            self.assertEqual(b.partitions_claimed, 1)
            self.assertTrue(b.lease_id)
            self.assertEqual({m.lease_id for m in b.messages}, {b.lease_id})
        self.assertEqual(b1.lease_id, b2.lease_id)  # one lease id for the whole stream
        # out of credit: the third partition is not sent
        s.recv_none(1.0)
        s.credits(1)
        b3 = self.batch(s)
        self.assertEqual({m.partition for m in b3.messages}, {"a", "b", "c"} - parts)

    def test_credits_default_to_one(self):
        q = uniq()
        self.spread(q, ["a", "b"])
        s = self.stream(sub(q))
        self.batch(s)
        s.recv_none(0.7)
        s.credits(5)
        self.batch(s)

    def test_next_batch_of_a_partition_after_ack(self):
        q = uniq()
        self.c.push(q, [b"m%d" % i for i in range(4)])
        s = self.stream(sub(q, batch=2, credits=5))
        b = self.batch(s)
        self.assertEqual([m.offset for m in b.messages], [0, 1])
        s.recv_none(0.5)  # the partition's batch is leased (by this very stream)
        m = b.messages[1]
        s.send(Q.ConsumeRequest(request_id=7, ack=Q.AckRequest(items=[Q.AckItem(
            partition_id=m.partition_id, offset=m.offset, lease_id=m.lease_id)])))
        got = [s.recv(), s.recv()]
        kinds = sorted(r.WhichOneof("kind") for r in got)
        self.assertEqual(kinds, ["ack", "batch"])
        nxt = [r for r in got if r.WhichOneof("kind") == "batch"][0].batch
        self.assertEqual([x.offset for x in nxt.messages], [2, 3])

    def test_auto_ack_stream(self):
        q = uniq()
        self.c.push(q, [b"a", b"b", b"c"])
        s = self.stream(sub(q, batch=2, credits=3, auto_ack=True))
        b1, b2 = self.batch(s), self.batch(s)
        self.assertEqual([m.offset for m in list(b1.messages) + list(b2.messages)], [0, 1, 2])
        self.assertEqual(b1.lease_id, "")
        self.assertEqual({m.lease_id for m in b1.messages}, {""})
        self.assertEqual(self.c.partition(q).committed, 2)


class InBand(ConsumeTest):
    def test_ack_answered_with_request_id(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"])
        s = self.stream(sub(q, batch=2, consumer_group="ib"))
        b = self.batch(s)
        m = b.messages[1]
        s.send(Q.ConsumeRequest(request_id=42, ack=Q.AckRequest(consumer_group="ib", items=[
            Q.AckItem(partition_id=m.partition_id, offset=m.offset, lease_id=b.lease_id),
            Q.AckItem(partition_id=m.partition_id, transaction_id="nope", lease_id=b.lease_id)])))
        r = s.recv()
        self.assertEqual((r.request_id, r.WhichOneof("kind")), (42, "ack"))
        self.assertEqual([x.outcome for x in r.ack.results],
                         [Q.ACK_OUTCOME_APPLIED, Q.ACK_OUTCOME_UNRESOLVED])
        self.assertEqual(self.c.partition(q, group="ib").committed, 1)

    def test_failed_ack_in_band_redelivers(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"])
        s = self.stream(sub(q, batch=2, credits=2))
        b = self.batch(s)
        m = b.messages[0]
        s.send(Q.ConsumeRequest(request_id=3, ack=Q.AckRequest(items=[Q.AckItem(
            partition_id=m.partition_id, offset=m.offset, lease_id=b.lease_id,
            status=C.ACK_STATUS_FAILED)])))
        got = [s.recv(), s.recv()]
        ack = [r for r in got if r.WhichOneof("kind") == "ack"][0]
        self.assertEqual(ack.request_id, 3)
        self.assertTrue(ack.ack.results[0].lease_released)
        again = [r for r in got if r.WhichOneof("kind") == "batch"][0].batch
        self.assertEqual([x.offset for x in again.messages], [0, 1])

    def test_renew_in_band(self):
        q = uniq()
        self.c.push(q, [b"a"])
        s = self.stream(sub(q, lease_seconds=5))
        b = self.batch(s)
        s.send(Q.ConsumeRequest(request_id=9, renew=Q.RenewLeaseRequest(seconds=300)))
        r = s.recv()
        self.assertEqual((r.request_id, r.WhichOneof("kind")), (9, "renew"))
        self.assertTrue(r.renew.renewed)
        self.assertEqual(r.renew.partitions, 1)
        self.assertGreater(r.renew.expires_at_us, b.lease_expires_at_us + 200 * 1e6)
        # naming the lease explicitly works too; an unknown one renews nothing
        s.send(Q.ConsumeRequest(request_id=10, renew=Q.RenewLeaseRequest(lease_id=b.lease_id, seconds=400)))
        self.assertTrue(s.recv().renew.renewed)
        s.send(Q.ConsumeRequest(request_id=11, renew=Q.RenewLeaseRequest(
            lease_id="0191b7a4-3c1e-7d2a-8f00-123456789abc")))
        r = s.recv()
        self.assertEqual((r.request_id, r.renew.renewed), (11, False))

    def test_in_band_ack_is_validated_like_ack(self):
        # A malformed in-band ack ends the stream INVALID_ARGUMENT naming the item,
        # as Ack answers it, and applies nothing (an item naming no message must
        # not be taken for offset 0).
        q = uniq()
        self.c.push(q, [b"a", b"b"])
        bad = [
            (Q.AckRequest(), "items"),
            (Q.AckRequest(items=[Q.AckItem(partition_id="{pid}", offset=1), Q.AckItem(partition_id="{pid}")]),
             "items[1]"),
            (Q.AckRequest(items=[Q.AckItem(partition_id="not-a-uuid", offset=0)]), "items[0].partition_id"),
            (Q.AckRequest(items=[Q.AckItem(partition_id="{pid}", offset=-3)]), "items[0].offset"),
            (Q.AckRequest(items=[Q.AckItem(partition_id="{pid}", offset=0, status=17)]), "items[0].status"),
            (Q.AckRequest(consumer_group="g\\x01", items=[Q.AckItem(partition_id="{pid}", offset=0)]),
             "consumer_group"),
        ]
        for req, frag in bad:
            s = self.stream(sub(q, batch=2))
            b = self.batch(s)
            pid = b.messages[0].partition_id
            for it in req.items:
                it.partition_id = it.partition_id.replace("{pid}", pid)
                it.lease_id = b.lease_id
            req.consumer_group = req.consumer_group.replace("\\x01", "\x01")
            s.send(Q.ConsumeRequest(request_id=1, ack=req))
            self.assertEqual(s.wait_end(), grpc.StatusCode.INVALID_ARGUMENT, frag)
            self.assertIn(frag, s.error.details())
            part = self.c.partition(q)
            self.assertEqual(part.committed, -1, frag)
            # the stream's lease went with it
            wait_until(lambda: not self.c.partition(q).leased, 5, what="the lease to be released")

    def test_first_request_must_subscribe(self):
        for first in (Q.ConsumeRequest(credits=3),
                      Q.ConsumeRequest(request_id=1, renew=Q.RenewLeaseRequest(seconds=5)),
                      Q.ConsumeRequest(request_id=1, ack=Q.AckRequest(items=[Q.AckItem(
                          partition_id="0191b7a4-3c1e-7d2a-8f00-123456789abc", offset=0)])),
                      Q.ConsumeRequest()):
            s = self.stream(first=first)
            self.assertEqual(s.wait_end(), grpc.StatusCode.INVALID_ARGUMENT, first)

    def test_subscribe_only_once(self):
        q = uniq()
        s = self.stream(sub(q))
        s.send(Q.ConsumeRequest(subscribe=sub(q)))
        self.assertEqual(s.wait_end(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("once", s.error.details())

    def test_bad_subscription(self):
        for bad in (sub(""), sub("q\x01"), sub(uniq(), lease_seconds=100000),
                    sub(uniq(), subscription_mode=C.SUBSCRIPTION_MODE_FROM_TIMESTAMP)):
            s = self.stream(bad)
            self.assertEqual(s.wait_end(), grpc.StatusCode.INVALID_ARGUMENT, bad)

    def test_half_close_ends_ok(self):
        q = uniq()
        s = self.stream(sub(q))
        s.roundtrip()
        s.close()
        self.assertEqual(s.wait_end(), grpc.StatusCode.OK)


class Delivery(ConsumeTest):
    def test_data_pushed_after_subscribe_arrives_without_polling(self):
        q = uniq()
        s = self.stream(sub(q, batch=10, credits=3))
        s.roundtrip()  # subscribed, first pop empty, stream parked
        t0 = time.monotonic()
        self.c.push(q, [b"late"])
        b = self.batch(s, timeout=10)
        self.assertEqual([m.payload for m in b.messages], [b"late"])
        self.assertLess(time.monotonic() - t0, 4.0)
        self.c.ack_offset(b.messages[0])
        t0 = time.monotonic()
        self.c.push(q, [b"later"])
        self.assertEqual([m.payload for m in self.batch(s).messages], [b"later"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_several_streams_of_a_group_share_partitions(self):
        q = uniq()
        # one credit each: a stream may hold one batch, so each gets one partition
        a = self.stream(sub(q, consumer_group="shared", credits=1))
        b = self.stream(sub(q, consumer_group="shared", credits=1))
        a.roundtrip()
        b.roundtrip()
        self.spread(q, ["p1", "p2"], n=1)
        got = {}
        for s in (a, b):
            bt = self.batch(s)
            got[s] = bt.messages[0].partition
        self.assertEqual(set(got.values()), {"p1", "p2"})

    def test_discovery_stream(self):
        ns = "cs" + uniq().replace("-", "")
        s = self.stream(Q.ConsumeSubscribe(namespace=ns, credits=2))
        s.roundtrip()
        self.c.push(ns + ".t.one", [b"x"])
        b = self.batch(s)
        self.assertEqual(b.messages[0].queue, ns + ".t.one")

    def test_cancel_releases_leases_at_once(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"])
        s = self.stream(sub(q, batch=10))
        b = self.batch(s)
        self.assertEqual(len(b.messages), 2)
        self.assertEqual(len(self.c.pop(q).messages), 0)  # leased for 60 s
        t0 = time.monotonic()
        s.cancel()
        p = self.c.pop_until(q, timeout=10, batch=10)
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assertEqual([m.message_id for m in p.messages], [m.message_id for m in b.messages])
        self.assertNotEqual(p.lease_id, b.lease_id)

    def test_half_close_releases_leases_at_once(self):
        q = uniq()
        self.c.push(q, [b"a"])
        s = self.stream(sub(q, consumer_group="hc"))
        b = self.batch(s)
        t0 = time.monotonic()
        s.close()
        self.assertEqual(s.wait_end(), grpc.StatusCode.OK)
        p = self.c.pop_until(q, timeout=10, consumer_group="hc")
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assertEqual(p.messages[0].message_id, b.messages[0].message_id)

    def test_stream_ended_while_its_pop_runs_leaves_nothing_leased(self):
        # Cancel right after subscribing: the stream's first pop is often still in
        # the database. Whatever it leased must be released, not left to expire.
        q = uniq()
        self.c.push(q, [b"m%d" % i for i in range(40)])
        for i in range(40):
            g = "race%d" % i
            s = ConsumeStream(self.c, sub(q, consumer_group=g, batch=1))
            s.cancel()
            s.wait_end()
            p = self.c.pop_until(q, timeout=5, consumer_group=g)  # lease_time is 60 s
            self.assertEqual(p.messages[0].offset, 0)

    def test_no_new_batch_while_the_client_reads_nothing(self):
        # A client that stops reading (no HTTP/2 window) with credits left must not
        # get more batches leased for it: they would sit unread in the broker.
        from harness import grpc_frame
        q = uniq()
        n = 12
        self.c.push_items([Q.PushItem(queue=q, partition="p%02d" % i, payload=bytes([65 + i]) * 100000)
                           for i in range(n)], timeout=30)
        h = broker.raw(auto_window=False)
        try:
            req = Q.ConsumeRequest(subscribe=sub(q, batch=1, credits=n, consumer_group="slow"))
            sid = h.request("/queen.v1.QueueService/Consume", grpc_frame(req.SerializeToString()), end=False)
            h.wait_for(lambda: h.received[sid] > 0, 10)

            def leased():
                return sum(p.leased for p in self.c.get_queue(q, group="slow").partitions)

            wait_until(lambda: leased() >= 1, 10, what="the first batch")
            h.pump(0.5)
            self.assertLessEqual(leased(), 2)
            # reading again lets the rest through
            h.open_window(sid, 4 << 20)
            h.auto_window = True
            self.assertTrue(h.wait_for(lambda: h.received[sid] >= n * 100000, 20))
            self.assertEqual(leased(), n)
        finally:
            h.close()

    def test_a_waiting_stream_pops_on_news_not_on_credit_or_acks(self):
        # Data no hint names (a lease that expired) is found by the re-check
        # (60 s here), a wake-up or a scan the stream makes for its own reasons;
        # more credit on top of some, or an answered in-band ack, is no reason:
        # popping on them made an any-partition scan per batch.
        q = uniq()
        self.c.push(q, [b"x"], partition="b")
        other = self.c.pop(q, lease_seconds=2)
        self.assertEqual(len(other.messages), 1)
        s = self.stream(sub(q, batch=1, credits=3))
        self.assertEqual(s.roundtrip(request_id=1), [])  # subscribed; its scan found b leased
        wait_until(lambda: not self.c.partition(q, "b").leased, 10, what="the lease to expire")
        s.credits(1)
        s.send(Q.ConsumeRequest(request_id=2, ack=Q.AckRequest(items=[Q.AckItem(
            partition_id=other.messages[0].partition_id, offset=0, lease_id="00000000-0000-4000-8000-000000000000")])))
        r = s.recv()
        self.assertEqual((r.request_id, r.WhichOneof("kind")), (2, "ack"))
        s.recv_none(1.0)
        # news wakes it
        self.c.push(q, [b"y"], partition="c")
        self.assertEqual(self.batch(s).messages[0].partition, "c")

    def test_closed_channel_releases_leases(self):
        q = uniq()
        self.c.push(q, [b"a"])
        other = Client(broker.channel())
        s = self.stream(sub(q), client=other)
        self.batch(s)
        other.close()
        t0 = time.monotonic()
        self.c.pop_until(q, timeout=10)
        self.assertLess(time.monotonic() - t0, 5.0)


class StreamLimit(unittest.TestCase):
    """QUEEN_MAX_STREAMS=2 on a broker of its own."""

    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_queue_consume_limit", env={"QUEEN_MAX_STREAMS": "2"}).start()
        cls.c = Client(cls.b.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        rc = cls.b.stop()
        assert rc == 0, cls.b.log_text()

    def test_at_and_past_the_limit(self):
        q = uniq()
        s1 = ConsumeStream(self.c, sub(q))
        s2 = ConsumeStream(self.c, sub(q))
        try:
            s1.roundtrip()
            s2.roundtrip()  # both open: at the limit
            s3 = ConsumeStream(self.c, sub(q))
            self.assertEqual(s3.wait_end(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("QUEEN_MAX_STREAMS", s3.error.details())
            # the open ones still work
            self.c.push(q, [b"x"])
            wait_until(lambda: not s1._in.empty() or not s2._in.empty(), 10, what="a batch")
            # closing one frees its slot
            s1.cancel()
            s4 = wait_until(lambda: accepted_stream(self.c, sub(q)), 10, what="a stream slot")
            s4.cancel()
        finally:
            s1.cancel()
            s2.cancel()


if __name__ == "__main__":
    unittest.main()
