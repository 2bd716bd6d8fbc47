import "@picocss/pico/css/pico.min.css";
import "./style.css";
import { render } from "preact";
import { browserTransport } from "./api";
import { App } from "./app";
import { authInterceptor, sessionTokenStore } from "./token";

// gRPC-Web to the origin that served this page: the broker's HTTP side port.
const tokens = sessionTokenStore();
const transport = browserTransport(window.location.origin, [authInterceptor(tokens)]);
const root = document.getElementById("app");
if (root !== null) render(<App transport={transport} tokens={tokens} />, root);
