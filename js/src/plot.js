// Shared helpers for every interplab widget: plotly, text escaping, DOM building, the widget shell.
// Rule: anything that comes from data (tokens, prompts, labels) is TEXT. DOM gets it through textContent;
// plotly gets it through esc(), because plotly parses pseudo-HTML (<b>, <br>, <a>) inside its strings.
import Plotly from "./plotly.js";
import { checkRequest } from "./protocol.js";

export { Plotly };

// One request counter for the page: every view of a model hears every reply, so ids must not repeat across views.
let lastRequestId = 0;

// ---------------------------------------------------------------- text
/** Escape a string for plotly labels/hover: &, <, > become entities (plotly renders them back as characters). */
export function esc(s) {
  return String(s ?? "")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;");
}

/** Make whitespace in a token visible: leading/trailing spaces as ␣, newline as ↵, tab as →. */
export function visible(tok) {
  const s = String(tok ?? "");
  if (s === "") return "∅";
  return s
    .replace(/\n/g, "↵")
    .replace(/\r/g, "␍")
    .replace(/\t/g, "→")
    .replace(/^ +| +$/g, (m) => "␣".repeat(m.length));
}

/** Tick label for a token: visible whitespace, truncated, escaped. */
export function tick(tok, max = 14) {
  let s = visible(tok);
  if (s.length > max) s = s.slice(0, max - 1) + "…";
  return esc(s);
}

/** Exact token text for hover: quoted (so spaces show), escaped, newlines shown as \n. */
export function quoted(tok) {
  return esc(JSON.stringify(String(tok ?? "")));
}

/** Multi-line user text for hover: escaped, newlines as <br>. */
export function hoverLines(s) {
  return esc(s).replace(/\r?\n/g, "<br>");
}

export function fmt(v, digits = 3) {
  if (v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v))) return "—";
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e4)) return v.toExponential(2);
  return v.toFixed(digits);
}

// ---------------------------------------------------------------- DOM
/** h("div", {class: "x", onclick: fn}, "text", child) — strings become text nodes, never HTML. */
/** A metric line's nodes, {name, values: {label: number}, notes?: [str]}: "name: label = value   label = value",
 * each value on one line (the gaps are boxes, so a wrapped line never hangs its spaces past the panel), and each
 * note (an answer without its leading space) on a line of its own below. Every view's metric line is this one. */
export function metricLine(m) {
  const vals = m && typeof m === "object" && m.values && typeof m.values === "object" ? m.values : {};
  const entries = Object.entries(vals);
  const items = entries.flatMap(([k, v], i) => [
    ...(i ? [h("span", { class: "il-sep", text: "   " })] : []),
    h("span", { class: "il-metric-item", text: `${k} = ${fmt(v, 4)}` }),
  ]);
  const notes = (Array.isArray(m?.notes) ? m.notes : []).map((n) => h("div", { class: "il-metric-note", text: n }));
  return [...(entries.length ? [`${String(m.name ?? "metric")}: `, ...items] : []), ...notes];
}

// Lumino (JupyterLab's and Notebook 7's shortcuts) leaves alone the keys typed into an element marked so; unmarked,
// its command mode (`:focus:not(:read-write)`) takes the arrow keys, Enter and Space from a focused slider, select or
// button before the control sees them
const CONTROLS = new Set(["input", "select", "textarea", "button"]);

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  if (CONTROLS.has(tag)) el.setAttribute("data-lm-suppress-shortcuts", "true");
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k === "text") el.textContent = String(v);
    else if (k in el && k !== "list" && k !== "type") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const CSS = `
.interplab { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px; color: #222; }
.interplab .il-error { display: none; color: #8b0000; background: #fdecea; border: 1px solid #d9534f;
  border-radius: 4px; padding: 6px 8px; margin: 4px 0; white-space: pre-wrap; font-family: monospace; }
.interplab .il-error.on { display: block; }
.interplab .il-status { color: #555; font-size: 12px; min-height: 16px; margin: 2px 0; white-space: pre-line; }
.interplab .il-progress { display: none; align-items: center; gap: 8px; margin: 2px 0; }
.interplab .il-progress.on { display: flex; }
.interplab .il-bar { flex: 1; height: 6px; background: #e5e5e5; border-radius: 3px; overflow: hidden; max-width: 400px; }
.interplab .il-bar > div { height: 100%; background: #2b6cb0; width: 0%; transition: width 80ms linear; }
.interplab .il-plot { width: 100%; overflow-x: auto; overflow-y: hidden; }
.interplab .il-row { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 4px 0; }
.interplab .il-row label { display: inline-flex; gap: 4px; align-items: center; max-width: 100%; min-width: 0; }
.interplab button, .interplab select, .interplab input[type=number], .interplab input[type=text],
.interplab textarea { font: inherit; font-size: 12px; color: #222; background: #fff; border: 1px solid #8f8f8f;
  border-radius: 3px; }
.interplab button { padding: 2px 8px; cursor: pointer; background: #f3f3f3; }
.interplab button:hover { background: #e6e6e6; }
.interplab button:disabled { color: #999; cursor: default; }
.interplab select, .interplab input[type=number], .interplab input[type=text] { padding: 1px 4px; }
.interplab .il-edits { list-style: none; padding: 0; margin: 4px 0; }
.interplab .il-edits li { display: flex; gap: 6px; align-items: center; padding: 1px 0; }
.interplab .il-edits li.off .il-edit-label { color: #999; text-decoration: line-through; }
.interplab .il-edit-remove { border: none; background: none; color: #a00; font-size: 15px; padding: 0 4px; }
.interplab .il-metric { font-family: monospace; overflow-wrap: anywhere; margin: 4px 0; }
.interplab .il-metric-item { white-space: nowrap; }
.interplab .il-sep { display: inline-block; white-space: pre; }
.interplab .il-metric-note { font-family: system-ui, sans-serif; color: #8a5a00; background: #fff6d6;
  border-left: 3px solid #c90; padding: 2px 6px; margin: 2px 0; }
.interplab .il-generated { font-family: monospace; white-space: pre-wrap; background: #f7f7f7;
  border: 1px solid #ddd; border-radius: 4px; padding: 6px; min-height: 1.5em; margin: 4px 0; }
.interplab textarea { font-family: monospace; font-size: 12px; width: 100%; box-sizing: border-box; }
.interplab .il-cols { display: flex; gap: 8px; }
.interplab .il-cols > div { flex: 1; }
.interplab .il-canvas { position: absolute; pointer-events: none; }
.interplab .il-overlay { position: absolute; left: 0; top: 0; width: 0; height: 0; pointer-events: none; }
.interplab .il-cell { position: absolute; box-sizing: border-box; }
.interplab .il-cell-selected { border: 3px solid #000; }
.interplab .il-cell-active { border: 2px dotted #1b9e3e; }
.interplab .il-scale { position: absolute; pointer-events: none; font-size: 11px; color: #444; }
.interplab .il-scale canvas { position: absolute; left: 0; top: 0; }
.interplab .il-scale-tick { position: absolute; white-space: nowrap; line-height: 1; }
.interplab .il-scale-v .il-scale-tick { transform: translateY(-50%); }
.interplab .il-scale-h .il-scale-tick { transform: translateX(-50%); }
.interplab .il-scale-title { position: absolute; white-space: nowrap; font-size: 12px; }
.interplab .il-scale-v .il-scale-title { top: 50%; transform: translateY(-50%); writing-mode: vertical-rl; white-space: pre;
  text-align: center; line-height: 14px; }
.interplab .il-scale-h .il-scale-title { left: 0; bottom: 100%; margin-bottom: 3px; }
.interplab .il-cell-off { border: 1px dashed #999; }
.interplab .il-tip { display: none; position: fixed; z-index: 1000; pointer-events: none; background: #fff;
  border: 1px solid #888; border-radius: 3px; padding: 4px 6px; font-size: 12px; white-space: pre;
  box-shadow: 0 1px 4px rgba(0,0,0,.2); max-width: 480px; overflow: hidden; }
.interplab .il-tip.on { display: block; }
.interplab .il-htitle { text-align: center; margin: 6px 20px 0; overflow-wrap: anywhere; }
.interplab .il-htitle.il-htitle-wide { text-align: left; margin-left: 0; }
.interplab .il-htitle-main { font-size: 17px; line-height: 22px; }
.interplab .il-htitle-sub { font-size: 12px; line-height: 16px; color: #444; }
.interplab .il-bars-title { font-weight: 600; margin: 6px 0 2px; }
.interplab .il-bars { display: flex; gap: 16px; flex-wrap: wrap; margin: 4px 0; }
.interplab .il-series { flex: 1; min-width: 180px; }
.interplab .il-series-name { font-weight: 600; margin-bottom: 2px; overflow: hidden; text-overflow: ellipsis;
  white-space: nowrap; }
.interplab .il-bar-row { display: flex; align-items: center; gap: 6px; height: 20px; }
.interplab .il-tok { flex: 0 0 96px; overflow: hidden; text-overflow: ellipsis; white-space: pre; text-align: right;
  font-family: monospace; }
.interplab .il-track { flex: 1; height: 14px; background: #f1f1f1; border-radius: 2px; overflow: hidden; }
.interplab .il-fill { display: block; height: 100%; }
.interplab .il-val { flex: 0 0 52px; font-family: monospace; font-size: 12px; }
.interplab input[type=range] { width: 260px; min-width: 60px; flex: 0 1 auto; } /* narrows with a narrow view */
.interplab .il-tabs { display: flex; gap: 2px; border-bottom: 1px solid #ccc; margin: 8px 0 4px; }
.interplab .il-tab { border: 1px solid #ccc; border-bottom: none; background: #f3f3f3; border-radius: 4px 4px 0 0;
  padding: 4px 12px; font-size: 13px; color: #333; }
.interplab .il-tab.on { background: white; font-weight: 600; position: relative; top: 1px; }
.interplab .interplab { margin: 0; }
.interplab .il-graph { display: block; font-size: 11px; }
.interplab .il-edge { cursor: pointer; }
.interplab .il-edge-hit { pointer-events: stroke; }
.interplab .il-edge:hover .il-edge-line, .interplab .il-edge.on .il-edge-line { stroke-opacity: 1; }
.interplab .il-edge.on .il-edge-line { filter: drop-shadow(0 0 2px #000); }
.interplab .il-nodes { pointer-events: none; }
.interplab .il-node { pointer-events: all; cursor: pointer; }
.interplab .il-node.on circle, .interplab .il-node.on rect { stroke: #000; stroke-width: 3; }
.interplab .il-edge-node .il-edge-line { stroke-opacity: 1; }
.interplab .il-edge-faded { opacity: 0.15; }
.interplab .il-layer-label { fill: #555; }
.interplab .il-vtrack { position: relative; }
.interplab .il-zero { position: absolute; left: 50%; top: 0; bottom: 0; border-left: 1px solid #888; }
.interplab .il-vbar .il-val { flex: 0 0 72px; }
.interplab .il-pane-row { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 4px; }
.interplab .il-pane-row > .il-pane { min-width: 0; } /* a grid: panes of a wrapped row as wide as the first row's */
`;

// ---------------------------------------------------------------- styles, in the document or in a shadow root
// A page's document gets one <style id="interplab-css">. A view inside a shadow root (marimo renders every widget in
// one) sees none of the document's styles: the root adopts our sheet, and a copy of plotly's own rules (plotly.js
// puts them in the document's <head>: the stacked SVG layers, the mode bar, the hover layer), kept current when
// plotly adds rules (e.g. a plot's mode-bar colours). Without a shadow root at render (the host attaches `el`
// later), the check runs again at each paint.
const adopted = new WeakSet(); // shadow roots already given our sheets
let ownSheet = null;
let plotlySheet = null;
let plotlyRules = ""; // what plotlySheet holds: plotly's rules as last copied

function constructable() {
  try {
    return typeof CSSStyleSheet === "function" && "replaceSync" in CSSStyleSheet.prototype && !!new CSSStyleSheet();
  } catch (_) {
    return false;
  }
}

/** plotly's rules from its <style id="plotly.js-style-..."> elements in the document, as text. */
function plotlyCss() {
  const out = [];
  for (const style of document.querySelectorAll('style[id^="plotly.js-style"]')) {
    try {
      for (const rule of style.sheet?.cssRules ?? []) out.push(rule.cssText);
    } catch (_) {
      /* unreadable sheet: skipped */
    }
  }
  return out.join("\n");
}

function styleShadowRoot(root) {
  const rules = plotlyCss();
  if (constructable()) {
    if (!ownSheet) {
      ownSheet = new CSSStyleSheet();
      ownSheet.replaceSync(CSS);
      plotlySheet = new CSSStyleSheet();
    }
    if (rules !== plotlyRules) {
      plotlyRules = rules;
      plotlySheet.replaceSync(rules); // one sheet object: every shadow root that adopted it sees the new rules
    }
    if (!adopted.has(root)) {
      adopted.add(root);
      root.adoptedStyleSheets = [...root.adoptedStyleSheets, ownSheet, plotlySheet];
    }
    return;
  }
  // no constructable sheets: <style> elements in the root itself
  let own = root.querySelector("style[data-interplab-css]");
  if (!own) {
    own = document.createElement("style");
    own.setAttribute("data-interplab-css", "");
    own.textContent = CSS;
    root.prepend(own);
  }
  let copy = root.querySelector("style[data-interplab-plotly-css]");
  if (!copy) {
    copy = document.createElement("style");
    copy.setAttribute("data-interplab-plotly-css", "");
    root.prepend(copy);
  }
  if (copy.textContent !== rules) copy.textContent = rules;
}

/** Make the styles reach `el`: the document's <style> once, and, inside a shadow root, that root's sheets. */
export function ensureStyles(el) {
  const root = el?.getRootNode?.();
  if (typeof ShadowRoot !== "undefined" && root instanceof ShadowRoot) {
    styleShadowRoot(root);
    return;
  }
  if (document.getElementById("interplab-css")) return;
  const style = document.createElement("style");
  style.id = "interplab-css";
  style.textContent = CSS;
  document.head.appendChild(style);
}

// ---------------------------------------------------------------- plotly
// RdBu as in ARENA's px.imshow (plotly.express diverging RdBu): red = low, white = 0, blue = high.
export const RDBU = [
  [0.0, "rgb(103,0,31)"],
  [0.1, "rgb(178,24,43)"],
  [0.2, "rgb(214,96,77)"],
  [0.3, "rgb(244,165,130)"],
  [0.4, "rgb(253,219,199)"],
  [0.5, "rgb(247,247,247)"],
  [0.6, "rgb(209,229,240)"],
  [0.7, "rgb(146,197,222)"],
  [0.8, "rgb(67,147,195)"],
  [0.9, "rgb(33,102,172)"],
  [1.0, "rgb(5,48,97)"],
];

export const BLUES = [
  [0.0, "rgb(247,251,255)"],
  [0.25, "rgb(198,219,239)"],
  [0.5, "rgb(107,174,214)"],
  [0.75, "rgb(33,113,181)"],
  [1.0, "rgb(8,48,107)"],
];

export const SERIES_COLORS = ["#4c78a8", "#e45756", "#54a24b", "#f58518", "#b279a2", "#72b7b2"];

export const PLOT_CONFIG = {
  displaylogo: false,
  // not plotly's window-resize autosize: in JupyterLab it measured a collapsing container and set the height to 0;
  // views size themselves to their container (sizeToContainer) with an explicit width and height
  responsive: false,
  typesetMath: false, // a token like "$x$" must not become LaTeX
  modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
  toImageButtonOptions: { format: "svg", filename: "interplab" },
};

export function baseLayout(extra = {}) {
  return {
    margin: { l: 80, r: 30, t: 50, b: 80 },
    font: { family: "system-ui, sans-serif", size: 12 },
    hoverlabel: { align: "left" },
    dragmode: false,
    paper_bgcolor: "white",
    ...extra,
  };
}

/** Numeric axis with token tick labels (tokens repeat, so never a categorical axis). With `maxTicks`, every
 * k-th label only (long prompts: labels that overlap are unreadable and their layout is a plot's costliest part;
 * the hover names every cell's token); the indices in `keep` and the last one are labelled all the same (where the
 * prompts differ, the last token: where patching matters), first come first, and the regular labels too near them
 * are left out. */
export function tokenAxis(labels, extra = {}, { maxTicks = Infinity, keep = [] } = {}) {
  const shown = tickIndices(labels.length, maxTicks, keep);
  const step = labels.length > maxTicks ? Math.ceil(labels.length / Math.max(1, maxTicks)) : 1;
  return {
    tickmode: "array",
    tickvals: shown,
    ticktext: shown.map((i) => tick(labels[i], step > 1 ? 10 : 14)),
    range: [-0.5, labels.length - 0.5],
    showgrid: false,
    zeroline: false,
    fixedrange: true,
    automargin: true,
    ...extra,
  };
}

/** Which of n labels to show: every one, or every step-th with the `keep` indices and the last one (each at least
 * a step from the others shown, so no two labels overlap), in increasing order. The last token is where the model
 * predicts: every view labels it, however long the prompt. */
export function tickIndices(n, maxTicks = Infinity, keep = []) {
  const all = Array.from({ length: n }, (_, i) => i);
  if (n <= maxTicks) return all;
  const step = Math.ceil(n / Math.max(1, maxTicks));
  const kept = [];
  const free = (i) => kept.every((k) => Math.abs(k - i) >= step);
  for (const i of [...keep, n - 1]) if (Number.isInteger(i) && i >= 0 && i < n && free(i)) kept.push(i);
  for (const i of all) if (i % step === 0 && free(i)) kept.push(i);
  return kept.sort((a, b) => a - b);
}

/** Greedy word wrap of `text` into lines at most `width` px wide at `font` (a word longer than a line gets its own). */
export function wrapLines(text, width, font) {
  const lines = [];
  let line = "";
  for (const word of String(text ?? "").split(/\s+/).filter(Boolean)) {
    const next = line ? `${line} ${word}` : word;
    if (line && textWidth([next], font) > width) {
      lines.push(line);
      line = word;
    } else line = next;
  }
  if (line) lines.push(line);
  return lines;
}

/** A plot title (plotly pseudo-HTML, escaped) that fits `width` px: the title in lines at plotly's title font, and
 * an optional smaller second part (the direction of a patching plot) in lines of its own; `lines` counts them all,
 * for the top margin. */
export function plotTitle(title, sub, width) {
  const main = wrapLines(title, width, TITLE_FONT).map(esc);
  const small = wrapLines(sub, width, "12px system-ui, sans-serif").map((l) => `<span style="font-size:12px">${esc(l)}</span>`);
  return { text: [...main, ...small].join("<br>"), lines: main.length + small.length };
}
const TITLE_FONT = "17px system-ui, sans-serif"; // plotly's title: 1.4 x the layout font (12 px)

let measurer = null;
/** The widest of `texts` in px, at the plots' tick font (for margins without plotly's automargin, which lays a
 * plot out twice). Entities count as one character. */
export function textWidth(texts, font = "12px system-ui, sans-serif") {
  measurer ||= document.createElement("canvas").getContext("2d");
  if (!measurer) return 8 * Math.max(0, ...texts.map((t) => String(t).length));
  measurer.font = font;
  let w = 0;
  for (const t of texts) w = Math.max(w, measurer.measureText(String(t).replace(/&(amp|lt|gt);/g, "&")).width);
  return w;
}

/** Count a finished repaint and push a paint event for tests/benchmarks; returns the plot div. */
export function recordPaint(state) {
  const gd = state.plot;
  if (!state.alive) return gd;
  ensureStyles(state.el); // a shadow root the view was attached to after its render, or new plotly rules
  state.paints += 1;
  const log = (window.__interplab_paints ||= []);
  log.push({ widget: state.kind, t: performance.now(), n: state.paints });
  if (log.length > 20000) log.splice(0, 10000); // long sessions: keep the log bounded
  return gd;
}

/** The width a plot gets: its container's (at least the view's state.minWidth, the plot then scrolls sideways),
 * or undefined (plotly's default) while the view is not on the page. */
export function containerWidth(state) {
  const w = Math.floor(state.plot.clientWidth || state.root.clientWidth || 0);
  return w > 0 ? Math.max(w, state.minWidth || 0) : undefined;
}

/** Follow the container's width: a ResizeObserver relayouts the plot with an explicit width (the height is the
 * view's own, from its rows), so a window resize never leaves a plot of height 0 under the next view. */
export function sizeToContainer(state) {
  if (typeof ResizeObserver !== "function") return;
  let last = containerWidth(state);
  const ro = new ResizeObserver(() => {
    const w = containerWidth(state);
    if (!state.alive || !w || w === last) return;
    last = w;
    if (state.onResize) return state.onResize(w); // a view that lays itself out again (titles wrapped to the width)
    const gd = state.plot;
    if (!gd._fullLayout) return; // not painted yet: the first paint reads the width
    const height = gd.layout?.height;
    Plotly.relayout(gd, height ? { width: w, height } : { width: w }).catch(() => {});
  });
  ro.observe(state.plot);
  state.onCleanup(() => ro.disconnect());
}

/** Repaint with Plotly.react and push a paint event for tests/benchmarks. Returns a promise. */
export function paint(state, data, layout) {
  const gd = state.plot;
  if (!state.alive) return Promise.resolve(gd);
  const width = containerWidth(state);
  if (width && layout.width === undefined) layout = { ...layout, width };
  return Plotly.react(gd, data, layout, PLOT_CONFIG).then(() => recordPaint(state)).catch((err) => {
    console.error("interplab: paint failed", err);
    state.displayError(`display error: ${err?.message ?? err}`);
    return gd;
  });
}

// ---------------------------------------------------------------- views talking to views, in the page
/** The page's one event bus between views (a heatmap paints its logit panel at once): on window, since each
 * widget may load its own copy of the bundle. Events are named by the widgets' shared `link` trait. */
export function bus() {
  return (window.__interplab_bus ||= new EventTarget());
}

// ---------------------------------------------------------------- the shell every widget uses
/**
 * Builds the common frame: error box, status line, optional progress bar, plot div.
 * Returns a state object with helpers; `state.cleanup()` removes listeners and purges plotly.
 */
export function shell(model, el, kind, { progress = false } = {}) {
  ensureStyles(el);
  const root = h("div", { class: `interplab interplab-${kind}` });
  const error = h("div", { class: "il-error", role: "alert" });
  const status = h("div", { class: "il-status" });
  const bar = h("div");
  const cancel = h("button", { class: "il-cancel", type: "button", text: "Cancel" });
  const progressRow = h("div", { class: "il-progress" }, h("div", { class: "il-bar" }, bar), cancel);
  const plot = h("div", { class: "il-plot" });
  root.append(error, status);
  if (progress) root.append(progressRow);
  root.append(plot);
  el.appendChild(root);

  const offs = [];
  const cleanups = [];
  const timers = new Set();
  const pending = new Set(); // ids of the requests sent and not answered yet
  let requestError = ""; // the last reply's error (cleared by the next ok reply)
  const state = {
    kind,
    model,
    el,
    root,
    plot,
    cancel,
    paints: 0,
    alive: true,
    /** model.on(event, fn) that is undone by cleanup */
    on(event, fn) {
      model.on(event, fn);
      offs.push(() => model.off(event, fn));
    },
    /** listen to "change:<name>" for several traits */
    watch(names, fn) {
      for (const n of names) state.on(`change:${n}`, fn);
    },
    get(name, fallback) {
      const v = model.get(name);
      return v === undefined || v === null ? fallback : v;
    },
    /** Send a request declared in protocol.json as {type, id, ...fields}; returns its id. Python answers it with
     * one {type: "reply", id, ok, error?}; an undeclared request is a bug: shown here and thrown, never sent. */
    request(type, fields = {}) {
      const problem = checkRequest(kind, type, fields);
      if (problem) {
        requestError = `interplab bug: ${problem}`;
        showError();
        throw new Error(`interplab: ${problem}`);
      }
      const id = ++lastRequestId;
      pending.add(id);
      model.send({ type, id, ...fields });
      return id;
    },
    timeout(fn, ms) {
      const id = setTimeout(() => {
        timers.delete(id);
        fn();
      }, ms);
      timers.add(id);
      return id;
    },
    clearTimeout(id) {
      clearTimeout(id);
      timers.delete(id);
    },
    /** fn() runs at cleanup (observers, DOM listeners) */
    onCleanup(fn) {
      cleanups.push(fn);
    },
    cleanup() {
      state.alive = false;
      for (const off of offs.splice(0)) off();
      for (const fn of cleanups.splice(0)) {
        try {
          fn();
        } catch (_) {
          /* best effort */
        }
      }
      for (const id of timers) clearTimeout(id);
      timers.clear();
      try {
        Plotly.purge(plot);
      } catch (_) {
        /* already gone */
      }
      root.remove();
    },
  };

  let localError = "";
  state.displayError = (text) => {
    localError = String(text ?? "");
    showError();
  };
  const showError = () => {
    // a bad request's text usually arrives twice, as the `error` trait and in the reply: shown once
    const texts = new Set([String(model.get("error") ?? ""), localError, requestError].filter(Boolean));
    const text = [...texts].join("\n");
    error.textContent = text;
    error.classList.toggle("on", text.length > 0);
  };
  state.on("msg:custom", (msg) => {
    if (msg?.type !== "reply" || !pending.delete(msg.id)) return; // another message, or not our request: ignored
    requestError = msg.ok ? "" : String(msg.error ?? "request failed");
    showError();
    const log = (window.__interplab_replies ||= []); // for tests and benchmarks, like the paint log
    log.push({ widget: kind, id: msg.id, ok: !!msg.ok, t: performance.now() });
    if (log.length > 20000) log.splice(0, 10000);
  });
  const showStatus = () => {
    status.textContent = String(model.get("status") ?? "");
  };
  const showProgress = () => {
    const p = Number(model.get("progress"));
    const on = Number.isFinite(p) && p > 0 && p < 1;
    progressRow.classList.toggle("on", on);
    bar.style.width = `${Math.round((Number.isFinite(p) ? Math.min(Math.max(p, 0), 1) : 0) * 100)}%`;
  };
  showError();
  showStatus();
  state.watch(["error"], showError);
  state.watch(["status"], showStatus);
  if (progress) {
    showProgress();
    state.watch(["progress"], showProgress);
    cancel.addEventListener("click", () => state.request("cancel"));
  }
  sizeToContainer(state);
  return state;
}

/** Coalesce many change events into one repaint per animation frame (or timeout when hidden). With
 * `{ soon: true }` the repaint runs in a microtask instead: changes from one message still coalesce, and a cheap
 * DOM repaint makes the coming frame instead of waiting up to a frame for the next one. */
export function scheduler(state, fn, { soon = false } = {}) {
  let pending = false;
  return () => {
    if (pending) return;
    pending = true;
    const run = () => {
      pending = false;
      if (state.alive) fn();
    };
    if (soon) {
      queueMicrotask(run);
    } else if (typeof requestAnimationFrame === "function" && document.visibilityState !== "hidden") {
      requestAnimationFrame(run);
    } else {
      state.timeout(run, 0);
    }
  };
}

/** 2-D array of numbers (null for not computed / non-finite) */
export function grid(values) {
  if (!Array.isArray(values)) return [];
  return values.map((row) =>
    Array.isArray(row) ? row.map((v) => (typeof v === "number" && Number.isFinite(v) ? v : null)) : [],
  );
}

/**
 * A rows x cols grid of strings from a text-grid trait: a 2-D array, or the kernel's wire form
 * {strings: [each distinct text once], index: [[i, ...], ...]} (interplab/widgets/base.py, text_grid_to_json).
 */
export function strGrid(values, rows, cols) {
  const table = values && !Array.isArray(values) && Array.isArray(values.strings) ? values.strings : null;
  const cells = table ? values.index : values;
  const out = [];
  for (let r = 0; r < rows; r++) {
    const src = Array.isArray(cells) && Array.isArray(cells[r]) ? cells[r] : [];
    const row = [];
    for (let c = 0; c < cols; c++) {
      const v = table ? table[src[c]] : src[c];
      row.push(v === undefined || v === null ? "" : String(v));
    }
    out.push(row);
  }
  return out;
}

/**
 * The (row, col) cell under a mouse event on a heatmap drawn with numeric axes 0..n-1.
 * Computed from the event's pixels, not from plotly's hover data (which lags ~50 ms behind fast clicks).
 */
export function cellAt(gd, event, rows, cols) {
  const fl = gd?._fullLayout;
  if (!fl || !event) return null;
  const box = gd.getBoundingClientRect();
  const xa = fl.xaxis;
  const ya = fl.yaxis;
  // a wide plot scrolls inside its div: pixels count from the plot's own left edge
  const col = Math.round(xa.p2d(event.clientX - box.left + gd.scrollLeft - xa._offset));
  const row = Math.round(ya.p2d(event.clientY - box.top - ya._offset));
  if (!Number.isInteger(row) || !Number.isInteger(col)) return null;
  if (row < 0 || col < 0 || row >= rows || col >= cols) return null;
  return { row, col };
}

/** Cell from plotly's click data, preferring the event's pixels. */
export function clickedCell(gd, ev, rows, cols) {
  const fromPixels = cellAt(gd, ev?.event, rows, cols);
  if (fromPixels) return fromPixels;
  const p = ev?.points?.[0];
  if (!p) return null;
  const row = Math.round(Number(p.y));
  const col = Math.round(Number(p.x));
  if (!Number.isInteger(row) || !Number.isInteger(col) || row < 0 || col < 0 || row >= rows || col >= cols) return null;
  return { row, col };
}
