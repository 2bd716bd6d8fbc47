"""Contract details an independent client relies on (issue 8, item 8), on the
product broker and its database:
  - health Check answers SERVING for "" and for each service the broker serves,
    by its full name; NOT_FOUND for a name it does not serve;
  - a lease_id that is not a UUID is INVALID_ARGUMENT naming the field, in every
    request that carries one (RenewLease, Ack items, Transact required_leases
    and ack items, the in-stream renew of Consume);
  - ConfigureQueue creating a queue leaves namespace and task at their
    documented default "" (never derived from a dotted name) and replace resets
    them;
  - subscription_from_us = -2^63 (or any negative value) is INVALID_ARGUMENT
    with a message that says what is wrong, in Pop and in Consume.
"""

import unittest
import uuid

import grpc

from harness import Broker
from qsupport import C, H, Q, Client, ConsumeStream, uniq

INVALID = grpc.StatusCode.INVALID_ARGUMENT
MALFORMED = ["nope", "0123456789abcdef0123456789abcdef", "g" * 36, "1234"]


class ContractTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_contract").start()
        cls.c = Client(cls.b.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        rc = cls.b.stop()
        if rc != 0:
            raise AssertionError("broker exited %r:\n%s" % (rc, cls.b.log_text()[-4000:]))

    def assertInvalid(self, fn, *needles):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.code(), INVALID, e.details())
        for n in needles:
            self.assertIn(n, e.details())
        return e.details()


class Health(ContractTest):
    def check(self, service):
        return self.c.h.Check(H.HealthCheckRequest(service=service), timeout=5).status

    def test_every_served_service_is_serving_by_name(self):
        for name in ("", "queen.v1.QueueService", "queen.v1.AdminService", "grpc.health.v1.Health"):
            self.assertEqual(self.check(name), H.HealthCheckResponse.SERVING, name)

    def test_an_unknown_name_is_not_found(self):
        for name in ("queen.v1.Nothing", "queen.v1.queueservice", "QueueService"):
            with self.assertRaises(grpc.RpcError) as cm:
                self.check(name)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND, name)


class LeaseIds(ContractTest):
    def test_renew_lease(self):
        for bad in MALFORMED:
            self.assertInvalid(lambda: self.c.renew(bad), "lease_id", "not a lease id")
        self.assertInvalid(lambda: self.c.renew(""), "lease_id is required")
        # a well-formed lease nobody holds is not an error: it renews nothing
        r = self.c.renew(str(uuid.uuid4()))
        self.assertFalse(r.renewed)
        self.assertEqual(r.partitions, 0)

    def test_ack_item(self):
        pid = str(uuid.uuid4())
        for bad in MALFORMED:
            items = [Q.AckItem(partition_id=pid, offset=0, status=C.ACK_STATUS_COMPLETED),
                     Q.AckItem(partition_id=pid, offset=1, status=C.ACK_STATUS_COMPLETED, lease_id=bad)]
            self.assertInvalid(lambda: self.c.ack(items), "items[1].lease_id")

    def test_transact(self):
        q = uniq("ct")
        push = Q.TransactOp(push=Q.PushItem(queue=q, payload=b"x"))
        self.assertInvalid(lambda: self.c.transact([push], required_leases=[str(uuid.uuid4()), "nope"]),
                           "required_leases[1]")
        ack = Q.TransactOp(ack=Q.TransactAck(item=Q.AckItem(partition_id=str(uuid.uuid4()), offset=0,
                                                           status=C.ACK_STATUS_COMPLETED, lease_id="nope")))
        self.assertInvalid(lambda: self.c.transact([push, ack]), "lease_id")
        # nothing of a refused transaction was written
        self.assertFalse(self.c.exists(q))

    def test_consume_in_stream_renew(self):
        q = uniq("ct")
        s = ConsumeStream(self.c, Q.ConsumeSubscribe(queue=q))
        try:
            s.send(Q.ConsumeRequest(request_id=7, renew=Q.RenewLeaseRequest(lease_id="nope")))
            self.assertEqual(s.wait_end(), INVALID)
            self.assertIn("renew.lease_id", s.error.details())
        finally:
            s.cancel()


class Configure(ContractTest):
    def options(self, q):
        return self.c.get_queue(q).queue.options

    def test_create_leaves_namespace_and_task_empty_even_for_a_dotted_name(self):
        q = "ns%s.task.q" % uniq("").replace("-", "")
        r = self.c.configure(q, lease_time=30)
        self.assertTrue(r.created)
        self.assertEqual((r.queue.options.namespace, r.queue.options.task), ("", ""))
        self.assertEqual((self.options(q).namespace, self.options(q).task), ("", ""))

    def test_replace_resets_namespace_and_task(self):
        q = uniq("ct")
        self.c.configure(q, namespace="billing", task="invoices")
        self.assertEqual((self.options(q).namespace, self.options(q).task), ("billing", "invoices"))
        # a merge without them keeps them
        self.c.configure(q, ttl=50)
        self.assertEqual((self.options(q).namespace, self.options(q).task), ("billing", "invoices"))
        r = self.c.configure(q, replace=True, ttl=60)
        self.assertEqual((r.queue.options.namespace, r.queue.options.task), ("", ""))
        self.assertEqual((self.options(q).namespace, self.options(q).task), ("", ""))


class SubscriptionFrom(ContractTest):
    MIN = -(2 ** 63)

    def test_pop(self):
        q = uniq("ct")
        self.c.push(q, [b"x"])
        for v in (self.MIN, -1):
            d = self.assertInvalid(lambda: self.c.pop(q, consumer_group="g", subscription_from_us=v,
                                                      subscription_mode=C.SUBSCRIPTION_MODE_FROM_TIMESTAMP),
                                   "subscription_from_us", "negative", str(v))
            self.assertNotIn("required", d)
        # the group was not created by the refused pops: a valid one still starts where it says
        r = self.c.pop(q, consumer_group="g", subscription_mode=C.SUBSCRIPTION_MODE_ALL)
        self.assertEqual([m.payload for m in r.messages], [b"x"])

    def test_consume(self):
        q = uniq("ct")
        s = ConsumeStream(self.c, Q.ConsumeSubscribe(queue=q, consumer_group="g",
                                                     subscription_mode=C.SUBSCRIPTION_MODE_FROM_TIMESTAMP,
                                                     subscription_from_us=self.MIN))
        try:
            self.assertEqual(s.wait_end(), INVALID)
            self.assertIn("subscription_from_us", s.error.details())
            self.assertIn("negative", s.error.details())
        finally:
            s.cancel()


if __name__ == "__main__":
    unittest.main()
