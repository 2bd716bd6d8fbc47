#!/usr/bin/env python3
"""Samples a broker's /metrics while a bench_e2e cell runs, to tell where a call's time goes.

    bench/e2e/sample_metrics.py --http PORT [--delay S] [--seconds S] [--interval S]

After --delay seconds it scrapes every --interval seconds for --seconds and prints:
- the storage pool: mean calls waiting for a connection and in flight, calls completed per
  second, and by Little's law the mean wait for a connection and the mean database round trip;
- for Push, Pop and Ack: the broker-side duration (request headers to status) as the cumulative
  fraction of the window's calls per histogram bucket, and the buckets holding p50 and p99.
Compare with bench_e2e's push_p50_ms / ack_p50_ms (the client's round trip): the difference is
time outside the broker's call (the client, the sockets, a loop turn before the headers are read).
"""
import argparse
import re
import time
import urllib.request


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        return r.read().decode()


def value(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else 0.0


def buckets(text, method):
    """{upper bound: cumulative count} of queen_rpc_duration_seconds for method, any service."""
    out = {}
    pat = r'^queen_rpc_duration_seconds_bucket\{([^}]*)\} (\S+)$'
    for m in re.finditer(pat, text, re.M):
        if 'method="%s"' % method not in m.group(1):
            continue
        le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
        key = float("inf") if le == "+Inf" else float(le)
        out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", type=int, required=True, help="the broker's QUEEN_HTTP_PORT")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.2)
    a = ap.parse_args()
    time.sleep(a.delay)
    first = scrape(a.http)
    start = time.monotonic()
    waiting = inflight = 0.0
    n = 0
    while time.monotonic() - start < a.seconds:
        time.sleep(a.interval)
        t = scrape(a.http)
        waiting += value(t, "queen_db_calls_waiting")
        inflight += value(t, "queen_db_calls_in_flight")
        n += 1
    last = scrape(a.http)
    elapsed = time.monotonic() - start
    calls = (value(last, "queen_db_calls_total") - value(first, "queen_db_calls_total")) / elapsed
    if n and calls > 0:
        w, f = waiting / n, inflight / n
        print("db: waiting %.2f in_flight %.2f calls/s %.0f -> wait %.2f ms, round trip %.2f ms"
              % (w, f, calls, 1000 * w / calls, 1000 * f / calls))
    for method in ("Push", "Pop", "Ack"):
        b0, b1 = buckets(first, method), buckets(last, method)
        les = sorted(b1)
        total = b1[les[-1]] - b0.get(les[-1], 0.0) if les else 0.0
        if total <= 0:
            continue
        cdf = [(le, (b1[le] - b0.get(le, 0.0)) / total) for le in les]
        p50 = next(le for le, c in cdf if c >= 0.5)
        p99 = next(le for le, c in cdf if c >= 0.99)
        print("%s: %d calls, p50 <= %g s, p99 <= %g s; cdf %s" % (
            method, total, p50, p99,
            " ".join("%g:%.2f" % (le, c) for le, c in cdf if le <= 0.5)))


if __name__ == "__main__":
    main()
