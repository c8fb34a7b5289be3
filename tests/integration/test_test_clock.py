"""The test clock over the admin port (SBEMU_TEST_CLOCK=1): what advance_clock() stands on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from integration_support import (
    DEFAULT_QUEUES,
    ServerProcess,
    make_config,
    queue_def,
    receive_n,
    send_plain,
)

SBEMU_QUEUES = [queue_def("clock-ttl", ttl="PT10S", dead_letter_on_expiration=True)]


def _post(server: ServerProcess, path: str) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://{server.host}:{server.admin_port}{path}",
        data=b"",
        method="POST",
        headers=server.admin_headers(),
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_advance_moves_the_server_clock_forward_only(server: ServerProcess) -> None:
    before = time.time() * 1000
    now_ms = server.advance_clock(0)
    assert now_ms >= before - 1000
    # (small steps: SAS tokens are checked on the server's clock, and the SDK's last an hour)
    later = server.advance_clock(60)
    assert later >= now_ms + 60 * 1000
    for bad in ("-1", "abc", "nan", "inf", ""):
        status, body = _post(server, f"/test-clock/advance/{bad}")
        assert status == 400, (bad, status, body)
        assert "test-clock/advance" in body["error"]
    assert server.advance_clock(0) >= later


def test_time_to_live_passes_on_the_advanced_clock(server: ServerProcess) -> None:
    """A message's TTL (PT10S) runs out on the server's clock: dead-lettered at once, without
    waiting ten seconds (DeadLetteringOnMessageExpiration)."""
    from azure.servicebus import ServiceBusSubQueue

    with ServiceBusClient.from_connection_string(server.conn_str, retry_total=1) as client:
        send_plain(client, "clock-ttl", [ServiceBusMessage("ttl", message_id="ttl-1")])
        with client.get_queue_receiver("clock-ttl") as receiver:
            assert [m.message_id for m in receiver.peek_messages(5)] == ["ttl-1"]
        t0 = time.monotonic()
        server.advance_clock(11)
        with client.get_queue_receiver(
            "clock-ttl", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5
        ) as dlq:
            (m,) = receive_n(dlq, 1, timeout=10)
            assert m.message_id == "ttl-1"
            assert m.dead_letter_reason == "TTLExpiredException"
            dlq.complete_message(m)
        assert time.monotonic() - t0 < 10, "the TTL was waited out in real time"
        with client.get_queue_receiver("clock-ttl") as receiver:
            assert receiver.peek_messages(5) == []


def test_no_route_without_the_switch(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(make_config(DEFAULT_QUEUES)))
    srv = ServerProcess(cfg, tmp_path / "data", tmp_path)
    srv.test_clock = False
    srv.start()
    try:
        status, _ = _post(srv, "/test-clock/advance/10")
        assert status in (404, 405), status  # no such route (the Atom API answers for the path)
    finally:
        assert srv.stop() == 0


def test_refused_off_loopback(tmp_path: Path) -> None:
    env = dict(os.environ, SBEMU_TEST_CLOCK="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sbemu",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--admin-port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "SBEMU_TEST_CLOCK=1 is for tests on a loopback address" in proc.stderr, proc.stderr
