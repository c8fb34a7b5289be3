"""``sbemu serve --container`` (``SBEMU_CONTAINER=1``, set in sbemu's image): the start-up
contract of Microsoft's emulator image, so compose files, Testcontainers modules and CI written
for it run unchanged (docs/containers.md).

Only defaults change, as environment variables under the ones a user sets:

- the configuration is ``/ServiceBus_Emulator/ConfigFiles/Config.json`` (the same format): the
  image ships Microsoft's sample entities there (container/Config.json), a user mounts theirs
  over it; without the file, the embedded default;
- every interface is bound (``0.0.0.0``): the container's ports are published by the engine;
- the health and management port is ``EMULATOR_HTTP_PORT`` (default 5300), as Microsoft's.

Microsoft's SQL Server settings (``SQL_SERVER``, ``MSSQL_SA_PASSWORD``, ``ACCEPT_EULA``,
``SQL_WAIT_INTERVAL``) are accepted and ignored with one log line, and once the server serves it
prints :data:`UP_LINE`, the line Testcontainers for Java waits for.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

ENV_CONTAINER = "SBEMU_CONTAINER"
MICROSOFT_CONFIG = Path("/ServiceBus_Emulator/ConfigFiles/Config.json")
ENV_HTTP_PORT = "EMULATOR_HTTP_PORT"
SQL_SETTINGS = ("SQL_SERVER", "MSSQL_SA_PASSWORD", "ACCEPT_EULA", "SQL_WAIT_INTERVAL")
UP_LINE = "Emulator Service is Successfully Up!"
BIND_ALL = "0.0.0.0"


def container_defaults(env: Mapping[str, str], config: Path = MICROSOFT_CONFIG) -> dict[str, str]:
    """The settings a container changes, by ``serve`` option name ("host", "config",
    "admin-port"); ``serve`` puts them under the user's own variables. ``config`` is where
    Microsoft's image reads its Config.json (a test moves it)."""
    defaults = {"host": BIND_ALL}
    if config.is_file():
        defaults["config"] = str(config)
    if env.get(ENV_HTTP_PORT):
        defaults["admin-port"] = env[ENV_HTTP_PORT]
    return defaults


def ignored_settings_line(env: Mapping[str, str]) -> str | None:
    """One line naming the SQL Server settings given, which sbemu does not need; None if none."""
    given = [name for name in SQL_SETTINGS if env.get(name)]
    if not given:
        return None
    return (
        f"ignoring {', '.join(given)}: sbemu keeps its entities and messages in its data dir "
        "and needs no SQL Server (nor a licence to accept)"
    )
