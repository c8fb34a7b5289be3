"""``PowerShellPreparer``: in Azure's pipelines, the test resources' coordinates come from
environment variables that a PowerShell deployment script sets (``SERVICEBUS_CONNECTION_STR``...).

Against sbemu, the values for the ``servicebus`` prefix name this pytest process's private sbemu
(``servers.private_admin_host``): its admin port over HTTPS as the namespace host, and its root key.
Every other key keeps the default the test module gives. Environment variables are not read, so
a developer's Azure settings can never send these tests to a real namespace.
"""

from __future__ import annotations

from typing import Any

import servers

from .preparers import AbstractPreparer


def _servicebus_values() -> dict[str, str]:
    host = servers.private_admin_host()
    return {
        "servicebus_connection_str": (
            f"Endpoint=sb://{host}/;SharedAccessKeyName="
            f"{servers.KEY_NAME};SharedAccessKey={servers.KEY}"
        ),
        "servicebus_fully_qualified_namespace": host,
        "servicebus_sas_policy": servers.KEY_NAME,
        "servicebus_sas_key": servers.KEY,
    }


class PowerShellPreparer(AbstractPreparer):
    def __init__(self, directory: str, name_prefix: str = "", **defaults: str) -> None:
        super().__init__(name_prefix)
        self.directory = directory
        self.defaults = defaults

    def provided(self) -> tuple[str, ...]:
        return tuple(self.defaults)

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        values = dict(self.defaults)
        if self.directory == "servicebus":
            values.update(_servicebus_values())
        return values
