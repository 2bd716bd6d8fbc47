import { useEffect, useState } from "preact/hooks";
import { useApi } from "../api";
import { Empty, ErrorBox, Loading } from "../components/ErrorBox";
import { fmtInt, fmtSeconds, fmtTimeUs } from "../format";
import type { QueueOptions } from "../gen/queen/v1/common_pb";
import { allGroups } from "../paging";
import { usePoll } from "../poll";
import { href, navigate } from "../router";

export const QUEUE_POLL_MS = 2000;
export const QUEUE_MODE = "__QUEUE_MODE__";
/** Partitions per page of the partitions table. */
export const PARTITIONS_PAGE = 100;

export function Queue({ queue, group }: { queue: string; group: string }) {
  const api = useApi();
  // the page tokens of the partitions pages shown before this one (a stack:
  // Previous pops it); the current page starts after the last
  const [tokens, setTokens] = useState<string[]>([]);
  useEffect(() => setTokens([]), [queue, group]);
  const pageToken = tokens.length > 0 ? tokens[tokens.length - 1] : "";
  const poll = usePoll(
    async (signal) => {
      const [q, groups, stats] = await Promise.all([
        api.admin.getQueue({ queue, consumerGroup: group, pageSize: PARTITIONS_PAGE, pageToken }, { signal }),
        allGroups(api, queue, "", signal),
        api.admin.getStats({ queue }, { signal }),
      ]);
      return { q, groups, stats: stats.queues.find((s) => s.queue === queue) };
    },
    QUEUE_POLL_MS,
    [api, queue, group, pageToken],
  );
  const d = poll.data;
  const shownGroup = group || QUEUE_MODE;
  return (
    <section>
      <nav aria-label="breadcrumb">
        <ul>
          <li>
            <a href={href({ page: "queues" })}>Queues</a>
          </li>
          <li>{queue}</li>
        </ul>
      </nav>
      <h2>
        Queue <code>{queue}</code>
      </h2>
      <ErrorBox error={poll.error} context="Loading the queue" />
      {poll.loading && d === undefined ? <Loading what="the queue" /> : null}
      {d !== undefined ? (
        <>
          <p class="totals">
            {fmtInt(d.q.queue?.partitions ?? 0)} partitions · {fmtInt(d.q.queue?.messages ?? 0n)} messages in{" "}
            {fmtInt(d.q.queue?.segments ?? 0n)} segments · depth for <code>{shownGroup}</code>:{" "}
            <strong data-testid="queue-depth">{fmtInt(d.q.depth)}</strong> ·{" "}
            <a href={href({ page: "dlq", queue, group: "", partition: "", offset: 0 })}>
              {fmtInt(d.stats?.deadLetters ?? 0n)} dead letters
            </a>
          </p>
          <label>
            Depth and cursors for group{" "}
            <select
              aria-label="Consumer group"
              value={group}
              onChange={(e) => navigate({ page: "queue", queue, group: (e.target as HTMLSelectElement).value })}
            >
              <option value="">{QUEUE_MODE} (queue mode)</option>
              {d.groups
                .filter((g) => g.consumerGroup !== QUEUE_MODE)
                .map((g) => (
                  <option key={g.consumerGroup} value={g.consumerGroup}>
                    {g.consumerGroup}
                  </option>
                ))}
            </select>
          </label>
          <h3>Partitions</h3>
          {d.q.partitions.length === 0 ? (
            <Empty>No partitions yet: the first push creates them.</Empty>
          ) : (
            <div class="table-wrap">
              <table class="striped" data-testid="partitions-table">
                <thead>
                  <tr>
                    <th>Partition</th>
                    <th class="num">Log start</th>
                    <th class="num">Last offset</th>
                    <th class="num">Committed</th>
                    <th class="num">Depth</th>
                    <th>Leased</th>
                    <th>Last write</th>
                  </tr>
                </thead>
                <tbody>
                  {d.q.partitions.map((p) => (
                    <tr key={p.partitionId} data-partition={p.partition}>
                      <td title={p.partitionId}>{p.partition}</td>
                      <td class="num">{fmtInt(p.logStart)}</td>
                      <td class="num">{p.lastOffset < 0n ? "—" : fmtInt(p.lastOffset)}</td>
                      <td class="num">{p.committed < 0n ? "—" : fmtInt(p.committed)}</td>
                      <td class="num" data-col="depth">
                        {fmtInt(p.depth)}
                      </td>
                      <td>{p.leased ? "yes" : ""}</td>
                      <td>{fmtTimeUs(p.lastWriteAtUs)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {tokens.length > 0 || d.q.nextPageToken ? (
            <nav class="pager" data-testid="partitions-pager">
              {tokens.length > 0 ? (
                <button class="secondary" data-testid="partitions-prev" onClick={() => setTokens(tokens.slice(0, -1))}>
                  ← Previous
                </button>
              ) : (
                <span />
              )}
              <span>
                partitions {fmtInt(tokens.length * PARTITIONS_PAGE + 1)}–
                {fmtInt(tokens.length * PARTITIONS_PAGE + d.q.partitions.length)}
              </span>
              {d.q.nextPageToken ? (
                <button
                  class="secondary"
                  data-testid="partitions-next"
                  onClick={() => setTokens([...tokens, d.q.nextPageToken])}
                >
                  Next →
                </button>
              ) : (
                <span />
              )}
            </nav>
          ) : null}
          <h3>Consumer groups</h3>
          {d.groups.length === 0 ? (
            <Empty>No consumer group has read this queue yet.</Empty>
          ) : (
            <div class="table-wrap">
              <table class="striped" data-testid="groups-table">
                <thead>
                  <tr>
                    <th>Group</th>
                    <th class="num">Lag</th>
                    <th>Oldest unconsumed</th>
                    <th>State</th>
                    <th class="num">Partitions</th>
                  </tr>
                </thead>
                <tbody>
                  {d.groups.map((g) => (
                    <tr key={g.consumerGroup} data-group={g.consumerGroup}>
                      <td>
                        <a href={href({ page: "group", queue, group: g.consumerGroup })}>{g.consumerGroup}</a>
                      </td>
                      <td class="num" data-col="lag">
                        {fmtInt(g.totalLag)}
                      </td>
                      <td>{g.maxTimeLagSeconds > 0n ? `${fmtSeconds(g.maxTimeLagSeconds)} ago` : "—"}</td>
                      <td>{g.state === 2 ? "lagging" : "stable"}</td>
                      <td class="num">{g.partitions.length}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {d.q.queue?.options ? <OptionsView options={d.q.queue.options} /> : null}
        </>
      ) : null}
    </section>
  );
}

/** The effective options: every one-member oneof of QueueOptions, by name. */
function OptionsView({ options }: { options: QueueOptions }) {
  const rows: [string, string][] = [];
  for (const [k, v] of Object.entries(options)) {
    if (k === "$typeName" || k === "$unknown") continue;
    const o = v as { case?: string; value?: unknown };
    if (o && typeof o === "object" && o.case !== undefined) rows.push([o.case, String(o.value)]);
  }
  return (
    <details>
      <summary>Options</summary>
      <table>
        <tbody>
          {rows.map(([k, v]) => (
            <tr key={k}>
              <th>{k}</th>
              <td>{v}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </details>
  );
}
