package sbemu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusSessionReceiverClient;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Session receivers: named, next available, session state, session lock, session processor. */
class SessionsTest {

    private static String sessionQueue(boolean partitioned) {
        return Sbemu.queue(partitioned, new CreateQueueOptions().setSessionRequired(true));
    }

    private static void send(String q, String session, String... bodies) {
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient()) {
            List<com.azure.messaging.servicebus.ServiceBusMessage> batch = new ArrayList<>();
            for (String body : bodies) {
                batch.add(Sbemu.message(body).setSessionId(session));
            }
            sender.sendMessages(batch);
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void namedSessionInOrderWithState(boolean partitioned) {
        String q = sessionQueue(partitioned);
        send(q, "s-a", "a1", "a2", "a3");
        send(q, "s-b", "b1");
        try (ServiceBusSessionReceiverClient sessions = Sbemu.client().sessionReceiver().queueName(q).buildClient();
             ServiceBusReceiverClient a = sessions.acceptSession("s-a")) {
            assertEquals("s-a", a.getSessionId());
            List<ServiceBusReceivedMessage> got = Sbemu.receive(a, 3);
            assertEquals(List.of("a1", "a2", "a3"), got.stream().map(m -> m.getBody().toString()).toList(),
                "one session's messages in their order");
            got.forEach(m -> assertEquals("s-a", m.getSessionId()));
            got.forEach(a::complete);

            assertNull(a.getSessionState());
            byte[] state = "step=2".getBytes(StandardCharsets.UTF_8);
            a.setSessionState(state);
            assertArrayEquals(state, a.getSessionState());
            OffsetDateTime renewed = a.renewSessionLock();
            assertTrue(renewed.isAfter(OffsetDateTime.now()));
        }
        // the state outlives the receiver
        try (ServiceBusSessionReceiverClient sessions = Sbemu.client().sessionReceiver().queueName(q).buildClient();
             ServiceBusReceiverClient a = sessions.acceptSession("s-a")) {
            assertArrayEquals("step=2".getBytes(StandardCharsets.UTF_8), a.getSessionState());
            a.setSessionState(null);
            assertNull(a.getSessionState());
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void nextAvailableSessionTakesEachSessionOnce(boolean partitioned) {
        String q = sessionQueue(partitioned);
        send(q, "n-1", "x1", "x2");
        send(q, "n-2", "y1");
        Map<String, List<String>> bySession = new ConcurrentHashMap<>();
        try (ServiceBusSessionReceiverClient sessions = Sbemu.client().sessionReceiver().queueName(q).buildClient();
             ServiceBusReceiverClient first = sessions.acceptNextSession();
             ServiceBusReceiverClient second = sessions.acceptNextSession()) {
            for (ServiceBusReceiverClient r : List.of(first, second)) {
                int expected = r.getSessionId().equals("n-1") ? 2 : 1;
                List<ServiceBusReceivedMessage> got = Sbemu.receive(r, expected);
                got.forEach(r::complete);
                bySession.put(r.getSessionId(), got.stream().map(m -> m.getBody().toString()).toList());
            }
        }
        assertEquals(Map.of("n-1", List.of("x1", "x2"), "n-2", List.of("y1")), bySession);
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void sessionProcessor(boolean partitioned) throws InterruptedException {
        String q = sessionQueue(partitioned);
        for (int s = 0; s < 3; s++) {
            send(q, "p-" + s, "p" + s + "-0", "p" + s + "-1", "p" + s + "-2");
        }
        Map<String, List<String>> bySession = new ConcurrentHashMap<>();
        CountDownLatch done = new CountDownLatch(9);
        ServiceBusProcessorClient processor = Sbemu.client().sessionProcessor().queueName(q)
            .maxConcurrentSessions(2)
            .sessionIdleTimeout(java.time.Duration.ofSeconds(2))
            .processMessage(ctx -> {
                bySession.computeIfAbsent(ctx.getMessage().getSessionId(), k -> new ArrayList<>())
                    .add(ctx.getMessage().getBody().toString());
                done.countDown();
            })
            .processError(ctx -> { })
            .buildProcessorClient();
        processor.start();
        try {
            assertTrue(done.await(40, TimeUnit.SECONDS), "processed " + bySession);
        } finally {
            processor.close();
        }
        for (int s = 0; s < 3; s++) {
            assertEquals(List.of("p" + s + "-0", "p" + s + "-1", "p" + s + "-2"), bySession.get("p-" + s));
        }
    }
}
