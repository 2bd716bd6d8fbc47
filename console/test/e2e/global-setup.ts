// Before any browser test: everything the suite needs must answer, or the run
// fails here with one message saying what is missing. Never a skip.

import { access, constants } from "node:fs/promises";
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AdminService } from "../../src/gen/queen/v1/admin_pb";
import { apiClients, readEnv } from "./env";

const CHECK_MS = 5000;

function why(e: unknown): string {
  const err = e as { message?: string; cause?: { message?: string; code?: string } };
  const cause = err.cause?.code ?? err.cause?.message;
  return (err.message ?? String(e)) + (cause ? ` (${cause})` : "");
}

export async function setup(): Promise<void> {
  const env = readEnv();
  try {
    await access(env.chromium, constants.X_OK);
  } catch {
    throw new Error(`browser suite: ${env.chromium} not found; install Debian's chromium (scripts/deps.sh) or set QUEEN_CHROMIUM`);
  }

  let html = "";
  try {
    const r = await fetch(env.consoleUrl, { signal: AbortSignal.timeout(CHECK_MS) });
    html = await r.text();
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
  } catch (e) {
    throw new Error(`browser suite: the console is not served at QUEEN_CONSOLE_URL=${env.consoleUrl}: ${why(e)}. Is the broker running with its HTTP side port?`);
  }
  if (!html.includes('id="app"'))
    throw new Error(`browser suite: ${env.consoleUrl} answered, but not with the console's index.html`);

  try {
    await apiClients(env).admin.getStats({}, { timeoutMs: CHECK_MS });
  } catch (e) {
    throw new Error(`browser suite: the broker's gRPC port at QUEEN_ADDR=${env.grpcUrl} does not answer GetStats: ${why(e)}`);
  }

  try {
    const web = createClient(AdminService, createGrpcWebTransport({ baseUrl: new URL(env.consoleUrl).origin }));
    await web.getStats({}, { timeoutMs: CHECK_MS, headers: env.token ? { authorization: `Bearer ${env.token}` } : {} });
  } catch (e) {
    throw new Error(
      `browser suite: ${new URL(env.consoleUrl).origin} does not answer gRPC-Web (application/grpc-web+proto) for AdminService/GetStats: ${why(e)}`,
    );
  }
}
