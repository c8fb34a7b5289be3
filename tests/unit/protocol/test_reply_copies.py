"""A lock renewal's answer in a burst of renewals goes out again to a pyamqp peer
(replycopies.py): at once and at each of COPY_DELAYS later, with the same correlation-id, never
spending the half of the reply link's credit kept for answers; a lone renewal, other peers and
other operations get one answer.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from amqp_harness import TRANSFER, EnginePair, raw_tag
from proton import Array, Data, Message, symbol

from sbemu.protocol.replycopies import (
    BURST,
    COPY_DELAYS,
    NUDGE,
    NUDGE_FOR,
    TICK,
    ReplyCopies,
    wants_copies,
)

Q = "queue.1"
LATER = max(COPY_DELAYS) * 2  # past every copy
PYAMQP_AGENT = "azsdk-python-servicebus/7.15.0 pyamqp/7.15.0 Python/3.11.7 (Linux-x86_64)"


def _open(services, agent: str | None) -> EnginePair:
    pair = EnginePair(services, sasl="PLAIN")
    if agent is not None:
        pair.conn.properties = {symbol("user-agent"): agent}
    return pair.open()


def _locked_message(pair: EnginePair) -> uuid.UUID:
    snd = pair.sender(Q)
    pair.send(snd, Message(id="m-0", body=b"body"))
    ((dlv, _),) = pair.take(pair.receiver(Q, credit=1, name="plr"))
    return uuid.UUID(bytes_le=raw_tag(dlv))


def _mgmt_links(pair: EnginePair, credit: int):
    node = f"{Q}/$management"
    return pair.sender(node, source=node), pair.receiver(
        node, target=node, credit=credit, peek_lock=False
    )


def _renew(pair: EnginePair, links, token: uuid.UUID) -> Message:
    reply, _ = pair.mgmt(
        links, "com.microsoft:renew-lock", {"lock-tokens": Array(None, Data.UUID, token)}
    )
    return reply


def _later(pair: EnginePair, links, seconds: float) -> list[Message]:
    """Move the clock, run the connection's timer, and return the answers that arrived."""
    pair.now += seconds
    pair.server.handle_timer(pair.now)
    pair.pump()
    return [_decoded(raw) for _, raw in pair.take(links[1])]


def _decoded(raw: bytes) -> Message:
    m = Message()
    m.decode(raw)
    return m


@pytest.mark.parametrize("status", [200, 410])
def test_pyamqp_peer_gets_the_answers_of_a_burst_of_renewals_again(services, status):
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair) if status == 200 else uuid.uuid4()  # 410: no such lock
    links = _mgmt_links(pair, credit=100)
    first = _renew(pair, links, token)
    second = _renew(pair, links, token)  # the same moment: a burst
    assert first.properties["statusCode"] == second.properties["statusCode"] == status
    elapsed = 0.0
    for delay in COPY_DELAYS:
        halfway = (elapsed + delay) / 2
        assert _later(pair, links, halfway - elapsed) == []  # not yet
        copies = _later(pair, links, delay + TICK - halfway)
        elapsed = delay + TICK
        assert [c.correlation_id for c in copies] == [first.correlation_id, second.correlation_id]
        for copy, answer in zip(copies, (first, second), strict=True):
            assert copy.properties == answer.properties
            assert copy.body == answer.body
    assert _later(pair, links, LATER) == []  # no more


def test_a_lone_renewal_is_answered_once(services):
    """One lock renewed every few seconds: no thread can drop its answer, no credit spent."""
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair)
    links = pair.mgmt_links(Q)
    assert _renew(pair, links, token).properties["statusCode"] == 200
    assert _later(pair, links, BURST + TICK) == []
    assert _renew(pair, links, token).properties["statusCode"] == 200  # more than BURST later
    assert _later(pair, links, LATER) == []


def test_a_renewal_soon_after_makes_the_one_before_part_of_a_burst(services):
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair)
    links = _mgmt_links(pair, credit=100)
    first = _renew(pair, links, token)
    assert _later(pair, links, BURST / 2) == []  # its early copies were not owed yet: skipped
    second = _renew(pair, links, token)
    copies = _later(pair, links, LATER)
    assert [c.correlation_id for c in copies].count(first.correlation_id) == 1  # its last copy
    assert [c.correlation_id for c in copies].count(second.correlation_id) == len(COPY_DELAYS)


@pytest.mark.parametrize("agent", [None, "azsdk-net-servicebus/7.18.0", "azsdk-js-azureservicebus"])
def test_other_peers_get_one_answer(services, agent):
    pair = _open(services, agent)
    token = _locked_message(pair)
    links = pair.mgmt_links(Q)
    assert _renew(pair, links, token).properties["statusCode"] == 200
    assert _later(pair, links, LATER) == []


def test_other_operations_are_answered_once(services):
    pair = _open(services, PYAMQP_AGENT)
    _locked_message(pair)
    links = pair.mgmt_links(Q)
    peek = {"from-sequence-number": 0, "message-count": 1}
    reply, _ = pair.mgmt(links, "com.microsoft:peek-message", peek)
    assert reply.properties["statusCode"] == 200
    assert _later(pair, links, LATER) == []


def test_copies_keep_half_the_reply_links_credit_for_answers(services):
    """pyamqp grants its reply link credit once: copies never spend the half it had left when
    the first copy was owed."""
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair)
    links = _mgmt_links(pair, credit=6)
    rcv = links[1]
    first = _renew(pair, links, token)  # 5 left: the floor is 2
    second = _renew(pair, links, token)  # 4 left
    copies = _later(pair, links, LATER)
    # the first round of copies takes 4 -> 2; nothing more goes at the floor
    assert [c.correlation_id for c in copies] == [first.correlation_id, second.correlation_id]
    assert rcv.credit == 2
    third = _renew(pair, links, token)  # a real answer still has credit
    assert third.properties["statusCode"] == 200


def test_no_copy_after_the_session_ended(services):
    """pyamqp ends a closed receiver's session before it detaches its $management links."""
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair)
    links = pair.mgmt_links(Q)
    assert _renew(pair, links, token).properties["statusCode"] == 200
    mark = pair.mark()
    pair.session.close()  # end, with the links still attached
    pair.pump()
    pair.now += LATER
    pair.server.handle_timer(pair.now)
    pair.pump()
    assert [f for f in pair.frames_since(mark) if f.code == TRANSFER] == []
    assert not pair.server.closed


def _renew_without_credit(pair: EnginePair, token: uuid.UUID):
    """A renewal on a new $management pair whose reply link has no credit yet (pyamqp's flow
    not written yet): the answer waits."""
    links = _mgmt_links(pair, credit=0)
    request = Message(
        id=uuid.uuid4(),
        reply_to=links[0].target.address,
        properties={"operation": "com.microsoft:renew-lock"},
        body={"lock-tokens": Array(None, Data.UUID, token)},
    )
    pair.send(links[0], request)
    assert pair.take(links[1]) == []
    return links, request


def _empty_frames_after(pair: EnginePair, seconds: float) -> int:
    """Run the connection's timer at each deadline over `seconds`; the empty frames sent."""
    mark, end = pair.mark(), pair.now + seconds
    while True:
        due = pair.server.next_deadline()
        if due is None or due > end:
            break
        pair.now = due
        pair.server.handle_timer(pair.now)
        pair.pump()
    pair.now = end
    return sum(1 for f in pair.frames_since(mark) if f.code is None and f.header is None)


def test_a_pyamqp_peer_whose_reply_link_has_no_credit_is_nudged_until_it_grants_some(services):
    """pyamqp writes its reply link's credit under the lock its reading threads keep taking:
    empty frames end their reads so the flow can go out; the answer goes with the credit."""
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair)
    links, request = _renew_without_credit(pair, token)
    nudges = _empty_frames_after(pair, 0.5)
    assert 0.5 / NUDGE - 2 <= nudges <= 0.5 / NUDGE + 1
    links[1].flow(10)
    pair.pump()
    ((_, raw),) = pair.take(links[1])
    assert _decoded(raw).correlation_id == request.id
    assert _empty_frames_after(pair, 1.0) == 0  # nothing waits: no more
    assert not pair.server.closed


def test_nudges_stop_after_nudge_for(services):
    """A peer that never grants credit is nudged for NUDGE_FOR seconds, then left alone."""
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair)
    _renew_without_credit(pair, token)
    assert _empty_frames_after(pair, NUDGE_FOR) > 0
    assert _empty_frames_after(pair, 1.0) == 0
    assert pair.server.next_deadline() is None or pair.server.next_deadline() > pair.now + 1


@pytest.mark.parametrize("agent", [None, "azsdk-js-azureservicebus/7.9.5 rhea/3.0.2"])
def test_other_peers_are_not_nudged(services, agent):
    pair = _open(services, agent)
    token = _locked_message(pair)
    _renew_without_credit(pair, token)
    assert _empty_frames_after(pair, 1.0) == 0


def test_nudges_fall_due_every_nudge_while_answers_wait():
    copies = ReplyCopies()
    copies.answer_waits(50.0)
    assert copies.next_deadline() == pytest.approx(50.0 + NUDGE)
    assert not copies.nudge_due(50.0, waiting=lambda: True)  # not yet
    assert copies.nudge_due(50.0 + NUDGE, waiting=lambda: True)
    assert copies.next_deadline() == pytest.approx(50.0 + 2 * NUDGE)
    assert not copies.nudge_due(50.0 + 2 * NUDGE, waiting=lambda: False)  # credit came: stop
    assert copies.next_deadline() is None
    copies.answer_waits(60.0)
    assert copies.nudge_due(60.0 + NUDGE_FOR, waiting=lambda: True)  # the last one
    assert not copies.nudge_due(60.0 + NUDGE_FOR + NUDGE, waiting=lambda: True)
    assert copies.next_deadline() is None


def test_copies_fall_due_in_order():
    copies = ReplyCopies()
    r1, r2, r3 = (SimpleNamespace(copy_floor=None) for _ in range(3))
    assert copies.next_deadline() is None
    copies.add(100.001, r1, b"a", 10)
    copies.add(100.004, r2, b"b", 10)  # due on the same tick: sent together
    copies.add(100.013, r3, b"c", 10)  # the next tick
    for delay in COPY_DELAYS:
        due = copies.next_deadline()
        assert due is not None and 100.004 + delay <= due < 100.001 + delay + TICK
        assert copies.take_due(due - 0.0001) == []
        assert copies.take_due(due) == [(r1, b"a"), (r2, b"b")]
        assert copies.take_due(due + TICK) == [(r3, b"c")]
    assert copies.next_deadline() is None
    assert r1.copy_floor == 5


def test_wants_copies_reads_the_user_agent():
    assert wants_copies({symbol("user-agent"): PYAMQP_AGENT})
    assert not wants_copies({symbol("user-agent"): "azsdk-python-servicebus/7.1 uamqp/1.6.9"})
    assert not wants_copies({symbol("product"): "pyamqp"})
    assert not wants_copies(None)
