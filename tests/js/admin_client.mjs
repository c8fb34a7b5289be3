// The JS SDK's ServiceBusAdministrationClient against sbemu: create, get, list, update, delete.
// Run by tests/integration/test_admin_api.py::test_js_admin_client with
// SBEMU_ADMIN_CONNECTION_STRING and NODE_EXTRA_CA_CERTS (sbemu's local CA) set.
// @azure/service-bus is loaded through require so NODE_PATH works too (ESM imports ignore it).
import { createRequire } from "node:module";
import { randomBytes } from "node:crypto";

const require = createRequire(import.meta.url);
const { ServiceBusAdministrationClient } = require("@azure/service-bus");

function check(condition, message) {
  if (!condition) {
    throw new Error(`check failed: ${message}`);
  }
}

const connectionString = process.env.SBEMU_ADMIN_CONNECTION_STRING;
check(connectionString, "SBEMU_ADMIN_CONNECTION_STRING is set");
const admin = new ServiceBusAdministrationClient(connectionString);
const suffix = randomBytes(4).toString("hex");
const queue = `js-adm-q-${suffix}`;
const topic = `js-adm-t-${suffix}`;

const created = await admin.createQueue(queue, { enablePartitioning: true, lockDuration: "PT45S" });
check(created.name === queue, "createQueue returns the queue");
check(created.maxSizeInMegabytes === 16384, `partitioned size x16, got ${created.maxSizeInMegabytes}`);
const got = await admin.getQueue(queue);
check(got.lockDuration === "PT45S", `lockDuration round-trips, got ${got.lockDuration}`);
check(got.enablePartitioning === true, "enablePartitioning round-trips");
got.maxDeliveryCount = 6;
await admin.updateQueue(got);
check((await admin.getQueue(queue)).maxDeliveryCount === 6, "updateQueue applies");
const runtime = await admin.getQueueRuntimeProperties(queue);
check(runtime.activeMessageCount === 0, "runtime properties");
check(await admin.queueExists(queue), "queueExists");

const names = [];
for await (const q of admin.listQueues()) {
  names.push(q.name);
}
check(names.includes(queue), `listQueues lists ${queue}: ${names}`);

await admin.createTopic(topic);
await admin.createSubscription(topic, "s1");
await admin.createRule(topic, "s1", "red", { sqlExpression: "color = 'red'" });
const rules = [];
for await (const r of admin.listRules(topic, "s1")) {
  rules.push(r.name);
}
check(rules.includes("red") && rules.includes("$Default"), `listRules: ${rules}`);
const ns = await admin.getNamespaceProperties();
check(ns.name.length > 0, "getNamespaceProperties");

await admin.deleteTopic(topic);
await admin.deleteQueue(queue);
check(!(await admin.queueExists(queue)), "deleted queue is gone");
let notFound = false;
try {
  await admin.getQueue(queue);
} catch (err) {
  notFound = err.code === "MessageEntityNotFoundError" || err.statusCode === 404;
}
check(notFound, "getQueue of a deleted queue is not found");
console.log("admin client ok");
