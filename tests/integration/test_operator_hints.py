"""What a newcomer reads (issue 33, item 5): each error says what to do next, and the log's
levels match what happened (routine actions at INFO, so a server at --log-level warning
prints none of them). Real server, the real ``sbemu`` commands and the real SDK.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError
from integration_support import ServerProcess, queue_def, start_server

SBEMU_QUEUES = [queue_def("jobs", partitioned=True)]


@pytest.fixture(scope="module")
def hints_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("hints"), SBEMU_QUEUES)
    try:
        yield server
    finally:
        server.stop()


def sbemu(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    env["SBEMU_ADMIN_URL"] = f"http://127.0.0.1:{server.admin_port}"
    return subprocess.run(
        [sys.executable, "-m", "sbemu", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_purge_of_an_entity_without_its_namespace_names_the_right_target(
    hints_server: ServerProcess,
) -> None:
    result = sbemu(hints_server, "purge", "jobs")
    assert result.returncode == 1
    assert "The namespace 'jobs' does not exist." in result.stderr
    assert "sbemulatorns/jobs" in result.stderr, result.stderr


def test_partition_command_without_a_namespace_says_how(hints_server: ServerProcess) -> None:
    result = sbemu(hints_server, "partition", "offline", "jobs", "3")
    assert result.returncode == 2
    assert "usage" not in result.stderr
    assert "sbemu partition offline sbemulatorns/jobs 3" in result.stderr, result.stderr


def test_offline_partition_accepts_no_sends_and_routine_actions_are_not_warnings(
    hints_server: ServerProcess,
) -> None:
    assert sbemu(hints_server, "partition", "offline", "sbemulatorns/jobs", "3").returncode == 0
    try:
        status = sbemu(hints_server, "partition", "status", "sbemulatorns/jobs")
        assert status.returncode == 0, status.stderr
        row = next(line for line in status.stdout.splitlines() if line.startswith("3 "))
        assert row.split()[:3] == ["3", "offline", "no"], status.stdout
    finally:
        assert sbemu(hints_server, "partition", "online", "sbemulatorns/jobs", "3").returncode == 0
    purge = sbemu(hints_server, "purge", "sbemulatorns/jobs")
    assert purge.returncode == 0, purge.stderr
    log = hints_server.stderr_text()  # the server runs at --log-level warning
    assert "is now" not in log and "purged" not in log, log


def test_unknown_entity_is_logged_as_not_found(hints_server: ServerProcess) -> None:
    with ServiceBusClient.from_connection_string(hints_server.conn_str, retry_total=0) as client:
        with pytest.raises(ServiceBusError), client.get_queue_sender("no-such-queue") as sender:
            sender.send_messages(ServiceBusMessage("x"))
    log = hints_server.stderr_text()
    lines = [line for line in log.splitlines() if "no-such-queue" in line]
    assert lines and all("rejected credentials" not in line for line in lines), log
    assert "entity not found" in lines[0], lines


def test_a_port_in_use_names_the_flag_and_make_run(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
        result = subprocess.run(
            [sys.executable, "-m", "sbemu", "serve", "--port", str(port), "--admin-port", "0",
             "--data-dir", str(tmp_path / "data"), "--log-level", "warning"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 2
    assert "address already in use" in result.stderr.lower()
    assert 'make run ARGS="--port N"' in result.stderr, result.stderr
