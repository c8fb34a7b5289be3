// The JS SDK's ServiceBusAdministrationClient where the management API differed from Azure
// (issue 23 items 10, 11, 12, 14): run by tests/integration/test_admin_parity.py::test_js_admin_parity
// with SBEMU_ADMIN_CONNECTION_STRING and NODE_EXTRA_CA_CERTS (sbemu's local CA) set.
import { createRequire } from "node:module";
import { randomBytes } from "node:crypto";

const require = createRequire(import.meta.url);
const { ServiceBusAdministrationClient } = require("@azure/service-bus");

function check(condition, message) {
  if (!condition) {
    throw new Error(`check failed: ${message}`);
  }
}

async function refused(promise, what) {
  try {
    await promise;
  } catch (err) {
    check(err.statusCode === 400, `${what}: 400, got ${err.statusCode} ${err.message}`);
    return err;
  }
  throw new Error(`check failed: ${what} was accepted`);
}

const admin = new ServiceBusAdministrationClient(process.env.SBEMU_ADMIN_CONNECTION_STRING);
const suffix = randomBytes(4).toString("hex");

// 10: MaxMessageSizeInKilobytes on a Standard namespace
await refused(admin.createQueue(`js-mms-${suffix}`, { maxMessageSizeInKilobytes: 1024 }),
  "maxMessageSizeInKilobytes on Standard");

// 11: RequiresSession cannot change
const rs = `js-rs-${suffix}`;
await admin.createQueue(rs);
const rsProps = await admin.getQueue(rs);
rsProps.requiresSession = true;
const err = await refused(admin.updateQueue(rsProps), "requiresSession change");
check(/RequiresSession/.test(err.message), `names RequiresSession: ${err.message}`);

// 12: forwarding to itself and round a cycle; the SDK sends sb://<host>/<name>
const a = `js-fwd-a-${suffix}`;
const b = `js-fwd-b-${suffix}`;
await admin.createQueue(a);
await admin.createQueue(b, { forwardTo: a });
const aProps = await admin.getQueue(a);
aProps.forwardTo = b;
aProps.forwardDeadLetteredMessagesTo = a;
await admin.updateQueue(aProps);
const aBack = await admin.getQueue(a);
check(aBack.forwardTo === `sb://localhost/${b}`, `forwardTo as a URL: ${aBack.forwardTo}`);
check(aBack.forwardDeadLetteredMessagesTo === `sb://localhost/${a}`,
  `forwardDeadLetteredMessagesTo to itself: ${aBack.forwardDeadLetteredMessagesTo}`);

// 14: a Date parameter comes back as a Date, a number as a number, a boolean as a boolean
const topic = `js-typed-${suffix}`;
await admin.createTopic(topic);
await admin.createSubscription(topic, "s");
const when = new Date("2021-03-04T05:06:07.000Z");
await admin.createRule(topic, "s", "typed", {
  sqlExpression: "created > @when AND ratio < @ratio AND ok = @ok",
  sqlParameters: { "@when": when, "@ratio": 0.5, "@ok": true, "@who": "ann" },
}, { sqlExpression: "SET stamp = @when", sqlParameters: { "@when": when } });
const rule = await admin.getRule(topic, "s", "typed");
const params = rule.filter.sqlParameters;
check(params["@when"] instanceof Date && params["@when"].getTime() === when.getTime(),
  `a Date parameter stays a Date: ${JSON.stringify(params["@when"])}`);
check(params["@ratio"] === 0.5 && params["@ok"] === true && params["@who"] === "ann",
  `typed parameters: ${JSON.stringify(params)}`);
check(rule.action.sqlParameters["@when"] instanceof Date, "the action's Date parameter");

await admin.deleteTopic(topic);
for (const name of [rs, a, b]) {
  await admin.deleteQueue(name);
}
console.log("admin parity ok");
