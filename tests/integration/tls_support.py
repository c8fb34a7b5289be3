"""Helpers of the TLS and WebSocket tests (test_tls, test_websockets, test_default_ports).

Imported as ``from tls_support import ...`` (a name no other test directory uses)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusConnectionError

ROOT = Path(__file__).resolve().parents[2]

# The last azure-servicebus release before UseDevelopmentEmulator support (added in 7.14.0):
# code written against it must reach sbemu with the CA trusted. It strips the Endpoint's port
# and takes any custom_endpoint_address as a WebSocket address (whatever transport_type says),
# so on a test port it speaks wss (websocket-client is its optional WebSocket dependency);
# AMQPS on the default port 5671 is tested in test_default_ports.py. Dependencies pinned too.
OLD_SDK = (
    "azure-servicebus==7.13.0",
    "websocket-client==1.9.0",
    "azure-core==1.41.0",
    "isodate==0.7.2",
    "typing-extensions==4.16.0",
)


def old_sdk_python() -> Path:
    """A virtual environment with azure-servicebus 7.13.0 from PyPI (made once, kept in .venv,
    rebuilt when the pins change)."""
    home = ROOT / ".venv" / "old-sdk" / OLD_SDK[0].replace("==", "-")
    python = home / "bin" / "python"
    stamp = home / ".installed"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time (xdist workers)
        if not stamp.exists() or stamp.read_text() != " ".join(OLD_SDK):
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
            result = subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    *OLD_SDK,
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if result.returncode != 0:
                pytest.fail(f"pip install {' '.join(OLD_SDK)} failed:\n{result.stderr[-2000:]}")
            stamp.write_text(" ".join(OLD_SDK))
    return python


def refused_by_cbs(error: BaseException) -> str:
    """The $cbs verdict behind an SDK error. With a custom_endpoint_address the Python SDK
    maps every authentication failure to ServiceBusConnectionError ("for uamqp parity"), so
    the class alone does not say it; the CBS status in the error's context does."""
    assert isinstance(error, (ServiceBusAuthenticationError, ServiceBusConnectionError)), error
    return repr(error.__context__)
