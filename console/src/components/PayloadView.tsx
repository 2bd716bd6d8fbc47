import { useMemo } from "preact/hooks";
import { fmtBytes } from "../format";
import { previewPayload } from "../payload";

export function PayloadView({ payload }: { payload: Uint8Array }) {
  const p = useMemo(() => previewPayload(payload), [payload]);
  if (p.kind === "empty") return <em>empty payload</em>;
  return (
    <div class="payload" data-kind={p.kind}>
      <small class="payload-meta">
        {p.kind.toUpperCase()} · {fmtBytes(p.totalBytes)}
        {p.truncated ? ` · first ${fmtBytes(p.shownBytes)} shown` : ""}
      </small>
      <pre>{p.text}</pre>
    </div>
  );
}
