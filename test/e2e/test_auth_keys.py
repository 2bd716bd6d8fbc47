"""Security end to end, the key files (README "Security"): SIGHUP reloads
the JWT keys and the encryption key ring off the loop without dropping a
connection; a reload that fails keeps the previous keys; rotated encryption
keys still decrypt what they sealed; a key removed from the ring gives each
message it sealed a clear per-message error (payload empty, never the
ciphertext) on Fetch, Pop, Consume and ListDeadLetters; mTLS principals named
by a policy file (certificates made at test time), alone and with jwt."""

import json
import os
import signal
import unittest
import uuid

import grpc

from authsupport import Bearer, Db, Minter, new_secret, write_file
from harness import Broker, _make_leaf, certs, grpc_frame, grpc_message, grpc_status
from qsupport import A, C, Client, ConsumeStream, Q, fixture_db_url, rpc_error, uniq, wait_until

TENANT = str(uuid.uuid4())


def reloads(b):
    return b.log_text().count("security reloaded")


def sighup(b):
    """SIGHUP and wait until the reload it started finished on every event loop:
    each loop reloads its own copy of the keys and logs its own line."""
    n = reloads(b)
    b.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: reloads(b) >= n + b.workers(), 20, what="the security reload on every loop")


class JwtRotation(unittest.TestCase):
    def setUp(self):
        self.s1 = new_secret()
        self.path = write_file("rot-secret-%s" % uuid.uuid4().hex[:6], self.s1 + b"\n")
        self.b = Broker("product", db="e2e_auth_keys", env={"QUEEN_AUTH": "jwt",
                                                           "QUEEN_JWT_SECRET_FILES": self.path}).start()

    def tearDown(self):
        rc = self.b.stop()
        self.assertEqual(rc, 0, self.b.log_text())

    def stats(self, raw, token):
        sid = raw.request("/queen.v1.AdminService/GetStats", grpc_frame(A.GetStatsRequest().SerializeToString()),
                          headers=[("authorization", "Bearer " + token)])
        res = raw.wait(sid)
        return grpc_status(res), grpc_message(res)

    def test_sighup_rotates_keys_on_a_live_connection(self):
        old = Minter(self.s1).token("rot", TENANT)
        raw = self.b.raw()
        ch = Client(self.b.channel())
        try:
            self.assertEqual(self.stats(raw, old), (0, ""))
            s2 = new_secret()
            write_file(os.path.basename(self.path), s2 + b"\n")
            sighup(self.b)
            new = Minter(s2).token("rot", TENANT)
            code, msg = self.stats(raw, old)
            self.assertEqual(code, 16, msg)  # UNAUTHENTICATED
            self.assertIn("signature", msg)
            self.assertEqual(self.stats(raw, new), (0, ""))
            # the same connection served all three: never closed, no GOAWAY
            self.assertFalse(raw.closed)
            self.assertIsNone(raw.goaway)
            # a reload that fails keeps the keys in force and says why
            write_file(os.path.basename(self.path), b"short\n")
            sighup(self.b)
            self.assertIn("JWT keys not reloaded", self.b.log_text())
            self.assertEqual(self.stats(raw, new), (0, ""))
            self.assertEqual(self.stats(raw, old)[0], 16)
            # grpcio channel too
            self.assertEqual(Client(Bearer.wrap(self.b.channel(), new)).stats().total_dead_letters, 0)
        finally:
            raw.close()
            ch.close()

    def test_encrypted_queue_without_key_ring(self):
        """This broker has no QUEEN_ENCRYPTION_KEYRING: a push to an encrypted
        queue fails as a whole with FAILED_PRECONDITION and stores nothing."""
        c = Client(Bearer.wrap(self.b.channel(), Minter(self.s1).token("nokeys", TENANT)))
        try:
            q = uniq("enc.nokeys")
            c.configure(q, encryption_enabled=True)
            e = rpc_error(c.push, q, [b"plain"])
            self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
            self.assertIn("QUEEN_ENCRYPTION_KEYRING", e.details())
            self.assertEqual(c.message_count(q), 0)
        finally:
            c.close()


class KeyringRotation(unittest.TestCase):
    def setUp(self):
        self.secret = new_secret()
        self.k1, self.k2, self.k3 = (os.urandom(32).hex() for _ in range(3))
        self.ring = "ring-%s" % uuid.uuid4().hex[:6]
        env = {"QUEEN_AUTH": "jwt",
               "QUEEN_JWT_SECRET_FILES": write_file(self.ring + ".secret", self.secret),
               "QUEEN_ENCRYPTION_KEYRING": write_file(self.ring, "k1 %s\n" % self.k1)}
        self.b = Broker("product", db="e2e_auth_keys", env=env).start()
        self.db = Db(fixture_db_url("e2e_auth_keys"))
        self.c = Client(Bearer.wrap(self.b.channel(), Minter(self.secret).token("keys", TENANT)))

    def tearDown(self):
        self.c.close()
        rc = self.b.stop()
        self.assertEqual(rc, 0, self.b.log_text())

    def test_rotation_and_missing_key(self):
        c, q = self.c, uniq("encrot")
        c.configure(q, encryption_enabled=True, retry_limit=5, lease_time=600)
        c.push(q, [b"sealed-by-k1-a", b"sealed-by-k1-b"])
        frames = b"".join(x for _, x in self.db.segments(q))
        self.assertIn(b"\x01\x02k1", frames)
        # rotate: k2 appended, becomes the active key
        write_file(self.ring, "k1 %s\nk2 %s\n" % (self.k1, self.k2))
        sighup(self.b)
        c.push(q, [b"sealed-by-k2"])
        frames = b"".join(x for _, x in self.db.segments(q))
        self.assertIn(b"\x01\x02k2", frames)
        self.assertEqual([m.payload for m in c.fetch(q).records],
                         [b"sealed-by-k1-a", b"sealed-by-k1-b", b"sealed-by-k2"])
        # file one k1 message as a dead letter while k1 is still in the ring
        p = c.pop_until(q, batch=1)
        self.assertTrue(c.ack_offset(p.messages[0], status=C.ACK_STATUS_DLQ, error="x").dlq)
        # retire k1 (k3 active): what k1 sealed can no longer be read
        write_file(self.ring, "k2 %s\nk3 %s\n" % (self.k2, self.k3))
        sighup(self.b)
        c.push(q, [b"sealed-by-k3"])

        def check(msgs, expect):
            got = [(m.payload, bool(m.payload_error)) for m in msgs]
            self.assertEqual(got, expect)
            for m in msgs:
                self.assertTrue(m.encrypted)
                if m.payload_error:
                    self.assertEqual(m.payload, b"")
                    self.assertIn("k1", m.payload_error)
                    self.assertIn("key ring", m.payload_error)
                    self.assertTrue(m.message_id and m.partition_id)

        check(c.fetch(q).records, [(b"", True), (b"", True), (b"sealed-by-k2", False), (b"sealed-by-k3", False)])
        # a batch with one undecryptable message: the batch is delivered, that
        # message carries payload_error and can be acked like any other
        r = c.pop_until(q, batch=10)
        check(r.messages, [(b"", True), (b"sealed-by-k2", False), (b"sealed-by-k3", False)])
        self.assertTrue(c.ack_offset(r.messages[0], status=C.ACK_STATUS_COMPLETED).success)
        s = ConsumeStream(c, subscribe=Q.ConsumeSubscribe(queue=q, consumer_group="cg", credits=1, batch=10,
                                                            auto_ack=True))
        check(s.recv(15).batch.messages,
              [(b"", True), (b"", True), (b"sealed-by-k2", False), (b"sealed-by-k3", False)])
        s.cancel()
        dl = c.dead_letters(q)
        self.assertEqual(len(dl), 1)
        self.assertEqual((dl[0].payload, dl[0].encrypted), (b"", True))
        self.assertIn("k1", dl[0].payload_error)
        # a key ring that does not parse keeps the ring in force
        write_file(self.ring, "k2 not-hex\n")
        sighup(self.b)
        self.assertIn("key ring not reloaded", self.b.log_text())
        self.assertEqual(c.fetch(q, offset=3).records[0].payload, b"sealed-by-k3")


def policy(entries, identity="cn"):
    return json.dumps({"identity": identity, "principals": entries})


class Mtls(unittest.TestCase):
    """QUEEN_AUTH=mtls: the client certificate's CN names the principal; its
    tenant and grants come from the policy file (reloaded on SIGHUP)."""

    @classmethod
    def setUpClass(cls):
        c = certs()
        if not os.path.exists(os.path.join(c.dir, "stranger.pem")):
            _make_leaf(c.dir, "stranger", "stranger-client", "ca", "extendedKeyUsage=clientAuth\n")
        cls.tenant = str(uuid.uuid4())
        cls.policy = "policy-%s.json" % uuid.uuid4().hex[:6]
        path = write_file(cls.policy, policy([{"match": "queen-test-*", "tenant": cls.tenant,
                                                "grants": ["produce:m.*", "consume:m.*", "admin:m.*"]}]))
        cls.secret = new_secret()
        env = {"QUEEN_AUTH": "jwt,mtls", "QUEEN_MTLS_POLICY_FILE": path,
               "QUEEN_JWT_SECRET_FILES": write_file(cls.policy + ".secret", cls.secret)}
        cls.b = Broker("product", db="e2e_auth_mtls", tls=True, client_ca=True, env=env).start()
        cls.db = Db(fixture_db_url("e2e_auth_mtls"))

    @classmethod
    def tearDownClass(cls):
        rc = cls.b.stop()
        assert rc == 0, cls.b.log_text()

    def tls_client(self, who="good", token=None):
        import grpc as g

        if who == "stranger":
            c = certs()
            creds = g.ssl_channel_credentials(root_certificates=c.read(c.ca),
                                              private_key=c.read(os.path.join(c.dir, "stranger.key")),
                                              certificate_chain=c.read(os.path.join(c.dir, "stranger.pem")))
            ch = g.secure_channel("127.0.0.1:%d" % self.b.tls_port, creds,
                                  [("grpc.ssl_target_name_override", "localhost")])
        else:
            ch = self.b.secure_channel(client=who)
        return Client(Bearer.wrap(ch, token))

    def test_principal_tenant_and_grants_from_policy(self):
        q = uniq("m.q")
        c = self.tls_client()
        try:
            c.push(q, [b"from-cert"])
            m = c.pop_until(q).messages[0]
            self.assertEqual((m.payload, m.producer_sub), (b"from-cert", "queen-test-client"))
            self.assertEqual(self.db.tenant_of(q), [self.tenant])
            e = rpc_error(c.push, uniq("other"), [b"x"])
            self.assertEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED, e.details())
            self.assertIn('audit event=denied principal="queen-test-client" tenant=%s rpc=Push' % self.tenant,
                          self.b.log_text())
        finally:
            c.close()

    def test_certificate_the_policy_does_not_name(self):
        c = self.tls_client("stranger")
        try:
            e = rpc_error(c.stats)
            self.assertEqual(e.code(), grpc.StatusCode.UNAUTHENTICATED, e.details())
            self.assertIn("no policy entry matches", e.details())
        finally:
            c.close()

    def test_no_certificate_over_h2c(self):
        c = Client(self.b.channel())
        try:
            e = rpc_error(c.stats)
            self.assertEqual(e.code(), grpc.StatusCode.UNAUTHENTICATED, e.details())
        finally:
            c.close()

    def test_token_wins_over_certificate(self):
        q = uniq("m.tok")
        tok = Minter(self.secret).token("jwt-user", str(uuid.uuid4()), scopes=["produce:m.*", "consume:m.*"])
        c = self.tls_client(token=tok)
        try:
            c.push(q, [b"by-token"])
            self.assertEqual(c.pop_until(q).messages[0].producer_sub, "jwt-user")
        finally:
            c.close()

    def test_policy_reload(self):
        q = uniq("n.q")
        c = self.tls_client()
        try:
            self.assertEqual(rpc_error(c.push, q, [b"x"]).code(), grpc.StatusCode.PERMISSION_DENIED)
            write_file(self.policy, policy([{"match": "queen-test-*", "tenant": self.tenant,
                                             "grants": ["produce:*", "consume:m.*", "admin:m.*"]}]))
            sighup(self.b)
            # the same channel (its connection kept) now may push anywhere
            c.push(q, [b"x"])
            write_file(self.policy, '{"identity": "cn", "principals": [], "typo": 1}')
            sighup(self.b)
            self.assertIn("mTLS policy not reloaded", self.b.log_text())
            c.push(q, [b"y"])
        finally:
            c.close()
            write_file(self.policy, policy([{"match": "queen-test-*", "tenant": self.tenant,
                                             "grants": ["produce:m.*", "consume:m.*", "admin:m.*"]}]))
            sighup(self.b)


class Startup(unittest.TestCase):
    """Configuration at start: bad combinations stop the broker with a message
    naming the variable; QUEEN_AUTH=none on a non-loopback address warns; an
    ES256 public key (PEM) verifies what `queenctl token --es256-key-file`
    mints, the kid picking the key."""

    def start_fails(self, env, needle):
        b = Broker("product", db="e2e_auth_keys", env=env)
        with self.assertRaises(RuntimeError) as cm:
            b.start(timeout=30)
        b.kill()
        self.assertIn(needle, str(cm.exception))

    def test_bad_configuration_stops_the_start(self):
        self.start_fails({"QUEEN_AUTH": "password"}, "QUEEN_AUTH: expected none, jwt, mtls or jwt,mtls")
        self.start_fails({"QUEEN_AUTH": "jwt"}, "QUEEN_JWT_SECRET_FILES")
        self.start_fails({"QUEEN_AUTH": "mtls"}, "QUEEN_TLS_CLIENT_CA")
        self.start_fails({"QUEEN_AUTH": "jwt", "QUEEN_JWT_SECRET_FILES": write_file("short.secret", b"short")},
                         "short.secret")
        self.start_fails({"QUEEN_ENCRYPTION_KEYRING": write_file("bad.ring", "k1 nothex\n")}, "bad.ring")

    def test_auth_none_on_a_public_address_warns(self):
        b = Broker("product", db="e2e_auth_keys", env={"QUEEN_BIND_ADDR": "0.0.0.0"}).start()
        try:
            self.assertIn("QUEEN_AUTH=none on 0.0.0.0", b.log_text())
        finally:
            self.assertEqual(b.stop(), 0)
        b = Broker("product", db="e2e_auth_keys").start()
        try:
            self.assertNotIn("QUEEN_AUTH=none on", b.log_text())
        finally:
            self.assertEqual(b.stop(), 0)

    def test_es256_public_keys_with_kid(self):
        import subprocess

        keys = {}
        for kid in ("es-a", "es-b"):
            priv = os.path.join(os.path.dirname(write_file(kid + ".tmp", b"")), kid + ".key")
            subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                            "-out", priv], check=True, capture_output=True)
            pub = priv + ".pub"
            subprocess.run(["openssl", "pkey", "-in", priv, "-pubout", "-out", pub], check=True, capture_output=True)
            keys[kid] = (priv, pub)
        env = {"QUEEN_AUTH": "jwt",
               "QUEEN_JWT_PUBLIC_KEY_FILES": ",".join("%s=%s" % (k, v[1]) for k, v in keys.items())}
        b = Broker("product", db="e2e_auth_keys", env=env).start()
        try:
            for kid, (priv, _) in keys.items():
                tok = subprocess.run([os.environ["QN_QUEENCTL"], "token", "--sub", "es-" + kid,
                                      "--es256-key-file", priv, "--kid", kid, "--scope", "admin:*"],
                                     check=True, capture_output=True, text=True).stdout.strip()
                c = Client(Bearer.wrap(b.channel(), tok))
                try:
                    self.assertGreaterEqual(c.stats().uptime_seconds, 0)
                finally:
                    c.close()
            # signed by es-a's key but naming es-b: refused
            tok = subprocess.run([os.environ["QN_QUEENCTL"], "token", "--sub", "x", "--es256-key-file",
                                  keys["es-a"][0], "--kid", "es-b", "--scope", "admin:*"],
                                 check=True, capture_output=True, text=True).stdout.strip()
            c = Client(Bearer.wrap(b.channel(), tok))
            try:
                e = rpc_error(c.stats)
                self.assertEqual(e.code(), grpc.StatusCode.UNAUTHENTICATED)
                self.assertIn("signature", e.details())
            finally:
                c.close()
        finally:
            self.assertEqual(b.stop(), 0)


class PushSegments(unittest.TestCase):
    """PushSegments stores client-packed segments as sent: refused with auth on
    (no producer_sub could be stamped) and for encrypted queues (the payloads
    would be stored in the clear); nothing is written either way."""

    def request(self, q):
        from test_segments import frame, segment

        seg = segment([frame(b"clear-text-%d" % i, b"t-%d" % i) for i in range(3)])
        return Q.PushSegmentsRequest(segments=[Q.RawSegment(queue=q, partition="p", segment=seg)])

    def test_refused_with_auth_on_and_for_encrypted_queues(self):
        secret = new_secret()
        env = {"QUEEN_AUTH": "jwt", "QUEEN_JWT_SECRET_FILES": write_file("segs.secret", secret)}
        b = Broker("product", db="e2e_auth_keys", env=env).start()
        try:
            c = Client(Bearer.wrap(b.channel(), Minter(secret).token("segs", TENANT)))
            q = uniq("segs")
            e = rpc_error(c.q.PushSegments, self.request(q), timeout=15)
            self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
            self.assertIn("producer_sub", e.details())
            self.assertEqual(c.message_count(q), 0)
            c.close()
        finally:
            self.assertEqual(b.stop(), 0)
        env = {"QUEEN_ENCRYPTION_KEYRING": write_file("segs.ring", "k1 %s\n" % os.urandom(32).hex())}
        b = Broker("product", db="e2e_auth_keys", env=env).start()
        try:
            c = Client(b.channel())
            enc, plain = uniq("segs.enc"), uniq("segs.plain")
            c.configure(enc, encryption_enabled=True)
            req = self.request(enc)
            req.segments.extend(self.request(plain).segments)
            e = rpc_error(c.q.PushSegments, req, timeout=15)
            self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
            self.assertIn(enc, e.details())
            self.assertEqual((c.message_count(enc), c.message_count(plain)), (0, 0))
            # a plain queue alone is stored as before
            r = c.q.PushSegments(self.request(plain), timeout=15)
            self.assertEqual(len(r.results), 1)
            self.assertEqual(c.message_count(plain), 3)
            c.close()
        finally:
            self.assertEqual(b.stop(), 0)


if __name__ == "__main__":
    unittest.main()
