import { useRef } from "preact/hooks";
import { useApi } from "../api";
import { Empty, ErrorBox, Loading } from "../components/ErrorBox";
import { fmtBytes, fmtInt, fmtRate, fmtSeconds } from "../format";
import { usePoll } from "../poll";
import { RateTracker, summarizeGroups, type GroupLag } from "../rates";
import { href } from "../router";
import type { QueueInfo, QueueStats } from "../gen/queen/v1/admin_pb";

export const QUEUES_POLL_MS = 2000;
const LIST_LIMIT = 1000;

export interface QueueRow {
  info: QueueInfo;
  stats: QueueStats | undefined;
  /** Growth of retained messages per second (pushes, less what retention removed). */
  inRate: number | null;
  groups: GroupLag[];
}

export function Queues() {
  const api = useApi();
  const tracker = useRef(new RateTracker());
  const poll = usePoll(
    async (signal) => {
      const [list, stats, groups] = await Promise.all([
        api.admin.listQueues({ limit: LIST_LIMIT }, { signal }),
        api.admin.getStats({}, { signal }),
        api.admin.listConsumerGroups({}, { signal }),
      ]);
      const now = performance.now();
      const byName = new Map(stats.queues.map((s) => [s.queue, s]));
      const inRates = new Map<string, number | null>();
      const keep = new Set<string>();
      for (const q of list.queues) {
        const key = `in\u0000${q.queue}`;
        keep.add(key);
        inRates.set(q.queue, tracker.current.update(key, now, q.messages));
      }
      const lags = summarizeGroups(groups.groups, now, tracker.current, inRates);
      for (const g of groups.groups) keep.add(`group\u0000${g.queue}\u0000${g.consumerGroup}`);
      tracker.current.retain(keep);
      const rows: QueueRow[] = list.queues.map((info) => ({
        info,
        stats: byName.get(info.queue),
        inRate: inRates.get(info.queue) ?? null,
        groups: lags.get(info.queue) ?? [],
      }));
      return { rows, full: list.queues.length >= LIST_LIMIT, totals: stats };
    },
    QUEUES_POLL_MS,
    [api],
  );

  return (
    <section>
      <h2>Queues</h2>
      <ErrorBox error={poll.error} context="Loading queues" />
      {poll.loading && poll.data === undefined ? <Loading what="queues" /> : null}
      {poll.data !== undefined && poll.data.rows.length === 0 ? (
        <Empty>No queues yet. A queue appears with its first push (or ConfigureQueue).</Empty>
      ) : null}
      {poll.data !== undefined && poll.data.rows.length > 0 ? (
        <>
          <p class="totals">
            {fmtInt(poll.data.rows.length)} queues · {fmtInt(poll.data.totals.totalMessages)} messages ·{" "}
            {fmtInt(poll.data.totals.totalPending)} pending · {fmtInt(poll.data.totals.totalDeadLetters)} dead letters
          </p>
          {poll.data.full ? <p class="note">Showing the first {LIST_LIMIT} queues.</p> : null}
          <div class="table-wrap">
            <table class="striped" data-testid="queues-table">
              <thead>
                <tr>
                  <th>Queue</th>
                  <th class="num">Partitions</th>
                  <th class="num">Messages</th>
                  <th class="num" title="Messages not yet consumed by the slowest consumer group">
                    Depth
                  </th>
                  <th class="num" title="Growth of retained messages per second">
                    In rate
                  </th>
                  <th class="num">Size</th>
                  <th class="num">Dead letters</th>
                  <th>Consumer groups (lag, consume rate)</th>
                </tr>
              </thead>
              <tbody>
                {poll.data.rows.map((r) => (
                  <QueueRowView key={r.info.queue} row={r} />
                ))}
              </tbody>
            </table>
          </div>
        </>
      ) : null}
    </section>
  );
}

function QueueRowView({ row }: { row: QueueRow }) {
  const q = row.info.queue;
  const depth = row.stats?.pending ?? row.info.messages;
  const dl = row.stats?.deadLetters ?? 0n;
  return (
    <tr data-queue={q}>
      <td>
        <a href={href({ page: "queue", queue: q, group: "" })}>{q}</a>
      </td>
      <td class="num" data-col="partitions">
        {fmtInt(row.info.partitions)}
      </td>
      <td class="num" data-col="messages">
        {fmtInt(row.info.messages)}
      </td>
      <td class="num" data-col="depth">
        {fmtInt(depth)}
      </td>
      <td class="num" data-col="rate">
        {fmtRate(row.inRate)}
      </td>
      <td class="num">{row.stats ? fmtBytes(row.stats.bytes) : "—"}</td>
      <td class="num" data-col="dead-letters">
        {dl > 0n ? <a href={href({ page: "dlq", queue: q, group: "", partition: "", offset: 0 })}>{fmtInt(dl)}</a> : "0"}
      </td>
      <td data-col="groups">
        {row.groups.length === 0 ? (
          <small class="muted">none</small>
        ) : (
          <ul class="chips">
            {row.groups.map((g) => (
              <li key={g.group} data-group={g.group} class={g.lagging ? "lagging" : ""}>
                <a href={href({ page: "group", queue: q, group: g.group })}>{g.group}</a>{" "}
                <span data-col="group-lag">{fmtInt(g.lag)}</span>
                <small>
                  {" "}
                  · {fmtRate(g.consumeRate)}
                  {g.timeLagSeconds > 0 ? ` · ${fmtSeconds(g.timeLagSeconds)} behind` : ""}
                </small>
              </li>
            ))}
          </ul>
        )}
      </td>
    </tr>
  );
}
