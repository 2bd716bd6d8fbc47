"""QueueService.Ack and RenewLease, and the dead-letter queue (AdminService
ListDeadLetters / ReplayDeadLetter / DeleteDeadLetter) end to end: acks by offset
and by transaction id, the implicit prefix ack, every outcome, the retry budget,
dead-lettering and dropping, replay, deletion, lease renewal."""

import time
import unittest

import grpc

from harness import Broker
from qsupport import A, C, Client, Q, rpc_error, uniq, wait_until

broker = None

APPLIED = Q.ACK_OUTCOME_APPLIED
NOOP = Q.ACK_OUTCOME_NOOP
STALE = Q.ACK_OUTCOME_STALE
UNRESOLVED = Q.ACK_OUTCOME_UNRESOLVED
LEASE_INVALID = Q.ACK_OUTCOME_LEASE_INVALID
REJECTED = Q.ACK_OUTCOME_REJECTED
DEFERRED = Q.ACK_OUTCOME_DEFERRED

COMPLETED = C.ACK_STATUS_COMPLETED
FAILED = C.ACK_STATUS_FAILED
RETRY = C.ACK_STATUS_RETRY
DLQ = C.ACK_STATUS_DLQ

ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def setUpModule():
    global broker
    # a parked pop answered early was woken by a commit, not by its re-check
    broker = Broker("product", db="e2e_queue_ack", env={"QUEEN_WAKE_RECHECK_MS": "60000"}).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def now_us():
    return int(time.time() * 1e6)


class AckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def fill(self, q, n, txns=None, group=None, **opts):
        if opts:
            self.c.configure(q, **opts)
        return self.c.push(q, [b"m%d" % i for i in range(n)], txns=txns).results

    def item(self, msg, status=COMPLETED, by_txn=False, lease=None, error=""):
        it = Q.AckItem(partition_id=msg.partition_id, status=status, error=error,
                       lease_id=msg.lease_id if lease is None else lease)
        if by_txn:
            it.transaction_id = msg.transaction_id
        else:
            it.offset = msg.offset
        return it

    def committed(self, q, group=""):
        return self.c.partition(q, group=group).committed


class Outcomes(AckTest):
    def test_ack_by_offset_releases_at_batch_end(self):
        q = uniq()
        self.fill(q, 3)
        p = self.c.pop(q, batch=3)
        r = self.c.ack([self.item(p.messages[2])]).results[0]
        self.assertEqual((r.index, r.outcome, r.success, r.offset), (0, APPLIED, True, 2))
        self.assertTrue(r.lease_released)
        self.assertFalse(r.dlq or r.dropped)
        self.assertEqual(r.error, "")
        part = self.c.partition(q)
        self.assertEqual((part.committed, part.depth, part.leased), (2, 0, False))

    def test_implicit_prefix_ack(self):
        q = uniq()
        self.fill(q, 5)
        p = self.c.pop(q, batch=5)
        r = self.c.ack([self.item(p.messages[2])]).results[0]
        self.assertEqual(r.outcome, APPLIED)
        self.assertFalse(r.lease_released)  # offsets 3 and 4 are still leased
        self.assertEqual(self.committed(q), 2)
        self.assertTrue(self.c.partition(q).leased)
        self.assertEqual(len(self.c.pop(q).messages), 0)
        r = self.c.ack([self.item(p.messages[4])]).results[0]
        self.assertTrue(r.lease_released)
        self.assertEqual(self.committed(q), 4)
        # everything consumed, nothing redelivered
        self.assertEqual(len(self.c.pop(q).messages), 0)

    def test_ack_by_transaction_id(self):
        q = uniq()
        self.fill(q, 3, txns=["a", "b", "c"])
        p = self.c.pop(q, batch=3)
        r = self.c.ack([self.item(p.messages[1], by_txn=True)]).results[0]
        self.assertEqual((r.outcome, r.offset), (APPLIED, 1))
        self.assertEqual(self.committed(q), 1)
        # minted transaction ids resolve too
        q2 = uniq()
        self.fill(q2, 2)
        p = self.c.pop(q2, batch=2)
        r = self.c.ack([self.item(p.messages[1], by_txn=True)]).results[0]
        self.assertEqual((r.outcome, r.offset, r.lease_released), (APPLIED, 1, True))

    def test_results_in_request_order(self):
        q1, q2 = uniq(), uniq()
        self.fill(q1, 2)
        self.fill(q2, 2)
        a = self.c.pop(q1, batch=2)
        b = self.c.pop(q2, batch=2)
        items = [self.item(b.messages[1]), self.item(a.messages[0]), Q.AckItem(
            partition_id=a.messages[0].partition_id, transaction_id="nope", lease_id=a.lease_id)]
        res = self.c.ack(items).results
        self.assertEqual([r.index for r in res], [0, 1, 2])
        self.assertEqual([r.outcome for r in res], [APPLIED, APPLIED, UNRESOLVED])
        self.assertEqual([r.offset for r in res[:2]], [1, 0])

    def test_noop_and_stale(self):
        q = uniq()
        self.fill(q, 3)
        p = self.c.pop(q, batch=3)
        self.c.ack([self.item(p.messages[2])])
        noop = self.c.ack([self.item(p.messages[0], lease="")]).results[0]
        self.assertEqual((noop.outcome, noop.success), (NOOP, True))
        again = self.c.ack([self.item(p.messages[2], by_txn=True, lease="")]).results[0]
        self.assertEqual(again.outcome, NOOP)
        stale = self.c.ack([self.item(p.messages[1], status=FAILED, lease="")]).results[0]
        self.assertEqual((stale.outcome, stale.success), (STALE, False))
        self.assertTrue(stale.error)
        self.assertEqual(self.committed(q), 2)

    def test_unresolved(self):
        q = uniq()
        self.fill(q, 2, txns=["x1", "x2"])
        p = self.c.pop(q, batch=2)
        r = self.c.ack([Q.AckItem(partition_id=p.messages[0].partition_id, transaction_id="never",
                                  lease_id=p.lease_id)]).results[0]
        self.assertEqual((r.outcome, r.success), (UNRESOLVED, False))
        self.assertTrue(r.error)
        self.assertEqual(self.committed(q), -1)
        self.assertTrue(self.c.partition(q).leased)

    def test_lease_invalid(self):
        q = uniq()
        self.fill(q, 2)
        p = self.c.pop(q, batch=2)
        bogus = "0191b7a4-3c1e-7d2a-8f00-123456789abc"
        r = self.c.ack([self.item(p.messages[1], lease=bogus)]).results[0]
        self.assertEqual((r.outcome, r.success), (LEASE_INVALID, False))
        self.assertEqual(self.committed(q), -1)
        # without a lease id no check is made and the cursor moves
        r = self.c.ack([self.item(p.messages[0], lease="")]).results[0]
        self.assertEqual(r.outcome, APPLIED)
        self.assertEqual(self.committed(q), 0)

    def test_lease_invalid_after_expiry(self):
        q = uniq()
        self.fill(q, 2)
        p = self.c.pop(q, batch=2, lease_seconds=1)
        wait_until(lambda: not self.c.partition(q).leased, 10, what="the lease to expire")
        r = self.c.ack([self.item(p.messages[1])]).results[0]
        self.assertEqual(r.outcome, LEASE_INVALID)
        self.assertEqual(self.committed(q), -1)
        # redelivered from the start under a new lease
        again = self.c.pop(q, batch=2)
        self.assertEqual([m.offset for m in again.messages], [0, 1])

    def test_rejected(self):
        q = uniq()
        self.fill(q, 4)
        p = self.c.pop(q, batch=2)
        beyond = Q.AckItem(partition_id=p.messages[0].partition_id, offset=3, lease_id=p.lease_id)
        r = self.c.ack([beyond]).results[0]
        self.assertEqual((r.outcome, r.success), (REJECTED, False))
        # a group with no state in the partition
        r = self.c.ack([self.item(p.messages[0], lease="")], group="stranger").results[0]
        self.assertEqual(r.outcome, REJECTED)
        # an unknown partition
        r = self.c.ack([Q.AckItem(partition_id="0191b7a4-3c1e-7d2a-8f00-123456789abc", offset=0)]).results[0]
        self.assertEqual(r.outcome, REJECTED)
        self.assertEqual(self.committed(q), -1)

    def test_deferred_above_a_failure(self):
        q = uniq()
        self.fill(q, 3)
        p = self.c.pop(q, batch=3)
        res = self.c.ack([self.item(p.messages[0], status=FAILED),
                          self.item(p.messages[2])]).results
        self.assertEqual(res[0].outcome, APPLIED)
        self.assertTrue(res[0].lease_released)
        self.assertEqual(res[1].outcome, DEFERRED)
        self.assertEqual(self.committed(q), -1)
        again = self.c.pop(q, batch=3)
        self.assertEqual([m.offset for m in again.messages], [0, 1, 2])

    def test_failure_below_completed_prefix(self):
        q = uniq()
        self.fill(q, 4)
        p = self.c.pop(q, batch=4)
        res = self.c.ack([self.item(p.messages[1]), self.item(p.messages[2], status=FAILED)]).results
        self.assertEqual([r.outcome for r in res], [APPLIED, APPLIED])
        self.assertEqual(self.committed(q), 1)
        again = self.c.pop(q, batch=4)
        self.assertEqual([m.offset for m in again.messages], [2, 3])

    def test_validation(self):
        pid = "0191b7a4-3c1e-7d2a-8f00-123456789abc"
        cases = [
            ([], "items"),
            ([Q.AckItem(partition_id="nope", offset=0)], "items[0].partition_id"),
            ([Q.AckItem(partition_id=pid, offset=0), Q.AckItem(partition_id=pid)], "items[1]"),
            ([Q.AckItem(partition_id=pid, offset=-1)], "items[0].offset"),
            ([Q.AckItem(partition_id=pid, transaction_id="")], "items[0].transaction_id"),
            ([Q.AckItem(partition_id=pid, offset=0, status=9)], "items[0].status"),
        ]
        for items, frag in cases:
            e = rpc_error(self.c.ack, items)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, frag)
            self.assertIn(frag, e.details())
        e = rpc_error(self.c.ack, [Q.AckItem(partition_id=pid, offset=0)], group="g\x01")
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)


class RetryBudget(AckTest):
    def test_failed_until_dead_letter(self):
        q = uniq()
        self.fill(q, 3, txns=["poison", "ok1", "ok2"], retry_limit=2)
        for attempt in range(2):
            p = self.c.pop(q, batch=3)
            self.assertEqual([m.offset for m in p.messages], [0, 1, 2], attempt)
            r = self.c.ack([self.item(p.messages[0], status=FAILED, error="boom %d" % attempt)]).results[0]
            self.assertEqual((r.outcome, r.dlq, r.dropped, r.lease_released), (APPLIED, False, False, True))
            (g,) = self.c.groups(q)
            self.assertEqual(g.partitions[0].retry_count, attempt + 1)
        self.assertEqual(self.c.dead_letters(q), [])
        p = self.c.pop(q, batch=3)
        self.assertEqual(p.messages[0].transaction_id, "poison")
        r = self.c.ack([self.item(p.messages[0], status=FAILED, error="final")]).results[0]
        self.assertEqual((r.outcome, r.dlq, r.dropped), (APPLIED, True, False))
        self.assertTrue(r.lease_released)
        (d,) = self.c.dead_letters(q)
        self.assertEqual((d.queue, d.partition, d.consumer_group), (q, "Default", "__QUEUE_MODE__"))
        self.assertEqual((d.offset, d.transaction_id, d.payload), (0, "poison", b"m0"))
        self.assertEqual(d.message_id, p.messages[0].message_id)
        self.assertEqual(d.partition_id, p.messages[0].partition_id)
        self.assertEqual(d.error, "final")
        self.assertEqual(d.retry_count, 2)
        self.assertAlmostEqual(d.failed_at_us / 1e6, now_us() / 1e6, delta=30)
        # the cursor moved past exactly the poison message
        self.assertEqual(self.committed(q), 0)
        p = self.c.pop(q, batch=3)
        self.assertEqual([m.transaction_id for m in p.messages], ["ok1", "ok2"])
        self.assertEqual(self.c.ack([self.item(p.messages[1])]).results[0].outcome, APPLIED)
        st = self.c.stats(q).queues[0]
        self.assertEqual(st.dead_letters, 1)

    def test_default_error_text(self):
        q = uniq()
        self.fill(q, 1, retry_limit=0)
        p = self.c.pop(q)
        r = self.c.ack([self.item(p.messages[0], status=FAILED)]).results[0]
        self.assertTrue(r.dlq)
        (d,) = self.c.dead_letters(q)
        self.assertEqual(d.error, "Retries exhausted")

    def test_lease_less_failure_dead_letters(self):
        q = uniq()
        self.fill(q, 2, retry_limit=0)
        p = self.c.pop(q, batch=2)
        r = self.c.ack([self.item(p.messages[0], status=FAILED, lease="", error="no lease")]).results[0]
        self.assertEqual((r.outcome, r.dlq), (APPLIED, True))
        self.assertEqual([d.error for d in self.c.dead_letters(q)], ["no lease"])
        self.assertEqual([m.offset for m in self.c.pop(q, batch=2).messages], [1])

    def test_one_call_over_several_partitions(self):
        q = uniq()
        self.c.configure(q, retry_limit=0)
        self.c.push_items([Q.PushItem(queue=q, partition="p%d" % i, payload=b"%d" % i) for i in range(3)])
        p = self.c.pop(q, batch=10, max_partitions=3)
        by = {m.partition: m for m in p.messages}
        res = self.c.ack([self.item(by["p2"]), self.item(by["p0"], status=FAILED, error="x"),
                          self.item(by["p1"], status=RETRY)]).results
        self.assertEqual([r.index for r in res], [0, 1, 2])
        self.assertEqual([r.outcome for r in res], [APPLIED] * 3)
        self.assertEqual([r.dlq for r in res], [False, True, False])
        self.assertTrue(all(r.lease_released for r in res))
        self.assertEqual([d.partition for d in self.c.dead_letters(q)], ["p0"])
        again = self.c.pop(q, batch=10, max_partitions=3)
        self.assertEqual([m.partition for m in again.messages], ["p1"])

    def test_retry_does_not_spend_budget(self):
        q = uniq()
        self.fill(q, 2, retry_limit=1)
        for _ in range(3):
            p = self.c.pop(q, batch=2)
            r = self.c.ack([self.item(p.messages[0], status=RETRY)]).results[0]
            self.assertEqual((r.outcome, r.dlq, r.lease_released), (APPLIED, False, True))
            (g,) = self.c.groups(q)
            self.assertEqual(g.partitions[0].retry_count, 0)
        p = self.c.pop(q, batch=2)
        self.assertFalse(self.c.ack([self.item(p.messages[0], status=FAILED)]).results[0].dlq)
        p = self.c.pop(q, batch=2)
        self.assertEqual(p.messages[0].offset, 0)
        self.assertTrue(self.c.ack([self.item(p.messages[0], status=FAILED)]).results[0].dlq)
        self.assertEqual(len(self.c.dead_letters(q)), 1)

    def test_dlq_status_forces_dead_lettering(self):
        q = uniq()
        self.fill(q, 3, retry_limit=100)
        p = self.c.pop(q, batch=3)
        res = self.c.ack([self.item(p.messages[0]),
                          self.item(p.messages[1], status=DLQ, error="bad shape")]).results
        self.assertEqual(res[0].outcome, APPLIED)
        self.assertTrue(res[1].dlq)
        (d,) = self.c.dead_letters(q)
        self.assertEqual((d.offset, d.error, d.retry_count), (1, "bad shape", 0))
        self.assertEqual(self.committed(q), 1)
        self.assertEqual([m.offset for m in self.c.pop(q, batch=3).messages], [2])

    def test_dlq_off_drops(self):
        q = uniq()
        self.fill(q, 3, retry_limit=0, dead_letter_queue=False, dlq_after_max_retries=False)
        p = self.c.pop(q, batch=3)
        r = self.c.ack([self.item(p.messages[0], status=FAILED)]).results[0]
        self.assertEqual((r.outcome, r.dlq, r.dropped, r.lease_released), (APPLIED, False, True, True))
        self.assertEqual(self.c.dead_letters(q), [])
        self.assertEqual(self.committed(q), 0)
        self.assertEqual([m.offset for m in self.c.pop(q, batch=3).messages], [1, 2])

    def test_either_flag_keeps_dead_lettering_on(self):
        q = uniq()
        self.fill(q, 1, retry_limit=0, dead_letter_queue=False, dlq_after_max_retries=True)
        p = self.c.pop(q)
        self.assertTrue(self.c.ack([self.item(p.messages[0], status=FAILED)]).results[0].dlq)

    def test_groups_dead_letter_independently(self):
        q = uniq()
        self.fill(q, 2, txns=["gp", "gq"], retry_limit=0)
        for g in ("g1", "g2"):
            p = self.c.pop(q, consumer_group=g, batch=2)
            self.assertTrue(self.c.ack([self.item(p.messages[0], status=FAILED)], group=g).results[0].dlq)
        self.assertEqual(len(self.c.dead_letters(q)), 2)
        self.assertEqual([d.consumer_group for d in self.c.dead_letters(q, group="g2")], ["g2"])
        # the queue-mode group still has it
        self.assertEqual(self.c.pop(q).messages[0].transaction_id, "gp")


class DeadLetters(AckTest):
    def dead_letter(self, q, txn="dl", group="", payload=b"dead"):
        """Pushes one message to q and dead-letters it for group; returns the DeadLetter."""
        self.c.push(q, [payload], txns=[txn])
        p = self.c.pop(q, consumer_group=group, batch=1)
        self.assertEqual(p.messages[0].transaction_id, txn)
        self.assertTrue(self.c.ack([self.item(p.messages[0], status=DLQ, error="e")], group=group).results[0].dlq)
        return [d for d in self.c.dead_letters(q, group=group) if d.transaction_id == txn][0]

    def test_list_newest_first_and_paging(self):
        q = uniq()
        ids = [self.dead_letter(q, txn="t%d" % i).id for i in range(3)]
        lst = self.c.dead_letters(q)
        self.assertEqual([d.id for d in lst], ids[::-1])
        page = self.c.a.ListDeadLetters(A.ListDeadLettersRequest(queue=q, limit=2, offset=1), timeout=10)
        self.assertEqual([d.id for d in page.dead_letters], ids[1::-1])
        self.assertEqual(self.c.dead_letters(q, partition="other"), [])

    def test_replay(self):
        q = uniq()
        self.c.configure(q, retry_limit=0)
        d = self.dead_letter(q, txn="orig", payload=b"replay me")
        self.c.push(q, [b"after"])
        r = self.c.a.ReplayDeadLetter(A.ReplayDeadLetterRequest(id=d.id), timeout=10)
        pr = r.replayed_as
        self.assertEqual(pr.status, Q.PUSH_STATUS_QUEUED)
        self.assertEqual(pr.transaction_id, "dlq:" + d.id)
        self.assertNotEqual(pr.message_id, d.message_id)
        self.assertEqual((pr.queue, pr.partition, pr.partition_id), (q, "Default", d.partition_id))
        self.assertEqual(pr.offset, 2)  # the tail
        self.assertTrue(r.dead_letter_removed)
        self.assertEqual(self.c.dead_letters(q), [])
        p = self.c.pop(q, batch=10)
        self.assertEqual([m.payload for m in p.messages], [b"after", b"replay me"])
        self.assertEqual(p.messages[1].transaction_id, "dlq:" + d.id)
        self.assertEqual(p.messages[1].message_id, pr.message_id)
        # gone: a second replay finds nothing
        e = rpc_error(self.c.a.ReplayDeadLetter, A.ReplayDeadLetterRequest(id=d.id), timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)

    def test_replay_wakes_a_parked_pop(self):
        import concurrent.futures
        q = uniq()
        d = self.dead_letter(q, txn="wake", group="w")
        self.c.ack_offset(self.c.pop(q).messages[0])  # queue mode has consumed it too
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            before = self.c.rpcs()
            t0 = time.monotonic()
            fut = ex.submit(self.c.pop, q, wait_ms=8000, timeout=20)
            self.c.wait_received(before)
            self.c.a.ReplayDeadLetter(A.ReplayDeadLetterRequest(id=d.id), timeout=10)
            p = fut.result(20)
            self.assertEqual(p.messages[0].transaction_id, "dlq:" + d.id)
            self.assertLess(time.monotonic() - t0, 4.0)

    def test_replay_elsewhere(self):
        q, other = uniq(), uniq()
        d = self.dead_letter(q, txn="moving")
        r = self.c.a.ReplayDeadLetter(A.ReplayDeadLetterRequest(id=d.id, queue=other, partition="P"), timeout=10)
        self.assertEqual((r.replayed_as.queue, r.replayed_as.partition, r.replayed_as.offset), (other, "P", 0))
        p = self.c.pop(other, partition="P")
        self.assertEqual(p.messages[0].payload, b"dead")

    def test_replay_errors(self):
        e = rpc_error(self.c.a.ReplayDeadLetter, A.ReplayDeadLetterRequest(id="x"), timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        e = rpc_error(self.c.a.ReplayDeadLetter,
                      A.ReplayDeadLetterRequest(id="0191b7a4-3c1e-7d2a-8f00-123456789abc"), timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)

    def test_delete_by_id(self):
        q = uniq()
        d = self.dead_letter(q)
        r = self.c.a.DeleteDeadLetter(A.DeleteDeadLetterRequest(id=d.id), timeout=10)
        self.assertEqual(r.deleted, 1)
        self.assertEqual(self.c.dead_letters(q), [])
        e = rpc_error(self.c.a.DeleteDeadLetter, A.DeleteDeadLetterRequest(id=d.id), timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)

    def test_delete_by_address(self):
        q = uniq()
        self.c.push(q, [b"shared"], txns=["addr"])
        for g in ("ga", "gb"):
            p = self.c.pop(q, consumer_group=g)
            self.assertTrue(self.c.ack([self.item(p.messages[0], status=DLQ)], group=g).results[0].dlq)
        other = self.dead_letter(q, txn="keep", group="ga")
        pid = other.partition_id
        r = self.c.a.DeleteDeadLetter(A.DeleteDeadLetterRequest(
            address=A.DeadLetterAddress(partition_id=pid, transaction_id="addr")), timeout=10)
        self.assertEqual(r.deleted, 2)
        self.assertEqual([d.transaction_id for d in self.c.dead_letters(q)], ["keep"])
        e = rpc_error(self.c.a.DeleteDeadLetter, A.DeleteDeadLetterRequest(
            address=A.DeadLetterAddress(partition_id=pid, transaction_id="addr")), timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)

    def test_delete_validation(self):
        for req in (A.DeleteDeadLetterRequest(),
                    A.DeleteDeadLetterRequest(id="nope"),
                    A.DeleteDeadLetterRequest(address=A.DeadLetterAddress(partition_id="x", transaction_id="t")),
                    A.DeleteDeadLetterRequest(address=A.DeadLetterAddress(partition_id=ZERO_UUID))):
            e = rpc_error(self.c.a.DeleteDeadLetter, req, timeout=10)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, req)


class Leases(AckTest):
    def test_renew_extends(self):
        q = uniq()
        self.fill(q, 2)
        p = self.c.pop(q, batch=2, lease_seconds=5)
        r = self.c.renew(p.lease_id, seconds=120)
        self.assertTrue(r.renewed)
        self.assertEqual(r.partitions, 1)
        self.assertGreater(r.expires_at_us, p.lease_expires_at_us + 100 * 1e6)
        self.assertAlmostEqual((r.expires_at_us - now_us()) / 1e6, 120, delta=10)
        # never shortens
        r2 = self.c.renew(p.lease_id, seconds=1)
        self.assertTrue(r2.renewed)
        self.assertGreaterEqual(r2.expires_at_us, r.expires_at_us)
        # 0 means 60 (and does not shorten either)
        self.assertGreaterEqual(self.c.renew(p.lease_id).expires_at_us, r.expires_at_us)
        # the lease is still the one acks use
        self.assertEqual(self.c.ack([self.item(p.messages[1])]).results[0].outcome, APPLIED)

    def test_renew_keeps_a_short_lease_alive(self):
        q = uniq()
        self.fill(q, 1)
        p = self.c.pop(q, lease_seconds=1)
        self.assertTrue(self.c.renew(p.lease_id, seconds=60).renewed)
        t0 = time.monotonic()
        # well past the original expiry, the batch is still ours
        wait_until(lambda: time.monotonic() - t0 > 1.5, 5, what="the original lease end")
        self.assertEqual(len(self.c.pop(q).messages), 0)
        self.assertTrue(self.c.partition(q).leased)
        self.assertEqual(self.c.ack([self.item(p.messages[0])]).results[0].outcome, APPLIED)

    def test_renew_covers_every_partition_of_the_lease(self):
        q = uniq()
        self.c.push_items([Q.PushItem(queue=q, partition="p%d" % i, payload=b"x") for i in range(3)])
        p = self.c.pop(q, max_partitions=3, batch=10)
        self.assertEqual(p.partitions_claimed, 3)
        r = self.c.renew(p.lease_id, seconds=300)
        self.assertEqual((r.renewed, r.partitions), (True, 3))

    def test_expired_lease_is_not_revived(self):
        q = uniq()
        self.fill(q, 1)
        p = self.c.pop(q, lease_seconds=1)
        wait_until(lambda: not self.c.partition(q).leased, 10, what="the lease to expire")
        r = self.c.renew(p.lease_id, seconds=60)
        self.assertEqual((r.renewed, r.partitions, r.expires_at_us), (False, 0, 0))
        self.assertFalse(self.c.partition(q).leased)
        self.assertEqual(self.c.ack([self.item(p.messages[0])]).results[0].outcome, LEASE_INVALID)

    def test_renew_after_ack_and_unknown(self):
        q = uniq()
        self.fill(q, 1)
        p = self.c.pop(q)
        self.c.ack([self.item(p.messages[0])])
        self.assertFalse(self.c.renew(p.lease_id).renewed)
        self.assertFalse(self.c.renew("0191b7a4-3c1e-7d2a-8f00-123456789abc").renewed)

    def test_renew_validation(self):
        for req in (Q.RenewLeaseRequest(), Q.RenewLeaseRequest(lease_id="x", seconds=86401),
                    Q.RenewLeaseRequest(lease_id="l" * 256)):
            e = rpc_error(self.c.q.RenewLease, req, timeout=10)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, req)


if __name__ == "__main__":
    unittest.main()
