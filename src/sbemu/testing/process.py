"""The one way to start an sbemu process for tests, benches and tools.

``SbemuProcess`` runs ``python -m sbemu serve --ready-file <file>`` on ephemeral ports and
waits for the ready document (``sbemu.cli.ready``) instead of parsing the human ready lines: the
server writes the file atomically, then prints its lines, so each stdout line is the event that
says "look now", and EOF says the process is gone. The pytest plugin, the integration tests'
fixtures, the hardening tools and the benches all start servers through it.

    proc = SbemuProcess(config=path, data_dir=tmp / "data", stderr=tmp / "server.stderr")
    ready = proc.start()          # Ready: ports, pid, connection strings, CA file
    ...
    proc.stop()                   # SIGTERM and wait; proc.kill() for SIGKILL
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["Ready", "SbemuProcess", "StartError"]

START_TIMEOUT = 120.0  # upper bound (seconds) on the wait for the ready document
STOP_TIMEOUT = 30.0  # seconds for a clean exit after SIGTERM


class StartError(RuntimeError):
    """The server did not become ready (it exited, or the timeout passed)."""


@dataclass(frozen=True)
class Ready:
    """The ``--ready-file`` document of a started server (see ``sbemu.cli.ready``)."""

    pid: int
    host: str
    amqp_port: int
    admin_port: int
    data_dir: Path
    ca_file: Path
    connection_string: str
    admin_connection_string: str
    namespaces: tuple[dict[str, Any], ...]
    document: dict[str, Any] = field(repr=False, compare=False)
    tls_port: int | None = None  # AMQPS (trust ca_file); None when not served
    tls_connection_string: str | None = None  # no emulator flag; the endpoint names tls_port
    ws_port: int | None = None  # AMQP over WebSockets, ws and wss (the admin port has them too)

    @classmethod
    def parse(cls, document: dict[str, Any]) -> Ready:
        return cls(
            pid=int(document["pid"]),
            host=str(document["host"]),
            amqp_port=int(document["amqp_port"]),
            admin_port=int(document["admin_port"]),
            data_dir=Path(document["data_dir"]),
            ca_file=Path(document["ca_file"]),
            connection_string=str(document["connection_string"]),
            admin_connection_string=str(document["admin_connection_string"]),
            namespaces=tuple(document["namespaces"]),
            document=document,
            tls_port=document.get("tls_port"),
            tls_connection_string=document.get("tls_connection_string"),
            ws_port=document.get("ws_port"),
        )


class SbemuProcess:
    """One ``sbemu serve`` subprocess; ``start()`` may be called again after a stop or kill
    (same data dir, new ports)."""

    def __init__(
        self,
        *,
        config: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        ephemeral: bool = False,
        host: str = "127.0.0.1",
        log_level: str = "warning",
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        stderr: str | os.PathLike[str] | None = None,
    ) -> None:
        """``data_dir`` None with ``ephemeral`` False: a temporary one, kept until the caller
        deletes it; ``stderr``: a file the server's stderr is appended to (default: a file
        beside the ready file); ``args``: more ``serve`` options."""
        # The launcher's own files (ready document, default stderr, default data dir) live
        # beside the given stderr file, else in a scratch folder that cleanup() deletes.
        self._scratch: Path | None = None
        if stderr is None or (data_dir is None and not ephemeral):
            self._scratch = Path(tempfile.mkdtemp(prefix="sbemu-launch-"))
        self.config = Path(config) if config is not None else None
        self.ephemeral = ephemeral
        if data_dir is None and not ephemeral:
            assert self._scratch is not None
            data_dir = self._scratch / "data"
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.host = host
        self.log_level = log_level
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        if stderr is not None:
            self.stderr_path = Path(stderr)
            self.ready_path = self.stderr_path.with_name(self.stderr_path.name + ".ready.json")
        else:
            assert self._scratch is not None
            self.stderr_path = self._scratch / "server.stderr"
            self.ready_path = self._scratch / "ready.json"
        self.proc: subprocess.Popen[str] | None = None
        self.ready: Ready | None = None
        self.output: list[str] = []  # every stdout line of every start
        self._output_changed = threading.Condition()
        self.starts = 0
        self._stderr_from = 0  # where this start's stderr begins in stderr_path

    def command(self) -> list[str]:
        # AMQPS and the WebSocket port on ephemeral ports too: their defaults (5671, 443) are
        # shared by every process on the machine ("args" may ask for them: --tls-port 5671)
        cmd = [sys.executable, "-m", "sbemu", "serve", "--host", self.host, "--port", "0",
               "--admin-port", "0", "--tls-port", "0", "--ws-port", "0",
               "--log-level", self.log_level, "--ready-file", str(self.ready_path)]  # fmt: skip
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        if self.ephemeral:
            cmd.append("--ephemeral")
        elif self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        return cmd + self.args

    def start(self, timeout: float = START_TIMEOUT) -> Ready:
        """Start the process and wait (up to ``timeout`` s) for its ready document."""
        if self.alive():
            raise StartError("already running")
        self.starts += 1
        self.ready_path.unlink(missing_ok=True)
        self.ready = None
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "a") as err:
            self._stderr_from = err.tell()
            err.write(f"--- start {self.starts}\n")
            err.flush()
            self.proc = subprocess.Popen(
                self.command(), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                text=True, env=self.env,
            )  # fmt: skip
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise StartError(
                    f"sbemu not ready after {timeout}s:\n{self.stderr_tail()}"
                ) from None
            if line is None:
                rc = self.proc.wait(timeout=10)
                raise StartError(f"sbemu exited ({rc}) before it was ready:\n{self.stderr_tail()}")
            if self.ready_path.exists():  # written before the first ready line
                self.ready = Ready.parse(json.loads(self.ready_path.read_text()))
                return self.ready

    def _pump(self, stream: IO[str] | None, lines: queue.Queue[str | None]) -> None:
        """Read the server's stdout for its whole life (it never blocks on a full pipe)."""
        assert stream is not None
        for line in stream:
            with self._output_changed:
                self.output.append(line.rstrip("\n"))
                self._output_changed.notify_all()
            lines.put(line)
        lines.put(None)

    def wait_for_output(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        """The first stdout line (of any start) that matches the regular expression
        ``pattern``, waiting up to ``timeout`` s for it to be printed; TimeoutError if none."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._output_changed:
            while True:
                for line in self.output:
                    if match := regex.search(line):
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or not self._output_changed.wait(left):
                    raise TimeoutError(f"no stdout line matching {pattern!r} in {timeout}s")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM and wait; returns the exit code (None if never started). A process that
        does not stop in time is killed and StartError raised."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise StartError(
                    f"sbemu did not stop within {timeout}s of SIGTERM:\n{self.stderr_tail()}"
                ) from None
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL and wait; returns the exit code (-9), None if never started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise StartError("not started")
        return self.proc.pid

    def stderr_text(self, *, all_starts: bool = False) -> str:
        """The server's stderr since the last start (every start's with ``all_starts``)."""
        if not self.stderr_path.exists():
            return ""
        with open(self.stderr_path, "rb") as f:
            f.seek(0 if all_starts else self._stderr_from)
            return f.read().decode(errors="replace")

    def stderr_tail(self, chars: int = 4000) -> str:
        return self.stderr_text()[-chars:]

    def cleanup(self) -> None:
        """Stop if running and delete the launcher's scratch folder (and the default data dir)."""
        if self.alive():
            try:
                self.stop()
            except StartError:
                pass
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
