"""Transfers, deliveries, settlement, credit/drain and $management through the sans-IO
AmqpConnection with a python-qpid-proton client engine in memory (contract sections 3-6).
"""

from __future__ import annotations

import uuid

import pytest
from amqp_harness import (
    ACCEPTED,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DISPOSITION,
    FLOW,
    MESSAGE_ANNOTATIONS,
    MODIFIED,
    PROPERTIES,
    REJECTED,
    TRANSFER,
    EnginePair,
    codec,
    frame_bytes,
    message_sections,
    parse_frames,
    perf_field_map,
    perf_types,
    raw_tag,
    sas_token,
    section_list,
    section_map,
)
from proton import Array, Condition, Data, Delivery, Described, Message, int32, symbol, ulong

Q = "queue.1"
PQ = "queue.partitioned"


def _send_n(pair: EnginePair, entity: str, n: int, **kw) -> list[Delivery]:
    snd = pair.sender(entity)
    return [pair.send(snd, Message(id=f"m-{i}", body=f"body-{i}".encode(), **kw)) for i in range(n)]


def _decode(raw: bytes) -> Message:
    m = Message()
    m.decode(raw)
    return m


def _annotations(raw: bytes):
    return {
        str(k): v for k, (_, v) in section_map(message_sections(raw)[MESSAGE_ANNOTATIONS]).items()
    }


def _dispositions_since(pair: EnginePair, mark: int, *, role: bool | None = None):
    out = [f for f in pair.frames_since(mark) if f.code == DISPOSITION]
    if role is not None:
        out = [f for f in out if f.field(0) is role]
    return out


# ------------------------------------------------------------------------------ sending


def test_send_accepted_settled(pair):
    snd = pair.sender(f"amqps://localhost:5671/{Q}", source="sender-link-a", rcv_second=True)
    mark = pair.mark()
    dlv = pair.send(snd, Message(id="one", body=b"hello"))
    assert dlv.remote_state == Delivery.ACCEPTED
    assert dlv.settled  # remote settled
    disp = _dispositions_since(pair, mark, role=True)
    assert len(disp) == 1
    d = disp[0]
    assert d.field(3) is True, "sender-link dispositions must be settled=true [trap 6]"
    assert d.field(4).descriptor == ACCEPTED


def test_send_beyond_credit_tolerated(pair):
    # Python ignores the broker's credit [contract 3.1]: transfers beyond it are not punished.
    snd = pair.sender(Q)
    granted = snd.credit
    assert granted > 0
    dlvs = [pair.send(snd, Message(body=b"x")) for _ in range(3)]
    assert all(d.remote_state == Delivery.ACCEPTED for d in dlvs)
    assert snd.remote_condition is None
    assert snd.credit > 0  # re-granted


def test_send_presettled_still_enqueued(pair):
    snd = pair.sender(Q)
    pair.send(snd, Message(id="ps", body=b"presettled"), settled=True)
    rcv = pair.receiver(Q, credit=5)
    got = pair.take(rcv)
    assert [_decode(raw).id for _, raw in got] == ["ps"]


def test_batch_envelope_unpacked(pair):
    # message-format 0x80013700 envelope: each data section is a whole message [contract 3.4].
    inner = [Message(id=f"b{i}", body=f"in-{i}".encode()).encode() for i in range(3)]
    envelope = b"".join(codec.enc_described(0x75, codec.enc_binary(m)) for m in inner)
    snd = pair.sender(Q)
    dlv = pair.send(snd, envelope)
    assert dlv.remote_state == Delivery.ACCEPTED
    rcv = pair.receiver(Q, credit=10)
    got = pair.take(rcv)
    ids = [_decode(raw).id for _, raw in got]
    assert ids == ["b0", "b1", "b2"]
    seqs = [_annotations(raw)["x-opt-sequence-number"].value for _, raw in got]
    assert len(set(seqs)) == 3


# ------------------------------------------------------------------------------ receiving


def test_peek_lock_delivery_tag_is_lock_token(pair):
    _send_n(pair, Q, 1)
    rcv = pair.receiver(Q, credit=1, name="plr")
    got = pair.take(rcv)
    assert len(got) == 1
    dlv, raw = got[0]
    tag = raw_tag(dlv)
    assert len(tag) == 16
    token = uuid.UUID(bytes_le=tag)
    assert not dlv.settled  # peek-lock: unsettled delivery
    # The management node knows the lock by that GUID (network-order uuid) [contract 4.6].
    links = pair.mgmt_links(Q)
    reply, raw_reply = pair.mgmt(
        links,
        "com.microsoft:renew-lock",
        {"lock-tokens": Array(None, Data.UUID, token)},
        associated_link="plr",
    )
    assert reply.properties["statusCode"] == 200
    if uuid.UUID(bytes=tag) != token:
        reply, _ = pair.mgmt(
            links,
            "com.microsoft:renew-lock",
            {"lock-tokens": Array(None, Data.UUID, uuid.UUID(bytes=tag))},
            associated_link="plr",
        )
        assert reply.properties["statusCode"] == 410


def test_delivery_annotation_types(pair):
    _send_n(pair, Q, 1)
    rcv = pair.receiver(Q, credit=1)
    ((dlv, raw),) = pair.take(rcv)
    sections = message_sections(raw)  # also asserts smallulong section descriptors
    ann = section_map(sections[MESSAGE_ANNOTATIONS])
    types = {str(k): (kt.type, vt.type) for k, (kt, vt) in ann.items()}
    assert types["x-opt-sequence-number"] == (Data.SYMBOL, Data.LONG)
    assert types["x-opt-enqueued-time"] == (Data.SYMBOL, Data.TIMESTAMP)
    assert types["x-opt-locked-until"] == (Data.SYMBOL, Data.TIMESTAMP)
    assert "x-opt-partition-id" not in types  # not partitioned
    values = {str(k): v.value for k, (_, v) in ann.items()}
    assert values["x-opt-sequence-number"] >= 1
    assert values["x-opt-locked-until"] > values["x-opt-enqueued-time"]
    # header.delivery-count is 0 on a first delivery
    assert _decode(raw).delivery_count == 0
    assert _decode(raw).id == "m-0"


def test_partitioned_queue_partition_id_short(pair):
    snd = pair.sender(PQ)
    for i in range(3):
        pair.send(
            snd,
            Message(id=f"p{i}", body=b"x", annotations={symbol("x-opt-partition-key"): f"k{i}"}),
        )
    rcv = pair.receiver(PQ, credit=10)
    got = pair.take(rcv)
    assert len(got) == 3
    for _, raw in got:
        ann = section_map(message_sections(raw)[MESSAGE_ANNOTATIONS])
        pid = ann[symbol("x-opt-partition-id")][1]
        seq = ann[symbol("x-opt-sequence-number")][1]
        assert pid.type == Data.SHORT
        assert seq.type == Data.LONG
        assert 0 <= pid.value < 16
        # the partition id sits in the top 16 bits of the sequence number [contract 9]
        assert seq.value >> 48 == pid.value
        pk = ann[symbol("x-opt-partition-key")][1]
        assert pk.type == Data.STRING


def test_receive_and_delete_presettled(pair):
    _send_n(pair, Q, 2)
    rcv = pair.receiver(Q, credit=5, peek_lock=False)
    got = pair.take(rcv)
    assert len(got) == 2
    for dlv, raw in got:
        assert dlv.settled
        assert "x-opt-locked-until" not in _annotations(raw)
    rcv2 = pair.receiver(Q, credit=5)
    assert pair.take(rcv2) == []


def test_receive_and_delete_tag_is_an_empty_binary_on_the_wire(pair):
    """A pre-settled delivery's tag is empty, as Azure's (the Python SDK's backcompat test wants
    none), and written as a zero-length binary, never null: go-amqp closes the link on a first
    transfer without a delivery-tag [issue 23]."""
    _send_n(pair, Q, 2)
    mark = pair.mark()
    rcv = pair.receiver(Q, credit=5, peek_lock=False)
    assert [raw_tag(dlv) for dlv, _ in pair.take(rcv)] == [b"", b""]
    transfers = [f for f in pair.frames_since(mark) if f.code == TRANSFER]
    assert len(transfers) == 2
    for frame in transfers:
        tag = perf_types(frame)[2]
        assert (tag.type, tag.value) == (Data.BINARY, b"")
        assert len(perf_types(frame)) == 11  # still padded to the full field count
    # a peek-locked delivery keeps its lock token as its tag
    rcv.close()
    pair.pump()
    _send_n(pair, Q, 1)
    mark = pair.mark()
    ((dlv, _),) = pair.take(pair.receiver(Q, credit=1))
    (frame,) = [f for f in pair.frames_since(mark) if f.code == TRANSFER]
    assert perf_types(frame)[2].value == raw_tag(dlv) and len(raw_tag(dlv)) == 16


# ------------------------------------------------------------------------------ settlement


def _one_locked(pair: EnginePair, credit: int = 1, name: str | None = None):
    rcv = pair.receiver(Q, credit=credit, name=name)
    got = pair.take(rcv)
    assert got, "no delivery"
    return rcv, got[0][0], got[0][1]


def test_accept_unsettled_gets_settled_accepted(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, _ = _one_locked(pair)
    mark = pair.mark()
    dlv.update(Delivery.ACCEPTED)  # peek-lock clients send it unsettled and wait [contract 5.2]
    pair.pump()
    echo = _dispositions_since(pair, mark, role=False)
    assert len(echo) == 1
    assert echo[0].field(3) is True
    assert echo[0].field(4).descriptor == ACCEPTED
    assert dlv.settled and dlv.remote_state == Delivery.ACCEPTED
    dlv.settle()
    pair.pump()
    # completed: nothing is left
    rcv.flow(5)
    pair.pump()
    assert pair.take(rcv) == []


def test_accept_presettled_completes_without_echo(pair):
    # Python <= 7.14 sends dispositions already settled and waits for nothing [contract 5.2].
    _send_n(pair, Q, 1)
    rcv, dlv, _ = _one_locked(pair)
    dlv.update(Delivery.ACCEPTED)
    dlv.settle()
    pair.pump()
    rcv.flow(5)
    pair.pump()
    assert pair.take(rcv) == []
    links = pair.mgmt_links(Q)
    reply, _ = pair.mgmt(
        links, "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": int32(5)}
    )
    assert reply.properties["statusCode"] == 204


def test_modified_undeliverable_here_is_defer(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, raw = _one_locked(pair, name="dfr")
    seq = _annotations(raw)["x-opt-sequence-number"].value
    mark = pair.mark()
    dlv.local.failed = True
    dlv.local.undeliverable = True
    dlv.update(Delivery.MODIFIED)
    pair.pump()
    echo = _dispositions_since(pair, mark, role=False)
    assert len(echo) == 1 and echo[0].field(3) is True
    assert echo[0].field(4).descriptor == MODIFIED
    # Deferred: not delivered again, but peek shows it with x-opt-message-state = 1.
    rcv.flow(5)
    pair.pump()
    assert pair.take(rcv) == []
    links = pair.mgmt_links(Q)
    reply, _ = pair.mgmt(
        links,
        "com.microsoft:peek-message",
        {"from-sequence-number": seq, "message-count": int32(1)},
    )
    assert reply.properties["statusCode"] == 200
    peeked = _decode(reply.body["messages"][0]["message"])
    assert peeked.annotations["x-opt-message-state"] == 1
    # and receive-by-sequence-number gets it back with a lock
    reply, _ = pair.mgmt(
        links,
        "com.microsoft:receive-by-sequence-number",
        {"sequence-numbers": Array(None, Data.LONG, seq), "receiver-settle-mode": 1},
        associated_link="dfr",
    )
    assert reply.properties["statusCode"] == 200
    assert len(reply.body["messages"]) == 1
    assert isinstance(reply.body["messages"][0]["lock-token"], uuid.UUID)


def test_modified_without_undeliverable_is_abandon(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, raw = _one_locked(pair, credit=2)
    dlv.local.failed = True
    dlv.update(Delivery.MODIFIED)
    pair.pump()
    assert dlv.remote_state == Delivery.MODIFIED and dlv.settled
    dlv.settle()
    pair.pump()
    again = pair.take(rcv)
    assert len(again) == 1
    assert _decode(again[0][1]).delivery_count == 1  # abandon bumps the count


def test_rejected_dead_letter_echoed_without_error(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, _ = _one_locked(pair)
    mark = pair.mark()
    dlv.local.condition = Condition(
        "com.microsoft:dead-letter",
        "why",
        {symbol("DeadLetterReason"): "r1", symbol("DeadLetterErrorDescription"): "d1"},
    )
    dlv.update(Delivery.REJECTED)
    pair.pump()
    echo = _dispositions_since(pair, mark, role=False)
    assert len(echo) == 1 and echo[0].field(3) is True
    state = echo[0].field(4)
    assert state.descriptor == REJECTED
    error = state.value[0] if state.value else None
    assert error is None, (
        f"a successful dead-letter must be echoed as rejected with NO error: {error}"
    )
    assert dlv.remote.condition is None
    # The message is in the dead-letter queue with reason/description properties.
    dlq = pair.receiver(f"{Q}/$DeadLetterQueue", credit=5)
    got = pair.take(dlq)
    assert len(got) == 1
    props = _decode(got[0][1]).properties
    assert props["DeadLetterReason"] == "r1"
    assert props["DeadLetterErrorDescription"] == "d1"
    app = section_map(message_sections(got[0][1])[APPLICATION_PROPERTIES])
    assert app["DeadLetterReason"][1].type == Data.STRING


def test_bare_rejected_is_dead_letter(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, _ = _one_locked(pair)
    dlv.update(Delivery.REJECTED)
    pair.pump()
    assert dlv.remote_state == Delivery.REJECTED and dlv.remote.condition is None
    dlq = pair.receiver(f"{Q}/$DeadLetterQueue", credit=5)
    assert len(pair.take(dlq)) == 1


def test_released_does_not_bump_delivery_count(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, raw = _one_locked(pair, credit=3)
    assert _decode(raw).delivery_count == 0
    dlv.update(Delivery.RELEASED)
    dlv.settle()  # Python sends released pre-settled [contract 4.5]
    pair.pump()
    again = pair.take(rcv)
    assert len(again) == 1, "a released message is available again immediately"
    dlv2, raw2 = again[0]
    assert _decode(raw2).delivery_count == 0, "released must not count a delivery [contract 4.7]"
    assert raw_tag(dlv2) != raw_tag(dlv)  # a new lock


def test_settle_with_expired_lock_is_lock_lost(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, _ = _one_locked(pair)
    pair.advance(61)  # lock duration PT1M
    dlv.update(Delivery.ACCEPTED)
    pair.pump()
    assert dlv.settled
    assert dlv.remote_state == Delivery.REJECTED
    assert dlv.remote.condition.name == "com.microsoft:message-lock-lost"


def test_disposition_range_settles_all(pair):
    _send_n(pair, Q, 3)
    rcv = pair.receiver(Q, credit=3)
    got = pair.take(rcv)
    assert len(got) == 3
    for dlv, _ in got:
        dlv.update(Delivery.ACCEPTED)
    pair.pump()
    assert all(d.settled and d.remote_state == Delivery.ACCEPTED for d, _ in got)


# ------------------------------------------------------------------------------ credit & drain


def test_drain_on_empty_queue_echoes_flow(pair):
    rcv = pair.receiver(Q, name="drainer")
    handle = [f for f in pair.frames() if f.code == 0x12 and f.field(0) == "drainer"][0].field(1)
    mark = pair.mark()
    rcv.drain(10)
    pair.pump()
    flows = [f for f in pair.frames_since(mark) if f.code == FLOW and f.field(4) == handle]
    assert flows, "no flow answered the drain"
    last = flows[-1]
    assert last.field(8) is True, "drain flag echoed"
    assert last.field(6) == 0, "link-credit 0 after drain"
    assert last.field(5) == 10, "delivery-count advanced by the unused credit"
    assert rcv.credit == 0
    assert not rcv.draining()


def test_drain_with_messages_delivers_then_echoes(pair):
    _send_n(pair, Q, 3)
    rcv = pair.receiver(Q, name="drainer2")
    handle = [f for f in pair.frames() if f.code == 0x12 and f.field(0) == "drainer2"][0].field(1)
    mark = pair.mark()
    rcv.drain(10)
    pair.pump()
    assert len(pair.take(rcv)) == 3
    flows = [f for f in pair.frames_since(mark) if f.code == FLOW and f.field(4) == handle]
    assert flows and flows[-1].field(8) is True
    assert flows[-1].field(6) == 0 and flows[-1].field(5) == 10


def test_credit_revocation_stops_deliveries(pair):
    rcv = pair.receiver(Q, name="revoked", credit=5)
    pair.pump()
    last_flow = [f for f in pair.client_frames() if f.code == FLOW and f.field(6) == 5][-1]
    # The client sets link-credit to 0 (proton's API cannot lower credit: write the frame).
    fields = last_flow.fields + [None] * (11 - len(last_flow.fields))
    enc = [
        codec.enc_uint(fields[0]) if fields[0] is not None else codec.enc_null(),
        codec.enc_uint(fields[1]),
        codec.enc_uint(fields[2]),
        codec.enc_uint(fields[3]),
        codec.enc_uint(fields[4]),
        codec.enc_uint(fields[5] or 0),
        codec.enc_uint(0),
        codec.enc_null(),
        codec.enc_bool(False),
        codec.enc_bool(False),
        codec.enc_null(),
    ]
    pair.feed(frame_bytes(FLOW, enc, channel=last_flow.channel))
    pair.pump()
    handle = fields[4]
    mark = pair.mark()
    _send_n(pair, Q, 2)
    sent = [f for f in pair.frames_since(mark) if f.code == TRANSFER and f.field(0) == handle]
    assert sent == [], "a flow with link-credit 0 must stop deliveries [contract 4.5]"
    # Credit again: the queued messages arrive (the client thinks it still had 5, so it now says 6).
    rcv.flow(1)
    pair.pump()
    assert (
        len([f for f in pair.frames_since(mark) if f.code == TRANSFER and f.field(0) == handle])
        >= 1
    )


def test_credit_limits_deliveries(pair):
    _send_n(pair, Q, 5)
    rcv = pair.receiver(Q, credit=2)
    assert len(pair.take(rcv)) == 2
    pair.pump()
    assert pair.take(rcv) == []
    rcv.flow(3)
    pair.pump()
    assert len(pair.take(rcv)) == 3


def test_waiting_receiver_served_on_send(pair):
    rcv = pair.receiver(Q, credit=1)
    assert pair.take(rcv) == []
    _send_n(pair, Q, 1)
    got = pair.take(rcv)
    assert len(got) == 1


# ------------------------------------------------------------------------------ $management


def _mgmt_app(raw: bytes):
    sections = message_sections(raw)
    assert PROPERTIES in sections and APPLICATION_PROPERTIES in sections
    return section_map(sections[APPLICATION_PROPERTIES])


def _mgmt_body(raw: bytes):
    sections = message_sections(raw)
    assert AMQP_VALUE in sections, "management responses carry an amqp-value body"
    return section_map(sections[AMQP_VALUE])


def _array_is_described(raw: bytes, key: str) -> bool:
    """Whether the response body's array under `key` carries a descriptor: a plain AMQP array
    has none (the Java SDK's proton-j reads `described(null)` arrays as an array of described
    values and finds no long[] or Date[]: scheduleMessage returned null, renew-lock failed)."""
    data = Data()
    data.decode(message_sections(raw)[AMQP_VALUE])
    data.rewind()
    data.next()  # the described amqp-value
    data.enter()
    data.next()  # its descriptor
    data.next()  # the map
    data.enter()
    while data.next():
        name = data.get_object()
        data.next()
        if name == key:
            assert data.type() == Data.ARRAY
            _count, described, _type = data.get_array()
            return bool(described)
    raise AssertionError(f"no {key} in the response")


def test_mgmt_peek_types(pair):
    _send_n(pair, Q, 3)
    links = pair.mgmt_links(Q)
    req_id = uuid.uuid4()
    snd, rcv = links
    req = Message(
        id=req_id,
        reply_to=f"{Q}/$management",
        properties={
            "operation": "com.microsoft:peek-message",
            "type": "entity-mgmt",
            "com.microsoft:server-timeout": 60000,
        },
        body={"from-sequence-number": 1, "message-count": int32(5)},
    )
    reply, raw = pair.request(snd, rcv, req)
    props = section_list(message_sections(raw)[PROPERTIES])
    assert props[5].type == Data.UUID and props[5].value == req_id
    app = _mgmt_app(raw)
    assert app["statusCode"][0].type == Data.STRING
    assert app["statusCode"][1].type == Data.INT and app["statusCode"][1].value == 200
    assert app["statusDescription"][1].type == Data.STRING
    assert "errorCondition" not in app
    body = _mgmt_body(raw)
    key_t, msgs_t = body["messages"]
    assert key_t.type == Data.STRING
    assert msgs_t.type == Data.LIST
    assert len(msgs_t.value) == 3
    for item in msgs_t.value:
        assert set(item) == {"message"}
        assert all(type(k) is str for k in item)  # string keys, not symbols
        embedded = bytes(item["message"])
        ann = section_map(message_sections(embedded)[MESSAGE_ANNOTATIONS])
        assert ann[symbol("x-opt-sequence-number")][1].type == Data.LONG
        assert ann[symbol("x-opt-enqueued-time")][1].type == Data.TIMESTAMP
        assert ann[symbol("x-opt-message-state")][1].value == 0
        assert symbol("x-opt-locked-until") not in ann
    assert [_decode(bytes(i["message"])).id for i in msgs_t.value] == ["m-0", "m-1", "m-2"]
    # The response is pre-settled [contract 6.1].
    transfers = [f for f in pair.frames() if f.code == TRANSFER]
    assert transfers[-1].field(4) is True


def test_mgmt_peek_empty_204(pair):
    links = pair.mgmt_links(Q)
    reply, raw = pair.mgmt(
        links, "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": int32(5)}
    )
    app = _mgmt_app(raw)
    assert app["statusCode"][1].type == Data.INT and app["statusCode"][1].value == 204


def test_mgmt_string_message_id_correlation(pair):
    snd, rcv = pair.mgmt_links(Q)
    req = Message(
        id="js-mgmt-1",
        reply_to=f"{Q}/$management",
        properties={"operation": "com.microsoft:peek-message"},
        body={"from-sequence-number": 1, "message-count": int32(1)},
    )
    reply, raw = pair.request(snd, rcv, req)
    props = section_list(message_sections(raw)[PROPERTIES])
    assert props[5].type == Data.STRING and props[5].value == "js-mgmt-1"


def test_mgmt_renew_lock_types(pair):
    _send_n(pair, Q, 2)
    rcv = pair.receiver(Q, credit=2, name="renewer")
    got = pair.take(rcv)
    tokens = [uuid.UUID(bytes_le=raw_tag(d)) for d, _ in got]
    before = [_annotations(raw)["x-opt-locked-until"].value for _, raw in got]
    pair.advance(5)
    links = pair.mgmt_links(Q)
    reply, raw = pair.mgmt(
        links,
        "com.microsoft:renew-lock",
        {"lock-tokens": Array(None, Data.UUID, *tokens)},
        associated_link="renewer",
    )
    app = _mgmt_app(raw)
    assert app["statusCode"][1].type == Data.INT and app["statusCode"][1].value == 200
    body = _mgmt_body(raw)
    key_t, exp_t = body["expirations"]
    assert key_t.type == Data.STRING
    assert exp_t.type == Data.ARRAY
    exps = reply.body["expirations"]  # proton Array: element type + elements
    assert exps.type == Data.TIMESTAMP, Data.type_name(exps.type)
    assert len(exps.elements) == 2
    assert all(int(e) > b for e, b in zip(exps.elements, before, strict=True))
    assert not _array_is_described(raw, "expirations")


def test_mgmt_renew_unknown_lock_410_symbol_condition(pair):
    links = pair.mgmt_links(Q)
    reply, raw = pair.mgmt(
        links, "com.microsoft:renew-lock", {"lock-tokens": Array(None, Data.UUID, uuid.uuid4())}
    )
    app = _mgmt_app(raw)
    assert app["statusCode"][1].type == Data.INT and app["statusCode"][1].value == 410
    cond = app["errorCondition"]
    assert cond[0].type == Data.STRING
    assert cond[1].type == Data.SYMBOL and cond[1].value == "com.microsoft:message-lock-lost"
    assert app["statusDescription"][1].type == Data.STRING


def test_mgmt_unknown_operation_error_symbol(pair):
    links = pair.mgmt_links(Q)
    reply, raw = pair.mgmt(links, "com.microsoft:no-such-op", {})
    app = _mgmt_app(raw)
    assert app["statusCode"][1].type == Data.INT and app["statusCode"][1].value >= 400
    assert app["errorCondition"][1].type == Data.SYMBOL


def test_mgmt_update_disposition_complete(pair):
    _send_n(pair, Q, 1)
    rcv, dlv, _ = _one_locked(pair, name="upd")
    token = uuid.UUID(bytes_le=raw_tag(dlv))
    links = pair.mgmt_links(Q)
    reply, raw = pair.mgmt(
        links,
        "com.microsoft:update-disposition",
        {"disposition-status": "completed", "lock-tokens": Array(None, Data.UUID, token)},
        associated_link="upd",
    )
    assert _mgmt_app(raw)["statusCode"][1].value == 200
    reply, _ = pair.mgmt(
        links, "com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": int32(5)}
    )
    assert reply.properties["statusCode"] == 204


def test_mgmt_reply_routed_by_reply_to_among_several(pair):
    # Two reply links on the same node; reply-to picks the one whose target matches (JS/.NET).
    node = f"{Q}/$management"
    snd = pair.sender(node)
    r1 = pair.receiver(node, target="reply-a", credit=5, peek_lock=False)
    r2 = pair.receiver(node, target="reply-b", credit=5, peek_lock=False)
    req = Message(
        id="x1",
        reply_to="reply-b",
        properties={"operation": "com.microsoft:peek-message"},
        body={"from-sequence-number": 1, "message-count": int32(1)},
    )
    pair.send(snd, req)
    assert pair.take(r1) == []
    got = pair.take(r2)
    assert len(got) == 1 and _decode(got[0][1]).correlation_id == "x1"


# Binary values inside management maps arrive from proton as memoryview: they must be accepted
# (schedule-message 'message', set-session-state 'session-state').
@pytest.mark.parametrize("entity", [Q, PQ])
def test_mgmt_schedule_and_cancel(pair, entity):
    links = pair.mgmt_links(entity)
    inner = Message(
        id="sched-1",
        body=b"later",
        annotations={symbol("x-opt-scheduled-enqueue-time"): _ts(pair.now + 3600)},
    )
    reply, raw = pair.mgmt(
        links,
        "com.microsoft:schedule-message",
        {"messages": [{"message-id": "sched-1", "message": inner.encode()}]},
    )
    assert _mgmt_app(raw)["statusCode"][1].value == 200, reply.properties
    seqs = reply.body["sequence-numbers"]
    assert seqs.type == Data.LONG and len(seqs.elements) == 1
    assert not _array_is_described(raw, "sequence-numbers")
    reply, raw = pair.mgmt(
        links,
        "com.microsoft:cancel-scheduled-message",
        {"sequence-numbers": Array(None, Data.LONG, *seqs.elements)},
    )
    assert _mgmt_app(raw)["statusCode"][1].value == 200


def _ts(seconds: float):
    from proton import timestamp

    return timestamp(int(seconds * 1000))


# ------------------------------------------------------------------------------ sessions


def _session_receiver(
    pair: EnginePair, session_id, name: str, source: str = "amqps://localhost:5671/queue.session"
):
    rcv = pair.session.receiver(name)
    rcv.source.address = source
    rcv.target.address = f"receiver-link-{name}"
    rcv.source.filter.put_dict({symbol("com.microsoft:session-filter"): session_id})
    rcv.snd_settle_mode = rcv.SND_UNSETTLED
    rcv.rcv_settle_mode = rcv.RCV_SECOND
    rcv.open()
    pair.pump()
    return rcv


def test_session_receiver_attach_reply(spair):
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="s-1", body=b"x", group_id="sess-a"))
    name = "sess-rcv"
    rcv = _session_receiver(spair, "sess-a", name)
    assert rcv.remote_condition is None
    a = [f for f in spair.frames() if f.code == 0x12 and f.field(0) == name][0]
    source = a.field(5)
    assert source.value[0] == "amqps://localhost:5671/queue.session"  # echoed byte-for-byte
    # source filter carries the granted session id as a string [contract 4.4]
    filt = {str(k): v for k, v in (source.value[7] or {}).items()}
    assert filt["com.microsoft:session-filter"] == "sess-a"
    props = {str(k): v for k, (_, v) in perf_field_map(a, 13).items()}
    lu = props["com.microsoft:locked-until-utc"]
    assert lu.type == Data.LONG, lu.type_name
    assert lu.value > 621_355_968_000_000_000  # .NET ticks
    rcv.flow(5)
    spair.pump()
    got = spair.take(rcv)
    assert [_decode(raw).group_id for _, raw in got] == ["sess-a"]


def test_session_next_available_names_session(spair):
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="s-1", body=b"x", group_id="sess-b"))
    name = "sess-next"
    _session_receiver(spair, None, name)  # next available
    a = [f for f in spair.frames() if f.code == 0x12 and f.field(0) == name][0]
    filt = {str(k): v for k, v in (a.field(5).value[7] or {}).items()}
    assert filt["com.microsoft:session-filter"] == "sess-b"
    props = {str(k): v for k, (_, v) in perf_field_map(a, 13).items()}
    assert props["com.microsoft:locked-until-utc"].type == Data.LONG


# go-amqp (the Go SDK) sends the session filter as a described value and reads no plain one
# back ("invalid described type header a1"): the reply keeps the form the client sent.
GO_SESSION_FILTER = ulong(0x00000137000000C)  # azservicebus session_receiver.go, as it is


@pytest.mark.parametrize("requested", ["sess-go", None])
def test_described_session_filter_is_answered_described(spair, requested):
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="s-1", body=b"x", group_id="sess-go"))
    name = f"go-{requested}"
    rcv = _session_receiver(spair, Described(GO_SESSION_FILTER, requested), name)
    assert rcv.remote_condition is None
    a = [f for f in spair.frames() if f.code == 0x12 and f.field(0) == name][0]
    filt = {str(k): v for k, v in (a.field(5).value[7] or {}).items()}
    value = filt["com.microsoft:session-filter"]
    # a described value (the frame parser's own Described type), not the plain string
    assert getattr(value, "descriptor", None) == GO_SESSION_FILTER, value
    assert value.value == "sess-go"
    rcv.flow(5)
    spair.pump()
    assert [_decode(raw).group_id for _, raw in spair.take(rcv)] == ["sess-go"]


def test_mgmt_set_and_get_session_state(spair):
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="s-1", body=b"x", group_id="sess-c"))
    rcv = _session_receiver(spair, "sess-c", "sess-state")
    assert rcv.remote_condition is None
    links = spair.mgmt_links("queue.session")
    reply, raw = spair.mgmt(
        links,
        "com.microsoft:set-session-state",
        {"session-id": "sess-c", "session-state": b"state-bytes"},
        associated_link="sess-state",
    )
    assert reply.properties["statusCode"] == 200, reply.properties
    reply, raw = spair.mgmt(
        links,
        "com.microsoft:get-session-state",
        {"session-id": "sess-c"},
        associated_link="sess-state",
    )
    assert reply.properties["statusCode"] == 200
    assert bytes(reply.body["session-state"]) == b"state-bytes"


# ------------------------------------------------------------------------------ framing


def test_multi_frame_transfer_reassembled(pair, services):
    # [contract 1.5] a message split over several transfer frames (more=true) is reassembled.
    name = "multi"
    pair.sender(Q, name=name)
    attach = [f for f in pair.client_frames() if f.code == 0x12 and f.field(0) == name][0]
    handle, channel = attach.field(1), attach.channel
    payload = Message(id="big", body=b"z" * 3000).encode()
    half = len(payload) // 2

    def transfer(first: bool, more: bool, chunk: bytes) -> bytes:
        fields = [codec.enc_uint(handle)]
        if first:
            fields += [codec.enc_uint(0), codec.enc_binary(b"\x00\x00\x00\x01"), codec.enc_uint(0)]
        else:
            fields += [codec.enc_null(), codec.enc_null(), codec.enc_null()]
        fields += [codec.enc_bool(False), codec.enc_bool(more)]
        return frame_bytes(TRANSFER, fields, channel=channel, payload=chunk)

    mark = pair.mark()
    pair.feed(transfer(True, True, payload[:half]))
    pair.pump()
    assert _dispositions_since(pair, mark) == []  # nothing settled before the last frame
    pair.feed(transfer(False, False, payload[half:]))
    pair.pump()
    disp = _dispositions_since(pair, mark, role=True)
    assert len(disp) == 1 and disp[0].field(1) == 0
    assert disp[0].field(3) is True and disp[0].field(4).descriptor == ACCEPTED
    other = EnginePair(services, sasl="PLAIN").open()
    rcv = other.receiver(Q, credit=5)
    got = other.take(rcv)
    assert len(got) == 1
    m = _decode(got[0][1])
    assert m.id == "big" and bytes(m.body) == b"z" * 3000


def test_cbs_reply_waits_for_credit(anon):
    # The reply link has no credit when the request arrives: the reply is held, then sent.
    snd = anon.sender("$cbs", source="$cbs")
    rcv = anon.receiver("$cbs", target="$cbs", credit=0, peek_lock=False)
    req = Message(
        id="held-1",
        properties={"operation": "put-token", "type": "jwt", "name": "sb://localhost/queue.1"},
        body=sas_token(Q, now=anon.now),
    )
    anon.send(snd, req)
    assert anon.take(rcv) == []
    rcv.flow(1)
    anon.pump()
    got = anon.take(rcv)
    assert len(got) == 1
    reply = _decode(got[0][1])
    assert reply.correlation_id == "held-1" and reply.properties["status-code"] == 202


# ------------------------------------------------------------------ link lifecycle (links.py)


def _attach_replies(pair: EnginePair, name: str, since: int = 0):
    return [f for f in pair.frames_since(since) if f.code == 0x12 and f.field(0) == name]


def _granted_session(attach) -> str:
    return {str(k): v for k, v in (attach.field(5).value[7] or {}).items()}[
        "com.microsoft:session-filter"
    ]


def test_session_waiter_attached_when_a_session_arrives(spair):
    # WAITING -> ATTACHED: no session yet, so the attach is not answered until one arrives.
    rcv = _session_receiver(spair, None, "waits-then-served")
    assert _attach_replies(spair, "waits-then-served") == []
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="w-1", body=b"x", group_id="sess-w"))
    (reply,) = _attach_replies(spair, "waits-then-served")
    assert _granted_session(reply) == "sess-w"
    rcv.flow(5)
    spair.pump()
    assert [_decode(raw).group_id for _, raw in spair.take(rcv)] == ["sess-w"]


def test_session_waiter_detached_before_a_session_arrives(spair):
    # WAITING -> DETACHED: a waiter the peer gave up on must not take the next session.
    gone = _session_receiver(spair, None, "gives-up")
    gone.close()
    spair.pump()
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="d-1", body=b"x", group_id="sess-d"))
    for reply in _attach_replies(spair, "gives-up"):  # proton's attach before its detach
        source = reply.field(5)
        assert source is None or not (source.value[7:8] and source.value[7])  # no session
    _session_receiver(spair, None, "next")
    (reply,) = _attach_replies(spair, "next")
    assert _granted_session(reply) == "sess-d"


def test_detached_session_receiver_releases_its_session(spair):
    # ATTACHED -> DETACHED: the session handle is released, so the session is free at once.
    snd = spair.sender("queue.session")
    spair.send(snd, Message(id="r-1", body=b"x", group_id="sess-r"))
    first = _session_receiver(spair, "sess-r", "holder")
    assert first.remote_condition is None
    first.close()
    spair.pump()
    mark = spair.mark()
    second = _session_receiver(spair, "sess-r", "after")
    assert second.remote_condition is None
    (reply,) = _attach_replies(spair, "after", mark)
    assert _granted_session(reply) == "sess-r"


def _burst(pair: EnginePair, snd, payloads: list[bytes]) -> list[Delivery]:
    """Transfers written at once, read by the server in one go (one pump)."""
    out = []
    for data in payloads:
        dlv = snd.delivery(str(uuid.uuid4()).encode())
        snd.send(data)
        snd.advance()
        out.append(dlv)
    pair.pump()
    return out


def test_credit_topped_up_once_per_read(pair):
    # The transfers of one read take credit; it is topped up once, after them, for them all,
    # whether they were stored or refused at their scan (sbemu.protocol.links.SENDER_CREDIT).
    from sbemu.protocol.links import SENDER_CREDIT

    snd = pair.sender(Q)
    assert snd.credit == SENDER_CREDIT
    good = [Message(id=f"g-{i}", body=b"x" * 100).encode() for i in range(SENDER_CREDIT // 2 + 5)]
    dlvs = _burst(pair, snd, good)
    assert all(d.remote_state == Delivery.ACCEPTED for d in dlvs)
    assert snd.credit >= SENDER_CREDIT // 2  # (a read leaving more than half is not topped up)
    # a read of refused transfers only (not an AMQP message) still gives its credit back
    bad = [b"\x00\x53\x75\xa0\xff" for _ in range(SENDER_CREDIT // 2 + 5)]
    dlvs = _burst(pair, snd, bad)
    assert all(d.remote_state == Delivery.REJECTED for d in dlvs)
    assert snd.credit >= SENDER_CREDIT // 2
    assert snd.remote_condition is None


def test_transfer_larger_than_the_read_buffer_kept_whole(pair):
    # Transfers up to 64 KiB are read through one reused buffer, larger ones into their own.
    from sbemu.protocol import messageevents

    snd = pair.sender(Q)
    sizes = [messageevents._RECV_SIZE - 200, messageevents._RECV_SIZE + 1000, 3]
    bodies = [bytes([i]) * n for i, n in enumerate(sizes)]
    dlvs = _burst(
        pair, snd, [Message(id=f"big-{i}", body=b).encode() for i, b in enumerate(bodies)]
    )
    assert all(d.remote_state == Delivery.ACCEPTED for d in dlvs)
    rcv = pair.receiver(Q, credit=5)
    got = [_decode(raw) for _, raw in pair.take(rcv)]
    assert [(m.id, m.body) for m in got] == [(f"big-{i}", b) for i, b in enumerate(bodies)]


def test_aborted_transfer_is_dropped_and_the_next_stored(pair):
    # [AMQP 2.6.14] an aborted delivery is discarded; proton gives it a pending of 1, which is
    # the only time the fast path asks whether a delivery was aborted
    snd = pair.sender(Q)
    dlv = snd.delivery(b"aborted-1")
    snd.send(Message(id="never", body=b"n" * 200).encode()[:50])  # a first frame (more=true)
    pair.pump()
    dlv.abort()
    pair.pump()
    ok = pair.send(snd, Message(id="kept", body=b"k"))
    assert ok.remote_state == Delivery.ACCEPTED
    assert snd.remote_condition is None
    rcv = pair.receiver(Q, credit=5)
    assert [_decode(raw).id for _, raw in pair.take(rcv)] == ["kept"]


def _client_bytes(pair: EnginePair) -> bytes:
    """What the client engine has written and the server has not read yet (taken from it)."""
    pending = pair.transport.pending()
    data = pair.transport.peek(pending) if pending > 0 else b""
    pair.transport.pop(max(pending, 0))
    return data


def test_release_and_credit_in_one_read_serve_the_released_message_first(pair):
    """A client that asks for the next message and releases the one it holds in the same
    breath (the Python SDK's keep-alive thread releasing a message that arrived between two
    receive calls while the receive call flows credit) gets the released message again:
    the read's dispositions are taken before its credit is served, in sequence order."""
    _send_n(pair, Q, 2)
    rcv, dlv, raw = _one_locked(pair)
    assert _decode(raw).id == "m-0"
    rcv.flow(1)
    first = _client_bytes(pair)  # the flow goes first on the wire, the release after it
    dlv.update(Delivery.RELEASED)
    dlv.settle()
    second = _client_bytes(pair)
    assert [f.code for f in parse_frames(first)] == [FLOW]
    assert [f.code for f in parse_frames(second)] == [DISPOSITION]
    pair.feed(first + second)  # one read holds both
    pair.pump()
    again = pair.take(rcv)
    assert [_decode(r).id for _, r in again] == ["m-0"]


@pytest.mark.parametrize(
    "operation",
    ["com.microsoft:receive-by-sequence-number", "com.microsoft:cancel-scheduled-message"],
)
@pytest.mark.parametrize(
    "numbers",
    [
        Array(None, Data.UUID, uuid.UUID(int=1 << 100)),  # int() of a uuid: 101 bits
        Array(None, Data.STRING, "12"),
        [ulong(1 << 63)],  # an unsigned long past a long
        Array(None, Data.LONG, -1),  # a long, but no sequence number is negative
    ],
    ids=["uuid", "string", "past-64-bits", "negative"],
)
def test_sequence_numbers_that_are_not_longs_are_an_argument_error(pair, operation, numbers):
    reply, _ = pair.mgmt(pair.mgmt_links(Q), operation, {"sequence-numbers": numbers})
    assert reply.properties["statusCode"] == 400
    assert reply.properties["errorCondition"] == "com.microsoft:argument-error"
    assert "must be an array of non-negative longs" in reply.properties["statusDescription"]
