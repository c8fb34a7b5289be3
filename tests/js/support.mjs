// Shared by the node suites: start the real sbemu server (`python -m sbemu serve`) on ephemeral
// loopback ports with a temporary Config.json and data directory, read its ready lines (as
// tests/integration/conftest.py does), and a few helpers over the unchanged @azure/service-bus SDK.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const NAMESPACE = "sbemulatorns";
export const KEY_NAME = "RootManageSharedAccessKey";
export const KEY = "SAS_KEY_VALUE";
export const START_TIMEOUT_MS = 120_000; // an upper bound: make test starts ~20 processes at once on 2 cores

// Each scenario runs on a plain entity and on a partitioned one (16 partitions).
export const KINDS = [
  { kind: "plain", suffix: "" },
  { kind: "partitioned", suffix: "-p" },
];

/** The Python that runs the server: $SBEMU_PYTHON, else the repository's .venv, else python3. */
export function python() {
  if (process.env.SBEMU_PYTHON) return process.env.SBEMU_PYTHON;
  const venv = join(ROOT, ".venv", "bin", "python");
  return existsSync(venv) ? venv : "python3";
}

/** One queue entry of a Config.json (Microsoft's property names plus EnablePartitioning). */
export function queueDef(name, props = {}) {
  return {
    Name: name,
    Properties: {
      LockDuration: "PT5S",
      MaxDeliveryCount: 3,
      RequiresSession: false,
      RequiresDuplicateDetection: false,
      DeadLetteringOnMessageExpiration: false,
      DefaultMessageTimeToLive: "PT1H",
      DuplicateDetectionHistoryTimeWindow: "PT20S",
      ...props,
    },
  };
}

/** Both kinds of one queue: `name` (plain) and `name-p` (partitioned). */
export function queuePair(name, props = {}) {
  return [queueDef(name, props), queueDef(`${name}-p`, { ...props, EnablePartitioning: true })];
}

export function namespaceDef(queues, topics = [], extra = {}) {
  return {
    Name: NAMESPACE,
    SharedAccessPolicies: [{ KeyName: KEY_NAME, Key: KEY, Rights: ["Manage", "Send", "Listen"] }],
    Queues: queues,
    Topics: topics,
    ...extra,
  };
}

export function configOf(namespaces) {
  return { UserConfig: { Namespaces: namespaces, Logging: { Type: "Console" } } };
}

const LISTEN_RE = /listening on amqp:\/\/([\w.\-[\]:]+?):(\d+) /;
const HEALTH_RE = /health on http:\/\/([\w.\-[\]:]+?):(\d+)\/health/;
const CONN_RE = /connection string: (\S+)/;
const TLS_RE = /amqps on amqps:\/\/([\w.\-[\]:]+?):(\d+) /;
const WS_RE = /websockets on wss:\/\/([\w.\-[\]:]+?):(\d+)\//;

/**
 * Start `python -m sbemu serve` with `config` (an object written to a temporary Config.json).
 * Resolves once the three ready lines were printed. `server.stop()` sends SIGTERM, waits for a
 * clean exit and returns the server's stderr (the suites check it holds no traceback).
 */
export function startServer(config, { extraArgs = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "sbemu-js-"));
  const configPath = join(dir, "config.json");
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  const args = [
    "-m", "sbemu", "serve",
    "--config", configPath,
    "--data-dir", join(dir, "data"),
    "--port", "0",
    "--admin-port", "0",
    "--tls-port", "0",
    "--ws-port", "0",
    "--log-level", "warning",
    ...extraArgs,
  ];
  const child = spawn(python(), args, {
    cwd: ROOT,
    env: { ...process.env, PYTHONUNBUFFERED: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk) => (stderr += chunk));
  child.stdout.setEncoding("utf8");
  const exited = new Promise((res) => child.on("exit", (code, signal) => res({ code, signal })));

  return new Promise((resolveReady, rejectReady) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      rejectReady(new Error(`sbemu not ready after ${START_TIMEOUT_MS} ms; stdout=${stdout} stderr=${stderr}`));
    }, START_TIMEOUT_MS);
    child.on("error", (err) => {
      clearTimeout(timer);
      rejectReady(new Error(`cannot start ${python()}: ${err.message}`));
    });
    exited.then(({ code }) => {
      clearTimeout(timer);
      rejectReady(new Error(`sbemu exited (${code}) before it was ready: ${stderr}`));
    });
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
      const listen = LISTEN_RE.exec(stdout);
      const health = HEALTH_RE.exec(stdout);
      const conn = CONN_RE.exec(stdout);
      const tls = TLS_RE.exec(stdout);
      const ws = WS_RE.exec(stdout);
      if (!listen || !health || !conn || !tls || !ws) return;
      clearTimeout(timer);
      child.stdout.removeAllListeners("data");
      // keep draining (a full pipe must never block the server), keep the text for later lines
      child.stdout.on("data", (more) => (stdout += more));
      const port = Number(listen[2]);
      resolveReady({
        port,
        adminPort: Number(health[2]),
        tlsPort: Number(tls[2]), // AMQPS (--tls-port 0)
        wsPort: Number(ws[2]), // AMQP over WebSockets, ws and wss (--ws-port 0)
        caFile: join(dir, "data", "tls", "rootCA.pem"), // the local CA of AMQPS, wss and HTTPS
        stdout: () => stdout,
        /** The connection string printed for a namespace served on its own AmqpPort. */
        async namespaceConnectionString(name, timeoutMs = 10_000) {
          const re = new RegExp(`namespace ${name} on amqp://\\S+: (Endpoint=\\S+)`);
          const deadline = Date.now() + timeoutMs;
          for (;;) {
            const m = re.exec(stdout);
            if (m) return m[1];
            if (Date.now() > deadline) throw new Error(`no ready line for namespace ${name}: ${stdout}`);
            await sleep(50);
          }
        },
        stderr: () => stderr,
        /** A connection string for this server (another key name / key for the error tests). */
        connectionString(keyName = KEY_NAME, key = KEY) {
          return (
            `Endpoint=sb://localhost:${port};SharedAccessKeyName=${keyName};` +
            `SharedAccessKey=${key};UseDevelopmentEmulator=true;`
          );
        },
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
          const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
          const result = await exited;
          clearTimeout(killer);
          rmSync(dir, { recursive: true, force: true });
          return { ...result, stderr };
        },
      });
    });
  });
}

/** Fail when the server's stderr holds a traceback or an error-level line. */
export function assertCleanLog(stderr) {
  const bad = stderr
    .split("\n")
    .filter((line) => /Traceback|\bERROR\b|\bCRITICAL\b/.test(line));
  if (bad.length) throw new Error(`server log has errors:\n${bad.join("\n")}\n--- full stderr ---\n${stderr}`);
}

/** Receive until `n` messages arrived or `timeoutMs` passed. */
export async function receiveN(receiver, n, timeoutMs = 15_000) {
  const got = [];
  const deadline = Date.now() + timeoutMs;
  while (got.length < n && Date.now() < deadline) {
    const batch = await receiver.receiveMessages(n - got.length, { maxWaitTimeInMs: 1000 });
    got.push(...batch);
  }
  return got;
}

/** The partition id carried in the top 16 bits of a sequence number [P11]. */
export function partitionOf(sequenceNumber) {
  return Number(BigInt(sequenceNumber.toString()) >> 48n);
}

export const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
