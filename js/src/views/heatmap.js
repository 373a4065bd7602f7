// PatchingHeatmap: one cell per (row, col) patch; click to select, shift-click to add; the active edits listed below.
// Requests to Python (declared in interplab/widgets/protocol.json): click {row, col, shift},
// toggle {edit_id, enabled}, remove {edit_id}, clear, cancel (the Cancel button, in plot.js).
import {
  RDBU, baseLayout, bus, cellAt, containerWidth, esc, fmt, grid, h, paint, recordPaint, scheduler, shell, strGrid,
  textWidth, tokenAxis, wrapLines,
} from "../plot.js";

export const DIRECTION_TEXT = {
  denoise: "denoising (clean activation patched into the corrupted run): 1 = clean restored, 0 = corrupted",
  noise: "noising (corrupted activation patched into the clean run): 1 = clean behaviour kept, 0 = corrupted",
};
const TOP = 30; // px above the plot area: plotly's mode bar, over no cell

// Data traits redraw the heatmap (plotly's frame only where shape, labels, axis titles or width changed; the cells on
// our canvas; the title is DOM above the plot, so a sweep's new title never lays plotly out again: that relayout was
// a 100-400 ms task at a progressive sweep's start and end); a click only changes the selection, drawn as DOM outlines over the plot (no plotly call: a relayout of
// shapes took ~50 ms and delayed the logit panel's repaint).
const TRAITS = [
  "values", "x_labels", "y_labels", "x_title", "y_title", "title", "direction", "metric_name",
  "hover", "zmin", "zmax", "key_cols",
];
const SELECTION = ["selected", "active_edits", "hint"];
const MIN_CELL = 5; // px: a cell narrower than this is hard to see and to click
// px: rows at least this tall (an SAE's 512 features by position), so each row has a pixel of its own colour; the
// plot grows past its usual 900 px for them, up to MAX_HEIGHT, past which rows share pixels (the hover names each)
const MIN_ROW = 2;
const MAX_HEIGHT = 1600;
const Y_LABEL_PX = 14; // px per y label at most: more rows than that get every k-th label
const SCALE_FONT = "11px system-ui, sans-serif";
const SCALE_TITLE_FONT = "12px system-ui, sans-serif";
const MAX_TICKS = 40; // x labels at most: plotly lays out each one (about 1 ms, more in a busy page)
const SCALE_ROOM = 120; // px right of the plot area: the colour bar, its ticks and its title
const MARGIN_X = 90 + SCALE_ROOM; // left and right margins (the colour bar's)

function pairs(v) {
  if (!Array.isArray(v)) return [];
  return v.filter((p) => Array.isArray(p) && p.length >= 2 && Number.isInteger(p[0]) && Number.isInteger(p[1]));
}

function parseRgb(s) {
  return s.match(/[\d.]+/g).map(Number);
}
const STOPS = RDBU.map(([t, c]) => [t, parseRgb(c)]);

/** About five round values from lo to hi (steps of 1, 2 or 5 times a power of ten), for the colour bar. */
export function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((k) => k * p).find((s) => s >= raw) ?? 10 * p;
  const out = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v); // (no "-0")
  }
  return out;
}

/** RdBu at t in [0, 1], interpolated in RGB between the stops, as plotly does. */
export function colourAt(t) {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0.5));
  let i = 1;
  while (i < STOPS.length - 1 && STOPS[i][0] < x) i++;
  const [t0, c0] = STOPS[i - 1];
  const [t1, c1] = STOPS[i];
  const f = t1 > t0 ? (x - t0) / (t1 - t0) : 0;
  const [r, g, b] = c0.map((v, k) => Math.round(v + (c1[k] - v) * f));
  return `rgb(${r},${g},${b})`;
}

export function render({ model, el }) {
  const state = shell(model, el, "heatmap", { progress: true });
  // the title and the direction (a smaller second line): DOM that wraps to the view's width by itself
  const titleMain = h("div", { class: "il-htitle-main" });
  const titleSub = h("div", { class: "il-htitle-sub" });
  const titleBox = h("div", { class: "il-htitle" }, titleMain, titleSub);
  state.root.insertBefore(titleBox, state.plot);
  function drawTitle() {
    const direction = String(state.get("direction", ""));
    titleMain.textContent = String(state.get("title", ""));
    titleSub.textContent = DIRECTION_TEXT[direction] ?? direction;
    titleBox.classList.toggle("il-htitle-wide", !!cur && isWide());
    titleBox.style.display = titleMain.textContent || titleSub.textContent ? "" : "none";
  }

  // ---- active edits list + clear button under the plot
  const edits = h("ul", { class: "il-edits" });
  const editsTitle = h("div", { class: "il-edits-title" });
  const clear = h("button", { class: "il-clear", type: "button", text: "Clear all" });
  clear.addEventListener("click", () => state.request("clear"));
  const below = h("div", { class: "il-below" }, h("div", { class: "il-row" }, editsTitle, clear), edits);
  state.root.append(below);

  function renderEdits() {
    const list = Array.isArray(model.get("active_edits")) ? model.get("active_edits") : [];
    const sel = pairs(model.get("selected"));
    edits.replaceChildren(
      ...list.map((e) => {
        const id = String(e?.id ?? "");
        const enabled = e?.enabled !== false;
        const box = h("input", { type: "checkbox", class: "il-edit-toggle", checked: enabled, title: "enable / disable" });
        box.addEventListener("change", () => state.request("toggle", { edit_id: id, enabled: box.checked }));
        const rm = h("button", { type: "button", class: "il-edit-remove", title: "remove", text: "×" });
        rm.addEventListener("click", () => state.request("remove", { edit_id: id }));
        const li = h("li", { class: enabled ? "on" : "off" }, box, h("span", { class: "il-edit-label", text: e?.label ?? id }), rm);
        li.dataset.id = id;
        return li;
      }),
    );
    editsTitle.textContent = list.length
      ? `Active edits (${list.filter((e) => e?.enabled !== false).length} of ${list.length} on):`
      : sel.length
        ? `${sel.length} cell${sel.length > 1 ? "s" : ""} selected (shift-click to add more)`
        : String(state.get("hint", "")) || "Click a cell to patch it; shift-click to add cells.";
    clear.style.display = list.length || sel.length ? "" : "none";
  }

  // outlines of the enabled active edits (dotted green) and the selection (black), over the plot area
  const overlay = h("div", { class: "il-overlay" });
  state.plot.style.position = "relative";

  // A click's selection is outlined at once, as the kernel will make it (a click replaces it, a shift-click adds or
  // removes the cell); the kernel's reply to the last click (after its echo, `selected`) replaces the guess.
  let guess = null;
  let lastClick = null;
  function guessSelection(row, col, shift) {
    const sel = guess ?? pairs(model.get("selected"));
    const has = sel.some(([r, c]) => r === row && c === col);
    guess = !shift ? [[row, col]] : has ? sel.filter(([r, c]) => r !== row || c !== col) : [...sel, [row, col]];
    drawOverlay();
  }
  state.on("msg:custom", (msg) => {
    if (msg?.type === "reply" && msg.id === lastClick && guess !== null) {
      guess = null;
      drawOverlay();
    }
  });

  function outlinedCells() {
    const sel = guess ?? pairs(model.get("selected"));
    const act = (Array.isArray(model.get("active_edits")) ? model.get("active_edits") : []).filter(
      (e) => Number.isInteger(e?.row) && Number.isInteger(e?.col) && e.row >= 0 && e.col >= 0,
    );
    // a toggled-off edit: a thin dashed grey outline, never the selection's or an active edit's
    const off = new Set(act.filter((e) => e.enabled === false).map((e) => `${e.row},${e.col}`));
    return [
      ...act.map((e) => [e.row, e.col, e.enabled === false ? "il-cell-off" : "il-cell-active"]),
      ...sel.filter(([r, c]) => !off.has(`${r},${c}`)).map(([r, c]) => [r, c, "il-cell-selected"]),
    ];
  }

  function drawOverlay() {
    const gd = state.plot;
    const xa = gd._fullLayout?.xaxis;
    const ya = gd._fullLayout?.yaxis;
    if (!xa?.l2p || !ya?.l2p) return;
    const px = (ax, v) => ax._offset + ax.l2p(v);
    overlay.replaceChildren(
      ...outlinedCells().map(([r, c, cls]) => {
        const [x0, x1] = [px(xa, c - 0.5), px(xa, c + 0.5)];
        const [y0, y1] = [px(ya, r - 0.5), px(ya, r + 0.5)];
        const box = h("div", { class: `il-cell ${cls}` });
        Object.assign(box.style, {
          left: `${Math.min(x0, x1)}px`, top: `${Math.min(y0, y1)}px`,
          width: `${Math.abs(x1 - x0)}px`, height: `${Math.abs(y1 - y0)}px`,
        });
        box.dataset.row = String(r);
        box.dataset.col = String(c);
        return box;
      }),
    );
    if (overlay.parentNode !== gd) gd.appendChild(overlay);
  }

  // A click's echo: update the list and the outlines; the heatmap trace is untouched.
  function drawSelection() {
    renderEdits();
    if (!state.paints || !state.alive) return draw();
    drawOverlay();
    recordPaint(state);
  }

  // The grid as painted: built from the traits, then patched in place by "cells" messages (a sweep's progress sends
  // only its new cells: resending every value and hover string made a 2000-cell sweep freeze the page for seconds).
  // The cells are painted on our canvas, never by plotly: plotly draws the frame (axes, tick labels, titles) and the
  // canvas is repainted from plotly's own axes after every plotly paint, so a cell always sits under its tick,
  // whatever resize, relayout or re-display came before; a plotly heatmap of 2000 cells took 0.2-4 s a paint.
  let cur = null;
  let framed = ""; // the frame plotly last drew (shape, labels, titles, width): a values-only change keeps it

  function fromTraits() {
    const z = grid(model.get("values"));
    const rows = z.length;
    const cols = z.reduce((m, r) => Math.max(m, r.length), 0);
    for (const r of z) while (r.length < cols) r.push(null);
    const xl = Array.isArray(model.get("x_labels")) ? model.get("x_labels") : [];
    const yl = Array.isArray(model.get("y_labels")) ? model.get("y_labels") : [];
    const xLabels = Array.from({ length: Math.max(cols, xl.length) }, (_, i) => (i < xl.length ? xl[i] : String(i)));
    const yLabels = Array.from({ length: Math.max(rows, yl.length) }, (_, i) => (i < yl.length ? yl[i] : String(i)));
    return {
      z, rows, cols, xLabels, yLabels, extra: strGrid(model.get("hover"), rows, cols),
      metric: String(state.get("metric_name", "") || "metric"),
      xTitle: String(state.get("x_title", "")), yTitle: String(state.get("y_title", "")),
    };
  }

  /** The hover text of a cell, as plain lines (shown with textContent: token text is never markup). */
  function hoverText(r, c) {
    const g = cur;
    const v = g.z[r][c];
    const lines = [
      `${g.yTitle || "row"} ${r}: ${JSON.stringify(String(g.yLabels[r] ?? ""))}`,
      `${g.xTitle || "col"} ${c}: ${JSON.stringify(String(g.xLabels[c] ?? ""))}`,
      `${g.metric}: ${v === null || v === undefined ? "not computed yet" : fmt(v, 4)}`,
    ];
    if (g.extra[r][c]) lines.push(g.extra[r][c]);
    return lines.join("\n");
  }

  function addCells(cells) {
    if (!cur || !Array.isArray(cells)) return;
    for (const cell of cells) {
      if (!Array.isArray(cell)) continue;
      const [r, c, v, hover] = cell;
      if (!Number.isInteger(r) || !Number.isInteger(c) || r < 0 || c < 0 || r >= cur.rows || c >= cur.cols) continue;
      cur.z[r][c] = typeof v === "number" && Number.isFinite(v) ? v : null;
      cur.extra[r][c] = hover === undefined || hover === null ? "" : String(hover);
    }
    repaintCells();
  }

  // what the page paints, for tests and tools: the grid's values and each cell's hover text
  state.plot.__interplab_grid = {
    get z() { return cur?.z ?? []; },
    get x() { return cur?.xLabels ?? []; },
    hover: (r, c) => (cur ? hoverText(r, c) : ""),
  };

  function draw() {
    cur = fromTraits();
    const layout = frameLayout();
    const key = JSON.stringify(layout);
    renderEdits();
    drawTitle();
    if (state.paints && key === framed && state.plot._fullLayout) return refreshCells(); // a values-only change
    framed = key;
    return paint(state, [], layout).then((gd) => {
      paintCanvas();
      drawOverlay();
      if (!gd.__interplab_click) {
        gd.__interplab_click = true;
        gd.on("plotly_afterplot", () => { // resizes and relayouts move the cells: canvas and outlines follow
          paintCanvas();
          drawOverlay();
        });
        listenClicks(gd);
        listenHover(gd);
      }
    });
  }

  /** Repaint the cells (and the colour bar) in the frame plotly holds: no plotly call. */
  function refreshCells() {
    paintCanvas();
    return Promise.resolve(recordPaint(state));
  }

  /** The colour range: fixed zmin/zmax, else symmetric around 0 (as plotly's zmid 0), [-1, 1] while empty. */
  function colourRange() {
    const zmin = model.get("zmin");
    const zmax = model.get("zmax");
    if (typeof zmin === "number" && typeof zmax === "number" && zmax > zmin) return [zmin, zmax];
    let m = 0;
    for (const row of cur.z) for (const v of row) if (v !== null && Math.abs(v) > m) m = Math.abs(v);
    return m > 0 ? [-m, m] : [-1, 1];
  }

  /** A grid wider than its container (cells of MIN_CELL px) scrolls sideways: its titles and colour bar then sit at
   * the left, where the scroll starts, not centred on a plot the reader cannot see whole. */
  function isWide() {
    const shown = Math.floor(state.plot.clientWidth || state.root.clientWidth || 0);
    return shown > 0 && MARGIN_X + MIN_CELL * cur.cols > shown;
  }

  function frameLayout() {
    const { rows, cols, xLabels, yLabels, xTitle, yTitle } = cur;
    // cells at least MIN_CELL px wide: a long prompt's grid grows past its container and scrolls sideways
    state.minWidth = MARGIN_X + MIN_CELL * cols;
    const width = containerWidth(state) ?? 700;
    const wide = isWide();
    const keys = Array.isArray(model.get("key_cols")) ? model.get("key_cols") : [];
    // at most one label per 18 px (-45° labels: 12.7 px between lines) and MAX_TICKS in all: plotly lays out each
    // label (about 1 ms each); the last column and the key columns (where the prompts differ) are always labelled
    const xaxis = tokenAxis(xLabels.slice(0, cols),
      { title: { text: wide ? "" : esc(xTitle) }, tickangle: -45, ticks: "outside", ticklen: 4 },
      { maxTicks: Math.min(MAX_TICKS, Math.floor((width - MARGIN_X) / 18)), keep: [...keys, cols - 1] });
    // margins from the labels' measured widths: plotly's automargin lays the plot out twice
    const bottom = Math.ceil(0.71 * (textWidth(xaxis.ticktext) + 12)) + 4 + (xTitle ? 30 : 12);
    const top = TOP + (wide ? 50 : 0); // (the colour bar above a scroller)
    const height = Math.min(MAX_HEIGHT, Math.max(Math.min(900, Math.max(300, top + bottom + 24 * rows)),
      top + bottom + MIN_ROW * rows));
    const yaxis = tokenAxis(yLabels.slice(0, rows), { title: { text: esc(yTitle) }, range: [rows - 0.5, -0.5] },
      { maxTicks: Math.max(1, Math.floor((height - top - bottom) / Y_LABEL_PX)) });
    // room for the y labels, and for the first x label, which leans left from its column at -45°
    const cell = (width - MARGIN_X) / Math.max(1, cols);
    const left = Math.ceil(Math.max(textWidth(yaxis.ticktext) + (yTitle ? 40 : 18),
      0.71 * textWidth(xaxis.ticktext.slice(0, 1)) + 14 - cell / 2));
    const annotations = wide && xTitle
      ? [{ text: esc(xTitle), xref: "paper", x: 0, xanchor: "left", yref: "paper", y: 0, yanchor: "top",
        yshift: -(bottom - 22), showarrow: false, font: { size: 13 } }]
      : [];
    return baseLayout({
      margin: { l: left, r: wide ? 20 : SCALE_ROOM, t: top, b: bottom },
      plot_bgcolor: "#d9d9d9", // not-yet-computed cells (and the gaps between cells) show as grey
      hovermode: false, // the hover is ours (listenHover): no plotly trace holds the cells
      height,
      width,
      xaxis: { ...xaxis, automargin: false },
      yaxis: { ...yaxis, automargin: false },
      annotations,
    });
  }
  // Clicks are ours, not plotly_click: a press and a release on the same cell. In JupyterLab and Notebook 7 a
  // shift+mousedown also starts the notebook's cell range selection, whose capture-phase mouseup handler swallows
  // the release plotly waits for; so a shift press on a cell stops there (the notebook never sees it).
  function listenClicks(gd) {
    const size = () => (cur ? [cur.rows, cur.cols] : [0, 0]);
    let down = null;
    const onDown = (ev) => {
      if (ev.button !== 0) return;
      const cell = cellAt(gd, ev, ...size());
      if (!cell) return; // the mode bar, the colour bar, the margins: not ours
      if (ev.shiftKey) {
        ev.stopPropagation();
        // no text selection either (on the mousedown: a cancelled pointerdown would drop the mouse events)
        if (ev.type === "mousedown") ev.preventDefault();
      }
      if (ev.type === "pointerdown") down = { ...cell, shift: ev.shiftKey };
    };
    const onUp = (ev) => {
      const start = down;
      down = null;
      if (!start || ev.button !== 0) return;
      const cell = cellAt(gd, ev, ...size());
      if (!cell || cell.row !== start.row || cell.col !== start.col) return; // a drag from one cell to another
      const shift = start.shift || ev.shiftKey;
      if (!shift) paintLogits(cell.row, cell.col);
      guessSelection(cell.row, cell.col, shift);
      lastClick = state.request("click", { row: cell.row, col: cell.col, shift });
    };
    gd.addEventListener("pointerdown", onDown);
    gd.addEventListener("mousedown", onDown);
    // the release is heard on the window, first: plotly covers the page with its drag cover during a press
    window.addEventListener("pointerup", onUp, true);
    state.onCleanup(() => {
      gd.removeEventListener("pointerdown", onDown);
      gd.removeEventListener("mousedown", onDown);
      window.removeEventListener("pointerup", onUp, true);
    });
  }

  // A click on a cell of an exact sweep: the page holds that cell's patched run (cell_tops), so the linked logit
  // panel paints it now; the click request still goes (the kernel records it and answers with the same numbers).
  function paintLogits(row, col) {
    const link = String(state.get("link", ""));
    const tops = model.get("cell_tops");
    if (!link || !tops || !Array.isArray(tops.cells)) return;
    const id = `r${row}c${col}`;
    const old = (Array.isArray(model.get("active_edits")) ? model.get("active_edits") : []).find((e) => e?.id === id);
    if (old && old.enabled === false) return; // the kernel keeps it disabled: nothing patched to show
    const hit = tops.cells.find((e) => Array.isArray(e) && e[0] === row && e[1] === col);
    if (!hit) return;
    const [, , value, name, tokens, probs] = hit;
    bus().dispatchEvent(new CustomEvent(link, { detail: { metric: String(tops.metric ?? ""), value, name, tokens, probs } }));
  }

  const redraw = scheduler(state, draw);
  state.onResize = redraw; // a new width: the title wrapped again, labels thinned again (a values-only frame is kept)
  // progress: at most one repaint per 150 ms whatever the rate of "cells" messages (the page stays free for
  // clicks, hovers and the Cancel button in between)
  let cellsTimer = null;
  let lastCellsPaint = 0;
  function repaintCells() {
    if (cellsTimer !== null) return;
    const wait = Math.max(0, 150 - (performance.now() - lastCellsPaint));
    cellsTimer = state.timeout(() => {
      cellsTimer = null;
      lastCellsPaint = performance.now();
      if (cur && state.alive && state.plot._fullLayout) refreshCells();
    }, wait);
  }

  // The cells, on a canvas over the plot area, in the colour bar's colours (about 1 ms for 2000 cells). Painted from
  // plotly's axes as they are now, at every paint: it never keeps an old size or place.
  const canvas = h("canvas", { class: "il-canvas" });
  function paintCanvas() {
    const gd = state.plot;
    const xa = gd._fullLayout?.xaxis;
    const ya = gd._fullLayout?.yaxis;
    if (!cur || !xa?.l2p || !ya?.l2p) return;
    const ratio = window.devicePixelRatio || 1;
    const [w, hgt] = [xa._length, ya._length];
    Object.assign(canvas.style, { left: `${xa._offset}px`, top: `${ya._offset}px`, width: `${w}px`, height: `${hgt}px` });
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(hgt * ratio);
    canvas.dataset.rows = String(cur.rows);
    canvas.dataset.cols = String(cur.cols);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, hgt);
    const [lo, hi] = colourRange();
    const gap = 1; // px between cells, the plot's grey showing through (as plotly's xgap/ygap)
    for (let r = 0; r < cur.rows; r++) {
      const [y0, y1] = [ya.l2p(r - 0.5), ya.l2p(r + 0.5)];
      const rh = Math.abs(y1 - y0);
      const gr = rh > 3 * gap ? gap : 0; // rows of a few px: no gap either (a 1 px gap in 1.4 px rows washed them out)
      for (let c = 0; c < cur.cols; c++) {
        const v = cur.z[r][c];
        if (v === null) continue;
        const [x0, x1] = [xa.l2p(c - 0.5), xa.l2p(c + 0.5)];
        ctx.fillStyle = colourAt(hi > lo ? (v - lo) / (hi - lo) : 0.5);
        const cw = Math.abs(x1 - x0);
        const g = cw > 3 * gap ? gap : 0; // cells of a few px: no gap, or nothing would show
        ctx.fillRect(Math.min(x0, x1) + g / 2, Math.min(y0, y1) + gr / 2, cw - g, rh - gr);
      }
    }
    if (canvas.parentNode !== gd) gd.insertBefore(canvas, overlay.parentNode === gd ? overlay : null);
    drawScale(lo, hi, xa, ya);
  }

  // The colour bar, ours like the cells (a plotly colour bar is redrawn with the whole plot, ~100 ms, each time a
  // sweep widens the range): a gradient canvas, its ticks and its title, beside the plot area (at its top left when
  // the grid scrolls sideways, where the scroll starts).
  const scale = h("div", { class: "il-scale" });
  function drawScale(lo, hi, xa, ya) {
    const gd = state.plot;
    const wide = isWide();
    const [len, thick] = wide ? [220, 10] : [Math.min(ya._length, 260), 14];
    const bar = h("canvas", { class: "il-scale-bar" });
    const ratio = window.devicePixelRatio || 1;
    bar.width = Math.round((wide ? len : thick) * ratio);
    bar.height = Math.round((wide ? thick : len) * ratio);
    Object.assign(bar.style, { width: `${wide ? len : thick}px`, height: `${wide ? thick : len}px` });
    const ctx = bar.getContext("2d");
    for (let i = 0; i < len; i++) { // high values at the top (vertical) or the right (horizontal)
      ctx.fillStyle = colourAt(wide ? i / (len - 1) : 1 - i / (len - 1));
      if (wide) ctx.fillRect(i * ratio, 0, ratio + 0.5, thick * ratio);
      else ctx.fillRect(0, i * ratio, thick * ratio, ratio + 0.5);
    }
    const ticks = niceTicks(lo, hi).map((v) => {
      const f = (v - lo) / (hi - lo);
      const label = h("span", { class: "il-scale-tick", text: fmt(v, 2).replace(/\.?0+$/, "") || "0" });
      Object.assign(label.style, wide ? { left: `${f * len}px`, top: `${thick + 2}px` }
        : { top: `${(1 - f) * len}px`, left: `${thick + 4}px` });
      return label;
    });
    // (a vertical bar's title in lines as long as the bar, read top to bottom)
    const title = h("span", { class: "il-scale-title",
      text: wide ? cur.metric : wrapLines(cur.metric, len, SCALE_TITLE_FONT).join("\n") });
    if (!wide) title.style.left = `${thick + 10 + textWidth(ticks.map((t) => t.textContent), SCALE_FONT)}px`;
    scale.className = `il-scale ${wide ? "il-scale-h" : "il-scale-v"}`;
    scale.replaceChildren(bar, ...ticks, title);
    scale.dataset.lo = String(lo);
    scale.dataset.hi = String(hi);
    Object.assign(scale.style, wide
      ? { left: `${xa._offset}px`, top: `${ya._offset - thick - 34}px`, width: `${len}px`, height: `${thick}px` }
      : { left: `${xa._offset + xa._length + 20}px`, top: `${ya._offset + (ya._length - len) / 2}px`,
        width: `${thick}px`, height: `${len}px` });
    if (scale.parentNode !== gd) gd.appendChild(scale);
  }

  // The hover: our own box (no plotly trace holds the cells), the cell under the pointer from its pixels
  const tip = h("div", { class: "il-tip" });
  function listenHover(gd) {
    const move = (ev) => {
      const cell = cur && cellAt(gd, ev, cur.rows, cur.cols);
      if (!cell) {
        tip.classList.remove("on");
        return;
      }
      tip.textContent = hoverText(cell.row, cell.col);
      tip.classList.add("on");
      // beside the pointer, turned to stay inside the window
      const { innerWidth: W, innerHeight: H } = window;
      const box = tip.getBoundingClientRect();
      const x = ev.clientX + 14 + box.width > W ? ev.clientX - 14 - box.width : ev.clientX + 14;
      const y = ev.clientY + 14 + box.height > H ? ev.clientY - 14 - box.height : ev.clientY + 14;
      tip.style.left = `${Math.max(0, x)}px`;
      tip.style.top = `${Math.max(0, y)}px`;
    };
    const leave = () => tip.classList.remove("on");
    gd.addEventListener("mousemove", move);
    gd.addEventListener("mouseleave", leave);
    state.root.append(tip);
    state.onCleanup(() => {
      gd.removeEventListener("mousemove", move);
      gd.removeEventListener("mouseleave", leave);
    });
  }

  state.on("msg:custom", (msg) => {
    if (msg?.type === "cells") addCells(msg.cells);
  });
  state.watch(TRAITS, redraw);
  state.watch(SELECTION, scheduler(state, drawSelection, { soon: true })); // DOM outlines only: cheap
  draw();
  return () => state.cleanup();
}
