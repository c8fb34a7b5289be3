// The latency floor of this machine and client: an in-memory AMQP forwarder (bench-compare).
//
//   node forwarder.js     prints "listening <port>" (an ephemeral loopback port), then serves
//
// It does the least any broker does: a message that arrives on an address is accepted at
// once and handed, as it is, to a receiver of that address with credit (or kept in memory
// until one has credit). No storage, no locks, no fsync. The same rhea latency client run
// against it shows what the client, Node and this machine's scheduling cost by themselves,
// so a broker's latency can be read against it.
'use strict';

const rhea = require('rhea');

const container = rhea.create_container({ id: `sbemu-bench-forwarder-${process.pid}` });
container.sasl_server_mechanisms.enable_anonymous();
container.sasl_server_mechanisms.enable_plain(() => true);

const receivers = new Map(); // address -> sender links (the clients' receivers)
const waiting = new Map(); // address -> messages no receiver had credit for

function addressOf(terminus) {
  return (terminus && terminus.address) || '';
}

function forward(address) {
  const queue = waiting.get(address);
  const links = receivers.get(address) || [];
  while (queue && queue.length) {
    const link = links.find((l) => l.is_open() && l.sendable());
    if (!link) return;
    link.send(queue.shift());
  }
}

container.on('sender_open', (ctx) => {
  const address = addressOf(ctx.sender.source);
  ctx.sender.set_source(ctx.sender.source);
  if (!receivers.has(address)) receivers.set(address, []);
  receivers.get(address).push(ctx.sender);
});
container.on('sender_close', (ctx) => {
  const address = addressOf(ctx.sender.source);
  receivers.set(address, (receivers.get(address) || []).filter((l) => l !== ctx.sender));
});
container.on('receiver_open', (ctx) => ctx.receiver.set_target(ctx.receiver.target));
container.on('message', (ctx) => {
  const address = addressOf(ctx.receiver.target);
  if (!waiting.has(address)) waiting.set(address, []);
  waiting.get(address).push(ctx.message);
  forward(address);
});
container.on('sendable', (ctx) => forward(addressOf(ctx.sender.source)));
container.on('disconnected', () => {});

const server = container.listen({ port: 0, host: '127.0.0.1' });
server.on('listening', () => process.stdout.write(`listening ${server.address().port}\n`));
