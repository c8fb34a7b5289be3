"""The hardening suite lives in ./hardening (shared with `make fuzz|crash-test|soak`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adminnet import InProcessServer  # noqa: E402

from serverprobe import section as refusal_section  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A refused connection to an in-process server: its ports as they are now (serverprobe)."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, InProcessServer) and value.server is not None:
            srv = value.server
            ports = {"amqp": srv.amqp_port, "admin": srv.admin_port}
            alive = [f"event loop thread alive: {value.alive}"]
            text = refusal_section(ports, str(report.longrepr), alive)
            if text is not None:
                report.sections.append((f"{name} after a refused connection", text))
