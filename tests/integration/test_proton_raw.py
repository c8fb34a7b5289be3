"""A plain AMQP 1.0 client (python-qpid-proton) with SASL PLAIN (brief item 13), and interop
between proton and the azure-servicebus SDK on the same queue.
"""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusMessage
from integration_support import (
    KEY_NAME,
    body_text,
    proton_connect,
    queue_def,
    receive_n,
    send_plain,
)
from proton import ConnectionException, Delivery, Message

SBEMU_QUEUES = [
    queue_def("q1"),
    queue_def("r-interop"),
    queue_def("r-release"),
    queue_def("r-part", partitioned=True),
]


def test_plain_sasl_send_and_receive(server):
    conn = proton_connect(server)
    try:
        sender = conn.create_sender("q1")
        for i in range(3):
            delivery = sender.send(Message(body=f"raw-{i}", id=f"raw-{i}", durable=True))
            assert delivery.remote_state == Delivery.ACCEPTED
        receiver = conn.create_receiver("q1", credit=10)
        got = []
        for _ in range(3):
            msg = receiver.receive(timeout=5)
            got.append(msg)
            receiver.accept()
        assert [m.body for m in got] == ["raw-0", "raw-1", "raw-2"]
        assert [m.id for m in got] == ["raw-0", "raw-1", "raw-2"]
        # Service Bus annotations are stamped on deliveries.
        for m in got:
            ann = m.annotations or {}
            assert ann.get("x-opt-sequence-number", 0) > 0
            assert "x-opt-enqueued-time" in ann
            assert "x-opt-locked-until" in ann
        receiver.close()
    finally:
        conn.close()
    # Accepted = completed: nothing left for the SDK either.
    from azure.servicebus import ServiceBusClient

    with (
        ServiceBusClient.from_connection_string(server.conn_str) as c,
        c.get_queue_receiver("q1", max_wait_time=1) as r,
    ):
        assert r.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_plain_sasl_wrong_password_is_refused(server):
    t0 = time.monotonic()
    with pytest.raises(ConnectionException):
        conn = proton_connect(server, password="definitely-wrong", timeout=8)
        conn.close()
    assert time.monotonic() - t0 < 7, "a bad password must be refused at connect, not time out"


def test_plain_sasl_unknown_user_is_refused(server):
    with pytest.raises(ConnectionException):
        conn = proton_connect(server, user="nobody", timeout=8)
        conn.close()


def test_proton_sends_sdk_receives(server, sb_client):
    conn = proton_connect(server)
    try:
        sender = conn.create_sender("r-interop")
        msg = Message(
            body=b"binary-from-proton",
            id="from-proton",
            correlation_id="corr",
            subject="subj",
            content_type="application/octet-stream",
            properties={"k": "v", "n": 7},
            durable=True,
        )
        msg.inferred = True  # body as a data section, the way the SDKs send bytes
        assert sender.send(msg).remote_state == Delivery.ACCEPTED
    finally:
        conn.close()
    with sb_client.get_queue_receiver("r-interop", max_wait_time=5) as r:
        (m,) = receive_n(r, 1)
        assert b"".join(m.body) == b"binary-from-proton"
        assert m.message_id == "from-proton"
        assert m.correlation_id == "corr"
        assert m.subject == "subj"
        assert m.content_type == "application/octet-stream"
        props = {
            (k.decode() if isinstance(k, bytes) else k): v
            for k, v in m.application_properties.items()
        }
        assert props["n"] == 7 and props["k"] in ("v", b"v")
        assert m.delivery_count == 0
        r.complete_message(m)


def test_sdk_sends_proton_receives(server, sb_client):
    send_plain(
        sb_client,
        "r-interop",
        [ServiceBusMessage("from-sdk", message_id="sdk-1", application_properties={"a": 1})],
    )
    conn = proton_connect(server)
    try:
        receiver = conn.create_receiver("r-interop", credit=1)
        msg = receiver.receive(timeout=5)
        assert msg.id == "sdk-1"
        body = msg.body
        body = body.tobytes() if hasattr(body, "tobytes") else body
        assert body in (b"from-sdk", "from-sdk")
        assert msg.properties == {"a": 1}
        receiver.accept()
    finally:
        conn.close()


def test_proton_release_and_reject(server, sb_client):
    """released = unlock without counting a delivery; rejected = dead-letter [contract §5.1]."""
    from azure.servicebus import ServiceBusSubQueue

    send_plain(sb_client, "r-release", [ServiceBusMessage("rel", message_id="rel-1")])
    conn = proton_connect(server)
    try:
        receiver = conn.create_receiver("r-release", credit=0)  # one credit per receive() call
        msg = receiver.receive(timeout=5)
        assert msg.id == "rel-1"
        receiver.release(delivered=False)  # a plain `released` (delivered=True sends modified)
    finally:
        conn.close()
    with sb_client.get_queue_receiver("r-release", max_wait_time=5) as r:
        got = receive_n(r, 1, timeout=4)
        assert [m.message_id for m in got] == ["rel-1"], "released message not receivable at once"
        assert got[0].delivery_count == 0, "released must not bump the delivery count"
        r.complete_message(got[0])

    send_plain(sb_client, "r-release", [ServiceBusMessage("rej", message_id="rej-1")])
    conn = proton_connect(server)
    try:
        receiver = conn.create_receiver("r-release", credit=0)
        msg = receiver.receive(timeout=5)
        assert msg.id == "rej-1"
        receiver.reject()
    finally:
        conn.close()
    with sb_client.get_queue_receiver("r-release", max_wait_time=1) as r:
        assert r.receive_messages(max_message_count=1, max_wait_time=1) == []
    with sb_client.get_queue_receiver(
        "r-release", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
    ) as dlq:
        dead = receive_n(dlq, 1, timeout=5)
        assert [m.message_id for m in dead] == ["rej-1"], "rejected message is not in the DLQ"
        dlq.complete_message(dead[0])


def test_proton_partitioned_queue_annotations(server):
    conn = proton_connect(server)
    try:
        sender = conn.create_sender("r-part")
        for i in range(16):
            sender.send(Message(body=f"p-{i}"))
        sender.send(Message(body="keyed", annotations={"x-opt-partition-key": "the-key"}))
        receiver = conn.create_receiver("r-part", credit=50)
        seen = []
        for _ in range(17):
            m = receiver.receive(timeout=5)
            receiver.accept()
            seen.append(m)
        pids = {m.annotations["x-opt-sequence-number"] >> 48 for m in seen if m.body != "keyed"}
        assert pids == set(range(16))
        for m in seen:
            assert (
                m.annotations.get("x-opt-partition-id")
                == m.annotations["x-opt-sequence-number"] >> 48
            )
        keyed = next(m for m in seen if m.body == "keyed")
        assert keyed.annotations.get("x-opt-partition-key") == "the-key"
    finally:
        conn.close()


def test_key_name_is_the_plain_user(server):
    """Sanity: the PLAIN user is the SAS key name (a connect with it works)."""
    conn = proton_connect(server, user=KEY_NAME)
    conn.close()


def test_body_text_helper_handles_sdk_bodies(server, sb_client):
    send_plain(sb_client, "r-interop", [ServiceBusMessage("helper")])
    with sb_client.get_queue_receiver("r-interop", max_wait_time=5) as r:
        (m,) = receive_n(r, 1)
        assert body_text(m) == "helper"
        r.complete_message(m)
