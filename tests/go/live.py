"""Run the azservicebus module's own tests against sbemu: ``tests/sdk_run.py -- python tests/go/live.py``.

The packages ``azservicebus`` and ``azservicebus/admin`` are tested from the Go module cache,
unchanged, at the version tests/go/go.mod pins, in live mode (``AZURE_RECORD_MODE=live``), with
the ``SERVICEBUS_*`` variables tests/sdk_run.py sets. The tests no emulator can serve are listed
in not-applicable.txt beside this file, one a line with the reason, and skipped by name
(``go test -skip``); every other test runs and a failure fails the run.

The tests listed in needs-azure-ports.txt build an admin client from the connection string,
which calls HTTPS on the endpoint's own host:port: they need Azure's ports (AMQPS on 5671, the
management API over HTTPS on 443 of one host), which tests/sdk_run.py --azure-ports serves in a network namespace of its
own (SBEMU_AZURE_PORTS=1). Where it cannot (not root, no unshare or ip) they are skipped by name,
and the run says so.

Two guards keep the listed tests off the network should one ever be reached:
``AZURE_TOKEN_CREDENTIALS=AzureCLICredential`` (DefaultAzureCredential tries only the Azure CLI,
absent here: no managed-identity probe) and ``HTTPS_PROXY``/``HTTP_PROXY`` on a closed loopback
port (an HTTPS call to Azure AD or ARM is refused at once; Go never proxies loopback, so sbemu's
admin port is reached directly).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULE = "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
PACKAGES = {"azservicebus": ".", "admin": "./admin"}
GUARDS = {
    "AZURE_RECORD_MODE": "live",
    "AZURE_TOKEN_CREDENTIALS": "AzureCLICredential",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "GOPROXY": "off",  # everything was downloaded by `make go-deps`; nothing is fetched here
}


def not_applicable(path: Path) -> dict[str, list[str]]:
    """package -> test names (``Test`` or ``Test/subtest``) from `path`; each needs a reason."""
    entries: dict[str, list[str]] = {name: [] for name in PACKAGES}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[0] not in PACKAGES:
            raise SystemExit(f"{path}:{number}: want '<package> <test> <reason>', got {line!r}")
        entries[parts[0]].append(parts[1])
    return entries


def skip_pattern(names: list[str]) -> str:
    """go test -skip: alternatives split on '|', levels on '/', each level anchored."""
    return "|".join(
        "/".join(f"^{re.escape(level)}$" for level in name.split("/")) for name in names
    )


def main() -> int:
    module_dir = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", MODULE],
        cwd=HERE,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    skips = not_applicable(HERE / "not-applicable.txt")
    no_ports = {name: [] for name in PACKAGES}
    if os.environ.get("SBEMU_AZURE_PORTS") != "1":
        no_ports = not_applicable(HERE / "needs-azure-ports.txt")
    env = {**os.environ, **GUARDS}
    rc = 0
    for package, path in PACKAGES.items():
        cmd = ["go", "test", "-count=1", "-timeout", "10m", path]
        if skips[package] or no_ports[package]:
            cmd += ["-skip", skip_pattern(skips[package] + no_ports[package])]
        print(
            f"---- {MODULE} ({package}): {len(skips[package])} not applicable, skipped by name",
            flush=True,
        )
        if no_ports[package]:
            print(
                f"SKIPPED: {', '.join(no_ports[package])}: need Azure's ports (AMQPS 5671 and "
                "HTTPS 443 on one host); tests/sdk_run.py --azure-ports makes them in a network "
                "namespace, which needs root with unshare and ip",
                flush=True,
            )
        rc |= subprocess.run(cmd, cwd=module_dir, env=env, check=False).returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
