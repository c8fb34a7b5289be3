"""Testcontainers for Go's Azure Service Bus module (modules/azure/servicebus, tests/container/go)
on sbemu's image: its own start-up (a network, the config copied in, its waits: the ports
checked with /bin/sh inside the container, then /health on 5300) and azservicebus sending and
receiving through the published port. Its reaper off (its image cannot be pulled here), on
podman's Docker API. The first run downloads and compiles the module (Go proxy); later runs
reuse Go's caches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from container_support import remove_labelled, run_label, tc_run_env

GO = Path(__file__).resolve().parent / "go"


def test_servicebus_module_on_the_sbemu_image(sbemu_image: str, docker_host: str) -> None:
    if shutil.which("go") is None:
        pytest.skip("Go is not installed (make test's go-check installs it)")
    label = run_label("tc-go")
    env = tc_run_env(label, docker_host, sbemu_image)
    try:
        result = subprocess.run(
            ["go", "test", "-count=1", "-v", "./..."],
            cwd=GO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:  # a failed start leaves its containers behind
        remove_labelled(label)
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
