package sbemu;

import com.azure.core.util.BinaryData;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClientBuilder;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import com.azure.messaging.servicebus.administration.models.CreateSubscriptionOptions;
import com.azure.messaging.servicebus.administration.models.CreateTopicOptions;
import com.azure.core.http.HttpRequest;
import com.azure.core.http.policy.HttpPipelinePolicy;
import com.azure.core.util.UrlBuilder;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.UUID;

/**
 * What every test needs from the sbemu that `make test-java` started (tests/sdk_run.py): the
 * connection strings from the environment, client builders and fresh, uniquely named entities
 * created through the unchanged ServiceBusAdministrationClient (HTTPS, trusting sbemu's CA
 * through the trust store surefire's argLine names).
 */
final class Sbemu {
    static final String CONNECTION_STRING = require("SBEMU_CONNECTION_STRING");
    static final String ADMIN_CONNECTION_STRING = require("SBEMU_ADMIN_CONNECTION_STRING");
    static final Duration WAIT = Duration.ofSeconds(10);
    static final Duration SHORT_WAIT = Duration.ofSeconds(2);

    private static ServiceBusAdministrationClient admin;

    private Sbemu() {
    }

    static String require(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run the suite with `make test-java`");
        }
        return value;
    }

    static ServiceBusClientBuilder client() {
        return new ServiceBusClientBuilder().connectionString(CONNECTION_STRING);
    }

    static synchronized ServiceBusAdministrationClient admin() {
        if (admin == null) {
            admin = new ServiceBusAdministrationClientBuilder()
                .connectionString(ADMIN_CONNECTION_STRING)
                .addPolicy(toPort(adminPort()))
                .buildClient();
        }
        return admin;
    }

    /** The port of SBEMU_ADMIN_CONNECTION_STRING's endpoint (sb://localhost:PORT). */
    static int adminPort() {
        Matcher m = Pattern.compile("Endpoint=sb://[^:;/]+:(\\d+)").matcher(ADMIN_CONNECTION_STRING);
        if (!m.find()) {
            throw new IllegalStateException("no port in " + ADMIN_CONNECTION_STRING);
        }
        return Integer.parseInt(m.group(1));
    }

    /**
     * The Java admin client keeps only the host of the connection string's endpoint and always
     * calls https://HOST/ (port 443); this policy sends its requests to the emulator's port.
     * docs/clients.md shows it.
     */
    static HttpPipelinePolicy toPort(int port) {
        return (context, next) -> {
            HttpRequest request = context.getHttpRequest();
            request.setUrl(UrlBuilder.parse(request.getUrl()).setPort(port).toString());
            return next.process();
        };
    }

    static String name(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    /** A new queue; partitioned when asked (16 partitions, as Standard). */
    static String queue(boolean partitioned, CreateQueueOptions options) {
        String name = name(partitioned ? "jq-p" : "jq");
        options.setPartitioningEnabled(partitioned);
        if (options.getLockDuration() == null || options.getLockDuration().equals(Duration.ofSeconds(60))) {
            options.setLockDuration(Duration.ofSeconds(30));
        }
        admin().createQueue(name, options);
        return name;
    }

    static String queue(boolean partitioned) {
        return queue(partitioned, new CreateQueueOptions());
    }

    static String topic(boolean partitioned) {
        String name = name(partitioned ? "jt-p" : "jt");
        admin().createTopic(name, new CreateTopicOptions().setPartitioningEnabled(partitioned));
        return name;
    }

    static void subscription(String topic, String name, CreateSubscriptionOptions options) {
        admin().createSubscription(topic, name, options);
    }

    /** Receive until `count` messages came or WAIT ran out (receiveMessages may return fewer). */
    static List<ServiceBusReceivedMessage> receive(ServiceBusReceiverClient receiver, int count) {
        List<ServiceBusReceivedMessage> got = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (got.size() < count && System.nanoTime() < deadline) {
            Duration left = Duration.ofNanos(Math.max(deadline - System.nanoTime(), 1_000_000));
            receiver.receiveMessages(count - got.size(), left).forEach(got::add);
        }
        return got;
    }

    /** What a receiver gets within SHORT_WAIT (for "nothing arrives"). */
    static List<ServiceBusReceivedMessage> receiveNone(ServiceBusReceiverClient receiver) {
        List<ServiceBusReceivedMessage> got = new ArrayList<>();
        receiver.receiveMessages(10, SHORT_WAIT).forEach(got::add);
        return got;
    }

    static List<String> bodies(List<ServiceBusReceivedMessage> messages) {
        List<String> out = new ArrayList<>();
        messages.forEach(m -> out.add(m.getBody().toString()));
        out.sort(null);
        return out;
    }

    static ServiceBusMessage message(String body) {
        return new ServiceBusMessage(BinaryData.fromString(body)).setMessageId(body);
    }
}
