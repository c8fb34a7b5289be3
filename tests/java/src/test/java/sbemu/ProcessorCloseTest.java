package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.parallel.Isolated;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * ServiceBusProcessorClient closed right after its last message was processed, while the
 * auto-completes are still in flight: the SDK sends its last dispositions and then detach, end and
 * close at once. sbemu holds its detach and close replies until those outcomes are answered
 * (protocol/detaching.py) and keeps the socket until its held close went out. Before that fix the
 * server dropped the socket as soon as proton stopped reading after the client's close frame, so
 * the SDK logged "connection aborted" (ConnectionHandler, WARN: simplelogger.properties shows it)
 * and "The receiver didn't receive the disposition acknowledgment due to receive link closure"
 * (ReceiveLinkHandler2, ERROR) in most runs. The test reads the SDK's own log output
 * (slf4j-simple writes to System.err), so it runs @Isolated: no other test's output is captured
 * with it.
 *
 * What it fails on: an aborted connection, and the disposition complaint on an aborted
 * connection. What it tolerates: the disposition complaint alone. In about one run in four the SDK
 * closes its connection while a complete it sent a moment earlier is still committing (its last
 * disposition, detach, end and close arrive in one read), and then gives up on acknowledgments
 * that sbemu does send, before its detach and close (seen in frame traces): a race inside the
 * client that no broker answer can win.
 */
@Isolated
class ProcessorCloseTest {
    private static final String ABORTED = "connection aborted";

    /** Everything written to System.err while `body` runs, still passed through to it. */
    private static String capturingStderr(Runnable body) {
        PrintStream original = System.err;
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream tee = new PrintStream(new OutputStream() {
            @Override
            public synchronized void write(int b) {
                captured.write(b);
                original.write(b);
            }

            @Override
            public synchronized void write(byte[] b, int off, int len) {
                captured.write(b, off, len);
                original.write(b, off, len);
            }
        }, true, StandardCharsets.UTF_8);
        System.setErr(tee);
        try {
            body.run();
        } finally {
            System.setErr(original);
        }
        synchronized (tee) {
            return captured.toString(StandardCharsets.UTF_8);
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void closingTheProcessorGetsEveryCompleteAcknowledged(boolean partitioned) {
        String q = Sbemu.queue(partitioned);
        int count = 40;
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient()) {
            for (int i = 0; i < count; i++) {
                sender.sendMessage(Sbemu.message("c" + i));
            }
        }
        Set<String> seen = ConcurrentHashMap.newKeySet();
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        CountDownLatch done = new CountDownLatch(count);
        int[] remaining = {-1};
        String log = capturingStderr(() -> {
            ServiceBusProcessorClient processor = Sbemu.client().processor().queueName(q)
                .maxConcurrentCalls(8)
                .processMessage(ctx -> {
                    if (seen.add(ctx.getMessage().getBody().toString())) {
                        done.countDown();
                    }
                })
                .processError(ctx -> errors.add(ctx.getException()))
                .buildProcessorClient();
            processor.start();
            try {
                assertTrue(done.await(30, TimeUnit.SECONDS), "processed " + seen.size() + " of " + count);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            } finally {
                processor.close(); // at once: the last completes are in flight
            }
            // the processor's link and connection close after close() returns: the SDK's
            // complaint would come while this check runs (two seconds), so it is captured too
            try (ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient()) {
                remaining[0] = Sbemu.receiveNone(receiver).size();
            }
        });
        assertFalse(log.contains(ABORTED), "the server cut the connection before its close:\n" + log);
        assertEquals(List.of(), errors);
        assertEquals(0, remaining[0], "every complete landed");
    }
}
