package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.models.CorrelationRuleFilter;
import com.azure.messaging.servicebus.administration.models.CreateRuleOptions;
import com.azure.messaging.servicebus.administration.models.CreateSubscriptionOptions;
import com.azure.messaging.servicebus.administration.models.SqlRuleAction;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import java.util.List;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** A topic fanning out to subscriptions with SQL and correlation rules. */
class TopicsTest {

    private static ServiceBusMessage order(String id, String region, int amount, String subject) {
        ServiceBusMessage m = Sbemu.message(id).setSubject(subject).setCorrelationId("corr-" + region);
        m.getApplicationProperties().put("region", region);
        m.getApplicationProperties().put("amount", amount);
        return m;
    }

    private static List<String> drain(String topic, String sub, int expected) {
        try (ServiceBusReceiverClient r = Sbemu.client().receiver().topicName(topic).subscriptionName(sub)
                 .buildClient()) {
            List<ServiceBusReceivedMessage> got = Sbemu.receive(r, expected);
            got.forEach(r::complete);
            List<ServiceBusReceivedMessage> more = Sbemu.receiveNone(r);
            more.forEach(r::complete);
            got.addAll(more);
            return Sbemu.bodies(got);
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void sqlAndCorrelationRulesPickTheirMessages(boolean partitioned) {
        String topic = Sbemu.topic(partitioned);
        Sbemu.subscription(topic, "all", new CreateSubscriptionOptions());
        Sbemu.subscription(topic, "big-eu", new CreateSubscriptionOptions());
        Sbemu.admin().deleteRule(topic, "big-eu", "$Default");
        Sbemu.admin().createRule(topic, "sql", "big-eu",
            new CreateRuleOptions(new SqlRuleFilter("region = 'eu' AND amount > 100"))
                .setAction(new SqlRuleAction("SET tagged = 'yes'")));
        Sbemu.subscription(topic, "us-orders", new CreateSubscriptionOptions());
        Sbemu.admin().deleteRule(topic, "us-orders", "$Default");
        CorrelationRuleFilter correlation = new CorrelationRuleFilter().setCorrelationId("corr-us")
            .setLabel("order");
        Sbemu.admin().createRule(topic, "corr", "us-orders", new CreateRuleOptions(correlation));
        Sbemu.subscription(topic, "by-property", new CreateSubscriptionOptions());
        Sbemu.admin().deleteRule(topic, "by-property", "$Default");
        CorrelationRuleFilter byProperty = new CorrelationRuleFilter();
        byProperty.getProperties().put("region", "eu");
        Sbemu.admin().createRule(topic, "prop", "by-property", new CreateRuleOptions(byProperty));

        try (ServiceBusSenderClient sender = Sbemu.client().sender().topicName(topic).buildClient()) {
            sender.sendMessages(List.of(
                order("o1", "eu", 500, "order"),
                order("o2", "eu", 50, "order"),
                order("o3", "us", 500, "order"),
                order("o4", "us", 500, "refund")));
        }
        assertEquals(List.of("o1", "o2", "o3", "o4"), drain(topic, "all", 4));
        assertEquals(List.of("o1"), drain(topic, "big-eu", 1));
        assertEquals(List.of("o3"), drain(topic, "us-orders", 1));
        assertEquals(List.of("o1", "o2"), drain(topic, "by-property", 2));
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void sqlRuleActionSetsAProperty(boolean partitioned) {
        String topic = Sbemu.topic(partitioned);
        Sbemu.subscription(topic, "tagged", new CreateSubscriptionOptions());
        Sbemu.admin().deleteRule(topic, "tagged", "$Default");
        Sbemu.admin().createRule(topic, "sql", "tagged",
            new CreateRuleOptions(new SqlRuleFilter("amount >= 10"))
                .setAction(new SqlRuleAction("SET tagged = 'yes'")));
        try (ServiceBusSenderClient sender = Sbemu.client().sender().topicName(topic).buildClient()) {
            sender.sendMessage(order("t1", "eu", 10, "order"));
        }
        try (ServiceBusReceiverClient r = Sbemu.client().receiver().topicName(topic).subscriptionName("tagged")
                 .buildClient()) {
            ServiceBusReceivedMessage m = Sbemu.receive(r, 1).get(0);
            assertEquals("yes", m.getApplicationProperties().get("tagged"));
            r.complete(m);
        }
    }
}
