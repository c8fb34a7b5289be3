package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.amqp.AmqpTransportType;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The transports code without the emulator flag uses: AMQPS (TLS) and AMQP over WebSockets
 * (wss), trusting sbemu's CA through the trust store surefire's argLine names. The connection
 * string is Azure's form (Endpoint=sb://localhost/, no port, no flag); customEndpointAddress
 * names the port sbemu serves on in this run (5671 and 443 otherwise).
 */
class TransportsTest {
    private static final String AZURE_FORM = Sbemu.CONNECTION_STRING
        .replaceAll("Endpoint=sb://[^;]+", "Endpoint=sb://localhost/")
        .replaceAll(";?UseDevelopmentEmulator=true", "");

    private static void roundTrip(ServiceBusClientBuilder builder, boolean partitioned) {
        String q = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient sender = builder.sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = builder.receiver().queueName(q).buildClient()) {
            sender.sendMessage(Sbemu.message("over-" + q));
            List<ServiceBusReceivedMessage> got = Sbemu.receive(receiver, 1);
            assertEquals(List.of("over-" + q), Sbemu.bodies(got));
            receiver.complete(got.get(0));
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void amqpsWithTheTrustStore(boolean partitioned) {
        roundTrip(new ServiceBusClientBuilder().connectionString(AZURE_FORM)
            .customEndpointAddress("https://localhost:" + Sbemu.require("SBEMU_TLS_PORT")), partitioned);
    }

    /**
     * A JVM without the trust store refuses sbemu in its own TLS verification. The probe's send
     * waits out its try timeout (the SDK reports the refused handshake as a timeout), which on
     * a loaded machine can pass before the JVM even got to the handshake; so the timeout is
     * long and the test ends as soon as the verification's refusal is printed.
     */
    @Test
    void amqpsRefusedWithoutTheTrustStore() throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process probe = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
            UntrustedTlsProbe.class.getName(), AZURE_FORM, Sbemu.require("SBEMU_TLS_PORT"))
            .redirectErrorStream(true).start();
        StringBuilder output = new StringBuilder();
        boolean refused = false;
        try (BufferedReader lines = new BufferedReader(
                 new InputStreamReader(probe.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line = lines.readLine(); line != null; line = lines.readLine()) {
                output.append(line).append('\n');
                if (line.contains("PKIX path building failed")) {
                    refused = true;
                    break;
                }
                assertTrue(!line.startsWith("sent:"), output.toString());
            }
        } finally {
            probe.destroyForcibly();
            probe.waitFor(30, TimeUnit.SECONDS);
        }
        assertTrue(refused, output.toString());
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void webSocketsWithTheTrustStore(boolean partitioned) {
        roundTrip(new ServiceBusClientBuilder().connectionString(AZURE_FORM)
            .transportType(AmqpTransportType.AMQP_WEB_SOCKETS)
            .customEndpointAddress("https://localhost:" + Sbemu.require("SBEMU_WS_PORT")), partitioned);
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void webSocketsOnTheAdminPort(boolean partitioned) {
        roundTrip(new ServiceBusClientBuilder().connectionString(AZURE_FORM)
            .transportType(AmqpTransportType.AMQP_WEB_SOCKETS)
            .customEndpointAddress("https://localhost:" + Sbemu.adminPort()), partitioned);
    }
}
