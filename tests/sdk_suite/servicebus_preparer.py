"""sbemu's ``servicebus_preparer``: the SDK tests' preparers, over sbemu's admin API.

Azure's version (in the sdist, left out when it is unpacked) creates a resource group, a
namespace, entities and SAS rules through Azure Resource Manager. Here the namespace is the
shared sbemu (``servers``) and each test gets fresh entities created with the SDK's own
``ServiceBusAdministrationClient`` against sbemu's admin API, with the properties the decorator
asks for; they are deleted after the test. The keyword arguments the tests receive are the same
as Azure's: ``servicebus_namespace`` (``.name``), ``servicebus_namespace_connection_string``,
``..._key_name``, ``..._primary_key``, ``servicebus_queue`` / ``servicebus_topic`` /
``servicebus_subscription`` (``.name``), ``servicebus_authorization_rule_connection_string``,
``servicebus_queue_authorization_rule_connection_string``.

The messaging tests build the host as ``f"{servicebus_namespace.name}{SERVICEBUS_ENDPOINT_SUFFIX}"``:
the namespace is named ``localhost`` and the suffix is empty.
"""

from __future__ import annotations

import base64
import functools
import secrets
from typing import Any

import servers
from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus.management import (
    AccessRights,
    AuthorizationRule,
    ServiceBusAdministrationClient,
)
from devtools_testutils.preparers import AbstractPreparer, FakeResource, ResourceGroupPreparer

SERVICEBUS_DEFAULT_AUTH_RULE_NAME = servers.KEY_NAME
SERVICEBUS_ENDPOINT_SUFFIX = ""
SERVICEBUS_NAMESPACE_PARAM = "servicebus_namespace"
SERVICEBUS_TOPIC_PARAM = "servicebus_topic"
SERVICEBUS_SUBSCRIPTION_PARAM = "servicebus_subscription"
SERVICEBUS_QUEUE_PARAM = "servicebus_queue"
SERVICEBUS_AUTHORIZATION_RULE_PARAM = "servicebus_authorization_rule"
SERVICEBUS_QUEUE_AUTHORIZATION_RULE_PARAM = "servicebus_queue_authorization_rule"
ALL_RIGHTS = ("manage", "send", "listen")


def admin_client() -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        servers.target().admin_connection_string
    )


def connection_string(key_name: str, key: str, entity: str | None = None) -> str:
    """A connection string as Azure's portal gives it (no emulator flag: TLS on 5671)."""
    conn = (
        f"Endpoint=sb://{servers.target().host}/;SharedAccessKeyName={key_name};"
        f"SharedAccessKey={key}"
    )
    return f"{conn};EntityPath={entity}" if entity else conn


def _rights(access_rights: Any) -> tuple[str, ...]:
    return tuple(sorted(str(getattr(r, "value", r)).lower() for r in access_rights))


class ServiceBusResourceGroupPreparer(ResourceGroupPreparer):
    pass


class ServiceBusNamespacePreparer(AbstractPreparer):
    """The shared sbemu, named ``localhost``, with its root key."""

    def __init__(
        self, name_prefix: str = "", parameter_name: str = SERVICEBUS_NAMESPACE_PARAM, **kwargs: Any
    ) -> None:
        super().__init__(name_prefix, **kwargs)
        self.parameter_name = parameter_name

    def provided(self) -> tuple[str, ...]:
        p = self.parameter_name
        return (p, f"{p}_connection_string", f"{p}_key_name", f"{p}_primary_key")

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        p = self.parameter_name
        host = servers.target().host
        return {
            p: FakeResource(host, host),
            f"{p}_connection_string": connection_string(servers.KEY_NAME, servers.KEY),
            f"{p}_key_name": servers.KEY_NAME,
            f"{p}_primary_key": servers.KEY,
        }


class _EntityPreparer(AbstractPreparer):
    """Creates one entity through the admin API; deletes it after the test."""

    def __init__(self, name_prefix: str = "", parameter_name: str = "", **kwargs: Any) -> None:
        super().__init__(name_prefix, **kwargs)
        self.parameter_name = parameter_name

    def provided(self) -> tuple[str, ...]:
        return (self.parameter_name,)


class ServiceBusQueuePreparer(_EntityPreparer):
    def __init__(
        self,
        name_prefix: str = "",
        requires_duplicate_detection: bool = False,
        dead_lettering_on_message_expiration: bool = False,
        requires_session: bool = False,
        enable_partitioning: bool = False,
        lock_duration: str = "PT30S",
        parameter_name: str = SERVICEBUS_QUEUE_PARAM,
        **kwargs: Any,
    ) -> None:
        super().__init__(name_prefix, parameter_name, **kwargs)
        self.properties = {
            "requires_duplicate_detection": requires_duplicate_detection,
            "dead_lettering_on_message_expiration": dead_lettering_on_message_expiration,
            "requires_session": requires_session,
            "enable_partitioning": enable_partitioning,
            "lock_duration": lock_duration,
        }

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        with admin_client() as admin:
            admin.create_queue(name, **self.properties)
        return {self.parameter_name: FakeResource(name)}

    def remove_resource(self, name: str, **kwargs: Any) -> None:
        with admin_client() as admin, _gone():
            admin.delete_queue(name)


class ServiceBusTopicPreparer(_EntityPreparer):
    def __init__(
        self, name_prefix: str = "", parameter_name: str = SERVICEBUS_TOPIC_PARAM, **kwargs: Any
    ) -> None:
        super().__init__(name_prefix, parameter_name, **kwargs)

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        with admin_client() as admin:
            admin.create_topic(name)
        return {self.parameter_name: FakeResource(name)}

    def remove_resource(self, name: str, **kwargs: Any) -> None:
        with admin_client() as admin, _gone():
            admin.delete_topic(name)


class ServiceBusSubscriptionPreparer(_EntityPreparer):
    def __init__(
        self,
        name_prefix: str = "",
        parameter_name: str = SERVICEBUS_SUBSCRIPTION_PARAM,
        servicebus_topic_parameter_name: str = SERVICEBUS_TOPIC_PARAM,
        requires_session: bool = False,
        lock_duration: str = "PT60S",
        **kwargs: Any,
    ) -> None:
        super().__init__(name_prefix, parameter_name, **kwargs)
        self.topic_parameter = servicebus_topic_parameter_name
        self.properties = {"requires_session": requires_session, "lock_duration": lock_duration}

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        topic = kwargs[self.topic_parameter].name
        with admin_client() as admin:
            admin.create_subscription(topic, name, **self.properties)
        return {self.parameter_name: FakeResource(name)}

    def remove_resource(self, name: str, **kwargs: Any) -> None:
        with admin_client() as admin, _gone():
            admin.delete_subscription(kwargs[self.topic_parameter].name, name)


class ServiceBusNamespaceAuthorizationRulePreparer(_EntityPreparer):
    """A namespace SAS rule with the requested rights: Azure creates it through Resource
    Manager; sbemu's namespace rules come from its Config.json (``servers.POLICIES``)."""

    def __init__(
        self,
        name_prefix: str = "",
        access_rights: Any = ALL_RIGHTS,
        parameter_name: str = SERVICEBUS_AUTHORIZATION_RULE_PARAM,
        **kwargs: Any,
    ) -> None:
        super().__init__(name_prefix, parameter_name, **kwargs)
        self.rights = _rights(access_rights)

    def provided(self) -> tuple[str, ...]:
        return (self.parameter_name, f"{self.parameter_name}_connection_string")

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        key_name, key = servers.POLICIES[self.rights]
        return {
            self.parameter_name: FakeResource(key_name),
            f"{self.parameter_name}_connection_string": connection_string(key_name, key),
        }


class ServiceBusQueueAuthorizationRulePreparer(_EntityPreparer):
    """A SAS rule on the test's queue, added with the admin API (``authorization_rules``)."""

    def __init__(
        self,
        name_prefix: str = "",
        access_rights: Any = ALL_RIGHTS,
        parameter_name: str = SERVICEBUS_QUEUE_AUTHORIZATION_RULE_PARAM,
        servicebus_queue_parameter_name: str = SERVICEBUS_QUEUE_PARAM,
        **kwargs: Any,
    ) -> None:
        super().__init__(name_prefix, parameter_name, **kwargs)
        self.rights = _rights(access_rights)
        self.queue_parameter = servicebus_queue_parameter_name

    def provided(self) -> tuple[str, ...]:
        return (self.parameter_name, f"{self.parameter_name}_connection_string")

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        queue_name = kwargs[self.queue_parameter].name
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        rights = [AccessRights(r.title()) for r in self.rights]
        with admin_client() as admin:
            queue = admin.get_queue(queue_name)
            queue.authorization_rules = [
                *(queue.authorization_rules or []),
                AuthorizationRule(key_name=name, primary_key=key, secondary_key=key, rights=rights),
            ]
            admin.update_queue(queue)
        return {
            self.parameter_name: FakeResource(name),
            f"{self.parameter_name}_connection_string": connection_string(
                name, key, entity=queue_name
            ),
        }


class _gone:
    """Deleting what a test already deleted is fine."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        return kind is not None and issubclass(kind, ResourceNotFoundError)


CachedServiceBusResourceGroupPreparer = functools.partial(ServiceBusResourceGroupPreparer)
# Azure caches a namespace or queue across tests to save minutes of provisioning; sbemu creates
# entities in milliseconds, so every test gets fresh ones (no state leaks between tests).
CachedServiceBusNamespacePreparer = ServiceBusNamespacePreparer
CachedServiceBusQueuePreparer = ServiceBusQueuePreparer
CachedServiceBusTopicPreparer = ServiceBusTopicPreparer
CachedServiceBusSubscriptionPreparer = ServiceBusSubscriptionPreparer
