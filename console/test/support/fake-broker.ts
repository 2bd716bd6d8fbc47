// An in-memory broker behind connect's router transport: enough of AdminService and
// QueueService.Push for the console's pages to run in tests without a broker. It
// keeps offsets, cursors, dead letters and counters the way the broker defines them
// (proto/queen/v1/*.proto) at a toy scale, and can demand a token or fail calls.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createRouterTransport, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import {
  AdminService,
  ConsumerGroupInfoSchema,
  DeadLetterSchema,
  GroupState,
  PartitionInfoSchema,
  QueueInfoSchema,
  QueueStatsSchema,
  type DeadLetter,
} from "../../src/gen/queen/v1/admin_pb";
import { PushResultSchema, PushStatus, QueueService } from "../../src/gen/queen/v1/queue_pb";
import { partitionLag } from "../../src/rates";

interface StoredMessage {
  offset: bigint;
  payload: Uint8Array;
  transactionId: string;
  createdAtUs: bigint;
}
interface Partition {
  id: string;
  name: string;
  messages: StoredMessage[];
}
interface Queue {
  name: string;
  partitions: Map<string, Partition>;
  createdAtUs: bigint;
}
interface Cursor {
  committed: bigint;
  consumed: bigint;
}

let ids = 0;
const uuid = () => `00000000-0000-7000-8000-${String(++ids).padStart(12, "0")}`;

export class FakeBroker {
  queues = new Map<string, Queue>();
  /** key: queue \0 group -> partition name -> cursor */
  cursors = new Map<string, Map<string, Cursor>>();
  dead: DeadLetter[] = [];
  pushed = 0n;
  delivered = 0n;
  rpcs = 0n;
  /** When set, every call must carry `authorization: Bearer <token>`. */
  requireToken = "";
  /** Methods (e.g. "ReplayDeadLetter") that answer PERMISSION_DENIED. */
  denied = new Set<string>();
  /** Every call fails with this code while set. */
  failWith: Code | null = null;
  /** Authorization header of the last call. */
  lastAuthorization: string | null = null;
  /** Microseconds "now" for new segments. */
  nowUs = 1_700_000_000_000_000n;

  private guard(method: string, ctx: HandlerContext) {
    this.rpcs++;
    this.lastAuthorization = ctx.requestHeader.get("authorization");
    if (this.failWith !== null) throw new ConnectError("injected failure", this.failWith);
    if (this.requireToken && this.lastAuthorization !== `Bearer ${this.requireToken}`)
      throw new ConnectError("missing or invalid bearer token", Code.Unauthenticated);
    if (this.denied.has(method)) throw new ConnectError(`token lacks the admin scope for ${method}`, Code.PermissionDenied);
  }

  private queue(name: string): Queue {
    const q = this.queues.get(name);
    if (q === undefined) throw new ConnectError("queue not found", Code.NotFound);
    return q;
  }

  /** Appends messages as one segment (same created time). */
  push(queue: string, partition: string, payloads: (string | Uint8Array)[], txPrefix = "tx"): StoredMessage[] {
    let q = this.queues.get(queue);
    if (q === undefined) {
      q = { name: queue, partitions: new Map(), createdAtUs: this.nowUs };
      this.queues.set(queue, q);
    }
    const pname = partition || "Default";
    let p = q.partitions.get(pname);
    if (p === undefined) {
      p = { id: uuid(), name: pname, messages: [] };
      q.partitions.set(pname, p);
    }
    const out: StoredMessage[] = [];
    for (const pl of payloads) {
      const m = {
        offset: BigInt(p.messages.length),
        payload: typeof pl === "string" ? new TextEncoder().encode(pl) : pl,
        transactionId: `${txPrefix}-${p.messages.length}`,
        createdAtUs: this.nowUs,
      };
      p.messages.push(m);
      out.push(m);
    }
    this.pushed += BigInt(payloads.length);
    this.nowUs += 1_000_000n;
    return out;
  }

  /** Sets a group's cursor on a partition (as acks would). */
  commit(queue: string, group: string, partition: string, committed: bigint) {
    const key = `${queue}\u0000${group}`;
    const m = this.cursors.get(key) ?? new Map<string, Cursor>();
    const prev = m.get(partition);
    const consumed = (prev?.consumed ?? 0n) + (committed - (prev?.committed ?? -1n));
    m.set(partition, { committed, consumed: consumed > 0n ? consumed : 0n });
    this.cursors.set(key, m);
    this.delivered += committed - (prev?.committed ?? -1n);
  }

  /** Files a message in the dead-letter queue. */
  deadLetter(queue: string, group: string, partition: string, offset: bigint, error = "Retries exhausted") {
    const p = this.queue(queue).partitions.get(partition)!;
    const m = p.messages[Number(offset)];
    const d = create(DeadLetterSchema, {
      id: uuid(),
      queue,
      partition,
      partitionId: p.id,
      consumerGroup: group,
      offset,
      messageId: uuid(),
      transactionId: m.transactionId,
      payload: m.payload,
      error,
      retryCount: 3,
      failedAtUs: this.nowUs,
    });
    this.dead.unshift(d);
    return d;
  }

  private last(p: Partition): bigint {
    return BigInt(p.messages.length) - 1n;
  }

  private groupInfo(queue: Queue, group: string) {
    const cur = this.cursors.get(`${queue.name}\u0000${group}`);
    if (cur === undefined) return null;
    let total = 0n;
    const partitions = [...queue.partitions.values()].map((p) => {
      const c = cur.get(p.name) ?? { committed: -1n, consumed: 0n };
      const lag = partitionLag(this.last(p), 0n, c.committed);
      total += lag;
      return {
        partition: p.name,
        partitionId: p.id,
        committed: c.committed,
        lastOffset: this.last(p),
        lag,
        timeLagSeconds: lag > 0n ? 30n : 0n,
        totalConsumed: c.consumed,
      };
    });
    return create(ConsumerGroupInfoSchema, {
      consumerGroup: group,
      queue: queue.name,
      partitions,
      totalLag: total,
      maxTimeLagSeconds: total > 0n ? 30n : 0n,
      state: GroupState.STABLE,
    });
  }

  private groupsOf(queue: string): string[] {
    const out: string[] = [];
    for (const k of this.cursors.keys()) {
      const [q, g] = k.split("\u0000");
      if (q === queue) out.push(g);
    }
    return out.sort();
  }

  private queueInfo(q: Queue) {
    let messages = 0n;
    for (const p of q.partitions.values()) messages += BigInt(p.messages.length);
    return create(QueueInfoSchema, {
      queue: q.name,
      queueId: `q-${q.name}`,
      createdAtUs: q.createdAtUs,
      partitions: q.partitions.size,
      segments: messages > 0n ? 1n : 0n,
      messages,
      storage: "segments",
      options: { RetryLimit: { case: "retryLimit", value: 3 }, LeaseTime: { case: "leaseTime", value: 60 } },
    });
  }

  /** Pending for the slowest group (or all messages with no group), as GetStats reports it. */
  private pending(q: Queue): bigint {
    const groups = this.groupsOf(q.name);
    let all = 0n;
    for (const p of q.partitions.values()) all += BigInt(p.messages.length);
    if (groups.length === 0) return all;
    let max = 0n;
    for (const g of groups) {
      const lag = this.groupInfo(q, g)!.totalLag;
      if (lag > max) max = lag;
    }
    return max;
  }

  transport(interceptors: Interceptor[] = []) {
    return createRouterTransport(
      ({ service }) => {
        service(AdminService, {
          configureQueue: (req, ctx) => {
            this.guard("ConfigureQueue", ctx);
            const created = !this.queues.has(req.queue);
            if (created) this.queues.set(req.queue, { name: req.queue, partitions: new Map(), createdAtUs: this.nowUs });
            return { queue: this.queueInfo(this.queue(req.queue)), created };
          },
          getQueue: (req, ctx) => {
            this.guard("GetQueue", ctx);
            const q = this.queue(req.queue);
            const group = req.consumerGroup || "__QUEUE_MODE__";
            const cur = this.cursors.get(`${q.name}\u0000${group}`);
            let depth = 0n;
            const all = [...q.partitions.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
            for (const p of all) depth += partitionLag(this.last(p), 0n, cur?.get(p.name)?.committed ?? -1n);
            // keyset paging as the broker does it: the token names the last partition shown
            const size = Math.min(req.pageSize || 100, 1000);
            const after = req.pageToken ? req.pageToken.replace(/^after:/, "") : undefined;
            const rest = after === undefined ? all : all.filter((p) => p.name > after);
            const page = rest.slice(0, size);
            const nextPageToken = rest.length > size ? `after:${page[page.length - 1].name}` : "";
            const partitions = page.map((p) => {
              const committed = cur?.get(p.name)?.committed ?? -1n;
              const d = partitionLag(this.last(p), 0n, committed);
              return create(PartitionInfoSchema, {
                partition: p.name,
                partitionId: p.id,
                lastOffset: this.last(p),
                logStart: 0n,
                committed,
                depth: d,
                lastWriteAtUs: p.messages.at(-1)?.createdAtUs ?? 0n,
              });
            });
            return { queue: this.queueInfo(q), partitions, depth, nextPageToken };
          },
          listQueues: (_req, ctx) => {
            this.guard("ListQueues", ctx);
            return { queues: [...this.queues.values()].sort((a, b) => a.name.localeCompare(b.name)).map((q) => this.queueInfo(q)) };
          },
          deleteQueue: (req, ctx) => {
            this.guard("DeleteQueue", ctx);
            return { existed: this.queues.delete(req.queue) };
          },
          listConsumerGroups: (req, ctx) => {
            this.guard("ListConsumerGroups", ctx);
            const groups = [];
            for (const q of this.queues.values()) {
              if (req.queue && q.name !== req.queue) continue;
              for (const g of this.groupsOf(q.name)) {
                if (req.consumerGroup && g !== req.consumerGroup) continue;
                groups.push(this.groupInfo(q, g)!);
              }
            }
            return { groups };
          },
          seekConsumerGroup: (req, ctx) => {
            this.guard("SeekConsumerGroup", ctx);
            const q = this.queue(req.queue);
            const cur = this.cursors.get(`${q.name}\u0000${req.consumerGroup}`);
            if (cur === undefined) throw new ConnectError("consumer group not found", Code.NotFound);
            let n = 0;
            for (const p of q.partitions.values()) {
              if (req.partition && p.name !== req.partition) continue;
              let committed: bigint;
              if (req.target.case === "toEnd") committed = this.last(p);
              else if (req.target.case === "toTimestampUs") {
                const ts = req.target.value;
                const first = p.messages.find((m) => m.createdAtUs >= ts);
                committed = first === undefined ? this.last(p) : first.offset - 1n;
              } else throw new ConnectError("target is required", Code.InvalidArgument);
              const c = cur.get(p.name) ?? { committed: -1n, consumed: 0n };
              cur.set(p.name, { committed, consumed: c.consumed });
              n++;
            }
            return { partitionsUpdated: n };
          },
          deleteConsumerGroup: (req, ctx) => {
            this.guard("DeleteConsumerGroup", ctx);
            const key = `${req.queue}\u0000${req.consumerGroup}`;
            const n = this.cursors.get(key)?.size ?? 0;
            this.cursors.delete(key);
            return { partitionsDeleted: n };
          },
          listDeadLetters: (req, ctx) => {
            this.guard("ListDeadLetters", ctx);
            const all = this.dead.filter(
              (d) =>
                (!req.queue || d.queue === req.queue) &&
                (!req.consumerGroup || d.consumerGroup === req.consumerGroup) &&
                (!req.partition || d.partition === req.partition),
            );
            const limit = req.limit === 0 ? 100 : Math.min(req.limit, 1000);
            return { deadLetters: all.slice(req.offset, req.offset + limit) };
          },
          deleteDeadLetter: (req, ctx) => {
            this.guard("DeleteDeadLetter", ctx);
            const before = this.dead.length;
            if (req.target.case === "id") {
              const id = req.target.value;
              this.dead = this.dead.filter((d) => d.id !== id);
            }
            const deleted = before - this.dead.length;
            if (deleted === 0) throw new ConnectError("dead letter not found", Code.NotFound);
            return { deleted };
          },
          replayDeadLetter: (req, ctx) => {
            this.guard("ReplayDeadLetter", ctx);
            const d = this.dead.find((x) => x.id === req.id);
            if (d === undefined) throw new ConnectError("dead letter not found", Code.NotFound);
            const [m] = this.push(d.queue, d.partition, [d.payload]);
            m.transactionId = `dlq:${d.id}`;
            this.dead = this.dead.filter((x) => x.id !== req.id);
            return {
              replayedAs: create(PushResultSchema, {
                status: PushStatus.QUEUED,
                queue: d.queue,
                partition: d.partition,
                partitionId: d.partitionId,
                offset: m.offset,
                transactionId: m.transactionId,
              }),
              deadLetterRemoved: true,
            };
          },
          getStats: (req, ctx) => {
            this.guard("GetStats", ctx);
            const queues = [...this.queues.values()]
              .filter((q) => !req.queue || q.name === req.queue)
              .map((q) => {
                const info = this.queueInfo(q);
                return create(QueueStatsSchema, {
                  queue: q.name,
                  partitions: info.partitions,
                  messages: info.messages,
                  segments: info.segments,
                  pending: this.pending(q),
                  deadLetters: BigInt(this.dead.filter((d) => d.queue === q.name).length),
                  consumerGroups: this.groupsOf(q.name).length,
                  bytes: info.messages * 100n,
                });
              });
            return {
              queues,
              totalMessages: queues.reduce((a, q) => a + q.messages, 0n),
              totalPending: queues.reduce((a, q) => a + q.pending, 0n),
              totalDeadLetters: BigInt(this.dead.length),
              uptimeSeconds: 42n,
              rpcs: this.rpcs,
              pushed: this.pushed,
              delivered: this.delivered,
            };
          },
        });
        service(QueueService, {
          push: (req, ctx) => {
            this.guard("Push", ctx);
            return {
              results: req.items.map((it, index) => {
                const [m] = this.push(it.queue, it.partition, [it.payload]);
                return { index, status: PushStatus.QUEUED, queue: it.queue, offset: m.offset };
              }),
            };
          },
        });
      },
      { transport: { interceptors } },
    );
  }
}
