// Loading data once or every few seconds, with the state a page needs to show:
// loading (nothing yet), data, and the last error (kept next to stale data).

import { useCallback, useEffect, useRef, useState } from "preact/hooks";

export interface PollState<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  /** Loads again now (after an action changed something). */
  refresh: () => Promise<void>;
}

/**
 * Calls `load` now and then `intervalMs` after each answer (never two at once);
 * intervalMs 0 loads once. `deps` restart it (and clear the data) when they change.
 */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, intervalMs: number, deps: unknown[]): PollState<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [loading, setLoading] = useState(true);
  const loadRef = useRef(load);
  loadRef.current = load;
  const runRef = useRef<() => Promise<void>>(async () => {});

  useEffect(() => {
    let alive = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let ctl: AbortController | undefined;
    setData(undefined);
    setError(undefined);
    setLoading(true);
    const run = async () => {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      ctl?.abort();
      const mine = new AbortController();
      ctl = mine;
      try {
        const v = await loadRef.current(mine.signal);
        if (!alive || ctl !== mine) return;
        setData(v);
        setError(undefined);
      } catch (e) {
        if (!alive || ctl !== mine) return;
        setError(e);
      }
      setLoading(false);
      if (alive && intervalMs > 0) timer = setTimeout(run, intervalMs);
    };
    runRef.current = run;
    void run();
    return () => {
      alive = false;
      if (timer !== undefined) clearTimeout(timer);
      ctl?.abort();
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);

  const refresh = useCallback(() => runRef.current(), []);
  return { data, error, loading, refresh };
}
