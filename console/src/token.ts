// The bearer token: kept in sessionStorage (gone when the tab closes, never in a
// cookie or localStorage), sent as `authorization: Bearer <token>` on every call.

import type { Interceptor } from "@connectrpc/connect";

export const TOKEN_KEY = "queen.console.token";
/** Longest token accepted (JWTs with many scopes stay far below this). */
export const TOKEN_MAX = 16384;

export interface TokenStore {
  get(): string;
  set(token: string): void;
  clear(): void;
}

/**
 * Cleans what a user pasted: trims surrounding whitespace and one leading
 * "Bearer " (people copy whole header values). Returns the token, or an error
 * message for a value that cannot travel in an HTTP header.
 */
export function normalizeToken(input: string): { token: string } | { error: string } {
  let t = input.trim();
  if (/^bearer\s+/i.test(t)) t = t.replace(/^bearer\s+/i, "");
  if (t.length > TOKEN_MAX) return { error: `token is longer than ${TOKEN_MAX} characters` };
  // RFC 6750 token68 characters, plus what JWTs never contain but opaque tokens may:
  // any visible ASCII. No spaces, controls or non-ASCII (fetch would refuse the header).
  if (!/^[\x21-\x7e]*$/.test(t)) return { error: "token may contain only visible ASCII characters, no spaces" };
  return { token: t };
}

export function sessionTokenStore(storage: Storage | undefined = globalThis.sessionStorage): TokenStore {
  let memory = "";
  return {
    get() {
      try {
        return storage?.getItem(TOKEN_KEY) ?? memory;
      } catch {
        return memory; // storage disabled (privacy mode): keep it for this page only
      }
    },
    set(token: string) {
      memory = token;
      try {
        if (token === "") storage?.removeItem(TOKEN_KEY);
        else storage?.setItem(TOKEN_KEY, token);
      } catch {
        /* memory copy above still serves this page */
      }
    },
    clear() {
      this.set("");
    },
  };
}

/** Adds the authorization header to every call when a token is set. */
export function authInterceptor(store: TokenStore): Interceptor {
  return (next) => async (req) => {
    const token = store.get();
    if (token !== "") req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}
