// The latency floor of this machine and client: an in-memory AMQP forwarder (bench-compare).
//
//   node forwarder.js     prints "listening <port>" (an ephemeral loopback port), then serves
//
// It does the least any broker does: a message that arrives on an address is accepted at
// once and handed, as it is, to a receiver of that address with credit (or kept in memory
// until one has credit). No storage, no locks, no fsync. The same rhea latency client run
// against it shows what the client, Node and this machine's scheduling cost by themselves,
// so a broker's latency can be read against it.
//
// The Service Bus SDKs put a token on `$cbs` before they attach: a request there is answered
// at once with status 202 on the same connection (every token is taken, nothing is checked), so
// the Python SDK run against it shows the SDK's own ceiling (`bench/sdk.py`).
'use strict';

const rhea = require('rhea');

const container = rhea.create_container({ id: `sbemu-bench-forwarder-${process.pid}` });
container.sasl_server_mechanisms.enable_anonymous();
container.sasl_server_mechanisms.enable_plain(() => true);

const receivers = new Map(); // address -> sender links (the clients' receivers)
const waiting = new Map(); // address -> Backlog: messages no receiver had credit for

function addressOf(terminus) {
  return (terminus && terminus.address) || '';
}

// Messages waiting on an address: an array read from `head` (Array.shift moves the whole
// array, which made a 20,000-message backlog cost the forwarder more than the client).
class Backlog {
  constructor() {
    this.items = [];
    this.head = 0;
  }
  push(messages) {
    for (const m of messages) this.items.push(m);
  }
  get length() {
    return this.items.length - this.head;
  }
  take() {
    const m = this.items[this.head];
    this.items[this.head] = undefined;
    this.head += 1;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    }
    return m;
  }
}

function forward(address) {
  const queue = waiting.get(address);
  const links = receivers.get(address) || [];
  let link = null;
  while (queue && queue.length) {
    if (!link || !link.sendable()) link = links.find((l) => l.is_open() && l.sendable());
    if (!link) return;
    link.send(queue.take());
  }
}

container.on('sender_open', (ctx) => {
  const address = addressOf(ctx.sender.source);
  ctx.sender.set_source(ctx.sender.source);
  ctx.sender.set_target(ctx.sender.target);
  if (address === '$cbs') return; // replies only, on this connection (answerCbs)
  if (!receivers.has(address)) receivers.set(address, []);
  receivers.get(address).push(ctx.sender);
});
container.on('sender_close', (ctx) => {
  const address = addressOf(ctx.sender.source);
  receivers.set(address, (receivers.get(address) || []).filter((l) => l !== ctx.sender));
});
container.on('receiver_open', (ctx) => {
  ctx.receiver.set_source(ctx.receiver.source);
  ctx.receiver.set_target(ctx.receiver.target);
});
// A Service Bus batch (message format 0x80013700) carries one encoded message per data
// section: hand each on as a message of its own, as a broker would.
const BATCH_FORMAT = 0x80013700;
function unbatch(ctx) {
  if (ctx.delivery.format !== BATCH_FORMAT) return [ctx.message];
  const body = rhea.message.decode(ctx.message).body; // a non-zero format arrives undecoded
  return (body.multiple ? body.content : [body.content]).map((b) => rhea.message.decode(b));
}

function answerCbs(ctx) {
  const request = ctx.message;
  const reply = ctx.connection.find_sender((l) => addressOf(l.source) === '$cbs' && l.is_open());
  if (!reply) return;
  reply.send({
    to: request.reply_to,
    correlation_id: request.message_id,
    application_properties: { 'status-code': 202, 'status-description': 'Accepted' },
    body: null,
  });
}

container.on('message', (ctx) => {
  const address = addressOf(ctx.receiver.target);
  if (address === '$cbs') {
    answerCbs(ctx);
    return;
  }
  if (!waiting.has(address)) waiting.set(address, new Backlog());
  waiting.get(address).push(unbatch(ctx));
  forward(address);
});
container.on('sendable', (ctx) => forward(addressOf(ctx.sender.source)));
container.on('disconnected', () => {});

const server = container.listen({ port: 0, host: '127.0.0.1' });
server.on('listening', () => process.stdout.write(`listening ${server.address().port}\n`));

// A receiver that settles second (peek-lock: the SDKs send their outcome unsettled and wait)
// gets the outcome confirmed, settled, as a broker would.
for (const outcome of ['accepted', 'released', 'rejected', 'modified']) {
  container.on(outcome, (ctx) => {
    const d = ctx.delivery;
    if (!d.settled) d.update(true, d.remote_state.described());
  });
}
