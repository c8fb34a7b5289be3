package sbemu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.amqp.AmqpTransportType;
import com.azure.core.util.BinaryData;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.condition.EnabledOnOs;
import org.junit.jupiter.api.condition.OS;
import org.junit.jupiter.api.parallel.Execution;
import org.junit.jupiter.api.parallel.ExecutionMode;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A 100 MB message sent and received by the Java SDK on a Premium queue with
 * MaxMessageSizeInKilobytes=102400 (`tests/sdk_run.py --premium`: `make test-java` runs the tag
 * "premium" against a server of its own, the rest of the suite excludes it), over
 * plain TCP and over AMQP over WebSockets with TLS; the body's SHA-256 must come back the same,
 * and the server's peak anonymous memory (RssAnon of /proc/PID/status, sampled every 10 ms, as
 * tests/integration/test_large_messages.py samples it) may grow by less than MEMORY_FACTOR times
 * the message. The two transfers run one after the other (SAME_THREAD), each within a bound.
 */
@Tag("premium")
@EnabledOnOs(OS.LINUX)
@Execution(ExecutionMode.SAME_THREAD)
class LargeMessagesTest {
    private static final int MIB = 1024 * 1024;
    // The Java SDK keeps 1 KB of every 64 KB of the link's max-message-size for its batch
    // framing (ServiceBusMessageBatch), so on a 100 MB entity it sends at most about 98.4 MiB;
    // a larger single message is dropped without an error (it logs "Cannot send an EventBatch
    // that is empty." at INFO): docs/large-messages.md
    private static final int BODY = 98 * MIB;
    private static final double MEMORY_FACTOR = 6;
    private static final Duration BOUND = Duration.ofMinutes(3);

    /** The server's peak RssAnon while a transfer runs. */
    static final class AnonPeak implements AutoCloseable {
        private final Path status;
        private final Thread thread;
        private volatile boolean running = true;
        private volatile long peak;

        AnonPeak(long pid) {
            status = Path.of("/proc", Long.toString(pid), "status");
            peak = now();
            thread = new Thread(() -> {
                while (running) {
                    try {
                        peak = Math.max(peak, now());
                        Thread.sleep(10);
                    } catch (InterruptedException | RuntimeException e) {
                        return;
                    }
                }
            }, "server-rss-sampler");
            thread.setDaemon(true);
            thread.start();
        }

        long now() {
            try {
                for (String line : Files.readAllLines(status)) {
                    if (line.startsWith("RssAnon:")) {
                        return Long.parseLong(line.split("\\s+")[1]) * 1024;
                    }
                }
            } catch (IOException e) {
                throw new IllegalStateException("cannot read " + status, e);
            }
            throw new IllegalStateException("no RssAnon in " + status);
        }

        long peak() {
            return peak;
        }

        @Override
        public void close() throws InterruptedException {
            running = false;
            thread.join();
        }
    }

    private static byte[] sha256(byte[] data) throws NoSuchAlgorithmException {
        return MessageDigest.getInstance("SHA-256").digest(data);
    }

    /** The client for each transport: plain TCP with the emulator flag, or wss on the
     * WebSocket port with Azure's connection string form (the trust store holds sbemu's CA). */
    private static ServiceBusClientBuilder builder(String transport) {
        if (transport.equals("amqp")) {
            return Sbemu.client();
        }
        String azureForm = Sbemu.CONNECTION_STRING
            .replaceAll("Endpoint=sb://[^;]+", "Endpoint=sb://localhost/")
            .replaceAll(";?UseDevelopmentEmulator=true", "");
        return new ServiceBusClientBuilder().connectionString(azureForm)
            .transportType(AmqpTransportType.AMQP_WEB_SOCKETS)
            .customEndpointAddress("https://localhost:" + Sbemu.require("SBEMU_WS_PORT"));
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"amqp", "wss"})
    void aHundredMegabyteMessageRoundTrip(String transport) throws Exception {
        String queue = transport.equals("amqp") ? "huge-tcp" : "huge-wss";
        byte[] body = new byte[BODY];
        new Random(26).nextBytes(body);
        byte[] digest = sha256(body);
        ServiceBusClientBuilder builder = builder(transport);
        long started = System.nanoTime();
        long before;
        long peak;
        try (AnonPeak sampler = new AnonPeak(Long.parseLong(Sbemu.require("SBEMU_PID")))) {
            before = sampler.now();
            try (ServiceBusSenderClient sender = builder.sender().queueName(queue).buildClient()) {
                sender.sendMessage(new ServiceBusMessage(BinaryData.fromBytes(body))
                    .setMessageId("big-" + transport).setSubject(transport));
            }
            body = null; // only the digest is kept: the JVM holds one 100 MB body at a time
            try (ServiceBusReceiverClient receiver = builder.receiver().queueName(queue)
                .prefetchCount(0).buildClient()) {
                List<ServiceBusReceivedMessage> got = new ArrayList<>();
                long deadline = System.nanoTime() + BOUND.toNanos();
                while (got.isEmpty() && System.nanoTime() < deadline) {
                    receiver.receiveMessages(1, Duration.ofSeconds(60)).forEach(got::add);
                }
                assertEquals(1, got.size(), "the 100 MB message did not come back");
                ServiceBusReceivedMessage message = got.get(0);
                assertEquals("big-" + transport, message.getMessageId());
                byte[] received = message.getBody().toBytes();
                assertEquals(BODY, received.length);
                assertArrayEquals(digest, sha256(received), "the body came back changed");
                receiver.complete(message);
            }
            peak = sampler.peak();
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        double growth = (double) (peak - before) / BODY;
        System.out.printf("Java SDK: %d MiB round trip over %s in %.1f s; server anon RSS %d MB -> "
            + "peak %d MB (%.1fx the message)%n", BODY / MIB, transport, seconds, before / MIB, peak / MIB, growth);
        assertTrue(seconds < BOUND.toSeconds(), "took " + seconds + " s");
        assertTrue(growth < MEMORY_FACTOR, String.format("the server grew by %.1fx the message", growth));
    }
}
