package gosdk

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"
)

func TestSendBatchReceiveCompleteAbandonPeek(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, nil)
		c := client(t)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		batch, err := sender.NewMessageBatch(ctx, nil)
		require.NoError(t, err)
		for _, b := range []string{"m0", "m1", "m2", "m3"} {
			m := msg(b)
			m.Subject = to.Ptr("batch")
			m.ApplicationProperties = map[string]any{"n": int64(7), "s": "x"}
			require.NoError(t, batch.AddMessage(m, nil))
		}
		require.NoError(t, sender.SendMessageBatch(ctx, batch, nil))
		require.NoError(t, sender.SendMessage(ctx, msg("m4"), nil))

		r, err := c.NewReceiverForQueue(q, nil)
		require.NoError(t, err)
		peeked, err := r.PeekMessages(ctx, 5, nil)
		require.NoError(t, err)
		require.Len(t, peeked, 5)
		got := receive(t, r, 5)
		require.Equal(t, []string{"m0", "m1", "m2", "m3", "m4"}, bodies(got))
		for _, m := range got {
			if m.MessageID == "m0" {
				require.Equal(t, "batch", *m.Subject)
				require.Equal(t, int64(7), m.ApplicationProperties["n"])
			}
			require.True(t, m.LockedUntil.After(time.Now()))
		}
		require.NoError(t, r.AbandonMessage(ctx, got[0], nil))
		for _, m := range got[1:] {
			require.NoError(t, r.CompleteMessage(ctx, m, nil))
		}
		again := receive(t, r, 1)
		require.Equal(t, got[0].MessageID, again[0].MessageID)
		require.Equal(t, uint32(2), again[0].DeliveryCount, "an abandoned message comes again")
		require.NoError(t, r.CompleteMessage(ctx, again[0], nil))
		require.Empty(t, receiveNone(t, r))
	})
}

func TestScheduleAndCancel(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, nil)
		c := client(t)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		soon := time.Now().Add(3 * time.Second)
		seqs, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{msg("kept")}, soon, nil)
		require.NoError(t, err)
		require.Len(t, seqs, 1)
		// due in an hour: still scheduled when peeked, however slow this machine is
		later, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{msg("cancelled")}, soon.Add(time.Hour), nil)
		require.NoError(t, err)
		seqs = append(seqs, later...)
		r, err := c.NewReceiverForQueue(q, nil)
		require.NoError(t, err)
		peeked, err := r.PeekMessages(ctx, 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &seqs[1]})
		require.NoError(t, err)
		require.Len(t, peeked, 1)
		require.Equal(t, azservicebus.MessageStateScheduled, peeked[0].State)
		require.NoError(t, sender.CancelScheduledMessages(ctx, seqs[1:], nil))
		got := receive(t, r, 1)
		require.Equal(t, []string{"kept"}, bodies(got))
		require.False(t, time.Now().Before(soon.Add(-500*time.Millisecond)), "not before its time")
		require.NoError(t, r.CompleteMessage(ctx, got[0], nil))
		require.Empty(t, receiveNone(t, r), "the cancelled message never comes")
	})
}

func TestDeferral(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, nil)
		c := client(t)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		require.NoError(t, sender.SendMessage(ctx, msg("later"), nil))
		r, err := c.NewReceiverForQueue(q, nil)
		require.NoError(t, err)
		m := receive(t, r, 1)[0]
		// azservicebus shows the header's delivery-count plus one: 1 on a first delivery
		require.Equal(t, uint32(1), m.DeliveryCount)
		require.NoError(t, r.DeferMessage(ctx, m, nil))
		require.Empty(t, receiveNone(t, r))
		deferred, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
		require.NoError(t, err)
		require.Len(t, deferred, 1)
		require.Equal(t, azservicebus.MessageStateDeferred, deferred[0].State)
		// the delivery that ended in the deferral counts, as on Azure (issue 36 A)
		require.Equal(t, uint32(2), deferred[0].DeliveryCount)
		require.NoError(t, r.CompleteMessage(ctx, deferred[0], nil))
	})
}

func TestDeadLettering(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, &admin.QueueProperties{MaxDeliveryCount: to.Ptr(int32(2))})
		c := client(t)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		r, err := c.NewReceiverForQueue(q, nil)
		require.NoError(t, err)
		dlq, err := c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		require.NoError(t, err)

		require.NoError(t, sender.SendMessage(ctx, msg("bad"), nil))
		m := receive(t, r, 1)[0]
		require.NoError(t, r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{
			Reason: to.Ptr("Invalid"), ErrorDescription: to.Ptr("no schema"),
		}))
		dead := receive(t, dlq, 1)[0]
		require.Equal(t, "bad", string(dead.Body))
		require.Equal(t, "Invalid", *dead.DeadLetterReason)
		require.Equal(t, "no schema", *dead.DeadLetterErrorDescription)
		require.NoError(t, dlq.CompleteMessage(ctx, dead, nil))

		require.NoError(t, sender.SendMessage(ctx, msg("poison"), nil))
		for i := 0; i < 2; i++ {
			require.NoError(t, r.AbandonMessage(ctx, receive(t, r, 1)[0], nil))
		}
		poisoned := receive(t, dlq, 1)[0]
		require.Equal(t, "poison", string(poisoned.Body))
		require.Equal(t, "MaxDeliveryCountExceeded", *poisoned.DeadLetterReason)
		require.NoError(t, dlq.CompleteMessage(ctx, poisoned, nil))
	})
}

func TestLockRenewal(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, &admin.QueueProperties{LockDuration: to.Ptr("PT5S")})
		c := client(t)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		require.NoError(t, sender.SendMessage(ctx, msg("long job"), nil))
		r, err := c.NewReceiverForQueue(q, nil)
		require.NoError(t, err)
		m := receive(t, r, 1)[0]
		first := *m.LockedUntil
		time.Sleep(2 * time.Second)
		require.NoError(t, r.RenewMessageLock(ctx, m, nil))
		require.True(t, m.LockedUntil.After(first), "%s after %s", m.LockedUntil, first)
		time.Sleep(2 * time.Second)
		require.NoError(t, r.RenewMessageLock(ctx, m, nil))
		time.Sleep(2 * time.Second)
		// 6 s after the receive, past the 5 s lock duration: the lock still holds
		require.NoError(t, r.CompleteMessage(ctx, m, nil))
		require.Empty(t, receiveNone(t, r))
	})
}

// Receive-and-delete deliveries carry an empty delivery tag, written as a zero-length binary:
// go-amqp closes the link on a first transfer whose tag is null (issue 23).
func TestReceiveAndDelete(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		q := newQueue(t, partitioned, nil)
		c := client(t)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		for _, b := range []string{"d0", "d1", "d2"} {
			require.NoError(t, sender.SendMessage(ctx, msg(b), nil))
		}
		r, err := c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{
			ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
		})
		require.NoError(t, err)
		got := receive(t, r, 3)
		require.Equal(t, []string{"d0", "d1", "d2"}, bodies(got))
		for _, m := range got {
			require.Nil(t, m.LockedUntil, "no lock in receive-and-delete mode")
		}
		require.Empty(t, receiveNone(t, r))
		// gone from the queue: a peek-lock receiver finds nothing
		locked, err := c.NewReceiverForQueue(q, nil)
		require.NoError(t, err)
		require.Empty(t, receiveNone(t, locked))
	})
}

// The header comes back as sent: first-acquirer and durable true (issue 36 C: sbemu dropped
// first-acquirer; Microsoft's JS suite sends both and reads them back).
func TestHeaderAsSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newQueue(t, false, nil)
	c := client(t)
	sender, err := c.NewSender(q, nil)
	require.NoError(t, err)
	require.NoError(t, sender.SendAMQPAnnotatedMessage(ctx, &azservicebus.AMQPAnnotatedMessage{
		Body:   azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("h")}},
		Header: &azservicebus.AMQPAnnotatedMessageHeader{Durable: true, FirstAcquirer: true, Priority: 4},
	}, nil))
	r, err := c.NewReceiverForQueue(q, nil)
	require.NoError(t, err)
	m := receive(t, r, 1)[0]
	header := m.RawAMQPMessage.Header
	require.NotNil(t, header)
	require.True(t, header.Durable)
	require.True(t, header.FirstAcquirer)
	require.Equal(t, uint8(4), header.Priority)
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}
