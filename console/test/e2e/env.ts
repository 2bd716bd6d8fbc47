// What the browser suite runs against, from the environment:
//   QUEEN_CONSOLE_URL  the console as the broker serves it (its HTTP side port),
//                      e.g. http://127.0.0.1:6680/
//   QUEEN_ADDR         the broker's gRPC address for the suite's own API calls,
//                      host:port (h2c) or an http:// URL, e.g. 127.0.0.1:6632
//   QUEEN_CHROMIUM     the browser (default /usr/bin/chromium, Debian's package)
//   QUEEN_TOKEN        optional bearer token for the suite's own API calls

import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AdminService } from "../../src/gen/queen/v1/admin_pb";
import { QueueService } from "../../src/gen/queen/v1/queue_pb";

export interface E2eEnv {
  consoleUrl: string;
  grpcUrl: string;
  chromium: string;
  token: string;
}

export function readEnv(): E2eEnv {
  const consoleUrl = process.env.QUEEN_CONSOLE_URL ?? "";
  const addr = process.env.QUEEN_ADDR ?? "";
  const missing = [];
  if (consoleUrl === "") missing.push("QUEEN_CONSOLE_URL (the broker's HTTP side port, e.g. http://127.0.0.1:6680/)");
  if (addr === "") missing.push("QUEEN_ADDR (the broker's gRPC address, e.g. 127.0.0.1:6632)");
  if (missing.length > 0) throw new Error(`the browser suite needs a running broker; set ${missing.join(" and ")}`);
  return {
    consoleUrl: consoleUrl.endsWith("/") ? consoleUrl : `${consoleUrl}/`,
    grpcUrl: /^https?:\/\//.test(addr) ? addr : `http://${addr}`,
    chromium: process.env.QUEEN_CHROMIUM || "/usr/bin/chromium",
    token: process.env.QUEEN_TOKEN ?? "",
  };
}

export function apiClients(env: E2eEnv) {
  const auth: Interceptor = (next) => async (req) => {
    if (env.token) req.header.set("authorization", `Bearer ${env.token}`);
    return next(req);
  };
  const transport = createGrpcTransport({ baseUrl: env.grpcUrl, interceptors: [auth], defaultTimeoutMs: 10_000 });
  return { admin: createClient(AdminService, transport), queue: createClient(QueueService, transport) };
}

/** The flags Debian's Chromium needs on these machines (no GPU, no sandbox as root, no network chatter). */
export const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
