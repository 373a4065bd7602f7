// One bundle for every interplab widget: render() dispatches on the model's `_view_kind` trait to src/views/<kind>.js
// (a "composite" draws several views on one model: views/composite.js).
import { h } from "./plot.js";
import { VIEWS } from "./registry.js";

export { VIEWS };
export { PROTOCOL } from "./protocol.js"; // exported so a test can compare the bundled copy with protocol.json
export { Plotly } from "./plot.js"; // a saved page draws a notebook's plotly figures with it (interplab_export)

function render({ model, el }) {
  const kind = String(model.get("_view_kind") ?? "");
  const view = VIEWS[kind];
  if (!view) {
    const box = h("div", {
      class: "interplab il-error on",
      style: { color: "#8b0000", background: "#fdecea", border: "1px solid #d9534f", padding: "6px" },
      text: `interplab: unknown widget kind ${JSON.stringify(kind)} (known: ${Object.keys(VIEWS).join(", ")})`,
    });
    el.appendChild(box);
    return () => box.remove();
  }
  return view.render({ model, el });
}

export default { render };
