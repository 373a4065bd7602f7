// LensView (logit lens): layers x positions; the cell text is the top token, the colour its probability.
// Request to Python (declared in interplab/widgets/protocol.json): select {row, col} on a cell click.
import { BLUES, baseLayout, clickedCell, containerWidth, esc, fmt, grid, hoverLines, paint, quoted, scheduler, shell, strGrid, tick, tokenAxis } from "../plot.js";

const MIN_CELL = 5; // px: narrower cells are hard to see and to click; a longer prompt scrolls sideways
const MARGIN_X = 70 + 30 + 80; // left and right margins and the colour bar
const CHAR_PX = 6.5; // the cell text's font (10 px): the width one character takes, at most

export function render({ model, el }) {
  const state = shell(model, el, "lens");

  function draw() {
    const z = grid(model.get("probs"));
    const xl = Array.isArray(model.get("x_labels")) ? model.get("x_labels").map(String) : [];
    const yl = Array.isArray(model.get("y_labels")) ? model.get("y_labels").map(String) : [];
    const rows = Math.max(z.length, yl.length);
    const cols = Math.max(z.reduce((m, r) => Math.max(m, r.length), 0), xl.length);
    const top = strGrid(model.get("top_tokens"), rows, cols);
    const extra = strGrid(model.get("hover"), rows, cols);
    const xLabels = Array.from({ length: cols }, (_, i) => xl[i] ?? String(i));
    const yLabels = Array.from({ length: rows }, (_, i) => yl[i] ?? String(i));
    const zz = Array.from({ length: rows }, (_, r) => Array.from({ length: cols }, (_, c) => z[r]?.[c] ?? null));
    // long prompts: cells at least MIN_CELL px wide (the plot scrolls sideways), each cell's top token cut to what
    // fits its width, and none where not two characters fit (the hover names it)
    state.minWidth = MARGIN_X + MIN_CELL * cols;
    const width = containerWidth(state) ?? 700;
    const fits = Math.min(10, Math.floor(((width - MARGIN_X) / Math.max(1, cols) - 4) / CHAR_PX));
    const cellText = top.map((row) => row.map((t) => (fits >= 2 ? tick(t, fits) : "")));
    const hover = [];
    for (let r = 0; r < rows; r++) {
      const line = [];
      for (let c = 0; c < cols; c++) {
        let t = `${esc(yLabels[r])}, position ${c} ${quoted(xLabels[c])}<br>top: ${quoted(top[r][c])} (p = ${fmt(zz[r][c])})`;
        if (extra[r][c]) t += `<br>${hoverLines(extra[r][c])}`;
        line.push(t);
      }
      hover.push(line);
    }
    const trace = {
      type: "heatmap",
      z: zz,
      x: xLabels.map((_, i) => i),
      y: yLabels.map((_, i) => i),
      text: cellText,
      texttemplate: "%{text}",
      textfont: { size: 10 },
      customdata: hover,
      hovertemplate: "%{customdata}<extra></extra>",
      colorscale: BLUES,
      zmin: 0,
      zmax: 1,
      xgap: 1,
      ygap: 1,
      colorbar: { title: { text: "p(top)", side: "right" }, thickness: 14 },
    };
    const layout = baseLayout({
      title: { text: esc(state.get("title", "")) },
      margin: { l: 70, r: 30, t: 50, b: 90 },
      plot_bgcolor: "#d9d9d9",
      height: Math.min(1000, Math.max(300, 150 + 24 * rows)),
      // -45° labels 18 px apart at most (long prompts: every k-th token; the hover names each cell's)
      xaxis: tokenAxis(xLabels, { title: { text: "position" }, tickangle: -45 },
        { maxTicks: Math.floor((width - MARGIN_X) / 18) }),
      // layer 0 at the top, as in every patching heatmap: one convention for the lab's layer axes
      yaxis: tokenAxis(yLabels, { title: { text: "layer" }, range: [rows - 0.5, -0.5] }),
    });
    return paint(state, [trace], layout).then((gd) => {
      if (gd.__interplab_click) return;
      gd.__interplab_click = true;
      gd.on("plotly_click", (ev) => {
        const zNow = gd._fullData?.[0]?.z ?? [];
        const cell = clickedCell(gd, ev, zNow.length, zNow[0]?.length ?? 0);
        if (cell) state.request("select", { row: cell.row, col: cell.col });
      });
    });
  }

  const redraw = scheduler(state, draw);
  state.watch(["x_labels", "y_labels", "top_tokens", "probs", "hover", "title"], redraw);
  state.onResize = redraw; // a new width: each cell's text cut again to what fits it, the labels thinned again
  draw();
  return () => state.cleanup();
}
