"""The basic queue flow over both transports: every test runs once over h2c and
once over TLS (test CA, QUEEN_TLS_CERT / QUEEN_TLS_KEY) against one broker
serving both listeners: push, pop, ack, long poll, Consume, Transact, Fetch,
admin, large messages and error statuses."""

import concurrent.futures
import time
import unittest

import grpc

from harness import Broker
from qsupport import A, C, Client, ConsumeStream, Q, rpc_error, uniq

broker = None
pool = None


def setUpModule():
    global broker, pool
    broker = Broker("product", db="e2e_queue_basic", tls=True,
                    env={"QUEEN_WAKE_RECHECK_MS": "60000"}).start()
    pool = concurrent.futures.ThreadPoolExecutor(4)


def tearDownModule():
    pool.shutdown()
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


class BasicFlow:
    """Mixed into one TestCase per transport; channel() makes the channel."""

    def setUp(self):
        self.c = Client(self.channel())

    def tearDown(self):
        self.c.close()

    def test_push_pop_ack(self):
        q = uniq()
        r = self.c.push(q, [b"one", b"two", b"three"], txns=["t1", "t2", "t3"])
        self.assertEqual([x.offset for x in r.results], [0, 1, 2])
        dup = self.c.push(q, [b"again"], txns=["t2"]).results[0]
        self.assertEqual((dup.status, dup.offset), (Q.PUSH_STATUS_DUPLICATE, 1))
        p = self.c.pop(q, batch=10)
        self.assertEqual([m.payload for m in p.messages], [b"one", b"two", b"three"])
        res = self.c.ack([Q.AckItem(partition_id=p.messages[0].partition_id, transaction_id="t3",
                                    lease_id=p.lease_id)]).results[0]
        self.assertEqual((res.outcome, res.offset, res.lease_released), (Q.ACK_OUTCOME_APPLIED, 2, True))
        self.assertEqual(len(self.c.pop(q).messages), 0)
        self.assertEqual(self.c.get_queue(q).depth, 0)

    def test_large_messages(self):
        q = uniq()
        big = bytes(range(256)) * 3500  # 896000 bytes
        self.c.push(q, [big, big[::-1], big], timeout=30)
        got = []
        while len(got) < 3:
            p = self.c.pop(q, batch=100, timeout=30)
            self.assertGreater(len(p.messages), 0)
            got += [m.payload for m in p.messages]
            self.c.ack_offset(p.messages[-1])
        self.assertEqual(got, [big, big[::-1], big])
        self.assertEqual([len(r.payload) for r in self.c.fetch(q, max_bytes=8 << 20).records][:1], [len(big)])

    def test_long_poll_woken_by_push(self):
        q = uniq()
        before = self.c.rpcs()
        t0 = time.monotonic()
        fut = pool.submit(self.c.pop, q, wait_ms=8000, timeout=20)
        self.c.wait_received(before)
        self.c.push(q, [b"wake"])
        self.assertEqual([m.payload for m in fut.result(20).messages], [b"wake"])
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_consume(self):
        q = uniq()
        s = ConsumeStream(self.c, Q.ConsumeSubscribe(queue=q, batch=5, credits=2))
        try:
            s.roundtrip()
            self.c.push(q, [b"a", b"b"])
            r = s.recv()
            self.assertEqual([m.payload for m in r.batch.messages], [b"a", b"b"])
            m = r.batch.messages[1]
            s.send(Q.ConsumeRequest(request_id=5, ack=Q.AckRequest(items=[Q.AckItem(
                partition_id=m.partition_id, offset=m.offset, lease_id=m.lease_id)])))
            a = s.recv()
            self.assertEqual((a.request_id, a.ack.results[0].outcome), (5, Q.ACK_OUTCOME_APPLIED))
            s.close()
            self.assertEqual(s.wait_end(), grpc.StatusCode.OK)
        finally:
            s.cancel()
        self.assertEqual(self.c.partition(q).committed, 1)

    def test_transact_and_fetch(self):
        src, dst = uniq(), uniq()
        self.c.push(src, [b"in"])
        p = self.c.pop(src)
        m = p.messages[0]
        r = self.c.transact([
            Q.TransactOp(push=Q.PushItem(queue=dst, payload=b"out")),
            Q.TransactOp(ack=Q.TransactAck(item=Q.AckItem(partition_id=m.partition_id, offset=m.offset)))],
            [p.lease_id]).results
        self.assertEqual((r[0].push.status, r[1].ack.outcome), (Q.PUSH_STATUS_QUEUED, Q.ACK_OUTCOME_APPLIED))
        f = self.c.fetch(dst)
        self.assertEqual(([x.payload for x in f.records], f.high_watermark), ([b"out"], 1))

    def test_admin(self):
        q = uniq()
        self.assertTrue(self.c.configure(q, retry_limit=0).created)
        self.c.push(q, [b"x"])
        p = self.c.pop(q)
        self.assertTrue(self.c.ack_offset(p.messages[0], status=C.ACK_STATUS_FAILED).dlq)
        (d,) = self.c.dead_letters(q)
        self.assertEqual(d.payload, b"x")
        st = self.c.stats(q).queues[0]
        self.assertEqual((st.messages, st.dead_letters), (1, 1))
        self.assertTrue(self.c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=10).existed)

    def test_errors_carry_status_and_message(self):
        e = rpc_error(self.c.push_items, [Q.PushItem(queue="", payload=b"x")])
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("items[0].queue", e.details())
        e = rpc_error(self.c.get_queue, uniq())
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)


class H2c(BasicFlow, unittest.TestCase):
    def channel(self):
        return broker.channel()


class Tls(BasicFlow, unittest.TestCase):
    def channel(self):
        return broker.secure_channel(client=None)


if __name__ == "__main__":
    unittest.main()
