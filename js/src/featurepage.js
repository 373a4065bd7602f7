// A feature's page from its corpus statistics (FeatureStats.feature in the kernel): density (marked when dense),
// the activation histogram, the top examples and the examples per activation band, each context with its firing
// token marked. Shared by the feature view's panel and the graph view's node page, so both draw a feature alike.
import { fmt, h } from "./plot.js";

const MONO = { fontFamily: "monospace", fontSize: "12px" };
const SVG = "http://www.w3.org/2000/svg";

/** A context's tokens, the firing one marked (<mark class="il-fire">), its activation first. */
export function context(ex) {
  const line = h("div", { class: "il-context", style: { ...MONO, margin: "2px 0", overflowWrap: "anywhere" } });
  line.append(h("span", { class: "il-context-act", style: { color: "#555", display: "inline-block",
    whiteSpace: "pre" } }, `${fmt(ex.act, 3)} `));
  (ex.tokens ?? []).forEach((t, i) => {
    const text = String(t).replace(/\n/g, "↵");
    // each token one box (never split over two lines), so a context wraps between tokens
    const style = { display: "inline-block", whiteSpace: "pre" };
    line.append(i === ex.at ? h("mark", { class: "il-fire", style: { ...style, background: "#fdba74" } }, text)
      : h("span", { style }, text));
  });
  line.dataset.act = String(ex.act);
  return line;
}

/** The activation histogram: bins equal in log10 of the activation, bar height the log of the count. */
export function histogram(st, width = 300) {
  const counts = st.hist_counts ?? [];
  const most = Math.max(1, ...counts);
  const H = 60;
  const bw = width / Math.max(1, counts.length);
  const box = h("div", { class: "il-histogram", style: { margin: "4px 0" } });
  const svg = document.createElementNS(SVG, "svg");
  // drawn `width` wide, narrower where the page is (the bars scale with it)
  svg.setAttribute("viewBox", `0 0 ${width} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("height", String(H));
  svg.style.width = "100%";
  svg.style.maxWidth = `${width}px`;
  svg.style.display = "block";
  counts.forEach((c, i) => {
    const r = document.createElementNS(SVG, "rect");
    const hgt = c > 0 ? Math.max(1, (H * Math.log1p(c)) / Math.log1p(most)) : 0;
    r.setAttribute("x", String(i * bw));
    r.setAttribute("y", String(H - hgt));
    r.setAttribute("width", String(Math.max(0.5, bw - 0.5)));
    r.setAttribute("height", String(hgt));
    r.setAttribute("fill", "#4c78a8");
    r.dataset.count = String(c);
    svg.append(r);
  });
  const e = st.hist_edges ?? []; // log10 of the activations at the bins' edges
  box.append(svg, h("div", { class: "il-metric", style: { fontSize: "11px" } },
    `activation histogram: ${counts.length} bins, equal in log10, ${fmt(10 ** e[0], 3)} to ${
      fmt(10 ** e[e.length - 1], 3)}; bar height: log count`));
  return box;
}

/** The "dense" mark beside a feature that fires on more than the threshold's share of the corpus's tokens. */
export function denseMark() {
  return h("b", { class: "il-dense", style: { color: "#b45309", marginLeft: "6px" } }, "dense");
}

/** The statistics part of a feature's page, as a list of elements. */
export function statsSection(st, dense) {
  const line = h("div", { class: "il-metric il-page-density", "data-value": st.density },
    `density ${fmt(100 * st.density, 3)}% of the corpus's tokens; mean ${fmt(st.mean, 3)}, max ${fmt(st.max, 3)}`);
  if (dense) line.append(denseMark());
  const out = [line, histogram(st), h("div", { class: "il-bars-title" }, "top examples")];
  for (const ex of st.top ?? []) out.push(context(ex));
  (st.bands ?? []).forEach((band, b) => {
    if (!band.length) return;
    const nb = st.bands.length;
    out.push(h("div", { class: "il-bars-title il-band", "data-band": b },
      `activation ${fmt((st.max * b) / nb, 3)} to ${fmt((st.max * (b + 1)) / nb, 3)}`));
    for (const ex of band) out.push(context(ex));
  });
  if (st.partial) {
    out.push(h("div", { class: "il-metric il-page-partial", style: { color: "#666" } },
      "a preview: the kernel sends the whole page (more examples) when the feature is selected"));
  }
  return out;
}
