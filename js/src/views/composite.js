// Composite: one model showing several views ("parts": a heatmap and its logit panel, the dashboard's tabs), so that
// every frontend hosts the whole thing as one anywidget (marimo hosts nothing else). Each part is drawn by its own
// view module on an adapter of the one model: its traits are the model's "<part>.<trait>", its requests go out with a
// `part` field, and of the kernel's custom messages (replies, "cells") it hears those carrying its name.
// Layout (traits `parts` [{name, kind}] and `panes` [{part} | {row: [part, ...]} | {tabs: [{title, part}]}]): panes top
// to bottom, a row's parts side by side; a tab's
// view is drawn when the tab is first opened, and kept (hidden) when another one is.
import { h, shell } from "../plot.js";
import { VIEWS } from "../registry.js";

/** The views a part can be: every view in src/views but this one (read at render time: the registry imports us). */
export const partView = (kind) => (kind === "composite" ? undefined : VIEWS[kind]);

/** The model a part's view sees: get/on/off on "<name>.<trait>", send tagged with `part`, custom messages filtered
 * to those tagged with its name (the tag removed: the view reads its own view's messages). */
export function partModel(model, name) {
  const prefix = `${name}.`;
  const event = (ev) => (String(ev).startsWith("change:") ? `change:${prefix}${String(ev).slice(7)}` : ev);
  const wrappers = new Map(); // the view's msg:custom listener -> the one registered on the model
  return {
    part: name,
    get: (key) => model.get(prefix + key),
    send(msg, callbacks, buffers) {
      return model.send({ ...msg, part: name }, callbacks, buffers);
    },
    on(ev, fn) {
      if (ev !== "msg:custom") return model.on(event(ev), fn);
      const wrapped = (msg, buffers) => {
        if (!msg || msg.part !== name) return;
        const { part: _, ...own } = msg;
        fn(own, buffers);
      };
      wrappers.set(fn, wrapped);
      return model.on(ev, wrapped);
    },
    off(ev, fn) {
      if (ev !== "msg:custom") return model.off(event(ev), fn);
      const wrapped = wrappers.get(fn);
      wrappers.delete(fn);
      return wrapped ? model.off(ev, wrapped) : undefined;
    },
    get widget_manager() {
      return model.widget_manager;
    },
  };
}

export function render({ model, el }) {
  const state = shell(model, el, "composite");
  const kinds = new Map(
    (Array.isArray(model.get("parts")) ? model.get("parts") : []).map((p) => [String(p?.name), String(p?.kind)]),
  );
  const panes = Array.isArray(model.get("panes")) ? model.get("panes") : [];
  const box = h("div", { class: "il-panes" });
  state.root.append(box);
  const cleanups = [];

  function mount(name, into) {
    const view = partView(kinds.get(name));
    if (!view) {
      state.displayError(`interplab: part ${JSON.stringify(name)} has no view (kind ${JSON.stringify(kinds.get(name))})`);
      return;
    }
    const done = view.render({ model: partModel(model, name), el: into });
    if (typeof done === "function") cleanups.push(done);
  }

  for (const pane of panes) {
    if (pane && typeof pane.part === "string") {
      const div = h("div", { class: "il-pane", "data-part": pane.part });
      box.append(div);
      mount(pane.part, div);
    } else if (pane && Array.isArray(pane.row)) { // parts side by side (wrapping on a narrow page)
      const row = h("div", { class: "il-pane-row" });
      box.append(row);
      for (const name of pane.row) {
        const div = h("div", { class: "il-pane", "data-part": String(name) });
        row.append(div);
        mount(String(name), div);
      }
    } else if (pane && Array.isArray(pane.tabs) && pane.tabs.length) {
      box.append(tabs(pane.tabs));
    }
  }

  function tabs(list) {
    const bar = h("div", { class: "il-tabs", role: "tablist" });
    const bodies = h("div", { class: "il-tab-bodies" });
    const entries = list.map((tab, i) => {
      const name = String(tab?.part ?? "");
      const button = h("button", {
        type: "button", class: "il-tab", role: "tab", text: String(tab?.title ?? name), "data-part": name,
      });
      const body = h("div", { class: "il-tab-body il-pane", role: "tabpanel", "data-part": name });
      button.addEventListener("click", () => open(i));
      button.addEventListener("keydown", (ev) => {
        const step = ev.key === "ArrowRight" ? 1 : ev.key === "ArrowLeft" ? -1 : 0;
        if (!step) return;
        ev.preventDefault();
        const j = (i + step + list.length) % list.length;
        open(j);
        entries[j].button.focus();
      });
      bar.append(button);
      bodies.append(body);
      return { name, button, body, mounted: false };
    });
    function open(i) {
      entries.forEach((e, j) => {
        const on = i === j;
        e.button.classList.toggle("on", on);
        e.button.setAttribute("aria-selected", String(on));
        e.button.tabIndex = on ? 0 : -1;
        e.body.style.display = on ? "" : "none";
      });
      const e = entries[i];
      if (!e.mounted) {
        e.mounted = true;
        mount(e.name, e.body);
      }
    }
    open(0);
    return h("div", { class: "il-tabset" }, bar, bodies);
  }

  return () => {
    for (const done of cleanups.splice(0)) {
      try {
        done();
      } catch (_) {
        /* best effort */
      }
    }
    state.cleanup();
  };
}
