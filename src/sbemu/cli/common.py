"""What every subcommand shares: the usage error, the one-line failure, logging set-up and
the uvloop runner."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("sbemu")
DEFAULT_DATA_DIR = ".sbemu"  # under the current directory
STOP_TIMEOUT = 30.0  # seconds for Server.stop() after a failed start
ENV_DATA_DIR = "SBEMU_DATA_DIR"

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A setting given on the command line or in the environment is unusable (one line)."""


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
