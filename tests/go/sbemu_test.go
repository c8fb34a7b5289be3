// Package gosdk drives sbemu with the unchanged Azure Service Bus Go SDK (azservicebus and its
// admin package). `make test-go` runs it against a real sbemu that tests/sdk_run.py starts; the
// connection strings come in the environment. Every test makes its own entities, so they run
// in parallel.
package gosdk

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"
)

const wait = 10 * time.Second

func env(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the suite with `make test-go`", name)
	}
	return v
}

// client is an AMQP client over plain TCP (the connection string has UseDevelopmentEmulator=true).
func client(t *testing.T) *azservicebus.Client {
	c, err := azservicebus.NewClientFromConnectionString(env(t, "SBEMU_CONNECTION_STRING"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// adminClient speaks HTTPS to sbemu's admin port; Go's crypto/x509 trusts sbemu's CA through
// SSL_CERT_FILE (a bundle tests/sdk_run.py writes).
func adminClient(t *testing.T) *admin.Client {
	c, err := admin.NewClientFromConnectionString(env(t, "SBEMU_ADMIN_CONNECTION_STRING"), nil)
	require.NoError(t, err)
	return c
}

var nameChars = regexp.MustCompile(`[^a-z0-9-]+`)

func name(t *testing.T, prefix string) string {
	base := nameChars.ReplaceAllString(fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()), "-")
	return base
}

func kinds() []bool { return []bool{false, true} }

func kindName(partitioned bool) string {
	if partitioned {
		return "partitioned"
	}
	return "plain"
}

// forKinds runs body as parallel subtests, "plain" and "partitioned", on entities of that kind.
func forKinds(t *testing.T, body func(t *testing.T, partitioned bool)) {
	for _, partitioned := range kinds() {
		t.Run(kindName(partitioned), func(t *testing.T) {
			t.Parallel()
			body(t, partitioned)
		})
	}
}

func newQueue(t *testing.T, partitioned bool, props *admin.QueueProperties) string {
	if props == nil {
		props = &admin.QueueProperties{}
	}
	props.EnablePartitioning = to.Ptr(partitioned)
	if props.LockDuration == nil {
		props.LockDuration = to.Ptr("PT30S")
	}
	q := name(t, "gq")
	_, err := adminClient(t).CreateQueue(context.Background(), q, &admin.CreateQueueOptions{Properties: props})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = adminClient(t).DeleteQueue(context.Background(), q, nil) })
	return q
}

func newTopic(t *testing.T, partitioned bool) string {
	topic := name(t, "gt")
	_, err := adminClient(t).CreateTopic(context.Background(), topic, &admin.CreateTopicOptions{
		Properties: &admin.TopicProperties{EnablePartitioning: to.Ptr(partitioned)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = adminClient(t).DeleteTopic(context.Background(), topic, nil) })
	return topic
}

// queueListed tells whether the admin client's queue listing, all pages of it, holds queue q.
func queueListed(t *testing.T, ac *admin.Client, q string) bool {
	found := false
	pager := ac.NewListQueuesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		for _, item := range page.Queues {
			found = found || item.QueueName == q
		}
	}
	return found
}

func msg(body string) *azservicebus.Message {
	return &azservicebus.Message{Body: []byte(body), MessageID: to.Ptr(body)}
}

type receiver interface {
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// receive gets `count` messages, or fails after `wait`.
func receive(t *testing.T, r receiver, count int) []*azservicebus.ReceivedMessage {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var got []*azservicebus.ReceivedMessage
	for len(got) < count {
		batch, err := r.ReceiveMessages(ctx, count-len(got), nil)
		if ctx.Err() != nil {
			t.Fatalf("received %d of %d messages in %s", len(got), count, wait)
		}
		require.NoError(t, err)
		got = append(got, batch...)
	}
	return got
}

// receiveNone returns what arrives within two seconds (for "nothing comes").
func receiveNone(t *testing.T, r receiver) []*azservicebus.ReceivedMessage {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := r.ReceiveMessages(ctx, 10, nil)
	if ctx.Err() == nil {
		require.NoError(t, err)
	}
	return got
}

func bodies(messages []*azservicebus.ReceivedMessage) []string {
	out := []string{}
	for _, m := range messages {
		out = append(out, string(m.Body))
	}
	sort.Strings(out)
	return out
}
