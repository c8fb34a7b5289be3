"""The commands a newcomer runs against a running server: `sbemu cert` (finds the server's CA,
never makes one), `sbemu cert --bundle`, `sbemu partition status` (a table, --json) and a
closed stdout (`... | head`) without a traceback. A real server, started as the pytest plugin
starts it."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbemu.admin.certs import system_ca_file
from sbemu.testing.pytest_plugin import SbemuServer, start_server, stop_server


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    env.update(extra)
    return env


def sbemu(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sbemu", *args],
        cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SbemuServer]:
    srv = start_server(tmp_path_factory.mktemp("cli-server") / "data")
    try:
        yield srv
    finally:
        stop_server(srv)


def tls_handshake(port: int, cafile: Path) -> str:
    """Connect to the admin port over TLS trusting only `cafile`; the peer's common name."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            subject = dict(x[0] for x in tls.getpeercert()["subject"])
            return str(subject["commonName"])


# ------------------------------------------------------------------------------------ cert
def test_cert_without_a_data_dir_refuses_and_creates_nothing(tmp_path: Path) -> None:
    result = sbemu("cert", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert str(tmp_path / ".sbemu") in line  # which data dir it looked at
    assert "--data-dir" in line and "SBEMU_DATA_DIR" in line  # how to point elsewhere
    assert list(tmp_path.iterdir()) == []  # no CA nobody uses


def test_cert_prints_the_ca_the_running_server_uses(server: SbemuServer, tmp_path: Path) -> None:
    # from another directory, told where the data dir is: by flag and by environment
    by_flag = sbemu("cert", "--data-dir", str(server.data_dir), cwd=tmp_path)
    by_env = sbemu("cert", cwd=tmp_path, env=clean_env(SBEMU_DATA_DIR=str(server.data_dir)))
    for result in (by_flag, by_env):
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""  # the server holds the data dir: no note
        assert Path(result.stdout.strip()) == (server.data_dir / "tls" / "rootCA.pem").resolve()
    # ... and it is the CA the admin port's certificate chains to
    assert tls_handshake(server.admin_port, Path(by_flag.stdout.strip())) == "localhost"
    # relative to the current directory, as `sbemu serve` resolves it
    rel = sbemu("cert", "--data-dir", server.data_dir.name, cwd=server.data_dir.parent)
    assert Path(rel.stdout.strip()) == (server.data_dir / "tls" / "rootCA.pem").resolve()


def test_cert_bundle_holds_the_system_cas_and_ours(server: SbemuServer, tmp_path: Path) -> None:
    result = sbemu("cert", "--bundle", "--data-dir", str(server.data_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    bundle = Path(result.stdout.strip())
    assert bundle.is_file() and bundle.parent == (server.data_dir / "tls").resolve()
    text = bundle.read_text()
    ours = (server.data_dir / "tls" / "rootCA.pem").read_text()
    assert ours.strip() in text
    system = system_ca_file()
    if system is not None:  # the machine's trust store comes along (SSL_CERT_FILE stays usable)
        assert system.read_text().strip() in text
        assert text.count("BEGIN CERTIFICATE") > 1
    assert tls_handshake(server.admin_port, bundle) == "localhost"
    # SSL_CERT_FILE pointing at the bundle already: running it again does not nest bundles
    again = sbemu(
        "cert", "--bundle", cwd=tmp_path,
        env=clean_env(SBEMU_DATA_DIR=str(server.data_dir), SSL_CERT_FILE=str(bundle)),
    )  # fmt: skip
    assert again.returncode == 0 and bundle.read_text() == text


def test_cert_notes_when_no_server_runs_on_the_data_dir(tmp_path: Path) -> None:
    from sbemu.admin.certs import ensure_certificates

    ca, _, _ = ensure_certificates(tmp_path / "data")  # what an earlier server left
    result = sbemu("cert", "--data-dir", "data", cwd=tmp_path)
    assert result.returncode == 0
    assert Path(result.stdout.strip()) == ca.resolve()
    assert "no server is running" in result.stderr


# ------------------------------------------------------------------------------ partition
def test_partition_status_is_a_table_and_json_on_request(
    server: SbemuServer, tmp_path: Path
) -> None:
    url = server.admin_url
    table = sbemu("partition", "status", "--admin-url", url, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ENTITY", "STATUS", "PARTITIONS", "OUT", "OF", "SERVICE"]
    row = next(x for x in lines if x.startswith("sbemulatorns/queue.partitioned "))
    assert row.split() == ["sbemulatorns/queue.partitioned", "Available", "16", "-"]
    raw = sbemu("partition", "status", "--json", "--admin-url", url, cwd=tmp_path)
    body = json.loads(raw.stdout)
    assert {e["entity"] for e in body["entities"]} >= {"queue.partitioned", "queue.1"}

    down = sbemu(
        "partition", "offline", "sbemulatorns/queue.partitioned", "3", "--admin-url", url,
        cwd=tmp_path,
    )  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert down.stdout.strip() == (
        "partition 3 of sbemulatorns/queue.partitioned is now offline; the entity is Limited"
    )
    try:
        table = sbemu("partition", "status", "--admin-url", url, cwd=tmp_path)
        row = next(x for x in table.stdout.splitlines() if x.startswith("sbemulatorns/queue.p"))
        assert row.split()[:4] == ["sbemulatorns/queue.partitioned", "Limited", "16", "3"]
        assert "offline" in row
        one = sbemu(
            "partition", "status", "sbemulatorns/queue.partitioned", "--admin-url", url,
            cwd=tmp_path,
        )  # fmt: skip
        rows = one.stdout.splitlines()
        assert rows[0] == "sbemulatorns/queue.partitioned: Limited"
        assert rows[1].split()[:2] == ["PARTITION", "HEALTH"]
        assert len(rows) == 2 + 16
        assert rows[2 + 3].split()[:2] == ["3", "offline"]
        assert all(r.split()[1] == "online" for i, r in enumerate(rows[2:]) if i != 3)
    finally:
        up = sbemu(
            "partition", "online", "sbemulatorns/queue.partitioned", "3", "--admin-url", url,
            cwd=tmp_path,
        )  # fmt: skip
    assert up.returncode == 0 and up.stdout.strip().endswith("the entity is Available")
    missing = sbemu("partition", "status", "sbemulatorns/nope", "--admin-url", url, cwd=tmp_path)
    assert missing.returncode == 2 and "nope" in missing.stderr


def test_partition_help_explains_n(tmp_path: Path) -> None:
    result = sbemu("partition", "--help", cwd=tmp_path)
    assert result.returncode == 0
    n_help = result.stdout.split("\n  N ", 1)[1]
    assert "partition number" in n_help and "offline and online" in " ".join(n_help.split())


def test_closed_stdout_ends_quietly(server: SbemuServer, tmp_path: Path) -> None:
    """`sbemu partition status | head`: the reader is gone before sbemu writes."""
    for argv in (
        ["partition", "status", "--json", "--admin-url", server.admin_url],
        ["cert", "--data-dir", str(server.data_dir)],
        ["--help"],
    ):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            result = subprocess.run(
                [sys.executable, "-m", "sbemu", *argv], cwd=tmp_path, env=clean_env(),
                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
            )  # fmt: skip
        finally:
            os.close(write_end)
        assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, argv
        assert result.stderr == "", (argv, result.stderr)
        assert result.returncode in (0, 141), argv  # 128 + SIGPIPE, as a Unix tool ends


def test_serve_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`sbemu serve | head -1` once head is gone: the ready lines cannot be written, so the
    server ends (before any client could have sent it anything) with 141, not a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sbemu", "serve", "--port", "0", "--admin-port", "0",
             "--data-dir", str(tmp_path / "data"), "--log-level", "info"],
            cwd=tmp_path, env=clean_env(), stdout=write_end, stderr=subprocess.PIPE, text=True,
            timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
    assert "sbemu.server: sbemu" in result.stderr  # it had started: the pipe ended it


@pytest.mark.parametrize(
    ("flag", "env"),
    [
        (None, {}),
        ("rel/dir", {}),
        ("/abs/dir", {"SBEMU_DATA_DIR": "/env/dir"}),
        (None, {"SBEMU_DATA_DIR": "envrel"}),
        (None, {"SBEMU_DATA_DIR": ""}),
        ("~/x", {}),
    ],
)
def test_cert_finds_the_data_dir_serve_uses(flag: str | None, env: dict[str, str]) -> None:
    from sbemu.cli import build_parser, resolve_data_dir, resolve_settings

    argv = ["serve"] + (["--data-dir", flag] if flag else [])
    serve = resolve_settings(build_parser().parse_args(argv), env, Path("/work"))
    assert resolve_data_dir(flag, env, Path("/work"))[0] == serve.data_dir
