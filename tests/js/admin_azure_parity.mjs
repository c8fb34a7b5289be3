// The management plane as Microsoft's JS live suite found it unlike Azure (issue 36), with the
// unchanged @azure/service-bus: authorization rules come back in Azure's canonical XML (B), rules
// are listed in name order and a correlation rule with a Date property reads back (D), and a bare
// GET of the namespace root with a SAS token answers an Atom feed (G).
// Run by tests/integration/test_azure_parity.py::test_js_admin_parity with
// SBEMU_ADMIN_CONNECTION_STRING, SBEMU_CONNECTION_STRING and NODE_EXTRA_CA_CERTS set.
import { createRequire } from "node:module";
import { createHmac, randomBytes } from "node:crypto";
import { deepStrictEqual } from "node:assert/strict";

const require = createRequire(import.meta.url);
const { ServiceBusAdministrationClient, ServiceBusClient } = require("@azure/service-bus");

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

const adminString = process.env.SBEMU_ADMIN_CONNECTION_STRING;
const amqpString = process.env.SBEMU_CONNECTION_STRING;
check(adminString && amqpString, "SBEMU_ADMIN_CONNECTION_STRING and SBEMU_CONNECTION_STRING are set");
const admin = new ServiceBusAdministrationClient(adminString);
const suffix = randomBytes(4).toString("hex");

// B: a queue and a topic with authorization rules (Microsoft's "all properties except
// forwardTo"), read back by create, get and list.
const rules = [
  {
    claimType: "SharedAccessKey",
    accessRights: ["Manage", "Send", "Listen"],
    keyName: "allClaims_v2",
    primaryKey: randomBytes(32).toString("base64"),
    secondaryKey: randomBytes(32).toString("base64"),
  },
  {
    claimType: "SharedAccessKey",
    accessRights: ["Send"],
    keyName: "sendOnly",
    primaryKey: randomBytes(32).toString("base64"),
    secondaryKey: randomBytes(32).toString("base64"),
  },
];
const queue = `js-ap-q-${suffix}`;
const created = await admin.createQueue(queue, { authorizationRules: rules, lockDuration: "PT45S" });
deepStrictEqual(created.authorizationRules, rules, "createQueue answers the rules");
deepStrictEqual((await admin.getQueue(queue)).authorizationRules, rules, "getQueue reads them back");
const topic = `js-ap-t-${suffix}`;
await admin.createTopic(topic, { authorizationRules: rules.slice(1) });
deepStrictEqual((await admin.getTopic(topic)).authorizationRules, rules.slice(1), "getTopic");
let listed = false;
for await (const q of admin.listQueues()) {
  if (q.name === queue) {
    deepStrictEqual(q.authorizationRules, rules, "listQueues reads them too");
    listed = true;
  }
}
check(listed, `listQueues lists ${queue}`);

// D: rules in name order; a Date-valued correlation property created over AMQP reads back
// through the Atom API as the same Date.
await admin.createSubscription(topic, "s1");
await admin.createRule(topic, "s1", "sqlRule", { sqlExpression: "price > 10" });
const when = new Date("2000-01-01T00:00:00Z");
const client = new ServiceBusClient(amqpString);
try {
  await client.createRuleManager(topic, "s1").createRule("correlationRule", {
    correlationId: "c",
    applicationProperties: { key1: "value1", key4: when },
  });
} finally {
  await client.close();
}
const names = [];
for await (const r of admin.listRules(topic, "s1")) names.push(r.name);
deepStrictEqual(names, ["$Default", "correlationRule", "sqlRule"], "listRules in name order");
const rule = await admin.getRule(topic, "s1", "correlationRule");
deepStrictEqual(rule.filter.applicationProperties, { key1: "value1", key4: when }, "getRule Date");

// G: GET / with the SDK's SAS header and no api-version is the management API's Atom feed.
const endpoint = /Endpoint=sb:\/\/([^/;]+)/.exec(adminString)[1];
const keyName = /SharedAccessKeyName=([^;]+)/.exec(adminString)[1];
const key = /SharedAccessKey=([^;]+)/.exec(adminString)[1];
const sr = encodeURIComponent(`https://${endpoint}/`);
const se = Math.floor(Date.now() / 1000) + 3600;
const sig = createHmac("sha256", key).update(`${sr}\n${se}`).digest("base64");
const token = `SharedAccessSignature sr=${sr}&sig=${encodeURIComponent(sig)}&se=${se}&skn=${keyName}`;
const atom = await fetch(`https://${endpoint}/`, { headers: { authorization: token } });
const text = await atom.text();
check(atom.status === 200, `GET / with SAS: ${atom.status}`);
check(/atom\+xml/.test(atom.headers.get("content-type")), `content-type ${atom.headers.get("content-type")}`);
check(text.startsWith("<?xml") && text.includes("<feed"), `an Atom feed: ${text.slice(0, 200)}`);

await admin.deleteTopic(topic);
await admin.deleteQueue(queue);
console.log("admin parity ok");
