"""The ``sbemu`` command line: argument parsing, logging set-up, uvloop; no emulator logic.

``sbemu serve [--config PATH] [--data-dir DIR] [--host H] [--port P] [--admin-port P]
[--tls-port P|off] [--ws-port P|off] [--log-level L] [--log-retention-records N]
[--log-bodies] [--ready-file PATH] [--ephemeral]``; each option has an environment twin
(``SBEMU_CONFIG``, ``SBEMU_DATA_DIR``, ``SBEMU_HOST``, ``SBEMU_PORT``, ``SBEMU_ADMIN_PORT``,
``SBEMU_TLS_PORT``, ``SBEMU_WS_PORT``, ``SBEMU_LOG_LEVEL``, ``SBEMU_LOG_RETENTION_RECORDS``,
``SBEMU_LOG_BODIES``) and a flag wins over its variable. Port 0 asks for an ephemeral port.

Exit codes: 0 after a clean stop on SIGINT/SIGTERM; 2 for a usage, configuration or start-up
problem, reported as exactly one ``sbemu: ...`` line on stderr (a traceback only at debug
level); 1 when stopping fails; 130 when interrupted before the server is up.

Once the server is up, ``--ready-file`` gets a JSON document (sbemu.ready; what programs
should read) and these lines go to stdout (for people)::

    sbemu <version> listening on amqp://<host>:<amqp_port> for namespace <ns>[, <ns>...]
    health on http://<host>:<admin_port>/health
    connection string: Endpoint=sb://localhost[:<port>];SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true;
    dashboard on http://<host>:<admin_port>/ (Prometheus metrics on /metrics)
    [namespace <ns> on amqp://<host>:<port>: <its connection string>]  (one per AmqpPort)
    amqps on amqps://<host>:<tls_port> (certificate from the CA <data dir>/tls/rootCA.pem)
    connection string (TLS): Endpoint=sb://localhost[:<tls_port>]/;SharedAccessKeyName=...;SharedAccessKey=...;
    websockets on ws://<host>:<admin_port>/$servicebus/websocket and wss:// (AMQPWSB10)
    websockets on wss://<host>:<ws_port>/$servicebus/websocket and ws:// (AMQPWSB10)
    [amqps not served: ... | websocket port not served: ...]  (a default port that was taken)

New subcommands (report, export-logs, partition offline/online) plug in as one
``_add_<name>(subcommands)`` function that registers a parser and its handler.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbemu import __version__
from sbemu.config import Config, ConfigError, default_config, load_config
from sbemu.ready import (
    DEFAULT_PORT,
    DEFAULT_TLS_PORT,
    connection_string,
    endpoint_lines,
    namespace_port_lines,
    ready_document,
    ready_lines,
    write_ready_file,
)

__all__ = [
    "Settings",
    "UsageError",
    "build_parser",
    "connection_string",
    "main",
    "ready_lines",
    "resolve_data_dir",
    "resolve_settings",
]

log = logging.getLogger("sbemu")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_ADMIN_PORT = 5300  # Microsoft's emulator serves /health on 5300 too
DEFAULT_DATA_DIR = ".sbemu"  # under the current directory
DEFAULT_LOG_LEVEL = "info"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
STOP_TIMEOUT = 30.0  # seconds for Server.stop() after a failed start

ENV_CONFIG = "SBEMU_CONFIG"
ENV_DATA_DIR = "SBEMU_DATA_DIR"
ENV_HOST = "SBEMU_HOST"
ENV_PORT = "SBEMU_PORT"
ENV_ADMIN_PORT = "SBEMU_ADMIN_PORT"
ENV_TLS_PORT = "SBEMU_TLS_PORT"
ENV_WS_PORT = "SBEMU_WS_PORT"
DEFAULT_WS_PORT = 443  # AMQP over WebSockets (wss), the SDKs' WebSocket default
OFF = "off"
ENV_LOG_LEVEL = "SBEMU_LOG_LEVEL"
ENV_LOG_RETENTION_RECORDS = "SBEMU_LOG_RETENTION_RECORDS"
ENV_LOG_BODIES = "SBEMU_LOG_BODIES"
ENV_KEEP_LOGS = "SBEMU_KEEP_LOGS"
ENV_READY_FILE = "SBEMU_READY_FILE"
ENV_EPHEMERAL = "SBEMU_EPHEMERAL"
# tests only: run on a clock that POST /test-clock/advance/<seconds> moves forward (loopback)
ENV_TEST_CLOCK = "SBEMU_TEST_CLOCK"

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A setting given on the command line or in the environment is unusable (one line)."""


@dataclass(frozen=True)
class Settings:
    """What ``serve`` runs with, after flags, environment and defaults are merged."""

    config_path: Path | None  # None: the embedded default configuration
    data_dir: Path  # absolute
    host: str
    port: int  # AMQP; 0 = ephemeral
    admin_port: int  # HTTP health/admin; 0 = ephemeral
    log_level: str  # one of LOG_LEVELS
    log_retention_records: int = 0  # per partition log; 0 = unlimited
    log_bodies: bool = False  # message bodies in the partition logs
    keep_logs: bool = False  # no log retention at all, even below registered readers
    # AMQPS / WebSocket port: None = off; (port, required): a default one (required=False)
    # that cannot be bound is skipped with a warning, one asked for stops the start
    tls_port: tuple[int, bool] | None = (DEFAULT_TLS_PORT, False)
    ws_port: tuple[int, bool] | None = (DEFAULT_WS_PORT, False)
    ready_file: Path | None = None  # JSON written once the server listens (sbemu.ready)
    # a temporary data dir deleted at exit, commits not fsynced: a process crash keeps what was
    # acknowledged (the OS has it), a power loss may not. For tests and CI.
    ephemeral: bool = False


# ================================================================================================
# Parsing
# ================================================================================================


def build_parser() -> argparse.ArgumentParser:
    """The ``sbemu`` parser; each subcommand's handler is stored as ``args.handler``."""
    parser = argparse.ArgumentParser(
        prog="sbemu", description="Local emulator of Azure Service Bus with partitioned entities."
    )
    parser.add_argument("--version", action="version", version=f"sbemu {__version__}")
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(subcommands)
    _add_report(subcommands)
    _add_export_logs(subcommands)
    _add_partition(subcommands)
    _add_cert(subcommands)
    _add_purge(subcommands)
    _add_init(subcommands)
    return parser


def _add_init(subcommands: Any) -> None:
    init = subcommands.add_parser(
        "init",
        help="write a starter Config.json (one entity of each kind)",
        description="Write a starter Config.json: a plain and a partitioned queue, a session "
        "queue, a duplicate-detection queue and a topic with SQL and correlation rules.",
    )
    init.add_argument("path", nargs="?", default="Config.json", help="where (default Config.json)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=_init)


def _init(args: argparse.Namespace) -> int:
    from sbemu.starter import starter_text

    path = Path(args.path)
    if path.exists() and not args.force:
        return _fail(f"{path} already exists (use --force to overwrite it)")
    try:
        path.write_text(starter_text())
    except OSError as exc:
        return _fail(f"cannot write {path}: {exc.strerror or exc}")
    print(f"wrote {path}; start with: sbemu serve --config {path}")
    return 0




def _add_purge(subcommands: Any) -> None:
    purge = subcommands.add_parser(
        "purge",
        help="delete every message of an entity, or of a whole namespace, on a running server",
        description="Delete every message (active, deferred, scheduled, dead-lettered) of one "
        "queue or topic (all its subscriptions), or of every entity of a namespace. Each removed "
        "message is logged as 'purged' in its partition log.",
    )
    purge.add_argument("target", metavar="NAMESPACE[/ENTITY]")
    _add_admin_url(purge)
    purge.set_defaults(handler=_run_purge)


def _run_purge(args: Any) -> int:
    from urllib.parse import quote

    body = _admin_call(args, "POST", f"/purge/{quote(args.target.strip('/'))}", timeout=60)
    if isinstance(body, int):
        return body
    for name, count in sorted(body.get("purged", {}).items()):
        print(f"{body.get('namespace')}/{name}: {count} message(s) purged")
    return 0


def _add_admin_url(parser: Any) -> None:
    parser.add_argument(
        "--admin-url",
        default=None,
        help="admin URL of the running server [SBEMU_ADMIN_URL; default: http://127.0.0.1:5300]",
    )


def _admin_call(args: Any, method: str, path: str, timeout: float) -> dict[str, Any] | int:
    """One request to a running server's admin port: its JSON body, or an exit status after
    printing why (1: the server refused, 2: it could not be reached)."""
    import json as _json
    import urllib.error
    import urllib.request

    base = (args.admin_url or os.environ.get("SBEMU_ADMIN_URL") or "http://127.0.0.1:5300")
    base = base.rstrip("/")
    data = b"" if method == "POST" else None
    request = urllib.request.Request(base + path, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: dict[str, Any] = _json.loads(response.read() or b"{}")
            return body
    except urllib.error.HTTPError as exc:
        detail = _json.loads(exc.read() or b"{}").get("error", exc.reason)
        print(f"sbemu: {detail}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sbemu: cannot reach the server at {base}: {exc}", file=sys.stderr)
        return 2


def _add_cert(subcommands: Any) -> None:
    cert = subcommands.add_parser(
        "cert",
        help="print the path of the local CA certificate the admin port's TLS chains to",
        description="Print the path of the CA that the server using the data dir created on its "
        "first start (<data dir>/tls/rootCA.pem). The data dir is found as `sbemu serve` finds "
        "it: --data-dir, else SBEMU_DATA_DIR, else ./.sbemu in the current directory. Nothing is "
        "created: without a CA there, it says which data dir it looked at. --bundle prints a "
        "PEM file with the system's CAs and this one, for SSL_CERT_FILE.",
        epilog="examples: export SSL_CERT_FILE=$(sbemu cert --bundle) "
        "REQUESTS_CA_BUNDLE=$(sbemu cert --bundle); export NODE_EXTRA_CA_CERTS=$(sbemu cert)",
    )
    cert.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"the server's data dir [{ENV_DATA_DIR}; default: ./{DEFAULT_DATA_DIR}]",
    )
    cert.add_argument(
        "--bundle",
        action="store_true",
        help="print a CA bundle instead: the system's CAs plus sbemu's, in one PEM file "
        "(<data dir>/tls/ca-bundle.pem, rewritten each time)",
    )
    cert.set_defaults(handler=_run_cert)


def _run_cert(args: Any) -> int:
    from sbemu.admin.certs import ca_path, write_ca_bundle

    data_dir, source = resolve_data_dir(args.data_dir, os.environ)
    ca_file = ca_path(data_dir)
    if not ca_file.is_file():
        state = "no such directory" if not data_dir.exists() else "no tls/rootCA.pem in it"
        return _fail(
            f"no sbemu CA for data dir {data_dir} ({source}; {state}): a server creates it on "
            f"its first start. Start one (sbemu serve / make run), or point at the data dir "
            f"of the running server with --data-dir DIR or {ENV_DATA_DIR}=DIR."
        )
    if not _data_dir_in_use(data_dir):
        print(
            f"sbemu: note: no server is running on {data_dir} now; this is the CA it will use",
            file=sys.stderr,
        )
    if not args.bundle:
        print(ca_file.resolve())
        return 0
    try:
        bundle, system = write_ca_bundle(ca_file, ca_file.parent / "ca-bundle.pem")
    except OSError as exc:
        return _fail(f"cannot write the CA bundle in {ca_file.parent}: {exc.strerror or exc}")
    if system is None:
        print("sbemu: warning: no system CA file found; the bundle holds only sbemu's CA",
              file=sys.stderr)
    print(bundle.resolve())
    return 0


def _data_dir_in_use(data_dir: Path) -> bool:
    """Whether a server holds the data dir's lock (Server._lock_data_dir); nothing is created."""
    import fcntl

    try:
        fd = os.open(data_dir / ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (drops our probe's lock)
    return False


def _add_report(subcommands: Any) -> None:
    p = subcommands.add_parser(
        "report",
        help="build the Spark reporting tables from the partition logs",
        description="Stream the partition logs into Parquet reporting tables (exactly once, "
        "through a checkpoint in OUT/_checkpoints; each micro-batch merges only its own events "
        "into the tables), then print a summary per entity. Runs until caught up "
        "(availableNow) unless --follow. See sparkjobs/README.md.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data-dir", metavar="D", help="emulator data directory (default: .sbemu)")
    src.add_argument("--segments", metavar="DIR", help="segment files written by export-logs")
    p.add_argument("--out", metavar="DIR", default="reports", help="tables directory [reports]")
    p.add_argument("--follow", action="store_true", help="keep running (processing-time trigger)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S",
                   help="seconds between micro-batches with --follow [5]")
    p.add_argument("--max-records-per-batch", type=int, metavar="N",
                   help="cap on log records per micro-batch (LMDB source)")
    p.add_argument("--max-files-per-batch", type=int, metavar="N",
                   help="cap on segment files per micro-batch (--segments)")
    p.add_argument("--master", metavar="URL", help="Spark master [local[*]]")
    p.add_argument("--html", action="store_true",
                   help="also write OUT/report.html: charts, self-contained, works offline")
    p.set_defaults(handler=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    """``sbemu report``: launches sparkjobs.launch by name (no static import of sparkjobs)."""
    import importlib

    data_dir = args.data_dir
    if data_dir is None and args.segments is None:
        data_dir = os.environ.get("SBEMU_DATA_DIR") or ".sbemu"
    try:
        launch = importlib.import_module("sparkjobs.launch")
    except ImportError as exc:
        return _fail(f"cannot load the Spark jobs (sparkjobs): {exc}; pip install -e '.[spark]'")
    return int(
        launch.run_report(
            args.out,
            data_dir=data_dir,
            segments=args.segments,
            follow=args.follow,
            interval=args.interval,
            max_records_per_batch=args.max_records_per_batch,
            max_files_per_batch=args.max_files_per_batch,
            master=args.master,
            html=args.html,
        )
    )


def _add_export_logs(subcommands: Any) -> None:
    from sbemu.export import DEFAULT_SEGMENT_RECORDS

    p = subcommands.add_parser(
        "export-logs",
        help="copy the partition logs into immutable segment files (Parquet)",
        description="Tail the partition logs into <TO>/<ns>/<entity>/partition-NN/"
        "<first>-<last>.parquet (offsets inclusive, 20 digits); resumes where it stopped.",
    )
    p.add_argument("--data-dir", metavar="D", help="emulator data directory (default: .sbemu)")
    p.add_argument("--to", metavar="DIR", required=True, help="segment directory")
    p.add_argument("--segment-records", type=int, default=DEFAULT_SEGMENT_RECORDS, metavar="N",
                   help=f"records per full segment [{DEFAULT_SEGMENT_RECORDS}]")
    p.add_argument("--follow", action="store_true", help="keep tailing until Ctrl-C")
    p.add_argument("--poll-interval", type=float, default=1.0, metavar="S",
                   help="seconds between polls with --follow [1]")
    p.add_argument("--flush-interval", type=float, default=5.0, metavar="S",
                   help="with --follow, write a partial tail segment after S seconds [5]")
    p.set_defaults(handler=_run_export_logs)


def _run_export_logs(args: argparse.Namespace) -> int:
    """``sbemu export-logs``."""
    data_dir = args.data_dir or os.environ.get("SBEMU_DATA_DIR") or ".sbemu"
    if not os.path.isdir(data_dir):
        return _fail(f"no such data directory: {data_dir}")
    if args.segment_records < 1:
        return _fail("--segment-records must be at least 1")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return _fail("export-logs writes Parquet: pip install pyarrow (or the spark extra)")
    from sbemu.export import export_logs

    try:
        stats = export_logs(
            data_dir,
            args.to,
            segment_records=args.segment_records,
            follow=args.follow,
            poll_interval=args.poll_interval,
            flush_interval=args.flush_interval,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except RuntimeError as exc:
        return _fail(str(exc))
    print(f"exported {stats.records} record(s) in {stats.segments} segment(s) to {args.to}")
    return 0


def _add_partition(subcommands: Any) -> None:
    part = subcommands.add_parser(
        "partition",
        help="take a partition of a running server offline or bring it back online",
        description="Simulate a partition store outage on a running sbemu (spec P7, P8): "
        "key-less sends go to other partitions, sends pinned to it fail with server-busy "
        "(retried by the SDKs), its messages wait until it is back. 'status' lists every "
        "entity's availability and the partitions out of service (NAMESPACE/ENTITY: each "
        "partition of that entity).",
        epilog="examples: sbemu partition offline sbemulatorns/queue.partitioned 3; "
        "sbemu partition status; sbemu partition status sbemulatorns/queue.partitioned --json",
    )
    part.add_argument("action", choices=("offline", "online", "status"))
    part.add_argument(
        "entity", metavar="NAMESPACE/ENTITY", nargs="?",
        help="the queue or topic, e.g. sbemulatorns/queue.partitioned (optional for status)",
    )
    part.add_argument(
        "partition", metavar="N", type=int, nargs="?",
        help="the partition number, 0 to the entity's partition count - 1 (the number "
        "`status` and the dashboard show, and the top 16 bits of a message's sequence number); "
        "required for offline and online",
    )
    part.add_argument(
        "--json", action="store_true", help="status: print the server's JSON instead of a table"
    )
    _add_admin_url(part)
    part.set_defaults(handler=_run_partition)


def _run_partition(args: Any) -> int:
    import json as _json
    from urllib.parse import quote

    from sbemu.partitiontable import entity_table, partition_table

    if args.action == "status":
        body = _admin_call(args, "GET", "/partitions", timeout=10)
        if isinstance(body, int):
            return body
        if args.entity:
            wanted = args.entity.strip("/").lower()
            found = [
                e for e in body.get("entities", [])
                if f"{e['namespace']}/{e['entity']}".lower() == wanted
            ]
            if not found:
                return _fail(f"no entity {args.entity!r} on the server (NAMESPACE/ENTITY)")
            print(_json.dumps(found[0], indent=2) if args.json else partition_table(found[0]))
        else:
            print(_json.dumps(body, indent=2) if args.json else entity_table(body))
        return 0
    if not args.entity or "/" not in args.entity or args.partition is None:
        print("sbemu: usage: sbemu partition offline|online NAMESPACE/ENTITY N", file=sys.stderr)
        return 2
    namespace, entity = args.entity.split("/", 1)
    path = (
        f"/partitions/{quote(namespace, safe='')}/{quote(entity, safe='')}"
        f"/{args.partition}/{args.action}"
    )
    body = _admin_call(args, "POST", path, timeout=10)
    if isinstance(body, int):
        return body
    if args.json:
        print(_json.dumps(body, indent=2))
    else:
        print(f"partition {args.partition} of {args.entity} is now {args.action}; "
              f"the entity is {body.get('status', '?')}")
    return 0


def _add_serve(subcommands: Any) -> None:
    serve = subcommands.add_parser(
        "serve",
        help="run the emulator until SIGINT/SIGTERM",
        description="Run the emulator. Every option falls back to its environment variable, "
        "then to the default.",
    )
    # Defaults are None so resolve_settings can tell "not given" from "given as the default".
    serve.add_argument(
        "--config", metavar="PATH", help=f"Config.json to load [{ENV_CONFIG}; default: embedded]"
    )
    serve.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"where partition stores live [{ENV_DATA_DIR}; default: ./{DEFAULT_DATA_DIR}]",
    )
    serve.add_argument(
        "--host", metavar="H", help=f"address to bind [{ENV_HOST}; default: {DEFAULT_HOST}]"
    )
    serve.add_argument(
        "--port",
        metavar="P",
        help=f"AMQP port, 0 = ephemeral [{ENV_PORT}; default: {DEFAULT_PORT}]",
    )
    serve.add_argument(
        "--admin-port",
        metavar="P",
        help=f"health/admin HTTP port, 0 = ephemeral [{ENV_ADMIN_PORT}; default: {DEFAULT_ADMIN_PORT}]",
    )
    serve.add_argument(
        "--tls-port",
        metavar="P",
        help=f"AMQPS port (TLS with the local CA), 0 = ephemeral, {OFF} = none [{ENV_TLS_PORT}; "
        f"default: {DEFAULT_TLS_PORT}, skipped with a warning when it cannot be bound]",
    )
    serve.add_argument(
        "--ws-port",
        metavar="P",
        help=f"port for AMQP over WebSockets (ws and wss; the admin port serves them too), "
        f"0 = ephemeral, {OFF} = none [{ENV_WS_PORT}; default: {DEFAULT_WS_PORT}, skipped with "
        "a warning when it cannot be bound]",
    )
    serve.add_argument(
        "--log-level",
        metavar="L",
        help=f"{', '.join(LOG_LEVELS)} [{ENV_LOG_LEVEL}; default: {DEFAULT_LOG_LEVEL}]",
    )
    serve.add_argument(
        "--log-retention-records",
        metavar="N",
        help="keep at most N records per partition log, even past a registered reader (which "
        f"then fails loudly) [{ENV_LOG_RETENTION_RECORDS}; default: 0 = unlimited]",
    )
    serve.add_argument(
        "--keep-logs",
        action="store_true",
        default=None,
        help="never trim the partition logs, not even below registered readers "
        f"[{ENV_KEEP_LOGS}=1; default: trim below the slowest reader]",
    )
    serve.add_argument(
        "--log-bodies",
        action="store_true",
        default=None,
        help=f"also write message bodies into the partition logs [{ENV_LOG_BODIES}=1; "
        "default: off]",
    )
    serve.add_argument(
        "--ready-file",
        metavar="PATH",
        help="once listening, write the ports, pid and connection strings there as JSON "
        f"(written atomically, before the ready lines) [{ENV_READY_FILE}]",
    )
    serve.add_argument(
        "--ephemeral",
        action="store_true",
        default=None,
        help="for tests and CI: a temporary data dir deleted at exit, commits not fsynced (a "
        "process crash keeps every acknowledged message, a power loss may not) "
        f"[{ENV_EPHEMERAL}=1]",
    )
    serve.set_defaults(handler=_serve)


def resolve_data_dir(
    flag: str | None, env: Mapping[str, str], cwd: Path | None = None
) -> tuple[Path, str]:
    """The data dir as ``serve`` picks it (flag, then environment, then ./.sbemu), absolute,
    and where the choice came from (for messages). ``sbemu cert`` uses it; a test holds it
    to :func:`resolve_settings`' choice."""
    base = cwd if cwd is not None else Path.cwd()
    if flag:
        value, source = flag, "--data-dir"
    elif env.get(ENV_DATA_DIR):
        value, source = env[ENV_DATA_DIR], ENV_DATA_DIR
    else:
        value, source = DEFAULT_DATA_DIR, f"the default ./{DEFAULT_DATA_DIR} in {base}"
    path = Path(value).expanduser()
    return (path if path.is_absolute() else base / path), source


def resolve_settings(
    args: argparse.Namespace, env: Mapping[str, str], cwd: Path | None = None
) -> Settings:
    """Merge flags over environment over defaults; raises UsageError for an unusable value.

    An environment variable set to the empty string counts as unset. Relative paths are taken
    from ``cwd`` (default: the current directory).
    """
    base = cwd if cwd is not None else Path.cwd()

    def pick(flag: str, env_name: str) -> tuple[str | None, str]:
        value = getattr(args, flag.replace("-", "_"), None)
        if value is not None:
            return value, f"--{flag}"
        value = env.get(env_name) or None
        return value, env_name

    def path(value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else base / p

    config_value, _ = pick("config", ENV_CONFIG)
    data_dir_value, data_dir_source = pick("data-dir", ENV_DATA_DIR)
    ready_value, _ = pick("ready-file", ENV_READY_FILE)
    ephemeral = _flag(*pick("ephemeral", ENV_EPHEMERAL))
    if ephemeral and data_dir_value:
        raise UsageError(
            f"--ephemeral uses a temporary data dir of its own: drop {data_dir_source}"
        )
    host, host_source = pick("host", ENV_HOST)
    if host is not None and not host.strip():
        raise UsageError(f"invalid {host_source}: the host is empty")
    level, level_source = pick("log-level", ENV_LOG_LEVEL)
    if level is not None and level.strip().lower() not in LOG_LEVELS:
        raise UsageError(f"invalid {level_source} {level!r}: use one of {', '.join(LOG_LEVELS)}")
    return Settings(
        config_path=path(config_value) if config_value else None,
        data_dir=path(data_dir_value or DEFAULT_DATA_DIR),
        host=host.strip() if host else DEFAULT_HOST,
        port=_port(*pick("port", ENV_PORT), default=DEFAULT_PORT),
        admin_port=_port(*pick("admin-port", ENV_ADMIN_PORT), default=DEFAULT_ADMIN_PORT),
        log_level=level.strip().lower() if level else DEFAULT_LOG_LEVEL,
        log_retention_records=_count(*pick("log-retention-records", ENV_LOG_RETENTION_RECORDS)),
        log_bodies=_flag(*pick("log-bodies", ENV_LOG_BODIES)),
        keep_logs=_flag(*pick("keep-logs", ENV_KEEP_LOGS)),
        tls_port=_optional_port(*pick("tls-port", ENV_TLS_PORT), default=DEFAULT_TLS_PORT),
        ws_port=_optional_port(*pick("ws-port", ENV_WS_PORT), default=DEFAULT_WS_PORT),
        ready_file=path(ready_value) if ready_value else None,
        ephemeral=ephemeral,
    )


def _optional_port(value: str | None, source: str, *, default: int) -> tuple[int, bool] | None:
    """None for "off"; (default, False) when not given; (port, True) when asked for."""
    if value is None:
        return default, False
    if value.strip().lower() == OFF:
        return None
    try:
        return _port(value, source, default=default), True
    except UsageError:
        raise UsageError(
            f"invalid {source} {value!r}: must be an integer from 0 to 65535 or {OFF}"
        ) from None


def _flag(value: str | bool | None, source: str) -> bool:
    if value is None or value is True:
        return bool(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"invalid {source} {value!r}: use 1/true or 0/false")


def _count(value: str | None, source: str) -> int:
    if value is None:
        return 0
    try:
        n = int(value.strip(), 10)
    except ValueError:
        n = -1
    if n < 0:
        raise UsageError(f"invalid {source} {value!r}: must be a non-negative integer")
    return n


def _port(value: str | None, source: str, *, default: int) -> int:
    if value is None:
        return default
    try:
        port = int(value.strip(), 10)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(f"invalid {source} {value!r}: must be an integer from 0 to 65535")
    return port


# ================================================================================================
# Entry point
# ================================================================================================


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sbemu`` command line; returns the process exit code."""
    try:
        return _main(argv)
    except BrokenPipeError:
        return _stdout_closed()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or argparse's own usage error
        return exc.code if isinstance(exc.code, int) else 2
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except UsageError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 130


def _stdout_closed() -> int:
    """The reader of our output went away (``sbemu partition status | head``): stop quietly,
    as a Unix tool killed by SIGPIPE would, with its exit status (128 + 13). Python would
    otherwise fail again flushing stdout at exit, so stdout now points at /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor behind sys.stdout
        pass
    return 128 + signal.SIGPIPE


def _fail(message: str) -> int:
    """Print ``message`` as one ``sbemu: ...`` line on stderr; returns exit code 2."""
    print("sbemu: " + " ".join(message.splitlines()), file=sys.stderr, flush=True)
    return 2


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` on a uvloop event loop (the standard loop when uvloop is missing)."""
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency, but has no Windows build
        loop_factory = None
    else:
        loop_factory = uvloop.new_event_loop
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(main)
    if loop_factory is not None:  # pragma: no cover - Python 3.10
        uvloop.install()
    return asyncio.run(main)  # pragma: no cover - Python 3.10


# ================================================================================================
# serve
# ================================================================================================


def _serve(args: argparse.Namespace) -> int:
    settings = resolve_settings(args, os.environ)
    if settings.ephemeral:
        import dataclasses
        import shutil
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="sbemu-ephemeral-"))
        try:
            return _serve_settings(dataclasses.replace(settings, data_dir=scratch))
        finally:
            logging.shutdown()  # the File log lives in the scratch dir: close it first
            shutil.rmtree(scratch, ignore_errors=True)
    return _serve_settings(settings)


def _serve_settings(settings: Settings) -> int:
    _configure_logging(settings.log_level)
    try:
        config = load_config(settings.config_path) if settings.config_path else default_config()
    except ConfigError as exc:
        return _fail(f"config error: {exc}")
    if settings.data_dir.exists() and not settings.data_dir.is_dir():
        return _fail(f"data dir {settings.data_dir}: not a directory")
    try:
        _log_targets(config.logging_type, settings.data_dir)
    except OSError as exc:
        return _fail(f"cannot open the log file: {exc.strerror or exc} ({exc.filename})")
    return _run(_serve_async(config, settings))


def _log_targets(logging_type: str, data_dir: Path) -> None:
    """Act on the configuration's Logging.Type, as Microsoft's emulator does: "File" writes
    the log to <data dir>/logs/sbemu.log (rotated at 10 MB, 5 kept), "Console" to stderr.
    With "File" alone, stderr keeps warnings and errors only, so a failure is never silent."""
    from sbemu.logfile import attach_file_log

    targets = {t.strip().casefold() for t in logging_type.split(",")}
    root = logging.getLogger()
    if "file" not in targets:
        return
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # written by its own thread, and surviving a disk that fails or stalls (sbemu/logfile.py)
    handler = attach_file_log(
        logs / "sbemu.log", logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    if "console" not in targets:
        for h in root.handlers:
            if h is not handler:
                h.setLevel(logging.WARNING)
    print(f"log file: {logs / 'sbemu.log'} (Logging.Type {logging_type})", file=sys.stderr)


async def _serve_async(config: Config, settings: Settings) -> int:
    try:
        from sbemu.endpoints import ListenPort
        from sbemu.server import Server, StartupError  # lazily: `sbemu --help` stays light

        clock = _server_clock(settings)
        if isinstance(clock, str):
            return _fail(clock)
        server = Server(
            config,
            data_dir=settings.data_dir,
            host=settings.host,
            port=settings.port,
            admin_port=settings.admin_port,
            log_retention_records=settings.log_retention_records,
            log_bodies=settings.log_bodies,
            keep_logs=settings.keep_logs,
            durable=not settings.ephemeral,
            clock=clock,
            tls_port=ListenPort(*settings.tls_port) if settings.tls_port else None,
            ws_port=ListenPort(*settings.ws_port) if settings.ws_port else None,
        )
    except Exception as exc:
        log.debug("cannot create the server", exc_info=True)
        return _fail(f"cannot start: {type(exc).__name__}: {exc}")
    try:
        await server.start()
    except asyncio.CancelledError:  # Ctrl-C during start-up: release, then let it propagate
        await _stop_quietly(server)
        raise
    except StartupError as exc:
        log.debug("start-up failed", exc_info=True)
        await _stop_quietly(server)
        return _fail(str(exc))
    except Exception as exc:
        log.debug("start-up failed", exc_info=True)
        await _stop_quietly(server)
        return _fail(f"cannot start: {type(exc).__name__}: {exc}")

    # The stop signals are caught from here on: a launcher may send SIGTERM the moment it sees
    # the ready file or the first ready line, and the server must then stop cleanly.
    with _stop_signals() as stop:
        if not await _announce(server, config, settings):
            await _stop_quietly(server)
            return 2
        await stop.wait()
    log.info("stopping")
    try:
        await server.stop()
    except Exception as exc:
        log.debug("stop failed", exc_info=True)
        _fail(f"stop failed: {type(exc).__name__}: {exc}")
        return 1
    log.info("stopped")
    return 0


def _server_clock(settings: Settings) -> Any:
    """time.time, or a TestClock when SBEMU_TEST_CLOCK=1 (the admin port then takes
    POST /test-clock/advance/<seconds>); a message instead when that is asked off loopback."""
    import time

    from sbemu.admin.access import is_loopback
    from sbemu.clock import TestClock

    if not _flag(os.environ.get(ENV_TEST_CLOCK) or None, ENV_TEST_CLOCK):
        return time.time
    if not is_loopback(settings.host):
        return f"{ENV_TEST_CLOCK}=1 is for tests on a loopback address, not --host {settings.host}"
    return TestClock()


async def _stop_quietly(server: Any) -> None:
    """Release whatever a failed start() had opened; its errors only reach the debug log."""
    try:
        await asyncio.wait_for(server.stop(), STOP_TIMEOUT)
    except Exception:
        log.debug("stop after failed start-up failed", exc_info=True)


async def _announce(server: Any, config: Config, settings: Settings) -> bool:
    """Write the ready file (if asked), then print the ready lines; False (after one
    ``sbemu: ...`` line) when the ready file cannot be written."""
    if settings.ready_file is not None:
        document = ready_document(
            config,
            host=settings.host,
            amqp_port=server.amqp_port,
            admin_port=server.admin_port,
            namespace_ports=server.namespace_ports,
            data_dir=settings.data_dir,
            ephemeral=settings.ephemeral,
            tls_port=server.tls_port,
            ws_port=server.ws_port,
        )
        try:
            write_ready_file(settings.ready_file, document)
        except OSError as exc:
            _fail(f"cannot write the ready file {settings.ready_file}: {exc.strerror or exc}")
            return False
    lines = ready_lines(config, settings.host, server.amqp_port, server.admin_port)
    lines += namespace_port_lines(config, settings.host, server.namespace_ports)
    lines += endpoint_lines(
        config, settings.host, server.admin_port, server.tls_port, server.ws_port,
        server.unserved, str(settings.data_dir / "tls" / "rootCA.pem"),
    )
    for line in lines:
        print(line)
    sys.stdout.flush()
    return True


@contextlib.contextmanager
def _stop_signals() -> Iterator[asyncio.Event]:
    """An event set by the first SIGINT or SIGTERM while inside; a second one then acts as the
    default would."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # no signal support (e.g. not main thread)
            pass
    try:
        yield stop
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
