"""raw_tag reads delivery tags as bytes, the empty one included (found by fuzzing: a
receive-and-delete delivery carries an empty tag, and a peer may send a disposition for it)."""

from __future__ import annotations

import pytest
from proton import Connection, Transport

from sbemu.protocol.deliveries import raw_tag


def _pump(a: Transport, b: Transport) -> None:
    for _ in range(20):
        moved = False
        for src, dst in ((a, b), (b, a)):
            out = src.peek(1 << 16)
            if out:
                dst.push(out)
                src.pop(len(out))
                moved = True
        if not moved:
            return


@pytest.mark.parametrize("tag", [b"", b"\x00\x01", bytes(range(16))])
def test_raw_tag_of_any_tag(tag: bytes) -> None:
    client, server = Connection(), Connection()
    ct, st = Transport(), Transport(Transport.SERVER)
    ct.bind(client)
    st.bind(server)
    client.open()
    session = client.session()
    session.open()
    sender = session.sender("s")
    sender.open()
    _pump(ct, st)
    server.open()
    rsession = server.session_head(0)
    rsession.open()
    receiver = server.link_head(0)
    receiver.open()
    receiver.flow(1)
    _pump(ct, st)
    sender.delivery(tag)
    sender.send(b"body")
    sender.advance()
    _pump(ct, st)
    incoming = receiver.current
    assert incoming is not None
    assert raw_tag(incoming) == tag
