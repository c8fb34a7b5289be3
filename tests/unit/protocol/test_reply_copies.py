"""A lock renewal's answer goes out again to a pyamqp peer (replycopies.py): at once and at each
of COPY_DELAYS later, with the same correlation-id; other peers and other operations get one
answer.
"""

from __future__ import annotations

import uuid

import pytest
from amqp_harness import TRANSFER, EnginePair, raw_tag
from proton import Array, Data, Message, symbol

from sbemu.protocol.replycopies import COPY_DELAYS, TICK, ReplyCopies, wants_copies

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
def test_pyamqp_peer_gets_each_renewal_answer_again(services, status):
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair) if status == 200 else uuid.uuid4()  # 410: no such lock
    links = pair.mgmt_links(Q)
    first = _renew(pair, links, token)
    assert first.properties["statusCode"] == status
    elapsed = 0.0
    for delay in COPY_DELAYS:
        halfway = (elapsed + delay) / 2
        assert _later(pair, links, halfway - elapsed) == []  # not yet
        (copy,) = _later(pair, links, delay + TICK - halfway)
        elapsed = delay + TICK
        assert copy.correlation_id == first.correlation_id
        assert copy.properties == first.properties
        assert copy.body == first.body
    assert _later(pair, links, LATER) == []  # no more


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


def test_no_copy_without_spare_credit(services):
    """The copy never takes the reply link's last credit: a real answer may need it."""
    pair = _open(services, PYAMQP_AGENT)
    token = _locked_message(pair)
    node = f"{Q}/$management"
    snd = pair.sender(node, source=node)
    rcv = pair.receiver(node, target=node, credit=1, peek_lock=False)  # the answer's only
    assert _renew(pair, (snd, rcv), token).properties["statusCode"] == 200
    rcv.flow(1)  # one credit again: the copy would take the last one
    pair.pump()
    assert _later(pair, (snd, rcv), LATER) == []
    rcv.flow(1)  # two: the copy no longer would, but it was given up, not kept
    pair.pump()
    assert _later(pair, (snd, rcv), LATER) == []


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


def test_copies_fall_due_in_order():
    copies = ReplyCopies()
    assert copies.next_deadline() is None
    copies.add(100.001, "r1", b"a")
    copies.add(100.004, "r2", b"b")  # due on the same tick: sent together
    copies.add(100.013, "r3", b"c")  # the next tick
    for delay in COPY_DELAYS:
        due = copies.next_deadline()
        assert due is not None and 100.004 + delay <= due < 100.001 + delay + TICK
        assert copies.take_due(due - 0.0001) == []
        assert copies.take_due(due) == [("r1", b"a"), ("r2", b"b")]
        assert copies.take_due(due + TICK) == [("r3", b"c")]
    assert copies.next_deadline() is None


def test_wants_copies_reads_the_user_agent():
    assert wants_copies({symbol("user-agent"): PYAMQP_AGENT})
    assert not wants_copies({symbol("user-agent"): "azsdk-python-servicebus/7.1 uamqp/1.6.9"})
    assert not wants_copies({symbol("product"): "pyamqp"})
    assert not wants_copies(None)
