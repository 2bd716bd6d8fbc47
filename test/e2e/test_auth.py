"""Security end to end with QUEEN_AUTH=jwt (README "Security"): every RPC of
the contract refused without a valid token (none, expired, wrong signature,
wrong audience, wrong issuer, not yet valid, garbage) with UNAUTHENTICATED, and
with a token lacking its scope or its queue pattern with PERMISSION_DENIED,
over h2c and TLS, with the database unchanged; audit lines; two tenants with
the same queue names isolated in every RPC; producer_sub stamped from the
token and never forgeable; encrypted queues (no plaintext in the stored
segments, round trip through Pop, Consume, Fetch, the DLQ keeping the stored
form). Key rotation (JWT and encryption) is in test_auth_rotation.py, mTLS in
test_auth_mtls.py. Tokens are minted with PyJWT, not the broker's code."""

import json
import os
import random
import subprocess
import time
import unittest
import uuid

import grpc

from authsupport import Bearer, Db, Minter, new_secret, write_file
from harness import Broker
from qsupport import A, C, Client, ConsumeStream, Q, fixture_db_url, rpc_error, uniq, wait_until
from webclient import get, grpc_web, message_of, status_of

AUD, ISS = "queen-e2e", "queen-e2e-issuer"
TENANT_A = str(uuid.uuid4())
TENANT_B = str(uuid.uuid4())
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED

broker = None
db = None
mint = None
secret_path = None
KEY1 = os.urandom(32).hex()


def setUpModule():
    global broker, db, mint, secret_path
    secret = new_secret()
    mint = Minter(secret, aud=AUD, iss=ISS)
    secret_path = write_file("auth-secret", secret + b"\n")
    env = {
        "QUEEN_AUTH": "jwt",
        "QUEEN_JWT_SECRET_FILES": secret_path,
        "QUEEN_JWT_AUDIENCE": AUD,
        "QUEEN_JWT_ISSUER": ISS,
        "QUEEN_JWT_CLOCK_SKEW_S": "5",
        "RETENTION_INTERVAL": "300",
        "QUEEN_ENCRYPTION_KEYRING": write_file("auth-keyring", "k1 %s\n" % KEY1),
    }
    broker = Broker("product", db="e2e_auth", tls=True, env=env).start()
    db = Db(fixture_db_url("e2e_auth"))


def tearDownModule():
    rc = broker.stop()
    assert rc == 0, "broker exited with %s:\n%s" % (rc, broker.log_text())


def client(token, tls=False):
    ch = broker.secure_channel(client=None) if tls else broker.channel()
    return Client(Bearer.wrap(ch, token))


def full(sub="alice", tenant=TENANT_A):
    return client(mint.token(sub, tenant))


def consume_error(c, sub):
    """Opens a Consume stream with subscribe sub; returns the status it ends with."""
    s = ConsumeStream(c, subscribe=sub)
    code = s.wait_end(15)
    s.close()
    return code, (s.error.details() if s.error is not None else "")


class World:
    """A queue with messages, a held lease, a consumer group and a dead letter,
    in tenant A: every RPC of the contract has a real target."""

    def __init__(self):
        self.c = full()
        self.q = uniq("sec.orders")
        self.dq = uniq("sec.dlq")
        self.c.configure(self.q, lease_time=600, retry_limit=5)
        self.c.configure(self.dq, lease_time=600, retry_limit=0)
        self.c.push(self.q, [b"m1", b"m2", b"m3", b"m4"])
        held = self.c.pop_until(self.q, batch=1)
        self.msg = held.messages[0]
        self.lease = held.lease_id
        self.group = uniq("g")
        self.c.pop_until(self.q, consumer_group=self.group, batch=1, auto_ack=True)
        self.c.push(self.dq, [b"dead"])
        d = self.c.pop_until(self.dq, batch=1).messages[0]
        r = self.c.ack_offset(d, status=C.ACK_STATUS_DLQ, error="poison")
        assert r.success and r.dlq, r
        self.dead = self.c.dead_letters(self.dq)[0].id
        self.pid = self.msg.partition_id

    def calls(self):
        """(rpc, scope, queue, fn(client)) for every RPC of the contract."""
        q, m = self.q, self.msg
        ack_item = Q.AckItem(partition_id=m.partition_id, offset=m.offset, lease_id=self.lease,
                             status=C.ACK_STATUS_COMPLETED)
        return [
            ("Push", "produce", q, lambda c: c.push(q, [b"x"])),
            ("Transact.push", "produce", q,
             lambda c: c.transact([Q.TransactOp(push=Q.PushItem(queue=q, payload=b"t"))])),
            ("Transact.ack", "consume", q,
             lambda c: c.transact([Q.TransactOp(ack=Q.TransactAck(item=ack_item))])),
            ("Pop", "consume", q, lambda c: c.pop(q)),
            ("Pop.group", "consume", q, lambda c: c.pop(q, consumer_group=uniq("g2"))),
            ("Consume", "consume", q, lambda c: consume_raise(c, Q.ConsumeSubscribe(queue=q, credits=1))),
            ("Ack", "consume", q, lambda c: c.ack([ack_item])),
            ("RenewLease", "consume", q, lambda c: c.renew(self.lease, 700)),
            ("Fetch", "consume", q, lambda c: c.fetch(q)),
            ("ConfigureQueue", "admin", q, lambda c: c.configure(q, lease_time=601)),
            ("ConfigureQueue.new", "admin", q, lambda c: c.configure(q + ".new")),
            ("GetQueue", "admin", q, lambda c: c.get_queue(q)),
            ("ListQueues", "admin", q, lambda c: c.a.ListQueues(A.ListQueuesRequest(), timeout=15)),
            ("DeleteQueue", "admin", q, lambda c: c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=15)),
            ("ListConsumerGroups", "admin", q, lambda c: c.groups(q)),
            ("SeekConsumerGroup", "admin", q,
             lambda c: c.a.SeekConsumerGroup(A.SeekConsumerGroupRequest(consumer_group=self.group, queue=q,
                                                                        to_end=True), timeout=15)),
            ("DeleteConsumerGroup", "admin", q,
             lambda c: c.a.DeleteConsumerGroup(A.DeleteConsumerGroupRequest(consumer_group=self.group, queue=q),
                                               timeout=15)),
            ("ListDeadLetters", "admin", self.dq, lambda c: c.dead_letters(self.dq)),
            ("DeleteDeadLetter", "admin", self.dq,
             lambda c: c.a.DeleteDeadLetter(A.DeleteDeadLetterRequest(id=self.dead), timeout=15)),
            ("ReplayDeadLetter", "admin", self.dq,
             lambda c: c.a.ReplayDeadLetter(A.ReplayDeadLetterRequest(id=self.dead), timeout=15)),
            ("GetStats", "admin", q, lambda c: c.stats(q)),
        ]


def consume_raise(c, sub):
    """Consume as a call that raises its error status (like a unary stub)."""
    s = ConsumeStream(c, subscribe=sub)
    try:
        r = s.recv(15)
    except AssertionError:
        if s.error is not None:
            raise s.error
        raise
    finally:
        s.cancel()
    return r


world = None


def get_world():
    global world
    if world is None:
        world = World()
    return world


class Unauthenticated(unittest.TestCase):
    """No valid credential: UNAUTHENTICATED for every RPC, over h2c and TLS,
    with a message that says what was wrong and never echoes the token."""

    def cases(self):
        now = int(time.time())
        good = mint.token("alice", TENANT_A)
        return [
            ("no token", None, "authorization"),
            ("expired", mint.token("alice", TENANT_A, ttl=-120), "expired"),
            ("wrong signature", mint.token("alice", TENANT_A, secret=new_secret()), "signature"),
            ("wrong audience", mint.token("alice", TENANT_A, aud="someone-else"), "audience"),
            ("wrong issuer", mint.token("alice", TENANT_A, iss="evil"), "issuer"),
            ("not yet valid", mint.token("alice", TENANT_A, extra={"nbf": now + 600}), "not valid yet"),
            ("tampered", good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"), "signature"),
            ("garbage", "not-a-jwt", "token"),
        ]

    def test_every_rpc_every_bad_credential_h2c_and_tls(self):
        w = get_world()
        before = db.fingerprint()
        n = 0
        for tls in (False, True):
            for what, tok, word in self.cases():
                c = client(tok, tls)
                try:
                    for rpc, _, _, fn in w.calls():
                        with self.subTest(tls=tls, credential=what, rpc=rpc):
                            e = rpc_error(fn, c)
                            self.assertEqual(e.code(), UNAUTH, e.details())
                            self.assertIn(word, e.details().lower())
                            if tok:
                                sig = tok.rsplit(".", 1)[-1]
                                self.assertNotIn(sig, e.details())
                                self.assertNotIn(tok[:20], e.details())
                            n += 1
                finally:
                    c.close()
        self.assertEqual(n, 2 * len(self.cases()) * len(w.calls()))
        self.assertEqual(db.fingerprint(), before, "a refused call changed the database")
        self.assertIn("audit event=unauthenticated", broker.log_text())

    def test_health_and_reflection_stay_open(self):
        from qsupport import H

        c = client(None)
        try:
            r = c.h.Check(H.HealthCheckRequest(service=""), timeout=10)
            self.assertEqual(r.status, H.HealthCheckResponse.SERVING)
        finally:
            c.close()


class GrpcWeb(unittest.TestCase):
    """The side port's gRPC-Web calls pass the same gate as the gRPC port: the
    authorization header reaches it; the plain routes stay open."""

    def web(self, method, msg, token=None):
        hs = {"authorization": "Bearer " + token} if token else None
        return grpc_web(broker.http_port, method, msg.SerializeToString(), headers=hs)

    def test_grpc_web_needs_a_token(self):
        q = uniq("sec.web")
        push = Q.PushRequest(items=[Q.PushItem(queue=q, payload=b"web", transaction_id="w1")])
        before = db.fingerprint()
        for tok, word in ((None, "authorization"), ("not-a-jwt", "token"),
                          (mint.token("alice", TENANT_A, ttl=-120), "expired")):
            with self.subTest(token=tok):
                r = self.web("/queen.v1.QueueService/Push", push, tok)
                self.assertEqual(r.status, 200)
                self.assertEqual(status_of(r), UNAUTH.value[0], message_of(r))
                self.assertIn(word, message_of(r).lower())
                self.assertEqual(r.messages, [])
        self.assertEqual(db.fingerprint(), before, "a refused gRPC-Web call changed the database")
        # a token without the produce grant: PERMISSION_DENIED, as on the gRPC port
        r = self.web("/queen.v1.QueueService/Push", push,
                     mint.token("wendy", TENANT_A, scopes=["consume:*"]))
        self.assertEqual(status_of(r), DENIED.value[0], message_of(r))
        # a valid token: the call runs, in the token's tenant
        tok = mint.token("webby", TENANT_A)
        r = self.web("/queen.v1.QueueService/Push", push, tok)
        self.assertEqual(status_of(r), 0, message_of(r))
        res = Q.PushResponse.FromString(r.messages[0]).results[0]
        self.assertEqual((res.status, res.offset), (Q.PUSH_STATUS_QUEUED, 0))
        r = self.web("/queen.v1.AdminService/GetStats", A.GetStatsRequest(queue=q), tok)
        self.assertEqual(status_of(r), 0, message_of(r))
        self.assertEqual(A.GetStatsResponse.FromString(r.messages[0]).queues[0].messages, 1)
        # the message is the token's tenant's, with its producer_sub
        c = full("webby", TENANT_A)
        try:
            m = c.pop(q).messages[0]
            self.assertEqual((m.payload, m.producer_sub), (b"web", "webby"))
        finally:
            c.close()
        # another tenant's token does not see it
        r = self.web("/queen.v1.AdminService/GetStats", A.GetStatsRequest(queue=q),
                     mint.token("bob", TENANT_B))
        if status_of(r) == 0:
            got = A.GetStatsResponse.FromString(r.messages[0]).queues
            self.assertEqual([x.messages for x in got if x.messages], [])
        else:
            self.assertEqual(status_of(r), 5, message_of(r))  # NOT_FOUND

    def test_plain_routes_stay_open(self):
        for path in ("/metrics", "/healthz", "/readyz"):
            with self.subTest(path=path):
                r = get(broker.http_port, path)
                self.assertEqual(r.status, 200, r.body[:200])
        self.assertNotIn(b"access-control-allow", b"".join(
            k.lower().encode() for k in get(broker.http_port, "/healthz").headers))


class Denied(unittest.TestCase):
    """A valid token without the scope an RPC needs, or with the scope on other
    queues only: PERMISSION_DENIED, nothing written, an audit line."""

    @classmethod
    def setUpClass(cls):
        cls.w = get_world()

    def check_denied(self, scopes_for, label, tls):
        w = self.w
        before = db.fingerprint()
        n = 0
        for rpc, scope, queue, fn in w.calls():
            scopes = scopes_for(scope)
            sub = "bob-%s-%s" % (label, rpc.lower())
            c = client(mint.token(sub, TENANT_A, scopes=scopes), tls)
            try:
                with self.subTest(rpc=rpc, label=label, tls=tls):
                    if rpc == "ListQueues" and label == "pattern":
                        # a list is filtered, not refused: the queue is not shown
                        names = [x.queue for x in fn(c).queues]
                        self.assertNotIn(w.q, names)
                        continue
                    e = rpc_error(fn, c)
                    self.assertEqual(e.code(), DENIED, "%s: %s" % (rpc, e.details()))
                    self.assertIn("permission denied", e.details())
                    n += 1
                    log = broker.log_text()
                    self.assertIn('audit event=denied principal="%s" tenant=%s' % (sub, TENANT_A), log)
            finally:
                c.close()
        self.assertEqual(db.fingerprint(), before, "a denied call changed the database")
        return n

    def test_wrong_scope_every_rpc(self):
        others = {"produce": ["consume:*", "admin:*"], "consume": ["produce:*", "admin:*"],
                  "admin": ["produce:*", "consume:*"]}
        for tls in (False, True):
            n = self.check_denied(lambda s: others[s], "scope", tls)
            self.assertEqual(n, len(self.w.calls()))

    def test_wrong_queue_pattern_every_rpc(self):
        def scopes(s):
            return ["%s:elsewhere.*" % s, "%s:%s-other" % (s, self.w.q)] + [
                "%s:*" % o for o in ("produce", "consume", "admin") if o != s]

        for tls in (False, True):
            n = self.check_denied(scopes, "pattern", tls)
            self.assertEqual(n, len(self.w.calls()) - 1)

    def test_audit_line_names_rpc_and_queue(self):
        c = client(mint.token("carol", TENANT_A, scopes=["consume:*"]))
        try:
            e = rpc_error(c.push, self.w.q, [b"no"])
            self.assertEqual(e.code(), DENIED)
        finally:
            c.close()
        wait_until(lambda: ('audit event=denied principal="carol" tenant=%s rpc=Push queue="%s"'
                            % (TENANT_A, self.w.q)) in broker.log_text(), what="the audit line")

    def test_admin_mutation_audited(self):
        q = uniq("sec.audit")
        c = client(mint.token("dave", TENANT_A, scopes=["admin:sec.audit*"]))
        try:
            c.configure(q, lease_time=30)
            c.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=15)
        finally:
            c.close()
        log = broker.log_text()
        for rpc in ("ConfigureQueue", "DeleteQueue"):
            self.assertIn('audit event=admin principal="dave" tenant=%s rpc=%s queue="%s"' % (TENANT_A, rpc, q),
                          log)

    def test_lists_and_stats_show_only_granted_queues(self):
        ns = uniq("vis")
        mine, theirs = "%s.mine" % ns, "%s.theirs" % ns
        a = full()
        try:
            for q in (mine, theirs):
                a.configure(q, retry_limit=0)
                a.push(q, [b"x", b"y"])
                m = a.pop_until(q, consumer_group="vg", batch=1).messages[0]
                self.assertTrue(a.ack_offset(m, status=C.ACK_STATUS_DLQ).dlq)
            full_stats = a.stats()
        finally:
            a.close()
        c = client(mint.token("vera", TENANT_A, scopes=["admin:%s.mine" % ns]))
        try:
            names = {x.queue for x in c.a.ListQueues(A.ListQueuesRequest(limit=1000), timeout=15).queues}
            self.assertEqual(names, {mine})
            st = c.stats()
            self.assertEqual({x.queue for x in st.queues}, {mine})
            self.assertEqual(st.total_dead_letters, 1)
            # the broker's own counters are for admin:* only
            self.assertGreater(full_stats.rpcs, 0)
            self.assertEqual((st.rpcs, st.pushed, st.delivered), (0, 0, 0))
            self.assertEqual({g.queue for g in c.groups()}, {mine})
            dls = c.a.ListDeadLetters(A.ListDeadLettersRequest(limit=1000), timeout=15).dead_letters
            self.assertEqual({d.queue for d in dls}, {mine})
        finally:
            c.close()

    def test_prefix_grant_allows_and_discovery_claims_only_granted(self):
        ns = uniq("ns")
        ok_q, other_q = "grant.%s.ok" % ns, "grant.%s.no" % ns
        a = full()
        try:
            a.configure(ok_q, namespace=ns)
            a.configure(other_q, namespace=ns)
            a.push(other_q, [b"forbidden-%d" % i for i in range(5)])
            a.push(ok_q, [b"allowed"])
        finally:
            a.close()
        c = client(mint.token("erin", TENANT_A, scopes=["consume:grant.%s.ok" % ns]))
        try:
            # discovery by namespace: only the granted queue is ever claimed
            got = []
            for _ in range(10):
                r = c.pop(namespace=ns, batch=10)
                got += [(m.queue, m.payload) for m in r.messages]
            self.assertEqual(got, [(ok_q, b"allowed")])
            leased = db.scalar("SELECT count(*) FROM queen.log_consumers lc JOIN queen.log_partitions p "
                               "ON p.id = lc.partition_id JOIN queen.queues q ON q.id = p.queue_id "
                               "WHERE q.name = '%s' AND lc.batch_end IS NOT NULL" % other_q)
            self.assertEqual(leased, "0")
            # consume discovery likewise
            s = ConsumeStream(c, subscribe=Q.ConsumeSubscribe(namespace=ns, credits=5, auto_ack=True))
            s.recv_none(1.0)
            s.cancel()
        finally:
            c.close()


class Tenants(unittest.TestCase):
    """Two tenants, the same queue name: neither sees, pops, acks, fetches,
    lists, seeks, replays or deletes the other's data, nor is woken by it."""

    def test_page_tokens_are_bound_to_the_tenant(self):
        """A page token of one tenant's listing is refused in another tenant,
        for the same queue name and filters."""
        q = uniq("shared")
        a, b = full("ann", TENANT_A), full("ben", TENANT_B)
        try:
            for c in (a, b):
                c.push_items([Q.PushItem(queue=q, partition=p, payload=b"x") for p in "abc"])
            ra = a.a.GetQueue(A.GetQueueRequest(queue=q, page_size=1), timeout=15)
            self.assertEqual([p.partition for p in ra.partitions], ["a"])
            self.assertTrue(ra.next_page_token)
            e = rpc_error(b.a.GetQueue, A.GetQueueRequest(queue=q, page_size=1,
                                                          page_token=ra.next_page_token),
                          timeout=15)
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("another tenant", e.details())
            la = a.a.ListQueues(A.ListQueuesRequest(page_size=1), timeout=15)
            if la.next_page_token:
                e = rpc_error(b.a.ListQueues, A.ListQueuesRequest(page_token=la.next_page_token),
                              timeout=15)
                self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
            # in its own tenant the token goes on
            rb = a.a.GetQueue(A.GetQueueRequest(queue=q, page_size=1,
                                                page_token=ra.next_page_token), timeout=15)
            self.assertEqual([p.partition for p in rb.partitions], ["b"])
        finally:
            a.close()
            b.close()

    def test_isolation(self):
        q = uniq("shared")
        a, b = full("ann", TENANT_A), full("ben", TENANT_B)
        try:
            a.configure(q, lease_time=600, retry_limit=0)
            b.configure(q, lease_time=600, retry_limit=0)
            self.assertEqual(len(db.tenant_of(q)), 2)
            a.push(q, [b"a1", b"a2", b"a3"])
            b.push(q, [b"b1"])
            # stats and lists
            self.assertEqual(a.message_count(q), 3)
            self.assertEqual(b.message_count(q), 1)
            la = [x for x in a.a.ListQueues(A.ListQueuesRequest(), timeout=15).queues if x.queue == q]
            lb = [x for x in b.a.ListQueues(A.ListQueuesRequest(), timeout=15).queues if x.queue == q]
            self.assertEqual([x.messages for x in la], [3])
            self.assertEqual([x.messages for x in lb], [1])
            self.assertNotEqual(la[0].queue_id, lb[0].queue_id)
            sa, sb = a.stats(q), b.stats(q)
            self.assertEqual([x.messages for x in sa.queues], [3])
            self.assertEqual([x.messages for x in sb.queues], [1])
            # fetch
            self.assertEqual([m.payload for m in a.fetch(q).records], [b"a1", b"a2", b"a3"])
            self.assertEqual([m.payload for m in b.fetch(q).records], [b"b1"])
            # pop: each its own
            pa = a.pop_until(q, batch=10)
            self.assertEqual([m.payload for m in pa.messages], [b"a1", b"a2", b"a3"])
            pb = b.pop_until(q, batch=10)
            self.assertEqual([m.payload for m in pb.messages], [b"b1"])
            # B cannot ack, renew or dead-letter A's messages by id
            m = pa.messages[0]
            item = Q.AckItem(partition_id=m.partition_id, offset=m.offset, lease_id=pa.lease_id,
                             status=C.ACK_STATUS_DLQ)
            r = b.q.Ack(Q.AckRequest(items=[item]), timeout=15).results[0]
            self.assertFalse(r.success, r)
            self.assertFalse(b.renew(pa.lease_id, 900).renewed)
            tr = rpc_error(b.transact, [Q.TransactOp(ack=Q.TransactAck(item=item))])
            self.assertEqual(tr.code(), grpc.StatusCode.ABORTED, tr.details())
            self.assertIn("partition not found", tr.details())
            self.assertEqual(a.partition(q).depth, 3)
            # A's dead letter is invisible to B
            r = a.ack_offset(m, status=C.ACK_STATUS_DLQ, error="a-poison")
            self.assertTrue(r.dlq, r)
            dla = a.dead_letters(q)
            self.assertEqual([d.payload for d in dla], [b"a1"])
            self.assertEqual(b.dead_letters(q), [])
            allb = b.a.ListDeadLetters(A.ListDeadLettersRequest(), timeout=15).dead_letters
            self.assertNotIn(dla[0].id, [d.id for d in allb])
            e = rpc_error(b.a.ReplayDeadLetter, A.ReplayDeadLetterRequest(id=dla[0].id), timeout=15)
            self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
            e = rpc_error(b.a.DeleteDeadLetter, A.DeleteDeadLetterRequest(id=dla[0].id), timeout=15)
            self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
            self.assertEqual(len(a.dead_letters(q)), 1)
            # groups
            g = uniq("g")
            a.pop_until(q, consumer_group=g, batch=10, auto_ack=True)
            self.assertEqual([x.consumer_group for x in a.groups(q) if x.consumer_group == g], [g])
            self.assertEqual([x.consumer_group for x in b.groups(q) if x.consumer_group == g], [])
            def a_cursor():
                return [[(p.partition_id, p.committed) for p in x.partitions]
                        for x in a.groups(q) if x.consumer_group == g]

            before = a_cursor()
            self.assertEqual(len(before), 1)
            # B's seek and delete of a group of that name act on B's queue only
            b.a.SeekConsumerGroup(A.SeekConsumerGroupRequest(consumer_group=g, queue=q, to_timestamp_us=0),
                                  timeout=15)
            b.a.DeleteConsumerGroup(A.DeleteConsumerGroupRequest(consumer_group=g, queue=q, delete_metadata=True),
                                    timeout=15)
            self.assertEqual(a_cursor(), before)
            # the DLQ counts per tenant
            self.assertEqual(b.stats().total_dead_letters, 0)
            # delete: B's queue only
            self.assertTrue(b.a.DeleteQueue(A.DeleteQueueRequest(queue=q), timeout=15).existed)
            self.assertEqual(len(db.tenant_of(q)), 1)
            self.assertEqual(a.message_count(q), 3)
            self.assertEqual([m.payload for m in a.fetch(q).records], [b"a1", b"a2", b"a3"])
        finally:
            a.close()
            b.close()

    def test_wake_isolation(self):
        q = uniq("wake")
        a, b = full("ann", TENANT_A), full("ben", TENANT_B)
        try:
            a.configure(q)
            b.configure(q)
            # A long-polls its empty queue; B pushes to its own queue of that name
            import threading

            box = {}

            def poll():
                t0 = time.monotonic()
                box["r"] = a.pop(q, wait_ms=2500, timeout=20)
                box["t"] = time.monotonic() - t0

            th = threading.Thread(target=poll)
            th.start()
            # let the pop park first; were it late, it would still have to return
            # nothing of B and wait its full time, so the check holds either way
            time.sleep(0.3)
            b.push(q, [b"for-b"])
            th.join(20)
            self.assertEqual(list(box["r"].messages), [])
            self.assertGreater(box["t"], 2.0)
            # control: A's own push wakes A's long-poll at once
            box.clear()
            th = threading.Thread(target=poll)
            th.start()
            time.sleep(0.3)
            a.push(q, [b"for-a"])
            th.join(20)
            self.assertEqual([m.payload for m in box["r"].messages], [b"for-a"])
            self.assertLess(box["t"], 2.0)
        finally:
            a.close()
            b.close()

    def test_dedup_retention_and_leases_stay_per_partition(self):
        """The same queue name in two tenants is two sets of partitions: a
        transaction id stored by one is not a duplicate in the other; retention
        of one (the maintenance loop) removes nothing of the other; a lease
        expiring in one leaves the other's lease held."""
        q = uniq("perpart")
        a, b = full("ann", TENANT_A), full("ben", TENANT_B)
        try:
            a.configure(q, lease_time=1)
            b.configure(q, lease_time=600)
            ra = a.push(q, [b"a"], txns=["same-txn"]).results[0]
            rb = b.push(q, [b"b"], txns=["same-txn"]).results[0]
            self.assertEqual((ra.status, rb.status), (Q.PUSH_STATUS_QUEUED, Q.PUSH_STATUS_QUEUED))
            self.assertNotEqual(ra.partition_id, rb.partition_id)
            self.assertEqual(a.push(q, [b"a2"], txns=["same-txn"]).results[0].status, Q.PUSH_STATUS_DUPLICATE)
            self.assertEqual(b.push(q, [b"b2"], txns=["same-txn"]).results[0].status, Q.PUSH_STATUS_DUPLICATE)
            # leases: both held; A's (1 s) expires and its message comes back, B's stays held
            pa, pb = a.pop_until(q), b.pop_until(q)
            self.assertEqual((pa.messages[0].payload, pb.messages[0].payload), (b"a", b"b"))
            again = a.pop_until(q, timeout=15)
            self.assertEqual(again.messages[0].payload, b"a")
            self.assertEqual(list(b.pop(q).messages), [])
            self.assertTrue(b.renew(pb.lease_id, 600).renewed)
            # retention (1 s on A's queue only) empties A's partition, not B's
            r = uniq("retain")
            a.configure(r, retention_enabled=True, retention_seconds=1)
            b.configure(r)
            a.push(r, [b"a"])
            b.push(r, [b"b"])
            wait_until(lambda: a.message_count(r) == 0, 30, what="retention of A's queue")
            self.assertEqual(b.message_count(r), 1)
            self.assertEqual([m.payload for m in b.fetch(r).records], [b"b"])
        finally:
            a.close()
            b.close()

    def test_token_without_tenant_acts_in_default_tenant(self):
        q = uniq("deft")
        c = client(mint.token("dora", None))
        try:
            c.configure(q)
            self.assertEqual(db.tenant_of(q), ["00000000-0000-0000-0000-000000000001"])
        finally:
            c.close()


class ProducerSub(unittest.TestCase):
    """The authenticated sub is stamped into every frame; nothing a client sends
    changes what is stored and returned."""

    def test_stamped_on_push_and_transact_returned_by_pop_consume_fetch(self):
        q = uniq("sub")
        c = full("alice.producer", TENANT_A)
        try:
            c.push(q, [b"p1"])
            c.transact([Q.TransactOp(push=Q.PushItem(queue=q, payload=b"p2"))])
            self.assertEqual({m.producer_sub for m in c.fetch(q).records}, {"alice.producer"})
            r = c.pop_until(q, batch=10)
            self.assertEqual([(m.payload, m.producer_sub) for m in r.messages],
                             [(b"p1", "alice.producer"), (b"p2", "alice.producer")])
            c.ack([Q.AckItem(partition_id=m.partition_id, offset=m.offset, lease_id=r.lease_id,
                             status=C.ACK_STATUS_RETRY) for m in r.messages])
            s = ConsumeStream(c, subscribe=Q.ConsumeSubscribe(queue=q, credits=1, auto_ack=True,
                                                                consumer_group="cg"))
            batch = s.recv(15).batch
            s.cancel()
            self.assertEqual({m.producer_sub for m in batch.messages}, {"alice.producer"})
        finally:
            c.close()

    def test_forged_producer_sub_never_survives(self):
        """Property: random pushes that carry a producer_sub in every way the
        wire allows (PushItem fields it does not know, of every number a
        producer_sub could hide in, spelling "mallory", a token with
        producer_sub / sub-like extra claims, transaction ids spelling it) store and return exactly the token's sub."""
        rnd = random.Random(0x5EC)
        q = uniq("forge")
        sub = "honest-%d" % rnd.randrange(1 << 30)
        tok = mint.token(sub, TENANT_A, extra={"producer_sub": "mallory", "act": {"sub": "mallory"},
                                               "preferred_username": "mallory"})
        c = client(tok)
        try:
            sent = []
            for round_ in range(20):
                items = []
                for i in range(rnd.randrange(1, 6)):
                    payload = ("r%d-%d" % (round_, i)).encode()
                    it = Q.PushItem(queue=q, payload=payload, transaction_id="mallory-%d-%d" % (round_, i))
                    raw = it.SerializeToString()
                    # append fields PushItem does not know, any wire type, spelling mallory
                    for _ in range(rnd.randrange(0, 4)):
                        fno = rnd.choice([5, 6, 7, 9, 12, 15, 100])
                        if fno == 5:
                            continue  # trace_id (field 5) must be a UUID
                        val = b"mallory"
                        raw += bytes([(fno << 3) | 2]) if fno < 16 else bytes([((fno << 3) | 2) & 0x7F | 0x80,
                                                                                (fno << 3) >> 7])
                        raw += bytes([len(val)]) + val
                    items.append(Q.PushItem.FromString(raw))
                    sent.append(payload)
                if rnd.random() < 0.3:
                    c.transact([Q.TransactOp(push=it) for it in items])
                else:
                    r = c.push_items(items)
                    self.assertTrue(all(x.status == Q.PUSH_STATUS_QUEUED for x in r.results), r)
            recs = []
            off = 0
            while len(recs) < len(sent):
                got = c.fetch(q, offset=off).records
                self.assertTrue(got)
                recs += got
                off = got[-1].offset + 1
            self.assertEqual([m.payload for m in recs], sent)
            self.assertEqual({m.producer_sub for m in recs}, {sub})
            popped = c.pop_until(q, batch=1000).messages
            self.assertEqual({m.producer_sub for m in popped}, {sub})
            # and the stored frames carry the sub
            frames = b"".join(content for _, content in db.segments(q))
            self.assertIn(sub.encode(), frames)
        finally:
            c.close()


class Encryption(unittest.TestCase):
    """encryption_enabled: payloads sealed with the key ring's newest key, no
    plaintext in queen.log_segments, decrypted for readers; the DLQ keeps the
    stored form."""

    def test_round_trip_and_no_plaintext_stored(self):
        q, plain_q = uniq("enc"), uniq("plain")
        c = full("enc.writer", TENANT_A)
        try:
            c.configure(q, encryption_enabled=True, retry_limit=0)
            c.configure(plain_q)
            secrets = [("TOPSECRET-%s-%d" % (uuid.uuid4().hex, i)).encode() for i in range(20)]
            c.push(q, secrets[:10])
            c.transact([Q.TransactOp(push=Q.PushItem(queue=q, payload=p)) for p in secrets[10:]])
            c.push(plain_q, secrets[:2])
            # control: the plain queue's stored frames do hold the plaintext
            plain = b"".join(content for _, content in db.segments(plain_q))
            self.assertIn(secrets[0], plain)
            segs = db.segments(q)
            self.assertTrue(segs)
            for blob, content in segs:
                for s in secrets:
                    self.assertNotIn(s, content)
                    self.assertNotIn(s, blob)
                    self.assertNotIn(s[:16], content)
            # readers get the plaintext
            f = c.fetch(q)
            self.assertEqual([m.payload for m in f.records], secrets)
            self.assertTrue(all(m.encrypted and not m.payload_error for m in f.records))
            r = c.pop_until(q, batch=5)
            self.assertEqual([m.payload for m in r.messages], secrets[:5])
            s = ConsumeStream(c, subscribe=Q.ConsumeSubscribe(queue=q, consumer_group="cg", credits=1,
                                                                batch=20, auto_ack=True))
            self.assertEqual([m.payload for m in s.recv(15).batch.messages], secrets)
            s.cancel()
            # the DLQ keeps the stored (encrypted) form; ListDeadLetters decrypts
            r = c.ack_offset(r.messages[0], status=C.ACK_STATUS_DLQ, error="x")
            self.assertTrue(r.dlq, r)
            stored = db.dead_letter_payloads(q)
            self.assertEqual(len(stored), 1)
            self.assertNotIn(secrets[0], stored[0])
            self.assertNotEqual(stored[0], secrets[0])
            dl = c.dead_letters(q)
            self.assertEqual([(d.payload, d.encrypted, d.payload_error) for d in dl], [(secrets[0], True, "")])
            # replay decrypts and the new message is sealed again
            rp = c.a.ReplayDeadLetter(A.ReplayDeadLetterRequest(id=dl[0].id), timeout=15)
            self.assertTrue(rp.dead_letter_removed)
            last = c.fetch(q, offset=rp.replayed_as.offset).records[0]
            self.assertEqual((last.payload, last.encrypted), (secrets[0], True))
            for blob, content in db.segments(q):
                self.assertNotIn(secrets[0], content)
        finally:
            c.close()


class Queenctl(unittest.TestCase):
    """`queenctl token` mints what the broker accepts; queenctl sends it with
    --token or QUEEN_TOKEN."""

    def ctl(self, *args, token=None, env_token=None, stdin=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_")}
        env["QUEEN_ADDR"] = broker.target()
        if env_token is not None:
            env["QUEEN_TOKEN"] = env_token
        argv = [os.environ["QN_QUEENCTL"]] + (["--token", token] if token else []) + list(args)
        p = subprocess.run(argv, input=stdin, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=60)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def test_queenctl_token_flag_and_env(self):
        q = uniq("cli.q")
        rc, tok, err = self.ctl("token", "--sub", "cli-user", "--hs256-secret-file", secret_path,
                                "--tenant", TENANT_A, "--scope", "produce:cli.*", "--scope", "admin:cli.*",
                                "--aud", AUD, "--iss", ISS, "--ttl", "600")
        self.assertEqual(rc, 0, err)
        tok = tok.strip()
        rc, out, err = self.ctl("push", "-q", q, token=tok, stdin=b"hello\nworld\n")
        self.assertEqual(rc, 0, err)
        rc, out, err = self.ctl("-o", "json", "queue", "get", q, env_token=tok)
        self.assertEqual(rc, 0, err)
        self.assertEqual(int(json.loads(out.splitlines()[0])["queue"]["messages"]), 2)
        rc, out, err = self.ctl("queue", "get", q)
        self.assertEqual(rc, 1)
        self.assertIn("UNAUTHENTICATED", err)
        rc, out, err = self.ctl("push", "-q", uniq("other"), token=tok, stdin=b"x\n")
        self.assertEqual(rc, 1)
        self.assertIn("PERMISSION_DENIED", err)
        c = full()
        try:
            self.assertEqual({(m.payload, m.producer_sub) for m in c.fetch(q).records},
                             {(b"hello", "cli-user"), (b"world", "cli-user")})
        finally:
            c.close()


if __name__ == "__main__":
    unittest.main()
