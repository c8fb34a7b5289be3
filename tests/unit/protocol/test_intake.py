"""Transfers taken over several turns of the event loop (sbemu.protocol.intake): a batch of
4,500 messages scanned SCAN_CHUNK messages a step, a large message read and copied a slice a
step, with nothing stored until the last step (then all of it in one send: one commit) and the
connection's later input handled after it, in order. The steps are run by hand here, as the
listener runs them on later loop passes."""

from __future__ import annotations

import math

import pytest
from amqp_harness import EnginePair, codec, run_commits
from proton import Delivery, Message

from sbemu.protocol import intake, largescan, messageevents
from sbemu.protocol.messages import SCAN_CHUNK

Q = "queue.1"
HEADER = b"\x00\x53\x70\xc0\x02\x01\x41"
TINY = b"\x00\x53\x75\xa0\x06" + b"\x00\x53\x77\xa1\x01x"  # a data section holding a message


class Steps(list):
    """The connection's `defer`: the steps it asks for, run by run()."""

    def run_one(self) -> None:
        self.pop(0)()

    def run(self, pair: EnginePair) -> int:
        n = 0
        while self:
            self.run_one()
            n += 1
        pair.pump()
        return n


def _active(pair: EnginePair) -> int:
    entity = next(e for (_, name), e in pair.router.entities.items() if name == Q)
    return sum(b.counts(next(iter(b.queues)))["active"] for b in entity.partitions)


def _send_unpumped(pair: EnginePair, snd, payload: bytes) -> Delivery:
    dlv = snd.delivery(str(id(payload)).encode())
    snd.send(payload)
    snd.advance()
    return dlv


@pytest.fixture
def steps(pair: EnginePair) -> Steps:
    got = Steps()
    pair.server.defer = got.append
    return got


def test_a_batch_of_4500_is_scanned_a_chunk_a_step_and_stored_whole(pair, steps) -> None:
    snd = pair.sender(Q)
    dlv = pair.send(snd, HEADER + TINY * 4500)
    assert pair.server.busy and len(steps) == 1
    taken = 0
    while len(steps) and not _active(pair):
        steps.run_one()
        taken += 1
        run_commits(pair.router, int(pair.now * 1000))  # commits between steps store nothing
        if pair.server.busy:
            assert _active(pair) == 0 and dlv.remote_state == 0
    assert taken == math.ceil(4500 / SCAN_CHUNK)
    assert _active(pair) == 4500  # staged whole, in the last step
    pair.pump()
    assert dlv.remote_state == Delivery.ACCEPTED  # after its commit
    assert not pair.server.busy


def test_what_the_client_sent_after_the_batch_is_taken_after_it(pair, steps) -> None:
    snd = pair.sender(Q)
    first = _send_unpumped(pair, snd, HEADER + TINY * 1000)
    after = _send_unpumped(pair, snd, Message(id="after", body=b"x").encode())
    pair.pump()  # both transfers reach the server in one read
    assert pair.server.busy and _active(pair) == 0
    assert steps.run(pair) == math.ceil(1000 / SCAN_CHUNK)
    assert first.remote_state == after.remote_state == Delivery.ACCEPTED
    rcv = pair.receiver(Q, credit=2000)
    got = [Message() for _ in range(1001)]
    for m, (_, raw) in zip(got, pair.take(rcv), strict=True):
        m.decode(raw)
    assert got[-1].id == "after"  # behind the batch, as sent


def test_a_batch_refused_at_a_later_chunk_stores_nothing(pair, steps) -> None:
    big = Message(id="big", properties={"p": "v" * 40_000}).encode()  # past Azure's 32 KB
    envelope = HEADER + TINY * 1500 + codec.enc_described(0x75, codec.enc_binary(big))
    snd = pair.sender(Q)
    dlv = pair.send(snd, envelope)
    steps.run(pair)
    assert dlv.remote_state == Delivery.REJECTED
    assert _active(pair) == 0


def test_a_large_message_is_read_a_slice_a_step(pair, steps, monkeypatch) -> None:
    monkeypatch.setattr(intake, "READ_CHUNK", 16 * 1024)
    monkeypatch.setattr(messageevents, "READ_CHUNK", 16 * 1024)
    monkeypatch.setattr(largescan, "COPY_CHUNK", 16 * 1024)
    body = bytes(range(256)) * 800  # 200 KB (the queue takes 256 KB)
    snd = pair.sender(Q)
    dlv = pair.send(snd, bytes(Message(body=body, durable=True).encode()))  # no id: stamped
    assert pair.server.busy
    assert steps.run(pair) >= 2 * len(body) // (16 * 1024)  # read, then copied, a slice a step
    assert dlv.remote_state == Delivery.ACCEPTED
    rcv = pair.receiver(Q, credit=1)
    ((_, raw),) = pair.take(rcv)
    got = Message()
    got.decode(raw)
    assert got.body == body and len(str(got.id)) == 32


def test_a_connection_gone_in_the_middle_of_a_batch_stores_nothing(pair, steps) -> None:
    snd = pair.sender(Q)
    pair.send(snd, HEADER + TINY * 4500)
    steps.run_one()
    pair.server.connection_lost()
    steps.run(pair)  # what was asked for runs into a closed connection: nothing happens
    run_commits(pair.router, int(pair.now * 1000))
    assert _active(pair) == 0


def test_a_large_scheduled_message_is_read_and_scanned_a_slice_a_step(
    pair, steps, monkeypatch
) -> None:
    """schedule-message with a large message inside the request (largerequest.py): the
    request is read a slice a step, its message scanned and copied a slice a step, then
    scheduled; due at once, it is delivered byte for byte."""
    from proton import symbol, timestamp

    from sbemu.protocol import largerequest, management

    for module in (intake, messageevents, largerequest):
        monkeypatch.setattr(module, "READ_CHUNK", 16 * 1024)
    monkeypatch.setattr(largescan, "COPY_CHUNK", 16 * 1024)
    monkeypatch.setattr(management, "COPY_CHUNK", 16 * 1024)
    body = bytes(range(256)) * 800  # 200 KB (the queue takes 256 KB)
    inner = Message(
        body=body, annotations={symbol("x-opt-scheduled-enqueue-time"): timestamp(1000)}
    )
    snd, rcv = pair.mgmt_links(Q)
    rcv.flow(10)
    request = Message(
        id="s-1",
        reply_to=rcv.target.address,
        properties={"operation": "com.microsoft:schedule-message"},
        body={"messages": [{"message-id": "m-1", "message": inner.encode()}]},
    )
    pair.send(snd, request)
    assert pair.server.busy  # the request is being read
    chunk = 16 * 1024  # read past its first PREFIX bytes, then copied, a slice a step
    assert steps.run(pair) >= (len(body) - largerequest.PREFIX) // chunk + len(body) // chunk
    run_commits(pair.router, 10_000)
    pair.pump()
    [(_dlv, raw)] = pair.take(rcv)
    reply = Message()
    reply.decode(raw)
    assert reply.properties["statusCode"] == 200, reply.properties
    assert reply.correlation_id == "s-1" and len(reply.body["sequence-numbers"].elements) == 1
    receiver = pair.receiver(Q, credit=1)
    ((_, got_raw),) = pair.take(receiver)
    got = Message()
    got.decode(got_raw)
    assert got.body == body and len(str(got.id)) == 32  # its id stamped, as on a send
