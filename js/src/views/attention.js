// AttentionView: one head's pattern, queries on y (top to bottom), keys on x; tokens on both axes.
// Request to Python (declared in interplab/widgets/protocol.json): select {layer, head} when a selector changes.
import { BLUES, baseLayout, esc, fmt, grid, h, paint, quoted, scheduler, shell, tokenAxis } from "../plot.js";

const MIN_CELL = 5; // px

export function render({ model, el }) {
  const state = shell(model, el, "attention");
  const layer = h("select", { class: "il-layer", title: "layer" });
  const head = h("select", { class: "il-head", title: "head" });
  state.root.insertBefore(
    h("div", { class: "il-row" }, h("label", {}, "layer", layer), h("label", {}, "head", head)),
    state.plot,
  );
  const onSelect = () =>
    state.request("select", {
      layer: Number.parseInt(layer.value, 10) || 0,
      head: Number.parseInt(head.value, 10) || 0,
    });
  layer.addEventListener("change", onSelect);
  head.addEventListener("change", onSelect);

  function options(sel, n) {
    if (sel.options.length !== n) {
      sel.replaceChildren(...Array.from({ length: n }, (_, i) => h("option", { value: String(i), text: String(i) })));
    }
  }
  function syncControls() {
    options(layer, Math.max(0, Number(model.get("n_layers")) || 0));
    options(head, Math.max(0, Number(model.get("n_heads")) || 0));
    layer.value = String(model.get("layer") ?? 0);
    head.value = String(model.get("head") ?? 0);
  }

  function draw() {
    const z = grid(model.get("pattern"));
    const toks = Array.isArray(model.get("tokens")) ? model.get("tokens").map(String) : [];
    const n = Math.max(z.length, z.reduce((m, r) => Math.max(m, r.length), 0), toks.length);
    const labels = Array.from({ length: n }, (_, i) => toks[i] ?? String(i));
    const zz = Array.from({ length: n }, (_, q) => Array.from({ length: n }, (_, k) => z[q]?.[k] ?? null));
    const hover = zz.map((row, q) =>
      row.map((v, k) => `query ${q} ${quoted(labels[q])}<br>key ${k} ${quoted(labels[k])}<br>attention: ${fmt(v)}`),
    );
    const title = String(state.get("title", "")) || `attention pattern, layer ${model.get("layer")} head ${model.get("head")}`;
    const trace = {
      type: "heatmap",
      z: zz,
      x: labels.map((_, i) => i),
      y: labels.map((_, i) => i),
      customdata: hover,
      hovertemplate: "%{customdata}<extra></extra>",
      colorscale: BLUES,
      zmin: 0,
      zmax: 1,
      colorbar: { title: { text: "attention", side: "right" }, thickness: 14 },
    };
    // square cells, at least MIN_CELL px (a longer prompt grows the plot, which scrolls); every k-th token labelled
    // on each axis (keys at -45°: 18 px apart; queries: 16 px), the hover names each cell's two tokens
    const size = Math.max(Math.min(800, Math.max(320, 160 + 24 * n)), 150 + MIN_CELL * n);
    const side = size - 150; // the pattern's side in px: the height less the top and bottom margins
    const layout = baseLayout({
      title: { text: esc(title) },
      margin: { l: 100, r: 30, t: 50, b: 100 },
      height: size,
      width: size + 60, // square cells: the colorbar sits next to the pattern
      xaxis: tokenAxis(labels, { title: { text: "key" }, tickangle: -45, constrain: "domain" },
        { maxTicks: Math.floor(side / 18) }),
      yaxis: tokenAxis(labels, { title: { text: "query" }, range: [n - 0.5, -0.5], scaleanchor: "x" },
        { maxTicks: Math.floor(side / 16) }),
    });
    return paint(state, [trace], layout);
  }

  state.watch(["n_layers", "n_heads", "layer", "head"], syncControls);
  state.watch(["tokens", "pattern", "title", "layer", "head"], scheduler(state, draw));
  syncControls();
  draw();
  return () => state.cleanup();
}
