// What the Node.js examples share: command-line options, loading proto/ at run
// time with @grpc/proto-loader (typed by the interfaces proto-loader-gen-types
// generated from the same files at build time), the channel (h2c or TLS), the
// bearer token, and waiting for the broker to report SERVING.

import * as fs from "node:fs";
import * as path from "node:path";
import { parseArgs, type ParseArgsConfig } from "node:util";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import type { ProtoGrpcType as HealthProto } from "../gen/health";
import type { ProtoGrpcType as QueueProto } from "../gen/queue";
import type { HealthClient } from "../gen/grpc/health/v1/Health";
import type { HealthCheckResponse__Output } from "../gen/grpc/health/v1/HealthCheckResponse";
import type { QueueServiceClient } from "../gen/queen/v1/QueueService";

// Must match the flags of the "gen" script in package.json: the generated types
// describe objects shaped by these options (field names as in the .proto files,
// 64-bit integers and enums as strings, defaults filled in, a `kind` field naming
// the member of each oneof that is set).
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

const PROTOS = ["queen/v1/queue.proto", "grpc/health/v1/health.proto"];

export class UsageError extends Error {}

/** Prints "prog: msg" on stderr and exits with `code` (2: bad arguments or setup). */
export function fail(msg: string, code = 2): never {
  process.stderr.write(`${path.basename(process.argv[1] ?? "example")}: ${msg}\n`);
  process.exit(code);
}

export const CONNECTION_OPTIONS = {
  addr: { type: "string" },
  ca: { type: "string" },
  "server-name": { type: "string" },
  token: { type: "string" },
  "wait-ready": { type: "string" },
  "proto-dir": { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const satisfies ParseArgsConfig["options"];

export const CONNECTION_HELP = `  -h, --help             show this help and exit

connection:
  --addr HOST:PORT       broker address (env QUEEN_ADDR; default localhost:6632)
  --ca FILE              PEM CA file: connect with TLS and verify the broker against it (env QUEEN_CA)
  --server-name NAME     name to verify in the broker's certificate instead of the host of --addr
  --token TOKEN          bearer token sent as 'authorization: Bearer TOKEN' (env QUEEN_TOKEN)
  --wait-ready SECONDS   first wait up to SECONDS for the broker's health service to report SERVING
  --proto-dir DIR        directory holding queen/v1/*.proto (env QUEEN_PROTO_DIR)
  --json                 print one JSON object per line
`;

/** Parsed options: strings, and true for the flags given. */
export type Values = Record<string, string | boolean | undefined>;

/** Parses argv against the connection options plus `extra`; prints usage and
 * exits on --help or on a bad option. */
export function parseCommandLine(extra: NonNullable<ParseArgsConfig["options"]>, usage: string): Values {
  const options = { ...CONNECTION_OPTIONS, ...extra };
  let values: Values;
  try {
    values = parseArgs({ options, strict: true, allowPositionals: false }).values as Values;
  } catch (e) {
    fail(`${(e as Error).message}\n${usage}${CONNECTION_HELP}`);
  }
  if (values.help) {
    process.stdout.write(usage + CONNECTION_HELP);
    process.exit(0);
  }
  return values;
}

/** A string option, or `def` when absent. */
export function strOption(values: Values, name: string, def: string): string {
  const v = values[name];
  return typeof v === "string" ? v : def;
}

/** An integer option: `def` when absent; exits with a message when it does not
 * parse or is below `min`. */
export function intOption(values: Values, name: string, def: number, min: number): number {
  const v = values[name];
  if (v === undefined) return def;
  const s = String(v);
  if (!/^[0-9]+$/.test(s)) fail(`--${name}: ${JSON.stringify(s)} is not an integer`);
  const n = Number(s);
  if (!Number.isSafeInteger(n) || n < min) fail(`--${name}: ${s} must be at least ${min}`);
  return n;
}

/** A 64-bit integer as JSON: a number when exact, else its decimal string. */
export function jsonInt(s: string): number | string {
  const n = Number(s);
  return Number.isSafeInteger(n) ? n : s;
}

export interface Connection {
  queue: QueueServiceClient;
  health: HealthClient;
  metadata: grpc.Metadata;
  close(): void;
}

/** Loads the protos, opens the channel and, with --wait-ready, waits for SERVING. */
export async function connect(values: Values): Promise<Connection> {
  const protoDir = strOption(values, "proto-dir", process.env.QUEEN_PROTO_DIR || path.join(__dirname, "..", "..", "..", "..", "proto"));
  for (const p of PROTOS) {
    if (!fs.existsSync(path.join(protoDir, p))) fail(`${p} not found under ${protoDir} (set --proto-dir or QUEEN_PROTO_DIR)`);
  }
  const def = protoLoader.loadSync(PROTOS, { ...LOADER_OPTIONS, includeDirs: [protoDir] });
  const proto = grpc.loadPackageDefinition(def) as unknown as QueueProto & HealthProto;

  const addr = String(values.addr ?? (process.env.QUEEN_ADDR || "localhost:6632"));
  const caFile = (values.ca as string | undefined) ?? (process.env.QUEEN_CA || undefined);
  const token = (values.token as string | undefined) ?? (process.env.QUEEN_TOKEN || undefined);
  let creds = grpc.credentials.createInsecure();
  const options: grpc.ChannelOptions = {};
  if (caFile) {
    let ca: Buffer;
    try {
      ca = fs.readFileSync(caFile);
    } catch (e) {
      fail(`cannot read the CA file ${caFile}: ${(e as Error).message}`);
    }
    creds = grpc.credentials.createSsl(ca);
    if (values["server-name"]) {
      options["grpc.ssl_target_name_override"] = String(values["server-name"]);
      options["grpc.default_authority"] = String(values["server-name"]);
    }
  }
  const metadata = new grpc.Metadata();
  if (token) metadata.set("authorization", `Bearer ${token}`);

  const queue = new proto.queen.v1.QueueService(addr, creds, options);
  // Same channel for the health checks: share it through the channel override.
  const health = new proto.grpc.health.v1.Health(addr, creds, { ...options, channelOverride: queue.getChannel() });
  const conn: Connection = {
    queue,
    health,
    metadata,
    close() {
      health.close();
      queue.close();
    },
  };
  const wait = intOption(values, "wait-ready", 0, 0);
  if (wait > 0) await waitServing(conn, wait);
  return conn;
}

/** Polls grpc.health.v1.Health/Check until SERVING; exits with status 2 when the
 * broker does not serve within `seconds`. */
async function waitServing(conn: Connection, seconds: number): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  let last = "no answer";
  for (;;) {
    try {
      const r = await unary<HealthCheckResponse__Output>((cb) =>
        conn.health.Check({ service: "" }, conn.metadata, { deadline: Date.now() + 2000 }, cb),
      );
      if (r.status === "SERVING") return;
      last = String(r.status);
    } catch (e) {
      last = rpcFailure(e);
    }
    if (Date.now() >= deadline) fail(`the broker did not report SERVING within ${seconds} s (last: ${last})`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** A unary call as a promise. */
export function unary<T>(start: (cb: grpc.requestCallback<T>) => unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    start((err, res) => (err ? reject(err) : res === undefined ? reject(new Error("empty response")) : resolve(res)));
  });
}

/** One line for a failed call: its status and message. */
export function rpcFailure(e: unknown): string {
  const s = e as Partial<grpc.ServiceError>;
  if (typeof s.code === "number") return `${grpc.status[s.code]}: ${s.details ?? ""}`;
  return String(e);
}
