"""What the container tests share: podman with the project's containers.conf
(container/podman-env.sh), sbemu's image built once per run (container/build.sh, or the image
named by SBEMU_TEST_IMAGE when make built it already), containers on ephemeral host ports, and
the Docker API of ``podman system service`` for the Testcontainers libraries.

Skips (with the reason) only where podman cannot run at all: not installed, or ``podman info``
failing. ``make podman-check`` (to be a prerequisite of ``make test``) installs podman, runc,
uidmap, slirp4netns, fuse-overlayfs and debootstrap
on Debian when missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINER_DIR = ROOT / "container"
LABEL = "sbemu-test"  # every container a test starts carries it, for the clean-up
# its value in this pytest process (one per xdist worker): a worker removes only its own
SESSION = f"session-{uuid.uuid4().hex[:8]}"
HEALTH_BODY = {"status": "healthy", "message": "Service is healthy."}
CONNECTION_STRING = (
    "Endpoint=sb://localhost{port};SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)


def podman_env() -> dict[str, str]:
    """The environment podman runs with here: CONTAINERS_CONF pointing at the project's file
    (written by container/podman-env.sh for this machine's limits)."""
    out = subprocess.run(
        ["sh", "-c", '. "$SBEMU_ROOT/container/podman-env.sh" && echo "$CONTAINERS_CONF"'],
        env={**os.environ, "SBEMU_ROOT": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    return {**os.environ, "CONTAINERS_CONF": out.stdout.strip()}


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    result = subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def podman_unusable_reason() -> str | None:
    """Why podman cannot run here, or None when it can."""
    if shutil.which("podman") is None:
        return "podman is not installed (make podman-check installs it on Debian as root)"
    result = subprocess.run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        return f"podman cannot run here: {result.stderr.strip().splitlines()[-1:]}"
    return None


def build_image() -> str:
    """sbemu's image: SBEMU_TEST_IMAGE when set (built by make), else container/build.sh
    (flock-serialised, layers cached: seconds when nothing changed)."""
    named = os.environ.get("SBEMU_TEST_IMAGE")
    if named:
        return named
    result = subprocess.run(
        [str(CONTAINER_DIR / "build.sh")], capture_output=True, text=True, timeout=1200
    )
    if result.returncode != 0:
        raise AssertionError(f"container/build.sh failed:\n{result.stderr[-4000:]}")
    return result.stdout.strip().splitlines()[-1]


@dataclass
class Running:
    """A container started by :func:`run_sbemu`: its id and published host ports."""

    cid: str
    ports: dict[int, int]  # container port -> host port (127.0.0.1)
    started_at: float  # time.monotonic() just before `podman run`

    def url(self, path: str = "/health", port: int = 5300) -> str:
        return f"http://127.0.0.1:{self.ports[port]}{path}"

    def connection_string(self, port: int = 5672) -> str:
        return CONNECTION_STRING.format(port=f":{self.ports[port]}")

    def logs(self) -> str:
        """stdout (the ready lines) and stderr (the log) of the container."""
        result = subprocess.run(
            ["podman", "logs", self.cid], env=podman_env(), capture_output=True, text=True
        )
        return result.stdout + result.stderr


def run_sbemu(
    image: str,
    *,
    ports: Sequence[int] = (5672, 5300),
    env: dict[str, str] | None = None,
    volumes: Sequence[str] = (),
    name: str | None = None,
    args: Sequence[str] = (),
) -> Running:
    """``podman run -d`` the image with each port published on an ephemeral loopback port.

    podman picks each host port as free, then binds it; on a busy machine another process can
    take it in between ("address already in use"): that start is removed and tried again."""
    for attempt in range(3):
        container = name or f"sbemu-test-{uuid.uuid4().hex[:8]}"
        try:
            return _run_once(image, container, ports, env, volumes, args)
        except AssertionError as exc:
            if "address already in use" not in str(exc) or attempt == 2:
                raise
            podman("rm", "-f", "-v", "-t", "0", container, check=False)
    raise AssertionError("unreachable")


def _run_once(
    image: str,
    name: str,
    ports: Sequence[int],
    env: dict[str, str] | None,
    volumes: Sequence[str],
    args: Sequence[str],
) -> Running:
    command = ["run", "-d", "--label", f"{LABEL}={SESSION}", "--name", name]
    for port in ports:
        command += ["-p", f"127.0.0.1::{port}"]
    for key, value in (env or {}).items():
        command += ["-e", f"{key}={value}"]
    for volume in volumes:
        command += ["-v", volume]
    started = time.monotonic()
    cid = podman(*command, image, *args).strip()
    return Running(cid, published_ports(cid, ports), started)


def start_again(running: Running) -> Running:
    """``podman start`` a stopped (or killed) container: the same container, its volumes; the
    published ports read again."""
    started = time.monotonic()
    podman("start", running.cid)
    return Running(running.cid, published_ports(running.cid, running.ports), started)


def published_ports(cid: str, ports: Iterable[int]) -> dict[int, int]:
    published = {}
    for port in ports:
        mapping = podman("port", cid, f"{port}/tcp").strip().splitlines()[0]
        published[port] = int(mapping.rsplit(":", 1)[1])
    return published


def wait_healthy(running: Running, timeout: float = 30) -> float:
    """Poll GET /health until 200 (the way compose and Testcontainers wait); the seconds from
    ``podman run`` to that answer. The body must be Microsoft's."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(running.url(), timeout=2) as response:
                body = json.load(response)
                if response.status == 200:
                    assert {k: body[k] for k in HEALTH_BODY} == HEALTH_BODY, body
                    return time.monotonic() - running.started_at
        except OSError as exc:  # not listening yet (refused / reset by the port forwarder)
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"no /health 200 in {timeout} s ({last}):\n{running.logs()}")


def remove(running: Running) -> None:
    podman("rm", "-f", "-v", "-t", "0", running.cid, check=False)


@contextmanager
def docker_api() -> Iterator[str]:
    """``podman system service`` on a private socket: the Docker API Testcontainers speaks.
    Yields the DOCKER_HOST value; stopped by its PID."""
    tmp = Path(tempfile.mkdtemp(prefix="sbemu-podman-api-"))
    sock = tmp / "podman.sock"
    log = (tmp / "service.log").open("w")
    proc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=podman_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"podman system service exited: {(tmp / 'service.log').read_text()}"
                )
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(sock))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("podman system service: no socket in 30 s") from None
                time.sleep(0.05)
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def remove_labelled(value: str) -> None:
    """Remove the containers labelled sbemu-test=``value`` that a test left behind: this
    session's (:data:`SESSION`) or one Testcontainers run's (:func:`test_label`)."""
    ids = podman("ps", "-aq", "--filter", f"label={LABEL}={value}", check=False).split()
    if ids:
        podman("rm", "-f", "-v", "-t", "0", *ids, check=False)


def run_label(kind: str) -> str:
    """A label value of one Testcontainers run (SBEMU_TEST_LABEL for the JS, Go, Java tests)."""
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def tc_run_env(label: str, docker_host: str, image: str) -> dict[str, str]:
    """The environment of a Testcontainers run in another language (JS, Go, Java): podman's
    Docker API, no Ryuk (its image cannot be pulled here), ports published on loopback, the
    sbemu image and the label its containers carry (removed after the run)."""
    return os.environ | {
        "SBEMU_TEST_LABEL": label,
        "DOCKER_HOST": docker_host,
        "TESTCONTAINERS_RYUK_DISABLED": "true",
        "TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
        "SBEMU_IMAGE": image,
    }


def skip_unless_podman() -> None:
    reason = podman_unusable_reason()
    if reason:
        pytest.skip(reason)
