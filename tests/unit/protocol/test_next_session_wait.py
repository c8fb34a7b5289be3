"""How long a next-available-session attach waits when no session is free [issue 23].

Azure holds the attach until a session with messages can be locked or the wait ends, then
answers attach(null source) + detach(com.microsoft:timeout), which the SDKs raise as a timeout
(Python: OperationTimeoutError). The wait is the `com.microsoft:timeout` link property the
client sends (Python: the receiver's max_wait_time in ms), otherwise the service's operation
timeout of 65 s ("did not complete within the allotted timeout of 00:01:05", the message SDK
users report, e.g. azure-sdk-for-python#28495). Engine pair, in memory, on a moved clock."""

from __future__ import annotations

import pytest
from amqp_harness import EnginePair
from proton import Link, Message, symbol, uint

from sbemu.protocol.attach import timespan

SOURCE = "amqps://localhost:5671/queue.session"


def _attach_next(pair: EnginePair, name: str, timeout_ms: int | None) -> Link:
    rcv = pair.session.receiver(name)
    rcv.source.address = SOURCE
    rcv.target.address = f"receiver-link-{name}"
    rcv.source.filter.put_dict({symbol("com.microsoft:session-filter"): None})
    if timeout_ms is not None:
        rcv.properties = {symbol("com.microsoft:timeout"): uint(timeout_ms)}
    rcv.open()
    pair.pump()
    return rcv


def _waiting(rcv: Link) -> bool:
    return not (rcv.state & Link.REMOTE_ACTIVE) and rcv.remote_condition is None


def _timed_out(rcv: Link) -> bool:
    cond = rcv.remote_condition
    return cond is not None and cond.name == "com.microsoft:timeout"


@pytest.mark.parametrize(
    ("timeout_ms", "wait_s"),
    [(None, 65.0), (2_000, 2.0), (70_000, 70.0)],  # the service default; shorter; longer
)
def test_the_attach_is_answered_when_the_wait_ends(spair, timeout_ms, wait_s):
    rcv = _attach_next(spair, f"next-{timeout_ms}", timeout_ms)
    assert _waiting(rcv)
    spair.advance(wait_s - 0.5)
    assert _waiting(rcv), f"answered before {wait_s} s"
    spair.advance(1.0)
    assert _timed_out(rcv), f"not answered with com.microsoft:timeout after {wait_s} s"
    assert rcv.remote_source.address is None  # refused: null source [contract 3.1]
    allotted = {None: "00:01:05", 2_000: "00:00:02", 70_000: "00:01:10"}[timeout_ms]
    assert f"within the allotted timeout of {allotted}" in rcv.remote_condition.description


def test_timespan_prints_as_dotnet():
    assert timespan(65_000) == "00:01:05"
    assert timespan(3_953) == "00:00:03.9530000"
    assert timespan(86_400_000 + 3_600_000) == "1.01:00:00"


def test_a_session_that_gets_a_message_ends_the_wait(spair):
    rcv = _attach_next(spair, "next-served", 70_000)
    spair.advance(30)
    assert _waiting(rcv)
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="m", body=b"x", group_id="late"))
    spair.pump()
    assert rcv.state & Link.REMOTE_ACTIVE and rcv.remote_condition is None
    data = rcv.remote_source.filter
    data.rewind()
    data.next()
    assert {str(k): v for k, v in data.get_object().items()} == {
        "com.microsoft:session-filter": "late"
    }
