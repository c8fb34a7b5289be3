"""@testcontainers/azureservicebus (Node) on sbemu's image (tests/container/js): the module's
own start-up (its network, the config copied into the container, its wait for /health on 5300)
and @azure/service-bus sending and receiving through the published port. testcontainers 11.14
(npm overrides: 12.x needs Node 22), its Ryuk reaper off (its image cannot be pulled here), on
podman's Docker API."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest
from container_support import remove_labelled, run_label, tc_run_env

JS = Path(__file__).resolve().parent / "js"


def npm_ci() -> None:
    """The packages of tests/container/js/package-lock.json, installed once (npm ci)."""
    with open(JS / ".npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = JS / "node_modules" / ".package-lock.json"
        if stamp.exists() and stamp.stat().st_mtime >= (JS / "package-lock.json").stat().st_mtime:
            return
        result = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=JS,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise AssertionError(f"npm ci in {JS} failed:\n{result.stderr[-3000:]}")


def test_azureservicebus_module_on_the_sbemu_image(sbemu_image: str, docker_host: str) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js is not installed (make test's node-check installs it)")
    npm_ci()
    label = run_label("tc-node")
    env = tc_run_env(label, docker_host, sbemu_image)
    try:
        result = subprocess.run(
            ["node", "--test", "--test-reporter=spec", "azureservicebus.test.mjs"],
            cwd=JS,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:  # a failed start leaves its containers and network behind
        remove_labelled(label)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
