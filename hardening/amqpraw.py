"""Hand-built AMQP 1.0 frames for fuzzing (a client that can say anything, including wrong
things), and a tolerant parser for what the server answers."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from sbemu.protocol import codec

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
FRAME = struct.Struct(">IBBH")

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_MECHANISMS, SASL_INIT, SASL_OUTCOME = 0x40, 0x41, 0x44
ACCEPTED = 0x24
SOURCE, TARGET = 0x28, 0x29
PERFORMATIVES = {
    OPEN: "open",
    BEGIN: "begin",
    ATTACH: "attach",
    FLOW: "flow",
    TRANSFER: "transfer",
    DISPOSITION: "disposition",
    DETACH: "detach",
    END: "end",
    CLOSE: "close",
}

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


def frame(
    code: int, fields: list[bytes], *, channel: int = 0, ftype: int = 0, payload: bytes = b""
) -> bytes:
    """One frame: an encoded performative (pre-encoded fields) plus an optional payload."""
    body = codec.enc_described(code, codec.enc_list(fields)) + payload
    return FRAME.pack(8 + len(body), 2, ftype, channel) + body


def sasl_plain(user: str = KEY_NAME, password: str = KEY, host: str = "localhost") -> bytes:
    response = b"\x00" + user.encode() + b"\x00" + password.encode()
    return frame(
        SASL_INIT,
        [codec.enc_symbol("PLAIN"), codec.enc_binary(response), codec.enc_string(host)],
        ftype=1,
    )


def sasl_anonymous() -> bytes:
    return frame(
        SASL_INIT,
        [codec.enc_symbol("ANONYMOUS"), codec.enc_null(), codec.enc_string("localhost")],
        ftype=1,
    )


def open_frame(container: str = "fuzz", max_frame: int = 65536) -> bytes:
    return frame(
        OPEN,
        [
            codec.enc_string(container),
            codec.enc_string("localhost"),
            codec.enc_uint(max_frame),
            codec.enc_ushort(255),
        ],
    )


def begin_frame(channel: int = 0, remote_channel: int | None = None) -> bytes:
    return frame(
        BEGIN,
        [
            codec.enc_ushort(remote_channel) if remote_channel is not None else codec.enc_null(),
            codec.enc_uint(0),
            codec.enc_uint(5000),
            codec.enc_uint(5000),
            codec.enc_uint(4096),
        ],
        channel=channel,
    )


def terminus(code: int, address: str | None) -> bytes:
    return codec.enc_described(
        code,
        codec.enc_list([codec.enc_string(address) if address is not None else codec.enc_null()]),
    )


def attach_frame(
    name: str,
    handle: int,
    role_receiver: bool,
    address: str | None,
    *,
    channel: int = 0,
    reply_address: str | None = None,
) -> bytes:
    """role_receiver=True: the client receives (source = address)."""
    if role_receiver:
        source, target = terminus(SOURCE, address), terminus(TARGET, reply_address)
    else:
        source, target = terminus(SOURCE, reply_address), terminus(TARGET, address)
    return frame(
        ATTACH,
        [
            codec.enc_string(name),
            codec.enc_uint(handle),
            codec.enc_bool(role_receiver),
            codec.enc_ubyte(0),
            codec.enc_ubyte(0),
            source,
            target,
        ],
        channel=channel,
    )


def flow_frame(
    handle: int | None,
    credit: int = 100,
    *,
    delivery_count: int = 0,
    channel: int = 0,
    drain: bool = False,
) -> bytes:
    fields = [codec.enc_uint(0), codec.enc_uint(5000), codec.enc_uint(0), codec.enc_uint(5000)]
    if handle is not None:
        fields += [
            codec.enc_uint(handle),
            codec.enc_uint(delivery_count),
            codec.enc_uint(credit),
            codec.enc_uint(0),
            codec.enc_bool(drain),
        ]
    return frame(FLOW, fields, channel=channel)


def transfer_frame(
    handle: int,
    delivery_id: int,
    payload: bytes,
    *,
    channel: int = 0,
    settled: bool = False,
    tag: bytes | None = None,
) -> bytes:
    return frame(
        TRANSFER,
        [
            codec.enc_uint(handle),
            codec.enc_uint(delivery_id),
            codec.enc_binary(tag if tag is not None else delivery_id.to_bytes(4, "big")),
            codec.enc_uint(0),
            codec.enc_bool(settled),
        ],
        channel=channel,
        payload=payload,
    )


def disposition_frame(
    first: int, last: int | None = None, *, role_receiver: bool = True, channel: int = 0
) -> bytes:
    return frame(
        DISPOSITION,
        [
            codec.enc_bool(role_receiver),
            codec.enc_uint(first),
            codec.enc_uint(last) if last is not None else codec.enc_null(),
            codec.enc_bool(True),
            codec.enc_described(ACCEPTED, codec.enc_list([])),
        ],
        channel=channel,
    )


def detach_frame(handle: int, *, channel: int = 0, closed: bool = True) -> bytes:
    return frame(DETACH, [codec.enc_uint(handle), codec.enc_bool(closed)], channel=channel)


def end_frame(channel: int = 0) -> bytes:
    return frame(END, [codec.enc_null()], channel=channel)


def close_frame() -> bytes:
    return frame(CLOSE, [codec.enc_null()])


def message_payload(body: bytes = b"fuzz", message_id: str | None = None) -> bytes:
    """A minimal encoded message: properties(message-id) + data section."""
    props = codec.enc_described(
        0x73, codec.enc_list([codec.enc_string(message_id or str(uuid.uuid4()))])
    )
    return props + codec.enc_described(0x75, codec.enc_binary(body))


def handshake(mode: str = "plain") -> bytes:
    """Client bytes up to (and including) open + begin on channel 0."""
    if mode == "plain":
        pre = SASL_HEADER + sasl_plain() + AMQP_HEADER
    elif mode == "anonymous":
        pre = SASL_HEADER + sasl_anonymous() + AMQP_HEADER
    else:
        pre = AMQP_HEADER
    return pre + open_frame() + begin_frame()


# ------------------------------------------------------------------------------ parsing
@dataclass
class Frame:
    ftype: int
    channel: int
    code: Any
    fields: list[Any]
    payload: bytes

    @property
    def name(self) -> str:
        return PERFORMATIVES.get(self.code, str(self.code))

    def error(self) -> str | None:
        """The condition of a detach/end/close error field, if any."""
        idx = {DETACH: 2, END: 0, CLOSE: 0}.get(self.code)
        if idx is None or idx >= len(self.fields) or self.fields[idx] is None:
            return None
        err = self.fields[idx]
        value = getattr(err, "value", None)
        return str(value[0]) if value else "?"


def parse(buf: bytes) -> tuple[list[Frame], list[bytes], bool]:
    """(frames, protocol headers seen, every byte understood) for a server's output."""
    frames: list[Frame] = []
    headers: list[bytes] = []
    pos, n = 0, len(buf)
    while pos < n:
        if buf[pos : pos + 4] == b"AMQP":
            headers.append(buf[pos : pos + 8])
            pos += 8
            continue
        if n - pos < 8:
            return frames, headers, False
        size, doff, ftype, channel = FRAME.unpack_from(buf, pos)
        if size < 8 or n - pos < size:
            return frames, headers, False
        body = buf[pos + doff * 4 : pos + size]
        pos += size
        if not body:
            continue  # heartbeat
        try:
            perf, end = codec.decode(body, 0)
        except codec.DecodeError:
            return frames, headers, False
        fields = list(getattr(perf, "value", None) or [])
        frames.append(Frame(ftype, channel, getattr(perf, "descriptor", None), fields, body[end:]))
    return frames, headers, True


class EncodedMessage:
    """Encoded message bytes for python-qpid-proton's ``BlockingSender.send``, which sends what
    the object's ``send`` writes: any bytes in one transfer, valid AMQP or not."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def send(self, sender: Any, tag: Any = None) -> Any:
        delivery = sender.delivery(tag or sender.delivery_tag())
        sender.stream(self.data)
        sender.advance()
        return delivery
