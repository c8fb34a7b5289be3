package sbemu;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusTransactionContext;
import com.azure.messaging.servicebus.models.CompleteOptions;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Transactions through sbemu's coordinator (protocol/transactions.py): a message is completed and
 * the next one sent in one transaction; commit makes both happen, rollback neither.
 */
class TransactionsTest {

    /** All messages of one transaction to a partitioned entity share a partition key. */
    private static ServiceBusMessage keyed(String body) {
        return Sbemu.message(body).setPartitionKey("tx-key");
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void sendAndCompleteCommitTogether(boolean partitioned) {
        String in = Sbemu.queue(partitioned);
        String out = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient inSender = Sbemu.client().sender().queueName(in).buildClient()) {
            inSender.sendMessage(keyed("step-1"));
        }
        // one builder: its clients share one connection, as a transaction needs; the transaction
        // spans two entities, which Azure allows with cross-entity transactions
        ServiceBusClientBuilder shared = Sbemu.client().enableCrossEntityTransactions();
        try (ServiceBusReceiverClient inReceiver = shared.receiver().queueName(in).buildClient();
             ServiceBusSenderClient outSender = shared.sender().queueName(out).buildClient()) {
            ServiceBusReceivedMessage m = Sbemu.receive(inReceiver, 1).get(0);
            ServiceBusTransactionContext tx = inReceiver.createTransaction();
            inReceiver.complete(m, new CompleteOptions().setTransactionContext(tx));
            outSender.sendMessage(keyed("step-2"), tx);
            inReceiver.commitTransaction(tx);
        }
        assertEquals(List.of(), drain(in, 0));
        assertEquals(List.of("step-2"), drain(out, 1));
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void rollbackUndoesSendAndComplete(boolean partitioned) {
        String in = Sbemu.queue(partitioned, new CreateQueueOptions().setLockDuration(Duration.ofSeconds(5)));
        String out = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient inSender = Sbemu.client().sender().queueName(in).buildClient()) {
            inSender.sendMessage(keyed("step-1"));
        }
        ServiceBusClientBuilder shared = Sbemu.client().enableCrossEntityTransactions();
        try (ServiceBusReceiverClient inReceiver = shared.receiver().queueName(in).buildClient();
             ServiceBusSenderClient outSender = shared.sender().queueName(out).buildClient()) {
            ServiceBusReceivedMessage m = Sbemu.receive(inReceiver, 1).get(0);
            ServiceBusTransactionContext tx = outSender.createTransaction();
            inReceiver.complete(m, new CompleteOptions().setTransactionContext(tx));
            outSender.sendMessage(keyed("step-2"), tx);
            outSender.rollbackTransaction(tx);
        }
        // the completion was rolled back: the message comes again once its lock (5 s) expired
        // (the SDK counts it settled, so it cannot abandon it)
        assertEquals(List.of("step-1"), drain(in, 1));
        assertEquals(List.of(), drain(out, 0));
    }

    @ParameterizedTest(name = "partitioned={0}")
    @ValueSource(booleans = {false, true})
    void sendsOfACommittedTransactionArriveTogether(boolean partitioned) {
        String q = Sbemu.queue(partitioned);
        try (ServiceBusSenderClient sender = Sbemu.client().sender().queueName(q).buildClient();
             ServiceBusReceiverClient receiver = Sbemu.client().receiver().queueName(q).buildClient()) {
            ServiceBusTransactionContext tx = sender.createTransaction();
            sender.sendMessage(keyed("t1"), tx);
            sender.sendMessage(keyed("t2"), tx);
            assertEquals(List.of(), Sbemu.bodies(Sbemu.receiveNone(receiver)),
                "nothing is visible before the commit");
            sender.commitTransaction(tx);
            List<ServiceBusReceivedMessage> got = Sbemu.receive(receiver, 2);
            got.forEach(receiver::complete);
            assertEquals(List.of("t1", "t2"), Sbemu.bodies(got));
        }
    }

    private static List<String> drain(String q, int expected) {
        try (ServiceBusReceiverClient r = Sbemu.client().receiver().queueName(q).buildClient()) {
            List<ServiceBusReceivedMessage> got = expected > 0 ? Sbemu.receive(r, expected) : Sbemu.receiveNone(r);
            got.forEach(r::complete);
            return Sbemu.bodies(got);
        }
    }
}
