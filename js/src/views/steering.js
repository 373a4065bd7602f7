// SteeringPanel: a strength slider that previews next-token probabilities WHILE dragging, Generate, Compute vector.
// Requests to Python (declared in interplab/widgets/protocol.json):
//   preview {alpha, layer, site, positions}                  on slider input (throttled 40 ms) and change,
//                                                            and when layer / site / positions change
//   generate {alpha, layer, site, positions, max_new_tokens}
//   set_vector {positive, negative}
//   update {prompt?, positive?, negative?, max_new_tokens?}  when a text box or the token count changes
// The view never writes a trait: Python takes each request's fields into its traits, so it reads what the user sees.
import { paintBars } from "../bars.js";
import { h, scheduler, shell } from "../plot.js";

export const PREVIEW_MS = 40;
const POSITIONS = [
  ["all", "all positions"],
  ["last", "last position"],
  ["prompt", "prompt positions"],
];

function round6(x) {
  return Math.round(x * 1e6) / 1e6;
}

export function render({ model, el }) {
  const state = shell(model, el, "steering");

  // ---- controls
  const site = h("select", { class: "il-site", title: "site to steer" });
  const layer = h("select", { class: "il-layer", title: "layer" });
  const positions = h(
    "select",
    { class: "il-positions", title: "positions the vector is added at" },
    POSITIONS.map(([v, label]) => h("option", { value: v, text: label })),
  );
  const slider = h("input", { type: "range", class: "il-alpha" });
  const alphaOut = h("span", { class: "il-alpha-value" });
  const prompt = h("textarea", { class: "il-prompt", rows: 2, placeholder: "prompt to steer" });
  const positive = h("textarea", { class: "il-positive", rows: 3, placeholder: "positive prompts, one per line" });
  const negative = h("textarea", { class: "il-negative", rows: 3, placeholder: "negative prompts, one per line" });
  const computeBtn = h("button", { type: "button", class: "il-set-vector", text: "Compute vector" });
  const maxTokens = h("input", { type: "number", class: "il-max-new-tokens", min: 1, max: 512, step: 1, style: { width: "5em" } });
  const generateBtn = h("button", { type: "button", class: "il-generate", text: "Generate" });
  const generated = h("div", { class: "il-generated" });

  const controls = h(
    "div",
    { class: "il-controls" },
    h("div", { class: "il-cols" },
      h("div", {}, h("div", { text: "positive (+)" }), positive),
      h("div", {}, h("div", { text: "negative (−)" }), negative)),
    h("div", { class: "il-row" }, computeBtn),
    h("div", { class: "il-row" },
      h("label", {}, "site", site),
      h("label", {}, "layer", layer),
      h("label", {}, "at", positions)),
    h("div", { class: "il-row" }, h("label", {}, "strength α", slider), alphaOut),
    h("div", {}, h("div", { text: "prompt" }), prompt),
  );
  state.root.insertBefore(controls, state.plot);
  state.root.append(
    h("div", { class: "il-row" }, h("label", {}, "max new tokens", maxTokens), generateBtn),
    generated,
  );

  // ---- reading the controls
  const current = () => ({
    alpha: round6(Number(slider.value)),
    layer: Number.parseInt(layer.value, 10) || 0,
    site: String(site.value),
    positions: String(positions.value),
  });

  // ---- preview: throttled while dragging, latest value wins, identical consecutive previews skipped
  let pendingTimer = null;
  let lastSent = "";
  const sendPreview = () => {
    pendingTimer = null;
    const key = JSON.stringify(current());
    if (key === lastSent) return;
    lastSent = key;
    state.request("preview", current());
  };
  const previewSoon = () => {
    if (pendingTimer === null) pendingTimer = state.timeout(sendPreview, PREVIEW_MS);
  };
  const previewNow = () => {
    if (pendingTimer !== null) state.clearTimeout(pendingTimer);
    sendPreview();
  };

  let dragging = false;
  const showAlpha = () => {
    alphaOut.textContent = `${round6(Number(slider.value))}`;
  };
  slider.addEventListener("pointerdown", () => (dragging = true));
  slider.addEventListener("input", () => {
    showAlpha();
    previewSoon();
  });
  slider.addEventListener("change", () => {
    dragging = false;
    showAlpha();
    previewNow();
  });
  for (const sel of [site, layer, positions]) sel.addEventListener("change", previewNow);
  // a text box or the token count changed (`change` fires on blur, so before a click on Generate): Python takes
  // the new value into its trait
  prompt.addEventListener("change", () => state.request("update", { prompt: prompt.value }));
  positive.addEventListener("change", () => state.request("update", { positive: positive.value }));
  negative.addEventListener("change", () => state.request("update", { negative: negative.value }));
  maxTokens.addEventListener("change", () => {
    const v = Number.parseInt(maxTokens.value, 10);
    if (Number.isInteger(v) && v > 0) state.request("update", { max_new_tokens: v });
  });
  const maxNew = () => {
    const v = Number.parseInt(maxTokens.value, 10);
    return Number.isInteger(v) && v > 0 ? v : Number(model.get("max_new_tokens")) || 20;
  };
  generateBtn.addEventListener("click", () => state.request("generate", { ...current(), max_new_tokens: maxNew() }));
  computeBtn.addEventListener("click", () =>
    state.request("set_vector", { positive: positive.value, negative: negative.value }),
  );

  // ---- writing the controls from traits
  function syncControls() {
    const n = Math.max(0, Number(model.get("n_layers")) || 0);
    if (layer.options.length !== n) {
      layer.replaceChildren(...Array.from({ length: n }, (_, i) => h("option", { value: String(i), text: String(i) })));
    }
    layer.value = String(model.get("layer") ?? 0);
    const sites = Array.isArray(model.get("sites")) ? model.get("sites").map(String) : [];
    const cur = String(model.get("site") ?? "");
    const names = sites.includes(cur) || !cur ? sites : [...sites, cur];
    if ([...site.options].map((o) => o.value).join("\n") !== names.join("\n")) {
      site.replaceChildren(...names.map((s) => h("option", { value: s, text: s })));
    }
    site.value = cur;
    positions.value = String(model.get("positions") ?? "all");
    const lo = Number(model.get("alpha_min"));
    const hi = Number(model.get("alpha_max"));
    const min = Number.isFinite(lo) ? lo : -10;
    const max = Number.isFinite(hi) && hi > min ? hi : min + 20;
    slider.min = String(min);
    slider.max = String(max);
    slider.step = String(round6((max - min) / 200));
    // the focused element of the view's own root (inside a shadow root, document.activeElement is the host)
    const focused = state.root.getRootNode()?.activeElement ?? document.activeElement;
    // (neither a drag nor the keyboard is pulled back by an older alpha coming back from the kernel)
    if (!dragging && focused !== slider) slider.value = String(Number(model.get("alpha")) || 0);
    showAlpha();
    for (const [ta, name] of [[prompt, "prompt"], [positive, "positive"], [negative, "negative"]]) {
      const v = String(model.get(name) ?? "");
      if (focused !== ta && ta.value !== v) ta.value = v;
    }
    if (focused !== maxTokens) maxTokens.value = String(model.get("max_new_tokens") ?? 20);
    const busy = !!model.get("busy");
    generateBtn.disabled = busy;
    computeBtn.disabled = busy;
    generateBtn.textContent = busy ? "Working…" : "Generate";
  }
  function showGenerated() {
    generated.textContent = String(model.get("generated") ?? "");
    generated.style.display = generated.textContent ? "" : "none";
  }
  function draw() {
    return paintBars(state, model.get("dist"), String(state.get("title", "") || "next-token probabilities"));
  }

  state.watch(
    ["n_layers", "sites", "site", "layer", "alpha", "alpha_min", "alpha_max", "positions", "prompt", "positive",
      "negative", "max_new_tokens", "busy"],
    syncControls,
  );
  state.watch(["generated"], showGenerated);
  state.watch(["dist", "title"], scheduler(state, draw, { soon: true })); // DOM bars: cheap while dragging
  syncControls();
  showGenerated();
  draw();
  return () => state.cleanup();
}
