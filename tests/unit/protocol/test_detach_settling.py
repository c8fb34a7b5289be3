"""A receiver that settles and detaches at once: the outcomes are answered before the detach.

Java's ServiceBusProcessorClient closes its receive link while completions are still committing;
a broker that detaches at once never sends their dispositions and the client reports
"The receiver didn't receive the disposition acknowledgment due to receive link closure".
sbemu holds the detach reply until the link's outcomes in flight are answered (bounded by
protocol/detaching.py's DETACH_HOLD_SECONDS).
"""

from __future__ import annotations

import pytest
from amqp_harness import ACCEPTED, DETACH, DISPOSITION, MODIFIED, EnginePair, raw_tag
from proton import Delivery, Message

from sbemu.protocol.detaching import DETACH_HOLD_SECONDS

Q = "queue.1"
PQ = "queue.partitioned"


def _received(pair: EnginePair, entity: str, count: int):
    snd = pair.sender(entity)
    for i in range(count):
        pair.send(snd, Message(id=f"m-{i}", body=f"body-{i}".encode()))
    rcv = pair.receiver(entity, credit=count, name=f"closing-{entity}")
    got = pair.take(rcv)
    assert len(got) == count
    return rcv, [dlv for dlv, _ in got]


def _handle_of(pair: EnginePair, name: str) -> int:
    attaches = [f for f in pair.frames() if f.code == 0x12 and f.field(0) == name]
    return attaches[0].field(1)


def _answers_then_detach(pair: EnginePair, mark: int, handle: int):
    """(settled outcomes answered per delivery id, index of our detach) in the frames since
    mark, in wire order."""
    answered: dict[int, int] = {}
    detach_at = None
    for i, frame in enumerate(pair.frames_since(mark)):
        if frame.code == DISPOSITION and frame.field(0) is False and detach_at is None:
            first = frame.field(1)
            last = frame.field(2) if frame.field(2) is not None else first
            assert frame.field(3) is True, "an answer settles the delivery"
            for delivery_id in range(first, last + 1):
                answered[delivery_id] = frame.field(4).descriptor
        if frame.code == DETACH and frame.field(0) == handle:
            detach_at = i
    return answered, detach_at


@pytest.mark.parametrize("entity", [Q, PQ])
def test_completes_answered_before_the_detach(pair, entity):
    rcv, deliveries = _received(pair, entity, 6)
    handle = _handle_of(pair, rcv.name)
    mark = pair.mark()
    for dlv in deliveries:  # unsettled accepts, as the SDKs send completes [contract 5.2]
        dlv.update(Delivery.ACCEPTED)
    rcv.close()  # in the same frames as the accepts: commits still pending when it arrives
    _read_and_flush(pair)  # the listener writes what the read produced, before any commit
    pair.pump()  # the commits land
    answered, detach_at = _answers_then_detach(pair, mark, handle)
    assert detach_at is not None, "the detach is answered"
    assert sorted(answered.values()) == [ACCEPTED] * 6, "every complete answered first"
    assert all(d.settled and d.remote_state == Delivery.ACCEPTED for d in deliveries)
    # the completes were applied: nothing comes back
    again = pair.receiver(entity, credit=10)
    assert pair.take(again) == []


def test_abandon_answered_before_the_detach(pair):
    rcv, deliveries = _received(pair, Q, 3)
    handle = _handle_of(pair, rcv.name)
    mark = pair.mark()
    for dlv in deliveries:
        dlv.local.failed = True
        dlv.update(Delivery.MODIFIED)
    rcv.close()
    _read_and_flush(pair)
    pair.pump()
    answered, detach_at = _answers_then_detach(pair, mark, handle)
    assert detach_at is not None
    assert sorted(answered.values()) == [MODIFIED] * 3


def test_detach_without_outcomes_in_flight_is_immediate(pair):
    rcv, deliveries = _received(pair, Q, 2)
    handle = _handle_of(pair, rcv.name)
    mark = pair.mark()
    rcv.close()  # the locked messages stay locked; nothing to wait for
    pair.pump()
    answered, detach_at = _answers_then_detach(pair, mark, handle)
    assert detach_at is not None and answered == {}
    assert rcv.state & rcv.REMOTE_CLOSED


def test_detach_hold_is_bounded(pair):
    """A commit that never lands within the bound: the detach goes out anyway; the late
    commit then settles quietly."""
    rcv, deliveries = _received(pair, Q, 2)
    handle = _handle_of(pair, rcv.name)
    tags = {raw_tag(d) for d in deliveries}
    assert len(tags) == 2
    for dlv in deliveries:
        dlv.update(Delivery.ACCEPTED)
    rcv.close()
    mark = pair.mark()
    _read_and_flush(pair)  # and no commit lands
    assert [f for f in pair.frames_since(mark) if f.code == DETACH] == []
    assert _detach_of(pair, mark, handle) is None, "held while the completes commit"
    deadline = pair.server.next_deadline()
    assert deadline is not None and deadline <= pair.now + DETACH_HOLD_SECONDS
    pair.now += DETACH_HOLD_SECONDS
    pair.server.handle_timer(pair.now)
    _server_out(pair)
    assert _detach_of(pair, mark, handle) is not None, "detached once the hold ran out"
    pair.pump()  # the commits land now: nothing to answer on a detached link, no error
    assert not pair.server.closed


def _detach_of(pair: EnginePair, mark: int, handle: int):
    for frame in pair.frames_since(mark):
        if frame.code == DETACH and frame.field(0) == handle:
            return frame
    return None


def _server_out(pair: EnginePair) -> None:
    out = pair.server.data_to_send()
    pair.s2c += out
    pair._to_client(out)


def _read_and_flush(pair: EnginePair) -> None:
    """One socket read: the client's frames to the server and its answer back, without the
    partition commits (EnginePair.pump runs those before it flushes)."""
    pending = pair.transport.pending()
    pair.feed(pair.transport.peek(pending))
    pair.transport.pop(pending)
    _server_out(pair)


def test_completes_answered_before_the_connection_closes(pair):
    """Java's processor: the last complete, then end and close at once, without a detach."""
    rcv, deliveries = _received(pair, PQ, 4)
    mark = pair.mark()
    for dlv in deliveries:
        dlv.update(Delivery.ACCEPTED)
    pair.session.close()
    pair.conn.close()
    _read_and_flush(pair)
    # proton reads nothing after the peer's close frame and has nothing to send while the close
    # reply is held: the socket must stay until it went out (it was dropped, and Java logged
    # "connection aborted" and the missing acknowledgments)
    assert not pair.server.closed, "the connection was dropped before its held close went out"
    pair.pump()
    frames = pair.frames_since(mark)
    close_at = next(i for i, f in enumerate(frames) if f.code == 0x18)
    answered = set()
    for frame in frames[:close_at]:
        if frame.code == DISPOSITION and frame.field(0) is False:
            last = frame.field(2) if frame.field(2) is not None else frame.field(1)
            answered.update(range(frame.field(1), last + 1))
    assert len(answered) == 4, "every complete answered before the close"
    assert all(d.settled and d.remote_state == Delivery.ACCEPTED for d in deliveries)


def test_completes_answered_before_the_session_ends(pair):
    rcv, deliveries = _received(pair, Q, 3)
    mark = pair.mark()
    for dlv in deliveries:
        dlv.update(Delivery.ACCEPTED)
    pair.session.close()  # no detach: the end takes the link with it
    _read_and_flush(pair)
    assert [f for f in pair.frames_since(mark) if f.code == 0x17] == [], "held while committing"
    pair.pump()
    frames = pair.frames_since(mark)
    end_at = next(i for i, f in enumerate(frames) if f.code == 0x17)
    answered = [f for f in frames[:end_at] if f.code == DISPOSITION and f.field(0) is False]
    assert answered, "the completes answered before the end"
    assert all(d.settled and d.remote_state == Delivery.ACCEPTED for d in deliveries)
