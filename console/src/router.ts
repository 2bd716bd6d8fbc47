// Deep links: every page, queue and group has a URL. Routes live in the hash
// (#/queues/orders) so the broker serves one index.html and needs no fallback rule.

import { useEffect, useState } from "preact/hooks";

export type Route =
  | { page: "queues" }
  | { page: "queue"; queue: string; group: string }
  | { page: "group"; queue: string; group: string }
  | { page: "dlq"; queue: string; group: string; partition: string; offset: number }
  | { page: "live" }
  | { page: "notfound"; path: string };

const enc = encodeURIComponent;

function decode(seg: string): string | null {
  try {
    return decodeURIComponent(seg);
  } catch {
    return null;
  }
}

/** Parses "#/queues/a%2Fb?group=g" (with or without the leading "#"). */
export function parseRoute(hash: string): Route {
  const raw = hash.replace(/^#/, "");
  const [pathPart, queryPart = ""] = raw.split("?", 2);
  const q = new URLSearchParams(queryPart);
  const segs = pathPart.split("/").filter((s) => s !== "");
  const names = segs.map(decode);
  if (names.some((n) => n === null)) return { page: "notfound", path: pathPart };
  const s = names as string[];
  if (s.length === 0 || (s.length === 1 && s[0] === "queues")) return { page: "queues" };
  if (s[0] === "queues" && s.length === 2) return { page: "queue", queue: s[1], group: q.get("group") ?? "" };
  if (s[0] === "queues" && s.length === 4 && s[2] === "groups") return { page: "group", queue: s[1], group: s[3] };
  if (s[0] === "dlq" && s.length === 1) {
    const off = Number.parseInt(q.get("offset") ?? "0", 10);
    return {
      page: "dlq",
      queue: q.get("queue") ?? "",
      group: q.get("group") ?? "",
      partition: q.get("partition") ?? "",
      offset: Number.isFinite(off) && off > 0 ? off : 0,
    };
  }
  if (s[0] === "live" && s.length === 1) return { page: "live" };
  return { page: "notfound", path: pathPart };
}

export function href(r: Route): string {
  switch (r.page) {
    case "queues":
      return "#/queues";
    case "queue":
      return `#/queues/${enc(r.queue)}` + (r.group ? `?group=${enc(r.group)}` : "");
    case "group":
      return `#/queues/${enc(r.queue)}/groups/${enc(r.group)}`;
    case "dlq": {
      const q = new URLSearchParams();
      if (r.queue) q.set("queue", r.queue);
      if (r.group) q.set("group", r.group);
      if (r.partition) q.set("partition", r.partition);
      if (r.offset > 0) q.set("offset", String(r.offset));
      const s = q.toString();
      return "#/dlq" + (s ? `?${s}` : "");
    }
    case "live":
      return "#/live";
    case "notfound":
      return `#${r.path}`;
  }
}

export function navigate(r: Route): void {
  window.location.hash = href(r);
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return route;
}
