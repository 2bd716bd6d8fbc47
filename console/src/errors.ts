// Every failed call becomes a message a person can act on; never a blank page.

import { Code, ConnectError } from "@connectrpc/connect";

export interface ErrorView {
  /** gRPC status name, e.g. "UNAVAILABLE". */
  code: string;
  title: string;
  /** What the broker said (or the transport), verbatim. */
  detail: string;
  hint?: string;
}

const CODE_NAMES: Record<number, string> = {
  [Code.Canceled]: "CANCELLED",
  [Code.Unknown]: "UNKNOWN",
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "ALREADY_EXISTS",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Aborted]: "ABORTED",
  [Code.OutOfRange]: "OUT_OF_RANGE",
  [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.Internal]: "INTERNAL",
  [Code.Unavailable]: "UNAVAILABLE",
  [Code.DataLoss]: "DATA_LOSS",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};

export function codeName(code: Code): string {
  return CODE_NAMES[code] ?? `CODE_${code}`;
}

/** The fetch itself failed: no HTTP answer at all (broker down, wrong origin). */
function isNetworkFailure(err: ConnectError): boolean {
  const cause = err.cause;
  return cause instanceof TypeError || /failed to fetch|networkerror|load failed/i.test(err.rawMessage);
}

export function describeError(reason: unknown): ErrorView {
  const err = ConnectError.from(reason);
  const detail = err.rawMessage || "(no message)";
  const code = codeName(err.code);
  switch (err.code) {
    case Code.Unauthenticated:
      return {
        code,
        title: "Sign-in needed",
        detail,
        hint: "The broker requires a token. Paste a valid token in the token field at the top and press Save.",
      };
    case Code.PermissionDenied:
      return {
        code,
        title: "Not allowed",
        detail,
        hint: "Your token is valid but its scopes do not cover this queue or action. Use a token with the admin scope for it.",
      };
    case Code.Unavailable:
      return {
        code,
        title: "Broker unavailable",
        detail,
        hint: "The broker or its database cannot be reached right now; nothing was changed. The page retries on its own.",
      };
    case Code.DeadlineExceeded:
      return { code, title: "Timed out", detail, hint: "The broker did not answer in time; nothing is known to have changed." };
    case Code.NotFound:
      return { code, title: "Not found", detail };
    case Code.InvalidArgument:
      return { code, title: "Rejected", detail };
    case Code.Unimplemented:
      return {
        code,
        title: "Not served",
        detail,
        hint: "This address does not answer gRPC-Web for this call. Open the console from the broker's HTTP port (QUEEN_HTTP_PORT, default 6680).",
      };
    case Code.Canceled:
      return { code, title: "Cancelled", detail };
    default:
      if (isNetworkFailure(err))
        return {
          code: "UNAVAILABLE",
          title: "Broker unreachable",
          detail,
          hint: "No answer from the broker's HTTP port. Is the broker running? The page retries on its own.",
        };
      return { code, title: `Call failed (${code})`, detail };
  }
}
