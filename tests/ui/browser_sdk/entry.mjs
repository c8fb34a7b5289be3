// The browser page's script: the unchanged @azure/service-bus, bundled by esbuild (build.mjs).
// In a browser the SDK speaks AMQP over WebSockets only (the page's own WebSocket, to
// wss://<host>:<Endpoint port>/$servicebus/websocket): sbemu serves that path on its admin port.
import { ServiceBusClient } from "@azure/service-bus";

/** Send, receive, complete, and a session with state; a JSON-able report of what happened. */
async function scenario(connectionString, queue, sessionQueue) {
  const client = new ServiceBusClient(connectionString, {
    retryOptions: { maxRetries: 0, timeoutInMs: 20_000 },
  });
  try {
    const sender = client.createSender(queue);
    await sender.sendMessages([{ body: "from the page" }, { body: { json: true, n: 2 } }]);
    await sender.close();
    const receiver = client.createReceiver(queue);
    const got = [];
    const deadline = Date.now() + 15_000;
    while (got.length < 2 && Date.now() < deadline) {
      got.push(...(await receiver.receiveMessages(2 - got.length, { maxWaitTimeInMs: 2_000 })));
    }
    for (const m of got) await receiver.completeMessage(m);
    const left = await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 });
    await receiver.close();

    const sessionSender = client.createSender(sessionQueue);
    await sessionSender.sendMessages([
      { body: "first", sessionId: "browser-session" },
      { body: "second", sessionId: "browser-session" },
    ]);
    await sessionSender.close();
    const session = await client.acceptSession(sessionQueue, "browser-session");
    await session.setSessionState("set by the page");
    const inSession = await session.receiveMessages(2, { maxWaitTimeInMs: 10_000 });
    for (const m of inSession) await session.completeMessage(m);
    const state = await session.getSessionState();
    await session.close();
    return {
      received: got.map((m) => m.body),
      left: left.length,
      session: inSession.map((m) => m.body),
      state: String(state),
      webSocket: typeof WebSocket,
    };
  } catch (err) {
    return { error: { name: err.name, code: err.code, message: String(err.message) } };
  } finally {
    await client.close();
  }
}

window.sbemuScenario = scenario;
window.sbemuReady = true;
