package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.exception.ResourceExistsException;
import com.azure.core.exception.ResourceNotFoundException;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import com.azure.messaging.servicebus.administration.models.CreateSubscriptionOptions;
import com.azure.messaging.servicebus.administration.models.CreateTopicOptions;
import com.azure.messaging.servicebus.administration.models.QueueProperties;
import com.azure.messaging.servicebus.administration.models.RuleProperties;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import com.azure.messaging.servicebus.administration.models.SubscriptionProperties;
import com.azure.messaging.servicebus.administration.models.TopicProperties;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** ServiceBusAdministrationClient over HTTPS (sbemu's CA in a Java trust store). */
class AdministrationTest {

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void queueLifecycle(boolean partitioned) {
        ServiceBusAdministrationClient admin = Sbemu.admin();
        String name = Sbemu.name("adm-q");
        QueueProperties created = admin.createQueue(name, new CreateQueueOptions()
            .setPartitioningEnabled(partitioned)
            .setLockDuration(Duration.ofSeconds(45))
            .setMaxDeliveryCount(7)
            .setSessionRequired(false)
            .setDefaultMessageTimeToLive(Duration.ofHours(2)));
        assertEquals(name, created.getName());
        assertEquals(partitioned, created.isPartitioningEnabled());
        assertEquals(Duration.ofSeconds(45), created.getLockDuration());
        assertEquals(7, created.getMaxDeliveryCount());
        assertTrue(admin.getQueueExists(name));
        assertThrows(ResourceExistsException.class, () -> admin.createQueue(name));

        QueueProperties got = admin.getQueue(name);
        got.setMaxDeliveryCount(9);
        QueueProperties updated = admin.updateQueue(got);
        assertEquals(9, updated.getMaxDeliveryCount());
        assertEquals(9, admin.getQueue(name).getMaxDeliveryCount());
        assertTrue(admin.listQueues().stream().anyMatch(q -> q.getName().equals(name)));

        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(name).buildClient()) {
            sender.sendMessage(Sbemu.message("counted"));
        }
        assertEquals(1, admin.getQueueRuntimeProperties(name).getActiveMessageCount());

        admin.deleteQueue(name);
        assertFalse(admin.getQueueExists(name));
        assertThrows(ResourceNotFoundException.class, () -> admin.getQueue(name));
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void topicSubscriptionAndRuleLifecycle(boolean partitioned) {
        ServiceBusAdministrationClient admin = Sbemu.admin();
        String topic = Sbemu.name("adm-t");
        TopicProperties t = admin.createTopic(topic, new CreateTopicOptions().setPartitioningEnabled(partitioned));
        assertEquals(partitioned, t.isPartitioningEnabled());
        SubscriptionProperties s = admin.createSubscription(topic, "sub",
            new CreateSubscriptionOptions().setMaxDeliveryCount(4).setSessionRequired(true));
        assertEquals(4, s.getMaxDeliveryCount());
        assertTrue(s.isSessionRequired());
        assertTrue(admin.getSubscriptionExists(topic, "sub"));
        assertEquals(List.of("sub"), admin.listSubscriptions(topic).stream()
            .map(SubscriptionProperties::getSubscriptionName).toList());

        RuleProperties rule = admin.createRule(topic, "cheap", "sub",
            new com.azure.messaging.servicebus.administration.models.CreateRuleOptions(
                new SqlRuleFilter("price < 10")));
        assertEquals("cheap", rule.getName());
        assertEquals("price < 10", ((SqlRuleFilter) admin.getRule(topic, "sub", "cheap").getFilter())
            .getSqlExpression());
        assertEquals(List.of("$Default", "cheap"), admin.listRules(topic, "sub").stream()
            .map(RuleProperties::getName).sorted().toList());
        admin.deleteRule(topic, "sub", "cheap");
        assertEquals(0, admin.getTopicRuntimeProperties(topic).getScheduledMessageCount());
        assertEquals(1, admin.getTopicRuntimeProperties(topic).getSubscriptionCount());

        admin.deleteSubscription(topic, "sub");
        assertFalse(admin.getSubscriptionExists(topic, "sub"));
        admin.deleteTopic(topic);
        assertFalse(admin.getTopicExists(topic));
    }

    @Test
    void namespaceProperties() {
        assertEquals("sbemulatorns", Sbemu.admin().getNamespaceProperties().getName());
    }
}
