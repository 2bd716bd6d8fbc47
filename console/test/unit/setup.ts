// jsdom has no matchMedia (uPlot asks it for the pixel ratio when loaded) and no
// canvas; the chart component falls back to the numbers when drawing fails.
if (typeof window !== "undefined" && typeof window.matchMedia !== "function") {
  window.matchMedia = (query: string) =>
    ({
      matches: false,
      media: query,
      onchange: null,
      addListener() {},
      removeListener() {},
      addEventListener() {},
      removeEventListener() {},
      dispatchEvent: () => false,
    }) as MediaQueryList;
}
if (typeof HTMLCanvasElement !== "undefined") {
  HTMLCanvasElement.prototype.getContext = (() => null) as typeof HTMLCanvasElement.prototype.getContext;
}

// Waits are bounded, but generous: the suite shares two cores with builds.
import { configure } from "@testing-library/preact";
configure({ asyncUtilTimeout: 10_000 });

// Preact's hooks run effects after a frame: requestAnimationFrame raced by a 35 ms
// timer that calls cancelAnimationFrame. A timer left over from a suite's last
// render fires after jsdom's globals are gone and throws "cancelAnimationFrame is
// not defined" (an unhandled error that fails the run). A plain timer instead.
import { options } from "preact";
options.requestAnimationFrame = (flush: () => void) => {
  setTimeout(flush, 0);
};
