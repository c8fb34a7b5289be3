package gosdk

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"
)

func sendToSession(t *testing.T, c *azservicebus.Client, q string, session string, bodies ...string) {
	sender, err := c.NewSender(q, nil)
	require.NoError(t, err)
	defer sender.Close(context.Background())
	for _, b := range bodies {
		m := msg(b)
		m.SessionID = to.Ptr(session)
		require.NoError(t, sender.SendMessage(context.Background(), m, nil))
	}
}

func TestNamedSessionInOrderWithState(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, &admin.QueueProperties{RequiresSession: to.Ptr(true)})
		c := client(t)
		sendToSession(t, c, q, "s-a", "a1", "a2", "a3")
		sendToSession(t, c, q, "s-b", "b1")

		a, err := c.AcceptSessionForQueue(ctx, q, "s-a", nil)
		require.NoError(t, err)
		require.Equal(t, "s-a", a.SessionID())
		got := receive(t, a, 3)
		order := []string{}
		for _, m := range got {
			order = append(order, string(m.Body))
			require.Equal(t, "s-a", *m.SessionID)
			require.NoError(t, a.CompleteMessage(ctx, m, nil))
		}
		require.Equal(t, []string{"a1", "a2", "a3"}, order, "one session's messages in their order")

		state, err := a.GetSessionState(ctx, nil)
		require.NoError(t, err)
		require.Nil(t, state)
		require.NoError(t, a.SetSessionState(ctx, []byte("step=2"), nil))
		before := a.LockedUntil()
		require.NoError(t, a.RenewSessionLock(ctx, nil))
		require.False(t, a.LockedUntil().Before(before))
		require.NoError(t, a.Close(ctx))

		again, err := c.AcceptSessionForQueue(ctx, q, "s-a", nil)
		require.NoError(t, err)
		state, err = again.GetSessionState(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, []byte("step=2"), state, "the state outlives the receiver")
		require.NoError(t, again.Close(ctx))

		// get-message-sessions: the sessions that hold messages or state
		pager := c.NewListSessionsForQueuePager(q, nil)
		ids := map[string]bool{}
		for pager.More() {
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			for _, id := range page.Sessions {
				ids[id] = true
			}
		}
		require.True(t, ids["s-a"] && ids["s-b"], "sessions listed: %v", ids)
	})
}

func TestNextAvailableSession(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, &admin.QueueProperties{RequiresSession: to.Ptr(true)})
		c := client(t)
		sendToSession(t, c, q, "n-1", "x1", "x2")
		sendToSession(t, c, q, "n-2", "y1")
		bySession := map[string][]string{}
		for i := 0; i < 2; i++ {
			s, err := c.AcceptNextSessionForQueue(ctx, q, nil)
			require.NoError(t, err)
			count := 1
			if s.SessionID() == "n-1" {
				count = 2
			}
			for _, m := range receive(t, s, count) {
				bySession[s.SessionID()] = append(bySession[s.SessionID()], string(m.Body))
				require.NoError(t, s.CompleteMessage(ctx, m, nil))
			}
			// keep the session locked until both are taken, so the second call gets the other
		}
		require.Equal(t, map[string][]string{"n-1": {"x1", "x2"}, "n-2": {"y1"}}, bySession)
	})
}
