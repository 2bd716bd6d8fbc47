import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface ChartSeries {
  label: string;
  stroke: string;
}

/**
 * A time-series line chart (uPlot). `t` is in seconds since the epoch; each row
 * of `values` is one series, same length as `t`.
 */
/** Whether this browser can draw on a canvas (uPlot needs a 2D context). */
function canDraw(): boolean {
  try {
    return document.createElement("canvas").getContext("2d") !== null;
  } catch {
    return false;
  }
}

export function LineChart(props: { t: number[]; values: (number | null)[][]; series: ChartSeries[]; height?: number }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);

  useEffect(() => {
    const el = box.current;
    if (el === null || !canDraw()) return; // the numbers around the chart still show
    const opts: uPlot.Options = {
      width: Math.max(320, el.clientWidth || 800),
      height: props.height ?? 260,
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [{}, { label: "msg/s", size: 70 }],
      series: [{}, ...props.series.map((s) => ({ label: s.label, stroke: s.stroke, width: 2, spanGaps: false }))],
    };
    plot.current = new uPlot(opts, [props.t, ...props.values] as uPlot.AlignedData, el);
    const onResize = () => plot.current?.setSize({ width: Math.max(320, el.clientWidth), height: props.height ?? 260 });
    window.addEventListener("resize", onResize);
    return () => {
      window.removeEventListener("resize", onResize);
      plot.current?.destroy();
      plot.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [props.series.length]);

  useEffect(() => {
    plot.current?.setData([props.t, ...props.values] as uPlot.AlignedData);
  }, [props.t, props.values]);

  return <div class="chart" ref={box} />;
}
