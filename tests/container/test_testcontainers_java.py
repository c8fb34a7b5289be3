"""Testcontainers for Java's ServiceBusEmulatorContainer (testcontainers-azure 2.0,
tests/container/java) on sbemu's image: the image as a compatible substitute for Microsoft's,
the module's wait for "Emulator Service is Successfully Up!", its config copied in, and the Java
SDK sending and receiving on its connection string. The module insists on an SQL Server
container in configure(); the test overrides configure() (docs/containers.md shows the line).
Its reaper off (its image cannot be pulled here), on podman's Docker API. Maven resolves into
tests/container/java/.m2repo once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from container_support import remove_labelled, run_label, tc_run_env

JAVA = Path(__file__).resolve().parent / "java"


def test_service_bus_emulator_container_on_the_sbemu_image(
    sbemu_image: str, docker_host: str
) -> None:
    if shutil.which("mvn") is None or shutil.which("javac") is None:
        pytest.skip("Maven or a JDK is not installed (make test's maven-check installs them)")
    label = run_label("tc-java")
    env = tc_run_env(label, docker_host, sbemu_image)
    command = ["mvn", "-B", "-ntp", "-q", f"-Dmaven.repo.local={JAVA / '.m2repo'}", "test"]
    try:
        result = subprocess.run(
            command, cwd=JAVA, env=env, capture_output=True, text=True, timeout=900
        )
    finally:  # a failed start leaves its container behind
        remove_labelled(label)
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
