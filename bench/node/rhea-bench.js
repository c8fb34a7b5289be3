// One benchmark phase with the rhea client (make bench-compare runs it against both brokers).
//
//   node rhea-bench.js send|receive <port> <address> <count> <size> <credit> <user> <password>
//
// send: <count> durable messages of <size> body bytes (a data section), at most <credit>
// unsettled at a time (and never beyond the link credit the broker grants); the rate counts
// only deliveries the broker accepted.
// receive: a receiver with credit window <credit> and auto-accept (peek-lock + complete) takes
// <count> messages; it checks every index arrives and says how many were duplicates.
// Prints one JSON line: {"phase", "count", "ok", "seconds", "rate", "duplicates", "error",
// "cpu_us", "cpu_share", "main_us", "main_share"}: the client's own CPU time (user + system)
// over the timed window, per message and as a share of one core, of the whole process and of
// its main thread (where rhea runs: at a share of 1.0 the client was the bottleneck).
'use strict';

const fs = require('fs');
const rhea = require('rhea');

const [phase, port, address, countArg, sizeArg, creditArg, user, password] = process.argv.slice(2);
const count = parseInt(countArg, 10);
const size = parseInt(sizeArg, 10);
const credit = parseInt(creditArg, 10);
const IDLE_MS = 30000;

const container = rhea.create_container({ id: `rhea-bench-${process.pid}` });
const connection = container.connect({
  host: '127.0.0.1',
  port: parseInt(port, 10),
  username: user,
  password: password,
  reconnect: false,
  idle_time_out: 0,
});

let t0 = 0;
let cpu0 = null; // process.cpuUsage() at t0
let main0 = null; // the main (event-loop) thread's CPU seconds at t0
let done = false;
let progress = 0;
let lastProgress = Date.now();

// CPU seconds (user + system) of the main thread, where rhea and all JS run (Node's GC and
// I/O helper threads count in process.cpuUsage() only); null where /proc is not there.
function mainThreadSeconds() {
  try {
    const stat = fs.readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // USER_HZ
  } catch {
    return null;
  }
}

function start() {
  t0 = process.hrtime.bigint();
  cpu0 = process.cpuUsage();
  main0 = mainThreadSeconds();
}

// The client's CPU over the timed window: the whole process's per message (cpu_us) and the
// main thread's share of one core (main_share: at 1.00 the client itself was the limit).
function cpuOf(result) {
  if (!cpu0 || !result.seconds || !result.ok) return {};
  const used = process.cpuUsage(cpu0);
  const us = used.user + used.system;
  const main1 = mainThreadSeconds();
  const out = { cpu_us: us / result.ok, cpu_share: us / 1e6 / result.seconds };
  if (main0 !== null && main1 !== null) {
    out.main_us = ((main1 - main0) * 1e6) / result.ok;
    out.main_share = (main1 - main0) / result.seconds;
  }
  return out;
}

function finish(result) {
  if (done) return;
  done = true;
  process.stdout.write(JSON.stringify({ phase, count, ...result, ...cpuOf(result) }) + '\n');
  connection.close();
  setTimeout(() => process.exit(result.error ? 1 : 0), 200).unref();
}

function fail(why) {
  finish({ ok: progress, seconds: 0, rate: 0, duplicates: 0, error: String(why) });
}

connection.on('connection_error', (ctx) => fail(`connection error: ${JSON.stringify(ctx.connection.error)}`));
connection.on('disconnected', (ctx) => { if (!done) fail(`disconnected: ${ctx.error || ''}`); });

setInterval(() => {
  if (Date.now() - lastProgress > IDLE_MS) fail(`no progress for ${IDLE_MS / 1000}s at ${progress}/${count}`);
}, 1000).unref();

function touch() {
  progress += 1;
  lastProgress = Date.now();
}

if (phase === 'send') {
  const body = rhea.message.data_section(Buffer.alloc(size, 0x61));
  const sender = connection.open_sender({ target: { address, durable: 2 } });
  let sent = 0;
  let accepted = 0;
  let refused = 0;
  const pump = () => {
    while (sent < count && sent - accepted - refused < credit && sender.sendable()) {
      sender.send({
        message_id: `m-${sent}`,
        durable: true,
        application_properties: { i: sent },
        body,
      });
      sent += 1;
    }
  };
  sender.on('sender_open', () => { start(); pump(); });
  sender.on('sendable', pump);
  const settled = () => {
    touch();
    if (accepted + refused === count) {
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      finish({
        ok: accepted, seconds, rate: accepted / seconds, duplicates: 0,
        error: refused ? `${refused} sends refused` : null,
      });
    } else {
      pump();
    }
  };
  sender.on('accepted', () => { accepted += 1; settled(); });
  sender.on('rejected', () => { refused += 1; settled(); });
  sender.on('released', () => { refused += 1; settled(); });
  sender.on('modified', () => { refused += 1; settled(); });
  sender.on('sender_error', (ctx) => fail(`sender error: ${JSON.stringify(ctx.sender.error)}`));
} else if (phase === 'receive') {
  const seen = new Uint8Array(count);
  let distinct = 0;
  let duplicates = 0;
  const receiver = connection.open_receiver({
    source: { address, durable: 2 },
    credit_window: credit,
    autoaccept: true,
  });
  receiver.on('receiver_open', () => { start(); });
  receiver.on('message', (ctx) => {
    touch();
    const i = (ctx.message.application_properties || {}).i;
    if (typeof i !== 'number' || i < 0 || i >= count) return;
    if (seen[i]) { duplicates += 1; return; }
    seen[i] = 1;
    distinct += 1;
    if (distinct === count) {
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      // Let the accept of this last delivery go out before closing.
      setImmediate(() => finish({ ok: distinct, seconds, rate: distinct / seconds, duplicates, error: null }));
    }
  });
  receiver.on('receiver_error', (ctx) => fail(`receiver error: ${JSON.stringify(ctx.receiver.error)}`));
} else if (phase === 'latency') {
  // latency <port> <address> <rate msg/s> <seconds> <size> <user> <password>: a sender on this
  // connection offers <rate> durable messages a second on a fixed schedule while a receiver on
  // a second connection (credit 1000, auto-accept) takes them; latency = receive time minus
  // scheduled send time (a sender held back by the broker counts against it too).
  const rate = count;
  const seconds = parseFloat(sizeArg);
  const bodySize = credit;
  const total = Math.max(1, Math.round(rate * seconds));
  const interval = 1e9 / rate;
  const body = rhea.message.data_section(Buffer.alloc(bodySize, 0x61));
  const rconn = container.connect({
    host: '127.0.0.1', port: parseInt(port, 10), username: user, password, reconnect: false, idle_time_out: 0,
  });
  const latencies = [];
  const seen = new Uint8Array(total);
  let start = 0n;
  let sent = 0;
  let accepted = 0;
  let opened = 0;
  const sender = connection.open_sender({ target: { address, durable: 2 } });
  const receiver = rconn.open_receiver({ source: { address, durable: 2 }, credit_window: 1000, autoaccept: true });
  const tick = () => {
    if (done) return;
    const now = process.hrtime.bigint();
    const due = Math.min(total, Number((now - start) / BigInt(Math.round(interval))) + 1);
    while (sent < due && sender.sendable()) {
      sender.send({ message_id: `l-${sent}`, durable: true, application_properties: { i: sent }, body });
      sent += 1;
    }
    if (sent < total) {
      const next = start + BigInt(Math.round(sent * interval));
      const wait = Number(next - process.hrtime.bigint()) / 1e6;
      setTimeout(tick, Math.max(0, wait));
    }
  };
  const opened1 = () => { opened += 1; if (opened === 2) { start = process.hrtime.bigint(); tick(); } };
  sender.on('sender_open', opened1);
  receiver.on('receiver_open', opened1);
  sender.on('sendable', () => { if (start) tick(); });
  // The last sends' dispositions and their deliveries to the receiver go out together but on
  // two connections: the result waits for both (else a fast receive reports sends as missing).
  const report = () => {
    if (latencies.length !== total || accepted !== total) return;
    latencies.sort((a, b) => a - b);
    const pct = (p) => latencies[Math.min(total - 1, Math.max(0, Math.ceil((p / 100) * total) - 1))];
    setImmediate(() => {
      rconn.close();
      finish({
        ok: total, seconds, rate, duplicates: 0, error: null,
        p50_ms: pct(50), p99_ms: pct(99), max_ms: latencies[total - 1], accepted,
      });
    });
  };
  sender.on('accepted', () => { accepted += 1; report(); });
  sender.on('rejected', () => fail('send rejected'));
  receiver.on('message', (ctx) => {
    const now = process.hrtime.bigint();
    touch();
    const i = (ctx.message.application_properties || {}).i;
    if (typeof i !== 'number' || i < 0 || i >= total || seen[i]) return;
    seen[i] = 1;
    latencies.push(Number(now - start - BigInt(Math.round(i * interval))) / 1e6);
    report();
  });
} else {
  fail(`unknown phase ${phase}`);
}
