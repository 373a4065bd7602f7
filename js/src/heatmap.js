// PatchingHeatmap: one cell per (row, col) patch; click to select, shift-click to add; the active edits listed below.
// Messages to Python: {type:"click", row, col, shift}, {type:"toggle", id, enabled}, {type:"remove", id},
//                     {type:"clear"}, {type:"cancel"}.
import {
  PLOT_CONFIG, Plotly, RDBU, baseLayout, clickedCell, esc, fmt, grid, h, hoverLines, paint, quoted, recordPaint, scheduler, shell, strGrid,
  tokenAxis,
} from "./plot.js";

export const DIRECTION_TEXT = {
  denoise: "denoising (clean activation patched into the corrupted run): 1 = clean restored, 0 = corrupted",
  noise: "noising (corrupted activation patched into the clean run): 1 = clean behaviour kept, 0 = corrupted",
};

// Data traits repaint the whole heatmap; a click only changes the selection, which moves outlines (relayout).
const TRAITS = [
  "values", "x_labels", "y_labels", "x_title", "y_title", "title", "direction", "metric_name",
  "hover", "zmin", "zmax",
];
const SELECTION = ["selected", "active_edits"];

function cellShapes(cells, style) {
  return cells.map(([r, c]) => ({
    type: "rect",
    xref: "x",
    yref: "y",
    x0: c - 0.5,
    x1: c + 0.5,
    y0: r - 0.5,
    y1: r + 0.5,
    line: style,
    fillcolor: "rgba(0,0,0,0)",
    layer: "above",
  }));
}

function pairs(v) {
  if (!Array.isArray(v)) return [];
  return v.filter((p) => Array.isArray(p) && p.length >= 2 && Number.isInteger(p[0]) && Number.isInteger(p[1]));
}

export function render({ model, el }) {
  const state = shell(model, el, "heatmap", { progress: true });

  // ---- active edits list + clear button under the plot
  const edits = h("ul", { class: "il-edits" });
  const editsTitle = h("div", { class: "il-edits-title" });
  const clear = h("button", { class: "il-clear", type: "button", text: "Clear all" });
  clear.addEventListener("click", () => state.send({ type: "clear" }));
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
        box.addEventListener("change", () => state.send({ type: "toggle", id, enabled: box.checked }));
        const rm = h("button", { type: "button", class: "il-edit-remove", title: "remove", text: "×" });
        rm.addEventListener("click", () => state.send({ type: "remove", id }));
        const li = h("li", { class: enabled ? "on" : "off" }, box, h("span", { class: "il-edit-label", text: e?.label ?? id }), rm);
        li.dataset.id = id;
        return li;
      }),
    );
    editsTitle.textContent = list.length
      ? `Active edits (${list.filter((e) => e?.enabled !== false).length} of ${list.length} on):`
      : sel.length
        ? `${sel.length} cell${sel.length > 1 ? "s" : ""} selected (shift-click to add more)`
        : "Click a cell to patch it; shift-click to add cells.";
    clear.style.display = list.length || sel.length ? "" : "none";
  }

  let lastLayout = {};

  function selectionShapes() {
    const sel = pairs(model.get("selected"));
    const act = (Array.isArray(model.get("active_edits")) ? model.get("active_edits") : []).filter(
      (e) => Number.isInteger(e?.row) && Number.isInteger(e?.col) && e.row >= 0 && e.col >= 0,
    );
    return [
      ...cellShapes(
        act.filter((e) => e.enabled !== false).map((e) => [e.row, e.col]),
        { color: "#1b9e3e", width: 2, dash: "dot" },
      ),
      ...cellShapes(sel, { color: "black", width: 3 }),
    ];
  }

  // A click's echo: update the list and move the outlines without recomputing the heatmap trace.
  function drawSelection() {
    renderEdits();
    if (!state.paints || !state.alive) return draw();
    // react with the same trace objects and the layout we built: plotly's diff sees only the shapes change
    const gd = state.plot;
    const layout = { ...lastLayout, shapes: selectionShapes() };
    return Plotly.react(gd, gd.data, layout, PLOT_CONFIG).then(() => recordPaint(state)).catch((err) => {
      console.error("interplab: relayout failed", err);
      return draw();
    });
  }

  function draw() {
    const z = grid(model.get("values"));
    const rows = z.length;
    const cols = z.reduce((m, r) => Math.max(m, r.length), 0);
    const xl = Array.isArray(model.get("x_labels")) ? model.get("x_labels") : [];
    const yl = Array.isArray(model.get("y_labels")) ? model.get("y_labels") : [];
    const xLabels = Array.from({ length: Math.max(cols, xl.length) }, (_, i) => (i < xl.length ? xl[i] : String(i)));
    const yLabels = Array.from({ length: Math.max(rows, yl.length) }, (_, i) => (i < yl.length ? yl[i] : String(i)));
    const extra = strGrid(model.get("hover"), rows, cols);
    const metric = String(state.get("metric_name", "") || "metric");
    const xTitle = String(state.get("x_title", ""));
    const yTitle = String(state.get("y_title", ""));
    const text = [];
    for (let r = 0; r < rows; r++) {
      const line = [];
      for (let c = 0; c < cols; c++) {
        const v = z[r][c];
        let t =
          `${esc(yTitle || "row")} ${r}: ${quoted(yLabels[r])}<br>` +
          `${esc(xTitle || "col")} ${c}: ${quoted(xLabels[c])}<br>` +
          `${esc(metric)}: ${v === null || v === undefined ? "not computed yet" : fmt(v, 4)}`;
        if (extra[r][c]) t += `<br>${hoverLines(extra[r][c])}`;
        line.push(t);
      }
      text.push(line);
    }
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
    const shapes = selectionShapes();
    const direction = String(state.get("direction", ""));
    const sub = DIRECTION_TEXT[direction] ?? (direction ? esc(direction) : "");
    const layout = baseLayout({
      // the direction as a smaller second line of the title (plotly's `subtitle` is misplaced on a first render)
      title: { text: esc(state.get("title", "")) + (sub ? `<br><span style="font-size:12px">${sub}</span>` : "") },
      margin: { l: 90, r: 30, t: sub ? 70 : 50, b: 90 },
      plot_bgcolor: "#d9d9d9", // not-yet-computed cells (null) show as grey
      height: Math.min(900, Math.max(300, 170 + 24 * rows)),
      xaxis: tokenAxis(xLabels.slice(0, cols), { title: { text: esc(xTitle) }, tickangle: -45 }),
      yaxis: tokenAxis(yLabels.slice(0, rows), { title: { text: esc(yTitle) }, range: [rows - 0.5, -0.5] }),
      shapes,
    });
    renderEdits();
    lastLayout = layout;
    return paint(state, [trace], layout).then((gd) => {
      if (!gd.__interplab_click) {
        gd.__interplab_click = true;
        gd.on("plotly_click", (ev) => {
          const z = gd._fullData?.[0]?.z ?? [];
          const cell = clickedCell(gd, ev, z.length, z.reduce((m, r) => Math.max(m, r?.length ?? 0), 0));
          if (!cell) return;
          state.send({ type: "click", row: cell.row, col: cell.col, shift: !!ev.event?.shiftKey });
        });
      }
    });
  }

  const redraw = scheduler(state, draw);
  state.watch(TRAITS, redraw);
  state.watch(SELECTION, scheduler(state, drawSelection));
  draw();
  return () => state.cleanup();
}
