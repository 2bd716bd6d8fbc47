// The pages against an in-memory broker (connect's router transport): what the
// broker holds shows up, the actions change it, and failures are shown in place.

import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { Code } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { App } from "../../src/app";
import { msToLocalInput } from "../../src/format";
import { authInterceptor, sessionTokenStore, TOKEN_KEY } from "../../src/token";
import { FakeBroker } from "../support/fake-broker";

let broker: FakeBroker;

function open(hash: string) {
  window.location.hash = hash;
  const tokens = sessionTokenStore();
  const transport = broker.transport([authInterceptor(tokens)]);
  return render(<App transport={transport} tokens={tokens} />);
}

const cell = (container: Element, sel: string) => container.querySelector(sel)?.textContent?.trim();

beforeEach(() => {
  sessionStorage.clear();
  broker = new FakeBroker();
  broker.push("orders", "p0", ["a", "b", "c", "d"]);
  broker.push("orders", "p1", ["e", "f", "g"]);
  broker.push("emails", "", ["hi"]);
  broker.commit("orders", "billing", "p0", 1n); // lag: p0 2, p1 3
});

afterEach(() => {
  cleanup();
  window.location.hash = "";
});

describe("queues page", () => {
  test("lists each queue with partitions, depth and group lag", async () => {
    const { container } = open("#/queues");
    expect(screen.getByText(/Loading queues/)).toBeTruthy();
    await waitFor(() => expect(cell(container, 'tr[data-queue="orders"] [data-col="depth"]')).toBe("5"));
    expect(cell(container, 'tr[data-queue="orders"] [data-col="partitions"]')).toBe("2");
    expect(cell(container, 'tr[data-queue="orders"] [data-col="messages"]')).toBe("7");
    expect(cell(container, 'tr[data-queue="orders"] li[data-group="billing"] [data-col="group-lag"]')).toBe("5");
    expect(cell(container, 'tr[data-queue="emails"] [data-col="depth"]')).toBe("1");
    expect(cell(container, 'tr[data-queue="emails"] [data-col="groups"]')).toBe("none");
    const link = container.querySelector('tr[data-queue="orders"] li[data-group="billing"] a') as HTMLAnchorElement;
    expect(link.getAttribute("href")).toBe("#/queues/orders/groups/billing");
  });

  test("says so when there are no queues", async () => {
    broker.queues.clear();
    broker.cursors.clear();
    open("#/queues");
    await screen.findByText(/No queues yet/);
  });

  test("shows UNAVAILABLE in place and recovers when the broker is back", async () => {
    broker.failWith = Code.Unavailable;
    const { container } = open("#/queues");
    const alert = await screen.findByRole("alert");
    expect(alert.getAttribute("data-code")).toBe("UNAVAILABLE");
    expect(alert.textContent).toContain("Broker unavailable");
    expect(alert.textContent).toContain("injected failure");
    broker.failWith = null;
    await waitFor(() => expect(cell(container, 'tr[data-queue="orders"] [data-col="depth"]')).toBe("5"), { timeout: 10_000 });
    expect(screen.queryByRole("alert")).toBeNull();
  });

  test("any other status is named with the broker's message", async () => {
    broker.failWith = Code.Internal;
    open("#/queues");
    const alert = await screen.findByRole("alert");
    expect(alert.getAttribute("data-code")).toBe("INTERNAL");
    expect(alert.textContent).toContain("injected failure");
  });
});

describe("token", () => {
  test("UNAUTHENTICATED asks for a token; a saved token is sent and the page loads", async () => {
    broker.requireToken = "s3cret";
    const { container } = open("#/queues");
    const alert = await screen.findByRole("alert");
    expect(alert.getAttribute("data-code")).toBe("UNAUTHENTICATED");
    expect(alert.textContent).toContain("token field");
    expect(broker.lastAuthorization).toBeNull();

    fireEvent.input(screen.getByLabelText("Bearer token"), { target: { value: "Bearer s3cret " } });
    fireEvent.submit(screen.getByRole("form", { name: "Token" }));
    await waitFor(() => expect(cell(container, 'tr[data-queue="orders"] [data-col="depth"]')).toBe("5"));
    expect(broker.lastAuthorization).toBe("Bearer s3cret");
    expect(sessionStorage.getItem(TOKEN_KEY)).toBe("s3cret");
    expect(screen.getByTestId("token-state").textContent).toBe("token set");

    fireEvent.click(screen.getByRole("button", { name: "Clear" }));
    expect(sessionStorage.getItem(TOKEN_KEY)).toBeNull();
    expect((await screen.findByRole("alert")).getAttribute("data-code")).toBe("UNAUTHENTICATED");
  });

  test("a token that cannot be sent is refused with a message", async () => {
    open("#/queues");
    fireEvent.input(screen.getByLabelText("Bearer token"), { target: { value: "two words" } });
    fireEvent.submit(screen.getByRole("form", { name: "Token" }));
    expect((await screen.findByText(/visible ASCII/)).getAttribute("role")).toBe("alert");
    expect(sessionStorage.getItem(TOKEN_KEY)).toBeNull();
  });
});

describe("queue page", () => {
  test("a deep link shows the queue's partitions, and the group picker switches the depth", async () => {
    const { container } = open("#/queues/orders");
    await waitFor(() => expect(screen.getByTestId("queue-depth").textContent).toBe("7"));
    expect(cell(container, 'tr[data-partition="p0"] [data-col="depth"]')).toBe("4");
    expect(cell(container, 'tr[data-partition="p1"] [data-col="depth"]')).toBe("3");
    expect(cell(container, '[data-testid="groups-table"] tr[data-group="billing"] [data-col="lag"]')).toBe("5");

    fireEvent.change(screen.getByLabelText("Consumer group"), { target: { value: "billing" } });
    await waitFor(() => expect(window.location.hash).toBe("#/queues/orders?group=billing"));
    await waitFor(() => expect(screen.getByTestId("queue-depth").textContent).toBe("5"));
    expect(cell(container, 'tr[data-partition="p0"] [data-col="depth"]')).toBe("2");
  });

  test("pages the partitions with Next and Previous; the depth stays the whole queue's", async () => {
    for (let i = 0; i < 250; i++) broker.push("wide", `p${String(i).padStart(3, "0")}`, ["x"]);
    const { container } = open("#/queues/wide");
    await waitFor(() => expect(container.querySelectorAll("tr[data-partition]").length).toBe(100));
    expect(screen.getByTestId("queue-depth").textContent).toBe("250");
    expect(container.querySelector("tr[data-partition]")?.getAttribute("data-partition")).toBe("p000");
    expect(screen.queryByTestId("partitions-prev")).toBeNull();
    fireEvent.click(screen.getByTestId("partitions-next"));
    await waitFor(() =>
      expect(container.querySelector("tr[data-partition]")?.getAttribute("data-partition")).toBe("p100"),
    );
    expect(screen.getByTestId("queue-depth").textContent).toBe("250");
    fireEvent.click(screen.getByTestId("partitions-next"));
    await waitFor(() => expect(container.querySelectorAll("tr[data-partition]").length).toBe(50));
    expect(screen.queryByTestId("partitions-next")).toBeNull();
    fireEvent.click(screen.getByTestId("partitions-prev"));
    await waitFor(() =>
      expect(container.querySelector("tr[data-partition]")?.getAttribute("data-partition")).toBe("p100"),
    );
  });

  test("a missing queue is NOT_FOUND in place", async () => {
    open("#/queues/nope");
    expect((await screen.findByRole("alert")).getAttribute("data-code")).toBe("NOT_FOUND");
  });
});

describe("group page", () => {
  test("seek to the end empties the lag; seek to a time brings messages back", async () => {
    const { container } = open("#/queues/orders/groups/billing");
    await waitFor(() => expect(screen.getByTestId("group-lag").textContent).toBe("5"));
    expect(cell(container, 'tr[data-partition="p0"] [data-col="lag"]')).toBe("2");

    fireEvent.submit(screen.getByRole("form", { name: "Seek" }));
    await waitFor(() => expect(screen.getByTestId("seek-result").textContent).toBe("Moved 2 partitions."));
    await waitFor(() => expect(screen.getByTestId("group-lag").textContent).toBe("0"));
    expect(broker.cursors.get("orders\u0000billing")!.get("p1")!.committed).toBe(2n);

    // p1's segment was written one second after p0's: seeking to it brings back p1 only.
    const p1Us = broker.queues.get("orders")!.partitions.get("p1")!.messages[0].createdAtUs;
    fireEvent.click(screen.getAllByRole("radio")[1]);
    fireEvent.input(screen.getByLabelText("Seek time"), { target: { value: msToLocalInput(Number(p1Us / 1000n)) } });
    fireEvent.submit(screen.getByRole("form", { name: "Seek" }));
    await waitFor(() => expect(screen.getByTestId("group-lag").textContent).toBe("3"));
    expect(cell(container, 'tr[data-partition="p0"] [data-col="lag"]')).toBe("0");
    expect(cell(container, 'tr[data-partition="p1"] [data-col="lag"]')).toBe("3");
  });

  test("seek on one partition moves only it", async () => {
    open("#/queues/orders/groups/billing");
    await waitFor(() => expect(screen.getByTestId("group-lag").textContent).toBe("5"));
    fireEvent.change(screen.getByLabelText("Seek partition"), { target: { value: "p0" } });
    fireEvent.submit(screen.getByRole("form", { name: "Seek" }));
    await waitFor(() => expect(screen.getByTestId("seek-result").textContent).toBe("Moved 1 partition."));
    await waitFor(() => expect(screen.getByTestId("group-lag").textContent).toBe("3"));
  });

  test("a seek refused by the broker shows why, where the form is", async () => {
    open("#/queues/orders/groups/billing");
    await waitFor(() => expect(screen.getByTestId("group-lag").textContent).toBe("5"));
    broker.denied.add("SeekConsumerGroup");
    fireEvent.submit(screen.getByRole("form", { name: "Seek" }));
    const alert = await within(screen.getByRole("form", { name: "Seek" })).findByRole("alert");
    expect(alert.getAttribute("data-code")).toBe("PERMISSION_DENIED");
    expect(broker.cursors.get("orders\u0000billing")!.get("p0")!.committed).toBe(1n);
  });

  test("delete asks once more, then forgets the group and goes back to the queue", async () => {
    open("#/queues/orders/groups/billing");
    await waitFor(() => expect(screen.getByTestId("group-lag").textContent).toBe("5"));
    fireEvent.click(screen.getByTestId("delete-group"));
    expect(broker.cursors.has("orders\u0000billing")).toBe(true);
    fireEvent.click(screen.getByTestId("delete-group-confirm"));
    await waitFor(() => expect(window.location.hash).toBe("#/queues/orders"));
    expect(broker.cursors.has("orders\u0000billing")).toBe(false);
  });

  test("a group without cursors says so", async () => {
    open("#/queues/orders/groups/ghost");
    await screen.findByText(/has no cursors on/);
  });
});

describe("dead letters page", () => {
  beforeEach(() => {
    broker.push("orders", "p0", ['{"id":7,"sku":"x"}']);
    broker.deadLetter("orders", "billing", "p0", 4n, "card declined");
    broker.push("audit", "", [new Uint8Array([0, 1, 2, 0xff])]);
    broker.deadLetter("audit", "archiver", "Default", 0n, "bad frame");
  });

  test("previews payloads: JSON pretty-printed, binary as hex", async () => {
    const { container } = open("#/dlq");
    await waitFor(() => expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(2));
    const json = container.querySelector('tr[data-txid="tx-4"] .payload') as HTMLElement;
    expect(json.dataset.kind).toBe("json");
    expect(json.querySelector("pre")!.textContent).toBe('{\n  "id": 7,\n  "sku": "x"\n}');
    const bin = container.querySelector('tr[data-txid="tx-0"] .payload') as HTMLElement;
    expect(bin.dataset.kind).toBe("binary");
    expect(bin.querySelector("pre")!.textContent).toContain("00 01 02 ff");
    expect(container.querySelector('tr[data-txid="tx-4"]')!.textContent).toContain("card declined");
  });

  test("replays one letter: it leaves the list and is pushed back as dlq:<id>", async () => {
    const { container } = open("#/dlq?queue=orders");
    await waitFor(() => expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(1));
    const id = broker.dead.find((d) => d.queue === "orders")!.id;
    fireEvent.click(within(container.querySelector(`tr[data-dlq-id="${id}"]`) as HTMLElement).getByTestId("replay"));
    await screen.findByTestId("dlq-empty");
    expect(screen.getByTestId("dlq-notice").textContent).toBe("Replayed into orders/p0 at offset 5.");
    const p0 = broker.queues.get("orders")!.partitions.get("p0")!;
    expect(p0.messages.at(-1)!.transactionId).toBe(`dlq:${id}`);
    expect(broker.dead.map((d) => d.queue)).toEqual(["audit"]);
  });

  test("replays all shown after a confirmation", async () => {
    const { container } = open("#/dlq");
    await waitFor(() => expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(2));
    fireEvent.click(screen.getByTestId("replay-all"));
    expect(broker.dead).toHaveLength(2);
    fireEvent.click(screen.getByTestId("replay-all-confirm"));
    await screen.findByTestId("dlq-empty");
    expect(screen.getByTestId("dlq-notice").textContent).toBe("Replayed 2 dead letters.");
    expect(broker.dead).toHaveLength(0);
  });

  test("deletes one after a confirmation", async () => {
    const { container } = open("#/dlq?queue=audit");
    await waitFor(() => expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(1));
    fireEvent.click(screen.getByTestId("delete"));
    fireEvent.click(screen.getByTestId("delete-confirm"));
    await screen.findByTestId("dlq-empty");
    expect(broker.dead.map((d) => d.queue)).toEqual(["orders"]);
  });

  test("a refused replay is shown and the letter stays", async () => {
    broker.denied.add("ReplayDeadLetter");
    const { container } = open("#/dlq?queue=orders");
    await waitFor(() => expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(1));
    fireEvent.click(screen.getByTestId("replay"));
    const alert = await screen.findByRole("alert");
    expect(alert.getAttribute("data-code")).toBe("PERMISSION_DENIED");
    expect(alert.textContent).toContain("ReplayDeadLetter");
    expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(1);
  });

  test("filters and pages through the URL", async () => {
    for (let i = 0; i < 60; i++) broker.deadLetter("orders", "billing", "p0", 0n, `e${i}`);
    const { container } = open("#/dlq?queue=orders");
    await waitFor(() => expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(50));
    fireEvent.click(screen.getByText("Older →"));
    await waitFor(() => expect(window.location.hash).toBe("#/dlq?queue=orders&offset=50"));
    await waitFor(() => expect(container.querySelectorAll("tr[data-dlq-id]")).toHaveLength(11));
  });
});

describe("live page", () => {
  test("shows the counters and a push rate from successive samples", async () => {
    open("#/live");
    await waitFor(() => expect(screen.getByTestId("pushed-total").textContent).toBe("8"));
    expect(screen.getByTestId("push-rate").textContent).toBe("—");
    broker.push("orders", "p0", Array.from({ length: 500 }, () => "x"));
    await waitFor(() => expect(screen.getByTestId("pushed-total").textContent).toBe("508"));
    const rate = Number.parseFloat(screen.getByTestId("push-rate").textContent!.replace(/,/g, ""));
    expect(rate).toBeGreaterThan(0);
    expect(rate).toBeLessThanOrEqual(500 / 0.9); // 500 messages over at least one poll interval
  });
});

test("an unknown page says so", async () => {
  open("#/what");
  await screen.findByText("No such page");
});
