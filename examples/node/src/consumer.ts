// Queen example consumer (Node.js): one Consume stream with credits and in-band acks.
//
//   node dist/src/consumer.js --addr localhost:6632 --queue demo --group demo-readers --count 100
//
// It subscribes as consumer group GROUP with CREDITS batches in flight, prints
// every message, and after each batch acknowledges what it processed on the same
// stream (one ack per partition: acking offset N completes the batch up to N) and
// grants one more credit. It stops after COUNT messages (0: never), on SIGINT or
// SIGTERM, or, with --idle-timeout, when nothing arrived for that long. Before it
// half-closes the stream it waits for the answers to its acks; messages it
// received but did not process are released by the broker when the stream ends
// and go to the group's next consumer.
//
// Exit status: 0 after a clean stop with every ack applied; 1 when an ack was not
// applied, the stream failed or the idle timeout passed; 2 for bad arguments or a
// broker that never became ready.

import type * as grpc from "@grpc/grpc-js";

import type { AckItem } from "../gen/queen/v1/AckItem";
import type { ConsumeRequest } from "../gen/queen/v1/ConsumeRequest";
import type { ConsumeResponse__Output } from "../gen/queen/v1/ConsumeResponse";
import type { PopResponse__Output } from "../gen/queen/v1/PopResponse";
import { connect, intOption, jsonInt, parseCommandLine, rpcFailure, strOption, type Connection } from "./common";

const ACK_WAIT_MS = 15000; // longest wait for the answers to outstanding acks when stopping

const USAGE = `usage: consumer.js [options]
Consume a Queen queue with credits and in-band acks.

  --queue NAME           queue name (default demo)
  --group NAME           consumer group (default example)
  --count N              stop after this many messages; 0 runs until SIGINT (default 0)
  --batch N              most messages per batch (default 100)
  --credits N            batches in flight (default 4)
  --idle-timeout SECONDS fail when no message arrives for this long; 0 waits forever (default 0)
`;

interface Options {
  queue: string;
  group: string;
  count: number;
  batch: number;
  credits: number;
  idleTimeoutMs: number;
  json: boolean;
}

/** The consumer's state machine, driven by stream events, signals and a timer. */
class Consumer {
  private call: grpc.ClientDuplexStream<ConsumeRequest, ConsumeResponse__Output>;
  private processed = 0;
  private pending = new Map<string, AckItem[]>(); // ack request_id -> its items
  private nextId = 1;
  private failures = 0;
  private stoppingSince = 0; // ms; 0 while running
  private closed = false; // half-closed by us
  private lastMessage = Date.now();
  private timer: NodeJS.Timeout;
  private finish!: (code: number) => void;
  readonly done: Promise<number>;

  constructor(
    conn: Connection,
    private o: Options,
  ) {
    this.done = new Promise((resolve) => (this.finish = resolve));
    this.call = conn.queue.Consume(conn.metadata);
    this.call.on("data", (r: ConsumeResponse__Output) => this.onResponse(r));
    this.call.on("status", (s: grpc.StatusObject) => this.onStatus(s));
    this.call.on("error", () => {}); // reported through "status"
    this.call.write({
      subscribe: { queue: o.queue, consumer_group: o.group, batch: o.batch, credits: o.credits },
    });
    this.timer = setInterval(() => this.tick(), 200);
  }

  stop(): void {
    if (this.stoppingSince === 0) this.stoppingSince = Date.now();
    this.maybeClose();
  }

  private reachedCount(): boolean {
    return this.o.count > 0 && this.processed >= this.o.count;
  }

  private onResponse(r: ConsumeResponse__Output): void {
    if (r.kind === "batch" && r.batch) this.onBatch(r.batch);
    else if (r.kind === "ack" && r.ack) {
      const items = this.pending.get(r.request_id);
      if (items === undefined) {
        this.warn(`an ack answer for unknown request ${r.request_id}`);
      } else {
        this.pending.delete(r.request_id);
        for (const res of r.ack.results) {
          if (res.outcome !== "ACK_OUTCOME_APPLIED" && res.outcome !== "ACK_OUTCOME_NOOP") {
            const it = items[res.index];
            this.warn(`ack of ${it?.partition_id} offset ${it?.offset}: ${res.outcome} ${res.error}`);
          }
        }
      }
      this.maybeClose();
    }
  }

  private onBatch(b: PopResponse__Output): void {
    this.lastMessage = Date.now();
    if (this.stoppingSince !== 0) return; // not processed, not acked: released when the stream ends
    const last = new Map<string, string>(); // partition_id -> last processed offset
    for (const m of b.messages) {
      if (this.reachedCount()) break;
      this.processed++;
      last.set(m.partition_id, m.offset);
      const payload = m.payload.toString("utf8");
      if (this.o.json) {
        process.stdout.write(
          JSON.stringify({
            queue: m.queue,
            partition: m.partition,
            partition_id: m.partition_id,
            offset: jsonInt(m.offset),
            message_id: m.message_id,
            transaction_id: m.transaction_id,
            payload,
          }) + "\n",
        );
      } else {
        const txn = m.transaction_id !== m.message_id ? ` txn=${m.transaction_id}` : "";
        process.stdout.write(`${m.queue}/${m.partition} offset=${m.offset} id=${m.message_id}${txn} payload=${payload}\n`);
      }
    }
    if (last.size > 0) {
      const items: AckItem[] = [...last].map(([partition_id, offset]) => ({
        partition_id,
        offset,
        status: "ACK_STATUS_COMPLETED",
        lease_id: b.lease_id,
      }));
      const id = this.nextId++;
      this.pending.set(String(id), items);
      this.call.write({ request_id: id, ack: { consumer_group: this.o.group, items } });
    }
    if (this.reachedCount()) this.stop();
    else this.call.write({ credits: 1 });
  }

  private maybeClose(): void {
    if (this.stoppingSince === 0 || this.closed || this.pending.size > 0) return;
    this.closed = true;
    this.call.end(); // half-close: the broker answers OK and releases what is still leased
  }

  private tick(): void {
    const now = Date.now();
    if (this.stoppingSince === 0 && this.o.idleTimeoutMs > 0 && now - this.lastMessage > this.o.idleTimeoutMs) {
      this.warn(`no message for ${this.o.idleTimeoutMs / 1000} s (received ${this.processed} of ${this.o.count})`);
      this.stop();
    } else if (this.stoppingSince !== 0 && now - this.stoppingSince > ACK_WAIT_MS) {
      this.warn(
        this.closed
          ? `the stream did not end within ${ACK_WAIT_MS / 1000} s of closing it`
          : `${this.pending.size} ack(s) unanswered after ${ACK_WAIT_MS / 1000} s`,
      );
      this.call.cancel();
    }
  }

  private onStatus(s: grpc.StatusObject): void {
    clearInterval(this.timer);
    if (!this.closed) {
      this.warn(`the stream ended early: ${s.code === 0 ? "by the broker" : rpcFailure(s)}`);
    } else if (s.code !== 0) {
      this.warn(`the stream failed: ${rpcFailure(s)}`);
    }
    process.stderr.write(`consumed ${this.processed} from ${this.o.queue} as ${this.o.group}\n`);
    this.finish(this.failures > 0 ? 1 : 0);
  }

  private warn(msg: string): void {
    this.failures++;
    process.stderr.write(`consumer: ${msg}\n`);
  }
}

async function main(): Promise<number> {
  const values = parseCommandLine(
    {
      queue: { type: "string" },
      group: { type: "string" },
      count: { type: "string" },
      batch: { type: "string" },
      credits: { type: "string" },
      "idle-timeout": { type: "string" },
    },
    USAGE,
  );
  const o: Options = {
    queue: strOption(values, "queue", "demo"),
    group: strOption(values, "group", "example"),
    count: intOption(values, "count", 0, 0),
    batch: intOption(values, "batch", 100, 1),
    credits: intOption(values, "credits", 4, 1),
    idleTimeoutMs: intOption(values, "idle-timeout", 0, 0) * 1000,
    json: values.json === true,
  };
  const conn = await connect(values);
  const consumer = new Consumer(conn, o);
  const onSignal = (sig: NodeJS.Signals) => {
    process.removeAllListeners(sig); // a second signal ends the process at once
    consumer.stop();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  const code = await consumer.done;
  process.removeAllListeners("SIGINT");
  process.removeAllListeners("SIGTERM");
  conn.close();
  return code;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e) => {
    process.stderr.write(`consumer: ${String((e as Error).stack ?? e)}\n`);
    process.exitCode = 1;
  },
);
