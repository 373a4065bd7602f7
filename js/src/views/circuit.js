// CircuitGraph: writers -> readers as plain SVG. Nodes in rows by layer (the embeddings at the bottom, the logits on
// top; heads left to right, the layer's MLP last), the top `count` edges by |score| drawn with width and colour by
// score (blue > 0, red < 0; a reader's q / k / v inputs enter its node left / middle / right). The slider picks how
// many edges are drawn: they are the chosen circuit. Requests (protocol.json): threshold {count} when the slider is
// let go (the page redraws while it moves), edge {edge} on a click on an edge (the kernel patches exactly that edge
// and sets `exact`), node {node} on a click on a node (its edges are highlighted; the kernel patches the node's whole
// output and sets `node_exact`), circuit {} from the button (the kernel evaluates the drawn edges and sets `circuit`).
// An edge that spans layers passes each row between its ends through a gap between nodes, never through a node.
import { fmt, h, recordPaint, scheduler, shell } from "../plot.js";

const SVG = "http://www.w3.org/2000/svg";
const TRAITS = ["nodes", "edges", "count", "selected", "exact", "circuit", "method", "metric_name", "title",
  "base_value", "source_value", "node", "node_exact"];
const ROW = 76; // px between layers
const WIDTH = 860;
const SITE_DX = { q: -7, k: 0, v: 7, "": 0 };
export const POSITIVE = "#2166ac";
export const NEGATIVE = "#b2182b";

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.append(c);
  return el;
}

/** Edges as the kernel sent them, checked: [{name, writer, reader, site, score}], largest |score| first. */
export function edgeList(raw) {
  if (!Array.isArray(raw)) return [];
  return raw
    .filter((e) => Array.isArray(e) && e.length === 5 && typeof e[0] === "string")
    .map(([name, writer, reader, site, score]) => ({
      name, writer: String(writer), reader: String(reader), site: SITE_DX[site] === undefined ? "" : site,
      score: typeof score === "number" && Number.isFinite(score) ? score : 0,
    }));
}

export function render({ model, el }) {
  const state = shell(model, el, "circuit");
  const title = h("div", { class: "il-bars-title" });
  const slider = h("input", { type: "range", class: "il-threshold", min: "0", max: "0", step: "1" });
  const sliderText = h("span", { class: "il-threshold-text" });
  const evaluate = h("button", { type: "button", class: "il-evaluate" });
  const info = h("div", { class: "il-metric il-edge-info" });
  const nodeInfo = h("div", { class: "il-metric il-node-info" });
  const result = h("div", { class: "il-metric il-circuit" });
  state.root.insertBefore(title, state.plot);
  state.root.insertBefore(h("div", { class: "il-row" }, h("label", {}, "edges ", slider), sliderText, evaluate),
    state.plot);
  state.root.append(info, nodeInfo, result);

  let guess = null; // the slider's count while it moves or until the kernel echoes it

  const count = () => {
    const n = edgeList(model.get("edges")).length;
    const c = guess ?? model.get("count");
    return Math.min(n, Math.max(0, Number.isInteger(c) ? c : 0));
  };

  function layout(nodes) {
    const heads = Math.max(1, ...nodes.filter((n) => n?.kind === "head").map((n) => (n.index ?? 0) + 1));
    const layers = Math.max(0, ...nodes.filter((n) => n?.kind === "head" || n?.kind === "mlp").map((n) => n.layer + 1));
    const slot = (WIDTH - 120) / (heads + 1);
    const pos = new Map();
    for (const n of nodes) {
      if (!n || typeof n.name !== "string") continue;
      const layer = n.kind === "embed" ? -1 : n.kind === "logits" ? layers : n.layer;
      const x = n.kind === "embed" || n.kind === "logits" ? WIDTH / 2 : 60 + slot * ((n.kind === "mlp" ? heads : n.index) + 0.5);
      pos.set(n.name, { x, y: 30 + (layers - layer) * ROW, kind: n.kind, layer });
    }
    // the gaps between a layer row's nodes (and beside them), where edges that cross the row pass
    const gaps = Array.from({ length: heads + 2 }, (_, i) => 60 + slot * i);
    return { pos, height: 60 + (layers + 1) * ROW, layers, gaps };
  }

  /** An edge from writer a to reader b (entering at its q / k / v side): through the gap nearest its straight line
   * on each row it crosses, with vertical tangents at every point (smooth, and clear of the nodes). */
  function path(a, b, site, gaps) {
    const r = 12;
    const x2 = b.x + SITE_DX[site];
    if (a.y === b.y) { // a head into its own layer's MLP: an arc above the row
      return `M ${a.x} ${a.y - r} C ${a.x} ${a.y - ROW * 0.55}, ${x2} ${b.y - ROW * 0.55}, ${x2} ${b.y - r}`;
    }
    const points = [{ x: a.x, y: a.y - r }];
    for (let y = a.y - ROW; y > b.y + 1; y -= ROW) { // the rows strictly between the two ends
      const t = (a.y - y) / (a.y - b.y);
      const straight = a.x + (x2 - a.x) * t;
      points.push({ x: gaps.reduce((best, g) => (Math.abs(g - straight) < Math.abs(best - straight) ? g : best)), y });
    }
    points.push({ x: x2, y: b.y + r });
    let d = `M ${points[0].x} ${points[0].y}`;
    for (let i = 1; i < points.length; i++) {
      const [p, q] = [points[i - 1], points[i]];
      const mid = (p.y + q.y) / 2;
      d += ` C ${p.x} ${mid}, ${q.x} ${mid}, ${q.x} ${q.y}`;
    }
    return d;
  }

  function draw() {
    const nodes = Array.isArray(model.get("nodes")) ? model.get("nodes") : [];
    const edges = edgeList(model.get("edges"));
    const k = count();
    const shown = edges.slice(0, k);
    const top = Math.max(1e-12, ...edges.map((e) => Math.abs(e.score)));
    const { pos, height, layers, gaps } = layout(nodes);
    const selected = String(model.get("selected") ?? "");
    const node = String(model.get("node") ?? "");
    const touches = (e) => e.writer === node || e.reader === node;
    const used = new Set(shown.flatMap((e) => [e.writer, e.reader]));
    const root = svg("svg", { class: "il-graph", viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height });
    for (let layer = -1; layer <= layers; layer++) {
      const label = layer === -1 ? "embed" : layer === layers ? "logits" : `L${layer}`;
      const t = svg("text", { x: 6, y: 30 + (layers - layer) * ROW + 4, class: "il-layer-label" });
      t.textContent = label;
      root.append(t);
    }
    const edgeLayer = svg("g", { class: "il-edges" });
    // weakest first: the strongest edges are drawn last, on top, and get the clicks where edges cross
    for (const e of [...shown].reverse()) {
      const a = pos.get(e.writer);
      const b = pos.get(e.reader);
      if (!a || !b) continue;
      const d = path(a, b, e.site, gaps);
      const width = 0.75 + (5 * Math.abs(e.score)) / top;
      // a clicked node: its edges stand out, the others fade
      const mark = node ? (touches(e) ? " il-edge-node" : " il-edge-faded") : "";
      const g = svg("g", { class: `il-edge${e.name === selected ? " on" : ""}${mark}`, "data-edge": e.name });
      const tip = svg("title");
      tip.textContent = `${e.name}: ${fmt(e.score, 4)}`;
      g.append(tip,
        svg("path", { d, class: "il-edge-line", fill: "none", stroke: e.score >= 0 ? POSITIVE : NEGATIVE,
          "stroke-width": width.toFixed(2), "stroke-opacity": e.name === selected ? 1 : 0.75 }),
        svg("path", { d, class: "il-edge-hit", fill: "none", stroke: "transparent",
          "stroke-width": Math.max(9, width + 4).toFixed(2) }));
      g.addEventListener("click", () => state.request("edge", { edge: e.name }));
      edgeLayer.append(g);
    }
    const nodeLayer = svg("g", { class: "il-nodes" });
    for (const [name, p] of pos) {
      const faded = !used.has(name);
      const g = svg("g", { class: `il-node${name === node ? " on" : ""}`, "data-node": name,
        opacity: faded && name !== node ? 0.35 : 1 });
      const tip = svg("title");
      tip.textContent = `${name}: click to show its edges and what patching its output does`;
      g.append(tip);
      g.addEventListener("click", () => state.request("node", { node: name }));
      const wide = p.kind !== "head";
      g.append(wide
        ? svg("rect", { x: p.x - 24, y: p.y - 12, width: 48, height: 24, rx: 4, fill: "#f3f3f3", stroke: "#555" })
        : svg("circle", { cx: p.x, cy: p.y, r: 12, fill: "#fff", stroke: "#555" }));
      const t = svg("text", { x: p.x, y: p.y + 4, "text-anchor": "middle", class: "il-node-label" });
      t.textContent = p.kind === "head" ? name.replace(/^L\d+/, "") : p.kind === "mlp" ? "MLP" : name;
      g.append(t);
      nodeLayer.append(g);
    }
    root.append(edgeLayer, nodeLayer);
    state.plot.replaceChildren(root);

    title.textContent = String(state.get("title", ""));
    slider.max = String(edges.length);
    slider.min = edges.length ? "1" : "0";
    if (!slider.matches(":focus") || guess === null) slider.value = String(k);
    const last = shown[shown.length - 1];
    sliderText.textContent = edges.length
      ? `top ${k} of ${edges.length} edges` + (last ? ` (|score| ≥ ${fmt(Math.abs(last.score), 4)})` : "")
      : "no edges";
    evaluate.textContent = `Evaluate circuit (${k} edges)`;
    evaluate.disabled = k === 0;
    showInfo(edges, selected);
    showNode(shown, node);
    showCircuit();
    recordPaint(state);
  }

  function showInfo(edges, selected) {
    const e = edges.find((x) => x.name === selected);
    if (!e) {
      info.textContent = edges.length ? "Click an edge to patch exactly that edge." : "";
      return;
    }
    const exact = model.get("exact");
    const v = exact && typeof exact === "object" ? exact[selected] : undefined;
    const method = String(state.get("method", "estimate"));
    const base = model.get("base_value");
    let text = `${selected}: ${method} ${fmt(e.score, 4)}`;
    if (typeof v === "number") {
      text += `   exact ${fmt(v, 4)}`;
      if (typeof base === "number") text += `   (${String(state.get("metric_name", "metric"))} patched = ${fmt(base + v, 4)})`;
    } else if (method !== "exact") {
      text += "   exact: computing…";
    }
    info.textContent = text;
    info.dataset.edge = selected;
    info.dataset.exact = typeof v === "number" ? String(v) : "";
  }

  function showNode(shown, node) {
    if (!node) {
      nodeInfo.textContent = shown.length ? "Click a node to show its edges and patch its output." : "";
      return;
    }
    const into = shown.filter((e) => e.reader === node).length;
    const out = shown.filter((e) => e.writer === node).length;
    const v = (model.get("node_exact") ?? {})[node];
    const metric = String(state.get("metric_name", "metric"));
    let text = `${node}: ${into} edge${into === 1 ? "" : "s"} in, ${out} out of the ${shown.length} drawn`;
    if (node === "logits") text += " (the logits read the circuit; nothing to patch)";
    else if (typeof v === "number") text += `; its whole output patched: ${metric} changes by ${fmt(v, 4)}`;
    else text += "; patching its output…";
    nodeInfo.textContent = text;
    nodeInfo.dataset.node = node;
    nodeInfo.dataset.exact = typeof v === "number" ? String(v) : "";
  }

  function showCircuit() {
    const c = model.get("circuit");
    if (!c || typeof c !== "object" || !Number.isInteger(c.n_edges)) {
      result.textContent = "";
      return;
    }
    result.textContent =
      `circuit of ${c.n_edges} of ${c.total_edges} edges: ${String(state.get("metric_name", "metric"))} = ` +
      `${fmt(c.value, 4)}, faithfulness = ${fmt(c.faithfulness, 4)} (clean ${fmt(c.clean_value, 4)}, ` +
      `corrupt ${fmt(c.corrupt_value, 4)})`;
    result.dataset.faithfulness = String(c.faithfulness);
    result.dataset.value = String(c.value);
  }

  const redraw = scheduler(state, draw, { soon: true });
  slider.addEventListener("input", () => {
    guess = Number(slider.value);
    redraw();
  });
  slider.addEventListener("change", () => {
    guess = Number(slider.value);
    state.request("threshold", { count: guess });
  });
  evaluate.addEventListener("click", () => state.request("circuit"));
  state.watch(TRAITS, () => {
    if (guess !== null && guess === model.get("count")) guess = null; // the kernel's echo replaces the guess
    redraw();
  });
  draw();
  return () => state.cleanup();
}
