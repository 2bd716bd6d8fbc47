"""Strings with NUL bytes or invalid UTF-8 are refused, never truncated (issue 8,
item 3), over real gRPC clients against the product broker.

protobuf-c hands string fields to the services NUL-terminated, so before the
pre-scan a queue "a\\0evil" was stored as queue "a", and transaction ids
"x\\0one" and "x\\0two" were both "x" (the second push answered DUPLICATE: a
message silently lost). The transport now scans every request message on the
wire before unpacking it (broker/src/transport/pb_scan.c) and answers
INVALID_ARGUMENT naming the field path. proto3 `string` fields must be UTF-8:
invalid UTF-8 (also overlong encodings, surrogates, code points past U+10FFFF)
is refused the same way; `bytes` fields (payloads) may hold anything.
"""

import unittest

import grpc

from harness import Broker
from qsupport import A, C, Q, Client, rpc_error, uniq

broker = None
client = None

NUL_VALUE = "x\x00y"  # the NUL at byte 1


def setUpModule():
    global broker, client
    broker = Broker("product", db="e2e_hostile_input").start()
    client = Client(broker.channel())


def tearDownModule():
    client.close()
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def raw_call(path, body, timeout=10):
    """A unary call with the request's wire bytes as given (no serializer):
    what a client with its own encoder, or a buggy one, can send."""
    return broker_channel().unary_unary(path)(body, timeout=timeout)


_ch = None


def broker_channel():
    global _ch
    if _ch is None:
        _ch = broker.channel()
    return _ch


def string_path(desc, depth=0):
    """The deepest string field reachable from desc: a list of field
    descriptors, outermost first (None when the message holds no string)."""
    best = None
    for f in desc.fields:
        if f.type == f.TYPE_STRING:
            cand = [f]
        elif f.type == f.TYPE_MESSAGE and depth < 4 and not f.message_type.GetOptions().map_entry:
            sub = string_path(f.message_type, depth + 1)
            cand = [f] + sub if sub else None
        else:
            continue
        if cand and (best is None or len(cand) > len(best)):
            best = cand
    return best


def with_value(cls, path, value):
    """A request of cls with value at path (each repeated level gets one
    element), and the path as the broker names it: items[0].transaction_id."""
    msg = cls()
    cur = msg
    for f in path[:-1]:
        cur = getattr(cur, f.name).add() if f.label == f.LABEL_REPEATED else getattr(cur, f.name)
    last = path[-1]
    if last.label == last.LABEL_REPEATED:
        getattr(cur, last.name).append(value)
    else:
        setattr(cur, last.name, value)
    name = ".".join(f.name + ("[0]" if f.label == f.LABEL_REPEATED else "") for f in path)
    return msg, name


class Nul(unittest.TestCase):
    def test_queue_with_nul_is_refused_and_nothing_stored(self):
        e = rpc_error(client.push, "a\x00evil", [b"payload"])
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.details(), "items[0].queue contains a NUL byte at byte 1")
        # not stored as queue "a" (what the truncation did)
        self.assertFalse(client.exists("a"))
        names = [q.name for q in client.a.ListQueues(A.ListQueuesRequest(), timeout=10).queues]
        self.assertNotIn("a", names)

    def test_transaction_ids_with_nul_are_both_refused(self):
        q = uniq("txnul")
        for tx in ("x\x00one", "x\x00two"):
            e = rpc_error(client.push, q, [b"m-" + tx.encode()], txns=[tx])
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, tx)
            self.assertEqual(e.details(), "items[0].transaction_id contains a NUL byte at byte 1")
        self.assertEqual(client.message_count(q), 0)
        # "x" was never taken: a push with that id is new, not a duplicate
        r = client.push(q, [b"real"], txns=["x"])
        self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
        self.assertEqual(client.message_count(q), 1)

    def test_a_nul_in_a_later_item_names_that_item_and_stores_nothing(self):
        q = uniq("later")
        items = [Q.PushItem(queue=q, payload=b"%d" % i, transaction_id="t%d" % i) for i in range(5)]
        items[3].transaction_id = "t\x003"
        e = rpc_error(client.push_items, items)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.details(), "items[3].transaction_id contains a NUL byte at byte 1")
        self.assertEqual(client.message_count(q), 0)

    def test_transact_push_with_nul_queue_stores_nothing(self):
        q = uniq("tx")
        req = Q.TransactRequest(ops=[Q.TransactOp(push=Q.PushItem(queue=q, payload=b"ok")),
                                     Q.TransactOp(push=Q.PushItem(queue=q + "\x00b", payload=b"x"))])
        e = rpc_error(client.q.Transact, req, timeout=10)
        self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.details(), "ops[1].push.queue contains a NUL byte at byte %d" % len(q))
        self.assertFalse(client.exists(q))

    def test_every_request_type_with_strings(self):
        """A NUL in the deepest string field of every request message of every
        method served (unary and streaming): INVALID_ARGUMENT naming the path."""
        from grpc.health.v1 import health_pb2
        from grpc.reflection.v1 import reflection_pb2
        from queen.v1 import admin_pb2, queue_pb2

        services = [queue_pb2.DESCRIPTOR.services_by_name["QueueService"],
                    admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
                    health_pb2.DESCRIPTOR.services_by_name["Health"],
                    reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]]
        from google.protobuf import symbol_database
        db = symbol_database.Default()
        covered = []
        for svc in services:
            for m in svc.methods:
                path = string_path(m.input_type)
                if path is None:
                    continue
                cls = db.GetSymbol(m.input_type.full_name)
                msg, name = with_value(cls, path, NUL_VALUE)
                rpc = "/%s/%s" % (svc.full_name, m.name)
                ch = broker_channel()
                ser = lambda x: x.SerializeToString()  # noqa: E731
                try:
                    if m.client_streaming:
                        call = ch.stream_stream(rpc, request_serializer=ser)
                        for _ in call(iter([msg]), timeout=10):
                            pass
                    elif m.server_streaming:
                        for _ in ch.unary_stream(rpc, request_serializer=ser)(msg, timeout=10):
                            pass
                    else:
                        ch.unary_unary(rpc, request_serializer=ser)(msg, timeout=10)
                    self.fail("%s with a NUL in %s was accepted" % (rpc, name))
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, rpc)
                    self.assertEqual(e.details(), "%s contains a NUL byte at byte 1" % name, rpc)
                covered.append((rpc, name))
        # every queen.v1 method takes strings (so none was skipped); so do health
        # and reflection
        queen_methods = ["/%s/%s" % (svc.full_name, m.name) for svc in services
                         if svc.full_name.startswith("queen.v1.") for m in svc.methods]
        self.assertGreaterEqual(len(queen_methods), 19)  # PushSegments included
        self.assertEqual(sorted(c[0] for c in covered if c[0].startswith("/queen.v1.")),
                         sorted(queen_methods), covered)
        rpcs = [r for r, _ in covered]
        for streaming in ("/queen.v1.QueueService/Consume", "/grpc.health.v1.Health/Watch",
                          "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"):
            self.assertIn(streaming, rpcs)
        nested = [c for c in covered if "." in c[1]]
        self.assertGreaterEqual(len(nested), 8, covered)


class Utf8(unittest.TestCase):
    def push_raw(self, queue_bytes, tx_bytes=b"t"):
        """A PushRequest whose queue / transaction_id strings carry the given bytes."""
        marker_q, marker_t = "Q" * len(queue_bytes), "T" * len(tx_bytes)
        body = Q.PushRequest(items=[Q.PushItem(queue=marker_q, transaction_id=marker_t,
                                               payload=b"p")]).SerializeToString()
        body = body.replace(marker_q.encode(), queue_bytes, 1).replace(marker_t.encode(), tx_bytes, 1)
        return raw_call("/queen.v1.QueueService/Push", body)

    def test_invalid_utf8_is_refused_and_nothing_stored(self):
        q = uniq("utf").encode()
        cases = [
            (q + b"\xff", b"t", "items[0].queue is not valid UTF-8 at byte %d" % len(q)),
            (q, b"a\xc0\x80", "items[0].transaction_id is not valid UTF-8 at byte 1"),  # overlong NUL
            (q, b"\xed\xa0\x80", "items[0].transaction_id is not valid UTF-8 at byte 0"),  # surrogate
            (q, b"ok\xf4\x90\x80\x80", "items[0].transaction_id is not valid UTF-8 at byte 2"),  # > U+10FFFF
            (q, b"cut\xe2\x82", "items[0].transaction_id is not valid UTF-8 at byte 3"),  # truncated
        ]
        for qb, tb, want in cases:
            with self.assertRaises(grpc.RpcError) as cm:
                self.push_raw(qb, tb)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, (qb, tb))
            self.assertEqual(cm.exception.details(), want)
        self.assertFalse(client.exists(q.decode()))
        self.assertFalse(client.exists(q[:-1].decode()))

    def test_valid_utf8_and_any_bytes_in_payloads_are_accepted(self):
        q = uniq("ok")
        tx = "caf\u00e9 \u2603 \U0001f600"
        r = client.push(q, [b"\x00\xff\xc0\x80 any bytes"], txns=[tx])
        self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
        m = client.pop_until(q)
        self.assertEqual(m.messages[0].payload, b"\x00\xff\xc0\x80 any bytes")
        self.assertEqual(m.messages[0].transaction_id, tx)


if __name__ == "__main__":
    unittest.main()
