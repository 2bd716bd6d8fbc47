import { describe, expect, test } from "vitest";
import { href, parseRoute, type Route } from "../../src/router";
import { localInputToUs, msToLocalInput, fmtInt, fmtRate, fmtTimeUs, fmtSeconds } from "../../src/format";

describe("routes", () => {
  const cases: Route[] = [
    { page: "queues" },
    { page: "queue", queue: "orders", group: "" },
    { page: "queue", queue: "a/b c?é", group: "billing#1" },
    { page: "group", queue: "ns.task.x", group: "g/1" },
    { page: "dlq", queue: "orders", group: "g", partition: "eu", offset: 50 },
    { page: "dlq", queue: "", group: "", partition: "", offset: 0 },
    { page: "live" },
  ];
  test.each(cases)("%o survives href -> parse", (r) => {
    expect(parseRoute(href(r))).toEqual(r);
  });
  test("the empty hash is the queues page", () => {
    expect(parseRoute("")).toEqual({ page: "queues" });
    expect(parseRoute("#/")).toEqual({ page: "queues" });
  });
  test("unknown or malformed paths are 'not found', not a crash", () => {
    expect(parseRoute("#/nope").page).toBe("notfound");
    expect(parseRoute("#/queues/%E0%A4%A").page).toBe("notfound");
    expect(parseRoute("#/queues/a/b").page).toBe("notfound");
  });
  test("a bad DLQ page offset reads as the first page", () => {
    expect(parseRoute("#/dlq?offset=-5")).toMatchObject({ offset: 0 });
    expect(parseRoute("#/dlq?offset=abc")).toMatchObject({ offset: 0 });
  });
});

describe("format", () => {
  test("numbers and rates", () => {
    expect(fmtInt(1234567n)).toBe("1,234,567");
    expect(fmtInt(-1)).toBe("-1");
    expect(fmtRate(null)).toBe("—");
    expect(fmtRate(12.345)).toBe("12.3/s");
    expect(fmtRate(Number.NaN)).toBe("—");
  });
  test("times", () => {
    expect(fmtTimeUs(0n)).toBe("—");
    expect(fmtTimeUs(1_700_000_000_123_456n)).toBe("2023-11-14 22:13:20Z");
    expect(fmtSeconds(59)).toBe("59 s");
    expect(fmtSeconds(3600)).toBe("60 min");
    expect(fmtSeconds(86400 * 3)).toBe("3 d");
  });
  test("datetime-local values round-trip to microseconds in local time", () => {
    const ms = new Date(2026, 0, 2, 3, 4, 5).getTime();
    expect(msToLocalInput(ms)).toBe("2026-01-02T03:04:05");
    expect(localInputToUs("2026-01-02T03:04:05")).toBe(BigInt(ms) * 1000n);
    expect(localInputToUs("2026-01-02T03:04")).toBe(BigInt(ms - 5000) * 1000n);
    expect(localInputToUs("")).toBeNull();
    expect(localInputToUs("yesterday")).toBeNull();
  });
});
