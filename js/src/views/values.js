// ValueBars: signed numbers as labelled bars around a zero line (plain DOM, no plotly): label | bar | value. Blue
// bars right of zero for positive values, red ones left of it for negative; one scale for every bar. No requests.
import { fmt, h, recordPaint, scheduler, shell } from "../plot.js";
import { NEGATIVE, POSITIVE } from "./circuit.js";

export function render({ model, el }) {
  const state = shell(model, el, "values");

  function draw() {
    const labels = Array.isArray(model.get("labels")) ? model.get("labels").map(String) : [];
    const raw = Array.isArray(model.get("values")) ? model.get("values") : [];
    const values = labels.map((_, i) => (typeof raw[i] === "number" && Number.isFinite(raw[i]) ? raw[i] : null));
    const top = Math.max(1e-12, ...values.map((v) => Math.abs(v ?? 0)));
    const title = String(state.get("title", ""));
    const metric = String(state.get("metric_name", ""));
    state.plot.replaceChildren(
      ...(title ? [h("div", { class: "il-bars-title", text: title })] : []),
      h("div", { class: "il-vbars" }, labels.map((label, i) => {
        const v = values[i];
        const w = v === null ? 0 : (50 * Math.abs(v)) / top;
        return h("div", { class: "il-bar-row il-vbar", title: `${label}: ${v === null ? "—" : fmt(v, 6)} ${metric}`,
          "data-label": label, "data-value": v === null ? "" : String(v) },
          h("span", { class: "il-tok", text: label }),
          h("span", { class: "il-track il-vtrack" },
            h("span", { class: "il-zero" }),
            h("span", { class: "il-fill", style: {
              position: "absolute", top: "0", height: "100%", width: `${w}%`,
              left: v !== null && v < 0 ? `${50 - w}%` : "50%", background: v !== null && v < 0 ? NEGATIVE : POSITIVE,
            } })),
          h("span", { class: "il-val", text: fmt(v, 4) }));
      })),
    );
    recordPaint(state);
  }

  state.watch(["labels", "values", "title", "metric_name"], scheduler(state, draw, { soon: true }));
  draw();
  return () => state.cleanup();
}
