// The requests each view may send, declared once in interplab/widgets/protocol.json (Python validates them against
// the same file; esbuild bundles the JSON). checkRequest() is the frontend's half: a request the declaration does not
// know, or a field it does not declare, is a programming error caught before anything is sent. Ranges that follow
// the kernel's state (row < rows, ...) are Python's to check.
import PROTOCOL from "../../interplab/widgets/protocol.json";

export { PROTOCOL };

const has = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);
const TYPES = {
  int: (v) => Number.isInteger(v),
  number: (v) => typeof v === "number" && Number.isFinite(v),
  bool: (v) => typeof v === "boolean",
  string: (v) => typeof v === "string",
};

/** "" when `fields` make a request `type` of the `kind` view as protocol.json declares it, else what is wrong. */
export function checkRequest(kind, type, fields) {
  const requests = PROTOCOL.views[kind]?.requests ?? {};
  const declared = has(requests, type) ? requests[type] : null;
  if (!declared) {
    const known = Object.keys(requests).join(", ") || "none";
    return `the ${kind} view has no request ${JSON.stringify(type)} (declared: ${known})`;
  }
  const extra = Object.keys(fields).filter((k) => !has(declared, k));
  if (extra.length) return `${type} request: undeclared field(s) ${extra.join(", ")}`;
  for (const [key, spec] of Object.entries(declared)) {
    const value = fields[key];
    if (value === undefined) {
      if (typeof spec === "string" && spec.endsWith("?")) continue;
      return `${type} request: missing the field ${key}`;
    }
    const ok = Array.isArray(spec) ? spec.includes(value) : TYPES[spec.replace(/\?$/, "")](value);
    if (!ok) {
      const want = Array.isArray(spec) ? `one of ${spec.join(", ")}` : spec.replace(/\?$/, "");
      return `${type} request: ${key} must be ${want}, got ${JSON.stringify(value)}`;
    }
  }
  return "";
}
