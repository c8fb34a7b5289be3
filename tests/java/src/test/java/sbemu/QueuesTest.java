package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusErrorContext;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusMessageBatch;
import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import com.azure.messaging.servicebus.models.ServiceBusMessageState;
import com.azure.messaging.servicebus.models.SubQueue;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Sender, receiver and processor clients on a plain and a partitioned queue. */
class QueuesTest {

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void sendBatchReceiveCompleteAbandonPeek(boolean partitioned) {
        String q = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient()) {
            ServiceBusMessageBatch batch = sender.createMessageBatch();
            for (int i = 0; i < 5; i++) {
                assertTrue(batch.tryAddMessage(Sbemu.message("m" + i)
                    .setSubject("batch").setContentType("text/plain")));
            }
            sender.sendMessages(batch);
            sender.sendMessage(Sbemu.message("m5").setTimeToLive(Duration.ofMinutes(5)));
            sender.sendMessages(List.of(Sbemu.message("m6"), Sbemu.message("m7")));

            List<ServiceBusReceivedMessage> peeked = receiver.peekMessages(8).stream().toList();
            assertEquals(8, peeked.size(), "peek shows the eight messages");
            List<ServiceBusReceivedMessage> got = Sbemu.receive(receiver, 8);
            assertEquals(List.of("m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"), Sbemu.bodies(got));
            ServiceBusReceivedMessage first = got.stream().filter(m -> m.getMessageId().equals("m0"))
                .findFirst().orElseThrow();
            assertEquals("batch", first.getSubject());
            assertEquals("text/plain", first.getContentType());
            assertTrue(first.getLockedUntil().isAfter(OffsetDateTime.now()));
            ServiceBusReceivedMessage abandoned = got.get(0);
            receiver.abandon(abandoned);
            for (ServiceBusReceivedMessage m : got.subList(1, got.size())) {
                receiver.complete(m);
            }
            List<ServiceBusReceivedMessage> again = Sbemu.receive(receiver, 1);
            assertEquals(1, again.size());
            assertEquals(abandoned.getMessageId(), again.get(0).getMessageId());
            assertEquals(1, again.get(0).getDeliveryCount(), "an abandoned message is delivered again");
            receiver.complete(again.get(0));
            assertEquals(0, Sbemu.receiveNone(receiver).size());
            assertEquals(0, Sbemu.admin().getQueueRuntimeProperties(q).getActiveMessageCount());
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void processorClientCompletesEveryMessage(boolean partitioned) throws InterruptedException {
        String q = Sbemu.queue(partitioned);
        int count = 20;
        Set<String> seen = ConcurrentHashMap.newKeySet();
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        CountDownLatch done = new CountDownLatch(count);
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient()) {
            for (int i = 0; i < count; i++) {
                sender.sendMessage(Sbemu.message("p" + i));
            }
        }
        ServiceBusProcessorClient processor = Sbemu.client().processor().queueName(q)
            .maxConcurrentCalls(4)
            .processMessage(ctx -> {
                if (seen.add(ctx.getMessage().getBody().toString())) {
                    done.countDown();
                }
            })
            .processError((ServiceBusErrorContext ctx) -> errors.add(ctx.getException()))
            .buildProcessorClient();
        processor.start();
        try {
            assertTrue(done.await(30, TimeUnit.SECONDS), "processed " + seen.size() + " of " + count);
        } finally {
            processor.close();
        }
        assertEquals(List.of(), errors);
        try (ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient()) {
            assertEquals(0, Sbemu.receiveNone(receiver).size(), "the processor completed every message");
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void scheduledMessagesArriveAtTheirTimeAndCancelledOnesNever(boolean partitioned) {
        String q = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient()) {
            OffsetDateTime soon = OffsetDateTime.now().plusSeconds(3);
            long kept = sender.scheduleMessage(Sbemu.message("kept"), soon);
            // due in an hour: still scheduled when peeked, however slow this machine is
            long cancelled = sender.scheduleMessage(Sbemu.message("cancelled"), soon.plusHours(1));
            ServiceBusReceivedMessage peeked = receiver.peekMessage(cancelled);
            assertNotNull(peeked);
            assertEquals(ServiceBusMessageState.SCHEDULED, peeked.getState());
            sender.cancelScheduledMessage(cancelled);

            List<ServiceBusReceivedMessage> got = Sbemu.receive(receiver, 1);
            assertEquals(List.of("kept"), Sbemu.bodies(got));
            assertTrue(!OffsetDateTime.now().isBefore(soon.minusNanos(500_000_000)),
                "not delivered before its time");
            // a scheduled message is enqueued anew at its time, with a new sequence number
            assertTrue(got.get(0).getSequenceNumber() != kept);
            receiver.complete(got.get(0));
            assertEquals(0, Sbemu.receiveNone(receiver).size(), "the cancelled message never comes");
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void deferredMessagesAreReceivedBySequenceNumber(boolean partitioned) {
        String q = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient()) {
            sender.sendMessage(Sbemu.message("later"));
            ServiceBusReceivedMessage m = Sbemu.receive(receiver, 1).get(0);
            assertEquals(0, m.getDeliveryCount(), "the header's delivery-count, as it comes");
            receiver.defer(m);
            assertEquals(0, Sbemu.receiveNone(receiver).size(), "a deferred message is not received again");
            ServiceBusReceivedMessage deferred = receiver.receiveDeferredMessage(m.getSequenceNumber());
            assertEquals("later", deferred.getBody().toString());
            assertEquals(ServiceBusMessageState.DEFERRED, deferred.getState());
            // the delivery that ended in the deferral counts, as on Azure (issue 36 A)
            assertEquals(1, deferred.getDeliveryCount());
            receiver.complete(deferred);
            assertEquals(0, Sbemu.admin().getQueueRuntimeProperties(q).getTotalMessageCount());
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void deadLetteringByTheClientAndByMaxDeliveryCount(boolean partitioned) {
        String q = Sbemu.queue(partitioned, new CreateQueueOptions().setMaxDeliveryCount(2));
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient();
             ServiceBusReceiverClient dlq = Sbemu.client().receiver().queueName(q)
                 .subQueue(SubQueue.DEAD_LETTER_QUEUE).buildClient()) {
            sender.sendMessage(Sbemu.message("bad"));
            ServiceBusReceivedMessage m = Sbemu.receive(receiver, 1).get(0);
            receiver.deadLetter(m, new DeadLetterOptions().setDeadLetterReason("Invalid")
                .setDeadLetterErrorDescription("no schema"));
            ServiceBusReceivedMessage dead = Sbemu.receive(dlq, 1).get(0);
            assertEquals("bad", dead.getBody().toString());
            assertEquals("Invalid", dead.getDeadLetterReason());
            assertEquals("no schema", dead.getDeadLetterErrorDescription());
            dlq.complete(dead);

            sender.sendMessage(Sbemu.message("poison"));
            for (int i = 0; i < 2; i++) {
                receiver.abandon(Sbemu.receive(receiver, 1).get(0));
            }
            ServiceBusReceivedMessage poisoned = Sbemu.receive(dlq, 1).get(0);
            assertEquals("poison", poisoned.getBody().toString());
            assertEquals("MaxDeliveryCountExceeded", poisoned.getDeadLetterReason());
            dlq.complete(poisoned);
        }
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void renewedLockOutlivesTheLockDuration(boolean partitioned) throws InterruptedException {
        String q = Sbemu.queue(partitioned, new CreateQueueOptions().setLockDuration(Duration.ofSeconds(5)));
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q)
                 .maxAutoLockRenewDuration(Duration.ZERO).buildClient()) {
            sender.sendMessage(Sbemu.message("long job"));
            ServiceBusReceivedMessage m = Sbemu.receive(receiver, 1).get(0);
            OffsetDateTime first = m.getLockedUntil();
            Thread.sleep(2_000);
            OffsetDateTime renewed = receiver.renewMessageLock(m);
            assertTrue(renewed.isAfter(first), renewed + " after " + first);
            Thread.sleep(2_000);
            receiver.renewMessageLock(m);
            Thread.sleep(2_000);
            // 6 s after the receive, past the 5 s lock duration: the lock still holds
            receiver.complete(m);
            assertEquals(0, Sbemu.receiveNone(receiver).size());
        }
    }

    /** The header comes back as sent: durable and first-acquirer false kept false (issue 36 C). */
    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void headerComesBackAsSent(boolean partitioned) {
        String q = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient()) {
            ServiceBusMessage message = Sbemu.message("h");
            message.getRawAmqpMessage().getHeader().setDurable(false).setFirstAcquirer(false).setPriority((short) 7);
            sender.sendMessage(message);
            ServiceBusReceivedMessage m = Sbemu.receive(receiver, 1).get(0);
            assertEquals(Boolean.FALSE, m.getRawAmqpMessage().getHeader().isDurable());
            assertEquals(Boolean.FALSE, m.getRawAmqpMessage().getHeader().isFirstAcquirer());
            assertEquals(Short.valueOf((short) 7), m.getRawAmqpMessage().getHeader().getPriority());
            receiver.complete(m);
        }
    }
}
