// What a receiver gets, as Azure hands it out (issue 23), with the unchanged @azure/service-bus:
// delivery annotations (x-opt-lock-token beside the sender's own) and the footer (item 1), and
// a message's own TTL on a queue whose default TTL is "never" (item 2).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import {
  assertCleanLog, configOf, namespaceDef, queueDef, receiveN, sleep, startServer,
} from "./support.mjs";

const NEVER = "P10675199DT2H48M5.4775807S"; // .NET TimeSpan.MaxValue, the admin API's default

let server;
let client;

before(async () => {
  const queues = [
    queueDef("annotations"),
    queueDef("ttl-never", { DefaultMessageTimeToLive: NEVER, DeadLetteringOnMessageExpiration: true }),
  ];
  server = await startServer(configOf([namespaceDef(queues)]));
  client = new ServiceBusClient(server.connectionString(), { retryOptions: { maxRetries: 1 } });
});

after(async () => {
  await client?.close();
  if (server) assertCleanLog((await server.stop()).stderr);
});

/** A uuid as the SDK hands it over (16 bytes, network order; a Buffer, or the plain object
 * of its bytes the SDK's message conversion leaves) in the SDK's lock-token form. */
function uuidText(bytes) {
  const h = Buffer.from(Buffer.isBuffer(bytes) ? bytes : Object.values(bytes)).toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

describe("deliveries", () => {
  it("carry x-opt-lock-token and the sender's delivery annotations and footer", async () => {
    const sender = client.createSender("annotations");
    await sender.sendMessages({
      bodyType: "data",
      body: Buffer.from("raw"),
      deliveryAnnotations: { "sender-key": "sender-value" },
      footer: { "footer-key": "footer-value" },
    });
    await sender.close();
    const receiver = client.createReceiver("annotations");
    const [m] = await receiveN(receiver, 1);
    const raw = m._rawAmqpMessage;
    assert.equal(raw.deliveryAnnotations["sender-key"], "sender-value");
    assert.equal(uuidText(raw.deliveryAnnotations["x-opt-lock-token"]), m.lockToken);
    assert.equal(raw.footer["footer-key"], "footer-value");
    await receiver.completeMessage(m);
    await receiver.close();
  });

  it("never hand out a message past its own TTL on a queue whose default TTL is never", async () => {
    const sender = client.createSender("ttl-never");
    await sender.sendMessages({ body: "short", timeToLive: 500 });
    await sender.close();
    await sleep(1200);
    const receiver = client.createReceiver("ttl-never");
    assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 }), []);
    await receiver.close();
    const dlq = client.createReceiver("ttl-never", { subQueueType: "deadLetter" });
    const [dead] = await receiveN(dlq, 1);
    assert.equal(dead.body, "short");
    assert.equal(dead.deadLetterReason, "TTLExpiredException");
    await dlq.completeMessage(dead);
    await dlq.close();
  });
});
