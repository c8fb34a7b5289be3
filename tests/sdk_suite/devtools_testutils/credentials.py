"""``get_credential``: Azure's tooling returns an Azure AD credential; sbemu has no Azure AD.

The tests hand the credential to ``ServiceBusClient`` / ``ServiceBusAdministrationClient`` with a
namespace host. The stand-in returns the namespace's shared access key as the SDK's own
``ServiceBusSharedKeyCredential`` (sync or aio, as asked): a token credential whose tokens are SAS
tokens, which the AMQP clients send over ``$cbs`` as ``servicebus.windows.net:sastoken`` and the
admin clients put in the ``Authorization`` header. Tests about Azure AD itself are not
applicable (``not_applicable.txt``).
"""

from __future__ import annotations

from typing import Any

import servers
from azure.servicebus._base_handler import ServiceBusSharedKeyCredential
from azure.servicebus.aio._base_handler_async import (
    ServiceBusSharedKeyCredential as AsyncServiceBusSharedKeyCredential,
)


def get_credential(*, is_async: bool = False, **_: Any) -> Any:
    """The namespace's RootManageSharedAccessKey, for the sync or the aio clients."""
    kind = AsyncServiceBusSharedKeyCredential if is_async else ServiceBusSharedKeyCredential
    return kind(servers.KEY_NAME, servers.KEY)
