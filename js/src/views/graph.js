// GraphView: an attribution graph by layer (rows: the token embeddings at the bottom, a row per layer, the logits on
// top) x token position (columns), nodes and edges painted on one canvas (thousands of nodes and edges in one
// paint, no element per node: a big graph draws without a long task), edge width by |weight| and colour by sign.
// Hover: the node's tooltip (what it is, activation, influence, density and top contexts from `summaries`). Click:
// select {node} (its page in the side panel: the feature page the kernel computes from the statistics); shift-click:
// pin {node} (pinned nodes form the subgraph: ringed, their edges drawn on top, listed with a name box that groups
// them into a supernode: group {name}; ungroup {name}). The intervention panel: intervene {factor} (zero or scale
// the pinned features, or the selected one), steer {alpha} (add to their activations), heads {names} (zero attention
// heads) shows the live logits beside the graph's prediction. The page never computes a number: each is a trait.
import { context, statsSection } from "../featurepage.js";
import { fmt, h, recordPaint, scheduler, shell, textWidth, visible } from "../plot.js";

const TRAITS = ["tokens", "n_layers", "nodes", "edges", "logit_tokens", "logit_probs", "summaries", "selected",
  "pinned", "supernodes", "page", "factor", "intervention", "title", "dense_threshold"];
export const POSITIVE = "#2166ac";
export const NEGATIVE = "#b2182b";
const KIND_FILL = { feature: "#f5f5f5", error: "#bdbdbd", token: "#fde68a", logit: "#a7f3d0" };
const GROUP_COLORS = ["#e45756", "#54a24b", "#f58518", "#b279a2", "#72b7b2", "#4c78a8"];
const LEFT = 44; // px for the layer labels
const AXIS = 22; // px for the token labels under the plot
const TOP = 8;
const FONT = "11px system-ui, sans-serif";
const EDGE_CHUNK = 1500; // edges painted per animation frame
const MONO = { fontFamily: "monospace", fontSize: "12px" };
const MIN_PLOT = 320; // px the plot keeps beside the panel before the panel goes under it

/** Nodes as the kernel sent them: [{index, kind, layer, pos, feature, act, influence}]. */
export function nodeList(raw) {
  if (!Array.isArray(raw)) return [];
  return raw.filter((n) => Array.isArray(n) && n.length >= 7).map(([index, kind, layer, pos, feature, act, influence]) => ({
    index, kind: String(kind), layer: Number(layer), pos: Number(pos), feature: Number(feature),
    act: typeof act === "number" ? act : null, influence: Number(influence) || 0,
  }));
}

/** Each node's place: rows by layer, columns by position, a cell's nodes (most influential first) in sub-rows. */
export function layoutGraph(nodes, nPos, nLayers, width) {
  const rows = nLayers + 2;
  const cells = new Map();
  for (const n of nodes) {
    const key = `${n.layer}:${n.pos}`;
    if (!cells.has(key)) cells.set(key, []);
    cells.get(key).push(n);
  }
  const colW = (width - LEFT - 8) / Math.max(1, nPos);
  let most = 1;
  for (const list of cells.values()) most = Math.max(most, list.length);
  const r = Math.max(2, Math.min(6, colW / 6));
  const perRow = Math.max(1, Math.floor((colW - 2) / (2 * r + 2)));
  const subRows = Math.ceil(most / perRow);
  const rowH = Math.max(56, Math.min(160, subRows * (2 * r + 3) + 20));
  const height = TOP + rows * rowH;
  const place = new Map();
  for (const list of cells.values()) {
    list.sort((a, b) => b.influence - a.influence || a.index - b.index);
    const n0 = list[0];
    const row = nLayers - n0.layer; // logits (layer nLayers) row 0 at the top, embeddings (-1) at the bottom
    const cx = LEFT + (n0.pos + 0.5) * colW;
    const cy = TOP + (row + 0.5) * rowH;
    const inRow = Math.min(perRow, list.length);
    const nSub = Math.ceil(list.length / perRow);
    list.forEach((n, k) => {
      const sub = Math.floor(k / perRow);
      const across = sub === nSub - 1 ? list.length - sub * perRow : inRow;
      const i = k % perRow;
      const x = cx + (i - (across - 1) / 2) * (2 * r + 2);
      const y = cy + (sub - (nSub - 1) / 2) * (2 * r + 3);
      place.set(n.index, { x, y, r, n });
    });
  }
  return { place, height, rowH, colW, rows };
}

function nodeLabel(n, tokens, logitTokens) {
  const tok = visible(String(tokens[n.pos] ?? ""));
  if (n.kind === "feature") return `L${n.layer} F${n.feature} at '${tok}' (pos ${n.pos})`;
  if (n.kind === "error") return `L${n.layer} error at '${tok}' (pos ${n.pos})`;
  if (n.kind === "token") return `embedding of '${tok}' (pos ${n.pos})`;
  return `logit '${visible(String(logitTokens[n.index] ?? ""))}'`;
}

export function render({ model, el }) {
  const state = shell(model, el, "graph");
  const title = h("div", { class: "il-bars-title" });
  state.root.insertBefore(title, state.plot);
  const canvas = h("canvas", { class: "il-graph-canvas", style: { display: "block", cursor: "pointer",
    position: "relative" } });
  const edgeCanvas = h("canvas", { class: "il-graph-edges", style: { position: "absolute", left: "0", top: "0",
    pointerEvents: "none" } });
  const nodeCanvas = h("canvas", { class: "il-graph-nodes", style: { position: "absolute", left: "0", top: "0",
    pointerEvents: "none" } });
  const axis = h("div", { class: "il-graph-axis", style: { position: "relative", height: `${AXIS}px` } });
  const labels = h("div", { class: "il-graph-layers", style: { position: "absolute", left: "0", top: "0" } });
  const drawing = h("div", { style: { position: "relative" } }, edgeCanvas, nodeCanvas, canvas, labels,
    axis);
  const tip = h("div", { class: "il-tip", style: { maxWidth: "420px" } });
  const panel = h("div", { class: "il-graph-panel", style: { flex: "1 1 300px", maxWidth: "340px", minWidth: "0",
    overflowWrap: "anywhere" } });
  const nodeBox = h("div", { class: "il-graph-node" });
  const subgraph = h("div", { class: "il-graph-subgraph" });
  const interv = h("div", { class: "il-graph-intervention" });
  panel.append(nodeBox, subgraph, interv);
  // its width is the page's, not the canvas's; on a page too narrow for both, the panel goes under the plot (and on
  // one narrower than MIN_PLOT, as in a JupyterLab beside its sidebar in a small window, both narrow with the page)
  const main = h("div", { style: { flex: "1 1 420px", minWidth: `min(${MIN_PLOT}px, 100%)` } }, drawing);
  state.plot.replaceWith(h("div", { style: { display: "flex", flexWrap: "wrap", gap: "12px",
    alignItems: "flex-start" } }, main, panel));
  main.prepend(state.plot); // the shell's plot div stays in the page (its width is followed), holding nothing
  state.plot.style.height = "0";
  state.root.append(tip);

  let guessSel = null; // the node clicked, until the kernel's `selected` echoes it
  let layout = null;
  let width = 0;

  let nodesRaw = null;
  let nodesMemo = [];
  const nodes = () => { // parsed once per `nodes` value
    const raw = model.get("nodes");
    if (raw !== nodesRaw) {
      nodesRaw = raw;
      nodesMemo = nodeList(raw);
    }
    return nodesMemo;
  };
  const tokens = () => (Array.isArray(model.get("tokens")) ? model.get("tokens") : []);
  const logitTokens = () => {
    const list = Array.isArray(model.get("logit_tokens")) ? model.get("logit_tokens") : [];
    const out = {};
    const ns = nodes().filter((n) => n.kind === "logit").sort((a, b) => a.index - b.index);
    ns.forEach((n, j) => { out[n.index] = list[j]; });
    return out;
  };
  const selected = () => guessSel ?? state.get("selected", -1);
  const pinned = () => new Set(Array.isArray(model.get("pinned")) ? model.get("pinned") : []);
  const groups = () => (Array.isArray(model.get("supernodes")) ? model.get("supernodes") : []);

  // Three canvases: the edges (painted in chunks of EDGE_CHUNK, one chunk per animation frame) and the nodes, both
  // only when the graph or the width changes, under the highlights (the selected node's and the pinned nodes' edges
  // and rings, painted at once on every change). A selection fades the edge layer by its CSS opacity, so a click
  // never repaints thousands of edges or nodes.
  let edgeKey = null;
  let edgeRun = 0;

  function sizeCanvas(cv, height) {
    const dpr = window.devicePixelRatio || 1;
    cv.width = Math.round(width * dpr);
    cv.height = Math.round(height * dpr);
    cv.style.width = `${width}px`;
    cv.style.height = `${height}px`;
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    return ctx;
  }

  function paintEdges(nLayers) {
    const { place, height, rowH } = layout;
    const ctx = sizeCanvas(edgeCanvas, height);
    for (let row = 0; row < nLayers + 2; row++) { // row bands
      ctx.fillStyle = row % 2 ? "#fafafa" : "#f2f4f7";
      ctx.fillRect(LEFT, TOP + row * rowH, width - LEFT - 8, rowH);
    }
    const edges = Array.isArray(model.get("edges")) ? model.get("edges") : [];
    const top = edges.reduce((m, e) => Math.max(m, Math.abs(e[2]) || 0), 1e-12);
    const run = ++edgeRun;
    const BUCKETS = 8;
    const chunk = (start) => {
      if (run !== edgeRun || !state.alive) return; // a newer paint started
      // weakest first (the kernel sends them strongest first): the strong edges end on top
      const from = Math.max(0, edges.length - start - EDGE_CHUNK);
      const paths = Array.from({ length: 2 * BUCKETS }, () => []);
      for (let i = edges.length - start - 1; i >= from; i--) {
        const e = edges[i];
        const a = place.get(e[0]);
        const b = place.get(e[1]);
        if (!a || !b) continue;
        const k = Math.min(BUCKETS - 1, Math.floor(Math.sqrt(Math.abs(e[2]) / top) * BUCKETS));
        paths[(e[2] >= 0 ? 0 : BUCKETS) + k].push(a, b);
      }
      for (let j = 0; j < 2 * BUCKETS; j++) {
        const list = paths[j];
        if (!list.length) continue;
        const k = j % BUCKETS;
        ctx.beginPath();
        for (let i = 0; i < list.length; i += 2) {
          ctx.moveTo(list[i].x, list[i].y);
          ctx.lineTo(list[i + 1].x, list[i + 1].y);
        }
        ctx.strokeStyle = j < BUCKETS ? POSITIVE : NEGATIVE;
        ctx.globalAlpha = 0.25 + 0.45 * (k / BUCKETS);
        ctx.lineWidth = 0.4 + (4 * (k + 1) * (k + 1)) / (BUCKETS * BUCKETS);
        ctx.stroke();
      }
      ctx.globalAlpha = 1;
      if (from > 0) requestAnimationFrame(() => chunk(start + EDGE_CHUNK));
      else edgeCanvas.dataset.painted = String(edges.length);
    };
    edgeCanvas.dataset.painted = "0";
    requestAnimationFrame(() => chunk(0)); // not in the task that draws the nodes
  }

  /** Nodes as circles: one path and fill per kind. */
  function paintNodes(ctx, places) {
    const list = [...places];
    for (const kind of Object.keys(KIND_FILL)) {
      ctx.beginPath();
      let any = false;
      for (const p of list) {
        if (p.n.kind !== kind) continue;
        ctx.moveTo(p.x + p.r, p.y);
        ctx.arc(p.x, p.y, p.r, 0, 2 * Math.PI);
        any = true;
      }
      if (!any) continue;
      ctx.fillStyle = KIND_FILL[kind];
      ctx.fill();
      ctx.lineWidth = 0.8;
      ctx.strokeStyle = "#555";
      ctx.stroke();
    }
  }

  function paintGraph() {
    width = Math.max(160, Math.floor(main.clientWidth || 700));
    const ns = nodes();
    const toks = tokens();
    const nLayers = Number(state.get("n_layers", 0));
    const key = [model.get("nodes"), model.get("edges"), width, nLayers];
    if (!edgeKey || key.some((v, i) => v !== edgeKey[i])) {
      layout = layoutGraph(ns, toks.length, nLayers, width);
      edgeKey = key;
      paintEdges(nLayers);
      paintNodes(sizeCanvas(nodeCanvas, layout.height), layout.place.values());
    }
    const { place, height, rowH, colW } = layout;
    const ctx = sizeCanvas(canvas, height);
    const sel = selected();
    const pins = pinned();
    edgeCanvas.style.opacity = sel >= 0 || pins.size > 0 ? "0.4" : "1";
    const edges = Array.isArray(model.get("edges")) ? model.get("edges") : [];
    const top = edges.reduce((m, e) => Math.max(m, Math.abs(e[2]) || 0), 1e-12);
    const lit = [];
    if (sel >= 0 || pins.size > 1) {
      for (const e of edges) {
        if (e[0] !== sel && e[1] !== sel && !(pins.has(e[0]) && pins.has(e[1]))) continue;
        const a = place.get(e[0]);
        const b = place.get(e[1]);
        if (a && b) lit.push([a, b, e[2], Math.abs(e[2]) / top]);
      }
    }
    ctx.globalAlpha = 0.95;
    for (const [a, b, w, rel] of lit) {
      ctx.beginPath();
      ctx.moveTo(a.x, a.y);
      ctx.lineTo(b.x, b.y);
      ctx.strokeStyle = w >= 0 ? POSITIVE : NEGATIVE;
      ctx.lineWidth = 1 + 4 * rel;
      ctx.stroke();
    }
    ctx.globalAlpha = 1;
    const groupOf = new Map();
    groups().forEach((g, i) => (g.nodes ?? []).forEach((n) => groupOf.set(n, GROUP_COLORS[i % GROUP_COLORS.length])));
    // the lit edges' ends drawn again over them, then the rings of the selected, pinned and grouped nodes
    const marked = [...place.values()].filter((p) => p.n.index === sel || pins.has(p.n.index) || groupOf.has(p.n.index));
    const ends = new Set(lit.flatMap(([a, b]) => [a, b]));
    paintNodes(ctx, [...ends, ...marked]);
    for (const p of marked) {
      const ring = p.n.index === sel ? "#111" : groupOf.get(p.n.index) ?? (pins.has(p.n.index) ? "#7c3aed" : null);
      if (!ring) continue;
      ctx.beginPath();
      ctx.arc(p.x, p.y, p.r + 2, 0, 2 * Math.PI);
      ctx.lineWidth = 2;
      ctx.strokeStyle = ring;
      ctx.stroke();
    }
    // layer labels (left) and token labels (under the plot), thinned so none runs into its neighbour
    labels.replaceChildren();
    for (let row = 0; row < nLayers + 2; row++) {
      const layer = nLayers - row;
      const text = layer === nLayers ? "logits" : layer === -1 ? "emb" : `L${layer}`;
      labels.append(h("div", { class: "il-graph-layer", text, style: { position: "absolute", left: "2px",
        top: `${TOP + (row + 0.5) * rowH - 7}px`, font: FONT, whiteSpace: "nowrap" } }));
    }
    axis.replaceChildren();
    const widest = textWidth(toks.map((t) => visible(String(t))), FONT) + 6;
    const step = Math.max(1, Math.ceil(Math.min(widest, 90) / Math.max(colW, 1e-6)));
    for (let p = 0; p < toks.length; p += step) {
      let text = visible(String(toks[p]));
      const room = colW * step - 4;
      while (text.length > 1 && textWidth([text], FONT) > room) text = `${text.slice(0, -2)}…`;
      const w = textWidth([text], FONT);
      if (w > room) continue;
      axis.append(h("div", { class: "il-graph-token", text, "data-pos": p, style: { position: "absolute",
        left: `${LEFT + (p + 0.5) * colW - w / 2}px`, top: "3px", font: FONT, whiteSpace: "pre" } }));
    }
    // where each node is, for tests (page pixels from the canvas's box)
    state.plot.__interplab_graph = { nodes: [...place.values()].map((p) => ({ index: p.n.index, x: p.x, y: p.y, r: p.r })),
      width, height };
    canvas.__interplab_graph = state.plot.__interplab_graph;
  }

  function at(ev) {
    if (!layout) return null;
    const box = canvas.getBoundingClientRect();
    const x = ev.clientX - box.left;
    const y = ev.clientY - box.top;
    let best = null;
    let bestD = Infinity;
    for (const p of layout.place.values()) {
      const d = (p.x - x) ** 2 + (p.y - y) ** 2;
      if (d < bestD && d <= (p.r + 3) ** 2) {
        best = p;
        bestD = d;
      }
    }
    return best;
  }

  function showTip(p, ev) {
    if (!p) {
      tip.classList.remove("on");
      return;
    }
    const n = p.n;
    const lines = [h("div", { style: { fontWeight: "600" } }, nodeLabel(n, tokens(), logitTokens()))];
    if (n.act !== null) lines.push(h("div", {}, `activation ${fmt(n.act, 4)}`));
    lines.push(h("div", {}, `influence ${fmt(n.influence, 4)}`));
    if (n.kind === "logit") {
      const j = nodes().filter((m) => m.kind === "logit").sort((a, b) => a.index - b.index).findIndex((m) => m.index === n.index);
      const prob = (model.get("logit_probs") ?? [])[j];
      if (typeof prob === "number") lines.push(h("div", {}, `probability ${fmt(prob, 4)}`));
    }
    const s = n.kind === "feature" ? (model.get("summaries") ?? {})[`${n.layer}:${n.feature}`] : null;
    if (s) {
      lines.push(h("div", { class: "il-tip-density", "data-value": s.density }, `density ${fmt(100 * s.density, 3)}% of tokens${s.dense ? " (dense)" : ""}, mean ${
        fmt(s.mean, 3)}, max ${fmt(s.max, 3)}`));
      for (const ex of s.top ?? []) lines.push(context(ex));
    } else if (n.kind === "feature") {
      lines.push(h("div", { style: { color: "#666" } }, "click for its page"));
    }
    tip.replaceChildren(...lines);
    tip.dataset.node = String(n.index);
    tip.classList.add("on");
    tip.style.left = `${ev.clientX + 14}px`;
    tip.style.top = `${ev.clientY + 14}px`;
  }

  function showPage() {
    const page = model.get("page") ?? {};
    const sel = selected();
    nodeBox.replaceChildren();
    const n = nodes().find((m) => m.index === sel);
    if (!n) {
      nodeBox.append(h("div", { class: "il-metric" }, "Click a node for its page; shift-click to pin it."));
      return;
    }
    nodeBox.dataset.node = String(sel);
    nodeBox.append(h("div", { class: "il-bars-title il-page-title" }, nodeLabel(n, tokens(), logitTokens())));
    const node = page.node && page.node.index === sel ? page.node : null;
    const facts = h("div", { class: "il-metric il-page-facts" });
    const act = node?.activation ?? n.act;
    if (typeof act === "number") facts.append(h("span", { class: "il-page-act", "data-value": act }, `activation ${fmt(act, 4)} `));
    facts.append(h("span", { class: "il-page-influence", "data-value": node?.influence ?? n.influence },
      `influence ${fmt(node?.influence ?? n.influence, 4)}`));
    nodeBox.append(facts);
    if (!node) { // what the page already holds (the hover summary) until the kernel's page arrives
      const sum = n.kind === "feature" ? (model.get("summaries") ?? {})[`${n.layer}:${n.feature}`] : null;
      if (sum) {
        nodeBox.append(h("div", { class: "il-metric il-page-summary", "data-value": sum.density },
          `density ${fmt(100 * sum.density, 3)}% of the corpus's tokens${sum.dense ? " (dense)" : ""}; mean ${
            fmt(sum.mean, 3)}, max ${fmt(sum.max, 3)}`));
        for (const ex of sum.top ?? []) nodeBox.append(context(ex));
      }
      nodeBox.append(h("div", { class: "il-metric il-page-wait" }, "computing its page…"));
      return;
    }
    const st = page.stats;
    if (st) {
      nodeBox.append(...statsSection(st, page.dense));
    } else if (n.kind === "feature") {
      nodeBox.append(h("div", { class: "il-metric" }, "no statistics for its layer: g.show(stats={layer: ilab.analyses.feature_stats.feature_stats(...)})"));
    }
    const effects = page.logit_effects ?? [];
    if (effects.length) {
      nodeBox.append(h("div", { class: "il-bars-title" }, "direct effect on the logit nodes"));
      const list = h("div", { class: "il-metric il-page-logits" });
      for (const [tok, w] of effects) list.append(h("div", { class: "il-page-logit", "data-value": w }, `'${visible(String(tok))}' ${fmt(w, 4)}`));
      nodeBox.append(list);
    }
    for (const [name, key] of [["strongest inputs", "inputs"], ["strongest outputs", "outputs"]]) {
      const rows = page[key] ?? [];
      if (!rows.length) continue;
      nodeBox.append(h("div", { class: "il-bars-title" }, name));
      const list = h("div", { class: `il-metric il-page-${key}` });
      for (const [, label, w] of rows) list.append(h("div", {}, `${label} ${fmt(w, 4)}`));
      nodeBox.append(list);
    }
  }

  const nameBox = h("input", { type: "text", class: "il-group-name", placeholder: "supernode name", style: { width: "140px" } });
  const groupBtn = h("button", { type: "button", class: "il-group" }, "Group pinned");
  groupBtn.addEventListener("click", () => state.request("group", { name: nameBox.value }));
  const factorBox = h("input", { type: "number", class: "il-factor", step: "0.5", value: "0", style: { width: "64px" } });
  const zeroBtn = h("button", { type: "button", class: "il-graph-zero" }, "Zero");
  const scaleBtn = h("button", { type: "button", class: "il-scale-btn" }, "Scale");
  zeroBtn.addEventListener("click", () => state.request("intervene", { factor: 0 }));
  scaleBtn.addEventListener("click", () => state.request("intervene", { factor: Number(factorBox.value) }));
  const alphaBox = h("input", { type: "number", class: "il-alpha", step: "1", value: "2", style: { width: "64px" } });
  const steerBtn = h("button", { type: "button", class: "il-steer-btn" }, "Steer");
  steerBtn.addEventListener("click", () => state.request("steer", { alpha: Number(alphaBox.value) }));
  const headsBox = h("input", { type: "text", class: "il-heads", placeholder: "L2H0 L1H2", style: { width: "120px" } });
  const headsBtn = h("button", { type: "button", class: "il-heads-btn" }, "Zero heads");
  headsBtn.addEventListener("click", () => state.request("heads", { names: headsBox.value }));

  function showSubgraph() {
    const pins = [...pinned()];
    subgraph.replaceChildren(h("div", { class: "il-bars-title" }, `subgraph: ${pins.length} pinned`));
    const byIndex = new Map(nodes().map((n) => [n.index, n]));
    const list = h("div", { class: "il-metric il-pinned" });
    for (const i of pins) {
      const n = byIndex.get(i);
      if (n) list.append(h("div", { "data-node": i }, nodeLabel(n, tokens(), logitTokens())));
    }
    subgraph.append(list, h("div", { class: "il-row" }, nameBox, groupBtn));
    groups().forEach((g, i) => {
      const x = h("button", { type: "button", class: "il-ungroup", title: "ungroup" }, "×");
      x.addEventListener("click", () => state.request("ungroup", { name: g.name }));
      subgraph.append(h("div", { class: "il-row il-supernode", "data-name": g.name },
        h("span", { style: { color: GROUP_COLORS[i % GROUP_COLORS.length], fontWeight: "600" } }, g.name),
        h("span", {}, `${(g.nodes ?? []).length} nodes`), x));
    });
  }

  function showIntervention() {
    interv.replaceChildren(h("div", { class: "il-bars-title" }, "intervene on the pinned features (or the selected one), or on heads"),
      h("div", { class: "il-row" }, zeroBtn, h("label", {}, "factor ", factorBox), scaleBtn),
      h("div", { class: "il-row" }, h("label", {}, "add ", alphaBox), steerBtn),
      h("div", { class: "il-row" }, h("label", {}, "heads ", headsBox), headsBtn));
    const r = model.get("intervention") ?? {};
    if (!Array.isArray(r.tokens)) return;
    interv.append(h("div", { class: "il-metric il-intervention-what" }, String(r.what ?? "")));
    const table = h("table", { class: "il-intervention-table", style: { ...MONO, borderCollapse: "collapse" } });
    table.append(h("tr", {}, h("th", {}, "logit"), h("th", {}, "predicted direct"), h("th", {}, "predicted total"),
      h("th", {}, "real")));
    r.tokens.forEach((tok, j) => {
      const row = h("tr", { class: "il-intervention-row", "data-token": tok, "data-direct": r.direct[j],
        "data-total": r.total[j], "data-real": r.real[j] });
      for (const v of [`'${visible(String(tok))}'`, fmt(r.direct[j], 4), fmt(r.total[j], 4), fmt(r.real[j], 4)]) {
        row.append(h("td", { style: { padding: "0 6px" } }, v));
      }
      table.append(row);
    });
    interv.append(table, h("div", { class: "il-metric il-intervention-top" },
      `live top: ${(r.top ?? []).map(([t, p]) => `'${visible(String(t))}' ${fmt(p, 3)}`).join(", ")}`));
  }

  function draw() {
    title.textContent = String(state.get("title", ""));
    paintGraph();
    showPage();
    showSubgraph();
    showIntervention();
    recordPaint(state);
  }

  let down = null;
  canvas.addEventListener("pointerdown", (ev) => { down = { x: ev.clientX, y: ev.clientY }; });
  canvas.addEventListener("pointerup", (ev) => {
    if (!down || Math.abs(ev.clientX - down.x) > 4 || Math.abs(ev.clientY - down.y) > 4) return;
    down = null;
    const p = at(ev);
    if (!p) return;
    if (ev.shiftKey) {
      state.request("pin", { node: p.n.index });
    } else {
      guessSel = p.n.index;
      redraw();
      state.request("select", { node: p.n.index });
    }
  });
  canvas.addEventListener("pointermove", (ev) => showTip(at(ev), ev));
  canvas.addEventListener("pointerleave", () => tip.classList.remove("on"));
  state.onResize = () => redraw();

  const redraw = scheduler(state, draw);
  state.watch(TRAITS, () => {
    if (guessSel !== null && guessSel === model.get("selected")) guessSel = null;
    redraw();
  });
  draw();
  return () => state.cleanup();
}
