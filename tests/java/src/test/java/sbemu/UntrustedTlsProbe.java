package sbemu;

import com.azure.core.amqp.AmqpRetryOptions;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.time.Duration;

/**
 * Run in a JVM of its own without sbemu's trust store (TransportsTest starts it): sends once
 * over AMQPS (args: connection string, port); exits 1 when the send went through, 0 when it
 * failed. The SDK reports a refused handshake as a timeout; the JVM's own verification says
 * why on stderr (proton-j logs "PKIX path building failed"), which the test reads, stopping the
 * probe there rather than waiting out the long try timeout.
 */
public final class UntrustedTlsProbe {
    private UntrustedTlsProbe() {
    }

    public static void main(String[] args) {
        try (ServiceBusSenderClient sender = new ServiceBusClientBuilder().connectionString(args[0])
                 .customEndpointAddress("https://localhost:" + args[1])
                 .retryOptions(new AmqpRetryOptions().setMaxRetries(0).setTryTimeout(Duration.ofSeconds(120)))
                 .sender().queueName("testQueue").buildClient()) {
            sender.sendMessage(Sbemu.message("never"));
            System.out.println("sent: the server was trusted");
            System.exit(1);
        } catch (RuntimeException e) {
            System.out.println("not sent: " + e);
            System.exit(0);
        }
    }
}
