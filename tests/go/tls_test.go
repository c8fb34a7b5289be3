package gosdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"
)

func azureForm(t *testing.T) string {
	cs := regexp.MustCompile(`Endpoint=sb://[^;]+`).ReplaceAllString(env(t, "SBEMU_CONNECTION_STRING"), "Endpoint=sb://localhost/")
	return regexp.MustCompile(`;?UseDevelopmentEmulator=true`).ReplaceAllString(cs, "")
}

// TestAMQPSRefusedWithoutTheCA: a client that does not trust sbemu's CA (an empty root pool)
// refuses the server in its own TLS verification.
func TestAMQPSRefusedWithoutTheCA(t *testing.T) {
	t.Parallel()
	requireRefusedByTLS(t, &azservicebus.ClientOptions{
		CustomEndpoint: "localhost:" + env(t, "SBEMU_TLS_PORT"),
		TLSConfig:      &tls.Config{RootCAs: x509.NewCertPool()},
	})
}

// requireRefusedByTLS: a client made with options (which trust no root) and no retries fails
// its first send in its own verification of the server's certificate.
func requireRefusedByTLS(t *testing.T, options *azservicebus.ClientOptions) {
	options.RetryOptions = azservicebus.RetryOptions{MaxRetries: -1}
	c, err := azservicebus.NewClientFromConnectionString(azureForm(t), options)
	require.NoError(t, err)
	defer c.Close(context.Background())
	sender, err := c.NewSender("testQueue", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = sender.SendMessage(ctx, msg("never"), nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate signed by unknown authority")
}

// TestAMQPS: Azure's connection string form (Endpoint=sb://localhost/, no emulator flag) over
// TLS, trusting sbemu's CA through SSL_CERT_FILE. CustomEndpoint names this run's AMQPS port (a
// port in the Endpoint would become the TLS server name, which the certificate does not hold).
func TestAMQPS(t *testing.T) {
	t.Parallel()
	tlsPort := env(t, "SBEMU_TLS_PORT")
	require.NotEmpty(t, os.Getenv("SSL_CERT_FILE"))
	azureForm := azureForm(t)
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, nil)
		c, err := azservicebus.NewClientFromConnectionString(azureForm, &azservicebus.ClientOptions{CustomEndpoint: "localhost:" + tlsPort})
		require.NoError(t, err)
		defer c.Close(ctx)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		require.NoError(t, sender.SendMessage(ctx, msg("over-tls"), nil))
		r, err := c.NewReceiverForQueue(q, nil)
		require.NoError(t, err)
		got := receive(t, r, 1)
		require.Equal(t, []string{"over-tls"}, bodies(got))
		require.NoError(t, r.CompleteMessage(ctx, got[0], nil))
	})
}
