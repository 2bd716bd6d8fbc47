import { describe, expect, test } from "vitest";
import { authInterceptor, normalizeToken, sessionTokenStore, TOKEN_KEY, TOKEN_MAX } from "../../src/token";

describe("normalizeToken", () => {
  test("trims and drops a pasted 'Bearer ' prefix", () => {
    expect(normalizeToken("  abc.def.ghi \n")).toEqual({ token: "abc.def.ghi" });
    expect(normalizeToken("Bearer abc.def")).toEqual({ token: "abc.def" });
    expect(normalizeToken("bearer   abc")).toEqual({ token: "abc" });
  });
  test("an empty value means no token", () => {
    expect(normalizeToken("   ")).toEqual({ token: "" });
  });
  test("rejects what cannot travel in a header", () => {
    expect(normalizeToken("abc def")).toHaveProperty("error");
    expect(normalizeToken("abc\u00e9")).toHaveProperty("error");
    expect(normalizeToken("a\nb")).toHaveProperty("error");
    expect(normalizeToken("x".repeat(TOKEN_MAX + 1))).toHaveProperty("error");
    expect(normalizeToken("x".repeat(TOKEN_MAX))).toEqual({ token: "x".repeat(TOKEN_MAX) });
  });
});

describe("sessionTokenStore", () => {
  test("keeps the token in sessionStorage, not localStorage", () => {
    sessionStorage.clear();
    localStorage.clear();
    const s = sessionTokenStore();
    expect(s.get()).toBe("");
    s.set("t1");
    expect(sessionStorage.getItem(TOKEN_KEY)).toBe("t1");
    expect(localStorage.length).toBe(0);
    expect(sessionTokenStore().get()).toBe("t1"); // a reload in the same tab keeps it
    s.clear();
    expect(sessionStorage.getItem(TOKEN_KEY)).toBeNull();
    expect(s.get()).toBe("");
  });
  test("works for this page when storage throws", () => {
    const broken = {
      getItem() {
        throw new Error("denied");
      },
      setItem() {
        throw new Error("denied");
      },
      removeItem() {
        throw new Error("denied");
      },
    } as unknown as Storage;
    const s = sessionTokenStore(broken);
    s.set("t2");
    expect(s.get()).toBe("t2");
  });
});

describe("authInterceptor", () => {
  const call = async (token: string) => {
    const store = sessionTokenStore(undefined);
    store.set(token);
    const header = new Headers();
    let seen: string | null = "unset";
    await authInterceptor(store)(async (req) => {
      seen = req.header.get("authorization");
      return {} as never;
    })({ header } as never);
    return seen;
  };
  test("sends the stored token as a bearer token", async () => {
    expect(await call("abc")).toBe("Bearer abc");
  });
  test("sends no authorization header without a token", async () => {
    expect(await call("")).toBeNull();
  });
});
