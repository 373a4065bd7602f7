// LogitPanel: top-k next-token bars per series (e.g. clean / corrupt / patched), side by side, plus a metric line.
// No requests to Python.
import { paintBars } from "./bars.js";
import { fmt, h, scheduler, shell } from "./plot.js";

export function render({ model, el }) {
  const state = shell(model, el, "logits");
  const metric = h("div", { class: "il-metric" });
  state.root.insertBefore(metric, state.plot);

  function showMetric() {
    const m = model.get("metric");
    const vals = m && typeof m === "object" && m.values && typeof m.values === "object" ? m.values : {};
    const entries = Object.entries(vals);
    metric.textContent = entries.length
      ? `${String(m.name ?? "metric")}: ` + entries.map(([k, v]) => `${k} = ${fmt(v, 4)}`).join("   ")
      : "";
  }

  function draw() {
    showMetric();
    return paintBars(state, model.get("series"), String(state.get("title", "")));
  }

  state.watch(["series", "title", "metric"], scheduler(state, draw, { soon: true })); // DOM only: cheap
  draw();
  return () => state.cleanup();
}
