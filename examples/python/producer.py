#!/usr/bin/python3
"""Queen example producer: pushes COUNT messages to a queue, spread over
partitions, every K-th one with a transaction id, and prints each verdict.

    python3 producer.py --addr localhost:6632 --queue demo --count 100
    python3 producer.py --addr localhost:6643 --ca ca.pem --queue demo --count 100

Message i goes to partition "p<i mod PARTITIONS>" with the payload
{"seq": i, "run": RUN, "from": "python"}; when i is a multiple of --txn-every it
carries the transaction id "<TXN_PREFIX>-<i>". Running again with the same
--txn-prefix shows the broker's deduplication: those items come back DUPLICATE
with the original's offset and message id, and nothing is written for them.

Exit status: 0 when every item was QUEUED or DUPLICATE, 1 when an item FAILED or
a call failed, 2 for bad arguments or a broker that never became ready.
"""

import argparse
import json
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import queen_example as qe  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description="Push messages to a Queen queue and print the verdicts.")
    qe.connection_args(p)
    p.add_argument("--queue", default="demo", help="queue name (created by the first push; default demo)")
    p.add_argument("--count", type=qe.non_negative, default=10, help="messages to push (default 10)")
    p.add_argument("--partitions", type=qe.positive, default=4,
                   help="spread over partitions p0..pN-1 (default 4)")
    p.add_argument("--batch", type=qe.positive, default=100, help="items per Push call (default 100)")
    p.add_argument("--txn-every", type=qe.non_negative, default=2, metavar="K",
                   help="every K-th message carries a transaction id; 0 for none (default 2)")
    p.add_argument("--txn-prefix", default=None,
                   help="transaction id prefix (default: random per run); reuse it to see duplicates")
    return p.parse_args()


def main():
    args = parse_args()
    stubs = qe.load_stubs(args.proto_dir)
    Q = stubs.queue
    conn = qe.Conn(args, stubs)
    run = uuid.uuid4().hex[:8]
    prefix = args.txn_prefix if args.txn_prefix is not None else "py-" + run
    status_name = Q.PushStatus.Name

    counts = {"QUEUED": 0, "DUPLICATE": 0, "FAILED": 0}
    for start in range(0, args.count, args.batch):
        items = []
        for i in range(start, min(start + args.batch, args.count)):
            payload = json.dumps({"seq": i, "run": run, "from": "python"}, separators=(",", ":"))
            it = Q.PushItem(queue=args.queue, partition="p%d" % (i % args.partitions),
                            payload=payload.encode())
            if args.txn_every and i % args.txn_every == 0:
                it.transaction_id = "%s-%d" % (prefix, i)
            items.append(it)
        try:
            resp = conn.queue.Push(Q.PushRequest(items=items), timeout=30, metadata=conn.metadata)
        except conn.grpc.RpcError as e:
            qe.fail("push of items %d..%d failed: %s" % (start, start + len(items) - 1, qe.rpc_failure(e)), 1)
        for r in resp.results:
            it = items[r.index]
            status = status_name(r.status).replace("PUSH_STATUS_", "")
            counts[status] = counts.get(status, 0) + 1
            if args.json:
                print(json.dumps({"seq": start + r.index, "status": status, "queue": r.queue,
                                  "partition": r.partition, "partition_id": r.partition_id,
                                  "offset": r.offset, "message_id": r.message_id,
                                  "transaction_id": r.transaction_id,
                                  "payload": it.payload.decode("utf-8", "replace"), "error": r.error}))
            else:
                line = "#%d %s/%s %s offset=%d id=%s" % (start + r.index, r.queue, r.partition, status,
                                                        r.offset, r.message_id)
                if it.transaction_id:
                    line += " txn=" + it.transaction_id
                if r.error:
                    line += " error=" + r.error
                print(line)
    conn.close()
    print("pushed %d to %s: %d queued, %d duplicate, %d failed"
          % (args.count, args.queue, counts["QUEUED"], counts["DUPLICATE"],
             args.count - counts["QUEUED"] - counts["DUPLICATE"]),
          file=sys.stderr)
    return 0 if counts["QUEUED"] + counts["DUPLICATE"] == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
