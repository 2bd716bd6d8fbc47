"""The queue service when things go wrong: client deadlines shorter than a long
poll or a push, the database going away and coming back (a private cluster this
suite stops and starts), a push commit stuck on a row lock, and SIGTERM with
open streams, parked pops and pushes in flight."""

import concurrent.futures
import signal
import threading
import time
import unittest

import grpc

from harness import Broker
from qsupport import (H, Client, ConsumeStream, PrivatePg, Q, fixture_db_url, psql, psql_holding, rpc_error,
                      uniq, wait_until)

OK = grpc.StatusCode.OK
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def outcome(fn, *args, **kw):
    """(status code, result or None) of one call."""
    try:
        return OK, fn(*args, **kw)
    except grpc.RpcError as e:
        return e.code(), None


class Deadlines(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.b = Broker("product", db="e2e_queue_faults").start()
        cls.c = Client(cls.b.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        rc = cls.b.stop()
        assert rc == 0, cls.b.log_text()

    def assertServing(self):
        q = uniq()
        self.assertEqual(self.c.push(q, [b"alive"]).results[0].status, Q.PUSH_STATUS_QUEUED)
        self.assertEqual(self.c.pop(q).messages[0].payload, b"alive")

    def test_pop_wait_longer_than_the_deadline(self):
        q = uniq()
        for timeout in (0.3, 1.0):
            t0 = time.monotonic()
            code, r = outcome(self.c.pop, q, wait_ms=20000, timeout=timeout)
            elapsed = time.monotonic() - t0
            self.assertIn(code, (OK, DEADLINE))
            if code == OK:
                self.assertEqual(len(r.messages), 0)
            self.assertLess(elapsed, timeout + 2.0)
        self.assertServing()
        # nothing was left leased by the pops that ran out of time
        self.c.push(q, [b"x"])
        self.assertEqual(len(self.c.pop(q, consumer_group="later").messages), 1)
        self.assertEqual(len(self.c.pop(q).messages), 1)

    def test_many_pops_cut_short(self):
        q = uniq()
        futs = [self.c.q.Pop.future(Q.PopRequest(queue=q, partition="p%d" % (i % 4), wait_ms=20000),
                                    timeout=0.2 + 0.05 * i) for i in range(20)]
        for f in futs:
            try:
                self.assertEqual(len(f.result().messages), 0)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), DEADLINE)
        self.assertServing()

    def test_pop_cut_short_leaves_nothing_leased(self):
        # A pop whose deadline (grpc-timeout) passes on the broker while its
        # database call runs is answered DEADLINE_EXCEEDED by the broker; what
        # that call leased must not stay leased for lease_time (60 s here) with
        # nobody holding it. Raw HTTP/2, so the answer is the broker's own (a
        # grpcio client gives up on its side first).
        from harness import grpc_frame, grpc_status
        q = uniq()
        self.c.push(q, [b"x"])
        cut = []
        h = self.b.raw()
        try:
            for i in range(80):
                g = "cut%d" % i
                body = grpc_frame(Q.PopRequest(queue=q, consumer_group=g).SerializeToString())
                sid = h.request("/queen.v1.QueueService/Pop", body,
                                headers=[("grpc-timeout", "%du" % (100 + 40 * i))])
                code = grpc_status(h.wait(sid, timeout=10))
                self.assertIn(code, (0, 4))
                if code == 4:
                    cut.append(g)
        finally:
            h.close()
        for g in cut:
            wait_until(lambda: len(self.c.pop(q, consumer_group=g).messages) == 1, 5,
                       what="group %s to get the message its cut-short pop did not deliver" % g)

    def test_push_with_short_deadlines(self):
        q = uniq()
        n = 30
        codes = []
        for i in range(n):
            code, r = outcome(self.c.push, q, [b"d%d" % i, b"e%d" % i], txns=["d%d" % i, "e%d" % i],
                              timeout=0.0005 * (i % 10 + 1))
            self.assertIn(code, (OK, DEADLINE))
            if code == OK:
                self.assertEqual([x.status for x in r.results], [Q.PUSH_STATUS_QUEUED] * 2)
            codes.append(code)
        # every push either committed whole or not at all: pushing each again
        # answers two duplicates or two new messages
        for i in range(n):
            r = self.c.push(q, [b"d%d" % i, b"e%d" % i], txns=["d%d" % i, "e%d" % i]).results
            st = [x.status for x in r]
            self.assertIn(st, ([Q.PUSH_STATUS_DUPLICATE] * 2, [Q.PUSH_STATUS_QUEUED] * 2), i)
            if codes[i] == OK:
                self.assertEqual(st, [Q.PUSH_STATUS_DUPLICATE] * 2, i)
        self.assertEqual(self.c.message_count(q), 2 * n)
        self.assertServing()

    def test_grpc_timeout_header_on_a_raw_push(self):
        from harness import grpc_frame, grpc_status
        q = uniq()
        body = Q.PushRequest(items=[Q.PushItem(queue=q, payload=b"raw")]).SerializeToString()
        h = self.b.raw()
        try:
            sid = h.request("/queen.v1.QueueService/Push", grpc_frame(body), headers=[("grpc-timeout", "5S")])
            res = h.wait(sid)
            self.assertEqual(grpc_status(res), 0)
            sid = h.request("/queen.v1.QueueService/Pop",
                            grpc_frame(Q.PopRequest(queue=uniq(), wait_ms=20000).SerializeToString()),
                            headers=[("grpc-timeout", "300m")])
            t0 = time.monotonic()
            res = h.wait(sid, timeout=10)
            self.assertIn(grpc_status(res), (0, 4))
            self.assertLess(time.monotonic() - t0, 3.0)
        finally:
            h.close()
        self.assertEqual(self.c.message_count(q), 1)


class DatabaseDown(unittest.TestCase):
    """A private cluster: stopped under a running broker, then started again."""

    @classmethod
    def setUpClass(cls):
        cls.pg = PrivatePg("pg-down")
        try:
            cls.b = Broker("product", db="e2e_queue_faults_unused", env={
                "QUEEN_DATABASE_URL": cls.pg.url, "QUEEN_STMT_TIMEOUT_MS": "5000"}).start()
        except Exception:
            cls.pg.remove()
            raise
        cls.c = Client(cls.b.channel())

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        try:
            rc = cls.b.stop()
            assert rc == 0, cls.b.log_text()
        finally:
            cls.pg.remove()

    def test_unavailable_then_recovered(self):
        c = self.c
        q = uniq()
        queued = 0
        for i in range(3):
            queued += len(c.push(q, [b"a%d" % i, b"b%d" % i]).results)
        self.assertEqual(c.health(), H.HealthCheckResponse.SERVING)
        p = c.pop(q, consumer_group="before", batch=1)
        self.assertEqual(len(p.messages), 1)
        # a stream and a parked pop waiting for data when the database goes
        stream = ConsumeStream(c, Q.ConsumeSubscribe(queue=uniq(), credits=5))
        stream.roundtrip()
        pool = concurrent.futures.ThreadPoolExecutor(1)
        before = c.rpcs()
        parked = pool.submit(outcome, c.pop, uniq(), wait_ms=20000, timeout=30)
        c.wait_received(before)

        self.pg.stop()
        wait_until(lambda: c.health() == H.HealthCheckResponse.NOT_SERVING, 20,
                   what="health NOT_SERVING")
        t0 = time.monotonic()
        e = rpc_error(c.push, q, [b"lost"], txns=["lost"])
        self.assertEqual(e.code(), UNAVAILABLE, e.details())
        self.assertLess(time.monotonic() - t0, 10)
        for call in (lambda: c.pop(q), lambda: c.ack_offset(p.messages[0]), lambda: c.get_queue(q),
                     lambda: c.fetch(q), lambda: c.renew(p.lease_id)):
            e = rpc_error(call)
            self.assertEqual(e.code(), UNAVAILABLE, e.details())
        # waiting consumers learn it at their next re-check (QUEEN_WAKE_RECHECK_MS)
        self.assertEqual(stream.wait_end(15), UNAVAILABLE)
        code, r = parked.result(15)
        pool.shutdown()
        self.assertIn(code, (UNAVAILABLE, OK))
        if code == OK:
            self.assertEqual(len(r.messages), 0)
        code, _ = outcome(c.pop, q, consumer_group="w", wait_ms=1000, timeout=15)
        self.assertIn(code, (UNAVAILABLE, OK))
        self.assertTrue(self.b.alive())

        self.pg.start_again()
        wait_until(lambda: c.health() == H.HealthCheckResponse.SERVING, 30, what="health SERVING again")

        def push_ok():
            code, r = outcome(c.push, q, [b"after"], txns=["after"])
            self.assertIn(code, (OK, UNAVAILABLE))
            return r

        r = wait_until(push_ok, 20, interval=0.2, what="a push to succeed")
        self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
        queued += 1
        self.assertEqual(r.results[0].offset, 6)  # nothing in between
        # no trace of the refused push
        self.assertEqual(c.get_queue(q).queue.messages, queued)
        self.assertEqual(c.push(q, [b"lost"], txns=["lost"]).results[0].status, Q.PUSH_STATUS_QUEUED)
        # state from before the outage is intact, the old lease included
        self.assertEqual(c.ack_offset(p.messages[0]).outcome, Q.ACK_OUTCOME_APPLIED)
        self.assertEqual([m.offset for m in c.pop(q, consumer_group="before", batch=10).messages],
                         list(range(1, 8)))
        # a new stream works
        s2 = ConsumeStream(c, Q.ConsumeSubscribe(queue=q, consumer_group="after"))
        try:
            self.assertEqual(s2.recv().batch.messages[0].offset, 0)
        finally:
            s2.cancel()


class Shutdown(unittest.TestCase):
    def test_sigterm_with_open_stream_parked_pop_and_pushes(self):
        db = "e2e_queue_faults_stop"
        b = Broker("product", db=db).start()
        c = Client(b.channel())
        pool = concurrent.futures.ThreadPoolExecutor(8)
        stop_pushing = threading.Event()
        try:
            q = uniq()
            c.push(q, [b"leased"])
            s = ConsumeStream(c, Q.ConsumeSubscribe(queue=q, credits=1))
            batch = s.recv()
            self.assertEqual(batch.WhichOneof("kind"), "batch")
            before = c.rpcs()
            parked = pool.submit(outcome, c.pop, uniq(), wait_ms=30000, timeout=40)
            c.push(q + "-f", [b"f"])
            fetching = pool.submit(outcome, c.fetch, q + "-f", offset=1, max_wait_ms=30000, timeout=40)
            c.wait_received(before, n=3)

            def pusher(k):
                """Pushes until the broker refuses; returns [(txns, code)]."""
                done = []
                pq = "%s-w%d" % (q, k)
                for i in range(100000):
                    txns = ["%d-%d-%d" % (k, i, j) for j in range(5)]
                    code, r = outcome(c.push, pq, [b"p"] * 5, txns=txns, timeout=20)
                    done.append((pq, txns, code))
                    if code != OK or stop_pushing.is_set():
                        return done
                    self.assertEqual([x.status for x in r.results], [Q.PUSH_STATUS_QUEUED] * 5)
                return done

            pushers = [pool.submit(pusher, k) for k in range(4)]
            wait_until(lambda: c.message_count(q + "-w0") >= 20, 20, what="pushes to flow")
            t0 = time.monotonic()
            b.proc.send_signal(signal.SIGTERM)
            self.assertEqual(s.wait_end(15), UNAVAILABLE)
            # waiting consumers answer at once instead of holding the drain
            # (QUEEN_SHUTDOWN_TIMEOUT_MS, 10 s)
            code, r = parked.result(15)
            self.assertIn(code, (OK, UNAVAILABLE))
            if code == OK:
                self.assertEqual(len(r.messages), 0)
            code, r = fetching.result(15)
            self.assertIn(code, (OK, UNAVAILABLE))
            if code == OK:
                self.assertEqual(len(r.records), 0)
            self.assertEqual(b.proc.wait(20), 0)
            self.assertLess(time.monotonic() - t0, 6)
            stop_pushing.set()
            calls = [x for f in pushers for x in f.result(30)]
            for _, _, code in calls:
                self.assertIn(code, (OK, UNAVAILABLE, grpc.StatusCode.CANCELLED))
        finally:
            stop_pushing.set()
            c.close()
            b.kill()
            pool.shutdown(wait=False)

        # a new broker on the same database: every push committed whole or not at all
        b2 = Broker("product", db=db + "_unused", env={"QUEEN_DATABASE_URL": fixture_db_url(db)}).start()
        c2 = Client(b2.channel())
        try:
            for pq, txns, code in calls:
                r = c2.push(pq, [b"p"] * 5, txns=txns).results
                st = {x.status for x in r}
                self.assertEqual(len(st), 1, (pq, txns, code))
                if code == OK:
                    self.assertEqual(st, {Q.PUSH_STATUS_DUPLICATE})
            # the leased message of the stream was released or expires; never lost
            p = c2.pop(q, lease_seconds=1)
            if not p.messages:
                p = c2.pop_until(q, timeout=70)
            self.assertEqual(p.messages[0].payload, b"leased")
        finally:
            c2.close()
            rc = b2.stop()
            self.assertEqual(rc, 0, b2.log_text())


class StuckCommit(unittest.TestCase):
    """Push lanes (QUEEN_PUSH_LANE_MS, 25 ms by default): a loop keeps one push
    commit in flight and opens another lane once that one has been out for the
    lane time. So a commit stuck in the database (here its partition row locked
    by another transaction) holds the pushes that need that partition and no
    others. One worker, so that both partitions' pushes share one fusion."""

    def test_a_locked_partition_holds_only_its_own_pushes(self):
        db = "e2e_queue_faults_stuck"
        b = Broker("product", db=db, env={"QUEEN_WORKERS": "1"}).start()
        url = fixture_db_url(db)
        c = Client(b.channel(), timeout=30)
        pool = concurrent.futures.ThreadPoolExecutor(2)
        try:
            q = uniq("stuck")
            for part in ("a", "b"):
                self.assertEqual(c.push(q, [b"warm-" + part.encode()], partition=part).results[0].status,
                                 Q.PUSH_STATUS_QUEUED)
            lock = ("SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
                    " WHERE q.name = '%s' AND p.name = 'a' FOR UPDATE OF p" % q)
            with psql_holding(url, lock):
                held = pool.submit(c.push, q, [b"held"], partition="a")
                # the held push's commit is in the database, waiting for the row lock
                wait_until(lambda: psql(url, "SELECT count(*) FROM pg_stat_activity"
                                        " WHERE wait_event_type = 'Lock' AND query LIKE '%push%'") == "1",
                           20, what="the push to wait on the partition's lock")
                # another partition's push on the same loop goes by on a second lane
                r = c.push(q, [b"passes"], partition="b", timeout=10)
                self.assertEqual(r.results[0].status, Q.PUSH_STATUS_QUEUED)
                self.assertFalse(held.done())
            self.assertEqual(held.result(20).results[0].status, Q.PUSH_STATUS_QUEUED)

            # what was acknowledged is exactly what is stored, in push order
            for part, want in (("a", [b"warm-a", b"held"]), ("b", [b"warm-b", b"passes"])):
                got = c.pop(q, partition=part, batch=10).messages
                self.assertEqual([m.payload for m in got], want)
        finally:
            c.close()
            pool.shutdown(wait=True)
            rc = b.stop()
        self.assertEqual(rc, 0, b.log_text())


if __name__ == "__main__":
    unittest.main()
