// The console in a real browser against a real broker: data made through the API
// shows up on the pages, and actions taken on the pages change the broker's state.

import { mkdtemp, rm, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { AckStatus } from "../../src/gen/queen/v1/common_pb";
import { PushStatus } from "../../src/gen/queen/v1/queue_pb";
import { msToLocalInput } from "../../src/format";
import { apiClients, CHROMIUM_FLAGS, readEnv } from "./env";

const env = readEnv();
const api = apiClients(env);
/** Longest wait for the page to show what the broker now holds (pages poll every 2 s). */
const SHOW_MS = 15_000;

let profile = "";
let ctx: BrowserContext;
let page: Page;
const problems: string[] = [];
const queues: string[] = [];

function uniq(prefix: string): string {
  const q = `console-e2e-${prefix}-${randomUUID().slice(0, 8)}`;
  queues.push(q);
  return q;
}

beforeAll(async () => {
  profile = await mkdtemp(join(tmpdir(), "queen-console-chromium-"));
  ctx = await chromium.launchPersistentContext(profile, {
    executablePath: env.chromium,
    headless: true,
    args: CHROMIUM_FLAGS,
  });
  page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console error: ${m.text()}`);
  });
});

afterEach(async (t) => {
  if (t.task.result?.state === "fail") {
    const dir = join(process.cwd(), "test-results");
    await mkdir(dir, { recursive: true });
    await page.screenshot({ path: join(dir, `${t.task.name.replace(/[^a-z0-9]+/gi, "_")}.png`), fullPage: true });
  }
  // A script error or a failed load on the page fails the test that caused it.
  const seen = problems.splice(0);
  expect(seen, "the page logged errors").toEqual([]);
});

afterAll(async () => {
  await ctx?.close();
  if (profile) await rm(profile, { recursive: true, force: true });
  for (const q of queues) await api.admin.deleteQueue({ queue: q }).catch(() => {});
});

/** Waits until the element matched by `selector` has exactly `want` as its text. */
async function waitText(selector: string, want: string, timeout = SHOW_MS): Promise<void> {
  try {
    await page.waitForFunction(
      ([sel, w]) => document.querySelector(sel)?.textContent?.trim() === w,
      [selector, want] as const,
      { timeout, polling: 100 },
    );
  } catch {
    const got = await page
      .locator(selector)
      .first()
      .textContent({ timeout: 100 })
      .catch(() => "(no such element)");
    const alert = await page
      .locator('[role="alert"]')
      .allTextContents()
      .catch(() => []);
    throw new Error(`${selector}: wanted "${want}", page shows "${got?.trim()}"${alert.length ? `; alerts: ${alert.join(" | ")}` : ""}`);
  }
}

const css = (s: string) => s.replace(/["\\]/g, "\\$&");

async function push(queue: string, partition: string, n: number, tag: string) {
  const r = await api.queue.push({
    items: Array.from({ length: n }, (_, i) => ({
      queue,
      partition,
      payload: new TextEncoder().encode(JSON.stringify({ tag, i })),
      transactionId: `${tag}-${partition}-${i}`,
    })),
  });
  expect(r.results.map((x) => x.status)).toEqual(Array(n).fill(PushStatus.QUEUED));
  return r.results;
}

async function groupLag(queue: string, group: string): Promise<bigint> {
  const r = await api.admin.listConsumerGroups({ queue, consumerGroup: group });
  expect(r.groups).toHaveLength(1);
  return r.groups[0].totalLag;
}

describe("console against a live broker", () => {
  test("a push made through the API shows on the queues page with its depth", async () => {
    const q = uniq("push");
    await push(q, "p0", 4, "a");
    await push(q, "p1", 3, "a");
    const stats = await api.admin.getStats({ queue: q });
    expect(stats.queues[0].pending).toBe(7n);

    await page.goto(`${env.consoleUrl}#/queues`);
    const row = `tr[data-queue="${css(q)}"]`;
    await waitText(`${row} [data-col="depth"]`, "7");
    await waitText(`${row} [data-col="partitions"]`, "2");

    // More pushes move the number on the open page (it polls).
    await push(q, "p0", 5, "b");
    await waitText(`${row} [data-col="depth"]`, "12");

    // The queue's own page (deep link) lists both partitions with their depths.
    await page.click(`${row} a`);
    await waitText('[data-testid="queue-depth"]', "12");
    await waitText('tr[data-partition="p0"] [data-col="depth"]', "9");
    await waitText('tr[data-partition="p1"] [data-col="depth"]', "3");
    expect(page.url()).toContain(`#/queues/${encodeURIComponent(q)}`);
  });

  test("a message failed into the DLQ is replayed from the page and can be popped again", async () => {
    const q = uniq("dlq");
    const group = "billing";
    await api.admin.configureQueue({ queue: q, options: { RetryLimit: { case: "retryLimit", value: 0 } } });
    const [pushed] = await push(q, "eu", 1, "order");
    const popped = await api.queue.pop({ queue: q, consumerGroup: group, batch: 1, waitMs: 5000 });
    expect(popped.messages).toHaveLength(1);
    const ack = await api.queue.ack({
      consumerGroup: group,
      items: [
        {
          partitionId: pushed.partitionId,
          target: { case: "offset", value: pushed.offset },
          status: AckStatus.FAILED,
          error: "e2e: cannot bill",
          leaseId: popped.leaseId,
        },
      ],
    });
    expect(ack.results[0].dlq).toBe(true);
    const before = await api.admin.listDeadLetters({ queue: q });
    expect(before.deadLetters).toHaveLength(1);
    const letter = before.deadLetters[0];

    await page.goto(`${env.consoleUrl}#/dlq?queue=${encodeURIComponent(q)}`);
    const row = `tr[data-dlq-id="${letter.id}"]`;
    await page.waitForSelector(row, { timeout: SHOW_MS });
    // The payload preview pretty-prints the JSON.
    await page.click(`${row} details summary`);
    await page.waitForSelector(`${row} .payload[data-kind="json"]`, { timeout: SHOW_MS });
    expect(await page.textContent(`${row} .payload pre`)).toBe(JSON.stringify({ tag: "order", i: 0 }, null, 2));
    expect(await page.textContent(row)).toContain("e2e: cannot bill");

    await page.click(`${row} [data-testid="replay"]`);
    await page.waitForSelector('[data-testid="dlq-empty"]', { timeout: SHOW_MS });
    expect(await page.textContent('[data-testid="dlq-notice"]')).toMatch(/^Replayed into /);

    const after = await api.admin.listDeadLetters({ queue: q });
    expect(after.deadLetters).toHaveLength(0);
    const again = await api.queue.pop({ queue: q, consumerGroup: group, batch: 10, waitMs: 5000 });
    expect(again.messages).toHaveLength(1);
    expect(again.messages[0].transactionId).toBe(`dlq:${letter.id}`);
    expect(new TextDecoder().decode(again.messages[0].payload)).toBe(JSON.stringify({ tag: "order", i: 0 }));
  });

  test("a seek from the group page moves the group's lag", async () => {
    const q = uniq("seek");
    const group = "reporting";
    // Seeking to this time must bring back every message pushed after it.
    const before = Math.floor((Date.now() - 2000) / 1000) * 1000;
    await push(q, "Default", 10, "s");
    const popped = await api.queue.pop({ queue: q, consumerGroup: group, batch: 3, waitMs: 5000 });
    expect(popped.messages).toHaveLength(3);
    const last = popped.messages[2];
    await api.queue.ack({
      consumerGroup: group,
      items: [{ partitionId: last.partitionId, target: { case: "offset", value: last.offset }, leaseId: popped.leaseId }],
    });
    expect(await groupLag(q, group)).toBe(7n);

    await page.goto(`${env.consoleUrl}#/queues/${encodeURIComponent(q)}/groups/${encodeURIComponent(group)}`);
    await waitText('[data-testid="group-lag"]', "7");

    // To the end: nothing left to consume.
    await page.check('form.seek input[type="radio"] >> nth=0');
    await page.click('form.seek button[type="submit"]');
    await waitText('[data-testid="seek-result"]', "Moved 1 partition.");
    await waitText('[data-testid="group-lag"]', "0");
    expect(await groupLag(q, group)).toBe(0n);

    // Back to a time before the push: all ten are pending again.
    await page.check('form.seek input[type="radio"] >> nth=1');
    await page.fill('input[type="datetime-local"]', msToLocalInput(before));
    await page.click('form.seek button[type="submit"]');
    await waitText('[data-testid="group-lag"]', "10");
    expect(await groupLag(q, group)).toBe(10n);
  });
});
