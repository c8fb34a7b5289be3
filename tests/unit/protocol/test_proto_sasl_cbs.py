"""SASL, $cbs put-token and entity attach (accept / refuse) through the sans-IO AmqpConnection,
driven by a python-qpid-proton client engine in memory (contract sections 1.2, 2, 3.1, 8).
"""

from __future__ import annotations

import re
import uuid

import pytest
from amqp_harness import (
    AMQP_HEADER,
    ATTACH,
    DETACH,
    DISPOSITION,
    FLOW,
    KEY,
    KEY_NAME,
    PROPERTIES,
    SASL_HEADER,
    SASL_MECHANISMS,
    SASL_OUTCOME,
    SOURCE,
    TARGET,
    EnginePair,
    message_sections,
    perf_types,
    sas_token,
    section_list,
    section_map,
)
from proton import Data, Delivery, Message, Terminus, ulong

from sbemu.auth.sas import make_sas_token

ENTITY = "queue.1"
AUDIENCE = f"sb://localhost/{ENTITY}"


def _attach_replies(pair: EnginePair, name: str):
    return [f for f in pair.frames() if f.code == ATTACH and f.field(0) == name]


# ------------------------------------------------------------------------------ SASL


def test_sasl_mechanisms_offered(anon):
    frames = anon.frames()
    assert frames[0].header == SASL_HEADER
    mechs = [f for f in frames if f.code == SASL_MECHANISMS]
    assert len(mechs) == 1
    offered = [str(m) for m in mechs[0].field(0)]
    assert "MSSBCBS" in offered and "ANONYMOUS" in offered
    # sasl-server-mechanisms is a symbol array [AMQP 5.3.3.1]
    t = perf_types(mechs[0])[0]
    assert t.type == Data.ARRAY


def test_sasl_anonymous_accepted(anon):
    outcome = anon.server_perfs(SASL_OUTCOME)
    assert [f.field(0) for f in outcome] == [0]
    assert anon.transport.sasl().outcome == 0
    assert AMQP_HEADER in bytes(anon.s2c)
    assert anon.conn.remote_container  # the server's open arrived
    assert not anon.server.closed


def test_sasl_anonymous_with_trace_string_accepted(services):
    # JS sends "\0<key name>" as the ANONYMOUS initial response [contract 1.2].
    p = EnginePair(services, sasl=("raw", "ANONYMOUS", b"\x00RootManageSharedAccessKey"))
    assert p.raw_sasl_outcome == 0
    p.open()
    assert p.conn.remote_container
    assert not p.server.closed


def test_sasl_mssbcbs_accepted(services):
    p = EnginePair(services, sasl=("raw", "MSSBCBS", b""))
    assert p.raw_sasl_outcome == 0
    p.open()
    assert p.conn.remote_container
    # MSSBCBS is exactly ANONYMOUS: CBS then authorises.
    reply, _ = p.put_token(sas_token(ENTITY, now=p.now), AUDIENCE)
    assert reply.properties["status-code"] == 202
    snd = p.sender(ENTITY)
    assert snd.remote_condition is None
    dlv = p.send(snd, Message(body=b"x"))
    assert dlv.remote_state == Delivery.ACCEPTED


def test_sasl_mssbcbs_null_initial_response_accepted(services):
    p = EnginePair(services, sasl=("raw", "MSSBCBS", None))
    assert p.raw_sasl_outcome == 0
    p.open()
    assert p.conn.remote_container


def test_sasl_plain_good_credentials(services):
    p = EnginePair(services, sasl="PLAIN").open()
    assert [f.field(0) for f in p.server_perfs(SASL_OUTCOME)] == [0]
    assert p.conn.remote_container
    # PLAIN with a key holding all rights needs no $cbs round trip.
    snd = p.sender(ENTITY)
    assert snd.remote_condition is None
    assert p.send(snd, Message(body=b"x")).remote_state == Delivery.ACCEPTED


@pytest.mark.parametrize(
    "user,password",
    [("RootManageSharedAccessKey", "wrong"), ("nobody", "SAS_KEY_VALUE")],
)
def test_sasl_plain_bad_credentials_refused(services, user, password):
    p = EnginePair(services, sasl="PLAIN", user=user, password=password)
    p.conn.open()
    p.pump()
    outcome = p.server_perfs(SASL_OUTCOME)
    assert len(outcome) == 1 and outcome[0].field(0) == 1  # auth
    assert p.server.closed
    assert AMQP_HEADER not in bytes(p.s2c)  # no AMQP layer for a failed login
    assert p.conn.remote_container is None


def test_sasl_plain_raw_malformed_response_refused(services):
    p = EnginePair(services, sasl=("raw", "PLAIN", b"no-nul-separators"))
    assert p.raw_sasl_outcome == 1
    assert p.server.closed


def test_sasl_unknown_mechanism_refused(services):
    p = EnginePair(services, sasl=("raw", "GSSAPI", b""))
    assert p.raw_sasl_outcome not in (None, 0)
    assert p.server.closed


def test_no_sasl_plain_amqp_header(services):
    # JS with a precomputed SAS: no SASL layer at all [contract 1.2].
    p = EnginePair(services, sasl=None).open()
    frames = p.frames()
    assert frames[0].header == AMQP_HEADER
    assert not any(f.ftype == 1 for f in frames if f.header is None)
    assert p.conn.remote_container
    reply, _ = p.put_token(sas_token(ENTITY, now=p.now), AUDIENCE)
    assert reply.properties["status-code"] == 202
    snd = p.sender(ENTITY)
    assert snd.remote_condition is None
    assert p.send(snd, Message(body=b"x")).remote_state == Delivery.ACCEPTED


# ------------------------------------------------------------------------------ $cbs


@pytest.mark.parametrize(
    "message_id,expected_type",
    [
        (uuid.UUID("0aae101d-2c83-4e0f-9a31-0123456789ab"), Data.UUID),  # Python
        ("cbs-request-7f1c", Data.STRING),  # JS / .NET
        (ulong(42), Data.ULONG),  # older .NET: echo whatever type arrives
    ],
    ids=["uuid", "string", "ulong"],
)
def test_put_token_valid_202_and_correlation(anon, message_id, expected_type):
    reply, raw = anon.put_token(sas_token(ENTITY, now=anon.now), AUDIENCE, message_id=message_id)
    sections = message_sections(raw)
    # properties and application-properties are present [contract 2.4]
    assert PROPERTIES in sections
    props = section_list(sections[PROPERTIES])
    corr = props[5]
    assert corr.type == expected_type, corr.type_name
    assert corr.value == message_id
    assert reply.correlation_id == message_id
    app = section_map(sections[0x74])
    assert set(app) == {"status-code", "status-description"}  # no error-condition on success
    key_t, code_t = app["status-code"]
    assert key_t.type == Data.STRING
    assert code_t.type == Data.INT and code_t.value == 202
    assert app["status-description"][1].type == Data.STRING
    # The response is pre-settled and the request got a settled accepted disposition.
    transfers = [f for f in anon.frames() if f.code == 0x14]
    assert transfers and transfers[-1].field(4) is True  # settled
    dispositions = [f for f in anon.frames() if f.code == DISPOSITION]
    assert dispositions and dispositions[-1].field(3) is True
    assert dispositions[-1].field(4).descriptor == 0x24


def test_put_token_then_entity_attach_accepted(anon):
    reply, _ = anon.put_token(sas_token(ENTITY, now=anon.now), AUDIENCE)
    assert reply.properties["status-code"] == 202
    snd = anon.sender(f"amqps://localhost:5671/{ENTITY}", source="sender-link-1")
    assert snd.remote_condition is None
    assert snd.state & snd.REMOTE_ACTIVE
    rcv = anon.receiver(ENTITY, target="receiver-link-1")
    assert rcv.remote_condition is None
    assert rcv.state & rcv.REMOTE_ACTIVE


@pytest.mark.parametrize(
    "resource", ["sb://localhost/", "amqps://localhost/"], ids=["sb", "dotnet"]
)
def test_put_token_namespace_wide_token_covers_entity(anon, resource):
    # .NET signs one connection-wide resource: a namespace sr covers every entity [contract 2.3].
    token = make_sas_token(resource, KEY_NAME, KEY, int(anon.now) + 1800)
    reply, _ = anon.put_token(token, f"amqps://localhost/{ENTITY}")
    assert reply.properties["status-code"] == 202
    assert anon.sender(ENTITY).remote_condition is None
    assert anon.receiver("queue.partitioned").remote_condition is None


def _wrong_key(p):
    return sas_token(ENTITY, key="not-the-key", now=p.now)


def _expired(p):
    return sas_token(ENTITY, ttl=-60, now=p.now)


def _other_entity(p):
    return sas_token("queue.partitioned", now=p.now)


def _unknown_key_name(p):
    return sas_token(ENTITY, key_name="nobody", now=p.now)


def _not_sas(p):
    return "eyJhbGciOiJIUzI1NiJ9.e30.sig"


@pytest.mark.parametrize(
    "make_token",
    [_wrong_key, _expired, _other_entity, _unknown_key_name, _not_sas],
    ids=["wrong-key", "expired", "other-entity", "unknown-key-name", "not-sas"],
)
def test_put_token_bad_token_401_then_attach_refused(anon, make_token):
    reply, raw = anon.put_token(make_token(anon), AUDIENCE)
    app = section_map(message_sections(raw)[0x74])
    assert app["status-code"][1].type == Data.INT
    assert app["status-code"][1].value == 401
    assert app["status-description"][1].type == Data.STRING
    # The entity link is now refused: attach(null source, null target) + detach(closed, error).
    name = "entity-sender"
    mark = anon.mark()
    snd = anon.sender(f"amqps://localhost:5671/{ENTITY}", source="sender-link-x", name=name)
    assert snd.remote_condition is not None
    assert snd.remote_condition.name == "amqp:unauthorized-access"
    frames = anon.frames_since(mark)
    attach = [f for f in frames if f.code == ATTACH and f.field(0) == name]
    assert len(attach) == 1
    assert attach[0].field(5) is None, "refused attach must carry a null source"
    assert attach[0].field(6) is None, "refused attach must carry a null target"
    detach = [f for f in frames if f.code == DETACH]
    assert len(detach) == 1
    assert detach[0].field(1) is True  # closed
    err = detach[0].field(2)
    assert err.descriptor == 0x1D and err.value[0] == "amqp:unauthorized-access"
    # Receivers are refused the same way.
    rcv = anon.receiver(ENTITY, name="entity-receiver")
    assert rcv.remote_condition.name == "amqp:unauthorized-access"
    assert rcv.remote_source.type == Terminus.UNSPECIFIED


def test_no_token_at_all_attach_refused(anon):
    snd = anon.sender(ENTITY, name="s")
    assert snd.remote_condition.name == "amqp:unauthorized-access"
    attach = _attach_replies(anon, "s")
    assert attach[0].field(5) is None and attach[0].field(6) is None


def test_token_for_other_entity_does_not_cover(anon):
    # Valid token for queue.partitioned, put with its own audience: 202, but queue.1 stays closed.
    reply, _ = anon.put_token(
        sas_token("queue.partitioned", now=anon.now), "sb://localhost/queue.partitioned"
    )
    assert reply.properties["status-code"] == 202
    assert anon.sender("queue.partitioned").remote_condition is None
    assert anon.sender(ENTITY).remote_condition.name == "amqp:unauthorized-access"


def test_token_prefix_does_not_cover_longer_name(anon):
    # 'queue' must not cover 'queue.1' (segment-boundary prefix only).
    reply, _ = anon.put_token(sas_token("queue", now=anon.now), "sb://localhost/queue")
    assert anon.sender(ENTITY).remote_condition.name == "amqp:unauthorized-access"


def test_cbs_unknown_operation_is_error(anon):
    snd, rcv = anon.cbs_links()
    req = Message(id=uuid.uuid4(), properties={"operation": "get-token"}, body="x")
    reply, raw = anon.request(snd, rcv, req)
    code = section_map(message_sections(raw)[0x74])["status-code"][1]
    assert code.type == Data.INT and code.value >= 400


# ------------------------------------------------------------------------------ attach replies


def test_unknown_entity_not_found(pair):
    name = "to-nowhere"
    snd = pair.sender("amqps://localhost:5671/no-such-queue", source="sender-link-n", name=name)
    cond = snd.remote_condition
    assert cond is not None and cond.name == "amqp:not-found"
    assert re.search(r"The messaging entity .* could not be found", cond.description), (
        cond.description
    )
    attach = _attach_replies(pair, name)
    assert attach[0].field(5) is None and attach[0].field(6) is None
    rcv = pair.receiver("no-such-queue", name="r-nowhere")
    assert rcv.remote_condition.name == "amqp:not-found"
    assert re.search(
        r"The messaging entity .* could not be found", rcv.remote_condition.description
    )
    # The connection survives the refusals.
    assert pair.sender(ENTITY).remote_condition is None


def test_unknown_management_node_not_found(pair):
    snd = pair.sender("no-such-queue/$management", source="no-such-queue/$management")
    assert snd.remote_condition.name == "amqp:not-found"


@pytest.mark.parametrize(
    "target",
    ["amqps://localhost:5671/queue.1", "/queue.1", "queue.1", "amqps://LOCALHOST:5671/Queue.1"],
    ids=["python", "dotnet", "js", "mixed-case"],
)
def test_sender_attach_reply_echoes_and_max_message_size(pair, target):
    name = f"snd-{uuid.uuid4()}"
    source = f"sender-link-{name}"
    snd = pair.sender(target, source=source, name=name, rcv_second=True)
    assert snd.remote_condition is None
    replies = _attach_replies(pair, name)
    assert len(replies) == 1
    a = replies[0]
    assert a.field(2) is True  # role receiver
    assert a.field(5).descriptor == SOURCE and a.field(5).value[0] == source
    assert a.field(6).descriptor == TARGET and a.field(6).value[0] == target  # byte-for-byte
    types = perf_types(a)
    assert len(types) > 10, "attach reply has no max-message-size field"
    mms = types[10]
    assert mms.type == Data.ULONG and mms.value == 262144
    # Python asks for rcv-settle-mode second; the reply must say first (0) [contract 3.1].
    assert a.field(4) in (0, None)
    # Immediate credit with delivery-count = the client's initial-delivery-count.
    handle = a.field(1)
    flows = [f for f in pair.frames() if f.code == FLOW and f.field(4) == handle]
    assert flows and flows[0].field(6) > 0 and flows[0].field(5) == 0


def test_receiver_attach_reply_echoes_and_initial_delivery_count(pair):
    name = "rcv-echo"
    source = "amqps://localhost:5671/queue.1"
    target = "receiver-link-rcv-echo"
    rcv = pair.receiver(source, target=target, name=name)
    assert rcv.remote_condition is None
    a = _attach_replies(pair, name)[0]
    assert a.field(2) is False  # role sender
    assert a.field(5).value[0] == source
    assert a.field(6).value[0] == target
    types = perf_types(a)
    assert types[9].type == Data.UINT and types[9].value == 0  # initial-delivery-count
    assert types[10].type == Data.ULONG and types[10].value > 0  # max-message-size
    assert a.field(3) == 0  # snd-settle-mode unsettled (peek-lock)


def test_cbs_links_with_null_terminus_accepted(anon):
    # JS: request link with null source, response link with null target [contract 2.1].
    snd = anon.sender("$cbs", name="cbs-req")
    rcv = anon.receiver("$cbs", name="cbs-rsp", credit=10, peek_lock=False)
    assert snd.remote_condition is None and rcv.remote_condition is None
    reply, _ = anon.put_token(
        sas_token(ENTITY, now=anon.now), AUDIENCE, message_id="js-1", links=(snd, rcv)
    )
    assert reply.correlation_id == "js-1"
    assert reply.properties["status-code"] == 202


def test_token_identity_and_watch_end_with_the_token(anon):
    # cbs.Grants: the dashboard lists the live token's key name and the links it authorised;
    # once the token expires unrenewed the link is detached and the identity is gone.
    reply, _ = anon.put_token(sas_token(ENTITY, now=anon.now, ttl=60), AUDIENCE)
    assert reply.properties["status-code"] == 202
    snd = anon.sender(ENTITY, source="watched-sender")
    assert snd.remote_condition is None
    picture = anon.server.describe()
    assert picture["identities"] == ["RootManageSharedAccessKey"]
    assert [link["kind"] for link in picture["links"] if link["address"] == ENTITY] == ["SendLink"]
    deadline = anon.server.next_deadline()
    assert deadline is not None and deadline <= anon.now + 61  # woken for the token's expiry
    anon.advance(61)
    anon.server.handle_timer(anon.now)  # what the adapter does at next_deadline()
    anon.pump()
    assert snd.remote_condition is not None
    assert snd.remote_condition.name == "amqp:unauthorized-access"
    picture = anon.server.describe()
    assert picture["identities"] == []
    assert not [link for link in picture["links"] if link["address"] == ENTITY]
