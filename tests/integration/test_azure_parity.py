"""What Microsoft's own JS live suite found unlike Azure (issue 36), where the Python SDK sees
the same thing: the delivery count of deferred and dead-lettered messages (it reads the
header's delivery-count as it comes, as the JS SDK does), settling in a dead-letter queue, and
a scheduled message's state once active. tests/js/azure_parity.test.mjs asserts the same with
the JS SDK."""

from __future__ import annotations

import datetime as dt

import pytest
import requests
from admin_support import run_js_admin_script
from azure.servicebus import ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageHeader
from azure.servicebus.exceptions import ServiceBusError
from integration_support import queue_def, receive_n, send_plain

from sbemu.auth.sas import make_sas_token
from sbemu.testing.pytest_plugin import SbemuServer

SBEMU_QUEUES = [
    queue_def("ap-defer", max_delivery_count=10),
    queue_def("ap-defer-p", max_delivery_count=10, partitioned=True),
    queue_def("ap-dlq"),
    queue_def("ap-sched"),
    queue_def("ap-header"),
]


@pytest.mark.parametrize("queue", ["ap-defer", "ap-defer-p"])
def test_a_deferral_counts_the_delivery_that_ended_in_it(sb_client, queue):
    send_plain(sb_client, queue, [ServiceBusMessage("d", message_id="d-1")])
    with sb_client.get_queue_receiver(queue, max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        assert m.delivery_count == 0
        receiver.defer_message(m)
        (deferred,) = receiver.receive_deferred_messages([m.sequence_number])
        assert deferred.state == ServiceBusMessageState.DEFERRED
        assert deferred.delivery_count == 1
        receiver.abandon_message(deferred)  # stays deferred, counted
        (deferred,) = receiver.receive_deferred_messages([m.sequence_number])
        assert deferred.delivery_count == 2
        receiver.dead_letter_message(deferred)
    with sb_client.get_queue_receiver(
        queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        (dead,) = receive_n(dlq, 1)
        assert dead.delivery_count == 2  # dead-lettering counts no delivery
        dlq.complete_message(dead)


def test_a_dead_letter_queue_counts_no_delivery_and_refuses_dead_lettering(sb_client):
    send_plain(sb_client, "ap-dlq", [ServiceBusMessage("dl", message_id="dl-1")])
    with sb_client.get_queue_receiver("ap-dlq", max_wait_time=5) as receiver:
        (m,) = receive_n(receiver, 1)
        receiver.dead_letter_message(m)
    with sb_client.get_queue_receiver(
        "ap-dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        (dead,) = receive_n(dlq, 1)
        assert dead.delivery_count == 0
        dlq.abandon_message(dead)
        (dead,) = receive_n(dlq, 1)
        assert dead.delivery_count == 0, "abandon in a dead-letter queue counts nothing"
        with pytest.raises(ServiceBusError) as refused:
            dlq.dead_letter_message(dead)
        assert "cannot be dead-lettered again" in str(refused.value)
        (again,) = receive_n(dlq, 1)  # free again at once, not after its lock expired
        assert again.delivery_count == 0
        dlq.complete_message(again)


def test_a_scheduled_message_says_scheduled_once_active(sb_client):
    with sb_client.get_queue_sender("ap-sched") as sender:
        sender.create_message_batch()  # the link is open: the schedule below is not late
        at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
        sender.schedule_messages(ServiceBusMessage("later"), at)
    with sb_client.get_queue_receiver("ap-sched", max_wait_time=10) as receiver:
        (m,) = receive_n(receiver, 1)
        assert m.state == ServiceBusMessageState.SCHEDULED
        assert m.scheduled_enqueue_time_utc is not None
        receiver.complete_message(m)


def test_the_header_comes_back_as_sent(sb_client):
    """Issue 36 C: durable and first-acquirer as the sender set them (false kept false, not
    sent stays not sent), as Microsoft's amqpAnnotatedMessage.spec reads them back."""
    sent = [
        AmqpAnnotatedMessage(
            data_body=b"f",
            header=AmqpMessageHeader(durable=False, first_acquirer=False, priority=7),
        ),
        AmqpAnnotatedMessage(
            data_body=b"t", header=AmqpMessageHeader(durable=True, first_acquirer=True)
        ),
        AmqpAnnotatedMessage(data_body=b"n"),
    ]
    with sb_client.get_queue_sender("ap-header") as sender:
        for message in sent:
            sender.send_messages(message)
    with sb_client.get_queue_receiver("ap-header", max_wait_time=5) as receiver:
        got = receive_n(receiver, 3)
        headers = [m.raw_amqp_message.header for m in got]
        assert [(h.durable, h.first_acquirer) for h in headers] == [
            (False, False),
            (True, True),
            (None, None),
        ]
        assert headers[0].priority == 7
        for m in got:
            receiver.complete_message(m)


def test_js_admin_parity(sbemu_server: SbemuServer) -> None:
    """tests/js/admin_azure_parity.mjs: authorization rules in Azure's canonical XML (the JS
    SDK read none from the client's own prefixes), rules in name order, a Date property of a
    correlation rule read back, GET / with a SAS token an Atom feed."""
    run_js_admin_script(sbemu_server, "admin_azure_parity.mjs", "admin parity ok", amqp=True)


def test_namespace_root_is_atom_with_sas_and_the_dashboard_without(
    sbemu_server: SbemuServer,
) -> None:
    """Issue 36 G: a bare GET / that carries a SAS token (the JS SDK's, no api-version) is an
    admin client's: Azure's Atom feed; a browser's (no token) is the dashboard's page."""
    base = f"{sbemu_server.admin_url}/"
    expiry = int(dt.datetime.now(dt.timezone.utc).timestamp()) + 3600
    token = make_sas_token(base, sbemu_server.key_name, sbemu_server.key, expiry)
    atom = requests.get(base, headers={"Authorization": token}, timeout=30)
    assert atom.status_code == 200
    assert atom.headers["content-type"].startswith("application/atom+xml")
    assert atom.text.startswith("<?xml") and "<feed" in atom.text
    page = requests.get(base, timeout=30)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
