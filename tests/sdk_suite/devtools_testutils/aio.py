"""The asynchronous ``recorded_by_proxy``: live only, the test runs as written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def recorded_by_proxy_async(test: Callable[..., Any]) -> Callable[..., Any]:
    """Live only: the coroutine test runs as written."""
    return test
