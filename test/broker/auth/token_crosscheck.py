#!/usr/bin/python3
"""Cross-checks Queen's JWT code against PyJWT (Debian python3-jwt), both ways.

1. Tokens minted by PyJWT (HS256, RS256, ES256, and refused kinds: expired,
   wrong audience, alg none, HS256 signed with the RSA public key) are verified
   by qn_jwt_verify through test/broker/auth/jwt_probe.
2. Tokens minted by `queenctl token` (HS256, ES256) are verified by PyJWT.
Keys are generated here with python3-cryptography. Exit 0 when every case holds.
Usage: token_crosscheck.py --probe PATH --token PATH
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import tempfile
import time

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

ap = argparse.ArgumentParser()
ap.add_argument("--probe", required=True)
ap.add_argument("--token", required=True)  # the queenctl binary
args = ap.parse_args()
d = tempfile.mkdtemp()
failures = []
cases = []


def write(name, data):
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def probe(kind, path, token):
    r = subprocess.run([args.probe, kind, path, token], capture_output=True, text=True)
    return r.returncode, r.stdout.strip()


def expect(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + (": " + detail if detail else ""))
    cases.append(name)
    if not cond:
        failures.append(name)


secret = os.urandom(32).hex().encode()  # 64 ASCII bytes
secret_file = write("secret", secret + b"\n")
rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ec_key = ec.generate_private_key(ec.SECP256R1())
pub = serialization.PublicFormat.SubjectPublicKeyInfo
rsa_pub = rsa_key.public_key().public_bytes(serialization.Encoding.PEM, pub)
ec_pub = ec_key.public_key().public_bytes(serialization.Encoding.PEM, pub)
ec_priv = ec_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
rsa_file, ec_file, ec_priv_file = write("rsa.pem", rsa_pub), write("ec.pem", ec_pub), \
    write("ec-priv.pem", ec_priv)

now = int(time.time())
claims = {"sub": "pyjwt-user", "aud": "queen", "iat": now, "exp": now + 300,
          "tenant": "00000000-0000-0000-0000-000000000001",
          "scopes": ["produce:orders.*", "consume:*"]}

# 1. PyJWT mints, Queen verifies
for name, kind, path, key, alg in [("HS256", "--secret", secret_file, secret, "HS256"),
                                   ("RS256", "--pem", rsa_file, rsa_key, "RS256"),
                                   ("ES256", "--pem", ec_file, ec_key, "ES256")]:
    rc, out = probe(kind, path, jwt.encode(claims, key, algorithm=alg))
    expect("pyjwt %s verified by queen" % name, rc == 0 and out == "ok pyjwt-user 2", out)

refusals = [
    ("expired", "--secret", secret_file,
     jwt.encode(dict(claims, exp=now - 60), secret, algorithm="HS256"), "token expired"),
    ("wrong audience", "--secret", secret_file,
     jwt.encode(dict(claims, aud="other"), secret, algorithm="HS256"), "wrong token audience"),
    ("alg none", "--secret", secret_file,
     jwt.encode(claims, None, algorithm="none") + "c2ln", "token algorithm not allowed"),
    ("wrong key", "--pem", ec_file,
     jwt.encode(claims, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256"),
     "bad token signature"),
]
for name, kind, path, token, want in refusals:
    rc, out = probe(kind, path, token)
    expect("pyjwt %s refused by queen" % name, rc == 1 and out.startswith(want + ":"), out)

# algorithm confusion: HS256 keyed with the RSA public key's PEM bytes. PyJWT
# itself refuses to do this, so the token is assembled by hand.
def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


si = b64u(json.dumps({"alg": "HS256"}).encode()) + "." + b64u(json.dumps(claims).encode())
forged = si + "." + b64u(hmac.new(rsa_pub, si.encode(), hashlib.sha256).digest())
rc, out = probe("--pem", rsa_file, forged)
expect("HS256 keyed with the RSA public key refused", rc == 1 and
       out.startswith("token algorithm not allowed:"), out)

# 2. queenctl token mints, PyJWT verifies
common = ["--sub", "queen-dev", "--aud", "queen", "--iss", "queen-test",
          "--tenant", "6f1c2a4e-0d7b-4c39-9a51-3e8f2b7d1c05",
          "--scope", "produce:orders.*", "--scope", "admin:orders"]
for name, keyopt, verify_key in [("HS256", ["--hs256-secret-file", secret_file], secret),
                                 ("ES256", ["--es256-key-file", ec_priv_file], ec_pub)]:
    r = subprocess.run([args.token, "token"] + common + keyopt + ["--kid", "k-" + name],
                       capture_output=True, text=True)
    tok = r.stdout.strip()
    try:
        got = jwt.decode(tok, verify_key, algorithms=[name], audience="queen",
                         issuer="queen-test")
        hdr = jwt.get_unverified_header(tok)
        ok = (r.returncode == 0 and got["sub"] == "queen-dev" and
              got["scopes"] == ["produce:orders.*", "admin:orders"] and
              got["exp"] - got["iat"] == 3600 and hdr["kid"] == "k-" + name)
        expect("queenctl token %s verified by pyjwt" % name, ok, str(got))
    except Exception as e:  # noqa: BLE001 - report any failure as a failed case
        expect("queenctl token %s verified by pyjwt" % name, False, repr(e))

print("%d passed, %d failed" % (len(cases) - len(failures), len(failures)))
sys.exit(1 if failures else 0)
