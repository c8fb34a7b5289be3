// Queue scenarios with the unchanged @azure/service-bus SDK, each on a plain and a partitioned
// queue. Messages are sent WITHOUT a messageId, as most applications do: the SDK's lock renewer
// keys on the id the service assigns (issue 14).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import Long from "long";
import {
  KINDS, assertCleanLog, configOf, namespaceDef, partitionOf, queuePair, receiveN, sleep, startServer,
} from "./support.mjs";

const AZURE_ID = /^[0-9a-f]{32}$/;
const NAMES = [
  "send", "complete", "abandon", "defer", "deadletter", "rad", "subscribe", "renew", "autorenew",
  "schedule", "peek", "ttl",
];

let server;
let client;

before(async () => {
  const queues = NAMES.flatMap((n) => queuePair(n));
  queues.push(...queuePair("dup", { RequiresDuplicateDetection: true }));
  queues.push(...queuePair("ttldl", { DeadLetteringOnMessageExpiration: true }));
  server = await startServer(configOf([namespaceDef(queues)]));
  client = new ServiceBusClient(server.connectionString(), { retryOptions: { maxRetries: 1 } });
});

after(async () => {
  await client?.close();
  if (server) assertCleanLog((await server.stop()).stderr);
});

const bodies = (messages) => messages.map((m) => m.body).sort();

for (const { kind, suffix } of KINDS) {
  describe(`queues (${kind})`, () => {
    it("sends single, array and batch; peek-lock receive and complete", async () => {
      const q = `send${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "single" });
      await sender.sendMessages([{ body: "array-1" }, { body: "array-2" }]);
      const batch = await sender.createMessageBatch();
      for (let i = 0; i < 3; i++) assert.ok(batch.tryAddMessage({ body: `batch-${i}` }));
      await sender.sendMessages(batch);
      await sender.close();
      const receiver = client.createReceiver(q);
      const got = await receiveN(receiver, 6);
      assert.deepEqual(bodies(got), ["array-1", "array-2", "batch-0", "batch-1", "batch-2", "single"]);
      for (const m of got) {
        assert.match(m.messageId, AZURE_ID, "the service assigns a MessageId");
        assert.equal(m.deliveryCount, 0);
        assert.ok(m.lockedUntilUtc > new Date());
        await receiver.completeMessage(m);
      }
      assert.equal(new Set(got.map((m) => m.messageId)).size, 6);
      assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
      await receiver.close();
    });

    it("complete, then the message is gone (peek sees nothing)", async () => {
      const q = `complete${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "c", applicationProperties: { k: "v", n: 7 } });
      await sender.close();
      const receiver = client.createReceiver(q);
      const [m] = await receiveN(receiver, 1);
      assert.deepEqual(m.applicationProperties, { k: "v", n: 7 });
      const [peeked] = await receiver.peekMessages(1);
      assert.equal(peeked.messageId, m.messageId, "peek and receive show the same id");
      await receiver.completeMessage(m);
      assert.deepEqual(await receiver.peekMessages(1), []);
      await receiver.close();
    });

    it("abandon: redelivered with delivery count + 1", async () => {
      const q = `abandon${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "a" });
      await sender.close();
      const receiver = client.createReceiver(q);
      const [m] = await receiveN(receiver, 1);
      await receiver.abandonMessage(m, { reason: "later" });
      const [again] = await receiveN(receiver, 1);
      assert.equal(again.messageId, m.messageId);
      assert.equal(again.deliveryCount, 1);
      assert.equal(again.applicationProperties.reason, "later", "abandon's property changes kept");
      await receiver.completeMessage(again);
      await receiver.close();
    });

    it("defer, receive deferred by sequence number, complete", async () => {
      const q = `defer${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "d" });
      await sender.close();
      const receiver = client.createReceiver(q);
      const [m] = await receiveN(receiver, 1);
      await receiver.deferMessage(m);
      assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
      const [deferred] = await receiver.receiveDeferredMessages([m.sequenceNumber]);
      assert.equal(deferred.body, "d");
      assert.equal(deferred.messageId, m.messageId);
      assert.equal(deferred.state, "deferred");
      await receiver.completeMessage(deferred);
      // a sequence number that does not exist fails at once, not after the SDK's retries
      const started = Date.now();
      await assert.rejects(receiver.receiveDeferredMessages([m.sequenceNumber.add(1000)]), (err) => {
        assert.equal(err.code, "MessageNotFound");
        return true;
      });
      assert.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`);
      await receiver.close();
    });

    it("dead-letter with reason, receive and complete from the DLQ", async () => {
      const q = `deadletter${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "x" });
      await sender.close();
      const receiver = client.createReceiver(q);
      const [m] = await receiveN(receiver, 1);
      await receiver.deadLetterMessage(m, { deadLetterReason: "bad", deadLetterErrorDescription: "very" });
      await receiver.close();
      const dlq = client.createReceiver(q, { subQueueType: "deadLetter" });
      const [dead] = await receiveN(dlq, 1);
      assert.equal(dead.body, "x");
      assert.equal(dead.messageId, m.messageId, "the DLQ shows the same id");
      assert.equal(dead.deadLetterReason, "bad");
      assert.equal(dead.deadLetterErrorDescription, "very");
      await dlq.completeMessage(dead);
      await dlq.close();
    });

    it("receive-and-delete", async () => {
      const q = `rad${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages([{ body: "r1" }, { body: "r2" }]);
      await sender.close();
      const receiver = client.createReceiver(q, { receiveMode: "receiveAndDelete" });
      const got = await receiveN(receiver, 2);
      assert.deepEqual(bodies(got), ["r1", "r2"]);
      assert.deepEqual(await receiver.peekMessages(5), []);
      await receiver.close();
    });

    it("subscribe() with processMessage / processError, then close", async () => {
      const q = `subscribe${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages([{ body: "s1" }, { body: "s2" }, { body: "s3" }]);
      await sender.close();
      const receiver = client.createReceiver(q);
      const seen = [];
      const errors = [];
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`only got ${seen}`)), 15_000);
        const sub = receiver.subscribe(
          {
            async processMessage(m) {
              seen.push(m.body);
              if (seen.length === 3) {
                clearTimeout(timer);
                setImmediate(() => sub.close().then(resolve, reject));
              }
            },
            async processError(args) {
              errors.push(args.error);
            },
          },
          { autoCompleteMessages: true },
        );
      });
      assert.deepEqual(seen.sort(), ["s1", "s2", "s3"]);
      assert.deepEqual(errors, []);
      await receiver.close();
      const check = client.createReceiver(q);
      assert.deepEqual(await check.peekMessages(5), [], "auto-completed");
      await check.close();
    });

    it("renewMessageLock extends the lock", async () => {
      const q = `renew${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "l" });
      await sender.close();
      const receiver = client.createReceiver(q, { maxAutoLockRenewalDurationInMs: 0 });
      const [m] = await receiveN(receiver, 1);
      const before = m.lockedUntilUtc.getTime();
      await sleep(1100);
      const until = await receiver.renewMessageLock(m);
      assert.ok(until.getTime() > before, `${until.toISOString()} > ${new Date(before).toISOString()}`);
      await receiver.completeMessage(m);
      await receiver.close();
    });

    it("auto lock renewal keeps a message past its 5 s lock", async () => {
      const q = `autorenew${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "auto" });
      await sender.close();
      const receiver = client.createReceiver(q, { maxAutoLockRenewalDurationInMs: 60_000 });
      const [m] = await receiveN(receiver, 1);
      await sleep(7000); // longer than LockDuration PT5S
      await receiver.completeMessage(m); // lock lost would throw MessageLockLost
      await receiver.close();
    });

    it("schedule and cancel", async () => {
      const q = `schedule${suffix}`;
      const sender = client.createSender(q);
      const soon = new Date(Date.now() + 2000);
      const later = new Date(Date.now() + 3_600_000);
      const [keep] = await sender.scheduleMessages({ body: "soon" }, soon);
      const [drop] = await sender.scheduleMessages({ body: "later" }, later);
      await sender.cancelScheduledMessages(drop);
      await sender.close();
      const receiver = client.createReceiver(q);
      const [peeked] = await receiver.peekMessages(5);
      assert.equal(peeked.state, "scheduled");
      assert.equal(peeked.sequenceNumber.toString(), keep.toString());
      const got = await receiveN(receiver, 1, 15_000);
      assert.equal(got[0]?.body, "soon");
      assert.ok(got[0].enqueuedTimeUtc.getTime() >= soon.getTime() - 1000);
      await receiver.completeMessage(got[0]);
      assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
      await receiver.close();
    });

    it("peek from a sequence number", async () => {
      const q = `peek${suffix}`;
      const sender = client.createSender(q);
      // one key: on the partitioned queue all five share a partition, so sequence numbers order them
      await sender.sendMessages([0, 1, 2, 3, 4].map((i) => ({ body: `p${i}`, partitionKey: "k" })));
      await sender.close();
      const receiver = client.createReceiver(q);
      const all = await receiver.peekMessages(10, { fromSequenceNumber: Long.ZERO });
      assert.deepEqual(all.map((m) => m.body), ["p0", "p1", "p2", "p3", "p4"]);
      const tail = await receiver.peekMessages(10, { fromSequenceNumber: all[2].sequenceNumber });
      assert.deepEqual(tail.map((m) => m.body), ["p2", "p3", "p4"]);
      if (suffix) assert.equal(new Set(all.map((m) => partitionOf(m.sequenceNumber))).size, 1);
      await receiver.close();
    });

    it("TTL: an expired message is never delivered; dead-lettered when asked", async () => {
      const sender = client.createSender(`ttl${suffix}`);
      await sender.sendMessages({ body: "short", timeToLive: 500 });
      await sender.sendMessages({ body: "long" });
      await sender.close();
      const dlSender = client.createSender(`ttldl${suffix}`);
      await dlSender.sendMessages({ body: "dies", timeToLive: 500 });
      await dlSender.close();
      await sleep(1200);
      const receiver = client.createReceiver(`ttl${suffix}`);
      const got = await receiveN(receiver, 1);
      assert.deepEqual(bodies(got), ["long"]);
      assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
      await receiver.completeMessage(got[0]);
      await receiver.close();
      const dlq = client.createReceiver(`ttldl${suffix}`, { subQueueType: "deadLetter" });
      const [dead] = await receiveN(dlq, 1);
      assert.equal(dead.body, "dies");
      assert.equal(dead.deadLetterReason, "TTLExpiredException");
      await dlq.completeMessage(dead);
      await dlq.close();
    });

    it("duplicate detection drops a repeated messageId; id-less messages are never duplicates", async () => {
      const q = `dup${suffix}`;
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "first", messageId: "same" });
      await sender.sendMessages({ body: "again", messageId: "same" });
      await sender.sendMessages([{ body: "n1" }, { body: "n2" }]); // a key-less batch [P6]
      await sender.close();
      const receiver = client.createReceiver(q);
      const got = await receiveN(receiver, 3);
      assert.deepEqual(bodies(got), ["first", "n1", "n2"]);
      assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 700 }), []);
      for (const m of got) await receiver.completeMessage(m);
      await receiver.close();
    });
  });
}
