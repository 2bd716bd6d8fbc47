import { useState } from "preact/hooks";
import { useApi } from "../api";
import { ConfirmButton } from "../components/Confirm";
import { Empty, ErrorBox, Loading } from "../components/ErrorBox";
import { fmtInt, fmtSeconds, fmtTimeUs, localInputToUs, msToLocalInput } from "../format";
import { SubscriptionMode } from "../gen/queen/v1/common_pb";
import { allGroups } from "../paging";
import { usePoll } from "../poll";
import { href, navigate } from "../router";

export const GROUP_POLL_MS = 2000;

const MODES: Record<number, string> = {
  [SubscriptionMode.UNSPECIFIED]: "default (all)",
  [SubscriptionMode.ALL]: "all",
  [SubscriptionMode.NEW]: "new only",
  [SubscriptionMode.FROM_TIMESTAMP]: "from a time",
};

export function Group({ queue, group }: { queue: string; group: string }) {
  const api = useApi();
  const poll = usePoll(
    async (signal) => {
      const groups = await allGroups(api, queue, group, signal);
      return groups.find((g) => g.queue === queue && g.consumerGroup === group) ?? null;
    },
    GROUP_POLL_MS,
    [api, queue, group],
  );
  const g = poll.data;
  return (
    <section>
      <nav aria-label="breadcrumb">
        <ul>
          <li>
            <a href={href({ page: "queues" })}>Queues</a>
          </li>
          <li>
            <a href={href({ page: "queue", queue, group: "" })}>{queue}</a>
          </li>
          <li>{group}</li>
        </ul>
      </nav>
      <h2>
        Consumer group <code>{group}</code> on <code>{queue}</code>
      </h2>
      <ErrorBox error={poll.error} context="Loading the group" />
      {poll.loading && g === undefined ? <Loading what="the group" /> : null}
      {g === null ? (
        <Empty>
          Group <code>{group}</code> has no cursors on <code>{queue}</code>: it never read it, or it was deleted.
        </Empty>
      ) : null}
      {g ? (
        <>
          <p class="totals">
            Lag <strong data-testid="group-lag">{fmtInt(g.totalLag)}</strong> messages
            {g.maxTimeLagSeconds > 0n ? `, oldest unconsumed ${fmtSeconds(g.maxTimeLagSeconds)} old` : ""} · state{" "}
            {g.state === 2 ? "lagging" : "stable"} · subscription {MODES[g.subscriptionMode] ?? "?"}
            {g.subscriptionMode === SubscriptionMode.FROM_TIMESTAMP ? ` ${fmtTimeUs(g.subscriptionFromUs)}` : ""} ·{" "}
            <a href={href({ page: "dlq", queue, group, partition: "", offset: 0 })}>dead letters</a>
          </p>
          <div class="table-wrap">
            <table class="striped" data-testid="cursors-table">
              <thead>
                <tr>
                  <th>Partition</th>
                  <th class="num">Committed</th>
                  <th class="num">Last offset</th>
                  <th class="num">Lag</th>
                  <th>Oldest unconsumed</th>
                  <th>Lease</th>
                  <th class="num">Retries</th>
                  <th class="num">Attempts</th>
                  <th class="num">Consumed</th>
                </tr>
              </thead>
              <tbody>
                {g.partitions.map((p) => (
                  <tr key={p.partitionId} data-partition={p.partition}>
                    <td title={p.partitionId}>{p.partition}</td>
                    <td class="num">{p.committed < 0n ? "—" : fmtInt(p.committed)}</td>
                    <td class="num">{p.lastOffset < 0n ? "—" : fmtInt(p.lastOffset)}</td>
                    <td class="num" data-col="lag">
                      {fmtInt(p.lag)}
                    </td>
                    <td>{p.timeLagSeconds > 0n ? `${fmtSeconds(p.timeLagSeconds)} ago` : "—"}</td>
                    <td title={p.leaseId}>{p.leased ? "leased" : ""}</td>
                    <td class="num">{p.retryCount}</td>
                    <td class="num">{p.attemptCount}</td>
                    <td class="num">{fmtInt(p.totalConsumed)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <SeekForm queue={queue} group={group} partitions={g.partitions.map((p) => p.partition)} onDone={poll.refresh} />
          <DeleteGroup queue={queue} group={group} />
        </>
      ) : null}
    </section>
  );
}

function SeekForm(props: { queue: string; group: string; partitions: string[]; onDone: () => Promise<void> }) {
  const api = useApi();
  const [target, setTarget] = useState<"end" | "time">("end");
  const [when, setWhen] = useState(() => msToLocalInput(Date.now() - 3600_000));
  const [partition, setPartition] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const [result, setResult] = useState("");
  const [invalid, setInvalid] = useState("");

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setResult("");
    setInvalid("");
    let tsUs: bigint | null = null;
    if (target === "time") {
      tsUs = localInputToUs(when);
      if (tsUs === null) {
        setInvalid("Enter a date and time.");
        return;
      }
    }
    setBusy(true);
    try {
      const r = await api.admin.seekConsumerGroup({
        consumerGroup: props.group,
        queue: props.queue,
        partition,
        target: tsUs === null ? { case: "toEnd", value: true } : { case: "toTimestampUs", value: tsUs },
      });
      setResult(`Moved ${r.partitionsUpdated} partition${r.partitionsUpdated === 1 ? "" : "s"}.`);
      await props.onDone();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="seek" onSubmit={submit} aria-label="Seek">
      <h3>Seek</h3>
      <fieldset class="inline">
        <label>
          <input type="radio" name="target" checked={target === "end"} onChange={() => setTarget("end")} /> to the end
          (skip everything pending)
        </label>
        <label>
          <input type="radio" name="target" checked={target === "time"} onChange={() => setTarget("time")} /> to a time
          (first segment written at or after it, your local time)
        </label>
        <input
          type="datetime-local"
          step={1}
          aria-label="Seek time"
          value={when}
          disabled={target !== "time"}
          onInput={(e) => setWhen((e.target as HTMLInputElement).value)}
        />
        <label>
          Partition{" "}
          <select aria-label="Seek partition" value={partition} onChange={(e) => setPartition((e.target as HTMLSelectElement).value)}>
            <option value="">all partitions</option>
            {props.partitions.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" disabled={busy} aria-busy={busy}>
          Seek
        </button>
      </fieldset>
      {invalid ? <small role="alert">{invalid}</small> : null}
      {result ? (
        <p class="ok" role="status" data-testid="seek-result">
          {result}
        </p>
      ) : null}
      <ErrorBox error={error} context="Seek" />
    </form>
  );
}

function DeleteGroup({ queue, group }: { queue: string; group: string }) {
  const api = useApi();
  const [meta, setMeta] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  return (
    <div class="danger">
      <h3>Delete</h3>
      <p>Forgets the group's cursors on this queue; it then starts over as on first contact.</p>
      <label>
        <input type="checkbox" checked={meta} onChange={(e) => setMeta((e.target as HTMLInputElement).checked)} /> also
        forget its subscription (mode and start time)
      </label>
      <ConfirmButton
        label="Delete group"
        confirmLabel={`Delete ${group} on ${queue}`}
        testid="delete-group"
        disabled={busy}
        onConfirm={async () => {
          setBusy(true);
          setError(undefined);
          try {
            await api.admin.deleteConsumerGroup({ consumerGroup: group, queue, deleteMetadata: meta });
            navigate({ page: "queue", queue, group: "" });
          } catch (err) {
            setError(err);
          } finally {
            setBusy(false);
          }
        }}
      />
      <ErrorBox error={error} context="Delete" />
    </div>
  );
}
