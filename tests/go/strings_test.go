package gosdk

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"
)

// TestAdminClientWithTheApplicationsStrings: the admin client given the application's own
// connection string, unchanged: (a) Azure's form (no emulator flag: HTTPS where Azure serves
// the management API, sbemu's WebSocket port, 443 under `make test-go`'s --azure-ports run
// where the string names no port) and (b) the string sbemu printed (UseDevelopmentEmulator=true;
// the admin client calls HTTPS on its host and port all the same, which sbemu's AMQP port
// answers).
func TestAdminClientWithTheApplicationsStrings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ form, variable string }{
		{"azure", "SBEMU_AZURE_CONNECTION_STRING"},
		{"printed", "SBEMU_CONNECTION_STRING"},
	} {
		t.Run(tc.form, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ac, err := admin.NewClientFromConnectionString(env(t, tc.variable), nil)
			require.NoError(t, err)
			q := name(t, "strings-"+tc.form)
			_, err = ac.CreateQueue(ctx, q, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
				MaxDeliveryCount: to.Ptr(int32(4)),
			}})
			require.NoError(t, err)
			got, err := ac.GetQueue(ctx, q, nil)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, int32(4), *got.MaxDeliveryCount)
			require.True(t, queueListed(t, ac, q), "listed")
			_, err = ac.DeleteQueue(ctx, q, nil)
			require.NoError(t, err)
		})
	}
}
