"""protocol/largerequest.py: a request over READ_CHUNK bytes, its large binary read into a
bytes object of its own and the request put together as proton decodes it whole."""

from __future__ import annotations

import uuid

import pytest
from proton import UNDESCRIBED, Array, Data, Message, int32

from sbemu.protocol import codec, largerequest
from sbemu.protocol.largerequest import PREFIX, READ_CHUNK


def _parts(data: bytes) -> tuple[tuple[int, int, int] | None, object]:
    """find_large on the first PREFIX bytes, and the request assembled from the parts as
    RequestRead reads them."""
    prefix = data[:PREFIX]
    found = largerequest.find_large(prefix)
    if found is None:
        return None, None
    _body, at, size = found
    content = at + 5
    large, rest = data[content : content + size], data[content + size :]
    return found, largerequest.assemble(prefix[:content], found, large, rest)


@pytest.mark.parametrize("extra", [False, True])
def test_a_scheduled_large_message_reads_back_as_proton_decodes_it(extra: bool) -> None:
    big = bytes(range(256)) * ((READ_CHUNK + 1000) // 256)
    item = {"message-id": "m-1", "message": big}
    if extra:  # keys after it, and a second message after that one
        item["partition-key"] = "pk"
    messages = [item, {"message-id": "m-2", "message": b"small"}] if extra else [item]
    sent = Message(
        id=uuid.uuid4(),
        reply_to="reply-here",
        properties={"operation": "com.microsoft:schedule-message", "server-timeout": int32(5)},
        body={"messages": messages},
    )
    data = sent.encode()
    found, got = _parts(data)
    assert found is not None and found[2] == len(big)
    whole = Message()
    whole.decode(data)
    assert got.body == whole.body
    assert got.id == whole.id and got.reply_to == "reply-here"
    assert got.properties == whole.properties


def test_a_request_without_a_large_binary_up_front_is_read_whole() -> None:
    small = Message(properties={"operation": "x"}, body={"messages": [{"message": b"s" * 100}]})
    assert largerequest.find_large(small.encode()) is None
    # a large binary inside an array is left to proton too
    arr = Message(body={"a": Array(UNDESCRIBED, Data.BINARY, b"x" * (READ_CHUNK + 1))})
    assert largerequest.find_large(arr.encode()[:PREFIX]) is None
    assert largerequest.find_large(b"\x00\x53") is None  # cut short: no answer, no error
    assert largerequest.find_large(b"garbage bytes") is None


def test_deep_nesting_in_front_of_a_large_binary_is_left_to_proton() -> None:
    """A hostile body (lists nested past MAX_DEPTH) is not walked here: the request is read
    whole and decoded (or refused) by proton, as a small one is; no RecursionError."""
    deep = b"\xc0\x03\x01" * 10_000  # list8 holding a list8 holding ...
    data = b"\x00\x53\x77" + deep + b"\x40"
    assert largerequest.find_large(data[:PREFIX]) is None
    shadow = b"\x00\x53\x77" + b"\xc0\x03\x01" * 40 + b"\x40"
    with pytest.raises(codec.DecodeError, match="nested too deep"):  # answered as undecodable
        largerequest.assemble(shadow, (0, 10**6, READ_CHUNK + 1), b"", b"")
