"""Bounded memory against clients that never read (issue 8, item 4), on the
product broker: raw HTTP/2 connections that ask for large responses and never
grant flow-control window, so every byte the broker produces for them stays
queued in the broker.

What is asserted: the broker's peak RSS over each attack (VmHWM of
/proc/PID/status, reset through /proc/PID/clear_refs before it) grows over the
idle baseline by no more than a bound derived from the caps the broker runs
with (QUEEN_MAX_CONN_SEND_BYTES per connection, QUEEN_MAX_SEND_BUFFER_BYTES
broker-wide), never a fixed number; the requests the broker refuses say which
limit; other clients are served meanwhile; producing resumes as a stalled
client reads.

The bound: what the attackers can hold is H = min(broker cap, connections x
connection cap) of queued responses. Reads are started only against reserved
budget, so the database reads in flight at any moment are covered by H too; a
read briefly holds its data about three more times (the libpq result, the
decompressed segment, the message copies in the response arena) while its
response is packed (a large batch decompressed by an offload thread holds a copy
of its compressed rows instead of the libpq result, which is freed by then).
Hence 4 x H, plus SLACK for the allocator's arenas and the connections' own
buffers (nghttp2 sessions, 256 KiB socket buffers). Under AddressSanitizer the
broker runs with a 1 MB quarantine (harness.rss_env): freed memory would
otherwise count in RSS up to 256 MB.
Without the caps (today's main) one connection of 256 such Fetches pins about
1 GiB, so the bound (at most ~170 MB here) separates the two by far.
"""

import os
import socket
import time
import unittest

import grpc

from harness import Broker, grpc_frame, grpc_message, grpc_status, rss_env
from qsupport import Q, Client, uniq, wait_until

MIB = 1 << 20
CONN_CAP = 8 * MIB        # QUEEN_MAX_CONN_SEND_BYTES
BROKER_CAP = 40 * MIB     # QUEEN_MAX_SEND_BUFFER_BYTES (> 4 x CONN_CAP: four stalled
                          # connections leave room for other readers)
FACTOR = 4                # see the module comment
SLACK = 32 * MIB
PAYLOAD = 1000000         # four of them make one "4 MiB" read
FETCH = "/queen.v1.QueueService/Fetch"
CONSUME = "/queen.v1.QueueService/Consume"

broker = None
client = None
queue = None


def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def reset_peak(pid):
    # "5" resets VmHWM to the current RSS (Linux >= 4.0; we run as root)
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def bound(held):
    return FACTOR * held + SLACK


def start_broker():
    """A fresh broker per test: each peak is measured over a baseline that no
    earlier attack has inflated (or left free heap in)."""
    global broker, client, queue
    broker = Broker("product", db="e2e_hostile_memory", env=rss_env({
        "QUEEN_MAX_CONN_SEND_BYTES": str(CONN_CAP),
        "QUEEN_MAX_SEND_BUFFER_BYTES": str(BROKER_CAP),
        # no closing on the output limits here: the memory is held on purpose
        "QUEEN_CONN_SEND_SOFT_MS": "0",
        "QUEEN_CONN_SEND_HARD_BYTES": str(4 * CONN_CAP),
        "QUEEN_LOG_LEVEL": "info",
    })).start()
    client = Client(broker.channel(), timeout=30)
    queue = uniq("mem")
    for _ in range(4):  # one segment each: a read of all four is ~4 MB
        r = client.push(queue, [os.urandom(PAYLOAD)])
        assert r.results[0].status == Q.PUSH_STATUS_QUEUED, r


def stop_broker():
    client.close()
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


class BrokerTest(unittest.TestCase):
    def setUp(self):
        start_broker()

    def tearDown(self):
        stop_broker()


def fetch_body():
    return grpc_frame(Q.FetchRequest(entries=[Q.FetchEntry(queue=queue, max_bytes=4 * MIB)])
                      .SerializeToString())


class Stalled:
    """Raw HTTP/2 connections that never grant window (never read)."""

    def __init__(self, n):
        self.conns = [broker.raw(auto_window=False, timeout=30) for _ in range(n)]
        for h in self.conns:
            assert h.wait_for(lambda: h.remote_settings_seen, 10)

    def streams(self, h, sids):
        return [h._st(s) for s in sids]

    def wait_for(self, cond, timeout):
        """Reads every connection in turn until cond() holds."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                return False
            for h in self.conns:
                h.pump(0.01)
        return True

    def close(self):
        for h in self.conns:
            h.close()


def serves_others(test, q):
    """A separate client pushes, fetches and pops while the attackers hold their
    bytes (each of these RPCs has a fresh connection's budget)."""
    with broker.channel() as ch:
        c = Client(ch, timeout=15)
        r = c.push(q, [b"small"])
        test.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
        test.assertEqual([m.payload for m in c.fetch(q).records], [b"small"])
        test.assertEqual([m.payload for m in c.pop(q).messages], [b"small"])


class Fetches(BrokerTest):
    def attack(self, nconn):
        pid = broker.proc.pid
        base = proc_status(pid)["VmRSS"]
        reset_peak(pid)
        st = Stalled(nconn)
        try:
            sids = {h: [h.request(FETCH, fetch_body()) for _ in range(256)] for h in st.conns}
            # every Fetch is answered: refused (trailers-only RESOURCE_EXHAUSTED) or
            # its response started (HEADERS; the body waits for window forever)
            for h, ss in sids.items():
                self.assertTrue(h.wait_for(lambda: all(x["headers"] for x in st.streams(h, ss)), 60),
                                "not every Fetch was answered")
            refused = started = 0
            for h, ss in sids.items():
                for sid in ss:
                    x = h._st(sid)
                    if "grpc-status" in x["headers"]:
                        r = h.wait(sid, 5)
                        self.assertEqual(grpc_status(r), grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
                        self.assertIn("QUEEN_MAX_CONN_SEND_BYTES", grpc_message(r))
                        refused += 1
                    else:
                        self.assertEqual(x["headers"][":status"], "200")
                        started += 1
            # each connection's cap holds about two 4 MB responses
            self.assertGreaterEqual(started, nconn)
            self.assertLessEqual(started, nconn * (CONN_CAP // (3 * MIB)))
            self.assertEqual(refused + started, 256 * nconn)
            serves_others(self, uniq("other"))
        finally:
            st.close()
        peak = proc_status(pid)["VmHWM"]
        held = min(BROKER_CAP, nconn * CONN_CAP)
        print("\n  %d connection(s) x 256 unread 4 MB Fetches: peak RSS %.1f MB over an idle %.1f MB "
              "(bound %.1f MB = %d x %.0f MB held + %.0f MB)" % (
                  nconn, (peak - base) / 1e6, base / 1e6, bound(held) / 1e6, FACTOR, held / 1e6,
                  SLACK / 1e6))
        self.assertLessEqual(peak - base, bound(held))

    def test_one_connection_256_unread_fetches(self):
        self.attack(1)

    def test_four_connections_256_unread_fetches_each(self):
        self.attack(4)

    def test_reading_resumes_production(self):
        # a client over its budget is refused; once it reads, new calls go through
        st = Stalled(1)
        h = st.conns[0]
        try:
            sids = [h.request(FETCH, fetch_body()) for _ in range(3)]
            self.assertTrue(h.wait_for(lambda: all(h._st(s)["headers"] for s in sids), 30))
            refused = [s for s in sids if "grpc-status" in h._st(s)["headers"]]
            self.assertEqual(len(refused), 1)  # two fit the 8 MiB cap, the third does not
            later = h.wait(h.request(FETCH, fetch_body()), 10)
            self.assertEqual(grpc_status(later), grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
            # read everything: the two responses complete, and so does a new Fetch
            h.auto_window = True
            for s in sids:
                if s not in refused:
                    h.open_window(s, 8 * MIB)
            for s in sids:
                if s not in refused:
                    self.assertEqual(grpc_status(h.wait(s, 30)), 0)
            res = h.wait(h.request(FETCH, fetch_body()), 30)
            self.assertEqual(grpc_status(res), 0)
            self.assertGreater(len(res.data), 3 * PAYLOAD)
        finally:
            st.close()


def consume_streams(h, n, tag):
    sids = []
    for j in range(n):
        sub = Q.ConsumeRequest(subscribe=Q.ConsumeSubscribe(
            queue=queue, consumer_group="%s-%d" % (tag, j), batch=4, credits=1, auto_ack=True))
        sids.append(h.request(CONSUME, grpc_frame(sub.SerializeToString()), end=False))
    return sids


class Consumes(BrokerTest):
    def test_200_stalled_consume_streams(self):
        pid = broker.proc.pid
        base = proc_status(pid)["VmRSS"]
        reset_peak(pid)
        nconn, per = 20, 10
        st = Stalled(nconn)
        try:
            sids = {h: consume_streams(h, per, "g%d" % i) for i, h in enumerate(st.conns)}
            # the broker-wide budget fills: a read on a fresh connection is refused,
            # naming the limit (the streams still waiting hold no budget)
            probe = {}

            def full():
                with broker.channel() as ch:
                    try:
                        Client(ch).fetch(queue, max_bytes=4 * MIB, timeout=10)
                        return False
                    except grpc.RpcError as e:
                        probe["e"] = e
                        return e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            wait_until(full, 60, interval=0.1, what="the broker-wide budget to fill")
            self.assertIn("QUEEN_MAX_SEND_BUFFER_BYTES", probe["e"].details())
            # the budget holds at least eight 4 MB batches: they arrive
            got = lambda: sum(1 for h, ss in sids.items() for s in ss if h._st(s)["headers"])  # noqa: E731
            self.assertTrue(st.wait_for(lambda: got() >= BROKER_CAP // (5 * MIB), 60))
            self.assertLess(got(), nconn * per)
            # no stream was refused or ended: the rest wait for room
            for h, ss in sids.items():
                for s in ss:
                    self.assertFalse(h._st(s)["ended"] or h._st(s)["reset"] is not None)
            # other clients: writes and admin go on
            with broker.channel() as ch:
                c = Client(ch)
                self.assertEqual(c.push(uniq("other"), [b"x"]).results[0].status,
                                 Q.PUSH_STATUS_QUEUED)
                self.assertGreaterEqual(c.get_queue(queue).queue.messages, 4)
        finally:
            st.close()
        peak = proc_status(pid)["VmHWM"]
        print("\n  200 stalled Consume streams: peak RSS %.1f MB over an idle %.1f MB "
              "(bound %.1f MB = %d x %.0f MB held + %.0f MB)" % (
                  (peak - base) / 1e6, base / 1e6, bound(BROKER_CAP) / 1e6, FACTOR,
                  BROKER_CAP / 1e6, SLACK / 1e6))
        self.assertLessEqual(peak - base, bound(BROKER_CAP))

    def test_streams_resume_as_their_client_reads(self):
        # ten streams on one connection: two batches fill its cap and the other
        # eight wait (not refused); once the client reads, all ten get theirs
        # (as room frees while the client reads, a woken stream may get a
        # smaller batch: at least one message)
        st = Stalled(1)
        h = st.conns[0]
        try:
            sids = consume_streams(h, 10, uniq("r"))
            self.assertTrue(h.wait_for(lambda: sum(1 for s in sids if h._st(s)["headers"]) >= 2, 30))
            # the connection is at its cap: a new call on it is refused, naming it
            res = h.wait(h.request(FETCH, fetch_body()), 10)
            self.assertEqual(grpc_status(res), grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
            self.assertIn("QUEEN_MAX_CONN_SEND_BYTES", grpc_message(res))
            self.assertEqual(sum(1 for s in sids if h._st(s)["headers"]), 2)
            h.auto_window = True
            for s in sids:
                h.open_window(s, 8 * MIB)
            self.assertTrue(h.wait_for(lambda: all(len(h._st(s)["data"]) > PAYLOAD
                                                   for s in sids), 60),
                            "the waiting streams did not get their batches")
        finally:
            st.close()


if __name__ == "__main__":
    unittest.main()
