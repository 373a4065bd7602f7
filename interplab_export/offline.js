// interplab's offline widget runtime, inlined by `jupyter nbconvert --to interplab_html` in place of the CDN's
// require.js and @jupyter-widgets/html-manager: it draws every widget output of the page from the widget state the
// notebook saved (the <script type="application/vnd.jupyter.widget-state+json"> block), with no network.
//
// - anywidget models (interplab's views, and any other anywidget): their saved `_esm` is imported from a Blob URL
//   (once per distinct code) and its render({model, el}) called with a read-only model: get / on / off / send /
//   save_changes and a widget_manager whose get_model() returns other saved models (interplab's loader finds the
//   shared bundle that way, static/loader.js).
// - ipywidgets boxes and tabs (VBox, HBox, Box, GridBox, Tab, Accordion): their children in order; Output: what it
//   captured; HTML, Label, progress bars, other controls (their description and saved value): drawn plainly;
//   anything else: its text fallback.
// - send(): there is no kernel. A click on an exact sweep's heatmap cell is answered by the page itself (the view
//   paints the linked logit panel from the stored cell_tops); any other request shows a note under the widget,
//   and the same words at the window's bottom edge for a few seconds, each time (toast).
const STATE_MIME = "application/vnd.jupyter.widget-state+json";
const VIEW_MIME = "application/vnd.jupyter.widget-view+json";
const PREFIX = "IPY_MODEL_";

const saved = (() => {
  const el = document.querySelector(`script[type="${STATE_MIME}"]`);
  if (!el) return {};
  try {
    return JSON.parse(el.textContent).state ?? {};
  } catch (err) {
    console.error("interplab offline: the saved widget state is not JSON", err);
    return {};
  }
})();

const log = (window.__interplab_offline = { rendered: [], notes: [], errors: [], requests: [] });

// ------------------------------------------------------------------------------------------ read-only models
const models = new Map();

function fromBase64(text) {
  const bin = atob(text);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new DataView(bytes.buffer);
}

function stateOf(entry) {
  const state = JSON.parse(JSON.stringify(entry.state ?? {}));
  for (const b of entry.buffers ?? []) {
    // binary traits: put each buffer back at its path (anywidget gives views a DataView)
    if (!Array.isArray(b?.path) || !b.path.length || b.encoding !== "base64") continue;
    let obj = state;
    for (const k of b.path.slice(0, -1)) obj = obj?.[k];
    if (obj && typeof obj === "object") obj[b.path[b.path.length - 1]] = fromBase64(String(b.data ?? ""));
  }
  return state;
}

function modelOf(id) {
  if (models.has(id)) return models.get(id);
  const entry = saved[id];
  if (!entry) return null;
  const state = stateOf(entry);
  const handlers = new Map();
  const model = {
    model_id: id,
    name: String(entry.model_name ?? ""),
    module: String(entry.model_module ?? ""),
    views: [], // the output elements showing this model
    get: (key) => state[key],
    set(key, value) {
      state[key] = value;
      fire(`change:${key}`, value);
      fire("change");
    },
    on(event, fn) {
      for (const ev of String(event).split(/\s+/)) {
        if (!handlers.has(ev)) handlers.set(ev, new Set());
        handlers.get(ev).add(fn);
      }
    },
    off(event, fn) {
      if (!event) return handlers.clear();
      for (const ev of String(event).split(/\s+/)) {
        if (fn) handlers.get(ev)?.delete(fn);
        else handlers.delete(ev);
      }
    },
    send(msg) {
      unanswered(model, msg);
    },
    save_changes() {},
    widget_manager: {
      async get_model(ref) {
        const m = modelOf(String(ref).startsWith(PREFIX) ? String(ref).slice(PREFIX.length) : String(ref));
        if (!m) throw new Error(`the saved page holds no widget model ${ref}`);
        return m;
      },
    },
  };
  function fire(event, ...args) {
    for (const fn of [...(handlers.get(event) ?? [])]) fn(...args);
  }
  models.set(id, model);
  return model;
}

// ------------------------------------------------------------------------------------------ no kernel
/** True when the page itself answered the request: a plain click on a cell of an exact sweep, whose patched run
 * the heatmap stored (cell_tops) and has painted on its linked logit panel (js/src/heatmap.js, paintLogits). */
function answeredHere(model, msg) {
  if (msg?.type !== "click" || msg.shift) return false;
  const pre = typeof msg.part === "string" ? `${msg.part}.` : "";
  const tops = model.get(`${pre}cell_tops`);
  if (!model.get(`${pre}link`) || !Array.isArray(tops?.cells)) return false;
  const id = `r${msg.row}c${msg.col}`;
  const edits = model.get(`${pre}active_edits`);
  const old = (Array.isArray(edits) ? edits : []).find((e) => e?.id === id);
  if (old && old.enabled === false) return false;
  return tops.cells.some((c) => Array.isArray(c) && c[0] === msg.row && c[1] === msg.col);
}

function unanswered(model, msg) {
  const here = answeredHere(model, msg);
  log.requests.push({ model: model.model_id, type: msg?.type, part: msg?.part, here });
  if (here) return; // no reply comes: the view keeps what it painted and the cell it outlined
  const what = msg?.type ? `“${msg.type}”` : "this request";
  const text =
    `This is a saved page: the kernel that would answer ${what} is gone. Run the notebook to use this control ` +
    "(on an exact sweep, clicking a heatmap cell still shows that cell's stored top tokens).";
  for (const el of model.views.length ? model.views : []) {
    let note = el.querySelector(":scope > .interplab-offline-note");
    if (!note) {
      note = document.createElement("div");
      note.className = "interplab-offline-note";
      note.setAttribute("role", "status");
      el.append(note);
    }
    note.textContent = text;
  }
  toast(text);
  log.notes.push({ model: model.model_id, type: msg?.type, text });
}

/** The note's words at the window's bottom edge for a few seconds, at every request (the note under a tall widget
 * may be out of sight; the control the person used is not). */
let toastTimer = 0;
function toast(text) {
  let box = document.querySelector(".interplab-offline-toast");
  if (!box) {
    box = document.createElement("div");
    box.className = "interplab-offline-toast";
    box.setAttribute("role", "status");
    document.body.append(box);
  }
  box.textContent = text;
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (box.hidden = true), 8000);
}

// ------------------------------------------------------------------------------------------ rendering
const esmCache = new Map();

function importCode(code) {
  if (!esmCache.has(code)) {
    const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
    const p = import(url).finally(() => URL.revokeObjectURL(url));
    esmCache.set(code, p);
  }
  return esmCache.get(code);
}

function addCss(model) {
  const css = model.get("_css");
  const key = String(model.get("_anywidget_id") ?? model.model_id);
  if (typeof css !== "string" || !css || document.querySelector(`style[data-anywidget-id="${CSS.escape(key)}"]`)) return;
  const style = document.createElement("style");
  style.dataset.anywidgetId = key;
  style.textContent = css;
  document.head.append(style);
}

function div(cls, text) {
  const d = document.createElement("div");
  if (cls) d.className = cls;
  if (text !== undefined) d.textContent = text;
  return d;
}

function childIds(model) {
  const kids = model.get("children");
  return (Array.isArray(kids) ? kids : []).map((r) => String(r).replace(PREFIX, ""));
}

async function renderAny(model, el) {
  const code = model.get("_esm");
  if (typeof code !== "string" || !code) throw new Error("the saved anywidget model holds no code (_esm)");
  addCss(model);
  const mod = await importCode(code);
  const def = mod.default ?? mod;
  if (typeof def.initialize === "function") await def.initialize({ model });
  if (typeof def.render !== "function") throw new Error("the widget code exports no render()");
  await def.render({ model, el });
}

async function renderBox(model, el) {
  const box = div("interplab-offline-box");
  box.style.display = "flex";
  box.style.flexDirection = model.name === "HBoxModel" ? "row" : "column";
  box.style.gap = "4px";
  el.append(box);
  for (const id of childIds(model)) {
    const child = div("interplab-offline-child");
    box.append(child);
    await renderModel(id, child);
  }
}

async function renderTabs(model, el) {
  const titles = model.get("titles") ?? model.get("_titles") ?? [];
  const ids = childIds(model);
  const bar = div("interplab-offline-tabs");
  const bodies = div("interplab-offline-tab-bodies");
  el.append(bar, bodies);
  const shown = Number.isInteger(model.get("selected_index")) ? model.get("selected_index") : 0;
  const entries = ids.map((id, i) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "interplab-offline-tab";
    button.textContent = String((Array.isArray(titles) ? titles[i] : titles?.[i]) ?? `Tab ${i + 1}`);
    const body = div("interplab-offline-tab-body");
    bar.append(button);
    bodies.append(body);
    return { id, button, body, drawn: null };
  });
  const open = (i) => {
    entries.forEach((e, j) => {
      e.button.classList.toggle("on", i === j);
      e.body.style.display = i === j ? "" : "none";
    });
    const e = entries[i];
    if (e && !e.drawn) e.drawn = renderModel(e.id, e.body); // drawn when first opened (plotly needs a width)
    return e?.drawn;
  };
  entries.forEach((e, i) => e.button.addEventListener("click", () => open(i)));
  await open(Math.min(Math.max(shown, 0), entries.length - 1));
}

function renderSimple(model, el) {
  const value = model.get("value");
  const description = model.get("description");
  if (model.name === "HTMLModel" || model.name === "HTMLMathModel") {
    const d = div("interplab-offline-html");
    d.innerHTML = String(value ?? ""); // an ipywidgets HTML widget is HTML by definition, as in the live notebook
    el.append(d);
  } else if (model.name === "LabelModel") {
    el.append(div("interplab-offline-label", String(value ?? "")));
  } else if (/ProgressModel$/.test(model.name)) {
    const bar = document.createElement("progress");
    bar.max = Number(model.get("max") ?? 1) - Number(model.get("min") ?? 0);
    bar.value = Number(value ?? 0) - Number(model.get("min") ?? 0);
    el.append(...(description ? [div("interplab-offline-label", String(description))] : []), bar);
  } else if (model.module === "@jupyter-widgets/controls" && (value !== undefined || description)) {
    // any other control (slider, dropdown, text, checkbox, button): its description and value, read-only
    const row = div("interplab-offline-control");
    row.title = "saved value (the kernel is gone)";
    const shown = Array.isArray(value) ? value.join(" – ") : value;
    row.textContent = [description, shown ?? ""].filter((x) => x !== "" && x !== undefined && x !== null).join(": ");
    el.append(row);
  } else {
    return false;
  }
  return true;
}

/** An Output widget: the outputs it captured (text, HTML, images, nested widgets), as the notebook shows them. */
async function renderOutput(model, el) {
  for (const out of Array.isArray(model.get("outputs")) ? model.get("outputs") : []) {
    const box = div("interplab-offline-captured");
    el.append(box);
    const data = out?.data ?? {};
    if (out?.output_type === "stream") {
      const pre = document.createElement("pre");
      pre.textContent = Array.isArray(out.text) ? out.text.join("") : String(out.text ?? "");
      box.append(pre);
    } else if (out?.output_type === "error") {
      const pre = document.createElement("pre");
      pre.textContent = `${out.ename}: ${out.evalue}`;
      box.append(pre);
    } else if (data[VIEW_MIME]?.model_id) {
      await renderModel(String(data[VIEW_MIME].model_id), box);
    } else if (data["text/html"] !== undefined) {
      box.innerHTML = [].concat(data["text/html"]).join("");
    } else if (data["image/png"]) {
      const img = document.createElement("img");
      img.src = `data:image/png;base64,${[].concat(data["image/png"]).join("").trim()}`;
      box.append(img);
    } else if (data["text/plain"] !== undefined) {
      const pre = document.createElement("pre");
      pre.textContent = [].concat(data["text/plain"]).join("");
      box.append(pre);
    }
  }
}

async function renderModel(id, el) {
  const model = modelOf(id);
  if (!model) {
    el.append(div("interplab-offline-missing", `(widget ${id}: not in the saved widget state)`));
    return false;
  }
  model.views.push(el);
  try {
    if (model.module === "anywidget" || typeof model.get("_esm") === "string") {
      await renderAny(model, el);
    } else if (/^(VBox|HBox|Box|GridBox)Model$/.test(model.name)) {
      await renderBox(model, el);
    } else if (/^(Tab|Accordion|Stack)Model$/.test(model.name)) {
      await renderTabs(model, el);
    } else if (model.name === "OutputModel") {
      await renderOutput(model, el);
    } else if (!renderSimple(model, el)) {
      el.append(div("interplab-offline-unsupported", `(${model.name || "widget"}: not drawn in this saved page)`));
      return false;
    }
    log.rendered.push({ id, name: model.name, kind: model.get("_view_kind") ?? null });
    return true;
  } catch (err) {
    console.error(`interplab offline: drawing widget ${id} failed`, err);
    log.errors.push({ id, error: String(err?.message ?? err) });
    el.append(div("interplab-offline-error", `(widget ${model.name}: could not be drawn: ${err?.message ?? err})`));
  }
  return false;
}

// A notebook's plotly figures (application/vnd.plotly.v1+json outputs, given a div by the exporter): drawn with the
// plotly of interplab's widget code saved in the page (window.Plotly first, where the exporter inlined one).
async function plotlyOf() {
  if (window.Plotly?.newPlot) return window.Plotly;
  const holder = Object.values(saved).find((e) => typeof e?.state?.code === "string" && e.state.code && e.state.hash);
  if (!holder) return null;
  return (await importCode(holder.state.code)).Plotly ?? null;
}

async function drawFigures() {
  const figures = [...document.querySelectorAll(".interplab-offline-plotly")];
  if (!figures.length) return;
  let Plotly = null;
  try {
    Plotly = await plotlyOf();
  } catch (err) {
    log.errors.push({ id: "plotly", error: String(err?.message ?? err) });
  }
  for (const box of figures) {
    const script = box.querySelector('script[type="application/json"]');
    if (!Plotly || !script) {
      box.append(div("interplab-offline-missing", "(a plotly figure: no plotly.js in this page to draw it)"));
      continue;
    }
    try {
      const fig = JSON.parse(script.textContent);
      const plot = div("interplab-offline-figure");
      box.append(plot);
      await Plotly.newPlot(plot, fig.data ?? [], fig.layout ?? {}, { displaylogo: false, responsive: true });
      log.rendered.push({ id: null, name: "plotly figure", kind: "plotly" });
    } catch (err) {
      log.errors.push({ id: "plotly", error: String(err?.message ?? err) });
      box.append(div("interplab-offline-error", `(a plotly figure could not be drawn: ${err?.message ?? err})`));
    }
  }
}

async function main() {
  await drawFigures();
  const outputs = [...document.querySelectorAll(`script[type="${VIEW_MIME}"]`)];
  for (const script of outputs) {
    const host = script.parentElement;
    let view;
    try {
      view = JSON.parse(script.textContent);
    } catch (_) {
      continue;
    }
    const el = div("interplab-offline-widget");
    host.append(el);
    if (await renderModel(String(view?.model_id ?? ""), el)) {
      host.querySelector(":scope > .interplab-offline-fallback")?.remove(); // drawn: the text fallback goes
    }
  }
  log.done = true;
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
else main();
