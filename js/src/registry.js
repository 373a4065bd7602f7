// Every view, by kind: the modules in src/views, one per view, each exporting render({model, el}). The list is made
// at build time from the folder (build.mjs's "interplab:views" module), so adding a view is adding its file; the
// Python side declares the same kinds (tests/widgets/test_protocol.py checks that both name the same views).
import * as views from "interplab:views";

export const VIEWS = { ...views };
