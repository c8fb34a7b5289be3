"""The ``sbemu`` command line: argument parsing, logging set-up, uvloop; no emulator logic.

``sbemu serve [--config PATH] [--data-dir DIR] [--host H] [--port P] [--admin-port P]
[--log-level L] [--log-retention-records N] [--log-bodies]``; each option has an environment
twin (``SBEMU_CONFIG``, ``SBEMU_DATA_DIR``, ``SBEMU_HOST``, ``SBEMU_PORT``,
``SBEMU_ADMIN_PORT``, ``SBEMU_LOG_LEVEL``, ``SBEMU_LOG_RETENTION_RECORDS``,
``SBEMU_LOG_BODIES``) and a flag wins over its variable. Port 0 asks for an ephemeral port.

Exit codes: 0 after a clean stop on SIGINT/SIGTERM; 2 for a usage, configuration or start-up
problem, reported as exactly one ``sbemu: ...`` line on stderr (a traceback only at debug
level); 1 when stopping fails; 130 when interrupted before the server is up.

Once the server is up, these lines go to stdout (tests and scripts parse them)::

    sbemu <version> listening on amqp://<host>:<amqp_port> for namespace <ns>[, <ns>...]
    health on http://<host>:<admin_port>/health
    connection string: Endpoint=sb://localhost[:<port>];SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true;
    dashboard on http://<host>:<admin_port>/ (Prometheus metrics on /metrics)

New subcommands (report, export-logs, partition offline/online) plug in as one
``_add_<name>(subcommands)`` function that registers a parser and its handler.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbemu import __version__
from sbemu.config import Config, ConfigError, default_config, load_config

__all__ = [
    "Settings",
    "UsageError",
    "build_parser",
    "connection_string",
    "main",
    "ready_lines",
    "resolve_settings",
]

log = logging.getLogger("sbemu")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5672
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
ENV_LOG_LEVEL = "SBEMU_LOG_LEVEL"
ENV_LOG_RETENTION_RECORDS = "SBEMU_LOG_RETENTION_RECORDS"
ENV_LOG_BODIES = "SBEMU_LOG_BODIES"
ENV_KEEP_LOGS = "SBEMU_KEEP_LOGS"
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
        description="Create (when missing) the local certificate authority and the admin port's "
        "localhost certificate in the data dir, and print the CA file's path, e.g. "
        "SSL_CERT_FILE=$(sbemu cert) or NODE_EXTRA_CA_CERTS=$(sbemu cert).",
    )
    cert.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"the server's data dir [{ENV_DATA_DIR}; default: ./{DEFAULT_DATA_DIR}]",
    )
    cert.set_defaults(handler=_run_cert)


def _run_cert(args: Any) -> int:
    from sbemu.admin.certs import ensure_certificates

    data_dir = Path(args.data_dir or os.environ.get(ENV_DATA_DIR) or DEFAULT_DATA_DIR)
    try:
        ca_file, _, _ = ensure_certificates(data_dir)
    except (OSError, ValueError) as exc:
        print(f"sbemu: data dir {data_dir}: {exc}", file=sys.stderr)
        return 2
    print(ca_file.resolve())
    return 0


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
        "(retried by the SDKs), its messages wait until it is back.",
    )
    part.add_argument("action", choices=("offline", "online", "status"))
    part.add_argument("entity", metavar="NAMESPACE/ENTITY", nargs="?")
    part.add_argument("partition", metavar="N", type=int, nargs="?")
    _add_admin_url(part)
    part.set_defaults(handler=_run_partition)


def _run_partition(args: Any) -> int:
    import json as _json
    from urllib.parse import quote

    if args.action == "status":
        body = _admin_call(args, "GET", "/partitions", timeout=10)
    else:
        if not args.entity or "/" not in args.entity or args.partition is None:
            print(
                "sbemu: usage: sbemu partition offline|online NAMESPACE/ENTITY N", file=sys.stderr
            )
            return 2
        namespace, entity = args.entity.split("/", 1)
        path = (
            f"/partitions/{quote(namespace, safe='')}/{quote(entity, safe='')}"
            f"/{args.partition}/{args.action}"
        )
        body = _admin_call(args, "POST", path, timeout=10)
    if isinstance(body, int):
        return body
    print(_json.dumps(body, indent=2))
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
    serve.set_defaults(handler=_serve)


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
    data_dir_value, _ = pick("data-dir", ENV_DATA_DIR)
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
    )


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
            clock=clock,
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

    from sbemu.gcpolicy import tune_for_serving

    tune_for_serving()  # after start-up: what the server holds for good is frozen
    lines = ready_lines(config, settings.host, server.amqp_port, server.admin_port)
    lines += namespace_port_lines(config, settings.host, server.namespace_ports)
    for line in lines:
        print(line)
    sys.stdout.flush()

    await _wait_for_stop_signal()
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


async def _wait_for_stop_signal() -> None:
    """Return on the first SIGINT or SIGTERM; a second one then acts as the default would."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    installed = []
    for sig in signals:
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # no signal support (e.g. not main thread)
            pass
    try:
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def ready_lines(config: Config, host: str, amqp_port: int, admin_port: int) -> list[str]:
    """The lines printed once the server listens (see the module docstring)."""
    shown_host = f"[{host}]" if ":" in host else host
    names = ", ".join(ns.name for ns in config.namespaces)
    return [
        f"sbemu {__version__} listening on amqp://{shown_host}:{amqp_port} for namespace {names}",
        f"health on http://{shown_host}:{admin_port}/health",
        f"connection string: {connection_string(config, amqp_port)}",
        f"dashboard on http://{shown_host}:{admin_port}/ (Prometheus metrics on /metrics)",
    ]


def namespace_port_lines(config: Config, host: str, ports: dict[str, int]) -> list[str]:
    """One line per namespace served on its own AmqpPort, with its connection string."""
    shown_host = f"[{host}]" if ":" in host else host
    out = []
    for ns in config.namespaces:
        if ns.name in ports:
            policy = ns.sas_policies[0]
            out.append(
                f"namespace {ns.name} on amqp://{shown_host}:{ports[ns.name]}: "
                f"Endpoint=sb://localhost:{ports[ns.name]};SharedAccessKeyName={policy.key_name};"
                f"SharedAccessKey={policy.key};UseDevelopmentEmulator=true;"
            )
    return out


def connection_string(config: Config, amqp_port: int) -> str:
    """The emulator connection string for the first namespace's first SAS policy."""
    policy = config.namespaces[0].sas_policies[0]
    endpoint = "sb://localhost" if amqp_port == DEFAULT_PORT else f"sb://localhost:{amqp_port}"
    return (
        f"Endpoint={endpoint};SharedAccessKeyName={policy.key_name};"
        f"SharedAccessKey={policy.key};UseDevelopmentEmulator=true;"
    )
