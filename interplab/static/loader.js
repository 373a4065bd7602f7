// interplab's widget loader: every view's _esm in Jupyter (interplab/widgets/base.py), about 2 kB instead of the
// 1.5 MB bundle. The bundle (static/widgets.js) is synced once per kernel, in one shared model (BundleHolder) that
// each view references through its `_bundle` trait ("IPY_MODEL_<id>"); the page imports it once, cached on
// globalThis under the bundle's hash (filled in by Python), so two versions of the code never mix on one page.
// The bundle's default export dispatches on the model's `_view_kind`.
const HASH = "__INTERPLAB_BUNDLE_HASH__";
const CACHE = "__interplab_bundles";
const PREFIX = "IPY_MODEL_";

async function holderOf(model) {
  const ref = model.get("_bundle");
  if (ref && typeof ref === "object" && typeof ref.get === "function") return ref; // already unpacked
  if (typeof ref !== "string" || !ref.startsWith(PREFIX)) {
    throw new Error(`the view names no shared widget code (_bundle = ${JSON.stringify(ref ?? null)})`);
  }
  const manager = model.widget_manager;
  if (typeof manager?.get_model !== "function") {
    throw new Error("this frontend gives widgets no widget manager, so the shared widget code cannot be found");
  }
  const holder = await manager.get_model(ref.slice(PREFIX.length));
  if (!holder || typeof holder.get !== "function") throw new Error(`no widget model ${ref} on this page`);
  return holder;
}

async function importBundle(model) {
  const holder = await holderOf(model);
  const code = holder.get("code");
  if (typeof code !== "string" || !code) throw new Error("the shared widget model holds no code");
  if (holder.get("hash") !== HASH) {
    throw new Error(`the shared widget code is version ${holder.get("hash")}, this view needs ${HASH}`);
  }
  const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
  try {
    return await import(/* webpackIgnore: true */ /* @vite-ignore */ url);
  } finally {
    URL.revokeObjectURL(url);
  }
}

export function load(model) {
  const cache = (globalThis[CACHE] ??= {});
  if (!cache[HASH]) {
    cache[HASH] = importBundle(model).catch((err) => {
      delete cache[HASH]; // the next view tries again
      throw err;
    });
  }
  return cache[HASH];
}

async function render({ model, el, ...rest }) {
  let bundle;
  try {
    bundle = await load(model);
  } catch (err) {
    console.error("interplab: loading the widget code failed", err);
    const box = document.createElement("div");
    box.className = "interplab il-error on";
    box.setAttribute("role", "alert");
    Object.assign(box.style, { color: "#8b0000", background: "#fdecea", border: "1px solid #d9534f", padding: "6px" });
    box.textContent =
      `interplab: the widget code could not be loaded: ${err?.message ?? err}. ` +
      "In a frontend without ipywidgets' widget manager, set the environment variable INTERPLAB_WIDGET_CODE=inline " +
      "in the kernel before making the widgets (each widget then carries the whole code).";
    el.appendChild(box);
    return () => box.remove();
  }
  return bundle.default.render({ model, el, ...rest });
}

// anywidget calls initialize() when the model is created, before any view: the code is fetched then (as a full
// _esm would be), so a view renders as soon as its output appears. A failure here is shown by render().
async function initialize({ model }) {
  try {
    await load(model);
  } catch (_) {
    /* render() tries again and says why it failed */
  }
}

export default { initialize, render };
