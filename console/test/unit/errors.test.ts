// @vitest-environment node
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, test } from "vitest";
import { codeName, describeError } from "../../src/errors";

describe("describeError", () => {
  test("UNAUTHENTICATED points at the token field", () => {
    const v = describeError(new ConnectError("missing bearer token", Code.Unauthenticated));
    expect(v.code).toBe("UNAUTHENTICATED");
    expect(v.title).toBe("Sign-in needed");
    expect(v.detail).toBe("missing bearer token");
    expect(v.hint).toMatch(/token field/);
  });
  test("PERMISSION_DENIED says the token's scopes do not cover it", () => {
    const v = describeError(new ConnectError("no admin scope on orders", Code.PermissionDenied));
    expect(v.code).toBe("PERMISSION_DENIED");
    expect(v.title).toBe("Not allowed");
    expect(v.hint).toMatch(/scopes/);
  });
  test("UNAVAILABLE says nothing was changed", () => {
    const v = describeError(new ConnectError("database unavailable", Code.Unavailable));
    expect(v.code).toBe("UNAVAILABLE");
    expect(v.hint).toMatch(/nothing was changed/);
  });
  test("a failed fetch (no HTTP answer) reads as the broker being unreachable", () => {
    const v = describeError(new ConnectError("Failed to fetch", Code.Unknown, undefined, undefined, new TypeError("Failed to fetch")));
    expect(v.code).toBe("UNAVAILABLE");
    expect(v.title).toBe("Broker unreachable");
  });
  test("UNIMPLEMENTED (HTTP 404 from a server without gRPC-Web) names the side port", () => {
    const v = describeError(new ConnectError("HTTP 404", Code.Unimplemented));
    expect(v.hint).toMatch(/QUEEN_HTTP_PORT/);
  });
  test("every other status keeps its name and the broker's message", () => {
    for (const code of [Code.Internal, Code.ResourceExhausted, Code.Aborted, Code.DataLoss, Code.FailedPrecondition]) {
      const v = describeError(new ConnectError("boom", code));
      expect(v.code).toBe(codeName(code));
      expect(v.title).toContain(codeName(code));
      expect(v.detail).toBe("boom");
    }
    expect(describeError(new ConnectError("bad queue name", Code.InvalidArgument))).toMatchObject({
      code: "INVALID_ARGUMENT",
      detail: "bad queue name",
    });
    expect(describeError(new ConnectError("x", Code.NotFound)).code).toBe("NOT_FOUND");
    expect(describeError(new ConnectError("x", Code.DeadlineExceeded)).code).toBe("DEADLINE_EXCEEDED");
  });
  test("anything thrown, not only ConnectError, becomes a message", () => {
    expect(describeError(new Error("kaput"))).toMatchObject({ code: "UNKNOWN", detail: "kaput" });
    expect(describeError("a string").detail).toBe("a string");
  });
  test("status names match gRPC's", () => {
    expect(codeName(Code.Canceled)).toBe("CANCELLED");
    expect(codeName(99 as Code)).toBe("CODE_99");
  });
});
