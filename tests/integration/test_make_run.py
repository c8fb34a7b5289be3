"""`make run`: installs only what the server needs (no test or dev extras) and, once installed,
prints the server's banner and nothing of make's or pip's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def make(*args: str) -> list[str]:
    return [str(MAKE), "--no-print-directory", "-C", str(ROOT), *args]


def test_run_installs_the_package_without_extras(tmp_path: Path) -> None:
    """What a fresh clone's first `make run` would do (dry run into an empty venv path)."""
    venv = tmp_path / "venv"
    out = subprocess.run(
        make("-n", "run", f"VENV={venv}"), capture_output=True, text=True, timeout=60, check=True
    ).stdout
    installs = [line for line in out.splitlines() if "pip install" in line]
    assert installs, out
    for line in installs:
        assert " -e . " in line + " " and "[" not in line.split("pip install", 1)[1], line
        assert " -q " in line  # quiet, and its output goes to a log shown only on failure
    assert f"{venv}/bin/sbemu serve" in out


def test_run_prints_only_the_banner(tmp_path: Path) -> None:
    venv = ROOT / ".venv"
    stamp = venv / ".installed"
    if not stamp.exists() or stamp.stat().st_mtime < (ROOT / "pyproject.toml").stat().st_mtime:
        pytest.skip("needs the checkout's .venv installed from this pyproject.toml (make install)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBEMU_", "MAKE"))}
    args = f"--port 0 --admin-port 0 --data-dir {tmp_path / 'data'} --log-level warning"
    proc = subprocess.Popen(
        make("run", f"ARGS={args}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        while not (lines and lines[-1].startswith("dashboard on ")):
            line = proc.stdout.readline()
            assert line, (
                f"make run ended early: {lines} {proc.stderr.read() if proc.stderr else ''}"
            )
            lines.append(line.rstrip("\n"))
        assert [line.split(" ", 1)[0] for line in lines] == [
            "sbemu",
            "health",
            "connection",
            "dashboard",
        ], lines
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make and the server it started (our own group)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stderr = proc.stderr.read() if proc.stderr else ""
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
    assert "pip" not in stderr and "Requirement" not in stderr
