// Topics with SQL and correlation rules and the rule manager, sessions, and error mapping with the
// unchanged @azure/service-bus SDK, each on a plain and a partitioned entity.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ServiceBusClient, isServiceBusError } from "@azure/service-bus";
import {
  KINDS, assertCleanLog, configOf, namespaceDef, queueDef, queuePair, receiveN, sleep, startServer,
} from "./support.mjs";

function topicDef(name, props = {}) {
  const sub = (subName, rules) => ({
    Name: subName,
    Properties: { LockDuration: "PT5S", MaxDeliveryCount: 3, RequiresSession: false },
    Rules: rules,
  });
  return {
    Name: name,
    Properties: { DefaultMessageTimeToLive: "PT1H", ...props },
    Subscriptions: [
      sub("all", []),
      sub("red", [{ Name: "red", Properties: { FilterType: "Sql", SqlFilter: { SqlExpression: "color = 'red'" } } }]),
      sub("orders", [{
        Name: "orders",
        Properties: { FilterType: "Correlation", CorrelationFilter: { Label: "order", Properties: { region: "eu" } } },
      }]),
      sub("managed", []),
    ],
  };
}

let server;
let client;

before(async () => {
  const queues = [
    ...queuePair("sess", { RequiresSession: true }),
    ...queuePair("errs"),
    queueDef("small"),
  ];
  const topics = [topicDef("t"), topicDef("t-p", { EnablePartitioning: true })];
  server = await startServer(configOf([namespaceDef(queues, topics)]));
  client = new ServiceBusClient(server.connectionString(), { retryOptions: { maxRetries: 1 } });
});

after(async () => {
  await client?.close();
  if (server) assertCleanLog((await server.stop()).stderr);
});

const bodies = (messages) => messages.map((m) => m.body).sort();

async function drainSub(topic, sub, n) {
  const receiver = client.createReceiver(topic, sub);
  const got = await receiveN(receiver, n, n ? 15_000 : 1000);
  for (const m of got) await receiver.completeMessage(m);
  const extra = await receiver.receiveMessages(5, { maxWaitTimeInMs: 500 });
  await receiver.close();
  return [...got, ...extra];
}

for (const { kind, suffix } of KINDS) {
  describe(`topics (${kind})`, () => {
    it("fan-out through $Default, SQL and correlation rules", async () => {
      const topic = `t${suffix}`;
      const sender = client.createSender(topic);
      await sender.sendMessages([
        { body: "red-one", applicationProperties: { color: "red" } },
        { body: "eu-order", subject: "order", applicationProperties: { region: "eu" } },
        { body: "us-order", subject: "order", applicationProperties: { region: "us" } },
      ]);
      await sender.close();
      assert.deepEqual(bodies(await drainSub(topic, "all", 3)), ["eu-order", "red-one", "us-order"]);
      assert.deepEqual(bodies(await drainSub(topic, "red", 1)), ["red-one"]);
      assert.deepEqual(bodies(await drainSub(topic, "orders", 1)), ["eu-order"]);
    });

    it("rule manager: create, list, delete rules at runtime", async () => {
      const topic = `t${suffix}`;
      const rules = client.createRuleManager(topic, "managed");
      const names = async () => {
        const out = [];
        for await (const r of rules.listRules()) out.push(r.name);
        return out.sort();
      };
      assert.deepEqual(await names(), ["$Default"]);
      await drainSub(topic, "managed", 0); // what $Default let through earlier
      await rules.deleteRule("$Default");
      await rules.createRule("big", { sqlExpression: "size > 10" });
      await rules.createRule("vip", { correlationId: "vip" });
      assert.deepEqual(await names(), ["big", "vip"]);
      const sender = client.createSender(topic);
      await sender.sendMessages([
        { body: "small", applicationProperties: { size: 1 } },
        { body: "large", applicationProperties: { size: 100 } },
        { body: "vip", correlationId: "vip" },
      ]);
      await sender.close();
      assert.deepEqual(bodies(await drainSub(topic, "managed", 2)), ["large", "vip"]);
      await assert.rejects(rules.createRule("bad", { sqlExpression: "size >>> 1" }));
      await rules.deleteRule("big");
      await rules.deleteRule("vip");
      await rules.createRule("$Default", { sqlExpression: "1=1" });
      assert.deepEqual(await names(), ["$Default"]);
    });
  });

  describe(`sessions (${kind})`, () => {
    const q = `sess${suffix}`;

    it("accept a named session: FIFO, state, renew, exclusivity", async () => {
      const sender = client.createSender(q);
      await sender.sendMessages([1, 2, 3].map((i) => ({ body: `a${i}`, sessionId: "a" })));
      await sender.close();
      const receiver = await client.acceptSession(q, "a");
      assert.equal(receiver.sessionId, "a");
      await assert.rejects(client.acceptSession(q, "a"), (err) => {
        assert.ok(isServiceBusError(err));
        assert.equal(err.code, "SessionCannotBeLocked");
        return true;
      });
      const got = await receiveN(receiver, 3);
      assert.deepEqual(got.map((m) => m.body), ["a1", "a2", "a3"]);
      await receiver.setSessionState("step-3");
      assert.equal((await receiver.getSessionState()).toString(), "step-3");
      const before = receiver.sessionLockedUntilUtc.getTime();
      await sleep(1100);
      const until = await receiver.renewSessionLock();
      assert.ok(until.getTime() > before);
      for (const m of got) await receiver.completeMessage(m);
      await receiver.setSessionState(null);
      await receiver.close();
    });

    it("accept the next available session", async () => {
      const sender = client.createSender(q);
      await sender.sendMessages({ body: "b1", sessionId: "b" });
      await sender.close();
      const receiver = await client.acceptNextSession(q);
      assert.equal(receiver.sessionId, "b");
      const [m] = await receiveN(receiver, 1);
      assert.equal(m.body, "b1");
      assert.equal(m.sessionId, "b");
      await receiver.completeMessage(m);
      await receiver.close();
    });

    it("next available with no session ready waits as long as asked, then ServiceTimeout", async () => {
      const waiting = new ServiceBusClient(server.connectionString(), {
        retryOptions: { maxRetries: 0, timeoutInMs: 3000 },
      });
      const started = Date.now();
      await assert.rejects(waiting.acceptNextSession(q), (err) => {
        assert.equal(err.code, "ServiceTimeout", `${err.code}: ${err.message}`);
        return true;
      });
      const took = Date.now() - started;
      assert.ok(took >= 2500 && took < 8000, `took ${took} ms for a 3000 ms timeout`);
      await waiting.close();
    });
  });

  describe(`errors (${kind})`, () => {
    it("unknown entity: MessagingEntityNotFound", async () => {
      const sender = client.createSender(`nope${suffix}`);
      await assert.rejects(sender.sendMessages({ body: "x" }), (err) => {
        assert.equal(err.code, "MessagingEntityNotFound", err.message);
        return true;
      });
      await sender.close();
    });

    it("bad key: UnauthorizedAccess", async () => {
      const bad = new ServiceBusClient(
        server.connectionString("RootManageSharedAccessKey", "wrong-key"),
        { retryOptions: { maxRetries: 0 } },
      );
      const sender = bad.createSender(`errs${suffix}`);
      await assert.rejects(sender.sendMessages({ body: "x" }), (err) => {
        assert.equal(err.code, "UnauthorizedAccess", err.message);
        return true;
      });
      await bad.close();
    });

    it("oversize message: MessageSizeExceeded", async () => {
      const sender = client.createSender(`errs${suffix}`);
      await assert.rejects(sender.sendMessages({ body: "x".repeat(300 * 1024) }), (err) => {
        assert.equal(err.code, "MessageSizeExceeded", err.message);
        return true;
      });
      await sender.sendMessages({ body: "still fine" });
      await sender.close();
      const receiver = client.createReceiver(`errs${suffix}`, { receiveMode: "receiveAndDelete" });
      assert.deepEqual(bodies(await receiveN(receiver, 1)), ["still fine"]);
      await receiver.close();
    });
  });
}
