// TEST-ONLY stand-in for the broker's HTTP side port (QUEEN_HTTP_PORT): serves the
// built console from dist/ and bridges gRPC-Web (application/grpc-web+proto over
// HTTP/1.1) to the broker's gRPC port over HTTP/2. It lets the browser suite and a
// developer run the console against a real broker before the broker serves
// gRPC-Web itself; it is also a small reference of the contract the broker meets:
//
//   POST /queen.v1.<Service>/<Method>   content-type application/grpc-web+proto
//     body: gRPC length-prefixed messages (flag byte 0, 4-byte big-endian length)
//   200   content-type application/grpc-web+proto
//     body: the response messages, then one trailer frame: flag byte 0x80, length,
//           "grpc-status:N\r\ngrpc-message:<percent-encoded>\r\n"
//   GET /  and  GET /assets/...          the files of dist/
//
// Usage: node test/support/sideport.mjs [--listen 127.0.0.1:6680] [--grpc 127.0.0.1:6632]
//        [--dist dist]   (--grpc defaults to QUEEN_ADDR). Prints "listening <url>" once up.

import { createServer } from "node:http";
import { connect } from "node:http2";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, resolve, sep } from "node:path";

const MAX_BODY = 8 << 20;
const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
};

export function grpcTarget(addr) {
  if (/^https?:\/\//.test(addr)) return addr;
  return `http://${addr}`;
}

function trailerFrame(status, message) {
  const text = `grpc-status:${status}\r\n` + (message ? `grpc-message:${encodeURIComponent(message)}\r\n` : "");
  const body = Buffer.from(text, "latin1");
  const head = Buffer.alloc(5);
  head[0] = 0x80;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

/** Starts the bridge; resolves to { url, close() }. */
export async function startSideport({ listen = "127.0.0.1:0", grpc, dist }) {
  const distDir = resolve(dist);
  let session = null;
  const h2 = () => {
    if (session === null || session.closed || session.destroyed) {
      session = connect(grpcTarget(grpc));
      session.on("error", () => {});
      session.on("close", () => {
        session = null;
      });
    }
    return session;
  };

  const bridge = (req, res, body) => {
    const headers = {
      ":method": "POST",
      ":path": req.url,
      "content-type": "application/grpc+proto",
      te: "trailers",
    };
    for (const h of ["authorization", "grpc-timeout"]) if (req.headers[h]) headers[h] = req.headers[h];
    const chunks = [];
    let trailers = null;
    let done = false;
    const finish = (status, message) => {
      if (done) return;
      done = true;
      res.writeHead(200, { "content-type": "application/grpc-web+proto" });
      res.end(Buffer.concat([...chunks, trailerFrame(status, message)]));
    };
    let stream;
    try {
      stream = h2().request(headers);
    } catch (e) {
      finish(14, `broker unreachable: ${e.message}`);
      return;
    }
    stream.on("response", (h) => {
      if (h["grpc-status"] !== undefined) trailers = h; // trailers-only answer
    });
    stream.on("data", (c) => chunks.push(c));
    stream.on("trailers", (t) => {
      trailers = t;
    });
    stream.on("error", (e) => finish(14, `broker unreachable: ${e.message}`));
    stream.on("close", () => {
      if (trailers === null) {
        finish(14, "broker closed the stream without a status");
        return;
      }
      const msg = trailers["grpc-message"] ? decodeURIComponent(String(trailers["grpc-message"])) : "";
      finish(Number(trailers["grpc-status"]), msg);
    });
    stream.end(body);
  };

  const serveFile = async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const rel = normalize(path === "/" ? "/index.html" : path);
    const file = join(distDir, rel);
    if (!file.startsWith(distDir + sep)) {
      res.writeHead(404).end();
      return;
    }
    try {
      const data = await readFile(file);
      res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
      res.end(req.method === "HEAD" ? undefined : data);
    } catch {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    }
  };

  const server = createServer((req, res) => {
    const ct = String(req.headers["content-type"] ?? "");
    if (req.method === "POST" && ct.startsWith("application/grpc-web")) {
      if (ct.startsWith("application/grpc-web-text")) {
        res.writeHead(415).end();
        return;
      }
      const parts = [];
      let size = 0;
      req.on("data", (c) => {
        size += c.length;
        if (size > MAX_BODY) {
          res.writeHead(413).end();
          req.destroy();
          return;
        }
        parts.push(c);
      });
      req.on("end", () => bridge(req, res, Buffer.concat(parts)));
      return;
    }
    if (req.method === "GET" || req.method === "HEAD") {
      void serveFile(req, res);
      return;
    }
    res.writeHead(405).end();
  });

  const [host, port] = listen.split(/:(?=\d+$)/);
  await new Promise((ok, fail) => {
    server.once("error", fail);
    server.listen(Number(port), host, ok);
  });
  const addr = server.address();
  return {
    url: `http://${host}:${addr.port}/`,
    close: () =>
      new Promise((ok) => {
        session?.close();
        server.closeAllConnections?.();
        server.close(() => ok());
      }),
  };
}

const isMain = import.meta.url === `file://${process.argv[1]}`;
if (isMain) {
  const args = process.argv.slice(2);
  const opt = (name, def) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : def;
  };
  const grpc = opt("--grpc", process.env.QUEEN_ADDR || "127.0.0.1:6632");
  const here = new URL("../..", import.meta.url).pathname;
  const sp = await startSideport({ listen: opt("--listen", "127.0.0.1:6680"), grpc, dist: opt("--dist", join(here, "dist")) });
  console.log(`listening ${sp.url} -> gRPC ${grpc}`);
  const stop = () => sp.close().then(() => process.exit(0));
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}
