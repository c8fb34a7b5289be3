"""`$cbs` against the entities that exist [issue 23 items 7 and 8], with the Python SDK:
a queue's or topic's own SAS rules (the admin API's authorization_rules) are honoured for that
entity only, with their rights; a token put for an entity that does not exist is refused the
way Azure refuses it (404, "The messaging entity '...' could not be found"), which the SDK
raises as ServiceBusAuthenticationError (the SDK suite's test_sb_client_bad_entity and
test_sb_client_incorrect_queue_conn_str)."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)
from azure.servicebus.management import (
    AccessRights,
    AuthorizationRule,
    ServiceBusAdministrationClient,
)
from integration_support import (
    KEY,
    KEY_NAME,
    ServerProcess,
    cbs_put_token,
    make_sas_token,
    proton_connect,
)

from sbemu.testing.pytest_plugin import SbemuServer


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def _conn_str(server: SbemuServer, key_name: str, key: str, entity: str | None = None) -> str:
    fields = dict(p.split("=", 1) for p in server.connection_string.split(";") if "=" in p)
    fields.update(SharedAccessKeyName=key_name, SharedAccessKey=key)
    fields.pop("EntityPath", None)
    if entity:
        fields["EntityPath"] = entity
    return ";".join(f"{k}={v}" for k, v in fields.items())


@pytest.fixture
def queues(admin: ServiceBusAdministrationClient) -> Iterator[dict[str, str]]:
    """Two queues; the first gets two rules of its own through the admin API."""
    names = {"own": f"cbs-own-{uuid.uuid4().hex[:6]}", "other": f"cbs-other-{uuid.uuid4().hex[:6]}"}
    keys = {"primary": _key(), "secondary": _key(), "listen": _key()}
    admin.create_queue(names["other"])
    queue = admin.create_queue(names["own"])
    queue.authorization_rules = [
        AuthorizationRule(
            key_name="queue-rule",
            primary_key=keys["primary"],
            secondary_key=keys["secondary"],
            rights=[AccessRights.send, AccessRights.listen],
        ),
        AuthorizationRule(
            key_name="queue-listen",
            primary_key=keys["listen"],
            secondary_key=keys["listen"],
            rights=[AccessRights.listen],
        ),
    ]
    admin.update_queue(queue)
    yield {**names, **keys}
    for name in names.values():
        admin.delete_queue(name)


def test_queue_rule_is_honoured_for_its_queue(sbemu_server: SbemuServer, queues) -> None:
    own = queues["own"]
    for key in (queues["primary"], queues["secondary"]):
        conn = _conn_str(sbemu_server, "queue-rule", key, entity=own)
        with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
            with client.get_queue_sender(own) as sender:
                sender.send_messages(ServiceBusMessage("by the queue's own rule"))
            with client.get_queue_receiver(own, max_wait_time=5) as receiver:
                (m,) = receiver.receive_messages(1, max_wait_time=5)
                assert str(m) == "by the queue's own rule"
                receiver.complete_message(m)


def test_queue_rule_is_not_honoured_for_another_queue(sbemu_server: SbemuServer, queues) -> None:
    conn = _conn_str(sbemu_server, "queue-rule", queues["primary"])
    with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender(queues["other"]) as sender:
                sender.send_messages(ServiceBusMessage("x"))


def test_queue_rule_rights_apply(sbemu_server: SbemuServer, queues) -> None:
    own = queues["own"]
    conn = _conn_str(sbemu_server, "queue-listen", queues["listen"], entity=own)
    with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthorizationError):
            with client.get_queue_sender(own) as sender:
                sender.send_messages(ServiceBusMessage("x"))
        with client.get_queue_receiver(own, max_wait_time=1) as receiver:
            assert receiver.receive_messages(1, max_wait_time=1) == []


def test_put_token_for_a_missing_entity_is_refused(sbemu_server: SbemuServer) -> None:
    with ServiceBusClient.from_connection_string(
        sbemu_server.connection_string, retry_total=0
    ) as client:
        with pytest.raises(ServiceBusAuthenticationError) as info:
            with client.get_queue_sender("invalid") as sender:
                sender.send_messages(ServiceBusMessage("test"))
        assert info.value  # (the SDK keeps the status description to itself: see below)
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_receiver("invalid/$DeadLetterQueue") as receiver:
                receiver.receive_messages(1, max_wait_time=1)


def test_put_token_for_a_missing_entity_answers_404(server: ServerProcess) -> None:
    """On the wire: Azure's status and description (JS and .NET read 'could not be found' as
    MessagingEntityNotFound); a namespace-wide audience, and existing entities, are fine."""
    conn = proton_connect(server)
    try:
        for audience in (
            f"sb://localhost:{server.port}/nope",
            "amqps://localhost/nope/$management",
        ):
            token = make_sas_token(audience, KEY_NAME, KEY, 2_000_000_000)
            status, description = cbs_put_token(conn, audience, token)
            assert status == 404
            assert description == (
                f"The messaging entity '{audience}' could not be found. To know more visit "
                "https://aka.ms/sbResourceMgrExceptions."
            )
        for audience in (
            f"sb://localhost:{server.port}/",
            f"sb://localhost:{server.port}/q1",
            "sb://localhost/q1/$DeadLetterQueue",
            "amqps://localhost/q1/$management",
        ):
            token = make_sas_token(audience, KEY_NAME, KEY, 2_000_000_000)
            assert cbs_put_token(conn, audience, token)[0] == 202, audience
    finally:
        conn.close()
