"""Azure's port layout with the default ports, where connection strings name no port (issue 33,
items 1 and 2): the Python and JS admin clients given (a) Azure's own string
(``Endpoint=sb://localhost/``, no flag: HTTPS on 443) and (b) the string sbemu prints
(``Endpoint=sb://localhost;...;UseDevelopmentEmulator=true;``: HTTPS on 443 all the same for
azure-servicebus 7.15 and @azure/service-bus 7.9), and the messaging client with (b) on 5672.

The ports are fixed, so the scenario (azure_layout_scenario.py) runs in tests/sdk_run.py's
``--azure-ports`` network namespace (root): a loopback where nothing else listens. The Java and
Go admin clients run the same two strings there (`make test-java`, `make test-go`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent


def test_admin_clients_with_the_applications_own_strings_on_azures_ports() -> None:
    sys.path.insert(0, str(TESTS))
    try:
        from sdk_run import netns_unavailable
    finally:
        sys.path.remove(str(TESTS))
    why = netns_unavailable()
    if why:
        pytest.skip(f"Azure's ports need a network namespace of our own: {why}")
    if shutil.which("node") is None or not (TESTS / "js" / "node_modules" / "@azure").exists():
        pytest.skip("node or tests/js/node_modules missing (`make js-deps`)")
    result = subprocess.run(
        [
            sys.executable,
            str(TESTS / "sdk_run.py"),
            "--azure-ports",
            "--",
            sys.executable,
            str(HERE / "azure_layout_scenario.py"),
            str(TESTS / "js"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["strings"] == {
        "azure": "Endpoint=sb://localhost/;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;",
        "printed": "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
    }
    assert report["python_azure"] == ["py-azure"]
    assert report["python_printed"] == ["py-printed"]
    assert report["js_azure"] == "admin client ok", report["js_azure"]
    assert report["js_printed"] == "admin client ok", report["js_printed"]
    assert report["messaging"] == ["over 5672"]
