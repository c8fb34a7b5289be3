"""Helpers for the admin-port security tests: an in-process server (its route table in hand),
a network namespace to reach it from another address, and raw HTTP requests from either side.

The network namespace is a veth pair between the test's namespace and a new one (``ip netns``,
root only): the server listens on 0.0.0.0 and a client inside the namespace connects to the
host end's address, so the server sees a peer that is not loopback. Tests skip with the reason
where the machine does not allow it (no root, no ``ip``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbemu.clock import TestClock
from sbemu.config import parse_config
from sbemu.runtime.server import Server

# a client in the namespace: JSON requests on stdin, [status, location] per request on stdout
_CLIENT = r"""
import http.client, json, sys
out = []
for r in json.load(sys.stdin):
    conn = http.client.HTTPConnection(r["host"], r["port"], timeout=20)
    try:
        conn.putrequest(r["method"], r["path"], skip_host=True, skip_accept_encoding=True)
        body = r["body"].encode("latin-1")
        for k, v in r["headers"].items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        out.append([resp.status, resp.getheader("location") or ""])
    finally:
        conn.close()
json.dump(out, sys.stdout)
"""


@dataclass
class Call:
    """One HTTP request, sent as is (the Host header included)."""

    method: str
    path: str
    headers: dict[str, str]
    body: str = ""
    host: str = "127.0.0.1"
    port: int = 0

    def wire(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "host": self.host,
            "port": self.port,
        }


def send(calls: list[Call], netns: str | None = None) -> list[tuple[int, str]]:
    """(status, Location) of each call, made from this process' network or from ``netns``."""
    cmd = [sys.executable, "-c", _CLIENT]
    if netns is not None:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    done = subprocess.run(
        cmd,
        input=json.dumps([c.wire() for c in calls]),
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"client failed: {done.stderr[-2000:]}")
    return [(int(s), loc) for s, loc in json.loads(done.stdout)]


class NetNamespace:
    """A network namespace linked to ours by a veth pair: ``client_ip`` inside it reaches
    ``host_ip`` (ours)."""

    def __init__(self) -> None:
        n = os.getpid() % 4000
        self.name = f"sbsec{os.getpid()}"
        self.outer, self.inner = f"sbs{n}a", f"sbs{n}b"
        base = f"10.{200 + n // 250 % 50}.{n % 250}"
        self.host_ip, self.client_ip = f"{base}.1", f"{base}.2"

    @staticmethod
    def unavailable() -> str | None:
        """Why a namespace cannot be made here, or None."""
        if shutil.which("ip") is None:
            return "no `ip` command (iproute2)"
        if os.geteuid() != 0:
            return "creating a network namespace needs root"
        return None

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)

    def create(self) -> NetNamespace:
        self._ip("netns", "add", self.name)
        try:
            self._ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            self._ip("link", "set", self.inner, "netns", self.name)
            self._ip("addr", "add", f"{self.host_ip}/30", "dev", self.outer)
            self._ip("link", "set", self.outer, "up")
            self._ip("-n", self.name, "addr", "add", f"{self.client_ip}/30", "dev", self.inner)
            self._ip("-n", self.name, "link", "set", self.inner, "up")
            self._ip("-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.delete()
            raise
        return self

    def delete(self) -> None:
        for args in (("link", "del", self.outer), ("netns", "del", self.name)):
            subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)


class _Errors(logging.Handler):
    """Server log records at error level or with a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(self.format(record))


@dataclass
class InProcessServer:
    """A real Server on its own event loop thread, ports ephemeral."""

    config: dict[str, Any]
    data_dir: Path
    host: str = "127.0.0.1"
    test_clock: bool = False
    loop_factory: Any = None  # e.g. uvloop.new_event_loop, as `sbemu serve` runs
    server: Server | None = None
    errors: _Errors = field(default_factory=_Errors)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    def start(self) -> InProcessServer:
        cfg = parse_config(self.config, "test config")
        clock = TestClock() if self.test_clock else None
        self.server = Server(
            cfg,
            data_dir=self.data_dir,
            host=self.host,
            port=0,
            admin_port=0,
            **({"clock": clock} if clock else {}),
        )
        self.errors.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        for name in ("sbemu", "asyncio"):
            logging.getLogger(name).addHandler(self.errors)
        loop = self._loop = (self.loop_factory or asyncio.new_event_loop)()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                assert self.server is not None
                loop.run_until_complete(self.server.start())
            except BaseException as exc:  # handed to the starting thread
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="sbemu-inproc", daemon=True)
        self._thread.start()
        started.wait(60)
        if failure:
            raise failure[0]
        return self

    @property
    def admin_port(self) -> int:
        assert self.server is not None
        return self.server.admin_port

    @property
    def alive(self) -> bool:
        """Whether the server's event loop thread still runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        if self._loop is None or self.server is None:
            return

        async def stop() -> None:
            assert self.server is not None
            await self.server.stop()
            # connections still being served (an event stream) end with their tasks
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(30)
        self._loop.close()
        for name in ("sbemu", "asyncio"):
            logging.getLogger(name).removeHandler(self.errors)
