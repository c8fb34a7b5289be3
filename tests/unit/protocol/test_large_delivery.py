"""Large deliveries handed to the engine a slice per loop pass (sbemu.protocol.largedelivery):
each slice only once the peer took the one before (the output gate), nothing else dispatched
to the connection meanwhile, the rest of the run after it in order, the same bytes as one
call gives, and a connection gone mid-delivery leaving the message to come back once its lock
expired. The steps are run by hand here, as the listener runs them on later loop passes; the
slice is made small so a message the queue takes (256 KB) is large."""

from __future__ import annotations

import math

import pytest
from amqp_harness import EnginePair, raw_tag
from proton import Delivery, Message

from sbemu.protocol import deliveries, outgoing

Q = "queue.1"
SLICE = 16 * 1024
BODY = bytes(range(256)) * 800  # 200 KB


class Steps(list):
    """The connection's `defer`: the steps it asks for, run by run()."""

    def run(self, pair: EnginePair, check: object = None) -> int:
        n = 0
        while self:
            self.pop(0)()
            n += 1
            if callable(check):
                check()
            pair.pump()
        return n


@pytest.fixture
def steps(pair: EnginePair, monkeypatch) -> Steps:
    monkeypatch.setattr(deliveries, "LARGE_DELIVERY", SLICE)
    monkeypatch.setattr(outgoing, "LARGE_DELIVERY", SLICE)
    monkeypatch.setattr(deliveries, "SEND_SLICE", SLICE)
    got = Steps()
    pair.server.defer = got.append
    return got


def _message(pair: EnginePair, raw: bytes) -> Message:
    got = Message()
    got.decode(raw)
    return got


def test_a_large_delivery_goes_a_slice_a_step_each_once_the_last_was_taken(pair, steps) -> None:
    pair.send(pair.sender(Q), Message(id="big", body=BODY, durable=True))
    gate = pair.server.gate
    queued: list[int] = []
    rcv = pair.receiver(Q, credit=1)
    assert gate.blocked and len(steps) == 1 and not pair.take(rcv)
    n = steps.run(pair, lambda: queued.append(gate.queued))
    assert max(queued) <= SLICE  # a slice at most in the engine
    assert not gate.blocked and gate.sending == 0
    ((dlv, raw),) = pair.take(rcv)
    assert n == math.ceil(len(raw) / SLICE) - 1  # the first slice went with the flow
    got = _message(pair, raw)
    assert got.id == "big" and got.body == BODY
    assert got.annotations["x-opt-sequence-number"] == 1
    dlv.update(Delivery.ACCEPTED)
    dlv.settle()
    pair.pump()
    assert pair.router.entities  # still serving
    assert not pair.take(rcv) and not steps


def test_the_sliced_bytes_are_the_ones_one_call_gives(pair, steps, monkeypatch) -> None:
    snd = pair.sender(Q)
    pair.send(snd, Message(id="a", body=BODY, properties={"p": 1}))
    rcv = pair.receiver(Q, credit=1)
    steps.run(pair)
    ((first, sliced),) = pair.take(rcv)
    first.update(Delivery.RELEASED)  # back, its delivery count unchanged
    first.settle()
    pair.pump()
    monkeypatch.setattr(outgoing, "LARGE_DELIVERY", 1 << 30)  # joined and sent in one call
    monkeypatch.setattr(deliveries, "LARGE_DELIVERY", 1 << 30)
    rcv.flow(1)
    pair.pump()
    assert not steps
    ((again, whole),) = pair.take(rcv)
    # the same message, but for its lock token (the delivery-annotations) and locked-until
    assert len(sliced) == len(whole)
    token = raw_tag(first)  # .NET byte order in the tag; the annotation has network order
    assert sliced.count(BODY) == whole.count(BODY) == 1
    assert sliced[sliced.index(BODY) - 64 :] == whole[whole.index(BODY) - 64 :]
    assert raw_tag(again) != token


def test_nothing_else_is_dispatched_meanwhile_and_the_rest_follows_in_order(pair, steps) -> None:
    snd = pair.sender(Q)
    pair.send(snd, Message(id="small-0", body=b"x"))
    pair.send(snd, Message(id="big", body=BODY))
    pair.send(snd, Message(id="small-1", body=b"y"))
    rcv = pair.receiver(Q, credit=3)
    got = pair.take(rcv)
    assert [_message(pair, raw).id for _, raw in got] == ["small-0"]  # the run stops at big
    pair.send(snd, Message(id="small-2", body=b"z"))  # ready while big is under way
    assert not pair.take(rcv)
    steps.run(pair)
    got = pair.take(rcv)
    assert [_message(pair, raw).id for _, raw in got] == ["big", "small-1"]
    assert rcv.credit == 0  # credit 3 spent: small-2 waits for more
    rcv.flow(1)
    pair.pump()
    assert [_message(pair, raw).id for _, raw in pair.take(rcv)] == ["small-2"]


def test_a_receive_and_delete_delivery_goes_in_slices_presettled(pair, steps) -> None:
    pair.send(pair.sender(Q), Message(id="big", body=BODY))
    rcv = pair.receiver(Q, credit=1, peek_lock=False)
    assert steps.run(pair) >= 2
    ((dlv, raw),) = pair.take(rcv)
    assert dlv.settled and _message(pair, raw).body == BODY


def test_a_connection_gone_mid_delivery_leaves_the_message_to_come_back(
    pair, steps, services
) -> None:
    pair.send(pair.sender(Q), Message(id="big", body=BODY))
    pair.receiver(Q, credit=1)
    steps.pop(0)()
    pair.server.connection_lost()
    steps.run(pair)  # what was asked for runs into a closed connection: nothing happens
    assert not steps
    other = EnginePair(services, sasl="PLAIN", now=pair.now).open()
    rcv = other.receiver(Q, credit=1)
    other.server.defer = steps.append
    assert not steps and not other.take(rcv)  # still locked
    other.advance(120)  # past the lock duration: the message is ready again
    steps.run(other)
    ((dlv, raw),) = other.take(rcv)
    got = _message(other, raw)
    assert got.id == "big" and got.body == BODY and got.delivery_count == 1


def test_a_link_detached_mid_delivery_stops_it_and_the_connection_serves_on(pair, steps) -> None:
    snd = pair.sender(Q)
    pair.send(snd, Message(id="big", body=BODY))
    rcv = pair.receiver(Q, credit=1)
    rcv.close()
    pair.pump()
    steps.run(pair)
    assert not pair.server.gate.blocked and pair.server.gate.sending == 0
    pair.send(snd, Message(id="small", body=b"x"))
    rcv2 = pair.receiver(Q, credit=1)
    assert [_message(pair, raw).id for _, raw in pair.take(rcv2)] == ["small"]
