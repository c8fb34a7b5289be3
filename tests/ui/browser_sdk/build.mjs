// Bundle entry.mjs with @azure/service-bus for a browser page, as an application would:
// esbuild, platform=browser (the SDK's "browser" builds), Node's os/path from their npm
// polyfills (os-browserify, path-browserify), Buffer and process injected (shims.mjs).
// Usage: node build.mjs <outfile>; the packages come from tests/js/node_modules (npm ci there).
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "..", "..", "js", "node_modules");
const { build } = createRequire(join(modules, "resolve-from-here.js"))("esbuild");
await build({
  entryPoints: [join(here, "entry.mjs")],
  outfile: process.argv[2],
  bundle: true,
  format: "iife",
  platform: "browser",
  target: "chrome120",
  nodePaths: [modules],
  alias: { os: "os-browserify/browser", path: "path-browserify" },
  inject: [join(here, "shims.mjs")],
  define: { global: "globalThis" },
  logLevel: "warning",
});
