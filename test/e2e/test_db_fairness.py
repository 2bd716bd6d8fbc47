"""Fairness (issue 8, item 5): during a flood of large Fetches from other
connections, an unrelated Push answers in under 500 ms (the acceptance bound, for
the median push; none may wait 2 s). The flood runs in a process of its own
(fetch_flood.py). This measures latency, so ctest runs it alone (RUN_SERIAL):
on a machine loaded by other work its figures mean little.
"""

import os
import statistics
import subprocess
import sys
import threading
import time
import unittest

from harness import Broker
from qsupport import Q, Client, uniq, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))


class Fairness(unittest.TestCase):
    """Item 5: during a flood of large Fetches from other connections, an
    unrelated Push answers in under 500 ms. The send budgets are raised so that
    the flood really reaches the database (with the defaults most of it would
    be refused RESOURCE_EXHAUSTED before any read)."""

    FLOOD_CHANNELS, FLOOD_INFLIGHT, FETCH_BYTES = 4, 24, 4 << 20
    BOUND_S = 0.5  # the acceptance bound, for the median push
    WORST_S = 2.0  # no push waits this long

    def test_push_answers_quickly_during_a_fetch_flood(self):
        b = Broker("product", db="e2e_db_faults_fair", env={
            "QUEEN_MAX_CONN_SEND_BYTES": str(256 << 20),
            "QUEEN_CONN_SEND_HARD_BYTES": str(512 << 20),
            "QUEEN_CONN_SEND_SOFT_BYTES": str(512 << 20),
            "QUEEN_MAX_SEND_BUFFER_BYTES": str(2 << 30),
            "RETENTION_INTERVAL": "86400000"}).start()
        c = Client(b.channel(), timeout=30)
        flood = None
        try:
            big = uniq("big")
            # 4 MiB of incompressible payload in the partition every Fetch reads
            for _ in range(8):
                c.push(big, [os.urandom(64 << 10) for _ in range(8)], partition="big")
            # Not measured: the unrelated client's connection, its queue and partition
            # exist before the flood (a first push creates them, which is not fairness).
            other = Client(b.channel(), timeout=30)
            q = uniq("fair")
            self.assertEqual(other.push(q, [b"warm-up"], txns=["fair-warm"]).results[0].status,
                             Q.PUSH_STATUS_QUEUED)
            flood = subprocess.Popen([sys.executable, os.path.join(HERE, "fetch_flood.py"), b.target(), big,
                                      str(self.FLOOD_CHANNELS), str(self.FLOOD_INFLIGHT),
                                      str(self.FETCH_BYTES)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            answered = []  # (monotonic time, line)
            reader = threading.Thread(target=lambda: [answered.append((time.monotonic(), ln.strip()))
                                                      for ln in flood.stdout], daemon=True)
            reader.start()
            full = self.FLOOD_CHANNELS * self.FLOOD_INFLIGHT
            # steady state: every Fetch of the first wave has been answered
            wait_until(lambda: len(answered) >= full, 120, interval=0.05, what="the flood to get going")
            bad = [ln for _, ln in answered if not ln.startswith("ok ")]
            self.assertEqual(bad[:5], [], "the flood's fetches were refused: it would not load the database")
            self.assertGreaterEqual(int(answered[0][1].split()[1]), 3 << 20)
            took = []
            t0 = time.monotonic()
            try:
                # at least 10 pushes, and on until a Fetch was answered during them
                # (a slow build answers its 4 MiB fetches slowly), at most 60 s
                i = 0
                while i < 10 or (not any(t >= t0 for t, _ in list(answered))
                                 and time.monotonic() - t0 < 60):
                    i += 1
                    t = time.monotonic()
                    r = other.push(q, [b"unrelated-%d" % i], txns=["fair-%d" % i])
                    took.append(time.monotonic() - t)
                    self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
            finally:
                other.close()
            t1 = time.monotonic()
            during = [ln for t, ln in answered if t0 <= t <= t1]
            sys.stderr.write("  push latencies during the flood (s): %s; fetches answered meanwhile: %d\n"
                             % ([round(x, 3) for x in took], len(during)))
            # the flood went on during the measurement
            self.assertGreater(len(during), 0)
            # The acceptance bound holds for the typical push (the median): on a
            # shared, overloaded test machine a push may lose the CPU for a while
            # (reported above). None may wait seconds, as one queued behind the
            # reads for a database connection does (QUEEN_DB_WRITE_RESERVE=0:
            # 2.7 s and 6 s in ten pushes).
            self.assertLess(statistics.median(took), self.BOUND_S, "an unrelated push waited behind the fetches")
            self.assertLess(max(took), self.WORST_S, "an unrelated push waited behind the fetches")
        finally:
            if flood is not None:
                flood.stdin.close()
                flood.wait(180)
            c.close()
            rc = b.stop()
            b.kill()
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    unittest.main()
