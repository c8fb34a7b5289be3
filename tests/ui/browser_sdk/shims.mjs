// The Node globals the SDK's AMQP stack (rhea) still names, from their npm polyfills: esbuild
// --inject puts these in place of the free identifiers `Buffer` and `process` in the bundle.
import { Buffer } from "buffer";
import process from "process/browser.js";

export { Buffer, process };
