// Bundles js/src/index.js (+ plotly's core and heatmap, js/src/plotly.js) into ONE ESM: interplab/static/widgets.js.
// The bundle starts with a hash of the sources so a Python test can tell when it is stale:
//   sha256 over, for each file in sorted(js/src/** relative posix paths), "package-lock.json", then
//   "../interplab/widgets/protocol.json" (the request declaration, bundled by js/src/protocol.js):
//   path + "\0" + bytes + "\0"      (paths relative to js/; src files as "src/<name>")
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const outfile = join(here, "..", "interplab", "static", "widgets.js");

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}

export function sourceHash() {
  const files = walk(join(here, "src"))
    .map((p) => relative(here, p).split(sep).join("/"))
    .sort();
  files.push("package-lock.json", "../interplab/widgets/protocol.json");
  const h = createHash("sha256");
  for (const rel of files) {
    h.update(rel + "\0");
    h.update(readFileSync(join(here, rel)));
    h.update("\0");
  }
  return h.digest("hex");
}

// "interplab:views": one export per file of src/views (export * as heatmap from ".../views/heatmap.js"), so the
// registry (src/registry.js) lists every view without a hand-kept list.
const viewsDir = join(here, "src", "views");
const viewsPlugin = {
  name: "interplab-views",
  setup(build) {
    build.onResolve({ filter: /^interplab:views$/ }, () => ({ path: "views", namespace: "interplab" }));
    build.onLoad({ filter: /.*/, namespace: "interplab" }, () => ({
      contents: readdirSync(viewsDir)
        .filter((name) => /^[a-z][a-z0-9_]*\.js$/.test(name))
        .sort()
        .map((name) => `export * as ${name.slice(0, -3)} from ${JSON.stringify(`./${name}`)};`)
        .join("\n"),
      resolveDir: viewsDir,
      watchFiles: [viewsDir],
    }));
  },
};

const hash = sourceHash();
mkdirSync(dirname(outfile), { recursive: true });
// Built as an IIFE, then wrapped in a small ESM: anywidget imports the bundle once per widget *instance* (a new
// blob URL each time), so the IIFE keeps its result on globalThis and only the first widget on a page evaluates
// plotly and the views; later ones reuse them (first render of a dashboard: one evaluation, not five).
const GLOBAL = "__interplab_widgets";
const result = await esbuild.build({
  entryPoints: [join(here, "src", "index.js")],
  bundle: true,
  format: "iife",
  globalName: GLOBAL,
  minify: true,
  target: ["es2020"],
  write: false,
  outfile, // names the outputs; nothing is written by esbuild
  legalComments: "external",
  logLevel: "info",
  plugins: [viewsPlugin],
  define: { global: "globalThis" }, // plotly's sources read node's `global` (its dist builds shim it)
});
const out = (ext) => result.outputFiles.find((f) => f.path.endsWith(ext))?.text ?? "";
const code = out(".js").trimEnd();
const legal = out(".LEGAL.txt").trim();
const head = `var ${GLOBAL}=`;
if (!code.startsWith(head) || !code.endsWith(";")) throw new Error(`unexpected esbuild output: ${code.slice(0, 80)}`);
const key = JSON.stringify(`${GLOBAL}_${hash.slice(0, 16)}`); // a rebuilt bundle on the same page is not stale
writeFileSync(
  outfile,
  `/* interplab-src-hash: ${hash} */\n` +
    `const __il=(globalThis[${key}]??=${code.slice(head.length, -1)});\n` +
    "export const VIEWS=__il.VIEWS;export const PROTOCOL=__il.PROTOCOL;export const Plotly=__il.Plotly;" +
    "export default __il.default;\n" +
    (legal ? `/* Licenses of bundled code:\n${legal.replaceAll("*/", "* /")}\n*/\n` : ""),
);
console.log(`interplab-src-hash: ${hash}`);
