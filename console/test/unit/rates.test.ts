// @vitest-environment node
import { create } from "@bufbuild/protobuf";
import { describe, expect, test } from "vitest";
import { ConsumerGroupInfoSchema, GroupState } from "../../src/gen/queen/v1/admin_pb";
import { drainSeconds, partitionLag, RateTracker, rateBetween, Series, summarizeGroups } from "../../src/rates";

describe("rateBetween", () => {
  test("is the change per second", () => {
    expect(rateBetween({ t: 1000, v: 100 }, { t: 3000, v: 300 })).toBe(100);
    expect(rateBetween({ t: 0, v: 5 }, { t: 500, v: 6 })).toBe(2);
  });
  test("is unknown without a previous sample, over no time, or when the counter went down", () => {
    expect(rateBetween(undefined, { t: 1, v: 1 })).toBeNull();
    expect(rateBetween({ t: 5, v: 1 }, { t: 5, v: 9 })).toBeNull();
    expect(rateBetween({ t: 6, v: 1 }, { t: 5, v: 9 })).toBeNull();
    expect(rateBetween({ t: 0, v: 500 }, { t: 1000, v: 20 })).toBeNull(); // broker restart
  });
  test("is zero for an idle counter", () => {
    expect(rateBetween({ t: 0, v: 7 }, { t: 2000, v: 7 })).toBe(0);
  });
});

describe("RateTracker", () => {
  test("keeps one history per key and accepts bigint counters", () => {
    const r = new RateTracker();
    expect(r.update("a", 0, 10n)).toBeNull();
    expect(r.update("b", 0, 0)).toBeNull();
    expect(r.update("a", 2000, 30n)).toBe(10);
    expect(r.update("b", 1000, 4)).toBe(4);
    expect(r.update("a", 3000, 30n)).toBe(0);
  });
  test("starts over after a counter reset", () => {
    const r = new RateTracker();
    r.update("a", 0, 100);
    expect(r.update("a", 1000, 3)).toBeNull();
    expect(r.update("a", 2000, 8)).toBe(5);
  });
  test("retain forgets keys no longer shown", () => {
    const r = new RateTracker();
    r.update("gone", 0, 1);
    r.update("kept", 0, 1);
    r.retain(new Set(["kept"]));
    expect(r.update("gone", 1000, 5)).toBeNull();
    expect(r.update("kept", 1000, 5)).toBe(4);
  });
});

describe("Series", () => {
  test("holds at most max points, dropping the oldest", () => {
    const s = new Series(3);
    for (let i = 0; i < 5; i++) s.push(i, i * 10);
    expect(s.t).toEqual([2, 3, 4]);
    expect(s.v).toEqual([20, 30, 40]);
  });
});

describe("partitionLag", () => {
  test("counts messages after the cursor", () => {
    expect(partitionLag(9n, 0n, -1n)).toBe(10n); // never read
    expect(partitionLag(9n, 0n, 2n)).toBe(7n);
    expect(partitionLag(9n, 0n, 9n)).toBe(0n);
  });
  test("does not count offsets retention deleted", () => {
    expect(partitionLag(9n, 6n, -1n)).toBe(4n);
    expect(partitionLag(9n, 6n, 3n)).toBe(4n);
    expect(partitionLag(9n, 6n, 7n)).toBe(2n);
  });
  test("is zero for an empty partition", () => {
    expect(partitionLag(-1n, 0n, -1n)).toBe(0n);
  });
});

describe("drainSeconds", () => {
  test("is lag over the net consumption rate", () => {
    expect(drainSeconds(100, 30, 10)).toBe(5);
    expect(drainSeconds(100, 20, null)).toBe(5);
  });
  test("is 0 without lag and null when the backlog is not shrinking or unknown", () => {
    expect(drainSeconds(0, null, null)).toBe(0);
    expect(drainSeconds(10, 5, 5)).toBeNull();
    expect(drainSeconds(10, 5, 9)).toBeNull();
    expect(drainSeconds(10, null, 0)).toBeNull();
  });
});

describe("summarizeGroups", () => {
  const group = (queue: string, name: string, lag: bigint, consumed: bigint[], state = GroupState.STABLE) =>
    create(ConsumerGroupInfoSchema, {
      queue,
      consumerGroup: name,
      totalLag: lag,
      maxTimeLagSeconds: lag > 0n ? 12n : 0n,
      state,
      partitions: consumed.map((c, i) => ({ partition: `p${i}`, totalConsumed: c })),
    });

  test("groups by queue, sorted by lag, with consumption rates from successive polls", () => {
    const tracker = new RateTracker();
    const first = summarizeGroups(
      [group("orders", "billing", 50n, [10n, 0n]), group("orders", "audit", 500n, [0n]), group("logs", "ship", 0n, [7n])],
      0,
      tracker,
      new Map(),
    );
    expect([...first.keys()].sort()).toEqual(["logs", "orders"]);
    expect(first.get("orders")!.map((g) => g.group)).toEqual(["audit", "billing"]);
    expect(first.get("orders")![1].consumeRate).toBeNull();
    expect(first.get("orders")![1].partitions).toBe(2);

    const second = summarizeGroups(
      [group("orders", "billing", 20n, [30n, 20n], GroupState.LAGGING), group("orders", "audit", 500n, [0n])],
      2000,
      tracker,
      new Map([["orders", 5]]),
    );
    const billing = second.get("orders")!.find((g) => g.group === "billing")!;
    expect(billing.consumeRate).toBe(20); // (50 - 10) consumed over 2 s
    expect(billing.lag).toBe(20);
    expect(billing.drainSeconds).toBeCloseTo(20 / 15);
    expect(billing.lagging).toBe(true);
    expect(billing.timeLagSeconds).toBe(12);
    const audit = second.get("orders")!.find((g) => g.group === "audit")!;
    expect(audit.consumeRate).toBe(0);
    expect(audit.drainSeconds).toBeNull();
  });

  test("the same group name on two queues is two groups", () => {
    const tracker = new RateTracker();
    summarizeGroups([group("a", "g", 1n, [1n]), group("b", "g", 1n, [100n])], 0, tracker, new Map());
    const s = summarizeGroups([group("a", "g", 1n, [2n]), group("b", "g", 1n, [110n])], 1000, tracker, new Map());
    expect(s.get("a")![0].consumeRate).toBe(1);
    expect(s.get("b")![0].consumeRate).toBe(10);
  });
});
