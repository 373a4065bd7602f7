// What a person sees, measured in the page (shared by the bare-page and JupyterLab tests): given a view's element,
// returns {problems: [...], heatmaps: [...]}; each heatmap lists its labelled ticks with the canvas pixel under the
// tick mark, for the test to compare with the colour its value must have (computed in Python, not by this code).
(root) => {
  const problems = [];
  const shown = (e) => {
    const r = e.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) return false;
    for (let a = e; a && a.nodeType === 1; a = a.parentElement ?? a.getRootNode()?.host) {
      const cs = getComputedStyle(a);
      if (cs.display === "none" || cs.visibility === "hidden") return false;
    }
    return true;
  };
  const name = (e) => `${e.tagName.toLowerCase()}.${String(e.className?.baseVal ?? e.className).trim().replace(/\s+/g, ".")}`;
  const inside = (a, b, tol = 1) =>
    a.left >= b.left - tol && a.right <= b.right + tol && a.top >= b.top - tol && a.bottom <= b.bottom + tol;

  // 1. no error panel
  for (const e of root.querySelectorAll(".il-error.on")) if (shown(e)) problems.push(`error shown: ${e.textContent.slice(0, 300)}`);

  // 2. each heatmap's cells over its plot area, each labelled tick over its own column
  const heatmaps = [];
  for (const gd of root.querySelectorAll(".interplab-heatmap .js-plotly-plot")) {
    if (!shown(gd)) continue; // a tab not opened
    const cv = gd.querySelector("canvas.il-canvas");
    const area = gd.querySelector(".nsewdrag");
    const grid = gd.__interplab_grid;
    if (!cv || !area || !grid) {
      problems.push(`heatmap without its canvas, plot area or grid (${!!cv}, ${!!area}, ${!!grid})`);
      continue;
    }
    const a = area.getBoundingClientRect();
    const c = cv.getBoundingClientRect();
    if (Math.abs(a.left - c.left) > 1 || Math.abs(a.right - c.right) > 1 || Math.abs(a.top - c.top) > 1
        || Math.abs(a.bottom - c.bottom) > 1) {
      problems.push(`cells drawn at ${JSON.stringify([c.left, c.top, c.width, c.height].map(Math.round))}, plot area at ${
        JSON.stringify([a.left, a.top, a.width, a.height].map(Math.round))}`);
    }
    const rows = grid.z.length;
    const cols = rows ? grid.z[0].length : 0;
    const marks = [...gd.querySelectorAll("path.xtick")].map((m) => m.getBoundingClientRect());
    const labels = [...gd.querySelectorAll("g.xtick text")].map((t) => t.textContent);
    if (marks.length !== labels.length || marks.length === 0) problems.push(`${marks.length} tick marks, ${labels.length} labels`);
    const ctx = cv.getContext("2d");
    const k = cv.width / c.width;
    const ticks = [];
    marks.forEach((m, i) => {
      const x = (m.left + m.right) / 2;
      const col = Math.floor(((x - c.left) / c.width) * cols);
      const pixels = [];
      for (let r = 0; r < rows; r++) {
        const y = ((r + 0.5) / rows) * c.height;
        pixels.push([...ctx.getImageData(Math.floor((x - c.left) * k), Math.floor(y * k), 1, 1).data]);
      }
      ticks.push({ label: labels[i], col, text: grid.x[col], values: grid.z.map((row) => row[col]), pixels });
    });
    const scale = gd.querySelector(".il-scale");
    heatmaps.push({ ticks, rows, cols, lo: Number(scale?.dataset.lo), hi: Number(scale?.dataset.hi) });
  }
  // plotly's own heatmaps (lens, attention): the cell image fills the plot area
  for (const img of root.querySelectorAll(".js-plotly-plot .hm image")) {
    if (!shown(img)) continue;
    const gd = img.closest(".js-plotly-plot");
    const a = gd.querySelector(".nsewdrag").getBoundingClientRect();
    const c = img.getBoundingClientRect();
    if (!inside(c, a, 1.5) || c.width < a.width - 2) problems.push(`plotly cells ${JSON.stringify([c.left, c.width])} vs area ${JSON.stringify([a.left, a.width])}`);
  }

  // 3. text: none clipped by its plot or view, none over another
  const texts = [];
  for (const t of root.querySelectorAll("svg text")) {
    if (!t.textContent.trim() || !shown(t) || t.closest(".modebar, .hoverlayer")) continue;
    // a heatmap's cell texts (the lens's top tokens) and its row labels are each their own: one running into its
    // neighbour is a fault (the -45° column labels are one group: their boxes overlap where their glyphs do not)
    const group = t.closest(".heatmaplayer, .ytick") ? `own${texts.length}`
      : t.closest(".xtick, .textpoint, .cbaxis")?.classList[0] ?? name(t) + texts.length;
    texts.push({ e: t, box: t.getBoundingClientRect(), group, clip: t.closest("svg").getBoundingClientRect() });
  }
  const viewBox = root.getBoundingClientRect();
  for (const e of root.querySelectorAll("*")) {
    if (e instanceof SVGElement || e.closest(".il-tip, .modebar")) continue;
    if (![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    if (!shown(e)) continue;
    const cs = getComputedStyle(e);
    if (cs.textOverflow !== "ellipsis" && e.scrollWidth > e.clientWidth + 1 && cs.overflowX !== "visible" && e.clientWidth > 0) {
      problems.push(`text cut: ${name(e)} "${e.textContent.slice(0, 60)}" (${e.scrollWidth} px in ${e.clientWidth})`);
    }
    const scroller = e.closest(".il-plot");
    const clip = scroller && scroller.scrollWidth > scroller.clientWidth + 1 ? (() => {
      const b = scroller.getBoundingClientRect();
      return { left: b.left - scroller.scrollLeft, right: b.left - scroller.scrollLeft + scroller.scrollWidth, top: b.top, bottom: b.bottom };
    })() : viewBox;
    // the box of the text itself (a block's box is as wide as its container)
    const range = document.createRange();
    range.selectNodeContents(e);
    const rects = [...range.getClientRects()];
    if (!rects.length) continue;
    const box = rects.reduce((u, r) => ({ left: Math.min(u.left, r.left), right: Math.max(u.right, r.right),
      top: Math.min(u.top, r.top), bottom: Math.max(u.bottom, r.bottom) }), { left: 1e9, right: -1e9, top: 1e9, bottom: -1e9 });
    const group = e.classList.contains("il-scale-tick") ? "scale-tick" : name(e) + texts.length;
    texts.push({ e, box, group, clip: { left: clip.left, right: clip.right, top: -1e9, bottom: 1e9 } });
  }
  for (const t of texts) {
    if (!inside(t.box, t.clip, 1.5)) {
      problems.push(`text clipped: ${name(t.e)} "${t.e.textContent.slice(0, 60)}" at ${JSON.stringify(
        [t.box.left, t.box.right, t.box.top, t.box.bottom].map(Math.round))} outside ${JSON.stringify(
        [t.clip.left, t.clip.right, t.clip.top, t.clip.bottom].map((v) => Math.round(Math.max(-1e6, Math.min(1e6, v)))))}`);
    }
  }
  for (let i = 0; i < texts.length; i++) {
    for (let j = i + 1; j < texts.length; j++) {
      const [p, q] = [texts[i], texts[j]];
      if (p.group === q.group || p.e.contains(q.e) || q.e.contains(p.e)) continue;
      const w = Math.min(p.box.right, q.box.right) - Math.max(p.box.left, q.box.left);
      const h = Math.min(p.box.bottom, q.box.bottom) - Math.max(p.box.top, q.box.top);
      if (w > 2 && h > 2) {
        problems.push(`text over text: ${name(p.e)} "${p.e.textContent.slice(0, 40)}" and ${name(q.e)} "${
          q.e.textContent.slice(0, 40)}" (${Math.round(w)} x ${Math.round(h)} px)`);
      }
    }
  }
  return { problems, heatmaps };
}
