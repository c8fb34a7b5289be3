"""A real sbemu server subprocess, process metrics from /proc, and an SDK client that keeps
working beside the abuse (the "everyone else is served" half of every check)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sbemu.testing import SbemuProcess

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
NAMESPACE = "sbemulatorns"
PROBE_QUEUE = "probe"


def queue_def(name: str, **props: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"LockDuration": "PT5S", "MaxDeliveryCount": 5}
    base.update(props)
    return {"Name": name, "Properties": base}


def make_config(
    queues: list[dict[str, Any]],
    topics: list[dict[str, Any]] | None = None,
    policies: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "Name": NAMESPACE,
        "Queues": [queue_def(PROBE_QUEUE, LockDuration="PT1M")] + queues,
        "Topics": topics or [],
    }
    if policies is not None:
        ns["SharedAccessPolicies"] = policies
    return {"UserConfig": {"Namespaces": [ns], "Logging": {"Type": "Console"}}}


class Server(SbemuProcess):
    """``python -m sbemu serve`` (sbemu.testing) on ephemeral ports, stderr kept in a file."""

    def __init__(
        self,
        workdir: Path,
        config: dict[str, Any],
        env: dict[str, str] | None = None,
        log_level: str = "warning",
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "config.json"
        self.config_path.write_text(json.dumps(config))
        super().__init__(
            config=self.config_path, data_dir=self.workdir / "data", log_level=log_level,
            env=dict(os.environ, **(env or {})), stderr=self.workdir / "server.stderr",
        )  # fmt: skip
        self.port = 0
        self.admin_port = 0

    def start(self, timeout: float = 30.0) -> Server:  # type: ignore[override]
        ready = super().start(timeout)
        self.port, self.admin_port = ready.amqp_port, ready.admin_port
        return self

    @property
    def conn_str(self) -> str:
        return (
            f"Endpoint=sb://localhost:{self.port};SharedAccessKeyName={KEY_NAME};"
            f"SharedAccessKey={KEY};UseDevelopmentEmulator=true;"
        )

    def stderr(self, tail: int = 4000) -> str:
        """The end of the server's stderr, every start's."""
        return self.stderr_text(all_starts=True)[-tail:]

    def tracebacks(self) -> list[str]:
        """Server log lines that show a traceback or an internal error; a traceback comes
        with its frames and its exception line, so a failing check shows the cause."""
        out: list[str] = []
        lines = self.stderr_text(all_starts=True).splitlines()
        for i, ln in enumerate(lines):
            if "unexpected error" in ln or "Internal error" in ln:
                out.append(ln)
            elif "Traceback" in ln:
                frames = []
                for follow in lines[i + 1 : i + 60]:
                    if not follow.startswith((" ", "\t")):
                        frames.append(follow)  # the exception line ends the traceback
                        break
                    frames.append(follow)
                out.append("\n".join([ln, *frames]))
        return out

    def stop(self, timeout: float = 20.0) -> int:  # type: ignore[override]
        """SIGTERM and wait; the exit code (0 when never started); RuntimeError if it hangs."""
        return super().stop(timeout) or 0

    def health(self, timeout: float = 5.0) -> dict[str, Any]:
        """GET /health over a plain socket (HTTP/1.1, Connection: close)."""
        with socket.create_connection(("127.0.0.1", self.admin_port), timeout=timeout) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"/health answered {head[:80]!r}")
        return json.loads(body)


def plain_connection(
    url: str, *, user: str = KEY_NAME, password: str = KEY, timeout: float = 10.0
) -> Any:
    """A python-qpid-proton BlockingConnection to ``url`` over SASL PLAIN (the root key unless
    ``user`` and ``password`` are given)."""
    from proton.utils import BlockingConnection

    return BlockingConnection(
        url, timeout=timeout, sasl_enabled=True, allowed_mechs="PLAIN", user=user, password=password
    )


def rss_kb(pid: int) -> int:
    """Resident set size of a process in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_parts_kb(pid: int) -> dict[str, int]:
    """RssAnon (heap: what a leak grows) and RssFile (mapped LMDB pages, which the kernel can
    drop at will) in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                name, value = line.split()[:2]
                out[name.rstrip(":")] = int(value)
    return out


def rss_anon_mb(pid: int) -> float:
    """The anonymous resident memory (the heap) of process ``pid`` in MB."""
    return rss_parts_kb(pid)["RssAnon"] / 1024


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


DRAIN_TIMEOUT_S = 120.0  # a drain not over by then is a finding, not something to wait out


def drain_ids(
    conn_str: str, queue_name: str, wait: float = 3.0, timeout: float = DRAIN_TIMEOUT_S
) -> list[str]:
    """Receive-and-delete everything in a queue (until `wait` seconds bring nothing more);
    the MessageIds, in the order received.

    Bounded: the receiver runs on a thread of its own and a drain that is not over within
    `timeout` seconds fails with what it got, instead of hanging the test (seen in issue 15:
    a partition whose disk was full delivered the same messages again every second, and the
    SDK sat in a socket read between them). The thread is left to end with the server."""
    from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode

    ids: list[str] = []
    failure: list[BaseException] = []
    over, stop = threading.Event(), threading.Event()

    def run() -> None:
        try:
            with (
                ServiceBusClient.from_connection_string(conn_str) as client,
                client.get_queue_receiver(
                    queue_name,
                    max_wait_time=wait,
                    receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                ) as rcv,
            ):
                while not stop.is_set() and (
                    batch := rcv.receive_messages(max_message_count=100, max_wait_time=wait)
                ):
                    ids.extend(str(m.message_id) for m in batch)
        except BaseException as exc:  # raised on the caller's thread
            failure.append(exc)
        finally:
            over.set()

    threading.Thread(target=run, daemon=True, name=f"drain-{queue_name}").start()
    if not over.wait(timeout):
        stop.set()
        got = list(ids)
        raise AssertionError(
            f"draining {queue_name!r} did not end within {timeout:.0f} s: {len(got)} messages "
            f"received, {len(set(got))} distinct (a receive that never returned, or messages "
            f"that keep coming back); the last: {got[-5:]}"
        )
    if failure:
        raise failure[0]
    return ids


class SdkProbe(threading.Thread):
    """An azure-servicebus client that sends and receives one message at a time, all along.

    `rounds` counts completed round trips; `errors` keeps what went wrong; `latencies` the
    seconds each round trip took."""

    def __init__(self, conn_str: str, queue_name: str = PROBE_QUEUE, pause: float = 0.05) -> None:
        super().__init__(daemon=True, name="sdk-probe")
        self.conn_str = conn_str
        self.queue_name = queue_name
        self.pause = pause
        self.rounds = 0
        self.errors: list[str] = []
        self.latencies: list[float] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        from azure.servicebus import ServiceBusClient, ServiceBusMessage

        try:
            with (
                ServiceBusClient.from_connection_string(self.conn_str, retry_total=2) as client,
                client.get_queue_sender(self.queue_name) as sender,
                client.get_queue_receiver(self.queue_name, max_wait_time=10) as receiver,
            ):
                while not self._stop_event.is_set():
                    marker = str(uuid.uuid4())
                    t0 = time.monotonic()
                    sender.send_messages(ServiceBusMessage(marker, message_id=marker))
                    got = None
                    deadline = t0 + 20
                    while got is None and time.monotonic() < deadline:
                        for msg in receiver.receive_messages(max_message_count=10, max_wait_time=5):
                            receiver.complete_message(msg)
                            if str(msg) == marker:
                                got = msg
                    if got is None:
                        self.errors.append(f"round {self.rounds}: own message not received")
                        return
                    self.latencies.append(time.monotonic() - t0)
                    self.rounds += 1
                    self._stop_event.wait(self.pause)
        except Exception as exc:  # a probe failure is a finding, reported by the caller
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=60)

    def wait_rounds(self, n: int, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while self.rounds < n and time.monotonic() < deadline and not self.errors:
            time.sleep(0.05)
        return self.rounds >= n
