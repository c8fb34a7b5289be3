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

Once the server is up, ``--ready-file`` gets a JSON document (sbemu.cli.ready; what programs
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
``_add_<name>(subcommands)`` function that registers a parser and its handler. The commands
live by what they own: ``serve.py`` (the serve command and its settings), ``operator.py``
(init, purge, cert, partition), ``logs.py`` (report, export-logs); ``common.py`` holds what
they share. This module parses and dispatches.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from sbemu import __version__
from sbemu.cli.common import DEFAULT_DATA_DIR as DEFAULT_DATA_DIR
from sbemu.cli.common import Handler, UsageError, _fail
from sbemu.cli.logs import _add_export_logs, _add_report
from sbemu.cli.operator import _add_cert, _add_init, _add_partition, _add_purge
from sbemu.cli.ready import DEFAULT_PORT as DEFAULT_PORT
from sbemu.cli.ready import connection_string, ready_lines
from sbemu.cli.serve import DEFAULT_ADMIN_PORT as DEFAULT_ADMIN_PORT
from sbemu.cli.serve import DEFAULT_HOST as DEFAULT_HOST
from sbemu.cli.serve import DEFAULT_LOG_LEVEL as DEFAULT_LOG_LEVEL
from sbemu.cli.serve import DEFAULT_WS_PORT as DEFAULT_WS_PORT
from sbemu.cli.serve import LOG_LEVELS as LOG_LEVELS
from sbemu.cli.serve import OFF as OFF
from sbemu.cli.serve import Settings, _add_serve, resolve_data_dir, resolve_settings
from sbemu.cli.serve import _log_targets as _log_targets

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
