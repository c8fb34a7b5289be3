// One round trip with the unchanged @azure/service-bus SDK over a transport a user picks:
//   node transport_client.mjs <amqps|wss> <connection string> <queue> <session queue>
// amqps: TLS on the Endpoint's port; wss: webSocketOptions with the `ws` package (Node has no
// WebSocket of its own in the SDK's eyes). Trust comes from the environment, as for a user:
// NODE_EXTRA_CA_CERTS=<sbemu's rootCA.pem>. Prints one JSON line: what was received, or the
// error (name, code, message) when the connection failed.
import { ServiceBusClient } from "@azure/service-bus";
import WebSocket from "ws";

const [mode, connectionString, queue, sessionQueue] = process.argv.slice(2);
const options = { retryOptions: { maxRetries: 0, timeoutInMs: 15_000 } };
if (mode === "wss") options.webSocketOptions = { webSocket: WebSocket };

const client = new ServiceBusClient(connectionString, options);
try {
  const sender = client.createSender(queue);
  await sender.sendMessages({ body: `over ${mode}` });
  await sender.close();
  const receiver = client.createReceiver(queue);
  const got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  for (const m of got) await receiver.completeMessage(m);
  const after = await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 });
  await receiver.close();

  const sessionSender = client.createSender(sessionQueue);
  await sessionSender.sendMessages({ body: "in a session", sessionId: `s-${mode}` });
  await sessionSender.close();
  const session = await client.acceptNextSession(sessionQueue);
  await session.setSessionState(`state over ${mode}`);
  const inSession = await session.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  for (const m of inSession) await session.completeMessage(m);
  const state = await session.getSessionState();
  await session.close();
  console.log(JSON.stringify({
    received: got.map((m) => m.body),
    left: after.length,
    session: session.sessionId,
    sessionBodies: inSession.map((m) => m.body),
    state: String(state),
  }));
} catch (err) {
  console.log(JSON.stringify({ error: { name: err.name, code: err.code, message: String(err.message) } }));
} finally {
  await client.close();
}
