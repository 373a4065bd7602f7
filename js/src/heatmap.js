// PatchingHeatmap: one cell per (row, col) patch; click to select, shift-click to add; the active edits listed below.
// Requests to Python (declared in interplab/widgets/protocol.json): click {row, col, shift},
// toggle {edit_id, enabled}, remove {edit_id}, clear, cancel (the Cancel button, in plot.js).
import {
  RDBU, baseLayout, bus, cellAt, containerWidth, esc, fmt, grid, h, hoverLines, paint, quoted, recordPaint, scheduler,
  shell, strGrid,
  tokenAxis,
} from "./plot.js";

export const DIRECTION_TEXT = {
  denoise: "denoising (clean activation patched into the corrupted run): 1 = clean restored, 0 = corrupted",
  noise: "noising (corrupted activation patched into the clean run): 1 = clean behaviour kept, 0 = corrupted",
};

// Data traits repaint the whole heatmap (plotly); a click only changes the selection, drawn as DOM outlines over
// the plot (no plotly call: a relayout of shapes took ~50 ms and delayed the logit panel's repaint).
const TRAITS = [
  "values", "x_labels", "y_labels", "x_title", "y_title", "title", "direction", "metric_name",
  "hover", "zmin", "zmax",
];
const SELECTION = ["selected", "active_edits", "hint"];
const MIN_CELL = 5; // px: a cell narrower than this is hard to see and to click
const MARGIN_X = 90 + 30 + 100; // left and right margins and the colour bar

function pairs(v) {
  if (!Array.isArray(v)) return [];
  return v.filter((p) => Array.isArray(p) && p.length >= 2 && Number.isInteger(p[0]) && Number.isInteger(p[1]));
}

function parseRgb(s) {
  return s.match(/[\d.]+/g).map(Number);
}
const STOPS = RDBU.map(([t, c]) => [t, parseRgb(c)]);

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
      (e) => Number.isInteger(e?.row) && Number.isInteger(e?.col) && e.row >= 0 && e.col >= 0 && e.enabled !== false,
    );
    return [...act.map((e) => [e.row, e.col, "il-cell-active"]), ...sel.map(([r, c]) => [r, c, "il-cell-selected"])];
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
  let cur = null;
  let revision = 0;

  function fromTraits() {
    const z = grid(model.get("values"));
    const rows = z.length;
    const cols = z.reduce((m, r) => Math.max(m, r.length), 0);
    for (const r of z) while (r.length < cols) r.push(null);
    const xl = Array.isArray(model.get("x_labels")) ? model.get("x_labels") : [];
    const yl = Array.isArray(model.get("y_labels")) ? model.get("y_labels") : [];
    const xLabels = Array.from({ length: Math.max(cols, xl.length) }, (_, i) => (i < xl.length ? xl[i] : String(i)));
    const yLabels = Array.from({ length: Math.max(rows, yl.length) }, (_, i) => (i < yl.length ? yl[i] : String(i)));
    const g = {
      z, rows, cols, xLabels, yLabels, extra: strGrid(model.get("hover"), rows, cols), text: [],
      metric: String(state.get("metric_name", "") || "metric"),
      xTitle: String(state.get("x_title", "")), yTitle: String(state.get("y_title", "")),
    };
    for (let r = 0; r < rows; r++) {
      const line = [];
      for (let c = 0; c < cols; c++) line.push(hoverText(g, r, c));
      g.text.push(line);
    }
    return g;
  }

  function hoverText(g, r, c) {
    const v = g.z[r][c];
    let t =
      `${esc(g.yTitle || "row")} ${r}: ${quoted(g.yLabels[r])}<br>` +
      `${esc(g.xTitle || "col")} ${c}: ${quoted(g.xLabels[c])}<br>` +
      `${esc(g.metric)}: ${v === null || v === undefined ? "not computed yet" : fmt(v, 4)}`;
    if (g.extra[r][c]) t += `<br>${hoverLines(g.extra[r][c])}`;
    return t;
  }

  function addCells(cells) {
    if (!cur || !Array.isArray(cells)) return;
    for (const cell of cells) {
      if (!Array.isArray(cell)) continue;
      const [r, c, v, hover] = cell;
      if (!Number.isInteger(r) || !Number.isInteger(c) || r < 0 || c < 0 || r >= cur.rows || c >= cur.cols) continue;
      cur.z[r][c] = typeof v === "number" && Number.isFinite(v) ? v : null;
      cur.extra[r][c] = hover === undefined || hover === null ? "" : String(hover);
      cur.text[r][c] = hoverText(cur, r, c);
    }
    repaintCells();
  }

  function draw() {
    cur = fromTraits();
    canvas.remove(); // the plotly trace has every cell again
    return paintGrid();
  }

  function paintGrid() {
    const { z, rows, cols, xLabels, yLabels, text, metric, xTitle, yTitle } = cur;
    // cells at least MIN_CELL px wide: a long prompt's grid grows past its container and scrolls sideways
    state.minWidth = MARGIN_X + MIN_CELL * cols;
    const width = containerWidth(state) ?? 700;
    const zmin = model.get("zmin");
    const zmax = model.get("zmax");
    const fixed = typeof zmin === "number" && typeof zmax === "number" && zmax > zmin;
    const trace = {
      type: "heatmap",
      z,
      x: xLabels.slice(0, cols).map((_, i) => i),
      y: yLabels.slice(0, rows).map((_, i) => i),
      text,
      hovertemplate: "%{text}<extra></extra>",
      hoverongaps: true,
      colorscale: RDBU,
      xgap: 1,
      ygap: 1,
      colorbar: { title: { text: esc(metric), side: "right" }, thickness: 14 },
      ...(fixed ? { zmin, zmax, zauto: false } : { zmid: 0 }),
    };
    const direction = String(state.get("direction", ""));
    const sub = DIRECTION_TEXT[direction] ?? (direction ? esc(direction) : "");
    const layout = baseLayout({
      // the direction as a smaller second line of the title (plotly's `subtitle` is misplaced on a first render)
      title: { text: esc(state.get("title", "")) + (sub ? `<br><span style="font-size:12px">${sub}</span>` : "") },
      margin: { l: 90, r: 30, t: sub ? 70 : 50, b: 90 },
      plot_bgcolor: "#d9d9d9", // not-yet-computed cells (null) show as grey
      height: Math.min(900, Math.max(300, 170 + 24 * rows)),
      datarevision: ++revision, // z and text are patched in place: tell Plotly.react they changed
      xaxis: tokenAxis(xLabels.slice(0, cols), { title: { text: esc(xTitle) }, tickangle: -45 },
        { maxTicks: Math.floor((width - MARGIN_X) / 18) }), // -45° labels 18 px apart: 12.7 px between lines
      yaxis: tokenAxis(yLabels.slice(0, rows), { title: { text: esc(yTitle) }, range: [rows - 0.5, -0.5] }),
    });
    renderEdits();
    return paint(state, [trace], layout).then((gd) => {
      drawOverlay();
      if (!gd.__interplab_click) {
        gd.__interplab_click = true;
        gd.on("plotly_afterplot", drawOverlay); // resizes and relayouts move the cells
        listenClicks(gd);
      }
    });
  }

  // Clicks are ours, not plotly_click: a press and a release on the same cell. In JupyterLab and Notebook 7 a
  // shift+mousedown also starts the notebook's cell range selection, whose capture-phase mouseup handler swallows
  // the release plotly waits for; so a shift press on a cell stops there (the notebook never sees it).
  function listenClicks(gd) {
    const size = () => {
      const z = gd._fullData?.[0]?.z ?? [];
      return [z.length, z.reduce((m, r) => Math.max(m, r?.length ?? 0), 0)];
    };
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
  // progress: at most one repaint per 150 ms whatever the rate of "cells" messages (a repaint of a big grid is
  // tens of ms; the page stays free for clicks, hovers and the Cancel button in between)
  let cellsTimer = null;
  let lastCellsPaint = 0;
  function repaintCells() {
    if (cellsTimer !== null) return;
    const wait = Math.max(0, 150 - (performance.now() - lastCellsPaint));
    cellsTimer = state.timeout(() => {
      cellsTimer = null;
      lastCellsPaint = performance.now();
      if (cur && state.alive) paintCanvas();
    }, wait);
  }

  // A sweep's new cells are painted on a canvas over the plot area, in plotly's colours: a plotly repaint of a
  // grid with ~100 token ticks takes 0.4-0.9 s (the tick labels' layout), a canvas of 2000 cells about 1 ms. The
  // plotly trace (hover, colour bar) catches up when the sweep ends and the kernel sets the whole grid.
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
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const [lo, hi] = colourRange(cur.z);
    for (let r = 0; r < cur.rows; r++) {
      const [y0, y1] = [ya.l2p(r - 0.5), ya.l2p(r + 0.5)];
      for (let c = 0; c < cur.cols; c++) {
        const v = cur.z[r][c];
        if (v === null) continue;
        const [x0, x1] = [xa.l2p(c - 0.5), xa.l2p(c + 0.5)];
        ctx.fillStyle = colourAt(hi > lo ? (v - lo) / (hi - lo) : 0.5);
        ctx.fillRect(Math.min(x0, x1) + 0.5, Math.min(y0, y1) + 0.5, Math.abs(x1 - x0) - 1, Math.abs(y1 - y0) - 1);
      }
    }
    if (canvas.parentNode !== gd) gd.insertBefore(canvas, overlay.parentNode === gd ? overlay : null);
    recordPaint(state);
  }

  /** The trace's colour range as plotly computes it: fixed zmin/zmax, else symmetric around 0 (zmid 0). */
  function colourRange(z) {
    const zmin = model.get("zmin");
    const zmax = model.get("zmax");
    if (typeof zmin === "number" && typeof zmax === "number" && zmax > zmin) return [zmin, zmax];
    let m = 0;
    for (const row of z) for (const v of row) if (v !== null && Math.abs(v) > m) m = Math.abs(v);
    return [-m, m];
  }
  state.on("msg:custom", (msg) => {
    if (msg?.type === "cells") addCells(msg.cells);
  });
  state.watch(TRAITS, redraw);
  state.watch(SELECTION, scheduler(state, drawSelection, { soon: true })); // DOM outlines only: cheap
  draw();
  return () => state.cleanup();
}
