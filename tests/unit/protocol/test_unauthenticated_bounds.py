"""What a peer can make the server hold before (and apart from) its authorisation is bounded
(issue 35, item 3): declared transactions per connection, answers waiting for credit on a
reply link, and the log lines about requests that have no reply link. Engine pairs in memory:
our AmqpConnection against a python-qpid-proton client."""

from __future__ import annotations

import logging
import uuid

from amqp_harness import DETACH, EnginePair, sas_token
from proton import Delivery, Described, Message, Terminus, ulong

from sbemu.protocol.requestlinks import MAX_PENDING_REPLIES
from sbemu.protocol.transactions import (
    MAX_OPEN_TRANSACTIONS,
    MAX_OPEN_TRANSACTIONS_UNAUTHENTICATED,
)

DECLARED = 0x33
ENTITY = "queue.1"


def _coordinator(pair: EnginePair):
    snd = pair.session.sender(f"txn-{uuid.uuid4()}")
    snd.target.type = Terminus.COORDINATOR
    snd.source.address = "txn-controller"
    snd.open()
    pair.pump()
    assert snd.state & snd.REMOTE_ACTIVE  # served before authorisation, as Azure serves it
    return snd


def _declare(pair: EnginePair, snd) -> Delivery:
    return pair.send(snd, Message(body=Described(ulong(0x31), [])))


def _discharge(pair: EnginePair, snd, txn_id: bytes) -> Delivery:
    return pair.send(snd, Message(body=Described(ulong(0x32), [txn_id, True])))


def test_an_unauthenticated_connection_declares_a_bounded_number_of_transactions(anon) -> None:
    snd = _coordinator(anon)
    declared = [_declare(anon, snd) for _ in range(MAX_OPEN_TRANSACTIONS_UNAUTHENTICATED)]
    assert all(d.remote_state == DECLARED for d in declared)
    refused = [_declare(anon, snd) for _ in range(200)]
    assert all(d.remote_state == Delivery.REJECTED for d in refused)
    condition = refused[0].remote.condition
    assert condition.name == "amqp:resource-limit-exceeded"
    assert "authorise first" in condition.description
    assert len(anon.server.transactions.open) == MAX_OPEN_TRANSACTIONS_UNAUTHENTICATED
    # a discharged transaction makes room again
    txn_id = bytes(declared[0].remote.data[0])
    _discharge(anon, snd, txn_id)
    assert _declare(anon, snd).remote_state == DECLARED


def test_an_authorised_connection_declares_up_to_the_connection_bound(anon) -> None:
    reply, _ = anon.put_token(sas_token(ENTITY, now=anon.now), f"sb://localhost/{ENTITY}")
    assert reply.properties["status-code"] == 202
    snd = _coordinator(anon)
    for _ in range(MAX_OPEN_TRANSACTIONS):
        assert _declare(anon, snd).remote_state == DECLARED
    over = _declare(anon, snd)
    assert over.remote_state == Delivery.REJECTED
    assert over.remote.condition.name == "amqp:resource-limit-exceeded"
    assert len(anon.server.transactions.open) == MAX_OPEN_TRANSACTIONS


def test_a_reply_link_without_credit_is_closed_past_its_bound(anon) -> None:
    snd = anon.sender("$cbs", source="$cbs")
    rcv = anon.receiver("$cbs", target="$cbs", credit=0, peek_lock=False)  # never any credit
    server_reply = next(s for s in anon.server._links.values() if hasattr(s, "pending"))
    token = sas_token(ENTITY, now=anon.now)
    for i in range(MAX_PENDING_REPLIES):
        anon.send(snd, _put_token(token, i))
    assert len(server_reply.pending) == MAX_PENDING_REPLIES
    assert rcv.state & rcv.REMOTE_ACTIVE
    anon.send(snd, _put_token(token, MAX_PENDING_REPLIES))
    assert rcv.state & rcv.REMOTE_CLOSED
    assert rcv.remote_condition.name == "amqp:resource-limit-exceeded"
    assert "give it credit" in rcv.remote_condition.description
    assert not server_reply.pending  # the answers are let go
    assert any(f.code == DETACH for f in anon.frames())


def test_requests_without_a_reply_link_are_logged_rate_limited(anon, caplog) -> None:
    snd = anon.sender("$cbs", source="$cbs")  # and no receiver: nowhere to answer
    token = sas_token(ENTITY, now=anon.now)
    with caplog.at_level(logging.INFO, logger="sbemu.connection"):
        for i in range(2000):
            anon.send(snd, _put_token(token, i))
        lines = [r for r in caplog.records if "no reply link" in r.getMessage()]
        assert len(lines) == 10  # was one line per request: 2,000
        anon.advance(61)  # the next window opens with a line counting what was held back
        anon.send(snd, _put_token(token, 2000))
    summary = [r for r in caplog.records if "were not logged" in r.getMessage()]
    assert [r.getMessage() for r in summary] == [
        "1990 more requests without a reply link were not logged in the last 60 s"
    ]


def test_the_same_token_put_again_is_kept_once(anon) -> None:
    links = anon.cbs_links()
    token = sas_token(ENTITY, now=anon.now)
    for _ in range(50):
        anon.put_token(token, f"sb://localhost/{ENTITY}", links=links)
    assert len(anon.server._grants.tokens) == 1


def _put_token(token: str, i: int) -> Message:
    return Message(
        id=f"req-{i}",
        properties={"operation": "put-token", "type": "jwt", "name": f"sb://localhost/{ENTITY}"},
        body=token,
    )
