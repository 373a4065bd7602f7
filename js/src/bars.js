// Top-k bars as plain DOM (no plotly): one column per series, a row per token: label | bar | value.
// A repaint rebuilds a few dozen elements, well under a millisecond, where a plotly relayout of several bar
// subplots took ~100 ms; the logit panel repaints on every click and while a steering slider moves.
// Tokens are text (textContent), never HTML.
import { SERIES_COLORS, fmt, h, recordPaint, visible } from "./plot.js";

/** [{name, tokens, probs}] -> a fresh `.il-bars` element. Probabilities on one absolute scale, the track being 1:
 * bars compare across columns (clean vs patched) and across panels (the logit panel, steering, features), so one
 * distribution is the same bars wherever it is shown; the printed value is exact. */
export function barsElement(series) {
  const list = Array.isArray(series) ? series : [];
  const clean = list.map((s) => {
    const tokens = Array.isArray(s?.tokens) ? s.tokens.map(String) : [];
    const probs = (Array.isArray(s?.probs) ? s.probs : []).map((p) => (Number.isFinite(p) ? p : 0));
    return { name: String(s?.name ?? ""), tokens, probs };
  });
  return h(
    "div",
    { class: "il-bars" },
    clean.map((s, i) =>
      h(
        "div",
        { class: "il-series" },
        h("div", { class: "il-series-name", text: s.name }),
        s.tokens.map((tok, j) => {
          const p = s.probs[j] ?? 0;
          return h(
            "div",
            { class: "il-bar-row", title: `${JSON.stringify(tok)}: ${fmt(p, 4)}` },
            h("span", { class: "il-tok", text: visible(tok) }),
            h(
              "span",
              { class: "il-track" },
              h("span", {
                class: "il-fill",
                style: { width: `${100 * Math.min(Math.max(p, 0), 1)}%`, background: SERIES_COLORS[i % SERIES_COLORS.length] },
              }),
            ),
            h("span", { class: "il-val", text: fmt(p) }),
          );
        }),
      ),
    ),
  );
}

/** Replace the bars in `state.plot` (with an optional title) and record the paint. */
export function paintBars(state, series, title = "") {
  if (!state.alive) return state.plot;
  state.plot.replaceChildren(...(title ? [h("div", { class: "il-bars-title", text: title })] : []), barsElement(series));
  return recordPaint(state);
}
