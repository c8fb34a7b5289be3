// Testcontainers for Go's Azure Service Bus module (modules/azure/servicebus) on sbemu's image,
// run by tests/container/test_testcontainers_go.py with DOCKER_HOST on podman's Docker API.
// The module always starts an SQL Server container (servicebus.WithMSSQL only changes its
// image and options); sbemu needs none, so that container is one of sbemu's own image that
// prints a line and sleeps (no registry here; a user with a registry can do the same with any
// small image). Its wait for the ports runs /bin/sh inside the sbemu container.
package containergo

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/azure/servicebus"
	"github.com/testcontainers/testcontainers-go/wait"
)

const config = `{
  "UserConfig": {
    "Namespaces": [{ "Name": "sbemulatorns", "Queues": [{ "Name": "tc-go" }], "Topics": [] }],
    "Logging": { "Type": "Console" }
  }
}`

func TestServiceBusModuleOnSbemuImage(t *testing.T) {
	image := os.Getenv("SBEMU_IMAGE")
	if image == "" {
		t.Fatal("SBEMU_IMAGE is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	labels := testcontainers.WithLabels(map[string]string{"sbemu-test": os.Getenv("SBEMU_TEST_LABEL")})
	started := time.Now()
	ctr, err := servicebus.Run(ctx, image,
		servicebus.WithAcceptEULA(),
		servicebus.WithConfig(strings.NewReader(config)),
		labels,
		servicebus.WithMSSQL(image,
			testcontainers.WithEntrypoint("/bin/sh", "-c",
				"trap 'exit 0' TERM; echo placeholder ready; sleep infinity & wait"),
			testcontainers.WithWaitStrategy(wait.ForLog("placeholder ready")),
			labels,
		),
	)
	defer func() {
		if ctr != nil {
			if err := ctr.Terminate(context.Background()); err != nil {
				t.Logf("terminate: %v", err)
			}
		}
	}()
	if err != nil {
		t.Fatalf("servicebus.Run: %v", err)
	}
	t.Logf("testcontainers start: %.2f s", time.Since(started).Seconds())

	conn, err := ctr.ConnectionString(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("tc-go", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := "from testcontainers-go " + time.Now().String()
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
		t.Fatal(err)
	}
	receiver, err := client.NewReceiverForQueue("tc-go", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(got[0].Body) != body {
		t.Fatalf("received %v, want one message %q", got, body)
	}
	if err := receiver.CompleteMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
}
