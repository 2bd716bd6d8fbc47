import { useState } from "preact/hooks";
import { useApi } from "../api";
import { ConfirmButton } from "../components/Confirm";
import { Empty, ErrorBox, Loading } from "../components/ErrorBox";
import { PayloadView } from "../components/PayloadView";
import { fmtInt, fmtTimeUs } from "../format";
import type { DeadLetter } from "../gen/queen/v1/admin_pb";
import { PushStatus } from "../gen/queen/v1/queue_pb";
import { usePoll } from "../poll";
import { href, navigate, type Route } from "../router";

export const DLQ_PAGE = 50;

type DlqRoute = Extract<Route, { page: "dlq" }>;

export function DeadLetters({ route }: { route: DlqRoute }) {
  const api = useApi();
  const [notice, setNotice] = useState("");
  const [actionError, setActionError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState<string>("");
  const [progress, setProgress] = useState("");
  const poll = usePoll(
    (signal) =>
      api.admin
        .listDeadLetters(
          { queue: route.queue, consumerGroup: route.group, partition: route.partition, limit: DLQ_PAGE, offset: route.offset },
          { signal },
        )
        .then((r) => r.deadLetters),
    0,
    [api, route.queue, route.group, route.partition, route.offset],
  );
  const letters = poll.data;

  const replayOne = async (d: DeadLetter): Promise<boolean> => {
    const r = await api.admin.replayDeadLetter({ id: d.id });
    const as = r.replayedAs;
    if (as?.status === PushStatus.DUPLICATE) setNotice(`Already replayed earlier (duplicate of offset ${as.offset}).`);
    else setNotice(`Replayed into ${as?.queue}/${as?.partition} at offset ${as?.offset}.`);
    return r.deadLetterRemoved;
  };

  const act = async (id: string, f: () => Promise<void>) => {
    setBusy(id);
    setActionError(undefined);
    setNotice("");
    try {
      await f();
    } catch (err) {
      setActionError(err);
    } finally {
      setBusy("");
      setProgress("");
      await poll.refresh();
    }
  };

  const replayAll = (shown: DeadLetter[]) =>
    act("*", async () => {
      let done = 0;
      for (const d of shown) {
        setProgress(`Replaying ${done + 1} of ${shown.length}…`);
        await replayOne(d);
        done++;
      }
      setNotice(`Replayed ${done} dead letter${done === 1 ? "" : "s"}.`);
    });

  return (
    <section>
      <h2>Dead letters</h2>
      <DlqFilter route={route} />
      <ErrorBox error={poll.error} context="Loading dead letters" />
      <ErrorBox error={actionError} context="Action" />
      {notice ? (
        <p class="ok" role="status" data-testid="dlq-notice">
          {notice}
        </p>
      ) : null}
      {progress ? <p aria-busy="true">{progress}</p> : null}
      {poll.loading && letters === undefined ? <Loading what="dead letters" /> : null}
      {letters !== undefined && letters.length === 0 ? (
        <Empty>
          <span data-testid="dlq-empty">No dead letters{route.queue ? ` in ${route.queue}` : ""}{route.offset > 0 ? " on this page" : ""}.</span>
        </Empty>
      ) : null}
      {letters !== undefined && letters.length > 0 ? (
        <>
          <div class="toolbar">
            <ConfirmButton
              label={`Replay all ${letters.length} shown`}
              confirmLabel={`Replay ${letters.length} now`}
              testid="replay-all"
              disabled={busy !== ""}
              onConfirm={() => replayAll(letters)}
            />
            <button class="secondary outline small" onClick={() => void poll.refresh()} disabled={busy !== ""}>
              Refresh
            </button>
          </div>
          <div class="table-wrap">
            <table class="striped" data-testid="dlq-table">
              <thead>
                <tr>
                  <th>Failed at</th>
                  <th>Queue / partition @ offset</th>
                  <th>Group</th>
                  <th>Transaction id</th>
                  <th>Error</th>
                  <th class="num">Retries</th>
                  <th>Payload</th>
                  <th></th>
                </tr>
              </thead>
              <tbody>
                {letters.map((d) => (
                  <tr key={d.id} data-dlq-id={d.id} data-txid={d.transactionId}>
                    <td>{fmtTimeUs(d.failedAtUs)}</td>
                    <td>
                      <a href={href({ page: "queue", queue: d.queue, group: "" })}>{d.queue}</a> / {d.partition} @{" "}
                      {fmtInt(d.offset)}
                    </td>
                    <td>
                      <a href={href({ page: "group", queue: d.queue, group: d.consumerGroup })}>{d.consumerGroup}</a>
                    </td>
                    <td class="mono">{d.transactionId}</td>
                    <td>{d.error}</td>
                    <td class="num">{d.retryCount}</td>
                    <td class="payload-cell">
                      <details>
                        <summary>{d.payload.length} bytes</summary>
                        <PayloadView payload={d.payload} />
                      </details>
                    </td>
                    <td class="actions">
                      <button
                        class="small"
                        data-testid="replay"
                        disabled={busy !== ""}
                        aria-busy={busy === d.id}
                        onClick={() => act(d.id, async () => void (await replayOne(d)))}
                      >
                        Replay
                      </button>
                      <ConfirmButton
                        label="Delete"
                        confirmLabel="Delete now"
                        testid="delete"
                        disabled={busy !== ""}
                        onConfirm={() =>
                          act(d.id, async () => {
                            const r = await api.admin.deleteDeadLetter({ target: { case: "id", value: d.id } });
                            setNotice(`Deleted ${r.deleted} dead letter${r.deleted === 1 ? "" : "s"}.`);
                          })
                        }
                      />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      ) : null}
      <Pager route={route} count={letters?.length ?? 0} />
    </section>
  );
}

function DlqFilter({ route }: { route: DlqRoute }) {
  const [queue, setQueue] = useState(route.queue);
  const [group, setGroup] = useState(route.group);
  const [partition, setPartition] = useState(route.partition);
  return (
    <form
      class="filter"
      aria-label="Filter"
      onSubmit={(e) => {
        e.preventDefault();
        navigate({ page: "dlq", queue: queue.trim(), group: group.trim(), partition: partition.trim(), offset: 0 });
      }}
    >
      <fieldset role="group">
        <input placeholder="queue (all)" aria-label="Queue" value={queue} onInput={(e) => setQueue((e.target as HTMLInputElement).value)} />
        <input placeholder="group (all)" aria-label="Group" value={group} onInput={(e) => setGroup((e.target as HTMLInputElement).value)} />
        <input
          placeholder="partition (all)"
          aria-label="Partition"
          value={partition}
          onInput={(e) => setPartition((e.target as HTMLInputElement).value)}
        />
        <button type="submit">Show</button>
      </fieldset>
    </form>
  );
}

function Pager({ route, count }: { route: DlqRoute; count: number }) {
  if (route.offset === 0 && count < DLQ_PAGE) return null;
  return (
    <nav class="pager">
      {route.offset > 0 ? <a href={href({ ...route, offset: Math.max(0, route.offset - DLQ_PAGE) })}>← Newer</a> : <span />}
      <small>
        {route.offset + 1}–{route.offset + count}
      </small>
      {count >= DLQ_PAGE ? <a href={href({ ...route, offset: route.offset + DLQ_PAGE })}>Older →</a> : <span />}
    </nav>
  );
}
