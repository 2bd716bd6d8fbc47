#!/usr/bin/python3
"""Checks a running compose stack from outside, with the Python example
(scripts/stack-test.sh runs it once the broker serves):

  1. the one-shot producer's messages are in the queue "demo": a consumer of a
     fresh group receives exactly --demo-count of them, seq 0..N-1, in order per
     partition;
  2. the example producer pushes --count messages to a fresh queue, every one
     QUEUED, and the example consumer receives exactly those (offsets, message
     ids, payloads), in order per partition;
  3. both groups' lag is 0 afterwards (AdminService.ListConsumerGroups), so the
     consumer's in-band acks were applied;
  4. with --http, the broker's HTTP side port through its published port:
     /healthz and /readyz answer 200, /metrics is Prometheus text whose push
     and pop counters cover what step 2 moved, / serves the console's page.

    scripts/stack-verify.py --addr localhost:6643 --ca .queen/certs/ca.pem --http localhost:6680
"""

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.request
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
EXAMPLES = os.path.join(ROOT, "examples", "python")
sys.path.insert(0, EXAMPLES)
import queen_example as qe  # noqa: E402

RUN_TIMEOUT = 120


def example(name, conn_args, args):
    """Runs examples/python/NAME.py with --json; returns its output lines as objects."""
    cmd = ["/usr/bin/python3", os.path.join(EXAMPLES, name + ".py")] + conn_args + args + ["--json"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=RUN_TIMEOUT)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        sys.exit("stack-verify: %s exited %d" % (" ".join(cmd), r.returncode))
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def check(cond, msg):
    if not cond:
        sys.exit("stack-verify: " + msg)


def check_order(got, what):
    keys = [(m["partition"], m["offset"]) for m in got]
    check(len(keys) == len(set(keys)), "%s: a message was delivered twice" % what)
    last = {}
    for p, off in keys:
        check(off > last.get(p, -1), "%s: partition %s delivered out of order" % (what, p))
        last[p] = off


def lag(conn, queue, group):
    A = conn.stubs.admin
    groups = conn.admin.ListConsumerGroups(A.ListConsumerGroupsRequest(queue=queue, consumer_group=group),
                                           timeout=15, metadata=conn.metadata).groups
    check(len(groups) == 1, "%s/%s: expected one consumer group, got %d" % (queue, group, len(groups)))
    return groups[0].total_lag


def http_get(base, path):
    """(status, content-type, body text) of GET base+path; errors end the check."""
    try:
        with urllib.request.urlopen("http://%s%s" % (base, path), timeout=15) as r:
            return r.status, r.headers.get("content-type", ""), r.read().decode("utf-8", "replace")
    except OSError as e:
        sys.exit("stack-verify: GET http://%s%s failed: %s" % (base, path, e))


def metric(text, name):
    """The value of an unlabelled sample NAME in Prometheus text, or None."""
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def check_side_port(base, count):
    status, _, body = http_get(base, "/healthz")
    check(status == 200 and body.strip() == "ok", "/healthz: %d %r" % (status, body[:80]))
    status, _, body = http_get(base, "/readyz")
    check(status == 200, "/readyz: %d %r" % (status, body[:80]))
    status, ctype, text = http_get(base, "/metrics")
    check(status == 200 and ctype.startswith("text/plain; version=0.0.4"), "/metrics: %d %s" % (status, ctype))
    for name in ("queen_push_messages_total", "queen_pop_messages_total"):
        v = metric(text, name)
        check(v is not None and v >= count, "/metrics: %s is %s, expected at least %d" % (name, v, count))
    check(metric(text, "queen_ready") == 1, "/metrics: queen_ready is not 1")
    status, ctype, body = http_get(base, "/")
    check(status == 200 and ctype.startswith("text/html") and "<html" in body.lower(),
          "/: %d %s, not the console's page" % (status, ctype))
    print("stack-verify: the HTTP side port on %s serves /healthz, /readyz, /metrics and the console" % base)


def main():
    p = argparse.ArgumentParser(description="Check a running Queen compose stack with the Python example.")
    p.add_argument("--addr", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--count", type=int, default=500, help="messages to push and consume (default 500)")
    p.add_argument("--demo-count", type=int, default=100, help="messages the one-shot producer pushed to demo")
    p.add_argument("--http", help="host:port of the broker's HTTP side port to check as well")
    args = p.parse_args()
    conn_args = ["--addr", args.addr, "--ca", args.ca]
    run = uuid.uuid4().hex[:8]

    # 1. what the one-shot producer container pushed
    group = "stack-verify-" + run
    got = example("consumer", conn_args, ["--queue", "demo", "--group", group, "--count", str(args.demo_count),
                                          "--idle-timeout", "30"])
    check(len(got) == args.demo_count, "demo: %d messages, expected %d" % (len(got), args.demo_count))
    check_order(got, "demo")
    seqs = sorted(json.loads(m["payload"])["seq"] for m in got)
    check(seqs == list(range(args.demo_count)), "demo: the payloads are not seq 0..%d" % (args.demo_count - 1))
    print("stack-verify: the one-shot producer's %d messages were consumed" % len(got))

    # 2. push and consume through the published port
    queue = "stack-verify-" + run
    pushed = example("producer", conn_args, ["--queue", queue, "--count", str(args.count), "--partitions", "4",
                                             "--batch", "100"])
    check(len(pushed) == args.count and all(v["status"] == "QUEUED" for v in pushed),
          "push: expected %d QUEUED verdicts" % args.count)
    got = example("consumer", conn_args, ["--queue", queue, "--group", group, "--count", str(args.count),
                                          "--batch", "50", "--credits", "4", "--idle-timeout", "30"])
    check_order(got, queue)
    want = {(v["partition"], v["offset"]): (v["message_id"], v["payload"]) for v in pushed}
    have = {(m["partition"], m["offset"]): (m["message_id"], m["payload"]) for m in got}
    check(have == want, "%s: the consumer did not receive exactly what was pushed" % queue)
    print("stack-verify: pushed and consumed %d messages" % len(got))

    # 3. the acks were applied
    stubs = qe.load_stubs(os.path.join(ROOT, "proto"))
    conn = qe.Conn(argparse.Namespace(addr=args.addr, ca=args.ca, server_name=None, token=None, wait_ready=0),
                   stubs)
    for q in ("demo", queue):
        n = lag(conn, q, group)
        check(n == 0, "%s: group %s has lag %d after consuming" % (q, group, n))
    conn.close()
    print("stack-verify: lag 0 on demo and %s" % queue)

    # 4. the HTTP side port
    if args.http:
        check_side_port(args.http, args.count)


if __name__ == "__main__":
    main()
