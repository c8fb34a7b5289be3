"""protocol/largeanswer.py: a `$management` answer written around a large message's parts
reads back, with proton, as the answer proton itself encodes."""

from __future__ import annotations

import uuid

from proton import Message, int32

from sbemu.protocol import largeanswer
from sbemu.protocol.largedelivery import LARGE_DELIVERY


def test_the_parts_read_back_as_the_answer_proton_writes() -> None:
    big = [b"\x00Sp\xc0\x01\x00", memoryview(b"x" * (LARGE_DELIVERY + 1))]  # parts, one a view
    small = [b"\x00Su\xa0\x03abc"]
    token = uuid.uuid4()
    items = [(big, token), (small, None)]
    assert largeanswer.is_large(items) and not largeanswer.is_large([(small, None)])
    app = {"statusCode": int32(200), "statusDescription": "OK"}
    head = Message(correlation_id=7, properties=app).encode()
    data = bytes(largeanswer.answer(head, items))
    got = Message()
    got.decode(data)
    expected = {
        "messages": [
            {"message": b"".join(bytes(p) for p in big), "lock-token": token},
            {"message": small[0]},
        ]
    }
    assert got.body == expected
    assert got.correlation_id == 7 and got.properties == app
    assert len(largeanswer.answer(head, items)) == len(data)  # the size it announces
