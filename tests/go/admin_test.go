package gosdk

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"
)

func TestAdminQueueLifecycle(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		ac := adminClient(t)
		q := name(t, "adm-q")
		created, err := ac.CreateQueue(ctx, q, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
			EnablePartitioning: to.Ptr(partitioned),
			LockDuration:       to.Ptr("PT45S"),
			MaxDeliveryCount:   to.Ptr(int32(7)),
		}})
		require.NoError(t, err)
		require.Equal(t, partitioned, *created.EnablePartitioning)
		require.Equal(t, "PT45S", *created.LockDuration)
		require.Equal(t, int32(7), *created.MaxDeliveryCount)

		got, err := ac.GetQueue(ctx, q, nil)
		require.NoError(t, err)
		require.NotNil(t, got)
		props := got.QueueProperties
		props.MaxDeliveryCount = to.Ptr(int32(9))
		updated, err := ac.UpdateQueue(ctx, q, props, nil)
		require.NoError(t, err)
		require.Equal(t, int32(9), *updated.MaxDeliveryCount)

		require.True(t, queueListed(t, ac, q), "listed")

		c := client(t)
		sender, err := c.NewSender(q, nil)
		require.NoError(t, err)
		require.NoError(t, sender.SendMessage(ctx, msg("counted"), nil))
		rt, err := ac.GetQueueRuntimeProperties(ctx, q, nil)
		require.NoError(t, err)
		require.EqualValues(t, 1, rt.ActiveMessageCount)

		_, err = ac.DeleteQueue(ctx, q, nil)
		require.NoError(t, err)
		missing, err := ac.GetQueue(ctx, q, nil)
		require.NoError(t, err)
		require.Nil(t, missing, "a deleted queue is gone")
	})
}

func TestAdminTopicSubscriptionRuleLifecycle(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		ac := adminClient(t)
		topic := name(t, "adm-t")
		created, err := ac.CreateTopic(ctx, topic, &admin.CreateTopicOptions{Properties: &admin.TopicProperties{
			EnablePartitioning: to.Ptr(partitioned),
		}})
		require.NoError(t, err)
		require.Equal(t, partitioned, *created.EnablePartitioning)
		sub, err := ac.CreateSubscription(ctx, topic, "sub", &admin.CreateSubscriptionOptions{
			Properties: &admin.SubscriptionProperties{MaxDeliveryCount: to.Ptr(int32(4)), RequiresSession: to.Ptr(true)},
		})
		require.NoError(t, err)
		require.Equal(t, int32(4), *sub.MaxDeliveryCount)
		require.True(t, *sub.RequiresSession)

		_, err = ac.CreateRule(ctx, topic, "sub", &admin.CreateRuleOptions{
			Name: to.Ptr("cheap"), Filter: &admin.SQLFilter{Expression: "price < 10"},
		})
		require.NoError(t, err)
		rule, err := ac.GetRule(ctx, topic, "sub", "cheap", nil)
		require.NoError(t, err)
		require.Equal(t, "price < 10", rule.Filter.(*admin.SQLFilter).Expression)
		names := []string{}
		pager := ac.NewListRulesPager(topic, "sub", nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			for _, r := range page.Rules {
				names = append(names, r.Name)
			}
		}
		require.ElementsMatch(t, []string{"$Default", "cheap"}, names)
		_, err = ac.DeleteRule(ctx, topic, "sub", "cheap", nil)
		require.NoError(t, err)
		missingRule, err := ac.GetRule(ctx, topic, "sub", "cheap", nil)
		require.NoError(t, err)
		require.Nil(t, missingRule)

		_, err = ac.DeleteSubscription(ctx, topic, "sub", nil)
		require.NoError(t, err)
		missingSub, err := ac.GetSubscription(ctx, topic, "sub", nil)
		require.NoError(t, err)
		require.Nil(t, missingSub)
		_, err = ac.DeleteTopic(ctx, topic, nil)
		require.NoError(t, err)
		missingTopic, err := ac.GetTopic(ctx, topic, nil)
		require.NoError(t, err)
		require.Nil(t, missingTopic)
	})
}
