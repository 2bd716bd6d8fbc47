// Display helpers. Deterministic (no locale or time zone surprises in tests):
// numbers grouped with commas, times in UTC ISO form.

const INT = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const RATE = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

export function fmtInt(v: bigint | number): string {
  return typeof v === "bigint" ? INT.format(v) : INT.format(Math.round(v));
}

/** A rate in messages per second; "—" when not known yet. */
export function fmtRate(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "—";
  return `${RATE.format(v)}/s`;
}

export function fmtBytes(n: bigint | number): string {
  let v = Number(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** Microseconds since the epoch to "YYYY-MM-DD HH:MM:SSZ"; "—" for 0. */
export function fmtTimeUs(us: bigint | number): string {
  const n = Number(us);
  if (n <= 0) return "—";
  return new Date(Math.floor(n / 1000)).toISOString().replace("T", " ").slice(0, 19) + "Z";
}

export function fmtSeconds(s: bigint | number): string {
  let n = Number(s);
  if (n <= 0) return "0 s";
  if (n < 120) return `${n} s`;
  n = Math.round(n / 60);
  if (n < 120) return `${n} min`;
  n = Math.round(n / 60);
  if (n < 48) return `${n} h`;
  return `${Math.round(n / 24)} d`;
}

/**
 * A `<input type="datetime-local">` value ("YYYY-MM-DDTHH:MM[:SS]", the browser's
 * local time) to microseconds since the epoch; null when it does not parse.
 */
export function localInputToUs(value: string): bigint | null {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?$/.test(value)) return null;
  const ms = new Date(value).getTime();
  if (!Number.isFinite(ms)) return null;
  return BigInt(ms) * 1000n;
}

/** Milliseconds since the epoch to a datetime-local value in local time, to the second. */
export function msToLocalInput(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
