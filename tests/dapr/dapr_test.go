// Package dapr drives sbemu with Dapr's Azure Service Bus pub/sub components
// (github.com/dapr/components-contrib pubsub/azure/servicebus/queues and topics), unchanged, with
// entity management on (Dapr's default): the component hands the connection string sbemu prints
// (UseDevelopmentEmulator=true) to both its AMQP client and its admin client, and creates the
// queue, topic and subscription it needs through the management API before it publishes.
//
// `make test-dapr` runs it against a real sbemu that tests/sdk_run.py starts (the connection
// string and a CA bundle in the environment).
package dapr

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dapr/components-contrib/metadata"
	"github.com/dapr/components-contrib/pubsub"
	"github.com/dapr/components-contrib/pubsub/azure/servicebus/queues"
	"github.com/dapr/components-contrib/pubsub/azure/servicebus/topics"
	"github.com/dapr/kit/logger"
)

const wait = 30 * time.Second

func connectionString(t *testing.T) string {
	v := os.Getenv("SBEMU_CONNECTION_STRING")
	if v == "" {
		t.Fatal("SBEMU_CONNECTION_STRING is not set: run with `make test-dapr`")
	}
	return v
}

// roundTrip publishes `count` messages to `topic` (a queue or a topic no configuration names:
// entity management creates it) and waits until the subscription handler saw them all.
func roundTrip(t *testing.T, ps pubsub.PubSub, props map[string]string, topic string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	if err := ps.Init(ctx, pubsub.Metadata{Base: metadata.Base{Name: "sbemu", Properties: props}}); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() { _ = ps.Close() })

	got := make(chan string, count)
	handler := func(_ context.Context, msg *pubsub.NewMessage) error {
		got <- string(msg.Data)
		return nil
	}
	if err := ps.Subscribe(ctx, pubsub.SubscribeRequest{Topic: topic}, handler); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	for i := 0; i < count; i++ {
		req := &pubsub.PublishRequest{PubsubName: "sbemu", Topic: topic, Data: []byte(fmt.Sprintf("m%d", i))}
		if err := ps.Publish(ctx, req); err != nil {
			t.Fatalf("Publish %d: %v", i, err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < count {
		select {
		case body := <-got:
			seen[body] = true
		case <-ctx.Done():
			t.Fatalf("received %d of %d messages: %v", len(seen), count, seen)
		}
	}
}

func name(prefix string) string { return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()) }

func TestQueuesWithEntityManagement(t *testing.T) {
	props := map[string]string{"connectionString": connectionString(t)} // disableEntityManagement: false
	roundTrip(t, queues.NewAzureServiceBusQueues(logger.NewLogger("dapr-queues")), props, name("dapr-q"), 5)
}

func TestTopicsWithEntityManagement(t *testing.T) {
	props := map[string]string{"connectionString": connectionString(t), "consumerID": "dapr-app"}
	roundTrip(t, topics.NewAzureServiceBusTopics(logger.NewLogger("dapr-topics")), props, name("dapr-t"), 5)
}
