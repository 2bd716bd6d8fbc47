import { useMemo, useState } from "preact/hooks";
import { ApiContext, createApi } from "./api";
import { TokenField } from "./components/TokenField";
import type { Transport } from "@connectrpc/connect";
import { DeadLetters } from "./pages/DeadLetters";
import { Group } from "./pages/Group";
import { Live } from "./pages/Live";
import { Queue } from "./pages/Queue";
import { Queues } from "./pages/Queues";
import { href, useRoute, type Route } from "./router";
import type { TokenStore } from "./token";

/**
 * The console. `transport` is gRPC-Web in the browser and an in-memory router in
 * tests; `tokens` is the same store its interceptor reads.
 */
export function App({ transport, tokens }: { transport: Transport; tokens: TokenStore }) {
  const route = useRoute();
  // A new token restarts every page's loading (pages key their polls on the api).
  const [epoch, setEpoch] = useState(0);
  const api = useMemo(() => createApi(transport), [transport, epoch]);
  return (
    <ApiContext.Provider value={api}>
      <header class="container-fluid top">
        <nav>
          <ul>
            <li>
              <strong>Queen</strong>
            </li>
            <NavLink route={route} to={{ page: "queues" }} label="Queues" match={["queues", "queue", "group"]} />
            <NavLink route={route} to={{ page: "dlq", queue: "", group: "", partition: "", offset: 0 }} label="Dead letters" match={["dlq"]} />
            <NavLink route={route} to={{ page: "live" }} label="Live" match={["live"]} />
          </ul>
          <ul>
            <li>
              <TokenField store={tokens} onChange={() => setEpoch((n) => n + 1)} />
            </li>
          </ul>
        </nav>
      </header>
      <main class="container-fluid" key={epoch}>
        <Page route={route} />
      </main>
    </ApiContext.Provider>
  );
}

function NavLink(props: { route: Route; to: Route; label: string; match: Route["page"][] }) {
  const current = props.match.includes(props.route.page);
  return (
    <li>
      <a href={href(props.to)} aria-current={current ? "page" : undefined}>
        {props.label}
      </a>
    </li>
  );
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case "queues":
      return <Queues />;
    case "queue":
      return <Queue queue={route.queue} group={route.group} />;
    case "group":
      return <Group queue={route.queue} group={route.group} />;
    case "dlq":
      return <DeadLetters route={route} />;
    case "live":
      return <Live />;
    case "notfound":
      return (
        <section>
          <h2>No such page</h2>
          <p>
            <code>{route.path}</code> is not a page of the console. <a href={href({ page: "queues" })}>Queues</a>
          </p>
        </section>
      );
  }
}
