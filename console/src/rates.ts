// Rates from successive samples of counters, and lag summaries per queue.
//
// The admin API reports levels and counters, not rates: a rate is the change of a
// counter between two polls divided by the time between them. A counter that went
// down (broker restarted, retention deleted segments) gives no rate for that step
// rather than a negative or invented one.

import type { ConsumerGroupInfo } from "./gen/queen/v1/admin_pb";

export interface Sample {
  /** Milliseconds (any monotonic clock). */
  t: number;
  v: number;
}

/** Change per second between two samples; null when it cannot be known. */
export function rateBetween(prev: Sample | undefined, cur: Sample): number | null {
  if (prev === undefined) return null;
  const dt = (cur.t - prev.t) / 1000;
  if (!(dt > 0)) return null;
  const dv = cur.v - prev.v;
  if (dv < 0) return null;
  return dv / dt;
}

/** Keeps the last sample per key and answers the rate since it. */
export class RateTracker {
  private last = new Map<string, Sample>();

  /** Records `v` at time `t` and returns the rate since the previous sample of `key`. */
  update(key: string, t: number, v: number | bigint): number | null {
    const cur = { t, v: Number(v) };
    const r = rateBetween(this.last.get(key), cur);
    this.last.set(key, cur);
    return r;
  }

  /** Forgets keys not in `keep` (deleted queues, groups). */
  retain(keep: Set<string>): void {
    for (const k of this.last.keys()) if (!keep.has(k)) this.last.delete(k);
  }
}

/** A fixed-length history of (t, value) points for the live chart. */
export class Series {
  readonly t: number[] = [];
  readonly v: (number | null)[] = [];
  constructor(readonly max: number) {}
  push(t: number, v: number | null): void {
    this.t.push(t);
    this.v.push(v);
    if (this.t.length > this.max) {
      this.t.shift();
      this.v.shift();
    }
  }
}

export interface GroupLag {
  group: string;
  queue: string;
  /** Messages retained and not consumed by the group, over all partitions. */
  lag: number;
  /** Age in seconds of the oldest unconsumed message. */
  timeLagSeconds: number;
  /** Messages the group consumed per second since the last poll (null: unknown). */
  consumeRate: number | null;
  /** Seconds until the lag reaches 0 at the current rates; null: not draining. */
  drainSeconds: number | null;
  lagging: boolean;
  partitions: number;
}

/**
 * Seconds to drain `lag` when consuming at `consumeRate` while `inRate` arrives.
 * 0 for no lag; null when the backlog is not shrinking or a rate is unknown.
 */
export function drainSeconds(lag: number, consumeRate: number | null, inRate: number | null): number | null {
  if (lag <= 0) return 0;
  if (consumeRate === null) return null;
  const net = consumeRate - (inRate ?? 0);
  if (!(net > 0)) return null;
  return lag / net;
}

/** Sum of total_consumed over a group's partitions (the group's consumption counter). */
export function consumedTotal(g: ConsumerGroupInfo): number {
  let n = 0;
  for (const p of g.partitions) n += Number(p.totalConsumed);
  return n;
}

/**
 * Lag of every group, keyed by queue. `tracker` holds the consumption counters
 * between polls; `inRates` the arrival rate per queue.
 */
export function summarizeGroups(
  groups: ConsumerGroupInfo[],
  now: number,
  tracker: RateTracker,
  inRates: Map<string, number | null>,
): Map<string, GroupLag[]> {
  const byQueue = new Map<string, GroupLag[]>();
  for (const g of groups) {
    const key = `group\u0000${g.queue}\u0000${g.consumerGroup}`;
    const consumeRate = tracker.update(key, now, consumedTotal(g));
    const lag = Number(g.totalLag);
    const row: GroupLag = {
      group: g.consumerGroup,
      queue: g.queue,
      lag,
      timeLagSeconds: Number(g.maxTimeLagSeconds),
      consumeRate,
      drainSeconds: drainSeconds(lag, consumeRate, inRates.get(g.queue) ?? null),
      lagging: g.state === 2,
      partitions: g.partitions.length,
    };
    const list = byQueue.get(g.queue) ?? [];
    list.push(row);
    byQueue.set(g.queue, list);
  }
  for (const list of byQueue.values()) list.sort((a, b) => b.lag - a.lag || a.group.localeCompare(b.group));
  return byQueue;
}

/**
 * A partition's lag from its offsets, as the broker defines it: messages retained
 * after the cursor. `committed` is -1 before the group read anything; offsets below
 * `logStart` were deleted by retention and do not count.
 */
export function partitionLag(lastOffset: bigint, logStart: bigint, committed: bigint): bigint {
  if (lastOffset < 0n) return 0n;
  const from = committed + 1n > logStart ? committed + 1n : logStart;
  return lastOffset >= from ? lastOffset - from + 1n : 0n;
}
