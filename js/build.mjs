// Bundles js/src/index.js (+ plotly cartesian) into ONE ESM: interplab/static/widgets.js.
// The bundle starts with a hash of the sources so a Python test can tell when it is stale:
//   sha256 over, for each file in sorted(js/src/** relative posix paths) then "package-lock.json":
//   path + "\0" + bytes + "\0"      (paths relative to js/; src files as "src/<name>")
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, statSync, mkdirSync } from "node:fs";
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
  files.push("package-lock.json");
  const h = createHash("sha256");
  for (const rel of files) {
    h.update(rel + "\0");
    h.update(readFileSync(join(here, rel)));
    h.update("\0");
  }
  return h.digest("hex");
}

const hash = sourceHash();
mkdirSync(dirname(outfile), { recursive: true });
await esbuild.build({
  entryPoints: [join(here, "src", "index.js")],
  bundle: true,
  format: "esm",
  minify: true,
  target: ["es2020"],
  outfile,
  banner: { js: `/* interplab-src-hash: ${hash} */` },
  legalComments: "eof",
  logLevel: "info",
});
console.log(`interplab-src-hash: ${hash}`);
