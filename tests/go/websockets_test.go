package gosdk

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// webSocketConn is a ClientOptions.NewWebSocketConn over github.com/coder/websocket (the
// library the SDK's own example uses). The SDK asks for wss://<Endpoint host>/$servicebus/websocket
// (port 443); dialing another port means naming it here, as docs/clients.md shows. subprotocol
// is Service Bus's AMQPWSB10, or "amqp" (the OASIS binding's name, which the SDK's example sends).
func webSocketConn(port, subprotocol string, client *http.Client) func(context.Context, azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
	return func(ctx context.Context, args azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
		u, err := url.Parse(args.Host)
		if err != nil {
			return nil, err
		}
		u.Host = u.Hostname() + ":" + port
		ws, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
			Subprotocols: []string{subprotocol},
			HTTPClient:   client,
		})
		if err != nil {
			return nil, err
		}
		// the net.Conn outlives the dial's context: it lives as long as the AMQP connection
		return websocket.NetConn(context.Background(), ws, websocket.MessageBinary), nil
	}
}

// adminPort is the port of SBEMU_ADMIN_CONNECTION_STRING's endpoint (sb://localhost:PORT).
func adminPort(t *testing.T) string {
	m := regexp.MustCompile(`Endpoint=sb://[^:;/]+:(\d+)`).FindStringSubmatch(env(t, "SBEMU_ADMIN_CONNECTION_STRING"))
	require.NotNil(t, m, "no port in SBEMU_ADMIN_CONNECTION_STRING")
	return m[1]
}

// wssClient is an azservicebus client over AMQP over WebSockets with TLS, Azure's connection
// string form (no emulator flag), trusting sbemu's CA through SSL_CERT_FILE (Go's default HTTP
// client reads it), on the WebSocket port or the admin port (both serve the upgrade).
func wssClient(t *testing.T, port, subprotocol string) *azservicebus.Client {
	c, err := azservicebus.NewClientFromConnectionString(azureForm(t), &azservicebus.ClientOptions{
		NewWebSocketConn: webSocketConn(port, subprotocol, nil),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestWebSockets: send (one and a batch), receive, complete, abandon and redelivery, and a
// 200 KB message, over wss on plain and partitioned queues, through sbemu's WebSocket port
// (AMQPWSB10) and its admin port (the OASIS "amqp" subprotocol, as in the SDK's own example).
func TestWebSockets(t *testing.T) {
	t.Parallel()
	ports := map[string][2]string{
		"ws-port":    {env(t, "SBEMU_WS_PORT"), "AMQPWSB10"},
		"admin-port": {adminPort(t), "amqp"},
	}
	for where, port := range ports {
		for _, partitioned := range kinds() {
			t.Run(where+"/"+kindName(partitioned), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				q := newQueue(t, partitioned, nil)
				c := wssClient(t, port[0], port[1])
				sender, err := c.NewSender(q, nil)
				require.NoError(t, err)
				batch, err := sender.NewMessageBatch(ctx, nil)
				require.NoError(t, err)
				for _, b := range []string{"wss-1", "wss-2"} {
					require.NoError(t, batch.AddMessage(msg(b), nil))
				}
				require.NoError(t, sender.SendMessageBatch(ctx, batch, nil))
				require.NoError(t, sender.SendMessage(ctx, msg("wss-3"), nil))
				r, err := c.NewReceiverForQueue(q, nil)
				require.NoError(t, err)
				got := receive(t, r, 3)
				require.Equal(t, []string{"wss-1", "wss-2", "wss-3"}, bodies(got))
				for _, m := range got[1:] {
					require.NoError(t, r.CompleteMessage(ctx, m, nil))
				}
				require.NoError(t, r.AbandonMessage(ctx, got[0], nil))
				again := receive(t, r, 1)
				require.Equal(t, string(got[0].Body), string(again[0].Body))
				require.Equal(t, uint32(2), again[0].DeliveryCount)
				require.NoError(t, r.CompleteMessage(ctx, again[0], nil))

				// 200 KB: several AMQP frames, each its own WebSocket message, both ways
				big := make([]byte, 200*1024)
				_, _ = rand.Read(big)
				require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{Body: big}, nil))
				gotBig := receive(t, r, 1)
				require.True(t, bytes.Equal(big, gotBig[0].Body), "the 200 KB body came back changed")
				require.NoError(t, r.CompleteMessage(ctx, gotBig[0], nil))
				require.Empty(t, receiveNone(t, r))
				require.NoError(t, r.Close(ctx))
				require.NoError(t, sender.Close(ctx))
			})
		}
	}
}

// TestWebSocketsSession: a named session with state and the next available session over wss.
func TestWebSocketsSession(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, &admin.QueueProperties{RequiresSession: to.Ptr(true)})
		c := wssClient(t, env(t, "SBEMU_WS_PORT"), "AMQPWSB10")
		sendToSession(t, c, q, "ws-a", "a1", "a2")
		sendToSession(t, c, q, "ws-b", "b1")

		a, err := c.AcceptSessionForQueue(ctx, q, "ws-a", nil)
		require.NoError(t, err)
		got := receive(t, a, 2)
		order := []string{}
		for _, m := range got {
			order = append(order, string(m.Body))
			require.NoError(t, a.CompleteMessage(ctx, m, nil))
		}
		require.Equal(t, []string{"a1", "a2"}, order)
		require.NoError(t, a.SetSessionState(ctx, []byte("over-wss"), nil))
		state, err := a.GetSessionState(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, []byte("over-wss"), state)
		require.NoError(t, a.Close(ctx))

		next, err := c.AcceptNextSessionForQueue(ctx, q, nil)
		require.NoError(t, err)
		require.Equal(t, "ws-b", next.SessionID())
		b := receive(t, next, 1)
		require.Equal(t, []string{"b1"}, bodies(b))
		require.NoError(t, next.CompleteMessage(ctx, b[0], nil))
		require.NoError(t, next.Close(ctx))
	})
}

// TestWebSocketsRefusedWithoutTheCA: a WebSocket dial that does not trust sbemu's CA (an empty
// root pool) is refused by Go's own TLS verification.
func TestWebSocketsRefusedWithoutTheCA(t *testing.T) {
	t.Parallel()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{RootCAs: x509.NewCertPool()}
	requireRefusedByTLS(t, &azservicebus.ClientOptions{
		NewWebSocketConn: webSocketConn(env(t, "SBEMU_WS_PORT"), "AMQPWSB10", &http.Client{Transport: transport}),
	})
}
