package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.testcontainers.azure.ServiceBusEmulatorContainer;
import org.testcontainers.images.builder.Transferable;
import org.testcontainers.utility.DockerImageName;

/**
 * Testcontainers for Java's ServiceBusEmulatorContainer on sbemu's image: the image named as a
 * compatible substitute for Microsoft's, the module's wait for "Emulator Service is Successfully
 * Up!", its config copied in. The module refuses to start without an SQL Server container (its
 * configure() checks for one); sbemu needs none, so configure() is overridden, which drops that
 * check and nothing else.
 */
class ServiceBusEmulatorContainerTest {
    private static final String CONFIG =
        "{ \"UserConfig\": { \"Namespaces\": [ { \"Name\": \"sbemulatorns\", "
            + "\"Queues\": [ { \"Name\": \"tc-java\" } ], \"Topics\": [] } ], "
            + "\"Logging\": { \"Type\": \"Console\" } } }";

    @Test
    void sendsAndReceivesThroughTheModule() {
        DockerImageName image = DockerImageName.parse(System.getenv("SBEMU_IMAGE"))
            .asCompatibleSubstituteFor("mcr.microsoft.com/azure-messaging/servicebus-emulator");
        try (ServiceBusEmulatorContainer servicebus = new ServiceBusEmulatorContainer(image) {
                @Override
                protected void configure() {} // sbemu needs no SQL Server
            }) {
            servicebus.withConfig(Transferable.of(CONFIG)).withLabels(Map.of("sbemu-test", System.getenv("SBEMU_TEST_LABEL")));
            long started = System.nanoTime();
            servicebus.start();
            System.out.printf("testcontainers start: %.2f s%n", (System.nanoTime() - started) / 1e9);

            String body = "from testcontainers-java " + started;
            ServiceBusClientBuilder builder =
                new ServiceBusClientBuilder().connectionString(servicebus.getConnectionString());
            try (ServiceBusSenderClient sender = builder.sender().queueName("tc-java").buildClient()) {
                sender.sendMessage(new ServiceBusMessage(body));
            }
            try (ServiceBusReceiverClient receiver =
                     builder.receiver().queueName("tc-java").buildClient()) {
                List<ServiceBusReceivedMessage> got = new ArrayList<>();
                receiver.receiveMessages(1, Duration.ofSeconds(10)).forEach(got::add);
                assertEquals(1, got.size());
                assertEquals(body, got.get(0).getBody().toString());
                receiver.complete(got.get(0));
            }
        }
    }
}
