"""Application properties of every AMQP type through the server [issue 23 item 3].

The SDK suite's test_message_property: a Decimal property sent by azure-servicebus made the
message (and, on that receiver, the ones behind it) undeliverable: pyamqp cannot read its own
decimal encoding, the service re-encodes decimals in its .NET layout (protocol/decimals.py).
Every other type is kept as sent; a decimal .NET cannot hold is refused at send."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import ServiceBusError
from integration_support import ServerProcess, proton_connect, queue_def, receive_n
from proton import (
    Array,
    Data,
    Delivery,
    Described,
    Message,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

SBEMU_QUEUES = [queue_def("pt-sdk"), queue_def("pt-all"), queue_def("pt-refuse")]


def dotnet_value(raw16: bytes) -> Decimal:
    """A decimal128 as the .NET decoder reads it (the layout the service writes)."""
    exponent = (((raw16[0] & 0x7F) << 7) | ((raw16[1] & 0xFE) >> 1)) - 6176
    scale = (-exponent) & 0xFF
    digits = tuple(int(d) for d in str(int.from_bytes(raw16[4:], "big")))
    return Decimal((1 if raw16[0] & 0x80 else 0, digits, -scale))


def test_sdk_decimal_property_round_trips(server: ServerProcess) -> None:
    """The SDK suite's test_message_property, plus the messages behind it."""
    props = {"prop": "test", "intprop": 1, "byteprop": b"byte", "decimalprop": Decimal("1.2345")}
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_sender("pt-sdk") as sender:
            sender.send_messages(ServiceBusMessage("hello", application_properties=props))
            sender.send_messages([ServiceBusMessage(f"after-{i}") for i in range(2)])
        with client.get_queue_receiver("pt-sdk") as peeker:
            (peeked, *_) = peeker.peek_messages(3)
            assert peeked.application_properties[b"decimalprop"] == Decimal("1.2345")
        with client.get_queue_receiver(
            "pt-sdk", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, max_wait_time=5
        ) as receiver:
            got = receive_n(receiver, 3, timeout=15)
        assert [str(m) for m in got] == ["hello", "after-0", "after-1"]
        app = got[0].application_properties
        assert app[b"prop"] == b"test" and app[b"intprop"] == 1 and app[b"byteprop"] == b"byte"
        assert app[b"decimalprop"] == Decimal("1.2345")


def _all_types() -> dict[str, object]:
    d128 = bytes((0x30, 0x38, 0, 0)) + (12345).to_bytes(12, "big")  # IEEE: 1.2345
    ints = Array(Data.NULL, Data.INT, 1, 2, 3)
    return {
        "ubyte": ubyte(200),
        "ushort": ushort(60000),
        "uint": uint(4_000_000_000),
        "ulong": ulong(2**63 + 5),
        "byte": byte(-5),
        "short": short(-300),
        "int": int32(-70000),
        "long": -(2**40),
        "float": float32(1.5),
        "double": 2.25,
        "bool": True,
        "null": None,
        "decimal32": decimal32(((101 - 1) << 23) | 15),  # 1.5
        "decimal64": decimal64((1 << 63) | ((398 - 3) << 53) | 123456),  # -123.456
        "decimal128": decimal128(d128),
        "char": char("é"),
        "timestamp": timestamp(1_700_000_000_123),
        "uuid": uuid.UUID(int=0x1234),
        "binary": b"\x00\x01",
        "string": "text",
        "symbol": symbol("sym"),
        "int_array": ints,
        "described": Described(symbol("com.example:kind"), "value"),
    }


def test_every_amqp_type_round_trips(server: ServerProcess) -> None:
    sent = _all_types()
    conn = proton_connect(server)
    try:
        delivery = conn.create_sender("pt-all").send(Message(body="all", properties=sent))
        assert delivery.remote_state == Delivery.ACCEPTED
        receiver = conn.create_receiver("pt-all", credit=1)
        got = receiver.receive(timeout=10).properties
        receiver.accept()
    finally:
        conn.close()
    decimals = {"decimal32": "1.5", "decimal64": "-123.456", "decimal128": "1.2345"}
    for name, value in sent.items():
        if name in decimals:  # decimal128 in the service's layout, the same value
            assert type(got[name]) is decimal128, name
            assert dotnet_value(bytes(got[name])) == Decimal(decimals[name]), name
        elif name == "int_array":
            assert list(got[name].elements) == [1, 2, 3]
        elif name == "binary":  # (proton hands binary over as a memoryview)
            assert bytes(got[name]) == value
        else:
            assert got[name] == value and type(got[name]) is type(value), name


def test_sdk_reads_decimal32_and_decimal64_sent_by_a_proton_client(server: ServerProcess) -> None:
    props = {k: v for k, v in _all_types().items() if k != "char"}  # pyamqp reads no char
    conn = proton_connect(server)
    try:
        conn.create_sender("pt-all").send(Message(body="sdk", properties=props))
    finally:
        conn.close()
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_receiver("pt-all", max_wait_time=5) as receiver:
            (m,) = receive_n(receiver, 1, timeout=10)
            app = m.application_properties
            assert app[b"decimal32"] == Decimal("1.5")
            assert app[b"decimal64"] == Decimal("-123.456")
            assert app[b"decimal128"] == Decimal("1.2345")
            assert app[b"uuid"] == uuid.UUID(int=0x1234)
            assert app[b"timestamp"] == 1_700_000_000_123
            assert app[b"int_array"] == [1, 2, 3]
            receiver.complete_message(m)


def test_decimal_beyond_net_is_refused_at_send_and_blocks_nothing(server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=0) as client:
        with client.get_queue_sender("pt-refuse") as sender:
            with pytest.raises(ServiceBusError, match="scale of 40"):
                sender.send_messages(
                    ServiceBusMessage("x", application_properties={"d": Decimal("1E-40")})
                )
            sender.send_messages(ServiceBusMessage("next"))
        with client.get_queue_receiver("pt-refuse", max_wait_time=5) as receiver:
            (m,) = receive_n(receiver, 1, timeout=10)
            assert str(m) == "next"
            receiver.complete_message(m)
