import { describeError } from "../errors";

/** A failed call, shown where it happened: what went wrong and what to do. */
export function ErrorBox({ error, context }: { error: unknown; context?: string }) {
  if (error === undefined || error === null) return null;
  const v = describeError(error);
  return (
    <div class="error-box" role="alert" data-code={v.code}>
      <strong>
        {context ? `${context}: ` : ""}
        {v.title}
      </strong>{" "}
      <code>{v.code}</code>
      <div class="error-detail">{v.detail}</div>
      {v.hint ? <div class="error-hint">{v.hint}</div> : null}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p aria-busy="true" class="loading">
      Loading {what}…
    </p>
  );
}

export function Empty({ children }: { children: preact.ComponentChildren }) {
  return <p class="empty">{children}</p>;
}
