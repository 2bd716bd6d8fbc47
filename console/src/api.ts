// The broker's services as clients over a transport. The console speaks only the
// generated queen.v1 API; in the browser the transport is gRPC-Web
// (application/grpc-web+proto) to the origin that served the page.

import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import { AdminService } from "./gen/queen/v1/admin_pb";
import { QueueService } from "./gen/queen/v1/queue_pb";

export interface Api {
  admin: Client<typeof AdminService>;
  queue: Client<typeof QueueService>;
}

export function createApi(transport: Transport): Api {
  return { admin: createClient(AdminService, transport), queue: createClient(QueueService, transport) };
}

/** Per-call deadline: a hung broker shows an error instead of a spinner forever. */
export const CALL_TIMEOUT_MS = 10_000;

export function browserTransport(origin: string, interceptors: Interceptor[]): Transport {
  return createGrpcWebTransport({
    baseUrl: origin,
    useBinaryFormat: true,
    interceptors,
    defaultTimeoutMs: CALL_TIMEOUT_MS,
  });
}

export const ApiContext = createContext<Api | null>(null);

export function useApi(): Api {
  const api = useContext(ApiContext);
  if (api === null) throw new Error("useApi outside ApiContext");
  return api;
}
