"""``sbemu serve``: its options and their environment twins merged into Settings, the log
targets, the test clock, and the run until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbemu.cli.common import (
    DEFAULT_DATA_DIR,
    ENV_DATA_DIR,
    STOP_TIMEOUT,
    UsageError,
    _configure_logging,
    _fail,
    _run,
    log,
)
from sbemu.cli.container import ENV_CONTAINER, UP_LINE, container_defaults, ignored_settings_line
from sbemu.cli.ready import (
    DEFAULT_PORT,
    DEFAULT_TLS_PORT,
    endpoint_lines,
    namespace_port_lines,
    ready_document,
    ready_lines,
    write_ready_file,
)
from sbemu.config import Config, ConfigError, config_from_text, default_config, load_config

DEFAULT_HOST = "127.0.0.1"
DEFAULT_ADMIN_PORT = 5300  # Microsoft's emulator serves /health on 5300 too
DEFAULT_LOG_LEVEL = "info"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

ENV_CONFIG = "SBEMU_CONFIG"
# the configuration inline, as JSON text; CONFIG_JSON is the name Microsoft's emulator users
# asked for (azure-service-bus-emulator-installer issue #108), accepted too
ENV_CONFIG_JSON = "SBEMU_CONFIG_JSON"
ENV_CONFIG_JSON_ALIAS = "CONFIG_JSON"
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
# the admin commands (purge, partition) sign with this connection string's key when set
ENV_CONNECTION_STRING = "SBEMU_CONNECTION_STRING"


@dataclass(frozen=True)
class Settings:
    """What ``serve`` runs with, after flags, environment and defaults are merged."""

    config_path: Path | None  # None: config_json, else the embedded default configuration
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
    ready_file: Path | None = None  # JSON written once the server listens (sbemu.cli.ready)
    # a temporary data dir deleted at exit, commits not fsynced: a process crash keeps what was
    # acknowledged (the OS has it), a power loss may not. For tests and CI.
    ephemeral: bool = False
    # Microsoft's emulator image's contract (sbemu.cli.container): its defaults, its up line
    container: bool = False
    # (JSON text, the variable it came from): the configuration inline, when no path is given
    config_json: tuple[str, str] | None = None


def _add_serve(subcommands: Any) -> None:
    serve = subcommands.add_parser(
        "serve",
        help="run the emulator until SIGINT/SIGTERM",
        description="Run the emulator. Every option falls back to its environment variable, "
        "then to the default.",
    )
    # Defaults are None so resolve_settings can tell "not given" from "given as the default".
    _add_where_options(serve)
    _add_log_options(serve)
    _add_run_options(serve)
    serve.set_defaults(handler=_serve)


def _add_where_options(serve: Any) -> None:
    """The configuration, the data directory, the address and the ports."""
    serve.add_argument(
        "--config",
        metavar="PATH",
        help=f"Config.json to load [{ENV_CONFIG}; or the JSON itself in {ENV_CONFIG_JSON} "
        f"or {ENV_CONFIG_JSON_ALIAS}; default: embedded]",
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
        help=f"Azure's 443: AMQP over WebSockets (ws and wss; the admin port serves them too) "
        f"and the management API, "
        f"0 = ephemeral, {OFF} = none [{ENV_WS_PORT}; default: {DEFAULT_WS_PORT}, skipped with "
        "a warning when it cannot be bound]",
    )


def _add_log_options(serve: Any) -> None:
    """The log level and the partition logs' retention and content."""
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


def _add_run_options(serve: Any) -> None:
    """How the process runs: the ready file, ephemeral data, Microsoft's container contract."""
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
    serve.add_argument(
        "--container",
        action="store_true",
        default=None,
        help="run as Microsoft's emulator image does (sbemu's image sets it): Config.json from "
        "/ServiceBus_Emulator/ConfigFiles/ when there, all interfaces, EMULATOR_HTTP_PORT for "
        f"the admin port, SQL Server settings ignored [{ENV_CONTAINER}=1]",
    )


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
    image_defaults: dict[str, str] = {}

    def pick(flag: str, env_name: str) -> tuple[str | None, str]:
        value = getattr(args, flag.replace("-", "_"), None)
        if value is not None:
            return value, f"--{flag}"
        value = env.get(env_name) or None
        if value is None and flag in image_defaults:
            return image_defaults[flag], f"{env_name} (the container default)"
        return value, env_name

    container = _flag(*pick("container", ENV_CONTAINER))
    image_defaults = container_defaults(env) if container else {}

    def path(value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else base / p

    config_value, config_source = pick("config", ENV_CONFIG)
    config_json = _inline_config(env)
    if config_json is not None and config_source.endswith("(the container default)"):
        config_value = None  # the JSON given inline beats the image's own Config.json
    if config_json is not None and config_value and config_source == ENV_CONFIG:
        raise UsageError(
            f"both {ENV_CONFIG} (a file) and {config_json[1]} (the JSON itself) are set: "
            "unset one of them"
        )
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
        container=container,
        config_json=None if config_value else config_json,
    )


def _inline_config(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(JSON text, variable name) from SBEMU_CONFIG_JSON or CONFIG_JSON; both set and
    different is a UsageError."""
    given = [
        (env[n], n) for n in (ENV_CONFIG_JSON, ENV_CONFIG_JSON_ALIAS) if env.get(n, "").strip()
    ]
    if len(given) == 2 and given[0][0] != given[1][0]:
        raise UsageError(
            f"{ENV_CONFIG_JSON} and {ENV_CONFIG_JSON_ALIAS} are both set and differ: unset one"
        )
    return given[0] if given else None


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
    if settings.container and (ignored := ignored_settings_line(os.environ)):
        log.info(ignored)
    try:
        if settings.config_path:
            config = load_config(settings.config_path)
        elif settings.config_json is not None:
            config = config_from_text(*settings.config_json)
        else:
            config = default_config()
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
    from sbemu.cli.logfile import attach_file_log

    targets = {t.strip().casefold() for t in logging_type.split(",")}
    root = logging.getLogger()
    if "file" not in targets:
        return
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # written by its own thread, and surviving a disk that fails or stalls (sbemu/cli/logfile.py)
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
        from sbemu.runtime.endpoints import ListenPort
        from sbemu.runtime.server import Server, StartupError  # lazily: `sbemu --help` stays light

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

    from sbemu.cli.gcpolicy import tune_for_serving

    tune_for_serving()  # after start-up: what the server holds for good is frozen
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
        config,
        settings.host,
        server.admin_port,
        server.tls_port,
        server.ws_port,
        server.unserved,
        str(settings.data_dir / "tls" / "rootCA.pem"),
    )
    if settings.container:
        lines.append(UP_LINE)  # last: every port is served when a waiting tool sees it
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
