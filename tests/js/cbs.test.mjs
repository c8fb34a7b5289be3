// $cbs against the entities that exist (issue 23), with the unchanged @azure/service-bus: a
// queue's own SAS rule, added through the admin API (AuthorizationRules), is good for that
// queue only (item 7); a token for a queue that does not exist is refused (item 8: the SDK
// reads Azure's 404 "could not be found" as MessagingEntityNotFound).
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import {
  KEY, KEY_NAME, assertCleanLog, configOf, namespaceDef, queueDef, receiveN, startServer,
} from "./support.mjs";

const SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
const XSI = "http://www.w3.org/2001/XMLSchema-instance";
const RULE_KEY = randomBytes(32).toString("base64");

let server;

/** A SAS token as the SDKs sign one (encodeURIComponent of the resource, HMAC-SHA256). */
function sasToken(resource, keyName, key) {
  const sr = encodeURIComponent(resource);
  const se = Math.floor(Date.now() / 1000) + 3600;
  const sig = createHmac("sha256", key).update(`${sr}\n${se}`).digest("base64");
  return `SharedAccessSignature sr=${sr}&sig=${encodeURIComponent(sig)}&se=${se}&skn=${keyName}`;
}

/** PUT a queue description through the admin API (Atom XML, plain HTTP on loopback). */
async function putQueue(name, inner) {
  const body =
    `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
    `<QueueDescription xmlns="${SB}" xmlns:i="${XSI}">${inner}</QueueDescription></content></entry>`;
  const res = await fetch(`http://127.0.0.1:${server.adminPort}/${name}`, {
    method: "PUT",
    headers: {
      Authorization: sasToken(`sb://localhost:${server.adminPort}/`, KEY_NAME, KEY),
      "Content-Type": "application/atom+xml",
    },
    body,
  });
  assert.equal(res.status, 201, await res.text());
}

function ruleConnectionString(entity) {
  return `${server.connectionString("js-rule", RULE_KEY)}EntityPath=${entity};`;
}

before(async () => {
  server = await startServer(configOf([namespaceDef([queueDef("plain")])]));
  await putQueue(
    "ruled",
    `<AuthorizationRules><AuthorizationRule i:type="SharedAccessAuthorizationRule">` +
      `<ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>` +
      `<Rights><AccessRights>Send</AccessRights><AccessRights>Listen</AccessRights></Rights>` +
      `<KeyName>js-rule</KeyName><PrimaryKey>${RULE_KEY}</PrimaryKey>` +
      `<SecondaryKey>${RULE_KEY}</SecondaryKey></AuthorizationRule></AuthorizationRules>`,
  );
});

after(async () => {
  if (server) assertCleanLog((await server.stop()).stderr);
});

describe("$cbs", () => {
  it("honours a queue's own SAS rule for that queue", async () => {
    const client = new ServiceBusClient(ruleConnectionString("ruled"), { retryOptions: { maxRetries: 0 } });
    try {
      const sender = client.createSender("ruled");
      await sender.sendMessages({ body: "by the queue's rule" });
      await sender.close();
      const receiver = client.createReceiver("ruled");
      const [m] = await receiveN(receiver, 1);
      assert.equal(m.body, "by the queue's rule");
      await receiver.completeMessage(m);
      await receiver.close();
    } finally {
      await client.close();
    }
  });

  it("does not honour it for another queue", async () => {
    const client = new ServiceBusClient(ruleConnectionString("plain"), { retryOptions: { maxRetries: 0 } });
    try {
      const sender = client.createSender("plain");
      await assert.rejects(sender.sendMessages({ body: "x" }), (err) => err.code === "UnauthorizedAccess");
    } finally {
      await client.close();
    }
  });

  it("refuses a token for a queue that does not exist", async () => {
    const client = new ServiceBusClient(server.connectionString(), { retryOptions: { maxRetries: 0 } });
    try {
      const sender = client.createSender("no-such-queue");
      await assert.rejects(sender.sendMessages({ body: "x" }), (err) => {
        assert.equal(err.code, "MessagingEntityNotFound", err.message);
        assert.match(err.message, /The messaging entity '.*no-such-queue' could not be found/);
        return true;
      });
    } finally {
      await client.close();
    }
  });
});
