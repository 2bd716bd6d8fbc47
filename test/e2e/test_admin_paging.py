"""Paging of the admin listings end to end (AdminService page_size /
page_token / next_page_token): GetQueue's partitions, ListQueues,
ListConsumerGroups and ListDeadLetters are walked page by page while rows are
added ahead of and behind the position, and every row present from the start
is seen exactly once; totals (GetQueue depth, a group's total lag) are the
whole queue's on every page; page sizes clamp at 1000; malformed, foreign and
mismatched tokens are INVALID_ARGUMENT. Tokens across tenants are in
test_auth.py (Tenants)."""

import base64
import unittest

import grpc

from harness import Broker
from qsupport import A, C, Client, Q, rpc_error, uniq

broker = None
BAD = grpc.StatusCode.INVALID_ARGUMENT


def setUpModule():
    global broker
    broker = Broker("product", db="e2e_admin_paging").start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


class Paging(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def walk(self, call, req, field, page_size, between=None, size=len):
        """Follows next_page_token from the first page; returns (rows, pages).
        between(i) runs after page i when another page follows (to change the
        listing meanwhile). size(rows of a page) counts its listed items."""
        rows, pages, token = [], 0, ""
        while True:
            req.page_size = page_size
            req.page_token = token
            r = call(req, timeout=15)
            got = list(getattr(r, field))
            self.assertLessEqual(size(got), page_size)
            rows.extend(got)
            pages += 1
            self.assertLess(pages, 1000, "the walk does not end")
            token = r.next_page_token
            if not token:
                return rows, pages
            self.assertEqual(size(got), page_size, "only the last page may be short")
            if between is not None:
                between(pages)

    def push_parts(self, q, names, per=1):
        self.c.push_items([Q.PushItem(queue=q, partition=n, payload=b"x")
                           for n in names for _ in range(per)])

    # -- GetQueue

    def test_get_queue_pages_while_partitions_are_added(self):
        q = uniq()
        first = ["p%02d" % i for i in range(0, 50, 2)]  # p00 p02 ... p48
        self.push_parts(q, first, per=2)
        added = []

        def between(i):
            # one behind the position (p01, p03, ...) and one past the end
            n = ["p%02d" % (2 * i - 1), "z%02d" % i]
            self.push_parts(q, n)
            added.extend(n)

        rows, pages = self.walk(self.c.a.GetQueue, A.GetQueueRequest(queue=q), "partitions", 7,
                                between)
        names = [p.partition for p in rows]
        self.assertEqual(len(names), len(set(names)), "a partition was repeated")
        self.assertTrue(set(first) <= set(names), "a partition was skipped")
        self.assertEqual(names, sorted(names))
        # rows added past the position are listed once, those behind it not at all
        self.assertTrue({n for n in added if n.startswith("z")} <= set(names))
        self.assertGreaterEqual(pages, 4)
        # depth is the whole queue's, on every page
        r = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=3), timeout=15)
        self.assertEqual(len(r.partitions), 3)
        self.assertEqual(r.depth, r.queue.messages)
        self.assertEqual(r.depth, 2 * len(first) + len(added))
        r2 = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=3,
                                                 page_token=r.next_page_token), timeout=15)
        self.assertEqual(r2.depth, r.depth)
        self.assertEqual([p.partition for p in r2.partitions], sorted(set(first) | set(added))[3:6])

    def test_get_queue_default_and_clamped_page_size(self):
        q = uniq()
        self.push_parts(q, ["p%04d" % i for i in range(1005)])
        r = self.c.get_queue(q)
        self.assertEqual(len(r.partitions), 100)  # the default
        self.assertTrue(r.next_page_token)
        r = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=5000), timeout=15)
        self.assertEqual(len(r.partitions), 1000)  # clamped
        r = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=1000,
                                                page_token=r.next_page_token), timeout=15)
        self.assertEqual([p.partition for p in r.partitions], ["p%04d" % i for i in range(1000, 1005)])
        self.assertEqual(r.next_page_token, "")
        self.assertEqual(r.depth, 1005)

    def test_get_queue_exact_multiple_ends_with_empty_token(self):
        q = uniq()
        self.push_parts(q, ["a", "b", "c", "d"])
        r = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=2), timeout=15)
        self.assertTrue(r.next_page_token)
        r = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=2,
                                                page_token=r.next_page_token), timeout=15)
        self.assertEqual([p.partition for p in r.partitions], ["c", "d"])
        self.assertEqual(r.next_page_token, "")

    # -- bad tokens

    def test_bad_tokens(self):
        q, other = uniq(), uniq()
        self.push_parts(q, ["a", "b", "c"])
        self.push_parts(other, ["a", "b", "c"])
        tok = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=1), timeout=15).next_page_token
        self.assertTrue(tok)
        raw = base64.urlsafe_b64decode(tok + "=" * (-len(tok) % 4))

        def enc(b):
            return base64.urlsafe_b64encode(b).decode().rstrip("=")

        bad = {
            "garbage": "not a token!",
            "one char": "A",
            "too long": "A" * 5000,
            "truncated": tok[:-3],
            "version": enc(b"\x09" + raw[1:]),
            "key length": enc(raw[:11] + b"\xff\xff" + raw[13:]),
            "nul in key": enc(raw[:-1] + b"\x00"),
            "trailing": enc(raw + b"x"),
        }
        for what, t in bad.items():
            e = rpc_error(self.c.a.GetQueue, A.GetQueueRequest(queue=q, page_token=t), timeout=15)
            self.assertEqual(e.code(), BAD, what)
            self.assertIn("page_token", e.details(), what)
        # another queue's, another group's, another listing's token
        e = rpc_error(self.c.a.GetQueue, A.GetQueueRequest(queue=other, page_token=tok), timeout=15)
        self.assertEqual(e.code(), BAD)
        self.assertIn("other filters", e.details())
        e = rpc_error(self.c.a.GetQueue, A.GetQueueRequest(queue=q, consumer_group="g",
                                                           page_token=tok), timeout=15)
        self.assertEqual(e.code(), BAD)
        e = rpc_error(self.c.a.ListQueues, A.ListQueuesRequest(page_token=tok), timeout=15)
        self.assertEqual(e.code(), BAD)
        self.assertIn("another listing", e.details())
        e = rpc_error(self.c.a.ListDeadLetters, A.ListDeadLettersRequest(queue=q, page_token=tok),
                      timeout=15)
        self.assertEqual(e.code(), BAD)
        e = rpc_error(self.c.a.ListConsumerGroups, A.ListConsumerGroupsRequest(queue=q, page_token=tok),
                      timeout=15)
        self.assertEqual(e.code(), BAD)
        # the broker still answers, and the good token still works
        r = self.c.a.GetQueue(A.GetQueueRequest(queue=q, page_size=1, page_token=tok), timeout=15)
        self.assertEqual([p.partition for p in r.partitions], ["b"])

    # -- ListQueues

    def test_list_queues_pages_while_queues_are_added(self):
        ns = uniq("ns")
        first = ["%s.q%02d" % (ns, i) for i in range(0, 20, 2)]
        for q in first:
            self.c.configure(q, namespace=ns)
        added = []

        def between(i):
            for n in ("%s.q%02d" % (ns, 2 * i - 1), "%s.z%02d" % (ns, i)):
                self.c.configure(n, namespace=ns)
                added.append(n)

        rows, pages = self.walk(self.c.a.ListQueues, A.ListQueuesRequest(namespace=ns), "queues", 3,
                                between)
        names = [x.queue for x in rows]
        self.assertEqual(len(names), len(set(names)))
        self.assertTrue(set(first) <= set(names))
        self.assertEqual(names, sorted(names))
        self.assertTrue({n for n in added if ".z" in n} <= set(names))
        # the legacy limit is the page size; offset cannot be combined with a token
        r = self.c.a.ListQueues(A.ListQueuesRequest(namespace=ns, limit=2), timeout=15)
        self.assertEqual(len(r.queues), 2)
        self.assertTrue(r.next_page_token)
        r2 = self.c.a.ListQueues(A.ListQueuesRequest(namespace=ns, limit=2, offset=2), timeout=15)
        r3 = self.c.a.ListQueues(A.ListQueuesRequest(namespace=ns, limit=2,
                                                     page_token=r.next_page_token), timeout=15)
        self.assertEqual([x.queue for x in r2.queues], [x.queue for x in r3.queues])
        e = rpc_error(self.c.a.ListQueues, A.ListQueuesRequest(namespace=ns, offset=1,
                                                               page_token=r.next_page_token),
                      timeout=15)
        self.assertEqual(e.code(), BAD)
        # the token is bound to the filters
        e = rpc_error(self.c.a.ListQueues, A.ListQueuesRequest(namespace=ns + "x",
                                                               page_token=r.next_page_token),
                      timeout=15)
        self.assertEqual(e.code(), BAD)

    # -- ListConsumerGroups

    def test_list_groups_pages_with_whole_group_totals(self):
        q = uniq()
        parts = ["p%d" % i for i in range(6)]
        self.push_parts(q, parts, per=3)
        for g in ("ga", "gb", "gc"):
            for _ in parts:
                self.c.pop_until(q, consumer_group=g, batch=1)  # one message of a partition
        seen = set()
        rows, pages = self.walk(self.c.a.ListConsumerGroups, A.ListConsumerGroupsRequest(queue=q),
                                "groups", 4, size=lambda gs: sum(len(g.partitions) for g in gs))
        lag = {}
        for g in rows:
            for p in g.partitions:
                key = (g.consumer_group, p.partition)
                self.assertNotIn(key, seen, "a cursor was repeated")
                seen.add(key)
                lag[g.consumer_group] = lag.get(g.consumer_group, 0) + p.lag
        self.assertEqual(seen, {(g, p) for g in ("ga", "gb", "gc") for p in parts})
        self.assertGreaterEqual(pages, 5)
        # each entry's total is its group's over the whole queue, whatever the page
        for g in rows:
            self.assertEqual(g.total_lag, lag[g.consumer_group], g.consumer_group)
            self.assertEqual(g.total_lag, 6 * 3)  # nothing acked: all 3 per partition
        # the group filter binds the token
        r = self.c.a.ListConsumerGroups(A.ListConsumerGroupsRequest(queue=q, consumer_group="gb",
                                                                    page_size=2), timeout=15)
        self.assertEqual([(g.consumer_group, len(g.partitions)) for g in r.groups], [("gb", 2)])
        e = rpc_error(self.c.a.ListConsumerGroups,
                      A.ListConsumerGroupsRequest(queue=q, consumer_group="gc",
                                                  page_token=r.next_page_token), timeout=15)
        self.assertEqual(e.code(), BAD)

    # -- ListDeadLetters

    def dead_letter(self, q, n):
        for _ in range(n):
            p = self.c.pop_until(q, batch=1)
            m = p.messages[0]
            r = self.c.ack([Q.AckItem(partition_id=m.partition_id, offset=m.offset,
                                      lease_id=m.lease_id, status=C.ACK_STATUS_FAILED,
                                      error="e%d" % m.offset)]).results[0]
            self.assertTrue(r.dlq)

    def test_list_dead_letters_pages_while_letters_are_filed(self):
        q = uniq()
        self.c.configure(q, retry_limit=0)
        self.c.push(q, [b"m%d" % i for i in range(20)])
        self.dead_letter(q, 12)
        first = {d.id for d in self.c.dead_letters(q)}
        self.assertEqual(len(first), 12)

        def between(i):
            self.dead_letter(q, 1)  # newer than every position: heads a new listing

        rows, pages = self.walk(self.c.a.ListDeadLetters, A.ListDeadLettersRequest(queue=q),
                                "dead_letters", 5, between)
        ids = [d.id for d in rows]
        self.assertEqual(len(ids), len(set(ids)), "a dead letter was repeated")
        self.assertEqual(set(ids), first, "skipped, or a newer one listed behind the position")
        self.assertEqual(pages, 3)
        at = [d.failed_at_us for d in rows]
        self.assertEqual(at, sorted(at, reverse=True))
        e = rpc_error(self.c.a.ListDeadLetters, A.ListDeadLettersRequest(queue=q, offset=1,
                                                                        page_token="AAAA"),
                      timeout=15)
        self.assertEqual(e.code(), BAD)


if __name__ == "__main__":
    unittest.main()
