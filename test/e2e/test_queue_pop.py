"""QueueService.Pop end to end: batches and leases, lease expiry, one leased batch
per (partition, group), consumer groups, subscription modes, auto-ack, any
partition with max_partitions, discovery by namespace / task, long polls woken
by a push and ending empty, consume fusion (one wake-up per commit and
group, hinted; none for a group whose lease on the partition this broker holds;
a lease released by an ack, a stream's end or expiry feeding a parked pop), the
request limits, the parked-pop limit, and the response byte cap.

The main broker runs with QUEEN_MAX_POP_BATCH=200, QUEEN_MAX_POP_WAIT_MS=10000
and QUEEN_WAKE_RECHECK_MS=60000 (so a parked pop answered early was woken by the
push, not by its re-check timer). SmallLimits runs its own broker with
QUEEN_MAX_PARKED_POPS=2 and QUEEN_MAX_POP_BATCH=50.
"""

import concurrent.futures
import re
import time
import unittest
import urllib.request

import grpc

from harness import Broker
from qsupport import C, Client, ConsumeStream, Q, fixture_db_url, rpc_error, uniq, wait_until

MAX_BATCH = 200
MAX_WAIT = 10000

broker = None
pool = None
bundle_test_ran = False  # test_bundled_leases_each_pop_its_own_partition_and_lease


def setUpModule():
    global broker, pool
    broker = Broker("product", db="e2e_queue_pop", env={
        "QUEEN_MAX_POP_BATCH": str(MAX_BATCH),
        "QUEEN_MAX_POP_WAIT_MS": str(MAX_WAIT),
        "QUEEN_WAKE_RECHECK_MS": "60000",
    }).start()
    pool = concurrent.futures.ThreadPoolExecutor(8)


def tearDownModule():
    pool.shutdown()
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())
    # bundled leases and acks happened (when Fusion's bundle test ran)
    # (one line per event loop: QUEEN_WORKERS)
    lines = [x for x in broker.log_text().splitlines() if "consume fusion:" in x]
    leases = sum(int(re.search(r"(\d+) lease bundles", x).group(1)) for x in lines)
    acks = sum(int(re.search(r"(\d+) ack bundles", x).group(1)) for x in lines)
    assert not bundle_test_ran or (leases > 0 and acks > 0), \
        "no lease or no ack bundle: %s" % ("\n".join(lines) or "no bundle at all")


def now_us():
    return int(time.time() * 1e6)


class PopTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def fill(self, q, n, partition="", prefix=b"m"):
        r = self.c.push(q, [prefix + b"%d" % i for i in range(n)], partition=partition)
        return r.results


class Batches(PopTest):
    def test_batch_and_lease(self):
        q = uniq()
        pushed = self.fill(q, 10)
        t0 = now_us()
        p = self.c.pop(q, batch=4)
        self.assertEqual([m.offset for m in p.messages], [0, 1, 2, 3])
        self.assertEqual([m.payload for m in p.messages], [b"m0", b"m1", b"m2", b"m3"])
        self.assertEqual([m.message_id for m in p.messages], [r.message_id for r in pushed[:4]])
        self.assertTrue(p.lease_id)
        self.assertEqual({m.lease_id for m in p.messages}, {p.lease_id})
        self.assertEqual({m.consumer_group for m in p.messages}, {"__QUEUE_MODE__"})
        self.assertEqual({m.queue for m in p.messages}, {q})
        self.assertEqual({m.partition for m in p.messages}, {"Default"})
        self.assertEqual({m.partition_id for m in p.messages}, {pushed[0].partition_id})
        self.assertEqual(p.partitions_claimed, 1)
        # default lease_time 60 s
        self.assertAlmostEqual((p.lease_expires_at_us - t0) / 1e6, 60, delta=5)
        created = {m.created_at_us for m in p.messages}
        self.assertEqual(len(created), 1)  # one segment
        self.assertAlmostEqual(created.pop() / 1e6, t0 / 1e6, delta=30)
        # the partition is leased: the same group gets nothing more
        self.assertEqual(len(self.c.pop(q, batch=4).messages), 0)
        self.assertTrue(self.c.partition(q).leased)
        # acking the batch frees it; the next batch continues after it
        self.assertEqual(self.c.ack_offset(p.messages[-1]).outcome, Q.ACK_OUTCOME_APPLIED)
        p2 = self.c.pop(q, batch=4)
        self.assertEqual([m.offset for m in p2.messages], [4, 5, 6, 7])
        self.assertNotEqual(p2.lease_id, p.lease_id)

    def test_batch_zero_means_100(self):
        q = uniq()
        for _ in range(3):
            self.fill(q, 50)
        self.assertEqual(len(self.c.pop(q, batch=0).messages), 100)

    def test_batch_spans_segments(self):
        q = uniq()
        for i in range(5):
            self.fill(q, 3, prefix=b"s%d-" % i)
        p = self.c.pop(q, batch=7)
        self.assertEqual([m.offset for m in p.messages], list(range(7)))
        self.assertEqual(len({m.created_at_us for m in p.messages}), 3)

    def test_a_large_push_pops_in_large_batches(self):
        # 1000 messages of 4 KB in one Push (4 MB raw, over the 3.9 MiB a Pop's
        # response may hold): stored as several segments, so a Pop takes whole
        # ones and the partial take of the next as far as its size allows; one
        # 4 MB segment was taken 3 messages at a time (budget / largest message)
        q = uniq()
        payloads = [(b"%04d" % i) * 1024 for i in range(1000)]
        self.c.push(q, payloads)
        got, sizes = [], []
        while len(got) < 1000 and len(sizes) < 400:
            p = self.c.pop(q, batch=200, auto_ack=True)  # this broker's largest batch
            self.assertGreater(len(p.messages), 0)
            sizes.append(len(p.messages))
            got += [m.payload for m in p.messages]
        self.assertEqual(got, payloads)
        self.assertEqual(sizes, [200] * 5)

    def test_empty_queue_and_missing_partition(self):
        q = uniq()
        p = self.c.pop(q)
        self.assertEqual(len(p.messages), 0)
        self.assertEqual(p.lease_id, "")
        self.assertEqual(p.lease_expires_at_us, 0)
        self.assertEqual(p.partitions_claimed, 0)
        self.fill(q, 1)
        self.assertEqual(len(self.c.pop(q, partition="nope").messages), 0)

    def test_lease_expiry_redelivers(self):
        q = uniq()
        self.fill(q, 3)
        t0 = time.monotonic()
        first = self.c.pop(q, batch=3, lease_seconds=1)
        self.assertEqual(len(first.messages), 3)
        self.assertAlmostEqual((first.lease_expires_at_us - now_us()) / 1e6, 1, delta=1)
        self.assertEqual(len(self.c.pop(q, batch=3).messages), 0)
        again = self.c.pop_until(q, timeout=10, batch=3)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        self.assertEqual([m.offset for m in again.messages], [0, 1, 2])
        self.assertEqual([m.message_id for m in again.messages], [m.message_id for m in first.messages])
        self.assertNotEqual(again.lease_id, first.lease_id)
        # lease expiry is not a failure: no retry budget spent, one more attempt
        (grp,) = self.c.groups(q)
        self.assertEqual(grp.partitions[0].retry_count, 0)
        self.assertEqual(grp.partitions[0].attempt_count, 2)

    def test_second_consumer_of_the_group_waits_for_the_lease(self):
        q = uniq()
        self.fill(q, 4)
        other = Client(broker.channel())
        try:
            a = self.c.pop(q, batch=2, consumer_group="g")
            self.assertEqual(len(a.messages), 2)
            b = other.pop(q, batch=2, consumer_group="g")
            self.assertEqual(len(b.messages), 0)
            # another group is not affected
            self.assertEqual(len(other.pop(q, batch=2, consumer_group="h").messages), 2)
            self.c.ack_offset(a.messages[1])
            b = other.pop(q, batch=2, consumer_group="g")
            self.assertEqual([m.offset for m in b.messages], [2, 3])
        finally:
            other.close()

    def test_every_group_sees_every_message(self):
        q = uniq()
        self.fill(q, 5)
        for g in ("", "g1", "g2", "g3"):
            p = self.c.pop(q, batch=10, consumer_group=g)
            self.assertEqual([m.offset for m in p.messages], [0, 1, 2, 3, 4], g)
            self.assertEqual({m.consumer_group for m in p.messages}, {g or "__QUEUE_MODE__"})
            self.c.ack_offset(p.messages[-1])
        self.fill(q, 1)
        for g in ("", "g1", "g2", "g3"):
            self.assertEqual([m.offset for m in self.c.pop(q, consumer_group=g).messages], [5], g)

    def test_auto_ack(self):
        q = uniq()
        self.fill(q, 5)
        p = self.c.pop(q, batch=3, auto_ack=True)
        self.assertEqual([m.offset for m in p.messages], [0, 1, 2])
        self.assertEqual(p.lease_id, "")
        self.assertEqual(p.lease_expires_at_us, 0)
        self.assertEqual({m.lease_id for m in p.messages}, {""})
        part = self.c.partition(q)
        self.assertEqual(part.committed, 2)
        self.assertFalse(part.leased)
        # nothing to ack: the next pop continues at once
        self.assertEqual([m.offset for m in self.c.pop(q, batch=3).messages], [3, 4])


class Subscriptions(PopTest):
    def test_mode_all_is_the_default(self):
        q = uniq()
        self.fill(q, 3)
        self.assertEqual(len(self.c.pop(q, consumer_group="ga", batch=10).messages), 3)
        self.assertEqual(len(self.c.pop(q, consumer_group="gb", batch=10,
                                        subscription_mode=C.SUBSCRIPTION_MODE_ALL).messages), 3)

    def test_mode_new(self):
        q = uniq()
        self.fill(q, 3)
        p = self.c.pop(q, consumer_group="gn", subscription_mode=C.SUBSCRIPTION_MODE_NEW)
        self.assertEqual(len(p.messages), 0)
        self.fill(q, 2, prefix=b"new")
        p = self.c.pop(q, consumer_group="gn", batch=10, subscription_mode=C.SUBSCRIPTION_MODE_NEW)
        self.assertEqual([m.payload for m in p.messages], [b"new0", b"new1"])
        self.assertEqual([m.offset for m in p.messages], [3, 4])
        # a partition created later starts at its beginning for this group
        self.fill(q, 1, partition="later")
        p = self.c.pop(q, partition="later", consumer_group="gn",
                       subscription_mode=C.SUBSCRIPTION_MODE_NEW)
        self.assertEqual([m.offset for m in p.messages], [0])

    def test_mode_from_timestamp(self):
        q = uniq()
        self.fill(q, 2, prefix=b"old")
        old_at = self.c.fetch(q).records[0].created_at_us
        self.fill(q, 2, prefix=b"new")
        new_at = self.c.fetch(q, offset=2).records[0].created_at_us
        self.assertGreater(new_at, old_at)
        p = self.c.pop(q, consumer_group="gt", batch=10,
                       subscription_mode=C.SUBSCRIPTION_MODE_FROM_TIMESTAMP,
                       subscription_from_us=old_at + 1)
        self.assertEqual([m.payload for m in p.messages], [b"new0", b"new1"])
        # segment granular: from the first segment's own time, everything
        p = self.c.pop(q, consumer_group="gt2", batch=10,
                       subscription_mode=C.SUBSCRIPTION_MODE_FROM_TIMESTAMP,
                       subscription_from_us=old_at)
        self.assertEqual(len(p.messages), 4)
        # after every segment: nothing until a new one
        p = self.c.pop(q, consumer_group="gt3", batch=10,
                       subscription_mode=C.SUBSCRIPTION_MODE_FROM_TIMESTAMP,
                       subscription_from_us=new_at + 1)
        self.assertEqual(len(p.messages), 0)
        e = rpc_error(self.c.pop, q, consumer_group="gt4",
                      subscription_mode=C.SUBSCRIPTION_MODE_FROM_TIMESTAMP)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("subscription_from_us", e.details())

    def test_mode_applies_on_first_contact_only(self):
        q = uniq()
        self.fill(q, 2)
        p = self.c.pop(q, consumer_group="gf", batch=1)
        self.assertEqual([m.offset for m in p.messages], [0])
        self.c.ack_offset(p.messages[0])
        # the cursor exists: NEW does not move it
        p = self.c.pop(q, consumer_group="gf", subscription_mode=C.SUBSCRIPTION_MODE_NEW)
        self.assertEqual([m.offset for m in p.messages], [1])

    def test_queue_mode_ignores_new(self):
        q = uniq()
        self.fill(q, 2)
        p = self.c.pop(q, batch=10, subscription_mode=C.SUBSCRIPTION_MODE_NEW)
        self.assertEqual(len(p.messages), 2)

    def test_delayed_processing(self):
        q = uniq()
        self.c.configure(q, delayed_processing=1)
        self.fill(q, 2)
        t0 = time.monotonic()
        self.assertEqual(len(self.c.pop(q, batch=5).messages), 0)
        p = self.c.pop_until(q, timeout=10, batch=5)
        self.assertGreaterEqual(time.monotonic() - t0, 0.5)
        self.assertEqual([m.offset for m in p.messages], [0, 1])

    def test_unknown_mode(self):
        e = rpc_error(self.c.pop, uniq(), subscription_mode=42)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)


class AnyPartition(PopTest):
    def test_max_partitions(self):
        q = uniq()
        for p in ("p0", "p1", "p2"):
            self.fill(q, 2, partition=p)
        one = self.c.pop(q, batch=100, consumer_group="one")
        self.assertEqual(one.partitions_claimed, 1)
        self.assertEqual(len(one.messages), 2)
        self.assertEqual(len({m.partition for m in one.messages}), 1)
        many = self.c.pop(q, batch=100, max_partitions=3, consumer_group="many")
        self.assertEqual(many.partitions_claimed, 3)
        self.assertEqual(len(many.messages), 6)
        self.assertEqual({m.partition for m in many.messages}, {"p0", "p1", "p2"})
        self.assertEqual({m.lease_id for m in many.messages}, {many.lease_id})
        # per partition in order
        for part in ("p0", "p1", "p2"):
            self.assertEqual([m.offset for m in many.messages if m.partition == part], [0, 1])
        # one group, one batch per partition: the two others are left for the next pop
        rest = self.c.pop(q, batch=100, max_partitions=5, consumer_group="one")
        self.assertEqual(rest.partitions_claimed, 2)
        self.assertNotIn(one.messages[0].partition, {m.partition for m in rest.messages})
        # acking by the shared lease works across partitions
        res = self.c.ack([Q.AckItem(partition_id=m.partition_id, offset=m.offset, lease_id=many.lease_id)
                          for m in many.messages if m.offset == 1], group="many")
        self.assertTrue(all(r.outcome == Q.ACK_OUTCOME_APPLIED for r in res.results))

    def test_partitions_claimed_counts_every_partition(self):
        q = uniq()
        n = 80
        self.c.push_items([Q.PushItem(queue=q, partition="p%02d" % i, payload=b"x") for i in range(n)])
        got = {}
        while len(got) < n:
            p = self.c.pop(q, batch=MAX_BATCH, max_partitions=1000)
            self.assertGreater(len(p.messages), 0)
            parts = {m.partition for m in p.messages}
            self.assertEqual(p.partitions_claimed, len(parts))
            got.update({m.partition: m for m in p.messages})
        self.assertEqual(len(got), n)

    def test_lease_expiry_is_the_earliest_of_the_claimed_partitions(self):
        # discovery claims partitions of queues with different lease_time; the
        # client must renew before the first of them runs out
        ns = "le" + uniq().replace("-", "")
        short, long_ = ns + ".t.short", ns + ".t.long"
        # ConfigureQueue does not derive the namespace from the name (a push does)
        self.c.configure(short, lease_time=5, namespace=ns, task="t")
        self.c.configure(long_, lease_time=300, namespace=ns, task="t")
        self.c.push(short, [b"s"])
        self.c.push(long_, [b"l"])
        t0 = now_us()
        p = self.c.pop(namespace=ns, max_partitions=10, batch=10)
        self.assertEqual(p.partitions_claimed, 2)
        self.assertAlmostEqual((p.lease_expires_at_us - t0) / 1e6, 5, delta=3)

    def test_batch_is_shared_across_partitions(self):
        q = uniq()
        for p in ("a", "b", "c"):
            self.fill(q, 4, partition=p)
        p = self.c.pop(q, batch=5, max_partitions=3)
        self.assertEqual(len(p.messages), 5)
        self.assertLessEqual(p.partitions_claimed, 2)

    def test_discovery_by_namespace_and_task(self):
        ns = "ns" + uniq().replace("-", "")
        qa, qb, qc = ns + ".alpha.one", ns + ".beta.two", ns + "x.alpha.three"
        self.c.push(qa, [b"a"])
        self.c.push(qb, [b"b"])
        self.c.push(qc, [b"c"])
        p = self.c.pop(namespace=ns, task="alpha", consumer_group="d1")
        self.assertEqual([(m.queue, m.payload) for m in p.messages], [(qa, b"a")])
        got = set()
        for _ in range(3):
            r = self.c.pop(namespace=ns, consumer_group="d2", max_partitions=10, batch=10)
            got |= {m.queue for m in r.messages}
        self.assertEqual(got, {qa, qb})
        p = self.c.pop(task="alpha", namespace=ns + "x", consumer_group="d3")
        self.assertEqual([m.queue for m in p.messages], [qc])
        # nothing to discover with neither queue nor namespace / task
        e = rpc_error(self.c.pop, consumer_group="d4")
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # a configured namespace wins over the dotted name
        qd = uniq()
        self.c.configure(qd, namespace=ns + "cfg", task="t")
        self.c.push(qd, [b"d"])
        p = self.c.pop(namespace=ns + "cfg", task="t", consumer_group="d5")
        self.assertEqual([m.queue for m in p.messages], [qd])


class LongPoll(PopTest):
    def test_parked_pop_woken_by_push(self):
        q = uniq()
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.pop, q, wait_ms=8000, batch=10, timeout=20)
        self.c.wait_received(before)
        self.assertFalse(fut.done())
        self.c.push(q, [b"wake"])
        p = fut.result(timeout=20)
        elapsed = time.monotonic() - t0
        self.assertEqual([m.payload for m in p.messages], [b"wake"])
        self.assertLess(elapsed, 4.0, "woken only after %.2fs of an 8 s wait" % elapsed)

    def test_parked_pop_on_a_named_partition(self):
        q = uniq()
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.pop, q, partition="p1", wait_ms=8000, timeout=20)
        self.c.wait_received(before)
        self.c.push(q, [b"other"], partition="p2")
        self.c.push(q, [b"mine"], partition="p1")
        p = fut.result(timeout=20)
        self.assertEqual([m.payload for m in p.messages], [b"mine"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_parked_discovery_pop_woken_by_push(self):
        ns = "lp" + uniq().replace("-", "")
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.pop, namespace=ns, wait_ms=8000, timeout=20)
        self.c.wait_received(before)
        self.c.push(ns + ".t.q", [b"found"])
        p = fut.result(timeout=20)
        self.assertEqual([m.payload for m in p.messages], [b"found"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_several_parked_consumers_share_the_data(self):
        q = uniq()
        before = self.c.rpcs()
        futs = [pool.submit(self.c.pop, q, partition="p%d" % i, wait_ms=8000, timeout=20) for i in range(3)]
        self.c.wait_received(before, n=3)
        ended = {}
        for i, f in enumerate(futs):
            f.add_done_callback(lambda _, i=i: ended.setdefault(i, time.monotonic()))
        t0 = time.monotonic()
        self.c.push_items([Q.PushItem(queue=q, partition="p%d" % i, payload=b"%d" % i) for i in range(3)])
        pushed = time.monotonic() - t0
        got = [f.result(timeout=20) for f in futs]
        self.assertEqual([[m.payload for m in p.messages] for p in got], [[b"0"], [b"1"], [b"2"]])
        # which pop was late, and whether the push itself was, if this fails
        elapsed = time.monotonic() - t0
        if elapsed >= 4.0:  # the broker's debug lines of this queue say which step was missed
            trace = "\n".join(x for x in broker.log_text().splitlines() if q + " " in x)
            self.fail("queue %s: push answered after %.3fs; pops of p0..p2 after %s s:\n%s" %
                      (q, pushed, ["%.3f" % (ended.get(i, 0) - t0) for i in range(3)], trace))

    def test_parked_pop_subscribing_new(self):
        # first contact happens in the parked pop's first (empty) look: what was
        # there before is skipped, what arrives while it waits is delivered
        q = uniq()
        self.fill(q, 3, prefix=b"old")
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.pop, q, consumer_group="late", wait_ms=8000, batch=10, timeout=20,
                          subscription_mode=C.SUBSCRIPTION_MODE_NEW)
        self.c.wait_received(before)
        wait_until(lambda: self.c.groups(q, "late"), 5, what="the group's first contact")
        self.fill(q, 1, prefix=b"new")
        p = fut.result(20)
        self.assertEqual([m.payload for m in p.messages], [b"new0"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_long_poll_ends_empty_at_wait_ms(self):
        q = uniq()
        t0 = time.monotonic()
        p = self.c.pop(q, wait_ms=700, timeout=20)
        elapsed = time.monotonic() - t0
        self.assertEqual(len(p.messages), 0)
        self.assertEqual(p.lease_id, "")
        self.assertGreaterEqual(elapsed, 0.65)
        self.assertLess(elapsed, 5.0)

    def test_wait_is_not_spent_when_data_is_there(self):
        q = uniq()
        self.fill(q, 1)
        t0 = time.monotonic()
        p = self.c.pop(q, wait_ms=MAX_WAIT)
        self.assertEqual(len(p.messages), 1)
        self.assertLess(time.monotonic() - t0, 3.0)

    def test_push_to_another_queue_does_not_answer(self):
        q = uniq()
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.pop, q, wait_ms=1500, timeout=20)
        self.c.wait_received(before)
        self.c.push(uniq(), [b"elsewhere"])
        p = fut.result(timeout=20)
        self.assertEqual(len(p.messages), 0)
        self.assertGreaterEqual(time.monotonic() - t0, 1.4)


class Fusion(PopTest):
    """Consume fusion (engine/waiters.c, engine/cfusion.c): a commit wakes as
    many parked consumers as it can feed, hinted with its partition; an ack
    that releases a lease hands what is left to a parked consumer. The re-check
    is 60 s here, so every answer within seconds came from those wake-ups."""

    def park(self, q, n, **kw):
        before = self.c.rpcs()
        futs = [pool.submit(self.c.pop, q, wait_ms=kw.pop("wait_ms", 8000), timeout=20, **kw)
                for _ in range(n)]
        self.c.wait_received(before, n=n)
        return futs

    def test_one_commit_is_leased_once_among_many_parked(self):
        q = uniq()
        futs = self.park(q, 8, batch=10, wait_ms=2500)
        t0 = time.monotonic()
        self.c.push(q, [b"only"], partition="p3")
        got = [f.result(timeout=20) for f in futs]
        fed = [p for p in got if p.messages]
        self.assertEqual(len(fed), 1, "one message leased by %d pops" % len(fed))
        self.assertEqual([m.payload for m in fed[0].messages], [b"only"])
        self.assertEqual(fed[0].messages[0].partition, "p3")
        self.assertEqual(fed[0].partitions_claimed, 1)
        # the others answered empty at the end of their wait, nothing leased
        self.assertEqual(sum(len(p.lease_id) > 0 for p in got), 1)
        self.assertLess(time.monotonic() - t0, 10.0)
        self.assertTrue(self.c.partition(q, "p3").leased)

    def test_commits_to_many_partitions_feed_every_parked_pop_once(self):
        q = uniq()
        futs = self.park(q, 8, batch=10)
        t0 = time.monotonic()
        self.c.push_items([Q.PushItem(queue=q, partition="p%d" % i, payload=b"%d" % i)
                           for i in range(8)])
        got = [f.result(timeout=20) for f in futs]
        elapsed = time.monotonic() - t0
        payloads = sorted(m.payload for p in got for m in p.messages)
        self.assertEqual(payloads, sorted(b"%d" % i for i in range(8)), "lost or twice")
        self.assertEqual([len(p.messages) for p in got], [1] * 8)
        self.assertLess(elapsed, 4.0, "fed after %.2fs" % elapsed)

    def test_bundled_leases_each_pop_its_own_partition_and_lease(self):
        """Pops naming partitions whose ids the broker knows, woken by one commit
        to all of them, lease in one bundle (pop_bundle_v1): each gets exactly
        its own partition's messages under its own lease; their acks, sent at
        once, go out bundled too and each releases its own lease."""
        global bundle_test_ran
        bundle_test_ran = True
        q = uniq()
        parts = ["n%d" % i for i in range(6)]
        for p in parts:  # the broker learns the partitions' ids; nothing stays leased
            self.c.push(q, [b"warm-" + p.encode()], partition=p)
            warm = self.c.pop(q, partition=p, batch=10).messages
            self.assertEqual(len(warm), 1)
            self.assertEqual(self.c.ack_offset(warm[0]).outcome, Q.ACK_OUTCOME_APPLIED)
        before = self.c.rpcs()
        futs = {p: pool.submit(self.c.pop, q, partition=p, batch=10, wait_ms=8000, timeout=20)
                for p in parts}
        self.c.wait_received(before, n=len(parts))
        self.c.push_items([Q.PushItem(queue=q, partition=p, payload=("%s-%d" % (p, k)).encode())
                           for p in parts for k in range(3)])
        got = {p: f.result(timeout=20) for p, f in futs.items()}
        leases = set()
        for p, r in got.items():
            self.assertEqual([m.payload for m in r.messages],
                             [("%s-%d" % (p, k)).encode() for k in range(3)], p)
            self.assertTrue(all(m.partition == p for m in r.messages))
            leases.add(r.messages[0].lease_id)
        self.assertEqual(len(leases), len(parts), "leases shared between pops")
        acks = [pool.submit(self.c.ack_offset, r.messages[-1]) for r in got.values()]
        for a in acks:
            res = a.result(timeout=20)
            self.assertEqual(res.outcome, Q.ACK_OUTCOME_APPLIED)
            self.assertTrue(res.lease_released)
        for p in parts:
            self.assertFalse(self.c.partition(q, p).leased, p)

    def test_released_lease_hands_the_rest_to_a_parked_pop(self):
        q = uniq()
        self.fill(q, 5, partition="p")
        first = self.c.pop(q, batch=2)
        self.assertEqual([m.offset for m in first.messages], [0, 1])
        # a second consumer finds the partition leased and parks
        fut = self.park(q, 1, batch=10)[0]
        self.assertFalse(fut.done())
        t0 = time.monotonic()
        self.assertEqual(self.c.ack_offset(first.messages[-1]).outcome, Q.ACK_OUTCOME_APPLIED)
        p = fut.result(timeout=20)
        elapsed = time.monotonic() - t0
        self.assertEqual([m.offset for m in p.messages], [2, 3, 4])
        self.assertLess(elapsed, 4.0, "the rest came %.2fs after the ack" % elapsed)

    def test_released_lease_of_a_group_feeds_that_group(self):
        q = uniq()
        self.fill(q, 4, partition="p")
        first = self.c.pop(q, batch=2, consumer_group="g1")
        other = self.c.pop(q, batch=4, consumer_group="g2")  # g2 holds its own lease
        self.assertEqual(len(other.messages), 4)
        fut = self.park(q, 1, batch=10, consumer_group="g1")[0]
        self.assertEqual(self.c.ack_offset(first.messages[-1]).outcome, Q.ACK_OUTCOME_APPLIED)
        p = fut.result(timeout=20)
        self.assertEqual([m.offset for m in p.messages], [2, 3])
        self.assertEqual({m.consumer_group for m in p.messages}, {"g1"})

    def test_stream_fed_by_hints_partition_after_partition(self):
        q = uniq()
        s = ConsumeStream(self.c, Q.ConsumeSubscribe(queue=q, credits=4, batch=10))
        try:
            s.roundtrip()
            seen = []
            for i in range(3):
                t0 = time.monotonic()
                self.c.push(q, [b"s%d" % i], partition="p%d" % i)
                b = s.recv().batch
                seen += [m.payload for m in b.messages]
                self.assertLess(time.monotonic() - t0, 4.0)
                self.assertEqual(self.c.ack_offset(b.messages[-1]).outcome, Q.ACK_OUTCOME_APPLIED)
            self.assertEqual(seen, [b"s0", b"s1", b"s2"])
        finally:
            s.cancel()


    def test_commit_to_a_leased_partition_is_hinted_at_the_ack(self):
        # the commit wakes nobody of the group holding the lease here; the
        # ack's release hints the partition to the parked pop
        q = uniq()
        self.fill(q, 2, partition="p")
        first = self.c.pop(q, batch=10)
        self.assertEqual(len(first.messages), 2)
        fut = self.park(q, 1, batch=10)[0]
        self.c.push(q, [b"late"], partition="p")
        self.assertFalse(fut.done())
        t0 = time.monotonic()
        self.assertEqual(self.c.ack_offset(first.messages[-1]).outcome, Q.ACK_OUTCOME_APPLIED)
        p = fut.result(timeout=20)
        self.assertEqual([m.payload for m in p.messages], [b"late"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_ended_stream_hands_its_partition_to_a_parked_pop(self):
        # release_lease_v1 (the stream's end) hints what it held and what was
        # committed meanwhile; the re-check is 60 s
        q = uniq()
        self.fill(q, 3, partition="p")
        # credit left: the stream parks ready, so no unused hint of its own is
        # passed on at its end; only the release can feed the parked pop
        s = ConsumeStream(self.c, Q.ConsumeSubscribe(queue=q, credits=4, batch=10))
        try:
            b = s.recv().batch
            self.assertEqual([m.offset for m in b.messages], [0, 1, 2])
            fut = self.park(q, 1, batch=10)[0]
            self.c.push(q, [b"during"], partition="p")
            self.assertFalse(fut.done())
        finally:
            s.cancel()
        t0 = time.monotonic()
        p = fut.result(timeout=20)
        self.assertEqual([m.offset for m in p.messages], [0, 1, 2, 3])
        self.assertLess(time.monotonic() - t0, 4.0, "fed %.2fs after the stream ended" %
                        (time.monotonic() - t0))

    def test_expired_lease_hands_its_partition_to_a_parked_pop(self):
        # a lease nobody acks: its expiry hints the partition (engine/cfusion.c's timer)
        q = uniq()
        self.fill(q, 1, partition="p")
        first = self.c.pop(q, batch=10, lease_seconds=1)
        self.assertEqual(len(first.messages), 1)
        fut = self.park(q, 1, batch=10)[0]
        self.c.push(q, [b"after"], partition="p")
        t0 = time.monotonic()
        p = fut.result(timeout=20)
        self.assertEqual([m.offset for m in p.messages], [0, 1])
        self.assertLess(time.monotonic() - t0, 4.0, "fed %.2fs after the push" %
                        (time.monotonic() - t0))


class Limits(PopTest):
    def test_batch_limit(self):
        q = uniq()
        self.fill(q, 5)
        self.assertEqual(len(self.c.pop(q, batch=MAX_BATCH).messages), 5)
        e = rpc_error(self.c.pop, q, batch=MAX_BATCH + 1)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("batch", e.details())
        self.assertIn(str(MAX_BATCH), e.details())

    def test_wait_limit(self):
        q = uniq()
        self.fill(q, 1)
        self.assertEqual(len(self.c.pop(q, wait_ms=MAX_WAIT).messages), 1)
        e = rpc_error(self.c.pop, q, wait_ms=MAX_WAIT + 1)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("wait_ms", e.details())
        # nothing was leased by the refused pop
        self.assertEqual(self.c.pop_until(q, batch=1, consumer_group="x").messages[0].offset, 0)

    def test_names_and_other_fields(self):
        for kw, frag in ((dict(queue="a\x01"), "queue"),
                         (dict(queue="q" * 256), "queue"),
                         (dict(queue=uniq(), partition="p\x7f"), "partition"),
                         (dict(queue=uniq(), consumer_group="g" * 256), "consumer_group"),
                         (dict(queue=uniq(), lease_seconds=86401), "lease_seconds"),
                         (dict(namespace="n\x01"), "namespace"),
                         (dict(namespace="n", partition="p"), "partition")):
            e = rpc_error(self.c.pop, **kw)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, kw)
            self.assertIn(frag, e.details())


class ByteCap(PopTest):
    def test_batches_fit_the_default_client_receive_limit(self):
        q = uniq()
        size = 900 * 1024
        n = 12
        for i in range(0, n, 3):
            self.c.push(q, [bytes([65 + i + k]) * size for k in range(3)], timeout=60)
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < n and time.monotonic() < deadline:
            p = self.c.pop(q, batch=100, timeout=60)  # default 4 MiB receive limit
            self.assertGreater(len(p.messages), 0)
            self.assertLess(len(p.messages), 5)
            self.assertLess(p.ByteSize(), 4 * 1024 * 1024)
            seen += [m.offset for m in p.messages]
            self.c.ack_offset(p.messages[-1])
        self.assertEqual(seen, list(range(n)))
        self.assertTrue(all(len(m.payload) == size for m in p.messages))


class SmallLimits(unittest.TestCase):
    """QUEEN_MAX_PARKED_POPS=2 and QUEEN_MAX_POP_BATCH=50 on a broker of its own."""

    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_queue_pop_small", env={
            "QUEEN_MAX_PARKED_POPS": "2", "QUEEN_MAX_POP_BATCH": "50",
            "QUEEN_WAKE_RECHECK_MS": "60000"}).start()
        cls.c = Client(cls.b.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        rc = cls.b.stop()
        assert rc == 0, cls.b.log_text()

    def test_at_and_past_the_limit(self):
        q = uniq()
        before = self.c.rpcs()
        parked = [pool.submit(self.c.pop, q, partition="p%d" % i, wait_ms=8000, timeout=20) for i in range(2)]
        self.c.wait_received(before, n=2)
        t0 = time.monotonic()
        e = rpc_error(self.c.pop, q, wait_ms=8000, timeout=20)
        self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("QUEEN_MAX_PARKED_POPS", e.details())
        self.assertLess(time.monotonic() - t0, 3.0)
        # a pop that does not wait is not limited
        self.assertEqual(len(self.c.pop(q).messages), 0)
        self.assertFalse(any(f.done() for f in parked))
        # data wakes both; the slots are free again
        self.c.push_items([Q.PushItem(queue=q, partition="p%d" % i, payload=b"x") for i in range(2)])
        for f in parked:
            self.assertEqual(len(f.result(timeout=20).messages), 1)
        q2 = uniq()
        before = self.c.rpcs()
        again = [pool.submit(self.c.pop, q2, partition="p%d" % i, wait_ms=8000, timeout=20) for i in range(2)]
        self.c.wait_received(before, n=2)
        self.c.push_items([Q.PushItem(queue=q2, partition="p%d" % i, payload=b"y") for i in range(2)])
        for f in again:
            self.assertEqual(len(f.result(timeout=20).messages), 1)

    def test_default_batch_stays_within_the_limit(self):
        q = uniq()
        self.c.push(q, [b"x"] * 120)
        self.assertEqual(len(self.c.pop(q).messages), 50)  # batch 0: 100, capped at the limit
        self.assertEqual(len(self.c.pop(q, consumer_group="g", batch=50).messages), 50)
        e = rpc_error(self.c.pop, q, batch=51)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        s = ConsumeStream(self.c, Q.ConsumeSubscribe(queue=q, consumer_group="c"))
        try:
            self.assertEqual(len(s.recv().batch.messages), 50)
        finally:
            s.cancel()

    def test_a_cancelled_parked_pop_frees_its_slot(self):
        q = uniq()
        before = self.c.rpcs()
        futs = [self.c.q.Pop.future(Q.PopRequest(queue=q, partition="c%d" % i, wait_ms=8000), timeout=20)
                for i in range(2)]
        self.c.wait_received(before, n=2)
        for f in futs:
            f.cancel()

        def accepted():
            f = self.c.q.Pop.future(Q.PopRequest(queue=q, wait_ms=300), timeout=20)
            try:
                f.result()
                return True
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                return False

        wait_until(accepted, timeout=10, what="the cancelled pops to free their slots")


def metrics(b, *names):
    """Counters of b's /metrics (0 when absent), all from one scrape (one
    snapshot of the loops)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % b.http_port, timeout=10) as r:
        text = r.read().decode()
    out = []
    for name in names:
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        out.append(float(m.group(1)) if m else 0.0)
    return out


def metric(b, name):
    return metrics(b, name)[0]


class TwoBrokers(unittest.TestCase):
    """Brokers a and b on database DB, with env A and B (b gets a's database
    too); clients ca and cb."""
    DB, A, B = None, {}, {}

    @classmethod
    def setUpClass(cls):
        cls.a = Broker("product", db=cls.DB, env=cls.A).start()
        cls.b = Broker("product", db=cls.DB + "_unused",
                       env=dict(cls.B, QUEEN_DATABASE_URL=fixture_db_url(cls.DB))).start()
        cls.ca, cls.cb = Client(cls.a.channel()), Client(cls.b.channel())

    @classmethod
    def tearDownClass(cls):
        cls.ca.close()
        cls.cb.close()
        for b in (cls.a, cls.b):
            rc = b.stop()
            assert rc == 0, b.log_text()


class CrossBroker(TwoBrokers):
    """Two brokers on one database: a commit on one wakes consumers parked on
    the other (NOTIFY), well before their re-check (60 s). Broker a keeps a
    group's empty scan for a minute (QUEEN_POP_SCAN_REUSE_MS): a new Pop of the
    group waits for news without scanning, and news it was not told of (b's
    NOTIFY) ends that."""
    DB = "e2e_queue_pop_two"
    A = {"QUEEN_WAKE_RECHECK_MS": "60000", "QUEEN_POP_SCAN_REUSE_MS": "60000"}
    B = {"QUEEN_WAKE_RECHECK_MS": "60000"}

    def test_push_on_one_wakes_a_pop_parked_on_the_other(self):
        q = uniq()
        before = self.ca.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.ca.pop, q, wait_ms=8000, timeout=20)
        self.ca.wait_received(before)
        self.cb.push(q, [b"from b"])
        self.assertEqual([m.payload for m in fut.result(20).messages], [b"from b"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_a_new_pop_after_an_empty_scan_waits_unscanned_and_is_fed(self):
        q = uniq()
        self.assertEqual(len(self.ca.pop(q, consumer_group="g", wait_ms=200).messages), 0)
        skipped = metric(self.a, "queen_pop_scans_skipped_total")
        before = self.ca.rpcs()
        fut = pool.submit(self.ca.pop, q, consumer_group="g", wait_ms=8000, timeout=20)
        self.ca.wait_received(before)
        wait_until(lambda: metric(self.a, "queen_pop_scans_skipped_total") > skipped,
                   what="the new pop to wait without a scan")
        self.ca.push(q, [b"told"], partition="p1")
        self.assertEqual([m.payload for m in fut.result(20).messages], [b"told"])

    def test_another_brokers_news_ends_a_groups_empty_scan(self):
        """Group g's scan was empty; then b commits. Once a's loop has the
        NOTIFY (it woke h's pop), a new pop of g must scan, not wait for a hint
        that never comes (its wait would end at 8 s, the re-check at 60 s)."""
        q = uniq()
        self.assertEqual(len(self.ca.pop(q, consumer_group="g", wait_ms=200).messages), 0)
        before = self.ca.rpcs()
        fut_h = pool.submit(self.ca.pop, q, consumer_group="h", wait_ms=8000, timeout=20)
        self.ca.wait_received(before)
        self.cb.push(q, [b"from b"])
        self.assertEqual([m.payload for m in fut_h.result(20).messages], [b"from b"])
        t0 = time.monotonic()
        p = self.ca.pop(q, consumer_group="g", wait_ms=8000, timeout=20)
        self.assertEqual([m.payload for m in p.messages], [b"from b"])
        self.assertLess(time.monotonic() - t0, 4.0, "the pop waited for news it already had")

    def test_stream_on_one_fed_by_the_other(self):
        q = uniq()
        s = ConsumeStream(self.ca, Q.ConsumeSubscribe(queue=q, credits=2))
        try:
            s.roundtrip()
            t0 = time.monotonic()
            self.cb.push(q, [b"x"])
            self.assertEqual(s.recv().batch.messages[0].payload, b"x")
            self.assertLess(time.monotonic() - t0, 4.0)
        finally:
            s.cancel()



class SpareHints(TwoBrokers):
    """A commit that reached no consumer of the queue on a loop is kept there
    as a spare hint: a new Pop that would scan every partition leases in that
    partition instead (queen_pop_spare_hints_total, no queen_pop_scans_total).
    A spare is only a guess: when its partition was drained meanwhile (here by
    another broker, which this one is not told of), the Pop scans after all and
    finds the data elsewhere, even with wait_ms 0. One loop on broker a, so
    that the push and the pop meet on it; spares kept for a minute."""
    DB = "e2e_queue_pop_spare"
    A = {"QUEEN_WORKERS": "1", "QUEEN_POP_SCAN_REUSE_MS": "60000"}

    def counters(self):
        return metrics(self.a, "queen_pop_spare_hints_total", "queen_pop_scans_total")

    def test_a_new_pop_leases_where_a_commit_reached_nobody(self):
        q = uniq()
        # the group's first contact, so that the pop below is an ordinary one
        self.assertEqual(len(self.ca.pop(q, consumer_group="g").messages), 0)
        self.ca.push(q, [b"m1", b"m2"], partition="p3")  # nobody of q waits on a
        spare0, scans0 = self.counters()
        p = self.ca.pop(q, consumer_group="g", batch=10)
        self.assertEqual([m.payload for m in p.messages], [b"m1", b"m2"])
        spare1, scans1 = self.counters()
        self.assertEqual((spare1 - spare0, scans1 - scans0), (1, 0),
                         "the pop should lease in p3 by its spare hint, without a scan")

    def test_a_spare_whose_partition_was_drained_still_finds_data_elsewhere(self):
        q = uniq()
        self.assertEqual(len(self.ca.pop(q, consumer_group="g").messages), 0)
        self.ca.push(q, [b"gone"], partition="p1")  # a keeps p1 as a spare
        # broker b drains p1 for the group (a is not told), then b writes p2
        p = self.cb.pop(q, consumer_group="g", partition="p1", auto_ack=True)
        self.assertEqual([m.payload for m in p.messages], [b"gone"])
        self.cb.push(q, [b"here"], partition="p2")
        spare0, scans0 = self.counters()
        p = self.ca.pop(q, consumer_group="g", wait_ms=0)
        self.assertEqual([m.payload for m in p.messages], [b"here"],
                         "an empty spare partition must be followed by a scan")
        spare1, scans1 = self.counters()
        self.assertEqual((spare1 - spare0, scans1 - scans0), (1, 1))


if __name__ == "__main__":
    unittest.main()


class MinPopWait(PopTest):
    """min_pop_wait_time holds an under-full, non-empty pop for more data."""

    def configured(self, ms):
        q = uniq()
        self.c.configure(q, min_pop_wait_time=ms)
        return q

    def test_under_full_pop_waits_and_takes_what_arrives(self):
        q = self.configured(5000)
        self.fill(q, 3)
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.pop, q, batch=10, timeout=20)
        self.c.wait_received(before)
        self.assertFalse(fut.done(), "an under-full pop answered without holding")
        self.fill(q, 7, prefix=b"late")
        p = fut.result(timeout=20)
        self.assertEqual(len(p.messages), 10, "the held pop did not take the late messages")
        self.assertLess(time.monotonic() - t0, 4.0, "the pop was not woken by the push")

    def test_under_full_pop_answers_when_the_hold_ends(self):
        q = self.configured(1200)
        self.fill(q, 2)
        t0 = time.monotonic()
        p = self.c.pop(q, batch=10, timeout=20)
        elapsed = time.monotonic() - t0
        self.assertEqual(len(p.messages), 2)
        self.assertGreaterEqual(elapsed, 1.0, "answered after %.2fs of a 1.2 s hold" % elapsed)
        self.assertLess(elapsed, 5.0)

    def test_full_batch_is_not_held(self):
        q = self.configured(5000)
        self.fill(q, 10)
        t0 = time.monotonic()
        p = self.c.pop(q, batch=10, timeout=20)
        self.assertEqual(len(p.messages), 10)
        self.assertLess(time.monotonic() - t0, 2.0)

    def test_queue_without_the_option_is_not_held(self):
        q = uniq()
        self.fill(q, 2)
        t0 = time.monotonic()
        p = self.c.pop(q, batch=10, timeout=20)
        self.assertEqual(len(p.messages), 2)
        self.assertLess(time.monotonic() - t0, 2.0)


class SendLimit(unittest.TestCase):
    """QUEEN_MAX_SEND_BYTES cuts batches to fit; every message still arrives once."""

    def test_batches_fit_a_small_send_limit(self):
        limit = 256 << 10
        env = {"QUEEN_MAX_SEND_BYTES": str(limit), "QUEEN_MAX_PAYLOAD_BYTES": str(64 << 10)}
        with Broker("product", db="e2e_queue_pop_send", env=env) as b:
            c = Client(b.channel())
            try:
                q = uniq()
                payloads = [(b"%04d" % i) * 1024 for i in range(200)]  # 4 KiB each
                for i in range(0, 200, 50):
                    c.push(q, payloads[i:i + 50])
                c.push(q, [b"L" * (64 << 10)])  # the largest payload allowed
                got = []
                while True:
                    p = c.pop(q, batch=1000)
                    if not p.messages:
                        break
                    self.assertLessEqual(p.ByteSize(), limit)
                    got.extend(m.payload for m in p.messages)
                    last = p.messages[-1]
                    c.ack([Q.AckItem(partition_id=last.partition_id, offset=last.offset,
                                     lease_id=p.lease_id)])
                self.assertEqual(got, payloads + [b"L" * (64 << 10)])
                self.assertGreater(c.stats().rpcs, 0)
            finally:
                c.close()

    def test_limits_that_could_not_deliver_a_message_are_refused_at_start(self):
        b = Broker("product", db="e2e_queue_pop_send2",
                   env={"QUEEN_MAX_SEND_BYTES": str(1 << 20), "QUEEN_MAX_PAYLOAD_BYTES": str(1 << 20)})
        with self.assertRaises(RuntimeError) as cm:
            b.start(timeout=20)
        self.assertIn("QUEEN_MAX_SEND_BYTES", str(cm.exception))
