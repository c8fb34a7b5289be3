// A second namespace on its own AmqpPort, reached by the JS SDK with no DNS entry (issue 14).
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import { assertCleanLog, configOf, namespaceDef, queueDef, queuePair, receiveN, startServer } from "./support.mjs";

let server;
let otherConn;

before(async () => {
  const other = {
    Name: "otherns",
    AmqpPort: 0,
    SharedAccessPolicies: [{ KeyName: "OtherKey", Key: "OTHER_VALUE", Rights: ["Manage", "Send", "Listen"] }],
    Queues: queuePair("other-q"),
    Topics: [],
  };
  server = await startServer(configOf([namespaceDef([queueDef("main-q")]), other]));
  otherConn = await server.namespaceConnectionString("otherns");
});

after(async () => {
  if (server) assertCleanLog((await server.stop()).stderr);
});

for (const queue of ["other-q", "other-q-p"]) {
  it(`second namespace on its own port: send and receive on ${queue}`, async () => {
    assert.match(otherConn, /SharedAccessKeyName=OtherKey;/);
    const client = new ServiceBusClient(otherConn);
    const sender = client.createSender(queue);
    await sender.sendMessages({ body: "to otherns" });
    const receiver = client.createReceiver(queue);
    const [m] = await receiveN(receiver, 1);
    assert.equal(m.body, "to otherns");
    await receiver.completeMessage(m);
    await client.close();
  });
}

it("the main port serves the first namespace only", async () => {
  const client = new ServiceBusClient(server.connectionString(), { retryOptions: { maxRetries: 0 } });
  const sender = client.createSender("other-q");
  await assert.rejects(sender.sendMessages({ body: "x" }), (err) => err.code === "MessagingEntityNotFound");
  await client.close();
});
