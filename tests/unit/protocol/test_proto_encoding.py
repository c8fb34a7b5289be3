"""Frame encoding traps 1 and 2 of the contract (section 0 / 1.6): what every performative the
broker writes looks like on the wire, for a full client session (open .. close).
"""

from __future__ import annotations

import pytest
from amqp_harness import (
    ATTACH,
    BEGIN,
    FLOW,
    OPEN,
    PERFORMATIVE_FIELDS,
    TRANSFER,
    EnginePair,
    perf_types,
)
from proton import Data, Delivery, Message


@pytest.fixture
def session_frames(pair: EnginePair):
    """Every frame the server wrote for: send, peek-lock receive + complete, refused attach,
    detach, end, close."""
    snd = pair.sender("queue.1")
    pair.send(snd, Message(id="e1", body=b"x"))
    rcv = pair.receiver("queue.1", credit=1)
    ((dlv, _),) = pair.take(rcv)
    dlv.update(Delivery.ACCEPTED)
    pair.pump()
    pair.receiver("no-such-queue")
    rcv.close()
    pair.session.close()
    pair.conn.close()
    pair.pump()
    return [f for f in pair.frames() if f.header is None and f.ftype == 0 and f.code is not None]


def test_descriptors_are_smallulong(session_frames):
    # Trap 2: pyamqp reads the performative code at byte 2 of the body.
    assert session_frames
    for f in session_frames:
        assert f.body[0] == 0x00 and f.body[1] == 0x53 and f.body[2] == f.code, f.body[:3].hex()


def test_values_python_needs_explicitly(session_frames):
    # [contract 1.6] open.max-frame-size, begin.handle-max, attach.initial-delivery-count when the
    # broker is the sender, flow.delivery-count / link-credit on link flows.
    by = {}
    for f in session_frames:
        by.setdefault(f.code, []).append(f)
    (open_,) = by[OPEN]
    assert open_.field(0)  # container-id
    mfs = perf_types(open_)[2]
    assert mfs.type == Data.UINT and mfs.value >= 512
    for b in by[BEGIN]:
        assert b.field(0) is not None  # remote-channel
        hm = perf_types(b)
        assert len(hm) > 4 and hm[4].type == Data.UINT
    for a in by[ATTACH]:
        if a.field(2) is False and a.field(5) is not None:  # role sender, accepted
            assert perf_types(a)[9].type == Data.UINT
    for fl in by[FLOW]:
        if fl.field(4) is not None:
            t = perf_types(fl)
            assert t[5].type == Data.UINT and t[6].type == Data.UINT


def test_performatives_are_full_length_lists(session_frames):
    short = []
    for f in session_frames:
        want = PERFORMATIVE_FIELDS.get(f.code)
        if want is None:
            continue
        if f.body[3] not in (0xC0, 0xD0) or len(f.fields) != want:
            short.append((hex(f.code), len(f.fields), want, hex(f.body[3])))
    assert not short, f"(code, fields, expected, constructor): {sorted(set(short))}"


def test_transfer_fields_present(session_frames):
    # Whatever the list length, a broker transfer names handle, delivery-id, tag and format.
    transfers = [f for f in session_frames if f.code == TRANSFER]
    assert transfers
    for t in transfers:
        assert t.field(0) is not None and t.field(1) is not None and t.field(2) is not None
