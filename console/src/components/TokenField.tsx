import { useState } from "preact/hooks";
import { normalizeToken, type TokenStore } from "../token";

/**
 * The bearer token for the broker's auth checks. Stored in sessionStorage only;
 * every call carries it as `authorization: Bearer <token>`.
 */
export function TokenField({ store, onChange }: { store: TokenStore; onChange: () => void }) {
  const [value, setValue] = useState("");
  const [saved, setSaved] = useState(store.get() !== "");
  const [error, setError] = useState("");
  const save = (e: Event) => {
    e.preventDefault();
    const r = normalizeToken(value);
    if ("error" in r) {
      setError(r.error);
      return;
    }
    store.set(r.token);
    setValue("");
    setError("");
    setSaved(r.token !== "");
    onChange();
  };
  return (
    <form class="token" onSubmit={save} aria-label="Token">
      <input
        type="password"
        name="token"
        autocomplete="off"
        placeholder={saved ? "token set (paste to replace)" : "bearer token (optional)"}
        aria-label="Bearer token"
        value={value}
        onInput={(e) => setValue((e.target as HTMLInputElement).value)}
      />
      <button type="submit" class="small">
        Save
      </button>
      {saved ? (
        <button
          type="button"
          class="secondary outline small"
          onClick={() => {
            store.clear();
            setSaved(false);
            onChange();
          }}
        >
          Clear
        </button>
      ) : null}
      <small class="token-state" data-testid="token-state">
        {saved ? "token set" : "no token"}
      </small>
      {error ? (
        <small role="alert" class="token-error">
          {error}
        </small>
      ) : null}
    </form>
  );
}
