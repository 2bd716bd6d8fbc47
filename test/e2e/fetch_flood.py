"""A flood of large Fetches, in a process of its own so that the test measuring
another client's latency is not slowed by this one's Python (test_db_faults.py).

    python3 fetch_flood.py TARGET QUEUE CHANNELS INFLIGHT MAX_BYTES

Keeps INFLIGHT Fetches of MAX_BYTES from offset 0 of QUEUE's partition "big" in
flight on each of CHANNELS connections, each re-issued as soon as it is
answered, until stdin closes. Prints one line per answered Fetch:
"ok BYTES" or "err CODE", then "done" at the end.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from qsupport import Q, QG  # noqa: E402


def main():
    target, queue = sys.argv[1], sys.argv[2]
    nch, inflight, max_bytes = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    opts = [("grpc.max_receive_message_length", 64 << 20)]
    chans = [grpc.insecure_channel(target, options=opts + [("grpc.use_local_subchannel_pool", 1)])
             for _ in range(nch)]
    stubs = [QG.QueueServiceStub(c) for c in chans]
    req = Q.FetchRequest(entries=[Q.FetchEntry(queue=queue, partition="big", offset=0,
                                               max_bytes=max_bytes)])
    stop = threading.Event()
    out = threading.Lock()
    pending = [0]
    idle = threading.Condition(out)

    def issue(stub):
        with out:
            if stop.is_set():
                return
            pending[0] += 1
        f = stub.Fetch.future(req, timeout=120)
        f.add_done_callback(lambda f: done(stub, f))

    def done(stub, f):
        try:
            r = f.result()
            line = "ok %d" % sum(len(m.payload) for m in r.results[0].records)
        except grpc.RpcError as e:
            line = "err %s" % e.code().name
        with out:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            pending[0] -= 1
            idle.notify_all()
        issue(stub)

    for s in stubs:
        for _ in range(inflight):
            issue(s)
    sys.stdin.read()  # until the test closes it
    with out:
        stop.set()
        idle.wait_for(lambda: pending[0] == 0, timeout=120)
        sys.stdout.write("done\n")
        sys.stdout.flush()
    for c in chans:
        c.close()


if __name__ == "__main__":
    main()
