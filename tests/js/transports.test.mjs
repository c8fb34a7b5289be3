// AMQPS and AMQP over WebSockets with the unchanged @azure/service-bus SDK in Node, from a
// connection string without UseDevelopmentEmulator, trusting sbemu's CA the way a Node user
// does: NODE_EXTRA_CA_CERTS (read once at start-up, so each case runs in a child process).
// The SDK keeps the Endpoint's port (sb://localhost:<port>/): TLS on it for AMQPS, and
// wss://localhost:<port>/$servicebus/websocket with webSocketOptions (the `ws` package).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  KEY, KEY_NAME, assertCleanLog, configOf, namespaceDef, queueDef, queuePair, startServer,
} from "./support.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);
let server;

before(async () => {
  const queues = [...queuePair("tq"), queueDef("tsess", { RequiresSession: true })];
  server = await startServer(configOf([namespaceDef(queues)]));
});

after(async () => {
  if (server) assertCleanLog((await server.stop()).stderr);
});

const tlsConnectionString = (port) =>
  `Endpoint=sb://localhost:${port}/;SharedAccessKeyName=${KEY_NAME};SharedAccessKey=${KEY}`;

/** Run transport_client.mjs in a fresh node with `env` added; its one JSON line. */
async function client(mode, port, queue, env) {
  const childEnv = { ...process.env, ...env };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  const { stdout } = await run(
    process.execPath,
    [join(HERE, "transport_client.mjs"), mode, tlsConnectionString(port), queue, "tsess"],
    { env: childEnv, timeout: 90_000 },
  );
  return JSON.parse(stdout.trim().split("\n").pop());
}

const cases = () => [
  { mode: "amqps", port: server.tlsPort, where: "the TLS port" },
  { mode: "wss", port: server.adminPort, where: "the admin port" },
  { mode: "wss", port: server.wsPort, where: "the WebSocket port" },
];

describe("TLS transports (no emulator flag)", () => {
  it("AMQPS and wss with NODE_EXTRA_CA_CERTS: send, receive, complete, a session", async () => {
    for (const { mode, port, where } of cases()) {
      for (const queue of ["tq", "tq-p"]) {
        const out = await client(mode, port, queue, { NODE_EXTRA_CA_CERTS: server.caFile });
        assert.deepEqual(out, {
          received: [`over ${mode}`],
          left: 0,
          session: `s-${mode}`,
          sessionBodies: ["in a session"],
          state: `state over ${mode}`,
        }, `${mode} on ${where} (${queue})`);
      }
    }
  });

  it("a client that does not trust the CA is refused by its own TLS verification", async () => {
    for (const { mode, port, where } of cases()) {
      const out = await client(mode, port, "tq", { NODE_EXTRA_CA_CERTS: undefined });
      assert.ok(out.error, `${mode} on ${where} must fail: ${JSON.stringify(out)}`);
      assert.match(
        `${out.error.code} ${out.error.message}`,
        /SELF_SIGNED_CERT_IN_CHAIN|self[- ]signed certificate|UNABLE_TO_GET_ISSUER_CERT|unable to (get local issuer|verify)/i,
        `${mode} on ${where}: ${JSON.stringify(out.error)}`,
      );
    }
  });
});
