"""Azure's send quotas through the Python SDK, on a Standard and a Premium namespace (issue 35,
items 2, 4, 5): 32 KB per application property and 64 KB for all of a message's headers and
properties (amqp:link:message-size-exceeded: the SDK raises MessageSizeExceededError), 4,500
messages in a batch (amqp:resource-limit-exceeded: ServiceBusQuotaExceededError), a batch past
the batch size refused before it is split, and a batch whose messages are written with
long-form (ulong) section descriptors split into its messages.

Two real servers (the package's launcher), one per tier, for the module."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusQuotaExceededError
from hardening.amqpraw import EncodedMessage
from proton import Delivery, Message
from proton.utils import BlockingConnection, SendException

from sbemu.protocol.codec import _skip
from sbemu.testing.pytest_plugin import SbemuServer, start_server, stop_server

MIB = 1024 * 1024


def _config(premium: bool) -> dict[str, Any]:
    namespace: dict[str, Any] = {
        "Name": "sbemulatorns",
        "Queues": [{"Name": "q"}, {"Name": "batches"}, {"Name": "long-form"}],
    }
    if premium:
        namespace["PremiumMessagingPartitions"] = 1
        namespace["Queues"].append(
            {"Name": "huge", "Properties": {"MaxMessageSizeInKilobytes": 102_400}}
        )
    return {"UserConfig": {"Namespaces": [namespace], "Logging": {"Type": "File"}}}


@dataclass(frozen=True)
class Tier:
    name: str  # "standard" or "premium"
    server: SbemuServer


@pytest.fixture(scope="module", params=["standard", "premium"])
def tier(request: pytest.FixtureRequest) -> Iterator[Tier]:
    folder = Path(tempfile.mkdtemp(prefix=f"sbemu-quotas-{request.param}-"))
    config = folder / "config.json"
    config.write_text(json.dumps(_config(request.param == "premium")))
    server = start_server(folder / "data", str(config))
    try:
        yield Tier(request.param, server)
    finally:
        stop_server(server)


# On Standard the message (256 KB) or batch size is passed first: these run on Premium only
PREMIUM_ONLY = pytest.mark.parametrize("tier", ["premium"], indirect=True)


def _client(tier: Tier) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(tier.server.connection_string, retry_total=0)


def _send(server: Tier, queue: str, message: Any) -> None:
    with _client(server) as sb, sb.get_queue_sender(queue) as sender:
        sender.send_messages(message)


def _drain(server: Tier, queue: str, wait: float = 2) -> list[Any]:
    got: list[Any] = []
    # receive-and-delete: what is counted is what arrived, not how fast a loaded machine can
    # complete 500 messages one by one within their locks
    with (
        _client(server) as sb,
        sb.get_queue_receiver(
            queue, max_wait_time=wait, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver,
    ):
        while True:
            batch = receiver.receive_messages(max_message_count=500, max_wait_time=wait)
            if not batch:
                return got
            got.extend(batch)


@pytest.mark.parametrize(
    "properties",
    [
        {"big": "v" * 40_000},  # one property past 32 KB
        {"k" * 60_000: "v"},  # a 60 KB key
        {f"p{i}": "v" for i in range(10_000)},  # 10,000 properties, about 130 KB
    ],
    ids=["40-kb-value", "60-kb-key", "10000-properties"],
)
def test_properties_past_azure_quotas_raise_message_size_exceeded(
    tier: Tier, properties: dict[str, str]
) -> None:
    with pytest.raises(MessageSizeExceededError) as raised:
        _send(tier, "q", ServiceBusMessage("body", application_properties=properties))
    assert "size quota" in str(raised.value)
    assert _drain(tier, "q", wait=0.5) == []  # nothing stored


def test_properties_within_the_quotas_round_trip(tier: Tier) -> None:
    props = {"a": "x" * 30_000, "b": "y" * 30_000}  # each under 32 KB, together under 64 KB
    _send(tier, "q", ServiceBusMessage("ok", application_properties=props))
    (got,) = _drain(tier, "q")
    assert {k.decode(): v.decode() for k, v in got.application_properties.items()} == props


@PREMIUM_ONLY
def test_a_million_properties_are_refused_before_they_are_read(tier: Tier) -> None:
    raw = _message_with_properties(1_000_000)  # 12 MB, encoded once here (the SDK takes ~20 s)
    assert len(raw) > 10 * MIB
    conn = _proton(tier)
    try:
        sender = conn.create_sender("huge")
        started = time.perf_counter()
        with pytest.raises(SendException) as raised:
            sender.send(EncodedMessage(raw))
        took = time.perf_counter() - started
    finally:
        conn.close()
    assert raised.value.state == Delivery.REJECTED  # amqp:link:message-size-exceeded
    assert took < 2.0  # was 1-2 s of the event loop alone; now the transfer is most of it


@PREMIUM_ONLY
def test_4500_messages_in_a_batch_are_taken_and_4501_refused(tier: Tier) -> None:
    with _client(tier) as sb, sb.get_queue_sender("batches") as sender:
        batch = sender.create_message_batch()
        for i in range(4501):
            batch.add_message(ServiceBusMessage(str(i)))
        with pytest.raises(ServiceBusQuotaExceededError) as raised:
            sender.send_messages(batch)
        assert "more than 4500" in str(raised.value)
        batch = sender.create_message_batch()
        for i in range(4500):
            batch.add_message(ServiceBusMessage(str(i)))
        sender.send_messages(batch)
    assert len(_drain(tier, "batches")) == 4500


def test_a_long_form_batch_is_split_into_its_messages(tier: Tier) -> None:
    parts = [_long_form(bytes(Message(id=f"m-{i}", body=f"b-{i}").encode())) for i in range(20)]
    envelope = b"".join(b"\x00\x53\x75\xb0" + len(p).to_bytes(4, "big") + p for p in parts)
    conn = _proton(tier)
    try:
        conn.create_sender("long-form").send(EncodedMessage(envelope))
    finally:
        conn.close()
    got = _drain(tier, "long-form")
    assert sorted(m.message_id for m in got) == sorted(f"m-{i}" for i in range(20))
    assert len(got) == 20  # (was 1 message holding the 20)


@PREMIUM_ONLY
def test_a_batch_past_the_batch_size_is_refused_at_once(tier: Tier) -> None:
    # the probe: a header, then 9,000,000 tiny data sections (99 MB) to a 100 MB queue
    tiny = b"\x00\x53\x75\xa0\x06" + b"\x00\x53\x77\xa1\x01x"
    payload = b"\x00\x53\x70\xc0\x02\x01\x41" + tiny * 9_000_000
    conn = _proton(tier, timeout=120)
    try:
        sender = conn.create_sender("huge")
        with pytest.raises(SendException) as raised:
            sender.send(EncodedMessage(payload), timeout=120)
    finally:
        conn.close()
    assert raised.value.state == Delivery.REJECTED  # amqp:link:message-size-exceeded


def _proton(tier: Tier, timeout: float = 30) -> Any:
    server = tier.server
    return BlockingConnection(
        f"amqp://127.0.0.1:{server.amqp_port}",
        timeout=timeout,
        sasl_enabled=True,
        allowed_mechs="PLAIN",
        user=server.key_name,
        password=server.key,
    )


def _long_form(message: bytes) -> bytes:
    """`message` with its section descriptors written 00 80 <ulong> (valid AMQP)."""
    out, pos = [], 0
    while pos < len(message):
        end = _skip(message, pos + 3)
        out.append(b"\x00\x80" + message[pos + 2].to_bytes(8, "big") + message[pos + 3 : end])
        pos = end
    return b"".join(out)


def _message_with_properties(count: int) -> bytes:
    from sbemu.protocol.codec import enc_described, enc_map, enc_string

    props = enc_map([(enc_string(f"p{i}"), enc_string("v")) for i in range(count)])
    return enc_described(0x74, props) + enc_described(0x75, b"\xa0\x01x")
