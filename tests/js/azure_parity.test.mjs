// Points where Microsoft's own @azure/service-bus live suite found sbemu unlike Azure (issue 36),
// each asserted as that suite asserts it, with the unchanged SDK: the delivery count of deferred
// and dead-lettered messages (A, E), the message header as sent (C), rules (D), settling in a
// dead-letter queue (E) and a scheduled message's state (F).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import {
  assertCleanLog, configOf, namespaceDef, queueDef, receiveN, startServer,
} from "./support.mjs";

let server;
let client;

function subDef(name, props = {}) {
  return { Name: name, Properties: { LockDuration: "PT5S", MaxDeliveryCount: 5, ...props }, Rules: [] };
}

before(async () => {
  const queues = [
    queueDef("deferred"),
    queueDef("deferred-p", { EnablePartitioning: true }),
    queueDef("deferred-s", { RequiresSession: true }),
    queueDef("header"),
    queueDef("dlq-settle"),
    queueDef("dlq-settle-s", { RequiresSession: true }),
    queueDef("scheduled"),
  ];
  const topics = [
    {
      Name: "rules",
      Properties: { DefaultMessageTimeToLive: "PT1H" },
      Subscriptions: [subDef("dated"), subDef("paged"), subDef("twice")],
    },
  ];
  server = await startServer(configOf([namespaceDef(queues, topics)]));
  client = new ServiceBusClient(server.connectionString(), { retryOptions: { maxRetries: 2, retryDelayInMs: 100 } });
});

after(async () => {
  await client?.close();
  if (server) assertCleanLog((await server.stop()).stderr);
});

/** Receive one message (peek-lock), from a session receiver when `session` is given. */
async function receiverFor(queue, session) {
  if (session) return client.acceptSession(queue, session);
  return client.createReceiver(queue);
}

describe("A: the delivery count of a deferred message", () => {
  for (const [queue, session] of [["deferred", undefined], ["deferred-p", undefined], ["deferred-s", "s1"]]) {
    it(`${queue}: 0 on receive, 1 after a deferral, 2 after a second (and after abandon)`, async () => {
      const sender = client.createSender(queue);
      await sender.sendMessages({ body: "d", messageId: "m1", sessionId: session });
      await sender.close();
      const receiver = await receiverFor(queue, session);
      const [first] = await receiveN(receiver, 1);
      assert.equal(first.deliveryCount, 0);
      await receiver.deferMessage(first);
      let [deferred] = await receiver.receiveDeferredMessages(first.sequenceNumber);
      assert.equal(deferred.state, "deferred");
      assert.equal(deferred.deliveryCount, 1);
      await receiver.deferMessage(deferred);
      [deferred] = await receiver.receiveDeferredMessages(first.sequenceNumber);
      assert.equal(deferred.deliveryCount, 2);
      await receiver.abandonMessage(deferred);
      [deferred] = await receiver.receiveDeferredMessages(first.sequenceNumber);
      assert.equal(deferred.deliveryCount, 3);
      await receiver.deadLetterMessage(deferred);
      await receiver.close();
      const dlq = client.createReceiver(queue, { subQueueType: "deadLetter" });
      const [dead] = await receiveN(dlq, 1);
      assert.equal(dead.deliveryCount, 3, "dead-lettering does not count a delivery");
      await dlq.completeMessage(dead);
      await dlq.close();
    });
  }

  it("received by sequence number in receive-and-delete mode: 1 after a deferral", async () => {
    const sender = client.createSender("deferred");
    await sender.sendMessages({ body: "rad" });
    await sender.close();
    const receiver = client.createReceiver("deferred");
    const [first] = await receiveN(receiver, 1);
    await receiver.deferMessage(first);
    await receiver.close();
    const rad = client.createReceiver("deferred", { receiveMode: "receiveAndDelete" });
    const [deferred] = await rad.receiveDeferredMessages(first.sequenceNumber);
    assert.equal(deferred.deliveryCount, 1);
    await rad.close();
  });
});

describe("E: settling messages in a dead-letter queue", () => {
  async function deadLettered(queue, session) {
    const sender = client.createSender(queue);
    await sender.sendMessages({ body: "dl", messageId: "dl-1", sessionId: session });
    await sender.close();
    const receiver = await receiverFor(queue, session);
    const [m] = await receiveN(receiver, 1);
    assert.equal(m.deliveryCount, 0);
    await receiver.deadLetterMessage(m);
    await receiver.close();
    const dlq = client.createReceiver(queue, { subQueueType: "deadLetter" });
    const [dead] = await receiveN(dlq, 1);
    assert.equal(dead.deliveryCount, 0);
    return { dlq, dead };
  }

  it("dead-lettering a dead-lettered message fails once with GeneralError, the message kept", async () => {
    const { dlq, dead } = await deadLettered("dlq-settle");
    const started = Date.now();
    await assert.rejects(dlq.deadLetterMessage(dead), (err) => {
      assert.equal(err.code, "GeneralError", `${err.code}: ${err.message}`);
      return true;
    });
    // not retried: one answer (the retry would fail with "already settled" instead)
    assert.ok(Date.now() - started < 5000);
    const [again] = await receiveN(dlq, 1, 3000);
    assert.ok(again, "the message is back in the dead-letter queue at once");
    assert.equal(again.deliveryCount, 0);
    await dlq.completeMessage(again);
    await dlq.close();
  });

  it("abandoning a dead-lettered message leaves its delivery count", async () => {
    const { dlq, dead } = await deadLettered("dlq-settle");
    await dlq.abandonMessage(dead);
    const [again] = await receiveN(dlq, 1);
    assert.equal(again.deliveryCount, 0);
    await dlq.completeMessage(again);
    await dlq.close();
  });

  it("a deferred dead-lettered message of a session queue completes through $management", async () => {
    const { dlq, dead } = await deadLettered("dlq-settle-s", "s1");
    await dlq.deferMessage(dead);
    const [deferred] = await dlq.receiveDeferredMessages(dead.sequenceNumber);
    assert.equal(deferred.sessionId, "s1");
    await dlq.completeMessage(deferred);
    const left = await dlq.peekMessages(5);
    assert.equal(left.length, 0);
    await dlq.close();
  });
});

describe("C: the message header as sent", () => {
  it("durable false and first-acquirer false come back as sent", async () => {
    const sender = client.createSender("header");
    await sender.sendMessages({
      body: "h",
      bodyType: "data",
      header: { durable: false, firstAcquirer: false, priority: 20, timeToLive: 100000, deliveryCount: 10 },
    });
    await sender.sendMessages({
      body: "h2",
      bodyType: "data",
      header: { durable: true, firstAcquirer: true, priority: 4 },
    });
    await sender.close();
    const receiver = client.createReceiver("header", { receiveMode: "receiveAndDelete" });
    const got = await receiveN(receiver, 2);
    const { deliveryCount, ...first } = got[0]._rawAmqpMessage.header;
    assert.equal(deliveryCount, 0);
    assert.deepEqual(first, { durable: false, firstAcquirer: false, priority: 20, timeToLive: 100000 });
    const { deliveryCount: _, ...second } = got[1]._rawAmqpMessage.header;
    // the queue's default TTL (PT1H) stands in for the one the sender left out
    assert.deepEqual(second, { durable: true, firstAcquirer: true, priority: 4, timeToLive: 3600000 });
    await receiver.close();
  });
});

describe("D: rules", () => {
  it("a correlation filter with a Date property is listed with its Date", async () => {
    const rm = client.createRuleManager("rules", "dated");
    const applicationProperties = { key1: "value1", key2: 2, key3: true, key4: new Date("01/01/2000") };
    await rm.createRule("correlationRule", { correlationId: "c", applicationProperties });
    const rules = [];
    for await (const r of rm.listRules()) rules.push(r);
    const rule = rules.find((r) => r.name === "correlationRule");
    assert.ok(rule, `listed: ${rules.map((r) => r.name)}`);
    assert.deepStrictEqual(rule.filter.applicationProperties, applicationProperties);
  });

  it("rules are listed by page in name order", async () => {
    const rm = client.createRuleManager("rules", "paged");
    await rm.createRule("sqlRule", { sqlExpression: "price > 10" });
    await rm.createRule("correlationRule", { correlationId: "c" });
    const iterator = rm.listRules().byPage({ maxPageSize: 1 });
    const names = [];
    for (;;) {
      const { value, done } = await iterator.next();
      if (done || !value.length) break;
      names.push(...value.map((r) => r.name));
    }
    assert.deepEqual(names, ["$Default", "correlationRule", "sqlRule"]);
  });

  it("a duplicate rule is refused as Azure words it", async () => {
    const rm = client.createRuleManager("rules", "twice");
    await rm.createRule("ruleName", { subject: "yellow" });
    await assert.rejects(rm.createRule("ruleName", { subject: "red" }), /The messaging entity '.*ruleName' already exists\./);
  });
});

describe("F: a scheduled message's state", () => {
  it("is still 'scheduled' when received after it became active", async () => {
    const sender = client.createSender("scheduled");
    const [seq] = await sender.scheduleMessages({ body: "later" }, new Date(Date.now() + 1000));
    await sender.close();
    const receiver = client.createReceiver("scheduled");
    const [m] = await receiveN(receiver, 1);
    assert.equal(m.body, "later");
    assert.ok(m.scheduledEnqueueTimeUtc instanceof Date);
    assert.equal(m.state, "scheduled");
    assert.notEqual(m.sequenceNumber.toString(), undefined);
    assert.ok(seq !== undefined);
    await receiver.completeMessage(m);
    await receiver.close();
  });
});
