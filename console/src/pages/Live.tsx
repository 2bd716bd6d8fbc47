import { useRef, useState } from "preact/hooks";
import { useApi } from "../api";
import { LineChart } from "../components/Chart";
import { ErrorBox, Loading } from "../components/ErrorBox";
import { fmtBytes, fmtInt, fmtRate, fmtSeconds } from "../format";
import type { GetStatsResponse } from "../gen/queen/v1/admin_pb";
import { usePoll } from "../poll";
import { RateTracker, Series } from "../rates";

export const LIVE_POLL_MS = 1000;
/** Five minutes of one-second points. */
export const LIVE_POINTS = 300;

export interface LiveRates {
  push: number | null;
  deliver: number | null;
  rpc: number | null;
  commits: number | null;
}

/** Rates of this broker's counters between two GetStats answers. */
export function liveRates(tracker: RateTracker, now: number, s: GetStatsResponse): LiveRates {
  return {
    push: tracker.update("pushed", now, s.pushed),
    deliver: tracker.update("delivered", now, s.delivered),
    rpc: tracker.update("rpcs", now, s.rpcs),
    commits: tracker.update("commits", now, s.pushCommits),
  };
}

const SERIES = [
  { label: "pushed msg/s", stroke: "#1f77b4" },
  { label: "delivered msg/s", stroke: "#d62728" },
];

export function Live() {
  const api = useApi();
  const tracker = useRef(new RateTracker());
  const push = useRef(new Series(LIVE_POINTS));
  const deliver = useRef(new Series(LIVE_POINTS));
  const [chart, setChart] = useState<{ t: number[]; values: (number | null)[][] }>({ t: [], values: [[], []] });
  const poll = usePoll(
    async (signal) => {
      const s = await api.admin.getStats({}, { signal });
      const rates = liveRates(tracker.current, performance.now(), s);
      const t = Date.now() / 1000;
      push.current.push(t, rates.push);
      deliver.current.push(t, rates.deliver);
      setChart({ t: [...push.current.t], values: [[...push.current.v], [...deliver.current.v]] });
      return { s, rates };
    },
    LIVE_POLL_MS,
    [api],
  );
  const d = poll.data;
  return (
    <section>
      <h2>Live</h2>
      <p class="note">
        This broker's counters (GetStats), sampled every {LIVE_POLL_MS / 1000} s; rates are the change between samples.
        With several brokers on one database each counts only its own calls.
      </p>
      <ErrorBox error={poll.error} context="Sampling" />
      {poll.loading && d === undefined ? <Loading what="counters" /> : null}
      {d !== undefined ? (
        <>
          <div class="cards">
            <Card label="Push" value={fmtRate(d.rates.push)} testid="push-rate" />
            <Card label="Deliver" value={fmtRate(d.rates.deliver)} testid="deliver-rate" />
            <Card label="RPCs" value={fmtRate(d.rates.rpc)} testid="rpc-rate" />
            <Card label="Push commits" value={fmtRate(d.rates.commits)} testid="commit-rate" />
          </div>
          <LineChart t={chart.t} values={chart.values} series={SERIES} />
          <table class="counters">
            <tbody>
              <tr>
                <th>Uptime</th>
                <td>{fmtSeconds(d.s.uptimeSeconds)}</td>
                <th>Pushed</th>
                <td data-testid="pushed-total">{fmtInt(d.s.pushed)}</td>
                <th>Delivered</th>
                <td>{fmtInt(d.s.delivered)}</td>
              </tr>
              <tr>
                <th>Messages</th>
                <td>{fmtInt(d.s.totalMessages)}</td>
                <th>Pending</th>
                <td>{fmtInt(d.s.totalPending)}</td>
                <th>Dead letters</th>
                <td>{fmtInt(d.s.totalDeadLetters)}</td>
              </tr>
              <tr>
                <th>Segments written</th>
                <td>{fmtInt(d.s.pushSegments)}</td>
                <th>Dedup cache</th>
                <td>
                  {fmtInt(d.s.dedupHashes)} hashes, {fmtBytes(d.s.dedupBytes)}
                </td>
                <th>Maintenance</th>
                <td>
                  {fmtInt(d.s.maintCycles)} cycles, {fmtInt(d.s.maintSegmentsDeleted)} segments deleted
                </td>
              </tr>
            </tbody>
          </table>
        </>
      ) : null}
    </section>
  );
}

function Card({ label, value, testid }: { label: string; value: string; testid: string }) {
  return (
    <article class="card">
      <small>{label}</small>
      <strong data-testid={testid}>{value}</strong>
    </article>
  );
}
