// @testcontainers/azureservicebus (Node) on sbemu's image: the module as its users call it,
// with the image name changed. The module always starts an SQL Server container first
// (withMssqlContainer or its default mcr.microsoft.com/mssql/server image); sbemu needs none, so
// the placeholder is a container of sbemu's own image that only sleeps (no registry here; a user
// with a registry can pass any small image the same way). Run by
// tests/container/test_testcontainers_node.py with DOCKER_HOST on podman's Docker API.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";
import { AzureServiceBusContainer } from "@testcontainers/azureservicebus";
import { GenericContainer } from "testcontainers";

const image = process.env.SBEMU_IMAGE;
const label = process.env.SBEMU_TEST_LABEL; // the pytest side removes what a failed run left

const config = JSON.stringify({
  UserConfig: {
    Namespaces: [{ Name: "sbemulatorns", Queues: [{ Name: "tc-node" }], Topics: [] }],
    Logging: { Type: "Console" },
  },
});

test("AzureServiceBusContainer on sbemu's image sends and receives", async () => {
  const placeholder = new GenericContainer(image)
    .withCommand(["sleep", "infinity"])
    .withLabels({ "sbemu-test": label });
  const started = Date.now();
  const container = await new AzureServiceBusContainer(image)
    .acceptLicense()
    .withMssqlContainer(placeholder)
    .withConfig(config)
    .withLabels({ "sbemu-test": label })
    .start();
  console.log(`testcontainers start: ${((Date.now() - started) / 1000).toFixed(2)} s`);
  const client = new ServiceBusClient(container.getConnectionString());
  try {
    const body = `from @testcontainers/azureservicebus ${Date.now()}`;
    const sender = client.createSender("tc-node");
    await sender.sendMessages({ body });
    const receiver = client.createReceiver("tc-node");
    const got = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10000 });
    assert.deepEqual(got.map((m) => m.body), [body]);
    await receiver.completeMessage(got[0]);
  } finally {
    await client.close();
    await container.stop();
  }
});
