"""QueueService.Push end to end against queen-broker and a real database:
offsets, ids, deduplication (inside a request, across requests, per partition),
per-item validation, the item / payload / receive limits, and that a rejected
request writes nothing.

The broker runs with small limits so the tests at and past them stay cheap:
QUEEN_MAX_PUSH_ITEMS=8, QUEEN_MAX_PAYLOAD_BYTES=16384, QUEEN_MAX_RECV_BYTES=131072.
"""

import unittest

import grpc

from harness import Broker
from qsupport import A, Client, Q, is_uuid7, rpc_error, uniq

MAX_ITEMS = 8
MAX_PAYLOAD = 16384
MAX_RECV = 131072

broker = None


def setUpModule():
    global broker
    broker = Broker("product", db="e2e_queue_push", env={
        "QUEEN_MAX_PUSH_ITEMS": str(MAX_ITEMS),
        "QUEEN_MAX_PAYLOAD_BYTES": str(MAX_PAYLOAD),
        "QUEEN_MAX_RECV_BYTES": str(MAX_RECV),
    }).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


QUEUED = Q.PUSH_STATUS_QUEUED
DUPLICATE = Q.PUSH_STATUS_DUPLICATE


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, data):
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def raw_push_request(items):
    """PushRequest bytes built by hand, so names may be invalid UTF-8.
    items: list of (queue bytes, partition bytes, payload bytes)."""
    body = b""
    for queue, partition, payload in items:
        item = _field(1, queue) + (_field(2, partition) if partition else b"") + _field(3, payload)
        body += _field(1, item)
    return body


class PushTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def assertInvalid(self, items, *fragments):
        """The push fails INVALID_ARGUMENT with a message containing every fragment,
        and none of the queues it names was created."""
        e = rpc_error(self.c.push_items, items)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, e.details())
        for f in fragments:
            self.assertIn(f, e.details())
        for it in items:
            if it.queue and len(it.queue.encode()) <= 255 and it.queue.isprintable():
                self.assertFalse(self.c.exists(it.queue), "rejected push created " + it.queue)
        return e


class Offsets(PushTest):
    def test_queued_in_request_order_with_dense_offsets(self):
        q = uniq()
        r = self.c.push(q, [b"m%d" % i for i in range(5)])
        self.assertEqual([x.index for x in r.results], list(range(5)))
        self.assertEqual([x.status for x in r.results], [QUEUED] * 5)
        self.assertEqual([x.offset for x in r.results], list(range(5)))
        self.assertEqual({x.queue for x in r.results}, {q})
        self.assertEqual({x.partition for x in r.results}, {"Default"})
        pids = {x.partition_id for x in r.results}
        self.assertEqual(len(pids), 1)
        self.assertTrue(all(not x.error for x in r.results))
        # the next push continues where this one ended
        r2 = self.c.push(q, [b"n0", b"n1"])
        self.assertEqual([x.offset for x in r2.results], [5, 6])
        self.assertEqual({x.partition_id for x in r2.results}, pids)
        self.assertEqual(self.c.get_queue(q).queue.messages, 7)
        # and a pop sees them in that order with those payloads
        p = self.c.pop(q, batch=10)
        self.assertEqual([m.payload for m in p.messages],
                         [b"m0", b"m1", b"m2", b"m3", b"m4", b"n0", b"n1"])
        self.assertEqual([m.offset for m in p.messages], list(range(7)))

    def test_message_ids_are_uuid7_and_increase(self):
        q = uniq()
        r = self.c.push(q, [b"x"] * MAX_ITEMS)
        ids = [x.message_id for x in r.results]
        for i in ids:
            self.assertTrue(is_uuid7(i), i)
        self.assertEqual(len(set(ids)), len(ids))
        self.assertEqual(ids, sorted(ids))
        later = self.c.push(q, [b"y"]).results[0].message_id
        self.assertGreater(later, ids[-1])

    def test_transaction_id_defaults_to_message_id(self):
        q = uniq()
        r = self.c.push(q, [b"a", b"b"], txns=[None, "explicit"])
        self.assertEqual(r.results[0].transaction_id, r.results[0].message_id)
        self.assertEqual(r.results[1].transaction_id, "explicit")
        self.assertNotEqual(r.results[1].message_id, "explicit")
        msgs = self.c.pop(q, batch=10).messages
        self.assertEqual(msgs[0].transaction_id, r.results[0].message_id)
        self.assertEqual(msgs[0].message_id, r.results[0].message_id)
        self.assertEqual(msgs[1].transaction_id, "explicit")
        self.assertEqual(msgs[1].message_id, r.results[1].message_id)

    def test_trace_id_travels_with_the_message(self):
        q = uniq()
        tid = "0191b7a4-3c1e-7d2a-8f00-123456789abc"
        self.c.push_items([Q.PushItem(queue=q, payload=b"t", trace_id=tid),
                           Q.PushItem(queue=q, payload=b"u")])
        msgs = self.c.pop(q, batch=10).messages
        self.assertEqual(msgs[0].trace_id, tid)
        self.assertEqual(msgs[1].trace_id, "")

    def test_items_for_several_queues_and_partitions(self):
        q1, q2 = uniq(), uniq()
        items = [Q.PushItem(queue=q1, partition="p1", payload=b"a"),
                 Q.PushItem(queue=q2, payload=b"b"),
                 Q.PushItem(queue=q1, partition="p2", payload=b"c"),
                 Q.PushItem(queue=q1, partition="p1", payload=b"d")]
        r = self.c.push_items(items).results
        self.assertEqual([x.index for x in r], [0, 1, 2, 3])
        self.assertEqual([(x.queue, x.partition, x.offset) for x in r],
                         [(q1, "p1", 0), (q2, "Default", 0), (q1, "p2", 0), (q1, "p1", 1)])
        self.assertEqual(r[0].partition_id, r[3].partition_id)
        self.assertNotEqual(r[0].partition_id, r[2].partition_id)
        self.assertEqual(self.c.get_queue(q1).queue.partitions, 2)
        self.assertEqual(self.c.get_queue(q1).queue.messages, 3)

    def test_payload_bytes_are_opaque(self):
        q = uniq()
        payload = bytes(range(256)) * 4
        self.c.push(q, [payload])
        self.assertEqual(self.c.pop(q).messages[0].payload, payload)


class Dedup(PushTest):
    def test_duplicate_inside_one_request(self):
        q = uniq()
        r = self.c.push(q, [b"first", b"other", b"second"], txns=["t1", "t2", "t1"]).results
        self.assertEqual([x.status for x in r], [QUEUED, QUEUED, DUPLICATE])
        self.assertEqual(r[2].message_id, r[0].message_id)
        self.assertEqual(r[2].offset, r[0].offset)
        self.assertEqual(r[2].partition_id, r[0].partition_id)
        self.assertEqual(r[2].transaction_id, "t1")
        self.assertEqual(self.c.get_queue(q).queue.messages, 2)
        self.assertEqual([m.payload for m in self.c.pop(q, batch=10).messages], [b"first", b"other"])

    def test_duplicate_across_requests(self):
        q = uniq()
        first = self.c.push(q, [b"a", b"b"], txns=["k1", "k2"]).results
        again = self.c.push(q, [b"c", b"a2"], txns=["k3", "k1"]).results
        self.assertEqual(again[0].status, QUEUED)
        self.assertEqual(again[0].offset, 2)  # no hole for the duplicate
        self.assertEqual(again[1].status, DUPLICATE)
        self.assertEqual(again[1].message_id, first[0].message_id)
        self.assertEqual(again[1].offset, first[0].offset)
        self.assertEqual(again[1].partition_id, first[0].partition_id)
        # a whole request of duplicates writes nothing
        third = self.c.push(q, [b"x", b"y"], txns=["k2", "k3"]).results
        self.assertEqual([x.status for x in third], [DUPLICATE, DUPLICATE])
        self.assertEqual([x.offset for x in third], [1, 2])
        self.assertEqual(third[1].message_id, again[0].message_id)
        self.assertEqual(self.c.get_queue(q).queue.messages, 3)

    def test_repeats_of_a_stored_transaction_id_in_one_request(self):
        q = uniq()
        orig = self.c.push(q, [b"o"], txns=["r"]).results[0]
        r = self.c.push(q, [b"x", b"new", b"y"], txns=["r", "n", "r"]).results
        self.assertEqual([x.status for x in r], [DUPLICATE, QUEUED, DUPLICATE])
        for x in (r[0], r[2]):
            self.assertEqual((x.message_id, x.offset), (orig.message_id, orig.offset))
        self.assertEqual(r[1].offset, 1)
        self.assertEqual(self.c.get_queue(q).queue.messages, 2)

    def test_same_transaction_id_in_another_partition_is_accepted(self):
        q = uniq()
        a = self.c.push(q, [b"a"], partition="pa", txns=["same"]).results[0]
        b = self.c.push(q, [b"b"], partition="pb", txns=["same"]).results[0]
        self.assertEqual((a.status, b.status), (QUEUED, QUEUED))
        self.assertNotEqual(a.message_id, b.message_id)
        self.assertNotEqual(a.partition_id, b.partition_id)
        # inside one request too
        r = self.c.push_items([Q.PushItem(queue=q, partition="pc", payload=b"c", transaction_id="s2"),
                               Q.PushItem(queue=q, partition="pd", payload=b"d", transaction_id="s2")])
        self.assertEqual([x.status for x in r.results], [QUEUED, QUEUED])
        # and in another queue
        other = self.c.push(uniq(), [b"z"], partition="pa", txns=["same"]).results[0]
        self.assertEqual(other.status, QUEUED)

    def test_dedup_window_zero_disables_the_check(self):
        q = uniq()
        self.c.configure(q, dedup_window_seconds=0)
        a = self.c.push(q, [b"a"], txns=["w"]).results[0]
        b = self.c.push(q, [b"b"], txns=["w"]).results[0]
        self.assertEqual((a.status, b.status), (QUEUED, QUEUED))
        self.assertEqual((a.offset, b.offset), (0, 1))

    def test_minted_ids_are_never_duplicates(self):
        q = uniq()
        for _ in range(3):
            r = self.c.push(q, [b"same payload"] * 3).results
            self.assertEqual([x.status for x in r], [QUEUED] * 3)
        self.assertEqual(self.c.get_queue(q).queue.messages, 9)


class Validation(PushTest):
    def ok_item(self):
        return Q.PushItem(queue=uniq(), payload=b"fine")

    def test_queue_name_empty(self):
        self.assertInvalid([self.ok_item(), Q.PushItem(queue="", payload=b"x")], "items[1].queue")

    def test_queue_name_length(self):
        ok = uniq()
        name = (ok + "-" + "n" * 255)[:255]
        r = self.c.push(name, [b"x"]).results[0]
        self.assertEqual((r.status, r.queue), (QUEUED, name))
        long = name + "n"
        self.assertInvalid([self.ok_item(), Q.PushItem(queue=long, payload=b"x")],
                           "items[1].queue", "255")
        # multi-byte characters count in bytes
        self.assertInvalid([Q.PushItem(queue="é" * 128, payload=b"x")], "items[0].queue")

    def test_queue_name_control_characters(self):
        for bad in ("a\x01b", "tab\there", "nl\n", "del\x7f"):
            self.assertInvalid([self.ok_item(), self.ok_item(), Q.PushItem(queue=bad, payload=b"x")],
                               "items[2].queue", "control")

    def test_partition_name_rules(self):
        q = uniq()
        self.assertInvalid([Q.PushItem(queue=q, partition="p\x02", payload=b"x")],
                           "items[0].partition", "control")
        self.assertInvalid([Q.PushItem(queue=q, partition="p" * 256, payload=b"x")],
                           "items[0].partition")
        self.assertFalse(self.c.exists(q))
        r = self.c.push(q, [b"x"], partition="p" * 255).results[0]
        self.assertEqual(r.status, QUEUED)

    def test_invalid_utf8_names(self):
        push = broker_channel_raw_push(self.c.ch)
        q = uniq()
        for queue, partition, what in ((b"bad\xff", b"", "items[1].queue"),
                                       (b"bad\xc3\x28", b"", "items[1].queue"),
                                       (q.encode(), b"p\xed\xa0\x80", "items[1].partition")):
            body = raw_push_request([(q.encode(), b"", b"ok"), (queue, partition, b"x")])
            e = rpc_error(push, body, timeout=10)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, e.details())
            self.assertIn(what, e.details())
        self.assertFalse(self.c.exists(q))
        # the same hand-built encoding with valid names is accepted
        ok = Q.PushResponse.FromString(push(raw_push_request([(q.encode(), b"p", b"ok")]), timeout=10))
        self.assertEqual(ok.results[0].status, QUEUED)

    def test_empty_payload(self):
        self.assertInvalid([self.ok_item(), Q.PushItem(queue=uniq(), payload=b"")],
                           "items[1].payload")

    def test_payload_limit(self):
        q = uniq()
        r = self.c.push(q, [b"p" * MAX_PAYLOAD]).results[0]
        self.assertEqual(r.status, QUEUED)
        self.assertEqual(len(self.c.pop(q).messages[0].payload), MAX_PAYLOAD)
        e = self.assertInvalid([self.ok_item(), Q.PushItem(queue=uniq(), payload=b"p" * (MAX_PAYLOAD + 1))],
                               "items[1].payload", str(MAX_PAYLOAD))
        self.assertIn(str(MAX_PAYLOAD + 1), e.details())

    def test_transaction_id_limit(self):
        q = uniq()
        txn = "t" * 65535
        r = self.c.push(q, [b"x"], txns=[txn]).results[0]
        self.assertEqual((r.status, r.transaction_id), (QUEUED, txn))
        self.assertEqual(self.c.pop(q).messages[0].transaction_id, txn)
        dup = self.c.push(q, [b"y"], txns=[txn]).results[0]
        self.assertEqual(dup.status, DUPLICATE)
        self.assertInvalid([self.ok_item(), Q.PushItem(queue=uniq(), payload=b"x", transaction_id="t" * 65536)],
                           "items[1].transaction_id", "65535")

    def test_bad_trace_id(self):
        for bad in ("not-a-uuid", "0191b7a4-3c1e-7d2a-8f00-123456789ab", "0191b7a43c1e7d2a8f00123456789abc0000"):
            self.assertInvalid([self.ok_item(), Q.PushItem(queue=uniq(), payload=b"x", trace_id=bad)],
                               "items[1].trace_id")

    def test_no_items(self):
        e = rpc_error(self.c.push_items, [])
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("items", e.details())

    def test_item_count_at_and_past_the_limit(self):
        q = uniq()
        r = self.c.push(q, [b"i%d" % i for i in range(MAX_ITEMS)])
        self.assertEqual(len(r.results), MAX_ITEMS)
        self.assertTrue(all(x.status == QUEUED for x in r.results))
        q2 = uniq()
        e = rpc_error(self.c.push, q2, [b"x"] * (MAX_ITEMS + 1))
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(str(MAX_ITEMS), e.details())
        self.assertFalse(self.c.exists(q2))
        self.assertEqual(self.c.message_count(q), MAX_ITEMS)

    def test_one_bad_item_rejects_the_whole_request(self):
        q = uniq()
        self.c.push(q, [b"before"])
        items = [Q.PushItem(queue=q, payload=b"good%d" % i) for i in range(MAX_ITEMS - 1)]
        items.append(Q.PushItem(queue=q, payload=b""))
        e = rpc_error(self.c.push_items, items)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("items[%d]" % (MAX_ITEMS - 1), e.details())
        self.assertEqual(self.c.message_count(q), 1)
        self.assertEqual(self.c.fetch(q).high_watermark, 1)


class ReceiveLimit(PushTest):
    def test_request_over_the_receive_limit(self):
        q = uniq()
        self.c.push(q, [b"before"])
        # every item valid, the message too large as a whole
        payloads = [b"r" * MAX_PAYLOAD] * MAX_ITEMS
        e = rpc_error(self.c.push, q, payloads)
        self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
        self.assertEqual(self.c.message_count(q), 1)
        # just under the limit is accepted
        n = (MAX_RECV - 1024) // (MAX_PAYLOAD + 64)
        r = self.c.push(q, [b"r" * MAX_PAYLOAD] * n)
        self.assertEqual(len(r.results), n)
        self.assertEqual(self.c.message_count(q), 1 + n)
        # the connection is still usable
        self.assertEqual(self.c.push(q, [b"after"]).results[0].offset, 1 + n)


class SharedItemLimit(PushTest):
    """QUEEN_MAX_PUSH_ITEMS also bounds Ack items and Transact operations."""

    def test_ack_items_at_and_past_the_limit(self):
        q = uniq()
        self.c.push(q, [b"x"] * MAX_ITEMS)
        p = self.c.pop(q, batch=MAX_ITEMS)
        item = lambda m: Q.AckItem(partition_id=m.partition_id, offset=m.offset, lease_id=m.lease_id)  # noqa: E731
        e = rpc_error(self.c.ack, [item(m) for m in p.messages] + [item(p.messages[0])])
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(str(MAX_ITEMS), e.details())
        self.assertEqual(self.c.partition(q).committed, -1)
        r = self.c.ack([item(m) for m in p.messages])
        self.assertEqual(len(r.results), MAX_ITEMS)
        self.assertEqual(self.c.partition(q).committed, MAX_ITEMS - 1)

    def test_transact_operations_at_and_past_the_limit(self):
        q = uniq()
        op = lambda i: Q.TransactOp(push=Q.PushItem(queue=q, payload=b"%d" % i))  # noqa: E731
        e = rpc_error(self.c.transact, [op(i) for i in range(MAX_ITEMS + 1)])
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(str(MAX_ITEMS), e.details())
        self.assertFalse(self.c.exists(q))
        r = self.c.transact([op(i) for i in range(MAX_ITEMS)])
        self.assertEqual([x.push.offset for x in r.results], list(range(MAX_ITEMS)))


def broker_channel_raw_push(ch):
    """Push over ch with a pre-serialised request (bytes in, bytes out)."""
    return ch.unary_unary("/queen.v1.QueueService/Push", request_serializer=lambda b: b,
                          response_deserializer=lambda b: b)


class Admin(PushTest):
    """The queue a push creates."""

    def test_push_creates_queue_with_defaults_from_dotted_name(self):
        q = "ns%s.task.rest" % uniq().replace("-", "")
        self.c.push(q, [b"x"], partition="P")
        info = self.c.get_queue(q)
        self.assertEqual(info.queue.options.namespace, q.split(".")[0])
        self.assertEqual(info.queue.options.task, "task")
        self.assertEqual(info.queue.options.lease_time, 60)
        self.assertEqual([p.partition for p in info.partitions], ["P"])
        self.assertIsInstance(info, A.GetQueueResponse)


if __name__ == "__main__":
    unittest.main()
