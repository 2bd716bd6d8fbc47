#!/usr/bin/python3
"""Cross-language check of the segment format (codec/SPEC.md).

An independent implementation in Python, written from the storage-model seed's
frame layout with struct packing, python3-zstandard and python3-xxhash (Debian
packages), is compared with `queenctl`:

1. segments built here are decoded by `queenctl segment decode`;
2. segments written by `queenctl segment encode` are parsed here, including the
   zstd frame header's content size and the --hashes blob;
3. `queenctl segment hash` agrees with `xxhsum -H2` and xxhash.xxh3_128;
4. malformed segments and JSON lines make queenctl exit 2 with one line naming
   the frame index and byte offset (or the input line).

Run by ctest as codec_crosscheck with Debian's /usr/bin/python3. Exits 1
(a failure, not a skip) when the modules are missing, 1 on any mismatch.
"""
import argparse
import base64
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import uuid

try:
    import xxhash
    import zstandard
except ImportError as e:  # pragma: no cover
    print(f"cannot run: {e} (install python3-zstandard python3-xxhash)")
    sys.exit(1)

FLAG_TRACE, FLAG_PSUB, FLAG_ENC = 1, 2, 4
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"FAIL: {what}")


# ---- the format, independently ------------------------------------------


def pack_frame(msg_id, trace_id, txn, psub, encrypted, payload, extra_flags=0):
    flags = (FLAG_TRACE if trace_id is not None else 0) | (FLAG_PSUB if psub is not None else 0)
    flags |= (FLAG_ENC if encrypted else 0) | extra_flags
    body = struct.pack("<B", flags) + msg_id
    if trace_id is not None:
        body += trace_id
    body += struct.pack("<H", len(txn)) + txn
    if psub is not None:
        body += struct.pack("<H", len(psub)) + psub
    body += payload
    return struct.pack("<I", len(body)) + body


def parse_frames(raw):
    """Returns a list of dicts; raises ValueError on malformed input."""
    out, pos = [], 0
    while pos < len(raw):
        if len(raw) - pos < 4:
            raise ValueError(f"truncated length at {pos}")
        (blen,) = struct.unpack_from("<I", raw, pos)
        body = raw[pos + 4 : pos + 4 + blen]
        if len(body) != blen:
            raise ValueError(f"body overrun at {pos}")
        p = 0
        flags = body[p]
        p += 1
        if flags & ~7:
            raise ValueError("unknown flags")
        msg_id = body[p : p + 16]
        p += 16
        trace = None
        if flags & FLAG_TRACE:
            trace = body[p : p + 16]
            p += 16
        (tl,) = struct.unpack_from("<H", body, p)
        p += 2
        txn = body[p : p + tl]
        p += tl
        psub = None
        if flags & FLAG_PSUB:
            (pl,) = struct.unpack_from("<H", body, p)
            p += 2
            psub = body[p : p + pl]
            p += pl
        if p > blen:
            raise ValueError("inner overrun")
        out.append(
            dict(
                message_id=msg_id,
                trace_id=trace,
                txn=txn,
                psub=psub,
                encrypted=bool(flags & FLAG_ENC),
                payload=body[p:],
            )
        )
        pos += 4 + blen
    return out


def as_json(i, base, f):
    return {
        "offset": base + i,
        "message_id": str(uuid.UUID(bytes=f["message_id"])),
        "trace_id": None if f["trace_id"] is None else str(uuid.UUID(bytes=f["trace_id"])),
        "transaction_id": f["txn"].decode("utf-8"),
        "producer_sub": None if f["psub"] is None else f["psub"].decode("utf-8"),
        "encrypted": f["encrypted"],
        "payload_b64": base64.b64encode(f["payload"]).decode("ascii"),
    }


def txn_hash(b):
    return xxhash.xxh3_128(b).digest()


# ---- helpers -------------------------------------------------------------


def run(args, stdin=b""):
    p = subprocess.run(args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def random_frames(rng, n):
    frames = []
    words = ["alpha", "beta", "grüße", "日本", "x" * 40, "", "order-17", "é"]
    for i in range(n):
        combo = i % 8
        tl = rng.choice([0, 1, 12, 36, 200])
        txn = ("t%d-" % i + rng.choice(words) * 3)[:tl] if tl else ""
        f = dict(
            message_id=rng.randbytes(16),
            trace_id=rng.randbytes(16) if combo & FLAG_TRACE else None,
            txn=txn.encode("utf-8"),
            psub=(rng.choice(words).encode("utf-8") if combo & FLAG_PSUB else None),
            encrypted=bool(combo & FLAG_ENC),
            payload=rng.choice(
                [
                    b"",
                    json.dumps({"i": i, "v": rng.random(), "w": rng.choice(words)}).encode(),
                    rng.randbytes(rng.randrange(1, 600)),
                ]
            ),
        )
        frames.append(f)
    # the limits: 65535-byte txn and producer sub
    frames.append(
        dict(message_id=bytes(16), trace_id=None, txn=b"T" * 65535, psub=b"P" * 65535,
             encrypted=False, payload=b"{}")
    )
    return frames


def pack_segment(frames):
    return b"".join(
        pack_frame(f["message_id"], f["trace_id"], f["txn"], f["psub"], f["encrypted"], f["payload"])
        for f in frames
    )


# ---- checks --------------------------------------------------------------


def check_decode(queenctl, rng):
    for n, sized, base in [(1, True, 0), (8, True, 7), (300, True, 1000000), (50, False, 3)]:
        frames = random_frames(rng, n)
        raw = pack_segment(frames)
        blob = zstandard.ZstdCompressor(level=3, write_content_size=sized).compress(raw)
        rc, out, err = run([queenctl, "segment", "decode", "--base", str(base)], blob)
        check(rc == 0, f"decode n={n} sized={sized}: rc={rc} {err}")
        got = [json.loads(line) for line in out.decode().splitlines()]
        want = [as_json(i, base, f) for i, f in enumerate(frames)]
        check(got == want, f"decode n={n} sized={sized}: JSON differs")
    # zstd level 19 and a multi-block segment
    frames = random_frames(rng, 3000)
    raw = pack_segment(frames)
    blob = zstandard.ZstdCompressor(level=19).compress(raw)
    rc, out, err = run([queenctl, "segment", "decode"], blob)
    got = [json.loads(line) for line in out.decode().splitlines()]
    check(rc == 0 and got == [as_json(i, 0, f) for i, f in enumerate(frames)], "decode level 19")


def check_encode(queenctl, rng, tmp):
    frames = random_frames(rng, 200)
    lines = []
    for i, f in enumerate(frames):
        j = as_json(i, 0, f)
        if i % 5 == 0:
            del j["offset"]
        if i % 7 == 0:
            j["trace_id"] = None
        if i % 11 == 0:
            del j["encrypted"]
            f["encrypted"] = False
        if i % 7 == 0:
            f["trace_id"] = None
        lines.append(json.dumps(j, ensure_ascii=(i % 2 == 0)))
    # minted message ids and default transaction ids
    for k in range(5):
        lines.append(json.dumps({"payload_b64": base64.b64encode(b"m%d" % k).decode()}))
    stdin = ("\n".join(lines) + "\n\n").encode()
    hashes_path = os.path.join(tmp, "hashes.bin")
    for level in (None, 1, 19):
        args = [queenctl, "segment", "encode", "--hashes", hashes_path]
        if level:
            args += ["--level", str(level)]
        rc, blob, err = run(args, stdin)
        check(rc == 0, f"encode level {level}: rc={rc} {err}")
        params = zstandard.get_frame_parameters(blob)
        raw = zstandard.ZstdDecompressor().decompress(blob)
        check(params.content_size == len(raw), "encode: zstd header records the content size")
        got = parse_frames(raw)
        check(len(got) == len(frames) + 5, f"encode: {len(got)} frames")
        for i, f in enumerate(frames):
            check(got[i] == f, f"encode: frame {i} differs")
        minted = got[len(frames):]
        for k, m in enumerate(minted):
            u = uuid.UUID(bytes=m["message_id"])
            check(u.version == 7 and u.variant == uuid.RFC_4122, f"minted id {u} is not UUIDv7")
            check(m["txn"] == str(u).encode(), "default transaction id is the message id")
            check(m["payload"] == b"m%d" % k, "minted frame payload")
        ids = [m["message_id"] for m in minted]
        check(ids == sorted(ids) and len(set(ids)) == len(ids), "minted ids strictly increase")
        with open(hashes_path, "rb") as fh:
            hb = fh.read()
        check(hb == b"".join(txn_hash(g["txn"]) for g in got), "encode: --hashes blob")
    # decode(encode(x)) gives back x; encode(decode(...)) gives the same raw bytes
    rc, out, err = run([queenctl, "segment", "decode"], blob)
    rc2, blob2, err2 = run([queenctl, "segment", "encode"], out)
    check(rc == 0 and rc2 == 0, f"re-encode: {err}{err2}")
    check(zstandard.ZstdDecompressor().decompress(blob2) == raw, "re-encode gives the same frames")


def check_hash(queenctl, xxhsum):
    samples = ["", "a", "abc", "order-42", "grüße", "0190a0b2-7c3e-7d4f-8a1b-2c3d4e5f6a7b",
               "x" * 1000, "y" * 65535]
    for s in samples:
        rc, out, err = run([queenctl, "segment", "hash", s])
        mine = out.decode().strip()
        check(rc == 0 and len(mine) == 32, f"hash {s[:20]!r}: rc={rc} {err}")
        check(mine == xxhash.xxh3_128(s.encode()).hexdigest(), f"hash {s[:20]!r} vs python")
        if xxhsum:
            rc, out, err = run([xxhsum, "-H2"], s.encode())
            check(out.decode().split()[0] == mine, f"hash {s[:20]!r} vs xxhsum -H2")


def expect_bad(queenctl, args, stdin, must_contain, what):
    rc, out, err = run([queenctl] + args, stdin)
    lines = err.strip().splitlines()
    check(rc == 2, f"{what}: exit {rc}, want 2")
    check(len(lines) == 1, f"{what}: {len(lines)} lines on stderr: {err!r}")
    for s in must_contain:
        check(s in err, f"{what}: stderr {err.strip()!r} lacks {s!r}")
    check(out == b"", f"{what}: printed {len(out)} bytes to stdout")


def check_malformed(queenctl, rng):
    frames = random_frames(rng, 6)[:6]
    good = [pack_frame(f["message_id"], f["trace_id"], f["txn"], f["psub"], f["encrypted"],
                       f["payload"]) for f in frames]
    starts = [sum(len(g) for g in good[:i]) for i in range(len(good))]
    z = zstandard.ZstdCompressor(level=3)

    def seg(frames_bytes):
        return z.compress(b"".join(frames_bytes))

    bad = list(good)
    bad[3] = bad[3][:4] + bytes([bad[3][4] | 0x20]) + bad[3][5:]
    expect_bad(queenctl, ["segment", "decode"], seg(bad), ["frame 3", f"byte {starts[3] + 4}",
               "unknown flag"], "unknown flag bits")
    expect_bad(queenctl, ["segment", "decode"], seg(good[:5] + [good[5][:-1]]),
               ["frame 5", f"byte {starts[5]}", "past end of buffer"], "body_len past buffer")
    expect_bad(queenctl, ["segment", "decode"], seg(good + [b"\x01\x00"]),
               ["frame 6", f"byte {starts[5] + len(good[5])}", "truncated"], "truncated prefix")
    inner = pack_frame(bytes(16), None, b"", None, False, b"")
    inner = inner[:21] + b"\x09\x00"  # txn_len 9 with nothing after it
    inner = struct.pack("<I", len(inner) - 4) + inner[4:]
    expect_bad(queenctl, ["segment", "decode"], seg(good[:2] + [inner]),
               ["frame 2", f"byte {starts[2] + 21}", "past end of body"], "inner overrun")
    expect_bad(queenctl, ["segment", "decode"], b"garbage that is not zstd", ["not a zstd"],
               "not zstd")
    blob = seg(good)
    expect_bad(queenctl, ["segment", "decode"], blob[:-3], ["not a zstd"], "truncated blob")
    expect_bad(queenctl, ["segment", "decode", "--max-raw", "100"], blob, ["more than 100 bytes"],
               "over --max-raw")
    # a small blob that declares a huge output is refused by its header
    bomb = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 1 << 40) + b"\x01\x00\x00"
    expect_bad(queenctl, ["segment", "decode"], bomb, ["more than"], "declared bomb")

    ok = json.dumps({"payload_b64": "e30="})
    for text, needle in [
        ('{"payload_b64": "e30=", "nope": 1}', 'unknown key "nope"'),
        ("{not json", "invalid json"),
        ('{"payload_b64": "e3@="}', "invalid base64"),
        ('{"trace_id": "123", "payload_b64": ""}', "trace_id"),
        ('{"message_id": 5, "payload_b64": ""}', "message_id"),
        ('{"encrypted": "yes", "payload_b64": ""}', "encrypted"),
        ('{"transaction_id": "%s", "payload_b64": ""}' % ("x" * 65536), "longer than 65535"),
        ("[1, 2]", "not a json object"),
        ('{"transaction_id": "t"}', "payload_b64"),
    ]:
        stdin = (ok + "\n\n" + text + "\n").encode()
        expect_bad(queenctl, ["segment", "encode"], stdin, ["line 3", "frame 1", needle], needle)
    expect_bad(queenctl, ["segment", "encode"], b"\n  \n", ["no frames"], "empty input")
    expect_bad(queenctl, ["segment", "encode", "--level", "42"], ok.encode(), ["--level"], "level")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queenctl", required=True)
    ap.add_argument("--xxhsum", default="")
    a = ap.parse_args()
    rng = random.Random(20261130)
    with tempfile.TemporaryDirectory() as tmp:
        check_decode(a.queenctl, rng)
        check_encode(a.queenctl, rng, tmp)
        check_hash(a.queenctl, a.xxhsum or None)
        check_malformed(a.queenctl, rng)
    if failures:
        print(f"{failures} of {checks} checks failed")
        return 1
    print(f"crosscheck: all {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
