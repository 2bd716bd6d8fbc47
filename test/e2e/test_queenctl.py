"""queenctl end to end: the built binary (QN_QUEENCTL) against a real broker on the
test PostgreSQL, for every command: outputs (JSON lines, tables), exit codes (0 ok,
1 failure / non-OK status, 2 usage or bad input), --help everywhere, connection
settings from flags and QUEEN_* variables, TLS and mTLS, a broker that is not
there, and the newcomer walkthrough of the README (WalkthroughTest).

What queenctl did is checked through an independent client where it matters
(grpcio, qsupport.Client): pushed payloads and order, cursors, dead letters.
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import Broker, certs, scratch
from qsupport import C, Client, Q, uniq, wait_until

QUEENCTL = os.environ.get("QN_QUEENCTL", "")
broker = None


def setUpModule():
    global broker
    if not QUEENCTL or not os.access(QUEENCTL, os.X_OK):
        raise RuntimeError("QN_QUEENCTL does not name the queenctl binary (run through ctest)")
    broker = Broker("product", db="e2e_queenctl", tls=True, client_ca=True).start()


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def clean_env(**extra):
    """The environment without QUEEN_* variables (they may be set for a broker)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
    env.update(extra)
    return env


def ctl(*args, stdin=None, env=None, addr=True, timeout=120):
    """Runs queenctl; returns (exit status, stdout text, stderr text)."""
    e = clean_env()
    if addr:
        e["QUEEN_ADDR"] = broker.target()
    e.update(env or {})
    p = subprocess.run([QUEENCTL] + [str(a) for a in args], input=stdin, env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def jlines(out):
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def write_lines(lines):
    fd, path = tempfile.mkstemp(prefix="lines-", suffix=".txt", dir=scratch())
    with os.fdopen(fd, "w") as f:
        for line in lines:
            f.write(line + "\n")
    return path


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(broker.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def ok(self, *args, **kw):
        rc, out, err = ctl(*args, **kw)
        self.assertEqual(rc, 0, "queenctl %s: exit %d\nstdout: %s\nstderr: %s" % (
            " ".join(map(str, args)), rc, out[-2000:], err[-2000:]))
        return out, err

    def fails(self, status, *args, needle=None, **kw):
        rc, out, err = ctl(*args, **kw)
        self.assertEqual(rc, status, "queenctl %s: exit %d (want %d)\nstdout: %s\nstderr: %s" % (
            " ".join(map(str, args)), rc, status, out[-2000:], err))
        self.assertTrue(err.strip(), "a failure says why on stderr")
        if needle is not None:
            self.assertIn(needle, err)
        return out, err

    def json1(self, *args, **kw):
        out, _ = self.ok(*args, "-o", "json", **kw)
        lines = jlines(out)
        self.assertEqual(len(lines), 1, out)
        return lines[0]


# ------------------------------------------------------------------ help and usage

class HelpAndUsage(Base):
    def commands(self):
        out, _ = self.ok("--help", addr=False)
        cmds = []
        seen = False
        for line in out.splitlines():
            if line.startswith("Commands:"):
                seen = True
                continue
            if seen:
                if not line.startswith("  "):
                    break
                words = line.split()
                cmds.append(words[:2] if words[0] in ("queue", "group", "dlq", "segment")
                            else words[:1])
        return cmds

    def test_help_on_every_command_and_group(self):
        cmds = self.commands()
        names = {" ".join(c) for c in cmds}
        for want in ["queue list", "queue get", "queue configure", "queue delete", "push", "pop",
                     "ack", "tail", "group list", "group seek", "group delete", "dlq list",
                     "dlq replay", "dlq delete", "stats", "segment hash", "segment encode",
                     "segment decode", "token"]:
            self.assertIn(want, names)
        for c in cmds:
            out, err = self.ok(*c, "--help", addr=False)
            self.assertIn("Usage: queenctl " + " ".join(c), out)
            self.assertIn("--addr", out, "global options are listed")
            self.assertEqual(err, "")
        for g in ("queue", "group", "dlq", "segment"):
            out, err = self.ok(g, "--help", addr=False)
            self.assertIn("Usage: queenctl %s COMMAND" % g, out)
            self.assertEqual(err, "")
        out, _ = self.ok("help", addr=False)
        self.assertIn("Exit status", out)

    def test_usage_errors_exit_2(self):
        self.fails(2, addr=False, needle="command is missing")
        self.fails(2, "bogus", addr=False, needle='unknown command "bogus"')
        self.fails(2, "queue", "bogus", addr=False, needle='unknown command "queue bogus"')
        self.fails(2, "queue", addr=False)  # a group without a verb: its help on stderr
        self.fails(2, "stats", "--bogus", addr=False)
        self.fails(2, "queue", "get", addr=False, needle="queue name is missing")
        self.fails(2, "queue", "get", "a", "b", addr=False, needle="one queue name only")
        self.fails(2, "push", addr=False, needle="--queue is required")
        self.fails(2, "push", "-q", "x", "--batch", "0", addr=False, needle="--batch")
        self.fails(2, "push", "-q", "x", "--txid", "sometimes", addr=False, needle="--txid")
        self.fails(2, "push", "-q", "x", "--txid", "field:id", addr=False, needle="needs --json")
        self.fails(2, "stats", "--timeout", "soon", addr=False, needle="--timeout")
        self.fails(2, "stats", "-o", "xml", addr=False, needle="-o")
        self.fails(2, "tail", "-q", "x", "--from", "yesterday", addr=False, needle="--from")
        self.fails(2, "group", "seek", "g", "-q", "x", addr=False, needle="--to-end")
        self.fails(2, "ack", "--partition-id", "p", addr=False, needle="--offset")
        self.fails(2, "ack", "--partition-id", "p", "--offset", "1", "--status", "maybe",
                   addr=False, needle="--status")
        self.fails(2, "dlq", "replay", addr=False, needle="--all")
        self.fails(2, "queue", "configure", "x", "--retry-limit", "-1", addr=False,
                   needle="--retry-limit")
        self.fails(2, "queue", "configure", "x", "--retention-enabled", "perhaps", addr=False,
                   needle="--retention-enabled")
        self.fails(2, "stats", addr=False, env={"QUEEN_TLS": "maybe"}, needle="QUEEN_TLS")
        self.fails(2, "stats", "--token", "has space", needle="token")
        self.fails(2, "stats", "--addr", "127.0.0.1:notaport", needle="port")

    def test_push_bad_input_exit_2(self):
        q = uniq()
        self.fails(2, "push", "-q", q, "/nonexistent/file", needle="cannot open")
        self.fails(2, "push", "-q", q, stdin=b"a\n\nc\n", needle="line 2: empty payload")
        for text, needle in [
            (b'{"payload": "a"}\n{"payload": \n', "line 2: invalid json"),
            (b'[1]\n', "line 1: not a json object"),
            (b'{"payload": "a", "colour": 1}\n', 'unknown key "colour"'),
            (b'{"partition": "p"}\n', "exactly one of payload and payload_b64"),
            (b'{"payload_b64": "!!"}\n', "payload_b64"),
            (b'{"payload": "a", "partition": 5}\n', "partition: not a string"),
        ]:
            self.fails(2, "push", "-q", q, "--json", stdin=text, needle=needle)
        self.fails(2, "push", "-q", q, "--json", "--txid", "field:id",
                   stdin=b'{"payload": "a"}\n', needle='field "id"')
        self.fails(2, "push", "-q", q, "--max-line", "4", stdin=b"abcdefgh\n",
                   needle="line 1: longer than 4 bytes")
        # nothing before the bad line was sent as a partial batch without notice:
        # bad input stops the run before its batch is sent
        self.assertFalse(self.c.exists(q))


# ------------------------------------------------------------------ connections

class Connections(Base):
    def test_broker_not_there_exits_1(self):
        port = free_port()
        _, err = self.fails(1, "stats", env={"QUEEN_ADDR": "127.0.0.1:%d" % port})
        self.assertIn("connect to 127.0.0.1:%d" % port, err)
        self.assertIn("refused", err.lower())
        _, err = self.fails(1, "queue", "list", "--addr", "no-such-host.invalid:6632")
        self.assertIn("cannot resolve no-such-host.invalid", err)

    def test_default_address_is_6632(self):
        # With no QUEEN_ADDR the tool dials 127.0.0.1:6632 (nothing listens there in tests,
        # or a broker does: either way the message names the address).
        rc, out, err = ctl("stats", addr=False)
        if rc != 0:
            self.assertIn("127.0.0.1:6632", err)

    def test_flag_wins_over_environment(self):
        port = free_port()
        self.ok("stats", "--addr", broker.target(), env={"QUEEN_ADDR": "127.0.0.1:%d" % port})

    def test_tls_with_client_certificate(self):
        c = certs()
        tls = "127.0.0.1:%d" % broker.tls_port
        out, _ = self.ok("stats", "-o", "json", "--addr", tls, "--ca", c.ca, "--cert", c.client,
                         "--key", c.client_key)
        self.assertIn("total_messages", json.loads(out))
        # the same through the environment, with the name checked as a DNS name
        self.ok("stats", env={"QUEEN_ADDR": tls, "QUEEN_TLS": "true", "QUEEN_TLS_CA": c.ca,
                              "QUEEN_TLS_CERT": c.client, "QUEEN_TLS_KEY": c.client_key,
                              "QUEEN_TLS_SERVER_NAME": "localhost"})

    def test_tls_failures(self):
        c = certs()
        tls = "127.0.0.1:%d" % broker.tls_port
        # an unknown CA: verification fails
        _, err = self.fails(1, "stats", "--addr", tls, "--ca", c.rogue_ca, "--cert", c.client,
                            "--key", c.client_key)
        self.assertIn("certificate verify failed", err)
        # a name the certificate does not hold
        _, err = self.fails(1, "stats", "--addr", tls, "--ca", c.ca, "--cert", c.client,
                            "--key", c.client_key, "--server-name", "elsewhere.example")
        self.assertIn("certificate verify failed", err)
        # no client certificate where the broker requires one
        self.fails(1, "stats", "--addr", tls, "--ca", c.ca)
        # TLS to the plain port
        _, err = self.fails(1, "stats", "--tls", "--ca", c.ca)
        self.assertIn("tls", err.lower())
        # files that cannot be used are bad input
        self.fails(2, "stats", "--addr", tls, "--ca", "/nonexistent.pem", needle="/nonexistent.pem")
        self.fails(2, "stats", "--addr", tls, "--ca", c.ca, "--cert", c.client,
                   needle="certificate needs its key")
        self.fails(2, "stats", "--addr", tls, "--ca", c.ca, "--cert", c.client, "--key",
                   c.rogue_key, needle="does not match")

    def test_tls_files_in_environment_need_tls_on(self):
        # QUEEN_TLS_CERT/KEY may be the broker's own: without TLS on they are ignored.
        c = certs()
        self.ok("stats", env={"QUEEN_TLS_CERT": c.server, "QUEEN_TLS_KEY": c.server_key})

    def test_token_is_accepted(self):
        self.ok("stats", "--token", "header.payload.signature")
        self.ok("stats", env={"QUEEN_TOKEN": "abc"})


# ------------------------------------------------------------------ queues

class Queues(Base):
    def test_configure_get_list_delete(self):
        q = uniq()
        r = self.json1("queue", "configure", q, "--lease-time", "30", "--retry-limit", "5",
                       "--retention-enabled", "true", "--namespace", "shop")
        self.assertTrue(r["created"])
        self.assertEqual(r["queue"]["queue"], q)
        self.assertEqual(r["queue"]["options"]["lease_time"], 30)
        self.assertEqual(r["queue"]["options"]["retry_limit"], 5)
        self.assertTrue(r["queue"]["options"]["retention_enabled"])
        # merge keeps what is not given
        r = self.json1("queue", "configure", q, "--ttl", "99")
        self.assertFalse(r["created"])
        self.assertEqual(r["queue"]["options"]["lease_time"], 30)
        self.assertEqual(r["queue"]["options"]["ttl"], 99)
        # --replace restores defaults
        r = self.json1("queue", "configure", q, "--replace", "--ttl", "5")
        self.assertEqual(r["queue"]["options"]["lease_time"], 60)
        opts = self.c.get_queue(q).queue.options
        self.assertEqual(opts.ttl, 5)
        self.c.push(q, [b"x", b"y"], partition="p1")
        g = self.json1("queue", "get", q)
        self.assertEqual(g["queue"]["messages"], 2)
        self.assertEqual(g["depth"], 2)
        self.assertEqual([p["partition"] for p in g["partitions"]], ["p1"])
        out, _ = self.ok("queue", "get", q, "-o", "table")
        self.assertIn("PARTITION", out)
        self.assertIn("p1", out)
        names = [x["queue"] for x in self.json1("queue", "list", "--limit", "1000")["queues"]]
        self.assertIn(q, names)
        out, _ = self.ok("queue", "list", "-o", "table", "--limit", "1000")
        self.assertTrue(out.startswith("QUEUE"))
        self.assertIn(q, out)
        self.assertEqual(self.json1("queue", "delete", q), {"existed": True})
        self.assertEqual(self.json1("queue", "delete", q), {"existed": False})
        self.assertFalse(self.c.exists(q))
        _, err = self.fails(1, "queue", "get", q)
        self.assertIn("NOT_FOUND", err)

    def test_invalid_argument_from_the_broker_exits_1(self):
        _, err = self.fails(1, "queue", "configure", uniq(), "--lease-time", "0")
        self.assertIn("INVALID_ARGUMENT", err)


# ------------------------------------------------------------------ push

class Push(Base):
    def test_lines_with_line_txids_are_duplicates_the_second_time(self):
        q = uniq()
        path = write_lines(["m%d" % i for i in range(2500)])
        r = self.json1("push", path, "-q", q, "--txid", "line", "--batch", "300")
        self.assertEqual((r["messages"], r["queued"], r["duplicate"], r["failed"]),
                         (2500, 2500, 0, 0))
        r = self.json1("push", path, "-q", q, "--txid", "line", "--batch", "300")
        self.assertEqual((r["queued"], r["duplicate"]), (0, 2500))
        f = self.c.fetch(q, max_bytes=1 << 20)
        self.assertEqual([m.payload for m in f.records][:3], [b"m0", b"m1", b"m2"])
        self.assertEqual(f.records[0].transaction_id, path + ":1")
        out, _ = self.ok("push", path, "-q", q, "--txid", "line", "-o", "table")
        self.assertIn("0 queued, 2500 duplicate, 0 failed", out)

    def test_hash_txids_and_results(self):
        q = uniq()
        out, _ = self.ok("push", "-q", q, "--txid", "hash", "--results", "-o", "json",
                         stdin=b"same\nother\nsame\n")
        lines = jlines(out)
        results, summary = lines[:-1], lines[-1]
        self.assertEqual(sorted(r["line"] for r in results), [1, 2, 3])
        by_line = {r["line"]: r for r in results}
        self.assertEqual(by_line[1]["status"], "PUSH_STATUS_QUEUED")
        self.assertEqual(by_line[3]["status"], "PUSH_STATUS_DUPLICATE")
        self.assertEqual(by_line[3]["message_id"], by_line[1]["message_id"])
        self.assertTrue(by_line[1]["transaction_id"].startswith("xxh3:"))
        self.assertEqual(summary["duplicate"], 1)

    def test_json_lines_partitions_and_order(self):
        q = uniq()
        lines = []
        for i in range(4000):
            if i % 3 == 0:
                lines.append(json.dumps({"partition": "p%d" % (i % 4), "payload": {"n": i},
                                         "id": "order-%d" % i}))
            elif i % 3 == 1:
                lines.append(json.dumps({"partition": "p%d" % (i % 4), "payload": "n=%d" % i,
                                         "id": i}))
            else:
                lines.append(json.dumps({"partition": "p%d" % (i % 4), "id": "x%d" % i,
                                         "payload_b64": "AAE=",
                                         "trace_id": "0190a0b2-7c3e-7d4f-8a1b-2c3d4e5f6a7b"}))
        path = write_lines(lines)
        r = self.json1("push", path, "-q", q, "--json", "--txid", "field:id", "--batch", "250",
                       "--inflight", "8")
        self.assertEqual((r["queued"], r["failed"]), (4000, 0))
        for p in range(4):
            recs = []
            off = 0
            while True:
                f = self.c.fetch(q, partition="p%d" % p, offset=off, max_bytes=1 << 20)
                if not f.records:
                    break
                recs += f.records
                off = f.records[-1].offset + 1
            want = [i for i in range(4000) if i % 4 == p]
            self.assertEqual(len(recs), len(want))
            for rec, i in zip(recs, want):
                if i % 3 == 0:
                    self.assertEqual(json.loads(rec.payload), {"n": i})
                    self.assertEqual(rec.transaction_id, "order-%d" % i)
                elif i % 3 == 1:
                    self.assertEqual(rec.payload, b"n=%d" % i)
                    self.assertEqual(rec.transaction_id, str(i))
                else:
                    self.assertEqual(rec.payload, b"\x00\x01")
                    self.assertEqual(rec.trace_id, "0190a0b2-7c3e-7d4f-8a1b-2c3d4e5f6a7b")

    def test_item_failure_exits_1_with_counts(self):
        q = uniq()
        # a trace id that is not a UUID is refused by the broker for the whole request
        _, err = self.fails(1, "push", "-q", q, "--json",
                            stdin=b'{"payload": "a", "trace_id": "not-a-uuid"}\n')
        self.assertIn("INVALID_ARGUMENT", err)


# ------------------------------------------------------------------ pop, ack, tail

class PopAckTail(Base):
    def test_pop_then_ack_by_offset_and_txid(self):
        q = uniq()
        self.c.push(q, [b"a", b"b", b"c"], txns=["t1", "t2", "t3"])
        r = self.json1("pop", "-q", q, "-g", "g", "--batch", "2")
        self.assertEqual([m["payload"] for m in r["messages"]], ["a", "b"])
        lease = r["lease_id"]
        pid = r["messages"][1]["partition_id"]
        a = self.json1("ack", "--partition-id", pid, "--offset", "1", "--lease-id", lease,
                       "-g", "g")
        self.assertEqual(a["outcome"], "ACK_OUTCOME_APPLIED")
        # acked again: NOOP is still success
        a = self.json1("ack", "--partition-id", pid, "--offset", "1", "-g", "g")
        self.assertEqual(a["outcome"], "ACK_OUTCOME_NOOP")
        self.assertEqual(self.c.partition(q, group="g").committed, 1)
        # a lease that is not held: not applied, exit 1
        r = self.json1("pop", "-q", q, "-g", "g")
        self.assertEqual([m["payload"] for m in r["messages"]], ["c"])
        _, err = self.fails(1, "ack", "--partition-id", pid, "--offset", "2", "--lease-id",
                            "00000000-0000-0000-0000-000000000000", "-g", "g")
        self.assertIn("LEASE_INVALID", err)
        a = self.json1("ack", "--partition-id", pid, "--txid", "t3", "-g", "g")
        self.assertEqual(a["outcome"], "ACK_OUTCOME_APPLIED")
        self.assertEqual(self.c.partition(q, group="g").committed, 2)
        out, _ = self.ok("pop", "-q", q, "-g", "g", "-o", "table")
        self.assertIn("no messages", out)
        # retry: the lease is released and the message comes again, no budget spent
        self.c.push(q, [b"d"])
        r = self.json1("pop", "-q", q, "-g", "g")
        m = r["messages"][0]
        a = self.json1("ack", "--partition-id", m["partition_id"], "--offset", m["offset"],
                       "--status", "retry", "-g", "g")
        self.assertEqual((a["outcome"], a["dlq"]), ("ACK_OUTCOME_APPLIED", False))
        r = self.json1("pop", "-q", q, "-g", "g")
        self.assertEqual([x["payload"] for x in r["messages"]], ["d"])
        out, _ = self.ok("ack", "--partition-id", m["partition_id"], "--offset", m["offset"],
                         "-g", "g", "-o", "table")
        self.assertTrue(out.startswith("APPLIED offset 3"), out)

    def test_pop_table_and_wait(self):
        q = uniq()
        self.c.push(q, [b"hello\x01"])
        out, _ = self.ok("pop", "-q", q, "--wait", "2s", "-o", "table")
        self.assertIn("lease ", out)
        self.assertIn("hello\\x01", out)
        r = self.json1("pop", "-q", q, "--wait", "100ms")
        self.assertEqual(r["messages"], [])

    def test_binary_payload_json_shape(self):
        q = uniq()
        self.c.push(q, [b"\xff\xfe"])
        r = self.json1("pop", "-q", q, "--auto-ack")
        m = r["messages"][0]
        self.assertIsNone(m["payload"])
        self.assertEqual(m["payload_b64"], "//4=")
        self.assertEqual(r["lease_id"], "")

    def test_tail_count_acks_what_it_printed(self):
        q = uniq()
        self.c.push(q, [b"m%d" % i for i in range(50)])
        out, _ = self.ok("tail", "-q", q, "-g", "g", "--count", "30", "--batch", "7", "-o", "json",
                         timeout=60)
        msgs = jlines(out)
        self.assertEqual([m["payload"] for m in msgs], ["m%d" % i for i in range(30)])
        # the 30 printed are acked, the rest of the last batch is not
        self.assertEqual(self.c.partition(q, group="g").committed, 29)
        out, _ = self.ok("tail", "-q", q, "-g", "g", "--count", "20", "-o", "table", timeout=60)
        rows = out.splitlines()
        self.assertEqual(len(rows), 20)
        self.assertTrue(rows[0].startswith("Default@30  m30"), rows[0])
        self.assertEqual(self.c.partition(q, group="g").committed, 49)

    def test_tail_no_ack_leaves_the_cursor(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"])
        out, _ = self.ok("tail", "-q", q, "-g", "g", "--count", "2", "--no-ack", timeout=60)
        self.assertEqual(len(jlines(out)), 2)
        self.assertEqual(self.c.partition(q, group="g").committed, -1)
        # released at the end of the stream: delivered again at once
        out, _ = self.ok("tail", "-q", q, "-g", "g", "--count", "2", timeout=60)
        self.assertEqual([m["payload"] for m in jlines(out)], ["a", "b"])

    def test_tail_from_latest_and_time(self):
        q = uniq()
        self.c.push(q, [b"old"])
        t_mid = time.time()
        time.sleep(0.05)  # segment timestamps: the next push lands strictly later
        self.c.push(q, [b"newer"])
        out, _ = self.ok("tail", "-q", q, "-g", "from-time", "--from", "@%.6f" % t_mid,
                         "--count", "1", timeout=60)
        self.assertEqual(jlines(out)[0]["payload"], "newer")
        # latest: only what is pushed after the subscription
        with subprocess.Popen([QUEENCTL, "tail", "-q", q, "-g", "from-latest", "--from", "latest",
                               "--count", "1", "-o", "json"],
                              env=clean_env(QUEEN_ADDR=broker.target()),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
            try:
                wait_until(lambda: any(g.consumer_group == "from-latest"
                                       for g in self.c.groups(q)),
                           timeout=20, what="the tail subscribed")
                self.c.push(q, [b"latest"])
                out, err = p.communicate(timeout=30)
            finally:
                p.kill()
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(jlines(out.decode())[0]["payload"], "latest")

    def test_tail_sigint_ends_cleanly(self):
        q = uniq()
        self.c.push(q, [b"one", b"two"])
        with subprocess.Popen([QUEENCTL, "tail", "-q", q, "-g", "g", "-o", "json"],
                              env=clean_env(QUEEN_ADDR=broker.target()),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
            try:
                got = [p.stdout.readline(), p.stdout.readline()]
                self.assertEqual([json.loads(x)["payload"] for x in got], ["one", "two"])
                wait_until(lambda: self.c.partition(q, group="g").committed == 1, timeout=10,
                           what="the printed messages were acked")
                p.send_signal(signal.SIGINT)
                rc = p.wait(timeout=15)
                err = p.stderr.read().decode()
            finally:
                p.kill()
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")

    def test_tail_of_a_missing_target_is_usage(self):
        self.fails(2, "tail", "-g", "g", needle="--queue")


# ------------------------------------------------------------------ groups, dlq, stats

class GroupsDlqStats(Base):
    def test_group_list_seek_delete(self):
        q = uniq()
        self.c.push(q, [b"a", b"b", b"c"])
        self.ok("tail", "-q", q, "-g", "g1", "--count", "1", timeout=60)
        gl = self.json1("group", "list", "-q", q)
        g = [x for x in gl["groups"] if x["consumer_group"] == "g1"][0]
        self.assertEqual(g["total_lag"], 2)
        out, _ = self.ok("group", "list", "-q", q, "-o", "table")
        self.assertIn("g1", out)
        r = self.json1("group", "seek", "g1", "-q", q, "--to-end")
        self.assertEqual(r["partitions_updated"], 1)
        self.assertEqual(self.c.partition(q, group="g1").committed, 2)
        r = self.json1("group", "seek", "g1", "-q", q, "--to", "-1h")
        self.assertEqual(r["partitions_updated"], 1)
        self.assertEqual(self.c.partition(q, group="g1").committed, -1)
        r = self.json1("group", "delete", "g1", "-q", q)
        self.assertEqual(r["partitions_deleted"], 1)
        out, _ = self.ok("group", "delete", "g1", "-q", q, "-o", "table")
        self.assertIn("forgot the cursors of 0 partitions", out)

    def test_listings_page(self):
        q = uniq()
        parts = ["p%d" % i for i in range(7)]
        self.c.push_items([Q.PushItem(queue=q, partition=p, payload=b"x") for p in parts])
        r = self.json1("queue", "get", q, "--page-size", "3")
        self.assertEqual([p["partition"] for p in r["partitions"]], parts[:3])
        self.assertEqual(r["depth"], 7)
        r = self.json1("queue", "get", q, "--page-size", "3", "--page-token", r["next_page_token"])
        self.assertEqual([p["partition"] for p in r["partitions"]], parts[3:6])
        r = self.json1("queue", "get", q, "--all", "--page-size", "2")
        self.assertEqual([p["partition"] for p in r["partitions"]], parts)
        self.assertFalse(r.get("next_page_token"))
        _, err = self.ok("queue", "get", q, "--page-size", "3", "-o", "table")
        self.assertIn("--page-token", err)
        self.fails(2, "queue", "get", q, "--all", "--page-token", "x", needle="--page-token")
        self.fails(1, "queue", "get", q, "--page-token", "garbage!", needle="page_token")
        # a group's partitions over several pages come back as one group
        for _ in parts:
            self.c.pop(q, consumer_group="g1", batch=1)
        r = self.json1("group", "list", "-q", q, "--all", "--page-size", "2")
        self.assertEqual([(g["consumer_group"], len(g["partitions"])) for g in r["groups"]],
                         [("g1", 7)])
        self.assertEqual(r["groups"][0]["total_lag"], 7)
        r = self.json1("group", "list", "-q", q, "--page-size", "2")
        self.assertEqual(len(r["groups"][0]["partitions"]), 2)
        self.assertEqual(r["groups"][0]["total_lag"], 7)

    def test_dlq_list_replay_delete(self):
        q = uniq()
        self.c.push(q, [b"bad1", b"bad2", b"bad3"], txns=["x1", "x2", "x3"])
        for _ in range(3):
            r = self.json1("pop", "-q", q, "-g", "g", "--batch", "1")
            m = r["messages"][0]
            a = self.json1("ack", "--partition-id", m["partition_id"], "--offset",
                           m["offset"], "--status", "dlq", "--error", "no good", "-g", "g")
            self.assertTrue(a["dlq"])
        dl = self.json1("dlq", "list", "-q", q)["dead_letters"]
        self.assertEqual(sorted(d["payload"] for d in dl), ["bad1", "bad2", "bad3"])
        self.assertEqual(dl[0]["error"], "no good")
        out, _ = self.ok("dlq", "list", "-q", q, "-o", "table")
        self.assertIn("no good", out)
        one = [d for d in dl if d["payload"] == "bad1"][0]
        r = self.json1("dlq", "replay", one["id"])
        self.assertEqual(r["replayed_as"]["status"], "PUSH_STATUS_QUEUED")
        self.assertEqual(r["replayed_as"]["transaction_id"], "dlq:" + one["id"])
        two = [d for d in dl if d["payload"] == "bad2"][0]
        self.assertEqual(self.json1("dlq", "delete", two["id"]), {"deleted": 1})
        three = [d for d in dl if d["payload"] == "bad3"][0]
        self.assertEqual(self.json1("dlq", "delete", "--partition-id", three["partition_id"],
                                    "--txid", "x3"), {"deleted": 1})
        self.assertEqual(self.json1("dlq", "list", "-q", q)["dead_letters"], [])
        _, err = self.fails(1, "dlq", "replay", one["id"])
        self.assertIn("NOT_FOUND", err)

    def test_dlq_replay_all_pages_with_progress(self):
        q = uniq()
        n = 25  # with --page 10: three pages, the last one short
        self.c.push(q, [b"d%d" % i for i in range(n)])
        for _ in range(n):
            m = self.c.pop(q, consumer_group="g", batch=1).messages[0]
            self.c.ack_offset(m, status=C.ACK_STATUS_DLQ, group="g")
        self.assertEqual(len(self.c.dead_letters(q)), n)
        out, _ = self.ok("dlq", "list", "-q", q, "--all", "--page", "10", "-o", "json")
        listed = jlines(out)[0]["dead_letters"]
        self.assertEqual(sorted(d["payload"] for d in listed), sorted("d%d" % i for i in range(n)))
        out, _ = self.ok("dlq", "list", "-q", q, "--limit", "10", "-o", "json")
        self.assertEqual(len(jlines(out)[0]["dead_letters"]), 10)
        out, err = self.ok("dlq", "replay", "--all", "-q", q, "--page", "10", "--progress",
                           "-o", "json")
        self.assertEqual(jlines(out), [{"listed": n, "replayed": n, "duplicate": 0}])
        self.assertRegex(err, r"dlq replay: 25 dead letters, [\d,]+ dead letters/s, [\d.]+ s "
                              r"elapsed \(25 of 25\)")
        self.assertEqual(self.json1("dlq", "list", "-q", q)["dead_letters"], [])
        self.assertEqual(self.c.message_count(q), 2 * n)
        out, _ = self.ok("dlq", "replay", "--all", "-q", q, "-o", "table")
        self.assertIn("replayed 0 of 0 dead letters", out)

    def test_stats(self):
        q = uniq()
        self.c.push(q, [b"a", b"b"])
        s = self.json1("stats", "-q", q)
        self.assertEqual([x["queue"] for x in s["queues"]], [q])
        self.assertEqual(s["queues"][0]["pending"], 2)
        self.assertGreater(s["pushed"], 0)
        out, _ = self.ok("stats", "-q", q, "-o", "table")
        self.assertIn("LAG", out)
        self.assertIn("broker: up", out)


# ------------------------------------------------------------------ segment tools

class Segment(Base):
    def test_segment_round_trip_still_works(self):
        out, _ = self.ok("segment", "hash", "order-42", addr=False)
        self.assertEqual(len(out.strip()), 32)
        p = subprocess.run([QUEENCTL, "segment", "encode"], input=b'{"payload_b64": "e30="}\n',
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
        self.assertEqual(p.returncode, 0, p.stderr)
        d = subprocess.run([QUEENCTL, "segment", "decode"], input=p.stdout,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertEqual(json.loads(d.stdout)["payload_b64"], "e30=")
        self.fails(2, "segment", "encode", "--level", "42", addr=False, needle="--level")


# ------------------------------------------------------------------ the walkthrough

class WalkthroughTest(Base):
    """README's newcomer walkthrough, as typed, with only queenctl: create a queue;
    push 100,000 lines from a file with a progress line; tail them from a group in a
    second process; lag 0 in stats; fail a message into the DLQ and replay it."""

    N = 100000

    def test_walkthrough(self):
        q = uniq("orders")
        out, _ = self.ok("queue", "configure", q, "--retry-limit", "2", "-o", "table")
        self.assertIn("created queue " + q, out)
        path = write_lines(["order %d" % i for i in range(self.N)])

        # terminal 2: tail from a group, started before the push
        with subprocess.Popen([QUEENCTL, "tail", "-q", q, "-g", "billing", "--from", "earliest",
                               "--count", str(self.N), "-o", "json"],
                              env=clean_env(QUEEN_ADDR=broker.target()),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as tail:
            try:
                out, err = self.ok("push", path, "-q", q, "--progress", "-o", "table",
                                   timeout=300)
                self.assertIn("pushed %d messages to %s" % (self.N, q), out)
                self.assertIn("%d queued, 0 duplicate, 0 failed" % self.N, out)
                self.assertRegex(err, r"push: [\d,]+ messages, [\d,]+ messages/s, "
                                      r"[\d.]+ s elapsed")
                tout, terr = tail.communicate(timeout=300)
            finally:
                tail.kill()
        self.assertEqual(tail.returncode, 0, terr.decode())
        msgs = jlines(tout.decode())
        self.assertEqual(len(msgs), self.N)
        self.assertEqual([m["payload"] for m in msgs], ["order %d" % i for i in range(self.N)])
        self.assertEqual([m["offset"] for m in msgs], list(range(self.N)))

        s = self.json1("stats", "-q", q)
        self.assertEqual(s["queues"][0]["pending"], 0)
        self.assertEqual(s["queues"][0]["messages"], self.N)
        out, _ = self.ok("stats", "-q", q, "-o", "table")
        row = [r for r in out.splitlines() if r.startswith(q)][0].split()
        self.assertEqual(row[3], "0", "the LAG column")

        # fail one message into the dead-letter queue: ack failed until retries are spent
        self.ok("push", "-q", q, stdin=b"poison\n")
        dead = False
        for _ in range(3):  # retry_limit 2: the third failure dead-letters it
            r = self.json1("pop", "-q", q, "-g", "billing")
            m = r["messages"][0]
            self.assertEqual(m["payload"], "poison")
            a = self.json1("ack", "--partition-id", m["partition_id"], "--offset", m["offset"],
                           "--lease-id", r["lease_id"], "--status", "failed", "-g", "billing")
            dead = a["dlq"]
        self.assertTrue(dead)
        dl = self.json1("dlq", "list", "-q", q)["dead_letters"]
        self.assertEqual([d["payload"] for d in dl], ["poison"])
        self.assertEqual(self.json1("stats", "-q", q)["queues"][0]["dead_letters"], 1)
        r = self.json1("dlq", "replay", dl[0]["id"])
        self.assertEqual(r["replayed_as"]["status"], "PUSH_STATUS_QUEUED")
        out, _ = self.ok("tail", "-q", q, "-g", "billing", "--count", "1", "-o", "table",
                         timeout=60)
        self.assertEqual(out.split(None, 1)[1].strip(), "poison")
        s = self.json1("stats", "-q", q)["queues"][0]
        self.assertEqual((s["pending"], s["dead_letters"]), (0, 0))


if __name__ == "__main__":
    unittest.main()
