// FeatureView: an SAE's features on one prompt (plain DOM, no plotly). The prompt's tokens (shaded by the selected
// feature's activation); the selected token's top features as bars (a click selects one); the selected feature's
// panel: the tokens it raises and lowers (and its density, with corpus statistics), a steering slider and an ablate
// toggle, the next-token bars they give, and below them its page (histogram, examples by activation band, from the
// statistics) or its top contexts in the prompts (each token shaded by its activation). The page holds every token's top features and each of
// those features' panels (traits `top`, `panels`), so a click on a token or a feature paints at once; the request
// still goes, and the kernel's traits then agree. Steering and ablating need the model: the kernel answers with bars.
import { barsElement } from "../bars.js";
import { denseMark, statsSection } from "../featurepage.js";
import { fmt, h, metricLine, recordPaint, scheduler, shell, visible } from "../plot.js";

const ACT = "#4c78a8"; // an activation's shade (its alpha is the activation over the feature's largest)

function shade(value, top) {
  const a = top > 0 && Number.isFinite(value) ? Math.max(0, Math.min(1, value / top)) : 0;
  return a > 0 ? `rgba(76, 120, 168, ${(0.12 + 0.78 * a).toFixed(3)})` : "transparent";
}

function tokenRow(tokens, acts, top, { selected = -1, mark = -1, onClick = null } = {}) {
  return h("div", { class: "il-ftokens" }, tokens.map((tok, i) => {
    const attrs = {
      class: `il-ftok${i === selected ? " il-on" : ""}${i === mark ? " il-mark" : ""}`,
      "data-pos": String(i),
      "data-act": String(acts[i] ?? 0),
      title: `${JSON.stringify(tok)}: ${fmt(acts[i] ?? 0, 4)}`,
      text: visible(tok),
      style: { background: shade(acts[i] ?? 0, top) },
    };
    const span = h("span", attrs);
    if (onClick) span.addEventListener("click", () => onClick(i));
    return span;
  }));
}

// this view's own styles, inside its root (so a shadow root gets them too)
const CSS = `
.interplab-features .il-ftokens { display: flex; flex-wrap: wrap; gap: 2px; margin: 4px 0; font-family: ui-monospace,
  monospace; font-size: 12px; }
.interplab-features .il-ftok { padding: 1px 3px; border: 1px solid transparent; border-radius: 3px; cursor: pointer;
  white-space: pre; }
.interplab-features .il-ftok.il-on { border-color: #e45756; }
.interplab-features .il-ftok.il-mark { border-color: #333; font-weight: 600; }
.interplab-features .il-fcontexts .il-ftok { cursor: default; }
.interplab-features .il-fcols { display: flex; gap: 16px; flex-wrap: wrap; align-items: flex-start; }
.interplab-features .il-fcol { flex: 1; min-width: 200px; }
.interplab-features .il-frow { cursor: pointer; }
.interplab-features .il-frow.il-on .il-tok { font-weight: 700; color: #e45756; }
.interplab-features .il-feffect { display: flex; gap: 6px; font-size: 12px; }
.interplab-features .il-fcontrols { display: flex; gap: 16px; align-items: center; margin: 6px 0; }
.interplab-features .il-hint { color: #666; font-size: 12px; }
.interplab-features .il-ftop .il-tok { flex-basis: 44px; }
.interplab-features .il-frow { flex-wrap: wrap; height: auto; min-height: 20px; row-gap: 0; }
.interplab-features .il-fcontrols { flex-wrap: wrap; }
.interplab-features .il-fcontrols label { display: flex; align-items: center; gap: 4px; min-width: 0; }
.interplab-features .il-fcontrols label:first-child { flex: 1 1 180px; }
.interplab-features .il-falpha { flex: 1 1 auto; width: auto; min-width: 60px; max-width: 260px; }
`;

export function render({ model, el }) {
  const state = shell(model, el, "features");
  state.root.prepend(h("style", { text: CSS }));
  const local = { pos: null, feature: null, alpha: null }; // a click's choice, until the kernel's traits arrive
  const sel = (name) => (local[name] ?? Number(state.get(name, -1)));

  function request(type, fields) {
    try {
      state.request(type, fields);
    } catch (_) {
      /* shown by the shell */
    }
  }

  // The controls are made once and kept: a repaint (the kernel's bars arriving) never interrupts a drag.
  const slider = h("input", { type: "range", class: "il-falpha", step: "0.1" });
  const alphaText = h("span", { class: "il-falpha-val" });
  const ablate = h("input", { type: "checkbox", class: "il-fablate" });
  let queued = false;
  slider.addEventListener("input", () => {
    local.alpha = Number(slider.value);
    alphaText.textContent = `alpha ${fmt(local.alpha, 2)}`;
    if (queued) return; // one request per frame while dragging: the latest value wins
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      request("steer", { alpha: local.alpha });
    });
  });
  ablate.addEventListener("change", () => request("ablate", { on: ablate.checked }));
  const titleBox = h("div", { class: "il-bars-title" });
  const tokBox = h("div", { class: "il-fprompt" }); // the prompt's tokens (the contexts' rows are .il-fcontexts)
  const topBox = h("div", { class: "il-fcol il-ftop" });
  const panelBox = h("div");
  const controls = h("div", { class: "il-fcontrols" }, h("label", {}, "steer ", slider, " ", alphaText),
    h("label", {}, ablate, " ablate"));
  const metricBox = h("div", { class: "il-metric il-fmetric" });
  const barsBox = h("div");
  const pageBox = h("div"); // the feature's examples, below its bars
  state.plot.replaceChildren(titleBox, tokBox, h("div", { class: "il-fcols" }, topBox,
    h("div", { class: "il-fcol il-fpanel" }, panelBox, controls, metricBox, barsBox, pageBox)));

  function pickToken(pos) {
    local.pos = pos;
    draw();
    request("token", { pos });
  }

  function pickFeature(index) {
    local.feature = index;
    draw();
    request("feature", { index });
  }

  function draw() {
    const tokens = (state.get("tokens", []) || []).map(String);
    const top = Array.isArray(state.get("top", [])) ? state.get("top", []) : [];
    const panels = state.get("panels", {}) || {};
    const pos = sel("pos");
    const feature = sel("feature");
    const panel = panels[String(feature)];
    const acts = Array.isArray(panel?.acts) ? panel.acts : [];
    const peak = Math.max(1e-9, ...acts.filter(Number.isFinite),
      ...(panel?.contexts ?? []).flatMap((c) => (c.acts ?? []).filter(Number.isFinite)),
      ...(Number.isFinite(panel?.stats?.max) ? [panel.stats.max] : [])); // shaded against its corpus maximum

    titleBox.textContent = String(state.get("title", ""));
    tokBox.replaceChildren(tokenRow(tokens, acts, peak, { selected: pos, onClick: pickToken }));
    const here = Array.isArray(top[pos]) ? top[pos] : [];
    const best = Math.max(1e-9, ...here.map((r) => Number(r[1]) || 0));
    topBox.replaceChildren(
      h("div", { class: "il-bars-title", text: pos >= 0 && pos < tokens.length
        ? `top features at ${JSON.stringify(tokens[pos])} (position ${pos})` : "click a token" }),
      ...(here.length ? here.map(([f, a]) => {
        const row = h("div", { class: `il-bar-row il-frow${f === feature ? " il-on" : ""}`, "data-feature": String(f),
          "data-act": String(a), title: `F${f}: ${fmt(a, 4)} (click: its panel)` },
        h("span", { class: "il-tok", text: `F${f}` }),
        h("span", { class: "il-track" }, h("span", { class: "il-fill", style: { width: `${(100 * a) / best}%`,
          background: ACT } })),
        h("span", { class: "il-val", text: fmt(a) }), ...densityOf(f));
        row.addEventListener("click", () => pickFeature(f));
        return row;
      }) : [h("div", { class: "il-hint", text: "no feature is active here" })]));

    const [head, page] = featurePanel(feature, panel, peak);
    panelBox.replaceChildren(head);
    pageBox.replaceChildren(page);
    controls.style.display = panel ? "" : "none";
    const alpha = local.alpha ?? Number(state.get("alpha", 0));
    slider.min = String(state.get("alpha_min", -8));
    slider.max = String(state.get("alpha_max", 8));
    // (:focus, not document.activeElement: inside a shadow root, as in marimo, that is the host, and an older alpha
    //  coming back from the kernel would pull the slider back under the keyboard)
    if (!slider.matches(":focus")) slider.value = String(alpha);
    alphaText.textContent = `alpha ${fmt(alpha, 2)}`;
    ablate.checked = !!state.get("ablate", false);
    metricBox.replaceChildren(...metricLine(state.get("metric", {}) || {}));
    barsBox.replaceChildren(barsElement(state.get("logits", [])));
    recordPaint(state);
  }

  // a feature's share of the corpus's tokens beside it (from the statistics), "dense" above the threshold
  function densityOf(f) {
    const d = (state.get("densities", {}) || {})[String(f)];
    if (typeof d !== "number") return [];
    const cell = h("span", { class: "il-fdensity", "data-value": String(d), title: "its density: the share of the corpus's tokens it fires on",
      style: { fontSize: "11px", color: "#666", marginLeft: "6px", whiteSpace: "nowrap" } }, `${fmt(100 * d, 2)}%`);
    if (d > Number(state.get("dense_threshold", 0.1))) cell.append(denseMark());
    return [cell];
  }

  // [what is shown above the steering controls: the title, the density, the tokens it raises and lowers;
  //  what is shown below the bars: the histogram and examples (its page), or its top contexts in the prompts]
  function featurePanel(feature, panel, peak) {
    if (feature < 0) return [h("div", { class: "il-hint", text: "click a feature" }), h("div")];
    if (!panel) return [h("div", { class: "il-hint", text: `F${feature}: computing its panel...` }), h("div")];
    const effects = (rows, name) => h("div", { class: "il-fcol" }, h("div", { class: "il-series-name", text: name }),
      (rows ?? []).map(([tok, v]) => h("div", { class: "il-feffect", "data-value": String(v) },
        h("span", { class: "il-tok", text: visible(String(tok)) }), h("span", { class: "il-val", text: fmt(v) }))));
    const raisesLowers = h("div", { class: "il-fcols" }, effects(panel.raised, "raises"), effects(panel.lowered, "lowers"));
    const st = panel.stats; // its page over the corpus (FeatureStats), when the view has statistics
    if (st) {
      const [density, ...page] = statsSection(st, st.density > Number(state.get("dense_threshold", 0.1)));
      return [h("div", {}, h("div", { class: "il-bars-title", text: `F${feature}: its page over ${panel.corpus ?? "the corpus"}` }),
        density, raisesLowers), h("div", { class: "il-fstats" }, ...page)];
    }
    return [h("div", {}, h("div", { class: "il-bars-title", text: `F${feature}: where it fires most${
      panel.corpus ? ` in ${panel.corpus}` : ""}` }), raisesLowers),
    h("div", { class: "il-fcontexts" }, (panel.contexts ?? []).map((c) =>
      tokenRow((c.tokens ?? []).map(String), c.acts ?? [], peak, { mark: c.pos })))];
  }

  const redraw = scheduler(state, draw, { soon: true });
  state.watch(["pos"], () => { local.pos = null; redraw(); });
  state.watch(["feature"], () => { local.feature = null; redraw(); });
  state.watch(["alpha"], () => { local.alpha = null; redraw(); });
  state.watch(["tokens", "top", "panels", "densities", "dense_threshold", "ablate", "logits", "metric", "title", "alpha_min", "alpha_max"], redraw);
  draw();
  return () => state.cleanup();
}
