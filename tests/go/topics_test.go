package gosdk

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"
)

func order(id, region string, amount int64, subject string) *azservicebus.Message {
	m := msg(id)
	m.Subject = to.Ptr(subject)
	m.CorrelationID = to.Ptr("corr-" + region)
	m.ApplicationProperties = map[string]any{"region": region, "amount": amount}
	return m
}

func subscriptionWithRule(t *testing.T, topic, sub string, rule *admin.CreateRuleOptions) {
	ctx := context.Background()
	ac := adminClient(t)
	_, err := ac.CreateSubscription(ctx, topic, sub, nil)
	require.NoError(t, err)
	if rule == nil {
		return
	}
	_, err = ac.DeleteRule(ctx, topic, sub, "$Default", nil)
	require.NoError(t, err)
	_, err = ac.CreateRule(ctx, topic, sub, rule)
	require.NoError(t, err)
}

func drain(t *testing.T, c *azservicebus.Client, topic, sub string, expected int) ([]string, []*azservicebus.ReceivedMessage) {
	r, err := c.NewReceiverForSubscription(topic, sub, nil)
	require.NoError(t, err)
	defer r.Close(context.Background())
	got := receive(t, r, expected)
	got = append(got, receiveNone(t, r)...)
	for _, m := range got {
		require.NoError(t, r.CompleteMessage(context.Background(), m, nil))
	}
	return bodies(got), got
}

func TestSQLAndCorrelationRules(t *testing.T) {
	t.Parallel()
	forKinds(t, func(t *testing.T, partitioned bool) {
		ctx := context.Background()
		topic := newTopic(t, partitioned)
		subscriptionWithRule(t, topic, "all", nil)
		subscriptionWithRule(t, topic, "big-eu", &admin.CreateRuleOptions{
			Name:   to.Ptr("sql"),
			Filter: &admin.SQLFilter{Expression: "region = 'eu' AND amount > 100"},
			Action: &admin.SQLAction{Expression: "SET tagged = 'yes'"},
		})
		subscriptionWithRule(t, topic, "us-orders", &admin.CreateRuleOptions{
			Name:   to.Ptr("corr"),
			Filter: &admin.CorrelationFilter{CorrelationID: to.Ptr("corr-us"), Subject: to.Ptr("order")},
		})
		subscriptionWithRule(t, topic, "by-property", &admin.CreateRuleOptions{
			Name:   to.Ptr("prop"),
			Filter: &admin.CorrelationFilter{ApplicationProperties: map[string]any{"region": "eu"}},
		})
		c := client(t)
		sender, err := c.NewSender(topic, nil)
		require.NoError(t, err)
		for _, m := range []*azservicebus.Message{
			order("o1", "eu", 500, "order"), order("o2", "eu", 50, "order"),
			order("o3", "us", 500, "order"), order("o4", "us", 500, "refund"),
		} {
			require.NoError(t, sender.SendMessage(ctx, m, nil))
		}
		all, _ := drain(t, c, topic, "all", 4)
		require.Equal(t, []string{"o1", "o2", "o3", "o4"}, all)
		bigEU, msgs := drain(t, c, topic, "big-eu", 1)
		require.Equal(t, []string{"o1"}, bigEU)
		require.Equal(t, "yes", msgs[0].ApplicationProperties["tagged"], "the rule's action ran")
		us, _ := drain(t, c, topic, "us-orders", 1)
		require.Equal(t, []string{"o3"}, us)
		eu, _ := drain(t, c, topic, "by-property", 2)
		require.Equal(t, []string{"o1", "o2"}, eu)
	})
}
