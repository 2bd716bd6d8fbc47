#!/usr/bin/python3
"""Queen example consumer: one Consume stream with credits and in-band acks.

    python3 consumer.py --addr localhost:6632 --queue demo --group demo-readers --count 100

It subscribes as consumer group GROUP with CREDITS batches in flight, prints
every message, and after each batch acknowledges what it processed on the same
stream (one ack per partition: acking offset N completes the batch up to N)
and grants one more credit. It stops after COUNT messages (0: never), on SIGINT
or SIGTERM, or, with --idle-timeout, when nothing arrived for that long. Before
it half-closes the stream it waits for the answers to its acks; messages it
received but did not process are released by the broker when the stream ends
and go to the group's next consumer.

Exit status: 0 after a clean stop with every ack applied; 1 when an ack was not
applied, the stream failed or the idle timeout passed; 2 for bad arguments or a
broker that never became ready.
"""

import argparse
import json
import os
import queue as queuelib
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import queen_example as qe  # noqa: E402

ACK_WAIT_S = 15  # longest wait for the answers to outstanding acks when stopping


def parse_args():
    p = argparse.ArgumentParser(description="Consume a Queen queue with credits and in-band acks.")
    qe.connection_args(p)
    p.add_argument("--queue", default="demo", help="queue name (default demo)")
    p.add_argument("--group", default="example", help="consumer group (default example)")
    p.add_argument("--count", type=qe.non_negative, default=0,
                   help="stop after this many messages; 0 runs until SIGINT (default 0)")
    p.add_argument("--batch", type=qe.positive, default=100, help="most messages per batch (default 100)")
    p.add_argument("--credits", type=qe.positive, default=4, help="batches in flight (default 4)")
    p.add_argument("--idle-timeout", type=qe.non_negative, default=0, metavar="SECONDS",
                   help="fail when no message arrives for this long; 0 waits forever (default 0)")
    return p.parse_args()


class Stream:
    """A Consume call: requests are queued by the main thread, responses read by
    a thread into an inbox (so the main thread can wait with a timeout and see
    signals)."""

    END = object()

    def __init__(self, conn, first):
        self.out = queuelib.Queue()
        self.inbox = queuelib.Queue()
        self.error = None
        self.out.put(first)
        self.call = conn.queue.Consume(self._requests(), metadata=conn.metadata)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _requests(self):
        while True:
            r = self.out.get()
            if r is self.END:
                return
            yield r

    def _read(self):
        try:
            for r in self.call:
                self.inbox.put(r)
        except Exception as e:  # grpc.RpcError, or anything else that ended the stream
            self.error = e
        finally:
            self.inbox.put(self.END)

    def send(self, req):
        self.out.put(req)

    def half_close(self):
        self.out.put(self.END)


def main():
    args = parse_args()
    stubs = qe.load_stubs(args.proto_dir)
    Q, C = stubs.queue, stubs.common
    conn = qe.Conn(args, stubs)

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()
        signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    sub = Q.ConsumeSubscribe(queue=args.queue, consumer_group=args.group, batch=args.batch,
                             credits=args.credits)
    stream = Stream(conn, Q.ConsumeRequest(subscribe=sub))
    outcome_name = Q.AckOutcome.Name
    ok_outcomes = (Q.ACK_OUTCOME_APPLIED, Q.ACK_OUTCOME_NOOP)

    processed = 0
    pending = {}  # ack request_id -> messages it acknowledges
    next_id = 1
    failures = 0
    ended = False  # the server ended the stream
    last_message = time.monotonic()
    stopping_since = None

    while True:
        if stopping_since is None and (stop.is_set() or (args.count and processed >= args.count)):
            stopping_since = time.monotonic()
        if stopping_since is not None and not pending:
            break
        if stopping_since is not None and time.monotonic() - stopping_since > ACK_WAIT_S:
            print("consumer: %d ack(s) unanswered after %d s" % (len(pending), ACK_WAIT_S), file=sys.stderr)
            failures += 1
            break
        try:
            r = stream.inbox.get(timeout=0.2)
        except queuelib.Empty:
            if (stopping_since is None and args.idle_timeout and
                    time.monotonic() - last_message > args.idle_timeout):
                print("consumer: no message for %d s (received %d of %d)"
                      % (args.idle_timeout, processed, args.count), file=sys.stderr)
                failures += 1
                stop.set()
            continue
        if r is Stream.END:
            ended = True
            break
        kind = r.WhichOneof("kind")
        if kind == "batch":
            last_message = time.monotonic()
            if stopping_since is not None:
                continue  # not processed, not acked: released when the stream ends
            last = {}  # partition_id -> last processed offset in this batch
            for m in r.batch.messages:
                if args.count and processed >= args.count:
                    break
                processed += 1
                last[m.partition_id] = m.offset
                payload = m.payload.decode("utf-8", "replace")
                if args.json:
                    print(json.dumps({"queue": m.queue, "partition": m.partition,
                                      "partition_id": m.partition_id, "offset": m.offset,
                                      "message_id": m.message_id, "transaction_id": m.transaction_id,
                                      "payload": payload}), flush=True)
                else:
                    txn = " txn=" + m.transaction_id if m.transaction_id != m.message_id else ""
                    print("%s/%s offset=%d id=%s%s payload=%s" % (m.queue, m.partition, m.offset,
                                                                 m.message_id, txn, payload), flush=True)
            if last:
                items = [Q.AckItem(partition_id=pid, offset=off, status=C.ACK_STATUS_COMPLETED,
                                   lease_id=r.batch.lease_id) for pid, off in last.items()]
                stream.send(Q.ConsumeRequest(request_id=next_id,
                                             ack=Q.AckRequest(consumer_group=args.group, items=items)))
                pending[next_id] = items
                next_id += 1
            if not (args.count and processed >= args.count) and not stop.is_set():
                stream.send(Q.ConsumeRequest(credits=1))
        elif kind == "ack":
            items = pending.pop(r.request_id, None)
            if items is None:
                print("consumer: an ack answer for unknown request %d" % r.request_id, file=sys.stderr)
                failures += 1
                continue
            for res in r.ack.results:
                if res.outcome not in ok_outcomes:
                    it = items[res.index]
                    print("consumer: ack of %s offset %d: %s %s" % (it.partition_id, it.offset,
                                                                   outcome_name(res.outcome), res.error),
                          file=sys.stderr)
                    failures += 1

    if ended:
        # The stream ended before this consumer stopped: the broker closed it.
        why = qe.rpc_failure(stream.error) if hasattr(stream.error, "code") else repr(stream.error)
        print("consumer: the stream ended early: %s" % (why if stream.error else "by the broker"),
              file=sys.stderr)
        failures += 1
    else:
        stream.half_close()  # the broker answers OK and releases what is still leased
        stream.reader.join(ACK_WAIT_S)
        if stream.reader.is_alive():
            print("consumer: the stream did not end within %d s of closing it" % ACK_WAIT_S, file=sys.stderr)
            failures += 1
        elif stream.error is not None:
            why = qe.rpc_failure(stream.error) if hasattr(stream.error, "code") else repr(stream.error)
            print("consumer: the stream failed: %s" % why, file=sys.stderr)
            failures += 1
    conn.close()
    print("consumed %d from %s as %s" % (processed, args.queue, args.group), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
