"""protocol/websocket.py in memory: the upgrade check, and AMQP bytes through a wsproto client."""

from __future__ import annotations

import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage
from wsproto.utilities import generate_accept_token

from sbemu.protocol.websocket import HandshakeRefused, WebSocketFraming, accept_headers

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 1.3's example
GOOD = {
    "upgrade": "websocket",
    "connection": "keep-alive, Upgrade",
    "sec-websocket-version": "13",
    "sec-websocket-key": KEY,
    "sec-websocket-protocol": "chat, AMQPWSB10",
}


def test_accept_headers() -> None:
    headers = dict(accept_headers(GOOD))
    assert headers["Sec-WebSocket-Accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 1.3
    assert headers["Sec-WebSocket-Accept"] == generate_accept_token(KEY.encode()).decode()
    assert headers["Sec-WebSocket-Protocol"] == "AMQPWSB10"
    assert (headers["Upgrade"], headers["Connection"]) == ("websocket", "Upgrade")


def test_the_oasis_name_is_accepted_too() -> None:
    headers = dict(accept_headers(GOOD | {"sec-websocket-protocol": "amqp"}))
    assert headers["Sec-WebSocket-Protocol"] == "amqp"


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"upgrade": ""}, 426),
        ({"connection": "close"}, 400),
        ({"sec-websocket-version": "8"}, 426),
        ({"sec-websocket-key": ""}, 400),
        ({"sec-websocket-key": "not base64 at all!!!!!!!"}, 400),  # [RFC 6455 4.1]
        ({"sec-websocket-key": "c2hvcnQ="}, 400),  # base64 of 5 bytes, not 16
        ({"sec-websocket-key": "dGhlIHNhbXBsZSBub25jZSBsb25n"}, 400),  # of 20 bytes
        ({"sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ"}, 400),  # padding missing
        ({"sec-websocket-protocol": "mqtt"}, 400),
    ],
)
def test_refusals(change: dict[str, str], status: int) -> None:
    with pytest.raises(HandshakeRefused) as info:
        accept_headers(GOOD | change)
    assert info.value.status == status


def client() -> Connection:
    return Connection(ConnectionType.CLIENT)


def test_binary_messages_carry_amqp_both_ways() -> None:
    peer = client()
    framing = WebSocketFraming(trailing_data=peer.send(BytesMessage(data=b"AMQP")))
    got = framing.receive_data(peer.send(BytesMessage(data=b"\x00\x01\x00\x00")))
    assert b"".join(got.amqp) == b"AMQP\x00\x01\x00\x00" and not got.closed
    framing.send(b"AMQP\x03\x01\x00\x00")
    peer.receive_data(framing.data_to_send())
    events = list(peer.events())
    assert len(events) == 1 and isinstance(events[0], BytesMessage)
    assert events[0].data == b"AMQP\x03\x01\x00\x00"


def test_ping_gets_pong_and_text_gets_1003() -> None:
    peer = client()
    framing = WebSocketFraming()
    assert framing.receive_data(peer.send(Ping(payload=b"x"))).amqp == []
    peer.receive_data(framing.data_to_send())
    assert [type(e) for e in peer.events()] == [Pong]
    assert framing.receive_data(peer.send(TextMessage(data="AMQP"))).closed
    peer.receive_data(framing.data_to_send())
    (close,) = peer.events()
    assert isinstance(close, CloseConnection) and close.code == 1003


def test_the_peers_close_is_answered() -> None:
    peer = client()
    framing = WebSocketFraming()
    assert framing.receive_data(peer.send(CloseConnection(code=1000))).closed
    peer.receive_data(framing.data_to_send())
    (close,) = peer.events()
    assert isinstance(close, CloseConnection) and close.code == 1000


def test_a_broken_frame_closes_with_1002() -> None:
    framing = WebSocketFraming()
    # an unmasked client frame breaks RFC 6455 5.1
    assert framing.receive_data(b"\x82\x04AMQP").closed
    peer = client()  # reads the server's (unmasked) frames
    peer.receive_data(framing.data_to_send())
    (close,) = peer.events()
    assert isinstance(close, CloseConnection) and close.code == 1002
    assert "mask" in close.reason


def test_end_of_stream_closes() -> None:
    assert WebSocketFraming().receive_data(None).closed


def test_an_http_1_0_upgrade_is_refused() -> None:
    # [RFC 6455 4.2.1] "An HTTP/1.1 or higher GET request"
    with pytest.raises(HandshakeRefused) as info:
        accept_headers(GOOD, "1.0")
    assert info.value.status == 400
    assert dict(accept_headers(GOOD, "1.1"))["Sec-WebSocket-Protocol"] == "AMQPWSB10"
