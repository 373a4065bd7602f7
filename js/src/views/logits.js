// LogitPanel: top-k next-token bars per series (e.g. clean / corrupt / patched), side by side, plus a metric line.
// Request to Python (protocol.json): pair {index} from the menu of a dataset's pairs (-1: their mean). A heatmap sharing this panel's `link` trait paints a click on a cell of an exact sweep here at
// once, from the numbers it holds (its cell_tops); the kernel's answer, the same numbers, repaints it later.
import { paintBars } from "../bars.js";
import { bus, h, metricLine, scheduler, shell } from "../plot.js";

export function render({ model, el }) {
  const state = shell(model, el, "logits");
  const metric = h("div", { class: "il-metric" });
  state.root.insertBefore(metric, state.plot);

  // a dataset's pairs: a menu of what the panel shows (the mean over the pairs, or one of them)
  const menu = h("select", { class: "il-pair", title: "which pair the bars show" });
  const menuRow = h("label", { class: "il-row il-pair-row" }, "show: ", menu);
  state.root.insertBefore(menuRow, metric);
  menu.addEventListener("change", () => state.request("pair", { index: Number(menu.value) }));
  function showMenu() {
    const pairs = Array.isArray(model.get("pairs")) ? model.get("pairs").map(String) : [];
    menuRow.style.display = pairs.length ? "" : "none";
    const options = [h("option", { value: "-1", text: `the mean over ${pairs.length} pairs` }),
      ...pairs.map((p, i) => h("option", { value: String(i), text: p }))];
    menu.replaceChildren(...options);
    menu.value = String(Number.isInteger(model.get("pair")) ? model.get("pair") : -1);
  }
  showMenu();
  state.watch(["pairs", "pair"], showMenu);

  function showMetric(m = model.get("metric")) {
    metric.replaceChildren(...metricLine(m));
  }

  function draw() {
    showMetric();
    return paintBars(state, model.get("series"), String(state.get("title", "")));
  }

  state.watch(["series", "title", "metric"], scheduler(state, draw, { soon: true })); // DOM only: cheap

  // {name, tokens, probs, value, metric}: the patched (or, in an ablation sweep, ablated) run of a clicked cell;
  // clean and corrupt (an ablation: clean alone) are this panel's own
  function paintCell(ev) {
    const cell = ev.detail;
    const series = Array.isArray(model.get("series")) ? model.get("series") : [];
    const m = model.get("metric");
    const vals = m && typeof m === "object" && m.values && typeof m.values === "object" ? m.values : {};
    const base = series.filter((s) => s?.name === "clean" || s?.name === "corrupt");
    if (!cell || String(m?.name ?? "") !== cell.metric) return; // not ours to guess
    const ablated = String(cell.name ?? "").startsWith("ablated:");
    if (base.length !== (ablated ? 1 : 2) || base[0]?.name !== "clean") return;
    let values;
    if (ablated) { // as the kernel's panel: clean, ablated and the change
      values = { clean: vals.clean, ablated: cell.value, change: cell.value - vals.clean };
    } else {
      values = { clean: vals.clean, corrupt: vals.corrupt, patched: cell.value };
      const denom = vals.clean - vals.corrupt;
      if (Number.isFinite(denom) && Math.abs(denom) > 1e-9) values.normalised = (cell.value - vals.corrupt) / denom;
    }
    showMetric({ name: m.name, values, notes: m.notes });
    paintBars(state, [...base, { name: cell.name, tokens: cell.tokens, probs: cell.probs }],
      String(state.get("title", "")));
  }
  const link = String(state.get("link", ""));
  if (link) {
    bus().addEventListener(link, paintCell);
    state.onCleanup(() => bus().removeEventListener(link, paintCell));
  }
  draw();
  return () => state.cleanup();
}
