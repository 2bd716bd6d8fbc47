"""QueueService.Transact (pushes and acks in one transaction: all or nothing) and
QueueService.Fetch (reads by offset: records, watermarks, per-entry errors,
byte budget, waiting for data) end to end.

The broker runs with QUEEN_WAKE_RECHECK_MS=60000 so a waiting fetch answered
early was woken by the push.
"""

import concurrent.futures
import time
import unittest

import grpc

from harness import Broker
from qsupport import C, Client, Q, rpc_error, uniq, wait_until

broker = None
pool = None

OTHER_LEASE = "0191b7a4-3c1e-7d2a-8f00-123456789abc"


def setUpModule():
    global broker, pool
    broker = Broker("product", db="e2e_queue_txn_fetch", env={"QUEEN_WAKE_RECHECK_MS": "60000"}).start()
    pool = concurrent.futures.ThreadPoolExecutor(4)


def tearDownModule():
    pool.shutdown()
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def push_op(queue, payload, txn="", partition=""):
    return Q.TransactOp(push=Q.PushItem(queue=queue, partition=partition, payload=payload, transaction_id=txn))


def ack_op(msg, lease=None, group="", status=C.ACK_STATUS_COMPLETED, by_txn=False, offset=None):
    item = Q.AckItem(partition_id=msg.partition_id, status=status,
                     lease_id=msg.lease_id if lease is None else lease)
    if by_txn:
        item.transaction_id = msg.transaction_id
    else:
        item.offset = msg.offset if offset is None else offset
    return Q.TransactOp(ack=Q.TransactAck(consumer_group=group, item=item))


class TxnFetchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()


class Transact(TxnFetchTest):
    def setUp(self):
        """src holds 3 messages leased by one pop; dst is where results go."""
        self.src, self.dst = uniq("src"), uniq("dst")
        self.c.push(self.src, [b"s0", b"s1", b"s2"], txns=["a", "b", "c"])
        self.p = self.c.pop(self.src, batch=3)
        self.assertEqual(len(self.p.messages), 3)

    def assertNothingWritten(self, dst_before=0):
        self.assertEqual(self.c.message_count(self.dst), dst_before)
        part = self.c.partition(self.src)
        self.assertEqual(part.committed, -1)
        self.assertTrue(part.leased)

    def assertAborted(self, ops, required=(), *fragments):
        e = rpc_error(self.c.transact, ops, required)
        self.assertEqual(e.code(), grpc.StatusCode.ABORTED, e.details())
        for f in fragments:
            self.assertIn(f, e.details())
        return e

    def test_pushes_and_acks_commit_together(self):
        m = self.p.messages
        ops = [push_op(self.dst, b"r0", "r0"), ack_op(m[1]), push_op(self.dst, b"r1"),
               push_op(self.dst, b"elsewhere", partition="P2")]
        r = self.c.transact(ops, [self.p.lease_id]).results
        self.assertEqual([x.index for x in r], [0, 1, 2, 3])
        self.assertEqual(r[0].push.status, Q.PUSH_STATUS_QUEUED)
        self.assertEqual((r[0].push.offset, r[2].push.offset, r[3].push.offset), (0, 1, 0))
        self.assertEqual(r[0].push.transaction_id, "r0")
        self.assertEqual(r[2].push.transaction_id, r[2].push.message_id)
        self.assertEqual(r[0].push.partition_id, r[2].push.partition_id)
        self.assertNotEqual(r[0].push.partition_id, r[3].push.partition_id)
        self.assertEqual((r[1].ack.outcome, r[1].ack.offset), (Q.ACK_OUTCOME_APPLIED, 1))
        self.assertFalse(r[1].ack.lease_released)
        self.assertEqual(self.c.partition(self.src).committed, 1)
        recs = self.c.fetch(self.dst).records
        self.assertEqual([x.payload for x in recs], [b"r0", b"r1"])
        self.assertEqual(recs[0].message_id, r[0].push.message_id)
        # the last ack of the batch releases the lease
        r = self.c.transact([ack_op(self.p.messages[2], by_txn=True)]).results
        self.assertTrue(r[0].ack.lease_released)
        self.assertFalse(self.c.partition(self.src).leased)

    def test_ack_of_the_whole_batch_with_its_required_lease(self):
        # the usual consume-transform-produce step: the ack releases the lease the
        # transaction requires, in the same transaction
        m = self.p.messages
        r = self.c.transact([push_op(self.dst, b"out"), ack_op(m[2])], [self.p.lease_id]).results
        self.assertEqual(r[0].push.status, Q.PUSH_STATUS_QUEUED)
        self.assertEqual((r[1].ack.outcome, r[1].ack.lease_released), (Q.ACK_OUTCOME_APPLIED, True))
        part = self.c.partition(self.src)
        self.assertEqual((part.committed, part.leased), (2, False))
        self.assertEqual(self.c.message_count(self.dst), 1)

    def test_push_wakes_parked_pops_and_fetches(self):
        self.c.push(self.dst, [b"first"], partition="F")
        before = self.c.rpcs()
        t0 = time.monotonic()
        pop = pool.submit(self.c.pop, self.dst, partition="P", wait_ms=8000, timeout=20)
        fetch = pool.submit(self.c.fetch, self.dst, partition="F", offset=1, max_wait_ms=8000, timeout=20)
        self.c.wait_received(before, n=2)
        self.c.transact([push_op(self.dst, b"to pop", partition="P"), push_op(self.dst, b"to fetch", partition="F"),
                         ack_op(self.p.messages[0])])
        self.assertEqual([m.payload for m in pop.result(20).messages], [b"to pop"])
        self.assertEqual([m.payload for m in fetch.result(20).records], [b"to fetch"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_dedup_across_transact_and_push(self):
        q = self.dst
        self.c.push(q, [b"a"], txns=["via-push"])
        r = self.c.transact([push_op(q, b"b", "via-txn")]).results[0].push
        self.assertEqual((r.status, r.offset), (Q.PUSH_STATUS_QUEUED, 1))
        self.c.push(q, [b"c"], txns=["after"])
        dup = self.c.push(q, [b"b2"], txns=["via-txn"]).results[0]
        self.assertEqual((dup.status, dup.offset, dup.message_id), (Q.PUSH_STATUS_DUPLICATE, 1, r.message_id))
        self.assertAborted([push_op(q, b"a2", "via-push")], (), "duplicate")
        self.assertEqual(self.c.message_count(q), 3)

    def test_duplicate_inside_the_request(self):
        r = self.c.transact([push_op(self.dst, b"x", "same"), push_op(self.dst, b"y", "same")]).results
        self.assertEqual([x.push.status for x in r], [Q.PUSH_STATUS_QUEUED, Q.PUSH_STATUS_DUPLICATE])
        self.assertEqual(r[1].push.message_id, r[0].push.message_id)
        self.assertEqual(r[1].push.offset, r[0].push.offset)
        self.assertEqual(self.c.message_count(self.dst), 1)

    def test_duplicate_push_aborts_everything(self):
        self.c.push(self.dst, [b"old"], txns=["taken"])
        ops = [ack_op(self.p.messages[2]), push_op(self.dst, b"new", "fresh"),
               push_op(self.dst, b"dup", "taken")]
        self.assertAborted(ops, [self.p.lease_id], "duplicate")
        self.assertNothingWritten(dst_before=1)
        self.assertEqual(self.c.fetch(self.dst).high_watermark, 1)
        # retried without the duplicate, it commits
        r = self.c.transact(ops[:2], [self.p.lease_id]).results
        self.assertEqual(r[1].push.offset, 1)  # no hole left by the aborted attempt

    def test_ack_under_a_lease_not_held_aborts(self):
        ops = [push_op(self.dst, b"x"), ack_op(self.p.messages[0], lease=OTHER_LEASE)]
        self.assertAborted(ops, (), "operation 1")
        self.assertNothingWritten()

    def test_ack_of_an_unknown_transaction_aborts(self):
        ops = [push_op(self.dst, b"x"), ack_op(self.p.messages[0]),
               Q.TransactOp(ack=Q.TransactAck(item=Q.AckItem(
                   partition_id=self.p.messages[0].partition_id, transaction_id="never",
                   lease_id=self.p.lease_id)))]
        self.assertAborted(ops)
        self.assertNothingWritten()

    def test_ack_beyond_the_batch_aborts(self):
        self.c.push(self.src, [b"s3"])
        ops = [push_op(self.dst, b"x"), ack_op(self.p.messages[0], offset=3)]
        self.assertAborted(ops)
        self.assertNothingWritten()

    def test_ack_of_a_message_already_consumed_is_a_noop(self):
        self.c.ack_offset(self.p.messages[0])
        r = self.c.transact([ack_op(self.p.messages[0], lease="")]).results
        self.assertEqual(r[0].ack.outcome, Q.ACK_OUTCOME_NOOP)

    def test_required_lease_not_held_aborts(self):
        ops = [push_op(self.dst, b"x"), ack_op(self.p.messages[0], lease="")]
        self.assertAborted(ops, [OTHER_LEASE])
        self.assertNothingWritten()
        self.assertAborted([push_op(self.dst, b"y")], [self.p.lease_id, OTHER_LEASE])
        self.assertNothingWritten()

    def test_single_required_lease_checks_acks_without_one(self):
        # the ack carries no lease id: it is checked against the one required lease
        other = self.c.pop(self.src, consumer_group="other", batch=3)
        ops = [ack_op(self.p.messages[0], lease="")]
        self.assertAborted(ops, [other.lease_id])
        self.assertNothingWritten()
        r = self.c.transact(ops, [self.p.lease_id]).results
        self.assertEqual(r[0].ack.outcome, Q.ACK_OUTCOME_APPLIED)

    def test_expired_required_lease_aborts(self):
        q = uniq()
        self.c.push(q, [b"x"])
        p = self.c.pop(q, lease_seconds=1)
        wait_until(lambda: not self.c.partition(q).leased, 10, what="the lease to expire")
        self.assertAborted([push_op(self.dst, b"x"), ack_op(p.messages[0])], [p.lease_id])
        self.assertEqual(self.c.message_count(self.dst), 0)

    def test_failed_ack_in_a_transaction_dead_letters(self):
        q = uniq()
        self.c.configure(q, retry_limit=0)
        self.c.push(q, [b"poison", b"fine"])
        p = self.c.pop(q, batch=2)
        r = self.c.transact([ack_op(p.messages[0], status=C.ACK_STATUS_FAILED),
                             push_op(self.dst, b"side effect")], [p.lease_id]).results
        self.assertEqual(r[0].ack.outcome, Q.ACK_OUTCOME_APPLIED)
        self.assertTrue(r[0].ack.dlq)
        self.assertEqual([d.payload for d in self.c.dead_letters(q)], [b"poison"])
        self.assertEqual([m.payload for m in self.c.pop(q, batch=2).messages], [b"fine"])

    def test_acks_across_many_partitions(self):
        # 1 to QUEEN_MAX_PUSH_ITEMS operations, whatever partitions they touch
        q = uniq()
        n = 300
        self.c.push_items([Q.PushItem(queue=q, partition="p%03d" % i, payload=b"x") for i in range(n)])
        msgs = []
        while len(msgs) < n:
            msgs += list(self.c.pop(q, batch=1000, max_partitions=1000).messages)
        r = self.c.transact([ack_op(m) for m in msgs] + [push_op(self.dst, b"done")]).results
        self.assertEqual({x.ack.outcome for x in r[:n]}, {Q.ACK_OUTCOME_APPLIED})
        self.assertEqual(self.c.get_queue(q).depth, 0)

    def test_validation(self):
        pid = self.p.messages[0].partition_id
        cases = [
            ([], (), "ops"),
            ([Q.TransactOp()], (), "ops[0]"),
            ([push_op(self.dst, b"ok"), push_op("", b"x")], (), "ops[1].push.queue"),
            ([push_op(self.dst, b"ok"), push_op(self.dst, b"")], (), "ops[1].push.payload"),
            ([Q.TransactOp(ack=Q.TransactAck())], (), "ops[0].ack"),
            ([Q.TransactOp(ack=Q.TransactAck(item=Q.AckItem(partition_id="bad", offset=0)))], (), "ops[0].ack"),
            ([Q.TransactOp(ack=Q.TransactAck(item=Q.AckItem(partition_id=pid)))], (), "ops[0].ack"),
            ([push_op(self.dst, b"ok")], [""], "required_leases[0]"),
        ]
        for ops, req, frag in cases:
            e = rpc_error(self.c.transact, ops, req)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, frag)
            self.assertIn(frag, e.details())
        self.assertNothingWritten()


class AbortLeavesConnectionUsable(unittest.TestCase):
    """One database connection (QUEEN_DB_POOL_SIZE=1), so every call after an
    aborted Transact runs on the connection the abort happened on. The aborted
    transaction's later steps were never prepared on it; later calls using those
    statements must still work."""

    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_queue_txn_pool1", env={"QUEEN_DB_POOL_SIZE": "1"}).start()
        cls.c = Client(cls.b.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        rc = cls.b.stop()
        assert rc == 0, cls.b.log_text()

    def test_ack_and_lease_check_after_an_aborted_transaction(self):
        src, dst = uniq("src"), uniq("dst")
        self.c.push(dst, [b"old"], txns=["taken"])
        self.c.push(src, [b"s0", b"s1"])
        p = self.c.pop(src, batch=2)
        # first statement (the push) raises: the ack and the lease check behind it
        # in the same pipeline are skipped by the server
        e = rpc_error(self.c.transact, [push_op(dst, b"dup", "taken"), ack_op(p.messages[0])],
                      [p.lease_id])
        self.assertEqual(e.code(), grpc.StatusCode.ABORTED)
        self.assertIn("duplicate", e.details())
        # a plain Ack (the ack statement) and a Transact with a lease check
        r = self.c.ack([Q.AckItem(partition_id=p.messages[0].partition_id, offset=0, lease_id=p.lease_id)])
        self.assertEqual(r.results[0].outcome, Q.ACK_OUTCOME_APPLIED)
        r = self.c.transact([push_op(dst, b"new"), ack_op(p.messages[1])], [p.lease_id]).results
        self.assertEqual((r[0].push.status, r[1].ack.outcome), (Q.PUSH_STATUS_QUEUED, Q.ACK_OUTCOME_APPLIED))


class Fetch(TxnFetchTest):
    def test_records_and_watermarks(self):
        q = uniq()
        pushed = self.c.push(q, [b"f%d" % i for i in range(5)], txns=["t%d" % i for i in range(5)]).results
        r = self.c.fetch(q)
        self.assertEqual((r.queue, r.partition, r.error), (q, "Default", Q.FETCH_ERROR_NONE))
        self.assertEqual((r.high_watermark, r.log_start_offset), (5, 0))
        self.assertEqual([m.offset for m in r.records], [0, 1, 2, 3, 4])
        self.assertEqual([m.payload for m in r.records], [b"f%d" % i for i in range(5)])
        self.assertEqual([m.message_id for m in r.records], [x.message_id for x in pushed])
        self.assertEqual([m.transaction_id for m in r.records], ["t%d" % i for i in range(5)])
        self.assertEqual({m.lease_id for m in r.records}, {""})
        self.assertEqual({m.consumer_group for m in r.records}, {""})
        self.assertEqual({m.partition_id for m in r.records}, {pushed[0].partition_id})
        self.assertEqual([m.offset for m in self.c.fetch(q, offset=3).records], [3, 4])
        at_end = self.c.fetch(q, offset=5)
        self.assertEqual((len(at_end.records), at_end.error, at_end.high_watermark), (0, Q.FETCH_ERROR_NONE, 5))

    def test_fetch_moves_no_cursor(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"])
        self.c.fetch(q)
        self.assertEqual([m.offset for m in self.c.pop(q, batch=5).messages], [0, 1])
        # and reads leased messages
        self.assertEqual(len(self.c.fetch(q).records), 2)

    def test_errors(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"], partition="P")
        r = self.c.fetch(q, offset=3, partition="P")
        self.assertEqual(r.error, Q.FETCH_ERROR_OFFSET_OUT_OF_RANGE)
        self.assertEqual(len(r.records), 0)
        self.assertEqual(self.c.fetch(q, partition="nope").error, Q.FETCH_ERROR_UNKNOWN_PARTITION)
        self.assertEqual(self.c.fetch(q).error, Q.FETCH_ERROR_UNKNOWN_PARTITION)  # Default never written
        self.assertEqual(self.c.fetch(uniq()).error, Q.FETCH_ERROR_UNKNOWN_PARTITION)
        self.assertFalse(self.c.exists(uniq()))

    def test_entries_answer_in_order(self):
        q1, q2 = uniq(), uniq()
        self.c.push(q1, [b"a", b"b"])
        self.c.push(q2, [b"c"])
        r = self.c.q.Fetch(Q.FetchRequest(entries=[
            Q.FetchEntry(queue=q2), Q.FetchEntry(queue="missing" + q1), Q.FetchEntry(queue=q1, offset=1),
            Q.FetchEntry(queue=q1, offset=9)]), timeout=10).results
        self.assertEqual([x.queue for x in r], [q2, "missing" + q1, q1, q1])
        self.assertEqual([[m.payload for m in x.records] for x in r], [[b"c"], [], [b"b"], []])
        self.assertEqual([x.error for x in r], [Q.FETCH_ERROR_NONE, Q.FETCH_ERROR_UNKNOWN_PARTITION,
                                                Q.FETCH_ERROR_NONE, Q.FETCH_ERROR_OFFSET_OUT_OF_RANGE])

    def test_max_bytes(self):
        q = uniq()
        for i in range(5):
            self.c.push(q, [b"%d" % i * 1000, b"%d" % i * 1000])  # 5 segments of 2 messages
        everything = self.c.fetch(q)
        self.assertEqual(len(everything.records), 10)
        some = self.c.fetch(q, max_bytes=8000)
        self.assertGreaterEqual(len(some.records), 1)
        self.assertLess(len(some.records), 10)
        self.assertEqual([m.offset for m in some.records], list(range(len(some.records))))
        self.assertLessEqual(sum(len(m.payload) for m in some.records), 8000)
        one = self.c.fetch(q, max_bytes=1)
        self.assertEqual([m.offset for m in one.records], [0])  # the first record always comes
        self.assertEqual(one.high_watermark, 10)

    def test_woken_by_push(self):
        q = uniq()
        self.c.push(q, [b"a"])
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.fetch, q, offset=1, max_wait_ms=8000, timeout=20)
        self.c.wait_received(before)
        self.assertFalse(fut.done())
        self.c.push(q, [b"b"])
        r = fut.result(timeout=20)
        self.assertEqual([m.payload for m in r.records], [b"b"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_wait_ends_empty(self):
        q = uniq()
        self.c.push(q, [b"a"])
        t0 = time.monotonic()
        r = self.c.fetch(q, offset=1, max_wait_ms=600)
        self.assertEqual((len(r.records), r.error, r.high_watermark), (0, Q.FETCH_ERROR_NONE, 1))
        self.assertGreaterEqual(time.monotonic() - t0, 0.55)
        # an error answers at once, whatever the wait
        t0 = time.monotonic()
        self.assertEqual(self.c.fetch(q, offset=5, max_wait_ms=8000).error, Q.FETCH_ERROR_OFFSET_OUT_OF_RANGE)
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_validation(self):
        q = uniq()
        for req, frag in ((Q.FetchRequest(), "entries"),
                          (Q.FetchRequest(entries=[Q.FetchEntry(queue=q, offset=-1)]), "entries[0].offset"),
                          (Q.FetchRequest(entries=[Q.FetchEntry(queue=q), Q.FetchEntry(queue="")]), "entries[1].queue"),
                          (Q.FetchRequest(entries=[Q.FetchEntry(queue=q, partition="p\x01")]), "entries[0].partition"),
                          (Q.FetchRequest(entries=[Q.FetchEntry(queue=q)], max_wait_ms=30001), "max_wait_ms"),
                          (Q.FetchRequest(entries=[Q.FetchEntry(queue=q)] * 1025), "entries")):
            e = rpc_error(self.c.q.Fetch, req, timeout=10)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, frag)
            self.assertIn(frag, e.details())
        self.assertEqual(len(self.c.q.Fetch(Q.FetchRequest(entries=[Q.FetchEntry(queue=q)] * 1024),
                                            timeout=10).results), 1024)


if __name__ == "__main__":
    unittest.main()
