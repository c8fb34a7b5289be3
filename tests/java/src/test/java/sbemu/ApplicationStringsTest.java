package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClientBuilder;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The admin client given the application's own connection string, unchanged, no redirecting
 * policy: (a) Azure's form (Endpoint=sb://localhost/, no emulator flag) and (b) the string
 * sbemu printed (UseDevelopmentEmulator=true). Java's admin client keeps only the endpoint's
 * host and calls https://HOST/ (443) either way, where sbemu serves the management API beside
 * AMQP over WebSockets, as Azure does. Needs Azure's ports: `make test-java` runs this class in
 * tests/sdk_run.py --azure-ports (a network namespace of its own).
 */
@Tag("azure-ports")
class ApplicationStringsTest {

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"SBEMU_AZURE_CONNECTION_STRING", "SBEMU_CONNECTION_STRING"})
    void adminClientWithTheApplicationsString(String variable) {
        String connectionString = Sbemu.require(variable);
        assertFalse(connectionString.matches(".*Endpoint=sb://[^;/]+:\\d+.*"),
            "the string names no port: " + connectionString);
        ServiceBusAdministrationClient admin = new ServiceBusAdministrationClientBuilder()
            .connectionString(connectionString)
            .buildClient();
        String name = Sbemu.name("strings");
        admin.createQueue(name, new CreateQueueOptions().setMaxDeliveryCount(4));
        assertEquals(4, admin.getQueue(name).getMaxDeliveryCount());
        assertTrue(admin.listQueues().stream().anyMatch(q -> q.getName().equals(name)));
        admin.deleteQueue(name);
        assertFalse(admin.getQueueExists(name));
    }
}
