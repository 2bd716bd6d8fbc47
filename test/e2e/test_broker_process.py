"""The product binary, queen-broker, end to end against the test database (ctest
fixture `pg`): it migrates, serves health and reflection, reports its ports, and
shuts down cleanly. Later suites for the queue services start it the same way:

    b = Broker("product", db="my_suite").start()     # fresh database my_suite
"""

import signal
import subprocess
import os
import time
import unittest

import grpc
from google.protobuf import descriptor_pb2

from harness import Broker, stubs

stubs()
from grpc.health.v1 import health_pb2 as H  # noqa: E402
from grpc.health.v1 import health_pb2_grpc as HG  # noqa: E402
from grpc.reflection.v1 import reflection_pb2 as R  # noqa: E402
from grpc.reflection.v1 import reflection_pb2_grpc as RG  # noqa: E402
from grpc.reflection.v1alpha import reflection_pb2 as RA  # noqa: E402
from grpc.reflection.v1alpha import reflection_pb2_grpc as RAG  # noqa: E402

broker = None


def setUpModule():
    global broker
    broker = Broker("product", db="e2e_broker_process", tls=True).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def reflect(stub, requests, timeout=10):
    return list(stub.ServerReflectionInfo(iter(requests), timeout=timeout))


def files_of(resp):
    return [descriptor_pb2.FileDescriptorProto.FromString(b)
            for b in resp.file_descriptor_response.file_descriptor_proto]


class Health(unittest.TestCase):
    def test_serving_over_h2c_and_tls(self):
        for ch in (broker.channel(), broker.secure_channel(client=None)):
            with ch:
                r = HG.HealthStub(ch).Check(H.HealthCheckRequest(service=""), timeout=5)
                self.assertEqual(r.status, H.HealthCheckResponse.SERVING)

    def test_unknown_service(self):
        with broker.channel() as ch:
            with self.assertRaises(grpc.RpcError) as cm:
                HG.HealthStub(ch).Check(H.HealthCheckRequest(service="x.Y"), timeout=5)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)


class Reflection(unittest.TestCase):
    def setUp(self):
        self.ch = broker.channel()
        self.stub = RG.ServerReflectionStub(self.ch)

    def tearDown(self):
        self.ch.close()

    def test_list_services(self):
        (resp,) = reflect(self.stub, [R.ServerReflectionRequest(host="", list_services="")])
        names = {s.name for s in resp.list_services_response.service}
        self.assertIn("grpc.health.v1.Health", names)
        self.assertIn("grpc.reflection.v1.ServerReflection", names)
        self.assertIn("grpc.reflection.v1alpha.ServerReflection", names)
        # Every listed service resolves to a file that declares it (grpcurl's next step).
        reqs = [R.ServerReflectionRequest(file_containing_symbol=n) for n in sorted(names)]
        for name, r in zip(sorted(names), reflect(self.stub, reqs)):
            fd = files_of(r)[0]
            self.assertIn(name.rsplit(".", 1)[1], [s.name for s in fd.service], name)

    def test_file_containing_queue_service(self):
        (resp,) = reflect(self.stub, [R.ServerReflectionRequest(file_containing_symbol="queen.v1.QueueService")])
        self.assertEqual(resp.original_request.file_containing_symbol, "queen.v1.QueueService")
        fds = files_of(resp)
        self.assertEqual(fds[0].name, "queen/v1/queue.proto")
        self.assertEqual(fds[0].package, "queen.v1")
        svc = [s for s in fds[0].service if s.name == "QueueService"]
        self.assertEqual(len(svc), 1)
        self.assertIn("Push", [m.name for m in svc[0].method])
        # Transitive dependencies come along, each once.
        names = [f.name for f in fds]
        self.assertIn("queen/v1/common.proto", names)
        self.assertEqual(len(names), len(set(names)))

    def test_symbols_of_every_kind(self):
        syms = ["queen.v1.QueueService.Push", "queen.v1.PushRequest", "queen.v1.SubscriptionMode",
                "grpc.health.v1.HealthCheckResponse.ServingStatus", "queen.v1.AdminService"]
        resps = reflect(self.stub, [R.ServerReflectionRequest(file_containing_symbol=s) for s in syms])
        self.assertEqual(len(resps), len(syms))
        for s, r in zip(syms, resps):
            self.assertEqual(r.WhichOneof("message_response"), "file_descriptor_response", s)

    def test_file_by_filename_with_dependencies(self):
        (resp,) = reflect(self.stub, [R.ServerReflectionRequest(file_by_filename="queen/v1/admin.proto")])
        names = [f.name for f in files_of(resp)]
        self.assertEqual(names[0], "queen/v1/admin.proto")
        self.assertEqual(sorted(names[1:]), ["queen/v1/common.proto", "queen/v1/queue.proto"])

    def test_not_found_keeps_stream_open(self):
        reqs = [R.ServerReflectionRequest(file_containing_symbol="queen.v1.Nope"),
                R.ServerReflectionRequest(file_by_filename="nope.proto"),
                R.ServerReflectionRequest(list_services="")]
        a, b, c = reflect(self.stub, reqs)
        self.assertEqual(a.error_response.error_code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertEqual(b.error_response.error_code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertTrue(c.HasField("list_services_response"))

    def test_extension_numbers_empty(self):
        (resp,) = reflect(self.stub, [R.ServerReflectionRequest(all_extension_numbers_of_type="queen.v1.PushRequest")])
        self.assertEqual(resp.all_extension_numbers_response.base_type_name, "queen.v1.PushRequest")
        self.assertEqual(list(resp.all_extension_numbers_response.extension_number), [])

    def test_v1alpha(self):
        stub = RAG.ServerReflectionStub(self.ch)
        (resp,) = list(stub.ServerReflectionInfo(iter([RA.ServerReflectionRequest(
            file_containing_symbol="queen.v1.QueueService")]), timeout=10))
        fd = descriptor_pb2.FileDescriptorProto.FromString(resp.file_descriptor_response.file_descriptor_proto[0])
        self.assertEqual(fd.name, "queen/v1/queue.proto")


class Process(unittest.TestCase):
    def test_print_config_lists_transport_variables(self):
        out = subprocess.run([os.environ["QN_BROKER"], "--print-config"], capture_output=True, text=True,
                             env={"PATH": os.environ.get("PATH", "")}, check=True).stdout
        for var in ("QUEEN_PORT=6632", "QUEEN_PORT_FILE=", "QUEEN_H2C=true", "QUEEN_TLS_PORT="):
            self.assertIn(var, out)

    def test_sigterm_ends_watch_with_unavailable(self):
        b = Broker("product", db="e2e_broker_process_stop").start()
        try:
            ch = b.channel()
            watch = HG.HealthStub(ch).Watch(H.HealthCheckRequest(), timeout=30)
            self.assertEqual(next(watch).status, H.HealthCheckResponse.SERVING)
            t0 = time.monotonic()
            b.proc.send_signal(signal.SIGTERM)
            seen = []
            with self.assertRaises(grpc.RpcError) as cm:
                for m in watch:
                    seen.append(m.status)
            self.assertEqual(seen, [H.HealthCheckResponse.NOT_SERVING])
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(b.proc.wait(15), 0)
            self.assertLess(time.monotonic() - t0, 10)
            ch.close()
        finally:
            b.kill()


if __name__ == "__main__":
    unittest.main()
