"""AdminService end to end: ConfigureQueue (merge, replace, ranges, created),
GetQueue, ListQueues (filters, paging), DeleteQueue, ListConsumerGroups,
SeekConsumerGroup, DeleteConsumerGroup and GetStats. Dead-letter RPCs are
covered by test_queue_ack.py."""

import time
import unittest

import grpc

from harness import Broker
from qsupport import A, C, Client, Q, fixture_db_url, psql, rpc_error, uniq, wait_until

broker = None

DEFAULTS = dict(lease_time=60, retry_limit=3, retry_delay=1000, max_size=0, ttl=3600,
                dead_letter_queue=True, dlq_after_max_retries=True, delayed_processing=0,
                window_buffer=0, retention_seconds=0, completed_retention_seconds=0,
                retention_enabled=False, encryption_enabled=False, max_wait_time_seconds=0,
                min_pop_wait_time=0, dedup_window_seconds=3600, priority=0)


def setUpModule():
    global broker
    broker = Broker("product", db="e2e_admin", env={"RETENTION_INTERVAL": "500"}).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def now_us():
    return int(time.time() * 1e6)


class AdminTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def options(self, q):
        return self.c.get_queue(q).queue.options

    def assertOptions(self, opts, **expected):
        for k, v in expected.items():
            self.assertTrue(opts.HasField(k), k)
            self.assertEqual(getattr(opts, k), v, k)


class Configure(AdminTest):
    def test_create_with_defaults_and_created_flag(self):
        q = uniq()
        t0 = now_us()
        r = self.c.configure(q, lease_time=30)
        self.assertTrue(r.created)
        self.assertEqual(r.queue.queue, q)
        self.assertTrue(r.queue.queue_id)
        self.assertEqual(r.queue.storage, "segments")
        self.assertEqual((r.queue.partitions, r.queue.segments, r.queue.messages), (0, 0, 0))
        self.assertAlmostEqual(r.queue.created_at_us / 1e6, t0 / 1e6, delta=30)
        self.assertOptions(r.queue.options, **dict(DEFAULTS, lease_time=30))
        # not derived from the name: their documented default
        self.assertEqual((r.queue.options.namespace, r.queue.options.task), ("", ""))
        again = self.c.configure(q, lease_time=30)
        self.assertFalse(again.created)
        self.assertEqual(again.queue.queue_id, r.queue.queue_id)
        # a configured queue has no partitions until a push
        self.assertEqual(len(self.c.get_queue(q).partitions), 0)

    def test_merge_keeps_unset_options(self):
        q = uniq()
        self.c.configure(q, lease_time=30, retry_limit=7, dead_letter_queue=False, priority=-5,
                         namespace="ns1", task="t1")
        r = self.c.configure(q, ttl=100)
        self.assertFalse(r.created)
        self.assertOptions(r.queue.options, lease_time=30, retry_limit=7, dead_letter_queue=False,
                           priority=-5, ttl=100, namespace="ns1", task="t1")
        self.assertOptions(self.options(q), lease_time=30, retry_limit=7, ttl=100)
        # no options at all: nothing changes
        r = self.c.a.ConfigureQueue(A.ConfigureQueueRequest(queue=q), timeout=10)
        self.assertOptions(r.queue.options, lease_time=30, retry_limit=7, ttl=100)

    def test_replace_resets_unset_options(self):
        q = uniq()
        self.c.configure(q, lease_time=30, retry_limit=7, namespace="nsx", dedup_window_seconds=5)
        r = self.c.configure(q, replace=True, ttl=50)
        self.assertFalse(r.created)
        self.assertOptions(r.queue.options, **dict(DEFAULTS, ttl=50))
        self.assertEqual((r.queue.options.namespace, r.queue.options.task), ("", ""))
        self.assertOptions(self.options(q), **dict(DEFAULTS, ttl=50))

    def test_ranges(self):
        q = uniq()
        self.c.configure(q, lease_time=10)
        bad = [dict(lease_time=0), dict(lease_time=86401), dict(retry_limit=1000001),
               dict(min_pop_wait_time=60001), dict(ttl=2 ** 31), dict(namespace="n\x01"),
               dict(task="t" * 256)]
        for opts in bad:
            e = rpc_error(self.c.configure, q, **opts)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, opts)
            self.assertIn(list(opts)[0], e.details())
        self.assertOptions(self.options(q), lease_time=10, retry_limit=3)
        # a refused configure does not create the queue
        q2 = uniq()
        e = rpc_error(self.c.configure, q2, lease_time=0)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertFalse(self.c.exists(q2))
        # the bounds themselves are accepted
        r = self.c.configure(q2, lease_time=86400, retry_limit=1000000, min_pop_wait_time=60000,
                             ttl=2 ** 31 - 1)
        self.assertOptions(r.queue.options, lease_time=86400, retry_limit=1000000,
                           min_pop_wait_time=60000, ttl=2 ** 31 - 1)
        self.assertOptions(self.c.configure(q2, lease_time=1, retry_limit=0).queue.options,
                           lease_time=1, retry_limit=0)

    def test_bad_queue_name(self):
        for name in ("", "x" * 256, "a\nb"):
            e = rpc_error(self.c.configure, name, ttl=1)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("queue", e.details())

    def test_options_take_effect(self):
        q = uniq()
        self.c.configure(q, lease_time=2)
        self.c.push(q, [b"x"])
        p = self.c.pop(q)
        self.assertAlmostEqual((p.lease_expires_at_us - now_us()) / 1e6, 2, delta=1.5)


class Inspect(AdminTest):
    def test_get_queue_partitions_and_depth(self):
        q = uniq()
        self.c.push(q, [b"a%d" % i for i in range(4)], partition="A")
        self.c.push(q, [b"b%d" % i for i in range(3)], partition="B")
        self.c.push(q, [b"b3"], partition="B")
        p = self.c.pop(q, partition="A", consumer_group="g", batch=2)
        self.c.ack_offset(p.messages[1])
        self.c.pop(q, partition="B", consumer_group="g", batch=1)  # leased, not acked
        info = self.c.get_queue(q, group="g")
        self.assertEqual((info.queue.partitions, info.queue.messages, info.queue.segments), (2, 8, 3))
        parts = {x.partition: x for x in info.partitions}
        self.assertEqual(set(parts), {"A", "B"})
        a, b = parts["A"], parts["B"]
        self.assertEqual((a.last_offset, a.log_start, a.committed, a.depth, a.leased), (3, 0, 1, 2, False))
        self.assertEqual((b.last_offset, b.log_start, b.committed, b.depth, b.leased), (3, 0, -1, 4, True))
        self.assertEqual(info.depth, 6)
        self.assertEqual(a.partition_id, p.messages[0].partition_id)
        self.assertAlmostEqual(a.last_write_at_us / 1e6, now_us() / 1e6, delta=30)
        # another group has read nothing
        other = self.c.get_queue(q, group="nobody")
        self.assertEqual(other.depth, 8)
        self.assertEqual({x.committed for x in other.partitions}, {-1})
        self.assertEqual({x.leased for x in other.partitions}, {False})

    def test_get_queue_errors(self):
        e = rpc_error(self.c.get_queue, uniq())
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)
        e = rpc_error(self.c.get_queue, "")
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_list_queues_filters_and_paging(self):
        ns = "lq" + uniq().replace("-", "")
        names = [ns + ".a.1", ns + ".a.2", ns + ".b.3", ns + ".a.4"]
        for n in names:
            self.c.push(n, [b"x"])
        def listed(**kw):
            return [x.queue for x in self.c.a.ListQueues(A.ListQueuesRequest(**kw), timeout=10).queues]
        self.assertEqual(listed(namespace=ns), sorted(names))
        self.assertEqual(listed(namespace=ns, task="a"), sorted(n for n in names if ".a." in n))
        self.assertEqual(listed(namespace=ns, limit=2), sorted(names)[:2])
        self.assertEqual(listed(namespace=ns, limit=2, offset=2), sorted(names)[2:])
        self.assertEqual(listed(namespace=ns, offset=10), [])
        self.assertEqual(listed(namespace=ns + "none"), [])
        qs = self.c.a.ListQueues(A.ListQueuesRequest(namespace=ns, task="b"), timeout=10).queues
        self.assertEqual((qs[0].messages, qs[0].partitions, qs[0].options.task), (1, 1, "b"))
        everything = listed(limit=1000)
        self.assertTrue(set(names) <= set(everything))
        self.assertEqual(everything, sorted(everything))

    def test_delete_queue_is_idempotent(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"], txns=["x", "y"])
        p = self.c.pop(q, consumer_group="g")
        self.assertTrue(self.c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=10).existed)
        self.assertFalse(self.c.exists(q))
        self.assertFalse(self.c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=10).existed)
        self.assertEqual(self.c.groups(q), [])
        self.assertEqual(self.c.fetch(q).error, Q.FETCH_ERROR_UNKNOWN_PARTITION)
        # the old lease and partition are gone with it
        self.assertEqual(self.c.ack_offset(p.messages[0]).outcome, Q.ACK_OUTCOME_REJECTED)
        # a push recreates it from scratch (transaction ids forgotten too)
        r = self.c.push(q, [b"again"], txns=["x"]).results[0]
        self.assertEqual((r.status, r.offset), (Q.PUSH_STATUS_QUEUED, 0))
        e = rpc_error(self.c.a.DeleteQueue, A.DeleteQueueRequest(queue=""), timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_large_queue_is_emptied_in_steps_then_deleted(self):
        # DeleteQueue hides the queue, then deletes its rows in committed steps
        # of at most 10,000 rows (sql_maint test_delete_queue_in_steps bounds
        # each step); nothing of it may remain.
        q = uniq()
        for i in range(30):
            self.c.push(q, [b"m%d-%d" % (i, k) for k in range(100)], txns=["t%d-%d" % (i, k) for k in range(100)])
        pid = self.c.partition(q).partition_id
        url = fixture_db_url("e2e_admin")
        self.assertTrue(self.c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=60).existed)
        self.assertFalse(self.c.exists(q))
        for table in ("log_segments", "log_txns", "log_consumers", "log_dlq", "log_partitions"):
            col = "id" if table == "log_partitions" else "partition_id"
            self.assertEqual(psql(url, "SELECT count(*) FROM queen.%s WHERE %s = '%s'" % (table, col, pid)), "0", table)
        # hidden by a first step, deleted by the next
        self.assertRegex(broker.log_text(), r"queue deleted queue=%s steps=[2-9]" % q)


    def test_delete_queue_pages_its_partitions(self):
        # DeleteQueue deletes the partitions a window of 1000 at a time: a large
        # partition after 1002 small ones by name is deleted too, and nothing
        # of the queue remains.
        q = uniq()
        names = ["a%04d" % i for i in range(1002)]
        for k in range(0, len(names), 500):
            self.c.push_items([Q.PushItem(queue=q, partition=n, payload=b"x") for n in names[k:k + 500]])
        for i in range(30):
            self.c.push(q, [b"m%d-%d" % (i, k) for k in range(100)], partition="zz")
        url = fixture_db_url("e2e_admin")
        qid = psql(url, "SELECT id FROM queen.queues WHERE name = '%s'" % q)
        self.assertEqual(psql(url, "SELECT count(*) FROM queen.log_partitions WHERE queue_id = '%s'" % qid), "1003")
        self.assertTrue(self.c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=120).existed)
        self.assertFalse(self.c.exists(q))
        self.assertEqual(psql(url, "SELECT count(*) FROM queen.log_partitions WHERE queue_id = '%s'" % qid), "0")
        self.assertEqual(psql(url, "SELECT count(*) FROM qn.queue_deleting WHERE queue_id = '%s'" % qid), "0")
        self.assertRegex(broker.log_text(), r"queue deleted queue=%s steps=[2-9]" % q)

class Groups(AdminTest):
    def test_list_consumer_groups(self):
        q = uniq()
        self.c.push(q, [b"a%d" % i for i in range(5)], partition="A")
        self.c.push(q, [b"b%d" % i for i in range(2)], partition="B")
        pa = self.c.pop(q, partition="A", consumer_group="g1", batch=3)
        self.c.ack_offset(pa.messages[1])
        self.c.pop(q, partition="B", consumer_group="g2", batch=10, subscription_mode=C.SUBSCRIPTION_MODE_NEW)
        groups = {g.consumer_group: g for g in self.c.groups(q)}
        self.assertEqual(set(groups), {"g1", "g2"})
        g1 = groups["g1"]
        self.assertEqual((g1.queue, g1.subscription_mode), (q, C.SUBSCRIPTION_MODE_ALL))
        parts = {p.partition: p for p in g1.partitions}
        a = parts["A"]
        self.assertEqual((a.committed, a.last_offset, a.lag, a.leased, a.lease_id, a.total_consumed),
                         (1, 4, 3, True, pa.lease_id, 2))
        self.assertEqual(a.partition_id, pa.messages[0].partition_id)
        self.assertEqual(a.attempt_count, 1)
        self.assertGreaterEqual(a.time_lag_seconds, 0)
        self.assertEqual(g1.total_lag, sum(p.lag for p in g1.partitions))
        self.assertEqual(g1.state, A.GROUP_STATE_STABLE)
        g2 = groups["g2"]
        self.assertEqual(g2.subscription_mode, C.SUBSCRIPTION_MODE_NEW)
        self.assertEqual(g2.total_lag, 0)
        self.assertEqual([g.consumer_group for g in self.c.groups(q, group="g2")], ["g2"])
        self.assertTrue(all(g.queue == q for g in self.c.groups(group="g1") if g.queue == q))
        self.assertEqual(self.c.groups(uniq()), [])

    def test_seek_to_end(self):
        q = uniq()
        self.c.push(q, [b"old%d" % i for i in range(3)])
        p = self.c.pop(q, consumer_group="s", batch=1)
        self.assertTrue(self.c.partition(q, group="s").leased)
        r = self.c.a.SeekConsumerGroup(A.SeekConsumerGroupRequest(consumer_group="s", queue=q, to_end=True),
                                       timeout=10)
        self.assertEqual(r.partitions_updated, 1)
        part = self.c.partition(q, group="s")
        self.assertEqual((part.committed, part.depth, part.leased), (2, 0, False))
        self.assertEqual(self.c.ack_offset(p.messages[0]).outcome, Q.ACK_OUTCOME_LEASE_INVALID)
        self.assertEqual(len(self.c.pop(q, consumer_group="s").messages), 0)
        self.c.push(q, [b"new"])
        self.assertEqual([m.payload for m in self.c.pop(q, consumer_group="s").messages], [b"new"])
        # a group that never read the queue gets cursors too
        r = self.c.a.SeekConsumerGroup(A.SeekConsumerGroupRequest(consumer_group="fresh", queue=q, to_end=True),
                                       timeout=10)
        self.assertEqual(r.partitions_updated, 1)
        self.assertEqual(len(self.c.pop(q, consumer_group="fresh").messages), 0)

    def test_seek_to_timestamp(self):
        q = uniq()
        self.c.push(q, [b"a0", b"a1"])
        self.c.push(q, [b"b0"])
        t_b = self.c.fetch(q, offset=2).records[0].created_at_us
        self.c.push(q, [b"c0"])
        p = self.c.pop(q, consumer_group="ts", batch=10)
        self.c.ack_offset(p.messages[-1])
        seek = lambda ts, part="": self.c.a.SeekConsumerGroup(A.SeekConsumerGroupRequest(  # noqa: E731
            consumer_group="ts", queue=q, partition=part, to_timestamp_us=ts), timeout=10)
        self.assertEqual(seek(t_b).partitions_updated, 1)
        self.assertEqual(self.c.partition(q, group="ts").committed, 1)
        self.assertEqual([m.payload for m in self.c.pop(q, consumer_group="ts", batch=10).messages],
                         [b"b0", b"c0"])
        seek(1, part="Default")  # before everything (1 us after the epoch)
        self.assertEqual(len(self.c.pop(q, consumer_group="ts", batch=10).messages), 4)
        seek(now_us() + 10 * 1000000)  # after everything: the tail
        self.assertEqual(self.c.partition(q, group="ts").committed, 3)

    def test_seek_errors(self):
        q = uniq()
        self.c.push(q, [b"x"])
        e = rpc_error(self.c.a.SeekConsumerGroup, A.SeekConsumerGroupRequest(consumer_group="g", queue=q),
                      timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        for req in (A.SeekConsumerGroupRequest(consumer_group="g", queue=uniq(), to_end=True),
                    A.SeekConsumerGroupRequest(consumer_group="g", queue=q, partition="nope", to_end=True)):
            e = rpc_error(self.c.a.SeekConsumerGroup, req, timeout=10)
            self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, req)
        e = rpc_error(self.c.a.SeekConsumerGroup, A.SeekConsumerGroupRequest(consumer_group="g", to_end=True),
                      timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_delete_consumer_group_starts_over(self):
        q, q2 = uniq(), uniq()
        self.c.push(q, [b"a", b"b"], partition="A")
        self.c.push(q, [b"c"], partition="B")
        self.c.push(q2, [b"z"])
        for part in ("A", "B"):
            p = self.c.pop(q, partition=part, consumer_group="d", batch=10)
            self.c.ack_offset(p.messages[-1])
        self.c.ack_offset(self.c.pop(q2, consumer_group="d").messages[0])
        r = self.c.a.DeleteConsumerGroup(A.DeleteConsumerGroupRequest(consumer_group="d", queue=q), timeout=10)
        self.assertEqual(r.partitions_deleted, 2)
        self.assertEqual([m.payload for m in self.c.pop(q, partition="A", consumer_group="d", batch=10).messages],
                         [b"a", b"b"])
        self.assertEqual(self.c.partition(q2, group="d").committed, 0)  # the other queue is untouched
        # on every queue
        r = self.c.a.DeleteConsumerGroup(A.DeleteConsumerGroupRequest(consumer_group="d"), timeout=10)
        self.assertGreaterEqual(r.partitions_deleted, 2)
        self.assertEqual(self.c.partition(q2, group="d").committed, -1)
        self.assertEqual(len(self.c.pop(q2, consumer_group="d").messages), 1)
        e = rpc_error(self.c.a.DeleteConsumerGroup, A.DeleteConsumerGroupRequest(consumer_group=""), timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_delete_group_with_metadata_forgets_the_subscription(self):
        q = uniq()
        self.c.push(q, [b"old"])
        self.assertEqual(len(self.c.pop(q, consumer_group="m", subscription_mode=C.SUBSCRIPTION_MODE_NEW).messages), 0)
        self.c.a.DeleteConsumerGroup(A.DeleteConsumerGroupRequest(consumer_group="m", queue=q,
                                                                  delete_metadata=True), timeout=10)
        self.assertEqual([m.payload for m in self.c.pop(q, consumer_group="m").messages], [b"old"])


class Stats(AdminTest):
    def test_counters(self):
        q = uniq()
        before = self.c.stats()
        self.c.configure(q, retry_limit=0)
        self.c.push(q, [b"1234567890"] * 4, partition="A")
        self.c.push(q, [b"x"], partition="B")
        p = self.c.pop(q, partition="A", batch=2, consumer_group="g")
        self.c.ack([Q.AckItem(partition_id=p.messages[0].partition_id, offset=0, lease_id=p.lease_id,
                              status=C.ACK_STATUS_FAILED)], group="g")
        self.c.pop(q, partition="A", consumer_group="g2", batch=10, auto_ack=True)
        after = self.c.stats()
        (st,) = self.c.stats(q).queues
        self.assertEqual((st.queue, st.partitions, st.messages, st.segments), (q, 2, 5, 2))
        self.assertEqual(st.dead_letters, 1)
        self.assertEqual(st.consumer_groups, 2)
        # the slowest group: g has consumed offset 0 of A (dead-lettered), B unread by anyone
        self.assertEqual(st.pending, 3 + 1)
        self.assertGreater(st.bytes, 0)
        self.assertEqual(after.pushed - before.pushed, 5)
        self.assertEqual(after.delivered - before.delivered, 2 + 4)
        self.assertGreaterEqual(after.rpcs - before.rpcs, 7)
        self.assertGreaterEqual(after.uptime_seconds, before.uptime_seconds)
        self.assertGreaterEqual(after.total_messages - before.total_messages, 5)
        self.assertGreaterEqual(after.total_dead_letters - before.total_dead_letters, 1)
        names = [x.queue for x in after.queues]
        self.assertIn(q, names)
        self.assertEqual(after.total_messages, sum(x.messages for x in after.queues))
        self.assertEqual(len(self.c.stats(uniq()).queues), 0)
        # two push calls, two partitions each in its own segment
        self.assertGreaterEqual(after.push_commits - before.push_commits, 2)
        self.assertGreaterEqual(after.push_segments - before.push_segments, 2)

    def test_dedup_cache_counters(self):
        # Client transaction ids make the cache matter: the first push finds it
        # cold (declined, hydration starts); once hydrated it vouches.
        q = uniq()
        before = self.c.stats()
        n = [0]

        def push_and_look():
            self.c.push(q, [b"v"], txns=["t%d" % n[0]])
            n[0] += 1
            return self.c.stats().dedup_vouched > before.dedup_vouched
        wait_until(push_and_look, timeout=10, what="the dedup cache to vouch")
        after = self.c.stats()
        self.assertGreater(after.dedup_declined, before.dedup_declined)
        self.assertGreaterEqual(after.dedup_vouching, 1)
        self.assertGreaterEqual(after.dedup_hashes, 1)
        self.assertGreater(after.dedup_bytes, 0)
        self.assertEqual(after.dedup_suppressed, 0)

    def test_maintenance_counters_move(self):
        before = self.c.stats()
        wait_until(lambda: self.c.stats().maint_cycles > before.maint_cycles, timeout=15,
                   what="a maintenance cycle")


if __name__ == "__main__":
    unittest.main()
