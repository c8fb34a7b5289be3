"""A Testcontainers-python container for sbemu's image (``make image``), which Python lacks for
Microsoft's emulator (testcontainers-python issue #792: its SQL Server, EULA and mounted
config). Needs ``pip install testcontainers`` (the ``sbemu[testcontainers]`` extra) and a
Docker API (Docker, or ``podman system service`` with ``DOCKER_HOST``)::

    from sbemu.testing.container import SbemuContainer

    with SbemuContainer(config="Config.json") as sb:   # optional: your Microsoft Config.json
        client = ServiceBusClient.from_connection_string(sb.get_connection_string())
        admin = ServiceBusAdministrationClient.from_connection_string(
            sb.get_admin_connection_string())

It waits for the line Microsoft's emulator prints once it serves, as Testcontainers for Java
does with Microsoft's image.
"""

from __future__ import annotations

import io
import tarfile
from os import PathLike
from pathlib import Path
from typing import Any

from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from sbemu import __version__
from sbemu.cli.container import MICROSOFT_CONFIG, UP_LINE

__all__ = ["DEFAULT_IMAGE", "SbemuContainer"]

DEFAULT_IMAGE = f"sbemu:{__version__}"
AMQP_PORT = 5672
HTTP_PORT = 5300  # health and the management API (plain HTTP and HTTPS), as Microsoft's
START_TIMEOUT = 60
CA_FILE = "/data/tls/rootCA.pem"  # the CA sbemu makes on its data volume at first start


class SbemuContainer(DockerContainer):
    """sbemu's image with AMQP (5672) and the health/management port (5300) published on
    ephemeral host ports; ``config`` is a Microsoft-format Config.json mounted where Microsoft's
    image reads it (default: the embedded one, Microsoft's sample entities)."""

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        config: str | PathLike[str] | None = None,
        key_name: str = "RootManageSharedAccessKey",
        key: str = "SAS_KEY_VALUE",
        **kwargs: Any,
    ) -> None:
        super().__init__(image, **kwargs)
        self.key_name = key_name
        self.key = key
        self.with_exposed_ports(AMQP_PORT, HTTP_PORT)
        if config is not None:
            self.with_volume_mapping(Path(config).resolve(), str(MICROSOFT_CONFIG), "ro")
        self.waiting_for(LogMessageWaitStrategy(UP_LINE).with_startup_timeout(START_TIMEOUT))

    def get_connection_string(self) -> str:
        """The emulator connection string of the published AMQP port."""
        return self._connection_string(AMQP_PORT)

    def get_admin_connection_string(self) -> str:
        """The same key on the published management port, for ServiceBusAdministrationClient."""
        return self._connection_string(HTTP_PORT)

    def get_ca_certificate(self) -> bytes:
        """The PEM of the CA that signs the container's TLS certificate (AMQPS, wss, HTTPS on
        5300), to trust in a client (``connection_verify``), read through the Docker API's
        archive endpoint: an exec's output can carry the API's stream framing."""
        chunks, _ = self.get_wrapped_container().get_archive(CA_FILE)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
            member = archive.extractfile(Path(CA_FILE).name)
            if member is None:
                raise FileNotFoundError(CA_FILE)
            return member.read()

    def get_health_url(self) -> str:
        host = self.get_container_host_ip()
        return f"http://{host}:{self.get_exposed_port(HTTP_PORT)}/health"

    def _connection_string(self, port: int) -> str:
        host = self.get_container_host_ip()
        return (
            f"Endpoint=sb://{host}:{self.get_exposed_port(port)};"
            f"SharedAccessKeyName={self.key_name};SharedAccessKey={self.key};"
            "UseDevelopmentEmulator=true;"
        )
