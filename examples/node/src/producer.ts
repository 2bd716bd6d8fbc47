// Queen example producer (Node.js): pushes COUNT messages to a queue, spread over
// partitions, every K-th one with a transaction id, and prints each verdict.
//
//   node dist/src/producer.js --addr localhost:6632 --queue demo --count 100
//   node dist/src/producer.js --addr localhost:6643 --ca ca.pem --queue demo --count 100
//
// Message i goes to partition "p<i mod PARTITIONS>" with the payload
// {"seq":i,"run":RUN,"from":"node"}; when i is a multiple of --txn-every it carries
// the transaction id "<TXN_PREFIX>-<i>". Running again with the same --txn-prefix
// shows deduplication: those items come back DUPLICATE with the original's offset
// and message id, and nothing is written for them.
//
// Exit status: 0 when every item was QUEUED or DUPLICATE, 1 when an item failed or
// a call failed, 2 for bad arguments or a broker that never became ready.

import { randomBytes } from "node:crypto";

import type { PushItem } from "../gen/queen/v1/PushItem";
import type { PushResponse__Output } from "../gen/queen/v1/PushResponse";
import { connect, fail, intOption, jsonInt, parseCommandLine, rpcFailure, strOption, unary } from "./common";

const USAGE = `usage: producer.js [options]
Push messages to a Queen queue and print the verdicts.

  --queue NAME           queue name (created by the first push; default demo)
  --count N              messages to push (default 10)
  --partitions N         spread over partitions p0..pN-1 (default 4)
  --batch N              items per Push call (default 100)
  --txn-every K          every K-th message carries a transaction id; 0 for none (default 2)
  --txn-prefix PREFIX    transaction id prefix (default: random per run); reuse it to see duplicates
`;

async function main(): Promise<number> {
  const values = parseCommandLine(
    {
      queue: { type: "string" },
      count: { type: "string" },
      partitions: { type: "string" },
      batch: { type: "string" },
      "txn-every": { type: "string" },
      "txn-prefix": { type: "string" },
    },
    USAGE,
  );
  const queue = strOption(values, "queue", "demo");
  const count = intOption(values, "count", 10, 0);
  const partitions = intOption(values, "partitions", 4, 1);
  const batch = intOption(values, "batch", 100, 1);
  const txnEvery = intOption(values, "txn-every", 2, 0);
  const run = randomBytes(4).toString("hex");
  const prefix = strOption(values, "txn-prefix", `node-${run}`);
  const json = values.json === true;

  const conn = await connect(values);
  const counts: Record<string, number> = { QUEUED: 0, DUPLICATE: 0, FAILED: 0 };
  for (let start = 0; start < count; start += batch) {
    const items: PushItem[] = [];
    for (let i = start; i < Math.min(start + batch, count); i++) {
      const item: PushItem = {
        queue,
        partition: `p${i % partitions}`,
        payload: Buffer.from(JSON.stringify({ seq: i, run, from: "node" })),
      };
      if (txnEvery > 0 && i % txnEvery === 0) item.transaction_id = `${prefix}-${i}`;
      items.push(item);
    }
    let resp: PushResponse__Output;
    try {
      resp = await unary((cb) => conn.queue.Push({ items }, conn.metadata, { deadline: Date.now() + 30000 }, cb));
    } catch (e) {
      conn.close();
      fail(`push of items ${start}..${start + items.length - 1} failed: ${rpcFailure(e)}`, 1);
    }
    for (const r of resp.results) {
      const item = items[r.index];
      const status = String(r.status).replace("PUSH_STATUS_", "");
      counts[status] = (counts[status] ?? 0) + 1;
      const payload = Buffer.from(item.payload as Buffer).toString("utf8");
      if (json) {
        process.stdout.write(
          JSON.stringify({
            seq: start + r.index,
            status,
            queue: r.queue,
            partition: r.partition,
            partition_id: r.partition_id,
            offset: jsonInt(r.offset),
            message_id: r.message_id,
            transaction_id: r.transaction_id,
            payload,
            error: r.error,
          }) + "\n",
        );
      } else {
        let line = `#${start + r.index} ${r.queue}/${r.partition} ${status} offset=${r.offset} id=${r.message_id}`;
        if (item.transaction_id) line += ` txn=${item.transaction_id}`;
        if (r.error) line += ` error=${r.error}`;
        process.stdout.write(line + "\n");
      }
    }
  }
  conn.close();
  process.stderr.write(
    `pushed ${count} to ${queue}: ${counts.QUEUED} queued, ${counts.DUPLICATE} duplicate, ` +
      `${count - counts.QUEUED - counts.DUPLICATE} failed\n`,
  );
  return counts.QUEUED + counts.DUPLICATE === count ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e) => fail(String((e as Error).stack ?? e), 1),
);
