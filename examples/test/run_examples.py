"""Runs one language's example producer and consumer against a live broker and
checks what they did through the API.

    /usr/bin/python3 examples/test/run_examples.py python|node|c [unittest args]

ctest runs it as examples_python, examples_node and examples_c (test/e2e/CMakeLists.txt),
with a broker started by test/e2e/harness.py on the `pg` fixture's PostgreSQL,
serving h2c and TLS with the harness's test CA. A missing toolchain (protoc and
grpc_python_plugin; node, npm and examples/node/node_modules) fails the suite:
nothing here is skipped.

What is asserted, for each language:
  * the consumer receives exactly the messages the producer's verdicts say were
    stored (QUEUED): same partitions, offsets, message ids, transaction ids and
    payloads, each once, in offset order within each partition;
  * a second producer run with the same transaction-id prefix answers DUPLICATE,
    with the original's offset and message id, for exactly the items that carry
    a transaction id;
  * afterwards the consumer group's lag is 0 (AdminService.ListConsumerGroups and
    GetQueue), so the in-band acks were applied;
  * a consumer stopped by --count acks what it processed and no more, and the
    rest goes to the next consumer; one stopped by SIGINT exits 0 with its acks
    applied;
  * the plain h2c path works too, and bad arguments exit 2 with a message.
"""

import json
import os
import queue as queuelib
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("QN_SOURCE_DIR", os.path.abspath(os.path.join(HERE, "..", "..")))
sys.path.insert(0, os.path.join(SOURCE, "test", "e2e"))

from harness import Broker, certs, stubs  # noqa: E402

LANGS = ("python", "node", "c")
LANG = None  # set by main()
RUN_TIMEOUT = 120  # seconds one producer or consumer run may take
TOKEN = "example-token"  # sent as a bearer token; the broker accepts any while auth is off

broker = None


def fail_setup(msg):
    raise AssertionError("examples_%s cannot run: %s" % (LANG, msg))


def check_python():
    py = "/usr/bin/python3"
    if not os.access(py, os.X_OK):
        fail_setup("/usr/bin/python3 is missing (install python3)")
    for tool in ("protoc", "/usr/bin/grpc_python_plugin"):
        if shutil.which(tool) is None:
            fail_setup("%s is missing (install protobuf-compiler and protobuf-compiler-grpc)" % tool)
    r = subprocess.run([py, "-c", "import grpc, google.protobuf"], stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail_setup("Debian's Python lacks grpcio or protobuf (install python3-grpcio, python3-protobuf):\n"
                   + r.stderr)
    d = os.path.join(SOURCE, "examples", "python")
    return [py, os.path.join(d, "producer.py")], [py, os.path.join(d, "consumer.py")]


def check_node():
    d = os.path.join(SOURCE, "examples", "node")
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        fail_setup("node or npm is not on PATH (Node.js 18 or newer with npm)")
    for need in ("@grpc/grpc-js", "@grpc/proto-loader", "typescript", "@types/node"):
        if not os.path.isdir(os.path.join(d, "node_modules", need)):
            fail_setup("examples/node/node_modules lacks %s: run `npm ci` in examples/node "
                       "(scripts/test.sh does it)" % need)
    # Generate the types from proto/ and compile: the test runs what the tree holds now.
    r = subprocess.run([npm, "run", "--silent", "build"], cwd=d, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    if r.returncode != 0:
        fail_setup("`npm run build` in examples/node failed:\n" + r.stdout)
    dist = os.path.join(d, "dist", "src")
    return [node, os.path.join(dist, "producer.js")], [node, os.path.join(dist, "consumer.js")]


def check_c():
    """The C programs are built by CMake (examples/c) and passed in by ctest."""
    progs = []
    for var in ("QN_EXAMPLE_C_PRODUCER", "QN_EXAMPLE_C_CONSUMER"):
        p = os.environ.get(var)
        if not p or not os.access(p, os.X_OK):
            fail_setup("%s does not name a built program (run through ctest)" % var)
        progs.append([p])
    return progs[0], progs[1]


def setUpModule():
    global broker, PRODUCER, CONSUMER, CA
    PRODUCER, CONSUMER = {"python": check_python, "node": check_node, "c": check_c}[LANG]()
    stubs()  # the harness's own stubs, for the API checks below
    CA = certs().ca
    broker = Broker("product", tls=True, db="examples_" + LANG).start()


def tearDownModule():
    if broker is not None:
        rc = broker.stop()
        assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def admin():
    from queen.v1 import admin_pb2 as A
    from queen.v1 import admin_pb2_grpc as AG

    return A, AG.AdminServiceStub(broker.channel())


def tls_args():
    return ["--addr", "localhost:%d" % broker.tls_port, "--ca", CA, "--token", TOKEN]


def h2c_args():
    return ["--addr", "127.0.0.1:%d" % broker.port, "--token", TOKEN]


def run(cmd, args, expect_rc=0):
    """Runs an example to completion; returns its stdout lines parsed as JSON."""
    r = subprocess.run(cmd + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=RUN_TIMEOUT, env=dict(os.environ, QUEEN_PROTO_DIR=""))
    if r.returncode != expect_rc:
        raise AssertionError("%s exited %d (expected %d)\nstdout:\n%s\nstderr:\n%s\nbroker log tail:\n%s"
                             % (" ".join(cmd + args), r.returncode, expect_rc, r.stdout[-4000:],
                                r.stderr[-4000:], broker.log_text()[-3000:]))
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()], r.stderr


def produce(queue, count, prefix, partitions=3, batch=50, conn=None):
    out, _ = run(PRODUCER, (conn or tls_args()) + [
        "--queue", queue, "--count", str(count), "--partitions", str(partitions), "--batch", str(batch),
        "--txn-every", "2", "--txn-prefix", prefix, "--json", "--wait-ready", "30"])
    return out


def consume(queue, group, count, batch=7, credits=3, conn=None):
    out, _ = run(CONSUMER, (conn or tls_args()) + [
        "--queue", queue, "--group", group, "--count", str(count), "--batch", str(batch),
        "--credits", str(credits), "--idle-timeout", "30", "--json"])
    return out


def uniq(prefix):
    return "%s-%s-%s" % (prefix, LANG, uuid.uuid4().hex[:8])


class Examples(unittest.TestCase):
    def stored(self, verdicts):
        """(partition, offset) -> (message_id, transaction_id, payload) of the QUEUED verdicts."""
        return {(v["partition"], v["offset"]): (v["message_id"], v["transaction_id"], v["payload"])
                for v in verdicts if v["status"] == "QUEUED"}

    def assert_delivered(self, got, expected):
        """got: consumer lines; expected: stored(). Each exactly once, in order per partition."""
        keys = [(m["partition"], m["offset"]) for m in got]
        self.assertEqual(len(keys), len(set(keys)), "a message was delivered twice")
        self.assertEqual(set(keys), set(expected))
        for m in got:
            self.assertEqual((m["message_id"], m["transaction_id"], m["payload"]),
                             expected[(m["partition"], m["offset"])], m)
        last = {}
        for p, off in keys:
            self.assertGreater(off, last.get(p, -1), "partition %s delivered out of order" % p)
            last[p] = off

    def assert_lag(self, queue, group, lag):
        A, stub = admin()
        groups = stub.ListConsumerGroups(A.ListConsumerGroupsRequest(queue=queue, consumer_group=group),
                                         timeout=15).groups
        self.assertEqual(len(groups), 1, groups)
        self.assertEqual(groups[0].total_lag, lag, groups[0])
        depth = stub.GetQueue(A.GetQueueRequest(queue=queue, consumer_group=group), timeout=15).depth
        self.assertEqual(depth, lag)
        return groups[0]

    def test_consumer_gets_exactly_what_the_producer_stored(self):
        q, group, prefix = uniq("ex"), uniq("g"), uniq("t")
        first = produce(q, 120, prefix)
        self.assertEqual([v["seq"] for v in first], list(range(120)))
        self.assertEqual({v["status"] for v in first}, {"QUEUED"})
        per_part = {}
        for v in first:
            self.assertEqual(v["queue"], q)
            self.assertEqual(v["partition"], "p%d" % (v["seq"] % 3))
            # offsets are dense per partition, in push order
            self.assertEqual(v["offset"], per_part.get(v["partition"], 0))
            per_part[v["partition"]] = v["offset"] + 1
            if v["seq"] % 2 == 0:
                self.assertEqual(v["transaction_id"], "%s-%d" % (prefix, v["seq"]))
            self.assertEqual(json.loads(v["payload"])["seq"], v["seq"])

        # Same prefix again: the items with a transaction id are duplicates of the
        # first run's, the others are new messages.
        second = produce(q, 120, prefix)
        for a, b in zip(first, second):
            if a["seq"] % 2 == 0:
                self.assertEqual(b["status"], "DUPLICATE", b)
                self.assertEqual((b["offset"], b["message_id"]), (a["offset"], a["message_id"]))
            else:
                self.assertEqual(b["status"], "QUEUED", b)
                self.assertNotEqual(b["message_id"], a["message_id"])

        expected = self.stored(first)
        expected.update(self.stored(second))
        self.assertEqual(len(expected), 180)
        got = consume(q, group, len(expected))
        self.assertEqual(len(got), 180)
        self.assert_delivered(got, expected)
        g = self.assert_lag(q, group, 0)
        for p in g.partitions:
            self.assertEqual(p.committed, p.last_offset, p)
            self.assertFalse(p.leased, p)

    def test_count_stop_acks_only_what_was_processed(self):
        q, group = uniq("ex"), uniq("g")
        verdicts = produce(q, 30, uniq("t"), partitions=1)
        expected = self.stored(verdicts)
        # Batches of 4 with 2 in flight: the 11th message is inside the third
        # batch; the rest of it must not be acked and must reach the next consumer.
        got = consume(q, group, 11, batch=4, credits=2)
        self.assertEqual([m["offset"] for m in got], list(range(11)))
        self.assertEqual(self.assert_lag(q, group, 19).partitions[0].committed, 10)
        rest = consume(q, group, 19, batch=4, credits=2)
        self.assertEqual([m["offset"] for m in rest], list(range(11, 30)))
        self.assert_delivered(got + rest, expected)
        self.assert_lag(q, group, 0)

    def test_sigint_stops_cleanly_with_acks_applied(self):
        q, group = uniq("ex"), uniq("g")
        expected = self.stored(produce(q, 20, uniq("t"), partitions=2))
        errf = open(os.path.join(broker.dir, "sigint-consumer.err"), "w+")
        self.addCleanup(errf.close)
        p = subprocess.Popen(CONSUMER + tls_args() + ["--queue", q, "--group", group, "--count", "0",
                                                        "--batch", "3", "--json"],
                             stdout=subprocess.PIPE, stderr=errf, text=True)
        self.addCleanup(p.stdout.close)
        lines = queuelib.Queue()

        def read():
            for line in p.stdout:
                lines.put(line)
            lines.put(None)

        def stderr():
            errf.seek(0)
            return errf.read()

        threading.Thread(target=read, daemon=True).start()
        got = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < len(expected):
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                if line is None:
                    p.wait(10)
                    raise AssertionError("the consumer exited early (%s): %s" % (p.returncode, stderr()))
                got.append(json.loads(line))
        except queuelib.Empty:
            p.kill()
            p.wait()
            raise AssertionError("only %d of %d messages within 60 s: %s" % (len(got), len(expected), stderr()))
        p.send_signal(signal.SIGINT)
        try:
            rc = p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise AssertionError("the consumer did not stop within 30 s of SIGINT: %s" % stderr())
        err = stderr()
        self.assertEqual(rc, 0, err)
        self.assertIn("consumed %d" % len(expected), err)
        self.assert_delivered(got, expected)
        self.assert_lag(q, group, 0)

    def test_plain_h2c(self):
        q, group = uniq("ex"), uniq("g")
        expected = self.stored(produce(q, 5, uniq("t"), conn=h2c_args()))
        self.assertEqual(len(expected), 5)
        self.assert_delivered(consume(q, group, 5, conn=h2c_args()), expected)
        self.assert_lag(q, group, 0)

    def test_bad_arguments_exit_2(self):
        _, err = run(PRODUCER, h2c_args() + ["--count", "-1"], expect_rc=2)
        self.assertIn("count", err)
        _, err = run(CONSUMER, h2c_args() + ["--batch", "0"], expect_rc=2)
        self.assertIn("batch", err)
        missing = os.path.join(broker.dir, "no-such-ca.pem")
        _, err = run(CONSUMER, ["--addr", "localhost:1", "--ca", missing], expect_rc=2)
        self.assertIn(missing, err)


def main():
    global LANG
    if len(sys.argv) < 2 or sys.argv[1] not in LANGS:
        sys.exit("usage: run_examples.py python|node|c [unittest args]")
    LANG = sys.argv[1]
    prog = unittest.main(module=__name__, argv=[sys.argv[0], "-v"] + sys.argv[2:], exit=False)
    sys.exit(0 if prog.result.wasSuccessful() and prog.result.testsRun > 0 else 1)


if __name__ == "__main__":
    main()
